//! Discovery of a subnet by directed-route SMPs: the crawl at the heart of the SM's heavy sweep
//! (opensm's `osm_state_mgr` discovery phase) and of `ibnetdiscover` and friends.
//!
//! [`Discovery`] is sans-IO: it hands out directed-route SubnGets ([`Discovery::poll_transmit`])
//! to be sent out of the sweeping port, takes their GetResps back
//! ([`Discovery::handle_response`]), and resends what got no answer
//! ([`Discovery::handle_timeout`]). When [`Discovery::is_done`], [`Discovery::result`] is the
//! [`Subnet`] it found.
//!
//! The crawl is a breadth-first search over directed routes, as opensm's: the NodeInfo of the
//! end of each route; for a node seen for the first time its NodeDescription, for a switch its
//! SwitchInfo and the PortInfo of every port (0 included), for a CA the PortInfo of the port the
//! route arrives by; then a new route through each switch port whose link is up (LinkUp), other
//! than the one it was entered by. A NodeInfo that names a known node GUID closes a cable to
//! that node instead. A CA never forwards directed routes (IBA §14.2.2), so the crawl only
//! leaves the sweeping CA by its own port.
//!
//! Lost responses are retried with the same TID after `timeout`, `retries` times; then the
//! route is given up (its failure is kept in [`Discovery::failures`]) and the crawl goes on.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use softib_wire::mad::attr::{
    NodeDescription, NodeInfo, NodeType, PortInfo, PortPhysicalState, SmpAttribute, SwitchInfo,
};
use softib_wire::mad::{smp, status, AttrId, Method};

use crate::subnet::{PortRef, Subnet, SubnetNode};

/// opensm's default `max_wire_smps`: SMPs in flight at once.
pub const DEFAULT_MAX_WIRE_SMPS: usize = 4;

/// One request in flight (or waiting to go out) and what it is for.
#[derive(Debug, Clone)]
struct Pending<K> {
    smp: smp::Repr,
    ctx: K,
    /// When to give up waiting; `None` until the requester learns the time.
    deadline: Option<Duration>,
    /// Sends so far.
    sends: u8,
    /// Waiting in the send queue (first send or a retry).
    queued: bool,
}

/// A request that got no answer after every retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The attribute that was asked for.
    pub attr_id: AttrId,
    /// Its AttributeModifier.
    pub attr_mod: u32,
    /// The directed route (hops after hop 0).
    pub path: Vec<u8>,
}

impl Failure {
    fn of(smp: &smp::Repr) -> Failure {
        Failure {
            attr_id: smp.header.attr_id,
            attr_mod: smp.header.attr_mod,
            path: smp.dr.map(|d| d.path().to_vec()).unwrap_or_default(),
        }
    }
}

/// The outcome of a request, for its owner.
#[derive(Debug, Clone)]
pub(crate) enum Done<K> {
    /// The GetResp.
    Answered(K, smp::Repr),
    /// No answer after every retry.
    Lost(K, smp::Repr),
}

/// SMP transactions with retries: TIDs, a window of SMPs in flight, timeouts. Shared by the
/// crawl and the SM's configuration phases.
#[derive(Debug, Clone)]
pub(crate) struct Requester<K> {
    next_tid: u64,
    waiting: VecDeque<u64>,
    pending: BTreeMap<u64, Pending<K>>,
    in_flight: usize,
    timeout: Duration,
    retries: u8,
    window: usize,
    now: Option<Duration>,
    /// Responses whose TID matched nothing in flight.
    pub unknown_tids: u64,
}

impl<K: Clone> Requester<K> {
    pub(crate) fn new(first_tid: u64, timeout: Duration, retries: u8, window: usize) -> Self {
        Requester {
            next_tid: first_tid,
            waiting: VecDeque::new(),
            pending: BTreeMap::new(),
            in_flight: 0,
            timeout,
            retries,
            window: window.max(1),
            now: None,
            unknown_tids: 0,
        }
    }

    pub(crate) fn next_tid(&self) -> u64 {
        self.next_tid
    }

    /// Queues `smp` (its TID is replaced by a fresh one).
    pub(crate) fn push(&mut self, mut smp: smp::Repr, ctx: K) {
        let tid = self.next_tid;
        self.next_tid = self.next_tid.wrapping_add(1);
        smp.header.tid = tid;
        self.pending.insert(
            tid,
            Pending {
                smp,
                ctx,
                deadline: None,
                sends: 0,
                queued: true,
            },
        );
        self.waiting.push_back(tid);
    }

    /// A directed-route SubnGet along `path`.
    pub(crate) fn get(&mut self, path: &[u8], attr: AttrId, attr_mod: u32, m_key: u64, ctx: K) {
        // A route longer than 63 hops cannot be expressed; the crawl never builds one.
        if let Ok(s) = smp::Repr::dr_get(0, attr, attr_mod, m_key, path) {
            self.push(s, ctx);
        }
    }

    /// A directed-route SubnSet of `attr` along `path`.
    pub(crate) fn set<A: SmpAttribute>(
        &mut self,
        path: &[u8],
        attr: &A,
        attr_mod: u32,
        m_key: u64,
        ctx: K,
    ) {
        if let Ok(s) = smp::Repr::dr_set(0, A::ATTR_ID, attr_mod, m_key, path, attr.to_data()) {
            self.push(s, ctx);
        }
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    pub(crate) fn observe(&mut self, now: Duration) {
        self.now = Some(self.now.map_or(now, |n| n.max(now)));
        // Requests sent before the time was known are timed from now.
        for p in self.pending.values_mut() {
            if p.sends > 0 && !p.queued && p.deadline.is_none() {
                p.deadline = Some(now + self.timeout);
            }
        }
    }

    pub(crate) fn poll_transmit(&mut self) -> Option<smp::Repr> {
        loop {
            let &tid = self.waiting.front()?;
            let Some(p) = self.pending.get_mut(&tid) else {
                self.waiting.pop_front();
                continue;
            };
            // A retry already holds its place in the window (retries queue at the front).
            if p.sends == 0 {
                if self.in_flight >= self.window {
                    return None;
                }
                self.in_flight += 1;
            }
            self.waiting.pop_front();
            p.queued = false;
            p.sends = p.sends.saturating_add(1);
            p.deadline = self.now.map(|n| n + self.timeout);
            return Some(p.smp);
        }
    }

    pub(crate) fn poll_timeout(&self) -> Option<Duration> {
        let mut earliest: Option<Duration> = None;
        for p in self.pending.values() {
            if p.queued {
                continue;
            }
            // Sent before the time was known: ask to be woken at once to start its clock.
            let d = p.deadline.unwrap_or(Duration::ZERO);
            earliest = Some(earliest.map_or(d, |e| e.min(d)));
        }
        earliest
    }

    /// Resends what timed out, gives up what ran out of retries.
    pub(crate) fn handle_timeout(&mut self, now: Duration) -> Vec<Done<K>> {
        self.observe(now);
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| !p.queued && p.deadline.is_some_and(|d| d <= now))
            .map(|(&tid, _)| tid)
            .collect();
        let mut lost = Vec::new();
        for tid in expired {
            let Some(p) = self.pending.get_mut(&tid) else {
                continue;
            };
            if p.sends > self.retries {
                if let Some(p) = self.pending.remove(&tid) {
                    self.in_flight = self.in_flight.saturating_sub(1);
                    lost.push(Done::Lost(p.ctx, p.smp));
                }
            } else {
                // Same TID: a late answer to an earlier send is as good as the retry's.
                p.deadline = None;
                p.queued = true;
                self.waiting.push_front(tid);
            }
        }
        lost
    }

    /// Matches a response to its request by TID.
    pub(crate) fn handle_response(
        &mut self,
        now: Duration,
        response: &smp::Repr,
    ) -> Option<Done<K>> {
        self.observe(now);
        let tid = response.header.tid;
        let matches = response.header.method == Method::GetResp
            && self
                .pending
                .get(&tid)
                .is_some_and(|p| p.sends > 0 && p.smp.header.attr_id == response.header.attr_id);
        if !matches {
            self.unknown_tids += 1;
            return None;
        }
        let p = self.pending.remove(&tid)?;
        self.waiting.retain(|&t| t != tid);
        self.in_flight = self.in_flight.saturating_sub(1);
        Some(Done::Answered(p.ctx, *response))
    }
}

/// How a [`Discovery`] crawls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryConfig {
    /// The sweeping port: a CA port number, or 0 for a switch's management port.
    pub local_port: u8,
    /// The M_Key to put in every SMP.
    pub m_key: u64,
    /// How long to wait for a response before resending.
    pub timeout: Duration,
    /// Resends before a request is given up.
    pub retries: u8,
    /// SMPs in flight at once.
    pub max_wire_smps: usize,
}

impl Default for DiscoveryConfig {
    /// Port 1, M_Key 0, opensm's 200 ms timeout, 3 retries and 4 SMPs on the wire.
    fn default() -> Self {
        DiscoveryConfig {
            local_port: 1,
            m_key: 0,
            timeout: Duration::from_millis(200),
            retries: 3,
            max_wire_smps: DEFAULT_MAX_WIRE_SMPS,
        }
    }
}

/// What a crawl request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// NodeInfo of a route's end, reached from `from` (None for the sweeping node).
    NodeInfo { from: Option<PortRef> },
    /// NodeDescription of a node.
    NodeDescription { node: usize },
    /// SwitchInfo of a switch.
    SwitchInfo { node: usize },
    /// PortInfo of a port; `explore` = follow the link if it is up.
    PortInfo { at: PortRef, explore: bool },
}

/// A directed-route crawl of a subnet (see the module docs).
#[derive(Debug, Clone)]
pub struct Discovery {
    config: DiscoveryConfig,
    requester: Requester<Ask>,
    subnet: Subnet,
    failures: Vec<Failure>,
}

impl Discovery {
    /// Starts a crawl from the sweeping port; TIDs are taken from `first_tid` on.
    pub fn new(config: DiscoveryConfig, first_tid: u64) -> Discovery {
        let mut requester = Requester::new(
            first_tid,
            config.timeout,
            config.retries,
            config.max_wire_smps,
        );
        requester.get(
            &[],
            AttrId::NODE_INFO,
            0,
            config.m_key,
            Ask::NodeInfo { from: None },
        );
        Discovery {
            config,
            requester,
            subnet: Subnet::default(),
            failures: Vec::new(),
        }
    }

    /// The next SMP to send out of the sweeping port (the initial path starts at hop 0), if
    /// the window has room and something is waiting.
    pub fn poll_transmit(&mut self) -> Option<smp::Repr> {
        self.requester.poll_transmit()
    }

    /// When [`Discovery::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.requester.poll_timeout()
    }

    /// Resends what got no answer in time; gives up requests out of retries.
    pub fn handle_timeout(&mut self, now: Duration) {
        for done in self.requester.handle_timeout(now) {
            if let Done::Lost(_, smp) = done {
                self.failures.push(Failure::of(&smp));
            }
        }
    }

    /// Takes a GetResp. Returns whether it belonged to this crawl (TID matched a request in
    /// flight); others are counted in [`Discovery::unknown_tids`] and ignored.
    pub fn handle_response(&mut self, now: Duration, response: &smp::Repr) -> bool {
        match self.requester.handle_response(now, response) {
            Some(Done::Answered(ask, resp)) => {
                self.answered(ask, &resp);
                true
            }
            _ => false,
        }
    }

    /// Whether nothing is waiting or in flight any more: the result is final.
    pub fn is_done(&self) -> bool {
        self.requester.is_idle()
    }

    /// The subnet found so far (all of it once [`Discovery::is_done`]).
    pub fn result(&self) -> &Subnet {
        &self.subnet
    }

    /// The subnet found, by value.
    pub fn into_result(self) -> Subnet {
        self.subnet
    }

    /// Requests given up after every retry, in the order they were given up.
    pub fn failures(&self) -> &[Failure] {
        &self.failures
    }

    /// Responses that matched no request in flight.
    pub fn unknown_tids(&self) -> u64 {
        self.requester.unknown_tids
    }

    /// The first TID not yet used.
    pub fn next_tid(&self) -> u64 {
        self.requester.next_tid()
    }

    fn answered(&mut self, ask: Ask, resp: &smp::Repr) {
        // An error status means the attribute is not there; the crawl goes on without it.
        if resp.header.status & !status::DIRECTION != status::SUCCESS {
            if let Ask::NodeInfo { .. } = ask {
                self.failures.push(Failure::of(resp));
            }
            return;
        }
        let path = resp.dr.map(|d| d.path().to_vec()).unwrap_or_default();
        match ask {
            Ask::NodeInfo { from } => {
                let Ok(info) = NodeInfo::parse(&resp.data) else {
                    return;
                };
                self.node_found(info, path, from);
            }
            Ask::NodeDescription { node } => {
                if let (Ok(d), Some(n)) = (
                    NodeDescription::parse(&resp.data),
                    self.subnet.nodes.get_mut(node),
                ) {
                    n.description = d.text().trim_end_matches('\0').to_string();
                }
            }
            Ask::SwitchInfo { node } => {
                if let (Ok(si), Some(n)) = (
                    SwitchInfo::parse(&resp.data),
                    self.subnet.nodes.get_mut(node),
                ) {
                    n.switch_info = Some(si);
                }
            }
            Ask::PortInfo { at, explore } => {
                let Ok(pi) = PortInfo::parse(&resp.data) else {
                    return;
                };
                let Some(slot) = self
                    .subnet
                    .nodes
                    .get_mut(at.node)
                    .and_then(|n| n.ports.get_mut(usize::from(at.port)))
                else {
                    return;
                };
                *slot = Some(pi);
                if explore && at.port != 0 && pi.port_physical_state == PortPhysicalState::LinkUp {
                    let mut next = path;
                    next.push(at.port);
                    // 63 hops is as far as a directed route reaches.
                    if next.len() <= usize::from(smp::MAX_HOPS) {
                        self.requester.get(
                            &next,
                            AttrId::NODE_INFO,
                            0,
                            self.config.m_key,
                            Ask::NodeInfo { from: Some(at) },
                        );
                    }
                }
            }
        }
    }

    fn node_found(&mut self, info: NodeInfo, path: Vec<u8>, from: Option<PortRef>) {
        let root = from.is_none();
        let arrival = if root {
            self.config.local_port
        } else {
            info.local_port_num
        };
        let m_key = self.config.m_key;
        if let Some(i) = self.subnet.node_by_guid(info.node_guid) {
            let here = PortRef {
                node: i,
                port: arrival,
            };
            if let Some(from) = from {
                self.subnet.add_link(from, here);
            }
            // A CA entered by another of its ports: that port's PortInfo is wanted too.
            let n = &self.subnet.nodes[i];
            if !n.is_switch() && n.port(arrival).is_none() && !root {
                self.requester.get(
                    &path,
                    AttrId::PORT_INFO,
                    u32::from(arrival),
                    m_key,
                    Ask::PortInfo {
                        at: here,
                        explore: false,
                    },
                );
            }
            return;
        }
        let node = self.subnet.nodes.len();
        self.subnet.nodes.push(SubnetNode {
            info,
            description: String::new(),
            dr_path: path.clone(),
            ports: vec![None; usize::from(info.num_ports) + 1],
            switch_info: None,
        });
        let here = PortRef {
            node,
            port: arrival,
        };
        if let Some(from) = from {
            self.subnet.add_link(from, here);
        }
        self.requester.get(
            &path,
            AttrId::NODE_DESCRIPTION,
            0,
            m_key,
            Ask::NodeDescription { node },
        );
        if info.node_type == NodeType::Switch {
            self.requester.get(
                &path,
                AttrId::SWITCH_INFO,
                0,
                m_key,
                Ask::SwitchInfo { node },
            );
            for port in 0..=info.num_ports {
                let explore = port != 0 && (root || port != arrival);
                self.requester.get(
                    &path,
                    AttrId::PORT_INFO,
                    u32::from(port),
                    m_key,
                    Ask::PortInfo {
                        at: PortRef { node, port },
                        explore,
                    },
                );
            }
        } else {
            // A CA does not forward: only the port the route arrived by is crawled on, and
            // only the sweeping CA's own port leads further.
            self.requester.get(
                &path,
                AttrId::PORT_INFO,
                u32::from(arrival),
                m_key,
                Ask::PortInfo {
                    at: here,
                    explore: root,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::testing::TestFabric;
    use crate::topology::Topology;

    fn crawl(f: &mut TestFabric, node: usize, port: u8) -> Discovery {
        let mut d = Discovery::new(
            DiscoveryConfig {
                local_port: port,
                ..DiscoveryConfig::default()
            },
            1,
        );
        f.drive(node, port, &mut d, Duration::from_secs(60));
        assert!(d.is_done(), "stuck");
        d
    }

    #[test]
    fn crawls_a_fat_tree() {
        let t = Topology::fat_tree(20).unwrap();
        let mut f = TestFabric::new(t);
        let host = f.topology().node_index("host1").unwrap();
        let d = crawl(&mut f, host, 1);
        let s = d.result();
        assert_eq!(s.nodes.len(), f.topology().nodes().len());
        assert_eq!(s.links.len(), f.topology().link_count());
        assert!(d.failures().is_empty());
        assert_eq!(s.nodes[0].dr_path, Vec::<u8>::new());
        assert!(s.nodes.iter().all(|n| !n.description.is_empty()));
        assert!(s
            .nodes
            .iter()
            .filter(|n| n.is_switch())
            .all(|n| n.switch_info.is_some() && n.port(0).is_some()));
    }

    #[test]
    fn lost_responses_are_retried_then_given_up() {
        let mut d = Discovery::new(DiscoveryConfig::default(), 10);
        let first = d.poll_transmit().unwrap();
        assert_eq!(first.header.tid, 10);
        assert_eq!(d.poll_transmit(), None);
        // Sent before any time was known: wake at once to start the clock.
        assert_eq!(d.poll_timeout(), Some(Duration::ZERO));
        d.handle_timeout(Duration::from_secs(5));
        assert_eq!(d.poll_timeout(), Some(Duration::from_millis(5200)));
        for i in 1..=3u64 {
            d.handle_timeout(Duration::from_millis(5000 + 200 * i));
            let again = d.poll_transmit().unwrap();
            assert_eq!(again.header.tid, 10, "a retry keeps its TID");
        }
        d.handle_timeout(Duration::from_millis(5800));
        assert!(d.is_done());
        assert_eq!(d.failures().len(), 1);
        assert_eq!(d.failures()[0].attr_id, AttrId::NODE_INFO);
        // A response nobody waits for is counted and ignored.
        assert!(!d.handle_response(Duration::from_secs(6), &first.response(0, [0; 64])));
        assert_eq!(d.unknown_tids(), 1);
    }
}
