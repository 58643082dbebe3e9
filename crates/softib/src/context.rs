//! [`Context`]: the verbs one call at a time, with handles, over one backend — the softib
//! daemon (`daemon`) or a real device through rdma-core (`rdma_core`). Each verb dispatches
//! once on the backend; what only softib has is refused on rdma-core by name.

use std::path::Path;
use std::time::Duration;

use softib_engine::verbs::AsyncEvent;
use softib_net::shm::SharedRegion;

use crate::daemon::Session;
use crate::rdma_core;
use crate::{
    runtime_dir, AccessFlags, AddressVector, AhHandle, AttrMask, Buffer, ClientResources,
    CompChannel, CqHandle, DeviceInfo, Error, ErrorKind, FaultSpec, FaultStats, Gid, Lid,
    LinkConfig, Mad, MrKeys, PdHandle, QpAttr, QpInitAttr, Qpn, RecvWr, Result, SendWr, SrqHandle,
    WorkCompletion,
};

/// A session with this host's verbs: softibd's, or a real RDMA device's through rdma-core.
#[derive(Debug)]
pub struct Context {
    backend: Backend,
}

/// What a context drives. An embedded daemon (`softib::embedded`) is a `Daemon` too: the same
/// daemon on a thread of this process, reached the same way through its runtime directory.
#[derive(Debug)]
enum Backend {
    /// softibd: control verbs as requests, posts and completions through shared rings.
    Daemon(Box<Session>),
    /// A real RDMA device through rdma-core's libibverbs, loaded at run time.
    RdmaCore(Box<rdma_core::Backend>),
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
        Ok(Context {
            backend: Backend::RdmaCore(Box::new(rdma_core::Backend::open()?)),
        })
    }

    /// Connects to the daemon whose runtime directory is `dir`.
    pub fn open_at(dir: &Path) -> Result<Context> {
        Ok(Context {
            backend: Backend::Daemon(Box::new(Session::connect(dir)?)),
        })
    }

    /// Connects to the daemon whose runtime directory is `dir`, its RoCE devices' engines on
    /// data path `datapath` whatever `SOFTIB_DATAPATH` says (a tool or test that needs one).
    pub fn open_on(dir: &Path, datapath: crate::DataPath) -> Result<Context> {
        Ok(Context {
            backend: Backend::Daemon(Box::new(Session::connect_on(dir, datapath)?)),
        })
    }

    /// Whether this context drives a real RDMA device through rdma-core (not softibd).
    pub fn is_rdma_core(&self) -> bool {
        matches!(self.backend, Backend::RdmaCore(_))
    }

    /// The host name the daemon serves (empty on rdma-core).
    pub fn host(&self) -> &str {
        match &self.backend {
            Backend::Daemon(s) => s.host(),
            Backend::RdmaCore(_) => "",
        }
    }

    /// The daemon's process id (0 on rdma-core).
    pub fn daemon_pid(&self) -> u32 {
        match &self.backend {
            Backend::Daemon(s) => s.daemon_pid(),
            Backend::RdmaCore(_) => 0,
        }
    }

    /// The daemon session, for a verb only softib has (`what`, as the request is named); on
    /// rdma-core the refusal that says so.
    fn session(&mut self, what: &str) -> Result<&mut Session> {
        match &mut self.backend {
            Backend::Daemon(s) => Ok(s),
            Backend::RdmaCore(_) => Err(Error::RdmaCore(format!(
                "{what} is a softib feature, not available on an rdma-core device \
                 (SOFTIB_BACKEND=rdma-core, or no softibd was running); run it against softibd \
                 (SOFTIB_BACKEND=softib)"
            ))),
        }
    }

    /// The devices of this host (`ibv_get_device_list` + `ibv_query_device` + ports).
    pub fn devices(&mut self) -> Result<Vec<DeviceInfo>> {
        match &mut self.backend {
            Backend::Daemon(s) => s.devices(),
            Backend::RdmaCore(r) => r.devices(),
        }
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

    /// Allocates a buffer of `len` bytes shared with the HCA.
    pub fn alloc_buffer(&mut self, len: usize) -> Result<Buffer> {
        let map = SharedRegion::create("softib-buffer", len)?;
        let id = match &mut self.backend {
            Backend::Daemon(s) => s.attach_buffer(&map)?,
            // Plain process memory: the rdma-core device pins it when it is registered.
            Backend::RdmaCore(_) => 0,
        };
        Ok(Buffer { map, id })
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self, dev: u32) -> Result<PdHandle> {
        match &mut self.backend {
            Backend::Daemon(s) => s.alloc_pd(dev),
            Backend::RdmaCore(r) => r.alloc_pd(dev),
        }
    }

    /// `ibv_dealloc_pd`.
    pub fn dealloc_pd(&mut self, dev: u32, pd: PdHandle) -> Result<()> {
        match &mut self.backend {
            Backend::Daemon(s) => s.dealloc_pd(dev, pd),
            Backend::RdmaCore(r) => r.dealloc_pd(dev, pd),
        }
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
        match &mut self.backend {
            // The daemon checks the extent against the buffer it was given.
            Backend::Daemon(s) => {
                s.reg_mr(dev, pd, buffer.id, addr, len, access, Some(&buffer.map))
            }
            Backend::RdmaCore(r) => {
                if offset.checked_add(len).is_none_or(|end| end > buffer.len()) {
                    return Err(Error::RdmaCore(format!(
                        "ibv_reg_mr: {len} bytes from offset {offset} do not fit the buffer of \
                         {} bytes",
                        buffer.len()
                    )));
                }
                r.reg_mr(dev, pd, addr, len, access)
            }
        }
    }

    /// `ibv_reg_mr` of this process's own memory — any `len` bytes at `addr`, not a buffer
    /// from [`Context::alloc_buffer`]. The daemon reaches it with cross-memory attach (the
    /// library first allows the daemon to, with `prctl(PR_SET_PTRACER)`), so each access costs
    /// a system call in the daemon: shared buffers are faster.
    ///
    /// The memory must stay valid until the region is deregistered (the owned API's
    /// [`crate::ProtectionDomain::register_slice`] makes the borrow checker see to it).
    pub fn reg_mr_process(
        &mut self,
        dev: u32,
        pd: PdHandle,
        addr: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<MrKeys> {
        match &mut self.backend {
            Backend::Daemon(s) => s.reg_mr_process(dev, pd, addr, len, access),
            Backend::RdmaCore(r) => r.reg_mr(dev, pd, addr, len, access),
        }
    }

    /// Shares `len` bytes of this process's memory at `addr` with the daemon as a buffer: a
    /// memory file `fd` the caller has mapped there (`MAP_SHARED`, from offset 0), which the
    /// daemon maps too, so that regions in it are reached as [`Buffer`]s are (directly, not by
    /// cross-memory attach). Returns the handle [`Context::reg_mr_shared`] takes.
    pub fn attach_shared(
        &mut self,
        fd: std::os::fd::BorrowedFd<'_>,
        addr: u64,
        len: usize,
    ) -> Result<u64> {
        self.session("AttachBuffer")?.attach_shared(fd, addr, len)
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
        self.session("RegMr")?
            .reg_mr(dev, pd, buffer, addr, len, access, None)
    }

    /// `ibv_dereg_mr`.
    pub fn dereg_mr(&mut self, dev: u32, mr: &MrKeys) -> Result<()> {
        match &mut self.backend {
            Backend::Daemon(s) => s.dereg_mr(dev, mr.lkey),
            Backend::RdmaCore(r) => r.dereg_mr(dev, mr.lkey),
        }
    }

    /// `ibv_create_cq`.
    ///
    /// On softib the CQ's completions come through a ring in memory shared with the daemon, so
    /// polling it is a load, not a request (as a hardware CQ is polled in host memory).
    pub fn create_cq(&mut self, dev: u32, cqe: u32) -> Result<CqHandle> {
        match &mut self.backend {
            Backend::Daemon(s) => s.create_cq(dev, cqe),
            Backend::RdmaCore(r) => r.create_cq(dev, cqe),
        }
    }

    /// `ibv_destroy_cq`.
    pub fn destroy_cq(&mut self, dev: u32, cq: CqHandle) -> Result<()> {
        match &mut self.backend {
            Backend::Daemon(s) => s.destroy_cq(dev, cq),
            Backend::RdmaCore(r) => r.destroy_cq(dev, cq),
        }
    }

    /// `ibv_create_qp`.
    pub fn create_qp(&mut self, dev: u32, init: QpInitAttr) -> Result<Qpn> {
        match &mut self.backend {
            Backend::Daemon(s) => s.create_qp(dev, init),
            Backend::RdmaCore(r) => r.create_qp(dev, init),
        }
    }

    /// What the process engine of device `dev` carried and lost (rings to other processes'
    /// engines, its sockets); `None` when the device's data path is the daemon's.
    pub fn process_counters(&mut self, dev: u32) -> Result<Option<crate::ProcessCounters>> {
        match &mut self.backend {
            Backend::Daemon(s) => s.process_counters(dev),
            Backend::RdmaCore(_) => Ok(None),
        }
    }

    /// `ibv_modify_qp`.
    pub fn modify_qp(&mut self, dev: u32, qpn: Qpn, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        match &mut self.backend {
            Backend::Daemon(s) => s.modify_qp(dev, qpn, attr, mask),
            Backend::RdmaCore(r) => r.modify_qp(dev, qpn, attr, mask),
        }
    }

    /// `ibv_query_qp`.
    pub fn query_qp(&mut self, dev: u32, qpn: Qpn) -> Result<(QpAttr, QpInitAttr)> {
        match &mut self.backend {
            Backend::Daemon(s) => s.query_qp(dev, qpn),
            Backend::RdmaCore(r) => r.query_qp(dev, qpn),
        }
    }

    /// `ibv_destroy_qp`.
    pub fn destroy_qp(&mut self, dev: u32, qpn: Qpn) -> Result<()> {
        match &mut self.backend {
            Backend::Daemon(s) => s.destroy_qp(dev, qpn),
            Backend::RdmaCore(r) => r.destroy_qp(dev, qpn),
        }
    }

    /// `ibv_create_srq`: a receive queue QPs created with `srq` set share.
    pub fn create_srq(
        &mut self,
        dev: u32,
        pd: PdHandle,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<SrqHandle> {
        self.session("CreateSrq")?
            .create_srq(dev, pd, max_wr, max_sge)
    }

    /// `ibv_modify_srq` with IBV_SRQ_LIMIT: the SRQ limit event fires once fewer than `limit`
    /// receives remain.
    pub fn modify_srq(&mut self, dev: u32, srq: SrqHandle, limit: u32) -> Result<()> {
        self.session("ModifySrq")?.modify_srq(dev, srq, limit)
    }

    /// `ibv_destroy_srq`.
    pub fn destroy_srq(&mut self, dev: u32, srq: SrqHandle) -> Result<()> {
        self.session("DestroySrq")?.destroy_srq(dev, srq)
    }

    /// `ibv_post_srq_recv` of a list.
    pub fn post_srq_recv(&mut self, dev: u32, srq: SrqHandle, wrs: Vec<RecvWr>) -> Result<()> {
        self.session("PostSrqRecv")?.post_srq_recv(dev, srq, wrs)
    }

    /// `ibv_create_ah`.
    pub fn create_ah(&mut self, dev: u32, pd: PdHandle, av: AddressVector) -> Result<AhHandle> {
        match &mut self.backend {
            Backend::Daemon(s) => s.create_ah(dev, pd, av),
            Backend::RdmaCore(r) => r.create_ah(dev, pd, av),
        }
    }

    /// `ibv_destroy_ah`.
    pub fn destroy_ah(&mut self, dev: u32, ah: AhHandle) -> Result<()> {
        match &mut self.backend {
            Backend::Daemon(s) => s.destroy_ah(dev, ah),
            Backend::RdmaCore(r) => r.destroy_ah(dev, ah),
        }
    }

    /// `ibv_post_send` of a list: all posted, or the error of the first that was not (the
    /// ones before it are posted, as with the verb's `bad_wr`).
    ///
    /// On softib, a list the library can check completely (the QP is in RTS, its send queue
    /// has room, and each WR passes [`softib_engine::check_send_wr`]) goes into the submission
    /// ring in shared memory and the daemon's doorbell rings: no request, no reply to wait for.
    /// Anything else is a request, whose answer says what is wrong.
    pub fn post_send(&mut self, dev: u32, qpn: Qpn, wrs: Vec<SendWr>) -> Result<()> {
        match &mut self.backend {
            Backend::Daemon(s) => s.post_send(dev, qpn, wrs),
            Backend::RdmaCore(r) => r.post_send(dev, qpn, &wrs),
        }
    }

    /// `ibv_post_recv` of a list.
    pub fn post_recv(&mut self, dev: u32, qpn: Qpn, wrs: Vec<RecvWr>) -> Result<()> {
        match &mut self.backend {
            Backend::Daemon(s) => s.post_recv(dev, qpn, wrs),
            Backend::RdmaCore(r) => r.post_recv(dev, qpn, &wrs),
        }
    }

    /// `ibv_poll_cq` for up to `max` completions.
    ///
    /// With `wait` zero this is `ibv_poll_cq`: what is there now, at once. It never blocks,
    /// sleeps or yields, so a caller that spins on it spins — and on a machine with fewer cores
    /// than spinning processes a spinner can starve the daemon that makes the progress it
    /// waits for: such a caller should wait instead. With a nonzero `wait` it waits up to that
    /// long for the first completion: a short spin that yields the CPU, then a sleep that the
    /// daemon ends when a completion arrives (rdma-core: short naps).
    pub fn poll_cq(
        &mut self,
        dev: u32,
        cq: CqHandle,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<WorkCompletion>> {
        match &mut self.backend {
            Backend::Daemon(s) => s.poll_cq(dev, cq, max, wait),
            Backend::RdmaCore(r) => r.poll_cq(dev, cq, max, wait),
        }
    }

    /// `ibv_poll_cq` as a C program calls it in a loop: appends up to `max` completions to
    /// `out` and returns at once. On the daemon's data path an empty poll yields the CPU,
    /// which the daemon — the "hardware" — may need on a machine with fewer cores than
    /// spinners, and fails with [`Error::DaemonUnresponsive`] once the daemon has stopped
    /// answering (a spinning program would otherwise spin forever); on the process path, where
    /// the poll itself drives the engine, empty polls yield only after a short spin. Returns
    /// how many it appended.
    pub fn poll_cq_nowait(
        &mut self,
        dev: u32,
        cq: CqHandle,
        max: u32,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize> {
        let mut got = self.poll_cq(dev, cq, max, Duration::ZERO)?;
        if let Backend::Daemon(s) = &mut self.backend {
            if !got.is_empty() {
                s.polled_some();
            } else if s.idle_poll(dev)? {
                std::thread::yield_now();
            }
        }
        let n = got.len();
        out.append(&mut got);
        Ok(n)
    }

    /// `ibv_attach_mcast`: UD QP `qpn` receives what is sent to multicast group `gid`/`lid`.
    pub fn attach_mcast(&mut self, dev: u32, qpn: Qpn, gid: Gid, lid: Lid) -> Result<()> {
        self.session("AttachMcast")?
            .attach_mcast(dev, qpn, gid, lid)
    }

    /// `ibv_detach_mcast`.
    pub fn detach_mcast(&mut self, dev: u32, qpn: Qpn, gid: Gid) -> Result<()> {
        self.session("DetachMcast")?.detach_mcast(dev, qpn, gid)
    }

    /// `ibv_create_comp_channel`: see [`CompChannel`].
    pub fn create_comp_channel(&mut self) -> Result<CompChannel> {
        self.session("CreateCompChannel")?.create_comp_channel()
    }

    /// `ibv_destroy_comp_channel`.
    pub fn destroy_comp_channel(&mut self, channel: CompChannel) -> Result<()> {
        self.session("DestroyCompChannel")?
            .destroy_comp_channel(channel)
    }

    /// `ibv_req_notify_cq`: `channel` becomes readable once `cq` holds a completion (one-shot).
    pub fn req_notify_cq(&mut self, dev: u32, cq: CqHandle, channel: &CompChannel) -> Result<()> {
        self.session("ReqNotifyCq")?.req_notify_cq(dev, cq, channel)
    }

    /// `ibv_get_async_event`, without waiting: the asynchronous events of this context's
    /// objects and of the ports since it last asked, as (device index, event), oldest first.
    pub fn async_events(&mut self) -> Result<Vec<(u32, AsyncEvent)>> {
        self.session("AsyncEvents")?.async_events()
    }

    /// Hands the daemon an eventfd it adds to whenever it queues an asynchronous event for
    /// this context (what makes `ibv_context::async_fd` pollable). `false` when it cannot (an
    /// older daemon, or rdma-core): events are then only seen when asked for.
    pub fn attach_async_fd(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> Result<bool> {
        match &mut self.backend {
            Backend::Daemon(s) => s.attach_async_fd(fd),
            Backend::RdmaCore(_) => Ok(false),
        }
    }

    /// Becomes a MAD agent on `port` (`sm`: the subnet manager, which receives SMP responses
    /// and SA requests).
    pub fn open_mad(&mut self, dev: u32, port: u8, sm: bool) -> Result<()> {
        self.session("OpenMad")?.open_mad(dev, port, sm)
    }

    /// Hands the daemon an eventfd it adds to whenever it queues a MAD for this agent: a
    /// program sleeps on it (or polls it beside its other files) and then takes the MADs with
    /// [`Context::recv_mads`] and no wait, while its other threads go on sending.
    pub fn attach_mad_wakeup(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> Result<()> {
        self.session("AttachMadWakeup")?.attach_mad_wakeup(fd)
    }

    /// Sends an SMP: directed-route when `dlid` is `None`.
    pub fn send_smp(
        &mut self,
        dev: u32,
        port: u8,
        dlid: Option<Lid>,
        mad: &[u8; 256],
    ) -> Result<()> {
        self.session("SendSmp")?.send_smp(dev, port, dlid, mad)
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
        self.session("SendGmp")?
            .send_gmp(dev, port, dlid, dest_qpn, mad)
    }

    /// This agent's CM listens (or stops listening) on `service_id` of device `dev`: the
    /// daemon routes REQs for it to this agent, and rejects those nobody listens for.
    pub fn cm_listen(&mut self, dev: u32, service_id: u64, listen: bool) -> Result<()> {
        self.session("CmListen")?.cm_listen(dev, service_id, listen)
    }

    /// Sends a GMP from QP1 of a RoCE port to `dest_qpn` at `dgid` (routed by the GRH).
    pub fn send_gmp_gid(
        &mut self,
        dev: u32,
        port: u8,
        dgid: Gid,
        dest_qpn: Qpn,
        mad: &[u8; 256],
    ) -> Result<()> {
        self.session("SendGmpGid")?
            .send_gmp_gid(dev, port, dgid, dest_qpn, mad)
    }

    /// Receives MADs for this agent, waiting up to `wait` for the first.
    pub fn recv_mads(&mut self, max: u32, wait: Duration) -> Result<Vec<Mad>> {
        self.session("RecvMads")?.recv_mads(max, wait)
    }

    /// Injects faults on the egress of `port` of device `dev` (port 0: every port).
    pub fn set_faults(&mut self, dev: u32, port: u8, spec: FaultSpec) -> Result<()> {
        self.session("SetFaults")?.set_faults(dev, port, spec)
    }

    /// Per port: the faults in force and what they did.
    pub fn faults(&mut self, dev: u32) -> Result<Vec<(u8, FaultSpec, FaultStats)>> {
        self.session("Faults")?.faults(dev)
    }

    /// Starts capturing device `dev` into `path` (absolute), or stops (`None`); returns the
    /// packets of the capture that stopped.
    pub fn capture(&mut self, dev: u32, path: Option<&Path>) -> Result<u64> {
        self.session("Capture")?.capture(dev, path)
    }

    /// Packets captured so far.
    pub fn captured(&mut self, dev: u32) -> Result<u64> {
        self.session("CaptureCount")?.captured(dev)
    }

    /// What every client of the daemon owns.
    pub fn resources(&mut self) -> Result<Vec<ClientResources>> {
        self.session("Resources")?.resources()
    }

    /// `softib link add`: a RoCEv2 device on an interface and address.
    pub fn link_add(&mut self, config: LinkConfig) -> Result<()> {
        self.session("LinkAdd")?.link_add(config)
    }

    /// `softib link del`.
    pub fn link_del(&mut self, name: &str) -> Result<()> {
        self.session("LinkDel")?.link_del(name)
    }

    /// The RoCE devices and whether each port is up.
    pub fn links(&mut self) -> Result<Vec<(LinkConfig, bool)>> {
        self.session("LinkShow")?.links()
    }

    /// Plugs in (`true`) or pulls (`false`) the cable of `port`.
    pub fn set_port_enabled(&mut self, dev: u32, port: u8, enabled: bool) -> Result<()> {
        self.session("SetPortEnabled")?
            .set_port_enabled(dev, port, enabled)
    }

    /// Announces (or withdraws) the SM on `port`: IsSM and the SMInfo its SMA answers with.
    pub fn set_sm(&mut self, dev: u32, port: u8, sm_info: Option<[u8; 64]>) -> Result<()> {
        self.session("SetSm")?.set_sm(dev, port, sm_info)
    }
}
