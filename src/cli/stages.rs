//! How `run` prints the stages of a task: one line per event, in the
//! layout the README and docs/simulator.md show.

use pointact::executor::{Event, Step};

use super::end_stream;

pub fn print_event(e: &Event<'_>) {
    end_stream();
    match e {
        Event::Instruction(i) => println!("instruct  {i}"),
        Event::Captured(f) => println!(
            "camera    {}x{} RGB-D, {} valid depth pixels",
            f.depth.width,
            f.depth.height,
            f.depth.valid_count()
        ),
        Event::TableHeight(z) => println!("table     z = {z:.4} m"),
        Event::Obstacles { count } => {
            println!("obstacles {count} occupied 3 cm voxels on the table")
        }
        Event::Asked {
            ability,
            query,
            pointing,
        } => {
            let pts: Vec<String> = pointing
                .points_px()
                .iter()
                .map(|p| format!("({:.0}, {:.0})", p[0], p[1]))
                .collect();
            println!(
                "{:<9} `{query}` -> {}",
                ability.as_str().to_uppercase(),
                pts.join(" ")
            );
            if let Some(r) = &pointing.answer.reasoning {
                println!("          think: {r}");
            }
        }
        Event::Corrected(c) => println!("{}", pointact::executor::correct::correction_line(c)),
        Event::Planned(plan) => {
            let t = &plan.targets;
            if let Some(g) = t.grasp {
                let v = g.translation.vector;
                println!("grasp     ({:.3}, {:.3}, {:.3}) m", v.x, v.y, v.z);
            }
            if let Some(p) = t.place {
                let v = p.translation.vector;
                println!("place     ({:.3}, {:.3}, {:.3}) m", v.x, v.y, v.z);
            }
            if !t.trace.is_empty() {
                let pts: Vec<String> = t
                    .trace
                    .iter()
                    .map(|p| format!("({:.2}, {:.2}, {:.2})", p.x, p.y, p.z))
                    .collect();
                println!("trace     {}", pts.join(" "));
            }
            for (i, s) in plan.steps.iter().enumerate() {
                match s {
                    Step::Move {
                        label, trajectory, ..
                    } => {
                        println!("plan {i:>2}   {label:<24} {:.2} s", trajectory.duration())
                    }
                    Step::Gripper { label, width, .. } => {
                        println!("plan {i:>2}   {label:<24} gripper -> {:.1} mm", width * 1e3)
                    }
                }
            }
        }
        Event::Checked { steps } => println!("safety    all {steps} steps passed the gate"),
        Event::DryRun => println!("dry run   nothing will move"),
        Event::Step { index, label } => println!("execute {index:>2} {label}"),
        Event::GraspHeld { width } => println!("grasp     held, fingers at {:.1} mm", width * 1e3),
        Event::Retry { why, attempt } => println!("retry     attempt {attempt}: {why}"),
        Event::Verified(v) => println!("verify    {}", v.line()),
        // Robot states are for the rerun log; the step lines already say what moved.
        Event::Robot { .. } | Event::Moved { .. } => {}
    }
}
