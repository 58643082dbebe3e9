//! The `oracle` module deals with *checking the engine from outside*. It sees what the
//! workload posted, every completion, every packet an HCA transmits, the QP states, and the
//! memory before and after; it never looks inside the engine's queues. What it checks:
//!
//! * every signaled work request completes exactly once, an unsignaled one only with an
//!   error, and completions come in posting order per QP (send and receive queues alike);
//! * RC: a message whose WR (or a later WR of the same QP) completed successfully was received
//!   exactly once, by the receive posted for it, with the right length, immediate data and
//!   bytes; RDMA WRITE targets and READ destinations hold exactly the source bytes once the WR
//!   succeeded, and otherwise only bytes of the source or the original ones;
//! * UC and UD: every received message is one the peer sent (length, immediate data, bytes),
//!   at most once and in order unless the link duplicates or reorders, and exactly once on a
//!   perfect link with receives always posted;
//! * atomics execute exactly once: replaying the successful ones in order in a model gives the
//!   original value each returned, and the word's final value is the model's after those plus
//!   some prefix of the ones whose outcome is unknown (each executed at most once);
//! * memory that no operation targets — guard bytes outside every registered region, unused
//!   bytes inside them, send buffers, READ sources — keeps its initial bytes;
//! * a QP in RESET or INIT sends nothing, one in RTR only responses, one in ERR or SQE nothing
//!   but the one NAK that reports a responder error; every packet is well-formed and addressed
//!   to the peer QP;
//! * every error completion is explained: WR_FLUSH_ERR only in an epoch in which the QP went
//!   to ERR (moved there by the workload, or after an error completion of its own);
//!   RETRY_EXC_ERR only on RC, only where the network could lose packets or make PSN gaps on
//!   that path or the peer went to ERR; RNR_RETRY_EXC_ERR only with a finite RNR retry count
//!   and late receives at the peer; nothing else, and nothing at all when the fault mix is
//!   empty;
//! * liveness: after the network heals, every RC QP not failed by its retry limits finishes
//!   all its work within the configured virtual time.

use std::collections::BTreeMap;

use softib_engine::verbs::{QpState, QpType, WcOpcode, WcStatus, WorkCompletion};
use softib_engine::Instant;
use softib_wire::aeth::Syndrome;
use softib_wire::opcode::Kind;
use softib_wire::packet::{pad_for, parse_body};
use softib_wire::Qpn;

use crate::swarm::Config;
use crate::workload::OpKind;
use crate::world::{World, BASE};

/// What the oracle knows of one QP end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EndInfo {
    pub node: usize,
    pub qpn: Qpn,
    pub qp_type: QpType,
    pub pair: usize,
    pub peer: usize,
    pub peer_node: usize,
}

/// A posted send work request.
#[derive(Debug, Clone)]
pub(crate) struct SendRecord {
    pub wr_id: u64,
    pub seq: u32,
    pub kind: OpKind,
    pub len: u32,
    pub signaled: bool,
    pub epoch: u32,
    pub posted_at: Instant,
    /// Posted while the QP could send (RTS); otherwise it was flushed without transmitting.
    pub transmittable: bool,
    /// Among the epoch's messages that consume a receive at the peer.
    pub consuming_index: Option<u32>,
    pub local: u64,
    pub remote: u64,
    pub imm: u32,
    pub compare: u64,
    pub swap_add: u64,
    pub completion: Option<WorkCompletion>,
    pub completions: u32,
}

/// A posted receive work request.
#[derive(Debug, Clone)]
pub(crate) struct RecvRecord {
    pub wr_id: u64,
    pub seq: u32,
    pub epoch: u32,
    /// Among the epoch's receives of this QP.
    pub index: u32,
    pub addr: u64,
    pub len: u32,
    pub completion: Option<WorkCompletion>,
    pub completions: u32,
}

/// What happened to a QP in one epoch (one connection).
#[derive(Debug, Clone, Default)]
struct EpochInfo {
    /// The workload moved it to ERR.
    workload_err: bool,
    /// The engine moved it to ERR (or SQE).
    engine_err: bool,
    /// Error completions other than WR_FLUSH_ERR.
    errors: Vec<WcStatus>,
    /// NAKs it sent while in ERR.
    err_naks: u32,
    /// The first send WR that completed with an error: (sequence number, status).
    first_send_error: Option<(u32, WcStatus)>,
}

#[derive(Debug)]
struct Ledger {
    info: EndInfo,
    sends: Vec<SendRecord>,
    recvs: Vec<RecvRecord>,
    epochs: Vec<EpochInfo>,
    send_cursor: usize,
    recv_cursor: usize,
    late_recvs: bool,
}

impl Ledger {
    fn name(&self) -> String {
        format!(
            "hca{} QP {} ({} pair {})",
            self.info.node + 1,
            self.info.qpn,
            self.info.qp_type,
            self.info.pair
        )
    }
}

/// What the memory must look like in a range.
#[derive(Debug)]
enum Rule {
    /// Exactly these bytes.
    Exact(Vec<u8>),
    /// Each byte either initial or the one at the same position here.
    InitialOr(Vec<u8>),
    /// One of these (each as long as the range).
    OneOf(Vec<Vec<u8>>),
    /// Anything (a UC receive buffer a dropped message may have partly filled).
    Any,
}

#[derive(Debug)]
struct Expect {
    node: usize,
    addr: u64,
    len: usize,
    rule: Rule,
    /// Which end's which WR the range belongs to, for messages.
    end: usize,
    seq: u32,
    what: &'static str,
}

/// Counters the oracle keeps for the run's statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Send WRs posted.
    pub sends: u64,
    /// Receive WRs posted.
    pub recvs: u64,
    /// Successful completions.
    pub ok: u64,
    /// WR_FLUSH_ERR completions.
    pub flushed: u64,
    /// RETRY_EXC_ERR completions.
    pub retry_exceeded: u64,
    /// RNR_RETRY_EXC_ERR completions.
    pub rnr_retry_exceeded: u64,
    /// QPs the engine moved to ERR.
    pub qp_failures: u64,
}

/// The checks of a run.
pub(crate) struct Oracle {
    cfg: Config,
    ends: Vec<Ledger>,
    by_qp: BTreeMap<(usize, Qpn), usize>,
    mrs: Vec<Vec<(u64, u64)>>,
    pub(crate) tally: Tally,
}

fn u64_at(bytes: &[u8], off: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[off..off + 8]);
    u64::from_le_bytes(b)
}

fn slice(bytes: &[u8], addr: u64, len: usize) -> &[u8] {
    let off = (addr - BASE) as usize;
    &bytes[off..off + len]
}

fn apply(kind: OpKind, compare: u64, swap_add: u64, v: u64) -> u64 {
    match kind {
        OpKind::AtomicCmpAndSwp if v == compare => swap_add,
        OpKind::AtomicCmpAndSwp => v,
        _ => v.wrapping_add(swap_add),
    }
}

impl Oracle {
    pub(crate) fn new(cfg: &Config) -> Oracle {
        Oracle {
            cfg: cfg.clone(),
            ends: Vec::new(),
            by_qp: BTreeMap::new(),
            mrs: vec![Vec::new(); cfg.hcas],
            tally: Tally::default(),
        }
    }

    pub(crate) fn add_mr(&mut self, node: usize, addr: u64, len: u64) {
        self.mrs[node].push((addr, len));
    }

    pub(crate) fn add_end(&mut self, info: EndInfo) {
        self.by_qp.insert((info.node, info.qpn), self.ends.len());
        self.ends.push(Ledger {
            info,
            sends: Vec::new(),
            recvs: Vec::new(),
            epochs: vec![EpochInfo::default()],
            send_cursor: 0,
            recv_cursor: 0,
            late_recvs: false,
        });
    }

    pub(crate) fn posted_send(&mut self, e: usize, r: SendRecord) {
        self.tally.sends += 1;
        self.ends[e].sends.push(r);
    }

    pub(crate) fn posted_recv(&mut self, e: usize, r: RecvRecord) {
        self.tally.recvs += 1;
        self.ends[e].recvs.push(r);
    }

    pub(crate) fn late_recv(&mut self, e: usize) {
        self.ends[e].late_recvs = true;
    }

    pub(crate) fn entered_err(&mut self, e: usize, by_workload: bool) {
        let l = &mut self.ends[e];
        let Some(ep) = l.epochs.last_mut() else {
            return;
        };
        if by_workload {
            ep.workload_err = true;
        } else {
            ep.engine_err = true;
            self.tally.qp_failures += 1;
        }
    }

    pub(crate) fn new_epoch(&mut self, e: usize) {
        self.ends[e].epochs.push(EpochInfo::default());
    }

    /// A packet an HCA transmitted: `state` is its QP's state right after.
    pub(crate) fn on_transmit(
        &mut self,
        node: usize,
        qpn: Qpn,
        state: Option<QpState>,
        body: &[u8],
    ) -> Result<(), String> {
        let Some(&e) = self.by_qp.get(&(node, qpn)) else {
            return Err(format!(
                "hca{} transmitted a packet from QP {qpn}, which the workload never created",
                node + 1
            ));
        };
        let (t, _) = parse_body(body)
            .and_then(|(t, p)| t.check_headers().map(|()| (t, p)))
            .map_err(|x| {
                format!(
                    "{} transmitted a malformed packet ({x:?}): {:02x?}",
                    self.ends[e].name(),
                    &body[..body.len().min(48)]
                )
            })?;
        let peer = self.ends[self.ends[e].info.peer].info.qpn;
        if t.bth.dest_qpn != peer {
            return Err(format!(
                "{} sent {:?} PSN {} to QP {}, not to its peer QP {peer}",
                self.ends[e].name(),
                t.bth.opcode,
                t.bth.psn,
                t.bth.dest_qpn
            ));
        }
        let is_request = t.bth.opcode.info().is_some_and(|i| i.kind.is_request());
        let state = state.unwrap_or(QpState::Reset);
        let ok = match state {
            QpState::Rts | QpState::Sqd => true,
            QpState::Rtr => !is_request,
            QpState::Reset | QpState::Init | QpState::Sqe => false,
            QpState::Err => {
                let is_nak = t
                    .bth
                    .opcode
                    .info()
                    .is_some_and(|i| i.kind == Kind::Acknowledge)
                    && matches!(t.aeth.map(|a| a.syndrome), Some(Syndrome::Nak(_)));
                let ep = self.ends[e].epochs.last_mut();
                match ep {
                    Some(ep) if is_nak && ep.err_naks == 0 => {
                        ep.err_naks += 1;
                        true
                    }
                    _ => false,
                }
            }
        };
        if !ok {
            return Err(format!(
                "{} in {state} sent {:?} PSN {}",
                self.ends[e].name(),
                t.bth.opcode,
                t.bth.psn
            ));
        }
        Ok(())
    }

    /// A completion polled from `node`'s send or receive CQ.
    pub(crate) fn on_completion(
        &mut self,
        node: usize,
        from_recv_cq: bool,
        wc: WorkCompletion,
    ) -> Result<(), String> {
        let e = (wc.wr_id >> 32) as usize;
        let is_recv = wc.wr_id & (1 << 31) != 0;
        let seq = (wc.wr_id & 0x7FFF_FFFF) as usize;
        let bad = || {
            format!(
                "hca{} completed a WR it was never given: {wc:?} (on its {} CQ)",
                node + 1,
                if from_recv_cq { "receive" } else { "send" }
            )
        };
        let Some(l) = self.ends.get_mut(e) else {
            return Err(bad());
        };
        if l.info.node != node || l.info.qpn != wc.qp_num || is_recv != from_recv_cq {
            return Err(bad());
        }
        match wc.status {
            WcStatus::Success => self.tally.ok += 1,
            WcStatus::WrFlushErr => self.tally.flushed += 1,
            WcStatus::RetryExcErr => self.tally.retry_exceeded += 1,
            WcStatus::RnrRetryExcErr => self.tally.rnr_retry_exceeded += 1,
            _ => {}
        }
        let name = l.name();
        // The workload's requests are all valid and the network never delivers a corrupted
        // packet: only these statuses can ever be explained (and are checked in full at the end).
        let possible = if is_recv {
            matches!(wc.status, WcStatus::Success | WcStatus::WrFlushErr)
        } else {
            matches!(
                wc.status,
                WcStatus::Success
                    | WcStatus::WrFlushErr
                    | WcStatus::RetryExcErr
                    | WcStatus::RnrRetryExcErr
            )
        };
        if !possible {
            let what = if is_recv {
                String::from("receive")
            } else {
                l.sends
                    .get(seq)
                    .map_or(String::from("send"), |r| r.kind.to_string())
            };
            return Err(format!(
                "{name}: {what} WR {seq} completed with {} (vendor_err 0x{:x}), which no valid request on this network can cause",
                wc.status, wc.vendor_err
            ));
        }
        if is_recv {
            let Some(r) = l.recvs.get_mut(seq).filter(|r| r.wr_id == wc.wr_id) else {
                return Err(bad());
            };
            r.completions += 1;
            if r.completions > 1 {
                return Err(format!(
                    "{name}: receive WR {seq} completed twice (now {}, first {:?})",
                    wc.status,
                    r.completion.map(|c| c.status)
                ));
            }
            r.completion = Some(wc);
            if wc.status != WcStatus::Success && wc.status != WcStatus::WrFlushErr {
                if let Some(ep) = l.epochs.get_mut(r.epoch as usize) {
                    ep.errors.push(wc.status);
                }
            }
            if seq < l.recv_cursor {
                return Err(format!(
                    "{name}: receive WR {seq} completed after a later receive WR"
                ));
            }
            if let Some(skipped) = l.recvs[l.recv_cursor..seq]
                .iter()
                .find(|r| r.completions == 0)
            {
                return Err(format!(
                    "{name}: receive WR {seq} completed ({}) before the earlier receive WR {}",
                    wc.status, skipped.seq
                ));
            }
            l.recv_cursor = seq + 1;
            return Ok(());
        }
        let Some(r) = l.sends.get_mut(seq).filter(|r| r.wr_id == wc.wr_id) else {
            return Err(bad());
        };
        r.completions += 1;
        if r.completions > 1 {
            return Err(format!(
                "{name}: {} WR {seq} completed twice (now {}, first {:?})",
                r.kind,
                wc.status,
                r.completion.map(|c| c.status)
            ));
        }
        r.completion = Some(wc);
        let ep = l.epochs.get_mut(r.epoch as usize);
        if let Some(ep) = ep {
            match (wc.status, ep.first_send_error) {
                (WcStatus::Success, Some((first, status))) => {
                    return Err(format!(
                        "{name}: {} WR {seq} completed with success after WR {first} of the same connection completed with {status} (after an error every later WR completes with WR_FLUSH_ERR)",
                        r.kind
                    ));
                }
                (WcStatus::Success, None) => {}
                (status, None) => ep.first_send_error = Some((seq as u32, status)),
                _ => {}
            }
        }
        if wc.status == WcStatus::Success {
            if !r.signaled {
                return Err(format!(
                    "{name}: unsignaled {} WR {seq} completed with success",
                    r.kind
                ));
            }
            if wc.opcode != r.kind.wc_opcode() {
                return Err(format!(
                    "{name}: {} WR {seq} completed as {:?}",
                    r.kind, wc.opcode
                ));
            }
        } else if wc.status != WcStatus::WrFlushErr {
            let ep = r.epoch as usize;
            if let Some(ep) = l.epochs.get_mut(ep) {
                ep.errors.push(wc.status);
            }
        }
        if seq < l.send_cursor {
            return Err(format!(
                "{name}: {} WR {seq} completed after a later WR of the same QP",
                l.sends[seq].kind
            ));
        }
        if let Some(skipped) = l.sends[l.send_cursor..seq]
            .iter()
            .find(|r| r.signaled && r.completions == 0)
        {
            return Err(format!(
                "{name}: WR {seq} completed ({}) before the earlier signaled {} WR {}",
                wc.status, skipped.kind, skipped.seq
            ));
        }
        l.send_cursor = seq + 1;
        Ok(())
    }

    // ---- the final checks ---------------------------------------------------------------

    /// Liveness: after the healed phase, every QP that is not in ERR has no work left.
    pub(crate) fn check_liveness(&self, world: &World) -> Result<(), String> {
        for l in &self.ends {
            let Some(qp) = world.nodes[l.info.node].hca().qp(l.info.qpn) else {
                return Err(format!("{} disappeared", l.name()));
            };
            if qp.state != QpState::Err && qp.send_queue_len() > 0 {
                return Err(format!(
                    "liveness: {} is in {} with {} send WQEs still outstanding {} after the network healed",
                    l.name(),
                    qp.state,
                    qp.send_queue_len(),
                    self.cfg.liveness_bound
                ));
            }
        }
        for l in &self.ends {
            if let Some(r) = l.sends.iter().find(|r| r.signaled && r.completions == 0) {
                return Err(format!(
                    "{}: signaled {} WR {} (posted at {}) never completed, yet the send queue is empty",
                    l.name(),
                    r.kind,
                    r.seq,
                    r.posted_at
                ));
            }
        }
        Ok(())
    }

    /// The highest sequence number of a WR known to have succeeded, per epoch.
    fn known_ok(&self, e: usize) -> Result<Vec<Option<u32>>, String> {
        let l = &self.ends[e];
        let mut m: Vec<Option<u32>> = vec![None; l.epochs.len()];
        for r in &l.sends {
            if r.completion.is_some_and(|c| c.status == WcStatus::Success) {
                let slot = &mut m[r.epoch as usize];
                *slot = Some(slot.map_or(r.seq, |s| s.max(r.seq)));
            }
        }
        for r in &l.sends {
            if let (Some(c), Some(max)) = (r.completion, m[r.epoch as usize]) {
                if c.status != WcStatus::Success && r.seq < max {
                    let around: Vec<String> = l
                        .sends
                        .iter()
                        .filter(|x| x.epoch == r.epoch && x.seq + 3 >= r.seq && x.seq <= max)
                        .map(|x| {
                            format!(
                                "{}:{}({}B,{}){}",
                                x.seq,
                                x.kind,
                                x.len,
                                if x.signaled { "sig" } else { "unsig" },
                                x.completion
                                    .map_or(String::from("-"), |c| format!("={:?}", c.status))
                            )
                        })
                        .collect();
                    return Err(format!(
                        "{}: {} WR {} failed ({}) although the later WR {max} of the same connection succeeded [{}]",
                        l.name(),
                        r.kind,
                        r.seq,
                        c.status,
                        around.join(" ")
                    ));
                }
            }
        }
        Ok(m)
    }

    fn is_known_ok(known: &[Option<u32>], r: &SendRecord) -> bool {
        r.transmittable && known[r.epoch as usize].is_some_and(|m| r.seq <= m)
    }

    /// Whether an error status is explained by what happened to the QP and the network.
    fn explained(&self, e: usize, epoch: u32, status: WcStatus) -> bool {
        let l = &self.ends[e];
        let p = &self.ends[l.info.peer];
        let ep = &l.epochs[epoch as usize];
        let peer_ep = p.epochs.get(epoch as usize);
        match status {
            WcStatus::Success => true,
            WcStatus::WrFlushErr => ep.workload_err || !ep.errors.is_empty(),
            WcStatus::RetryExcErr => {
                l.info.qp_type == QpType::Rc
                    && (self.cfg.path_can_fail(l.info.node, l.info.peer_node)
                        || ep.workload_err
                        || peer_ep.is_some_and(|p| p.workload_err || p.engine_err))
            }
            WcStatus::RnrRetryExcErr => {
                l.info.qp_type == QpType::Rc && self.cfg.rnr_retry < 7 && p.late_recvs
            }
            _ => false,
        }
    }

    fn check_errors(&self) -> Result<(), String> {
        let disrupted = self
            .ends
            .iter()
            .any(|l| l.epochs.iter().any(|e| e.workload_err));
        let clean = self.cfg.faults.is_empty()
            && !disrupted
            && !(self.cfg.rnr_retry < 7 && self.ends.iter().any(|l| l.late_recvs));
        for (e, l) in self.ends.iter().enumerate() {
            let sends = l.sends.iter().filter_map(|r| {
                r.completion
                    .map(|c| (c, r.epoch, r.kind.to_string(), r.seq))
            });
            let recvs = l.recvs.iter().filter_map(|r| {
                r.completion
                    .map(|c| (c, r.epoch, String::from("receive"), r.seq))
            });
            for (c, epoch, kind, seq) in sends.chain(recvs) {
                if c.status == WcStatus::Success {
                    continue;
                }
                if clean {
                    return Err(format!(
                        "{}: {kind} WR {seq} completed with {} (vendor_err 0x{:x}) although the fault mix is empty and nothing disrupted the QP",
                        l.name(),
                        c.status,
                        c.vendor_err
                    ));
                }
                if !self.explained(e, epoch, c.status) {
                    return Err(format!(
                        "{}: {kind} WR {seq} completed with {} (vendor_err 0x{:x}) in epoch {epoch}, which nothing explains",
                        l.name(),
                        c.status,
                        c.vendor_err
                    ));
                }
            }
            for (i, ep) in l.epochs.iter().enumerate() {
                if ep.engine_err && ep.errors.is_empty() && !ep.workload_err {
                    return Err(format!(
                        "{}: went to ERR in epoch {i} without any error completion",
                        l.name()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Builds the memory expectations of every slot and checks the message-level rules.
    fn expectations(&self, world: &World) -> Result<Vec<Expect>, String> {
        let mut out = Vec::new();
        let known: Vec<Vec<Option<u32>>> = (0..self.ends.len())
            .map(|e| self.known_ok(e))
            .collect::<Result<_, _>>()?;
        for (s, l) in self.ends.iter().enumerate() {
            let r_end = l.info.peer;
            let recv = &self.ends[r_end];
            let snode = l.info.node;
            let rnode = recv.info.node;
            let sinit = &world.nodes[snode].initial;
            let rinit = &world.nodes[rnode].initial;
            let payload = |r: &SendRecord| slice(sinit, r.local, r.len as usize).to_vec();
            let kn = &known[s];
            // WRITE targets (UC ones are refined by the delivery check below).
            if l.info.qp_type == QpType::Rc {
                for r in l
                    .sends
                    .iter()
                    .filter(|r| r.kind.is_write() && r.transmittable)
                {
                    if r.len == 0 {
                        continue;
                    }
                    let p = payload(r);
                    out.push(Expect {
                        node: rnode,
                        addr: r.remote,
                        len: p.len(),
                        rule: if Self::is_known_ok(kn, r) {
                            Rule::Exact(p)
                        } else {
                            Rule::InitialOr(p)
                        },
                        end: s,
                        seq: r.seq,
                        what: "RDMA WRITE target",
                    });
                }
            }
            // READ destinations.
            for r in l
                .sends
                .iter()
                .filter(|r| r.kind == OpKind::RdmaRead && r.transmittable)
            {
                if r.len == 0 {
                    continue;
                }
                let src = slice(rinit, r.remote, r.len as usize).to_vec();
                out.push(Expect {
                    node: snode,
                    addr: r.local,
                    len: src.len(),
                    rule: if Self::is_known_ok(kn, r) {
                        Rule::Exact(src)
                    } else {
                        Rule::InitialOr(src)
                    },
                    end: s,
                    seq: r.seq,
                    what: "RDMA READ destination",
                });
            }
            // Atomics, per epoch (each epoch has its own word).
            for epoch in 0..l.epochs.len() as u32 {
                let ops: Vec<&SendRecord> = l
                    .sends
                    .iter()
                    .filter(|r| r.kind.is_atomic() && r.transmittable && r.epoch == epoch)
                    .collect();
                let Some(first) = ops.first() else { continue };
                let word = first.remote;
                let mut v = u64_at(rinit, (word - BASE) as usize);
                let mut cands = vec![v];
                let mut certain = true;
                for r in &ops {
                    if r.remote != word {
                        return Err(format!(
                            "sim bug: atomics of one epoch on two words ({})",
                            l.name()
                        ));
                    }
                    let init_res = slice(sinit, r.local, 8).to_vec();
                    if certain && Self::is_known_ok(kn, r) {
                        out.push(Expect {
                            node: snode,
                            addr: r.local,
                            len: 8,
                            rule: Rule::Exact(v.to_le_bytes().to_vec()),
                            end: s,
                            seq: r.seq,
                            what: "atomic result (original value)",
                        });
                        v = apply(r.kind, r.compare, r.swap_add, v);
                        cands = vec![v];
                    } else {
                        certain = false;
                        let cur = cands.last().copied().unwrap_or(v);
                        out.push(Expect {
                            node: snode,
                            addr: r.local,
                            len: 8,
                            rule: Rule::OneOf(vec![init_res, cur.to_le_bytes().to_vec()]),
                            end: s,
                            seq: r.seq,
                            what: "atomic result of an atomic with unknown outcome",
                        });
                        cands.push(apply(r.kind, r.compare, r.swap_add, cur));
                    }
                }
                out.push(Expect {
                    node: rnode,
                    addr: word,
                    len: 8,
                    rule: Rule::OneOf(cands.iter().map(|c| c.to_le_bytes().to_vec()).collect()),
                    end: s,
                    seq: first.seq,
                    what: "atomic word (executed once per successful atomic)",
                });
            }
            // Messages that consume receives.
            match l.info.qp_type {
                QpType::Rc => self.rc_delivery(s, &known[s], world, &mut out)?,
                _ => self.unreliable_delivery(s, world, &mut out)?,
            }
        }
        Ok(out)
    }

    /// RC: the k-th receive of an epoch gets the k-th message of the epoch, and a message known
    /// to have succeeded was received.
    fn rc_delivery(
        &self,
        s: usize,
        known: &[Option<u32>],
        world: &World,
        out: &mut Vec<Expect>,
    ) -> Result<(), String> {
        let l = &self.ends[s];
        let r_end = l.info.peer;
        let recv = &self.ends[r_end];
        let sinit = &world.nodes[l.info.node].initial;
        let mut msgs: BTreeMap<(u32, u32), &SendRecord> = BTreeMap::new();
        for r in &l.sends {
            if let Some(k) = r.consuming_index {
                msgs.insert((r.epoch, k), r);
            }
        }
        let mut received: BTreeMap<(u32, u32), ()> = BTreeMap::new();
        let mut prev_failed: BTreeMap<u32, u32> = BTreeMap::new();
        for rr in &recv.recvs {
            let msg = msgs.get(&(rr.epoch, rr.index)).copied();
            let c = rr.completion;
            if let Some(c) = c.filter(|c| c.status == WcStatus::Success) {
                if let Some(&f) = prev_failed.get(&rr.epoch) {
                    return Err(format!(
                        "{}: receive {} succeeded after receive {f} of the same connection did not",
                        recv.name(),
                        rr.seq
                    ));
                }
                let Some(m) = msg else {
                    return Err(format!(
                        "{}: receive {} (index {} of epoch {}) completed with {} bytes, but the peer sent no such message",
                        recv.name(),
                        rr.seq,
                        rr.index,
                        rr.epoch,
                        c.byte_len
                    ));
                };
                let want_opcode = if m.kind.is_send() {
                    WcOpcode::Recv
                } else {
                    WcOpcode::RecvRdmaWithImm
                };
                let want_imm = m.kind.has_imm().then_some(m.imm);
                if c.opcode != want_opcode || c.imm_data != want_imm || c.byte_len != m.len {
                    return Err(format!(
                        "{}: receive {} got {:?} {} bytes imm {:?}; the message it belongs to is {} WR {} of {}, {} bytes imm {:?}",
                        recv.name(),
                        rr.seq,
                        c.opcode,
                        c.byte_len,
                        c.imm_data,
                        m.kind,
                        m.seq,
                        l.name(),
                        m.len,
                        want_imm
                    ));
                }
                received.insert((rr.epoch, rr.index), ());
                if m.kind.is_send() && m.len > 0 {
                    out.push(Expect {
                        node: recv.info.node,
                        addr: rr.addr,
                        len: m.len as usize,
                        rule: Rule::Exact(slice(sinit, m.local, m.len as usize).to_vec()),
                        end: r_end,
                        seq: rr.seq,
                        what: "RC receive buffer",
                    });
                }
            } else {
                prev_failed.entry(rr.epoch).or_insert(rr.seq);
                if let Some(m) = msg.filter(|m| m.kind.is_send() && m.len > 0) {
                    out.push(Expect {
                        node: recv.info.node,
                        addr: rr.addr,
                        len: m.len as usize,
                        rule: Rule::InitialOr(slice(sinit, m.local, m.len as usize).to_vec()),
                        end: r_end,
                        seq: rr.seq,
                        what: "RC receive buffer (not completed)",
                    });
                }
            }
        }
        for m in msgs.values() {
            if Self::is_known_ok(known, m)
                && !received.contains_key(&(m.epoch, m.consuming_index.unwrap_or(u32::MAX)))
            {
                return Err(format!(
                    "{}: {} WR {} ({} bytes, epoch {}) succeeded, but {} never received it",
                    l.name(),
                    m.kind,
                    m.seq,
                    m.len,
                    m.epoch,
                    recv.name()
                ));
            }
        }
        Ok(())
    }

    /// UC and UD: every received message is one the peer sent; at most once and in order unless
    /// the link duplicates or reorders; exactly once on a perfect link.
    fn unreliable_delivery(
        &self,
        s: usize,
        world: &World,
        out: &mut Vec<Expect>,
    ) -> Result<(), String> {
        let l = &self.ends[s];
        let r_end = l.info.peer;
        let recv = &self.ends[r_end];
        let ud = l.info.qp_type == QpType::Ud;
        let sinit = &world.nodes[l.info.node].initial;
        let rmem = world.nodes[recv.info.node].memory();
        let link = self.cfg.link(l.info.node, recv.info.node);
        let ordered = link.reorder == 0.0;
        let repeat_ok = link.dup > 0.0;
        let strict = !self.cfg.path_can_fail(l.info.node, recv.info.node)
            && link.dup == 0.0
            && !recv.late_recvs
            && l.epochs.len() == 1
            && !l.epochs[0].workload_err
            && !recv.epochs[0].workload_err;
        let cands: Vec<&SendRecord> = l
            .sends
            .iter()
            .filter(|r| r.consuming_index.is_some() && r.transmittable)
            .collect();
        let mut matched = vec![0u32; cands.len()];
        let mut last: Option<usize> = None;
        let off = if ud { 40 } else { 0 };
        for rr in &recv.recvs {
            let Some(c) = rr.completion.filter(|c| c.status == WcStatus::Success) else {
                if !ud {
                    out.push(Expect {
                        node: recv.info.node,
                        addr: rr.addr,
                        len: rr.len as usize,
                        rule: Rule::Any,
                        end: r_end,
                        seq: rr.seq,
                        what: "UC receive buffer (not completed)",
                    });
                }
                continue;
            };
            let Some(len) = c.byte_len.checked_sub(off) else {
                return Err(format!(
                    "{}: UD receive {} reports {} bytes, fewer than the 40-byte GRH area",
                    recv.name(),
                    rr.seq,
                    c.byte_len
                ));
            };
            let got = |n: usize| slice(rmem, rr.addr + off as u64, n);
            let fits = |m: &SendRecord| {
                let kind_ok = match c.opcode {
                    WcOpcode::Recv => m.kind.is_send(),
                    WcOpcode::RecvRdmaWithImm => m.kind == OpKind::RdmaWriteWithImm,
                    _ => false,
                };
                kind_ok
                    && m.len == len
                    && c.imm_data == m.kind.has_imm().then_some(m.imm)
                    && (!m.kind.is_send()
                        || (len as usize <= rr.len as usize
                            && got(len as usize) == slice(sinit, m.local, len as usize)))
            };
            let pick = (0..cands.len()).find(|&i| {
                fits(cands[i])
                    && if ordered {
                        last.is_none_or(|x| i > x) || (repeat_ok && last == Some(i))
                    } else {
                        repeat_ok || matched[i] == 0
                    }
            });
            let Some(i) = pick else {
                let any = (0..cands.len()).find(|&i| fits(cands[i]));
                return Err(match any {
                    Some(i) => format!(
                        "{}: receive {} delivered {} WR {} of {} again or out of order ({} bytes; link {}: dup {} reorder {})",
                        recv.name(),
                        rr.seq,
                        cands[i].kind,
                        cands[i].seq,
                        l.name(),
                        len,
                        if matched[i] > 0 { "already delivered" } else { "earlier than one delivered before" },
                        link.dup,
                        link.reorder
                    ),
                    None => format!(
                        "{}: receive {} got {:?} of {} bytes imm {:?} that {} never sent",
                        recv.name(),
                        rr.seq,
                        c.opcode,
                        len,
                        c.imm_data,
                        l.name()
                    ),
                });
            };
            matched[i] += 1;
            last = Some(i);
            let m = cands[i];
            if ud {
                // The GRH area holds what the IP header of the datagram said (RoCEv2: IPv4
                // after 20 zero bytes, or IPv6): BTH, DETH, ImmDt, payload, pad, ICRC.
                let imm = if m.kind.has_imm() { 4 } else { 0 };
                let udp_len = 12 + 8 + imm + len as usize + pad_for(len as usize) as usize + 4;
                let (from, to) = (
                    world.nodes[l.info.node].addr,
                    world.nodes[recv.info.node].addr,
                );
                let Some(grh) = softib_link::framing::grh_area(from, to, udp_len) else {
                    return Err(format!("{}: no GRH area from {from} to {to}", recv.name()));
                };
                let mut want = grh.to_vec();
                want.extend_from_slice(slice(sinit, m.local, len as usize));
                out.push(Expect {
                    node: recv.info.node,
                    addr: rr.addr,
                    len: want.len(),
                    rule: Rule::Exact(want),
                    end: r_end,
                    seq: rr.seq,
                    what: "UD receive buffer",
                });
            } else {
                // The bytes of this message are checked above; the rest of the buffer may hold
                // what a dropped message left there.
                out.push(Expect {
                    node: recv.info.node,
                    addr: rr.addr,
                    len: rr.len as usize,
                    rule: Rule::Any,
                    end: r_end,
                    seq: rr.seq,
                    what: "UC receive buffer",
                });
            }
        }
        if strict {
            if let Some(i) = (0..cands.len()).find(|&i| matched[i] != 1) {
                return Err(format!(
                    "{}: {} WR {} ({} bytes) was received {} times by {} over a perfect link with receives always posted",
                    l.name(),
                    cands[i].kind,
                    cands[i].seq,
                    cands[i].len,
                    matched[i],
                    recv.name()
                ));
            }
        }
        if !ud {
            for r in l
                .sends
                .iter()
                .filter(|r| r.kind.is_write() && r.transmittable)
            {
                if r.len == 0 {
                    continue;
                }
                let whole = cands
                    .iter()
                    .position(|c| c.seq == r.seq)
                    .is_some_and(|i| matched[i] > 0);
                let p = slice(sinit, r.local, r.len as usize).to_vec();
                out.push(Expect {
                    node: recv.info.node,
                    addr: r.remote,
                    len: p.len(),
                    rule: if whole {
                        Rule::Exact(p)
                    } else {
                        Rule::InitialOr(p)
                    },
                    end: s,
                    seq: r.seq,
                    what: "UC RDMA WRITE target",
                });
            }
        }
        Ok(())
    }

    /// Every byte of every HCA's memory is what the model allows.
    fn check_memory(&self, world: &World, mut expects: Vec<Expect>) -> Result<(), String> {
        expects.sort_by_key(|x| (x.node, x.addr));
        let mut i = 0;
        for (node, n) in world.nodes.iter().enumerate() {
            let mem = n.memory();
            let init = &n.initial;
            let mut cursor = 0usize;
            let gap = |from: usize, to: usize| -> Result<(), String> {
                if mem[from..to] == init[from..to] {
                    return Ok(());
                }
                let at = (from..to).find(|&k| mem[k] != init[k]).unwrap_or(from);
                let addr = BASE + at as u64;
                let inside = self.mrs[node]
                    .iter()
                    .any(|&(a, l)| addr >= a && addr < a + l);
                Err(format!(
                    "hca{} memory at 0x{addr:x} changed from 0x{:02x} to 0x{:02x}: {}",
                    node + 1,
                    init[at],
                    mem[at],
                    if inside {
                        "inside a registered region, where no operation writes"
                    } else {
                        "OUTSIDE every registered region"
                    }
                ))
            };
            while i < expects.len() && expects[i].node == node {
                let x = &expects[i];
                let start = (x.addr - BASE) as usize;
                if start < cursor {
                    return Err(format!(
                        "sim bug: overlapping expectations at 0x{:x} ({})",
                        x.addr, x.what
                    ));
                }
                gap(cursor, start)?;
                let got = &mem[start..start + x.len];
                let ini = &init[start..start + x.len];
                let ok = match &x.rule {
                    Rule::Exact(b) => got == b.as_slice(),
                    Rule::InitialOr(b) => got
                        .iter()
                        .zip(ini)
                        .zip(b)
                        .all(|((g, i), w)| g == i || g == w),
                    Rule::OneOf(v) => v.iter().any(|b| got == b.as_slice()),
                    Rule::Any => true,
                };
                if !ok {
                    let l = &self.ends[x.end];
                    let rec = if x.what.contains("receive") {
                        String::from("receive")
                    } else {
                        l.sends.get(x.seq as usize).map_or(String::new(), |r| {
                            format!(
                                "{} ({} bytes, status {:?})",
                                r.kind,
                                r.len,
                                r.completion.map(|c| c.status)
                            )
                        })
                    };
                    let exact = matches!(x.rule, Rule::Exact(_));
                    let first_bad = match &x.rule {
                        Rule::Exact(b) | Rule::InitialOr(b) => (0..x.len)
                            .find(|&k| got[k] != b[k] && (exact || got[k] != ini[k]))
                            .map_or(String::new(), |k| {
                                format!(
                                    "; first bad byte at +{k}: 0x{:02x}, expected 0x{:02x} (initial 0x{:02x})",
                                    got[k], b[k], ini[k]
                                )
                            }),
                        Rule::OneOf(v) => format!(
                            "; found {:02x?}, allowed {:02x?}",
                            got,
                            v
                        ),
                        Rule::Any => String::new(),
                    };
                    return Err(format!(
                        "hca{} {} at 0x{:x} ({} bytes) of {} WR {} {rec} is wrong{first_bad}",
                        node + 1,
                        x.what,
                        x.addr,
                        x.len,
                        l.name(),
                        x.seq
                    ));
                }
                cursor = start + x.len;
                i += 1;
            }
            gap(cursor, mem.len())?;
        }
        Ok(())
    }

    /// Every safety check that needs the whole run.
    pub(crate) fn final_check(&self, world: &World) -> Result<(), String> {
        self.check_errors()?;
        let expects = self.expectations(world)?;
        self.check_memory(world, expects)
    }
}
