//! `parse_answer`: realistic Embodied-R1 replies, every tolerated deviation, and every error variant.

use crate::{parse_answer, Ability, ImageSize, ListProblem, PointAnswer, PointingError};

/// The model-input size of a 640×480 frame under the stock processor.
const B: ImageSize = ImageSize::new(644, 476);

fn ok(raw: &str, ability: Ability) -> PointAnswer {
    match parse_answer(raw, ability, B) {
        Ok(a) => a,
        Err(e) => panic!("expected Ok for {raw:?}, got {e}"),
    }
}

fn err(raw: &str, ability: Ability) -> PointingError {
    match parse_answer(raw, ability, B) {
        Ok(a) => panic!("expected an error for {raw:?}, got {:?}", a.points),
        Err(e) => {
            assert_eq!(e.raw(), raw, "every error carries the raw reply");
            e
        }
    }
}

fn problem(e: &PointingError) -> &ListProblem {
    match e {
        PointingError::MalformedList { problem, .. } => problem,
        other => panic!("expected MalformedList, got {other:?}"),
    }
}

// ---------------------------------------------------------------- realistic replies

#[test]
fn reg_reply() {
    let raw = "<think>The pepper is on the left side of the table, next to the pan. Its body spans roughly x 200-240, y 290-320.</think><answer><point>[[212, 305], [230.5, 298]]</point></answer>";
    let a = ok(raw, Ability::Reg);
    assert_eq!(a.ability, Ability::Reg);
    assert_eq!(a.points, vec![[212.0, 305.0], [230.5, 298.0]]);
    assert_eq!(
        a.reasoning.as_deref(),
        Some("The pepper is on the left side of the table, next to the pan. Its body spans roughly x 200-240, y 290-320.")
    );
    assert_eq!(a.raw, raw);
}

#[test]
fn rrg_reply_with_newlines_and_spaces_everywhere() {
    let raw = "<think>\nThe pan is at the centre-right.\nThe pepper should go inside it.\n</think>\n\n<answer>\n  <point>\n    [\n      [ 402 , 251 ] ,\n      [410,260]\n    ]\n  </point>\n</answer>\n";
    let a = ok(raw, Ability::Rrg);
    assert_eq!(a.points, vec![[402.0, 251.0], [410.0, 260.0]]);
    assert_eq!(
        a.reasoning.as_deref(),
        Some("The pan is at the centre-right.\nThe pepper should go inside it.")
    );
}

#[test]
fn vtg_reply_with_eight_points() {
    let raw = "<think>The red block starts at the lower left; lift it, carry it right and lower it onto the yellow block.</think><answer><point>[[150, 380], [165, 350], [190, 320], [230, 300], [280, 290], [330, 295], [370, 310], [385, 330]]</point></answer>";
    let a = ok(raw, Ability::Vtg);
    assert_eq!(a.points.len(), 8);
    assert_eq!(a.points[0], [150.0, 380.0]);
    assert_eq!(a.points[7], [385.0, 330.0]);
}

#[test]
fn ofg_reply_single_point() {
    let a = ok(
        "<think>The wrench handle is the graspable part.</think><answer><point>[[512, 96]]</point></answer>",
        Ability::Ofg,
    );
    assert_eq!(a.points, vec![[512.0, 96.0]]);
}

// ---------------------------------------------------------------- tolerated deviations

#[test]
fn missing_think_block() {
    let a = ok("<answer><point>[[1, 2]]</point></answer>", Ability::Reg);
    assert_eq!(a.reasoning, None);
    assert_eq!(a.points, vec![[1.0, 2.0]]);
}

#[test]
fn blank_think_block_is_none() {
    let a = ok(
        "<think>  \n </think><answer><point>[[1,2]]</point></answer>",
        Ability::Reg,
    );
    assert_eq!(a.reasoning, None);
}

#[test]
fn closing_think_without_opening() {
    let a = ok(
        "the mug is left</think><answer><point>[[10,20]]</point></answer>",
        Ability::Reg,
    );
    assert_eq!(a.reasoning.as_deref(), Some("the mug is left"));
}

#[test]
fn unterminated_think_ends_at_the_answer() {
    let a = ok(
        "<think>the mug is left <answer><point>[[10,20]]</point></answer>",
        Ability::Reg,
    );
    assert_eq!(a.reasoning.as_deref(), Some("the mug is left"));
    let a = ok(
        "<think>the mug is left <point>[[10,20]]</point>",
        Ability::Reg,
    );
    assert_eq!(a.reasoning.as_deref(), Some("the mug is left"));
}

#[test]
fn missing_answer_wrapper_with_point_block() {
    let a = ok(
        "<think>ok</think><point>[[3, 4], [5, 6]]</point>",
        Ability::Rrg,
    );
    assert_eq!(a.points, vec![[3.0, 4.0], [5.0, 6.0]]);
    // The no-thinking variant: only a point block.
    let a = ok("<point>[[3, 4]]</point>", Ability::Reg);
    assert_eq!(a.points, vec![[3.0, 4.0]]);
}

#[test]
fn missing_closing_tags_after_a_complete_list() {
    assert_eq!(
        ok("<answer><point>[[3, 4]]", Ability::Reg).points,
        vec![[3.0, 4.0]]
    );
    assert_eq!(
        ok("<answer><point>[[3, 4]]</answer>", Ability::Reg).points,
        vec![[3.0, 4.0]]
    );
    assert_eq!(
        ok("<answer><point>[[3, 4]]</point>", Ability::Reg).points,
        vec![[3.0, 4.0]]
    );
}

#[test]
fn text_after_answer_is_ignored() {
    let a = ok(
        "<think>x</think><answer><point>[[3, 4]]</point></answer>.\nI hope this helps! <point>[[9999, 9999]]</point>",
        Ability::Reg,
    );
    assert_eq!(a.points, vec![[3.0, 4.0]]);
}

#[test]
fn tags_with_inner_whitespace_and_any_case() {
    let a = ok(
        "< THINK >r</ Think ><Answer>< point >[[3,4]]< / POINT ></answer >",
        Ability::Reg,
    );
    assert_eq!(a.points, vec![[3.0, 4.0]]);
    assert_eq!(a.reasoning.as_deref(), Some("r"));
}

#[test]
fn number_forms() {
    let a = ok(
        "<point>[[+1, 2.], [.5, 0.25e1], [1E2, 3e+1], [4.5e-1, -0], [0.0, 476], [644, 0]]</point>",
        Ability::Reg,
    );
    assert_eq!(
        a.points,
        vec![
            [1.0, 2.0],
            [0.5, 2.5],
            [100.0, 30.0],
            [0.45, 0.0],
            [0.0, 476.0],
            [644.0, 0.0]
        ]
    );
}

#[test]
fn trailing_commas_and_bare_single_point() {
    assert_eq!(
        ok("<point>[[1, 2,], [3, 4],]</point>", Ability::Reg).points,
        vec![[1.0, 2.0], [3.0, 4.0]]
    );
    assert_eq!(
        ok("<point>[7, 8]</point>", Ability::Reg).points,
        vec![[7.0, 8.0]]
    );
}

#[test]
fn bare_list_inside_answer() {
    assert_eq!(
        ok("<think>t</think><answer> [[7, 8]] </answer>", Ability::Reg).points,
        vec![[7.0, 8.0]]
    );
}

#[test]
fn points_quoted_in_reasoning_are_not_the_answer() {
    let a = ok(
        "<think>I must answer like <point>[[x1, y1]]</point>; the cup is at 100, 200.</think><answer><point>[[100, 200]]</point></answer>",
        Ability::Reg,
    );
    assert_eq!(a.points, vec![[100.0, 200.0]]);
}

#[test]
fn edges_are_inclusive() {
    let a = ok(
        "<point>[[0, 0], [644, 476], [644.0, 0], [0, 476.0]]</point>",
        Ability::Reg,
    );
    assert_eq!(a.points.len(), 4);
}

#[test]
fn unicode_around_the_answer() {
    let a = ok(
        "<think>Die Tasse (☕) ist links — 左边</think><answer><point>[[10, 20]]</point></answer>✓",
        Ability::Reg,
    );
    assert_eq!(
        a.reasoning.as_deref(),
        Some("Die Tasse (☕) ist links — 左边")
    );
}

// ---------------------------------------------------------------- errors

#[test]
fn error_missing_point_block() {
    for raw in [
        "",
        "I cannot see a pepper in this image.",
        "<think>hmm</think><answer>the pepper is on the left</answer>",
        "<think>hmm</think>",
        "<answer></answer>",
        // Point block only after the answer block: the answer block rules.
        "<answer>none</answer><point>[[1,2]]</point>",
        // Quoted in reasoning only.
        "<think><point>[[1,2]]</point></think>",
        "<pointer>[[1,2]]</pointer>",
    ] {
        assert!(
            matches!(
                err(raw, Ability::Reg),
                PointingError::MissingPointBlock { .. }
            ),
            "{raw:?}"
        );
    }
}

#[test]
fn error_malformed_truncated() {
    let raw = "<think>x</think><answer><point>[[212, 305], [230";
    let e = err(raw, Ability::Reg);
    assert_eq!(
        problem(&e),
        &ListProblem::ExpectedCommaOrClose { found: None }
    );
    let PointingError::MalformedList { point, offset, .. } = &e else {
        unreachable!()
    };
    assert_eq!(*point, Some(1));
    assert_eq!(*offset, raw.len());
    assert!(e.to_string().contains("end of input"), "{e}");
}

#[test]
fn error_malformed_unclosed_list_before_close_tag() {
    let raw = "<answer><point>[[212, 305]</point></answer>";
    let e = err(raw, Ability::Reg);
    assert_eq!(
        problem(&e),
        &ListProblem::ExpectedCommaOrClose { found: Some('<') }
    );
    let PointingError::MalformedList { offset, near, .. } = &e else {
        unreachable!()
    };
    assert_eq!(*offset, raw.find("</point>").unwrap());
    assert!(near.contains("</point>"));
}

#[test]
fn error_malformed_variants() {
    let cases: [(&str, ListProblem); 9] = [
        (
            "<point>212, 305</point>",
            ListProblem::ExpectedOpenBracket { found: Some('2') },
        ),
        (
            "<point></point>",
            ListProblem::ExpectedOpenBracket { found: Some('<') },
        ),
        ("<point>", ListProblem::ExpectedOpenBracket { found: None }),
        (
            "<point>[[1, 2], 3]</point>",
            ListProblem::ExpectedOpenBracket { found: Some('3') },
        ),
        (
            "<point>[[1, , 2]]</point>",
            ListProblem::ExpectedNumber { found: Some(',') },
        ),
        (
            "<point>[[212px, 305]]</point>",
            ListProblem::InvalidNumber {
                text: "212px".into(),
            },
        ),
        (
            "<point>[[1.2.3, 4]]</point>",
            ListProblem::InvalidNumber {
                text: "1.2.3".into(),
            },
        ),
        (
            "<point>[[1 2]]</point>",
            ListProblem::ExpectedCommaOrClose { found: Some('2') },
        ),
        (
            "<point>[[1, 2]] and more</point>",
            ListProblem::TrailingText { found: Some('a') },
        ),
    ];
    for (raw, expected) in cases {
        assert_eq!(problem(&err(raw, Ability::Reg)), &expected, "{raw:?}");
    }
}

#[test]
fn error_wrong_arity() {
    for (raw, n) in [
        ("<point>[[1, 2, 3]]</point>", 3),
        ("<point>[[1]]</point>", 1),
        ("<point>[[]]</point>", 0),
        ("<point>[[1, 2], [3, 4, 5, 6]]</point>", 4),
    ] {
        let e = err(raw, Ability::Reg);
        assert_eq!(
            problem(&e),
            &ListProblem::WrongArity { coordinates: n },
            "{raw:?}"
        );
    }
    let e = err("<point>[[1, 2], [3, 4, 5, 6]]</point>", Ability::Reg);
    let PointingError::MalformedList { point, .. } = e else {
        unreachable!()
    };
    assert_eq!(point, Some(1));
}

#[test]
fn error_non_finite() {
    for (raw, text) in [
        ("<point>[[NaN, 2]]</point>", "NaN"),
        ("<point>[[1, 2], [3, inf]]</point>", "inf"),
        ("<point>[[-Infinity, 2]]</point>", "-Infinity"),
        ("<point>[[1e999, 2]]</point>", "1e999"),
        ("<point>[[1, -1.5E+400]]</point>", "-1.5E+400"),
    ] {
        match err(raw, Ability::Reg) {
            PointingError::NonFinite {
                text: t, offset, ..
            } => {
                assert_eq!(t, text);
                assert_eq!(&raw[offset..offset + text.len()], text);
            }
            other => panic!("{raw:?}: {other:?}"),
        }
    }
    let e = err("<point>[[1, 2], [3, nan]]</point>", Ability::Reg);
    assert!(matches!(e, PointingError::NonFinite { point: 1, .. }));
}

#[test]
fn error_empty_list() {
    for raw in [
        "<point>[]</point>",
        "<answer><point>[ \n ]</point></answer>",
        "<answer>[]</answer>",
    ] {
        assert!(
            matches!(err(raw, Ability::Reg), PointingError::EmptyList { .. }),
            "{raw:?}"
        );
    }
    assert!(matches!(
        err("<point>[]</point>", Ability::Vtg),
        PointingError::EmptyList { .. }
    ));
}

#[test]
fn error_out_of_bounds() {
    let raw = "<point>[[10, 10], [645, 100], [-1, 5]]</point>";
    let e = err(raw, Ability::Reg);
    match &e {
        PointingError::OutOfBounds {
            index,
            point,
            bounds,
            ..
        } => {
            assert_eq!(*index, 1);
            assert_eq!(*point, [645.0, 100.0]);
            assert_eq!(*bounds, B);
        }
        other => panic!("{other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("645") && msg.contains("644") && msg.contains("476"),
        "{msg}"
    );
    for raw in [
        "<point>[[-0.001, 5]]</point>",
        "<point>[[5, 476.0001]]</point>",
        "<point>[[5, -3]]</point>",
        "<point>[[1e300, 5]]</point>",
    ] {
        assert!(
            matches!(
                err(raw, Ability::Reg),
                PointingError::OutOfBounds { index: 0, .. }
            ),
            "{raw:?}"
        );
    }
    // Zero-sized bounds only admit the origin.
    assert!(parse_answer(
        "<point>[[0, 0]]</point>",
        Ability::Reg,
        ImageSize::new(0, 0)
    )
    .is_ok());
    assert!(parse_answer(
        "<point>[[1, 0]]</point>",
        Ability::Reg,
        ImageSize::new(0, 0)
    )
    .is_err());
}

#[test]
fn error_vtg_needs_eight() {
    let seven = "<answer><point>[[1,1],[2,2],[3,3],[4,4],[5,5],[6,6],[7,7]]</point></answer>";
    let nine =
        "<answer><point>[[1,1],[2,2],[3,3],[4,4],[5,5],[6,6],[7,7],[8,8],[9,9]]</point></answer>";
    for (raw, n) in [(seven, 7), (nine, 9)] {
        match err(raw, Ability::Vtg) {
            PointingError::WrongPointCount {
                ability,
                expected,
                got,
                ..
            } => {
                assert_eq!((ability, expected, got), (Ability::Vtg, 8, n));
            }
            other => panic!("{other:?}"),
        }
        // Other abilities take any count.
        for ability in [Ability::Reg, Ability::Rrg, Ability::Ofg] {
            assert_eq!(ok(raw, ability).points.len(), n);
        }
    }
    assert!(err(seven, Ability::Vtg).to_string().contains("exactly 8"));
}

#[test]
fn error_display_is_short_and_raw_is_kept() {
    let long_reasoning = "x".repeat(10_000);
    let raw = format!("<think>{long_reasoning}</think><answer>nothing</answer>");
    let e = err(&raw, Ability::Reg);
    assert!(e.to_string().len() < 200);
    assert_eq!(e.raw(), raw);
}

#[test]
fn think_tags_after_the_answer_are_ignored() {
    let a = ok(
        "<answer><point>[[1, 2]]</point></answer></think>",
        Ability::Reg,
    );
    assert_eq!((a.points, a.reasoning), (vec![[1.0, 2.0]], None));
    let a = ok(
        "<point>[[1, 2]]</point><think>afterthought</think>",
        Ability::Reg,
    );
    assert_eq!((a.points, a.reasoning), (vec![[1.0, 2.0]], None));
    // Pre-filled think whose reasoning quotes the format: the <answer> block still wins.
    let a = ok(
        "format is <point>[[x1, y1]]</point></think><answer><point>[[5, 6]]</point></answer>",
        Ability::Reg,
    );
    assert_eq!(a.points, vec![[5.0, 6.0]]);
}
