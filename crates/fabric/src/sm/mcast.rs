//! Multicast groups (IBA vol 1 §15.4.2.3, §18.2.4.2): what the SA keeps of MCMemberRecord
//! joins and leaves, and the multicast forwarding tables the SM derives from them.
//!
//! # Groups ([`McGroups`])
//!
//! A group is named by its MGID and owns one MLID, handed out from 0xC000 upward (the lowest
//! free one, as opensm's `get_new_mlid`). Its parameters — Q_Key, P_Key, MTU, rate,
//! PacketLifeTime, SL, FlowLabel, TClass, HopLimit, scope — are fixed when it is created.
//! As opensm does at start, the IPoIB IPv4 broadcast group of the default partition is
//! pre-created ([`McGroups::with_ipoib_broadcast`]): MGID `ff12:401b:ffff::ffff:ffff`, Q_Key
//! 0x0B1B, MTU 2048 (code 4), rate 10 Gb/s (code 3), PacketLifeTime 18, SL 0, scope link-local,
//! MLID 0xC000 — opensm's defaults for the default partition (`partitions.conf`: `mtu=4`,
//! `rate=3`; golden `A-stock/postsm-saquery-MCMR.txt`). It is never deleted.
//!
//! **Join** (SubnAdmSet, [`McGroups::join`]), opensm's `mcmr_rcv_join_mgrp`:
//! * the group does not exist: JoinState must have FullMember (else ERR_REQ_INVALID), the
//!   ComponentMask must carry MGID, PortGID, JoinState, Q_Key, P_Key, SL, FlowLabel and TClass
//!   (else ERR_REQ_INSUFFICIENT_COMPONENTS, o15-0.2.3), the P_Key must be valid, and the MTU and
//!   rate asked for (with their selectors) must be realizable on the joining port
//!   (`mgrp_request_is_realizable`: absent or "largest" gives the port's own); then the group
//!   is created with the next MLID (none left: ERR_NO_RESOURCES);
//! * the group exists: every component in the mask must match the group (Q_Key, P_Key base,
//!   TClass, SL, FlowLabel, HopLimit exactly; MTU, rate and PacketLifeTime by their selectors),
//!   the port must be able to carry the group's MTU and rate, and JoinState must not be 0;
//!   else ERR_REQ_INVALID;
//! * the port's JoinState becomes the OR of what it had and what it asks; the answer is the
//!   group's record with the request's PortGID and JoinState.
//!
//! **Leave** (SubnAdmDelete, [`McGroups::leave`]): the JoinState bits asked (all of them when
//! JoinState is not in the mask) are cleared; a port with none left is no longer a member. A
//! group not present, or a port that holds none of the bits, is ERR_REQ_INVALID. A group
//! whose last full member (FullMember or SendOnlyFullMember) has left is deleted and its MLID
//! freed, unless it was pre-created.
//!
//! **Query** (SubnAdmGet/GetTable, [`McGroups::query`], `mcmr_by_comp_mask`): per group that
//! matches MGID, MLID and the other components, the group's record (PortGID 0, JoinState 0);
//! with PortGID in the mask, that member's record; a trusted requester (a nonzero SM_Key equal
//! to the SM's) without PortGID gets every member's record.
//!
//! A port that disappears from the subnet keeps its memberships (the SM does not ask ports to
//! re-register with ClientReregister, so dropping them would strand the port's IPoIB); the
//! tables below simply leave it out until it is back.
//!
//! # Forwarding tables ([`compute_mfts`])
//!
//! One spanning tree of the switches, breadth-first from the lowest-numbered switch (a forest
//! when the switches are not all connected; of parallel cables only the lowest port is used),
//! so replication can never loop. For each group, the switches of the smallest subtree that
//! joins the switches its members hang off: each gets, in the group's MLID entry, the tree
//! ports towards members plus the ports of the member CAs (and port 0 when the switch itself
//! is a member). A packet a member sends thus reaches every other member exactly once; a
//! switch off that subtree has no entry and drops the MLID.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use softib_wire::mad::attr::MulticastForwardingTable;
use softib_wire::mad::sa::{self, join_state, mcmember_comp as comp, McMemberRecord, Selector};
use softib_wire::{Gid, Guid, Lid, Mtu, PKey, QKey};

use crate::subnet::{PortRef, Subnet};
use crate::switch::PortMask;

/// The Q_Key of the IPoIB broadcast group (RFC 4391 §4; opensm's default).
pub const IPOIB_Q_KEY: QKey = QKey(0x0000_0B1B);

/// The first multicast LID.
pub const MLID_FIRST: Lid = Lid(MulticastForwardingTable::MLID_BASE);

/// MLIDs the SA hands out (0xC000..0xC000 + this): ibsim's and the soft switch's
/// MulticastFDBCap.
pub const DEFAULT_MLID_COUNT: u16 = 1024;

/// opensm's PacketLifeTime of multicast groups (its `packet_life_time` default, 0x12).
const PACKET_LIFE_TIME: u8 = super::PACKET_LIFE_TIME;

/// One member port of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct McMember {
    /// The port's GID as it joined.
    pub port_gid: Gid,
    /// JoinState bits (see [`join_state`]).
    pub join_state: u8,
    /// Whether another port joined on its behalf.
    pub proxy_join: bool,
}

/// A multicast group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McGroup {
    /// The group's parameters as an MCMemberRecord (PortGID 0, JoinState 0, ProxyJoin clear).
    pub record: McMemberRecord,
    /// Members by port GUID.
    pub members: BTreeMap<Guid, McMember>,
    /// Pre-created by the SM: kept when its last member leaves.
    pub well_known: bool,
}

impl McGroup {
    /// The group's MLID.
    pub fn mlid(&self) -> Lid {
        self.record.mlid
    }

    fn has_full_member(&self) -> bool {
        self.members.values().any(|m| {
            m.join_state & (join_state::FULL_MEMBER | join_state::SEND_ONLY_FULL_MEMBER) != 0
        })
    }
}

/// What the SA knows of the port a join is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortCaps {
    /// The port GUID.
    pub guid: Guid,
    /// PortInfo.MTUCap.
    pub mtu: Mtu,
    /// The port's rate as a PathRecord/MCMemberRecord rate code (3 = 10 Gb/s, 7 = 40 Gb/s).
    pub rate: u8,
}

/// The outcome of a join or leave that the SA accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// The record to answer with.
    pub record: McMemberRecord,
    /// Whether the set of member ports (hence the forwarding tables) changed.
    pub ports_changed: bool,
}

/// The multicast groups of the subnet, by MGID (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McGroups {
    groups: BTreeMap<Gid, McGroup>,
    mlid_count: u16,
}

impl Default for McGroups {
    fn default() -> Self {
        McGroups::new(DEFAULT_MLID_COUNT)
    }
}

impl McGroups {
    /// No groups; MLIDs 0xC000..0xC000 + `mlid_count` to hand out (at most 0x3FFF).
    pub fn new(mlid_count: u16) -> McGroups {
        McGroups {
            groups: BTreeMap::new(),
            mlid_count: mlid_count.min(0x3FFF),
        }
    }

    /// The groups opensm starts with: the IPoIB IPv4 broadcast group of the default partition
    /// (see the module docs), at MLID 0xC000.
    pub fn with_ipoib_broadcast() -> McGroups {
        let mut g = McGroups::default();
        let mgid = sa::ipoib_broadcast_mgid(PKey::DEFAULT);
        let record = McMemberRecord {
            mgid,
            port_gid: Gid::default(),
            q_key: IPOIB_Q_KEY,
            mlid: MLID_FIRST,
            mtu_selector: Selector::Exactly,
            mtu: Mtu::Mtu2048,
            tclass: 0,
            pkey: PKey::DEFAULT,
            rate_selector: Selector::Exactly,
            rate: 3,
            packet_life_time_selector: Selector::Exactly,
            packet_life_time: PACKET_LIFE_TIME,
            sl: 0,
            flow_label: 0,
            hop_limit: 0,
            scope: mgid.0[1] & 0x0F,
            join_state: 0,
            proxy_join: false,
        };
        g.groups.insert(
            mgid,
            McGroup {
                record,
                members: BTreeMap::new(),
                well_known: true,
            },
        );
        g
    }

    /// Every group, by MGID.
    pub fn iter(&self) -> impl Iterator<Item = &McGroup> {
        self.groups.values()
    }

    /// The group of `mgid`.
    pub fn get(&self, mgid: &Gid) -> Option<&McGroup> {
        self.groups.get(mgid)
    }

    /// The group holding MLID `mlid`.
    pub fn by_mlid(&self, mlid: Lid) -> Option<&McGroup> {
        self.groups.values().find(|g| g.record.mlid == mlid)
    }

    /// The number of groups.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether there are no groups.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    fn free_mlid(&self) -> Option<Lid> {
        let used: BTreeSet<u16> = self.groups.values().map(|g| g.record.mlid.0).collect();
        (0..self.mlid_count)
            .map(|i| MLID_FIRST.0 + i)
            .find(|m| !used.contains(m))
            .map(Lid)
    }

    /// A join of `port` (SubnAdmSet of `req` with ComponentMask `mask`); `proxy` when the
    /// requester is another port. Errors are SA status codes.
    pub fn join(
        &mut self,
        req: &McMemberRecord,
        mask: u64,
        port: PortCaps,
        proxy: bool,
    ) -> Result<Change, u16> {
        if mask & comp::JOIN != comp::JOIN {
            return Err(sa::STATUS_INSUFFICIENT_COMPONENTS);
        }
        if mask & comp::P_KEY != 0 && req.pkey.base() == 0 {
            return Err(sa::STATUS_REQ_INVALID);
        }
        let want = req.join_state & 0x0F;
        if want == 0 {
            return Err(sa::STATUS_REQ_INVALID);
        }
        let created = !self.groups.contains_key(&req.mgid);
        if created {
            let record = self.create_record(req, mask, port)?;
            self.groups.insert(
                req.mgid,
                McGroup {
                    record,
                    members: BTreeMap::new(),
                    well_known: false,
                },
            );
        }
        let Some(group) = self.groups.get_mut(&req.mgid) else {
            return Err(sa::STATUS_REQ_INVALID);
        };
        let ok = created
            || (other_fields_match(&group.record, req, mask)
                && selected_fields_match(&group.record, req, mask));
        if !ok || !port_can_carry(&group.record, port) {
            if created {
                self.groups.remove(&req.mgid);
            }
            return Err(sa::STATUS_REQ_INVALID);
        }
        let was = group.members.get(&port.guid).copied();
        let member = McMember {
            port_gid: req.port_gid,
            join_state: was.map_or(0, |m| m.join_state) | want,
            proxy_join: was.map_or(proxy, |m| m.proxy_join && proxy),
        };
        group.members.insert(port.guid, member);
        let mut record = group.record;
        record.port_gid = req.port_gid;
        record.join_state = want;
        record.proxy_join = member.proxy_join;
        if mask & comp::SCOPE != 0 {
            record.scope = req.scope;
        }
        Ok(Change {
            record,
            ports_changed: was.is_none(),
        })
    }

    /// The parameters of a group `req` creates (opensm `mcmr_rcv_create_new_mgrp`).
    fn create_record(
        &self,
        req: &McMemberRecord,
        mask: u64,
        port: PortCaps,
    ) -> Result<McMemberRecord, u16> {
        if req.join_state & join_state::FULL_MEMBER == 0 {
            return Err(sa::STATUS_REQ_INVALID);
        }
        if mask & comp::CREATE != comp::CREATE {
            return Err(sa::STATUS_INSUFFICIENT_COMPONENTS);
        }
        // An MGID of 0 asks the SA to make one up; softib does not.
        if req.mgid == Gid::default() || req.mgid.0[0] != 0xFF {
            return Err(sa::STATUS_REQ_INVALID);
        }
        let mtu = realize_mtu(req, mask, port.mtu).ok_or(sa::STATUS_REQ_INVALID)?;
        let rate = realize_rate(req, mask, port.rate).ok_or(sa::STATUS_REQ_INVALID)?;
        let packet_life_time = if mask & comp::PACKET_LIFE_TIME != 0 {
            req.packet_life_time
        } else {
            PACKET_LIFE_TIME
        };
        let mlid = self.free_mlid().ok_or(sa::STATUS_NO_RESOURCES)?;
        Ok(McMemberRecord {
            mgid: req.mgid,
            port_gid: Gid::default(),
            q_key: req.q_key,
            mlid,
            mtu_selector: Selector::Exactly,
            mtu,
            tclass: req.tclass,
            pkey: req.pkey,
            rate_selector: Selector::Exactly,
            rate,
            packet_life_time_selector: Selector::Exactly,
            packet_life_time,
            sl: req.sl,
            flow_label: req.flow_label,
            hop_limit: if mask & comp::HOP_LIMIT != 0 {
                req.hop_limit
            } else {
                0
            },
            scope: if mask & comp::SCOPE != 0 {
                req.scope
            } else {
                req.mgid.0[1] & 0x0F
            },
            join_state: 0,
            proxy_join: false,
        })
    }

    /// A leave of port `guid` (SubnAdmDelete of `req` with ComponentMask `mask`).
    pub fn leave(&mut self, req: &McMemberRecord, mask: u64, guid: Guid) -> Result<Change, u16> {
        let Some(group) = self.groups.get_mut(&req.mgid) else {
            return Err(sa::STATUS_REQ_INVALID);
        };
        let Some(member) = group.members.get(&guid).copied() else {
            return Err(sa::STATUS_REQ_INVALID);
        };
        let bits = if mask & comp::JOIN_STATE != 0 {
            req.join_state & 0x0F
        } else {
            0x0F
        };
        if member.join_state & bits == 0 {
            return Err(sa::STATUS_REQ_INVALID);
        }
        let left = member.join_state & !bits;
        let mut record = group.record;
        record.port_gid = member.port_gid;
        record.join_state = left;
        record.proxy_join = member.proxy_join;
        let ports_changed = left == 0;
        if ports_changed {
            group.members.remove(&guid);
        } else if let Some(m) = group.members.get_mut(&guid) {
            m.join_state = left;
        }
        if !group.well_known && !group.has_full_member() {
            self.groups.remove(&req.mgid);
            return Ok(Change {
                record,
                ports_changed: true,
            });
        }
        Ok(Change {
            record,
            ports_changed,
        })
    }

    /// The records a SubnAdmGet/GetTable of `req` with ComponentMask `mask` matches;
    /// `trusted` when the requester gave the SM's (nonzero) SM_Key.
    pub fn query(&self, req: &McMemberRecord, mask: u64, trusted: bool) -> Vec<McMemberRecord> {
        let mut out = Vec::new();
        let mut state_mask = 0u8;
        if mask & comp::SCOPE != 0 {
            state_mask |= 0xF0;
        }
        if mask & comp::JOIN_STATE != 0 {
            state_mask |= 0x0F;
        }
        let asked = (req.scope << 4) | (req.join_state & 0x0F);
        for g in self.groups.values() {
            let r = &g.record;
            if (mask & comp::MGID != 0 && r.mgid != req.mgid)
                || (mask & comp::MLID != 0 && r.mlid != req.mlid)
                || !other_fields_match(r, req, mask)
                || (mask & comp::PROXY_JOIN != 0 && req.proxy_join)
                || !selected_fields_match(r, req, mask)
            {
                continue;
            }
            let mut push = |port_gid: Gid, js: u8, proxy: bool| {
                let state = (r.scope << 4) | js;
                if state & state_mask == asked & state_mask {
                    let mut rec = *r;
                    rec.port_gid = port_gid;
                    rec.join_state = js;
                    rec.proxy_join = proxy;
                    out.push(rec);
                }
            };
            if mask & comp::PORT_GID != 0 {
                let guid = Guid(req.port_gid.interface_id());
                if let Some(m) = g.members.get(&guid) {
                    push(m.port_gid, m.join_state, m.proxy_join);
                }
            } else if trusted {
                for m in g.members.values() {
                    push(m.port_gid, m.join_state, m.proxy_join);
                }
            } else {
                push(Gid::default(), 0, false);
            }
        }
        out
    }
}

/// Q_Key, P_Key, TClass, SL, FlowLabel and HopLimit, where the mask has them (opensm
/// `validate_other_comp_fields`).
fn other_fields_match(g: &McMemberRecord, r: &McMemberRecord, mask: u64) -> bool {
    let m = |bit: u64| mask & bit != 0;
    let pkey_ok = !m(comp::P_KEY)
        || ((r.pkey.is_full_member() || g.pkey.is_full_member()) && r.pkey.base() == g.pkey.base());
    (!m(comp::Q_KEY) || r.q_key == g.q_key)
        && pkey_ok
        && (!m(comp::TCLASS) || r.tclass == g.tclass)
        && (!m(comp::SL) || r.sl == g.sl)
        && (!m(comp::FLOW_LABEL) || r.flow_label == g.flow_label)
        && (!m(comp::HOP_LIMIT) || r.hop_limit == g.hop_limit)
}

/// Whether `have` satisfies `want` under `sel` (greater than, less than, exactly, largest).
fn selector_ok(sel: Selector, have: u32, want: u32) -> bool {
    match sel {
        Selector::GreaterThan => have > want,
        Selector::LessThan => have < want,
        Selector::Exactly => have == want,
        _ => true,
    }
}

/// MTU, rate and PacketLifeTime with their selectors (opensm `validate_more_comp_fields`); a
/// value without its selector means "exactly".
fn selected_fields_match(g: &McMemberRecord, r: &McMemberRecord, mask: u64) -> bool {
    let sel = |bit: u64, s: Selector| {
        if mask & bit != 0 {
            s
        } else {
            Selector::Exactly
        }
    };
    let mtu_ok = mask & comp::MTU == 0
        || selector_ok(
            sel(comp::MTU_SELECTOR, r.mtu_selector),
            u32::from(u8::from(g.mtu)),
            u32::from(u8::from(r.mtu)),
        );
    let rate_ok = mask & comp::RATE == 0
        || match (
            crate::sa::rate_of_code(g.rate),
            crate::sa::rate_of_code(r.rate),
        ) {
            (Some(have), Some(want)) => {
                selector_ok(sel(comp::RATE_SELECTOR, r.rate_selector), have, want)
            }
            _ => false,
        };
    let life_ok = mask & comp::PACKET_LIFE_TIME == 0
        || selector_ok(
            sel(comp::PACKET_LIFE_TIME_SELECTOR, r.packet_life_time_selector),
            u32::from(g.packet_life_time),
            u32::from(r.packet_life_time),
        );
    mtu_ok && rate_ok && life_ok
}

/// Whether a port can be a member: its MTU and rate reach the group's (opensm
/// `validate_port_caps`).
fn port_can_carry(g: &McMemberRecord, port: PortCaps) -> bool {
    let rate_ok = match (
        crate::sa::rate_of_code(g.rate),
        crate::sa::rate_of_code(port.rate),
    ) {
        (Some(group), Some(have)) => have >= group,
        _ => false,
    };
    u8::from(port.mtu) >= u8::from(g.mtu) && rate_ok
}

/// The MTU a new group gets (opensm `mgrp_request_is_realizable`).
fn realize_mtu(req: &McMemberRecord, mask: u64, port_mtu: Mtu) -> Option<Mtu> {
    let port = u8::from(port_mtu);
    let given = mask & comp::MTU != 0 && mask & comp::MTU_SELECTOR != 0;
    if !given || req.mtu_selector == Selector::Largest {
        return valid_mtu(port);
    }
    let asked = u8::from(req.mtu);
    let mtu = match req.mtu_selector {
        Selector::GreaterThan => {
            if asked >= port {
                return None;
            }
            port
        }
        Selector::LessThan => {
            if asked > port {
                port
            } else {
                asked.checked_sub(1)?
            }
        }
        _ => asked,
    };
    valid_mtu(mtu)
}

fn valid_mtu(code: u8) -> Option<Mtu> {
    (1..=5).contains(&code).then(|| Mtu::from(code))
}

/// The rate a new group gets (opensm `mgrp_request_is_realizable`).
fn realize_rate(req: &McMemberRecord, mask: u64, port_rate: u8) -> Option<u8> {
    use crate::sa::{rate_below, rate_of_code};
    let given = mask & comp::RATE != 0 && mask & comp::RATE_SELECTOR != 0;
    if !given || req.rate_selector == Selector::Largest {
        return rate_of_code(port_rate).map(|_| port_rate);
    }
    let port = rate_of_code(port_rate)?;
    let asked = rate_of_code(req.rate)?;
    let rate = match req.rate_selector {
        Selector::GreaterThan => {
            if asked >= port {
                return None;
            }
            port_rate
        }
        Selector::LessThan => {
            if asked > port {
                port_rate
            } else {
                rate_below(asked)?
            }
        }
        _ => req.rate,
    };
    Some(rate)
}

/// The spanning tree of the switches: per switch, its parent (switch, port on this switch
/// towards it) and its children (port on this switch, child switch); `order` lists switches
/// parents first.
struct Tree {
    parent: BTreeMap<usize, (usize, u8)>,
    children: BTreeMap<usize, Vec<(u8, usize)>>,
    order: Vec<usize>,
}

fn spanning_tree(subnet: &Subnet) -> Tree {
    let switches: Vec<usize> = (0..subnet.nodes.len())
        .filter(|&i| subnet.nodes[i].is_switch())
        .collect();
    let is_switch = |n: usize| subnet.nodes.get(n).is_some_and(|x| x.is_switch());
    let mut adj: BTreeMap<usize, Vec<(u8, usize)>> =
        switches.iter().map(|&s| (s, Vec::new())).collect();
    for l in &subnet.links {
        if is_switch(l.a.node) && is_switch(l.b.node) && l.a.node != l.b.node {
            if let Some(v) = adj.get_mut(&l.a.node) {
                v.push((l.a.port, l.b.node));
            }
            if let Some(v) = adj.get_mut(&l.b.node) {
                v.push((l.b.port, l.a.node));
            }
        }
    }
    for v in adj.values_mut() {
        v.sort_unstable();
    }
    let mut tree = Tree {
        parent: BTreeMap::new(),
        children: switches.iter().map(|&s| (s, Vec::new())).collect(),
        order: Vec::new(),
    };
    let mut seen = BTreeSet::new();
    for &root in &switches {
        if !seen.insert(root) {
            continue;
        }
        let mut queue = VecDeque::from([root]);
        while let Some(s) = queue.pop_front() {
            tree.order.push(s);
            for &(port, n) in adj.get(&s).map(Vec::as_slice).unwrap_or(&[]) {
                if seen.insert(n) {
                    // The port on `n` back towards `s`: the lowest cable between them.
                    let back = adj
                        .get(&n)
                        .and_then(|v| v.iter().find(|&&(_, m)| m == s))
                        .map_or(0, |&(p, _)| p);
                    tree.parent.insert(n, (s, back));
                    if let Some(c) = tree.children.get_mut(&s) {
                        c.push((port, n));
                    }
                    queue.push_back(n);
                }
            }
        }
    }
    tree
}

/// Where each present member of `group` attaches to the switches: (switch, port) — the switch
/// port cabled to a member CA port, or port 0 of a member switch.
fn attachments(subnet: &Subnet, group: &McGroup) -> BTreeSet<(usize, u8)> {
    let mut out = BTreeSet::new();
    for (i, n) in subnet.nodes.iter().enumerate() {
        if n.is_switch() {
            if group.members.contains_key(&n.info.port_guid) {
                out.insert((i, 0));
            }
            continue;
        }
        for p in 1..=n.info.num_ports {
            let Some(g) = n.port_guid(p) else { continue };
            if !group.members.contains_key(&g) {
                continue;
            }
            if let Some(peer) = subnet.peer(PortRef { node: i, port: p }) {
                if subnet.nodes.get(peer.node).is_some_and(|x| x.is_switch()) {
                    out.insert((peer.node, peer.port));
                }
            }
        }
    }
    out
}

/// The MFT entries every switch should hold: switch node index → MLID → ports (see the module
/// docs). Switches with no entry are absent.
pub fn compute_mfts(
    subnet: &Subnet,
    groups: &McGroups,
) -> BTreeMap<usize, BTreeMap<Lid, PortMask>> {
    let tree = spanning_tree(subnet);
    let mut out: BTreeMap<usize, BTreeMap<Lid, PortMask>> = BTreeMap::new();
    for group in groups.iter() {
        let attach = attachments(subnet, group);
        if attach.is_empty() {
            continue;
        }
        // Member attachments per switch, then per subtree (children before parents).
        let mut own: BTreeMap<usize, PortMask> = BTreeMap::new();
        for &(s, p) in &attach {
            own.entry(s).or_default().insert(p);
        }
        let mut below: BTreeMap<usize, usize> = BTreeMap::new();
        for &s in tree.order.iter().rev() {
            let mut n = usize::from(own.contains_key(&s));
            for &(_, c) in tree.children.get(&s).map(Vec::as_slice).unwrap_or(&[]) {
                n += below.get(&c).copied().unwrap_or(0);
            }
            below.insert(s, n);
        }
        // The members' switches in each tree of the forest, by root.
        let root_of = |mut s: usize| {
            while let Some(&(p, _)) = tree.parent.get(&s) {
                s = p;
            }
            s
        };
        let mut total: BTreeMap<usize, usize> = BTreeMap::new();
        for &s in own.keys() {
            *total.entry(root_of(s)).or_default() += 1;
        }
        for &s in &tree.order {
            let here = below.get(&s).copied().unwrap_or(0);
            if here == 0 {
                continue;
            }
            let mut ports = own.get(&s).copied().unwrap_or_default();
            let mut links = 0;
            for &(port, c) in tree.children.get(&s).map(Vec::as_slice).unwrap_or(&[]) {
                if below.get(&c).copied().unwrap_or(0) > 0 {
                    ports.insert(port);
                    links += 1;
                }
            }
            if let Some(&(_, up)) = tree.parent.get(&s) {
                if here < total.get(&root_of(s)).copied().unwrap_or(0) {
                    ports.insert(up);
                    links += 1;
                }
            }
            // Only the subtree joining the members: a switch above all of them that just
            // passes one branch through gets nothing.
            if own.contains_key(&s) || links >= 2 {
                out.entry(s).or_default().insert(group.mlid(), ports);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
