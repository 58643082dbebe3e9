//! The `world` module deals with *the HCAs and the clock*: 1–4 soft HCAs (`Hca<VecMemory>`),
//! each with one port (HCA `i` has LID `i + 1`), one protection domain, a send and a receive
//! CQ, and one large memory region of seeded random bytes of which the workload registers
//! sub-ranges; and the discrete-event step that moves packets between them through [`Net`].
//!
//! Time is virtual: the driver jumps to the earlier of the next packet arrival and the
//! earliest `poll_timeout` of any HCA (or the next workload action), delivers what has arrived,
//! fires what is due, and lets every HCA transmit until it has nothing left — the same loop as
//! the engine's two-HCA bench, generalised to a network.

use std::collections::VecDeque;
use std::fmt;

use softib_engine::qp::requester::MAX_TRANSPORT_LEN;
use softib_engine::verbs::{AsyncEvent, WorkCompletion};
use softib_engine::{CqHandle, Hca, HcaConfig, Instant, PdHandle, RegionId, RxMeta, VecMemory};
use softib_wire::Lid;

use crate::net::Net;
use crate::oracle::Oracle;
use crate::rng::SimRng;
use crate::swarm::{Config, START};

/// The embedder's id of each HCA's one memory region.
pub const REGION: RegionId = RegionId(1);

/// The virtual address where each HCA's memory region starts.
pub const BASE: u64 = 0x4000_0000;

/// CQ depth: deep enough that polling after every step never lets one overflow.
const CQ_DEPTH: u32 = 16_384;

/// The short log of a run: one line per QP state transition or notable event, kept in memory
/// and printed when the run fails. Long logs keep their beginning and their end.
#[derive(Debug, Default, Clone)]
pub struct Log {
    head: Vec<String>,
    tail: VecDeque<String>,
    omitted: usize,
    keep_all: bool,
}

impl Log {
    const HEAD: usize = 300;
    const TAIL: usize = 1500;

    /// Keeps every line from now on (for packet traces).
    pub fn keep_all(&mut self) {
        self.keep_all = true;
    }

    /// Adds a line stamped with virtual time `now`.
    pub fn push(&mut self, now: Instant, line: impl fmt::Display) {
        self.push_raw(format!("{now} {line}"));
    }

    /// Adds a line as it is.
    pub fn push_raw(&mut self, line: String) {
        if self.head.len() < Self::HEAD {
            self.head.push(line);
            return;
        }
        if self.tail.len() >= Self::TAIL && !self.keep_all {
            self.tail.pop_front();
            self.omitted += 1;
        }
        self.tail.push_back(line);
    }

    /// The lines, with a marker where some were left out.
    pub fn lines(&self) -> Vec<String> {
        let mut v = self.head.clone();
        if self.omitted > 0 {
            v.push(format!("... {} lines omitted ...", self.omitted));
        }
        v.extend(self.tail.iter().cloned());
        v
    }
}

/// One HCA and what the world set up for it.
pub struct Node {
    /// The engine.
    pub hca: Hca<VecMemory>,
    /// Its port's LID.
    pub lid: Lid,
    /// Its protection domain.
    pub pd: PdHandle,
    /// Where send completions go.
    pub send_cq: CqHandle,
    /// Where receive completions go.
    pub recv_cq: CqHandle,
    /// The memory region as it was before anything ran (the model's starting point).
    pub initial: Vec<u8>,
}

impl Node {
    /// The region's current bytes.
    pub fn memory(&self) -> &[u8] {
        self.hca.memory().bytes(REGION).unwrap_or(&[])
    }
}

/// The HCAs, the network and the clock.
pub struct World {
    /// Virtual time.
    pub now: Instant,
    /// The HCAs; node `i` has LID `i + 1`.
    pub nodes: Vec<Node>,
    /// The network.
    pub net: Net,
    /// The short log.
    pub log: Log,
    /// Whether every packet goes into the log.
    pub trace: bool,
    /// Whether RC QPs are marked in-process: packets are handed over as the daemon hands
    /// over those between its devices ([`RxMeta::in_process`]).
    pub in_process: bool,
    buf: Vec<u8>,
}

impl World {
    /// Builds `cfg.hcas` HCAs with `mem_len[i]` bytes of memory each.
    pub(crate) fn new(
        cfg: &Config,
        mem_len: &[usize],
        mut rng: SimRng,
        net: Net,
        log: Log,
    ) -> Result<World, String> {
        let mut nodes = Vec::with_capacity(cfg.hcas);
        for (i, &len) in mem_len.iter().enumerate().take(cfg.hcas) {
            let mut hc = HcaConfig::with_seed(rng.u64());
            let lid = Lid(i as u16 + 1);
            hc.ports[0].lid = lid;
            hc.ports[0].active_mtu = cfg.mtu;
            let mut mem = VecMemory::new();
            mem.add(REGION, BASE, len);
            let bytes = mem
                .bytes_mut(REGION)
                .ok_or("sim: the region just added is missing")?;
            rng.fill(bytes);
            let initial = bytes.clone();
            let mut hca = Hca::new(hc, mem);
            let err = |e| format!("sim: setting up hca{}: {e}", i + 1);
            let pd = hca.alloc_pd().map_err(err)?;
            let send_cq = hca.create_cq(CQ_DEPTH).map_err(err)?;
            let recv_cq = hca.create_cq(CQ_DEPTH).map_err(err)?;
            nodes.push(Node {
                hca,
                lid,
                pd,
                send_cq,
                recv_cq,
                initial,
            });
        }
        Ok(World {
            now: START,
            nodes,
            net,
            log,
            trace: false,
            in_process: cfg.in_process,
            buf: vec![0; MAX_TRANSPORT_LEN.max(softib_engine::IN_PROCESS_MAX_LEN)],
        })
    }

    /// The node whose port has `lid`.
    pub fn node_of(&self, lid: Lid) -> Option<usize> {
        let i = usize::from(lid.0).checked_sub(1)?;
        (i < self.nodes.len()).then_some(i)
    }

    /// Lets every HCA transmit until it has nothing left; every packet is shown to the oracle
    /// (a QP in ERR sends nothing) and routed by its DLID.
    pub(crate) fn transmit(&mut self, oracle: &mut Oracle) -> Result<(), String> {
        let mut buf = std::mem::take(&mut self.buf);
        let now = self.now;
        let mut result = Ok(());
        'nodes: for i in 0..self.nodes.len() {
            loop {
                let node = &mut self.nodes[i];
                let Some(mut tx) = node.hca.poll_transmit(now, &mut buf) else {
                    break;
                };
                // A payload left in memory travels whole here (the daemon hands it over in
                // two parts; the engine's own tests cover that).
                if !node.hca.materialize(&mut tx, &mut buf) {
                    result = Err(format!(
                        "hca{} QP {}: a payload left in memory could not be read",
                        i + 1,
                        tx.src_qpn
                    ));
                    break 'nodes;
                }
                let body = &buf[..tx.len];
                let state = node.hca.qp(tx.src_qpn).map(|q| q.state);
                if let Err(e) = oracle.on_transmit(i, tx.src_qpn, state, body) {
                    result = Err(e);
                    break 'nodes;
                }
                let Some(to) = self.node_of(tx.av.dlid) else {
                    result = Err(format!(
                        "hca{} QP {} sent a packet to LID {}, which no HCA has",
                        i + 1,
                        tx.src_qpn,
                        tx.av.dlid.0
                    ));
                    break 'nodes;
                };
                let slid = self.nodes[i].lid;
                let outcome = self.net.send(
                    now,
                    i,
                    to,
                    crate::net::Label {
                        slid,
                        sl: tx.av.sl,
                        in_process: tx.in_process,
                    },
                    body,
                );
                if self.trace {
                    let what = softib_wire::packet::parse_body(body).map_or_else(
                        |e| format!("{e:?}"),
                        |(t, p)| format!("{t} payload {}", p.len()),
                    );
                    self.log.push(
                        now,
                        format_args!("hca{} -> hca{} {what}: {outcome}", i + 1, to + 1),
                    );
                }
            }
        }
        self.buf = buf;
        result
    }

    /// Hands every packet that has arrived by now to its HCA.
    pub(crate) fn deliver(&mut self) {
        while let Some(d) = self.net.pop_due(self.now) {
            let meta = RxMeta {
                slid: d.label.slid,
                sl: d.label.sl,
                grh: None,
                in_process: self.in_process && d.label.in_process,
            };
            if self.trace {
                let what = softib_wire::packet::parse_body(&d.body).map_or_else(
                    |e| format!("{e:?}"),
                    |(t, p)| format!("{t} payload {}", p.len()),
                );
                self.log.push(
                    self.now,
                    format_args!("hca{} <- hca{} {what}", d.to + 1, d.from + 1),
                );
            }
            self.nodes[d.to]
                .hca
                .handle_packet(self.now, 1, &meta, &d.body);
        }
    }

    /// Fires every due timer.
    pub(crate) fn fire_timers(&mut self) {
        for n in &mut self.nodes {
            n.hca.handle_timeout(self.now);
        }
    }

    /// Checks every engine invariant of every HCA (`Hca::check_invariants`): the run calls
    /// it after every step, so a broken one fails the seed where it first shows, naming the
    /// HCA, the QP, the rule and the state.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        for (i, n) in self.nodes.iter().enumerate() {
            n.hca
                .check_invariants()
                .map_err(|v| format!("hca{}: engine invariant broken: {v}", i + 1))?;
        }
        Ok(())
    }

    /// The earliest packet arrival or HCA timer.
    pub fn next_event(&self) -> Option<Instant> {
        self.nodes
            .iter()
            .filter_map(|n| n.hca.poll_timeout())
            .chain(self.net.next_arrival())
            .min()
    }

    /// Whether any HCA has a timer armed.
    pub fn timers_armed(&self) -> bool {
        self.nodes.iter().any(|n| n.hca.poll_timeout().is_some())
    }

    /// Takes every completion from every CQ: `(node, from the receive CQ, completion)`.
    pub(crate) fn poll_cqs(&mut self, out: &mut Vec<(usize, bool, WorkCompletion)>) {
        for (i, n) in self.nodes.iter_mut().enumerate() {
            while let Some(wc) = n.hca.poll_cq(n.send_cq) {
                out.push((i, false, wc));
            }
            while let Some(wc) = n.hca.poll_cq(n.recv_cq) {
                out.push((i, true, wc));
            }
        }
    }

    /// Takes every asynchronous event: `(node, event)`.
    pub(crate) fn poll_events(&mut self, out: &mut Vec<(usize, AsyncEvent)>) {
        for (i, n) in self.nodes.iter_mut().enumerate() {
            while let Some(e) = n.hca.poll_event() {
                out.push((i, e));
            }
        }
    }
}
