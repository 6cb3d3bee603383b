//! Policy server for SimplerEnv and other evaluators (WebSocket + msgpack). Not built yet: a later issue.
