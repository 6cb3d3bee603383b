//! The physics world on its own: resting heights, stacking, falling, determinism, and what it hands
//! the renderer.

use super::sim_physics_util::{model, scene_with, top_down, Mover};
use crate::{SimWorld, FIRST_OBJECT_INSTANCE, NO_PART, ROBOT_INSTANCE, TABLE_INSTANCE};
use k::nalgebra::{Isometry3, Translation3, UnitQuaternion};

/// Seven objects of every shape kind, some dropped from a height (also drawn by `render_reuse`).
pub(super) const OBJECTS: &str = r#"
[[objects]]
name = "block"
color = [0.8, 0.1, 0.1]
mass = 0.08
pose = [0.35, -0.2, 0.3]
shape = { kind = "block", size = [0.045, 0.045, 0.045] }
[[objects]]
name = "top_block"
color = [0.1, 0.1, 0.8]
mass = 0.08
pose = [0.35, -0.05, 0.0]
shape = { kind = "block", size = [0.045, 0.045, 0.045] }
[[objects]]
name = "can"
color = [0.8, 0.0, 0.0]
mass = 0.15
pose = [0.35, 0.12, 0.0]
shape = { kind = "cylinder", radius = 0.032, height = 0.11 }
[[objects]]
name = "orange"
color = [0.85, 0.28, 0.02]
mass = 0.12
pose = [0.55, -0.2, 0.0]
shape = { kind = "fruit", radius = 0.033 }
[[objects]]
name = "carrot"
color = [0.85, 0.3, 0.02]
mass = 0.06
pose = [0.55, 0.0, 0.8]
shape = { kind = "vegetable", radius = 0.017, length = 0.15 }
[[objects]]
name = "bowl"
color = [0.1, 0.4, 0.3]
mass = 0.3
pose = [0.55, 0.22, 0.0]
shape = { kind = "bowl", radius = 0.085, height = 0.065 }
[[objects]]
name = "knife"
aliases = ["knife"]
color = [0.03, 0.03, 0.03]
mass = 0.1
pose = [0.7, -0.1, 1.57]
shape = { kind = "knife", length = 0.22 }
"#;

fn world() -> SimWorld {
    SimWorld::new(&scene_with("xarm6", OBJECTS), model("xarm6")).unwrap()
}

fn lift(world: &mut SimWorld, name: &str, dz: f64, tilt: f64) {
    let p = world.object_pose(name).unwrap();
    let pose = Isometry3::from_parts(
        Translation3::from(p.translation.vector + k::nalgebra::Vector3::z() * dz),
        UnitQuaternion::from_euler_angles(tilt, 0.5 * tilt, 0.3) * p.rotation,
    );
    world.set_object_pose(name, &pose).unwrap();
}

#[test]
fn dropped_objects_come_to_rest_on_the_table() {
    let mut world = world();
    // Everything except the stacking pair drops from 5 cm, slightly tilted.
    for name in ["block", "can", "orange", "carrot", "bowl", "knife"] {
        lift(&mut world, name, 0.05, 0.1);
    }
    lift(&mut world, "top_block", 0.05, 0.0);
    assert!(world.settle(4.0), "objects did not settle");
    for name in world.object_names() {
        let (lo, _) = world.object_aabb(name).unwrap();
        assert!(
            lo.z.abs() < 0.002,
            "{name} rests with its lowest point at {:.4} m",
            lo.z
        );
    }
    // Upright things stay upright.
    for name in ["block", "can", "bowl"] {
        let tilt = world.object_pose(name).unwrap().rotation * k::nalgebra::Vector3::z();
        assert!(tilt.z > 0.99, "{name} tipped over");
    }
}

#[test]
fn a_stacked_block_stays_and_a_released_one_falls() {
    let mut world = world();
    world.settle(1.0);
    let base = world.object_pose("block").unwrap();
    let on_top = base * Isometry3::translation(0.0, 0.0, 0.0455);
    world.set_object_pose("top_block", &on_top).unwrap();
    world.step_for(2.0);
    let after = world.object_pose("top_block").unwrap();
    assert!(
        (after.translation.vector - on_top.translation.vector).norm() < 0.002,
        "the stacked block moved to {:?}",
        after.translation.vector
    );
    assert!(world
        .contacts_of("top_block")
        .iter()
        .any(|c| matches!(&c.with, crate::ContactWith::Object { name, .. } if name == "block")));

    // Let go of it 20 cm up: free fall (0.1 s → 4.9 cm), then rest on the table.
    let high = Isometry3::translation(0.45, -0.1, 0.2);
    world.set_object_pose("top_block", &high).unwrap();
    world.step_for(0.1);
    let z = world.object_pose("top_block").unwrap().translation.z;
    assert!(
        (0.2 - z - 0.049).abs() < 0.004,
        "fell {:.4} m in 0.1 s",
        0.2 - z
    );
    assert!(world.settle(3.0));
    let (lo, _) = world.object_aabb("top_block").unwrap();
    assert!(lo.z.abs() < 0.002);
}

#[test]
fn same_commands_give_identical_worlds() {
    let run = || {
        let mut world = world();
        let mut m = Mover::new(&world);
        // Sweep through the can and the top block with the hand low.
        m.teleport(&mut world, &top_down("xarm6", 0.35, -0.12, 0.12, 0.0), 1.0);
        m.go(
            &mut world,
            &top_down("xarm6", 0.35, -0.12, 0.03, 0.0),
            1.0,
            0.5,
        );
        m.go(
            &mut world,
            &top_down("xarm6", 0.35, 0.2, 0.03, 0.0),
            0.5,
            1.0,
        );
        world.settle(2.0);
        world
            .object_names()
            .iter()
            .map(|n| world.object_pose(n).unwrap())
            .collect::<Vec<_>>()
    };
    let a = run();
    assert_eq!(a, run());
    // The sweep did push something.
    let fresh = world();
    let moved = fresh.object_names().iter().zip(&a).any(|(n, p)| {
        (fresh.object_pose(n).unwrap().translation.vector - p.translation.vector).norm() > 0.02
    });
    assert!(moved);
}

#[test]
fn render_scene_names_the_table_objects_parts_and_robot() {
    let world = world();
    let rs = world.render_scene();
    let table: Vec<_> = rs
        .primitives
        .iter()
        .filter(|p| p.instance == TABLE_INSTANCE)
        .collect();
    assert_eq!(table.len(), 1);
    assert!(table[0].world_from_shape.translation.z < 0.0);
    assert!(rs.primitives.iter().any(|p| p.instance == ROBOT_INSTANCE));
    for (i, name) in world.object_names().iter().enumerate() {
        let inst = world.instance_of(name).unwrap();
        assert_eq!(inst, FIRST_OBJECT_INSTANCE + i as u16);
        assert_eq!(world.object_of_instance(inst), Some(*name));
        let obj = world.object(name).unwrap();
        let prims: Vec<_> = rs
            .primitives
            .iter()
            .filter(|p| p.instance == inst)
            .collect();
        assert_eq!(prims.len(), obj.primitives.len(), "{name}");
        for p in prims {
            assert!(p.part != NO_PART && usize::from(p.part) <= obj.parts.len());
        }
    }
    let handle = world.part_id("knife", "handle").unwrap();
    let blade = world.part_id("knife", "blade").unwrap();
    assert_ne!(handle, blade);
    let knife = world.instance_of("knife").unwrap();
    assert!(rs
        .primitives
        .iter()
        .any(|p| p.instance == knife && p.part == blade && p.color != p.color.map(|_| 0.03)));
    // The knife's handle is drawn where the scene says it is.
    let pose = world.object_pose("knife").unwrap();
    let centre = pose
        * world
            .object("knife")
            .unwrap()
            .part_center("handle")
            .unwrap();
    assert!(rs.primitives.iter().any(|p| p.instance == knife
        && p.part == handle
        && (p.world_from_shape.translation.vector - centre.coords).norm() < 1e-6));
}

/// The network camera's frame limit (`camera::net::MAX_SIDE`) is the scene's image limit: a scene
/// camera the simulator accepts can always be served.
#[test]
fn the_network_cameras_frame_limit_is_the_scenes_image_limit() {
    assert_eq!(
        pointact_core::camera::net::MAX_SIDE,
        crate::scene::MAX_IMAGE_SIDE
    );
}
