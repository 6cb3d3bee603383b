//! Pointing protocol.
