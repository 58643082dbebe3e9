//! Debian's unmodified RDMA programs that want more than loopback, between two softib hosts
//! whose devices sit on the two ends of a veth pair inside a network namespace this test
//! binary makes (`dropin::netns_hosts`; root only): libfabric's verbs provider, which finds
//! its devices by the addresses of network interfaces and connects with rdma_cm.
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

/// `fi_pingpong -p "verbs;ofi_rxm" -e rdm`: libfabric's RxM over its verbs provider, whose
/// MSG endpoints connect with rdma_cm (a synchronous id resolved, then migrated to the
/// provider's event channel; RDMA_MAX_RESP_RES in the connection parameters), and whose
/// listener takes the device's interface address (it binds localhost first).
///
/// RxM sizes its completion queue for a universe of 256 peers, (tx 512 + rx 512) × 256 =
/// 262144 entries, beyond the 32767 softib's device (as rxe's) allows; FI_UNIVERSE_SIZE
/// tells it this job has two.
#[test]
fn fi_pingpong_over_verbs_and_rxm_connects_with_rdma_cm() {
    if !have("fi_pingpong", "libfabric-bin") {
        return;
    }
    let Some(h) = netns_hosts() else { return };
    let ctrl = port().to_string();
    let env = [("FI_UNIVERSE_SIZE", "16")];
    let common = [
        "fi_pingpong",
        "-p",
        "verbs;ofi_rxm",
        "-e",
        "rdm",
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
