//! `softib-sim` — the deterministic fault simulator of softib's transport engine.
//!
//! One `u64` seed reproduces everything: [`swarm`] derives a whole configuration from it (2–4
//! HCAs, QP pairs of each transport, the MTU, the fault mix, partitions, timers, the operation
//! mix), [`workload`] plans randomized verbs traffic, [`world`] runs the HCAs of
//! `softib-engine` on a virtual clock over the faulty links of [`net`], and [`oracle`] checks
//! the results from outside the engine. A run has a *safety* phase, with every fault on, then
//! the network heals and a *liveness* phase checks that the surviving RC QPs finish their work
//! within a bounded virtual time. After every step — the workload's verbs and every HCA's
//! transmissions, then the deliveries and timers — the engines' own invariants are checked
//! (`Hca::check_invariants`, in any build): a broken one fails the seed at the step where it
//! first shows. [`run_seed`] is the entry point; `softib sim` runs many seeds.
//!
//! The model is TigerBeetle's VOPR and FoundationDB's simulation: swarm configurations, a fault
//! model on the network, safety then liveness, oracles outside the system under test.
//!
//! # Reproducing a failure
//!
//! A failure names its seed; `softib sim --seeds 1 --first-seed S` (with the same overrides)
//! replays it exactly and prints the configuration and the short log — one line per QP state
//! transition, error completion, partition and phase change. `--trace` adds every packet
//! (sent, with what the network did to it, and delivered) without changing the run.
//!
//! # What it must never do
//!
//! Nothing in a run may depend on anything but the seed and the overrides: no real clock (time
//! is [`softib_engine::Instant`], moved by the simulator), no OS randomness (every random
//! choice comes from streams forked from the seed), no iteration over a `HashMap` (every
//! collection is a `Vec` or a `BTreeMap`), no threads inside a run. It drives the sans-IO
//! crates `softib-engine` and `softib-link` (each HCA a `RoceCa`, so RoCEv2 framing, ICRC
//! sealing and GSO runs are under the faults too) and uses nothing of `softib-net` but the pure
//! send queue, so a protocol bug reproduces here from its seed; one that does not lives in the
//! I/O layers. It never reaches into the engine's
//! internals: what it checks, it checks from the verbs interface, the packets and the memory,
//! besides asking the engine to check its own invariants.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod net;
pub mod oracle;
mod rng;
pub mod swarm;
pub mod workload;
pub mod world;

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use softib_engine::counters::DropReason;
use softib_engine::verbs::AsyncEvent;
use softib_engine::{Duration, Instant};

pub use oracle::Tally;
pub use softib_engine::verbs::QpType;
pub use softib_wire::Mtu;
pub use swarm::{derive, Config, FaultMix, Overrides};

use net::{Net, NetStats};
use oracle::Oracle;
use rng::SimRng;
use swarm::START;
use workload::Workload;
use world::{Log, World};

/// The most simulation steps a run may take before it is declared a livelock.
const MAX_STEPS: u64 = 3_000_000;

/// What a passing run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// The seed.
    pub seed: u64,
    /// Simulation steps.
    pub steps: u64,
    /// Virtual time from the start to the end of the run.
    pub elapsed: Duration,
    /// Virtual time the liveness phase took.
    pub liveness: Duration,
    /// What the network did.
    pub net: NetStats,
    /// Work requests and completions.
    pub tally: Tally,
    /// How many times a QP pair was reconnected.
    pub reconnects: u64,
    /// Packets the engines dropped, by reason, summed over every HCA (which protocol paths
    /// the run exercised: RNR NAKs, duplicates, sequence errors, ...).
    pub drops: Vec<(&'static str, u64)>,
    /// The configuration and the short log (as a failure would print them).
    pub log: Vec<String>,
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.tally;
        write!(
            f,
            "seed {}: {} steps, {} virtual ({} to settle after healing); {} sends, {} receives, {} ok, {} flushed, {} retry exceeded, {} RNR retry exceeded, {} QP failures, {} reconnects; net: {}",
            self.seed,
            self.steps,
            self.elapsed,
            self.liveness,
            t.sends,
            t.recvs,
            t.ok,
            t.flushed,
            t.retry_exceeded,
            t.rnr_retry_exceeded,
            t.qp_failures,
            self.reconnects,
            self.net
        )?;
        if !self.drops.is_empty() {
            f.write_str("; engine drops:")?;
            for (name, n) in &self.drops {
                write!(f, " {name}={n}")?;
            }
        }
        Ok(())
    }
}

/// A failed run: what went wrong, and the short log that leads to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// What the oracle (or the simulator) found.
    pub message: String,
    /// Virtual time of the failure.
    pub at: Instant,
    /// The derived configuration, as logged first.
    pub config: String,
    /// The short log: one line per QP state transition or notable event.
    pub log: Vec<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {} failed at {}: {}",
            self.seed, self.at, self.message
        )?;
        if self.log.is_empty() {
            // The log starts with the configuration; without a log, print it here.
            write!(f, "{}", self.config)?;
        }
        writeln!(f, "--- log")?;
        for l in &self.log {
            writeln!(f, "{l}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Failure {}

/// Runs the simulation of `seed` with `overrides` applied to its swarm configuration.
pub fn run_seed(seed: u64, overrides: &Overrides) -> Result<Stats, Failure> {
    let cfg = derive(seed, overrides);
    let config = cfg.to_string();
    let (result, at, log) = match catch_unwind(AssertUnwindSafe(|| run(&cfg, overrides.trace))) {
        Ok(r) => r,
        Err(panic) => (Err(panic_message(panic)), START, Log::default()),
    };
    result.map_err(|message| Failure {
        seed,
        message,
        at,
        config,
        log: log.lines(),
    })
}

fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| String::from("(no message)"));
    format!("panic: {what}")
}

/// The run itself; returns its result, the virtual time it ended at and its log (also when
/// the engine panicked).
fn run(cfg: &Config, trace: bool) -> (Result<Stats, String>, Instant, Log) {
    let mut root = SimRng::new(cfg.seed);
    let workload_rng = root.fork();
    let net_rng = root.fork();
    let mem_rng = root.fork();
    let mut log = Log::default();
    log.push_raw(format!("seed {}", cfg.seed));
    for line in cfg.to_string().lines() {
        log.push_raw(line.to_string());
    }
    let mut workload = Workload::plan(cfg, workload_rng);
    let net = Net::new(
        net_rng,
        cfg.hcas,
        cfg.links.clone(),
        cfg.delay,
        cfg.partitions.clone(),
    );
    let mut world = match World::new(cfg, workload.mem_len(), mem_rng, net, log) {
        Ok(w) => w,
        Err(e) => return (Err(e), START, Log::default()),
    };
    world.trace = trace;
    if trace {
        world.log.keep_all();
    }
    let mut oracle = Oracle::new(cfg);
    let r = catch_unwind(AssertUnwindSafe(|| {
        drive(cfg, &mut world, &mut workload, &mut oracle)
    }))
    .unwrap_or_else(|p| Err(panic_message(p)));
    let at = world.now;
    let log = std::mem::take(&mut world.log);
    let r = r.map(|mut stats| {
        stats.log = log.lines();
        stats
    });
    (r, at, log)
}

fn drive(
    cfg: &Config,
    world: &mut World,
    workload: &mut Workload,
    oracle: &mut Oracle,
) -> Result<Stats, String> {
    workload.setup(world, oracle)?;
    let heal_at = START + cfg.safety;
    let deadline = heal_at + cfg.liveness_bound;
    let mut partitions: Vec<(Instant, String)> = cfg
        .partitions
        .iter()
        .flat_map(|p| {
            [
                (p.start, format!("partition {} begins", p.what)),
                (p.end, format!("partition {} heals", p.what)),
            ]
        })
        .collect();
    partitions.sort();
    let mut partitions = partitions.into_iter().peekable();
    let mut completions = Vec::new();
    let mut events = Vec::new();
    let mut steps = 0u64;
    let mut liveness = false;
    loop {
        steps += 1;
        if steps > MAX_STEPS {
            return Err(format!(
                "livelock: {MAX_STEPS} steps and still running (next event at {:?})",
                world.next_event()
            ));
        }
        workload.act(world, oracle)?;
        world.transmit(oracle)?;
        world.check_invariants()?;
        world.poll_cqs(&mut completions);
        for (node, from_recv, wc) in completions.drain(..) {
            if wc.status != softib_engine::verbs::WcStatus::Success {
                world.log.push(
                    world.now,
                    format_args!(
                        "hca{} QP {} WR 0x{:x} completed with {} (vendor_err 0x{:x})",
                        node + 1,
                        wc.qp_num,
                        wc.wr_id,
                        wc.status,
                        wc.vendor_err
                    ),
                );
            }
            oracle.on_completion(node, from_recv, wc)?;
        }
        world.poll_events(&mut events);
        for (node, ev) in events.drain(..) {
            world
                .log
                .push(world.now, format_args!("hca{} event {ev:?}", node + 1));
            match ev {
                AsyncEvent::CqErr(_)
                | AsyncEvent::QpFatal(_)
                | AsyncEvent::QpReqErr(_)
                | AsyncEvent::QpAccessErr(_) => {
                    return Err(format!(
                        "hca{} raised {ev:?}: every request the workload makes is valid",
                        node + 1
                    ));
                }
                _ => {}
            }
        }
        workload.observe(world, oracle)?;
        while let Some((t, what)) = partitions.next_if(|(t, _)| *t <= world.now && !liveness) {
            world.log.push(t, what);
        }

        if !liveness && world.now >= heal_at {
            liveness = true;
            world.net.heal();
            workload.start_liveness(world.now);
            world.log.push(
                world.now,
                format_args!(
                    "network healed; liveness phase until {deadline} ({} packets in flight)",
                    world.net.in_flight()
                ),
            );
            continue;
        }
        if liveness && workload.done(world) && world.net.in_flight() == 0 && !world.timers_armed() {
            break;
        }
        if world.now >= deadline {
            let left = workload.outstanding(world);
            world.log.push(world.now, "liveness bound reached");
            for l in &left {
                world.log.push(world.now, l);
            }
            oracle.check_liveness(world)?;
            if !left.is_empty() {
                return Err(format!(
                    "liveness: work left {} after the network healed: {}",
                    cfg.liveness_bound,
                    left.join("; ")
                ));
            }
            break;
        }
        let mut next = [world.next_event(), workload.next_due(), Some(deadline)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(deadline);
        if !liveness {
            next = next.min(heal_at);
        }
        world.now = world.now.max(next);
        world.deliver()?;
        world.fire_timers();
        world.check_invariants()?;
    }
    oracle.check_liveness(world)?;
    oracle.final_check(world)?;
    world
        .log
        .push(world.now, format_args!("done: {}", world.net.stats));
    Ok(Stats {
        seed: cfg.seed,
        steps,
        elapsed: world.now - START,
        liveness: world.now - heal_at,
        net: world.net.stats,
        tally: oracle.tally,
        reconnects: workload.reconnects,
        drops: DropReason::ALL
            .iter()
            .map(|&r| {
                let n = world.nodes.iter().map(|n| n.hca().drops().get(r)).sum();
                (r.name(), n)
            })
            .filter(|&(_, n)| n > 0)
            .collect(),
        log: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_run() {
        let a = run_seed(3, &Overrides::default());
        let b = run_seed(3, &Overrides::default());
        assert_eq!(a, b);
    }
}
