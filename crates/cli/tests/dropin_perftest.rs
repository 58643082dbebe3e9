//! Debian's perftest 4.5 on the drop-in libibverbs.so.1 between two softib hosts: all eight
//! `ib_{send,write,read,atomic}_{bw,lat}` over each connection type they allow, all sizes
//! (`-a`, but atomics have one), four QPs (`-q 4`, the bandwidth tests), completion events
//! (`-e`, which perftest has for SEND), and each against softib's own perftest on the other
//! host, both ways (the out-of-band exchanges must agree).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dropin;

use dropin::{have, mixed_pair, pair, perftest_result, port, Done};

const TOOLS: [&str; 8] = [
    "ib_send_bw",
    "ib_send_lat",
    "ib_write_bw",
    "ib_write_lat",
    "ib_read_bw",
    "ib_read_lat",
    "ib_atomic_bw",
    "ib_atomic_lat",
];

/// The connection types a tool allows (perftest refuses the others).
fn connections(tool: &str) -> &'static [&'static str] {
    if tool.starts_with("ib_send") {
        &["RC", "UC", "UD"]
    } else if tool.starts_with("ib_write") {
        &["RC", "UC"]
    } else {
        &["RC"]
    }
}

/// Asserts both sides finished and the client measured `iters` iterations of its last size.
fn moved(server: &Done, client: &Done, iters: f64) {
    for (d, other) in [(server, client), (client, server)] {
        assert!(
            d.status.success(),
            "{} failed ({:?}):\n{}\n{}\n-- and {} ({:?}):\n{}\n{}",
            d.what,
            d.status,
            d.stdout,
            d.stderr,
            other.what,
            other.status,
            other.stdout,
            other.stderr
        );
    }
    let r = perftest_result(&client.stdout)
        .unwrap_or_else(|| panic!("{}: no result line:\n{}", client.what, client.stdout));
    assert_eq!(
        r[1], iters,
        "{}: iterations\n{}",
        client.what, client.stdout
    );
    // Bandwidth tests: BW average; latency tests: t_max (perftest prints -nan for some
    // deviations of few iterations, so only what must be there is looked at).
    assert!(
        r.len() >= 4 && r[3] > 0.0,
        "{}: nothing measured\n{}",
        client.what,
        client.stdout
    );
}

fn run(tool: &str, extra: &[&str], iters: u32) {
    let p = port().to_string();
    let n = iters.to_string();
    let mut args = vec![tool, "-d", "rxe0", "-p", &p, "-n", &n];
    args.extend(extra);
    let (s, c) = pair(&args, &args, &[]);
    s.loaded_ours();
    c.loaded_ours();
    // perftest counts the iterations of every QP.
    let qps: u32 = extra
        .windows(2)
        .find(|w| w[0] == "-q")
        .and_then(|w| w[1].parse().ok())
        .unwrap_or(1);
    moved(&s, &c, f64::from(iters * qps));
}

#[test]
fn the_eight_tools_run_over_each_connection_type_they_allow() {
    if !have("ib_send_bw", "perftest") {
        return;
    }
    for tool in TOOLS {
        for c in connections(tool) {
            run(tool, &["-c", c], 100);
        }
    }
}

#[test]
fn all_sizes_run() {
    if !have("ib_send_bw", "perftest") {
        return;
    }
    // Every size from 2 B to 8 MiB for a bandwidth and a latency test of each kind that has
    // sizes (atomics have one: "Message size cannot be changed for Atomic tests"); three of
    // the six, as each takes tens of seconds in a debug build.
    for tool in ["ib_send_bw", "ib_write_lat", "ib_read_bw"] {
        run(tool, &["-a"], 5);
    }
}

#[test]
fn four_qps_and_completion_events_run() {
    if !have("ib_send_bw", "perftest") {
        return;
    }
    for tool in TOOLS.iter().filter(|t| t.ends_with("_bw")) {
        run(tool, &["-q", "4"], 100);
    }
    // perftest has events for SEND only ("Events feature not available on WRITE verb").
    for tool in TOOLS.iter().filter(|t| t.starts_with("ib_send")) {
        run(tool, &["-e"], 100);
    }
}

#[test]
fn upstream_perftest_and_softibs_own_interoperate_both_ways() {
    if !have("ib_send_bw", "perftest") {
        return;
    }
    for tool in TOOLS {
        for (server_upstream, client_upstream) in [(true, false), (false, true)] {
            let p = port().to_string();
            let args = [tool, "-d", "rxe0", "-p", &p, "-n", "100"];
            let (s, c) = mixed_pair(server_upstream, client_upstream, &args);
            if server_upstream {
                s.loaded_ours();
            } else {
                c.loaded_ours();
            }
            moved(&s, &c, 100.0);
        }
    }
}

/// Debian's perftest on the process data path (`SOFTIB_DATAPATH=process`): the drop-in's
/// contexts run their devices' engines in the perftest processes themselves.
#[test]
fn the_eight_tools_run_on_the_process_data_path() {
    if !have("ib_send_bw", "perftest") {
        return;
    }
    for tool in TOOLS {
        let p = port().to_string();
        let args = [tool, "-d", "rxe0", "-p", &p, "-n", "100"];
        let (s, c) = pair(&args, &args, &[("SOFTIB_DATAPATH", "process")]);
        s.loaded_ours();
        c.loaded_ours();
        moved(&s, &c, 100.0);
    }
    // Completion events: the engines signal the channels themselves.
    for tool in TOOLS.iter().filter(|t| t.starts_with("ib_send")) {
        let p = port().to_string();
        let args = [tool, "-d", "rxe0", "-p", &p, "-n", "100", "-e"];
        let (s, c) = pair(&args, &args, &[("SOFTIB_DATAPATH", "process")]);
        moved(&s, &c, 100.0);
    }
}
