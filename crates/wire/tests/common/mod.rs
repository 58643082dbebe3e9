//! Helpers shared by the integration tests that check softib-wire against code softib did not
//! write (scapy, tshark, Linux rxe captures). Everything here except [`view`] and [`mads`] is
//! written from
//! the public formats (pcap, Ethernet, IPv4/IPv6, UDP, the RoCEv2 ICRC rule) and deliberately
//! does not use softib-wire itself, so that it can judge it.
#![allow(dead_code)] // each test binary uses a different subset

pub mod mads;
pub mod view;

use std::fmt::Write as _;
use std::path::PathBuf;

/// UDP destination port of RoCEv2.
pub const ROCE_PORT: u16 = 4791;

/// `crates/wire/tests/vectors`.
pub fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

/// Hex string to bytes.
pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// Bytes to hex string.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        write!(s, "{b:02x}").expect("write to String");
    }
    s
}

/// Where two byte strings first differ, for failure messages.
pub fn first_difference(a: &[u8], b: &[u8]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!(
            "first difference at byte {i}: {:#04x} vs {:#04x}",
            a[i], b[i]
        ),
        None => format!("lengths differ: {} vs {}", a.len(), b.len()),
    }
}

/// One record of a classic pcap file.
pub struct PcapRecord {
    /// 1-based frame number.
    pub number: usize,
    /// Captured bytes.
    pub data: Vec<u8>,
    /// Original length on the wire.
    pub orig_len: usize,
}

/// Reads a classic (microsecond or nanosecond, either byte order) pcap file by hand:
/// 24-byte global header, then 16-byte record headers. Returns the link type and the records.
pub fn read_pcap(bytes: &[u8]) -> (u32, Vec<PcapRecord>) {
    assert!(bytes.len() >= 24, "pcap shorter than its global header");
    let magic = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
    let le = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
        other => panic!("not a classic pcap file (magic {other:#010x})"),
    };
    let u32_at = |b: &[u8], at: usize| {
        let w: [u8; 4] = b[at..at + 4].try_into().expect("4 bytes");
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    let linktype = u32_at(bytes, 20);
    let mut records = Vec::new();
    let mut at = 24;
    while at < bytes.len() {
        assert!(
            at + 16 <= bytes.len(),
            "truncated pcap record header at {at}"
        );
        let caplen = u32_at(bytes, at + 8) as usize;
        let orig_len = u32_at(bytes, at + 12) as usize;
        at += 16;
        assert!(at + caplen <= bytes.len(), "truncated pcap record at {at}");
        records.push(PcapRecord {
            number: records.len() + 1,
            data: bytes[at..at + caplen].to_vec(),
            orig_len,
        });
        at += caplen;
    }
    (linktype, records)
}

/// Writes a classic little-endian microsecond pcap (link type 1, Ethernet) with the given
/// frames, one microsecond apart from a fixed time.
pub fn write_pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        out.extend_from_slice(&1_700_000_000u32.to_le_bytes());
        out.extend_from_slice(&(i as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
    out
}

/// An Ethernet II header for a frame carrying `ethertype`.
pub fn ethernet_header(ethertype: u16) -> Vec<u8> {
    let mut h = vec![
        0x02, 0x00, 0x5e, 0x10, 0x00, 0x02, 0x02, 0x00, 0x5e, 0x10, 0x00, 0x01,
    ];
    h.extend_from_slice(&ethertype.to_be_bytes());
    h
}

/// A RoCEv2 datagram found in an Ethernet frame.
pub struct RoceInFrame<'a> {
    /// The IP datagram, cut to the IP length (no Ethernet trailer).
    pub datagram: &'a [u8],
    /// 4 or 6.
    pub ip_version: u8,
    /// Offset of the UDP header in `datagram`.
    pub udp_offset: usize,
}

/// If `frame` is Ethernet (optionally one VLAN tag) / IPv4 or IPv6 / UDP to port 4791, returns
/// the IP datagram. Read with plain offsets, independently of softib.
pub fn roce_in_ethernet(frame: &[u8]) -> Option<RoceInFrame<'_>> {
    let mut at = 12;
    let mut ethertype = u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]);
    at += 2;
    if ethertype == 0x8100 {
        ethertype = u16::from_be_bytes([*frame.get(at + 2)?, *frame.get(at + 3)?]);
        at += 4;
    }
    let ip = frame.get(at..)?;
    let (datagram, udp_offset, version) = match ethertype {
        0x0800 => {
            if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 17 {
                return None;
            }
            let ihl = usize::from(ip[0] & 0x0F) * 4;
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            (ip.get(..total)?, ihl, 4)
        }
        0x86DD => {
            if ip.len() < 40 || ip[0] >> 4 != 6 || ip[6] != 17 {
                return None;
            }
            let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            (ip.get(..40 + plen)?, 40, 6)
        }
        _ => return None,
    };
    let udp = datagram.get(udp_offset..udp_offset + 8)?;
    if u16::from_be_bytes([udp[2], udp[3]]) != ROCE_PORT {
        return None;
    }
    Some(RoceInFrame {
        datagram,
        ip_version: version,
        udp_offset,
    })
}

/// The RoCEv2 ICRC of `datagram` (IP header through the ICRC), computed here from the rule in
/// the Linux rxe driver (`rxe_icrc.c`) and IBA Annex A17, without softib's crc module: CRC-32
/// over 8 bytes of 0xFF (the masked LRH), then the IP header with IPv4 TOS/TTL/checksum or IPv6
/// traffic class/flow label/hop limit set to ones, the UDP header with its checksum set to ones,
/// the BTH with byte 4 (FECN, BECN, reserved) set to ones, and everything after the BTH up to
/// the ICRC. Returns the CRC as it must appear, read little-endian, in the last 4 bytes.
pub fn independent_icrc(datagram: &[u8]) -> u32 {
    let mut pseudo = vec![0xFFu8; 8];
    pseudo.extend_from_slice(&datagram[..datagram.len() - 4]);
    let ip = 8;
    let udp = if datagram[0] >> 4 == 4 {
        pseudo[ip + 1] = 0xFF; // TOS
        pseudo[ip + 8] = 0xFF; // TTL
        pseudo[ip + 10] = 0xFF; // header checksum
        pseudo[ip + 11] = 0xFF;
        ip + usize::from(datagram[0] & 0x0F) * 4
    } else {
        pseudo[ip] |= 0x0F; // traffic class high nibble
        pseudo[ip + 1] = 0xFF; // traffic class low nibble, flow label
        pseudo[ip + 2] = 0xFF;
        pseudo[ip + 3] = 0xFF;
        pseudo[ip + 7] = 0xFF; // hop limit
        ip + 40
    };
    pseudo[udp + 6] = 0xFF; // UDP checksum
    pseudo[udp + 7] = 0xFF;
    pseudo[udp + 8 + 4] = 0xFF; // BTH byte 4: FECN, BECN, Resv6
    let fast = crc32fast::hash(&pseudo);
    assert_eq!(
        fast,
        bitwise_crc32(&pseudo),
        "crc32fast disagrees with the bitwise CRC-32"
    );
    fast
}

/// The ICRC stored in the last 4 bytes of a RoCEv2 datagram (little-endian on the wire).
pub fn wire_icrc(datagram: &[u8]) -> u32 {
    let n = datagram.len() - 4;
    u32::from_le_bytes(datagram[n..].try_into().expect("4 bytes"))
}

/// Plain reflected CRC-32 (poly 0xEDB88320, init and xorout 0xFFFFFFFF), bit by bit: a second
/// engine so the ICRC check does not rest on one library.
pub fn bitwise_crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// tshark's payload heuristics that misdecode short RDMA payloads (ANCHORS §8); all disabled.
pub const TSHARK_HEURISTICS_OFF: [&str; 10] = [
    "rpcrdma_infiniband",
    "smcr_infiniband",
    "smb_direct_infiniband",
    "iser_infiniband",
    "lnet_ib",
    "sdp_infiniband",
    "fc_infiniband",
    "mellanox_eoib",
    "eth_over_ib",
    "nvme_rdma",
];
