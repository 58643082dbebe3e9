//! softib-wire's emitted packets, judged by tshark (Wireshark's dissectors, which softib did
//! not write).
//!
//! One packet of every opcode softib implements (several for ACK syndromes, IPv4 and IPv6) is
//! built with softib's own API, written to a pcap (Ethernet/IP/UDP 4791), and decoded by one
//! `tshark -T json -x` run. The test requires: no malformed packet and no expert item (with IP
//! and UDP checksum validation on), every packet decoded as InfiniBand with the opcode emitted,
//! every field tshark decodes equal to the one emitted, and every ICRC valid by the independent
//! computation in `common` (tshark never checks ICRCs).
//!
//! Set `SOFTIB_KEEP_PCAP=1` to keep the pcap for a look in Wireshark.
//!
//! tshark missing: the test prints why and passes, unless the environment variable `CI` is set,
//! where it fails (CI must run it).

mod common;

use common::mads::{mad_cases, Want};
use common::view::{compare, repr_view};
use common::{ethernet_header, hex, independent_icrc, wire_icrc, write_pcap};
use serde_json::{json, Value};
use softib_wire::ip::{udp_checksum, IpRepr, Ipv4Repr, Ipv6Repr, UdpRepr, PROTOCOL_UDP};
use softib_wire::opcode::HeaderSet;
use softib_wire::packet::{RoceV2Repr, TransportRepr};
use softib_wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, CnpRepr, DethRepr, IethRepr, ImmDtRepr,
    Opcode, PKey, Psn, QKey, Qpn, RKey, RethRepr, Syndrome,
};
use std::collections::BTreeSet;
use std::process::Command;

/// One packet to hand to tshark.
struct Case {
    name: String,
    ip: IpRepr,
    udp: UdpRepr,
    transport: TransportRepr,
    payload: Vec<u8>,
    /// For a MAD: the tshark fields and the values they must have.
    mad_want: Vec<(&'static str, Want)>,
}

impl Case {
    fn repr(&self) -> RoceV2Repr<'_> {
        RoceV2Repr {
            ip: self.ip,
            udp: self.udp,
            transport: self.transport,
            payload: &self.payload,
        }
        .normalized()
    }

    /// Emits the IP datagram; over IPv6 (and when asked over IPv4) with a real UDP checksum,
    /// computed by softib and validated by tshark.
    fn datagram(&mut self, udp_csum: bool) -> Vec<u8> {
        let repr = self.repr();
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut out);
        if udp_csum || matches!(self.ip, IpRepr::V6(_)) {
            let at = self.ip.header_len();
            self.udp.checksum = udp_checksum(&self.ip, &out[at..]);
            let repr = self.repr();
            repr.emit(&mut out);
        }
        out
    }
}

fn ipv4(i: usize) -> IpRepr {
    IpRepr::V4(Ipv4Repr {
        tos: [0x00, 0x02, 0x68, 0x03][i % 4],
        ident: [0, 0x1A2B, 0xFFFF, 1][i % 4] as u16,
        dont_frag: i % 7 != 3,
        ttl: [64, 255, 8][i % 3],
        protocol: PROTOCOL_UDP,
        src: [192, 0, 2, 1],
        dst: [192, 0, 2, 2],
    })
}

fn ipv6(i: usize) -> IpRepr {
    IpRepr::V6(Ipv6Repr {
        traffic_class: [0x00, 0x02, 0xB8, 0x68][i % 4],
        flow_label: [0, 0x12345, 0xFFFFF, 1][i % 4],
        next_header: PROTOCOL_UDP,
        hop_limit: [64, 1, 255][i % 3],
        src: [0xfd, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        dst: [0xfd, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
    })
}

/// A transport header for `opcode` with every ETH its opcode calls for, values varied by `i`.
fn transport(opcode: Opcode, i: usize, syndrome: u8) -> TransportRepr {
    let info = opcode.info().expect("implemented opcode");
    let is_response = matches!(opcode.0 & 0x1F, 0x0D..=0x12);
    let i32_ = i as u32;
    let mut t = TransportRepr::new(BthRepr {
        opcode,
        solicited: !is_response && i % 3 == 0 && opcode.0 != 0x81,
        mig_req: i % 2 == 1,
        pad_count: 0, // set from the payload by normalized()
        tver: 0,
        pkey: PKey([0xFFFF, 0x7FFF, 0x8001, 0x1234][i % 4]),
        fecn: i % 5 == 1,
        becn: opcode.0 == 0x81 || i % 4 == 2,
        dest_qpn: Qpn::new([0x11, 0xFF_FFFE, 0x12_3456, 2][i % 4]),
        ack_req: !is_response && opcode.0 < 0x20 && i % 2 == 0,
        psn: Psn::new([0xFF_FFFF, 0, 1, 0xFF_FFFE, 0x80_0000][i % 5]),
    });
    let h = info.headers;
    if h.contains(HeaderSet::DETH) {
        t.deth = Some(DethRepr {
            qkey: QKey(0x1111_1111),
            src_qpn: Qpn::new(0x00_0100 + i32_),
        });
    }
    if h.contains(HeaderSet::RETH) {
        t.reth = Some(RethRepr {
            va: 0x0000_7F00_DEAD_B000 + u64::from(i32_),
            rkey: RKey(0x1234_5678 ^ i32_),
            dma_len: 4096 + i32_,
        });
    }
    if h.contains(HeaderSet::ATOMIC_ETH) {
        t.atomic_eth = Some(AtomicEthRepr {
            va: 0xFFFF_FFFF_FFFF_FFF8 - 8 * u64::from(i32_),
            rkey: RKey(0xCAFE_0000 | i32_),
            swap_add: 0xFFFF_FFFF_FFFF_FFFF - u64::from(i32_),
            compare: if opcode.0 & 0x1F == 0x13 {
                0x0123_4567_89AB_CDEF
            } else {
                0
            },
        });
    }
    if h.contains(HeaderSet::AETH) {
        t.aeth = Some(AethRepr {
            syndrome: Syndrome::from(syndrome),
            msn: [0xFF_FFFF, 0, 0x12_3456][i % 3],
        });
    }
    if h.contains(HeaderSet::ATOMIC_ACK_ETH) {
        t.atomic_ack_eth = Some(AtomicAckEthRepr {
            orig: 0x8000_0000_0000_0001 + u64::from(i32_),
        });
    }
    if h.contains(HeaderSet::IMMDT) {
        t.immdt = Some(ImmDtRepr {
            data: 0xDEAD_BEEF ^ i32_,
        });
    }
    if h.contains(HeaderSet::IETH) {
        t.ieth = Some(IethRepr {
            rkey: RKey(0x0BAD_F00D + i32_),
        });
    }
    if h.contains(HeaderSet::CNP) {
        t.cnp = Some(CnpRepr);
    }
    t
}

fn payload(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|k| (k * 31 + seed * 7 + 1) as u8).collect()
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |name: String, ip: IpRepr, t: TransportRepr, payload: Vec<u8>, i: usize| {
        cases.push(Case {
            name,
            ip,
            udp: UdpRepr {
                src_port: 0xC000 | ((i as u16).wrapping_mul(0x1357) & 0x3FFF),
                dst_port: 4791,
                checksum: 0,
            },
            transport: t,
            payload,
            mad_want: Vec::new(),
        });
    };
    let opcodes: Vec<Opcode> = Opcode::all_known().collect();
    for (i, &op) in opcodes.iter().enumerate() {
        let info = op.info().expect("known");
        let len = if !info.has_payload {
            0
        } else if matches!(op.0 & 0x1F, 0x00 | 0x01 | 0x06 | 0x07 | 0x0D | 0x0E) {
            256 // FIRST and MIDDLE packets carry a whole (256-byte) MTU
        } else {
            [0, 1, 2, 3, 7, 13][i % 6] // pad counts 0..3
        };
        let name = format!("{} ({:#04x}) len {len}", info.name, op.0);
        add(name, ipv4(i), transport(op, i, 0x1F), payload(len, i), i);
    }
    // Every AETH syndrome class: ACK credit codes, RNR NAK timers, each NAK code.
    for (k, syn) in [
        0x00u8, 0x0F, 0x1F, 0x20, 0x2E, 0x3F, 0x60, 0x61, 0x62, 0x63, 0x64,
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("ACKNOWLEDGE syndrome {syn:#04x}");
        add(
            name,
            ipv4(k),
            transport(Opcode(0x11), k, syn),
            Vec::new(),
            k,
        );
    }
    // A few over IPv6 (with the UDP checksum softib computes).
    for (k, (op, len)) in [
        (0x04u8, 5usize),
        (0x0A, 6),
        (0x0C, 0),
        (0x11, 0),
        (0x12, 0),
        (0x14, 0),
        (0x17, 7),
        (0x29, 3),
        (0x65, 9),
        (0x81, 0),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!(
            "{} ({op:#04x}) len {len} over IPv6",
            Opcode(op).info().expect("known").name
        );
        add(
            name,
            ipv6(k),
            transport(Opcode(op), k + 3, 0x1F),
            payload(len, k),
            k,
        );
    }
    // MADs as UD SEND_ONLY with DETH: SMPs to QP0, GMPs (SA, PMA) to QP1 with the GSI Q_Key.
    for (k, m) in mad_cases().into_iter().enumerate() {
        let mut t = transport(Opcode::UD_SEND_ONLY, k, 0x1F);
        t.bth.dest_qpn = Qpn::new(m.qpn);
        t.bth.pkey = PKey(0xFFFF);
        t.bth.solicited = false;
        t.deth = Some(DethRepr {
            qkey: if m.qpn == 1 { QKey::GSI } else { QKey(0) },
            src_qpn: Qpn::new(m.qpn),
        });
        cases.push(Case {
            name: m.name,
            ip: ipv4(k),
            udp: UdpRepr {
                src_port: 0xC000 | (m.qpn as u16),
                dst_port: 4791,
                checksum: 0,
            },
            transport: t,
            payload: m.mad.to_vec(),
            mad_want: m.want,
        });
    }
    cases
}

// ------------------------------------------------------------------------------------------
// Reading tshark's JSON
// ------------------------------------------------------------------------------------------

/// A tshark field value as a number: "0x..." is hex, otherwise decimal.
fn num(v: &Value) -> Option<u64> {
    let s = v.as_str()?;
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// An FT_BYTES value ("de:ad:be:ef", or "80" for one byte) read big-endian.
fn bytes_num(v: &Value) -> Option<u64> {
    u64::from_str_radix(&v.as_str()?.replace(':', ""), 16).ok()
}

/// End offset (in the frame) of a field from its `_raw` array `[hex, offset, len, mask, type]`.
fn raw_end(v: &Value) -> Option<u64> {
    Some(v.get(1)?.as_u64()? + v.get(2)?.as_u64()?)
}

/// The first value of `key` anywhere below `v`.
fn find<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Object(m) => m.get(key).or_else(|| m.values().find_map(|c| find(c, key))),
        Value::Array(a) => a.iter().find_map(|c| find(c, key)),
        _ => None,
    }
}

/// Every `_ws.expert` / `_ws.malformed` item below `v`, as text.
fn problems(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                if k.starts_with("_ws.expert") || k.starts_with("_ws.malformed") {
                    out.push(format!("{k}: {c}"));
                } else {
                    problems(c, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|c| problems(c, out)),
        _ => {}
    }
}

/// The fields tshark decoded, under the vector keys (as `gen_vectors.py` maps them).
fn tshark_view(layers: &Value) -> Result<Value, String> {
    let ib = layers
        .get("infiniband")
        .ok_or("no infiniband layer (not decoded as RoCEv2)")?;
    let bth = ib.get("infiniband.bth_tree").ok_or("no BTH")?;
    let f = |tree: &Value, k: &str| -> Result<u64, String> {
        tree.get(k)
            .and_then(num)
            .ok_or_else(|| format!("no numeric {k}"))
    };
    let ecn = bth
        .get("infiniband.reserved")
        .and_then(bytes_num)
        .ok_or("no BTH byte 4")?;
    let mut t = json!({
        "opcode": f(bth, "infiniband.bth.opcode")?,
        "se": f(bth, "infiniband.bth.se")?,
        "migreq": f(bth, "infiniband.bth.m")?,
        "pad": f(bth, "infiniband.bth.padcnt")?,
        "tver": f(bth, "infiniband.bth.tver")?,
        "pkey": f(bth, "infiniband.bth.p_key")?,
        "fecn": (ecn >> 7) & 1,
        "becn": (ecn >> 6) & 1,
        "dqpn": f(bth, "infiniband.bth.destqp")?,
        "ackreq": f(bth, "infiniband.bth.a")?,
        "psn": f(bth, "infiniband.bth.psn")?,
    });
    let pad = f(bth, "infiniband.bth.padcnt")?;
    let mut end = bth
        .get("infiniband.bth.psn_raw")
        .and_then(raw_end)
        .ok_or("no BTH offsets")?;
    let mut note_end = |key: &str| {
        if let Some(e) = ib.get(format!("{key}_raw")).and_then(raw_end) {
            end = end.max(e);
        }
    };
    if let Some(r) = ib.get("infiniband.reth_tree") {
        t["reth"] = json!({"va": f(r, "infiniband.reth.va")?, "rkey": f(r, "infiniband.reth.r_key")?,
                           "dma_len": f(r, "infiniband.reth.dmalen")?});
        note_end("infiniband.reth");
    }
    if let Some(r) = ib.get("infiniband.aeth_tree") {
        t["aeth"] = json!({"syndrome": f(r, "infiniband.aeth.syndrome")?,
                           "msn": f(r, "infiniband.aeth.msn")?});
        note_end("infiniband.aeth");
    }
    if let Some(r) = ib.get("infiniband.deth_tree") {
        t["deth"] = json!({"qkey": f(r, "infiniband.deth.q_key")?,
                           "src_qp": f(r, "infiniband.deth.srcqp")?});
        note_end("infiniband.deth");
    }
    if let Some(v) = ib.get("infiniband.immdt") {
        t["immdt"] = json!(bytes_num(v).ok_or("bad immdt")?);
        note_end("infiniband.immdt");
    }
    if let Some(v) = ib.get("infiniband.ieth") {
        t["ieth"] = json!({"rkey": bytes_num(v).ok_or("bad ieth")?});
        note_end("infiniband.ieth");
    }
    if let Some(r) = ib.get("infiniband.atomiceth_tree") {
        t["atomiceth"] = json!({"va": f(r, "infiniband.reth.va")?,
                                "rkey": f(r, "infiniband.reth.r_key")?,
                                "swap_add": f(r, "infiniband.atomiceth.swapdt")?,
                                "compare": f(r, "infiniband.atomiceth.cmpdt")?});
        note_end("infiniband.atomiceth");
    }
    if let Some(r) = ib.get("infiniband.atomicacketh_tree") {
        t["atomicacketh"] = json!({"orig": f(r, "infiniband.atomicacketh.origremdt")?});
        note_end("infiniband.atomicacketh");
    }
    match (
        ib.get("infiniband.invariant.crc").and_then(num),
        ib.get("infiniband.invariant.crc_raw")
            .and_then(|r| r.get(1))
            .and_then(Value::as_u64),
    ) {
        (Some(be), Some(crc_at)) => {
            // tshark reads the little-endian wire bytes as big-endian
            t["icrc"] = json!((be as u32).swap_bytes());
            t["payload_len"] = json!(crc_at - end - pad);
        }
        _ => {
            t["icrc"] = Value::Null; // CNP (shown as an opaque vendor blob)
            t["payload_len"] = Value::Null;
            if let Some(mad) = find(ib, "infiniband.mad_raw") {
                t["payload_len"] = json!(mad.get(2).and_then(Value::as_u64));
            }
        }
    }
    let udp = layers.get("udp").ok_or("no udp layer")?;
    let mut ip = if let Some(v4) = layers.get("ip") {
        t["ip_version"] = json!(4);
        json!({"tos": find(v4, "ip.dsfield").and_then(num), "id": find(v4, "ip.id").and_then(num),
               "df": find(v4, "ip.flags.df").and_then(num), "ttl": find(v4, "ip.ttl").and_then(num)})
    } else {
        let v6 = layers.get("ipv6").ok_or("neither ip nor ipv6")?;
        t["ip_version"] = json!(6);
        json!({"tclass": find(v6, "ipv6.tclass").and_then(num),
               "flow": find(v6, "ipv6.flow").and_then(num),
               "hlim": find(v6, "ipv6.hlim").and_then(num)})
    };
    ip["sport"] = json!(find(udp, "udp.srcport").and_then(num));
    ip["dport"] = json!(find(udp, "udp.dstport").and_then(num));
    ip["udp_len"] = json!(find(udp, "udp.length").and_then(num));
    ip["udp_csum"] = json!(find(udp, "udp.checksum").and_then(num));
    t["ip"] = ip;
    Ok(t)
}

/// Every value of `key` below `v`; fields tshark repeats (merged into arrays by
/// `--no-duplicate-keys`) are flattened in order.
fn find_all<'a>(v: &'a Value, key: &str, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                if k == key {
                    match c {
                        Value::Array(a) => out.extend(a.iter()),
                        other => out.push(other),
                    }
                } else {
                    find_all(c, key, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|c| find_all(c, key, out)),
        _ => {}
    }
}

/// Checks the MAD fields tshark decoded against what was emitted.
fn check_mad(layers: &Value, want: &[(&'static str, Want)], ctx: &str, errors: &mut Vec<String>) {
    if want.is_empty() {
        return;
    }
    let Some(ib) = layers.get("infiniband") else {
        return; // reported elsewhere
    };
    for (key, w) in want {
        let mut found = Vec::new();
        find_all(ib, key, &mut found);
        let nums: Vec<Option<u64>> = found.iter().map(|v| num(v)).collect();
        let ok = match w {
            Want::N(x) => !nums.is_empty() && nums.iter().all(|v| *v == Some(*x)),
            Want::Ns(xs) => nums == xs.iter().map(|x| Some(*x)).collect::<Vec<_>>(),
            Want::Bytes(b) => {
                found.len() == 1 && found[0].as_str().map(|s| s.replace(':', "")) == Some(hex(b))
            }
            Want::S(s) => found.len() == 1 && found[0].as_str() == Some(s.as_str()),
        };
        if !ok {
            let shown: Vec<String> = found.iter().map(|v| v.to_string()).collect();
            errors.push(format!(
                "{ctx}: {key}: want {w:?}, tshark shows [{}]",
                shown.join(", ")
            ));
        }
    }
}

/// Runs tshark over `pcap`; `None` when tshark is not installed.
fn run_tshark(pcap: &std::path::Path) -> Option<Value> {
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(pcap).args([
        "-T",
        "json",
        "--no-duplicate-keys",
        "-x",
        "-o",
        "ip.check_checksum:TRUE",
        "-o",
        "udp.check_checksum:TRUE",
    ]);
    for h in common::TSHARK_HEURISTICS_OFF {
        cmd.args(["--disable-heuristic", h]);
    }
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("cannot run tshark: {e}"),
    };
    assert!(
        out.status.success(),
        "tshark failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("tshark -T json output is JSON"))
}

#[test]
fn tshark_decodes_what_softib_emits() {
    let mut cases = cases();
    let mut frames = Vec::new();
    let mut datagrams = Vec::new();
    for (i, c) in cases.iter_mut().enumerate() {
        let d = c.datagram(i % 9 == 4);
        let ethertype = match c.ip {
            IpRepr::V4(_) => 0x0800,
            IpRepr::V6(_) => 0x86DD,
        };
        let mut frame = ethernet_header(ethertype);
        frame.extend_from_slice(&d);
        frames.push(frame);
        datagrams.push(d);
    }
    let pcap = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("softib_wire_tshark_{}.pcap", std::process::id()));
    std::fs::write(&pcap, write_pcap(&frames)).expect("write pcap");
    let decoded = run_tshark(&pcap);
    if std::env::var_os("SOFTIB_KEEP_PCAP").is_some() {
        eprintln!("pcap kept at {}", pcap.display());
    } else {
        let _ = std::fs::remove_file(&pcap);
    }
    let Some(decoded) = decoded else {
        let msg = "tshark is not installed: softib's packets were NOT checked against Wireshark \
                   (install it with `apt-get install tshark`)";
        if std::env::var_os("CI").is_some() {
            panic!("{msg}; CI is set, so this is a failure");
        }
        eprintln!("SKIPPED: {msg}");
        return;
    };
    let decoded = decoded.as_array().expect("tshark JSON is an array");
    assert_eq!(
        decoded.len(),
        frames.len(),
        "tshark saw another number of frames"
    );

    let mut errors = Vec::new();
    let mut opcodes = BTreeSet::new();
    for (i, ((c, d), pkt)) in cases.iter().zip(&datagrams).zip(decoded).enumerate() {
        let ctx = format!("frame {} ({})", i + 1, c.name);
        let layers = &pkt["_source"]["layers"];
        let mut probs = Vec::new();
        problems(layers, &mut probs);
        for p in probs {
            errors.push(format!("{ctx}: tshark: {p}"));
        }
        if layers["frame_raw"].get(0).and_then(Value::as_str) != Some(&hex(&frames[i])) {
            errors.push(format!("{ctx}: tshark read other bytes than were written"));
        }
        // The ICRC on the wire must be right by a computation softib had no part in.
        let want_icrc = independent_icrc(d);
        if wire_icrc(d) != want_icrc {
            errors.push(format!(
                "{ctx}: ICRC on the wire {:#010x}, independent computation {want_icrc:#010x}",
                wire_icrc(d)
            ));
        }
        let expected = repr_view(&c.repr(), wire_icrc(d));
        match tshark_view(layers) {
            Err(e) => errors.push(format!("{ctx}: {e}")),
            Ok(t) => {
                if let Some(op) = t["opcode"].as_u64() {
                    opcodes.insert(op);
                }
                compare(
                    &t,
                    &expected,
                    "",
                    false,
                    &mut errors,
                    &format!("{ctx}: tshark"),
                );
                check_mad(layers, &c.mad_want, &ctx, &mut errors);
                // Every ETH emitted must have been decoded by tshark.
                for k in [
                    "reth",
                    "aeth",
                    "deth",
                    "immdt",
                    "ieth",
                    "atomiceth",
                    "atomicacketh",
                ] {
                    if expected.get(k).is_some() && t.get(k).is_none() {
                        errors.push(format!("{ctx}: tshark did not decode the {k} emitted"));
                    }
                }
            }
        }
    }
    if !errors.is_empty() {
        panic!("{} problem(s):\n{}", errors.len(), errors.join("\n"));
    }
    let emitted: BTreeSet<u64> = cases
        .iter()
        .map(|c| u64::from(c.transport.bth.opcode.0))
        .collect();
    assert_eq!(opcodes, emitted, "tshark decoded another set of opcodes");
    let all: BTreeSet<u64> = Opcode::all_known().map(|o| u64::from(o.0)).collect();
    assert_eq!(emitted, all, "not every implemented opcode was emitted");
    let mads = cases.iter().filter(|c| !c.mad_want.is_empty()).count();
    let mad_fields: usize = cases.iter().map(|c| c.mad_want.len()).sum();
    eprintln!(
        "tshark decoded {} packets ({} opcodes, {mads} MADs with {mad_fields} MAD fields) as \
         emitted; every ICRC verified independently",
        frames.len(),
        opcodes.len()
    );
}
