//! `softib pcap decode`: a focused Wireshark for InfiniBand.
//!
//! Reads pcap and pcapng captures and decodes every packet with `softib-wire`:
//! RoCEv2 in Ethernet, raw IP or Linux cooked captures (UDP port 4791, or `--roce-port`),
//! native IB packets (link type 247, INFINIBAND) and native IB packets tunnelled in UDP on the
//! port given with `--ib-udp-port` (how softib's IB cables carry them). Human output is one line
//! per packet, like tcpdump; `--json` prints an array with one object per packet.
//!
//! Nothing is skipped silently: a packet that is not InfiniBand says what it is, a malformed one
//! says why, and a truncated capture file ends with an entry that says where it broke.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::PcapError;
use serde_json::{json, Map, Value};
use softib_wire::ip::{ethertype, EthernetRepr, IpRepr, UdpRepr, PROTOCOL_UDP, ROCE_V2_UDP_PORT};
use softib_wire::mad;
use softib_wire::packet::{IbPacketRepr, Parsed, RoceV2Repr, TransportRepr};
use softib_wire::{BthPacket, BthRepr, Error as WireError, GrhPacket, GrhRepr, LrhPacket, LrhRepr};

use crate::exit;

/// `softib pcap ...`
#[derive(Debug, Subcommand)]
pub enum PcapCommand {
    /// Decode every packet of a pcap or pcapng capture.
    Decode(DecodeArgs),
}

/// Arguments of `softib pcap decode`.
#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// The capture file (pcap or pcapng).
    file: PathBuf,
    /// Print a JSON array, one object per packet, instead of one line per packet.
    #[arg(long)]
    json: bool,
    /// Also decode UDP datagrams to or from this port as native IB packets (LRH … VCRC), the
    /// way softib's emulated IB cables carry them.
    #[arg(long, value_name = "N")]
    ib_udp_port: Option<u16>,
    /// The UDP port of RoCEv2 traffic.
    #[arg(long, value_name = "N", default_value_t = ROCE_V2_UDP_PORT)]
    roce_port: u16,
}

/// Runs a `softib pcap` command.
pub fn run(command: PcapCommand) -> anyhow::Result<u8> {
    match command {
        PcapCommand::Decode(args) => decode(&args),
    }
}

/// Link types this decoder understands (tcpdump.org LINKTYPE_* values).
mod linktype {
    pub const ETHERNET: u32 = 1;
    pub const RAW: u32 = 101;
    pub const IPV4: u32 = 228;
    pub const IPV6: u32 = 229;
    pub const LINUX_SLL: u32 = 113;
    pub const LINUX_SLL2: u32 = 276;
    pub const INFINIBAND: u32 = 247;
}

/// One captured frame.
struct Frame<'a> {
    timestamp: Duration,
    linktype: u32,
    data: &'a [u8],
    orig_len: u32,
}

/// Reads every frame of a capture held in memory. A damaged file yields the frames before the
/// damage and a description of it.
fn read_frames(bytes: &[u8]) -> anyhow::Result<(Vec<Frame<'_>>, Option<String>)> {
    let magic = bytes
        .get(..4)
        .map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
    match magic {
        None => bail!(
            "the file is too short to be a capture ({} bytes)",
            bytes.len()
        ),
        Some(0x0A0D_0D0A) => read_pcapng(bytes),
        Some(0xA1B2_C3D4 | 0xD4C3_B2A1 | 0xA1B2_3C4D | 0x4D3C_B2A1) => read_pcap(bytes),
        Some(m) => bail!(
            "not a pcap or pcapng file (magic number 0x{m:08x}); write captures with \
             tcpdump -w or tshark -w"
        ),
    }
}

fn damaged(e: &PcapError, count: usize) -> String {
    match e {
        PcapError::IncompleteBuffer => {
            format!("capture file truncated after packet {count}")
        }
        other => format!("capture file damaged after packet {count}: {other}"),
    }
}

fn read_pcap(bytes: &[u8]) -> anyhow::Result<(Vec<Frame<'_>>, Option<String>)> {
    let (mut rest, parser) = PcapParser::new(bytes)
        .map_err(|e| anyhow::anyhow!("the pcap file header is invalid: {e}"))?;
    let linktype = u32::from(parser.header().datalink);
    let mut frames = Vec::new();
    while !rest.is_empty() {
        match parser.next_packet(rest) {
            Ok((next, packet)) => {
                let data = match packet.data {
                    std::borrow::Cow::Borrowed(d) => d,
                    // The slice parser always borrows; an owned copy would mean a library change.
                    std::borrow::Cow::Owned(_) => bail!("internal: pcap parser copied a packet"),
                };
                frames.push(Frame {
                    timestamp: packet.timestamp,
                    linktype,
                    data,
                    orig_len: packet.orig_len,
                });
                rest = next;
            }
            Err(e) => {
                let d = damaged(&e, frames.len());
                return Ok((frames, Some(d)));
            }
        }
    }
    Ok((frames, None))
}

fn read_pcapng(bytes: &[u8]) -> anyhow::Result<(Vec<Frame<'_>>, Option<String>)> {
    let (mut rest, mut parser) = PcapNgParser::new(bytes)
        .map_err(|e| anyhow::anyhow!("the pcapng section header is invalid: {e}"))?;
    let mut frames = Vec::new();
    while !rest.is_empty() {
        let (next, block) = match parser.next_block(rest) {
            Ok(v) => v,
            Err(e) => {
                let d = damaged(&e, frames.len());
                return Ok((frames, Some(d)));
            }
        };
        rest = next;
        let (interface_id, timestamp, data, orig_len) = match block {
            Block::EnhancedPacket(p) => (p.interface_id, p.timestamp, p.data, p.original_len),
            Block::SimplePacket(p) => (0, Duration::ZERO, p.data, p.original_len),
            _ => continue,
        };
        let Some(interface) = parser.interfaces().get(interface_id as usize) else {
            let d = format!(
                "capture file damaged after packet {}: packet names interface {interface_id}, \
                 which the file does not describe",
                frames.len()
            );
            return Ok((frames, Some(d)));
        };
        let linktype = u32::from(interface.linktype);
        let data = match data {
            std::borrow::Cow::Borrowed(d) => d,
            std::borrow::Cow::Owned(_) => bail!("internal: pcapng parser copied a packet"),
        };
        frames.push(Frame {
            timestamp,
            linktype,
            data,
            orig_len,
        });
    }
    Ok((frames, None))
}

/// What one frame turned out to be.
enum Decoded<'a> {
    /// A RoCEv2 packet.
    Roce(Parsed<RoceV2Repr<'a>>),
    /// A native IB packet, possibly tunnelled in UDP.
    Native {
        tunnel: Option<(IpRepr, UdpRepr)>,
        parsed: Parsed<IbPacketRepr<'a>>,
    },
    /// Something other than InfiniBand (ARP, TCP, ...): described, not decoded.
    Other(String),
    /// InfiniBand that does not parse: what did parse, and why the rest did not.
    Malformed { partial: Partial, error: WireError },
}

/// The layers of a malformed packet that did parse.
#[derive(Default)]
struct Partial {
    ip: Option<(IpRepr, UdpRepr)>,
    lrh: Option<LrhRepr>,
    grh: Option<GrhRepr>,
    bth: Option<BthRepr>,
}

struct Decoder {
    roce_port: u16,
    ib_udp_port: Option<u16>,
}

impl Decoder {
    fn decode<'a>(&self, frame: &Frame<'a>) -> Decoded<'a> {
        match frame.linktype {
            linktype::INFINIBAND => self.native(frame.data, None),
            linktype::ETHERNET => match EthernetRepr::parse(frame.data) {
                Ok((eth, rest)) => self.ethertype(eth.ethertype, rest),
                Err(e) => Decoded::Malformed {
                    partial: Partial::default(),
                    error: e,
                },
            },
            linktype::RAW | linktype::IPV4 | linktype::IPV6 => self.ip(frame.data),
            linktype::LINUX_SLL => match frame.data.get(14..16) {
                Some(p) => self.ethertype(u16::from_be_bytes([p[0], p[1]]), &frame.data[16..]),
                None => Decoded::Malformed {
                    partial: Partial::default(),
                    error: WireError::Truncated("Linux cooked header"),
                },
            },
            linktype::LINUX_SLL2 => match frame.data.get(..20) {
                Some(h) => self.ethertype(u16::from_be_bytes([h[0], h[1]]), &frame.data[20..]),
                None => Decoded::Malformed {
                    partial: Partial::default(),
                    error: WireError::Truncated("Linux cooked v2 header"),
                },
            },
            other => Decoded::Other(format!("link type {other} (not decoded)")),
        }
    }

    fn ethertype<'a>(&self, ethertype: u16, rest: &'a [u8]) -> Decoded<'a> {
        match ethertype {
            ethertype::IPV4 | ethertype::IPV6 => self.ip(rest),
            ethertype::ROCE_V1 => Decoded::Other("RoCE v1 (EtherType 0x8915, not decoded)".into()),
            0x0806 => Decoded::Other("ARP".into()),
            other => Decoded::Other(format!("EtherType 0x{other:04x}")),
        }
    }

    fn ip<'a>(&self, datagram: &'a [u8]) -> Decoded<'a> {
        let malformed = |error| Decoded::Malformed {
            partial: Partial::default(),
            error,
        };
        let (ip, ip_payload) = match IpRepr::parse(datagram) {
            Ok(v) => v,
            Err(WireError::Unsupported(what)) => return Decoded::Other(what.into()),
            Err(e) => return malformed(e),
        };
        if ip.protocol() != PROTOCOL_UDP {
            let ports = match (ip.protocol(), ip_payload.get(..4)) {
                (6, Some(p)) => format!(
                    " {} > {}",
                    u16::from_be_bytes([p[0], p[1]]),
                    u16::from_be_bytes([p[2], p[3]])
                ),
                _ => String::new(),
            };
            return Decoded::Other(format!(
                "{} {}{ports}",
                ip_summary(&ip),
                protocol_name(ip.protocol())
            ));
        }
        let (udp, udp_payload) = match UdpRepr::parse(ip_payload) {
            Ok(v) => v,
            Err(e) => return malformed(e),
        };
        let with_ip = |partial: Partial| Partial {
            ip: Some((ip, udp)),
            ..partial
        };
        if udp.dst_port == self.roce_port {
            match RoceV2Repr::parse(datagram) {
                Ok(parsed) => Decoded::Roce(parsed),
                Err(error) => Decoded::Malformed {
                    partial: with_ip(Partial {
                        bth: BthPacket::new_checked(udp_payload)
                            .ok()
                            .and_then(|p| BthRepr::parse(&p).ok()),
                        ..Partial::default()
                    }),
                    error,
                },
            }
        } else if self
            .ib_udp_port
            .is_some_and(|p| p == udp.dst_port || p == udp.src_port)
        {
            self.native(udp_payload, Some((ip, udp)))
        } else {
            Decoded::Other(format!(
                "{} UDP {} > {}",
                ip_summary(&ip),
                udp.src_port,
                udp.dst_port
            ))
        }
    }

    fn native<'a>(&self, bytes: &'a [u8], tunnel: Option<(IpRepr, UdpRepr)>) -> Decoded<'a> {
        match IbPacketRepr::parse(bytes) {
            Ok(parsed) => Decoded::Native { tunnel, parsed },
            Err(error) => {
                let lrh = LrhPacket::new_checked(bytes)
                    .ok()
                    .and_then(|p| LrhRepr::parse(&p).ok());
                let global = lrh.is_some_and(|l| l.lnh == softib_wire::Lnh::IbaGlobal);
                let grh = global
                    .then(|| bytes.get(8..))
                    .flatten()
                    .and_then(|b| GrhPacket::new_checked(b).ok())
                    .and_then(|p| GrhRepr::parse(&p).ok());
                let bth_at = if global { 48 } else { 8 };
                let bth = lrh
                    .and(bytes.get(bth_at..))
                    .and_then(|b| BthPacket::new_checked(b).ok())
                    .and_then(|p| BthRepr::parse(&p).ok());
                Decoded::Malformed {
                    partial: Partial {
                        ip: tunnel,
                        lrh,
                        grh,
                        bth,
                    },
                    error,
                }
            }
        }
    }
}

fn protocol_name(p: u8) -> String {
    match p {
        1 => "ICMP".into(),
        6 => "TCP".into(),
        58 => "ICMPv6".into(),
        other => format!("protocol {other}"),
    }
}

fn ip_summary(ip: &IpRepr) -> String {
    match ip {
        IpRepr::V4(r) => format!(
            "{} > {}",
            std::net::Ipv4Addr::from(r.src),
            std::net::Ipv4Addr::from(r.dst)
        ),
        IpRepr::V6(r) => format!(
            "{} > {}",
            std::net::Ipv6Addr::from(r.src),
            std::net::Ipv6Addr::from(r.dst)
        ),
    }
}

fn decode(args: &DecodeArgs) -> anyhow::Result<u8> {
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("cannot read capture {}", args.file.display()))?;
    let (frames, damage) =
        read_frames(&bytes).with_context(|| format!("cannot decode {}", args.file.display()))?;
    let decoder = Decoder {
        roce_port: args.roce_port,
        ib_udp_port: args.ib_udp_port,
    };
    let first_ts = frames.first().map_or(Duration::ZERO, |f| f.timestamp);
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut problems = damage.is_some();
    if args.json {
        out.write_all(b"[")?;
    }
    for (i, frame) in frames.iter().enumerate() {
        let index = i + 1;
        let decoded = decoder.decode(frame);
        problems |= match &decoded {
            Decoded::Malformed { .. } => true,
            Decoded::Roce(p) => !p.icrc_ok,
            Decoded::Native { parsed, .. } => !parsed.icrc_ok || parsed.vcrc_ok == Some(false),
            Decoded::Other(_) => false,
        };
        if args.json {
            if i > 0 {
                out.write_all(b",")?;
            }
            let value = to_json(index, frame, &decoded);
            write!(out, "\n  {value}")?;
        } else {
            let rel = frame.timestamp.saturating_sub(first_ts);
            writeln!(
                out,
                "{index:5} {:4}.{:06} {}",
                rel.as_secs(),
                rel.subsec_micros(),
                to_line(frame, &decoded)
            )?;
        }
    }
    if let Some(d) = &damage {
        if args.json {
            if !frames.is_empty() {
                out.write_all(b",")?;
            }
            let value = json!({ "index": frames.len() + 1, "error": d });
            write!(out, "\n  {value}")?;
        } else {
            writeln!(out, "{:5} {d}", frames.len() + 1)?;
        }
    }
    if args.json {
        out.write_all(b"\n]\n")?;
    }
    out.flush()?;
    Ok(if problems {
        exit::FOUND_PROBLEMS
    } else {
        exit::OK
    })
}

fn crc_word(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "BAD"
    }
}

fn to_line(frame: &Frame<'_>, decoded: &Decoded<'_>) -> String {
    let mut s = String::new();
    match decoded {
        Decoded::Roce(p) => {
            let _ = write!(s, "{} icrc={}", p.repr, crc_word(p.icrc_ok));
            if let Some(m) = mad_line(&p.repr.transport, p.repr.payload) {
                let _ = write!(s, " | {m}");
            }
        }
        Decoded::Native { tunnel, parsed } => {
            if let Some((ip, udp)) = tunnel {
                let _ = write!(
                    s,
                    "[{} UDP {} > {}] ",
                    ip_summary(ip),
                    udp.src_port,
                    udp.dst_port
                );
            }
            let _ = write!(
                s,
                "{} icrc={} vcrc={}",
                parsed.repr,
                crc_word(parsed.icrc_ok),
                crc_word(parsed.vcrc_ok.unwrap_or(false))
            );
            if let Some(m) = mad_line(&parsed.repr.transport, parsed.repr.payload) {
                let _ = write!(s, " | {m}");
            }
        }
        Decoded::Other(what) => {
            let _ = write!(s, "{what} ({} bytes, not InfiniBand)", frame.orig_len);
        }
        Decoded::Malformed { partial, error } => {
            if let Some((ip, udp)) = &partial.ip {
                let _ = write!(
                    s,
                    "{} UDP {} > {}: ",
                    ip_summary(ip),
                    udp.src_port,
                    udp.dst_port
                );
            }
            if let Some(l) = &partial.lrh {
                let _ = write!(s, "LID {} > LID {}: ", l.slid, l.dlid);
            }
            if let Some(b) = &partial.bth {
                let _ = write!(s, "{} QP={} PSN={} ", b.opcode, b.dest_qpn, b.psn);
            }
            let _ = write!(s, "[malformed packet: {error}]");
        }
    }
    s
}

fn to_json(index: usize, frame: &Frame<'_>, decoded: &Decoded<'_>) -> Value {
    let mut o = Map::new();
    o.insert("index".into(), json!(index));
    o.insert("length".into(), json!(frame.orig_len));
    match decoded {
        Decoded::Roce(p) => {
            ip_json(&mut o, &p.repr.ip, &p.repr.udp);
            transport_json(&mut o, &p.repr.transport, p.repr.payload);
            o.insert("icrc".into(), json!(p.icrc));
            o.insert("icrc_ok".into(), json!(p.icrc_ok));
        }
        Decoded::Native { tunnel, parsed } => {
            if let Some((ip, udp)) = tunnel {
                ip_json(&mut o, ip, udp);
            }
            let r = &parsed.repr;
            o.insert("lrh".into(), lrh_json(&r.lrh));
            if let Some(g) = &r.grh {
                o.insert("grh".into(), grh_json(g));
            }
            transport_json(&mut o, &r.transport, r.payload);
            o.insert("icrc".into(), json!(parsed.icrc));
            o.insert("icrc_ok".into(), json!(parsed.icrc_ok));
            o.insert("vcrc".into(), json!(parsed.vcrc));
            o.insert("vcrc_ok".into(), json!(parsed.vcrc_ok));
        }
        Decoded::Other(what) => {
            o.insert("not_ib".into(), json!(what));
        }
        Decoded::Malformed { partial, error } => {
            if let Some((ip, udp)) = &partial.ip {
                ip_json(&mut o, ip, udp);
            }
            if let Some(l) = &partial.lrh {
                o.insert("lrh".into(), lrh_json(l));
            }
            if let Some(g) = &partial.grh {
                o.insert("grh".into(), grh_json(g));
            }
            if let Some(b) = &partial.bth {
                o.insert("bth".into(), bth_json(b));
            }
            o.insert("error".into(), json!(error.to_string()));
        }
    }
    Value::Object(o)
}

fn ip_json(o: &mut Map<String, Value>, ip: &IpRepr, udp: &UdpRepr) {
    let v = match ip {
        IpRepr::V4(r) => json!({
            "version": 4,
            "src": std::net::Ipv4Addr::from(r.src).to_string(),
            "dst": std::net::Ipv4Addr::from(r.dst).to_string(),
            "tos": r.tos, "ident": r.ident, "df": r.dont_frag, "ttl": r.ttl,
        }),
        IpRepr::V6(r) => json!({
            "version": 6,
            "src": std::net::Ipv6Addr::from(r.src).to_string(),
            "dst": std::net::Ipv6Addr::from(r.dst).to_string(),
            "tclass": r.traffic_class, "flow_label": r.flow_label, "hoplmt": r.hop_limit,
        }),
    };
    o.insert("ip".into(), v);
    o.insert(
        "udp".into(),
        json!({ "src_port": udp.src_port, "dst_port": udp.dst_port, "checksum": udp.checksum }),
    );
}

fn lrh_json(l: &LrhRepr) -> Value {
    json!({
        "vl": l.vl, "lver": l.lver, "sl": l.sl, "lnh": l.lnh.bits(),
        "dlid": l.dlid.0, "slid": l.slid.0, "pktlen": l.pkt_len,
    })
}

fn grh_json(g: &GrhRepr) -> Value {
    json!({
        "tclass": g.traffic_class, "flow_label": g.flow_label, "paylen": g.payload_len,
        "nxthdr": g.next_header, "hoplmt": g.hop_limit,
        "sgid": std::net::Ipv6Addr::from(g.sgid.0).to_string(),
        "dgid": std::net::Ipv6Addr::from(g.dgid.0).to_string(),
    })
}

fn bth_json(b: &BthRepr) -> Value {
    json!({
        "opcode": b.opcode.0, "opcode_name": b.opcode.to_string(),
        "se": b.solicited, "migreq": b.mig_req, "pad": b.pad_count, "tver": b.tver,
        "pkey": b.pkey.0, "fecn": b.fecn, "becn": b.becn, "dqpn": b.dest_qpn.value(),
        "ackreq": b.ack_req, "psn": b.psn.value(),
    })
}

fn transport_json(o: &mut Map<String, Value>, t: &TransportRepr, payload: &[u8]) {
    o.insert("bth".into(), bth_json(&t.bth));
    if let Some(d) = &t.deth {
        o.insert(
            "deth".into(),
            json!({ "qkey": d.qkey.0, "src_qp": d.src_qpn.value() }),
        );
    }
    if let Some(r) = &t.reth {
        o.insert(
            "reth".into(),
            json!({ "va": r.va, "rkey": r.rkey.0, "dma_len": r.dma_len }),
        );
    }
    if let Some(a) = &t.atomic_eth {
        o.insert(
            "atomiceth".into(),
            json!({ "va": a.va, "rkey": a.rkey.0, "swap_add": a.swap_add, "compare": a.compare }),
        );
    }
    if let Some(a) = &t.aeth {
        o.insert(
            "aeth".into(),
            json!({
                "syndrome": u8::from(a.syndrome), "kind": a.syndrome.kind(),
                "value": a.syndrome.value(), "msn": a.msn,
            }),
        );
    }
    if let Some(a) = &t.atomic_ack_eth {
        o.insert("atomicacketh".into(), json!({ "orig": a.orig }));
    }
    if let Some(i) = &t.immdt {
        o.insert("immdt".into(), json!(i.data));
    }
    if let Some(i) = &t.ieth {
        o.insert("ieth".into(), json!({ "rkey": i.rkey.0 }));
    }
    if let Some(m) = mad_json(t, payload) {
        o.insert("mad".into(), m);
    }
    o.insert("payload_len".into(), json!(payload.len()));
}

/// The MAD a UD packet to QP0 (SMI) or QP1 (GSI) carries, if this is one.
fn mad_of<'a>(t: &TransportRepr, payload: &'a [u8]) -> Option<Result<mad::Body<'a>, WireError>> {
    let to_qp01 = matches!(t.bth.dest_qpn.value(), 0 | 1);
    (t.deth.is_some() && to_qp01).then(|| mad::Body::parse(payload))
}

/// The MAD a UD packet to QP0 or QP1 carries, as JSON.
fn mad_json(t: &TransportRepr, payload: &[u8]) -> Option<Value> {
    Some(match mad_of(t, payload)? {
        Err(e) => json!({ "error": e.to_string() }),
        Ok(body) => {
            let h = body.header();
            let mut o = Map::new();
            o.insert("base_version".into(), json!(h.base_version));
            o.insert("mgmt_class".into(), json!(u8::from(h.mgmt_class)));
            o.insert("class_version".into(), json!(h.class_version));
            o.insert("method".into(), json!(u8::from(h.method)));
            o.insert("method_name".into(), json!(h.method_name()));
            o.insert("status".into(), json!(h.status));
            o.insert("tid".into(), json!(h.tid));
            o.insert("attr_id".into(), json!(h.attr_id.0));
            o.insert("attr_name".into(), json!(h.attr_name()));
            o.insert("attr_mod".into(), json!(h.attr_mod));
            if let Some(dr) = body.directed_route() {
                o.insert("hop_ptr".into(), json!(dr.hop_ptr));
                o.insert("hop_cnt".into(), json!(dr.hop_cnt));
                o.insert(
                    "direction".into(),
                    json!(if dr.direction_inbound {
                        "inbound"
                    } else {
                        "outbound"
                    }),
                );
                o.insert("dr_slid".into(), json!(dr.dr_slid.0));
                o.insert("dr_dlid".into(), json!(dr.dr_dlid.0));
            }
            Value::Object(o)
        }
    })
}

/// The MAD a UD packet to QP0 or QP1 carries, as text.
fn mad_line(t: &TransportRepr, payload: &[u8]) -> Option<String> {
    Some(match mad_of(t, payload)? {
        Err(e) => format!("MAD [malformed: {e}]"),
        Ok(body) => {
            let h = body.header();
            let mut s = format!(
                "{}({}) {} attr_mod=0x{:x} tid=0x{:016x}",
                h.method_name(),
                h.attr_name().unwrap_or("unknown attribute"),
                h.mgmt_class.name(),
                h.attr_mod,
                h.tid
            );
            if h.status != 0 {
                let _ = write!(s, " status=0x{:04x}", h.status);
            }
            if let Some(dr) = body.directed_route() {
                let _ = write!(
                    s,
                    " DR hop {}/{} {}",
                    dr.hop_ptr,
                    dr.hop_cnt,
                    if dr.direction_inbound {
                        "inbound"
                    } else {
                        "outbound"
                    }
                );
            }
            s
        }
    })
}
