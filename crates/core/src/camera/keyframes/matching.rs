//! Brute-force Hamming matching with a cross-check, the matcher the released extractor builds
//! (`cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True)`, documented at
//! <https://docs.opencv.org/4.x/d3/da1/classcv_1_1BFMatcher.html>): a pair (i, j) is kept only
//! when train descriptor j is query i's nearest and query i is train j's nearest. Ties go to the
//! lowest index, so the result is a pure function of the two lists.

/// One mutual nearest pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Match {
    /// Index into the query list (the reference key frame's descriptors).
    pub query: usize,
    /// Index into the train list (the current frame's descriptors).
    pub train: usize,
    /// Hamming distance, bits.
    pub distance: u32,
}

#[inline]
pub(crate) fn hamming(a: &[u8; 32], b: &[u8; 32]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

/// Cross-checked matches of `query` against `train`, sorted by distance (then query index), as
/// the released code sorts them before fitting.
pub(crate) fn cross_check_match(query: &[[u8; 32]], train: &[[u8; 32]]) -> Vec<Match> {
    if query.is_empty() || train.is_empty() {
        return Vec::new();
    }
    let mut best_train = vec![(u32::MAX, 0usize); query.len()];
    let mut best_query = vec![(u32::MAX, 0usize); train.len()];
    for (i, q) in query.iter().enumerate() {
        for (j, t) in train.iter().enumerate() {
            let d = hamming(q, t);
            if d < best_train[i].0 {
                best_train[i] = (d, j);
            }
            if d < best_query[j].0 {
                best_query[j] = (d, i);
            }
        }
    }
    let mut out: Vec<Match> = best_train
        .iter()
        .enumerate()
        .filter(|&(i, &(_, j))| best_query[j].1 == i)
        .map(|(i, &(distance, train))| Match {
            query: i,
            train,
            distance,
        })
        .collect();
    out.sort_by_key(|m| (m.distance, m.query));
    out
}
