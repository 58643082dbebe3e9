//! A negative control for the engine's invariants: with a bug planted in the engine, the
//! quick seed set (`softib sim`'s default, seeds 0..100) must fail, every failing seed with
//! the invariant that bug breaks. It proves the checks the simulator runs after every step
//! are not vacuous: without the bug the same seeds pass (`seeds.rs`, `quick_swarm`).

use softib_engine::planted::{plant, Bug};
use softib_sim::{run_seed, Overrides};

/// `softib sim` with no arguments runs these.
const QUICK: std::ops::Range<u64> = 0..100;

/// The completer forgets to restart the local ACK timer after an acknowledgement that leaves
/// PSNs outstanding. No oracle would see it on a seed whose packets all arrive; the
/// completer's timer invariant sees it at the first such acknowledgement.
#[test]
fn a_forgotten_ack_timer_fails_the_quick_seeds_with_the_timer_invariant() {
    const INVARIANT: &str = "completer invariant broken: while a transmitted PSN awaits its acknowledgement and no RNR wait runs, the local ACK timer runs";
    let _bug = plant(Bug::AckTimerNotRearmed);
    let failures: Vec<_> = QUICK
        .filter_map(|seed| run_seed(seed, &Overrides::default()).err())
        .collect();
    assert!(
        failures.len() > QUICK.count() / 2,
        "only {} of the quick seeds caught the planted bug",
        failures.len()
    );
    for f in &failures {
        assert!(
            f.message.contains(INVARIANT) && f.message.contains("retransmit_at None"),
            "seed {} failed, but not with the timer invariant: {}",
            f.seed,
            f.message
        );
    }
}
