//! The verbs objects with ownership: each one releases itself on the HCA when dropped, in the
//! order the verbs require (a QP before its CQs and PD, an MR before its PD).
//!
//! ```no_run
//! use softib::{AccessFlags, Device, Mtu, QpType};
//! # fn main() -> Result<(), softib::Error> {
//! let dev = Device::open(Some("rxe0"))?;
//! let pd = dev.alloc_pd()?;
//! let cq = dev.create_cq(64)?;
//! let buf = dev.alloc_buffer(4096)?;
//! let mr = pd.register(&buf, AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_WRITE))?;
//! let qp = pd.create_qp(QpType::Rc, &cq, &cq, 64)?;
//! let me = qp.endpoint()?;          // send this to the peer (it is serde-serialisable)
//! # let peer = me.clone();
//! qp.connect(&peer, Mtu::Mtu1024)?; // INIT → RTR → RTS
//! qp.write(&mr, 0, 64, peer.addr, peer.rkey, 1)?;
//! let wc = cq.wait(std::time::Duration::from_secs(5))?;
//! # Ok(()) }
//! ```

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use softib_engine::verbs::AsyncEvent;

use crate::typed::{InitAttr, RtrAttr, RtsAttr};
use crate::{
    AccessFlags, AddressVector, AhHandle, AttrMask, Buffer, CompChannel, Context, CqHandle,
    DeviceInfo, Error, ErrorKind, Gid, GlobalRoute, Lid, MrKeys, Mtu, PdHandle, PortInfo, Psn,
    QpAttr, QpCap, QpInitAttr, QpState, QpType, Qpn, RKey, RecvWr, RemoteAddr, Result, SendFlags,
    SendWr, Sge, SrqHandle, UdDest, WorkCompletion, WrOpcode,
};

/// One device of this host, opened. Cloning shares the session.
#[derive(Debug, Clone)]
pub struct Device {
    conn: Arc<Mutex<Context>>,
    index: u32,
    info: DeviceInfo,
}

impl Device {
    /// Opens device `name` (the first device when `None`) of this host: its daemon's, or a
    /// real RDMA device through rdma-core, as [`Context::open`] chooses (`SOFTIB_BACKEND`).
    pub fn open(name: Option<&str>) -> Result<Device> {
        Device::with(Context::open()?, name)
    }

    /// Opens device `name` of the daemon whose runtime directory is `dir`.
    pub fn open_at(dir: &Path, name: Option<&str>) -> Result<Device> {
        Device::with(Context::open_at(dir)?, name)
    }

    /// [`Device::open_at`] on data path `datapath` ([`Context::open_on`]).
    pub fn open_on(dir: &Path, name: Option<&str>, datapath: crate::DataPath) -> Result<Device> {
        Device::with(Context::open_on(dir, datapath)?, name)
    }

    fn with(mut ctx: Context, name: Option<&str>) -> Result<Device> {
        let devs = ctx.devices()?;
        let index = match name {
            Some(n) => ctx.device_index(n)?,
            None if devs.is_empty() => {
                return Err(Error::Refused {
                    kind: ErrorKind::NotFound,
                    message: if ctx.is_rdma_core() {
                        "rdma-core lists no RDMA device on this host".into()
                    } else {
                        "this host has no devices (add one with `softib link add`)".into()
                    },
                })
            }
            None => 0,
        };
        let info = devs[index as usize].clone();
        Ok(Device {
            conn: Arc::new(Mutex::new(ctx)),
            index,
            info,
        })
    }

    fn ctx(&self) -> MutexGuard<'_, Context> {
        // A panic while holding the lock cannot leave the session half-written: every call
        // is one request and one response.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the device was when it was opened.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The port as it is now (state, LID, GIDs).
    pub fn port(&self, port: u8) -> Result<PortInfo> {
        let devs = self.ctx().devices()?;
        devs.get(self.index as usize)
            .and_then(|d| d.ports.iter().find(|p| p.number == port).cloned())
            .ok_or_else(|| Error::Refused {
                kind: ErrorKind::NotFound,
                message: format!("{} has no port {port}", self.info.name),
            })
    }

    /// What this device's engine in this process carried and lost, on the process data path
    /// (`None` on the daemon's).
    pub fn process_counters(&self) -> Result<Option<crate::ProcessCounters>> {
        self.ctx().process_counters(self.index)
    }

    /// Memory shared with the HCA, to register.
    pub fn alloc_buffer(&self, len: usize) -> Result<Buffer> {
        self.ctx().alloc_buffer(len)
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        let handle = self.ctx().alloc_pd(self.index)?;
        Ok(ProtectionDomain {
            dev: self.clone(),
            handle,
        })
    }

    /// `ibv_create_comp_channel`: a file descriptor to wait on for CQs armed with
    /// [`CompletionQueue::req_notify`] (see [`CompChannel`]).
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        self.ctx().create_comp_channel()
    }

    /// `ibv_destroy_comp_channel`: refused (Busy) while a CQ is armed on it.
    pub fn destroy_comp_channel(&self, channel: CompChannel) -> Result<()> {
        self.ctx().destroy_comp_channel(channel)
    }

    /// `ibv_get_async_event` without waiting: the events of this session's objects on this
    /// device and of its ports since last asked, oldest first (a CQ that overflowed raises
    /// `CqErr`, and each QP completing into it `QpFatal`).
    pub fn async_events(&self) -> Result<Vec<AsyncEvent>> {
        let all = self.ctx().async_events()?;
        Ok(all
            .into_iter()
            .filter(|&(d, _)| d == self.index)
            .map(|(_, e)| e)
            .collect())
    }

    /// `ibv_create_cq`.
    pub fn create_cq(&self, cqe: u32) -> Result<CompletionQueue> {
        let handle = self.ctx().create_cq(self.index, cqe)?;
        Ok(CompletionQueue {
            dev: self.clone(),
            handle,
        })
    }
}

/// A protection domain.
#[derive(Debug)]
pub struct ProtectionDomain {
    dev: Device,
    handle: PdHandle,
}

impl ProtectionDomain {
    /// Registers all of `buf`. The region borrows the buffer, so the buffer outlives it.
    pub fn register<'b>(&self, buf: &'b Buffer, access: AccessFlags) -> Result<MemoryRegion<'b>> {
        let keys = self
            .dev
            .ctx()
            .reg_mr(self.dev.index, self.handle, buf, 0, buf.len(), access)?;
        Ok(MemoryRegion {
            dev: self.dev.clone(),
            keys,
            buf: Some(buf),
            _mem: std::marker::PhantomData,
        })
    }

    /// Registers memory of this process that is not a shared [`Buffer`] — a `Vec`, an array —
    /// reached by the HCA through cross-memory attach (see [`Context::reg_mr_process`]). The
    /// region borrows the memory mutably for its whole life, since the HCA may write it at
    /// any time: read the results after dropping the region.
    pub fn register_slice<'b>(
        &self,
        mem: &'b mut [u8],
        access: AccessFlags,
    ) -> Result<MemoryRegion<'b>> {
        let keys = self.dev.ctx().reg_mr_process(
            self.dev.index,
            self.handle,
            mem.as_mut_ptr() as u64,
            mem.len(),
            access,
        )?;
        Ok(MemoryRegion {
            dev: self.dev.clone(),
            keys,
            buf: None,
            _mem: std::marker::PhantomData,
        })
    }

    /// `ibv_create_qp` with `depth` work requests in each queue and one SGE each.
    pub fn create_qp(
        &self,
        qp_type: QpType,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        depth: u32,
    ) -> Result<QueuePair> {
        self.create_qp_on(qp_type, send_cq, recv_cq, None, depth)
    }

    /// `ibv_create_qp` of a QP that takes its receives from `srq`.
    pub fn create_qp_with_srq(
        &self,
        qp_type: QpType,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        srq: &SharedReceiveQueue,
        depth: u32,
    ) -> Result<QueuePair> {
        self.create_qp_on(qp_type, send_cq, recv_cq, Some(srq.handle), depth)
    }

    /// `ibv_create_srq` of `max_wr` receives of one SGE.
    pub fn create_srq(&self, max_wr: u32) -> Result<SharedReceiveQueue> {
        let handle = self
            .dev
            .ctx()
            .create_srq(self.dev.index, self.handle, max_wr, 1)?;
        Ok(SharedReceiveQueue {
            dev: self.dev.clone(),
            handle,
        })
    }

    fn create_qp_on(
        &self,
        qp_type: QpType,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        srq: Option<SrqHandle>,
        depth: u32,
    ) -> Result<QueuePair> {
        let qp = self.create_qp_reset(qp_type, send_cq, recv_cq, srq, depth)?;
        qp.modify_to_init(&InitAttr::default())?;
        Ok(qp)
    }

    /// `ibv_create_qp`, the QP left in RESET.
    pub(crate) fn create_qp_reset(
        &self,
        qp_type: QpType,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        srq: Option<SrqHandle>,
        depth: u32,
    ) -> Result<QueuePair> {
        let qpn = self.dev.ctx().create_qp(
            self.dev.index,
            QpInitAttr {
                qp_type,
                pd: self.handle,
                send_cq: send_cq.handle,
                recv_cq: recv_cq.handle,
                srq,
                cap: QpCap {
                    max_send_wr: depth,
                    max_recv_wr: depth,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            },
        )?;
        // A PSN per QP that differs between runs, as ibv_*_pingpong chooses one.
        let psn = (u32::from(std::process::id() as u16) << 8 ^ qpn.value()) & 0x00ff_ffff;
        let qp = QueuePair {
            dev: self.dev.clone(),
            pd: self.handle,
            qpn,
            qp_type,
            psn,
            port: std::sync::atomic::AtomicU8::new(1),
            ahs: Mutex::new(Vec::new()),
        };
        Ok(qp)
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        let _ = self.dev.ctx().dealloc_pd(self.dev.index, self.handle);
    }
}

/// An address handle (`ibv_ah`): the path to a peer, for UD sends.
#[derive(Debug)]
pub struct AddressHandle {
    dev: Device,
    handle: AhHandle,
}

impl AddressHandle {
    /// The daemon's handle of it.
    pub fn handle(&self) -> AhHandle {
        self.handle
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        let _ = self.dev.ctx().destroy_ah(self.dev.index, self.handle);
    }
}

/// A shared receive queue (`ibv_srq`): receives that any QP created with it consumes.
#[derive(Debug)]
pub struct SharedReceiveQueue {
    dev: Device,
    handle: SrqHandle,
}

impl SharedReceiveQueue {
    /// Posts a receive of `len` bytes at `offset` of `mr`.
    pub fn recv(&self, mr: &MemoryRegion<'_>, offset: usize, len: usize, wr_id: u64) -> Result<()> {
        self.dev.ctx().post_srq_recv(
            self.dev.index,
            self.handle,
            vec![RecvWr {
                wr_id,
                sg_list: vec![mr.sge(offset, len)],
            }],
        )
    }

    /// Arms the limit event: it fires once fewer than `limit` receives remain.
    pub fn set_limit(&self, limit: u32) -> Result<()> {
        self.dev
            .ctx()
            .modify_srq(self.dev.index, self.handle, limit)
    }
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        let _ = self.dev.ctx().destroy_srq(self.dev.index, self.handle);
    }
}

/// A registered region over a whole [`Buffer`], or over memory borrowed from the program
/// ([`ProtectionDomain::register_slice`]).
#[derive(Debug)]
pub struct MemoryRegion<'b> {
    dev: Device,
    keys: MrKeys,
    buf: Option<&'b Buffer>,
    /// Holds the borrow of a registered slice.
    _mem: std::marker::PhantomData<&'b mut [u8]>,
}

impl MemoryRegion<'_> {
    /// L_Key.
    pub fn lkey(&self) -> u32 {
        self.keys.lkey
    }

    /// R_Key (give it to a peer that may access the region).
    pub fn rkey(&self) -> u32 {
        self.keys.rkey
    }

    /// The region's first address.
    pub fn addr(&self) -> u64 {
        self.keys.addr
    }

    /// The buffer (`None` for a registered slice).
    pub fn buffer(&self) -> Option<&Buffer> {
        self.buf
    }

    /// An SGE over `len` bytes from `offset`.
    pub fn sge(&self, offset: usize, len: usize) -> Sge {
        Sge {
            addr: self.keys.addr + offset as u64,
            length: len as u32,
            lkey: self.keys.lkey,
        }
    }
}

impl Drop for MemoryRegion<'_> {
    fn drop(&mut self) {
        let _ = self.dev.ctx().dereg_mr(self.dev.index, &self.keys);
    }
}

/// A completion queue.
#[derive(Debug)]
pub struct CompletionQueue {
    dev: Device,
    handle: CqHandle,
}

impl CompletionQueue {
    /// Up to `max` completions that are there now (`ibv_poll_cq`): never blocks, sleeps or
    /// yields. A loop that waits for a completion should use [`CompletionQueue::poll_wait`] or
    /// [`CompletionQueue::wait`] (or a completion channel): a spinner can starve the daemon
    /// that makes the progress it waits for.
    pub fn poll(&self, max: u32) -> Result<Vec<WorkCompletion>> {
        self.dev
            .ctx()
            .poll_cq(self.dev.index, self.handle, max, Duration::ZERO)
    }

    /// Up to `max` completions, waiting up to `timeout` for the first when none is there: a
    /// short spin that yields the CPU, then a sleep the daemon ends when a completion arrives.
    /// Empty when none came in time.
    pub fn poll_wait(&self, max: u32, timeout: Duration) -> Result<Vec<WorkCompletion>> {
        self.dev
            .ctx()
            .poll_cq(self.dev.index, self.handle, max, timeout)
    }

    /// The next completion, waiting up to `timeout`; an error that says what it waited for
    /// when none came.
    pub fn wait(&self, timeout: Duration) -> Result<WorkCompletion> {
        let wcs = self
            .dev
            .ctx()
            .poll_cq(self.dev.index, self.handle, 1, timeout)?;
        wcs.into_iter().next().ok_or_else(|| Error::Refused {
            kind: ErrorKind::Busy,
            message: format!("no completion on the CQ within {timeout:?}"),
        })
    }
}

impl CompletionQueue {
    /// `ibv_req_notify_cq`: `channel` becomes readable once this CQ holds a completion.
    /// One-shot: arm again after each event, then poll once more.
    pub fn req_notify(&self, channel: &CompChannel) -> Result<()> {
        self.dev
            .ctx()
            .req_notify_cq(self.dev.index, self.handle, channel)
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        let _ = self.dev.ctx().destroy_cq(self.dev.index, self.handle);
    }
}

/// What a peer needs to reach a QP: send it over any channel (it is serde-serialisable).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Endpoint {
    /// The port's LID (0 on RoCE).
    pub lid: Lid,
    /// The QP number.
    pub qpn: Qpn,
    /// The first PSN it sends with.
    pub psn: u32,
    /// The port's GID (required on RoCE; given on IB too).
    pub gid: Gid,
    /// Whether the path needs a GRH (RoCE).
    pub global: bool,
    /// A buffer the peer may access (0 when none).
    pub addr: u64,
    /// Its R_Key.
    pub rkey: u32,
}

/// A queue pair.
#[derive(Debug)]
pub struct QueuePair {
    dev: Device,
    pd: PdHandle,
    qpn: Qpn,
    qp_type: QpType,
    psn: u32,
    /// The HCA port (set at INIT).
    port: std::sync::atomic::AtomicU8,
    /// Address handles `send` made, one per destination path, reused.
    ahs: Mutex<Vec<(AddressVector, AhHandle)>>,
}

impl QueuePair {
    /// `ibv_attach_mcast` (UD QPs): receive what is sent to multicast group `mgid`/`mlid`.
    pub fn attach_mcast(&self, mgid: Gid, mlid: Lid) -> Result<()> {
        self.dev
            .ctx()
            .attach_mcast(self.dev.index, self.qpn, mgid, mlid)
    }

    /// `ibv_detach_mcast`.
    pub fn detach_mcast(&self, mgid: Gid) -> Result<()> {
        self.dev.ctx().detach_mcast(self.dev.index, self.qpn, mgid)
    }

    /// The QP number.
    pub fn qpn(&self) -> Qpn {
        self.qpn
    }

    /// RESET → INIT with `attr` (the port is remembered: endpoints and paths use it).
    pub(crate) fn modify_to_init(&self, attr: &InitAttr) -> Result<()> {
        let mut a = QpAttr {
            qp_state: QpState::Init,
            port_num: attr.port,
            pkey_index: attr.pkey_index,
            ..QpAttr::default()
        };
        let mut mask = AttrMask::STATE
            .with(AttrMask::PKEY_INDEX)
            .with(AttrMask::PORT);
        if self.qp_type == QpType::Ud {
            a.qkey = attr.qkey;
            mask = mask.with(AttrMask::QKEY);
        } else {
            a.qp_access_flags = attr.access;
            mask = mask.with(AttrMask::ACCESS_FLAGS);
        }
        self.dev
            .ctx()
            .modify_qp(self.dev.index, self.qpn, &a, mask)?;
        self.port
            .store(attr.port, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// INIT → RTR with `attr`.
    pub(crate) fn modify_to_rtr(&self, attr: &RtrAttr) -> Result<()> {
        if self.qp_type == QpType::Ud {
            let rtr = QpAttr {
                qp_state: QpState::Rtr,
                ..QpAttr::default()
            };
            return self
                .dev
                .ctx()
                .modify_qp(self.dev.index, self.qpn, &rtr, AttrMask::STATE);
        }
        let Some(peer) = &attr.peer else {
            return Err(Error::Refused {
                kind: ErrorKind::Invalid,
                message: format!(
                    "QP {:#x} is {:?}: RTR needs the peer's endpoint (RtrAttr::connect)",
                    self.qpn.value(),
                    self.qp_type
                ),
            });
        };
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: attr.path_mtu,
            dest_qp_num: peer.qpn,
            rq_psn: Psn::new(peer.psn),
            ah_attr: self.av(peer)?,
            max_dest_rd_atomic: attr.max_dest_rd_atomic,
            min_rnr_timer: attr.min_rnr_timer,
            ..QpAttr::default()
        };
        let mut mask = AttrMask::STATE
            .with(AttrMask::AV)
            .with(AttrMask::PATH_MTU)
            .with(AttrMask::DEST_QPN)
            .with(AttrMask::RQ_PSN);
        if self.qp_type == QpType::Rc {
            mask = mask
                .with(AttrMask::MAX_DEST_RD_ATOMIC)
                .with(AttrMask::MIN_RNR_TIMER);
        }
        self.dev
            .ctx()
            .modify_qp(self.dev.index, self.qpn, &rtr, mask)
    }

    /// RTR → RTS with `attr`.
    pub(crate) fn modify_to_rts(&self, attr: &RtsAttr) -> Result<()> {
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: Psn::new(attr.sq_psn.unwrap_or(self.psn)),
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            max_rd_atomic: attr.max_rd_atomic,
            ..QpAttr::default()
        };
        let mut mask = AttrMask::STATE.with(AttrMask::SQ_PSN);
        if self.qp_type == QpType::Rc {
            mask = mask
                .with(AttrMask::TIMEOUT)
                .with(AttrMask::RETRY_CNT)
                .with(AttrMask::RNR_RETRY)
                .with(AttrMask::MAX_QP_RD_ATOMIC);
        }
        self.dev
            .ctx()
            .modify_qp(self.dev.index, self.qpn, &rts, mask)
    }

    /// To RESET or ERROR (no attributes).
    pub(crate) fn modify_state(&self, state: QpState) -> Result<()> {
        let a = QpAttr {
            qp_state: state,
            ..QpAttr::default()
        };
        self.dev
            .ctx()
            .modify_qp(self.dev.index, self.qpn, &a, AttrMask::STATE)
    }

    fn port(&self) -> u8 {
        self.port.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The state the HCA says this QP is in.
    pub fn query_state(&self) -> Result<QpState> {
        Ok(self
            .dev
            .ctx()
            .query_qp(self.dev.index, self.qpn)?
            .0
            .qp_state)
    }

    /// This QP's endpoint on port 1, with `mr` (if any) as the buffer the peer may access.
    pub fn endpoint(&self) -> Result<Endpoint> {
        self.endpoint_with(None)
    }

    /// [`QueuePair::endpoint`] offering `mr` to the peer.
    pub fn endpoint_with(&self, mr: Option<&MemoryRegion<'_>>) -> Result<Endpoint> {
        let p = self.dev.port(self.port())?;
        // On RoCE the GID of the device's own address (IPv4-mapped) is the one that routes.
        let gid = p
            .gids
            .iter()
            .find(|g| g.0[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff])
            .or(p.gids.first())
            .copied()
            .unwrap_or(Gid([0; 16]));
        Ok(Endpoint {
            lid: p.lid,
            qpn: self.qpn,
            psn: self.psn,
            gid,
            global: !p.link_layer_ib,
            addr: mr.map_or(0, MemoryRegion::addr),
            rkey: mr.map_or(0, MemoryRegion::rkey),
        })
    }

    fn av(&self, to: &Endpoint) -> Result<AddressVector> {
        let p = self.dev.port(self.port())?;
        let sgid_index = p.gids.iter().position(|g| {
            g.0[..12] == to.gid.0[..12] || (!p.link_layer_ib && g.0[10..12] == [0xff, 0xff])
        });
        Ok(AddressVector {
            dlid: to.lid,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            grh: to.global.then(|| GlobalRoute {
                dgid: to.gid,
                flow_label: 0,
                sgid_index: sgid_index.unwrap_or(0) as u8,
                hop_limit: 64,
                traffic_class: 0,
            }),
            port_num: self.port(),
        })
    }

    /// RC/UC: INIT → RTR → RTS towards `peer`. UD: RTR → RTS (peers are named per send).
    /// (The [`crate::typed`] QPs do the same one step at a time, their state in their type.)
    pub fn connect(&self, peer: &Endpoint, mtu: Mtu) -> Result<()> {
        let rtr = if self.qp_type == QpType::Ud {
            RtrAttr::datagram()
        } else {
            RtrAttr::connect(peer, mtu)
        };
        self.modify_to_rtr(&rtr)?;
        self.modify_to_rts(&RtsAttr::default())
    }

    /// Posts work requests (all, or the error of the first that failed).
    pub fn post_send(&self, wrs: Vec<SendWr>) -> Result<()> {
        self.dev.ctx().post_send(self.dev.index, self.qpn, wrs)
    }

    /// Posts receives.
    pub fn post_recv(&self, wrs: Vec<RecvWr>) -> Result<()> {
        self.dev.ctx().post_recv(self.dev.index, self.qpn, wrs)
    }

    /// Posts one receive of `len` bytes at `offset` of `mr`.
    pub fn recv(&self, mr: &MemoryRegion<'_>, offset: usize, len: usize, wr_id: u64) -> Result<()> {
        self.post_recv(vec![RecvWr {
            wr_id,
            sg_list: vec![mr.sge(offset, len)],
        }])
    }

    /// Sends `len` bytes at `offset` of `mr` (signaled). On UD, to `to`.
    pub fn send(
        &self,
        mr: &MemoryRegion<'_>,
        offset: usize,
        len: usize,
        to: Option<&Endpoint>,
        wr_id: u64,
    ) -> Result<()> {
        let ud = match (self.qp_type, to) {
            (QpType::Ud, Some(peer)) => {
                let av = self.av(peer)?;
                let mut ahs = self.ahs.lock().unwrap_or_else(|p| p.into_inner());
                let ah = match ahs.iter().find(|(a, _)| *a == av) {
                    Some(&(_, ah)) => ah,
                    None => {
                        let ah = self.dev.ctx().create_ah(self.dev.index, self.pd, av)?;
                        ahs.push((av, ah));
                        ah
                    }
                };
                drop(ahs);
                Some(UdDest {
                    ah,
                    remote_qpn: peer.qpn,
                    remote_qkey: crate::UD_QKEY,
                })
            }
            (QpType::Ud, None) => {
                return Err(Error::Refused {
                    kind: ErrorKind::Invalid,
                    message: "a UD send needs the peer's endpoint".into(),
                })
            }
            _ => None,
        };
        self.post_send(vec![SendWr {
            wr_id,
            opcode: WrOpcode::Send,
            sg_list: vec![mr.sge(offset, len)],
            flags: SendFlags::SIGNALED,
            inline_data: None,
            ud,
        }])
    }

    /// `ibv_create_ah` for the path to `peer` from this QP's port: for UD sends with
    /// [`QueuePair::send_to`], kept as long as the caller keeps it.
    pub fn address_handle(&self, peer: &Endpoint) -> Result<AddressHandle> {
        let av = self.av(peer)?;
        let handle = self.dev.ctx().create_ah(self.dev.index, self.pd, av)?;
        Ok(AddressHandle {
            dev: self.dev.clone(),
            handle,
        })
    }

    /// UD: sends `len` bytes at `offset` of `mr` through `ah` to QP `remote_qpn` (signaled),
    /// with softib's UD Q_Key.
    pub fn send_to(
        &self,
        mr: &MemoryRegion<'_>,
        offset: usize,
        len: usize,
        ah: &AddressHandle,
        remote_qpn: Qpn,
        wr_id: u64,
    ) -> Result<()> {
        self.post_send(vec![SendWr {
            wr_id,
            opcode: WrOpcode::Send,
            sg_list: vec![mr.sge(offset, len)],
            flags: SendFlags::SIGNALED,
            inline_data: None,
            ud: Some(UdDest {
                ah: ah.handle,
                remote_qpn,
                remote_qkey: crate::UD_QKEY,
            }),
        }])
    }

    /// RDMA WRITE of `len` bytes at `offset` of `mr` to `addr`/`rkey` of the peer (signaled).
    pub fn write(
        &self,
        mr: &MemoryRegion<'_>,
        offset: usize,
        len: usize,
        addr: u64,
        rkey: u32,
        wr_id: u64,
    ) -> Result<()> {
        self.post_send(vec![SendWr {
            wr_id,
            opcode: WrOpcode::RdmaWrite(RemoteAddr {
                addr,
                rkey: RKey(rkey),
            }),
            sg_list: vec![mr.sge(offset, len)],
            flags: SendFlags::SIGNALED,
            inline_data: None,
            ud: None,
        }])
    }

    /// RDMA READ of `len` bytes from `addr`/`rkey` of the peer into `offset` of `mr`.
    pub fn read(
        &self,
        mr: &MemoryRegion<'_>,
        offset: usize,
        len: usize,
        addr: u64,
        rkey: u32,
        wr_id: u64,
    ) -> Result<()> {
        self.post_send(vec![SendWr {
            wr_id,
            opcode: WrOpcode::RdmaRead(RemoteAddr {
                addr,
                rkey: RKey(rkey),
            }),
            sg_list: vec![mr.sge(offset, len)],
            flags: SendFlags::SIGNALED,
            inline_data: None,
            ud: None,
        }])
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        let mut ctx = self.dev.ctx();
        let _ = ctx.destroy_qp(self.dev.index, self.qpn);
        for (_, ah) in self.ahs.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            let _ = ctx.destroy_ah(self.dev.index, ah);
        }
    }
}
