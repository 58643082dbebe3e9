//! The `ib` module deals with *the engine's packets on a native InfiniBand link*: the LRH,
//! the optional GRH, the ICRC and the VCRC around the transport bytes (IBA §7.7–7.8), and the
//! first look at a received frame — well-formed, its CRCs right, and for whom: the SMI (VL15,
//! QP0), QP1's agents (a GMP), or the engine.
//!
//! What the port's subnet management agent decides — whether the port is Active (an Armed
//! port becomes Active on its first data packet, IBA §7.2), whether a DLID is the port's, what
//! an SMP or a GMP means — is not here: the SMA lives with the daemon (`softib-hca`'s `IbCa`,
//! over `softib-fabric`), which calls [`open`] and [`seal`] around it. Both are pure
//! functions of their bytes.

use softib_engine::{RxMeta, Transmit};
use softib_wire::crc::{self, ICRC_LEN, VCRC_LEN};
use softib_wire::grh::{self, Repr as GrhRepr};
use softib_wire::lrh::{self, Repr as LrhRepr};
use softib_wire::{Gid, Lid, Lnh, Qpn};

/// The VL of subnet management packets.
pub const VL15: u8 = 15;

/// Room for an LRH and a GRH in front of the engine's transport bytes: [`seal`] expects the
/// engine to have written its packet at `buf[HEADROOM..]`.
pub const HEADROOM: usize = lrh::HEADER_LEN + grh::HEADER_LEN;

/// Why a frame was dropped before anyone looked at its contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IbDrop {
    /// Too short, an LRH that does not parse or says another version or next header, or a
    /// PktLen that does not match the frame.
    Malformed,
    /// The VCRC or the ICRC is wrong.
    BadCrc,
}

/// Who a received frame is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind<'a> {
    /// VL15: a subnet management packet for the SMI (QP0). The frame is a whole SMP packet.
    Smp,
    /// DestQP 1 on a data VL: a GMP for QP1's agents. The frame is a whole UD MAD packet.
    Gmp,
    /// Anything else: a packet for the engine, with what its LRH and GRH said.
    Data {
        /// The sender's LID, the SL and the GRH, for the engine.
        meta: RxMeta,
        /// The transport bytes (BTH through pad).
        body: &'a [u8],
    },
}

/// A received frame whose CRCs are right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Its LRH.
    pub lrh: LrhRepr,
    /// Who it is for.
    pub kind: FrameKind<'a>,
}

/// Checks a received frame (LRH through VCRC): the LRH, the length, the VCRC and the ICRC,
/// then says who it is for. Never panics, whatever the bytes.
pub fn open(frame: &[u8]) -> Result<Frame<'_>, IbDrop> {
    let lrh = LrhRepr::parse(&lrh::Packet::new_unchecked(frame)).map_err(|_| IbDrop::Malformed)?;
    let words_len = usize::from(lrh.pkt_len) * 4;
    let global = lrh.lnh == Lnh::IbaGlobal;
    let headers = lrh::HEADER_LEN + if global { grh::HEADER_LEN } else { 0 };
    if lrh.lver != 0
        || !matches!(lrh.lnh, Lnh::IbaLocal | Lnh::IbaGlobal)
        || words_len + VCRC_LEN != frame.len()
        || words_len < headers + softib_wire::bth::HEADER_LEN + ICRC_LEN
    {
        return Err(IbDrop::Malformed);
    }
    let vcrc = u16::from_le_bytes([frame[words_len], frame[words_len + 1]]);
    let icrc_at = words_len - ICRC_LEN;
    let grh = global.then(|| &frame[lrh::HEADER_LEN..headers]);
    let icrc = crc::read_icrc(&frame[headers..words_len]);
    let want = crc::icrc_native(&frame[..lrh::HEADER_LEN], grh, &frame[headers..icrc_at]);
    if crc::vcrc(&frame[..words_len]) != vcrc || icrc != Some(want) {
        return Err(IbDrop::BadCrc);
    }
    if lrh.vl == VL15 {
        return Ok(Frame {
            lrh,
            kind: FrameKind::Smp,
        });
    }
    let body = &frame[headers..icrc_at];
    let dest_qpn = softib_wire::bth::Packet::new_checked(body)
        .map(|b| b.dest_qpn())
        .ok();
    if dest_qpn == Some(Qpn::GSI) {
        return Ok(Frame {
            lrh,
            kind: FrameKind::Gmp,
        });
    }
    let grh = grh.map(|g| {
        let mut area = [0u8; 40];
        area.copy_from_slice(g);
        area
    });
    let meta = RxMeta {
        slid: lrh.slid,
        sl: lrh.sl,
        grh,
        in_process: false,
    };
    Ok(Frame {
        lrh,
        kind: FrameKind::Data { meta, body },
    })
}

/// Wraps the engine's packet `t`, written at `buf[HEADROOM..HEADROOM + t.len]`, into a native
/// frame at the start of `buf` (moved forward when there is no GRH): an LRH from `slid` (with
/// the path's source path bits) to the path's DLID, a GRH from `sgid` when the path has one,
/// then the ICRC and the VCRC. Returns the frame's length; `None` when `buf` is too short or
/// the packet too long for an LRH.
pub fn seal(buf: &mut [u8], t: &Transmit, slid: Lid, sgid: Gid) -> Option<usize> {
    let av = &t.av;
    let grh_len = if av.grh.is_some() { grh::HEADER_LEN } else { 0 };
    let start = HEADROOM - grh_len - lrh::HEADER_LEN;
    let body_end = HEADROOM + t.len;
    let total = body_end - start + ICRC_LEN + VCRC_LEN;
    if body_end + ICRC_LEN + VCRC_LEN > buf.len() {
        return None;
    }
    let pkt_len = u16::try_from((body_end - start + ICRC_LEN) / 4).ok()?;
    let lrh = LrhRepr {
        vl: 0,
        lver: 0,
        sl: av.sl & 0x0F,
        lnh: if grh_len > 0 {
            Lnh::IbaGlobal
        } else {
            Lnh::IbaLocal
        },
        dlid: av.dlid,
        pkt_len,
        slid: Lid(slid.0 | u16::from(av.src_path_bits)),
    };
    lrh.emit(&mut lrh::Packet::new_unchecked(
        &mut buf[start..start + lrh::HEADER_LEN],
    ));
    if let Some(g) = av.grh {
        let repr = GrhRepr {
            traffic_class: g.traffic_class,
            flow_label: g.flow_label & 0xF_FFFF,
            payload_len: u16::try_from(t.len + ICRC_LEN).ok()?,
            next_header: grh::NEXT_HEADER_IBA,
            hop_limit: g.hop_limit,
            sgid,
            dgid: g.dgid,
        };
        let at = start + lrh::HEADER_LEN;
        repr.emit(&mut grh::Packet::new_unchecked(
            &mut buf[at..at + grh::HEADER_LEN],
        ));
    }
    // Move the frame to the start of the buffer: callers send buf[..len].
    buf.copy_within(start..body_end, 0);
    let body_end = body_end - start;
    let headers = lrh::HEADER_LEN + grh_len;
    let icrc = crc::icrc_native(
        &buf[..lrh::HEADER_LEN],
        (grh_len > 0).then(|| &buf[lrh::HEADER_LEN..headers]),
        &buf[headers..body_end],
    );
    crc::write_icrc(&mut buf[body_end..], icrc);
    let vcrc = crc::vcrc(&buf[..body_end + ICRC_LEN]);
    buf[body_end + ICRC_LEN..body_end + ICRC_LEN + VCRC_LEN].copy_from_slice(&vcrc.to_le_bytes());
    Some(total)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use softib_engine::qp::{AddressVector, GlobalRoute};
    use softib_wire::packet::IbPacketRepr;
    use softib_wire::Opcode;

    /// An engine packet: an RC SEND ONLY to QP `dest` with 8 bytes of payload.
    fn packet(buf: &mut [u8], av: AddressVector, dest: Qpn) -> Transmit {
        let body = &mut buf[HEADROOM..HEADROOM + 20];
        body[..12].copy_from_slice(&[
            0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x80, 0x00, 0x00, 0x07,
        ]);
        body[5..8].copy_from_slice(&dest.value().to_be_bytes()[1..]);
        body[12..].copy_from_slice(b"payload!");
        Transmit {
            port: 1,
            av,
            src_qpn: Qpn::new(0x11),
            dest_qpn: dest,
            opcode: Opcode(0x04),
            len: 20,
            payload: None,
            in_process: false,
        }
    }

    #[test]
    fn a_sealed_frame_opens_to_the_same_packet_for_the_engine() {
        for global in [false, true] {
            let mut buf = vec![0u8; 256];
            let av = AddressVector {
                dlid: Lid(7),
                sl: 3,
                grh: global.then_some(GlobalRoute {
                    dgid: Gid([9; 16]),
                    flow_label: 5,
                    sgid_index: 0,
                    hop_limit: 2,
                    traffic_class: 0,
                }),
                ..AddressVector::default()
            };
            let t = packet(&mut buf, av, Qpn::new(0x22));
            let n = seal(&mut buf, &t, Lid(4), Gid([1; 16])).unwrap();
            // The wire crate, which nobody here wrote for this, agrees about the CRCs.
            let parsed = IbPacketRepr::parse(&buf[..n]).unwrap();
            assert!(
                parsed.icrc_ok && parsed.vcrc_ok == Some(true),
                "global {global}"
            );
            let f = open(&buf[..n]).unwrap();
            assert_eq!((f.lrh.dlid, f.lrh.slid, f.lrh.sl), (Lid(7), Lid(4), 3));
            let FrameKind::Data { meta, body } = f.kind else {
                panic!("a data packet, not {:?}", f.kind)
            };
            assert_eq!(
                (meta.slid, meta.sl, meta.grh.is_some()),
                (Lid(4), 3, global)
            );
            assert_eq!(&body[12..], b"payload!");
            // Any bit flipped, or a byte cut, and it does not open.
            for at in [0, 5, n / 2, n - 1] {
                let mut bad = buf[..n].to_vec();
                bad[at] ^= 0x10;
                assert!(open(&bad).is_err(), "flip at {at}");
            }
            assert_eq!(open(&buf[..n - 1]), Err(IbDrop::Malformed));
        }
    }

    #[test]
    fn qp1_and_vl15_are_told_apart_from_data() {
        let mut buf = vec![0u8; 256];
        let av = AddressVector {
            dlid: Lid(7),
            ..AddressVector::default()
        };
        let t = packet(&mut buf, av, Qpn::GSI);
        let n = seal(&mut buf, &t, Lid(4), Gid([0; 16])).unwrap();
        assert_eq!(open(&buf[..n]).unwrap().kind, FrameKind::Gmp);
        // The same frame on VL15 is for the SMI (the VL is not covered by the ICRC; the VCRC
        // is made again).
        buf[0] |= 0xF0;
        let words = n - VCRC_LEN;
        let vcrc = crc::vcrc(&buf[..words]);
        buf[words..n].copy_from_slice(&vcrc.to_le_bytes());
        assert_eq!(open(&buf[..n]).unwrap().kind, FrameKind::Smp);
        // Garbage never panics.
        for len in 0..64 {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            assert!(open(&junk).is_err());
        }
    }
}
