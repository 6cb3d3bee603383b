//! Policy server for SimplerEnv and other evaluators: WebSocket + msgpack with openpi's array
//! encoding, so the stock `openpi-client` drives it unchanged (Physical-Intelligence/openpi:
//! `src/openpi/serving/websocket_policy_server.py`, `openpi_client/websocket_client_policy.py`).
//!
//! | module | holds |
//! | --- | --- |
//! | [`check`] | observations checked against themselves, actions against the controller's bounds |
//! | [`wire`] | the msgpack encoding, byte-identical to openpi's `packb`, bounded decoding |
//! | [`protocol`] | the messages (metadata, `reset`, `infer` → `action`, `episode_end`) as wire values |
//! | [`session`] | one episode: the runner's `run_task` with the evaluator as camera and robot |
//! | [`server`] | [`BridgeServer`]: connections, one episode each, errors kept per connection |
//! | [`client`] | [`BridgeClient`]: the evaluator's end in Rust (`eval bridge`, `bench bridge`) |
//!
//! | [`remote`] | the observation, the action and the episode's start: what both ends share |
//!
//! The bridge imports neither the simulator nor the runner: the pointer of each session comes from
//! a [`session::SessionPointers`] it is handed, and the evaluator side on the built-in simulator
//! (`runner::remote::run_remote_episode`) lives above it.

pub mod check;
pub(crate) mod client;
pub mod protocol;
pub mod remote;
pub(crate) mod server;
pub(crate) mod session;
pub(crate) mod wire;

pub use client::BridgeClient;
pub use server::{return_large_blocks_to_the_system, BridgeServer, ServerLimits};
pub use session::{SessionConfig, SessionPointers};
