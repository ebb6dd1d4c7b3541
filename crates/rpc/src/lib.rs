//! A client for ggml-rpc servers (`rpc-server` of ggml 0.26.0, protocol 7), in safe Rust over
//! `std::net`.
//!
//! Upstream's client aborts the process when a server is missing, dies or answers badly, and
//! waits forever when a server stops answering. This one bounds every wait ([`Timeouts`])
//! and turns every failure into an [`Error`] that names the server, the command and the
//! cause; after one, the [`Client`] stays failed, because a stream cut in the middle of a
//! message cannot be resynchronised.
//!
//! * [`wire`]: the protocol's bytes (commands, the packed tensor [`WireTensor`], each
//!   request and reply, the graph message), encoded and decoded with size checks;
//! * [`client`]: one TCP connection and one method per command.
//!
//! It is a crate of its own: network I/O with no ties to ggml's types or the rest of the backend
//! layer, whose edge (`src/rpc` of the root crate) makes ggml objects of it. `cargo test` runs
//! its tests against a scripted server, and against upstream's `rpc-server` where
//! `GGML_BACKEND_RS_RPC_SERVER` names one.

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod client;
pub mod wire;

pub use client::{Cause, Client, Error, ErrorKind, RemoteBuffer, Step, Timeouts, Upload, Waiting};
pub use wire::{Command, DeviceMemory, GraphMsg, GraphPayload, Version, WireTensor};
