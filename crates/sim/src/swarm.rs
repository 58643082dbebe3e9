//! The `swarm` module deals with *configurations*: everything a run does — how many HCAs, which
//! QP pairs of which types between which HCAs, the MTU, every fault probability, the partitions,
//! the QP timers and retry counts, the operation mix — is derived from one `u64` seed
//! (swarm testing: each seed switches whole features on or off, so that rare combinations are
//! met). Explicit knobs ([`Overrides`]) replace what the swarm chose; the swarm still draws every
//! value first, so an override changes only what it names.

use std::fmt;

use softib_engine::verbs::QpType;
use softib_engine::{Duration, Instant};
use softib_wire::aeth::rnr_timer_usec;
use softib_wire::Mtu;

use crate::net::{DelayModel, LinkFaults, Partition};
use crate::rng::SimRng;
use crate::workload::OpKind;

/// The largest number of HCAs a configuration has.
pub const MAX_HCAS: usize = 4;

/// The virtual time at which a run starts.
pub const START: Instant = Instant::from_micros(1_000_000);

/// The fault mix of a run: the largest probability of each fault over all links (each link
/// direction draws its own value up to it, unless an override fixes it) and whether partitions
/// happen.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultMix {
    /// Packet loss.
    pub loss: f64,
    /// Packet duplication.
    pub dup: f64,
    /// Reordering (an extra random delay).
    pub reorder: f64,
    /// Bit corruption (caught by the CRC and dropped).
    pub corrupt: f64,
    /// Whether links are partitioned for a while.
    pub partitions: bool,
}

impl FaultMix {
    /// No faults at all.
    pub const NONE: FaultMix = FaultMix {
        loss: 0.0,
        dup: 0.0,
        reorder: 0.0,
        corrupt: 0.0,
        partitions: false,
    };

    /// Whether the network is perfect (only in-order delay).
    pub fn is_empty(&self) -> bool {
        self.loss == 0.0
            && self.dup == 0.0
            && self.reorder == 0.0
            && self.corrupt == 0.0
            && !self.partitions
    }
}

/// Explicit knobs. `None` leaves the swarm's choice.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Overrides {
    /// The number of HCAs (1..=4).
    pub hcas: Option<usize>,
    /// The number of QP pairs.
    pub pairs: Option<usize>,
    /// Every QP pair has this type.
    pub qp_type: Option<QpType>,
    /// The path MTU (and the ports' active MTU).
    pub mtu: Option<Mtu>,
    /// Loss probability on every link direction.
    pub loss: Option<f64>,
    /// Duplication probability on every link direction.
    pub dup: Option<f64>,
    /// Reordering probability on every link direction.
    pub reorder: Option<f64>,
    /// Corruption probability on every link direction.
    pub corrupt: Option<f64>,
    /// Whether partitions happen.
    pub partitions: Option<bool>,
    /// Whether the workload moves QPs to ERR and reconnects them.
    pub disruptions: Option<bool>,
    /// Whether receives are sometimes posted late (causing RNR NAKs or UC/UD drops).
    pub late_recvs: Option<bool>,
    /// The number of work requests each QP end posts at most.
    pub max_ops: Option<usize>,
    /// Only these operations (bit `i` is [`OpKind::ALL`]`[i]`); the swarm's weights are kept
    /// for the ones that remain (weight 1 where the swarm had switched one off).
    pub ops: Option<u8>,
    /// Log every packet sent and delivered (changes nothing else in the run).
    pub trace: bool,
    /// Whether every HCA is a device of one daemon, so that RC QPs go in-process (large
    /// segments) from RTR, as the daemon's RoCE devices decide for QPs between them.
    pub in_process: Option<bool>,
    /// Whether the HCAs' RoCEv2 addresses are IPv6 (else IPv4, where the ICRC covers the IPv4
    /// Identification of each GSO segment).
    pub ipv6: Option<bool>,
    /// Whether a message's datagrams leave in GSO runs (else each alone, in the order the
    /// engines built them).
    pub gso: Option<bool>,
}

impl Overrides {
    /// Exactly this fault mix on every link (and disruptions off, so that every error
    /// completion must come from the network).
    pub fn faults(mix: FaultMix) -> Overrides {
        Overrides {
            loss: Some(mix.loss),
            dup: Some(mix.dup),
            reorder: Some(mix.reorder),
            corrupt: Some(mix.corrupt),
            partitions: Some(mix.partitions),
            disruptions: Some(false),
            ..Overrides::default()
        }
    }

    /// The flags as `softib sim` spells them (`--loss 10% --partitions off` ...), for a
    /// reproduction line.
    pub fn cli_flags(&self) -> String {
        let mut s = String::new();
        for (name, v) in [
            ("loss", self.loss),
            ("dup", self.dup),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
        ] {
            if let Some(p) = v {
                s.push_str(&format!(" --{name} {}", percent(p)));
            }
        }
        for (name, v) in [
            ("partitions", self.partitions),
            ("disruptions", self.disruptions),
            ("late-recvs", self.late_recvs),
            ("in-process", self.in_process),
            ("ipv6", self.ipv6),
            ("gso", self.gso),
        ] {
            if let Some(b) = v {
                s.push_str(&format!(" --{name} {}", if b { "on" } else { "off" }));
            }
        }
        if let Some(t) = self.qp_type {
            s.push_str(&format!(" --qp-type {}", t.to_string().to_lowercase()));
        }
        for (name, v) in [
            ("hcas", self.hcas),
            ("pairs", self.pairs),
            ("max-ops", self.max_ops),
        ] {
            if let Some(n) = v {
                s.push_str(&format!(" --{name} {n}"));
            }
        }
        if let Some(m) = self.mtu.and_then(|m| m.bytes()) {
            s.push_str(&format!(" --mtu {m}"));
        }
        if let Some(mask) = self.ops {
            let names: Vec<String> = OpKind::ALL
                .iter()
                .enumerate()
                .filter(|&(i, _)| mask & (1 << i) != 0)
                .map(|(_, k)| k.to_string().to_lowercase())
                .collect();
            s.push_str(&format!(" --ops {}", names.join(",")));
        }
        s
    }
}

/// `0.1` as `10%`, `0.125` as `12.5%`.
pub fn percent(p: f64) -> String {
    let x = p * 100.0;
    if (x - x.round()).abs() < 1e-9 {
        format!("{}%", x.round() as i64)
    } else {
        format!("{}%", (x * 1000.0).round() / 1000.0)
    }
}

/// One QP pair of the workload: a QP on each of two HCAs (the same HCA for a loopback pair).
#[derive(Debug, Clone, PartialEq)]
pub struct PairConfig {
    /// The transport.
    pub qp_type: QpType,
    /// The HCA of each end.
    pub hca: [usize; 2],
    /// How many work requests each end posts.
    pub ops: [usize; 2],
    /// Whether each end's QP signals every work request.
    pub sq_sig_all: [bool; 2],
    /// The largest message (READ, WRITE, SEND) either end sends.
    pub max_len: u32,
    /// When (after the start) the workload moves one end to ERR and then reconnects the pair.
    pub disruptions: Vec<Duration>,
}

/// Everything a run is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The seed everything came from.
    pub seed: u64,
    /// The number of HCAs; HCA `i` has LID `i + 1`.
    pub hcas: usize,
    /// The path MTU of every connected QP and the active MTU of every port.
    pub mtu: Mtu,
    /// The QP pairs.
    pub pairs: Vec<PairConfig>,
    /// The fault mix.
    pub faults: FaultMix,
    /// The faults of each link direction, `links[from * hcas + to]`.
    pub links: Vec<LinkFaults>,
    /// Link latency.
    pub delay: DelayModel,
    /// The partitions.
    pub partitions: Vec<Partition>,
    /// Local ACK timeout exponent of RC QPs (4.096 us x 2^timeout).
    pub timeout: u8,
    /// RC retry count.
    pub retry_cnt: u8,
    /// RC RNR retry count (7: infinite).
    pub rnr_retry: u8,
    /// The RNR NAK timer code responders send.
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomic requests per RC QP (both directions).
    pub max_rd_atomic: u8,
    /// Send queue depth.
    pub max_send_wr: u32,
    /// How long the faulty (safety) phase lasts.
    pub safety: Duration,
    /// How long, after the network heals, the surviving RC QPs may take to finish.
    pub liveness_bound: Duration,
    /// Relative weights of the operations, indexed like [`OpKind::ALL`].
    pub op_weights: [u32; 7],
    /// Probability that a work request is signaled (when the QP does not signal all).
    pub signal_prob: f64,
    /// Probability that a small SEND or WRITE is posted inline.
    pub inline_prob: f64,
    /// Probability that a receive is posted late.
    pub late_recv_prob: f64,
    /// How late at most.
    pub late_recv_max: Duration,
    /// Whether the workload disrupts QP pairs.
    pub disruptions: bool,
    /// Whether RC QPs go in-process (every HCA a local peer of the others): their SENDs and
    /// WRITEs go in segments of `IN_PROCESS_SEGMENT` bytes, with messages up to three of them
    /// long.
    pub in_process: bool,
    /// Whether the HCAs' RoCEv2 addresses are IPv6 (`fd00::N`) rather than IPv4 (`10.0.0.N`).
    pub ipv6: bool,
    /// Whether each HCA's datagrams leave in GSO runs, each segment sealed for the IPv4
    /// Identification its place in its run gives it.
    pub gso: bool,
}

impl Config {
    /// The local ACK timeout.
    pub fn ack_timeout(&self) -> Duration {
        Duration::local_ack_timeout(self.timeout).unwrap_or(Duration::from_millis(100))
    }

    /// The RNR wait the responders ask for.
    pub fn rnr_wait(&self) -> Duration {
        Duration::from_micros(u64::from(rnr_timer_usec(self.min_rnr_timer)))
    }

    /// The faults of `from -> to`.
    pub fn link(&self, from: usize, to: usize) -> LinkFaults {
        self.links[from * self.hcas + to]
    }

    /// Whether the path between HCAs `a` and `b` (either direction) can lose packets or make
    /// PSN gaps: the faults that may exhaust an RC requester's retries.
    pub fn path_can_fail(&self, a: usize, b: usize) -> bool {
        self.link(a, b).can_lose_or_reorder()
            || self.link(b, a).can_lose_or_reorder()
            || self
                .partitions
                .iter()
                .any(|p| p.links.contains(&(a, b)) || p.links.contains(&(b, a)))
    }
}

fn mtu_bytes(m: Mtu) -> u32 {
    m.bytes().unwrap_or(256) as u32
}

/// Derives a whole configuration from `seed`, then applies `o`.
pub fn derive(seed: u64, o: &Overrides) -> Config {
    let mut rng = SimRng::new(seed ^ 0x5157_4152_4D00_0001);
    let hcas = (rng.range(2, MAX_HCAS as u64) as usize).clamp(1, MAX_HCAS);
    let hcas = o.hcas.unwrap_or(hcas).clamp(1, MAX_HCAS);
    let mtu = rng.pick(&[
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ]);
    let mtu = o.mtu.unwrap_or(mtu);

    // QP timers: an ACK timeout from 0.5 ms to 16.8 ms; mostly the retry counts that keep QPs
    // alive under heavy loss (7, and RNR 7 = infinite), sometimes less.
    let timeout = rng.range(7, 12) as u8;
    let retry_cnt = if rng.chance(0.8) {
        7
    } else {
        rng.range(3, 6) as u8
    };
    let rnr_retry = if rng.chance(0.85) {
        7
    } else {
        rng.range(2, 6) as u8
    };
    let min_rnr_timer = rng.range(1, 14) as u8;
    let max_rd_atomic = rng.pick(&[1u8, 2, 4, 8, 16]);
    let max_send_wr = rng.pick(&[8u32, 16, 32, 64, 128]);

    // Faults: each switched on for half of the seeds, up to 30 %.
    let draw = |rng: &mut SimRng| {
        if rng.chance(0.5) {
            (rng.unit() * 0.30 * 1000.0).round() / 1000.0
        } else {
            0.0
        }
    };
    let mut faults = FaultMix {
        loss: draw(&mut rng),
        dup: draw(&mut rng),
        reorder: draw(&mut rng),
        corrupt: draw(&mut rng),
        partitions: rng.chance(0.25),
    };
    if let Some(p) = o.loss {
        faults.loss = p;
    }
    if let Some(p) = o.dup {
        faults.dup = p;
    }
    if let Some(p) = o.reorder {
        faults.reorder = p;
    }
    if let Some(p) = o.corrupt {
        faults.corrupt = p;
    }
    if let Some(b) = o.partitions {
        faults.partitions = b;
    }
    // Each direction of each link gets its own share of the mix (exact values when overridden).
    let mut links = Vec::with_capacity(hcas * hcas);
    for _ in 0..hcas * hcas {
        let share = |rng: &mut SimRng, max: f64, fixed: bool| {
            let u = 0.25 + 0.75 * rng.unit();
            if fixed {
                max
            } else {
                max * u
            }
        };
        links.push(LinkFaults {
            loss: share(&mut rng, faults.loss, o.loss.is_some()),
            dup: share(&mut rng, faults.dup, o.dup.is_some()),
            reorder: share(&mut rng, faults.reorder, o.reorder.is_some()),
            corrupt: share(&mut rng, faults.corrupt, o.corrupt.is_some()),
        });
    }
    let min = rng.range(1, 5);
    let mean = rng.range(1, 20);
    let delay = DelayModel {
        min: Duration::from_micros(min),
        mean: Duration::from_micros(mean),
        cap: Duration::from_micros(min + 8 * mean),
        reorder_max: Duration::from_micros(rng.range(20, 300)),
    };

    let ack = Duration::local_ack_timeout(timeout).unwrap_or(Duration::from_millis(1));
    let ack_us = ack.as_micros();
    let safety_us = (ack_us * rng.range(8, 40)).clamp(5_000, 300_000);
    let safety = Duration::from_micros(safety_us);

    let mut partitions = Vec::new();
    let count = rng.range(1, 3);
    for _ in 0..count {
        let start = START + Duration::from_micros(rng.below(safety_us));
        let len = Duration::from_micros((ack_us * rng.range(1, 12)) / 2);
        let kind = rng.below(3);
        let a = rng.below(hcas as u64) as usize;
        let mut b = rng.below(hcas as u64) as usize;
        if hcas > 1 && b == a {
            b = (a + 1) % hcas;
        }
        let (links, what) = match kind {
            _ if hcas == 1 => (Vec::new(), String::from("nothing (one HCA)")),
            0 => (
                vec![(a, b), (b, a)],
                format!("hca{} <-> hca{}", a + 1, b + 1),
            ),
            1 => (vec![(a, b)], format!("hca{} -> hca{}", a + 1, b + 1)),
            _ => {
                let mut l = Vec::new();
                for x in (0..hcas).filter(|&x| x != a) {
                    l.push((a, x));
                    l.push((x, a));
                }
                (l, format!("hca{} isolated", a + 1))
            }
        };
        partitions.push(Partition {
            start,
            end: start + len,
            links,
            what,
        });
    }
    if !faults.partitions {
        partitions.clear();
    }

    // The operation mix: each operation switched off for some seeds.
    let mut op_weights = [0u32; 7];
    for w in &mut op_weights {
        *w = if rng.chance(0.25) {
            0
        } else {
            rng.range(1, 10) as u32
        };
    }
    if let Some(mask) = o.ops {
        for (i, w) in op_weights.iter_mut().enumerate() {
            *w = if mask & (1 << i) == 0 { 0 } else { (*w).max(1) };
        }
    }
    if op_weights.iter().all(|&w| w == 0) {
        op_weights[0] = 1;
    }
    let signal_prob = match rng.below(3) {
        0 => 1.0,
        1 => 0.5 + rng.unit() * 0.5,
        _ => 0.1 + rng.unit() * 0.4,
    };
    let inline_prob = if rng.chance(0.5) {
        rng.unit() * 0.5
    } else {
        0.0
    };
    let late = rng.chance(0.4);
    let late_recv_prob = 0.1 + rng.unit() * 0.5;
    let late_recv_max = Duration::from_micros(
        (rng.range(1, 30) * u64::from(rnr_timer_usec(min_rnr_timer))).min(3 * ack_us),
    );
    let late_recv_prob = if o.late_recvs.unwrap_or(late) {
        late_recv_prob
    } else {
        0.0
    };
    let disruptions = o.disruptions.unwrap_or(rng.chance(0.3));

    let npairs = o.pairs.unwrap_or(rng.range(1, 8) as usize).max(1);
    let max_ops = o.max_ops.unwrap_or(100);
    let mut pairs = Vec::with_capacity(npairs);
    for _ in 0..npairs {
        let t = rng.weighted(&[55, 25, 20]);
        let qp_type = o.qp_type.unwrap_or([QpType::Rc, QpType::Uc, QpType::Ud][t]);
        let a = rng.below(hcas as u64) as usize;
        let mut b = rng.below(hcas as u64) as usize;
        if hcas > 1 && a == b && !rng.chance(0.1) {
            b = (a + 1 + rng.below(hcas as u64 - 1) as usize) % hcas;
        }
        let ops_a = rng.range(1, max_ops as u64) as usize;
        let ops_b = if rng.chance(0.3) {
            0
        } else {
            rng.range(0, max_ops as u64) as usize
        };
        let sq_sig_all = [rng.chance(0.2), rng.chance(0.2)];
        let m = mtu_bytes(mtu);
        let max_len = match qp_type {
            QpType::Ud => m,
            _ => (m * rng.range(1, 3) as u32 + rng.below(u64::from(m)) as u32).min(12_288),
        };
        let mut d = Vec::new();
        for _ in 0..rng.range(0, 2) {
            d.push(Duration::from_micros(rng.below(safety_us)));
        }
        d.sort();
        if !disruptions {
            d.clear();
        }
        pairs.push(PairConfig {
            qp_type,
            hca: [a, b],
            ops: [ops_a.min(max_ops), ops_b.min(max_ops)],
            sq_sig_all,
            max_len,
            disruptions: d,
        });
    }

    // Drawn from a stream of its own, so that every other choice of a seed stays what it was
    // before this knob existed.
    let mut ip_rng = SimRng::new(seed ^ 0x5157_4152_4D00_0002);
    let in_process = o.in_process.unwrap_or_else(|| ip_rng.chance(0.25));
    if in_process {
        let seg = u64::from(softib_engine::IN_PROCESS_SEGMENT);
        for pc in pairs.iter_mut().filter(|pc| pc.qp_type == QpType::Rc) {
            pc.max_len = ip_rng.range(seg / 2, 3 * seg) as u32;
        }
    }

    // The RoCEv2 link's knobs, from a stream of their own for the same reason.
    let mut link_rng = SimRng::new(seed ^ 0x5157_4152_4D00_0003);
    let ipv6 = o.ipv6.unwrap_or_else(|| link_rng.chance(0.5));
    let gso = o.gso.unwrap_or_else(|| link_rng.chance(0.5));

    let rnr_us = u64::from(rnr_timer_usec(min_rnr_timer));
    let lifetime = delay.max_lifetime().as_micros();
    let liveness_bound = Duration::from_micros(
        ack_us * (u64::from(retry_cnt) + 8) + rnr_us * 16 + lifetime * 8 + 50_000,
    );

    Config {
        seed,
        hcas,
        mtu,
        pairs,
        faults,
        links,
        delay,
        partitions,
        timeout,
        retry_cnt,
        rnr_retry,
        min_rnr_timer,
        max_rd_atomic,
        max_send_wr,
        safety,
        liveness_bound,
        op_weights,
        signal_prob,
        inline_prob,
        late_recv_prob,
        late_recv_max,
        disruptions,
        in_process,
        ipv6,
        gso,
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {}: {} HCAs, MTU {}, {} QP pairs, safety phase {}, liveness bound {}",
            self.seed,
            self.hcas,
            mtu_bytes(self.mtu),
            self.pairs.len(),
            self.safety,
            self.liveness_bound
        )?;
        let m = &self.faults;
        writeln!(
            f,
            "  faults: loss {} dup {} reorder {} (+<={}) corrupt {} partitions {}; delay {}+Exp({}) <= {}",
            percent(m.loss),
            percent(m.dup),
            percent(m.reorder),
            self.delay.reorder_max,
            percent(m.corrupt),
            self.partitions.len(),
            self.delay.min,
            self.delay.mean,
            self.delay.cap
        )?;
        for p in &self.partitions {
            writeln!(f, "  partition {} from {} to {}", p.what, p.start, p.end)?;
        }
        writeln!(
            f,
            "  RC: timeout {} ({}) retry_cnt {} rnr_retry {} min_rnr_timer {} ({}) max_rd_atomic {}; max_send_wr {}",
            self.timeout,
            self.ack_timeout(),
            self.retry_cnt,
            self.rnr_retry,
            self.min_rnr_timer,
            self.rnr_wait(),
            self.max_rd_atomic,
            self.max_send_wr
        )?;
        write!(f, "  ops:")?;
        for (k, w) in OpKind::ALL.iter().zip(self.op_weights) {
            write!(f, " {k}={w}")?;
        }
        writeln!(
            f,
            "; signaled {} inline {} late recvs {} (<={}) disruptions {} in-process {}",
            percent((self.signal_prob * 1000.0).round() / 1000.0),
            percent((self.inline_prob * 1000.0).round() / 1000.0),
            percent((self.late_recv_prob * 1000.0).round() / 1000.0),
            self.late_recv_max,
            if self.disruptions { "on" } else { "off" },
            if self.in_process { "on" } else { "off" }
        )?;
        writeln!(
            f,
            "  link: RoCEv2 over {}, GSO runs {}",
            if self.ipv6 { "IPv6" } else { "IPv4" },
            if self.gso { "on" } else { "off" }
        )?;
        for (i, p) in self.pairs.iter().enumerate() {
            write!(
                f,
                "  pair {i}: {} hca{} <-> hca{}, ops {}/{}, sig_all {}/{}, max_len {}",
                p.qp_type,
                p.hca[0] + 1,
                p.hca[1] + 1,
                p.ops[0],
                p.ops[1],
                p.sq_sig_all[0],
                p.sq_sig_all[1],
                p.max_len
            )?;
            for d in &p.disruptions {
                write!(f, ", disrupt at +{d}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_one_configuration() {
        for seed in 0..50 {
            assert_eq!(
                derive(seed, &Overrides::default()),
                derive(seed, &Overrides::default())
            );
        }
        assert_ne!(
            derive(1, &Overrides::default()),
            derive(2, &Overrides::default())
        );
    }

    #[test]
    fn overrides_replace_only_what_they_name() {
        let base = derive(9, &Overrides::default());
        let o = Overrides {
            loss: Some(0.1),
            ..Overrides::default()
        };
        let c = derive(9, &o);
        assert_eq!(c.faults.loss, 0.1);
        assert!(c.links.iter().all(|l| l.loss == 0.1));
        assert_eq!(c.faults.dup, base.faults.dup);
        assert_eq!(c.pairs, base.pairs);
        assert_eq!(c.timeout, base.timeout);
    }

    #[test]
    fn percent_formatting() {
        assert_eq!(percent(0.1), "10%");
        assert_eq!(percent(0.125), "12.5%");
        assert_eq!(percent(0.0), "0%");
    }
}
