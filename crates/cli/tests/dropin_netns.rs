//! Debian's unmodified RDMA programs that want more than loopback, between two softib hosts
//! whose devices sit on the two ends of a veth pair inside a network namespace this test
//! binary makes (`dropin::netns_hosts`; root only): libfabric's verbs provider, which finds
//! its devices by the addresses of network interfaces and connects with rdma_cm, and mckey,
//! whose multicast datagrams are IP multicast on RoCE.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dropin;

use std::time::{Duration, Instant};

use dropin::{have, netns_hosts, port, Done, Host, Run};

/// Runs `client` on `host` until its out-of-band connection is no longer refused (the
/// server may not listen yet), for at most 20 s.
fn client_once_listening(host: &Host, client: &[&str], env: &[(&str, &str)]) -> Done {
    let t0 = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let c = Run::start(host, client, env).wait();
        let said = format!("{}{}", c.stdout, c.stderr);
        let refused = said.contains("Connection refused");
        if c.status.success() || !refused || t0.elapsed() > Duration::from_secs(20) {
            return c;
        }
    }
}

/// Runs `fi_pingpong -p PROVIDER -e EP` between the two namespace hosts (20 iterations of
/// 4 KiB) and checks both sides reported all 20.
fn fi_pingpong(provider: &str, ep: &str) {
    if !have("fi_pingpong", "libfabric-bin") {
        return;
    }
    let Some(h) = netns_hosts() else { return };
    let ctrl = port().to_string();
    let env = [("FI_UNIVERSE_SIZE", "16")];
    let common = [
        "fi_pingpong",
        "-p",
        provider,
        "-e",
        ep,
        "-I",
        "20",
        "-S",
        "4096",
    ];
    let server: Vec<&str> = common.iter().copied().chain(["-B", &ctrl]).collect();
    let client: Vec<&str> = common
        .iter()
        .copied()
        .chain(["-P", &ctrl, h.b.addr])
        .collect();
    let s = Run::start(&h.b, &server, &env);
    let c = client_once_listening(&h.a, &client, &env);
    let s = s.wait();
    for d in [&s, &c] {
        d.ok();
        d.loaded_ours_lib("librdmacm.so.1");
        // bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec, for the one size.
        let row = d
            .stdout
            .lines()
            .find(|l| l.starts_with("4k "))
            .unwrap_or_else(|| panic!("{}: no result line\n{}\n{}", d.what, d.stdout, d.stderr));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            (cols.get(1), cols.get(2)),
            (Some(&"20"), Some(&"=20")),
            "{}: {row}",
            d.what
        );
    }
}

/// `fi_pingpong -p "verbs;ofi_rxm" -e rdm`: libfabric's RxM over its verbs provider, whose
/// MSG endpoints connect with rdma_cm (a synchronous id resolved, then migrated to the
/// provider's event channel; RDMA_MAX_RESP_RES in the connection parameters), and whose
/// listener takes the device's interface address (it binds localhost first). Debian 12 has no
/// fabtests, so no `fi_rdm_pingpong`: this is the same endpoint type.
///
/// RxM sizes its completion queue for a universe of 256 peers, (tx 512 + rx 512) × 256 =
/// 262144 entries, beyond the 32767 softib's device (as rxe's) allows; FI_UNIVERSE_SIZE
/// tells it this job has two.
#[test]
fn fi_pingpong_over_verbs_and_rxm_connects_with_rdma_cm() {
    fi_pingpong("verbs;ofi_rxm", "rdm");
}

/// `fi_pingpong -p verbs -e msg`: the verbs provider's own connected endpoints, one rdma_cm
/// connection each way of the test with libfabric's connection data in the private data.
#[test]
fn fi_pingpong_over_verbs_msg_endpoints_connects_with_rdma_cm() {
    fi_pingpong("verbs", "msg");
}

/// Whether the interface of `host` has joined IPv4 multicast group `group` (its device's
/// QP attached to it).
fn joined(host: &Host, group: &str) -> bool {
    let ns = host.netns.as_deref().unwrap();
    let o = std::process::Command::new("ip")
        .args(["-n", ns, "maddr", "show"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).contains(group)
}

/// mckey (rdmacm-utils) on RoCE: the receiver's `rdma_join_multicast` maps IPv4 group
/// 239.77.0.9 to its GID `::ffff:239.77.0.9` and attaches its UD QP (the daemon has its device
/// join the group on its interface); the sender joins send-only and sends 10 datagrams to the
/// group with the address handle MULTICAST_JOIN gave (QPN 0xFFFFFF, rdma_cm's Q_Key), which
/// cross the veth pair as IP multicast and reach the receiver's QP.
#[test]
fn mckey_sends_to_a_multicast_group_on_roce() {
    if !have("mckey", "rdmacm-utils") {
        return;
    }
    let Some(h) = netns_hosts() else { return };
    let group = "239.77.0.9";
    let receiver = Run::start(
        &h.b,
        &["mckey", "-m", group, "-b", h.b.addr, "-C", "10"],
        &[],
    );
    let t0 = Instant::now();
    while !joined(&h.b, group) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the receiver's device did not join {group}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let sender = Run::start(
        &h.a,
        &["mckey", "-m", group, "-b", h.a.addr, "-s", "-C", "10"],
        &[],
    )
    .wait();
    let receiver = receiver.wait();
    for d in [&sender, &receiver] {
        d.ok();
        d.loaded_ours_lib("librdmacm.so.1");
        assert!(
            d.stdout.contains(&format!("joined dgid: ::ffff:{group}"))
                && d.stdout.contains("data transfers complete")
                && d.stdout.contains("return status 0"),
            "{}:\n{}\n{}",
            d.what,
            d.stdout,
            d.stderr
        );
    }
    assert!(
        receiver.stdout.contains("receiving data transfers"),
        "{}",
        receiver.stdout
    );
    // The receiver left (rdma_leave_multicast, its QP destroyed): the device leaves the group.
    let t0 = Instant::now();
    while joined(&h.b, group) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the receiver's device is still in {group} after it left"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
