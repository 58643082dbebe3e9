//! `softib` — the verbs API for Rust applications.
//!
//! A [`Context`] is a session with the HCA daemon (`softibd`) of this host, found through its
//! runtime directory ([`runtime_dir`]). Control verbs (allocate a PD, register memory, create
//! CQs and QPs, modify QPs) are requests on the daemon's control socket, like the kernel's
//! uverbs commands; registered memory is a [`Buffer`] the daemon maps too, so the HCA reads and
//! writes it directly. Everything a context created is reclaimed by the daemon when the context
//! is dropped or the process dies.
//!
//! Two levels: [`Device`] and the objects it makes ([`ProtectionDomain`], [`MemoryRegion`],
//! [`CompletionQueue`], [`QueuePair`]) own what they created and release it when dropped, and
//! [`QueuePair::connect`] does the state transitions from an [`Endpoint`] the peer sent;
//! [`Context`] is the verbs one request at a time, with handles, as tools need them.
//! With the cargo feature `embedded`, `embedded::EmbeddedDaemon` runs the HCA inside the
//! process (tests, single programs); without it this crate links no part of the daemon.
//!
//! [`Context::open`] can also drive a real RDMA device through rdma-core's `libibverbs.so.1`,
//! loaded at run time (`SOFTIB_BACKEND=rdma-core`, or automatically when no daemon answers and
//! libibverbs lists a device; [`Context::open_rdma_core`]): the verbs tools use work the same,
//! and what only softib has is refused with [`Error::RdmaCore`] naming it.
//!
//! The types of work requests, completions and QP attributes are the engine's
//! ([`softib_engine::verbs`], [`softib_engine::QpAttr`], ...), re-exported here.
#![deny(missing_docs)]

use std::path::PathBuf;

use softib_net::shm::SharedRegion;

pub use softib_engine::verbs::{
    AccessFlags, AsyncEvent, QpState, QpType, RecvWr, RemoteAddr, SendFlags, SendWr, Sge, UdDest,
    WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
pub use softib_engine::{
    AddressVector, AhHandle, AttrMask, CqHandle, DeviceAttr, GlobalRoute, PdHandle, QpAttr, QpCap,
    QpInitAttr, SrqHandle,
};
pub use softib_net::fault::{FaultSpec, FaultStats};
pub use softib_proto::{
    runtime_dir, ClientResources, DeviceInfo, ErrorKind, LinkConfig, Mad, MadQp, PortInfo,
    VerbsAttr, VerbsPortAttr,
};
pub use softib_wire::{Gid, Guid, Lid, Mtu, Psn, QKey, Qpn, RKey};

mod channel;
mod context;
mod daemon;
#[cfg(feature = "embedded")]
pub mod embedded;
pub mod mad;
mod objects;
mod provider;
mod rdma_core;
pub mod typed;
pub mod verbs_attr;

pub use channel::CompChannel;
pub use context::Context;
pub use daemon::DaemonState;
pub use objects::{
    AddressHandle, CompletionQueue, Device, Endpoint, MemoryRegion, ProtectionDomain, QueuePair,
    SharedReceiveQueue,
};
pub use provider::pause::{pause as pause_progress, ProgressPause};
pub use provider::{DataPath, ProcessCounters};

/// The Q_Key softib's objects use on UD QPs (perftest's and the pingpong examples' 0x11111111).
pub const UD_QKEY: u32 = 0x1111_1111;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No daemon serves this host (and, when the backend was chosen automatically, no
    /// rdma-core device either).
    #[error("cannot reach softibd at {path}: {source} (start it with `softib daemon`, or `softib fabric up`, or set SOFTIB_RUNTIME_DIR){rdma_core}")]
    NoDaemon {
        /// The socket tried.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
        /// Why the rdma-core backend was not used instead (empty, or "; ..." to append).
        rdma_core: String,
    },
    /// The rdma-core backend (`SOFTIB_BACKEND=rdma-core`): libibverbs is missing, lists no
    /// device, a verb failed, or the operation exists only on softib devices.
    #[error("{0}")]
    RdmaCore(String),
    /// The daemon refused the request.
    #[error("{message}")]
    Refused {
        /// The class of error.
        kind: ErrorKind,
        /// The daemon's explanation.
        message: String,
    },
    /// The daemon went away (stopped, restarted or killed) while this program used it.
    #[error("softibd (pid {pid}) closed the connection: it stopped or restarted, and every object this program made on it is gone; open the device again (after `softib daemon` is back)")]
    DaemonGone {
        /// The daemon's process id.
        pid: u32,
    },
    /// The daemon stopped answering: its heartbeat has not changed for 4 s while this program
    /// waited on it (the connection is open: a suspended, hung or dying daemon).
    #[error("softibd (pid {pid}) has stopped answering (state: {state}); {hint}", hint = state.hint(*pid))]
    DaemonUnresponsive {
        /// The daemon's process id.
        pid: u32,
        /// What the kernel says of it.
        state: DaemonState,
    },
    /// The connection failed.
    #[error("softibd connection: {0}")]
    Io(#[from] std::io::Error),
    /// The daemon answered something that does not fit the request.
    #[error("softibd answered {0} to a request that expects something else")]
    Unexpected(&'static str),
}

/// A result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// A memory buffer shared with the HCA: what memory regions are registered on.
#[derive(Debug)]
pub struct Buffer {
    map: SharedRegion,
    /// The daemon's handle of it (0 on rdma-core, which pins it when it is registered).
    id: u64,
}

impl Buffer {
    /// Its address (what work requests name).
    pub fn addr(&self) -> u64 {
        self.map.addr()
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it is empty (never).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.map.as_slice()
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.map.as_mut_slice()
    }

    /// Reads bytes at `offset` without taking a reference into memory the HCA may be writing
    /// (what a poller of a buffer should use).
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> bool {
        self.map.read(offset, dst).is_ok()
    }

    /// Writes bytes at `offset`, the last byte last.
    pub fn write(&self, offset: usize, src: &[u8]) -> bool {
        self.map.write(offset, src).is_ok()
    }
}

/// The keys and extent of a registered memory region (what [`Context::reg_mr`] returns; the
/// owning type is [`MemoryRegion`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrKeys {
    /// L_Key.
    pub lkey: u32,
    /// R_Key.
    pub rkey: u32,
    /// First address.
    pub addr: u64,
    /// Length.
    pub len: u64,
}
