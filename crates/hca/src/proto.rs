//! The control protocol between applications and `softibd`, on a unix stream socket.
//!
//! Like the kernel's uverbs commands: each request is answered by exactly one response, in
//! order. A frame is a 4-byte little-endian length and a postcard-encoded message; a buffer's
//! memfd travels as SCM_RIGHTS with the `AttachBuffer` request that names it. The first request
//! of a session must be `Hello` with [`VERSION`]; a daemon that speaks another version answers
//! with an error naming both.
//!
//! The data path mostly bypasses this socket: after `AttachSubmitRing` and `AttachCqRing`,
//! work requests and completions travel through rings in shared memory ([`Submit`] entries
//! and postcard-encoded completions), and `PostSend`/`PostRecv`/`PollCq` remain for what the
//! library cannot post through the ring and for waiting.

use std::io::{self, Read};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use serde::{Deserialize, Serialize};
use softib_engine::verbs::{AccessFlags, RecvWr, SendWr, WorkCompletion};
use softib_engine::{AddressVector, AttrMask, QpAttr, QpInitAttr};
use softib_wire::{Gid, Guid, Lid, Mtu, Qpn};

use crate::ib::MadQp;

/// The protocol version; bumped on any incompatible change.
pub const VERSION: u32 = 2;
/// The size of a completion ring slot.
pub const CQ_RING_SLOT_LEN: usize = 128;
/// The most slots a completion ring may have.
pub const CQ_RING_SLOTS_MAX: u64 = 1 << 16;
/// The size of a submission ring slot.
pub const SUBMIT_SLOT_LEN: usize = 512;
/// The most slots a submission ring may have.
pub const SUBMIT_SLOTS_MAX: u32 = 1 << 16;

/// One entry of a submission ring: a work request for a QP the client owns. The library has
/// checked it as `ibv_post_*` would (queue room, SGEs, inline size, opcode for the QP type),
/// so that the verb fails at once and not here.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Submit {
    /// `ibv_post_send` of one WR.
    Send {
        /// Device index.
        dev: u32,
        /// The QP.
        qpn: Qpn,
        /// The WR.
        wr: SendWr,
    },
    /// `ibv_post_recv` of one WR.
    Recv {
        /// Device index.
        dev: u32,
        /// The QP.
        qpn: Qpn,
        /// The WR.
        wr: RecvWr,
    },
}

/// [`Submit`] by reference, for the library to encode a work request without copying it:
/// the same variants in the same order, so its encoding is exactly [`Submit`]'s.
#[derive(Debug, Clone, Copy, Serialize)]
pub enum SubmitRef<'a> {
    /// `ibv_post_send` of one WR.
    Send {
        /// Device index.
        dev: u32,
        /// The QP.
        qpn: Qpn,
        /// The WR.
        wr: &'a SendWr,
    },
    /// `ibv_post_recv` of one WR.
    Recv {
        /// Device index.
        dev: u32,
        /// The QP.
        qpn: Qpn,
        /// The WR.
        wr: &'a RecvWr,
    },
}

/// The largest frame either side accepts.
pub const MAX_FRAME: usize = 4 << 20;
/// The most request bytes the daemon buffers per client before serving them: one largest
/// frame with its length prefix, plus one read.
pub const MAX_BUFFERED: usize = MAX_FRAME + 4 + 64 * 1024;

/// The most descriptors a client may have sent that no request has claimed yet. Each request
/// that carries one (`AttachBuffer`, `CreateCompChannel`) claims it when it is served, and a
/// client has one request in flight, so more is a client stuffing the daemon's descriptor
/// table: its connection is closed.
pub const MAX_PENDING_FDS: usize = 16;

/// What an application asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    /// The first request: who is asking, and in which protocol version.
    Hello {
        /// [`VERSION`].
        version: u32,
        /// The client's process id (for logs and `softib` resource listings).
        pid: u32,
        /// The client's program name.
        program: String,
    },
    /// The devices of this host.
    ListDevices,
    /// Hands the daemon a shared buffer (its memfd rides along) of `len` bytes, mapped at
    /// `addr` in the client.
    AttachBuffer {
        /// Its length.
        len: u64,
        /// Its address in the client.
        addr: u64,
    },
    /// Forgets a buffer (no MR may still use it).
    DetachBuffer {
        /// What `AttachBuffer` returned.
        buffer: u64,
    },
    /// `ibv_alloc_pd`.
    AllocPd {
        /// Device index.
        dev: u32,
    },
    /// `ibv_dealloc_pd`.
    DeallocPd {
        /// Device index.
        dev: u32,
        /// The PD.
        pd: u32,
    },
    /// `ibv_reg_mr` over part of an attached buffer.
    RegMr {
        /// Device index.
        dev: u32,
        /// The PD.
        pd: u32,
        /// The attached buffer.
        buffer: u64,
        /// Where the region starts in the client (inside the buffer).
        addr: u64,
        /// Its length.
        len: u64,
        /// Access flags.
        access: AccessFlags,
    },
    /// `ibv_dereg_mr`.
    DeregMr {
        /// Device index.
        dev: u32,
        /// The L_Key.
        lkey: u32,
    },
    /// `ibv_create_cq`.
    CreateCq {
        /// Device index.
        dev: u32,
        /// Minimum number of entries.
        cqe: u32,
    },
    /// `ibv_destroy_cq`.
    DestroyCq {
        /// Device index.
        dev: u32,
        /// The CQ.
        cq: u32,
    },
    /// `ibv_create_qp`.
    CreateQp {
        /// Device index.
        dev: u32,
        /// The attributes.
        init: QpInitAttr,
    },
    /// `ibv_modify_qp`.
    ModifyQp {
        /// Device index.
        dev: u32,
        /// The QP.
        qpn: Qpn,
        /// The attributes.
        attr: Box<QpAttr>,
        /// Which attributes are valid.
        mask: AttrMask,
    },
    /// `ibv_query_qp`.
    QueryQp {
        /// Device index.
        dev: u32,
        /// The QP.
        qpn: Qpn,
    },
    /// `ibv_destroy_qp`.
    DestroyQp {
        /// Device index.
        dev: u32,
        /// The QP.
        qpn: Qpn,
    },
    /// `ibv_create_ah`.
    CreateAh {
        /// Device index.
        dev: u32,
        /// The PD.
        pd: u32,
        /// The address.
        av: AddressVector,
    },
    /// `ibv_destroy_ah`.
    DestroyAh {
        /// Device index.
        dev: u32,
        /// The AH.
        ah: u32,
    },
    /// `ibv_post_send` of a list of WRs (stops at the first failure, like the verb).
    PostSend {
        /// Device index.
        dev: u32,
        /// The QP.
        qpn: Qpn,
        /// The WRs.
        wrs: Vec<SendWr>,
    },
    /// `ibv_post_recv` of a list of WRs.
    PostRecv {
        /// Device index.
        dev: u32,
        /// The QP.
        qpn: Qpn,
        /// The WRs.
        wrs: Vec<RecvWr>,
    },
    /// `ibv_poll_cq` for up to `max` completions; with `wait_us` > 0, waits that long for the
    /// first one (a completion channel's blocking wait, in one round trip).
    PollCq {
        /// Device index.
        dev: u32,
        /// The CQ.
        cq: u32,
        /// Most completions returned.
        max: u32,
        /// How long to wait for the first, in microseconds.
        wait_us: u32,
    },
    /// Become a management agent on a port: receive MADs of these kinds.
    OpenMad {
        /// Device index.
        dev: u32,
        /// Port.
        port: u8,
        /// Receive SMP responses (QP0) and SA/SM class requests: the subnet manager's role.
        sm: bool,
    },
    /// Sends an SMP (256 bytes): directed-route from the port when `dlid` is `None`.
    SendSmp {
        /// Device index.
        dev: u32,
        /// Port.
        port: u8,
        /// LID-routed destination.
        dlid: Option<Lid>,
        /// The MAD.
        mad: Vec<u8>,
    },
    /// Sends a GMP (256 bytes) to QP `dest_qpn` (usually 1) at `dlid`.
    SendGmp {
        /// Device index.
        dev: u32,
        /// Port.
        port: u8,
        /// Destination LID.
        dlid: Lid,
        /// Destination QP.
        dest_qpn: Qpn,
        /// The MAD.
        mad: Vec<u8>,
    },
    /// Receives up to `max` MADs for this agent, waiting up to `wait_us` for the first.
    RecvMads {
        /// Most MADs returned.
        max: u32,
        /// How long to wait, in microseconds.
        wait_us: u32,
    },
    /// Plugs (`enabled`) or pulls the cable of a port, as an operator would: the link goes
    /// down at both ends and the SM's next sweep sees it.
    SetPortEnabled {
        /// Device index.
        dev: u32,
        /// Port.
        port: u8,
        /// Plugged in or pulled.
        enabled: bool,
    },
    /// Injects faults on a port's egress (port 0: every port of the device).
    SetFaults {
        /// Device index.
        dev: u32,
        /// Port.
        port: u8,
        /// What to do.
        spec: softib_net::fault::FaultSpec,
    },
    /// The faults of a device's ports and what they did.
    Faults {
        /// Device index.
        dev: u32,
    },
    /// Starts capturing a device's traffic into the pcap file `path` (absolute; written by
    /// the daemon), or stops with `None`; answers the packets of the capture that stopped.
    Capture {
        /// Device index.
        dev: u32,
        /// The file.
        path: Option<String>,
    },
    /// Packets captured so far (0 when no capture runs).
    CaptureCount {
        /// Device index.
        dev: u32,
    },
    /// What every client owns (`rdma res show`).
    Resources,
    /// `softib link add`: a RoCEv2 device on an interface and address.
    LinkAdd(crate::device::LinkConfig),
    /// `softib link del`.
    LinkDel {
        /// The device name.
        name: String,
    },
    /// `softib link show`: the RoCE devices with their configuration.
    LinkShow,
    /// The local SM announces itself on a port: PortInfo.CapabilityMask.IsSM and the SMInfo
    /// the port's SMA answers with (64 bytes), or withdraws (`sm_info` = `None`).
    SetSm {
        /// Device index.
        dev: u32,
        /// Port.
        port: u8,
        /// SMInfo attribute bytes.
        sm_info: Option<Vec<u8>>,
    },
    /// `ibv_attach_mcast`: a UD QP joins multicast group `gid`/`lid` on its device.
    AttachMcast {
        /// Device index.
        dev: u32,
        /// The QP.
        qpn: Qpn,
        /// The MGID.
        gid: Gid,
        /// The MLID.
        lid: Lid,
    },
    /// `ibv_detach_mcast`.
    DetachMcast {
        /// Device index.
        dev: u32,
        /// The QP.
        qpn: Qpn,
        /// The MGID.
        gid: Gid,
    },
    /// Completions of `cq` go into a ring in shared memory from now on (its memfd travels with
    /// the request): `slots` slots of [`CQ_RING_SLOT_LEN`] bytes, each a postcard-encoded
    /// `WorkCompletion`. `PollCq` on such a CQ only waits for the ring to fill.
    AttachCqRing {
        /// Device index.
        dev: u32,
        /// The CQ.
        cq: u32,
        /// Slots in the ring.
        slots: u32,
    },
    /// `ibv_reg_mr` of the client's own memory at `addr` (not a shared buffer): the daemon
    /// reaches it with cross-memory attach. The client must have allowed that (same user and
    /// `prctl(PR_SET_PTRACER, daemon)`, which the library does).
    RegMrProcess {
        /// Device index.
        dev: u32,
        /// The PD.
        pd: u32,
        /// First address, in the client.
        addr: u64,
        /// Length in bytes.
        len: u64,
        /// Access rights.
        access: AccessFlags,
    },
    /// From now on the client also posts through a submission ring: its memfd and a doorbell
    /// eventfd travel with this request; `slots` slots of [`SUBMIT_SLOT_LEN`] bytes, each a
    /// postcard-encoded [`Submit`]. The daemon executes the ring's entries, in order, before
    /// any later request of the client, and whenever the doorbell rings.
    AttachSubmitRing {
        /// Slots in the ring.
        slots: u32,
    },
    /// `ibv_create_srq`.
    CreateSrq {
        /// Device index.
        dev: u32,
        /// The PD.
        pd: u32,
        /// Receive WQEs it holds.
        max_wr: u32,
        /// SGEs per WQE.
        max_sge: u32,
    },
    /// `ibv_modify_srq` with IBV_SRQ_LIMIT: arm the limit event.
    ModifySrq {
        /// Device index.
        dev: u32,
        /// The SRQ.
        srq: u32,
        /// The limit.
        limit: u32,
    },
    /// `ibv_destroy_srq`.
    DestroySrq {
        /// Device index.
        dev: u32,
        /// The SRQ.
        srq: u32,
    },
    /// `ibv_post_srq_recv` of a list.
    PostSrqRecv {
        /// Device index.
        dev: u32,
        /// The SRQ.
        srq: u32,
        /// The WRs.
        wrs: Vec<RecvWr>,
    },
    /// `ibv_create_comp_channel`: the eventfd the client made travels with this request (as
    /// SCM_RIGHTS); the daemon writes to it when an armed CQ has completions.
    CreateCompChannel,
    /// `ibv_destroy_comp_channel`.
    DestroyCompChannel {
        /// The channel's handle.
        channel: u64,
    },
    /// `ibv_req_notify_cq`: signal `channel` once `cq` holds a completion. One-shot, as in
    /// verbs; a CQ that already holds completions when armed signals at once (a program that
    /// polls after arming, as verbs programs must, sees no difference).
    ReqNotifyCq {
        /// Device index.
        dev: u32,
        /// The CQ.
        cq: u32,
        /// The channel's handle.
        channel: u64,
    },
    /// `ibv_get_async_event`, without waiting: the asynchronous events of this client's
    /// objects (and of the ports) since it last asked, oldest first.
    AsyncEvents,
    /// The eventfd that travels with this request wakes the client when it sleeps for a
    /// completion: from now on, when the daemon puts completions into one of the client's
    /// completion rings while the client's flag in that ring says it may be asleep
    /// (`Ring::set_polling`), it adds to the eventfd (once a turn). The library then waits on
    /// that instead of parking a `PollCq` here, and wakes for a completion on any of its CQs.
    AttachWakeup,
    /// The eventfd that travels with this request is the client's asynchronous-event fd
    /// (`ibv_context::async_fd`): the daemon adds to it whenever it queues an event for the
    /// client, so the client can poll it and then ask with [`Request::AsyncEvents`].
    AttachAsyncEvents,
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    /// Malformed or out-of-order request, or a wrong protocol version.
    Protocol,
    /// No such object (or not this client's).
    NotFound,
    /// An argument is not acceptable.
    Invalid,
    /// A queue, table or per-client limit is full.
    Exhausted,
    /// The object is in use.
    Busy,
    /// The QP's state does not allow it.
    WrongState,
}

/// A device as `ibv_devices`, `ibstat` and `ibv_devinfo` show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Name (`mlx4_0`).
    pub name: String,
    /// CA type (`MT4099`).
    pub ca_type: String,
    /// NodeDescription.
    pub description: String,
    /// Firmware version.
    pub fw_ver: String,
    /// Hardware version.
    pub hw_ver: u32,
    /// NodeGUID.
    pub node_guid: Guid,
    /// SystemImageGUID.
    pub sys_image_guid: Guid,
    /// VendorID.
    pub vendor_id: u32,
    /// Vendor part ID.
    pub vendor_part_id: u32,
    /// Device limits.
    pub attr: softib_engine::DeviceAttr,
    /// Ports 1..=N.
    pub ports: Vec<PortInfo>,
    /// Packets and messages the HCA dropped, by reason (only nonzero counts): what explains
    /// a benchmark that stopped making progress.
    pub drops: Vec<(String, u64)>,
    /// What a real device's verbs report beyond `attr` (`ibv_devinfo -v`): filled by the
    /// rdma-core backend, absent for softib's own devices (the tools then show softib's).
    pub verbs: Option<VerbsAttr>,
}

/// The limits and flags of a real RDMA device that `ibv_devinfo -v` prints and softib's
/// [`softib_engine::DeviceAttr`] does not carry (`struct ibv_device_attr`, `ibv_context`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerbsAttr {
    /// `device_cap_flags`.
    pub device_cap_flags: u32,
    /// `page_size_cap`.
    pub page_size_cap: u64,
    /// `max_sge_rd`.
    pub max_sge_rd: i32,
    /// `max_res_rd_atom`.
    pub max_res_rd_atom: i32,
    /// `atomic_cap` (0 none, 1 HCA, 2 global).
    pub atomic_cap: u32,
    /// `max_mw`.
    pub max_mw: i32,
    /// `max_mcast_grp`.
    pub max_mcast_grp: i32,
    /// `max_mcast_qp_attach`.
    pub max_mcast_qp_attach: i32,
    /// `max_total_mcast_qp_attach`.
    pub max_total_mcast_qp_attach: i32,
    /// `max_ah`.
    pub max_ah: i32,
    /// `max_srq_sge`.
    pub max_srq_sge: i32,
    /// `max_pkeys`.
    pub max_pkeys: u16,
    /// `local_ca_ack_delay`.
    pub local_ca_ack_delay: u8,
    /// `ibv_context::num_comp_vectors`.
    pub num_comp_vectors: i32,
    /// Per port, in order (`struct ibv_port_attr`).
    pub ports: Vec<VerbsPortAttr>,
}

/// The port attributes of a real device that [`PortInfo`] does not carry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerbsPortAttr {
    /// `max_msg_sz`.
    pub max_msg_sz: u32,
    /// `max_vl_num` (the encoded value: 1 = 1 VL, 2 = 2, 3 = 4, 4 = 8, 5 = 15).
    pub max_vl_num: u8,
    /// `pkey_tbl_len`.
    pub pkey_tbl_len: u16,
    /// `gid_tbl_len`.
    pub gid_tbl_len: i32,
    /// `subnet_timeout`.
    pub subnet_timeout: u8,
}

/// A port as the tools show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PortInfo {
    /// Port number.
    pub number: u8,
    /// PortState (1 Down, 2 Init, 3 Armed, 4 Active).
    pub state: u8,
    /// PortPhysicalState (2 Polling, 3 Disabled, 5 LinkUp).
    pub phys_state: u8,
    /// Rate in Gb/s (40 for 4X QDR).
    pub rate: u32,
    /// LinkWidthActive bits.
    pub width: u8,
    /// LinkSpeedActive bits.
    pub speed: u8,
    /// Base LID.
    pub lid: Lid,
    /// LMC.
    pub lmc: u8,
    /// The master SM's LID.
    pub sm_lid: Lid,
    /// CapabilityMask.
    pub capability_mask: u32,
    /// Port GUID.
    pub port_guid: Guid,
    /// `true` for InfiniBand, `false` for Ethernet (RoCE).
    pub link_layer_ib: bool,
    /// Largest MTU.
    pub max_mtu: Mtu,
    /// Active MTU.
    pub active_mtu: Mtu,
    /// GID table.
    pub gids: Vec<Gid>,
}

impl PortInfo {
    /// The logical state's name, as `ibstat` prints it.
    pub fn state_name(&self) -> &'static str {
        match self.state {
            1 => "Down",
            2 => "Initializing",
            3 => "Armed",
            4 => "Active",
            _ => "???",
        }
    }

    /// Why this port, on device `dev`, carries no data and what to do about it; `None` when it
    /// is Active. One sentence, shared by every tool that must explain a stall.
    pub fn why_not_active(&self, dev: &str) -> Option<String> {
        if self.state == 4 {
            return None;
        }
        let why = match (self.phys_state, self.state) {
            (5, 2) | (5, 3) => format!(
                "its link is up but no subnet manager has configured it (LID {}, SM lid {}); \
                 start one on this subnet, e.g. `opensm -g 0x{:016x}` on a host of it, and the \
                 port becomes Active after the SM's sweep",
                self.lid.0, self.sm_lid.0, self.port_guid.0
            ),
            (5, _) => "its link is up but its logical state does not carry data".into(),
            (3, _) => "it is Disabled".into(),
            _ => "its link is down: no cable, or the port at the other end is not up".into(),
        };
        Some(format!(
            "Port {} of {dev} is {}, not Active: {why}.",
            self.number,
            self.state_name()
        ))
    }
}

/// What one client owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientResources {
    /// Its process id (as it said in Hello).
    pub pid: u32,
    /// Its program name.
    pub program: String,
    /// Per device index: (PDs, CQs, QPs, MRs, AHs).
    pub per_device: Vec<(u32, [u32; 5])>,
    /// Shared buffers attached.
    pub buffers: u32,
}

/// A MAD received for an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mad {
    /// Device index.
    pub dev: u32,
    /// Port.
    pub port: u8,
    /// QP0 or QP1.
    pub qp: MadQp,
    /// The sender's LID.
    pub slid: Lid,
    /// The sender's QP.
    pub src_qpn: Qpn,
    /// 256 bytes.
    pub mad: Vec<u8>,
}

/// The daemon's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Response {
    /// Done.
    Ok,
    /// Refused: why, in words that name what to do.
    Error {
        /// The class of error.
        kind: ErrorKind,
        /// What is wrong.
        message: String,
    },
    /// Answer to `Hello`.
    Hello {
        /// The daemon's protocol version.
        version: u32,
        /// The daemon's process id.
        pid: u32,
        /// The host name this daemon (or this simulated host) has.
        host: String,
    },
    /// The devices.
    Devices(Vec<DeviceInfo>),
    /// A new handle (PD, CQ, AH, buffer).
    Handle(u64),
    /// A new MR.
    Mr {
        /// L_Key.
        lkey: u32,
        /// R_Key.
        rkey: u32,
    },
    /// A new QP.
    Qp(Qpn),
    /// `ibv_query_qp`.
    QpAttr(Box<QpAttr>, QpInitAttr),
    /// Work requests accepted before the first that failed (`posted` < requested), and why.
    Posted {
        /// How many were posted.
        posted: u32,
        /// Why the next one was not.
        error: Option<String>,
    },
    /// Completions.
    Completions(Vec<WorkCompletion>),
    /// MADs.
    Mads(Vec<Mad>),
    /// The RoCE devices: configuration and whether the port is up.
    Links(Vec<(crate::device::LinkConfig, bool)>),
    /// Per client: who, and how many objects of each kind it owns on each device.
    Resources(Vec<ClientResources>),
    /// Per port: the faults in force and what they did.
    Faults(
        Vec<(
            u8,
            softib_net::fault::FaultSpec,
            softib_net::fault::FaultStats,
        )>,
    ),
    /// Asynchronous events: (device index, event), oldest first.
    AsyncEvents(Vec<(u32, softib_engine::verbs::AsyncEvent)>),
}

/// Encodes a message into a frame.
pub fn encode<T: Serialize>(msg: &T) -> io::Result<Vec<u8>> {
    let body = postcard::to_stdvec(msg).map_err(|e| io::Error::other(format!("encode: {e}")))?;
    let mut frame = Vec::with_capacity(body.len() + 4);
    let len = u32::try_from(body.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "message too large"))?;
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Decodes a frame body.
pub fn decode<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, String> {
    postcard::from_bytes(body).map_err(|e| format!("malformed message: {e}"))
}

/// Writes one message (with descriptors) to a stream.
pub fn send<T: Serialize>(stream: &UnixStream, msg: &T, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    softib_net::fdpass::send(stream, &encode(msg)?, fds)
}

/// Reads one whole frame body from a blocking stream (descriptors are not expected here).
pub fn recv_blocking(stream: &mut UnixStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the daemon sent a {len}-byte frame, more than the {MAX_FRAME} allowed"),
        ));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    Ok(body)
}

/// Accumulates bytes (and descriptors) from a non-blocking stream and yields whole frames.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
    /// Where the next frame starts in `buf`: frames are consumed by moving this, and the
    /// bytes before it are dropped only when that is cheap (a drain per frame made a buffer
    /// of a million empty frames cost a million moves of up to 4 MiB).
    start: usize,
    /// Descriptors received and not yet claimed by a request.
    pub fds: Vec<OwnedFd>,
}

impl FrameReader {
    /// Reads what is available, but stops once a whole largest frame is buffered: a client
    /// that writes faster than its requests are served is held back by its socket, not by the
    /// daemon's memory (the socket stays readable, so the rest is read after those frames).
    /// Returns `Ok(false)` at end of stream.
    pub fn fill(&mut self, stream: &UnixStream) -> io::Result<bool> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            if self.buffered() >= MAX_BUFFERED {
                return Ok(true);
            }
            match softib_net::fdpass::recv(stream, &mut chunk, &mut self.fds) {
                Ok(0) => return Ok(false),
                Ok(_) if self.fds.len() > MAX_PENDING_FDS => {
                    self.fds.clear();
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "more than {MAX_PENDING_FDS} descriptors sent without requests \
                             that claim them"
                        ),
                    ));
                }
                Ok(n) => {
                    self.push(&chunk[..n]);
                    if n < chunk.len() {
                        return Ok(true);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) => return Err(e),
            }
        }
    }

    /// Appends bytes received from the stream (what [`FrameReader::fill`] does with each read).
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// How many bytes are buffered and not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whether bytes are buffered (a request may be complete without the socket being
    /// readable again).
    pub fn has_data(&self) -> bool {
        self.buffered() > 0
    }

    /// The next whole frame's body, if one has arrived; an error for a frame too large.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, String> {
        let rest = &self.buf[self.start..];
        let Some(&[a, b, c, d]) = rest.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_le_bytes([a, b, c, d]) as usize;
        if len > MAX_FRAME {
            return Err(format!(
                "a {len}-byte request is more than the {MAX_FRAME} bytes allowed"
            ));
        }
        let Some(body) = rest.get(4..4 + len) else {
            return Ok(None);
        };
        let body = body.to_vec();
        self.start += 4 + len;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        Ok(Some(body))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_submit_by_reference_encodes_as_the_submit_itself() {
        use softib_engine::verbs::{SendFlags, Sge, UdDest, WrOpcode};
        let sges = vec![
            Sge {
                addr: 0x1234_5678_9abc,
                length: 4096,
                lkey: 0x0102_0304,
            },
            Sge {
                addr: 7,
                length: 1,
                lkey: 9,
            },
        ];
        let send = SendWr {
            wr_id: u64::MAX - 3,
            opcode: WrOpcode::SendWithImm(0xdead_beef),
            sg_list: sges.clone(),
            flags: SendFlags::SIGNALED,
            inline_data: Some(vec![1, 2, 3]),
            ud: Some(UdDest {
                ah: softib_engine::AhHandle(5),
                remote_qpn: Qpn::new(0x12_3456),
                remote_qkey: 0x8000_0011,
            }),
        };
        let recv = RecvWr {
            wr_id: 42,
            sg_list: sges,
        };
        let qpn = Qpn::new(0xab_cdef);
        let by_value = [
            Submit::Send {
                dev: 3,
                qpn,
                wr: send.clone(),
            },
            Submit::Recv {
                dev: 1,
                qpn,
                wr: recv.clone(),
            },
        ];
        let by_ref = [
            SubmitRef::Send {
                dev: 3,
                qpn,
                wr: &send,
            },
            SubmitRef::Recv {
                dev: 1,
                qpn,
                wr: &recv,
            },
        ];
        for (v, r) in by_value.iter().zip(&by_ref) {
            let bytes = postcard::to_stdvec(r).unwrap();
            assert_eq!(bytes, postcard::to_stdvec(v).unwrap());
            let back: Submit = postcard::from_bytes(&bytes).unwrap();
            assert_eq!(postcard::to_stdvec(&back).unwrap(), bytes);
        }
    }

    #[test]
    fn frames_come_out_whole_however_the_bytes_arrive() {
        let a = encode(&Request::ListDevices).unwrap();
        let b = encode(&Request::AllocPd { dev: 7 }).unwrap();
        let stream: Vec<u8> = [a.clone(), b.clone(), vec![9, 0, 0]].concat();
        for piece in 1..=stream.len() {
            let mut r = FrameReader::default();
            let mut got = Vec::new();
            for chunk in stream.chunks(piece) {
                r.push(chunk);
                while let Some(f) = r.next_frame().unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(got, vec![a[4..].to_vec(), b[4..].to_vec()], "piece {piece}");
            assert_eq!(r.buffered(), 3, "the incomplete length prefix stays");
        }
    }

    #[test]
    fn a_buffer_full_of_empty_frames_is_served_in_linear_time() {
        // A client writing 4 MiB of zero-length frames: each frame used to drain the buffer
        // in front of it, a million moves of up to 4 MiB that froze the daemon for minutes.
        let mut r = FrameReader::default();
        r.push(&vec![0u8; MAX_FRAME]);
        let t0 = std::time::Instant::now();
        let mut n = 0;
        while let Some(f) = r.next_frame().unwrap() {
            assert!(f.is_empty());
            n += 1;
        }
        assert_eq!(n, MAX_FRAME / 4);
        assert_eq!(r.buffered(), 0);
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            t0.elapsed()
        );
        // Frames split across pushes after a partly consumed buffer still come out whole.
        let a = encode(&Request::ListDevices).unwrap();
        r.push(&[a.clone(), a.clone()].concat());
        r.push(&a[..3]);
        assert_eq!(r.next_frame().unwrap(), Some(a[4..].to_vec()));
        r.push(&a[3..]);
        assert_eq!(r.next_frame().unwrap(), Some(a[4..].to_vec()));
        assert_eq!(r.next_frame().unwrap(), Some(a[4..].to_vec()));
        assert_eq!(r.next_frame().unwrap(), None);
    }

    #[test]
    fn a_length_over_max_frame_is_refused_before_its_body_arrives() {
        let mut r = FrameReader::default();
        r.push(&u32::try_from(MAX_FRAME + 1).unwrap().to_le_bytes());
        assert!(r.next_frame().unwrap_err().contains("allowed"));
        let mut r = FrameReader::default();
        r.push(&u32::MAX.to_le_bytes());
        assert!(r.next_frame().is_err());
    }

    #[test]
    fn a_qpn_or_psn_beyond_24_bits_does_not_decode() {
        // A ModifyQp could carry a dest_qp_num or PSN with the upper 8 bits set, which no
        // constructor makes and the engine compares unmasked.
        use softib_wire::{Psn, Qpn};
        let raw = |v: u32| postcard::to_stdvec(&v).unwrap();
        assert_eq!(decode::<Qpn>(&raw(0xFF_FFFF)), Ok(Qpn::MULTICAST));
        assert!(decode::<Qpn>(&raw(0x100_0000)).is_err());
        assert_eq!(decode::<Psn>(&raw(0x12_3456)), Ok(Psn::new(0x12_3456)));
        assert!(decode::<Psn>(&raw(u32::MAX)).is_err());
        // What the library sends still round-trips.
        let q = Request::QueryQp {
            dev: 0,
            qpn: Qpn::new(0xAB_CDEF),
        };
        let frame = encode(&q).unwrap();
        assert!(matches!(
            decode::<Request>(&frame[4..]),
            Ok(Request::QueryQp { qpn, .. }) if qpn.value() == 0xAB_CDEF
        ));
    }

    #[test]
    fn a_fault_spec_no_parser_would_make_does_not_decode() {
        // fuzz (control_proto): SetFaults with a delay of u64::MAX seconds decoded, and the
        // port's next frame overflowed the clock and stopped the daemon.
        use softib_net::fault::FaultSpec;
        let set = |spec| Request::SetFaults {
            dev: 0,
            port: 1,
            spec,
        };
        let huge = set(FaultSpec {
            delay: std::time::Duration::MAX,
            ..FaultSpec::default()
        });
        let frame = encode(&huge).unwrap();
        let err = decode::<Request>(&frame[4..]).unwrap_err();
        assert!(err.contains("malformed"), "{err}");
        let nan = set(FaultSpec {
            loss: f64::NAN,
            ..FaultSpec::default()
        });
        assert!(decode::<Request>(&encode(&nan).unwrap()[4..]).is_err());
        let fine = set(FaultSpec::parse(&["loss", "10%", "delay", "5ms"]).unwrap());
        let Request::SetFaults { spec, .. } =
            decode::<Request>(&encode(&fine).unwrap()[4..]).unwrap()
        else {
            panic!("not SetFaults");
        };
        assert_eq!(spec.loss, 0.1);
    }
}
