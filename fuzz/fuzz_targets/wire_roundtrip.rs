//! Packets built from structure: the fuzzer's bytes choose every field of a RoCEv2 (IPv4 or
//! IPv6) or native IB packet, an opcode, the ETHs and a payload; the packet is emitted, parsed
//! back and compared.
//!
//! * A valid packet (ETHs exactly the opcode's, payload only where the opcode has one, every
//!   field within its documented range) must round-trip: `parse(emit(r)) == r.normalized()`,
//!   with CRCs that softib and a reference CRC both accept.
//! * An invalid one (unknown opcode, wrong ETHs, payload on a header-only opcode, a field out of
//!   range) must still emit without panicking into `buffer_len()` bytes; whatever parse makes
//!   of the bytes must in turn round-trip.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use softib_fuzz::{
    check_native_roundtrip, check_parsed_native, check_parsed_roce, check_roce_roundtrip,
    emit_checked, NATIVE_MAX_LEN,
};
use softib_wire::ip::{IpRepr, Ipv4Repr, Ipv6Repr, UdpRepr, PROTOCOL_UDP};
use softib_wire::opcode::HeaderSet;
use softib_wire::packet::{IbPacketRepr, RoceV2Repr, TransportRepr};
use softib_wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, CnpRepr, DethRepr, Error, Gid, GrhRepr,
    IethRepr, ImmDtRepr, Lid, Lnh, LrhRepr, Opcode, PKey, Psn, QKey, Qpn, RKey, RethRepr,
};

/// The largest payload built: an IB MTU of 4096.
const MAX_PAYLOAD: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});

/// How the fuzzer's bytes are read into a packet.
struct Built<'a> {
    transport: TransportRepr,
    payload: &'a [u8],
    /// Every field is within its documented range, so emit/parse must round-trip exactly.
    in_range: bool,
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let b = transport_and_payload(u)?;
    let info = b.transport.bth.opcode.info();
    let valid = b.in_range
        && b.transport.check_headers().is_ok()
        && (info.is_some_and(|i| i.has_payload) || b.payload.is_empty());
    match u.int_in_range(0u8..=2)? {
        0 | 1 => {
            let ip = ip(u, b.in_range)?;
            let udp = UdpRepr {
                src_port: u.arbitrary()?,
                dst_port: u.arbitrary()?,
                checksum: u.arbitrary()?,
            };
            let repr = RoceV2Repr {
                ip,
                udp,
                transport: b.transport,
                payload: b.payload,
            };
            if valid && ip.protocol() == PROTOCOL_UDP {
                check_roce_roundtrip(&repr);
            } else {
                let bytes = emit_checked(repr.buffer_len(), |out| repr.emit(out));
                match RoceV2Repr::parse(&bytes) {
                    Ok(parsed) => check_parsed_roce(&bytes, &parsed),
                    Err(e) => expect_error(&b, b.in_range, ip.protocol() != PROTOCOL_UDP, e),
                }
            }
        }
        _ => {
            let repr = IbPacketRepr {
                lrh: lrh(u, b.in_range)?,
                grh: if u.arbitrary()? {
                    Some(grh(u, b.in_range)?)
                } else {
                    None
                },
                transport: b.transport,
                payload: b.payload,
            };
            if valid {
                check_native_roundtrip(&repr);
            } else {
                let bytes = emit_checked(repr.buffer_len(), |out| repr.emit(out));
                match IbPacketRepr::parse(&bytes) {
                    Ok(parsed) => check_parsed_native(&bytes, &parsed),
                    Err(e) => {
                        let sound = b.in_range && bytes.len() <= NATIVE_MAX_LEN;
                        expect_error(&b, sound, false, e)
                    }
                }
            }
        }
    }
    Ok(())
}

/// An invalid packet failed to parse after emission (a valid one never gets here): a non-UDP
/// datagram, and an opcode softib does not know in an otherwise sound packet (`sound`: fields in
/// range, length within what the headers can describe), must be reported as unsupported.
fn expect_error(b: &Built<'_>, sound: bool, not_udp: bool, e: Error) {
    if not_udp {
        assert_eq!(e, Error::Unsupported("IP payload is not UDP"));
    } else if sound && b.transport.bth.opcode.info().is_none() {
        assert!(
            matches!(e, Error::Unsupported(_)),
            "unknown opcode gave {e:?}"
        );
    }
}

fn transport_and_payload<'a>(u: &mut Unstructured<'a>) -> Result<Built<'a>> {
    // One packet in 16 has its fields unmasked: emission must survive it, equality is not
    // expected.
    let in_range = !u.ratio(1u8, 16u8)?;
    let opcode = if u.ratio(7u8, 8u8)? {
        // Mostly an opcode softib implements, so the round trip gets exercised.
        let known: Vec<Opcode> = Opcode::all_known().collect();
        *u.choose(&known)?
    } else {
        Opcode(u.arbitrary()?)
    };
    let bits = |u: &mut Unstructured<'_>, max: u8| -> Result<u8> {
        if in_range {
            u.int_in_range(0..=max)
        } else {
            u.arbitrary()
        }
    };
    let bth = BthRepr {
        opcode,
        solicited: u.arbitrary()?,
        mig_req: u.arbitrary()?,
        pad_count: bits(u, 3)?,
        tver: bits(u, 15)?,
        pkey: PKey(u.arbitrary()?),
        fecn: u.arbitrary()?,
        becn: u.arbitrary()?,
        dest_qpn: Qpn::new(u.arbitrary()?),
        ack_req: u.arbitrary()?,
        psn: Psn::new(u.arbitrary()?),
    };
    let mut t = TransportRepr::new(bth);
    // Mostly exactly the ETHs the opcode calls for; sometimes any set of them.
    let want = match opcode.info() {
        Some(info) if u.ratio(15u8, 16u8)? => info.headers,
        _ => {
            let mut set = HeaderSet::NONE;
            for h in [
                HeaderSet::DETH,
                HeaderSet::RETH,
                HeaderSet::ATOMIC_ETH,
                HeaderSet::AETH,
                HeaderSet::ATOMIC_ACK_ETH,
                HeaderSet::IMMDT,
                HeaderSet::IETH,
                HeaderSet::CNP,
            ] {
                if u.arbitrary()? {
                    set = set.with(h);
                }
            }
            set
        }
    };
    if want.contains(HeaderSet::DETH) {
        t.deth = Some(DethRepr {
            qkey: QKey(u.arbitrary()?),
            src_qpn: Qpn::new(u.arbitrary()?),
        });
    }
    if want.contains(HeaderSet::RETH) {
        t.reth = Some(RethRepr {
            va: u.arbitrary()?,
            rkey: RKey(u.arbitrary()?),
            dma_len: u.arbitrary()?,
        });
    }
    if want.contains(HeaderSet::ATOMIC_ETH) {
        t.atomic_eth = Some(AtomicEthRepr {
            va: u.arbitrary()?,
            rkey: RKey(u.arbitrary()?),
            swap_add: u.arbitrary()?,
            compare: u.arbitrary()?,
        });
    }
    if want.contains(HeaderSet::AETH) {
        let msn: u32 = u.arbitrary()?;
        t.aeth = Some(AethRepr {
            syndrome: u.arbitrary::<u8>()?.into(),
            msn: if in_range { msn & 0x00FF_FFFF } else { msn },
        });
    }
    if want.contains(HeaderSet::ATOMIC_ACK_ETH) {
        t.atomic_ack_eth = Some(AtomicAckEthRepr {
            orig: u.arbitrary()?,
        });
    }
    if want.contains(HeaderSet::IMMDT) {
        t.immdt = Some(ImmDtRepr {
            data: u.arbitrary()?,
        });
    }
    if want.contains(HeaderSet::IETH) {
        t.ieth = Some(IethRepr {
            rkey: RKey(u.arbitrary()?),
        });
    }
    if want.contains(HeaderSet::CNP) {
        t.cnp = Some(CnpRepr);
    }
    let has_payload = opcode.info().is_some_and(|i| i.has_payload);
    // A header-only opcode gets a payload only now and then (which parse must refuse).
    let payload = if has_payload || u.ratio(1u8, 32u8)? {
        let len = u.arbitrary_len::<u8>()?.min(MAX_PAYLOAD);
        u.bytes(len)?
    } else {
        &[]
    };
    Ok(Built {
        transport: t,
        payload,
        in_range,
    })
}

fn ip(u: &mut Unstructured<'_>, in_range: bool) -> Result<IpRepr> {
    // Now and then a protocol other than UDP, which parse must call unsupported.
    let protocol = if u.ratio(1u8, 32u8)? {
        u.arbitrary()?
    } else {
        PROTOCOL_UDP
    };
    Ok(if u.arbitrary()? {
        IpRepr::V4(Ipv4Repr {
            tos: u.arbitrary()?,
            ident: u.arbitrary()?,
            dont_frag: u.arbitrary()?,
            ttl: u.arbitrary()?,
            protocol,
            src: u.arbitrary()?,
            dst: u.arbitrary()?,
        })
    } else {
        let flow_label: u32 = u.arbitrary()?;
        IpRepr::V6(Ipv6Repr {
            traffic_class: u.arbitrary()?,
            flow_label: if in_range {
                flow_label & 0x000F_FFFF
            } else {
                flow_label
            },
            next_header: protocol,
            hop_limit: u.arbitrary()?,
            src: u.arbitrary()?,
            dst: u.arbitrary()?,
        })
    })
}

fn lrh(u: &mut Unstructured<'_>, in_range: bool) -> Result<LrhRepr> {
    let nibble = |u: &mut Unstructured<'_>| -> Result<u8> {
        if in_range {
            u.int_in_range(0..=15)
        } else {
            u.arbitrary()
        }
    };
    Ok(LrhRepr {
        vl: nibble(u)?,
        lver: nibble(u)?,
        sl: nibble(u)?,
        // LNH and PktLen are derived by normalized()/emit; any value here must not matter.
        lnh: Lnh::from_bits(u.arbitrary()?),
        dlid: Lid(u.arbitrary()?),
        pkt_len: u.arbitrary()?,
        slid: Lid(u.arbitrary()?),
    })
}

fn grh(u: &mut Unstructured<'_>, in_range: bool) -> Result<GrhRepr> {
    let flow_label: u32 = u.arbitrary()?;
    Ok(GrhRepr {
        traffic_class: u.arbitrary()?,
        flow_label: if in_range {
            flow_label & 0x000F_FFFF
        } else {
            flow_label
        },
        // Derived by normalized()/emit.
        payload_len: u.arbitrary()?,
        next_header: u.arbitrary()?,
        hop_limit: u.arbitrary()?,
        sgid: Gid(u.arbitrary()?),
        dgid: Gid(u.arbitrary()?),
    })
}
