//! Per-feature dataset statistics, bit-identical to what lerobot v0.6.1 writes
//! into a LeRobotDataset v3.0 `meta/stats.json`.
//!
//! Policies normalise their inputs with these numbers, so a dataset written by
//! this crate must carry exactly the statistics lerobot itself would have
//! written. The reference is `src/lerobot/datasets/compute_stats.py` of
//! lerobot 0.6.1 running on numpy 2.x:
//!
//! * `compute_episode_stats` → `get_feature_stats` → one
//!   `RunningQuantileStats.update` + `get_statistics` per feature and episode
//!   ([`vector_stats_f32`], [`vector_stats_f64`], [`int_stats`],
//!   [`image_stats`]);
//! * `LeRobotDatasetMetadata.save_episode` then sets
//!   `stats = aggregate_stats([stats, episode_stats])` and writes it with
//!   `write_stats` ([`aggregate`], [`FeatureStats::to_json`]). Within one
//!   recording session the fold keeps the in-memory numpy dtypes (float32
//!   included); a resumed session starts from `load_stats`, i.e. float64 and
//!   int64 arrays ([`FeatureStats::from_json`]). [`Stat::dtype`] carries that
//!   difference because `aggregate_feature_stats` squares `std` in its own
//!   dtype.
//!
//! Bit-exactness depends on replaying numpy's floating-point operation order:
//!
//! * Inputs are first cast to `result_type(dtype, float32)`: float32 stays
//!   float32, int64 becomes float64, uint8 pixels become float32. All of
//!   mean, mean of squares, variance and std are computed in that dtype.
//! * `np.mean(x, axis=0)` on a C-contiguous `(M, D)` array with `D >= 2`
//!   adds row after row into the output (plain sequential sums per column).
//!   With `D == 1` the reduction is contiguous, so numpy's pairwise summation
//!   (`pairwise_sum` in `loops_utils.h.src`) runs over blocks of its 8192
//!   element buffer, and the block sums are added sequentially to the ufunc
//!   identity 0.
//! * Quantiles come from a 5000-bin `np.histogram` over
//!   `np.linspace(min - 1e-10, max + 1e-10, 5001)`; for float32 data that
//!   subtraction and the whole linspace run in float32 (NEP 50 weak Python
//!   scalars). `_compute_single_quantile` returns either a bin edge (dtype of
//!   the data) or a float64 interpolation, and `np.array` of those scalars is
//!   float64 as soon as one column interpolated; that dtype matters for
//!   images, which are divided by 255 in their own dtype afterwards.
//!
//! Depth videos ([`depth_stats_with`]) take the image path with float32
//! metres in one channel and no division by 255: the `(N*h*w, 1)` array is
//! one contiguous run, so every sum is the blockwise pairwise one.
//!
//! Limitations (none occur in recorded robot data): non-finite inputs (JSON
//! cannot carry NaN/inf; they serialise as `null`), negative zero ordering in
//! min/max, and images or depth maps with fewer than two sampled pixels (numpy
//! would switch to `_compute_basic_stats`) are not reproduced; the last one,
//! and non-finite depth, are errors. Streaming video encoding
//! (`StreamingVideoEncoder`, which updates `RunningQuantileStats` frame by
//! frame and re-bins its histograms) is a different algorithm and is not
//! covered.

use std::ops::{Add, Div, Mul, Sub};

use serde_json::{Map, Value};

/// The quantiles lerobot computes (`DEFAULT_QUANTILES`) with their
/// `stats.json` keys (`f"q{int(q * 100):02d}"`).
pub const QUANTILES: [(&str, f64); 5] = [
    ("q01", 0.01),
    ("q10", 0.10),
    ("q50", 0.50),
    ("q90", 0.90),
    ("q99", 0.99),
];

/// `RunningQuantileStats(num_quantile_bins=5000)`.
const NUM_BINS: usize = 5000;
/// numpy's default ufunc buffer size (`np.getbufsize()`): contiguous
/// reductions are pairwise within blocks of this many elements.
const NUMPY_BUFSIZE: usize = 8192;
/// `numpy`'s pairwise summation falls back to 8 accumulators below this.
const PW_BLOCKSIZE: usize = 128;

/// numpy dtype an array had in lerobot's memory. Values are always stored as
/// `f64`; `F32` values are exact widenings of float32 and `I64` values are
/// integers (written to JSON without a fraction, read back as int64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// numpy float32.
    F32,
    /// numpy float64.
    F64,
    /// numpy int64.
    I64,
}

impl Dtype {
    /// The numpy name (`str(array.dtype)`).
    pub fn numpy_name(self) -> &'static str {
        match self {
            Dtype::F32 => "float32",
            Dtype::F64 => "float64",
            Dtype::I64 => "int64",
        }
    }

    /// `np.result_type` of two arrays, as `np.stack` applies it.
    fn promote(self, other: Dtype) -> Dtype {
        if self == other {
            self
        } else {
            Dtype::F64
        }
    }
}

/// One statistic (`min`, `q50`, ...) of one feature, one value per channel or
/// vector element.
#[derive(Clone, Debug, PartialEq)]
pub struct Stat {
    /// The dtype numpy held it in (decides later arithmetic and the JSON form).
    pub dtype: Dtype,
    /// One value per vector element or channel.
    pub values: Vec<f64>,
}

/// The statistics lerobot keeps for one feature.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureStats {
    /// Per-element minimum.
    pub min: Stat,
    /// Per-element maximum.
    pub max: Stat,
    /// Per-element mean.
    pub mean: Stat,
    /// Per-element population standard deviation.
    pub std: Stat,
    /// Frames of the episode (sampled frames for images), summed by
    /// [`aggregate`].
    pub count: u64,
    /// `("q01", ...)` in [`QUANTILES`] order.
    pub quantiles: Vec<(String, Stat)>,
    /// Image/video feature: every statistic has shape `(C, 1, 1)` in JSON (`C`
    /// is 3 for RGB, 1 for depth).
    pub image: bool,
}

/// The float types numpy computes in, so one generic routine serves both.
trait Real:
    Copy
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
{
    const DTYPE: Dtype;
    const ZERO: Self;
    const NEG_ZERO: Self;
    fn from_f64(v: f64) -> Self;
    fn from_usize(v: usize) -> Self;
    fn widen(self) -> f64;
    fn sqrt(self) -> Self;
}

impl Real for f32 {
    const DTYPE: Dtype = Dtype::F32;
    const ZERO: Self = 0.0;
    const NEG_ZERO: Self = -0.0;
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn from_usize(v: usize) -> Self {
        v as f32
    }
    fn widen(self) -> f64 {
        f64::from(self)
    }
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
}

impl Real for f64 {
    const DTYPE: Dtype = Dtype::F64;
    const ZERO: Self = 0.0;
    const NEG_ZERO: Self = -0.0;
    fn from_f64(v: f64) -> Self {
        v
    }
    fn from_usize(v: usize) -> Self {
        v as f64
    }
    fn widen(self) -> f64 {
        self
    }
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
}

fn stat<T: Real>(values: impl IntoIterator<Item = T>) -> Stat {
    Stat {
        dtype: T::DTYPE,
        values: values.into_iter().map(Real::widen).collect(),
    }
}

fn rows(len: usize, d: usize) -> Result<usize, String> {
    if d == 0 || len == 0 || !len.is_multiple_of(d) {
        return Err(format!(
            "need a non-empty row-major M x d matrix, got {len} values with d = {d}"
        ));
    }
    Ok(len / d)
}

/// Stats of a float32 feature: `x` is row-major `M x d` (a `(M,)` feature is
/// `d = 1`; lerobot reshapes it to `(M, 1)` and gets identical numbers).
pub fn vector_stats_f32(x: &[f32], d: usize) -> Result<FeatureStats, String> {
    let m = rows(x.len(), d)?;
    Ok(float_stats(x, d, m))
}

/// Stats of a float64 feature, e.g. `timestamp`, which lerobot's
/// `add_frame` fills with Python floats `frame_index / fps`.
pub fn vector_stats_f64(x: &[f64], d: usize) -> Result<FeatureStats, String> {
    let m = rows(x.len(), d)?;
    Ok(float_stats(x, d, m))
}

/// Stats of an int64 feature (`index`, `episode_index`, `frame_index`,
/// `task_index`). v0.6.1 promotes to float64 before computing; with a single
/// frame `_compute_basic_stats` runs on the raw int64 array instead, so
/// `min`/`max` stay int64 and `mean`/`std` (numpy's integer mean) are f64.
pub fn int_stats(x: &[i64], d: usize) -> Result<FeatureStats, String> {
    let m = rows(x.len(), d)?;
    let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    if m >= 2 {
        return Ok(running_stats(&xf, d, Layout::Rows, m as u64));
    }
    let mut st = basic_stats(&xf);
    st.min.dtype = Dtype::I64;
    st.max.dtype = Dtype::I64;
    Ok(st)
}

fn float_stats<T: Real>(x: &[T], d: usize, m: usize) -> FeatureStats {
    if m >= 2 {
        running_stats(x, d, Layout::Rows, m as u64)
    } else {
        basic_stats(x)
    }
}

/// `_compute_basic_stats` for one row (`get_feature_stats` with fewer than 2
/// rows): no promotion, `np.mean` adds onto the identity 0, `np.std` of one
/// value is `sqrt((x - mean)**2 / 1)`, every quantile is the mean.
fn basic_stats<T: Real>(row: &[T]) -> FeatureStats {
    let mean: Vec<T> = row
        .iter()
        .map(|&v| T::from_f64((T::ZERO + v).widen() / 1.0))
        .collect();
    let std = stat(row.iter().zip(&mean).map(|(&v, &mu)| {
        let dev = v - mu;
        (dev * dev).sqrt()
    }));
    let mean = stat(mean);
    FeatureStats {
        min: stat(row.iter().copied()),
        max: stat(row.iter().copied()),
        std,
        count: 1,
        quantiles: QUANTILES
            .iter()
            .map(|(k, _)| (k.to_string(), mean.clone()))
            .collect(),
        mean,
        image: false,
    }
}

/// numpy's `pairwise_sum` for one inner-loop call (`n < 8`: sequential from
/// -0.0; `n <= 128`: eight interleaved accumulators combined as
/// `((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))`, then the remainder; larger: split
/// at `n/2` rounded down to a multiple of 8 and recurse).
fn pairwise_sum<T: Real>(a: &[T]) -> T {
    let n = a.len();
    if n < 8 {
        a.iter().fold(T::NEG_ZERO, |acc, &v| acc + v)
    } else if n <= PW_BLOCKSIZE {
        let mut r = [T::ZERO; 8];
        r.copy_from_slice(&a[..8]);
        let body = n - n % 8;
        for block in a[8..body].chunks_exact(8) {
            for (acc, &v) in r.iter_mut().zip(block) {
                *acc = *acc + v;
            }
        }
        let res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        a[body..].iter().fold(res, |acc, &v| acc + v)
    } else {
        let half = n / 2;
        let n2 = half - half % 8;
        pairwise_sum(&a[..n2]) + pairwise_sum(&a[n2..])
    }
}

/// `np.add.reduce` of a contiguous 1-D run: identity 0, then one pairwise
/// sum per buffer-sized block.
fn numpy_sum_contiguous<T: Real>(a: &[T]) -> T {
    a.chunks(NUMPY_BUFSIZE)
        .fold(T::ZERO, |acc, block| acc + pairwise_sum(block))
}

/// Memory layout of the `(M, d)` array numpy reduces; it decides the
/// summation order of `np.mean(x, axis=0)`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// C-contiguous: rows are added one after another (per column a plain
    /// sequential sum), except `d == 1`, which is one contiguous run.
    Rows,
    /// Each column contiguous: every column is a pairwise-summed run. This is
    /// the image array of a single sampled frame, where lerobot's
    /// `transpose(0, 2, 3, 1).reshape(-1, C)` returns an F-ordered view
    /// (the length-1 frame axis lets numpy merge y and x without copying) and
    /// `astype` keeps that order.
    Columns,
}

/// Column sums of row-major `M x d` data in the order numpy adds them.
fn column_sums<T: Real>(x: &[T], d: usize, layout: Layout) -> Vec<T> {
    if d == 1 {
        return vec![numpy_sum_contiguous(x)];
    }
    if layout == Layout::Columns {
        let mut column = Vec::with_capacity(x.len() / d);
        return (0..d)
            .map(|j| {
                column.clear();
                column.extend(x.iter().skip(j).step_by(d).copied());
                numpy_sum_contiguous(&column)
            })
            .collect();
    }
    let mut sums = vec![T::ZERO; d];
    for row in x.chunks_exact(d) {
        for (s, &v) in sums.iter_mut().zip(row) {
            *s = *s + v;
        }
    }
    sums
}

/// `RunningQuantileStats().update(x)` then `.get_statistics()`, with `count`
/// replaced by `count` as `get_feature_stats` does. Needs `M >= 2` rows;
/// `x` is row-major whatever numpy's `layout` was.
fn running_stats<T: Real>(x: &[T], d: usize, layout: Layout, count: u64) -> FeatureStats {
    let m = x.len() / d;
    let squares: Vec<T> = x.iter().map(|&v| v * v).collect();
    let sums = column_sums(x, d, layout);
    let square_sums = column_sums(&squares, d, layout);

    let mut min = x[..d].to_vec();
    let mut max = x[..d].to_vec();
    for row in x.chunks_exact(d).skip(1) {
        for ((lo, hi), &v) in min.iter_mut().zip(max.iter_mut()).zip(row) {
            if v < *lo {
                *lo = v;
            }
            if v > *hi {
                *hi = v;
            }
        }
    }
    let mut column = Vec::with_capacity(m);
    let histogram = |j: usize, edges: &[T]| {
        column.clear();
        column.extend(x.chunks_exact(d).map(|row| row[j]));
        cumulative_histogram(&column, edges)
    };
    finish_running_stats(m, sums, square_sums, min, max, histogram, count)
}

/// [`running_stats`] of 8-bit pixels (`px`: rows of 3 channels, row-major, as float32 in
/// numpy), in one pass and without a float copy: the float32 sums are the same additions in
/// the same order, and a histogram needs one bin search per distinct value, not per pixel.
fn pixel_running_stats(px: &[u8], count: u64) -> FeatureStats {
    const D: usize = 3;
    let m = px.len() / D;
    let (mut sums, mut square_sums) = ([0.0f32; D], [0.0f32; D]);
    let mut counts = [[0u64; 256]; D];
    for row in px.chunks_exact(D) {
        for j in 0..D {
            let v = f32::from(row[j]);
            sums[j] += v;
            square_sums[j] += v * v;
            counts[j][row[j] as usize] += 1;
        }
    }
    let first = |c: &[u64; 256]| c.iter().position(|&n| n > 0).unwrap_or(0) as f32;
    let last = |c: &[u64; 256]| c.iter().rposition(|&n| n > 0).unwrap_or(0) as f32;
    let min = counts.iter().map(first).collect();
    let max = counts.iter().map(last).collect();
    let histogram = |j: usize, edges: &[f32]| {
        let mut hist = vec![0u64; NUM_BINS];
        for (v, &n) in counts[j].iter().enumerate().filter(|(_, &n)| n > 0) {
            if let Some(b) = bin_of(f32::from(v as u8), edges) {
                hist[b] += n;
            }
        }
        cumulate(&hist)
    };
    finish_running_stats(
        m,
        sums.to_vec(),
        square_sums.to_vec(),
        min,
        max,
        histogram,
        count,
    )
}

/// The statistics from the per-column sums, sums of squares, extremes and (given the bin edges
/// of column `j`) cumulative histograms: `RunningQuantileStats.get_statistics`.
fn finish_running_stats<T: Real>(
    m: usize,
    sums: Vec<T>,
    square_sums: Vec<T>,
    min: Vec<T>,
    max: Vec<T>,
    mut histogram: impl FnMut(usize, &[T]) -> Vec<f64>,
    count: u64,
) -> FeatureStats {
    // `np.mean` divides the T sum by an intp count: a float64 division cast
    // back to T (`true_divide(..., casting='unsafe')`).
    let mean_of = |sums: Vec<T>| -> Vec<T> {
        sums.into_iter()
            .map(|s| T::from_f64(s.widen() / m as f64))
            // The first `update` then also runs `mean += (batch_mean - mean)
            // * 1.0`, adding +0.0: a no-op, as these sums are never -0.0.
            .collect()
    };
    let mean = mean_of(sums);
    let mean_sq = mean_of(square_sums);

    let std = stat(mean.iter().zip(&mean_sq).map(|(&mu, &sq)| {
        let var = sq - mu * mu;
        // np.maximum(0, var) with a weak Python 0.
        let var = if var < T::ZERO { T::ZERO } else { var };
        var.sqrt()
    }));

    let targets: Vec<f64> = QUANTILES.iter().map(|(_, q)| q * m as f64).collect();
    let mut per_q: Vec<Vec<Quantile<T>>> = QUANTILES.iter().map(|_| Vec::new()).collect();
    for (j, (&lo, &hi)) in min.iter().zip(&max).enumerate() {
        let edges = bin_edges(lo, hi);
        let cumsum = histogram(j, &edges);
        for (qs, &target) in per_q.iter_mut().zip(&targets) {
            qs.push(single_quantile(&cumsum, &edges, target));
        }
    }
    let quantiles = QUANTILES
        .iter()
        .zip(per_q)
        .map(|((key, _), qs)| {
            // `np.array([...])` of edge (T) and interpolated (float64) scalars.
            let all_edges = qs.iter().all(|q| matches!(q, Quantile::Edge(_)));
            let dtype = if all_edges { T::DTYPE } else { Dtype::F64 };
            let values = qs
                .iter()
                .map(|q| match *q {
                    Quantile::Edge(e) => e.widen(),
                    Quantile::Interpolated(v) => v,
                })
                .collect();
            (key.to_string(), Stat { dtype, values })
        })
        .collect();

    FeatureStats {
        min: stat(min),
        max: stat(max),
        mean: stat(mean),
        std,
        count,
        quantiles,
        image: false,
    }
}

/// `np.linspace(min - 1e-10, max + 1e-10, 5001)` evaluated in T: `start +
/// i * step` with `step = (stop - start) / 5000` (or `i / 5000 * delta` when
/// the step underflows to 0), last edge forced to `stop`.
fn bin_edges<T: Real>(min: T, max: T) -> Vec<T> {
    let pad = T::from_f64(1e-10);
    let start = min - pad;
    let stop = max + pad;
    let delta = stop - start;
    let div = T::from_usize(NUM_BINS);
    let step = delta / div;
    let mut edges: Vec<T> = (0..=NUM_BINS)
        .map(|i| {
            let i = T::from_usize(i);
            let y = if step == T::ZERO {
                (i / div) * delta
            } else {
                i * step
            };
            y + start
        })
        .collect();
    edges[NUM_BINS] = stop;
    edges
}

/// `np.cumsum(np.histogram(column, bins=edges)[0])` as float64 counts.
///
/// numpy bins explicit edges with `searchsorted`: bin `k` holds
/// `edges[k] <= x < edges[k + 1]`, the last bin also `x == edges[5000]`.
/// linspace edges never decrease and span `[min, max]`, so every value lands
/// in bin `(#edges[..5000] <= x) - 1`.
fn cumulative_histogram<T: Real>(column: &[T], edges: &[T]) -> Vec<f64> {
    let mut hist = vec![0u64; NUM_BINS];
    // An image's column holds long runs of one value (flat surfaces): a value equal to the one
    // before lands in the same bin, without the search.
    let mut previous: Option<(T, Option<usize>)> = None;
    for &x in column {
        let bin = match previous {
            Some((v, bin)) if v == x => bin,
            _ => {
                let bin = bin_of(x, edges);
                previous = Some((x, bin));
                bin
            }
        };
        if let Some(b) = bin {
            hist[b] += 1;
        }
    }
    cumulate(&hist)
}

/// The histogram bin of `x` under `edges` (see [`cumulative_histogram`]); `None` outside.
fn bin_of<T: Real>(x: T, edges: &[T]) -> Option<usize> {
    let p = edges[..NUM_BINS].partition_point(|&e| e <= x);
    (p > 0 && x <= edges[NUM_BINS]).then(|| p - 1)
}

/// `np.cumsum` of bin counts, as float64.
fn cumulate(hist: &[u64]) -> Vec<f64> {
    let mut acc = 0.0;
    hist.iter()
        .map(|&h| {
            acc += h as f64;
            acc
        })
        .collect()
}

enum Quantile<T> {
    /// A bin edge, returned as the edge array's scalar type.
    Edge(T),
    /// `edges[i] + fraction * (edges[i+1] - edges[i])`: float64.
    Interpolated(f64),
}

/// `RunningQuantileStats._compute_single_quantile`.
fn single_quantile<T: Real>(cumsum: &[f64], edges: &[T], target: f64) -> Quantile<T> {
    let idx = cumsum.partition_point(|&c| c < target);
    if idx == 0 {
        return Quantile::Edge(edges[0]);
    }
    if idx >= cumsum.len() {
        return Quantile::Edge(edges[NUM_BINS]);
    }
    let before = cumsum[idx - 1];
    let in_bin = cumsum[idx] - before;
    if in_bin == 0.0 {
        return Quantile::Edge(edges[idx]);
    }
    let fraction = (target - before) / in_bin;
    Quantile::Interpolated(edges[idx].widen() + fraction * (edges[idx + 1] - edges[idx]).widen())
}

/// Frame indices `compute_stats.sample_images` reads for an episode of `n`
/// frames: `estimate_num_samples` (all frames below 100, else
/// `max(100, min(int(n ** 0.75), 10000))`) spread by
/// `np.round(np.linspace(0, n - 1, num))` (round half to even).
pub fn sample_indices(n: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let floor = n.min(100);
    let num = floor.max(((n as f64).powf(0.75) as usize).min(10_000));
    if num == 1 {
        return vec![0];
    }
    let stop = (n - 1) as f64;
    let step = stop / (num - 1) as f64;
    (0..num)
        .map(|i| {
            let y = if i == num - 1 {
                stop
            } else {
                i as f64 * step + 0.0
            };
            y.round_ties_even() as usize
        })
        .collect()
}

/// `auto_downsample_height_width`: stride `int(long side / 150)` once the
/// long side reaches 300 pixels (width wins only when strictly wider).
pub fn downsample_factor(width: usize, height: usize) -> usize {
    if width.max(height) < 300 {
        1
    } else if width > height {
        width / 150
    } else {
        height / 150
    }
}

/// Stats of an image/video feature from all `frames` of an episode, each
/// packed RGB8, row-major HWC, `width * height * 3` bytes.
///
/// Reproduces `compute_episode_stats` for `dtype` "image"/"video": it samples
/// frames ([`sample_indices`]), strides large frames down, computes float32
/// per-channel stats over all sampled pixels (rows ordered frame, y, x), then
/// divides every stat by 255 in its own dtype. `count` is the number of
/// sampled frames.
pub fn image_stats<F: AsRef<[u8]>>(
    frames: &[F],
    width: usize,
    height: usize,
) -> Result<FeatureStats, String> {
    image_stats_with(frames.len(), width, height, |i| {
        Ok::<&[u8], String>(frames[i].as_ref())
    })
}

/// [`image_stats`] for `n` frames fetched on demand: `frame(i)` is only called
/// for the sampled indices, in increasing order (e.g. to decode PNGs).
pub fn image_stats_with<B, G>(
    n: usize,
    width: usize,
    height: usize,
    frame: G,
) -> Result<FeatureStats, String>
where
    B: AsRef<[u8]>,
    G: FnMut(usize) -> Result<B, String>,
{
    let (pixels, frames) = sampled_pixels(n, width, height, 3, frame)?;
    // One frame: numpy holds it column-major and sums each column pairwise, which the
    // one-pass form does not reproduce.
    let mut st = if frames == 1 {
        let as_float: Vec<f32> = pixels.iter().map(|&v| f32::from(v)).collect();
        running_stats(&as_float, 3, Layout::Columns, 1)
    } else {
        pixel_running_stats(&pixels, frames as u64)
    };
    for s in [&mut st.min, &mut st.max, &mut st.mean, &mut st.std]
        .into_iter()
        .chain(st.quantiles.iter_mut().map(|(_, s)| s))
    {
        divide_by_255(s);
    }
    st.image = true;
    Ok(st)
}

/// Stats of a depth video feature (`info.is_depth_map`) from its `n` frames,
/// float32 metres, row-major `height x width`, fetched on demand: `frame(i)`
/// is only called for the sampled indices, in increasing order.
///
/// lerobot records such frames as float32 TIFFs, which `load_image_as_numpy`
/// reads back unchanged; `compute_episode_stats` then samples and strides them
/// as images ([`sample_indices`], [`downsample_factor`]), computes the
/// float32 stats of the one channel, and divides by 1.0 instead of 255, which
/// changes nothing. The result has `image` set (JSON shape `(1, 1, 1)`) and
/// aggregates with [`aggregate`]. Non-finite depth is an error: numpy would
/// produce NaN statistics or fail on the histogram edges.
pub fn depth_stats_with<B, G>(
    n: usize,
    width: usize,
    height: usize,
    frame: G,
) -> Result<FeatureStats, String>
where
    B: AsRef<[f32]>,
    G: FnMut(usize) -> Result<B, String>,
{
    let (depth, frames) = sampled_pixels(n, width, height, 1, frame)?;
    if let Some(v) = depth.iter().find(|v| !v.is_finite()) {
        return Err(format!(
            "depth stats need finite values, a sampled frame holds {v}"
        ));
    }
    let mut st = running_stats(&depth, 1, Layout::Rows, frames as u64);
    st.image = true;
    Ok(st)
}

/// What `sample_images` keeps of an episode's `n` frames of `width x height x
/// channels` values (row-major HWC): the sampled frames, each strided by
/// [`downsample_factor`] in both directions, as rows of `channels` values
/// ordered frame, y, x; with the number of sampled frames. Fewer than two
/// rows is an error (see the module doc).
fn sampled_pixels<T, B, G>(
    n: usize,
    width: usize,
    height: usize,
    channels: usize,
    mut frame: G,
) -> Result<(Vec<T>, usize), String>
where
    T: Copy,
    B: AsRef<[T]>,
    G: FnMut(usize) -> Result<B, String>,
{
    let indices = sample_indices(n);
    let f = downsample_factor(width, height);
    let (w2, h2) = (width.div_ceil(f), height.div_ceil(f));
    if indices.len() * w2 * h2 < 2 {
        return Err(format!(
            "need at least 2 sampled pixels, got {n} frames of {width}x{height}"
        ));
    }
    let row = width * channels;
    let mut pixels = Vec::with_capacity(indices.len() * w2 * h2 * channels);
    for &i in &indices {
        let buf = frame(i)?;
        let buf = buf.as_ref();
        if buf.len() != row * height {
            return Err(format!(
                "frame {i}: {} values, expected {width}x{height}x{channels}",
                buf.len()
            ));
        }
        for line in buf.chunks_exact(row).step_by(f) {
            for px in line.chunks_exact(channels).step_by(f) {
                pixels.extend_from_slice(px);
            }
        }
    }
    Ok((pixels, indices.len()))
}

/// `v / 255.0` with a weak Python float: computed in the array's dtype.
fn divide_by_255(s: &mut Stat) {
    for v in &mut s.values {
        *v = match s.dtype {
            Dtype::F32 => f64::from(*v as f32 / 255.0f32),
            Dtype::F64 | Dtype::I64 => *v / 255.0,
        };
    }
    if s.dtype == Dtype::I64 {
        s.dtype = Dtype::F64;
    }
}

/// `aggregate_stats([prev, ep])` for one feature, the update
/// `LeRobotDatasetMetadata.save_episode` applies after every episode.
///
/// `aggregate_feature_stats` stacks both entries (numpy dtype promotion),
/// weights by count in float64, squares each `std` in its own dtype, and
/// sums the two rows in order. `min`/`max` keep a common dtype (float32 stays
/// float32 in memory); everything else becomes float64. Quantile keys are
/// those of `prev` that `ep` also has.
pub fn aggregate(prev: &FeatureStats, ep: &FeatureStats) -> Result<FeatureStats, String> {
    let d = prev.mean.values.len();
    let same_len = |a: &Stat, b: &Stat| a.values.len() == d && b.values.len() == d;
    if prev.image != ep.image
        || !same_len(&prev.min, &ep.min)
        || !same_len(&prev.max, &ep.max)
        || !same_len(&prev.mean, &ep.mean)
        || !same_len(&prev.std, &ep.std)
    {
        return Err("cannot aggregate stats of different shapes".to_string());
    }
    let (c0, c1) = (prev.count as f64, ep.count as f64);
    let count = prev.count + ep.count;
    let total = count as f64;
    let weighted = |a: &Stat, b: &Stat| -> Stat {
        let values = a
            .values
            .iter()
            .zip(&b.values)
            .map(|(&x0, &x1)| (0.0 + x0 * c0 + x1 * c1) / total)
            .collect();
        Stat {
            dtype: Dtype::F64,
            values,
        }
    };
    let mean = weighted(&prev.mean, &ep.mean);
    let square = |s: &Stat, j: usize| -> f64 {
        let v = s.values[j];
        match s.dtype {
            Dtype::F32 => f64::from(v as f32 * v as f32),
            Dtype::F64 | Dtype::I64 => v * v,
        }
    };
    let std = (0..d)
        .map(|j| {
            let mu = mean.values[j];
            let d0 = prev.mean.values[j] - mu;
            let d1 = ep.mean.values[j] - mu;
            let w0 = (square(&prev.std, j) + d0 * d0) * c0;
            let w1 = (square(&ep.std, j) + d1 * d1) * c1;
            ((0.0 + w0 + w1) / total).sqrt()
        })
        .collect();
    let extreme = |a: &Stat, b: &Stat, pick_b: fn(f64, f64) -> bool| -> Stat {
        Stat {
            dtype: a.dtype.promote(b.dtype),
            values: a
                .values
                .iter()
                .zip(&b.values)
                .map(|(&x, &y)| if pick_b(x, y) { y } else { x })
                .collect(),
        }
    };
    let mut quantiles = Vec::new();
    for (key, q0) in &prev.quantiles {
        if let Some((_, q1)) = ep.quantiles.iter().find(|(k, _)| k == key) {
            if q0.values.len() != d || q1.values.len() != d {
                return Err(format!("cannot aggregate {key} of different shapes"));
            }
            quantiles.push((key.clone(), weighted(q0, q1)));
        }
    }
    Ok(FeatureStats {
        min: extreme(&prev.min, &ep.min, |x, y| y < x),
        max: extreme(&prev.max, &ep.max, |x, y| y > x),
        mean,
        std: Stat {
            dtype: Dtype::F64,
            values: std,
        },
        count,
        quantiles,
        image: prev.image,
    })
}

impl FeatureStats {
    /// The feature's entry in `stats.json`, as `write_stats` serialises it
    /// (`ndarray.tolist()`): float32 values widened to float64, int64 as JSON
    /// integers, image stats nested `[[[v]], [[v]], [[v]]]`, `count` as `[n]`.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        let named = [
            ("min", &self.min),
            ("max", &self.max),
            ("mean", &self.mean),
            ("std", &self.std),
        ];
        for (key, s) in named
            .into_iter()
            .chain(self.quantiles.iter().map(|(k, s)| (k.as_str(), s)))
        {
            let values = s.values.iter().map(|&v| {
                let v = match s.dtype {
                    Dtype::I64 => Value::from(v as i64),
                    Dtype::F32 | Dtype::F64 => Value::from(v),
                };
                if self.image {
                    Value::Array(vec![Value::Array(vec![v])])
                } else {
                    v
                }
            });
            map.insert(key.to_string(), Value::Array(values.collect()));
        }
        map.insert("count".to_string(), Value::from(vec![self.count]));
        Value::Object(map)
    }

    /// Reads a feature's entry back as `load_stats` does
    /// (`np.atleast_1d(np.array(list))`): float64, or int64 where every
    /// number is a JSON integer. Quantile keys are the `q<digits>` present.
    pub fn from_json(value: &Value, image: bool) -> Result<Self, String> {
        let obj = value.as_object().ok_or("feature stats must be an object")?;
        let get = |key: &str| -> Result<Stat, String> {
            let v = obj.get(key).ok_or_else(|| format!("missing `{key}`"))?;
            parse_stat(v).map_err(|e| format!("`{key}`: {e}"))
        };
        let count = get("count")?;
        let count = match count.values.as_slice() {
            [c] if *c >= 0.0 && c.fract() == 0.0 => *c as u64,
            _ => return Err("`count` must be [n]".to_string()),
        };
        let mut quantiles = Vec::new();
        for key in obj.keys() {
            let digits = key.strip_prefix('q').unwrap_or("");
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                quantiles.push((key.clone(), get(key)?));
            }
        }
        Ok(FeatureStats {
            min: get("min")?,
            max: get("max")?,
            mean: get("mean")?,
            std: get("std")?,
            count,
            quantiles,
            image,
        })
    }
}

fn parse_stat(v: &Value) -> Result<Stat, String> {
    fn walk(v: &Value, out: &mut Vec<f64>, all_int: &mut bool) -> Result<(), String> {
        match v {
            Value::Array(items) => items.iter().try_for_each(|i| walk(i, out, all_int)),
            Value::Number(n) => {
                *all_int &= n.is_i64() || n.is_u64();
                out.push(n.as_f64().ok_or("number out of range")?);
                Ok(())
            }
            other => Err(format!("expected numbers, got {other}")),
        }
    }
    let mut values = Vec::new();
    let mut all_int = true;
    walk(v, &mut values, &mut all_int)?;
    if values.is_empty() {
        return Err("empty".to_string());
    }
    let dtype = if all_int { Dtype::I64 } else { Dtype::F64 };
    Ok(Stat { dtype, values })
}
