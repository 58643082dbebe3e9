//! Unicast routing: the LFT of every switch, from the subnet and the LIDs of its end ports.
//!
//! Min-hop is opensm's `minhop` engine: for each switch and each LID in ascending order, the
//! egress port among those on a shortest switch path to the LID's switch, the one carrying the
//! fewest CA LIDs so far (ties: the lowest port number). Switch LIDs are routed the same way but
//! not counted, as `dump_ucast_path_distribution` shows (golden `B-stock/osm-topoB`).
//!
//! Up/down is opensm's `updn` idea kept simple: switches are ranked by hop distance from the
//! roots, an "up" hop goes to a lower (rank, GUID); a legal route is some up hops then some
//! down hops, so the channel dependency graph has no cycle and routing is deadlock-free. A
//! switch that can reach the destination going only down does so; otherwise it goes up along
//! the shortest legal route. The roots are the switches without CAs (the spines of a fat tree)
//! when that makes every switch reachable, else the most central switch (lowest GUID on ties).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use softib_wire::mad::attr::LinearForwardingTable;
use softib_wire::{Guid, Lid};

use crate::subnet::{PortRef, Subnet};

use super::Routing;

const INF: u32 = u32::MAX;

/// The switch graph of a subnet.
struct Graph {
    /// Switch node indices, ascending.
    switches: Vec<usize>,
    /// Per switch: (egress port, neighbour switch), ascending by port.
    adj: BTreeMap<usize, Vec<(u8, usize)>>,
    guid: BTreeMap<usize, Guid>,
    /// Switches with a CA attached.
    has_ca: BTreeSet<usize>,
}

impl Graph {
    fn new(subnet: &Subnet) -> Graph {
        let switches: Vec<usize> = (0..subnet.nodes.len())
            .filter(|&i| subnet.nodes[i].is_switch())
            .collect();
        let mut adj: BTreeMap<usize, Vec<(u8, usize)>> =
            switches.iter().map(|&s| (s, Vec::new())).collect();
        let mut has_ca = BTreeSet::new();
        for l in &subnet.links {
            let (a, b) = (l.a, l.b);
            match (adj.contains_key(&a.node), adj.contains_key(&b.node)) {
                (true, false) => {
                    has_ca.insert(a.node);
                }
                (false, true) => {
                    has_ca.insert(b.node);
                }
                _ => {}
            }
            if adj.contains_key(&a.node) && adj.contains_key(&b.node) && a.node != b.node {
                if let Some(v) = adj.get_mut(&a.node) {
                    v.push((a.port, b.node));
                }
                if let Some(v) = adj.get_mut(&b.node) {
                    v.push((b.port, a.node));
                }
            }
        }
        for v in adj.values_mut() {
            v.sort_unstable();
        }
        let guid = switches
            .iter()
            .map(|&s| (s, subnet.nodes[s].info.node_guid))
            .collect();
        Graph {
            switches,
            adj,
            guid,
            has_ca,
        }
    }

    fn neighbours(&self, s: usize) -> &[(u8, usize)] {
        self.adj.get(&s).map_or(&[], Vec::as_slice)
    }

    /// Hops from the nearest of `from` to every switch reachable.
    fn bfs(&self, from: &[usize]) -> BTreeMap<usize, u32> {
        let mut dist: BTreeMap<usize, u32> = from.iter().map(|&s| (s, 0)).collect();
        let mut q: VecDeque<usize> = from.iter().copied().collect();
        while let Some(x) = q.pop_front() {
            let d = dist.get(&x).copied().unwrap_or(INF);
            for &(_, y) in self.neighbours(x) {
                if let std::collections::btree_map::Entry::Vacant(e) = dist.entry(y) {
                    e.insert(d + 1);
                    q.push_back(y);
                }
            }
        }
        dist
    }
}

/// A routing engine's answer to "which egress ports of switch `s` lead towards switch `t`".
type Choice = dyn Fn(usize, usize) -> Vec<u8>;

/// Computes the LFT of every switch (indexed by LID, `0..=max LID`, unrouted LIDs
/// [`LinearForwardingTable::NO_PORT`]). Returns the tables by switch node index, the engine
/// actually used, and an error message if up/down could not route and min-hop was used.
pub(crate) fn compute(
    subnet: &Subnet,
    lids: &BTreeMap<PortRef, Lid>,
    routing: Routing,
) -> (BTreeMap<usize, Vec<u8>>, Routing, Option<String>) {
    let g = Graph::new(subnet);
    let mut error = None;
    let mut used_engine = routing;
    let choose: Box<Choice> = match routing {
        Routing::UpDown => match updn(&g) {
            Some(c) => c,
            None => {
                error = Some("updn: cannot build lid matrices".to_string());
                used_engine = Routing::MinHop;
                minhop(&g)
            }
        },
        Routing::MinHop => minhop(&g),
    };
    let max_lid = lids.values().map(|l| l.0).max().unwrap_or(0);
    let mut by_lid: Vec<(Lid, PortRef)> = lids.iter().map(|(&p, &l)| (l, p)).collect();
    by_lid.sort();
    let mut out = BTreeMap::new();
    for &s in &g.switches {
        let mut lft = vec![LinearForwardingTable::NO_PORT; usize::from(max_lid) + 1];
        let mut used: BTreeMap<u8, u32> = BTreeMap::new();
        for &(lid, owner) in &by_lid {
            let is_ca = !subnet.nodes[owner.node].is_switch();
            // The switch the LID hangs off, and the port there that reaches it.
            let (target, last_port) = if is_ca {
                match subnet.peer(owner) {
                    Some(p) if subnet.nodes[p.node].is_switch() => (p.node, p.port),
                    _ => continue,
                }
            } else {
                (owner.node, 0)
            };
            let port = if target == s {
                Some(last_port)
            } else {
                choose(s, target)
                    .into_iter()
                    .min_by_key(|p| (used.get(p).copied().unwrap_or(0), *p))
            };
            let Some(port) = port else { continue };
            if is_ca {
                *used.entry(port).or_default() += 1;
            }
            if let Some(slot) = lft.get_mut(usize::from(lid.0)) {
                *slot = port;
            }
        }
        out.insert(s, lft);
    }
    (out, used_engine, error)
}

fn minhop(g: &Graph) -> Box<Choice> {
    let dist: BTreeMap<usize, BTreeMap<usize, u32>> =
        g.switches.iter().map(|&t| (t, g.bfs(&[t]))).collect();
    let adj = g.adj.clone();
    Box::new(move |s, t| {
        let Some(d) = dist.get(&t) else {
            return Vec::new();
        };
        let nb = adj.get(&s).map_or(&[][..], Vec::as_slice);
        let best = nb
            .iter()
            .map(|(_, y)| d.get(y).copied().unwrap_or(INF))
            .min()
            .unwrap_or(INF);
        if best == INF {
            return Vec::new();
        }
        nb.iter()
            .filter(|(_, y)| d.get(y).copied().unwrap_or(INF) == best)
            .map(|&(p, _)| p)
            .collect()
    })
}

/// Up/down: `None` if no choice of roots routes every connected pair.
fn updn(g: &Graph) -> Option<Box<Choice>> {
    let spines: Vec<usize> = g
        .switches
        .iter()
        .copied()
        .filter(|s| !g.has_ca.contains(s))
        .collect();
    let mut tries = Vec::new();
    if !spines.is_empty() && spines.len() < g.switches.len() {
        tries.push(spines);
    }
    // The most central switch: the smallest eccentricity, then the lowest GUID.
    let center = g.switches.iter().copied().min_by_key(|&s| {
        let ecc = g.bfs(&[s]).values().copied().max().unwrap_or(0);
        (ecc, g.guid.get(&s).copied().unwrap_or(Guid(0)))
    });
    if let Some(c) = center {
        tries.push(vec![c]);
    } else {
        return Some(Box::new(|_, _| Vec::new()));
    }
    tries.into_iter().find_map(|roots| updn_with(g, &roots))
}

fn updn_with(g: &Graph, roots: &[usize]) -> Option<Box<Choice>> {
    let rank = g.bfs(roots);
    let key: BTreeMap<usize, (u32, Guid)> = g
        .switches
        .iter()
        .map(|&s| {
            (
                s,
                (
                    rank.get(&s).copied().unwrap_or(INF),
                    g.guid.get(&s).copied().unwrap_or(Guid(0)),
                ),
            )
        })
        .collect();
    let k = |s: usize| key.get(&s).copied().unwrap_or((INF, Guid(u64::MAX)));
    let mut order = g.switches.clone();
    order.sort_by_key(|&s| k(s));
    // Per target: (hops going only down, hops of the route taken).
    type Tables = (BTreeMap<usize, u32>, BTreeMap<usize, u32>);
    let mut tables: BTreeMap<usize, Tables> = BTreeMap::new();
    for &t in &g.switches {
        let mut down = BTreeMap::from([(t, 0u32)]);
        let mut q = VecDeque::from([t]);
        while let Some(y) = q.pop_front() {
            let dy = down.get(&y).copied().unwrap_or(INF);
            for &(_, x) in g.neighbours(y) {
                // x -> y is a down hop when y ranks below x.
                if k(x) < k(y) && !down.contains_key(&x) {
                    down.insert(x, dy + 1);
                    q.push_back(x);
                }
            }
        }
        let mut any = down.clone();
        for &x in &order {
            if any.contains_key(&x) {
                continue;
            }
            let best = g
                .neighbours(x)
                .iter()
                .filter(|&&(_, y)| k(y) < k(x))
                .filter_map(|(_, y)| any.get(y).copied())
                .min();
            if let Some(b) = best {
                any.insert(x, b + 1);
            }
        }
        // Every switch connected to t must have a legal route.
        if g.bfs(&[t]).keys().any(|s| !any.contains_key(s)) {
            return None;
        }
        tables.insert(t, (down, any));
    }
    let adj = g.adj.clone();
    Some(Box::new(move |s, t| {
        let k = |s: usize| key.get(&s).copied().unwrap_or((INF, Guid(u64::MAX)));
        let Some((down, any)) = tables.get(&t) else {
            return Vec::new();
        };
        let nb = adj.get(&s).map_or(&[][..], Vec::as_slice);
        if let Some(&d) = down.get(&s) {
            nb.iter()
                .filter(|&&(_, y)| k(y) > k(s) && down.get(&y) == Some(&(d.saturating_sub(1))))
                .map(|&(p, _)| p)
                .collect()
        } else if let Some(&d) = any.get(&s) {
            nb.iter()
                .filter(|&&(_, y)| k(y) < k(s) && any.get(&y) == Some(&(d.saturating_sub(1))))
                .map(|&(p, _)| p)
                .collect()
        } else {
            Vec::new()
        }
    }))
}
