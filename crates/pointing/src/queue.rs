//! One pointer shared by many clients through a FIFO queue: the bridge serves many episodes at
//! once but holds one model (a 3B model is gigabytes and uses every core it is given), so requests
//! wait their turn on one worker thread instead of loading a model per connection or contending
//! for one behind a lock with no order.

use std::sync::mpsc;
use std::thread;

use super::{Ability, Pointer, PointerError, Pointing};
use pointact_core::camera::Frame;

struct Request {
    frame: Frame,
    ability: Ability,
    instruction: String,
    reply: mpsc::Sender<Result<Pointing, PointerError>>,
}

/// The worker thread that owns the backend; it ends when the queue and every handle are dropped.
pub struct PointerQueue {
    tx: mpsc::Sender<Request>,
    name: String,
}

impl PointerQueue {
    /// Moves `backend` onto its own thread.
    pub fn spawn(mut backend: Box<dyn Pointer + Send>) -> Result<Self, PointerError> {
        let name = backend.name().to_string();
        let (tx, rx) = mpsc::channel::<Request>();
        thread::Builder::new()
            .name(format!("pointer-{name}"))
            .spawn(move || {
                for r in rx {
                    let answer = backend.point(&r.frame, r.ability, &r.instruction);
                    // The asker may have gone (its connection closed): nothing to tell.
                    let _ = r.reply.send(answer);
                }
            })
            .map_err(|e| PointerError::Backend(format!("cannot start the pointer thread: {e}")))?;
        Ok(PointerQueue { tx, name })
    }

    /// A pointer that asks through the queue (cheap; one per connection).
    pub fn handle(&self) -> QueuedPointer {
        QueuedPointer {
            tx: self.tx.clone(),
            name: self.name.clone(),
        }
    }
}

/// A place in the queue: `point` blocks until the worker has answered every earlier request and
/// this one.
#[derive(Clone)]
pub struct QueuedPointer {
    tx: mpsc::Sender<Request>,
    name: String,
}

impl Pointer for QueuedPointer {
    fn name(&self) -> &str {
        &self.name
    }

    fn point(
        &mut self,
        frame: &Frame,
        ability: Ability,
        instruction: &str,
    ) -> Result<Pointing, PointerError> {
        let gone = || PointerError::Backend(format!("the shared {} pointer stopped", self.name));
        let (reply, answer) = mpsc::channel();
        self.tx
            .send(Request {
                frame: frame.clone(),
                ability,
                instruction: instruction.to_string(),
                reply,
            })
            .map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ImageSize, ModelImageMap};
    use pointact_core::geometry::{DepthImage, Intrinsics};
    use std::sync::{Arc, Mutex};

    /// Answers the instruction's number as a point, and logs the order it was asked in.
    struct Echo(Arc<Mutex<Vec<String>>>);

    impl Pointer for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        fn point(
            &mut self,
            frame: &Frame,
            ability: Ability,
            instruction: &str,
        ) -> Result<Pointing, PointerError> {
            self.0.lock().unwrap().push(instruction.to_string());
            if instruction == "fail" {
                return Err(PointerError::NoSuchObject {
                    phrase: instruction.into(),
                });
            }
            let n: u32 = instruction.parse().unwrap();
            let size = ImageSize::new(frame.depth.width as u32, frame.depth.height as u32);
            let raw = format!("<answer><point>[[{n}, 1]]</point></answer>");
            Pointing::parse(&raw, ability, ModelImageMap::new(size, size).unwrap())
        }
    }

    fn frame() -> Frame {
        Frame {
            rgb: pointact_core::camera::RgbImage::new(16, 8),
            depth: DepthImage {
                width: 16,
                height: 8,
                data: vec![1.0; 128],
            },
            intrinsics: Intrinsics::pinhole(16, 8, 10.0, 10.0, 8.0, 4.0),
            base_from_camera: Default::default(),
            stamp_s: 0.0,
        }
    }

    #[test]
    fn every_handle_gets_its_own_answer_and_errors_pass_through() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let queue = PointerQueue::spawn(Box::new(Echo(log.clone()))).unwrap();
        let threads: Vec<_> = (0..8u32)
            .map(|i| {
                let mut p = queue.handle();
                thread::spawn(move || {
                    let f = frame();
                    for k in 0..5u32 {
                        let n = i + k;
                        let got = p.point(&f, Ability::Reg, &n.to_string()).unwrap();
                        assert_eq!(got.points_px()[0][0], n as f64);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(log.lock().unwrap().len(), 40);
        let mut p = queue.handle();
        assert_eq!(p.name(), "echo");
        assert!(matches!(
            p.point(&frame(), Ability::Reg, "fail"),
            Err(PointerError::NoSuchObject { .. })
        ));
    }
}
