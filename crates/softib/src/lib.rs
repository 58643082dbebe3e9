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
//! [`embedded::EmbeddedDaemon`] runs the HCA inside the process (tests, single programs).
//!
//! [`Context::open`] can also drive a real RDMA device through rdma-core's `libibverbs.so.1`,
//! loaded at run time (`SOFTIB_BACKEND=rdma-core`, or automatically when no daemon answers and
//! libibverbs lists a device; [`Context::open_rdma_core`]): the verbs tools use work the same,
//! and what only softib has is refused with [`Error::RdmaCore`] naming it.
//!
//! The types of work requests, completions and QP attributes are the engine's
//! ([`softib_engine::verbs`], [`softib_engine::QpAttr`], ...), re-exported here.
#![deny(missing_docs)]

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use softib_engine::verbs::{
    AccessFlags, AsyncEvent, QpState, QpType, RecvWr, RemoteAddr, SendFlags, SendWr, Sge, UdDest,
    WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
pub use softib_engine::{
    AddressVector, AhHandle, AttrMask, CqHandle, DeviceAttr, GlobalRoute, PdHandle, QpAttr, QpCap,
    QpInitAttr, SrqHandle,
};
pub use softib_hca::device::LinkConfig;
pub use softib_hca::ib::MadQp;
pub use softib_hca::proto::{
    ClientResources, DeviceInfo, ErrorKind, Mad, PortInfo, VerbsAttr, VerbsPortAttr,
};
pub use softib_net::fault::{FaultSpec, FaultStats};
pub use softib_wire::{Gid, Guid, Lid, Mtu, Psn, QKey, Qpn, RKey};

use softib_hca::proto::{self, Request, Response};

mod channel;
pub mod embedded;
mod objects;
mod rdma_core;
pub mod typed;
pub mod verbs_attr;

pub use channel::CompChannel;
pub use objects::{
    AddressHandle, CompletionQueue, Device, Endpoint, MemoryRegion, ProtectionDomain, QueuePair,
    SharedReceiveQueue,
};

/// The Q_Key softib's objects use on UD QPs (perftest's and the pingpong examples' 0x11111111).
pub const UD_QKEY: u32 = 0x1111_1111;
use softib_net::shm::SharedRegion;

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
    /// The connection failed.
    #[error("softibd connection: {0}")]
    Io(#[from] std::io::Error),
    /// The daemon answered something that does not fit the request.
    #[error("softibd answered {0} to a request that expects something else")]
    Unexpected(&'static str),
}

/// A result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// The runtime directory of this host's daemon: `$SOFTIB_RUNTIME_DIR`, else `/run/softib` for
/// root, else `$XDG_RUNTIME_DIR/softib`, else `/tmp/softib-<uid>`.
pub fn runtime_dir() -> PathBuf {
    softib_hca::runtime_dir()
}

/// A memory buffer shared with the HCA: what memory regions are registered on.
#[derive(Debug)]
pub struct Buffer {
    map: SharedRegion,
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

/// A session with the daemon.
#[derive(Debug)]
pub struct Context {
    /// The daemon's control socket (`None` on the rdma-core backend).
    stream: Option<UnixStream>,
    /// The rdma-core backend, when this context drives a real RDMA device through libibverbs.
    rdma: Option<Box<rdma_core::Backend>>,
    host: String,
    daemon_pid: u32,
    /// Completion rings by (device, CQ): polled without a request.
    cq_rings: std::collections::BTreeMap<(u32, u32), softib_net::ring::Ring>,
    ring_buf: Vec<u8>,
    /// What the library knows of each QP it made, to check a post as the verb does before
    /// the WR goes into the submission ring.
    qps: std::collections::BTreeMap<(u32, Qpn), QpTrack>,
    /// The submission ring and its doorbell (made at the first post that can use it).
    submit: Option<(softib_net::ring::Ring, std::os::fd::OwnedFd)>,
    /// The submission ring is not used (SOFTIB_SUBMIT_RING=0, or the daemon refused it).
    submit_off: bool,
    /// Polls in a row that found nothing (see `poll_cq`).
    empty_polls: u32,
    /// The eventfd the daemon adds to when it puts completions into a ring of this context
    /// while the context sleeps (made the first time a poll sleeps).
    wakeup: Option<OwnedFd>,
    /// No wakeup eventfd (SOFTIB_WAKEUP=0, or the daemon refused it: an older one); polls
    /// park in the daemon.
    wakeup_off: bool,
    /// Scratch for the entries of a post (see [`Encoded`]).
    encoded: Encoded,
}

/// Empty busy polls (each after a yield) before a poll sleeps (see `sleep_for_completion`).
const SPINS_BEFORE_BLOCKING: u32 = 200;
/// How long a poll that may wait looks at the completion ring before it sleeps.
const SPIN_BEFORE_WAITING: Duration = Duration::from_micros(200);
/// How long such a poll may block (it returns as soon as a completion arrives).
const BLOCK_US: u32 = 1000;

/// Slots of the submission ring.
const SUBMIT_SLOTS: u32 = 4096;

fn ring_broken(e: &softib_net::ring::RingError) -> Error {
    Error::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("the submission ring is broken: {e:?}"),
    ))
}

/// A QP as the library sees it: enough to check `ibv_post_*` without asking the daemon.
#[derive(Debug)]
struct QpTrack {
    qp_type: QpType,
    cap: QpCap,
    sig_all: bool,
    srq: bool,
    state: QpState,
    /// Posted send WRs whose completion has not been polled: (wr_id, signaled). A send
    /// queue slot is free again once the completion of its WR, or of a later signaled WR, is
    /// polled — as on hardware, where the library advances the queue when it polls.
    sq: std::collections::VecDeque<(u64, bool)>,
    /// Posted receives whose completion has not been polled.
    rq: u32,
}

impl Context {
    /// Opens the verbs of this host: the softib daemon ([`runtime_dir`]) or, through
    /// rdma-core's libibverbs (loaded at run time), the host's real RDMA devices.
    ///
    /// `SOFTIB_BACKEND=softib` forces the daemon, `SOFTIB_BACKEND=rdma-core` libibverbs; unset,
    /// the daemon when its socket answers, else rdma-core when libibverbs loads and lists a
    /// device.
    pub fn open() -> Result<Context> {
        match std::env::var("SOFTIB_BACKEND").as_deref() {
            Ok("rdma-core") | Ok("rdma_core") | Ok("ibverbs") => Context::open_rdma_core(),
            Ok("softib") | Ok("") | Err(std::env::VarError::NotPresent) => {
                let forced = std::env::var_os("SOFTIB_BACKEND").is_some_and(|v| v == "softib");
                match Context::open_at(&runtime_dir()) {
                    Err(Error::NoDaemon { path, source, .. }) if !forced => {
                        match rdma_core::probe() {
                            Ok(()) => Context::open_rdma_core(),
                            Err(why) => Err(Error::NoDaemon {
                                path,
                                source,
                                rdma_core: format!(
                                    "; no rdma-core device either: {why} \
                                     (SOFTIB_BACKEND=rdma-core forces libibverbs)"
                                ),
                            }),
                        }
                    }
                    r => r,
                }
            }
            Ok(other) => Err(Error::RdmaCore(format!(
                "SOFTIB_BACKEND={other}: unknown backend (softib: the softib daemon; \
                 rdma-core: a real RDMA device through libibverbs)"
            ))),
            Err(e) => Err(Error::RdmaCore(format!("SOFTIB_BACKEND: {e}"))),
        }
    }

    /// Opens the host's real RDMA devices through rdma-core's libibverbs (loaded at run
    /// time). The verbs the tools use work as on softib devices; what only softib has (fault
    /// injection, capture, links, MADs, SRQs, completion channels) is refused with an error
    /// saying so.
    pub fn open_rdma_core() -> Result<Context> {
        let backend = rdma_core::Backend::open()?;
        Ok(Context {
            stream: None,
            rdma: Some(Box::new(backend)),
            host: String::new(),
            daemon_pid: 0,
            cq_rings: std::collections::BTreeMap::new(),
            ring_buf: Vec::new(),
            qps: std::collections::BTreeMap::new(),
            submit: None,
            submit_off: true,
            empty_polls: 0,
            wakeup: None,
            wakeup_off: true,
            encoded: Encoded::default(),
        })
    }

    /// Whether this context drives a real RDMA device through rdma-core (not softibd).
    pub fn is_rdma_core(&self) -> bool {
        self.rdma.is_some()
    }

    /// Connects to the daemon whose runtime directory is `dir`.
    pub fn open_at(dir: &Path) -> Result<Context> {
        let path = dir.join(softib_hca::host::SOCKET_NAME);
        let stream = UnixStream::connect(&path).map_err(|source| Error::NoDaemon {
            path: path.clone(),
            source,
            rdma_core: String::new(),
        })?;
        let mut ctx = Context {
            stream: Some(stream),
            rdma: None,
            host: String::new(),
            daemon_pid: 0,
            cq_rings: std::collections::BTreeMap::new(),
            ring_buf: Vec::new(),
            qps: std::collections::BTreeMap::new(),
            submit: None,
            submit_off: std::env::var_os("SOFTIB_SUBMIT_RING").is_some_and(|v| v == "0"),
            empty_polls: 0,
            wakeup: None,
            // SOFTIB_WAKEUP=0 sleeps as with an older daemon (a parked PollCq), to compare.
            wakeup_off: std::env::var_os("SOFTIB_WAKEUP").is_some_and(|v| v == "0"),
            encoded: Encoded::default(),
        };
        let program = std::env::args()
            .next()
            .and_then(|a| {
                Path::new(&a)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
            })
            .unwrap_or_default();
        match ctx.call(&Request::Hello {
            version: proto::VERSION,
            pid: std::process::id(),
            program,
        })? {
            Response::Hello { host, pid, .. } => {
                ctx.host = host;
                ctx.daemon_pid = pid;
                Ok(ctx)
            }
            _ => Err(Error::Unexpected("not Hello")),
        }
    }

    /// The host name the daemon serves.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The daemon's process id.
    pub fn daemon_pid(&self) -> u32 {
        self.daemon_pid
    }

    fn call(&mut self, req: &Request) -> Result<Response> {
        self.call_with_fds(req, &[])
    }

    fn call_with_fds(
        &mut self,
        req: &Request,
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) -> Result<Response> {
        let gone = |e: std::io::Error, pid: u32| match e.kind() {
            std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionReset => Error::DaemonGone { pid },
            _ => Error::Io(e),
        };
        let pid = self.daemon_pid;
        let Some(stream) = self.stream.as_mut() else {
            // Only the daemon serves requests: this is a softib-only operation.
            let name: String = format!("{req:?}")
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            return Err(Error::RdmaCore(format!(
                "{name} is a softib feature, not available on an rdma-core device \
                 (SOFTIB_BACKEND=rdma-core, or no softibd was running); run it against softibd \
                 (SOFTIB_BACKEND=softib)"
            )));
        };
        proto::send(stream, req, fds).map_err(|e| gone(e, pid))?;
        let body = proto::recv_blocking(stream).map_err(|e| gone(e, pid))?;
        match proto::decode::<Response>(&body) {
            Ok(Response::Error { kind, message }) => Err(Error::Refused { kind, message }),
            Ok(r) => Ok(r),
            Err(m) => Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                m,
            ))),
        }
    }

    fn ok(&mut self, req: &Request) -> Result<()> {
        match self.call(req)? {
            Response::Ok => Ok(()),
            _ => Err(Error::Unexpected("not Ok")),
        }
    }

    fn handle(&mut self, req: &Request) -> Result<u64> {
        match self.call(req)? {
            Response::Handle(h) => Ok(h),
            _ => Err(Error::Unexpected("not a handle")),
        }
    }

    /// The devices of this host (`ibv_get_device_list` + `ibv_query_device` + ports).
    pub fn devices(&mut self) -> Result<Vec<DeviceInfo>> {
        if let Some(r) = self.rdma.as_mut() {
            return r.devices();
        }
        match self.call(&Request::ListDevices)? {
            Response::Devices(d) => Ok(d),
            _ => Err(Error::Unexpected("not a device list")),
        }
    }

    /// Allocates a buffer of `len` bytes shared with the HCA.
    pub fn alloc_buffer(&mut self, len: usize) -> Result<Buffer> {
        if self.rdma.is_some() {
            // Plain process memory: the rdma-core device pins it when it is registered.
            let map = SharedRegion::create("softib-buffer", len)?;
            return Ok(Buffer { map, id: 0 });
        }
        let map = SharedRegion::create("softib-buffer", len)?;
        let req = Request::AttachBuffer {
            len: map.len() as u64,
            addr: map.addr(),
        };
        let id = match self.call_with_fds(&req, &[map.fd()])? {
            Response::Handle(h) => h,
            _ => return Err(Error::Unexpected("not a handle")),
        };
        Ok(Buffer { map, id })
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self, dev: u32) -> Result<PdHandle> {
        if let Some(r) = self.rdma.as_mut() {
            return r.alloc_pd(dev);
        }
        let h = self.handle(&Request::AllocPd { dev })?;
        Ok(PdHandle(h as u32))
    }

    /// `ibv_dealloc_pd`.
    pub fn dealloc_pd(&mut self, dev: u32, pd: PdHandle) -> Result<()> {
        if let Some(r) = self.rdma.as_mut() {
            return r.dealloc_pd(dev, pd);
        }
        self.ok(&Request::DeallocPd { dev, pd: pd.0 })
    }

    /// `ibv_reg_mr` over `len` bytes of `buffer` from `offset`.
    pub fn reg_mr(
        &mut self,
        dev: u32,
        pd: PdHandle,
        buffer: &Buffer,
        offset: usize,
        len: usize,
        access: AccessFlags,
    ) -> Result<MrKeys> {
        let addr = buffer.addr() + offset as u64;
        if let Some(r) = self.rdma.as_mut() {
            if offset.checked_add(len).is_none_or(|end| end > buffer.len()) {
                return Err(Error::RdmaCore(format!(
                    "ibv_reg_mr: {len} bytes from offset {offset} do not fit the buffer of {} bytes",
                    buffer.len()
                )));
            }
            return r.reg_mr(dev, pd, addr, len, access);
        }
        self.reg_mr_shared(dev, pd, buffer.id, addr, len, access)
    }

    /// `ibv_reg_mr` of this process's own memory — any `len` bytes at `addr`, not a buffer
    /// from [`Context::alloc_buffer`]. The daemon reaches it with cross-memory attach (the
    /// library first allows the daemon to, with `prctl(PR_SET_PTRACER)`), so each access costs
    /// a system call in the daemon: shared buffers are faster.
    ///
    /// The memory must stay valid until the region is deregistered (the owned API's
    /// [`ProtectionDomain::register_slice`] makes the borrow checker see to it).
    pub fn reg_mr_process(
        &mut self,
        dev: u32,
        pd: PdHandle,
        addr: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<MrKeys> {
        if let Some(r) = self.rdma.as_mut() {
            return r.reg_mr(dev, pd, addr, len, access);
        }
        if let Some(pid) = rustix::process::Pid::from_raw(self.daemon_pid as i32) {
            // Under Yama ptrace_scope 1 the daemon (not our parent) needs this; where Yama is
            // absent the call fails harmlessly and the user check applies.
            let _ = rustix::process::set_ptracer(rustix::process::PTracer::ProcessID(pid));
        }
        match self.call(&Request::RegMrProcess {
            dev,
            pd: pd.0,
            addr,
            len: len as u64,
            access,
        })? {
            Response::Mr { lkey, rkey } => Ok(MrKeys {
                lkey,
                rkey,
                addr,
                len: len as u64,
            }),
            _ => Err(Error::Unexpected("not an MR")),
        }
    }

    /// Shares `len` bytes of this process's memory at `addr` with the daemon as a buffer: a
    /// memory file `fd` the caller has mapped there (`MAP_SHARED`, from offset 0), which the
    /// daemon maps too, so that regions in it are reached as [`Buffer`]s are (directly, not
    /// by cross-memory attach). Returns the handle [`Context::reg_mr_shared`] takes.
    pub fn attach_shared(
        &mut self,
        fd: std::os::fd::BorrowedFd<'_>,
        addr: u64,
        len: usize,
    ) -> Result<u64> {
        if self.rdma.is_some() {
            return Err(Error::RdmaCore(
                "shared buffers are a softib feature, not an rdma-core one".into(),
            ));
        }
        let req = Request::AttachBuffer {
            len: len as u64,
            addr,
        };
        match self.call_with_fds(&req, &[fd])? {
            Response::Handle(h) => Ok(h),
            _ => Err(Error::Unexpected("not a handle")),
        }
    }

    /// `ibv_reg_mr` of `len` bytes at `addr` inside memory shared with
    /// [`Context::attach_shared`] (`buffer` its handle).
    pub fn reg_mr_shared(
        &mut self,
        dev: u32,
        pd: PdHandle,
        buffer: u64,
        addr: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<MrKeys> {
        match self.call(&Request::RegMr {
            dev,
            pd: pd.0,
            buffer,
            addr,
            len: len as u64,
            access,
        })? {
            Response::Mr { lkey, rkey } => Ok(MrKeys {
                lkey,
                rkey,
                addr,
                len: len as u64,
            }),
            _ => Err(Error::Unexpected("not an MR")),
        }
    }

    /// `ibv_dereg_mr`.
    pub fn dereg_mr(&mut self, dev: u32, mr: &MrKeys) -> Result<()> {
        if let Some(r) = self.rdma.as_mut() {
            return r.dereg_mr(dev, mr.lkey);
        }
        self.ok(&Request::DeregMr { dev, lkey: mr.lkey })
    }

    /// `ibv_create_cq`.
    ///
    /// The CQ's completions come through a ring in memory shared with the daemon, so polling
    /// it is a load, not a request (as a hardware CQ is polled in host memory).
    pub fn create_cq(&mut self, dev: u32, cqe: u32) -> Result<CqHandle> {
        if let Some(r) = self.rdma.as_mut() {
            return r.create_cq(dev, cqe);
        }
        let h = self.handle(&Request::CreateCq { dev, cqe })?;
        let cq = h as u32;
        // SOFTIB_CQ_RING=0 turns the rings off (completions then come by request), to compare.
        if std::env::var_os("SOFTIB_CQ_RING").is_some_and(|v| v == "0") {
            return Ok(CqHandle(cq));
        }
        // The ring holds every completion the CQ can: the engine's CQ then never holds more
        // than the ring has room for, and overflow behaves as without a ring.
        let slots = cqe.clamp(1, proto::CQ_RING_SLOTS_MAX as u32);
        let ring = softib_net::ring::Ring::create("softib-cq", slots, proto::CQ_RING_SLOT_LEN)?;
        match self.call_with_fds(&Request::AttachCqRing { dev, cq, slots }, &[ring.fd()])? {
            Response::Ok => {
                // The library polls its rings except while it sleeps in
                // `sleep_for_completion`, and says so: the daemon then wakes it only then.
                ring.set_polling(true).map_err(|e| ring_broken(&e))?;
                self.cq_rings.insert((dev, cq), ring);
            }
            _ => return Err(Error::Unexpected("not Ok")),
        }
        Ok(CqHandle(cq))
    }

    /// `ibv_destroy_cq`.
    pub fn destroy_cq(&mut self, dev: u32, cq: CqHandle) -> Result<()> {
        if let Some(r) = self.rdma.as_mut() {
            return r.destroy_cq(dev, cq);
        }
        self.ok(&Request::DestroyCq { dev, cq: cq.0 })?;
        self.cq_rings.remove(&(dev, cq.0));
        Ok(())
    }

    /// Sleeps until the daemon puts a completion into any of this context's rings, or for
    /// `timeout`. A daemon that cannot wake it (an older one) is asked instead to answer when
    /// `cq`'s ring holds a completion (a parked `PollCq`).
    ///
    /// Each ring carries the consumer's polling flag: the library keeps it set, and clears it
    /// only here, for every ring, before it looks at them once more and sleeps; the daemon,
    /// after filling a ring, adds to the wakeup eventfd when it finds the flag clear. One of
    /// the two always sees the other (`Ring::set_polling`). Waking for any ring, not only the
    /// polled CQ's, keeps a program that polls two CQs in turn from sleeping through the other.
    fn sleep_for_completion(&mut self, dev: u32, cq: u32, timeout: Duration) -> Result<()> {
        if self.wakeup.is_none() && !self.wakeup_off {
            let fd = CompChannel::new_fd()?;
            match self.call_with_fds(&Request::AttachWakeup, &[fd.as_fd()]) {
                Ok(Response::Ok) => self.wakeup = Some(fd),
                // An older daemon, or a refusal: park in the daemon from now on.
                _ => self.wakeup_off = true,
            }
        }
        let Some(fd) = &self.wakeup else {
            // A ring CQ's completions are in its ring: the daemon's answer only wakes.
            let wait_us = u32::try_from(timeout.as_micros())
                .unwrap_or(u32::MAX)
                .max(1);
            return match self.call(&Request::PollCq {
                dev,
                cq,
                max: 0,
                wait_us,
            })? {
                Response::Completions(_) => Ok(()),
                _ => Err(Error::Unexpected("not completions")),
            };
        };
        for ring in self.cq_rings.values() {
            ring.set_polling(false).map_err(|e| ring_broken(&e))?;
        }
        let mut waiting = false;
        for ring in self.cq_rings.values() {
            waiting |= !ring.is_empty().map_err(|e| ring_broken(&e))?;
        }
        if !waiting {
            channel::wait_events(fd.as_fd(), Some(timeout))?;
        }
        for ring in self.cq_rings.values() {
            ring.set_polling(true).map_err(|e| ring_broken(&e))?;
        }
        Ok(())
    }

    /// Takes up to `max` completions from `cq`'s ring into `out`.
    fn pop_ring(
        &mut self,
        dev: u32,
        cq: u32,
        max: u32,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<()> {
        let Some(ring) = self.cq_rings.get(&(dev, cq)) else {
            return Ok(());
        };
        while out.len() < max as usize {
            match ring.pop(&mut self.ring_buf) {
                Ok(true) => match postcard::from_bytes::<WorkCompletion>(&self.ring_buf) {
                    Ok(wc) => out.push(wc),
                    Err(e) => {
                        return Err(Error::Io(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("a completion in the CQ ring does not decode: {e}"),
                        )))
                    }
                },
                Ok(false) => break,
                Err(e) => {
                    return Err(Error::Io(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("the CQ ring is broken: {e:?}"),
                    )))
                }
            }
        }
        Ok(())
    }

    /// `ibv_create_qp`.
    pub fn create_qp(&mut self, dev: u32, init: QpInitAttr) -> Result<Qpn> {
        if let Some(r) = self.rdma.as_mut() {
            return r.create_qp(dev, init);
        }
        match self.call(&Request::CreateQp { dev, init })? {
            Response::Qp(q) => {
                self.qps.insert(
                    (dev, q),
                    QpTrack {
                        qp_type: init.qp_type,
                        cap: init.cap,
                        sig_all: init.sq_sig_all,
                        srq: init.srq.is_some(),
                        state: QpState::Reset,
                        sq: std::collections::VecDeque::new(),
                        rq: 0,
                    },
                );
                Ok(q)
            }
            _ => Err(Error::Unexpected("not a QP")),
        }
    }

    /// `ibv_modify_qp`.
    pub fn modify_qp(&mut self, dev: u32, qpn: Qpn, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        if let Some(r) = self.rdma.as_mut() {
            return r.modify_qp(dev, qpn, attr, mask);
        }
        self.ok(&Request::ModifyQp {
            dev,
            qpn,
            attr: Box::new(*attr),
            mask,
        })?;
        if mask.contains(AttrMask::STATE) {
            if let Some(t) = self.qps.get_mut(&(dev, qpn)) {
                t.state = attr.qp_state;
                if attr.qp_state == QpState::Reset {
                    // RESET empties both queues without completions.
                    t.sq.clear();
                    t.rq = 0;
                }
            }
        }
        Ok(())
    }

    /// `ibv_query_qp`.
    pub fn query_qp(&mut self, dev: u32, qpn: Qpn) -> Result<(QpAttr, QpInitAttr)> {
        if let Some(r) = self.rdma.as_mut() {
            return r.query_qp(dev, qpn);
        }
        match self.call(&Request::QueryQp { dev, qpn })? {
            Response::QpAttr(a, i) => Ok((*a, i)),
            _ => Err(Error::Unexpected("not QP attributes")),
        }
    }

    /// `ibv_destroy_qp`.
    pub fn destroy_qp(&mut self, dev: u32, qpn: Qpn) -> Result<()> {
        if let Some(r) = self.rdma.as_mut() {
            return r.destroy_qp(dev, qpn);
        }
        self.ok(&Request::DestroyQp { dev, qpn })?;
        self.qps.remove(&(dev, qpn));
        Ok(())
    }

    /// `ibv_create_srq`: a receive queue QPs created with `srq` set share.
    pub fn create_srq(
        &mut self,
        dev: u32,
        pd: PdHandle,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<SrqHandle> {
        let h = self.handle(&Request::CreateSrq {
            dev,
            pd: pd.0,
            max_wr,
            max_sge,
        })?;
        Ok(SrqHandle(h as u32))
    }

    /// `ibv_modify_srq` with IBV_SRQ_LIMIT: the SRQ limit event fires once fewer than `limit`
    /// receives remain.
    pub fn modify_srq(&mut self, dev: u32, srq: SrqHandle, limit: u32) -> Result<()> {
        self.ok(&Request::ModifySrq {
            dev,
            srq: srq.0,
            limit,
        })
    }

    /// `ibv_destroy_srq`.
    pub fn destroy_srq(&mut self, dev: u32, srq: SrqHandle) -> Result<()> {
        self.ok(&Request::DestroySrq { dev, srq: srq.0 })
    }

    /// `ibv_post_srq_recv` of a list.
    pub fn post_srq_recv(&mut self, dev: u32, srq: SrqHandle, wrs: Vec<RecvWr>) -> Result<()> {
        match self.call(&Request::PostSrqRecv {
            dev,
            srq: srq.0,
            wrs,
        })? {
            Response::Posted { error: None, .. } => Ok(()),
            Response::Posted {
                posted,
                error: Some(message),
            } => Err(Error::Refused {
                kind: ErrorKind::Invalid,
                message: format!("receive request {posted} of the list: {message}"),
            }),
            _ => Err(Error::Unexpected("not Posted")),
        }
    }

    /// `ibv_create_ah`.
    pub fn create_ah(&mut self, dev: u32, pd: PdHandle, av: AddressVector) -> Result<AhHandle> {
        if let Some(r) = self.rdma.as_mut() {
            return r.create_ah(dev, pd, av);
        }
        let h = self.handle(&Request::CreateAh { dev, pd: pd.0, av })?;
        Ok(AhHandle(h as u32))
    }

    /// `ibv_destroy_ah`.
    pub fn destroy_ah(&mut self, dev: u32, ah: AhHandle) -> Result<()> {
        if let Some(r) = self.rdma.as_mut() {
            return r.destroy_ah(dev, ah);
        }
        self.ok(&Request::DestroyAh { dev, ah: ah.0 })
    }

    /// `ibv_post_send` of a list: all posted, or the error of the first that was not (the
    /// ones before it are posted, as with the verb's `bad_wr`).
    ///
    /// A list the library can check completely (the QP is in RTS, its send queue has room,
    /// and each WR passes [`softib_engine::check_send_wr`]) goes into the submission ring in
    /// shared memory and the daemon's doorbell rings: no request, no reply to wait for.
    /// Anything else is a request, whose answer says what is wrong.
    pub fn post_send(&mut self, dev: u32, qpn: Qpn, wrs: Vec<SendWr>) -> Result<()> {
        if let Some(r) = self.rdma.as_mut() {
            return r.post_send(dev, qpn, &wrs);
        }
        if self.try_submit_sends(dev, qpn, &wrs)? {
            return Ok(());
        }
        let marks: Vec<(u64, bool)> = wrs
            .iter()
            .map(|w| (w.wr_id, w.flags.contains(SendFlags::SIGNALED)))
            .collect();
        let (posted, error) = match self.call(&Request::PostSend { dev, qpn, wrs })? {
            Response::Posted { posted, error } => (posted, error),
            _ => return Err(Error::Unexpected("not Posted")),
        };
        if let Some(t) = self.qps.get_mut(&(dev, qpn)) {
            let n = if error.is_some() {
                posted as usize
            } else {
                marks.len()
            };
            let sig_all = t.sig_all;
            t.sq.extend(marks.into_iter().take(n).map(|(id, s)| (id, s || sig_all)));
        }
        match error {
            None => Ok(()),
            Some(message) => Err(Error::Refused {
                kind: ErrorKind::Invalid,
                message: format!("work request {posted} of the list: {message}"),
            }),
        }
    }

    /// Puts `wrs` into the submission ring when the library can vouch for them; `false` when
    /// they must go as a request.
    fn try_submit_sends(&mut self, dev: u32, qpn: Qpn, wrs: &[SendWr]) -> Result<bool> {
        if self.submit_off || wrs.is_empty() {
            return Ok(false);
        }
        let Some(t) = self.qps.get(&(dev, qpn)) else {
            return Ok(false);
        };
        if t.state != QpState::Rts {
            return Ok(false);
        }
        // A slot is free once its completion (or a later signaled one) has been polled, as on
        // hardware: so the library, not the daemon, knows when the queue is full.
        let room = (t.cap.max_send_wr as usize).saturating_sub(t.sq.len());
        if wrs.len() > room {
            return Err(Error::Refused {
                kind: ErrorKind::Exhausted,
                message: format!(
                    "the send queue is full: {} work requests are posted whose completions \
                     have not been polled (max_send_wr {}); poll the CQ, and signal now and \
                     then when posting unsignaled",
                    t.sq.len(),
                    t.cap.max_send_wr
                ),
            });
        }
        let mut entries = std::mem::take(&mut self.encoded);
        entries.clear();
        let encoded = wrs.iter().all(|wr| {
            softib_engine::check_send_wr(t.qp_type, &t.cap, wr, u32::MAX).is_ok()
                && entries.push(&proto::SubmitRef::Send { dev, qpn, wr })
        });
        let submitted = encoded && self.submit_entries(&entries)?;
        self.encoded = entries;
        if !submitted {
            return Ok(false);
        }
        if let Some(t) = self.qps.get_mut(&(dev, qpn)) {
            let sig_all = t.sig_all;
            t.sq.extend(
                wrs.iter()
                    .map(|w| (w.wr_id, sig_all || w.flags.contains(SendFlags::SIGNALED))),
            );
        }
        Ok(true)
    }

    /// Puts receives into the submission ring when the library can vouch for them.
    fn try_submit_recvs(&mut self, dev: u32, qpn: Qpn, wrs: &[RecvWr]) -> Result<bool> {
        if self.submit_off || wrs.is_empty() {
            return Ok(false);
        }
        let Some(t) = self.qps.get(&(dev, qpn)) else {
            return Ok(false);
        };
        if t.srq || t.state == QpState::Reset {
            return Ok(false);
        }
        let room = t.cap.max_recv_wr.saturating_sub(t.rq) as usize;
        if wrs.len() > room {
            return Err(Error::Refused {
                kind: ErrorKind::Exhausted,
                message: format!(
                    "the receive queue is full: {} receives are posted whose completions have \
                     not been polled (max_recv_wr {}); poll the CQ",
                    t.rq, t.cap.max_recv_wr
                ),
            });
        }
        let mut entries = std::mem::take(&mut self.encoded);
        entries.clear();
        let encoded = wrs.iter().all(|wr| {
            wr.sg_list.len() <= t.cap.max_recv_sge as usize
                && entries.push(&proto::SubmitRef::Recv { dev, qpn, wr })
        });
        let submitted = encoded && self.submit_entries(&entries)?;
        self.encoded = entries;
        if !submitted {
            return Ok(false);
        }
        if let Some(t) = self.qps.get_mut(&(dev, qpn)) {
            t.rq += wrs.len() as u32;
        }
        Ok(true)
    }

    /// Pushes encoded entries into the submission ring (made on first use) and rings the
    /// doorbell; `false` when the ring lacks room for all of them (nothing pushed then).
    fn submit_entries(&mut self, entries: &Encoded) -> Result<bool> {
        if self.submit.is_none() {
            let ring = softib_net::ring::Ring::create(
                "softib-submit",
                SUBMIT_SLOTS,
                proto::SUBMIT_SLOT_LEN,
            )?;
            let bell = CompChannel::new_fd()?;
            match self.call_with_fds(
                &Request::AttachSubmitRing {
                    slots: SUBMIT_SLOTS,
                },
                &[ring.fd(), bell.as_fd()],
            ) {
                Ok(Response::Ok) => self.submit = Some((ring, bell)),
                // An older daemon, or a refusal: post by request from now on.
                _ => {
                    self.submit_off = true;
                    return Ok(false);
                }
            }
        }
        let Some((ring, bell)) = &self.submit else {
            return Ok(false);
        };
        let used = ring.len().map_err(|e| ring_broken(&e))?;
        if ring.capacity() - used < entries.len() as u64 {
            return Ok(false);
        }
        for e in entries.iter() {
            if !ring.push(e).map_err(|e| ring_broken(&e))? {
                return Err(Error::Unexpected("the submission ring filled while in use"));
            }
        }
        // A daemon that is polling its rings takes these at its next turn: the doorbell (a
        // system call here, a wakeup there) is only for one that may be asleep. An eventfd
        // adds to its counter; a full counter is readable already.
        if ring.wants_wakeup().unwrap_or(true) {
            let _ = rustix::io::write(bell, &1u64.to_ne_bytes());
        }
        Ok(true)
    }

    /// Frees the queue slots of the WRs whose completions were just polled.
    fn note_completions(&mut self, dev: u32, wcs: &[WorkCompletion]) {
        for wc in wcs {
            let Some(t) = self.qps.get_mut(&(dev, wc.qp_num)) else {
                continue;
            };
            if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
                t.rq = t.rq.saturating_sub(1);
                continue;
            }
            // Send completions come in the order the WRs were posted, and a successful one
            // stands for the unsignaled WRs before it: it is the oldest signaled WR with its
            // wr_id (programs such as perftest give every WR the same wr_id, so the id alone
            // would find an older, unsignaled one). Errors complete WRs one by one.
            let ok = wc.status == WcStatus::Success;
            if let Some(i) =
                t.sq.iter()
                    .position(|&(id, signaled)| id == wc.wr_id && (signaled || !ok))
            {
                t.sq.drain(..=i);
            }
        }
    }

    /// `ibv_post_recv` of a list.
    pub fn post_recv(&mut self, dev: u32, qpn: Qpn, wrs: Vec<RecvWr>) -> Result<()> {
        if let Some(r) = self.rdma.as_mut() {
            return r.post_recv(dev, qpn, &wrs);
        }
        if self.try_submit_recvs(dev, qpn, &wrs)? {
            return Ok(());
        }
        let n = wrs.len() as u32;
        match self.call(&Request::PostRecv { dev, qpn, wrs })? {
            Response::Posted { error: None, .. } => {
                if let Some(t) = self.qps.get_mut(&(dev, qpn)) {
                    t.rq += n;
                }
                Ok(())
            }
            Response::Posted {
                posted,
                error: Some(message),
            } => {
                if let Some(t) = self.qps.get_mut(&(dev, qpn)) {
                    t.rq += posted;
                }
                Err(Error::Refused {
                    kind: ErrorKind::Invalid,
                    message: format!("receive request {posted} of the list: {message}"),
                })
            }
            _ => Err(Error::Unexpected("not Posted")),
        }
    }

    /// `ibv_poll_cq` for up to `max` completions, waiting up to `wait` for the first.
    pub fn poll_cq(
        &mut self,
        dev: u32,
        cq: CqHandle,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<WorkCompletion>> {
        if let Some(r) = self.rdma.as_mut() {
            return r.poll_cq(dev, cq, max, wait);
        }
        let v = self.poll_cq_inner(dev, cq, max, wait)?;
        self.note_completions(dev, &v);
        Ok(v)
    }

    /// `ibv_poll_cq` as a C program calls it in a loop: appends up to `max` completions to
    /// `out` and returns at once, never sleeping (an empty poll only yields the CPU, which the
    /// daemon — the "hardware" — may need on a machine with fewer cores than spinners).
    /// Returns how many it appended.
    pub fn poll_cq_nowait(
        &mut self,
        dev: u32,
        cq: CqHandle,
        max: u32,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize> {
        let start = out.len();
        if let Some(r) = self.rdma.as_mut() {
            out.extend(r.poll_cq(dev, cq, max, Duration::ZERO)?);
        } else if let Some(ring) = self.cq_rings.get(&(dev, cq.0)) {
            // A full ring may have left completions in the daemon's CQ (see poll_cq_inner).
            let was_full = ring.len().is_ok_and(|n| n == ring.capacity());
            // `pop_ring` fills `out` up to a length.
            self.pop_ring(dev, cq.0, (start as u32).saturating_add(max), out)?;
            if was_full {
                let left = max.saturating_sub((out.len() - start) as u32);
                if let Response::Completions(mut direct) = self.call(&Request::PollCq {
                    dev,
                    cq: cq.0,
                    max: left,
                    wait_us: 0,
                })? {
                    out.append(&mut direct);
                }
            }
            if out.len() == start {
                std::thread::yield_now();
            }
        } else {
            match self.call(&Request::PollCq {
                dev,
                cq: cq.0,
                max,
                wait_us: 0,
            })? {
                Response::Completions(mut v) => out.append(&mut v),
                _ => return Err(Error::Unexpected("not completions")),
            }
        }
        let n = out.len() - start;
        if n > 0 {
            self.note_completions(dev, &out[start..]);
        }
        Ok(n)
    }

    /// `ibv_get_async_event` without waiting: every asynchronous event of this context's
    /// objects and of the ports since last asked, oldest first, with its device index.
    pub fn async_events(&mut self) -> Result<Vec<(u32, softib_engine::verbs::AsyncEvent)>> {
        if self.rdma.is_some() {
            return Ok(Vec::new());
        }
        match self.call(&Request::AsyncEvents)? {
            Response::AsyncEvents(all) => Ok(all),
            _ => Err(Error::Unexpected("not events")),
        }
    }

    /// Hands the daemon an eventfd it adds to whenever it queues an asynchronous event for
    /// this context (what makes `ibv_context::async_fd` pollable). `false` when the daemon
    /// cannot (an older one): events are then only seen when asked for.
    pub fn attach_async_fd(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> Result<bool> {
        if self.rdma.is_some() {
            return Ok(false);
        }
        match self.call_with_fds(&Request::AttachAsyncEvents, &[fd]) {
            Ok(Response::Ok) => Ok(true),
            Ok(_) => Err(Error::Unexpected("not Ok")),
            Err(Error::Refused {
                kind: ErrorKind::Protocol,
                ..
            }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn poll_cq_inner(
        &mut self,
        dev: u32,
        cq: CqHandle,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<WorkCompletion>> {
        let wait_us = u32::try_from(wait.as_micros()).unwrap_or(u32::MAX);
        if let Some(ring) = self.cq_rings.get(&(dev, cq.0)) {
            // A full ring may have left completions in the daemon's CQ; the daemon moves
            // them when it next runs, so after draining a full ring, ask it to (rare).
            let was_full = ring.len().is_ok_and(|n| n == ring.capacity());
            let mut v = Vec::new();
            self.pop_ring(dev, cq.0, max, &mut v)?;
            if was_full {
                if let Response::Completions(mut direct) = self.call(&Request::PollCq {
                    dev,
                    cq: cq.0,
                    max,
                    wait_us: 0,
                })? {
                    self.pop_ring(dev, cq.0, max, &mut v)?;
                    v.append(&mut direct);
                }
            }
            if v.is_empty() && wait_us == 0 {
                // Nothing yet, and the caller spins. The daemon — the "hardware" — needs a CPU
                // to make progress, and on a machine with fewer cores than spinning processes a
                // spinner starves it. So: yield for a while, then sleep briefly (woken at once
                // when a completion comes).
                self.empty_polls = self.empty_polls.saturating_add(1);
                if self.empty_polls < SPINS_BEFORE_BLOCKING {
                    std::thread::yield_now();
                    return Ok(v);
                }
                self.sleep_for_completion(dev, cq.0, Duration::from_micros(BLOCK_US.into()))?;
                self.pop_ring(dev, cq.0, max, &mut v)?;
            }
            if !v.is_empty() {
                self.empty_polls = 0;
            }
            if !v.is_empty() || wait_us == 0 {
                return Ok(v);
            }
            // Nothing yet. A completion that is on its way is usually a few microseconds off:
            // look at the ring for a while (yielding, so the daemon gets a CPU) before sleeping
            // — a sleep costs a wakeup on each side.
            let spin_until = std::time::Instant::now() + wait.min(SPIN_BEFORE_WAITING);
            while std::time::Instant::now() < spin_until {
                std::thread::yield_now();
                self.pop_ring(dev, cq.0, max, &mut v)?;
                if !v.is_empty() {
                    self.empty_polls = 0;
                    return Ok(v);
                }
            }
            // Sleep until the daemon fills a ring (this CQ's, or another one's: then look
            // again), or the wait ends.
            let deadline = std::time::Instant::now() + wait.saturating_sub(SPIN_BEFORE_WAITING);
            loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    return Ok(v);
                }
                self.sleep_for_completion(dev, cq.0, left)?;
                self.pop_ring(dev, cq.0, max, &mut v)?;
                if !v.is_empty() {
                    self.empty_polls = 0;
                    return Ok(v);
                }
            }
        }
        match self.call(&Request::PollCq {
            dev,
            cq: cq.0,
            max,
            wait_us,
        })? {
            Response::Completions(v) => Ok(v),
            _ => Err(Error::Unexpected("not completions")),
        }
    }

    /// `ibv_attach_mcast`: UD QP `qpn` receives what is sent to multicast group `gid`/`lid`.
    pub fn attach_mcast(&mut self, dev: u32, qpn: Qpn, gid: Gid, lid: Lid) -> Result<()> {
        self.ok(&Request::AttachMcast { dev, qpn, gid, lid })
    }

    /// `ibv_detach_mcast`.
    pub fn detach_mcast(&mut self, dev: u32, qpn: Qpn, gid: Gid) -> Result<()> {
        self.ok(&Request::DetachMcast { dev, qpn, gid })
    }

    /// `ibv_create_comp_channel`: see [`CompChannel`].
    pub fn create_comp_channel(&mut self) -> Result<CompChannel> {
        let fd = CompChannel::new_fd()?;
        match self.call_with_fds(&Request::CreateCompChannel, &[fd.as_fd()])? {
            Response::Handle(handle) => Ok(CompChannel { fd, handle }),
            _ => Err(Error::Unexpected("not a handle")),
        }
    }

    /// `ibv_destroy_comp_channel`.
    pub fn destroy_comp_channel(&mut self, channel: CompChannel) -> Result<()> {
        self.ok(&Request::DestroyCompChannel {
            channel: channel.handle,
        })
    }

    /// `ibv_req_notify_cq`: `channel` becomes readable once `cq` holds a completion (one-shot).
    pub fn req_notify_cq(&mut self, dev: u32, cq: CqHandle, channel: &CompChannel) -> Result<()> {
        self.ok(&Request::ReqNotifyCq {
            dev,
            cq: cq.0,
            channel: channel.handle,
        })
    }

    /// Becomes a MAD agent on `port` (`sm`: the subnet manager, which receives SMP responses
    /// and SA requests).
    pub fn open_mad(&mut self, dev: u32, port: u8, sm: bool) -> Result<()> {
        self.ok(&Request::OpenMad { dev, port, sm })
    }

    /// Sends an SMP: directed-route when `dlid` is `None`.
    pub fn send_smp(
        &mut self,
        dev: u32,
        port: u8,
        dlid: Option<Lid>,
        mad: &[u8; 256],
    ) -> Result<()> {
        self.ok(&Request::SendSmp {
            dev,
            port,
            dlid,
            mad: mad.to_vec(),
        })
    }

    /// Sends a GMP to `dest_qpn` at `dlid`.
    pub fn send_gmp(
        &mut self,
        dev: u32,
        port: u8,
        dlid: Lid,
        dest_qpn: Qpn,
        mad: &[u8; 256],
    ) -> Result<()> {
        self.ok(&Request::SendGmp {
            dev,
            port,
            dlid,
            dest_qpn,
            mad: mad.to_vec(),
        })
    }

    /// Receives MADs for this agent, waiting up to `wait` for the first.
    pub fn recv_mads(&mut self, max: u32, wait: Duration) -> Result<Vec<Mad>> {
        let wait_us = u32::try_from(wait.as_micros()).unwrap_or(u32::MAX);
        match self.call(&Request::RecvMads { max, wait_us })? {
            Response::Mads(v) => Ok(v),
            _ => Err(Error::Unexpected("not MADs")),
        }
    }

    /// Injects faults on the egress of `port` of device `dev` (port 0: every port).
    pub fn set_faults(&mut self, dev: u32, port: u8, spec: FaultSpec) -> Result<()> {
        self.ok(&Request::SetFaults { dev, port, spec })
    }

    /// Per port: the faults in force and what they did.
    pub fn faults(&mut self, dev: u32) -> Result<Vec<(u8, FaultSpec, FaultStats)>> {
        match self.call(&Request::Faults { dev })? {
            Response::Faults(v) => Ok(v),
            _ => Err(Error::Unexpected("not faults")),
        }
    }

    /// Starts capturing device `dev` into `path` (absolute), or stops (`None`); returns the
    /// packets of the capture that stopped.
    pub fn capture(&mut self, dev: u32, path: Option<&Path>) -> Result<u64> {
        let path = path.map(|p| p.display().to_string());
        self.handle(&Request::Capture { dev, path })
    }

    /// Packets captured so far.
    pub fn captured(&mut self, dev: u32) -> Result<u64> {
        self.handle(&Request::CaptureCount { dev })
    }

    /// The index of the device named `name` (what every verb takes as `dev`).
    pub fn device_index(&mut self, name: &str) -> Result<u32> {
        let devs = self.devices()?;
        devs.iter()
            .position(|d| d.name == name)
            .map(|i| i as u32)
            .ok_or_else(|| Error::Refused {
                kind: ErrorKind::NotFound,
                message: format!(
                    "no device {name} (this host has: {})",
                    devs.iter()
                        .map(|d| d.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
    }

    /// What every client of the daemon owns.
    pub fn resources(&mut self) -> Result<Vec<ClientResources>> {
        match self.call(&Request::Resources)? {
            Response::Resources(v) => Ok(v),
            _ => Err(Error::Unexpected("not resources")),
        }
    }

    /// `softib link add`: a RoCEv2 device on an interface and address.
    pub fn link_add(&mut self, config: LinkConfig) -> Result<()> {
        self.ok(&Request::LinkAdd(config))
    }

    /// `softib link del`.
    pub fn link_del(&mut self, name: &str) -> Result<()> {
        self.ok(&Request::LinkDel {
            name: name.to_string(),
        })
    }

    /// The RoCE devices and whether each port is up.
    pub fn links(&mut self) -> Result<Vec<(LinkConfig, bool)>> {
        match self.call(&Request::LinkShow)? {
            Response::Links(v) => Ok(v),
            _ => Err(Error::Unexpected("not a link list")),
        }
    }

    /// Plugs in (`true`) or pulls (`false`) the cable of `port`.
    pub fn set_port_enabled(&mut self, dev: u32, port: u8, enabled: bool) -> Result<()> {
        self.ok(&Request::SetPortEnabled { dev, port, enabled })
    }

    /// Announces (or withdraws) the SM on `port`: IsSM and the SMInfo its SMA answers with.
    pub fn set_sm(&mut self, dev: u32, port: u8, sm_info: Option<[u8; 64]>) -> Result<()> {
        self.ok(&Request::SetSm {
            dev,
            port,
            sm_info: sm_info.map(|b| b.to_vec()),
        })
    }
}

/// A submission-ring entry encoded, if it fits a slot (two bytes of which hold the length);
/// what does not fit goes as a request instead.
/// Work requests encoded for the submission ring, back to back. A context keeps one and
/// reuses it, so that posting allocates nothing once it has grown to the usual batch (it
/// used to clone each WR and allocate its encoding: a quarter of a posting client's time
/// at 2-byte messages).
#[derive(Debug, Default)]
struct Encoded {
    bytes: Vec<u8>,
    /// Where each entry ends in `bytes`.
    ends: Vec<usize>,
}

impl Encoded {
    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// Appends `entry`; `false` when it does not fit a ring slot (with its length prefix).
    fn push(&mut self, entry: &proto::SubmitRef<'_>) -> bool {
        let mut slot = [0u8; proto::SUBMIT_SLOT_LEN - 2];
        match postcard::to_slice(entry, &mut slot) {
            Ok(b) => {
                self.bytes.extend_from_slice(b);
                self.ends.push(self.bytes.len());
                true
            }
            Err(_) => false,
        }
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(a, &b)| &self.bytes[a..b])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use softib_engine::verbs::{Sge, WrOpcode};

    #[test]
    fn encoded_entries_come_back_as_the_submits_they_were() {
        let mut e = Encoded::default();
        let qpn = Qpn::new(77);
        let sge = |n| Sge {
            addr: 0x1000 * n,
            length: 64,
            lkey: 3,
        };
        let sends: Vec<SendWr> = (1..=3u64)
            .map(|n| SendWr {
                wr_id: n,
                opcode: WrOpcode::Send,
                sg_list: (0..n).map(sge).collect(),
                flags: SendFlags::SIGNALED,
                inline_data: None,
                ud: None,
            })
            .collect();
        for round in 0..2 {
            e.clear();
            for wr in &sends {
                assert!(e.push(&proto::SubmitRef::Send { dev: 1, qpn, wr }));
            }
            assert_eq!(e.len(), 3, "round {round}");
            let back: Vec<SendWr> = e
                .iter()
                .map(
                    |b| match postcard::from_bytes::<proto::Submit>(b).unwrap() {
                        proto::Submit::Send { dev: 1, wr, .. } => wr,
                        other => panic!("{other:?}"),
                    },
                )
                .collect();
            assert_eq!(back, sends);
        }
        // An entry larger than a ring slot is refused, and what was there stays.
        let huge = SendWr {
            inline_data: Some(vec![0; proto::SUBMIT_SLOT_LEN]),
            ..sends[0].clone()
        };
        assert!(!e.push(&proto::SubmitRef::Send {
            dev: 1,
            qpn,
            wr: &huge
        }));
        assert_eq!(e.len(), 3);
        assert_eq!(e.iter().count(), 3);
    }
}
