//! The daemon (`softibd`): simulated hosts (an HCA each, with its control socket) and soft
//! switches, joined by cables, driven by one loop.
//!
//! One process can host a whole fabric — as ibsim does — while every node keeps its own ports,
//! cables (real UDP associations, which may cross machines) and agents. Each host has a runtime
//! directory holding `softibd.sock`; applications and tools of that host connect there.
//!
//! The loop is single-threaded: wait on every socket with `poll(2)` until something is
//! readable or the next timer is due, then receive frames into nodes, serve control requests,
//! fire timers, and send what the nodes have to send.
//!
//! # Where each part lives
//!
//! - `assembly`: building a daemon — hosts and switches from specs or from a topology (with
//!   each cable's rate), cable plans, the control socket's directory.
//! - `event_loop`: [`Daemon`] and its loop (`run`, `step`, `next_wait`, `wait`), [`Waker`],
//!   [`DaemonThread`].
//! - `switch_rt`: a soft switch's turn — frames in, forwarding by the LFT, frames out, link
//!   state to its SMA.
//! - `host_rt`: a host's turn — accepting clients, reading requests, replying, dropping
//!   clients — and `Host`, the part of a host the control handlers work on.
//! - `client`: a client — who it is, what it owns, what it waits for — and the reclamation of
//!   what it owned when it goes.
//! - `handlers`: the control requests, one named function each, grouped by concept; `handle`
//!   is the dispatch table.
//! - `rings`: the shared-memory rings — a client's submission ring drained into the engines,
//!   completions moved into completion rings.
//! - `events`: what clients learn without asking — asynchronous events of their objects,
//!   completion channels of armed CQs.
//! - `quarantine`: QPN blocks and keys of clients that went, held before reuse.
//! - `parked`: requests that wait (PollCq, RecvMads) and when they are answered.
//! - `liveness`: the heartbeat file that tells waiting clients the loop still turns.
//! - `admission`: who may do what — verbs for the users admitted, management for the
//!   owner and root.
//! - `oversight`: a RoCE device's faults and capture for the process engines on it, their
//!   captured packets and counters back.
//! - `mads`: MADs for local agents — responses to the agent that asked (TID owners), requests
//!   to the SM, the PMA, the SM's IsSM flag.

mod admission;
mod assembly;
mod client;
mod cm_routes;
mod event_loop;
mod events;
mod handlers;
mod host_rt;
mod liveness;
mod mads;
mod oversight;
mod parked;
mod peer_rings;
mod quarantine;
mod rings;
mod switch_rt;
#[cfg(test)]
mod testing;

pub use admission::Admission;
pub use assembly::{host_dir, CablePlan, CableSpec, HostSpec, SwitchSpec};
pub use event_loop::{Daemon, DaemonThread, Waker};
/// The name of the control socket in a runtime directory.
pub use softib_proto::SOCKET_NAME;
