//! ClassPortInfo (AttributeID 0x0001, IBA vol 1 §13.4.8.1): the attribute every GSI class
//! (SA, PMA, CM, ...) answers first, naming its capabilities, response time and where to
//! redirect requests and send traps. perfquery reads it before any counter.
//!
//! ```text
//!  0: BaseVersion(8) ClassVersion(8) CapabilityMask(16)
//!  4: CapabilityMask2(27) RespTimeValue(5)
//!  8: RedirectGID(128)
//! 24: RedirectTC(8) RedirectSL(4) RedirectFL(20)
//! 28: RedirectLID(16) RedirectP_Key(16)
//! 32: Reserved(8) RedirectQP(24)
//! 36: RedirectQ_Key(32)
//! 40: TrapGID(128)
//! 56: TrapTC(8) TrapSL(4) TrapFL(20)
//! 60: TrapLID(16) TrapP_Key(16)
//! 64: TrapHL(8) TrapQP(24)
//! 68: TrapQ_Key(32)
//! ```
//!
//! Checked against libibmad `fields.c` (the `IB_CPI_*` fields) and opensm
//! `ib_class_port_info_t`.

use crate::bytes::{read_u16, read_u24, read_u32, write_u16, write_u24, write_u32};
use crate::{Error, Gid, Lid, PKey, QKey, Qpn, Result};

/// The class-independent CapabilityMask bits (IBA §13.4.8.1 table 117).
pub mod capability_mask {
    /// IsTrapSupported.
    pub const IS_TRAP_SUPPORTED: u16 = 0x0001;
    /// IsGetSetSupported (notice queue).
    pub const IS_GET_SET_SUPPORTED: u16 = 0x0002;
    /// IsCapabilityMask2Supported.
    pub const IS_CAPABILITY_MASK2_SUPPORTED: u16 = 0x0004;
}

/// ClassPortInfo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// BaseVersion supported (1).
    pub base_version: u8,
    /// ClassVersion supported.
    pub class_version: u8,
    /// CapabilityMask (bits 0–7 class-independent, 8–15 class-specific).
    pub capability_mask: u16,
    /// CapabilityMask2 (27 bits).
    pub capability_mask2: u32,
    /// RespTimeValue (5 bits): 4.096 µs × 2^RespTimeValue.
    pub resp_time_value: u8,
    /// RedirectGID.
    pub redirect_gid: Gid,
    /// RedirectTC.
    pub redirect_tc: u8,
    /// RedirectSL (4 bits).
    pub redirect_sl: u8,
    /// RedirectFL (20 bits).
    pub redirect_fl: u32,
    /// RedirectLID (0 = no redirection).
    pub redirect_lid: Lid,
    /// RedirectP_Key.
    pub redirect_pkey: PKey,
    /// RedirectQP.
    pub redirect_qp: Qpn,
    /// RedirectQ_Key.
    pub redirect_qkey: QKey,
    /// TrapGID.
    pub trap_gid: Gid,
    /// TrapTC.
    pub trap_tc: u8,
    /// TrapSL (4 bits).
    pub trap_sl: u8,
    /// TrapFL (20 bits).
    pub trap_fl: u32,
    /// TrapLID.
    pub trap_lid: Lid,
    /// TrapP_Key.
    pub trap_pkey: PKey,
    /// TrapHL: hop limit for traps.
    pub trap_hl: u8,
    /// TrapQP.
    pub trap_qp: Qpn,
    /// TrapQ_Key.
    pub trap_qkey: QKey,
}

fn read_gid(b: &[u8], at: usize) -> Gid {
    let mut g = [0u8; 16];
    g.copy_from_slice(&b[at..at + 16]);
    Gid(g)
}

impl Repr {
    /// Length in bytes.
    pub const LEN: usize = 72;

    /// Parses a ClassPortInfo.
    pub fn parse(bytes: &[u8]) -> Result<Repr> {
        let b = bytes
            .get(..Self::LEN)
            .ok_or(Error::Truncated("ClassPortInfo"))?;
        let w4 = read_u32(b, 4);
        let redirect = read_u32(b, 24);
        let trap = read_u32(b, 56);
        Ok(Repr {
            base_version: b[0],
            class_version: b[1],
            capability_mask: read_u16(b, 2),
            capability_mask2: w4 >> 5,
            resp_time_value: (w4 & 0x1F) as u8,
            redirect_gid: read_gid(b, 8),
            redirect_tc: (redirect >> 24) as u8,
            redirect_sl: ((redirect >> 20) & 0x0F) as u8,
            redirect_fl: redirect & 0x000F_FFFF,
            redirect_lid: Lid(read_u16(b, 28)),
            redirect_pkey: PKey(read_u16(b, 30)),
            redirect_qp: Qpn::new(read_u24(b, 33)),
            redirect_qkey: QKey(read_u32(b, 36)),
            trap_gid: read_gid(b, 40),
            trap_tc: (trap >> 24) as u8,
            trap_sl: ((trap >> 20) & 0x0F) as u8,
            trap_fl: trap & 0x000F_FFFF,
            trap_lid: Lid(read_u16(b, 60)),
            trap_pkey: PKey(read_u16(b, 62)),
            trap_hl: b[64],
            trap_qp: Qpn::new(read_u24(b, 65)),
            trap_qkey: QKey(read_u32(b, 68)),
        })
    }

    /// Writes the ClassPortInfo into the first [`Repr::LEN`] bytes of `bytes`.
    pub fn emit(&self, bytes: &mut [u8]) {
        let b = &mut bytes[..Self::LEN];
        b[0] = self.base_version;
        b[1] = self.class_version;
        write_u16(b, 2, self.capability_mask);
        write_u32(
            b,
            4,
            ((self.capability_mask2 & 0x07FF_FFFF) << 5) | u32::from(self.resp_time_value & 0x1F),
        );
        b[8..24].copy_from_slice(&self.redirect_gid.0);
        write_u32(
            b,
            24,
            (u32::from(self.redirect_tc) << 24)
                | (u32::from(self.redirect_sl & 0x0F) << 20)
                | (self.redirect_fl & 0x000F_FFFF),
        );
        write_u16(b, 28, self.redirect_lid.0);
        write_u16(b, 30, self.redirect_pkey.0);
        b[32] = 0;
        write_u24(b, 33, self.redirect_qp.value());
        write_u32(b, 36, self.redirect_qkey.0);
        b[40..56].copy_from_slice(&self.trap_gid.0);
        write_u32(
            b,
            56,
            (u32::from(self.trap_tc) << 24)
                | (u32::from(self.trap_sl & 0x0F) << 20)
                | (self.trap_fl & 0x000F_FFFF),
        );
        write_u16(b, 60, self.trap_lid.0);
        write_u16(b, 62, self.trap_pkey.0);
        b[64] = self.trap_hl;
        write_u24(b, 65, self.trap_qp.value());
        write_u32(b, 68, self.trap_qkey.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An SA's ClassPortInfo: class version 2, IsTrapSupported|IsGetSetSupported|0x0100,
    /// RespTimeValue 18, no redirection, traps to LID 1 QP1.
    fn bytes() -> [u8; 72] {
        let mut b = [0u8; 72];
        b[0] = 1;
        b[1] = 2;
        b[2..4].copy_from_slice(&[0x01, 0x03]);
        b[4..8].copy_from_slice(&[0x00, 0x00, 0x00, 0x32]); // CapMask2 1, RespTimeValue 18
        b[56..60].copy_from_slice(&[0x12, 0x3a, 0xbc, 0xde]); // TC 0x12, SL 3, FL 0xabcde
        b[60..62].copy_from_slice(&[0x00, 0x01]); // TrapLID 1
        b[62..64].copy_from_slice(&[0xff, 0xff]); // TrapP_Key
        b[64] = 0x40; // TrapHL
        b[65..68].copy_from_slice(&[0x00, 0x00, 0x01]); // TrapQP 1
        b[68..72].copy_from_slice(&[0x80, 0x01, 0x00, 0x00]); // TrapQ_Key
        b
    }

    fn repr() -> Repr {
        Repr {
            base_version: 1,
            class_version: 2,
            capability_mask: 0x0103,
            capability_mask2: 1,
            resp_time_value: 18,
            redirect_gid: Gid::default(),
            redirect_tc: 0,
            redirect_sl: 0,
            redirect_fl: 0,
            redirect_lid: Lid(0),
            redirect_pkey: PKey(0),
            redirect_qp: Qpn::new(0),
            redirect_qkey: QKey(0),
            trap_gid: Gid::default(),
            trap_tc: 0x12,
            trap_sl: 3,
            trap_fl: 0xabcde,
            trap_lid: Lid(1),
            trap_pkey: PKey::DEFAULT,
            trap_hl: 0x40,
            trap_qp: Qpn::GSI,
            trap_qkey: QKey::GSI,
        }
    }

    #[test]
    fn test_deconstruct() {
        let r = Repr::parse(&bytes()).unwrap();
        assert_eq!(r.class_version, 2);
        assert_eq!(
            r.capability_mask & capability_mask::IS_TRAP_SUPPORTED,
            capability_mask::IS_TRAP_SUPPORTED
        );
        assert_eq!(r.resp_time_value, 18);
        assert_eq!(r.trap_sl, 3);
        assert_eq!(r.trap_fl, 0xabcde);
        assert_eq!(r.trap_qp, Qpn::GSI);
    }

    #[test]
    fn test_construct() {
        let mut out = [0xa5u8; 72];
        repr().emit(&mut out);
        assert_eq!(out, bytes());
    }

    #[test]
    fn test_parse() {
        assert_eq!(Repr::parse(&bytes()), Ok(repr()));
    }

    #[test]
    fn test_emit() {
        let mut out = [0u8; 72];
        repr().emit(&mut out);
        assert_eq!(out, bytes());
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            Repr::parse(&bytes()[..71]),
            Err(Error::Truncated("ClassPortInfo"))
        );
    }

    proptest! {
        #[test]
        fn roundtrip(b in proptest::collection::vec(any::<u8>(), 72)) {
            let r = Repr::parse(&b).unwrap();
            let mut out = [0xa5u8; 72];
            r.emit(&mut out);
            let mut expect = [0u8; 72];
            expect.copy_from_slice(&b);
            expect[32] = 0; // reserved
            prop_assert_eq!(out, expect);
            prop_assert_eq!(Repr::parse(&out), Ok(r));
        }

        #[test]
        fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = Repr::parse(&b);
        }
    }
}
