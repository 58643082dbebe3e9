//! Debian's unmodified rdma_cm programs between two softib hosts, on softib's
//! librdmacm.so.1 and libibverbs.so.1 (`softib run`): the CM's REQ/REP/RTU and DREQ/DREP
//! cross QP1 of the RoCE devices as MADs, the data goes over the QPs they connect.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dropin;

use std::time::{Duration, Instant};

use dropin::{build_c, have, hosts, port, Done, Run};

/// Runs `server` on host B and then `client` on host A, and waits for both.
fn pair(server: &[&str], client: &[&str]) -> (Done, Done) {
    let h = hosts();
    let s = Run::start(&h.b, server, &[]);
    let c = client_once_listening(client, &[]);
    (s.wait(), c)
}

/// Runs `client` on host A until it no longer hears that nobody listens (the server may not
/// listen yet: rdma_cm clients do not retry a REJ), for at most 20 s.
fn client_once_listening(client: &[&str], env: &[(&str, &str)]) -> Done {
    let t0 = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let c = Run::start(&hosts().a, client, env).wait();
        if c.status.success() || !c.heard_nobody_listens() || t0.elapsed() > Duration::from_secs(20)
        {
            return c;
        }
    }
}

/// `tests/dropin/NAME.c` built against Debian's rdma_cma.h and linked with softib's
/// librdmacm and libibverbs; `None` (skipped, said) without a C compiler or the header, a
/// failure under `CI=true`.
fn c_program(name: &str) -> Option<String> {
    if !have("cc", "gcc") || !std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        assert!(
            std::env::var_os("CI").is_none_or(|v| v != "true"),
            "no C compiler or rdma_cma.h under CI=true: .ci/run installs gcc and librdmacm-dev"
        );
        eprintln!("skipped: needs gcc and librdmacm-dev");
        return None;
    }
    Some(build_c(
        &hosts().a.dir.join(name),
        name,
        &["rdmacm", "ibverbs"],
    ))
}

fn ours(d: &Done) {
    d.ok();
    d.loaded_ours_lib("librdmacm.so.1");
}

#[test]
fn rping_pings_100_times_with_verification() {
    if !have("rping", "rdmacm-utils") {
        return;
    }
    let p = port().to_string();
    let b = hosts().b.addr;
    let (s, c) = pair(
        &["rping", "-s", "-v", "-a", b, "-p", &p, "-C", "100"],
        &["rping", "-c", "-v", "-a", b, "-p", &p, "-C", "100"],
    );
    ours(&s);
    ours(&c);
    for (d, n) in [(&s, 100), (&c, 100)] {
        let pings = d.stdout.matches("ping data: rdma-ping-").count();
        assert_eq!(pings, n, "{}:\n{}", d.what, d.stdout);
    }
    assert!(c.stdout.contains("rdma-ping-99: "), "{}", c.stdout);
}

#[test]
fn ucmatose_connects_one_and_eight() {
    if !have("ucmatose", "rdmacm-utils") {
        return;
    }
    let b = hosts().b.addr;
    for n in ["1", "8"] {
        let p = port().to_string();
        let (s, c) = pair(
            &["ucmatose", "-b", b, "-p", &p, "-c", n],
            &["ucmatose", "-s", b, "-p", &p, "-c", n],
        );
        ours(&s);
        ours(&c);
        s.completed();
        c.completed();
        assert!(s.stdout.contains("disconnected"), "{}", s.stdout);
    }
}

/// A REQ for a port nobody listens on gets a REJ (InvalidServiceID, 8) at once, which the
/// program hears as REJECTED with that reason — not a timeout.
#[test]
fn connecting_to_a_port_nobody_listens_on_is_rejected_at_once() {
    if !have("rping", "rdmacm-utils") {
        return;
    }
    let p = port().to_string();
    let b = hosts().b.addr;
    let t0 = Instant::now();
    let c = Run::start(
        &hosts().a,
        &["rping", "-c", "-a", b, "-p", &p, "-C", "1"],
        &[],
    )
    .wait();
    assert!(!c.status.success(), "{}: {}", c.what, c.stdout);
    let said = format!("{}{}", c.stdout, c.stderr);
    assert!(
        said.contains("RDMA_CM_EVENT_REJECTED, error 8"),
        "{}: {said}",
        c.what
    );
    // The CM's timeout would be 4 s and 15 retries; a REJ takes a few poll turns.
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
}

/// Runs perftest's `tool` with `-R` (rdma_cm connects the QPs) between the two hosts, for
/// `n` iterations, and checks both sides said so and reported a result.
fn perftest_over_rdma_cm(tool: &str, n: &str) {
    if !have(tool, "perftest") {
        return;
    }
    let p = port().to_string();
    let b = hosts().b.addr;
    let (s, c) = pair(
        &[tool, "-R", "-d", "rxe0", "-p", &p, "-n", n],
        &[tool, "-R", "-d", "rxe0", "-p", &p, "-n", n, b],
    );
    ours(&s);
    ours(&c);
    dropin::rdma_cm_perftest_ran(&s, &c, n.parse().unwrap());
}

/// perftest's eight tools, one after the other (as dropin_perftest runs them). The
/// ib_atomic_lat server returns from main after its last handshake without disconnecting:
/// its CM tears the connection down at exit (a DREQ), and a DREQ that arrives after it is
/// gone is answered by the daemon (a DREP), so the client's own DREQ is not retried for a
/// minute (it took 70 s).
#[test]
fn eight_perftest_tools_connect_with_rdma_cm() {
    for (tool, n) in [
        ("ib_send_bw", "500"),
        ("ib_send_lat", "200"),
        ("ib_write_bw", "500"),
        ("ib_write_lat", "200"),
        ("ib_read_bw", "500"),
        ("ib_read_lat", "200"),
        ("ib_atomic_bw", "500"),
        ("ib_atomic_lat", "200"),
    ] {
        let t0 = Instant::now();
        perftest_over_rdma_cm(tool, n);
        // A teardown that waits out the CM's retries takes over a minute; the run a few
        // seconds. Not a speed check: the bound is 20 times what it needs.
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{tool} took {:?}: its teardown waited out the CM's retries",
            t0.elapsed()
        );
    }
}

/// Runs `tool -R` with `extra` between the hosts, softib's own on the side that is not
/// upstream's (`None`: both are softib's own), and checks both ran over rdma_cm, the client
/// reported `n` iterations per QP of each of `qps`, and teardown did not wait out CM retries.
fn own_perftest_over_rdma_cm(tool: &str, n: &str, extra: &[&str], upstream_server: Option<bool>) {
    let h = hosts();
    let t0 = Instant::now();
    let p = port().to_string();
    let mut server = vec![tool, "-R", "-d", "rxe0", "-p", &p, "-n", n];
    server.extend(extra);
    let mut client = server.clone();
    client.push(h.b.addr);
    let (s, c) = match upstream_server {
        Some(true) => {
            let s = Run::start(&h.b, &server, &[]);
            std::thread::sleep(Duration::from_millis(300));
            // softib's client asks again while nobody listens (until --timeout).
            (s, Run::start_own(&h.a, &client).wait())
        }
        Some(false) => {
            let s = Run::start_own(&h.b, &server);
            (s, client_once_listening(&client, &[]))
        }
        None => {
            let s = Run::start_own(&h.b, &server);
            (s, Run::start_own(&h.a, &client).wait())
        }
    };
    let s = s.wait();
    let what = format!("{tool} {extra:?} (upstream server: {upstream_server:?})");
    for (d, upstream) in [
        (&s, upstream_server == Some(true)),
        (&c, upstream_server == Some(false)),
    ] {
        if upstream {
            ours(d);
        }
        assert!(
            d.status.success() && d.stdout.contains("Data ex. method : rdma_cm"),
            "{what}: {} ({:?}):\n{}\n{}\n-- server:\n{}\n{}\n-- client:\n{}\n{}",
            d.what,
            d.status,
            d.stdout,
            d.stderr,
            s.stdout,
            s.stderr,
            c.stdout,
            c.stderr
        );
        assert!(!d.stderr.contains("-R:"), "{what}: {}", d.stderr);
    }
    let qps: f64 = extra
        .windows(2)
        .find(|w| w[0] == "-q")
        .map_or(1.0, |w| w[1].parse().unwrap());
    let r = dropin::perftest_result(&c.stdout).unwrap_or_default();
    assert!(
        r.len() >= 4 && r[1] == n.parse::<f64>().unwrap() * qps && r[3] > 0.0,
        "{what}: no result\n{}",
        c.stdout
    );
    // Not a speed check: a teardown that waits out the CM's retries takes a minute.
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "{what} took {:?}",
        t0.elapsed()
    );
}

/// softib's own perftest with `-R` against Debian's unmodified one with `-R`, both ways
/// (own server and upstream client, upstream server and own client), for the eight tools,
/// and with four QPs: the exchange runs over a QP the CM connected, then every test QP is
/// connected with a REQ/REP/RTU of its own, and both sides report.
#[test]
fn softibs_own_perftest_with_rdma_cm_and_upstreams_connect_both_ways() {
    if !have("ib_send_bw", "perftest") {
        return;
    }
    for (tool, n) in [
        ("ib_send_bw", "200"),
        ("ib_write_bw", "200"),
        ("ib_read_bw", "200"),
        ("ib_atomic_bw", "200"),
        ("ib_send_lat", "100"),
        ("ib_write_lat", "100"),
        ("ib_read_lat", "100"),
        ("ib_atomic_lat", "100"),
    ] {
        for upstream_server in [false, true] {
            own_perftest_over_rdma_cm(tool, n, &[], Some(upstream_server));
        }
    }
    for tool in ["ib_send_bw", "ib_write_bw"] {
        for upstream_server in [false, true] {
            own_perftest_over_rdma_cm(tool, "100", &["-q", "4"], Some(upstream_server));
        }
    }
    // UD: SIDR resolves the QPs; the latency and bidirectional tests also have the client
    // send its QPN to the server.
    for (tool, extra) in [
        ("ib_send_bw", &["-c", "UD"][..]),
        ("ib_send_lat", &["-c", "UD"][..]),
        ("ib_send_bw", &["-c", "UD", "-b"][..]),
    ] {
        for upstream_server in [false, true] {
            own_perftest_over_rdma_cm(tool, "100", extra, Some(upstream_server));
        }
    }
    own_perftest_over_rdma_cm("ib_read_bw", "100", &["-q", "2"], None);
    own_perftest_over_rdma_cm("ib_send_lat", "100", &["-c", "UD"], None);
}

/// softib's own `-R` client to a port nobody listens on: the REJ (InvalidServiceID) comes
/// at once; the client asks again (a server may be starting) until `--timeout`, then says
/// why it gave up.
#[test]
fn own_perftest_rdma_cm_client_says_nobody_listens() {
    let h = hosts();
    let p = port().to_string();
    let t0 = Instant::now();
    let args = [
        "ib_write_bw",
        "-R",
        "-d",
        "rxe0",
        "-p",
        &p,
        "--timeout",
        "2",
        h.b.addr,
    ];
    let c = Run::start_own(&h.a, &args).wait();
    assert!(!c.status.success(), "{}: {}", c.what, c.stdout);
    assert!(
        c.stderr
            .contains("rejected the connection: nobody listens on that port (REJ reason 8)"),
        "{}: {}",
        c.what,
        c.stderr
    );
    // Two seconds of asking again, not the CM's 15 retries of 4 s.
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}

/// rdma_server and rdma_client use synchronous ids: rdma_getaddrinfo, rdma_create_ep (the
/// QP made with the endpoint), rdma_get_request, and rdma_verbs.h's inline helpers over the
/// id's PD, QP and CQs.
#[test]
fn rdma_server_and_rdma_client_use_synchronous_endpoints() {
    if !have("rdma_server", "rdmacm-utils") {
        return;
    }
    let p = port().to_string();
    let b = hosts().b.addr;
    let (s, c) = pair(
        &["rdma_server", "-s", b, "-p", &p],
        &["rdma_client", "-s", b, "-p", &p],
    );
    ours(&s);
    ours(&c);
    assert!(
        s.stdout.contains("rdma_server: end 0"),
        "{}\n{}",
        s.stdout,
        s.stderr
    );
    assert!(
        c.stdout.contains("rdma_client: end 0"),
        "{}\n{}",
        c.stdout,
        c.stderr
    );
}

/// rdma_xserver and rdma_xclient: over RC (their default) the client's endpoint QP asks for
/// no inline data and one SGE, then sends 16 bytes inline, which rxe allows (a send WQE
/// holds 16 bytes per SGE) and so must softib; over XRC (`-c x`, RDMA_PS_IB ids) the client
/// is told at once that softib has no XRC QPs, as rxe has none (EOPNOTSUPP).
#[test]
fn rdma_xserver_and_rdma_xclient_connect_rc_and_xrc_is_refused_clearly() {
    if !have("rdma_xserver", "rdmacm-utils") {
        return;
    }
    let p = port().to_string();
    let b = hosts().b.addr;
    let (s, c) = pair(
        &["rdma_xserver", "-p", &p],
        &["rdma_xclient", "-s", b, "-p", &p],
    );
    ours(&s);
    ours(&c);
    assert!(
        s.stdout.contains("rdma_xserver: end 0"),
        "{}\n{}",
        s.stdout,
        s.stderr
    );
    assert!(
        c.stdout.contains("rdma_xclient: end 0"),
        "{}\n{}",
        c.stdout,
        c.stderr
    );

    let p = port().to_string();
    // The XRC server listens until it is stopped (when `s` drops): no client can reach it.
    let s = Run::start(&hosts().b, &["rdma_xserver", "-p", &p, "-c", "x"], &[]);
    let c = Run::start(
        &hosts().a,
        &["rdma_xclient", "-s", b, "-p", &p, "-c", "x"],
        &[],
    )
    .wait();
    drop(s);
    c.loaded_ours_lib("librdmacm.so.1");
    assert!(!c.status.success(), "{}: {}", c.what, c.stdout);
    assert!(
        c.stderr.contains("softib has no XRC QPs")
            && c.stderr.contains("rdma_create_ep: Operation not supported"),
        "{}:\n{}\n{}",
        c.what,
        c.stdout,
        c.stderr
    );
}

/// RDMA_PS_IB ids with IPv4 addresses (the port space rdma_xserver's XRC mode uses, and
/// AF_IB programs): a synchronous RC endpoint listens on its ServiceID (0x013F_pppp), one
/// connects, and a message crosses.
#[test]
fn an_rdma_ps_ib_endpoint_connects_rc() {
    let Some(exe) = c_program("cm_ps_ib") else {
        return;
    };
    let p = port().to_string();
    let b = hosts().b.addr;
    let s = Run::start(&hosts().b, &[&exe, "server", &p], &[]);
    let c = client_once_listening(&[&exe, "client", b, &p], &[]);
    let s = s.wait();
    ours(&s);
    ours(&c);
    assert!(c.stdout.contains("ok sent"), "{}\n{}", c.stdout, c.stderr);
    assert!(
        s.stdout.contains("ok received: ps-ib hello"),
        "{}\n{}",
        s.stdout,
        s.stderr
    );
}

/// The voluntary context switches of the thread named `name` in process `pid`, once it
/// exists (waits up to 10 s for it).
fn thread_switches(pid: u32, name: &str) -> u64 {
    let t0 = Instant::now();
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        for t in tasks.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.trim() != name {
                continue;
            }
            let status = std::fs::read_to_string(t.path().join("status")).unwrap();
            let n = status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .unwrap();
            return n.trim().parse().unwrap();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "process {pid} has no thread {name}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A listener with nothing to do sleeps: its CM agent thread waits on the daemon's MAD
/// eventfd and its own, with no timer, and does not wake up at all. Its host is its own: CM
/// MADs for connections the daemon cannot place (the other tests' processes that exited) go
/// to every agent on a port, and would wake it.
#[test]
fn an_idle_listener_does_not_wake_its_cm_thread() {
    if !have("rping", "rdmacm-utils") {
        return;
    }
    let p = port().to_string();
    let quiet = dropin::private_host("idle", "127.0.0.14");
    let b = quiet.addr;
    let s = Run::start(&quiet, &["rping", "-s", "-a", b, "-p", &p, "-C", "1"], &[]);
    let pid = s.pid();
    let first = thread_switches(pid, "softib-rdmacm");
    // Let the listen and anything it set off settle, then watch a quiet second.
    std::thread::sleep(Duration::from_millis(300));
    let before = thread_switches(pid, "softib-rdmacm");
    std::thread::sleep(Duration::from_secs(1));
    let after = thread_switches(pid, "softib-rdmacm");
    assert_eq!(
        after, before,
        "the idle CM thread woke up (it had {first} switches at start)"
    );
    // It still serves: a client connects and pings once.
    let c = Run::start(
        &hosts().a,
        &["rping", "-c", "-a", b, "-p", &p, "-C", "1"],
        &[],
    )
    .wait();
    let s = s.wait();
    ours(&s);
    ours(&c);
}

/// Tearing down as programs do: the server's DREQ leaves the client's QP as it was (rdma-core
/// does not touch it on DISCONNECTED: a program may have destroyed it with ibv_destroy_qp
/// while its id still points at it, as rping does); a CM thread left waiting
/// on a channel the main thread destroys keeps waiting rather than failing (rping exits with
/// its CM thread in rdma_get_cm_event); an event queued for an id destroyed before anyone
/// took it goes with the id.
#[test]
fn teardown_leaves_the_qp_and_a_destroyed_channel_alone() {
    let Some(exe) = c_program("cm_teardown") else {
        return;
    };
    let p = port().to_string();
    let b = hosts().b.addr;
    let s = Run::start(&hosts().b, &[&exe, "server", b, &p], &[]);
    let c = client_once_listening(&[&exe, "client", b, &p], &[]);
    let s = s.wait();
    ours(&s);
    ours(&c);
    assert!(s.stdout.contains("ok server"), "{}", s.stdout);
    for step in [
        "ok DISCONNECTED leaves the QP as it was",
        "ok a thread waiting on a destroyed channel keeps waiting",
        "ok an event queued for a destroyed id is dropped with it",
    ] {
        assert!(
            c.stdout.contains(step),
            "{step}:\n{}\n{}",
            c.stdout,
            c.stderr
        );
    }
}

/// udaddy (RDMA_PS_UDP): the client's rdma_connect is a SIDR_REQ, the server's rdma_accept
/// a SIDR_REP naming its UD QP; the client sends 10 datagrams to it with the address
/// handle ESTABLISHED gave, the server answers each sender through ibv_create_ah_from_wc.
/// udaddy has no port option: it always uses 7174, which only this test uses.
#[test]
fn udaddy_resolves_a_ud_service_and_exchanges_datagrams() {
    if !have("udaddy", "rdmacm-utils") {
        return;
    }
    let b = hosts().b.addr;
    let (s, c) = pair(&["udaddy", "-b", b], &["udaddy", "-s", b]);
    ours(&s);
    ours(&c);
    for d in [&s, &c] {
        assert!(
            d.stdout.contains("data transfers complete"),
            "{}:\n{}\n{}",
            d.what,
            d.stdout,
            d.stderr
        );
    }
    assert!(s.stdout.contains("sending replies"), "{}", s.stdout);
}

/// UCX's connection manager over rdma_cm: io_demo (ucx-utils) connects client to server by
/// IP address through UCX's rdmacm CM (`UCX_SOCKADDR_TLS_PRIORITY=rdmacm`) and moves its
/// data over rc_verbs only (no TCP or shared memory transport allowed), with data checks
/// (`-q`). UCX drives its QPs itself: the REQ and REP name them in `qp_num` (no QP on the
/// ids), the client hears CONNECT_RESPONSE and sends the RTU with rdma_establish.
#[test]
fn ucx_io_demo_connects_through_rdma_cm() {
    if !have("io_demo", "ucx-utils") {
        return;
    }
    let p = port().to_string();
    let b = hosts().b.addr;
    let env = [
        ("UCX_SOCKADDR_TLS_PRIORITY", "rdmacm"),
        ("UCX_TLS", "rc_verbs,self"),
        ("UCX_NET_DEVICES", "rxe0:1"),
    ];
    // The server serves until it is stopped (when `s` drops).
    let s = Run::start(&hosts().b, &["io_demo", "-p", &p], &env);
    std::thread::sleep(Duration::from_millis(500));
    let c = Run::start(
        &hosts().a,
        &["io_demo", "-p", &p, "-i", "200", "-q", "-c", "5", b],
        &env,
    )
    .wait();
    drop(s);
    ours(&c);
    assert!(
        c.stdout.contains("Connected to server [0]")
            && c.stdout.contains("write ")
            && c.stdout.contains("Client exit with status 'OK'"),
        "{}:\n{}\n{}",
        c.what,
        c.stdout,
        c.stderr
    );
}
