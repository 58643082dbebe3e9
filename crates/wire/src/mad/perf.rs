//! Performance management MADs (IBA vol 1 §16.1): what perfquery asks a port's PMA.
//!
//! ```text
//!   0: common MAD header (24 bytes)
//!  24: Reserved (40 bytes)
//!  64: PMA data (192 bytes) — the attribute
//! ```
//!
//! Attribute layouts were checked against libibmad `fields.c` (the `IB_PC_*` and
//! `IB_PC_EXT_*` fields), opensm `ib_port_counters_t`/`ib_port_counters_ext_t` and the Linux
//! `ib_pma.h`.

use super::{AttrId, Method, MgmtClass};
use crate::bytes::{read_u16, read_u32, read_u64, write_u16, write_u32, write_u64};
use crate::{Error, Result};

/// The ClassVersion of performance management (1).
pub const CLASS_VERSION: u8 = 1;

/// Offset of the PMA data area in the MAD.
pub const DATA_OFFSET: usize = 64;

/// Length of the PMA data area.
pub const DATA_LEN: usize = 192;

/// PortSelect value meaning "all ports" (when ClassPortInfo has AllPortSelect).
pub const ALL_PORTS: u8 = 0xFF;

mod field {
    use core::ops::Range;
    pub const RESERVED: Range<usize> = 24..64;
    pub const DATA: Range<usize> = 64..256;
}

/// The PMA's class-specific ClassPortInfo.CapabilityMask bits (IBA §16.1.2; opensm
/// `IB_PM_*`).
pub mod capability_mask {
    /// AllPortSelect: PortSelect 0xFF addresses all ports.
    pub const ALL_PORT_SELECT: u16 = 1 << 8;
    /// PortCountersExtended carries the unicast/multicast counters.
    pub const EXT_WIDTH_SUPPORTED: u16 = 1 << 9;
    /// PortCountersExtended without the IETF-only counters.
    pub const EXT_WIDTH_NOIETF_SUPPORTED: u16 = 1 << 10;
    /// PortSamplesControl samples only.
    pub const SAMPLES_ONLY_SUPPORTED: u16 = 1 << 11;
    /// PortCounters.PortXmitWait is supported.
    pub const PORT_XMIT_WAIT_SUPPORTED: u16 = 1 << 12;
}

/// A read/write view of a PMA MAD at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length (see the crate's panic-freedom contract).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole 256-byte PMA MAD.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a whole PMA MAD; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < super::MAD_LEN {
            Err(Error::Truncated("PMA MAD"))
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// A view of the common MAD header.
    pub fn header(&self) -> super::Packet<&[u8]> {
        super::Packet::new_unchecked(self.buffer.as_ref())
    }

    /// The 192-byte PMA data area.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// A mutable view of the common MAD header.
    pub fn header_mut(&mut self) -> super::Packet<&mut [u8]> {
        super::Packet::new_unchecked(self.buffer.as_mut())
    }

    /// Zeroes the 40 reserved bytes after the header.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED].fill(0);
    }

    /// The PMA data area, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }
}

/// The meaningful contents of a PMA MAD. `data` borrows the data area: [`Repr::parse`] gives
/// all 192 bytes, [`Repr::emit`] writes up to 192 bytes of it and zero-pads the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// The common MAD header.
    pub header: super::Repr,
    /// The PMA data: the attribute.
    pub data: &'a [u8],
}

impl<'a> Repr<'a> {
    /// A PerfGet or PerfSet of attribute `attr_id` with `data` (e.g. a [`PortCounters`] with
    /// just PortSelect, or CounterSelect for a reset).
    pub fn request(
        method: Method,
        tid: u64,
        attr_id: AttrId,
        attr_mod: u32,
        data: &'a [u8],
    ) -> Repr<'a> {
        Repr {
            header: super::Repr::request(
                MgmtClass::PerfMgt,
                CLASS_VERSION,
                method,
                tid,
                attr_id,
                attr_mod,
            ),
            data,
        }
    }

    /// The PerfGetResp to this request, with `status` and `data`.
    pub fn response<'b>(&self, status: u16, data: &'b [u8]) -> Repr<'b> {
        Repr {
            header: self.header.response(status),
            data,
        }
    }

    /// The 256 bytes of the PerfGetResp to this request, with `status` and `data`.
    pub fn response_mad(&self, status: u16, data: &[u8]) -> [u8; super::MAD_LEN] {
        let mut out = [0u8; super::MAD_LEN];
        self.response(status, data)
            .emit(&mut Packet::new_unchecked(&mut out[..]));
        out
    }

    /// Parses a PMA MAD.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Repr<'a>> {
        packet.check_len()?;
        let header = super::Repr::parse(&packet.header())?;
        let buffer: &'a T = packet.buffer;
        let buffer: &'a [u8] = buffer.as_ref();
        Ok(Repr {
            header,
            data: buffer.get(field::DATA).unwrap_or_default(),
        })
    }

    /// The number of bytes `emit` writes: [`super::MAD_LEN`].
    pub const fn buffer_len(&self) -> usize {
        super::MAD_LEN
    }

    /// Writes the PMA MAD into the first 256 bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        self.header.emit(&mut packet.header_mut());
        packet.clear_reserved();
        super::copy_padded(packet.data_mut(), self.data);
    }
}

/// PortCounters.CounterSelect bits: which counters a PerfSet clears (IBA §16.1.3.5).
pub mod counter_select {
    /// SymbolErrorCounter.
    pub const SYMBOL_ERROR: u16 = 0x0001;
    /// LinkErrorRecoveryCounter.
    pub const LINK_ERROR_RECOVERY: u16 = 0x0002;
    /// LinkDownedCounter.
    pub const LINK_DOWNED: u16 = 0x0004;
    /// PortRcvErrors.
    pub const PORT_RCV_ERRORS: u16 = 0x0008;
    /// PortRcvRemotePhysicalErrors.
    pub const PORT_RCV_REMOTE_PHYSICAL_ERRORS: u16 = 0x0010;
    /// PortRcvSwitchRelayErrors.
    pub const PORT_RCV_SWITCH_RELAY_ERRORS: u16 = 0x0020;
    /// PortXmitDiscards.
    pub const PORT_XMIT_DISCARDS: u16 = 0x0040;
    /// PortXmitConstraintErrors.
    pub const PORT_XMIT_CONSTRAINT_ERRORS: u16 = 0x0080;
    /// PortRcvConstraintErrors.
    pub const PORT_RCV_CONSTRAINT_ERRORS: u16 = 0x0100;
    /// LocalLinkIntegrityErrors.
    pub const LOCAL_LINK_INTEGRITY_ERRORS: u16 = 0x0200;
    /// ExcessiveBufferOverrunErrors.
    pub const EXCESSIVE_BUFFER_OVERRUN_ERRORS: u16 = 0x0400;
    /// VL15Dropped.
    pub const VL15_DROPPED: u16 = 0x0800;
    /// PortXmitData.
    pub const PORT_XMIT_DATA: u16 = 0x1000;
    /// PortRcvData.
    pub const PORT_RCV_DATA: u16 = 0x2000;
    /// PortXmitPkts.
    pub const PORT_XMIT_PKTS: u16 = 0x4000;
    /// PortRcvPkts.
    pub const PORT_RCV_PKTS: u16 = 0x8000;
    /// CounterSelect2 bit: PortXmitWait.
    pub const SELECT2_PORT_XMIT_WAIT: u8 = 0x01;
}

/// PortCounters (AttributeID 0x0012, IBA §16.1.3.5, 44 bytes). The data counters count
/// 32-bit words (octets / 4); all counters stick at their maximum.
///
/// ```text
///  0: Reserved(8) PortSelect(8) CounterSelect(16)
///  4: SymbolErrorCounter(16) LinkErrorRecoveryCounter(8) LinkDownedCounter(8)
///  8: PortRcvErrors(16) PortRcvRemotePhysicalErrors(16)
/// 12: PortRcvSwitchRelayErrors(16) PortXmitDiscards(16)
/// 16: PortXmitConstraintErrors(8) PortRcvConstraintErrors(8) CounterSelect2(8)
///     LocalLinkIntegrityErrors(4) ExcessiveBufferOverrunErrors(4)
/// 20: QP1Dropped(16) VL15Dropped(16)
/// 24: PortXmitData(32)
/// 28: PortRcvData(32)
/// 32: PortXmitPkts(32)
/// 36: PortRcvPkts(32)
/// 40: PortXmitWait(32)
/// ```
///
/// CounterSelect2 (byte 18) and QP1Dropped (bytes 20–21) are reserved in IBA 1.2.1 and defined
/// by later releases (libibmad `IB_PC_COUNTER_SELECT2_F`, opensm `qp1_dropped`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PortCounters {
    /// PortSelect: the port whose counters these are.
    pub port_select: u8,
    /// CounterSelect (see [`counter_select`]).
    pub counter_select: u16,
    /// SymbolErrorCounter.
    pub symbol_error_counter: u16,
    /// LinkErrorRecoveryCounter.
    pub link_error_recovery_counter: u8,
    /// LinkDownedCounter.
    pub link_downed_counter: u8,
    /// PortRcvErrors.
    pub port_rcv_errors: u16,
    /// PortRcvRemotePhysicalErrors.
    pub port_rcv_remote_physical_errors: u16,
    /// PortRcvSwitchRelayErrors.
    pub port_rcv_switch_relay_errors: u16,
    /// PortXmitDiscards.
    pub port_xmit_discards: u16,
    /// PortXmitConstraintErrors.
    pub port_xmit_constraint_errors: u8,
    /// PortRcvConstraintErrors.
    pub port_rcv_constraint_errors: u8,
    /// CounterSelect2.
    pub counter_select2: u8,
    /// LocalLinkIntegrityErrors (4 bits).
    pub local_link_integrity_errors: u8,
    /// ExcessiveBufferOverrunErrors (4 bits).
    pub excessive_buffer_overrun_errors: u8,
    /// QP1Dropped.
    pub qp1_dropped: u16,
    /// VL15Dropped.
    pub vl15_dropped: u16,
    /// PortXmitData, in 4-octet words.
    pub port_xmit_data: u32,
    /// PortRcvData, in 4-octet words.
    pub port_rcv_data: u32,
    /// PortXmitPkts.
    pub port_xmit_pkts: u32,
    /// PortRcvPkts.
    pub port_rcv_pkts: u32,
    /// PortXmitWait.
    pub port_xmit_wait: u32,
}

impl PortCounters {
    /// Length in bytes.
    pub const LEN: usize = 44;
    /// The AttributeID.
    pub const ATTR_ID: AttrId = AttrId::PORT_COUNTERS;

    /// Parses a PortCounters.
    pub fn parse(bytes: &[u8]) -> Result<PortCounters> {
        let b = bytes
            .get(..Self::LEN)
            .ok_or(Error::Truncated("PortCounters"))?;
        Ok(PortCounters {
            port_select: b[1],
            counter_select: read_u16(b, 2),
            symbol_error_counter: read_u16(b, 4),
            link_error_recovery_counter: b[6],
            link_downed_counter: b[7],
            port_rcv_errors: read_u16(b, 8),
            port_rcv_remote_physical_errors: read_u16(b, 10),
            port_rcv_switch_relay_errors: read_u16(b, 12),
            port_xmit_discards: read_u16(b, 14),
            port_xmit_constraint_errors: b[16],
            port_rcv_constraint_errors: b[17],
            counter_select2: b[18],
            local_link_integrity_errors: b[19] >> 4,
            excessive_buffer_overrun_errors: b[19] & 0x0F,
            qp1_dropped: read_u16(b, 20),
            vl15_dropped: read_u16(b, 22),
            port_xmit_data: read_u32(b, 24),
            port_rcv_data: read_u32(b, 28),
            port_xmit_pkts: read_u32(b, 32),
            port_rcv_pkts: read_u32(b, 36),
            port_xmit_wait: read_u32(b, 40),
        })
    }

    /// Writes the PortCounters into the first [`PortCounters::LEN`] bytes of `bytes`.
    pub fn emit(&self, bytes: &mut [u8]) {
        let b = &mut bytes[..Self::LEN];
        b[0] = 0;
        b[1] = self.port_select;
        write_u16(b, 2, self.counter_select);
        write_u16(b, 4, self.symbol_error_counter);
        b[6] = self.link_error_recovery_counter;
        b[7] = self.link_downed_counter;
        write_u16(b, 8, self.port_rcv_errors);
        write_u16(b, 10, self.port_rcv_remote_physical_errors);
        write_u16(b, 12, self.port_rcv_switch_relay_errors);
        write_u16(b, 14, self.port_xmit_discards);
        b[16] = self.port_xmit_constraint_errors;
        b[17] = self.port_rcv_constraint_errors;
        b[18] = self.counter_select2;
        b[19] = ((self.local_link_integrity_errors & 0x0F) << 4)
            | (self.excessive_buffer_overrun_errors & 0x0F);
        write_u16(b, 20, self.qp1_dropped);
        write_u16(b, 22, self.vl15_dropped);
        write_u32(b, 24, self.port_xmit_data);
        write_u32(b, 28, self.port_rcv_data);
        write_u32(b, 32, self.port_xmit_pkts);
        write_u32(b, 36, self.port_rcv_pkts);
        write_u32(b, 40, self.port_xmit_wait);
    }
}

/// PortCountersExtended.CounterSelect bits (IBA §16.1.4.11).
pub mod counter_select_ext {
    /// PortXmitData.
    pub const PORT_XMIT_DATA: u16 = 0x0001;
    /// PortRcvData.
    pub const PORT_RCV_DATA: u16 = 0x0002;
    /// PortXmitPkts.
    pub const PORT_XMIT_PKTS: u16 = 0x0004;
    /// PortRcvPkts.
    pub const PORT_RCV_PKTS: u16 = 0x0008;
    /// PortUnicastXmitPkts.
    pub const PORT_UNICAST_XMIT_PKTS: u16 = 0x0010;
    /// PortUnicastRcvPkts.
    pub const PORT_UNICAST_RCV_PKTS: u16 = 0x0020;
    /// PortMulticastXmitPkts.
    pub const PORT_MULTICAST_XMIT_PKTS: u16 = 0x0040;
    /// PortMulticastRcvPkts.
    pub const PORT_MULTICAST_RCV_PKTS: u16 = 0x0080;
}

/// PortCountersExtended (AttributeID 0x001D, IBA §16.1.4.11, 72 bytes): the 64-bit data and
/// packet counters.
///
/// ```text
///  0: Reserved(8) PortSelect(8) CounterSelect(16)
///  4: CounterSelect2(32) (reserved in IBA 1.2.1)
///  8: PortXmitData(64)          16: PortRcvData(64)
/// 24: PortXmitPkts(64)          32: PortRcvPkts(64)
/// 40: PortUnicastXmitPkts(64)   48: PortUnicastRcvPkts(64)
/// 56: PortMulticastXmitPkts(64) 64: PortMulticastRcvPkts(64)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PortCountersExtended {
    /// PortSelect.
    pub port_select: u8,
    /// CounterSelect (see [`counter_select_ext`]).
    pub counter_select: u16,
    /// CounterSelect2.
    pub counter_select2: u32,
    /// PortXmitData, in 4-octet words.
    pub port_xmit_data: u64,
    /// PortRcvData, in 4-octet words.
    pub port_rcv_data: u64,
    /// PortXmitPkts.
    pub port_xmit_pkts: u64,
    /// PortRcvPkts.
    pub port_rcv_pkts: u64,
    /// PortUnicastXmitPkts.
    pub port_unicast_xmit_pkts: u64,
    /// PortUnicastRcvPkts.
    pub port_unicast_rcv_pkts: u64,
    /// PortMulticastXmitPkts.
    pub port_multicast_xmit_pkts: u64,
    /// PortMulticastRcvPkts.
    pub port_multicast_rcv_pkts: u64,
}

impl PortCountersExtended {
    /// Length in bytes.
    pub const LEN: usize = 72;
    /// The AttributeID.
    pub const ATTR_ID: AttrId = AttrId::PORT_COUNTERS_EXTENDED;

    /// Parses a PortCountersExtended.
    pub fn parse(bytes: &[u8]) -> Result<PortCountersExtended> {
        let b = bytes
            .get(..Self::LEN)
            .ok_or(Error::Truncated("PortCountersExtended"))?;
        Ok(PortCountersExtended {
            port_select: b[1],
            counter_select: read_u16(b, 2),
            counter_select2: read_u32(b, 4),
            port_xmit_data: read_u64(b, 8),
            port_rcv_data: read_u64(b, 16),
            port_xmit_pkts: read_u64(b, 24),
            port_rcv_pkts: read_u64(b, 32),
            port_unicast_xmit_pkts: read_u64(b, 40),
            port_unicast_rcv_pkts: read_u64(b, 48),
            port_multicast_xmit_pkts: read_u64(b, 56),
            port_multicast_rcv_pkts: read_u64(b, 64),
        })
    }

    /// Writes the PortCountersExtended into the first [`PortCountersExtended::LEN`] bytes of
    /// `bytes`.
    pub fn emit(&self, bytes: &mut [u8]) {
        let b = &mut bytes[..Self::LEN];
        b[0] = 0;
        b[1] = self.port_select;
        write_u16(b, 2, self.counter_select);
        write_u32(b, 4, self.counter_select2);
        write_u64(b, 8, self.port_xmit_data);
        write_u64(b, 16, self.port_rcv_data);
        write_u64(b, 24, self.port_xmit_pkts);
        write_u64(b, 32, self.port_rcv_pkts);
        write_u64(b, 40, self.port_unicast_xmit_pkts);
        write_u64(b, 48, self.port_unicast_rcv_pkts);
        write_u64(b, 56, self.port_multicast_xmit_pkts);
        write_u64(b, 64, self.port_multicast_rcv_pkts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::{Body, MAD_LEN};
    use proptest::prelude::*;
    use std::vec::Vec;

    /// A PerfGetResp(PortCounters) for port 1, built byte by byte from IBA §16.1.3.5.
    fn resp_bytes() -> [u8; 256] {
        let mut b = [0u8; 256];
        b[0] = 1;
        b[1] = 0x04; // PerfMgt
        b[2] = 0x01;
        b[3] = 0x81; // PerfGetResp
        b[8..16].copy_from_slice(&0x0000_0000_0000_abcdu64.to_be_bytes());
        b[16..18].copy_from_slice(&[0x00, 0x12]); // PortCounters
        let d = &mut b[64..108];
        d[1] = 1; // PortSelect
        d[2..4].copy_from_slice(&[0xff, 0xff]); // CounterSelect
        d[4..6].copy_from_slice(&[0x00, 0x05]); // SymbolErrorCounter 5
        d[6] = 2; // LinkErrorRecoveryCounter
        d[7] = 1; // LinkDownedCounter
        d[8..10].copy_from_slice(&[0x00, 0x03]); // PortRcvErrors
        d[10..12].copy_from_slice(&[0x00, 0x04]); // PortRcvRemotePhysicalErrors
        d[12..14].copy_from_slice(&[0x00, 0x06]); // PortRcvSwitchRelayErrors
        d[14..16].copy_from_slice(&[0x00, 0x07]); // PortXmitDiscards
        d[16] = 8; // PortXmitConstraintErrors
        d[17] = 9; // PortRcvConstraintErrors
        d[18] = 0x01; // CounterSelect2
        d[19] = 0xa3; // LocalLinkIntegrityErrors 10, ExcessiveBufferOverrunErrors 3
        d[20..22].copy_from_slice(&[0x00, 0x0b]); // QP1Dropped
        d[22..24].copy_from_slice(&[0x00, 0x0c]); // VL15Dropped
        d[24..28].copy_from_slice(&0x0102_0304u32.to_be_bytes()); // PortXmitData
        d[28..32].copy_from_slice(&0x0506_0708u32.to_be_bytes()); // PortRcvData
        d[32..36].copy_from_slice(&1000u32.to_be_bytes()); // PortXmitPkts
        d[36..40].copy_from_slice(&2000u32.to_be_bytes()); // PortRcvPkts
        d[40..44].copy_from_slice(&0xffff_ffffu32.to_be_bytes()); // PortXmitWait (stuck)
        b
    }

    fn counters() -> PortCounters {
        PortCounters {
            port_select: 1,
            counter_select: 0xffff,
            symbol_error_counter: 5,
            link_error_recovery_counter: 2,
            link_downed_counter: 1,
            port_rcv_errors: 3,
            port_rcv_remote_physical_errors: 4,
            port_rcv_switch_relay_errors: 6,
            port_xmit_discards: 7,
            port_xmit_constraint_errors: 8,
            port_rcv_constraint_errors: 9,
            counter_select2: 1,
            local_link_integrity_errors: 10,
            excessive_buffer_overrun_errors: 3,
            qp1_dropped: 11,
            vl15_dropped: 12,
            port_xmit_data: 0x0102_0304,
            port_rcv_data: 0x0506_0708,
            port_xmit_pkts: 1000,
            port_rcv_pkts: 2000,
            port_xmit_wait: u32::MAX,
        }
    }

    #[test]
    fn test_deconstruct() {
        let bytes = resp_bytes();
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.header().mgmt_class(), MgmtClass::PerfMgt);
        assert_eq!(packet.header().method(), Method::GetResp);
        assert_eq!(packet.header().attr_id(), AttrId::PORT_COUNTERS);
        let pc = PortCounters::parse(packet.data()).unwrap();
        assert_eq!(pc.port_select, 1);
        assert_eq!(pc.symbol_error_counter, 5);
        assert_eq!(pc.local_link_integrity_errors, 10);
        assert_eq!(pc.excessive_buffer_overrun_errors, 3);
        assert_eq!(pc.vl15_dropped, 12);
        assert_eq!(pc.port_xmit_data, 0x0102_0304);
        assert_eq!(pc.port_xmit_wait, u32::MAX);
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0xa5u8; 256];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        let mut h = super::super::Repr::request(
            MgmtClass::PerfMgt,
            1,
            Method::Get,
            0xabcd,
            AttrId::PORT_COUNTERS,
            0,
        );
        h.method = Method::GetResp;
        h.emit(&mut packet.header_mut());
        packet.clear_reserved();
        packet.data_mut().fill(0);
        counters().emit(packet.data_mut());
        assert_eq!(bytes, resp_bytes());
    }

    #[test]
    fn test_parse() {
        let bytes = resp_bytes();
        let repr = Repr::parse(&Packet::new_unchecked(&bytes[..])).unwrap();
        assert_eq!(repr.header.method, Method::GetResp);
        assert_eq!(repr.header.tid, 0xabcd);
        assert_eq!(repr.data.len(), DATA_LEN);
        assert_eq!(PortCounters::parse(repr.data), Ok(counters()));
    }

    #[test]
    fn test_emit() {
        let mut data = [0u8; PortCounters::LEN];
        counters().emit(&mut data);
        let req = Repr::request(Method::Get, 0xabcd, AttrId::PORT_COUNTERS, 0, &[0, 1]);
        let resp = req.response(0, &data);
        let mut bytes = [0x5au8; 256];
        resp.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, resp_bytes());
    }

    #[test]
    fn test_impossible_len() {
        let bytes = resp_bytes();
        assert_eq!(
            Packet::new_checked(&bytes[..255]).unwrap_err(),
            Error::Truncated("PMA MAD")
        );
        assert!(Repr::parse(&Packet::new_unchecked(&bytes[..64])).is_err());
        assert_eq!(
            PortCounters::parse(&[0u8; 43]),
            Err(Error::Truncated("PortCounters"))
        );
        assert_eq!(
            PortCountersExtended::parse(&[0u8; 71]),
            Err(Error::Truncated("PortCountersExtended"))
        );
    }

    #[test]
    fn port_counters_extended_layout() {
        let mut b = [0u8; 72];
        b[1] = 2;
        b[2..4].copy_from_slice(&[0x00, 0xff]);
        for i in 0..8 {
            b[8 + 8 * i..16 + 8 * i]
                .copy_from_slice(&(0x1111_1111_0000_0000u64 * (i as u64 + 1)).to_be_bytes());
        }
        let e = PortCountersExtended::parse(&b).unwrap();
        assert_eq!(e.port_select, 2);
        assert_eq!(e.counter_select, 0xff);
        assert_eq!(e.port_xmit_data, 0x1111_1111_0000_0000);
        assert_eq!(e.port_rcv_data, 0x2222_2222_0000_0000);
        assert_eq!(e.port_multicast_rcv_pkts, 0x8888_8888_0000_0000);
        let mut out = [0xa5u8; 72];
        e.emit(&mut out);
        assert_eq!(out, b);
        assert_eq!(PortCountersExtended::ATTR_ID, AttrId(0x001d));
    }

    fn arb_bytes(n: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), n)
    }

    proptest! {
        #[test]
        fn pma_roundtrip(header in super::super::tests::arb_repr(), data in arb_bytes(DATA_LEN)) {
            let repr = Repr {
                header: super::super::Repr { mgmt_class: MgmtClass::PerfMgt, ..header },
                data: &data,
            };
            let mut bytes = [0u8; MAD_LEN];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(Repr::parse(&Packet::new_unchecked(&bytes[..])), Ok(repr));
            prop_assert_eq!(Body::parse(&bytes), Ok(Body::Perf(repr)));
        }

        // Counters are generated by parsing arbitrary bytes (parse is onto the valid Reprs);
        // emit must give back the bytes with exactly the reserved byte cleared.
        #[test]
        fn port_counters_roundtrip(b in arb_bytes(44)) {
            let r = PortCounters::parse(&b).unwrap();
            let mut out = [0xa5u8; 44];
            r.emit(&mut out);
            let mut expect = [0u8; 44];
            expect.copy_from_slice(&b);
            expect[0] = 0;
            prop_assert_eq!(out, expect);
            prop_assert_eq!(PortCounters::parse(&out), Ok(r));
        }

        #[test]
        fn port_counters_extended_roundtrip(b in arb_bytes(72)) {
            let r = PortCountersExtended::parse(&b).unwrap();
            let mut out = [0xa5u8; 72];
            r.emit(&mut out);
            let mut expect = [0u8; 72];
            expect.copy_from_slice(&b);
            expect[0] = 0;
            prop_assert_eq!(out, expect);
            prop_assert_eq!(PortCountersExtended::parse(&out), Ok(r));
        }

        #[test]
        fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Repr::parse(&Packet::new_unchecked(&b[..]));
            let _ = PortCounters::parse(&b);
            let _ = PortCountersExtended::parse(&b);
        }
    }
}
