//! `IncrementalRenderer` against `render`: byte for byte on every frame of an arm moving through a
//! scene (objects pushed and lifted on the way, moved out of sight and back, the fingers opening
//! and closing, a sensor model on), on a scene that did not change, and when the previous frame
//! cannot be reused; the depth it keeps equals the full render's, bit for bit. The scene is the physics world tests' seven objects.

use super::sim_physics_util::{model, scene_with};
use super::sim_physics_world::OBJECTS;
use crate::devices::{SharedWorld, SimCamera};
use crate::render::{render, IncrementalRenderer, RenderOptions};
use crate::SimWorld;
use k::nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};

#[test]
fn reusing_the_previous_frame_gives_the_full_render_byte_for_byte() {
    let m = model("xarm6");
    let mut world = SimWorld::new(&scene_with("xarm6", OBJECTS), m.clone()).unwrap();
    world.settle(1.0);
    let shared = SharedWorld::new(world);
    for options in [RenderOptions::default(), RenderOptions::realsense_like()] {
        let camera = SimCamera::new(shared.clone(), options.clone())
            .pinhole()
            .clone();
        let home = m.home().to_vec();
        let mut renderer = IncrementalRenderer::new(camera.clone(), options.clone());
        let mut previous: Option<(crate::RenderScene, Vec<u8>)> = None;
        let mut reused_pixels = 0usize;
        for j in 0..24 {
            {
                let mut w = shared.lock();
                let q: Vec<f64> = home
                    .iter()
                    .enumerate()
                    .map(|(i, &q)| q + 0.04 * j as f64 * if i % 2 == 0 { 1.0 } else { -0.5 })
                    .collect();
                w.set_robot(&q, if j % 6 < 3 { 1.0 } else { 0.0 }).unwrap();
                if j == 9 {
                    // An object moved by hand: its old and new places both change.
                    let p = w.object_pose("block").unwrap();
                    let moved = Isometry3::from_parts(
                        Translation3::from(p.translation.vector + Vector3::new(0.05, 0.1, 0.02)),
                        UnitQuaternion::from_euler_angles(0.0, 0.0, 0.4) * p.rotation,
                    );
                    w.set_object_pose("block", &moved).unwrap();
                }
                for _ in 0..5 {
                    w.step();
                }
            }
            let scene = shared.lock().render_scene();
            let whole = render(&scene, &camera, &options);
            let full = whole.rgb;
            let reused = renderer.render(&scene);
            assert!(reused == full, "frame {j} differs from the full render");
            let depth = renderer.depth();
            assert!(
                depth.len() == whole.depth_m.len()
                    && depth
                        .iter()
                        .zip(&whole.depth_m)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                "frame {j}: depth differs from the full render's"
            );
            if let Some((_, prev)) = &previous {
                reused_pixels += prev
                    .chunks(3)
                    .zip(full.chunks(3))
                    .filter(|(a, b)| a == b)
                    .count();
            }
            previous = Some((scene, full));
        }
        // The scene changed in part only: most pixels kept their colour from frame to frame.
        assert!(reused_pixels > 23 * 640 * 480 / 2, "{reused_pixels}");
        // An unchanged scene gives its previous image back; a scene of other primitives is drawn
        // whole.
        let (scene, rgb) = previous.unwrap();
        assert!(renderer.render(&scene) == rgb);
        let mut fewer = scene.clone();
        fewer.primitives.pop();
        let alone = render(&fewer, &camera, &options).rgb;
        assert!(renderer.render(&fewer) == alone);
        assert!(renderer.render(&scene) == rgb);
        // One primitive lifted out of sight alone (only its old rectangle changes), then back.
        let mut lifted = 0;
        for k in (1..scene.primitives.len()).step_by(5) {
            let mut gone = scene.clone();
            gone.primitives[k].world_from_shape.translation.vector.z += 100.0;
            let want = render(&gone, &camera, &options).rgb;
            lifted += usize::from(want != rgb);
            assert!(renderer.render(&gone) == want, "primitive {k} lifted away");
            assert!(renderer.render(&scene) == rgb, "primitive {k} put back");
        }
        assert!(
            lifted >= 3,
            "{lifted} of the lifted primitives were in sight"
        );
    }
}
