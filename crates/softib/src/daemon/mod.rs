//! The daemon backend: a session with `softibd` (a host's daemon, or an embedded one — the same
//! daemon, reached the same way through its runtime directory).
//!
//! Control verbs are requests on the control socket ([`Conn`], `softib_proto`), answered one
//! by one like the kernel's uverbs commands. The data path avoids the socket where the library
//! can vouch for what it does: posts go through the submission ring ([`posting`]), completions
//! come back through a ring per CQ ([`completions`]).

mod completions;
mod liveness;
mod posting;

use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use softib_engine::verbs::AsyncEvent;
use softib_net::shm::SharedRegion;
use softib_proto::{self as proto, Request, Response};

use crate::provider::{self, Engine, ProcessCounters};
use crate::{
    AccessFlags, AddressVector, AhHandle, AttrMask, ClientResources, CompChannel, CqHandle,
    DeviceInfo, Error, ErrorKind, FaultSpec, FaultStats, Gid, Lid, LinkConfig, Mad, MrKeys,
    PdHandle, QpAttr, QpInitAttr, Qpn, RecvWr, Result, SendWr, SrqHandle, WorkCompletion,
};
use completions::CqRings;
pub use liveness::DaemonState;
use liveness::Watch;
use posting::Posting;

/// The control socket: each request is answered by exactly one response.
#[derive(Debug)]
pub(crate) struct Conn {
    stream: UnixStream,
    /// The daemon's process id (0 until it said hello), for the error when it goes away.
    daemon_pid: u32,
    /// The daemon's heartbeat, looked at while waiting for it.
    watch: Watch,
    /// The daemon stopped answering in the middle of a request: its answer may still come,
    /// so nothing more can be read from this connection in order.
    unresponsive: Option<(u32, DaemonState)>,
}

impl Conn {
    pub(crate) fn call(&mut self, req: &Request) -> Result<Response> {
        self.call_with_fds(req, &[])
    }

    /// Sends `req` with descriptors (SCM_RIGHTS) and reads the answer; a refusal is an error.
    pub(crate) fn call_with_fds(
        &mut self,
        req: &Request,
        fds: &[BorrowedFd<'_>],
    ) -> Result<Response> {
        // No answer but `Steered` carries descriptors; any other's would be closed here.
        self.call_receiving_fds(req, fds).map(|(r, _)| r)
    }

    /// Sends `req` with `send_fds` and reads the answer with the descriptors that came with it.
    pub(crate) fn call_receiving_fds(
        &mut self,
        req: &Request,
        send_fds: &[BorrowedFd<'_>],
    ) -> Result<(Response, Vec<std::os::fd::OwnedFd>)> {
        let pid = self.daemon_pid;
        if let Some((pid, state)) = self.unresponsive {
            return Err(Error::DaemonUnresponsive { pid, state });
        }
        let gone = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionReset => Error::DaemonGone { pid },
            _ => Error::Io(e),
        };
        proto::send(&self.stream, req, send_fds).map_err(gone)?;
        // A parked request (a wait for a completion or a MAD) may be answered late; only a
        // daemon whose heartbeat stopped is given up on.
        while !readable(&self.stream, liveness::LOOK_EVERY).map_err(gone)? {
            if let Err(e) = self.watch.check(std::time::Instant::now()) {
                if let Error::DaemonUnresponsive { pid, state } = e {
                    self.unresponsive = Some((pid, state));
                }
                return Err(e);
            }
        }
        let mut fds = Vec::new();
        let mut frame = vec![0u8; 4];
        let mut have = 0;
        let mut want = 4;
        while have < want {
            let n = softib_net::fdpass::recv(&self.stream, &mut frame[have..want], &mut fds)
                .map_err(gone)?;
            if n == 0 {
                return Err(gone(std::io::ErrorKind::UnexpectedEof.into()));
            }
            have += n;
            if have == 4 && want == 4 {
                let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
                if len > proto::MAX_FRAME {
                    return Err(Error::Io(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("the daemon sent a {len}-byte frame"),
                    )));
                }
                want = 4 + len;
                frame.resize(want, 0);
            }
        }
        match proto::decode::<Response>(&frame[4..]) {
            Ok(Response::Error { kind, message }) => Err(Error::Refused { kind, message }),
            Ok(r) => Ok((r, fds)),
            Err(m) => Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                m,
            ))),
        }
    }

    /// Whether the daemon still beats (see [`liveness`]): for a client about to wait longer,
    /// or spinning on its rings without a request.
    pub(crate) fn check_alive(&mut self) -> Result<()> {
        if let Some((pid, state)) = self.unresponsive {
            return Err(Error::DaemonUnresponsive { pid, state });
        }
        self.watch.check(std::time::Instant::now())
    }

    /// The control socket, for a thread that watches it close (the daemon gone).
    pub(crate) fn socket(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.stream.as_fd()
    }

    pub(crate) fn ok(&mut self, req: &Request) -> Result<()> {
        match self.call(req)? {
            Response::Ok => Ok(()),
            _ => Err(Error::Unexpected("not Ok")),
        }
    }

    pub(crate) fn handle(&mut self, req: &Request) -> Result<u64> {
        match self.call(req)? {
            Response::Handle(h) => Ok(h),
            _ => Err(Error::Unexpected("not a handle")),
        }
    }

    /// The answer to a post by request: `posted` of the list went in, then `error` (if any).
    fn posted(&mut self, req: &Request) -> Result<(u32, Option<String>)> {
        match self.call(req)? {
            Response::Posted { posted, error } => Ok((posted, error)),
            _ => Err(Error::Unexpected("not Posted")),
        }
    }
}

/// Whether `stream` has something to read within `timeout`.
fn readable(stream: &UnixStream, timeout: Duration) -> std::io::Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(stream, PollFlags::IN)];
    let ts = Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    match poll(&mut fds, Some(&ts)) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// A ring the daemon shares with this session no longer holds together (the other side broke
/// it): this session cannot go on.
fn ring_broken(which: &str, e: &softib_net::ring::RingError) -> Error {
    Error::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("the {which} ring is broken: {e:?}"),
    ))
}

/// The refusal of a list whose entry `posted` the daemon (or the library) did not take.
fn refused_at(what: &str, posted: u32, message: String) -> Error {
    Error::Refused {
        kind: ErrorKind::Invalid,
        message: format!("{what} {posted} of the list: {message}"),
    }
}

/// Whether the environment turns a data-path mechanism off (`NAME=0`), to compare with the
/// fallback that works without it.
fn env_off(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| v == "0")
}

/// A session with the daemon.
#[derive(Debug)]
pub(crate) struct Session {
    conn: Conn,
    host: String,
    /// Completion rings by CQ, and the wakeup a waiting poll sleeps on.
    cqs: CqRings,
    /// What the library knows of its QPs, and the submission ring.
    posts: Posting,
    /// The process data path (`SOFTIB_DATAPATH=process`): per device, its engine in this
    /// process, or `None` where the device keeps the daemon path (IB). `None` altogether on
    /// the daemon path.
    process: Option<BTreeMap<u32, Option<Arc<Engine>>>>,
    /// Whether an engine that cannot start is an error (`SOFTIB_DATAPATH=process`) rather
    /// than the daemon path for that device.
    process_forced: bool,
    /// The eventfd the program's `async_fd` watches ([`Session::attach_async_fd`]): the
    /// process engines add to it too, for the events they raise.
    async_bell: Option<std::os::fd::OwnedFd>,
    /// On the process data path, the memory files handed over with `attach_shared`, by
    /// handle (a copy of the descriptor, where the program has the file, its length): a
    /// region in one is a buffer the engine maps, which its peers reach by reference.
    attached: BTreeMap<u64, (std::os::fd::OwnedFd, u64, usize)>,
    /// Empty polls in a row of a program that spins on a process engine's CQ
    /// ([`Session::idle_poll`]).
    empty_polls: u32,
}

/// How many empty polls in a row a program that spins on a process engine's CQ makes before
/// each further one yields the CPU: about the 5 µs softib's own tools spin before they yield
/// (an empty poll turns the engine, a few hundred nanoseconds). A reply through a ring comes
/// within microseconds when the peer runs; a yield at every empty poll hands the core to
/// whichever other thread wants it for its whole turn, and a ping-pong then took 8 µs
/// instead of 1.
const PURE_SPIN_POLLS: u32 = 32;

impl Session {
    /// Connects to the daemon whose runtime directory is `dir` and says hello, on the data
    /// path `SOFTIB_DATAPATH` asks for.
    pub(crate) fn connect(dir: &Path) -> Result<Session> {
        Session::connect_on(dir, provider::wanted()?)
    }

    /// [`Session::connect`] on data path `datapath`.
    pub(crate) fn connect_on(dir: &Path, datapath: provider::DataPath) -> Result<Session> {
        let path = dir.join(proto::SOCKET_NAME);
        let stream = UnixStream::connect(&path).map_err(|source| Error::NoDaemon {
            path: path.clone(),
            source,
            rdma_core: String::new(),
        })?;
        let mut conn = Conn {
            stream,
            daemon_pid: 0,
            watch: Watch::new(dir),
            unresponsive: None,
        };
        let program = std::env::args()
            .next()
            .and_then(|a| {
                Path::new(&a)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
            })
            .unwrap_or_default();
        let host = match conn.call(&Request::Hello {
            version: proto::VERSION,
            pid: std::process::id(),
            program,
        })? {
            Response::Hello { host, pid, .. } => {
                conn.daemon_pid = pid;
                host
            }
            _ => return Err(Error::Unexpected("not Hello")),
        };
        Ok(Session {
            conn,
            host,
            // SOFTIB_WAKEUP=0 sleeps as with an older daemon (a parked PollCq), to compare.
            cqs: CqRings::new(env_off("SOFTIB_WAKEUP")),
            posts: Posting::new(env_off("SOFTIB_SUBMIT_RING")),
            process: (datapath != provider::DataPath::Daemon).then(BTreeMap::new),
            process_forced: datapath == provider::DataPath::Process,
            async_bell: None,
            attached: BTreeMap::new(),
            empty_polls: 0,
        })
    }

    /// The host name the daemon serves.
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// The daemon's process id.
    pub(crate) fn daemon_pid(&self) -> u32 {
        self.conn.daemon_pid
    }

    pub(crate) fn devices(&mut self) -> Result<Vec<DeviceInfo>> {
        match self.conn.call(&Request::ListDevices)? {
            Response::Devices(d) => Ok(d),
            _ => Err(Error::Unexpected("not a device list")),
        }
    }

    /// Hands `map` to the daemon, which maps it too; its handle.
    pub(crate) fn attach_buffer(&mut self, map: &SharedRegion) -> Result<u64> {
        let req = Request::AttachBuffer {
            len: map.len() as u64,
            addr: map.addr(),
        };
        match self.conn.call_with_fds(&req, &[map.fd()])? {
            Response::Handle(h) => Ok(h),
            _ => Err(Error::Unexpected("not a handle")),
        }
    }

    /// Hands the daemon `len` bytes of this process's memory at `addr` that are a memory file
    /// `fd` mapped there (`MAP_SHARED`, from offset 0): the daemon maps it too and reaches
    /// regions in it directly, as it does a [`SharedRegion`]'s.
    pub(crate) fn attach_shared(
        &mut self,
        fd: std::os::fd::BorrowedFd<'_>,
        addr: u64,
        len: usize,
    ) -> Result<u64> {
        let req = Request::AttachBuffer {
            len: len as u64,
            addr,
        };
        match self.conn.call_with_fds(&req, &[fd])? {
            Response::Handle(h) => {
                if self.process.is_some() {
                    self.attached
                        .insert(h, (fd.try_clone_to_owned()?, addr, len));
                }
                Ok(h)
            }
            _ => Err(Error::Unexpected("not a handle")),
        }
    }

    /// Hands the daemon an eventfd it adds to whenever it queues an asynchronous event for
    /// this session; `false` when the daemon cannot (an older one).
    pub(crate) fn attach_async_fd(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> Result<bool> {
        if self.process.is_some() {
            let bell = fd.try_clone_to_owned()?;
            for e in self
                .process
                .iter()
                .flatten()
                .filter_map(|(_, e)| e.as_ref())
            {
                e.set_async_bell(bell.try_clone()?);
            }
            self.async_bell = Some(bell);
        }
        match self.conn.call_with_fds(&Request::AttachAsyncEvents, &[fd]) {
            Ok(Response::Ok) => Ok(true),
            Ok(_) => Err(Error::Unexpected("not Ok")),
            Err(Error::Refused {
                kind: ErrorKind::Protocol,
                ..
            }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Hands the daemon an eventfd it adds to whenever it queues a MAD for this session.
    pub(crate) fn attach_mad_wakeup(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> Result<()> {
        match self.conn.call_with_fds(&Request::AttachMadWakeup, &[fd])? {
            Response::Ok => Ok(()),
            _ => Err(Error::Unexpected("not Ok")),
        }
    }

    pub(crate) fn alloc_pd(&mut self, dev: u32) -> Result<PdHandle> {
        if let Some(e) = self.engine(dev)? {
            return e.alloc_pd(&mut self.conn);
        }
        let h = self.conn.handle(&Request::AllocPd { dev })?;
        Ok(PdHandle(h as u32))
    }

    pub(crate) fn dealloc_pd(&mut self, dev: u32, pd: PdHandle) -> Result<()> {
        if let Some(e) = self.engine(dev)? {
            return e.dealloc_pd(&mut self.conn, pd);
        }
        self.conn.ok(&Request::DeallocPd { dev, pd: pd.0 })
    }

    fn mr(&mut self, req: &Request, addr: u64, len: usize) -> Result<MrKeys> {
        match self.conn.call(req)? {
            Response::Mr { lkey, rkey } => Ok(MrKeys {
                lkey,
                rkey,
                addr,
                len: len as u64,
            }),
            _ => Err(Error::Unexpected("not an MR")),
        }
    }

    /// `ibv_reg_mr` over `len` bytes at `addr` of the attached buffer `buffer`.
    ///
    /// On the process data path the region is reached in this process: `map` is the buffer's
    /// mapping when it is a [`crate::Buffer`] (mapped again, so that the region outlives what
    /// the application does with its `Buffer`), `None` for memory the caller keeps mapped.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reg_mr(
        &mut self,
        dev: u32,
        pd: PdHandle,
        buffer: u64,
        addr: u64,
        len: usize,
        access: AccessFlags,
        map: Option<&SharedRegion>,
    ) -> Result<MrKeys> {
        if let Some(e) = self.engine(dev)? {
            let own = match (map, self.attached.get(&buffer)) {
                (Some(m), _) => Some((
                    SharedRegion::from_fd(m.fd().try_clone_to_owned()?, m.len())?,
                    m.addr(),
                )),
                (None, Some((fd, at, len))) => {
                    Some((SharedRegion::from_fd(fd.try_clone()?, *len)?, *at))
                }
                (None, None) => None,
            };
            return e.reg_mr(&mut self.conn, pd, own, addr, len, access);
        }
        let req = Request::RegMr {
            dev,
            pd: pd.0,
            buffer,
            addr,
            len: len as u64,
            access,
        };
        self.mr(&req, addr, len)
    }

    /// `ibv_reg_mr` of this process's own memory, which the daemon reaches by cross-memory
    /// attach.
    pub(crate) fn reg_mr_process(
        &mut self,
        dev: u32,
        pd: PdHandle,
        addr: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<MrKeys> {
        if let Some(e) = self.engine(dev)? {
            return e.reg_mr(&mut self.conn, pd, None, addr, len, access);
        }
        if let Some(pid) = rustix::process::Pid::from_raw(self.conn.daemon_pid as i32) {
            // Under Yama ptrace_scope 1 the daemon (not our parent) needs this; where Yama is
            // absent the call fails harmlessly and the user check applies.
            let _ = rustix::process::set_ptracer(rustix::process::PTracer::ProcessID(pid));
        }
        let req = Request::RegMrProcess {
            dev,
            pd: pd.0,
            addr,
            len: len as u64,
            access,
        };
        self.mr(&req, addr, len)
    }

    pub(crate) fn dereg_mr(&mut self, dev: u32, lkey: u32) -> Result<()> {
        if let Some(e) = self.engine(dev)? {
            return e.dereg_mr(&mut self.conn, lkey);
        }
        self.conn.ok(&Request::DeregMr { dev, lkey })
    }

    /// `ibv_create_cq`, with its completion ring.
    pub(crate) fn create_cq(&mut self, dev: u32, cqe: u32) -> Result<CqHandle> {
        if let Some(e) = self.engine(dev)? {
            return e.create_cq(&mut self.conn, cqe);
        }
        let cq = self.conn.handle(&Request::CreateCq { dev, cqe })? as u32;
        // SOFTIB_CQ_RING=0 turns the rings off (completions then come by request), to compare.
        if !env_off("SOFTIB_CQ_RING") {
            self.cqs.attach(&mut self.conn, dev, cq, cqe)?;
        }
        Ok(CqHandle(cq))
    }

    pub(crate) fn destroy_cq(&mut self, dev: u32, cq: CqHandle) -> Result<()> {
        if let Some(e) = self.engine(dev)? {
            return e.destroy_cq(&mut self.conn, cq);
        }
        self.conn.ok(&Request::DestroyCq { dev, cq: cq.0 })?;
        self.cqs.forget(dev, cq.0);
        Ok(())
    }

    pub(crate) fn create_qp(&mut self, dev: u32, init: QpInitAttr) -> Result<Qpn> {
        if let Some(e) = self.engine(dev)? {
            return e.create_qp(&mut self.conn, init);
        }
        match self.conn.call(&Request::CreateQp { dev, init })? {
            Response::Qp(q) => {
                self.posts.track(dev, q, &init);
                Ok(q)
            }
            _ => Err(Error::Unexpected("not a QP")),
        }
    }

    pub(crate) fn modify_qp(
        &mut self,
        dev: u32,
        qpn: Qpn,
        attr: &QpAttr,
        mask: AttrMask,
    ) -> Result<()> {
        if let Some(e) = self.engine(dev)? {
            return e.modify_qp(&mut self.conn, qpn, attr, mask);
        }
        self.conn.ok(&Request::ModifyQp {
            dev,
            qpn,
            attr: Box::new(*attr),
            mask,
        })?;
        if mask.contains(AttrMask::STATE) {
            self.posts.set_state(dev, qpn, attr.qp_state);
        }
        Ok(())
    }

    pub(crate) fn query_qp(&mut self, dev: u32, qpn: Qpn) -> Result<(QpAttr, QpInitAttr)> {
        if let Some(e) = self.engine(dev)? {
            return e.query_qp(qpn);
        }
        match self.conn.call(&Request::QueryQp { dev, qpn })? {
            Response::QpAttr(a, i) => Ok((*a, i)),
            _ => Err(Error::Unexpected("not QP attributes")),
        }
    }

    pub(crate) fn destroy_qp(&mut self, dev: u32, qpn: Qpn) -> Result<()> {
        if let Some(e) = self.engine(dev)? {
            return e.destroy_qp(&mut self.conn, qpn);
        }
        self.conn.ok(&Request::DestroyQp { dev, qpn })?;
        self.posts.forget(dev, qpn);
        Ok(())
    }

    pub(crate) fn create_srq(
        &mut self,
        dev: u32,
        pd: PdHandle,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<SrqHandle> {
        if let Some(e) = self.engine(dev)? {
            return e.create_srq(&mut self.conn, pd, max_wr, max_sge);
        }
        let h = self.conn.handle(&Request::CreateSrq {
            dev,
            pd: pd.0,
            max_wr,
            max_sge,
        })?;
        Ok(SrqHandle(h as u32))
    }

    pub(crate) fn modify_srq(&mut self, dev: u32, srq: SrqHandle, limit: u32) -> Result<()> {
        if let Some(e) = self.engine(dev)? {
            return e.modify_srq(srq, limit);
        }
        self.conn.ok(&Request::ModifySrq {
            dev,
            srq: srq.0,
            limit,
        })
    }

    pub(crate) fn destroy_srq(&mut self, dev: u32, srq: SrqHandle) -> Result<()> {
        if let Some(e) = self.engine(dev)? {
            return e.destroy_srq(&mut self.conn, srq);
        }
        self.conn.ok(&Request::DestroySrq { dev, srq: srq.0 })
    }

    pub(crate) fn post_srq_recv(
        &mut self,
        dev: u32,
        srq: SrqHandle,
        wrs: Vec<RecvWr>,
    ) -> Result<()> {
        if let Some(e) = self.engine(dev)? {
            return e.post_srq_recv(srq, wrs);
        }
        let req = Request::PostSrqRecv {
            dev,
            srq: srq.0,
            wrs,
        };
        match self.conn.posted(&req)? {
            (_, None) => Ok(()),
            (posted, Some(message)) => Err(refused_at("receive request", posted, message)),
        }
    }

    pub(crate) fn create_ah(
        &mut self,
        dev: u32,
        pd: PdHandle,
        av: AddressVector,
    ) -> Result<AhHandle> {
        if let Some(e) = self.engine(dev)? {
            return e.create_ah(&mut self.conn, pd, av);
        }
        let h = self.conn.handle(&Request::CreateAh { dev, pd: pd.0, av })?;
        Ok(AhHandle(h as u32))
    }

    pub(crate) fn destroy_ah(&mut self, dev: u32, ah: AhHandle) -> Result<()> {
        if let Some(e) = self.engine(dev)? {
            return e.destroy_ah(&mut self.conn, ah);
        }
        self.conn.ok(&Request::DestroyAh { dev, ah: ah.0 })
    }

    pub(crate) fn post_send(&mut self, dev: u32, qpn: Qpn, wrs: Vec<SendWr>) -> Result<()> {
        if let Some(e) = started(&self.process, dev) {
            return e.post_send(&mut self.conn, qpn, wrs);
        }
        if let Some(e) = self.engine(dev)? {
            return e.post_send(&mut self.conn, qpn, wrs);
        }
        self.posts.post_send(&mut self.conn, (dev, qpn), wrs)
    }

    pub(crate) fn post_recv(&mut self, dev: u32, qpn: Qpn, wrs: Vec<RecvWr>) -> Result<()> {
        if let Some(e) = started(&self.process, dev) {
            return e.post_recv(qpn, wrs);
        }
        if let Some(e) = self.engine(dev)? {
            return e.post_recv(qpn, wrs);
        }
        self.posts.post_recv(&mut self.conn, (dev, qpn), wrs)
    }

    /// An empty poll of device `dev`'s CQ by a program that spins without waiting (the
    /// drop-in's `ibv_poll_cq`): whether to yield the CPU now. On the daemon's path every
    /// empty poll yields (the daemon, the "hardware", may need the core) and fails once the
    /// daemon has stopped answering, so that the program stops instead of spinning forever;
    /// a process engine's poll turns the engine itself and needs no daemon, and yields only
    /// after [`PURE_SPIN_POLLS`] empty polls in a row.
    pub(crate) fn idle_poll(&mut self, dev: u32) -> Result<bool> {
        if started(&self.process, dev).is_none() {
            self.conn.check_alive()?;
            return Ok(true);
        }
        self.empty_polls = self.empty_polls.saturating_add(1);
        Ok(self.empty_polls > PURE_SPIN_POLLS)
    }

    /// A poll that found completions: the next empty one starts a new spin.
    pub(crate) fn polled_some(&mut self) {
        self.empty_polls = 0;
    }

    /// `ibv_poll_cq`, and with a nonzero `wait` the waiting form (see [`CqRings::poll`]).
    pub(crate) fn poll_cq(
        &mut self,
        dev: u32,
        cq: CqHandle,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<WorkCompletion>> {
        if let Some(e) = started(&self.process, dev) {
            return e.poll_cq(cq, max, wait);
        }
        if let Some(e) = self.engine(dev)? {
            return e.poll_cq(cq, max, wait);
        }
        let wcs = self.cqs.poll(&mut self.conn, dev, cq.0, max, wait)?;
        self.posts.note_completions(dev, &wcs);
        Ok(wcs)
    }

    pub(crate) fn attach_mcast(&mut self, dev: u32, qpn: Qpn, gid: Gid, lid: Lid) -> Result<()> {
        if let Some(e) = self.engine(dev)? {
            return e.attach_mcast(qpn, gid, lid);
        }
        self.conn.ok(&Request::AttachMcast { dev, qpn, gid, lid })
    }

    pub(crate) fn detach_mcast(&mut self, dev: u32, qpn: Qpn, gid: Gid) -> Result<()> {
        if let Some(e) = self.engine(dev)? {
            return e.detach_mcast(qpn, gid);
        }
        self.conn.ok(&Request::DetachMcast { dev, qpn, gid })
    }

    pub(crate) fn create_comp_channel(&mut self) -> Result<CompChannel> {
        let fd = CompChannel::new_fd()?;
        let req = Request::CreateCompChannel;
        match self
            .conn
            .call_with_fds(&req, &[std::os::fd::AsFd::as_fd(&fd)])?
        {
            Response::Handle(handle) => Ok(CompChannel { fd, handle }),
            _ => Err(Error::Unexpected("not a handle")),
        }
    }

    pub(crate) fn destroy_comp_channel(&mut self, channel: CompChannel) -> Result<()> {
        let engines = || {
            self.process
                .iter()
                .flatten()
                .filter_map(|(_, e)| e.as_ref())
        };
        if engines().any(|e| e.channel_in_use(channel.handle)) {
            // As the daemon refuses it for its CQs.
            return Err(Error::Refused {
                kind: ErrorKind::Busy,
                message: "a CQ is still armed on this completion channel".into(),
            });
        }
        for e in engines() {
            e.forget_channel(channel.handle);
        }
        self.conn.ok(&Request::DestroyCompChannel {
            channel: channel.handle,
        })
    }

    pub(crate) fn req_notify_cq(
        &mut self,
        dev: u32,
        cq: CqHandle,
        channel: &CompChannel,
    ) -> Result<()> {
        if let Some(e) = self.engine(dev)? {
            return e.req_notify_cq(cq, channel);
        }
        self.conn.ok(&Request::ReqNotifyCq {
            dev,
            cq: cq.0,
            channel: channel.handle,
        })
    }

    pub(crate) fn async_events(&mut self) -> Result<Vec<(u32, AsyncEvent)>> {
        let mut all = match self.conn.call(&Request::AsyncEvents)? {
            Response::AsyncEvents(all) => all,
            _ => return Err(Error::Unexpected("not events")),
        };
        for (dev, e) in self.process.iter().flatten() {
            if let Some(e) = e {
                all.extend(e.async_events().into_iter().map(|ev| (*dev, ev)));
            }
        }
        Ok(all)
    }

    /// What device `dev`'s process engine carried, if this session runs one there.
    pub(crate) fn process_counters(&mut self, dev: u32) -> Result<Option<ProcessCounters>> {
        Ok(self.engine(dev)?.map(|e| e.counters()))
    }

    /// The process engine of device `dev` when this session uses the process data path there
    /// (a RoCE device, unless `SOFTIB_DATAPATH=daemon`), started on first use; `None` for the
    /// daemon path (an IB device, or an engine that could not start and was not insisted on).
    fn engine(&mut self, dev: u32) -> Result<Option<Arc<Engine>>> {
        let Some(engines) = &self.process else {
            return Ok(None);
        };
        if let Some(e) = engines.get(&dev) {
            return Ok(e.clone());
        }
        let devices = self.devices()?;
        let Some(info) = devices.get(dev as usize) else {
            // The daemon says what is missing.
            return Ok(None);
        };
        let roce = info.ports.first().is_some_and(|p| !p.link_layer_ib);
        let engine = if roce {
            match Engine::start(&mut self.conn, dev, info) {
                Ok(e) => {
                    if let Some(bell) = &self.async_bell {
                        e.set_async_bell(bell.try_clone()?);
                    }
                    Some(Arc::new(e))
                }
                Err(e) if !self.process_forced && !matches!(e, Error::DaemonGone { .. }) => {
                    // Said once per device: the program runs, on the daemon's data path.
                    eprintln!(
                        "softib: the process data path cannot start on {} ({e}); device {} \
                         uses the daemon's (SOFTIB_DATAPATH=daemon chooses it, \
                         SOFTIB_DATAPATH=process makes this an error)",
                        info.name, dev
                    );
                    None
                }
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        if let Some(engines) = &mut self.process {
            engines.insert(dev, engine.clone());
        }
        Ok(engine)
    }

    pub(crate) fn open_mad(&mut self, dev: u32, port: u8, sm: bool) -> Result<()> {
        self.conn.ok(&Request::OpenMad { dev, port, sm })
    }

    pub(crate) fn send_smp(
        &mut self,
        dev: u32,
        port: u8,
        dlid: Option<Lid>,
        mad: &[u8; 256],
    ) -> Result<()> {
        self.conn.ok(&Request::SendSmp {
            dev,
            port,
            dlid,
            mad: mad.to_vec(),
        })
    }

    pub(crate) fn cm_listen(&mut self, dev: u32, service_id: u64, listen: bool) -> Result<()> {
        self.conn.ok(&Request::CmListen {
            dev,
            service_id,
            listen,
        })
    }

    pub(crate) fn send_gmp_gid(
        &mut self,
        dev: u32,
        port: u8,
        dgid: softib_wire::Gid,
        dest_qpn: Qpn,
        mad: &[u8; 256],
    ) -> Result<()> {
        self.conn.ok(&Request::SendGmpGid {
            dev,
            port,
            dgid,
            dest_qpn,
            mad: mad.to_vec(),
        })
    }

    pub(crate) fn send_gmp(
        &mut self,
        dev: u32,
        port: u8,
        dlid: Lid,
        dest_qpn: Qpn,
        mad: &[u8; 256],
    ) -> Result<()> {
        self.conn.ok(&Request::SendGmp {
            dev,
            port,
            dlid,
            dest_qpn,
            mad: mad.to_vec(),
        })
    }

    pub(crate) fn recv_mads(&mut self, max: u32, wait: Duration) -> Result<Vec<Mad>> {
        let wait_us = u32::try_from(wait.as_micros()).unwrap_or(u32::MAX);
        match self.conn.call(&Request::RecvMads { max, wait_us })? {
            Response::Mads(v) => Ok(v),
            _ => Err(Error::Unexpected("not MADs")),
        }
    }

    pub(crate) fn set_faults(&mut self, dev: u32, port: u8, spec: FaultSpec) -> Result<()> {
        self.conn.ok(&Request::SetFaults { dev, port, spec })
    }

    pub(crate) fn faults(&mut self, dev: u32) -> Result<Vec<(u8, FaultSpec, FaultStats)>> {
        match self.conn.call(&Request::Faults { dev })? {
            Response::Faults(v) => Ok(v),
            _ => Err(Error::Unexpected("not faults")),
        }
    }

    pub(crate) fn capture(&mut self, dev: u32, path: Option<&Path>) -> Result<u64> {
        let path = path.map(|p| p.display().to_string());
        self.conn.handle(&Request::Capture { dev, path })
    }

    pub(crate) fn captured(&mut self, dev: u32) -> Result<u64> {
        self.conn.handle(&Request::CaptureCount { dev })
    }

    pub(crate) fn resources(&mut self) -> Result<Vec<ClientResources>> {
        match self.conn.call(&Request::Resources)? {
            Response::Resources(v) => Ok(v),
            _ => Err(Error::Unexpected("not resources")),
        }
    }

    pub(crate) fn link_add(&mut self, config: LinkConfig) -> Result<()> {
        self.conn.ok(&Request::LinkAdd(config))
    }

    pub(crate) fn link_del(&mut self, name: &str) -> Result<()> {
        self.conn.ok(&Request::LinkDel {
            name: name.to_string(),
        })
    }

    pub(crate) fn links(&mut self) -> Result<Vec<(LinkConfig, bool)>> {
        match self.conn.call(&Request::LinkShow)? {
            Response::Links(v) => Ok(v),
            _ => Err(Error::Unexpected("not a link list")),
        }
    }

    pub(crate) fn set_port_enabled(&mut self, dev: u32, port: u8, enabled: bool) -> Result<()> {
        self.conn
            .ok(&Request::SetPortEnabled { dev, port, enabled })
    }

    pub(crate) fn set_sm(&mut self, dev: u32, port: u8, sm_info: Option<[u8; 64]>) -> Result<()> {
        self.conn.ok(&Request::SetSm {
            dev,
            port,
            sm_info: sm_info.map(|b| b.to_vec()),
        })
    }
}

/// The started engine of device `dev` among a session's (see `Session::engine`): the data
/// path's look-up, which leaves the engine's reference count alone (two atomic operations per
/// post and poll).
fn started(process: &Option<BTreeMap<u32, Option<Arc<Engine>>>>, dev: u32) -> Option<&Engine> {
    process.as_ref()?.get(&dev)?.as_deref()
}
