//! Seed sweeps: a quick swarm (every feature the seeds switch on), then targeted scenarios —
//! one fault at a time on one transport at a time — and determinism.
//!
//! A failing test prints one line per failing seed with the command that reproduces it, and
//! the whole report (configuration and log) of the first.

use softib_engine::verbs::QpType;
use softib_sim::{run_seed, FaultMix, Overrides, Stats};

/// Runs `seeds` with `o`; panics with every failure if any seed fails.
fn sweep(name: &str, seeds: std::ops::Range<u64>, o: &Overrides) -> Vec<Stats> {
    let mut passed = Vec::new();
    let mut failures = Vec::new();
    for seed in seeds {
        match run_seed(seed, o) {
            Ok(s) => passed.push(s),
            Err(f) => failures.push(f),
        }
    }
    if let Some(first) = failures.first() {
        let lines: Vec<String> = failures
            .iter()
            .map(|f| {
                format!(
                    "seed {} FAILED: {}; reproduce: softib sim --seeds 1 --first-seed {}{}",
                    f.seed,
                    f.message,
                    f.seed,
                    o.cli_flags()
                )
            })
            .collect();
        panic!(
            "{name}: {} of {} seeds failed\n{}\n\nfirst failure:\n{first}",
            failures.len(),
            failures.len() + passed.len(),
            lines.join("\n")
        );
    }
    passed
}

#[test]
fn quick_swarm() {
    let stats = sweep("quick swarm", 0..200, &Overrides::default());
    // The swarm must actually exercise the faults and the recovery paths.
    let sum = |f: fn(&Stats) -> u64| stats.iter().map(f).sum::<u64>();
    assert!(sum(|s| s.net.lost) > 0);
    assert!(sum(|s| s.net.duplicated) > 0);
    assert!(sum(|s| s.net.reordered) > 0);
    assert!(sum(|s| s.net.crc_dropped) > 0);
    assert!(sum(|s| s.net.partitioned) > 0);
    assert!(sum(|s| s.reconnects) > 0);
    assert!(sum(|s| s.tally.retry_exceeded) > 0);
}

#[test]
fn no_faults_no_errors() {
    // With an empty fault mix the oracle requires that not a single completion is an error.
    for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
        let o = Overrides {
            qp_type: Some(t),
            late_recvs: Some(false),
            ..Overrides::faults(FaultMix::NONE)
        };
        for s in sweep(&format!("no faults {t}"), 0..30, &o) {
            assert_eq!(s.tally.flushed + s.tally.retry_exceeded, 0, "{s}");
            assert_eq!(s.net.delivered, s.net.sent, "{s}");
        }
    }
}

fn scenario(name: &str, mix: FaultMix, t: QpType, check: fn(&Stats) -> u64) {
    let o = Overrides {
        qp_type: Some(t),
        ..Overrides::faults(mix)
    };
    let stats = sweep(&format!("{name} {t}"), 1000..1025, &o);
    assert!(
        stats.iter().map(check).sum::<u64>() > 0,
        "{name} {t}: the fault never happened"
    );
}

const LOSS: FaultMix = FaultMix {
    loss: 0.15,
    ..FaultMix::NONE
};
const DUP: FaultMix = FaultMix {
    dup: 0.2,
    ..FaultMix::NONE
};
const REORDER: FaultMix = FaultMix {
    reorder: 0.2,
    ..FaultMix::NONE
};
const CORRUPT: FaultMix = FaultMix {
    corrupt: 0.15,
    ..FaultMix::NONE
};
const PARTITIONS: FaultMix = FaultMix {
    partitions: true,
    ..FaultMix::NONE
};

#[test]
fn loss_only_rc() {
    scenario("loss only", LOSS, QpType::Rc, |s| s.net.lost);
}
#[test]
fn loss_only_uc() {
    scenario("loss only", LOSS, QpType::Uc, |s| s.net.lost);
}
#[test]
fn loss_only_ud() {
    scenario("loss only", LOSS, QpType::Ud, |s| s.net.lost);
}
#[test]
fn dup_only_rc() {
    scenario("dup only", DUP, QpType::Rc, |s| s.net.duplicated);
}
#[test]
fn dup_only_uc() {
    scenario("dup only", DUP, QpType::Uc, |s| s.net.duplicated);
}
#[test]
fn dup_only_ud() {
    scenario("dup only", DUP, QpType::Ud, |s| s.net.duplicated);
}
#[test]
fn reorder_only_rc() {
    scenario("reorder only", REORDER, QpType::Rc, |s| s.net.reordered);
}
#[test]
fn reorder_only_uc() {
    scenario("reorder only", REORDER, QpType::Uc, |s| s.net.reordered);
}
#[test]
fn reorder_only_ud() {
    scenario("reorder only", REORDER, QpType::Ud, |s| s.net.reordered);
}
#[test]
fn corrupt_only_rc() {
    scenario("corrupt only", CORRUPT, QpType::Rc, |s| s.net.crc_dropped);
}
#[test]
fn corrupt_only_uc() {
    scenario("corrupt only", CORRUPT, QpType::Uc, |s| s.net.crc_dropped);
}
#[test]
fn corrupt_only_ud() {
    scenario("corrupt only", CORRUPT, QpType::Ud, |s| s.net.crc_dropped);
}
#[test]
fn partition_and_heal_rc() {
    scenario("partition and heal", PARTITIONS, QpType::Rc, |s| {
        s.net.partitioned
    });
}
#[test]
fn partition_and_heal_uc() {
    scenario("partition and heal", PARTITIONS, QpType::Uc, |s| {
        s.net.partitioned
    });
}
#[test]
fn partition_and_heal_ud() {
    scenario("partition and heal", PARTITIONS, QpType::Ud, |s| {
        s.net.partitioned
    });
}

#[test]
fn disruptions_on_a_perfect_network() {
    // Only the workload's own ERR/RESET/reconnect cycles: flushes, and nothing else.
    let o = Overrides {
        disruptions: Some(true),
        ..Overrides::faults(FaultMix::NONE)
    };
    let stats = sweep("disruptions", 0..40, &o);
    assert!(stats.iter().map(|s| s.reconnects).sum::<u64>() > 0);
    assert!(stats.iter().map(|s| s.tally.flushed).sum::<u64>() > 0);
}

#[test]
fn one_seed_reproduces_everything() {
    for seed in [5, 77, 1234] {
        let a = run_seed(seed, &Overrides::default());
        let b = run_seed(seed, &Overrides::default());
        assert_eq!(a, b, "seed {seed} ran differently twice");
    }
}
