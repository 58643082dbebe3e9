//! softib-wire against packets built by implementations softib did not write.
//!
//! * `vectors/scapy_roce.json`: RoCEv2 frames built with scapy's RoCE layer (every opcode softib
//!   implements, IPv4 and IPv6), with the field values scapy was given and the values tshark
//!   decoded from them (made by `vectors/gen_vectors.py`). Every frame must parse, every field
//!   must equal both scapy's and tshark's value, the ICRC must verify and equal scapy's, and
//!   emitting the parsed repr must give back the datagram byte for byte.
//! * `vectors/rxe/*.pcap`: real traffic of the Linux Soft-RoCE driver. Every RoCEv2 packet must
//!   parse, its ICRC must verify (by softib and by the independent computation in
//!   `common`), and re-emitting must give back the same bytes.

mod common;

use common::view::{compare, repr_view};
use common::{first_difference, hex, independent_icrc, read_pcap, roce_in_ethernet, unhex};
use serde_json::{json, Value};
use softib_wire::packet::{Parsed, RoceV2Repr};
use std::collections::BTreeMap;

/// softib's view of a parsed packet, with the same keys as the JSON vectors.
fn softib_view(p: &Parsed<RoceV2Repr<'_>>) -> Value {
    repr_view(&p.repr, p.icrc)
}

fn load_vectors() -> Value {
    let path = common::vectors_dir().join("scapy_roce.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("scapy_roce.json is JSON")
}

#[test]
fn scapy_and_tshark_vectors() {
    let doc = load_vectors();
    let packets = doc["packets"].as_array().expect("packets array");
    assert!(packets.len() >= 100, "only {} vectors", packets.len());
    let mut errors = Vec::new();
    let mut opcodes = BTreeMap::<u8, usize>::new();
    for pkt in packets {
        let frame_no = pkt["frame"].as_u64().expect("frame number");
        let name = pkt["name"].as_str().expect("name");
        let ctx = format!("frame {frame_no} ({name})");
        assert_eq!(
            pkt["tshark_malformed"],
            json!(false),
            "{ctx}: tshark reported it malformed"
        );
        assert_eq!(
            pkt["tshark_expert"],
            json!([]),
            "{ctx}: tshark expert items"
        );
        let frame = unhex(pkt["hex"].as_str().expect("hex"));
        let datagram = &frame[14..];
        let scapy = &pkt["scapy"];
        let parsed = match RoceV2Repr::parse(datagram) {
            Ok(p) => p,
            Err(e) => {
                errors.push(format!("{ctx}: parse failed: {e}"));
                continue;
            }
        };
        *opcodes
            .entry(parsed.repr.transport.bth.opcode.0)
            .or_default() += 1;
        let view = softib_view(&parsed);
        compare(
            scapy,
            &view,
            "",
            true,
            &mut errors,
            &format!("{ctx}: scapy"),
        );
        compare(
            &pkt["tshark"],
            &view,
            "",
            false,
            &mut errors,
            &format!("{ctx}: tshark"),
        );
        if !parsed.icrc_ok {
            errors.push(format!(
                "{ctx}: softib says the ICRC {:#010x} is bad",
                parsed.icrc
            ));
        }
        if Some(u64::from(parsed.icrc)) != scapy["icrc"].as_u64() {
            errors.push(format!(
                "{ctx}: icrc {:#010x} != scapy's {}",
                parsed.icrc, scapy["icrc"]
            ));
        }
        if independent_icrc(datagram) != parsed.icrc {
            errors.push(format!("{ctx}: the independent ICRC disagrees"));
        }
        // The payload softib hands out is the bytes after the headers, without the pad.
        let plen = parsed.repr.payload.len();
        let pad = usize::from(parsed.repr.transport.bth.pad_count);
        let pay_end = datagram.len() - 4 - pad;
        if parsed.repr.payload != &datagram[pay_end - plen..pay_end] {
            errors.push(format!("{ctx}: payload bytes are not the frame's"));
        }
        if scapy.get("mad").is_some() {
            check_mad_roundtrip(parsed.repr.payload, &ctx, &mut errors);
        }
        // Emit must give back the same datagram.
        let mut out = vec![0u8; parsed.repr.buffer_len()];
        parsed.repr.emit(&mut out);
        if out != datagram {
            errors.push(format!(
                "{ctx}: emit differs from the original: {}\n  want {}\n  got  {}",
                first_difference(datagram, &out),
                hex(datagram),
                hex(&out)
            ));
        }
        check_masks(datagram, &ctx, &mut errors);
    }
    report("scapy/tshark vectors", &errors);
    // Every opcode softib implements is covered by a vector.
    let missing: Vec<String> = softib_wire::Opcode::all_known()
        .filter(|op| !opcodes.contains_key(&op.0))
        .map(|op| format!("{:#04x}", op.0))
        .collect();
    assert!(missing.is_empty(), "opcodes with no vector: {missing:?}");
    eprintln!(
        "checked {} scapy/tshark vectors over {} opcodes",
        packets.len(),
        opcodes.len()
    );
}

/// A MAD must decode down to its class layout and emit back into the same 256 bytes.
fn check_mad_roundtrip(payload: &[u8], ctx: &str, errors: &mut Vec<String>) {
    match softib_wire::mad::Body::parse(payload) {
        Ok(body) => {
            let mut mad = [0u8; softib_wire::mad::MAD_LEN];
            body.emit(&mut mad);
            if mad[..] != *payload {
                errors.push(format!(
                    "{ctx}: MAD emit differs: {}",
                    first_difference(payload, &mad)
                ));
            }
        }
        Err(e) => errors.push(format!("{ctx}: MAD parse failed: {e}")),
    }
}

/// The ICRC must ignore exactly the masked fields: changing TTL/hop limit, TOS/traffic class,
/// the UDP checksum or FECN/BECN keeps it valid; changing a covered byte (the PSN, the IPv4
/// Identification or the UDP source port) breaks it.
fn check_masks(datagram: &[u8], ctx: &str, errors: &mut Vec<String>) {
    let v4 = datagram[0] >> 4 == 4;
    let udp = if v4 { 20 } else { 40 };
    let bth = udp + 8;
    let masked: Vec<(&str, usize, u8)> = if v4 {
        vec![
            ("TTL", 8, 0x01),
            ("TOS", 1, 0xFC),
            ("UDP checksum", udp + 6, 0x55),
            ("FECN/BECN", bth + 4, 0xC0),
        ]
    } else {
        vec![
            ("hop limit", 7, 0x01),
            ("traffic class", 1, 0xF0),
            ("flow label", 3, 0x5A),
            ("FECN/BECN", bth + 4, 0xC0),
        ]
    };
    for (what, at, xor) in masked {
        let mut d = datagram.to_vec();
        d[at] ^= xor;
        match RoceV2Repr::parse(&d) {
            Ok(p) if p.icrc_ok => {}
            Ok(_) => errors.push(format!("{ctx}: changing {what} made the ICRC invalid")),
            Err(e) => errors.push(format!("{ctx}: changing {what} made parsing fail: {e}")),
        }
    }
    let mut covered: Vec<(&str, usize)> = vec![("PSN", bth + 11), ("UDP source port", udp + 1)];
    if v4 {
        covered.push(("IPv4 Identification", 5));
    }
    for (what, at) in covered {
        let mut d = datagram.to_vec();
        d[at] ^= 0x01;
        match RoceV2Repr::parse(&d) {
            Ok(p) if !p.icrc_ok => {}
            Ok(_) => errors.push(format!("{ctx}: changing {what} left the ICRC valid")),
            Err(e) => errors.push(format!("{ctx}: changing {what} made parsing fail: {e}")),
        }
    }
}

fn report(what: &str, errors: &[String]) {
    if !errors.is_empty() {
        let shown: Vec<&str> = errors.iter().take(60).map(String::as_str).collect();
        panic!(
            "{what}: {} problem(s):\n{}{}",
            errors.len(),
            shown.join("\n"),
            if errors.len() > shown.len() {
                "\n..."
            } else {
                ""
            }
        );
    }
}

#[test]
fn linux_rxe_captures() {
    let dir = common::vectors_dir().join("rxe");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no rxe captures in {}", dir.display());
    let mut errors = Vec::new();
    let mut total = 0usize;
    let mut mads = 0usize;
    let mut opcodes = BTreeMap::<u8, usize>::new();
    for file in &files {
        let name = file.file_name().expect("file name").to_string_lossy();
        let bytes = std::fs::read(file).expect("read pcap");
        let (linktype, records) = read_pcap(&bytes);
        assert_eq!(linktype, 1, "{name}: not an Ethernet capture");
        for rec in &records {
            let Some(roce) = roce_in_ethernet(&rec.data) else {
                continue;
            };
            let ctx = format!("{name} frame {}", rec.number);
            if rec.data.len() < rec.orig_len {
                errors.push(format!("{ctx}: truncated by the capture"));
                continue;
            }
            total += 1;
            let d = roce.datagram;
            let parsed = match RoceV2Repr::parse(d) {
                Ok(p) => p,
                Err(e) => {
                    errors.push(format!("{ctx}: parse failed: {e}"));
                    continue;
                }
            };
            *opcodes
                .entry(parsed.repr.transport.bth.opcode.0)
                .or_default() += 1;
            if !parsed.icrc_ok {
                errors.push(format!(
                    "{ctx}: softib says the ICRC {:#010x} is bad",
                    parsed.icrc
                ));
            }
            let independent = independent_icrc(d);
            if independent != common::wire_icrc(d) {
                errors.push(format!(
                    "{ctx}: the independent ICRC {independent:#010x} does not match the wire"
                ));
            }
            if parsed.icrc != common::wire_icrc(d) {
                errors.push(format!("{ctx}: reported icrc is not the wire's"));
            }
            let mut out = vec![0u8; parsed.repr.buffer_len()];
            parsed.repr.emit(&mut out);
            if out != d {
                errors.push(format!(
                    "{ctx}: emit differs from the capture: {}\n  want {}\n  got  {}",
                    first_difference(d, &out),
                    hex(d),
                    hex(&out)
                ));
            }
            check_masks(d, &ctx, &mut errors);
            let t = &parsed.repr.transport;
            if t.deth.is_some()
                && t.bth.dest_qpn.value() <= 1
                && parsed.repr.payload.len() == softib_wire::mad::MAD_LEN
            {
                mads += 1;
                check_mad_roundtrip(parsed.repr.payload, &ctx, &mut errors);
            }
        }
    }
    report("rxe captures", &errors);
    // 214 RoCEv2 packets in the 17 captures as checked in; fewer means the pcap or Ethernet
    // reader above went wrong.
    assert!(
        total >= 214,
        "only {total} RoCEv2 packets found in the rxe captures"
    );
    let ops: Vec<String> = opcodes
        .iter()
        .map(|(op, n)| format!("{op:#04x}:{n}"))
        .collect();
    eprintln!(
        "checked {total} rxe packets ({mads} MADs) from {} captures; opcodes {}",
        files.len(),
        ops.join(" ")
    );
}
