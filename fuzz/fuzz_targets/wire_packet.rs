//! Arbitrary bytes into every whole-packet parser of softib-wire.
//!
//! * No parser may panic, whatever the bytes (the crate's panic-freedom contract).
//! * Whatever a parser accepts must print, must report an ICRC/VCRC verdict that agrees with a
//!   reference CRC written from the spec, and must re-emit into `buffer_len()` bytes that parse
//!   back to the same repr (after `normalized()`) with CRCs that verify.
//! * A transport (BTH … ICRC) that `parse_transport` accepts is re-emitted by hand, and also
//!   wrapped into a RoCEv2 datagram and a native packet, both of which must round-trip;
//!   `parse_body` must agree with it on the same bytes less the ICRC, and what `parse_body`
//!   accepts (BTH … pad) must round-trip too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_fuzz::{
    check_native_roundtrip, check_parsed_native, check_parsed_roce, check_roce_roundtrip,
    display_len,
};
use softib_wire::crc::ICRC_LEN;
use softib_wire::ip::{IpRepr, Ipv4Repr, UdpRepr, PROTOCOL_UDP, ROCE_V2_UDP_PORT};
use softib_wire::packet::{self, IbPacketRepr, RoceV2Repr, TransportRepr};
use softib_wire::{Lid, Lnh, LrhRepr};

fuzz_target!(|data: &[u8]| {
    if let Ok(parsed) = RoceV2Repr::parse(data) {
        check_parsed_roce(data, &parsed);
    }
    if let Ok(parsed) = IbPacketRepr::parse(data) {
        check_parsed_native(data, &parsed);
    }
    if let Ok((t, payload, icrc)) = packet::parse_transport(data) {
        let body = &data[..data.len() - ICRC_LEN];
        assert_eq!(
            packet::parse_body(body),
            Ok((t, payload)),
            "parse_transport and parse_body disagree"
        );
        check_transport(&t, payload, icrc);
    }
    if let Ok((t, payload)) = packet::parse_body(data) {
        let (n, bytes) = emit_body(&t, payload, 0);
        assert_eq!(packet::parse_body(&bytes), Ok((n, payload)));
    }
});

/// `t` with the pad count `emit` would write, and the bytes BTH … pad for it and `payload`,
/// followed by `trailer` zero bytes.
fn emit_body(t: &TransportRepr, payload: &[u8], trailer: usize) -> (TransportRepr, Vec<u8>) {
    let mut n = *t;
    n.bth.pad_count = packet::pad_for(payload.len());
    let at = n.header_len();
    let end = at + payload.len() + usize::from(n.bth.pad_count);
    let mut buf = vec![0u8; end + trailer];
    n.emit(&mut buf);
    buf[at..at + payload.len()].copy_from_slice(payload);
    (n, buf)
}

fn check_transport(t: &TransportRepr, payload: &[u8], icrc: u32) {
    assert!(display_len(t) > 0);
    assert!(
        t.check_headers().is_ok(),
        "parse gave ETHs the opcode does not call for"
    );
    let (n, mut buf) = emit_body(t, payload, ICRC_LEN);
    let end = buf.len() - ICRC_LEN;
    softib_wire::crc::write_icrc(&mut buf[end..], icrc);
    let (t2, payload2, icrc2) = packet::parse_transport(&buf)
        .unwrap_or_else(|e| panic!("re-emitted transport does not parse: {e}\n{n:?}"));
    assert_eq!(t2, n);
    assert_eq!(payload2, payload);
    assert_eq!(icrc2, icrc);

    let roce = RoceV2Repr {
        ip: IpRepr::V4(Ipv4Repr {
            tos: 0,
            ident: 0x1234,
            dont_frag: true,
            ttl: 64,
            protocol: PROTOCOL_UDP,
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
        }),
        udp: UdpRepr {
            src_port: 0xC000,
            dst_port: ROCE_V2_UDP_PORT,
            checksum: 0,
        },
        transport: *t,
        payload,
    };
    check_roce_roundtrip(&roce);
    let native = IbPacketRepr {
        lrh: LrhRepr {
            vl: 0,
            lver: 0,
            sl: 0,
            lnh: Lnh::IbaLocal,
            dlid: Lid(2),
            pkt_len: 0,
            slid: Lid(1),
        },
        grh: None,
        transport: *t,
        payload,
    };
    check_native_roundtrip(&native);
}
