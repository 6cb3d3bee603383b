//! The four prompt templates against the text of Embodied-R1's official inference example
//! (pickxiguapi/Embodied-R1 at `e599e95`, `inference_example.py`, `CONF_MODE`), copied here
//! verbatim so the test does not read files outside the crate at run time.

use crate::Ability;

const REFERENCE_REG: &str = r#"Provide one or more points coordinate of objects region {instruction}. The results are presented in a format <point>[[x1,y1], [x2,y2], ...]</point>. You FIRST think about the reasoning process as an internal monologue and then provide the final answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags. The answer consists only of several coordinate points, with the overall format being: <think> reasoning process here </think><answer><point>[[x1, y1], [x2, y2], ...]</point></answer>"#;

const REFERENCE_OFG: &str = r#"Please provide the 2D points coordinate of the region this sentence describes: {instruction}. The results are presented in a format <point>[[x1,y1], [x2,y2], ...]</point>. You FIRST think about the reasoning process as an internal monologue and then provide the final answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags. The answer consists only of several coordinate points, with the overall format being: <think> reasoning process here </think><answer><point>[[x1, y1], [x2, y2], ...]</point></answer>"#;

const REFERENCE_RRG: &str = r#"You are currently a robot performing robotic manipulation tasks. The task instruction is: {instruction}. Use 2D points to mark the target location where the object you need to manipulate in the task should ultimately be moved. You FIRST think about the reasoning process as an internal monologue and then provide the final answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags. The answer consists only of several coordinate points, with the overall format being: <think> reasoning process here </think><answer><point>[[x1, y1], [x2, y2], ...]</point></answer>"#;

const REFERENCE_VTG: &str = r#"You are currently a robot performing robotic manipulation tasks. The task instruction is: {instruction}. Use 2D points to mark the manipulated object-centric waypoints to guide the robot to successfully complete the task. You must provide the points in the order of the trajectory, and the number of points must be 8. You FIRST think about the reasoning process as an internal monologue and then provide the final answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags. The answer consists only of several coordinate points, with the overall format being: <think> reasoning process here </think><answer><point>[[x1, y1], [x2, y2], ..., [x8, y8]]</point></answer>."#;

fn reference(ability: Ability) -> &'static str {
    match ability {
        Ability::Reg => REFERENCE_REG,
        Ability::Ofg => REFERENCE_OFG,
        Ability::Rrg => REFERENCE_RRG,
        Ability::Vtg => REFERENCE_VTG,
    }
}

#[test]
fn templates_match_reference_byte_for_byte() {
    for ability in Ability::ALL {
        assert_eq!(ability.template(), reference(ability), "{ability}");
    }
}

#[test]
fn prompt_fills_the_placeholder_like_python_format() {
    // The official example's instructions, one per ability.
    let cases = [
        (Ability::Vtg, "put the red block on top of the yellow block"),
        (Ability::Rrg, "put pepper in pan"),
        (Ability::Reg, "bring me the camel model"),
        (Ability::Ofg, "loosening stuck bolts"),
    ];
    for (ability, instruction) in cases {
        let expected = reference(ability).replace("{instruction}", instruction);
        assert_eq!(ability.prompt(instruction), expected);
        assert!(!ability.prompt(instruction).contains("{instruction}"));
    }
}

#[test]
fn exact_prompt_texts() {
    assert_eq!(
        Ability::Rrg.prompt("put pepper in pan"),
        "You are currently a robot performing robotic manipulation tasks. The task instruction is: put pepper in pan. Use 2D points to mark the target location where the object you need to manipulate in the task should ultimately be moved. You FIRST think about the reasoning process as an internal monologue and then provide the final answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags. The answer consists only of several coordinate points, with the overall format being: <think> reasoning process here </think><answer><point>[[x1, y1], [x2, y2], ...]</point></answer>"
    );
    assert!(Ability::Reg
        .prompt("bring me the camel model")
        .starts_with("Provide one or more points coordinate of objects region bring me the camel model. The results are presented in a format <point>[[x1,y1], [x2,y2], ...]</point>. "));
    assert!(Ability::Vtg
        .prompt("x")
        .ends_with("<answer><point>[[x1, y1], [x2, y2], ..., [x8, y8]]</point></answer>."));
    assert!(Ability::Ofg
        .prompt("loosening stuck bolts")
        .starts_with("Please provide the 2D points coordinate of the region this sentence describes: loosening stuck bolts. "));
}

#[test]
fn each_template_has_exactly_one_placeholder() {
    for ability in Ability::ALL {
        assert_eq!(
            ability.template().matches("{instruction}").count(),
            1,
            "{ability}"
        );
    }
}

#[test]
fn instruction_is_inserted_verbatim_and_not_rescanned() {
    let tricky = "  move {instruction} to {x} \n \u{1F600}\n";
    let p = Ability::Reg.prompt(tricky);
    assert!(p.contains(tricky));
    assert_eq!(
        p.len(),
        Ability::Reg.template().len() - "{instruction}".len() + tricky.len()
    );
    assert_eq!(
        Ability::Vtg.prompt(""),
        REFERENCE_VTG.replace("{instruction}", "")
    );
}

#[test]
fn from_str_and_display_round_trip_case_insensitively() {
    for ability in Ability::ALL {
        let code = ability.to_string();
        assert_eq!(code, code.to_lowercase());
        assert_eq!(code.parse::<Ability>(), Ok(ability));
        assert_eq!(code.to_uppercase().parse::<Ability>(), Ok(ability));
    }
    assert_eq!("Vtg".parse::<Ability>(), Ok(Ability::Vtg));
    assert_eq!("rRg".parse::<Ability>(), Ok(Ability::Rrg));
    for bad in ["", "reg ", " ofg", "point", "vt", "vtgg", "REG\n"] {
        let err = bad.parse::<Ability>().unwrap_err();
        assert_eq!(err.input, bad);
        assert!(err.to_string().contains("reg, rrg, ofg, vtg"));
    }
}

#[test]
fn descriptions_are_the_reference_headings() {
    assert_eq!(Ability::Reg.description(), "Referring Expression Grounding - Locating the coordinates of specified object regions within an image.");
    assert_eq!(Ability::Ofg.description(), "Object Affordance Grounding - Locating the 2D coordinates of specified object regions based on descriptions.");
    assert_eq!(Ability::Rrg.description(), "Region Referring Grounding - Locating specific spatial target locations for robotic manipulation tasks.");
    assert_eq!(Ability::Vtg.description(), "Visual Trace Generation - Generating waypoints centered on manipulated objects to guide robots to complete tasks.");
    for ability in Ability::ALL {
        assert!(!ability.description().contains('\n'));
    }
}

#[test]
fn only_vtg_fixes_the_point_count() {
    assert_eq!(Ability::Vtg.required_points(), Some(8));
    for ability in [Ability::Reg, Ability::Rrg, Ability::Ofg] {
        assert_eq!(ability.required_points(), None);
    }
}
