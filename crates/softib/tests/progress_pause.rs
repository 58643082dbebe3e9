//! `softib::pause_progress`: every progress thread of the process data path parks while the
//! drop-in moves a region's pages onto a memory file, and carries on after. Its own test
//! binary: a pause holds every engine of the process still, other tests' too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use softib::{QpType, WcStatus};

mod common;
use common::{with_pair, Pair};

/// The states (`/proc` one-letter codes) of this process's progress threads.
fn progress_threads() -> Vec<char> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
        .filter(|st| st.contains("(softib-progres"))
        .filter_map(|st| st.rsplit_once(") ")?.1.chars().next())
        .collect()
}

#[test]
fn progress_threads_park_for_a_pause_and_carry_on_after_it() {
    std::env::set_var("SOFTIB_DATAPATH", "process");
    with_pair(QpType::Rc, |p| {
        let Pair {
            cq_a,
            mr_a,
            mr_b,
            qp_a,
            ..
        } = *p;
        {
            let pause = softib::pause_progress(Duration::from_secs(5)).expect("every thread parks");
            assert_eq!(pause.threads(), 2, "one per engine");
            assert!(
                softib::pause_progress(Duration::from_millis(10)).is_none(),
                "one pause at a time"
            );
            // Parked: asleep on the condition variable, not spinning.
            std::thread::sleep(Duration::from_millis(20));
            let states = progress_threads();
            assert!(
                states.len() == 2 && states.iter().all(|&c| c == 'S'),
                "{states:?}"
            );
        }
        // After it, B's progress thread answers a WRITE again (no thread of B polls).
        qp_a.write(mr_a, 0, 100, mr_b.addr(), mr_b.rkey(), 7)
            .unwrap();
        let wc = cq_a.wait(Duration::from_secs(10)).unwrap();
        assert_eq!((wc.wr_id, wc.status), (7, WcStatus::Success), "{wc:?}");
    });
}
