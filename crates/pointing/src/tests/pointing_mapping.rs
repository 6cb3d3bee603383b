//! `smart_resize` against worked numbers computed with transformers 4.51.3's `smart_resize`
//! (`transformers/models/qwen2_vl/image_processing_qwen2_vl.py`), and the model-pixel ↔
//! original-pixel map.

use crate::{Ability, ImageSize, MappingError, ModelImageMap, PointAnswer};
use pointact_vlm::{
    smart_resize, DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, ER1_EVAL_MIN_PIXELS, FACTOR,
    PRETRAINED_MAX_PIXELS,
};
use proptest::prelude::*;

/// `smart_resize` with the processor class defaults, taking and returning (width, height) so the
/// table below reads like image sizes are written ("640×480 → 644×476").
fn resize_wh(w: u32, h: u32, min: u64, max: u64) -> Result<(u32, u32), MappingError> {
    smart_resize(h, w, FACTOR, min, max).map(|(h, w)| (w, h))
}

#[test]
fn constants() {
    assert_eq!(FACTOR, 28);
    assert_eq!(DEFAULT_MIN_PIXELS, 3136);
    assert_eq!(DEFAULT_MAX_PIXELS, 1_003_520);
    assert_eq!(PRETRAINED_MAX_PIXELS, 12_845_056);
    assert_eq!(ER1_EVAL_MIN_PIXELS, 200_704);
}

#[test]
fn reference_sizes_default_limits() {
    for max in [DEFAULT_MAX_PIXELS, PRETRAINED_MAX_PIXELS] {
        assert_eq!(resize_wh(640, 480, DEFAULT_MIN_PIXELS, max), Ok((644, 476)));
        assert_eq!(
            resize_wh(1280, 720, DEFAULT_MIN_PIXELS, max),
            Ok((1288, 728))
        );
        assert_eq!(resize_wh(448, 448, DEFAULT_MIN_PIXELS, max), Ok((448, 448)));
        assert_eq!(resize_wh(320, 240, DEFAULT_MIN_PIXELS, max), Ok((308, 252)));
    }
}

#[test]
fn reference_sizes_capped_at_256_tokens() {
    let max = 256 * 28 * 28;
    assert_eq!(resize_wh(640, 480, DEFAULT_MIN_PIXELS, max), Ok((504, 364)));
    assert_eq!(
        resize_wh(1280, 720, DEFAULT_MIN_PIXELS, max),
        Ok((588, 336))
    );
}

#[test]
fn reference_size_under_embodied_r1_eval_min_pixels() {
    assert_eq!(
        resize_wh(320, 240, ER1_EVAL_MIN_PIXELS, 1_605_632),
        Ok((532, 392))
    );
}

#[test]
fn rounds_half_to_even_like_python() {
    // 70 / 28 = 2.5 -> 2 (not 3): 56.
    assert_eq!(
        smart_resize(70, 280, FACTOR, DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS),
        Ok((56, 280))
    );
    // 126 / 28 = 4.5 -> 4: 112; 98 / 28 = 3.5 -> 4: 112.
    assert_eq!(
        smart_resize(126, 98, FACTOR, DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS),
        Ok((112, 112))
    );
}

#[test]
fn rejects_small_and_thin_images() {
    assert_eq!(
        smart_resize(27, 640, FACTOR, DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS),
        Err(MappingError::TooSmall {
            height: 27,
            width: 640,
            factor: 28
        })
    );
    assert!(matches!(
        smart_resize(480, 0, FACTOR, DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS),
        Err(MappingError::TooSmall { .. })
    ));
    // Exactly 200:1 passes, just above fails.
    assert!(smart_resize(28, 5600, FACTOR, DEFAULT_MIN_PIXELS, PRETRAINED_MAX_PIXELS).is_ok());
    assert_eq!(
        smart_resize(28, 5601, FACTOR, DEFAULT_MIN_PIXELS, PRETRAINED_MAX_PIXELS),
        Err(MappingError::AspectRatio {
            height: 28,
            width: 5601
        })
    );
    assert_eq!(
        smart_resize(480, 640, 0, DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS),
        Err(MappingError::ZeroFactor)
    );
}

#[test]
fn degenerate_limits_are_errors_not_zero_sizes() {
    // Python returns a 0 side here; we refuse.
    assert!(matches!(
        smart_resize(28, 5600, FACTOR, 0, 28 * 28 * 4),
        Err(MappingError::BudgetTooSmall { .. })
    ));
    assert!(matches!(
        smart_resize(480, 640, FACTOR, 0, 0),
        Err(MappingError::BudgetTooSmall { .. })
    ));
    assert!(matches!(
        smart_resize(480, 640, FACTOR, u64::MAX, u64::MAX),
        Err(MappingError::Overflow { .. })
    ));
}

#[test]
fn map_scales_per_axis() {
    let map = ModelImageMap::for_qwen25vl(
        ImageSize::new(640, 480),
        DEFAULT_MIN_PIXELS,
        PRETRAINED_MAX_PIXELS,
    )
    .unwrap();
    assert_eq!(map.model(), ImageSize::new(644, 476));
    assert_eq!(map.original(), ImageSize::new(640, 480));
    assert_eq!(map.to_original([644.0, 476.0]), [640.0, 480.0]);
    assert_eq!(map.to_original([0.0, 0.0]), [0.0, 0.0]);
    let [x, y] = map.to_original([322.0, 238.0]);
    assert!((x - 320.0).abs() < 1e-12 && (y - 240.0).abs() < 1e-12);
    // A heavily downsized frame: 1280x720 at 256 tokens is 588x336.
    let map =
        ModelImageMap::for_qwen25vl(ImageSize::new(1280, 720), DEFAULT_MIN_PIXELS, 256 * 28 * 28)
            .unwrap();
    let [x, y] = map.to_original([294.0, 168.0]);
    assert!((x - 640.0).abs() < 1e-9 && (y - 360.0).abs() < 1e-9);
}

#[test]
fn map_rejects_zero_sizes() {
    let err = ModelImageMap::new(ImageSize::new(640, 0), ImageSize::new(644, 476)).unwrap_err();
    assert!(matches!(err, MappingError::ZeroSize { .. }));
    assert!(ModelImageMap::new(ImageSize::new(640, 480), ImageSize::new(0, 476)).is_err());
}

#[test]
fn answer_to_original() {
    let map = ModelImageMap::new(ImageSize::new(1280, 720), ImageSize::new(644, 364)).unwrap();
    let answer = PointAnswer {
        ability: Ability::Reg,
        reasoning: None,
        points: vec![[322.0, 182.0], [644.0, 0.0]],
        raw: String::new(),
    };
    assert_eq!(
        answer.to_original(&map),
        vec![[640.0, 360.0], [1280.0, 0.0]]
    );
}

proptest! {
    #[test]
    fn resize_is_multiple_of_factor_and_within_budget(h in 28u32..4000, w in 28u32..4000) {
        prop_assume!(h.max(w) <= 200 * h.min(w));
        let (rh, rw) = smart_resize(h, w, FACTOR, DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS).unwrap();
        prop_assert!(rh % 28 == 0 && rw % 28 == 0 && rh > 0 && rw > 0);
        prop_assert!(u64::from(rh) * u64::from(rw) <= DEFAULT_MAX_PIXELS);
    }

    #[test]
    fn round_trip_original_model_original(
        ow in 28u32..4000, oh in 28u32..4000, fx in 0.0f64..=1.0, fy in 0.0f64..=1.0,
    ) {
        prop_assume!(ow.max(oh) <= 200 * ow.min(oh));
        let original = ImageSize::new(ow, oh);
        let map = ModelImageMap::for_qwen25vl(original, DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS).unwrap();
        let p = [fx * f64::from(ow), fy * f64::from(oh)];
        let back = map.to_original(map.to_model(p));
        prop_assert!((back[0] - p[0]).abs() <= 1e-9 * f64::from(ow));
        prop_assert!((back[1] - p[1]).abs() <= 1e-9 * f64::from(oh));
        // In-bounds model points land in-bounds in the original.
        let m = [fx * f64::from(map.model().width), fy * f64::from(map.model().height)];
        prop_assert!(original.contains(map.to_original(m)));
    }
}
/// `(height, width, min_pixels, max_pixels) -> (height, width)` as computed by `smart_resize` from
/// the transformers 4.51.3 wheel (factor 28); a sample of a 300 000-case comparison that matched exactly.
#[rustfmt::skip]
const GOLDEN: [(u32, u32, u64, u64, u32, u32); 60] = [
    (28, 5600, 3136, 1003520, 28, 5600),
    (28, 5600, 200704, 1605632, 56, 6356),
    (29, 33, 200704, 1605632, 420, 504),
    (33, 29, 3136, 12845056, 84, 56),
    (42, 42, 3136, 1003520, 56, 56),
    (70, 280, 3136, 1003520, 56, 280),
    (70, 280, 3136, 12845056, 56, 280),
    (70, 280, 200704, 1605632, 224, 896),
    (126, 98, 3136, 1003520, 112, 112),
    (126, 98, 3136, 12845056, 112, 112),
    (240, 320, 200704, 1605632, 392, 532),
    (335, 732, 3136, 1003520, 336, 728),
    (335, 732, 3136, 12845056, 336, 728),
    (409, 4588, 3136, 200704, 112, 1484),
    (409, 4588, 3136, 1003520, 280, 3332),
    (409, 4588, 3136, 12845056, 420, 4592),
    (434, 1839, 3136, 1003520, 448, 1848),
    (480, 640, 3136, 1003520, 476, 644),
    (480, 640, 3136, 12845056, 476, 644),
    (480, 640, 200704, 1605632, 476, 644),
    (534, 4755, 200704, 1605632, 420, 3780),
    (600, 800, 200704, 1605632, 588, 812),
    (600, 1999, 3136, 1003520, 532, 1820),
    (720, 1280, 3136, 1003520, 728, 1288),
    (720, 1280, 3136, 12845056, 728, 1288),
    (771, 4542, 3136, 1003520, 392, 2408),
    (771, 4542, 200704, 1605632, 504, 3052),
    (799, 3023, 3136, 12845056, 812, 3024),
    (799, 3023, 262144, 1638400, 644, 2464),
    (1024, 768, 3136, 1003520, 1036, 756),
    (1024, 768, 200704, 1605632, 1036, 756),
    (1118, 2400, 3136, 12845056, 1120, 2408),
    (1118, 2400, 200704, 1605632, 840, 1848),
    (1856, 4803, 3136, 1003520, 616, 1596),
    (1856, 4803, 3136, 12845056, 1848, 4816),
    (1856, 4803, 262144, 1638400, 784, 2044),
    (2160, 3840, 3136, 12845056, 2156, 3836),
    (2160, 3840, 200704, 1605632, 924, 1680),
    (2680, 1263, 3136, 1003520, 1456, 672),
    (2680, 1263, 3136, 12845056, 2688, 1260),
    (3000, 4000, 3136, 12845056, 2996, 4004),
    (3000, 4000, 200704, 1605632, 1092, 1456),
    (3262, 423, 3136, 12845056, 3248, 420),
    (3505, 512, 3136, 200704, 1148, 168),
    (3580, 3453, 3136, 200704, 448, 420),
    (3580, 3453, 3136, 1003520, 1008, 980),
    (3580, 3453, 3136, 12845056, 3584, 3444),
    (3580, 3453, 200704, 1605632, 1288, 1232),
    (3580, 3453, 262144, 1638400, 1288, 1232),
    (4000, 28, 3136, 1003520, 4004, 28),
    (4000, 28, 200704, 1605632, 5376, 56),
    (4660, 1042, 3136, 200704, 924, 196),
    (4660, 1042, 200704, 1605632, 2660, 588),
    (4660, 1042, 262144, 1638400, 2688, 588),
    (4802, 503, 3136, 12845056, 4816, 504),
    (4802, 503, 262144, 1638400, 3948, 392),
    (4824, 3277, 3136, 1003520, 1204, 812),
    (4824, 3277, 3136, 12845056, 4340, 2940),
    (4824, 3277, 200704, 1605632, 1512, 1036),
    (4824, 3277, 262144, 1638400, 1540, 1036),
];

#[test]
fn matches_transformers_4_51_3() {
    for (h, w, min, max, rh, rw) in GOLDEN {
        assert_eq!(
            smart_resize(h, w, FACTOR, min, max),
            Ok((rh, rw)),
            "{h}x{w} [{min}, {max}]"
        );
    }
}
