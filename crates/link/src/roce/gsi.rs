//! QP1, the general services interface, on a RoCEv2 port (IBA A17.4.4: RoCE keeps QP1 for
//! the CM): a GMP travels as a UD SEND_ONLY to DestQP 1 with the GSI Q_Key, its 256 bytes
//! after the BTH and DETH. Only the CM uses it on RoCE (there is no SM, SA or PMA), but
//! nothing here looks into the MAD.

use softib_wire::mad::MAD_LEN;
use softib_wire::opcode::Opcode;
use softib_wire::{bth, deth, PKey, Psn, QKey, Qpn};

/// The length of a GMP packet without its ICRC: BTH, DETH, MAD.
pub const GMP_LEN: usize = bth::HEADER_LEN + deth::HEADER_LEN + MAD_LEN;

/// A GMP that arrived on QP1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GsiIn {
    /// The sender's address (its GID, for RoCEv2).
    pub from: std::net::SocketAddr,
    /// The sender's QP (1, unless it is a redirected agent).
    pub src_qpn: Qpn,
    /// The MAD.
    pub mad: [u8; MAD_LEN],
}

/// Whether a packet's BTH (the start of `body`) is for QP1.
pub fn is_for_gsi(body: &[u8]) -> bool {
    bth::Packet::new_checked(body).is_ok_and(|p| p.dest_qpn() == Qpn::GSI)
}

/// The sending QP and MAD of a QP1 packet (BTH onwards, without the ICRC), or why it is not
/// a GMP.
pub fn parse(body: &[u8]) -> Result<(Qpn, [u8; MAD_LEN]), &'static str> {
    let b = bth::Repr::parse(&bth::Packet::new_unchecked(body)).map_err(|_| "no BTH")?;
    if b.opcode != Opcode::UD_SEND_ONLY {
        return Err("not a UD SEND_ONLY");
    }
    let rest = &body[bth::HEADER_LEN..];
    let d = deth::Repr::parse(&deth::Packet::new_unchecked(rest)).map_err(|_| "no DETH")?;
    if d.qkey != QKey::GSI {
        return Err("Q_Key is not the GSI's");
    }
    let mad = rest
        .get(deth::HEADER_LEN..deth::HEADER_LEN + MAD_LEN)
        .ok_or("shorter than a MAD")?;
    let mut m = [0u8; MAD_LEN];
    m.copy_from_slice(mad);
    Ok((d.src_qpn, m))
}

/// Writes a GMP from QP1 to `dest_qpn` into `room` (BTH, DETH, MAD; no ICRC); returns its
/// length, or `None` when `room` is too small.
pub fn build(room: &mut [u8], dest_qpn: Qpn, psn: Psn, mad: &[u8; MAD_LEN]) -> Option<usize> {
    let at = room.get_mut(..GMP_LEN)?;
    bth::Repr {
        opcode: Opcode::UD_SEND_ONLY,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: PKey::DEFAULT,
        fecn: false,
        becn: false,
        dest_qpn,
        ack_req: false,
        psn,
    }
    .emit(&mut bth::Packet::new_unchecked(&mut at[..bth::HEADER_LEN]));
    deth::Repr {
        qkey: QKey::GSI,
        src_qpn: Qpn::GSI,
    }
    .emit(&mut deth::Packet::new_unchecked(
        &mut at[bth::HEADER_LEN..bth::HEADER_LEN + deth::HEADER_LEN],
    ));
    at[bth::HEADER_LEN + deth::HEADER_LEN..].copy_from_slice(mad);
    Some(GMP_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gmp_round_trips_and_impostors_are_named() {
        let mut mad = [0u8; MAD_LEN];
        mad[1] = 0x07;
        let mut room = [0u8; GMP_LEN + 4];
        let n = build(&mut room, Qpn::GSI, Psn::new(5), &mad).expect("fits");
        assert_eq!(n, GMP_LEN);
        assert!(is_for_gsi(&room[..n]));
        assert_eq!(parse(&room[..n]), Ok((Qpn::GSI, mad)));
        assert_eq!(parse(&room[..n - 1]), Err("shorter than a MAD"));
        let mut bad = room;
        bad[12] ^= 1; // Q_Key
        assert_eq!(parse(&bad[..n]), Err("Q_Key is not the GSI's"));
        let mut bad = room;
        bad[0] = 0x04; // RC SEND_ONLY
        assert_eq!(parse(&bad[..n]), Err("not a UD SEND_ONLY"));
        assert!(build(&mut [0u8; 10], Qpn::GSI, Psn::new(0), &mad).is_none());
    }
}
