//! The `smp_packet` module deals with *SMPs on the wire*: a subnet management packet travels
//! as a native InfiniBand packet on the management lane (IBA §7.6.5, §13.5.3):
//!
//! ```text
//! LRH (VL 15, LNH IBA local) | BTH (UD SEND_ONLY, P_Key 0xFFFF, DestQP 0) |
//! DETH (Q_Key 0, SrcQP 0) | MAD (256 bytes) | ICRC | VCRC
//! ```
//!
//! A directed-route SMP is sent with LRH DLID and SLID permissive (0xFFFF); a LID-routed one
//! with the destination's and the sender's LIDs.

use softib_wire::bth::Repr as BthRepr;
use softib_wire::deth::Repr as DethRepr;
use softib_wire::mad::{self, smp, MAD_LEN};
use softib_wire::packet::{IbPacketRepr, TransportRepr};
use softib_wire::{Lid, Lnh, LrhRepr, Opcode, PKey, Psn, QKey, Qpn};

/// The management virtual lane.
pub const VL15: u8 = 15;

/// The length of an SMP packet on the wire: LRH 8 + BTH 12 + DETH 8 + MAD 256 + ICRC 4 +
/// VCRC 2.
pub const SMP_PACKET_LEN: usize = 8 + 12 + 8 + MAD_LEN + 4 + 2;

/// Why bytes are not an SMP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmpPacketError {
    /// The packet did not parse.
    Packet(softib_wire::Error),
    /// The ICRC or VCRC does not match.
    BadCrc,
    /// Not on VL15.
    NotVl15,
    /// Not a UD SEND_ONLY to QP0.
    NotQp0,
    /// The payload is not a 256-byte SMP (class 0x01 or 0x81).
    NotSmp,
}

impl core::fmt::Display for SmpPacketError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SmpPacketError::Packet(e) => write!(f, "{e}"),
            SmpPacketError::BadCrc => f.write_str("bad ICRC or VCRC"),
            SmpPacketError::NotVl15 => f.write_str("not on VL15"),
            SmpPacketError::NotQp0 => f.write_str("not a UD SEND_ONLY to QP0"),
            SmpPacketError::NotSmp => f.write_str("payload is not an SMP"),
        }
    }
}

impl std::error::Error for SmpPacketError {}

/// A parsed SMP packet: its LRH and the SMP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmpPacket {
    /// The local route header.
    pub lrh: LrhRepr,
    /// The SMP.
    pub smp: smp::Repr,
}

/// The bytes of `smp` sent from `slid` to `dlid` on VL15 (SL 0), with ICRC and VCRC.
pub fn emit(dlid: Lid, slid: Lid, smp: &smp::Repr) -> Vec<u8> {
    let mut mad = [0u8; MAD_LEN];
    smp.emit(&mut smp::Packet::new_unchecked(&mut mad[..]));
    emit_mad(
        &MadAddress {
            vl: VL15,
            sl: 0,
            dlid,
            slid,
            dest_qpn: Qpn::SMI,
            src_qpn: Qpn::SMI,
            qkey: QKey(0),
        },
        &mad,
    )
}

/// Where a MAD packet goes and comes from: the LRH and DETH fields of a QP0/QP1 datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadAddress {
    /// VL: 15 for SMPs (QP0), a data VL (0) for GMPs (QP1).
    pub vl: u8,
    /// SL.
    pub sl: u8,
    /// LRH DLID.
    pub dlid: Lid,
    /// LRH SLID.
    pub slid: Lid,
    /// BTH DestQP: 0 (SMI) or 1 (GSI), or a redirected QP.
    pub dest_qpn: Qpn,
    /// DETH SrcQP.
    pub src_qpn: Qpn,
    /// DETH Q_Key: 0 for QP0, 0x80010000 for QP1.
    pub qkey: QKey,
}

/// A MAD inside a native IB UD SEND_ONLY packet (LRH, BTH, DETH, MAD, ICRC, VCRC).
pub fn emit_mad(addr: &MadAddress, mad: &[u8; MAD_LEN]) -> Vec<u8> {
    let mut transport = TransportRepr::new(BthRepr {
        opcode: Opcode::UD_SEND_ONLY,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: PKey::DEFAULT,
        fecn: false,
        becn: false,
        dest_qpn: addr.dest_qpn,
        ack_req: false,
        psn: Psn::new(0),
    });
    transport.deth = Some(DethRepr {
        qkey: addr.qkey,
        src_qpn: addr.src_qpn,
    });
    let packet = IbPacketRepr {
        lrh: LrhRepr {
            vl: addr.vl,
            lver: 0,
            sl: addr.sl,
            lnh: Lnh::IbaLocal,
            dlid: addr.dlid,
            pkt_len: 0,
            slid: addr.slid,
        },
        grh: None,
        transport,
        payload: mad,
    };
    let mut out = vec![0u8; packet.buffer_len()];
    packet.emit(&mut out);
    out
}

/// A MAD packet as received: its addresses and the 256 MAD bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadPacket {
    /// LRH, BTH and DETH addresses.
    pub addr: MadAddress,
    /// The MAD.
    pub mad: [u8; MAD_LEN],
}

/// Parses a UD SEND_ONLY packet carrying one MAD (to any QP), checking ICRC and VCRC.
pub fn parse_mad(bytes: &[u8]) -> Result<MadPacket, SmpPacketError> {
    let parsed = IbPacketRepr::parse(bytes).map_err(SmpPacketError::Packet)?;
    if !parsed.icrc_ok || parsed.vcrc_ok == Some(false) {
        return Err(SmpPacketError::BadCrc);
    }
    let p = parsed.repr;
    let (Some(deth), true) = (
        p.transport.deth,
        p.transport.bth.opcode == Opcode::UD_SEND_ONLY,
    ) else {
        return Err(SmpPacketError::NotQp0);
    };
    let mad: [u8; MAD_LEN] = p.payload.try_into().map_err(|_| SmpPacketError::NotSmp)?;
    Ok(MadPacket {
        addr: MadAddress {
            vl: p.lrh.vl,
            sl: p.lrh.sl,
            dlid: p.lrh.dlid,
            slid: p.lrh.slid,
            dest_qpn: p.transport.bth.dest_qpn,
            src_qpn: deth.src_qpn,
            qkey: deth.qkey,
        },
        mad,
    })
}

/// Parses an SMP packet, checking ICRC, VCRC, VL15, QP0 and the management class.
pub fn parse(bytes: &[u8]) -> Result<SmpPacket, SmpPacketError> {
    let parsed = IbPacketRepr::parse(bytes).map_err(SmpPacketError::Packet)?;
    if !parsed.icrc_ok || parsed.vcrc_ok == Some(false) {
        return Err(SmpPacketError::BadCrc);
    }
    let p = parsed.repr;
    if p.lrh.vl != VL15 {
        return Err(SmpPacketError::NotVl15);
    }
    if p.transport.bth.opcode != Opcode::UD_SEND_ONLY || p.transport.bth.dest_qpn != Qpn::SMI {
        return Err(SmpPacketError::NotQp0);
    }
    if p.payload.len() != MAD_LEN {
        return Err(SmpPacketError::NotSmp);
    }
    match mad::Body::parse(p.payload) {
        Ok(mad::Body::Smp(smp)) => Ok(SmpPacket { lrh: p.lrh, smp }),
        Ok(_) => Err(SmpPacketError::NotSmp),
        Err(e) => Err(SmpPacketError::Packet(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softib_wire::mad::AttrId;
    use softib_wire::LrhPacket;

    #[test]
    fn roundtrip() {
        let smp = smp::Repr::dr_get(7, AttrId::NODE_INFO, 0, 0, &[1, 35, 2]).unwrap();
        let bytes = emit(Lid::PERMISSIVE, Lid::PERMISSIVE, &smp);
        assert_eq!(bytes.len(), SMP_PACKET_LEN);
        let lrh = LrhPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(
            (lrh.vl(), lrh.dlid(), lrh.slid()),
            (15, Lid::PERMISSIVE, Lid::PERMISSIVE)
        );
        assert_eq!(usize::from(lrh.pkt_len()) * 4 + 2, SMP_PACKET_LEN);
        let p = parse(&bytes).unwrap();
        assert_eq!(p.smp, smp);
        assert_eq!(p.lrh.vl, VL15);
    }

    #[test]
    fn rejects() {
        let smp = smp::Repr::lid_get(7, AttrId::NODE_INFO, 0, 0);
        let mut bytes = emit(Lid(1), Lid(2), &smp);
        bytes[100] ^= 1;
        assert_eq!(parse(&bytes), Err(SmpPacketError::BadCrc));
        assert!(matches!(
            parse(&bytes[..40]),
            Err(SmpPacketError::Packet(_))
        ));
        assert!(parse(&[]).is_err());
    }
}
