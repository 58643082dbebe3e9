//! The messages: what a process asks ([`Request`]) and what the daemon answers ([`Response`]).

use serde::{Deserialize, Serialize};
use softib_engine::verbs::{AccessFlags, RecvWr, SendWr, WorkCompletion};
use softib_engine::{AddressVector, AttrMask, QpAttr, QpInitAttr};
use softib_wire::{Gid, Lid, Qpn};

use crate::types::{ClientResources, DeviceInfo, ErrorKind, LinkConfig, Mad};

/// What an application asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    /// The first request: who is asking, and in which protocol version.
    Hello {
        /// [`crate::VERSION`].
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
    LinkAdd(LinkConfig),
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
    /// the request): `slots` slots of [`crate::CQ_RING_SLOT_LEN`] bytes, each a postcard-encoded
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
    /// eventfd travel with this request; `slots` slots of [`crate::SUBMIT_SLOT_LEN`] bytes, each a
    /// postcard-encoded [`crate::Submit`]. The daemon executes the ring's entries, in order, before
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
    /// The eventfd that travels with this request is signalled (added to) whenever the daemon
    /// queues a MAD for this client (at once if some already wait), so that a MAD agent can
    /// sleep on it and then take them with a [`Request::RecvMads`] that does not wait — while
    /// other threads keep sending on the connection (libibumad's pollable port fd).
    AttachMadWakeup,
    /// Sends a GMP (256 bytes) from QP1 of a RoCE port to QP `dest_qpn` at `dgid` (the CM's
    /// messages: RoCE has no LIDs, a GMP is routed by its GRH).
    SendGmpGid {
        /// Device index.
        dev: u32,
        /// Port.
        port: u8,
        /// Destination GID.
        dgid: Gid,
        /// Destination QP.
        dest_qpn: Qpn,
        /// The MAD.
        mad: Vec<u8>,
    },
    /// This agent's CM listens (`listen`) or stops listening on `service_id` of device
    /// `dev`: the daemon routes REQs for it here, and rejects those nobody listens for.
    CmListen {
        /// Device index.
        dev: u32,
        /// The ServiceID.
        service_id: u64,
        /// Listen or stop.
        listen: bool,
    },
    /// The process data path (`SOFTIB_DATAPATH=process`): a block of
    /// [`softib_engine::QPN_BLOCK`] QPNs of device `dev` for the client's own engine, unique on
    /// the device; datagrams to them are steered to the client's socket once it joined
    /// ([`Request::SteerJoin`]). Given back, after a quarantine, when the client goes.
    AllocQpnBlock {
        /// Device index.
        dev: u32,
    },
    /// The process data path: a memory key of device `dev` for a region the client's own
    /// engine registers (L_Key and R_Key), unique on the device; counted as the client's MR.
    AllocMrKey {
        /// Device index.
        dev: u32,
    },
    /// The client's engine deregistered the region of `key`: the key goes back after a
    /// quarantine (a stale R_Key in flight must not name a new region at once).
    FreeMrKey {
        /// Device index.
        dev: u32,
        /// The key [`Request::AllocMrKey`] gave.
        key: u32,
    },
    /// The client's engine made `object` on `dev` (`softib res` counts it); a QP must be
    /// numbered from one of the client's blocks.
    Own {
        /// Device index.
        dev: u32,
        /// What it made.
        object: ProcessObject,
    },
    /// The client's engine destroyed `object`.
    Disown {
        /// Device index.
        dev: u32,
        /// What it destroyed.
        object: ProcessObject,
    },
    /// The process data path on a RoCE device: the daemon binds a socket into the device's
    /// SO_REUSEPORT group (its own socket is member 0) and answers [`Response::Steered`] with
    /// it (the socket travels with the answer); datagrams to the client's QPN blocks reach it
    /// from then on. A client joins each device once.
    ///
    /// The memfd of a `softib_net::ring::PacketRing` of `hand_on` record bytes travels with
    /// the request: the client hands the daemon every datagram it received whose DestQP is
    /// not in its blocks (steered to it while the group changed), each record tagged with its
    /// run index and holding the sender's address ([`crate::HAND_ON_ADDR_LEN`] bytes: IPv6 or
    /// IPv4-mapped address, UDP port big-endian) and then the UDP payload. The daemon drains
    /// the ring every turn of its loop.
    SteerJoin {
        /// Device index.
        dev: u32,
        /// The hand-on ring's record bytes.
        hand_on: u32,
    },
    /// The client is about to close the socket [`Request::SteerJoin`] gave it.
    SteerLeave {
        /// Device index.
        dev: u32,
    },
    /// The process data path: the client's engine on device `dev` opens its event channel.
    /// Three descriptors travel with the request: the daemon's end of a unix stream socket
    /// pair, on which the daemon pushes [`Event`]s (framed as requests are, with their
    /// descriptors); the engine's doorbell, an eventfd that peers write after they put
    /// packets into a ring to this engine while it is not polling ([`Request::RingTo`]); and
    /// the engine's counters, a `softib_net::counters::CounterPage` of `counters` entries
    /// named `port.*` (PortCounters), `drop.*` (drops by reason) and `fault.*` (what the
    /// device's faults did to its packets), which the daemon adds to the device's own; and
    /// the engine's inbound ring, a `PacketRing` of [`crate::INBOUND_RING_BYTES`] record
    /// bytes the daemon writes (and then the doorbell) with datagrams for the engine's QPNs
    /// that reached the daemon while the steering group changed.
    /// The daemon answers after pushing the device's faults and capture as they are now
    /// ([`Event::Faults`], [`Event::Capture`]) when either is set.
    OpenEvents {
        /// Device index.
        dev: u32,
        /// The counter page's entries.
        counters: u32,
    },
    /// The process data path, intra-host: the client's RC QP on device `dev` got a path to
    /// QP `dqpn` at `dgid`. When that QP belongs to another process's engine on a device of
    /// this daemon, both engines get a pair of shared-memory packet rings ([`Response::Ring`]
    /// to the asker, [`Event::Ring`] to the other) and their QPs' packets travel through
    /// them instead of the kernel; otherwise [`Response::NoRing`] says why.
    RingTo {
        /// Device index.
        dev: u32,
        /// The path's destination GID.
        dgid: Gid,
        /// The destination QPN.
        dqpn: Qpn,
    },
}

/// What the daemon pushes on a process engine's event channel ([`Request::OpenEvents`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// Another process's engine asked for rings to this one ([`Request::RingTo`]): three
    /// descriptors come with it — the ring this engine reads, the ring it writes, and the
    /// other engine's doorbell — each ring a `softib_net::ring::PacketRing` of
    /// [`crate::PEER_RING_BYTES`] record bytes whose records are a datagram as a peer sends
    /// it: the sender's address ([`crate::HAND_ON_ADDR_LEN`] bytes) and the UDP payload
    /// (unsealed, in-process segments).
    Ring {
        /// The pair's id (what [`Event::RingGone`] names).
        id: u64,
        /// The other engine's device address and UDP port.
        peer: std::net::SocketAddr,
        /// The first QPN of each QPN block the other engine holds on its device now.
        peer_blocks: Vec<u32>,
        /// The other engine's process (as the kernel names it), whose memory a record may
        /// name instead of carrying a large payload (see `softib::provider::peers`).
        peer_pid: u32,
    },
    /// The other end of ring pair `id` is gone (its process exited or was killed): its rings
    /// are dropped, and QPs that used them see what they would with a dead node.
    RingGone {
        /// The pair's id.
        id: u64,
    },
    /// The faults injected on the device's egress are now `spec` (`softib fault`): the
    /// engine applies them to every datagram it sends, through the kernel or a ring, as the
    /// daemon does to its own.
    Faults {
        /// What to inject (the default: nothing).
        spec: softib_net::fault::FaultSpec,
    },
    /// A capture of the device started (`on`; one descriptor comes with it: a
    /// `softib_net::ring::PacketRing` of [`crate::CAPTURE_RING_BYTES`] record bytes the
    /// engine writes and the daemon drains into the pcap, each record the time
    /// ([`crate::capture_prefix`]) and the packet) or stopped. While one runs, the engine's datagrams are
    /// whole and sealed, as the wire would carry them.
    Capture {
        /// Whether a capture runs.
        on: bool,
    },
    /// The device's port went up or down (it follows its interface, as rxe's does): the
    /// engine's port changes with it, raising `IBV_EVENT_PORT_ACTIVE` or `IBV_EVENT_PORT_ERR`.
    Port {
        /// The port number.
        port: u8,
        /// Whether it is active now.
        active: bool,
    },
}

/// An object a process's own engine holds, as [`Request::Own`] and [`Request::Disown`] name
/// it (handles are the process engine's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ProcessObject {
    /// A protection domain.
    Pd(u32),
    /// A completion queue.
    Cq(u32),
    /// A queue pair (its QPN, from one of the client's blocks).
    Qp(Qpn),
    /// An address handle.
    Ah(u32),
    /// A shared receive queue.
    Srq(u32),
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
    Links(Vec<(LinkConfig, bool)>),
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
    /// A block of QPNs: `count` from `first`.
    QpnBlock {
        /// The first QPN.
        first: Qpn,
        /// How many.
        count: u32,
    },
    /// A memory key.
    MrKey(u32),
    /// The rings to another process's engine ([`Request::RingTo`]): when `fresh`, three
    /// descriptors come with it as with [`Event::Ring`]; otherwise the asker has them
    /// already (an earlier answer or event named the same `id`).
    Ring {
        /// The pair's id.
        id: u64,
        /// The other engine's device address and UDP port.
        peer: std::net::SocketAddr,
        /// The first QPN of each QPN block the other engine holds on its device now.
        peer_blocks: Vec<u32>,
        /// The other engine's process (as the kernel names it).
        peer_pid: u32,
        /// Whether the descriptors come with this answer.
        fresh: bool,
    },
    /// No rings for this path ([`Request::RingTo`]): why (its packets go through the
    /// kernel, which is always correct).
    NoRing(String),
    /// Joined the device's steering group: the socket travels with this answer (SCM_RIGHTS),
    /// bound to `addr`.
    Steered {
        /// The device's address and UDP port.
        addr: std::net::SocketAddr,
        /// The index the socket holds in the group.
        index: u32,
    },
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{decode, encode};

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
