//! Policy server for SimplerEnv and other evaluators (WebSocket + msgpack, openpi array encoding).
//! The server itself is not built yet (a later issue); [`wire`] is the message encoding it will
//! speak, so that the stock `openpi-client` can drive it unchanged.

pub mod wire;
