//! Failures the simulator found, minimised to one RC pair between two HCAs with 10 % loss and
//! nothing else, kept as named seeds (raw swarm seeds rot as the code changes; these overrides
//! keep each scenario small). Each test replays one seed; `softib sim --seeds 1 --first-seed S
//! --loss 10% --dup 0 --reorder 0 --corrupt 0 --partitions off --disruptions off
//! --late-recvs off --qp-type rc --hcas 2 --pairs 1 --max-ops 6 --trace` shows every packet.

use softib_sim::{run_seed, FaultMix, Overrides, QpType};

fn one_rc_pair_with_loss() -> Overrides {
    Overrides {
        qp_type: Some(QpType::Rc),
        hcas: Some(2),
        pairs: Some(1),
        max_ops: Some(6),
        late_recvs: Some(false),
        ..Overrides::faults(FaultMix {
            loss: 0.1,
            ..FaultMix::NONE
        })
    }
}

fn replay(seed: u64) {
    if let Err(f) = run_seed(seed, &one_rc_pair_with_loss()) {
        panic!("{f}");
    }
}

/// One lost atomic ACK. The READ response that follows it is an implied NAK for the atomic
/// (go-back-N), yet it also completes the READ; every later ACK beyond the atomic costs
/// another retry and another rewind, and the replayed atomic ACK arrives while the rewind has
/// made the atomic's PSN look unsent, so it is dropped. The retries run out within about 100
/// microseconds, no timeout having fired: the atomic completes with RETRY_EXC_ERR and then the
/// READ posted after it with SUCCESS (IBA: completions in order; after an error, flushes).
#[test]
fn later_read_does_not_succeed_after_an_earlier_atomic_failed() {
    replay(767);
}

/// One lost atomic ACK makes the requester retry while a 3-packet READ response is on the
/// wire: the READ is re-requested from its second packet, and the original READ RESPONSE
/// MIDDLE — the right PSN and the right bytes — is then judged against the restarted
/// sequence (which begins with FIRST) and fails the QP with BAD_RESP_ERR.
#[test]
fn stale_read_response_after_a_partial_read_retry_is_not_fatal() {
    replay(12);
}

/// A raw swarm seed (three HCAs, duplication, reordering, corruption, late receives), kept as
/// it was found: it may stop reaching this corner as the code changes, but while it does it is
/// the shortest way there. An RNR NAK arrived while a READ's retried response was still on its
/// way, so its implied acknowledgement stopped at the READ; the READ then completed during the
/// RNR wait, and the one later ACK for the WRITE packets before the NAK's PSN was corrupted.
/// When the RNR wait ended, those packets were outstanding, the congestion window (halved by
/// the READ's retry) held the requester back, and the local ACK timer — stopped for the RNR
/// wait — was never started again: five WQEs waited forever. The timer now runs again when
/// the RNR wait ends with PSNs outstanding.
#[test]
fn the_ack_timer_runs_again_after_an_rnr_wait_with_packets_outstanding() {
    if let Err(f) = run_seed(300_898, &Overrides::default()) {
        panic!("{f}");
    }
}
