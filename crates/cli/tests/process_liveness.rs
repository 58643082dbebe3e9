//! A stopped daemon on the process data path (`SOFTIB_DATAPATH=process`, issue 23 item 2):
//! the engines run in this process, so an RC transfer between two of them keeps going while
//! both daemons are stopped — the kernel steers their datagrams to their own sockets — and a
//! control verb, which needs the daemon, says within seconds that softibd stopped answering
//! instead of waiting forever. After SIGCONT the control path works again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use rustix::process::Signal;
use softib::{AccessFlags, Device, Error, Mtu, QpType, WcStatus};

mod common;
use common::{roce_daemon, signal};

#[test]
fn a_stopped_daemon_is_named_to_control_verbs_while_the_process_data_path_goes_on() {
    // The only test of this binary: the variable is read when a context opens.
    std::env::set_var("SOFTIB_DATAPATH", "process");
    let base = std::env::temp_dir().join(format!("softib-palive-{}", std::process::id()));
    let (dir_a, dir_b) = (base.join("a"), base.join("b"));
    for d in [&dir_a, &dir_b] {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).unwrap();
    }
    let da = roce_daemon(&dir_a, "127.0.0.175");
    let db = roce_daemon(&dir_b, "127.0.0.176");

    let all = AccessFlags::LOCAL_WRITE
        .with(AccessFlags::REMOTE_WRITE)
        .with(AccessFlags::REMOTE_READ);
    let a = Device::open_at(&dir_a, Some("rxe0")).unwrap();
    let b = Device::open_at(&dir_b, Some("rxe0")).unwrap();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    const LEN: usize = 64 << 10;
    let (buf_a, buf_b) = (a.alloc_buffer(LEN).unwrap(), b.alloc_buffer(LEN).unwrap());
    let (mr_a, mr_b) = (
        pd_a.register(&buf_a, all).unwrap(),
        pd_b.register(&buf_b, all).unwrap(),
    );
    let qp_a = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 8).unwrap();
    let qp_b = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 8).unwrap();
    let (ea, eb) = (
        qp_a.endpoint_with(Some(&mr_a)).unwrap(),
        qp_b.endpoint_with(Some(&mr_b)).unwrap(),
    );
    qp_a.connect(&eb, Mtu::Mtu1024).unwrap();
    qp_b.connect(&ea, Mtu::Mtu1024).unwrap();

    // One checked 64 KiB WRITE: it completes with every byte right.
    let write = |round: u32| {
        let data: Vec<u8> = (0..LEN as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(round) >> 9) as u8)
            .collect();
        buf_a.write(0, &data);
        qp_a.write(&mr_a, 0, LEN, eb.addr, eb.rkey, u64::from(round))
            .unwrap();
        let wcs = cq_a.poll_wait(1, Duration::from_secs(20)).unwrap();
        assert_eq!(wcs.len(), 1, "round {round}: no completion in 20 s");
        assert_eq!(wcs[0].status, WcStatus::Success, "round {round}");
        let mut got = vec![0u8; LEN];
        assert!(buf_b.read(0, &mut got));
        assert!(got == data, "round {round}: the bytes differ");
    };
    write(1);

    signal(&da.0, Signal::STOP);
    signal(&db.0, Signal::STOP);
    // The data path is this process's: WRITEs go on with both daemons stopped.
    let t0 = Instant::now();
    for round in 2..12 {
        write(round);
    }
    eprintln!(
        "10 checked 64 KiB WRITEs with both daemons stopped in {:?}",
        t0.elapsed()
    );
    // Registering memory needs the daemon (it hands out the keys): it is named within
    // seconds, with its state.
    let t0 = Instant::now();
    let e = pd_a.register(&buf_a, all).map(|_| ()).unwrap_err();
    let waited = t0.elapsed();
    eprintln!("a control verb named the stopped daemon after {waited:?}");
    assert!(
        matches!(e, Error::DaemonUnresponsive { .. })
            && e.to_string().contains(&format!(
                "softibd (pid {}) has stopped answering (state: stopped)",
                da.0.id()
            )),
        "{e}"
    );
    assert!(waited < Duration::from_secs(9), "{waited:?}");

    signal(&da.0, Signal::CONT);
    signal(&db.0, Signal::CONT);
    // Resumed: a new session on the daemon works, and so does the data path.
    let again = Device::open_at(&dir_a, Some("rxe0")).unwrap();
    again.alloc_pd().unwrap();
    write(12);
    let _ = std::fs::remove_dir_all(&base);
}
