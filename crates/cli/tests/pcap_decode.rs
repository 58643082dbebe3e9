//! `softib pcap decode` as a user runs it: the real binary on real captures.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn softib() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softib"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(args: &[&str]) -> Output {
    softib().args(args).output().expect("run softib")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 output")
}

fn sample(name: &str) -> String {
    repo().join("samples").join(name).display().to_string()
}

fn temp(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("softib-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn human_output_shows_every_rxe_packet_with_good_icrc() {
    let o = run(&["pcap", "decode", &sample("rxe-rdma-read.pcap")]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = stdout(&o);
    let ib: Vec<&str> = text.lines().filter(|l| l.contains(".4791: ")).collect();
    assert_eq!(ib.len(), 10, "{text}");
    assert!(ib.iter().all(|l| l.ends_with("icrc=ok")), "{text}");
    assert!(text.contains("RC RDMA_READ_REQUEST QP=0x000016"), "{text}");
    assert!(text.contains("RC RDMA_READ_RESPONSE_ONLY"), "{text}");
    assert!(
        text.contains("RETH(va=0x562ba69d1000 rkey=0x00000747 len=64)"),
        "{text}"
    );
    // Non-IB traffic is listed, not dropped: every frame has a line.
    assert_eq!(text.lines().count(), 42);
    assert!(
        text.contains("TCP 45646 > 18515") || text.contains("TCP"),
        "{text}"
    );
}

#[test]
fn json_has_the_documented_keys_and_numbers() {
    let o = run(&["pcap", "decode", "--json", &sample("rxe-atomic-cas.pcap")]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    let packets = v.as_array().unwrap();
    let cas = packets
        .iter()
        .find(|p| p["bth"]["opcode_name"] == "RC COMPARE_SWAP")
        .expect("a COMPARE_SWAP");
    assert_eq!(cas["bth"]["opcode"], 0x13);
    assert_eq!(cas["bth"]["dqpn"], 0x18);
    assert_eq!(cas["bth"]["ackreq"], true);
    assert_eq!(cas["bth"]["pkey"], 0xffff);
    assert!(cas["atomiceth"]["va"].is_u64());
    assert_eq!(cas["atomiceth"]["rkey"], 0x919);
    assert_eq!(cas["icrc_ok"], true);
    assert_eq!(cas["payload_len"], 0);
    let ack = packets
        .iter()
        .find(|p| p["bth"]["opcode_name"] == "RC ATOMIC_ACKNOWLEDGE")
        .expect("an ATOMIC_ACKNOWLEDGE");
    assert_eq!(ack["aeth"]["kind"], "ack");
    assert_eq!(ack["aeth"]["syndrome"], 0x1f);
    assert_eq!(ack["aeth"]["value"], 31);
    assert_eq!(ack["aeth"]["msn"], 1);
    assert_eq!(ack["atomicacketh"]["orig"], 0xe8f3c963eb000c16u64);
    // Indices are 1-based and dense, like tshark's frame numbers.
    for (i, p) in packets.iter().enumerate() {
        assert_eq!(p["index"], i + 1);
    }
}

#[test]
fn corrupt_icrc_is_reported_and_exit_status_is_1() {
    let mut bytes = std::fs::read(sample("rxe-atomic-cas.pcap")).unwrap();
    // Walk the pcap records to the first RoCEv2 frame (Ethernet, IPv4, UDP port 4791) and flip
    // the last byte of its ICRC.
    let (mut at, mut index) = (24, 0);
    let corrupted = loop {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = at + 16;
        index += 1;
        if bytes[frame + 12..frame + 14] == [0x08, 0x00]
            && bytes[frame + 36..frame + 38] == [0x12, 0xb7]
        {
            bytes[frame + len - 1] ^= 0xFF;
            break index;
        }
        at = frame + len;
    };
    let path = temp("corrupt.pcap", &bytes);
    let o = run(&["pcap", "decode", "--json", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let bad: Vec<&Value> = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["icrc_ok"] == false)
        .collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0]["index"], corrupted);
}

#[test]
fn truncated_capture_reports_where_it_broke() {
    let bytes = std::fs::read(sample("rxe-rdma-read.pcap")).unwrap();
    let path = temp("truncated.pcap", &bytes[..3000]);
    let o = run(&["pcap", "decode", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let text = stdout(&o);
    assert!(
        text.lines()
            .last()
            .unwrap()
            .contains("capture file truncated after packet"),
        "{text}"
    );
    let o = run(&["pcap", "decode", "--json", path.to_str().unwrap()]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("still valid JSON");
    let last = v.as_array().unwrap().last().unwrap();
    assert!(last["error"].as_str().unwrap().contains("truncated"));
}

#[test]
fn malformed_packet_is_reported_with_what_parsed() {
    // A pcap with one raw-IP (link type 101) packet: RoCEv2 whose BTH names an RD opcode.
    let mut datagram = vec![
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4
        0xc0, 0x00, 0x12, 0xb7, 0, 0, 0, 0, // UDP
        0x44, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 5, // BTH, RD SEND_ONLY
        0, 0, 0, 0, // ICRC
    ];
    let len = datagram.len() as u16;
    datagram[2..4].copy_from_slice(&len.to_be_bytes());
    datagram[24..26].copy_from_slice(&(len - 20).to_be_bytes());
    let mut pcap = Vec::new();
    pcap.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    pcap.extend_from_slice(&2u16.to_le_bytes());
    pcap.extend_from_slice(&4u16.to_le_bytes());
    pcap.extend_from_slice(&[0; 8]);
    pcap.extend_from_slice(&65535u32.to_le_bytes());
    pcap.extend_from_slice(&101u32.to_le_bytes());
    pcap.extend_from_slice(&[0; 8]);
    pcap.extend_from_slice(&(datagram.len() as u32).to_le_bytes());
    pcap.extend_from_slice(&(datagram.len() as u32).to_le_bytes());
    pcap.extend_from_slice(&datagram);
    let path = temp("rd.pcap", &pcap);
    let o = run(&["pcap", "decode", "--json", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &v[0];
    assert_eq!(p["bth"]["opcode"], 0x44);
    assert_eq!(p["ip"]["dst"], "10.0.0.2");
    assert!(p["error"].as_str().unwrap().contains("unsupported"), "{p}");
}

#[test]
fn bad_files_fail_with_a_clear_message() {
    let path = temp("text.pcap", b"this is not a capture at all");
    let o = run(&["pcap", "decode", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not a pcap or pcapng file"), "{err}");
    let o = run(&["pcap", "decode", "/nonexistent/capture.pcap"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read capture"));
    let empty = temp("empty.pcap", b"");
    assert_eq!(
        run(&["pcap", "decode", empty.to_str().unwrap()])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn garbage_never_panics() {
    // Every prefix of a real capture and a byte-flipped copy: the tool answers, never crashes.
    let bytes = std::fs::read(sample("rxe-atomic-cas.pcap")).unwrap();
    for cut in [24, 30, 40, 57, 100, 700, 1500] {
        let path = temp(&format!("cut{cut}.pcap"), &bytes[..cut]);
        let o = run(&["pcap", "decode", "--json", path.to_str().unwrap()]);
        assert!(matches!(o.status.code(), Some(0..=2)), "cut {cut}: {o:?}");
        assert!(String::from_utf8_lossy(&o.stderr)
            .find("panicked")
            .is_none());
    }
    let mut flipped = bytes.clone();
    for (i, b) in flipped.iter_mut().enumerate().skip(24) {
        if i % 7 == 0 {
            *b ^= 0x5a;
        }
    }
    let path = temp("flipped.pcap", &flipped);
    let o = run(&["pcap", "decode", path.to_str().unwrap()]);
    assert!(matches!(o.status.code(), Some(0..=2)));
    assert!(String::from_utf8_lossy(&o.stderr)
        .find("panicked")
        .is_none());
}

/// A native IB packet: a directed-route SMP Get(NodeInfo) on VL15 to QP0, from the permissive
/// LID, as an SM sends it on its first hop.
fn native_smp() -> Vec<u8> {
    use softib_wire::mad::{self, smp, AttrId};
    use softib_wire::packet::{IbPacketRepr, TransportRepr};
    use softib_wire::*;
    let smp = smp::Repr::dr_get(0x1234, AttrId(0x0011), 0, 0, &[1, 2]).expect("a short path");
    let mut mad = vec![0u8; mad::MAD_LEN];
    mad::Body::Smp(smp).emit(&mut mad);
    let mut t = TransportRepr::new(BthRepr {
        opcode: Opcode::UD_SEND_ONLY,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: PKey::DEFAULT,
        fecn: false,
        becn: false,
        dest_qpn: Qpn::SMI,
        ack_req: false,
        psn: Psn::new(0),
    });
    t.deth = Some(DethRepr {
        qkey: QKey(0),
        src_qpn: Qpn::SMI,
    });
    let repr = IbPacketRepr {
        lrh: LrhRepr {
            vl: 15,
            lver: 0,
            sl: 0,
            lnh: Lnh::IbaLocal,
            dlid: Lid::PERMISSIVE,
            pkt_len: 0,
            slid: Lid::PERMISSIVE,
        },
        grh: None,
        transport: t,
        payload: &mad,
    }
    .normalized();
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut out);
    out
}

fn pcap_with(linktype: u32, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut pcap = Vec::new();
    pcap.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    pcap.extend_from_slice(&2u16.to_le_bytes());
    pcap.extend_from_slice(&4u16.to_le_bytes());
    pcap.extend_from_slice(&[0; 8]);
    pcap.extend_from_slice(&65535u32.to_le_bytes());
    pcap.extend_from_slice(&linktype.to_le_bytes());
    for f in frames {
        pcap.extend_from_slice(&[0; 8]);
        pcap.extend_from_slice(&(f.len() as u32).to_le_bytes());
        pcap.extend_from_slice(&(f.len() as u32).to_le_bytes());
        pcap.extend_from_slice(f);
    }
    pcap
}

#[test]
fn native_ib_link_type_with_a_directed_route_smp() {
    let path = temp("native.pcap", &pcap_with(247, &[native_smp()]));
    let o = run(&["pcap", "decode", "--json", path.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &v[0];
    assert_eq!(p["lrh"]["vl"], 15);
    assert_eq!(p["lrh"]["dlid"], 0xffff);
    assert_eq!(p["lrh"]["lnh"], 2);
    assert_eq!(p["bth"]["opcode_name"], "UD SEND_ONLY");
    assert_eq!(p["bth"]["dqpn"], 0);
    assert_eq!(p["icrc_ok"], true);
    assert_eq!(p["vcrc_ok"], true);
    assert_eq!(p["mad"]["mgmt_class"], 0x81);
    assert_eq!(p["mad"]["attr_name"], "NodeInfo");
    assert_eq!(p["mad"]["method_name"], "SubnGet");
    assert_eq!(p["mad"]["hop_ptr"], 0);
    assert_eq!(p["mad"]["hop_cnt"], 2);
    assert_eq!(p["mad"]["tid"], 0x1234);
    let text = stdout(&run(&["pcap", "decode", path.to_str().unwrap()]));
    assert!(text.contains("LID 65535 > LID 65535 VL15"), "{text}");
    assert!(text.contains("SubnGet(NodeInfo)"), "{text}");
    assert!(text.contains("icrc=ok vcrc=ok"), "{text}");
}

#[test]
fn native_ib_tunnelled_in_udp_needs_the_port() {
    let ib = native_smp();
    let mut datagram = vec![
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 2, 127, 0, 0, 3, // IPv4
        0x27, 0x0f, 0x27, 0x0f, 0, 0, 0, 0, // UDP 9999 -> 9999
    ];
    datagram.extend_from_slice(&ib);
    let len = datagram.len() as u16;
    datagram[2..4].copy_from_slice(&len.to_be_bytes());
    datagram[24..26].copy_from_slice(&(len - 20).to_be_bytes());
    let path = temp("tunnel.pcap", &pcap_with(101, &[datagram]));
    let plain = stdout(&run(&["pcap", "decode", path.to_str().unwrap()]));
    assert!(
        plain.contains("UDP 9999 > 9999 (") && plain.contains("not InfiniBand"),
        "{plain}"
    );
    let o = run(&[
        "pcap",
        "decode",
        "--ib-udp-port",
        "9999",
        "--json",
        path.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["udp"]["dst_port"], 9999);
    assert_eq!(v[0]["mad"]["attr_name"], "NodeInfo");
    assert_eq!(v[0]["vcrc_ok"], true);
}
