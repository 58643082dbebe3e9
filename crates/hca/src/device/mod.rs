//! The devices a host's daemon runs: HCAs on emulated IB cables, and RoCEv2 devices on an IP
//! address (`softib link add NAME type rxe netdev IFACE`).
//!
//! Both are an engine over shared memory with a sans-IO link adapter (`IbCa`: native framing
//! and the SMA; `softib_link::RoceCa`: RoCEv2 framing, the ICRC, source ports, the in-process
//! decision); what lives here is what those cannot have: the sockets (cables, per-QP UDP
//! source sockets), the send queue and its flush, live faults, captures, and the port's link
//! state (the SM on IB; the interface's operational state on RoCE).

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use softib_engine::{AttrMask, Hca, HcaConfig, Instant, PortAttr, QpAttr, VerbsError};
use softib_fabric::SmaEvent;
use softib_link::framing;
use softib_link::{Incoming, RoceCa, RoceConfig, RoceTransmit, SrcKey};
use softib_net::cable::{Cable, CableEvent, CableRecv};
use softib_net::fault::{FaultSpec, FaultStats, Faults};
use softib_net::netdev::{eui64, netdev, netdev_up};
use softib_net::pcap::{PcapWriter, LINKTYPE_INFINIBAND, LINKTYPE_RAW};
use softib_net::{RxBatch, TxQueue, UdpLink};
use softib_proto::{DeviceInfo, LinkConfig, PortInfo};
use softib_wire::{Gid, Guid, Lid, Mtu, Qpn};

use crate::ib::{IbCa, MadIn};
use crate::ratelog::RateLog;
use crate::shm_memory::ShmMemory;
use crate::steering::SteerGroup;
use crate::switchboard::{LocalPayload, LocalRoce, Switchboard};

mod ib;
mod roce;

pub(crate) use ib::{apply_sma_event, IbDev};
use roce::accept;
pub use roce::Forward;
pub(crate) use roce::RoceDev;

/// One device of a host.
pub(crate) enum Device {
    Ib(Box<IbDev>),
    Roce(Box<RoceDev>),
}

/// How often a RoCE device looks at its interface's state.
const OPERSTATE_EVERY: StdDuration = StdDuration::from_millis(500);

impl Device {
    pub fn name(&self) -> &str {
        match self {
            Device::Ib(d) => &d.ca.identity().name,
            Device::Roce(d) => &d.config.name,
        }
    }

    /// The engine, for every verb but `modify_qp` ([`Device::modify_qp`]).
    pub fn hca_mut(&mut self) -> &mut Hca<ShmMemory> {
        match self {
            Device::Ib(d) => d.ca.hca_mut(),
            Device::Roce(d) => d.ca.hca_mut(),
        }
    }

    /// `ibv_modify_qp`: on RoCE through the `RoceCa`, which decides from the QP's new path
    /// whether its peer is a device of this daemon.
    pub fn modify_qp(&mut self, qpn: Qpn, attr: &QpAttr, mask: AttrMask) -> Result<(), VerbsError> {
        match self {
            Device::Ib(d) => d.ca.hca_mut().modify_qp(qpn, attr, mask),
            Device::Roce(d) => d.ca.modify_qp(qpn, attr, mask),
        }
    }

    /// Tells a RoCE device which addresses are devices of this daemon (`LocalRoce`'s ends).
    pub fn set_local_peers(&mut self, peers: &[SocketAddr]) {
        if let Device::Roce(d) = self {
            d.ca.set_local_peers(peers.iter().copied());
        }
    }

    /// A datagram a client's engine received and handed on (not for its QPs): to this
    /// device's engine when no client owns its DestQP, else counted as lost.
    pub fn take_handed_on(
        &mut self,
        now: Instant,
        by: u64,
        from: SocketAddr,
        index: u16,
        data: &[u8],
    ) {
        let Device::Roce(d) = self else {
            return;
        };
        if d.forwarding().forward(from, index, data, Some(by)) {
            return;
        }
        let local = d.local();
        let w = Incoming::wire(from, index, data);
        accept(&mut d.ca, &mut d.capture, &d.config.name, local, now, &w);
    }

    /// The datagrams waiting for their owners' engines (see [`Forward`]).
    pub fn take_forwards(&mut self) -> std::collections::VecDeque<Forward> {
        match self {
            Device::Ib(_) => Default::default(),
            Device::Roce(d) => std::mem::take(&mut d.forwards),
        }
    }

    /// Counts a forwarded datagram its owner could not take.
    pub fn forward_lost(&mut self) {
        if let Device::Roce(d) = self {
            d.handed_on_lost += 1;
        }
    }

    /// Whether processes' own engines hold QPs of this device (they joined its steering
    /// group).
    pub fn has_process_engines(&self) -> bool {
        match self {
            Device::Ib(_) => false,
            Device::Roce(d) => d.steer.has_members(),
        }
    }

    /// A RoCE device's steering group and the socket that is its member 0.
    pub fn steering(&mut self) -> Option<(&mut SteerGroup, &UdpSocket)> {
        match self {
            Device::Ib(_) => None,
            Device::Roce(d) => Some((&mut d.steer, d.link.socket())),
        }
    }

    pub fn ib(&mut self) -> Option<&mut IbDev> {
        match self {
            Device::Ib(d) => Some(d),
            Device::Roce(_) => None,
        }
    }

    /// Receives and handles what its sockets have (only those reported ready), runs the link
    /// state machines. Returns whether more may be waiting.
    pub fn receive(
        &mut self,
        std_now: StdInstant,
        now: Instant,
        buf: &mut [u8],
        sb: &mut Switchboard,
    ) -> io::Result<bool> {
        match self {
            Device::Ib(d) => d.receive(std_now, now, buf, sb),
            Device::Roce(d) => d.receive(std_now, now, &mut sb.roce),
        }
    }

    /// Sends what the engine (and on IB the SMA) has to send.
    pub fn transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        sb: &mut Switchboard,
    ) -> io::Result<bool> {
        match self {
            Device::Ib(d) => d.transmit(now, buf, sb),
            Device::Roce(d) => d.transmit(now, buf, &mut sb.roce),
        }
    }

    /// The address a RoCE device receives on.
    pub fn roce_addr(&self) -> Option<SocketAddr> {
        match self {
            Device::Ib(_) => None,
            Device::Roce(d) => Some(d.local()),
        }
    }

    /// The next MAD for local agents: on IB from QP0 and QP1, on RoCE from QP1 (the CM's
    /// GMPs, with the sender's address as its GID).
    pub fn poll_mad(&mut self) -> Option<MadIn> {
        match self {
            Device::Ib(d) => d.ca.poll_mad(),
            Device::Roce(d) => d.ca.poll_gmp().map(|g| MadIn {
                port: 1,
                qp: softib_proto::MadQp::Gsi,
                slid: softib_wire::Lid(0),
                src_qpn: g.src_qpn,
                sgid: Some(framing::gid_of(g.from.ip())),
                mad: g.mad,
            }),
        }
    }

    /// The RoCE device's link, for QP1's GMPs.
    pub fn roce(&mut self) -> Option<&mut RoceCa<ShmMemory>> {
        match self {
            Device::Ib(_) => None,
            Device::Roce(d) => Some(&mut d.ca),
        }
    }

    /// The engine's (and the links') next deadline, in the engine's time and the OS's.
    pub fn deadlines(&self) -> (Option<Instant>, Option<StdInstant>) {
        match self {
            Device::Ib(d) => (
                d.ca.poll_timeout(),
                d.cables
                    .iter()
                    .flatten()
                    .filter_map(Cable::next_deadline)
                    .min(),
            ),
            Device::Roce(d) => (d.ca.poll_timeout(), Some(d.next_check)),
        }
    }

    /// Hands each socket to wait on to `f`, with an index [`Device::mark_ready`] understands.
    /// Calls `f` with each socket the loop waits on: its index for [`Device::mark_ready`],
    /// the socket, and for a cable the address of its far end.
    pub fn each_socket<'a>(&'a self, mut f: impl FnMut(usize, &'a UdpSocket, Option<SocketAddr>)) {
        match self {
            Device::Ib(d) => {
                for (p, c) in d.cables.iter().enumerate() {
                    if let Some(c) = c {
                        f(p, c.socket(), Some(c.peer_addr()));
                    }
                }
            }
            Device::Roce(d) => {
                f(0, d.link.socket(), None);
                for (i, g) in d.groups.iter().enumerate() {
                    f(1 + i, &g.socket, None);
                }
            }
        }
    }

    pub fn mark_ready(&mut self, index: usize) {
        match self {
            Device::Ib(d) => {
                if let Some(r) = d.ready.get_mut(index) {
                    *r = true;
                }
            }
            Device::Roce(d) => match index.checked_sub(1) {
                None => d.ready = true,
                Some(i) => {
                    if let Some(g) = d.groups.get_mut(i) {
                        g.ready = true;
                    }
                }
            },
        }
    }

    /// A QP of this device attaches to multicast group `mgid`: the MGID the engine files it
    /// under. On RoCE an IPv4 group's GID (`::ffff:a.b.c.d`, as rdma_cm makes it) has the
    /// device join the group on its interface ([`framing::engine_mgid`]); any other GID is
    /// the engine's as it is.
    pub fn join_group(&mut self, mgid: Gid, qpn: Qpn) -> io::Result<Gid> {
        let Device::Roce(d) = self else {
            return Ok(mgid);
        };
        let Some(group) = framing::ipv4_group(&mgid) else {
            return Ok(mgid);
        };
        d.join_group(group, qpn)?;
        Ok(framing::engine_mgid(group))
    }

    /// QP `qpn` detached from `mgid` ([`Device::join_group`]'s counterpart).
    pub fn leave_group(&mut self, mgid: Gid, qpn: Qpn) {
        if let (Device::Roce(d), Some(group)) = (self, framing::ipv4_group(&mgid)) {
            d.leave_groups(|g| g == group, qpn);
        }
    }

    /// QP `qpn` is gone: it leaves every group it was attached to.
    pub fn forget_qp(&mut self, qpn: Qpn) {
        if let Device::Roce(d) = self {
            d.leave_groups(|_| true, qpn);
        }
    }

    /// The MGID the engine files group `mgid` under ([`Device::join_group`]).
    pub fn group_mgid(&self, mgid: Gid) -> Gid {
        match (self, framing::ipv4_group(&mgid)) {
            (Device::Roce(_), Some(group)) => framing::engine_mgid(group),
            _ => mgid,
        }
    }

    /// A digest of what the SM changes in the ports' sysfs files (state, LID, LMC, SM LID,
    /// CapabilityMask): when it changes, the files follow at once instead of at their next
    /// periodic update, as the kernel's follow a PortInfo Set (libibumad reads the SM LID
    /// there, so `saquery` right after SUBNET UP finds the SA, and `ibstat` the state). RoCE
    /// ports change only with their interface, which the periodic update follows.
    pub fn port_digest(&self) -> u64 {
        let Device::Ib(d) = self else {
            return 0;
        };
        let sma = d.ca.sma();
        (1..=sma.num_ports()).filter_map(|p| sma.port_info(p)).fold(
            0xcbf2_9ce4_8422_2325,
            |h, i| {
                [
                    u64::from(u8::from(i.port_state)),
                    u64::from(u8::from(i.port_physical_state)),
                    u64::from(i.lid.0),
                    u64::from(i.master_sm_lid.0),
                    u64::from(i.capability_mask),
                    u64::from(i.lmc),
                ]
                .iter()
                .fold(h, |h, v| (h ^ v).wrapping_mul(0x0100_0000_01b3))
            },
        )
    }

    pub fn info(&self) -> DeviceInfo {
        match self {
            Device::Ib(d) => d.info(),
            Device::Roce(d) => d.info(),
        }
    }

    /// Sets the faults of `port` (0: every port); false if there is no such port.
    pub fn set_faults(&mut self, port: u8, spec: FaultSpec) -> bool {
        match self {
            Device::Ib(d) => {
                if port == 0 {
                    d.faults.iter_mut().for_each(|f| *f = Faults::new(spec));
                    true
                } else if let Some(f) = d.faults.get_mut(usize::from(port)) {
                    *f = Faults::new(spec);
                    true
                } else {
                    false
                }
            }
            Device::Roce(d) if port <= 1 => {
                d.faults = Faults::new(spec);
                true
            }
            Device::Roce(_) => false,
        }
    }

    /// The faults in force and what they did, per port.
    pub fn faults(&self) -> Vec<(u8, FaultSpec, FaultStats)> {
        match self {
            Device::Ib(d) => d
                .faults
                .iter()
                .enumerate()
                .skip(1)
                .map(|(p, f)| (p as u8, f.spec(), f.stats()))
                .collect(),
            Device::Roce(d) => vec![(1, d.faults.spec(), d.faults.stats())],
        }
    }

    /// Starts (`Some(path)`) or stops a capture; returns the packets of the capture stopped.
    pub fn set_capture(&mut self, path: Option<&std::path::Path>) -> io::Result<u64> {
        let (slot, linktype) = match self {
            Device::Ib(d) => (&mut d.capture, LINKTYPE_INFINIBAND),
            Device::Roce(d) => (&mut d.capture, LINKTYPE_RAW),
        };
        let done = match slot.take() {
            Some(mut w) => {
                w.flush()?;
                w.packets()
            }
            None => 0,
        };
        if let Some(p) = path {
            *slot = Some(PcapWriter::create(p, linktype)?);
        }
        Ok(done)
    }

    /// Whether a RoCE device's port is up (an IB device's ports say so in their PortInfo).
    pub fn roce_up(&self) -> Option<bool> {
        match self {
            Device::Ib(_) => None,
            Device::Roce(d) => Some(d.up),
        }
    }

    /// The faults set on a RoCE device's egress (the default for an IB device, whose ports
    /// have their own: [`Device::faults`]).
    pub fn roce_faults(&self) -> FaultSpec {
        match self {
            Device::Ib(_) => FaultSpec::default(),
            Device::Roce(d) => d.faults.spec(),
        }
    }

    /// Writes a packet a process engine on this device captured (seen at `at`) to the
    /// running capture.
    pub fn capture_from_engine(&mut self, at: std::time::SystemTime, packet: &[u8]) {
        let slot = match self {
            Device::Ib(d) => &mut d.capture,
            Device::Roce(d) => &mut d.capture,
        };
        if let Some(w) = slot {
            if w.write_at(at, packet).is_err() {
                *slot = None;
            }
        }
    }

    /// Packets captured so far by a running capture.
    pub fn captured(&mut self) -> Option<u64> {
        let w = match self {
            Device::Ib(d) => d.capture.as_mut(),
            Device::Roce(d) => d.capture.as_mut(),
        }?;
        let _ = w.flush();
        Some(w.packets())
    }
}

/// Writes a frame to a running capture; a capture that fails to write is stopped (and the
/// traffic goes on).
fn capture(slot: &mut Option<PcapWriter>, frame: &[u8]) {
    if let Some(w) = slot {
        if w.write(frame).is_err() {
            *slot = None;
        }
    }
}

fn drops(hca: &Hca<ShmMemory>) -> Vec<(String, u64)> {
    hca.drops()
        .nonzero()
        .map(|(r, n)| (r.name().to_string(), n))
        .collect()
}

/// Gb/s of a port's active width × speed, as ibstat's "Rate".
pub fn port_rate(i: &softib_wire::mad::attr::PortInfo) -> u32 {
    let lanes = match i.link_width_active {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 0,
    };
    let per_lane = match i.link_speed_active {
        1 => 2.5,
        2 => 5.0,
        4 => 10.0,
        _ => 0.0,
    };
    (f64::from(lanes) * per_lane) as u32
}
