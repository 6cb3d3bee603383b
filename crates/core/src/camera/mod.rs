//! Frames in: colour + aligned depth + intrinsics + where the camera is, from the simulator
//! (`sim::devices::SimCamera`) or from recorded-frame folders ([`replay::ReplayCamera`], written by
//! [`record::write_frame`]) and from RealSense devices ([`realsense`], the device itself behind the
//! `realsense` feature), and from another process's camera over loopback TCP ([`net`]).
//! Everything downstream takes a `Frame`, so a pointer or executor never knows which camera
//! produced it.

pub mod calibrated;
mod error;
mod frame;
pub mod image_file;
pub mod keyframes;
pub mod lift;
pub mod net;
pub mod realsense;
pub mod record;
pub mod replay;
mod spec;

pub use error::CameraError;
pub use frame::{Camera, Frame, RgbImage};
pub use spec::{open, CameraSpec, NO_REALSENSE};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camera_specs_parse_every_source() {
        let p = |s: &str| s.parse::<CameraSpec>();
        assert_eq!(p("sim").unwrap(), CameraSpec::Sim { task: None });
        assert_eq!(
            p("sim:bridge/carrot_on_plate").unwrap(),
            CameraSpec::Sim {
                task: Some("bridge/carrot_on_plate".into())
            }
        );
        assert_eq!(
            p("replay:/tmp/frames").unwrap(),
            CameraSpec::Replay {
                dir: "/tmp/frames".into()
            }
        );
        assert_eq!(
            p("realsense:123").unwrap(),
            CameraSpec::RealSense {
                serial: Some("123".into())
            }
        );
        assert_eq!(
            p("tcp:127.0.0.1:5600").unwrap(),
            CameraSpec::Tcp {
                addr: "127.0.0.1:5600".into()
            }
        );
        assert_eq!(
            p("tcp:[::1]:5600").unwrap(),
            CameraSpec::Tcp {
                addr: "[::1]:5600".into()
            }
        );
        // A frame server needs a host and a usable port.
        for bad in [
            "tcp:",
            "tcp:5600",
            "tcp::5600",
            "tcp:localhost:0",
            "tcp:localhost:99999",
        ] {
            assert!(
                p(bad).unwrap_err().to_string().contains("HOST:PORT"),
                "{bad}"
            );
        }
        // A folder is required, and unknown schemes are named.
        assert!(p("replay:").unwrap_err().to_string().contains("replay:DIR"));
        assert!(p("webcam:0").unwrap_err().to_string().contains("webcam"));
        // The simulator's camera is the runner's to open.
        assert!(matches!(
            open(&CameraSpec::Sim { task: None }),
            Err(CameraError::NotInThisBuild(_))
        ));
    }
}
