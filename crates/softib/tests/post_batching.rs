//! A program that posts one work request per call, back to back, has its datagrams leave
//! together (the provider keeps a streaming poster's datagrams in the send queue for the next
//! post's): what is left there goes out without the program calling again — its process's
//! progress thread sends it within moments. On the kernel's path (`SOFTIB_PEER_RINGS=0`,
//! both QPs on one daemon but not through rings), the only path that queues; every post after
//! the first counts as streaming (`SOFTIB_STREAM_GAP_US`: a debug build's posts are slower
//! than a release build's 4 µs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use softib::{QpType, WcOpcode, WcStatus};

mod common;
use common::{with_pair, Pair};

#[test]
fn a_streaming_posters_last_datagrams_leave_without_another_call() {
    std::env::set_var("SOFTIB_DATAPATH", "process");
    std::env::set_var("SOFTIB_PEER_RINGS", "0");
    std::env::set_var("SOFTIB_STREAM_GAP_US", "1000000");
    with_pair(QpType::Ud, |p| {
        let Pair {
            buf_a,
            cq_b,
            mr_a,
            mr_b,
            qp_a,
            qp_b,
            ..
        } = *p;
        let eb = qp_b.endpoint().unwrap();
        const N: u64 = 12;
        for i in 0..N {
            qp_b.recv(mr_b, (i as usize) * 256, 256, 100 + i).unwrap();
        }
        buf_a.write(0, b"streamed");
        // Both engines' progress threads asleep (they spin 50 µs after work).
        std::thread::sleep(Duration::from_millis(20));
        // Back to back, one work request per call, and then nothing more from A: no poll,
        // no post.
        for i in 0..N {
            qp_a.send(mr_a, 0, 8, Some(&eb), i).unwrap();
        }
        let t0 = Instant::now();
        let mut got = 0;
        while got < N {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "{got} of {N} datagrams arrived while the sender made no call"
            );
            if let Ok(wc) = cq_b.wait(Duration::from_millis(200)) {
                assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Recv));
                got += 1;
            }
        }
        // Every one came, each once.
        assert!(cq_b.wait(Duration::from_millis(100)).is_err());
    });
}
