//! UCX 1.13 and libfabric 1.17 on the drop-in libibverbs.so.1: `ucx_info -d` lists the softib
//! device with `rc_verbs` and `ud_verbs`, `ucx_perftest` runs tag matching and puts between
//! two softib hosts over each, and `fi_info -p verbs` lists the device.
//!
//! UCX offers a verbs device only where `/dev/infiniband/<dev_name>` is a character device;
//! `softib run` gives the program a private `/dev` that has one (root or unprivileged user
//! namespaces), so these tests need that too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dropin;

use dropin::{have, hosts, port, Done, Run};

/// Whether this machine lets `softib run` give a program its /dev/infiniband (it says so when
/// it cannot), or has one already.
fn device_files_work() -> bool {
    let h = hosts();
    let d = Run::start(&h.a, &["ls", "/dev/infiniband/uverbs0"], &[]).wait();
    if d.status.success() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none_or(|v| v != "true"),
        "softib run gave no /dev/infiniband under CI=true (root):\n{}",
        d.stderr
    );
    eprintln!(
        "skipped: softib run cannot make /dev/infiniband here:\n{}",
        d.stderr
    );
    false
}

#[test]
fn ucx_info_lists_the_device_with_rc_verbs_and_ud_verbs() {
    if !have("ucx_info", "ucx-utils") || !device_files_work() {
        return;
    }
    let d = Run::start(&hosts().a, &["ucx_info", "-d"], &[]).wait();
    d.ok();
    let md = d
        .stdout
        .split("# Memory domain: ")
        .find(|s| s.starts_with("rxe0"))
        .unwrap_or_else(|| panic!("no memory domain rxe0:\n{}", d.stdout));
    for tl in [
        "Transport: rc_verbs",
        "Transport: ud_verbs",
        "Device: rxe0:1",
    ] {
        assert!(md.contains(tl), "{tl} missing:\n{md}");
    }
}

/// A `ucx_perftest` pair (server on host B); asserts both finished, loaded softib's
/// libibverbs and the client reported `iters` iterations.
fn perftest(test: &str, extra: &[&str], tls: Option<&str>, iters: u32) {
    let p = port().to_string();
    let n = iters.to_string();
    let mut args = vec!["ucx_perftest", "-t", test, "-n", &n, "-p", &p];
    args.extend(extra);
    let mut env = vec![("UCX_NET_DEVICES", "rxe0:1")];
    if let Some(t) = tls {
        env.push(("UCX_TLS", t));
    }
    let (s, c) = dropin::pair(&args, &args, &env);
    s.ok();
    c.ok();
    let fin = final_line(&c);
    assert_eq!(
        fin.first().copied(),
        Some(f64::from(iters)),
        "{}: iterations\n{}",
        c.what,
        c.stdout
    );
    assert!(fin.iter().skip(1).any(|v| *v > 0.0), "{}", c.stdout);
}

/// The numbers of `ucx_perftest`'s `Final:` line.
fn final_line(d: &Done) -> Vec<f64> {
    d.stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Final:"))
        .unwrap_or_else(|| panic!("{}: no Final line:\n{}\n{}", d.what, d.stdout, d.stderr))
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

#[test]
fn ucx_perftest_runs_over_rc_verbs_and_ud_verbs() {
    if !have("ucx_perftest", "ucx-utils") || !device_files_work() {
        return;
    }
    // UCX connects RC endpoints through an auxiliary transport: ud_verbs, used for nothing
    // else (`:aux`).
    for tls in ["rc_verbs,ud_verbs:aux", "ud_verbs"] {
        for test in ["tag_lat", "tag_bw", "ucp_put_bw"] {
            perftest(test, &[], Some(tls), 200);
        }
    }
    // put_bw itself is a UCT test: on one transport, which UD does not offer puts on.
    perftest("put_bw", &["-d", "rxe0:1", "-x", "rc_verbs"], None, 200);
}

#[test]
fn fi_info_lists_the_device_under_the_verbs_provider() {
    if !have("fi_info", "libfabric-bin") {
        return;
    }
    let d = Run::start(&hosts().a, &["fi_info", "-p", "verbs"], &[]).wait();
    d.ok();
    for want in [
        "provider: verbs",
        "domain: rxe0",
        "FI_EP_MSG",
        "domain: rxe0-dgram",
    ] {
        assert!(d.stdout.contains(want), "{want} missing:\n{}", d.stdout);
    }
}
