//! rdma_cm on an InfiniBand port (a host of `softib fabric up`), as the kernel's rdma_cm works
//! on one:
//!
//! - **Addresses** are the IPoIB addresses of the host's interfaces (`softib ipoib add ib0`).
//!   A local address names its interface, and the interface its device, port and port GID
//!   ([`local_of`]). A destination's GID is in its IPoIB hardware address, which IPoIB ARP
//!   learnt: the interface's process exports its neighbour table in its state file
//!   (`softib_ipoib::state`), because its TUN device is layer 3 and the kernel keeps no
//!   neighbour table for it. A destination not in the table is resolved as the kernel's
//!   `addr.c` resolves one: a packet sent towards it makes the interface ask ARP, and the
//!   table is read again until the answer is there ([`neighbour_gid`]).
//! - **Routes** are PathRecords from the SA (SGID → DGID), asked through softib's MAD agent as
//!   the kernel's `sa_query.c` asks them ([`path`]); a connection's address vector is
//!   LID-routed (no GRH inside one subnet).
//! - **Multicast groups** are joined through the SA with an MCMemberRecord, as IPoIB joins
//!   its broadcast group ([`join`], [`leave`]); an IPv4 group's MGID is the kernel's mapping
//!   with rdma_cm's signature for RDMA_PS_UDP ([`mgid`]).
//!
//! The id calls built on these are [`resolve_addr`] and [`resolve_route`] here, and the IB
//! branch of `rdma_join_multicast` in `crate::mcast`.
//!
//! Every SA question is asked on a daemon connection of its own, opened for it and closed
//! after, outside the agent's lock: the CM thread goes on meanwhile, and no idle MAD agent
//! is left on the port to collect CM MADs nobody reads.

use std::ffi::c_int;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use softib::mad::MadAgent;
use softib::Context;
use softib_ipoib::encap::HwAddr;
use softib_ipoib::state::{self as ipoib_state, IfState};
use softib_net::tun::IfConfig;
use softib_verbs_abi::rdma_cm::{event, port_space, RdmaCmId};
use softib_verbs_abi::{IbvGid, IbvSaPathRec};
use softib_wire::mad::sa::{self, join_state, mcmember_comp, McMemberRecord, PathRecord};
use softib_wire::{Gid, Lid, PKey, QKey};

use crate::agent::{self, At};
use crate::event::new_event;

/// How often [`neighbour_gid`] reads the neighbour table while it waits.
const NEIGHBOUR_POLL: Duration = Duration::from_millis(10);
/// How often it sends the packet that makes the interface ask ARP again.
const NEIGHBOUR_NUDGE: Duration = Duration::from_secs(1);
/// The UDP port the nudge goes to: discard (RFC 863), which nobody answers but ICMP.
const DISCARD_PORT: u16 = 9;
/// The PortState of an Active port (PortInfo).
const PORT_ACTIVE: u8 = 4;

/// What an id on an InfiniBand port knows of its route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbRoute {
    /// This side's port GID.
    pub sgid: Gid,
    /// The peer's port GID (zero until the address is resolved, and on the passive side of a
    /// SIDR request, which names none).
    pub dgid: Gid,
    /// The partition: the IPoIB interface's.
    pub pkey: u16,
    /// The path, once the SA gave it (active side) or the REQ named it (passive side).
    pub path: Option<IbPath>,
}

impl IbRoute {
    /// The route of an id bound to an address of `local`'s interface.
    pub fn on(local: &Local) -> IbRoute {
        IbRoute {
            sgid: local.gid,
            dgid: Gid::default(),
            pkey: local.pkey,
            path: None,
        }
    }
}

/// A LID-routed path inside the subnet, from this side's view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IbPath {
    /// This port's LID.
    pub slid: Lid,
    /// The peer port's LID.
    pub dlid: Lid,
    /// The service level.
    pub sl: u8,
    /// The path MTU (the `ibv_mtu` code).
    pub mtu: u8,
    /// The static rate code (IBA table 235; 0: the port's).
    pub rate: u8,
    /// The packet lifetime exponent (4.096 µs × 2^n).
    pub packet_life_time: u8,
}

impl IbPath {
    /// The path a PathRecord from this side describes.
    pub fn from_record(p: &PathRecord) -> IbPath {
        IbPath {
            slid: p.slid,
            dlid: p.dlid,
            sl: p.sl,
            mtu: u8::from(p.mtu),
            rate: p.rate,
            packet_life_time: p.packet_life_time,
        }
    }

    /// The passive side's path: a REQ's primary path with its ends swapped, and the REQ's
    /// path MTU (the kernel's `cm_format_paths_from_req`).
    pub fn from_req(primary: &softib_cm::Path, path_mtu: u8) -> IbPath {
        IbPath {
            slid: primary.remote_lid,
            dlid: primary.local_lid,
            sl: primary.sl,
            mtu: path_mtu,
            rate: primary.packet_rate,
            // The REQ carries the requester's ACK timeout, one more than the packet lifetime
            // (the kernel's `cm_ack_timeout`); the QP takes its own ACK timeout.
            packet_life_time: primary.local_ack_timeout.saturating_sub(1),
        }
    }

    /// The path back to `dlid`, where a SIDR request came from (a SIDR_REQ names no path:
    /// the answer goes back the way the request came, on SL 0).
    pub fn back_to(dlid: Lid) -> IbPath {
        IbPath {
            dlid,
            ..IbPath::default()
        }
    }
}

/// A local IPoIB address: its interface and the port under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Local {
    /// The interface (`ib0`).
    pub ifname: String,
    /// Its device (`mlx4_0`).
    pub dev: String,
    /// Its port.
    pub port: u8,
    /// The port's GID (in the interface's hardware address).
    pub gid: Gid,
    /// The interface's partition.
    pub pkey: u16,
}

impl Local {
    fn of(s: &IfState) -> Option<Local> {
        let hw: HwAddr = s.hwaddr.parse().ok()?;
        Some(Local {
            ifname: s.ifname.clone(),
            dev: s.dev.clone(),
            port: s.port,
            gid: hw.gid(),
            pkey: s.pkey,
        })
    }
}

/// The host's IPoIB interfaces whose process runs, each with its IPv4 address (if it has one).
fn interfaces() -> Vec<(IfState, Option<Ipv4Addr>)> {
    let Ok(ifc) = IfConfig::new() else {
        return Vec::new();
    };
    ipoib_state::list()
        .into_iter()
        .filter(|s| ipoib_state::alive(s.pid))
        .map(|s| {
            let ip = ifc.ipv4(&s.ifname).ok().flatten().map(|(ip, _)| ip);
            (s, ip)
        })
        .collect()
}

/// The IPoIB interface of this host that has address `ip`.
pub fn local_of(ip: Ipv4Addr) -> Option<Local> {
    interfaces()
        .iter()
        .find(|(_, a)| *a == Some(ip))
        .and_then(|(s, _)| Local::of(s))
}

/// The first IPoIB interface with an address: the source for a destination the host's
/// routes do not place (a multicast group without a route).
pub fn any_local() -> Option<(Ipv4Addr, Local)> {
    interfaces()
        .iter()
        .find_map(|(s, a)| Some(((*a)?, Local::of(s)?)))
}

/// The source address the host's routing table picks for `dst` (what the kernel's
/// `rdma_resolve_addr` without a source does: a route lookup). Connecting a UDP socket sends
/// nothing.
pub fn route_source(dst: Ipv4Addr) -> Option<Ipv4Addr> {
    let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    s.connect((dst, DISCARD_PORT)).ok()?;
    match s.local_addr().ok()? {
        SocketAddr::V4(a) => Some(*a.ip()),
        SocketAddr::V6(_) => None,
    }
}

/// The GID of `dst` on `local`'s interface: this host's own port GID for one of its own IPoIB
/// addresses, else the neighbour's, waiting up to `timeout` for IPoIB ARP to learn it.
pub fn neighbour_gid(
    local: &Local,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    timeout: Duration,
) -> Result<Gid, c_int> {
    if let Some(own) = local_of(dst) {
        return Ok(own.gid);
    }
    let t0 = Instant::now();
    let mut nudged: Option<Instant> = None;
    loop {
        if let Some(gid) = known_neighbour(&local.ifname, dst) {
            return Ok(gid);
        }
        if t0.elapsed() >= timeout {
            return Err(crate::refused(
                "rdma_resolve_addr",
                &format!(
                    "{dst} did not answer IPoIB ARP on {} within {timeout:?} (is its ib0 up, \
                     with that address, and its port Active? `softib ipoib show` on both hosts)",
                    local.ifname
                ),
                libc::EHOSTUNREACH,
            ));
        }
        if nudged.is_none_or(|t| t.elapsed() >= NEIGHBOUR_NUDGE) {
            nudge(src, dst);
            nudged = Some(Instant::now());
        }
        std::thread::sleep(NEIGHBOUR_POLL);
    }
}

/// The GID of neighbour `ip` in the table `ifname`'s process exports.
fn known_neighbour(ifname: &str, ip: Ipv4Addr) -> Option<Gid> {
    let s = ipoib_state::read(ifname)?;
    let n = s.neighbours.iter().find(|n| n.ip == ip)?;
    let hw: HwAddr = n.lladdr.parse().ok()?;
    Some(hw.gid())
}

/// Sends one datagram from `src` to `dst`'s discard port: the kernel routes it into the
/// IPoIB interface, whose process holds it and asks ARP for `dst`.
fn nudge(src: Ipv4Addr, dst: Ipv4Addr) {
    if let Ok(s) = UdpSocket::bind((src, 0)) {
        let _ = s.send_to(b"softib rdma_cm: resolving", (dst, DISCARD_PORT));
    }
}

/// The MGID of IPv4 multicast group `group` on partition `pkey`, as the kernel's rdma_cm
/// maps it (`ip_ib_mc_map` from the broadcast group: link-local scope, the IPv4 signature
/// 0x401b, the P_Key, the group's low 28 bits; for RDMA_PS_UDP the signature's second byte
/// is rdma_cm's 0x01).
pub fn mgid(group: Ipv4Addr, pkey: u16, ps_udp: bool) -> Gid {
    let mut g = sa::ipoib_broadcast_mgid(PKey(pkey)).0;
    if ps_udp {
        g[3] = 0x01;
    }
    g[6..12].fill(0);
    let a = u32::from(group) & 0x0FFF_FFFF;
    g[12..].copy_from_slice(&a.to_be_bytes());
    Gid(g)
}

/// Runs `f` with a MAD agent on port 1 of device `dev`, on a daemon connection of its own,
/// and the SA's LID (the SM's, as the port knows it).
fn with_sa<R>(
    dev: u32,
    f: impl FnOnce(&mut MadAgent, &mut Context, Lid) -> Result<R, String>,
) -> Result<R, String> {
    let mut ctx = Context::open().map_err(|e| e.to_string())?;
    let info = ctx
        .devices()
        .map_err(|e| e.to_string())?
        .into_iter()
        .nth(dev as usize)
        .ok_or_else(|| format!("no device {dev}"))?;
    let port = info
        .ports
        .first()
        .ok_or_else(|| format!("{} has no port", info.name))?;
    if port.state != PORT_ACTIVE || port.sm_lid == Lid(0) {
        return Err(format!(
            "{} port {} is not Active, or knows no SM (is a subnet manager running?)",
            info.name, port.number
        ));
    }
    let (number, sm_lid) = (port.number, port.sm_lid);
    let mut agent = MadAgent::open(&mut ctx, dev, number).map_err(|e| e.to_string())?;
    f(&mut agent, &mut ctx, sm_lid)
}

/// SubnAdmGet(PathRecord) from `sgid` to `dgid` through device `dev`'s SA.
pub fn path(dev: u32, sgid: Gid, dgid: Gid) -> Result<PathRecord, String> {
    with_sa(dev, |agent, ctx, sm_lid| {
        softib_ipoib::sa::path_to(agent, ctx, sm_lid, sgid, dgid).map_err(|e| e.to_string())
    })
}

/// Joins `mgid` on device `dev` as its port `port_gid` (a full member, or a send-only one),
/// with Q_Key `qkey` (`None`: the broadcast group's), as the kernel's `cma_join_ib_multicast`
/// does: the new group's SL, FlowLabel and TClass are those of the partition's IPoIB
/// broadcast group, and the MTU and rate the SA's choice for the port.
pub fn join(
    dev: u32,
    port_gid: Gid,
    mgid: Gid,
    pkey: u16,
    qkey: Option<u32>,
    send_only: bool,
) -> Result<McMemberRecord, String> {
    with_sa(dev, |agent, ctx, sm_lid| {
        let broadcast = McMemberRecord {
            mgid: sa::ipoib_broadcast_mgid(PKey(pkey)),
            ..McMemberRecord::default()
        };
        let mut data = [0u8; McMemberRecord::LEN];
        broadcast.emit(&mut data);
        let r = agent
            .sa_query(
                ctx,
                sm_lid,
                softib_wire::mad::Method::Get,
                softib_wire::mad::AttrId::MC_MEMBER_RECORD,
                mcmember_comp::MGID,
                &data,
            )
            .map_err(|e| format!("reading the IPoIB broadcast group's record: {e}"))?;
        let b = sa::Repr::parse(&sa::Packet::new_unchecked(&r.mad()[..]))
            .ok()
            .and_then(|r| McMemberRecord::parse(r.data).ok())
            .ok_or("the SA answered a bad MCMemberRecord for the broadcast group")?;
        let rec = McMemberRecord {
            mgid,
            port_gid,
            q_key: qkey.map_or(b.q_key, QKey),
            pkey: PKey(pkey),
            sl: b.sl,
            flow_label: b.flow_label,
            tclass: b.tclass,
            join_state: if send_only {
                join_state::SEND_ONLY_FULL_MEMBER
            } else {
                join_state::FULL_MEMBER
            },
            ..McMemberRecord::default()
        };
        softib_ipoib::sa::join(agent, ctx, sm_lid, &rec, mcmember_comp::CREATE)
            .map_err(|e| e.to_string())
    })
}

/// Leaves `mgid` on device `dev`: SubnAdmDelete of the membership `join_state` of `port_gid`.
pub fn leave(dev: u32, port_gid: Gid, mgid: Gid, join_state: u8) -> Result<(), String> {
    with_sa(dev, |agent, ctx, sm_lid| {
        let rec = McMemberRecord {
            mgid,
            port_gid,
            join_state,
            ..McMemberRecord::default()
        };
        softib_ipoib::sa::leave(agent, ctx, sm_lid, &rec)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
}

/// The IPoIB address (and its interface) an id resolving `dst` from `wanted` uses: the
/// source asked for, else the one the host's routes pick for `dst` (for a multicast group
/// without a route, the first IPoIB interface's). `None` when that is no IPoIB address:
/// the id is resolved as on RoCE.
pub fn ipoib_source(wanted: Option<SocketAddr>, dst: SocketAddr) -> Option<(Ipv4Addr, Local)> {
    let IpAddr::V4(dst) = dst.ip().to_canonical() else {
        return None;
    };
    match wanted.map(|a| a.ip().to_canonical()) {
        Some(IpAddr::V4(ip)) if !ip.is_unspecified() => local_of(ip).map(|l| (ip, l)),
        Some(IpAddr::V6(ip)) if !ip.is_unspecified() => None,
        _ => match route_source(dst) {
            Some(ip) => local_of(ip).map(|l| (ip, l)),
            None if dst.is_multicast() => any_local(),
            None => None,
        },
    }
}

/// `rdma_resolve_addr` on InfiniBand: the id is bound to `src`, an address of `local`'s IPoIB
/// interface, and the destination named by its GID — for a unicast address the neighbour's
/// port GID, which IPoIB ARP finds (waiting up to `timeout_ms` here, without the agent's
/// lock); for a multicast group its MGID. ADDR_RESOLVED follows, or ADDR_ERROR with the
/// reason.
pub fn resolve_addr(
    id: *mut RdmaCmId,
    src: SocketAddr,
    local: &Local,
    dst: SocketAddr,
    timeout_ms: c_int,
) -> Result<(), c_int> {
    let IpAddr::V4(dst_v4) = dst.ip().to_canonical() else {
        return Err(libc::EAFNOSUPPORT);
    };
    let IpAddr::V4(src_v4) = src.ip().to_canonical() else {
        return Err(libc::EAFNOSUPPORT);
    };
    let ps = agent::with(|st| Ok(st.id(id)?.ps))?;
    // A program that gives no timeout gets rping's.
    let timeout = Duration::from_millis(
        u64::try_from(timeout_ms)
            .ok()
            .filter(|&ms| ms > 0)
            .unwrap_or(2000),
    );
    let dgid = if dst_v4.is_multicast() {
        Ok(mgid(dst_v4, local.pkey, ps == port_space::UDP))
    } else {
        neighbour_gid(local, src_v4, dst_v4, timeout)
    };
    agent::with(|st| {
        crate::id::bind(st, id, src)?;
        let state = st.id(id)?;
        state.dst = Some(dst);
        state.peer = None;
        // SAFETY: the id's C struct.
        let c = unsafe { &mut *id };
        c.route.addr.dst_addr = crate::id::storage_of(dst);
        let channel = c.channel;
        let e = match dgid {
            Ok(dgid) => {
                if let Some(r) = st.id(id)?.ib.as_mut() {
                    r.dgid = dgid;
                }
                c.route.addr.ibaddr.dgid = IbvGid { raw: dgid.0 };
                new_event(id, event::ADDR_RESOLVED, 0)
            }
            Err(errno) => new_event(id, event::ADDR_ERROR, -errno),
        };
        st.post(channel, e);
        Ok(())
    })
}

/// `rdma_resolve_route` on InfiniBand: the SA's PathRecord from the id's port GID to the
/// peer's (asked without the agent's lock), the id's path and peer CM (by its DLID) from it,
/// and the record as `id->route.path_rec`. ROUTE_RESOLVED follows, or ROUTE_ERROR.
pub fn resolve_route(id: *mut RdmaCmId) -> Result<(), c_int> {
    let (dev_index, sgid, dgid) = agent::with(|st| {
        let s = st.id(id)?;
        match (s.ib, s.dev, s.dst) {
            (Some(r), Some(dev), Some(_)) if r.dgid != Gid::default() => {
                Ok((st.devs[dev].index, r.sgid, r.dgid))
            }
            _ => Err(crate::refused(
                "rdma_resolve_route",
                "the address is not resolved (rdma_resolve_addr first)",
                libc::EINVAL,
            )),
        }
    })?;
    let got = path(dev_index, sgid, dgid);
    agent::with(|st| {
        st.id(id)?;
        // SAFETY: the id's C struct (in the table, checked above).
        let channel = unsafe { (*id).channel };
        let p = match got {
            Ok(p) => p,
            Err(why) => {
                let errno = crate::refused(
                    "rdma_resolve_route",
                    &format!("the SA gave no path from {sgid} to {dgid}: {why}"),
                    libc::EHOSTUNREACH,
                );
                st.post(channel, new_event(id, event::ROUTE_ERROR, -errno));
                return Ok(());
            }
        };
        let s = st.id(id)?;
        if let Some(r) = s.ib.as_mut() {
            r.path = Some(IbPath::from_record(&p));
        }
        s.peer = Some((dev_index, At::Lid(p.dlid)));
        crate::id::set_path_rec(id, path_rec(&p));
        st.post(channel, new_event(id, event::ROUTE_RESOLVED, 0));
        Ok(())
    })
}

/// A PathRecord as libibverbs' `ibv_sa_path_rec` (its 16- and 32-bit fields big-endian).
fn path_rec(p: &PathRecord) -> IbvSaPathRec {
    IbvSaPathRec {
        dgid: IbvGid { raw: p.dgid.0 },
        sgid: IbvGid { raw: p.sgid.0 },
        dlid: p.dlid.0.to_be(),
        slid: p.slid.0.to_be(),
        raw_traffic: c_int::from(p.raw_traffic),
        flow_label: p.flow_label.to_be(),
        hop_limit: p.hop_limit,
        traffic_class: p.tclass,
        reversible: c_int::from(p.reversible),
        numb_path: p.numb_path,
        pkey: p.pkey.0.to_be(),
        sl: p.sl,
        mtu_selector: u8::from(p.mtu_selector),
        mtu: u8::from(p.mtu),
        rate_selector: u8::from(p.rate_selector),
        rate: p.rate,
        packet_life_time_selector: u8::from(p.packet_life_time_selector),
        packet_life_time: p.packet_life_time,
        preference: p.preference,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's `ip_ib_mc_map` of 224.0.1.10 on the default partition, and rdma_cm's
    /// signature for RDMA_PS_UDP.
    #[test]
    fn an_ipv4_group_maps_to_the_kernels_mgid() {
        let g = mgid(Ipv4Addr::new(224, 0, 1, 10), 0xffff, false);
        assert_eq!(g.to_string(), "ff12:401b:ffff:0000:0000:0000:0000:010a");
        let g = mgid(Ipv4Addr::new(239, 1, 2, 3), 0x7fff, true);
        assert_eq!(g.to_string(), "ff12:4001:ffff:0000:0000:0000:0f01:0203");
    }
}
