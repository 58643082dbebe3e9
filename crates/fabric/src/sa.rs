//! Subnet administration (IBA vol 1 §15): the SA queries the master SM answers on QP1, from
//! what its sweeps found.
//!
//! | attribute | Get | GetTable | ComponentMask fields matched |
//! |---|---|---|---|
//! | ClassPortInfo | yes | — | — |
//! | NodeRecord | yes | yes | LID and every NodeInfo field, NodeDescription |
//! | PortInfoRecord | yes | yes | EndportLID, PortNum, LID, MasterSMLID, CapabilityMask (as a subset), PortState |
//! | PathRecord | yes | yes | SGID/DGID, SLID/DLID, P_Key, SL, MTU, Rate and PacketLifeTime with their selectors, ServiceID (echoed) |
//! | SMInfoRecord | yes | yes | — |
//! | MCMemberRecord | yes | yes | MGID, MLID, PortGID, Q_Key, P_Key, TClass, SL, FlowLabel, HopLimit, MTU/Rate/PacketLifeTime with selectors, Scope, JoinState |
//!
//! MCMemberRecord joins (SubnAdmSet) and leaves (SubnAdmDelete) change the SM's multicast
//! groups, so [`crate::sm::SubnetManager::handle_sa`] answers them itself; queries are answered
//! here from the groups in the view (see [`crate::sm::mcast`]).
//!
//! A NodeRecord is given per end port (a switch's port 0, each CA port), as opensm does; a
//! PortInfoRecord per end port, and per switch external port only when PortNum is in the
//! mask. A PathRecord is computed by walking the LFTs the SM programmed: MTU and rate are the
//! smallest along the path, SL 0, P_Key 0xffff, reversible, PacketLifeTime 18 (opensm's
//! default; 0 for a port's path to itself), all with selector "exactly" as opensm answers
//! (golden `B-stock/postsm-saquery-PR.txt`).
//!
//! Errors: a BaseVersion other than 1 or ClassVersion other than 2 gets "bad version"; a
//! method other than Get and GetTable "method not supported"; another attribute (or GetTable
//! of ClassPortInfo) "method/attribute not supported"; a Get matching nothing ERR_NO_RECORDS,
//! more than one ERR_TOO_MANY_RECORDS (a PathRecord Get gets the first path); a GID outside the
//! subnet prefix ERR_REQ_INVALID_GID. A MAD shorter than 256 bytes, a response, or another
//! class gets no answer at all.
//!
//! A GetTableResp that does not fit in one MAD is cut into RMPP DATA segments (IBA §13.6):
//! each repeats the headers; the first carries the whole PayloadLength (every segment's SA
//! header and the records), the last the length of its own part, as the Linux RMPP receiver
//! reads them.

use std::collections::BTreeMap;

use softib_wire::mad::attr::{NodeInfo, PortInfo, SmInfo};
use softib_wire::mad::class_port_info;
use softib_wire::mad::sa::{
    self, node_comp, path_comp, port_info_comp, McMemberRecord, NodeRecord, PathRecord,
    PortInfoRecord, RmppHeader, Selector,
};
use softib_wire::mad::{status, AttrId, Method, MgmtClass, BASE_VERSION, MAD_LEN};
use softib_wire::{Gid, Guid, Lid, Mtu, PKey, QKey, Qpn};

use crate::sm::mcast::McGroups;
use crate::subnet::{rate_of, PortRef, Subnet};
use crate::topology::LinkSpeed;

/// SMInfoRecord (AttributeID 0x0018, IBA §15.2.5.4): LID(16) Reserved(16) SMInfo(21 bytes).
pub const SM_INFO_RECORD_LEN: usize = 25;

/// What the SA answers from: the master SM's view of the subnet.
#[derive(Debug, Clone, Copy)]
pub struct SaView<'a> {
    /// The subnet as the last sweep found and configured it.
    pub subnet: &'a Subnet,
    /// The LFT of each switch by node GUID (index = LID).
    pub lfts: &'a BTreeMap<Guid, Vec<u8>>,
    /// The SM's SMInfo.
    pub sm_info: SmInfo,
    /// The SM's LID.
    pub sm_lid: Lid,
    /// The subnet prefix.
    pub subnet_prefix: u64,
    /// The multicast groups.
    pub groups: &'a McGroups,
}

/// Answers an SA request MAD (see the module docs). `slid` is the requester's LID.
pub fn handle(view: &SaView<'_>, slid: Lid, request: &[u8]) -> Option<Vec<u8>> {
    let _ = slid; // Every requester sees the same subnet (no partitions yet).
    let packet = sa::Packet::new_checked(request).ok()?;
    let req = sa::Repr::parse(&packet).ok()?;
    if req.header.mgmt_class != MgmtClass::SubnAdm || req.header.method.is_response() {
        return None;
    }
    let answer = answer(view, &req);
    Some(emit(&req, answer))
}

/// A response before it is emitted: status, record length, records (each `record_len` long).
struct Answer {
    status: u16,
    record_len: usize,
    records: Vec<Vec<u8>>,
}

impl Answer {
    fn error(status: u16) -> Answer {
        Answer {
            status,
            record_len: 0,
            records: Vec::new(),
        }
    }
}

fn answer(view: &SaView<'_>, req: &sa::Repr<'_>) -> Answer {
    let h = &req.header;
    if h.base_version != BASE_VERSION || h.class_version != sa::CLASS_VERSION {
        return Answer::error(status::BAD_VERSION);
    }
    let table = match h.method {
        Method::Get => false,
        Method::GetTable => true,
        _ => return Answer::error(status::UNSUPPORTED_METHOD),
    };
    let (record_len, records) = match h.attr_id {
        AttrId::CLASS_PORT_INFO if !table => (class_port_info::Repr::LEN, vec![class_port_info()]),
        AttrId::NODE_RECORD => match NodeRecord::parse(req.data) {
            Ok(t) => (NodeRecord::LEN, node_records(view, &t, req.comp_mask)),
            Err(_) => return Answer::error(sa::STATUS_REQ_INVALID),
        },
        AttrId::PORT_INFO_RECORD => match PortInfoRecord::parse(req.data) {
            Ok(t) => (
                PortInfoRecord::LEN,
                port_info_records(view, &t, req.comp_mask),
            ),
            Err(_) => return Answer::error(sa::STATUS_REQ_INVALID),
        },
        AttrId::PATH_RECORD => match PathRecord::parse(req.data) {
            Ok(t) => match path_records(view, &t, req.comp_mask) {
                Ok(mut v) => {
                    if !table {
                        v.truncate(1);
                    }
                    (PathRecord::LEN, v)
                }
                Err(s) => return Answer::error(s),
            },
            Err(_) => return Answer::error(sa::STATUS_REQ_INVALID),
        },
        AttrId::MC_MEMBER_RECORD => match McMemberRecord::parse(req.data) {
            Ok(t) => {
                let trusted = req.sm_key != 0 && req.sm_key == view.sm_info.sm_key;
                let recs = view
                    .groups
                    .query(&t, req.comp_mask, trusted)
                    .into_iter()
                    .map(|r| {
                        let mut b = vec![0u8; McMemberRecord::LEN];
                        r.emit(&mut b);
                        b
                    })
                    .collect();
                (McMemberRecord::LEN, recs)
            }
            Err(_) => return Answer::error(sa::STATUS_REQ_INVALID),
        },
        AttrId::SM_INFO_RECORD => {
            let mut r = vec![0u8; SM_INFO_RECORD_LEN];
            r[..2].copy_from_slice(&view.sm_lid.0.to_be_bytes());
            view.sm_info.emit(&mut r[4..]);
            (SM_INFO_RECORD_LEN, vec![r])
        }
        _ => return Answer::error(status::UNSUPPORTED_METHOD_ATTR),
    };
    let status = match (table, records.len()) {
        (true, _) | (false, 1) => status::SUCCESS,
        (false, 0) => sa::STATUS_NO_RECORDS,
        (false, _) => sa::STATUS_TOO_MANY_RECORDS,
    };
    if status != status::SUCCESS {
        return Answer::error(status);
    }
    Answer {
        status,
        record_len,
        records,
    }
}

/// The response MAD of `req` carrying `status` and, on success, `record` (for the SA
/// requests the SM answers itself: MCMemberRecord Set and Delete).
pub(crate) fn respond(
    req: &sa::Repr<'_>,
    status: u16,
    record_len: usize,
    record: Option<Vec<u8>>,
) -> Vec<u8> {
    let answer = match record {
        Some(r) if status == status::SUCCESS => Answer {
            status,
            record_len,
            records: vec![r],
        },
        _ => Answer::error(status),
    };
    emit(req, answer)
}

/// The response MAD(s) of `req`.
fn emit(req: &sa::Repr<'_>, answer: Answer) -> Vec<u8> {
    let stride = usize::from(sa::attr_offset_for(answer.record_len)) * 8;
    let mut payload = Vec::with_capacity(stride * answer.records.len());
    for r in &answer.records {
        let start = payload.len();
        payload.extend_from_slice(r);
        payload.resize(start + stride, 0);
    }
    let mut resp = req.response(answer.status, answer.record_len, answer.records.len(), &[]);
    if resp.header.method != Method::GetTableResp || payload.len() <= sa::DATA_LEN {
        resp.data = &payload;
        return one_mad(&resp);
    }
    // RMPP: the payload cut into segments of the SA data area.
    let chunks: Vec<&[u8]> = payload.chunks(sa::DATA_LEN).collect();
    let n = chunks.len();
    let mut out = Vec::with_capacity(n * MAD_LEN);
    let count = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    for (i, chunk) in chunks.iter().enumerate() {
        // PayloadLength: the whole transfer in the first segment, its own share in the last.
        let len = if i == 0 {
            n * 20 + payload.len()
        } else if i + 1 == n {
            20 + chunk.len()
        } else {
            0
        };
        resp.rmpp = RmppHeader::data_segment(count(i + 1), count(n), count(len));
        resp.data = chunk;
        out.extend_from_slice(&one_mad(&resp));
    }
    out
}

fn one_mad(resp: &sa::Repr<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; MAD_LEN];
    resp.emit(&mut sa::Packet::new_unchecked(&mut buf[..]));
    buf
}

/// The SA's ClassPortInfo: what opensm shows (golden `A-stock/postsm-saquery-CPI.txt`)
/// without the optional records it supports and softib does not.
fn class_port_info() -> Vec<u8> {
    let cpi = class_port_info::Repr {
        base_version: BASE_VERSION,
        class_version: sa::CLASS_VERSION,
        capability_mask: 0,
        capability_mask2: 0,
        resp_time_value: 0x10,
        redirect_gid: Gid([0; 16]),
        redirect_tc: 0,
        redirect_sl: 0,
        redirect_fl: 0,
        redirect_lid: Lid(0),
        redirect_pkey: PKey(0),
        redirect_qp: Qpn::GSI,
        redirect_qkey: QKey::GSI,
        trap_gid: Gid([0; 16]),
        trap_tc: 0,
        trap_sl: 0,
        trap_fl: 0,
        trap_lid: Lid(0),
        trap_pkey: PKey(0),
        trap_hl: 0,
        trap_qp: Qpn::new(0),
        trap_qkey: QKey::GSI,
    };
    let mut b = vec![0u8; class_port_info::Repr::LEN];
    cpi.emit(&mut b);
    b
}

/// Every end port: a switch's port 0, each CA port that was read.
fn end_ports(subnet: &Subnet) -> impl Iterator<Item = PortRef> + '_ {
    subnet.nodes.iter().enumerate().flat_map(|(i, n)| {
        let ports: Vec<u8> = if n.is_switch() {
            vec![0]
        } else {
            (1..=n.info.num_ports)
                .filter(|&p| n.port(p).is_some())
                .collect()
        };
        ports.into_iter().map(move |port| PortRef { node: i, port })
    })
}

/// NodeInfo as seen through `at` (PortGUID and LocalPortNum of that port for a CA).
fn node_info_at(subnet: &Subnet, at: PortRef) -> Option<NodeInfo> {
    let n = subnet.nodes.get(at.node)?;
    let mut info = n.info;
    if !n.is_switch() {
        info.port_guid = n.port_guid(at.port)?;
        info.local_port_num = at.port;
    }
    Some(info)
}

fn node_records(view: &SaView<'_>, t: &NodeRecord, mask: u64) -> Vec<Vec<u8>> {
    let m = |bit: u64| mask & bit != 0;
    let ti = &t.node_info;
    let mut out = Vec::new();
    for at in end_ports(view.subnet) {
        let Some(info) = node_info_at(view.subnet, at) else {
            continue;
        };
        let n = &view.subnet.nodes[at.node];
        let rec = NodeRecord {
            lid: n.lid(at.port),
            node_info: info,
            node_description: softib_wire::mad::attr::NodeDescription::new(&n.description),
        };
        let ok = (!m(node_comp::LID) || rec.lid == t.lid)
            && (!m(node_comp::BASE_VERSION) || info.base_version == ti.base_version)
            && (!m(node_comp::CLASS_VERSION) || info.class_version == ti.class_version)
            && (!m(node_comp::NODE_TYPE) || info.node_type == ti.node_type)
            && (!m(node_comp::NUM_PORTS) || info.num_ports == ti.num_ports)
            && (!m(node_comp::SYSTEM_IMAGE_GUID) || info.system_image_guid == ti.system_image_guid)
            && (!m(node_comp::NODE_GUID) || info.node_guid == ti.node_guid)
            && (!m(node_comp::PORT_GUID) || info.port_guid == ti.port_guid)
            && (!m(node_comp::PARTITION_CAP) || info.partition_cap == ti.partition_cap)
            && (!m(node_comp::DEVICE_ID) || info.device_id == ti.device_id)
            && (!m(node_comp::REVISION) || info.revision == ti.revision)
            && (!m(node_comp::LOCAL_PORT_NUM) || info.local_port_num == ti.local_port_num)
            && (!m(node_comp::VENDOR_ID) || info.vendor_id == ti.vendor_id)
            && (!m(node_comp::NODE_DESCRIPTION)
                || rec.node_description.as_bytes() == t.node_description.as_bytes());
        if ok {
            let mut b = vec![0u8; NodeRecord::LEN];
            rec.emit(&mut b);
            out.push(b);
        }
    }
    out
}

fn port_info_records(view: &SaView<'_>, t: &PortInfoRecord, mask: u64) -> Vec<Vec<u8>> {
    let m = |bit: u64| mask & bit != 0;
    let tp = &t.port_info;
    let mut out = Vec::new();
    for (i, n) in view.subnet.nodes.iter().enumerate() {
        let ports: Vec<u8> = if n.is_switch() && m(port_info_comp::PORT_NUM) {
            (0..=n.info.num_ports).collect()
        } else {
            end_ports(view.subnet)
                .filter(|p| p.node == i)
                .map(|p| p.port)
                .collect()
        };
        for port in ports {
            let Some(pi) = n.port(port) else { continue };
            let rec = PortInfoRecord {
                endport_lid: n.lid(port),
                port_num: port,
                options: 0,
                port_info: *pi,
            };
            let ok = (!m(port_info_comp::ENDPORT_LID) || rec.endport_lid == t.endport_lid)
                && (!m(port_info_comp::PORT_NUM) || port == t.port_num)
                && (!m(port_info_comp::LID) || pi.lid == tp.lid)
                && (!m(port_info_comp::MASTER_SM_LID) || pi.master_sm_lid == tp.master_sm_lid)
                && (!m(port_info_comp::CAPABILITY_MASK)
                    || pi.capability_mask & tp.capability_mask == tp.capability_mask)
                && (!m(port_info_comp::PORT_STATE) || pi.port_state == tp.port_state);
            if ok {
                let mut b = vec![0u8; PortInfoRecord::LEN];
                rec.emit(&mut b);
                out.push(b);
            }
        }
    }
    out
}

/// A path's properties: the smallest MTU and rate along it, and whether it is a port's path
/// to itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PathProps {
    mtu: Mtu,
    /// Data rate in tenths of Gb/s (see [`rate_tenths`]).
    rate: u32,
    local: bool,
}

/// A port's data rate in tenths of Gb/s (4xQDR = 400).
pub(crate) fn rate_tenths(pi: &PortInfo) -> u32 {
    let Some(r) = rate_of(pi) else { return 25 };
    let lane = match r.speed {
        LinkSpeed::Sdr => 25,
        LinkSpeed::Ddr => 50,
        LinkSpeed::Qdr | LinkSpeed::Fdr10 => 100,
        LinkSpeed::Fdr => 140,
        LinkSpeed::Edr => 250,
        LinkSpeed::Hdr => 500,
    };
    lane * u32::from(r.width.lanes())
}

/// The PathRecord Rate codes (IBA §15.2.5.16 / opensm `IB_PATH_RECORD_RATE_*`) with their
/// rates in tenths of Gb/s.
const RATES: [(u8, u32); 21] = [
    (2, 25),
    (5, 50),
    (3, 100),
    (11, 140),
    (6, 200),
    (15, 250),
    (19, 280),
    (4, 300),
    (7, 400),
    (20, 500),
    (12, 560),
    (8, 600),
    (9, 800),
    (16, 1000),
    (13, 1120),
    (10, 1200),
    (14, 1680),
    (17, 2000),
    (18, 3000),
    (21, 4000),
    (22, 6000),
];

/// The largest rate code not above `tenths`.
pub(crate) fn rate_code(tenths: u32) -> u8 {
    RATES
        .iter()
        .filter(|&&(_, r)| r <= tenths)
        .max_by_key(|&&(_, r)| r)
        .map_or(2, |&(c, _)| c)
}

/// The rate of rate code `code`, in tenths of Gb/s.
pub(crate) fn rate_of_code(code: u8) -> Option<u32> {
    RATES.iter().find(|&&(c, _)| c == code).map(|&(_, r)| r)
}

/// The rate code of the fastest rate strictly below `tenths` (opensm `ib_path_rate_get_prev`).
pub(crate) fn rate_below(tenths: u32) -> Option<u8> {
    RATES
        .iter()
        .filter(|&&(_, r)| r < tenths)
        .max_by_key(|&&(_, r)| r)
        .map(|&(c, _)| c)
}

fn mtu_min(a: Mtu, b: Mtu) -> Mtu {
    if u8::from(a) <= u8::from(b) {
        a
    } else {
        b
    }
}

/// Walks the LFTs from `src` to the port owning `dlid`.
fn walk(view: &SaView<'_>, src: PortRef, dst: PortRef, dlid: Lid) -> Option<PathProps> {
    let s = view.subnet;
    let spi = s.nodes.get(src.node)?.port(src.port)?;
    if src == dst {
        return Some(PathProps {
            mtu: spi.mtu_cap,
            rate: rate_tenths(spi),
            local: true,
        });
    }
    let mut mtu = Mtu::Mtu4096;
    let mut rate = u32::MAX;
    let cross = |a: PortRef, b: PortRef, mtu: &mut Mtu, rate: &mut u32| -> Option<()> {
        let pa = s.nodes.get(a.node)?.port(a.port)?;
        let pb = s.nodes.get(b.node)?.port(b.port);
        *mtu = mtu_min(*mtu, pa.mtu_cap);
        if let Some(pb) = pb {
            *mtu = mtu_min(*mtu, pb.mtu_cap);
        }
        *rate = (*rate).min(rate_tenths(pa));
        Some(())
    };
    // Where the packet is: a node, having arrived by a port (or starting at a switch).
    let mut here = if s.nodes[src.node].is_switch() {
        src.node
    } else {
        let peer = s.peer(src)?;
        cross(src, peer, &mut mtu, &mut rate)?;
        if peer == dst {
            return Some(PathProps {
                mtu,
                rate,
                local: false,
            });
        }
        peer.node
    };
    for _ in 0..64 {
        let n = s.nodes.get(here)?;
        if !n.is_switch() {
            return None;
        }
        let lft = view.lfts.get(&n.info.node_guid)?;
        let out = *lft.get(usize::from(dlid.0))?;
        if out == 0 {
            return (dst
                == PortRef {
                    node: here,
                    port: 0,
                })
            .then_some(PathProps {
                mtu,
                rate,
                local: false,
            });
        }
        let egress = PortRef {
            node: here,
            port: out,
        };
        let peer = s.peer(egress)?;
        cross(egress, peer, &mut mtu, &mut rate)?;
        if peer == dst {
            return Some(PathProps {
                mtu,
                rate,
                local: false,
            });
        }
        here = peer.node;
    }
    None
}

/// The end port with GID `gid`, or an error status if the prefix is not the subnet's.
fn port_by_gid(view: &SaView<'_>, gid: Gid) -> Result<Option<PortRef>, u16> {
    if gid.prefix() != view.subnet_prefix {
        return Err(sa::STATUS_INVALID_GID);
    }
    let guid = Guid(gid.interface_id());
    Ok(end_ports(view.subnet).find(|p| view.subnet.nodes[p.node].port_guid(p.port) == Some(guid)))
}

fn path_records(view: &SaView<'_>, t: &PathRecord, mask: u64) -> Result<Vec<Vec<u8>>, u16> {
    let m = |bit: u64| mask & bit != 0;
    let s = view.subnet;
    let all: Vec<PortRef> = end_ports(s)
        .filter(|p| s.nodes[p.node].lid(p.port) != Lid(0))
        .collect();
    let pick = |gid_bit: u64, gid: Gid, lid_bit: u64, lid: Lid| -> Result<Vec<PortRef>, u16> {
        let mut v = all.clone();
        if m(gid_bit) {
            let p = port_by_gid(view, gid)?;
            v.retain(|x| Some(*x) == p);
        }
        if m(lid_bit) {
            v.retain(|x| s.nodes[x.node].lid(x.port) == lid);
        }
        Ok(v)
    };
    let srcs = pick(path_comp::SGID, t.sgid, path_comp::SLID, t.slid)?;
    let dsts = pick(path_comp::DGID, t.dgid, path_comp::DLID, t.dlid)?;
    if m(path_comp::P_KEY) && t.pkey.base() != PKey::DEFAULT.base() {
        return Ok(Vec::new());
    }
    if m(path_comp::SL) && t.sl != 0 {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for &src in &srcs {
        for &dst in &dsts {
            let dlid = s.nodes[dst.node].lid(dst.port);
            let Some(props) = walk(view, src, dst, dlid) else {
                continue;
            };
            let Some(mtu) = select_mtu(props.mtu, t, mask) else {
                continue;
            };
            let Some(rate) = select_rate(props.rate, t, mask) else {
                continue;
            };
            let life = if props.local {
                0
            } else {
                crate::sm::PACKET_LIFE_TIME
            };
            if m(path_comp::PACKET_LIFE_TIME)
                && !selects(
                    m(path_comp::PACKET_LIFE_TIME_SELECTOR),
                    t.packet_life_time_selector,
                    u32::from(life),
                    u32::from(t.packet_life_time),
                )
            {
                continue;
            }
            let (Some(sg), Some(dg)) = (
                s.nodes[src.node].port_guid(src.port),
                s.nodes[dst.node].port_guid(dst.port),
            ) else {
                continue;
            };
            let rec = PathRecord {
                service_id: if m(path_comp::SERVICE_ID) {
                    t.service_id
                } else {
                    0
                },
                dgid: Gid::from_prefix_guid(view.subnet_prefix, dg),
                sgid: Gid::from_prefix_guid(view.subnet_prefix, sg),
                dlid,
                slid: s.nodes[src.node].lid(src.port),
                raw_traffic: false,
                flow_label: 0,
                hop_limit: 0,
                tclass: 0,
                reversible: true,
                numb_path: 0,
                pkey: PKey::DEFAULT,
                qos_class: 0,
                sl: 0,
                mtu_selector: Selector::Exactly,
                mtu,
                rate_selector: Selector::Exactly,
                rate,
                packet_life_time_selector: Selector::Exactly,
                packet_life_time: life,
                preference: 0,
            };
            let mut b = vec![0u8; PathRecord::LEN];
            rec.emit(&mut b);
            out.push(b);
        }
    }
    Ok(out)
}

/// Whether `have` satisfies the selector against `want` (a missing selector means exactly).
fn selects(with_selector: bool, sel: Selector, have: u32, want: u32) -> bool {
    match if with_selector {
        sel
    } else {
        Selector::Exactly
    } {
        Selector::GreaterThan => have > want,
        Selector::LessThan => have < want,
        Selector::Exactly => have == want,
        _ => true,
    }
}

fn select_mtu(path: Mtu, t: &PathRecord, mask: u64) -> Option<Mtu> {
    if mask & path_comp::MTU == 0 {
        return Some(path);
    }
    let with_sel = mask & path_comp::MTU_SELECTOR != 0;
    let (have, want) = (u32::from(u8::from(path)), u32::from(u8::from(t.mtu)));
    match if with_sel {
        t.mtu_selector
    } else {
        Selector::Exactly
    } {
        // The path can carry anything up to its MTU: answer the value asked for.
        Selector::Exactly => (want <= have && want >= 1).then_some(t.mtu),
        Selector::LessThan if want > 1 => Some(mtu_min(path, Mtu::from(u8::from(t.mtu) - 1))),
        Selector::LessThan => None,
        sel => selects(true, sel, have, want).then_some(path),
    }
}

fn select_rate(path: u32, t: &PathRecord, mask: u64) -> Option<u8> {
    let code = rate_code(path);
    if mask & path_comp::RATE == 0 {
        return Some(code);
    }
    let with_sel = mask & path_comp::RATE_SELECTOR != 0;
    let want = rate_of_code(t.rate)?;
    match if with_sel {
        t.rate_selector
    } else {
        Selector::Exactly
    } {
        Selector::Exactly => (want <= path).then_some(t.rate),
        Selector::LessThan => {
            let below = RATES
                .iter()
                .filter(|&&(_, r)| r < want && r <= path)
                .max_by_key(|&&(_, r)| r)?;
            Some(below.0)
        }
        sel => selects(true, sel, path, want).then_some(code),
    }
}
