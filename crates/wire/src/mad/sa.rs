//! Subnet administration MADs (IBA vol 1 §15.2.1) and the SA records saquery, opensm and the
//! rdma_cm path resolution use.
//!
//! ```text
//!   0: common MAD header (24 bytes)
//!  24: RMPPVersion(8) RMPPType(8) RRespTime(5) RMPPFlags(3) RMPPStatus(8)
//!  28: Data1(32)   — SegmentNumber in DATA packets
//!  32: Data2(32)   — PayloadLength (first/last DATA) or NewWindowLast (ACK)
//!  36: SM_Key(64)
//!  44: AttributeOffset(16, in 8-byte units) Reserved(16)
//!  48: ComponentMask(64)
//!  56: SA data (200 bytes)
//! ```
//!
//! A GetTableResp carries many records, `AttributeOffset × 8` bytes apart; when they do not
//! fit in one MAD, RMPP (§13.6) splits the payload over several, each repeating the 56 bytes of
//! headers. [`records`] walks a (reassembled) payload.
//!
//! Offsets were checked against libibmad `fields.c`, opensm `ib_sa_mad_t` and the Linux
//! `ib_sa_mad`; the record layouts against opensm `ib_path_rec_t`, `ib_node_record_t`,
//! `ib_portinfo_record_t` and the Linux `sa_query.c` field tables.

use super::attr::{NodeDescription, NodeInfo, PortInfo};
use super::{AttrId, Method, MgmtClass};
use crate::bytes::{read_u16, read_u32, read_u64, write_u16, write_u32, write_u64};
use crate::mtu::Mtu;
use crate::{Error, Gid, Lid, PKey, QKey, Result};

/// The ClassVersion of subnet administration (2).
pub const CLASS_VERSION: u8 = 2;

/// Length of all headers before the SA data: common (24) + RMPP (12) + SA (20).
pub const HEADER_LEN: usize = 56;

/// Length of the SA data area.
pub const DATA_LEN: usize = 200;

/// SA-specific Status codes (IBA §15.2.1.1 table 185), in the class-specific bits 8–14.
pub const STATUS_NO_RESOURCES: u16 = 0x0100;
/// ERR_REQ_INVALID: the request is invalid (e.g. a bad ComponentMask).
pub const STATUS_REQ_INVALID: u16 = 0x0200;
/// ERR_NO_RECORDS: no record matches (for a Get).
pub const STATUS_NO_RECORDS: u16 = 0x0300;
/// ERR_TOO_MANY_RECORDS: more than one record matches a Get.
pub const STATUS_TOO_MANY_RECORDS: u16 = 0x0400;
/// ERR_REQ_INVALID_GID: an invalid GID in the request.
pub const STATUS_INVALID_GID: u16 = 0x0500;
/// ERR_REQ_INSUFFICIENT_COMPONENTS: the ComponentMask selects too little.
pub const STATUS_INSUFFICIENT_COMPONENTS: u16 = 0x0600;
/// ERR_REQ_DENIED: the request is not allowed.
pub const STATUS_DENIED: u16 = 0x0700;

mod field {
    pub const RMPP_VERSION: usize = 24;
    pub const RMPP_TYPE: usize = 25;
    pub const RMPP_TIME_FLAGS: usize = 26;
    pub const RMPP_STATUS: usize = 27;
    pub const RMPP_DATA1: usize = 28;
    pub const RMPP_DATA2: usize = 32;
    pub const SM_KEY: usize = 36;
    pub const ATTR_OFFSET: usize = 44;
    pub const RESERVED: usize = 46;
    pub const COMP_MASK: usize = 48;
    pub const DATA: core::ops::Range<usize> = 56..256;
}

enum_with_unknown! {
    /// RMPPType (IBA §13.6.2.1).
    #[derive(Default)]
    pub enum RmppType(u8) {
        /// 0: not an RMPP packet (RMPPFlags.Active is clear).
        #[default]
        Unused = 0,
        /// DATA.
        Data = 1,
        /// ACK.
        Ack = 2,
        /// STOP.
        Stop = 3,
        /// ABORT.
        Abort = 4,
    }
}

/// RMPPFlags bits (IBA §13.6.2.1).
pub mod rmpp_flags {
    /// Active: the MAD is part of an RMPP transfer.
    pub const ACTIVE: u8 = 0x1;
    /// First: the first DATA segment.
    pub const FIRST: u8 = 0x2;
    /// Last: the last DATA segment.
    pub const LAST: u8 = 0x4;
}

/// The RMPP header (IBA §13.6.2.1, 12 bytes at offset 24).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RmppHeader {
    /// RMPPVersion (1 when RMPP is used, 0 otherwise).
    pub version: u8,
    /// RMPPType.
    pub rmpp_type: RmppType,
    /// RRespTime (5 bits; 0x1F = no time given).
    pub resp_time: u8,
    /// RMPPFlags (3 bits, see [`rmpp_flags`]).
    pub flags: u8,
    /// RMPPStatus.
    pub status: u8,
    /// Data1: SegmentNumber for DATA and ACK.
    pub data1: u32,
    /// Data2: PayloadLength for DATA (first and last segment), NewWindowLast for ACK.
    pub data2: u32,
}

impl RmppHeader {
    /// The RMPP header of a response that fits in a single MAD: version 1, DATA, flags
    /// Active|First|Last, segment 1, PayloadLength `payload_len` (the SA header's 20 bytes
    /// plus the records, as opensm counts it).
    pub fn single_segment(payload_len: u32) -> RmppHeader {
        RmppHeader {
            version: 1,
            rmpp_type: RmppType::Data,
            resp_time: 0,
            flags: rmpp_flags::ACTIVE | rmpp_flags::FIRST | rmpp_flags::LAST,
            status: 0,
            data1: 1,
            data2: payload_len,
        }
    }

    /// The RMPP header of DATA segment `number` (counting from 1) of `of`: version 1, flags
    /// Active, plus First on segment 1 and Last on segment `of`, RRespTime 0; `payload_len` is
    /// Data2, the PayloadLength the first segment (the whole transfer) and the last (its own
    /// share) carry — 0 in a middle segment (IBA §13.6.2.3).
    pub fn data_segment(number: u32, of: u32, payload_len: u32) -> RmppHeader {
        let mut flags = rmpp_flags::ACTIVE;
        if number == 1 {
            flags |= rmpp_flags::FIRST;
        }
        if number == of {
            flags |= rmpp_flags::LAST;
        }
        RmppHeader {
            version: 1,
            rmpp_type: RmppType::Data,
            resp_time: 0,
            flags,
            status: 0,
            data1: number,
            data2: payload_len,
        }
    }

    /// Whether RMPPFlags.Active is set.
    pub fn is_active(&self) -> bool {
        self.flags & rmpp_flags::ACTIVE != 0
    }
}

/// A read/write view of an SA MAD at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length (see the crate's panic-freedom contract).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole 256-byte SA MAD.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a whole SA MAD; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < super::MAD_LEN {
            Err(Error::Truncated("SA MAD"))
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

    /// RMPPVersion.
    #[inline]
    pub fn rmpp_version(&self) -> u8 {
        self.buffer.as_ref()[field::RMPP_VERSION]
    }

    /// RMPPType.
    #[inline]
    pub fn rmpp_type(&self) -> RmppType {
        RmppType::from(self.buffer.as_ref()[field::RMPP_TYPE])
    }

    /// RRespTime (5 bits).
    #[inline]
    pub fn rmpp_resp_time(&self) -> u8 {
        self.buffer.as_ref()[field::RMPP_TIME_FLAGS] >> 3
    }

    /// RMPPFlags (3 bits).
    #[inline]
    pub fn rmpp_flags(&self) -> u8 {
        self.buffer.as_ref()[field::RMPP_TIME_FLAGS] & 0x07
    }

    /// RMPPStatus.
    #[inline]
    pub fn rmpp_status(&self) -> u8 {
        self.buffer.as_ref()[field::RMPP_STATUS]
    }

    /// RMPP Data1 (SegmentNumber).
    #[inline]
    pub fn rmpp_data1(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RMPP_DATA1)
    }

    /// RMPP Data2 (PayloadLength / NewWindowLast).
    #[inline]
    pub fn rmpp_data2(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RMPP_DATA2)
    }

    /// SM_Key.
    #[inline]
    pub fn sm_key(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::SM_KEY)
    }

    /// AttributeOffset, in 8-byte units.
    #[inline]
    pub fn attr_offset(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ATTR_OFFSET)
    }

    /// ComponentMask.
    #[inline]
    pub fn comp_mask(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::COMP_MASK)
    }

    /// The 200-byte SA data area.
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

    /// Sets RMPPVersion.
    #[inline]
    pub fn set_rmpp_version(&mut self, value: u8) {
        self.buffer.as_mut()[field::RMPP_VERSION] = value;
    }

    /// Sets RMPPType.
    #[inline]
    pub fn set_rmpp_type(&mut self, value: RmppType) {
        self.buffer.as_mut()[field::RMPP_TYPE] = value.into();
    }

    /// Sets RRespTime and RMPPFlags (they share a byte).
    #[inline]
    pub fn set_rmpp_resp_time_flags(&mut self, resp_time: u8, flags: u8) {
        self.buffer.as_mut()[field::RMPP_TIME_FLAGS] = ((resp_time & 0x1F) << 3) | (flags & 0x07);
    }

    /// Sets RMPPStatus.
    #[inline]
    pub fn set_rmpp_status(&mut self, value: u8) {
        self.buffer.as_mut()[field::RMPP_STATUS] = value;
    }

    /// Sets RMPP Data1.
    #[inline]
    pub fn set_rmpp_data1(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::RMPP_DATA1, value);
    }

    /// Sets RMPP Data2.
    #[inline]
    pub fn set_rmpp_data2(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::RMPP_DATA2, value);
    }

    /// Sets SM_Key.
    #[inline]
    pub fn set_sm_key(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::SM_KEY, value);
    }

    /// Sets AttributeOffset and clears the reserved 16 bits after it.
    #[inline]
    pub fn set_attr_offset(&mut self, value: u16) {
        let b = self.buffer.as_mut();
        write_u16(b, field::ATTR_OFFSET, value);
        write_u16(b, field::RESERVED, 0);
    }

    /// Sets ComponentMask.
    #[inline]
    pub fn set_comp_mask(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::COMP_MASK, value);
    }

    /// The SA data area, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }
}

/// The meaningful contents of an SA MAD. `data` borrows the SA data area: [`Repr::parse`]
/// gives all 200 bytes, [`Repr::emit`] writes up to 200 bytes of it and zero-pads the rest (so
/// a request can carry just its one record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// The common MAD header.
    pub header: super::Repr,
    /// The RMPP header.
    pub rmpp: RmppHeader,
    /// SM_Key.
    pub sm_key: u64,
    /// AttributeOffset, in 8-byte units (see [`attr_offset_for`]).
    pub attr_offset: u16,
    /// ComponentMask: which fields of the template record the query matches on.
    pub comp_mask: u64,
    /// The SA data.
    pub data: &'a [u8],
}

impl<'a> Repr<'a> {
    /// A query to the SA: class 0x03, version 2, no RMPP, SM_Key 0, AttributeOffset 0, the
    /// template record `data` selected by `comp_mask`. `method` is usually Get or GetTable.
    pub fn request(
        method: Method,
        tid: u64,
        attr_id: AttrId,
        comp_mask: u64,
        data: &'a [u8],
    ) -> Repr<'a> {
        Repr {
            header: super::Repr::request(
                MgmtClass::SubnAdm,
                CLASS_VERSION,
                method,
                tid,
                attr_id,
                0,
            ),
            rmpp: RmppHeader::default(),
            sm_key: 0,
            attr_offset: 0,
            comp_mask,
            data,
        }
    }

    /// A response to this request holding `data` (records `record_len` bytes long, padded to
    /// 8-byte multiples): the response method (see [`Method::response`]), `status`,
    /// AttributeOffset from `record_len`, the ComponentMask kept; a GetTableResp gets the
    /// single-segment RMPP header with the payload length of `num_records` records.
    pub fn response<'b>(
        &self,
        status: u16,
        record_len: usize,
        num_records: usize,
        data: &'b [u8],
    ) -> Repr<'b> {
        let header = self.header.response(status);
        let attr_offset = attr_offset_for(record_len);
        let rmpp = if header.method == Method::GetTableResp {
            let payload = 20 + num_records * usize::from(attr_offset) * 8;
            RmppHeader::single_segment(u32::try_from(payload).unwrap_or(u32::MAX))
        } else {
            RmppHeader::default()
        };
        Repr {
            header,
            rmpp,
            sm_key: self.sm_key,
            attr_offset,
            comp_mask: self.comp_mask,
            data,
        }
    }

    /// The records in `data`, `AttributeOffset × 8` bytes apart (see [`records`]).
    pub fn records(&self) -> impl Iterator<Item = &'a [u8]> {
        records(self.data, self.attr_offset)
    }

    /// Parses an SA MAD.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Repr<'a>> {
        packet.check_len()?;
        let header = super::Repr::parse(&packet.header())?;
        let buffer: &'a T = packet.buffer;
        let buffer: &'a [u8] = buffer.as_ref();
        Ok(Repr {
            header,
            rmpp: RmppHeader {
                version: packet.rmpp_version(),
                rmpp_type: packet.rmpp_type(),
                resp_time: packet.rmpp_resp_time(),
                flags: packet.rmpp_flags(),
                status: packet.rmpp_status(),
                data1: packet.rmpp_data1(),
                data2: packet.rmpp_data2(),
            },
            sm_key: packet.sm_key(),
            attr_offset: packet.attr_offset(),
            comp_mask: packet.comp_mask(),
            data: buffer.get(field::DATA).unwrap_or_default(),
        })
    }

    /// The number of bytes `emit` writes: [`super::MAD_LEN`].
    pub const fn buffer_len(&self) -> usize {
        super::MAD_LEN
    }

    /// Writes the SA MAD into the first 256 bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        self.header.emit(&mut packet.header_mut());
        packet.set_rmpp_version(self.rmpp.version);
        packet.set_rmpp_type(self.rmpp.rmpp_type);
        packet.set_rmpp_resp_time_flags(self.rmpp.resp_time, self.rmpp.flags);
        packet.set_rmpp_status(self.rmpp.status);
        packet.set_rmpp_data1(self.rmpp.data1);
        packet.set_rmpp_data2(self.rmpp.data2);
        packet.set_sm_key(self.sm_key);
        packet.set_attr_offset(self.attr_offset);
        packet.set_comp_mask(self.comp_mask);
        super::copy_padded(packet.data_mut(), self.data);
    }
}

/// The AttributeOffset (in 8-byte units) of records `record_len` bytes long: the length
/// rounded up to a multiple of 8, as opensm pads NodeRecord (108 → 112) and PortInfoRecord
/// (68 → 72).
pub const fn attr_offset_for(record_len: usize) -> u16 {
    let units = record_len.div_ceil(8);
    if units > u16::MAX as usize {
        u16::MAX
    } else {
        units as u16
    }
}

/// The records of a (reassembled) SA payload, `attr_offset × 8` bytes apart; a trailing piece
/// shorter than that is not a record. Empty if `attr_offset` is 0.
pub fn records(payload: &[u8], attr_offset: u16) -> impl Iterator<Item = &[u8]> {
    let stride = usize::from(attr_offset) * 8;
    let whole = if stride == 0 { &payload[..0] } else { payload };
    whole.chunks_exact(stride.max(1))
}

fn read_gid(b: &[u8], at: usize) -> Gid {
    let mut g = [0u8; 16];
    g.copy_from_slice(&b[at..at + 16]);
    Gid(g)
}

enum_with_unknown! {
    /// The selector of PathRecord MTU, Rate and PacketLifeTime (IBA §15.2.5.16).
    pub enum Selector(u8) {
        /// Greater than the value.
        GreaterThan = 0,
        /// Less than the value.
        LessThan = 1,
        /// Exactly the value.
        Exactly = 2,
        /// The largest available.
        Largest = 3,
    }
}

/// PathRecord (AttributeID 0x0035, IBA §15.2.5.16, 64 bytes).
///
/// ```text
///  0: ServiceID(64)
///  8: DGID(128)
/// 24: SGID(128)
/// 40: DLID(16) SLID(16)
/// 44: RawTraffic(1) Resv(3) FlowLabel(20) HopLimit(8)
/// 48: TClass(8) Reversible(1) NumbPath(7) P_Key(16)
/// 52: QosClass(12) SL(4) MtuSelector(2) MTU(6) RateSelector(2) Rate(6)
/// 56: PacketLifeTimeSelector(2) PacketLifeTime(6) Preference(8) Resv(48)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathRecord {
    /// ServiceID.
    pub service_id: u64,
    /// DGID.
    pub dgid: Gid,
    /// SGID.
    pub sgid: Gid,
    /// DLID.
    pub dlid: Lid,
    /// SLID.
    pub slid: Lid,
    /// RawTraffic: the path is for raw packets.
    pub raw_traffic: bool,
    /// FlowLabel (20 bits).
    pub flow_label: u32,
    /// HopLimit.
    pub hop_limit: u8,
    /// TClass.
    pub tclass: u8,
    /// Reversible.
    pub reversible: bool,
    /// NumbPath (7 bits): in a query, the most paths wanted.
    pub numb_path: u8,
    /// P_Key.
    pub pkey: PKey,
    /// QosClass (12 bits).
    pub qos_class: u16,
    /// SL (4 bits).
    pub sl: u8,
    /// MtuSelector (2 bits).
    pub mtu_selector: Selector,
    /// MTU (6 bits).
    pub mtu: Mtu,
    /// RateSelector (2 bits).
    pub rate_selector: Selector,
    /// Rate (6 bits; 2 = 2.5 Gb/s, 3 = 10, 7 = 40, ...).
    pub rate: u8,
    /// PacketLifeTimeSelector (2 bits).
    pub packet_life_time_selector: Selector,
    /// PacketLifeTime (6 bits).
    pub packet_life_time: u8,
    /// Preference.
    pub preference: u8,
}

impl PathRecord {
    /// Length in bytes.
    pub const LEN: usize = 64;

    /// Parses a PathRecord.
    pub fn parse(bytes: &[u8]) -> Result<PathRecord> {
        let b = bytes
            .get(..Self::LEN)
            .ok_or(Error::Truncated("PathRecord"))?;
        let hop_flow_raw = read_u32(b, 44);
        let qos_sl = read_u16(b, 52);
        Ok(PathRecord {
            service_id: read_u64(b, 0),
            dgid: read_gid(b, 8),
            sgid: read_gid(b, 24),
            dlid: Lid(read_u16(b, 40)),
            slid: Lid(read_u16(b, 42)),
            raw_traffic: hop_flow_raw & 0x8000_0000 != 0,
            flow_label: (hop_flow_raw >> 8) & 0x000F_FFFF,
            hop_limit: (hop_flow_raw & 0xFF) as u8,
            tclass: b[48],
            reversible: b[49] & 0x80 != 0,
            numb_path: b[49] & 0x7F,
            pkey: PKey(read_u16(b, 50)),
            qos_class: qos_sl >> 4,
            sl: (qos_sl & 0x0F) as u8,
            mtu_selector: Selector::from(b[54] >> 6),
            mtu: Mtu::from(b[54] & 0x3F),
            rate_selector: Selector::from(b[55] >> 6),
            rate: b[55] & 0x3F,
            packet_life_time_selector: Selector::from(b[56] >> 6),
            packet_life_time: b[56] & 0x3F,
            preference: b[57],
        })
    }

    /// Writes the PathRecord into the first [`PathRecord::LEN`] bytes of `bytes`.
    pub fn emit(&self, bytes: &mut [u8]) {
        let b = &mut bytes[..Self::LEN];
        let sel = |s: Selector, v: u8| ((u8::from(s) & 0x03) << 6) | (v & 0x3F);
        write_u64(b, 0, self.service_id);
        b[8..24].copy_from_slice(&self.dgid.0);
        b[24..40].copy_from_slice(&self.sgid.0);
        write_u16(b, 40, self.dlid.0);
        write_u16(b, 42, self.slid.0);
        write_u32(
            b,
            44,
            (u32::from(self.raw_traffic) << 31)
                | ((self.flow_label & 0x000F_FFFF) << 8)
                | u32::from(self.hop_limit),
        );
        b[48] = self.tclass;
        b[49] = (u8::from(self.reversible) << 7) | (self.numb_path & 0x7F);
        write_u16(b, 50, self.pkey.0);
        write_u16(
            b,
            52,
            ((self.qos_class & 0x0FFF) << 4) | u16::from(self.sl & 0x0F),
        );
        b[54] = sel(self.mtu_selector, self.mtu.into());
        b[55] = sel(self.rate_selector, self.rate);
        b[56] = sel(self.packet_life_time_selector, self.packet_life_time);
        b[57] = self.preference;
        b[58..64].fill(0);
    }
}

/// PathRecord ComponentMask bits (IBA §15.2.5.16; opensm/libibmad `IB_PR_COMPMASK_*`).
pub mod path_comp {
    /// ServiceID (both halves; the spec's first two component bits).
    pub const SERVICE_ID: u64 = 0x3;
    /// DGID.
    pub const DGID: u64 = 1 << 2;
    /// SGID.
    pub const SGID: u64 = 1 << 3;
    /// DLID.
    pub const DLID: u64 = 1 << 4;
    /// SLID.
    pub const SLID: u64 = 1 << 5;
    /// RawTraffic.
    pub const RAW_TRAFFIC: u64 = 1 << 6;
    /// FlowLabel.
    pub const FLOW_LABEL: u64 = 1 << 8;
    /// HopLimit.
    pub const HOP_LIMIT: u64 = 1 << 9;
    /// TClass.
    pub const TCLASS: u64 = 1 << 10;
    /// Reversible.
    pub const REVERSIBLE: u64 = 1 << 11;
    /// NumbPath.
    pub const NUMB_PATH: u64 = 1 << 12;
    /// P_Key.
    pub const P_KEY: u64 = 1 << 13;
    /// QosClass.
    pub const QOS_CLASS: u64 = 1 << 14;
    /// SL.
    pub const SL: u64 = 1 << 15;
    /// MtuSelector.
    pub const MTU_SELECTOR: u64 = 1 << 16;
    /// MTU.
    pub const MTU: u64 = 1 << 17;
    /// RateSelector.
    pub const RATE_SELECTOR: u64 = 1 << 18;
    /// Rate.
    pub const RATE: u64 = 1 << 19;
    /// PacketLifeTimeSelector.
    pub const PACKET_LIFE_TIME_SELECTOR: u64 = 1 << 20;
    /// PacketLifeTime.
    pub const PACKET_LIFE_TIME: u64 = 1 << 21;
    /// Preference.
    pub const PREFERENCE: u64 = 1 << 22;
}

/// NodeRecord (AttributeID 0x0011, IBA §15.2.5.2, 108 bytes; 112 with the padding a table
/// uses, see [`attr_offset_for`]).
///
/// ```text
///  0: LID(16) Reserved(16)
///  4: NodeInfo (40 bytes)
/// 44: NodeDescription (64 bytes)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeRecord {
    /// LID: the node's (port 0 for a switch, the port's for a CA) base LID.
    pub lid: Lid,
    /// NodeInfo.
    pub node_info: NodeInfo,
    /// NodeDescription.
    pub node_description: NodeDescription,
}

impl NodeRecord {
    /// Length in bytes.
    pub const LEN: usize = 108;

    /// Parses a NodeRecord.
    pub fn parse(bytes: &[u8]) -> Result<NodeRecord> {
        let b = bytes
            .get(..Self::LEN)
            .ok_or(Error::Truncated("NodeRecord"))?;
        Ok(NodeRecord {
            lid: Lid(read_u16(b, 0)),
            node_info: NodeInfo::parse(&b[4..44])?,
            node_description: NodeDescription::parse(&b[44..108])?,
        })
    }

    /// Writes the NodeRecord into the first [`NodeRecord::LEN`] bytes of `bytes`.
    pub fn emit(&self, bytes: &mut [u8]) {
        let b = &mut bytes[..Self::LEN];
        write_u16(b, 0, self.lid.0);
        write_u16(b, 2, 0);
        self.node_info.emit(&mut b[4..44]);
        self.node_description.emit(&mut b[44..108]);
    }
}

/// NodeRecord ComponentMask bits (IBA §15.2.5.2; opensm `IB_NR_COMPMASK_*`).
pub mod node_comp {
    /// LID.
    pub const LID: u64 = 1 << 0;
    /// NodeInfo.BaseVersion.
    pub const BASE_VERSION: u64 = 1 << 2;
    /// NodeInfo.ClassVersion.
    pub const CLASS_VERSION: u64 = 1 << 3;
    /// NodeInfo.NodeType.
    pub const NODE_TYPE: u64 = 1 << 4;
    /// NodeInfo.NumPorts.
    pub const NUM_PORTS: u64 = 1 << 5;
    /// NodeInfo.SystemImageGUID.
    pub const SYSTEM_IMAGE_GUID: u64 = 1 << 6;
    /// NodeInfo.NodeGUID.
    pub const NODE_GUID: u64 = 1 << 7;
    /// NodeInfo.PortGUID.
    pub const PORT_GUID: u64 = 1 << 8;
    /// NodeInfo.PartitionCap.
    pub const PARTITION_CAP: u64 = 1 << 9;
    /// NodeInfo.DeviceID.
    pub const DEVICE_ID: u64 = 1 << 10;
    /// NodeInfo.Revision.
    pub const REVISION: u64 = 1 << 11;
    /// NodeInfo.LocalPortNum.
    pub const LOCAL_PORT_NUM: u64 = 1 << 12;
    /// NodeInfo.VendorID.
    pub const VENDOR_ID: u64 = 1 << 13;
    /// NodeDescription.
    pub const NODE_DESCRIPTION: u64 = 1 << 14;
}

/// PortInfoRecord (AttributeID 0x0012, IBA §15.2.5.3, 68 bytes; 72 with table padding).
///
/// ```text
///  0: EndportLID(16) PortNum(8) Options(8)
///  4: PortInfo (64 bytes)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortInfoRecord {
    /// EndportLID: the LID of the CA port, or of the switch's port 0.
    pub endport_lid: Lid,
    /// PortNum.
    pub port_num: u8,
    /// Options (IBA 1.3: bit 0 asks for the switch ports' records too).
    pub options: u8,
    /// PortInfo.
    pub port_info: PortInfo,
}

impl PortInfoRecord {
    /// Length in bytes.
    pub const LEN: usize = 68;

    /// Parses a PortInfoRecord.
    pub fn parse(bytes: &[u8]) -> Result<PortInfoRecord> {
        let b = bytes
            .get(..Self::LEN)
            .ok_or(Error::Truncated("PortInfoRecord"))?;
        Ok(PortInfoRecord {
            endport_lid: Lid(read_u16(b, 0)),
            port_num: b[2],
            options: b[3],
            port_info: PortInfo::parse(&b[4..68])?,
        })
    }

    /// Writes the PortInfoRecord into the first [`PortInfoRecord::LEN`] bytes of `bytes`.
    pub fn emit(&self, bytes: &mut [u8]) {
        let b = &mut bytes[..Self::LEN];
        write_u16(b, 0, self.endport_lid.0);
        b[2] = self.port_num;
        b[3] = self.options;
        self.port_info.emit(&mut b[4..68]);
    }
}

/// PortInfoRecord ComponentMask bits (IBA §15.2.5.3; opensm `IB_PIR_COMPMASK_*`): one per
/// record field, in order, reserved fields included.
pub mod port_info_comp {
    /// EndportLID.
    pub const ENDPORT_LID: u64 = 1 << 0;
    /// PortNum.
    pub const PORT_NUM: u64 = 1 << 1;
    /// Options.
    pub const OPTIONS: u64 = 1 << 2;
    /// M_Key.
    pub const M_KEY: u64 = 1 << 3;
    /// GidPrefix.
    pub const GID_PREFIX: u64 = 1 << 4;
    /// LID.
    pub const LID: u64 = 1 << 5;
    /// MasterSMLID.
    pub const MASTER_SM_LID: u64 = 1 << 6;
    /// CapabilityMask.
    pub const CAPABILITY_MASK: u64 = 1 << 7;
    /// DiagCode.
    pub const DIAG_CODE: u64 = 1 << 8;
    /// M_KeyLeasePeriod.
    pub const M_KEY_LEASE_PERIOD: u64 = 1 << 9;
    /// LocalPortNum.
    pub const LOCAL_PORT_NUM: u64 = 1 << 10;
    /// LinkWidthEnabled.
    pub const LINK_WIDTH_ENABLED: u64 = 1 << 11;
    /// LinkWidthSupported.
    pub const LINK_WIDTH_SUPPORTED: u64 = 1 << 12;
    /// LinkWidthActive.
    pub const LINK_WIDTH_ACTIVE: u64 = 1 << 13;
    /// LinkSpeedSupported.
    pub const LINK_SPEED_SUPPORTED: u64 = 1 << 14;
    /// PortState.
    pub const PORT_STATE: u64 = 1 << 15;
    /// PortPhysicalState.
    pub const PORT_PHYSICAL_STATE: u64 = 1 << 16;
    /// LinkDownDefaultState.
    pub const LINK_DOWN_DEFAULT_STATE: u64 = 1 << 17;
    /// M_KeyProtectBits.
    pub const M_KEY_PROTECT_BITS: u64 = 1 << 18;
    /// LMC.
    pub const LMC: u64 = 1 << 20;
    /// LinkSpeedActive.
    pub const LINK_SPEED_ACTIVE: u64 = 1 << 21;
    /// LinkSpeedEnabled.
    pub const LINK_SPEED_ENABLED: u64 = 1 << 22;
    /// NeighborMTU.
    pub const NEIGHBOR_MTU: u64 = 1 << 23;
    /// MasterSMSL.
    pub const MASTER_SM_SL: u64 = 1 << 24;
    /// VLCap.
    pub const VL_CAP: u64 = 1 << 25;
    /// InitType.
    pub const INIT_TYPE: u64 = 1 << 26;
    /// VLHighLimit.
    pub const VL_HIGH_LIMIT: u64 = 1 << 27;
    /// VLArbitrationHighCap.
    pub const VL_ARBITRATION_HIGH_CAP: u64 = 1 << 28;
    /// VLArbitrationLowCap.
    pub const VL_ARBITRATION_LOW_CAP: u64 = 1 << 29;
    /// InitTypeReply.
    pub const INIT_TYPE_REPLY: u64 = 1 << 30;
    /// MTUCap.
    pub const MTU_CAP: u64 = 1 << 31;
    /// VLStallCount.
    pub const VL_STALL_COUNT: u64 = 1 << 32;
    /// HOQLife.
    pub const HOQ_LIFE: u64 = 1 << 33;
    /// OperationalVLs.
    pub const OPERATIONAL_VLS: u64 = 1 << 34;
    /// PartitionEnforcementInbound.
    pub const PARTITION_ENFORCEMENT_INBOUND: u64 = 1 << 35;
    /// PartitionEnforcementOutbound.
    pub const PARTITION_ENFORCEMENT_OUTBOUND: u64 = 1 << 36;
    /// FilterRawInbound.
    pub const FILTER_RAW_INBOUND: u64 = 1 << 37;
    /// FilterRawOutbound.
    pub const FILTER_RAW_OUTBOUND: u64 = 1 << 38;
    /// M_KeyViolations.
    pub const M_KEY_VIOLATIONS: u64 = 1 << 39;
    /// P_KeyViolations.
    pub const P_KEY_VIOLATIONS: u64 = 1 << 40;
    /// Q_KeyViolations.
    pub const Q_KEY_VIOLATIONS: u64 = 1 << 41;
    /// GUIDCap.
    pub const GUID_CAP: u64 = 1 << 42;
    /// ClientReregister.
    pub const CLIENT_REREGISTER: u64 = 1 << 43;
    /// SubnetTimeOut.
    pub const SUBNET_TIMEOUT: u64 = 1 << 45;
    /// RespTimeValue.
    pub const RESP_TIME_VALUE: u64 = 1 << 47;
    /// LocalPhyErrors.
    pub const LOCAL_PHY_ERRORS: u64 = 1 << 48;
    /// OverrunErrors.
    pub const OVERRUN_ERRORS: u64 = 1 << 49;
    /// MaxCreditHint.
    pub const MAX_CREDIT_HINT: u64 = 1 << 50;
    /// LinkRoundTripLatency.
    pub const LINK_ROUND_TRIP_LATENCY: u64 = 1 << 52;
    /// CapabilityMask2.
    pub const CAPABILITY_MASK2: u64 = 1 << 53;
    /// LinkSpeedExtActive.
    pub const LINK_SPEED_EXT_ACTIVE: u64 = 1 << 54;
    /// LinkSpeedExtSupported.
    pub const LINK_SPEED_EXT_SUPPORTED: u64 = 1 << 55;
    /// LinkSpeedExtEnabled.
    pub const LINK_SPEED_EXT_ENABLED: u64 = 1 << 57;
}

/// MCMemberRecord (AttributeID 0x0038, IBA §15.2.5.17, 52 bytes; 56 with the padding a table
/// uses, see [`attr_offset_for`]): one port's membership of a multicast group, or, in a
/// response, the group's parameters as the SA set them.
///
/// ```text
///  0: MGID(128)
/// 16: PortGID(128)
/// 32: Q_Key(32)
/// 36: MLID(16) MTUSelector(2) MTU(6) TClass(8)
/// 40: P_Key(16) RateSelector(2) Rate(6) PacketLifeTimeSelector(2) PacketLifeTime(6)
/// 44: SL(4) FlowLabel(20) HopLimit(8)
/// 48: Scope(4) JoinState(4) ProxyJoin(1) Reserved(23)
/// ```
///
/// A port joins with SubnAdmSet, leaves with SubnAdmDelete (§15.4.2.3); the SA's answer
/// carries the whole record, MLID included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct McMemberRecord {
    /// MGID: the multicast group's GID.
    pub mgid: Gid,
    /// PortGID: the GID of the port joining or leaving.
    pub port_gid: Gid,
    /// Q_Key of the group.
    pub q_key: QKey,
    /// MLID: the multicast LID the SA assigned to the group.
    pub mlid: Lid,
    /// MTUSelector (2 bits).
    pub mtu_selector: Selector,
    /// MTU (6 bits).
    pub mtu: Mtu,
    /// TClass.
    pub tclass: u8,
    /// P_Key of the group.
    pub pkey: PKey,
    /// RateSelector (2 bits).
    pub rate_selector: Selector,
    /// Rate (6 bits; 2 = 2.5 Gb/s, 3 = 10, 7 = 40, ...).
    pub rate: u8,
    /// PacketLifeTimeSelector (2 bits).
    pub packet_life_time_selector: Selector,
    /// PacketLifeTime (6 bits).
    pub packet_life_time: u8,
    /// SL (4 bits).
    pub sl: u8,
    /// FlowLabel (20 bits).
    pub flow_label: u32,
    /// HopLimit.
    pub hop_limit: u8,
    /// Scope (4 bits): the MGID's scope (2 = link-local).
    pub scope: u8,
    /// JoinState (4 bits, see [`join_state`]).
    pub join_state: u8,
    /// ProxyJoin: the join is made on behalf of another port.
    pub proxy_join: bool,
}

impl Default for McMemberRecord {
    fn default() -> Self {
        McMemberRecord {
            mgid: Gid::default(),
            port_gid: Gid::default(),
            q_key: QKey(0),
            mlid: Lid(0),
            mtu_selector: Selector::GreaterThan,
            mtu: Mtu::from(0),
            tclass: 0,
            pkey: PKey(0),
            rate_selector: Selector::GreaterThan,
            rate: 0,
            packet_life_time_selector: Selector::GreaterThan,
            packet_life_time: 0,
            sl: 0,
            flow_label: 0,
            hop_limit: 0,
            scope: 0,
            join_state: 0,
            proxy_join: false,
        }
    }
}

impl McMemberRecord {
    /// Length in bytes.
    pub const LEN: usize = 52;

    /// Parses an MCMemberRecord.
    pub fn parse(bytes: &[u8]) -> Result<McMemberRecord> {
        let b = bytes
            .get(..Self::LEN)
            .ok_or(Error::Truncated("MCMemberRecord"))?;
        let sl_flow_hop = read_u32(b, 44);
        Ok(McMemberRecord {
            mgid: read_gid(b, 0),
            port_gid: read_gid(b, 16),
            q_key: QKey(read_u32(b, 32)),
            mlid: Lid(read_u16(b, 36)),
            mtu_selector: Selector::from(b[38] >> 6),
            mtu: Mtu::from(b[38] & 0x3F),
            tclass: b[39],
            pkey: PKey(read_u16(b, 40)),
            rate_selector: Selector::from(b[42] >> 6),
            rate: b[42] & 0x3F,
            packet_life_time_selector: Selector::from(b[43] >> 6),
            packet_life_time: b[43] & 0x3F,
            sl: (sl_flow_hop >> 28) as u8,
            flow_label: (sl_flow_hop >> 8) & 0x000F_FFFF,
            hop_limit: (sl_flow_hop & 0xFF) as u8,
            scope: b[48] >> 4,
            join_state: b[48] & 0x0F,
            proxy_join: b[49] & 0x80 != 0,
        })
    }

    /// Writes the MCMemberRecord into the first [`McMemberRecord::LEN`] bytes of `bytes`.
    pub fn emit(&self, bytes: &mut [u8]) {
        let b = &mut bytes[..Self::LEN];
        let sel = |s: Selector, v: u8| ((u8::from(s) & 0x03) << 6) | (v & 0x3F);
        b[0..16].copy_from_slice(&self.mgid.0);
        b[16..32].copy_from_slice(&self.port_gid.0);
        write_u32(b, 32, self.q_key.0);
        write_u16(b, 36, self.mlid.0);
        b[38] = sel(self.mtu_selector, self.mtu.into());
        b[39] = self.tclass;
        write_u16(b, 40, self.pkey.0);
        b[42] = sel(self.rate_selector, self.rate);
        b[43] = sel(self.packet_life_time_selector, self.packet_life_time);
        write_u32(
            b,
            44,
            (u32::from(self.sl & 0x0F) << 28)
                | ((self.flow_label & 0x000F_FFFF) << 8)
                | u32::from(self.hop_limit),
        );
        b[48] = ((self.scope & 0x0F) << 4) | (self.join_state & 0x0F);
        b[49] = u8::from(self.proxy_join) << 7;
        b[50] = 0;
        b[51] = 0;
    }
}

/// MCMemberRecord.JoinState bits (IBA §15.2.5.17 table 216).
pub mod join_state {
    /// FullMember: sends and receives.
    pub const FULL_MEMBER: u8 = 0x1;
    /// NonMember: receives only, and does not keep the group alive.
    pub const NON_MEMBER: u8 = 0x2;
    /// SendOnlyNonMember: sends only.
    pub const SEND_ONLY_NON_MEMBER: u8 = 0x4;
    /// SendOnlyFullMember (IBA 1.3): sends only, keeps the group alive.
    pub const SEND_ONLY_FULL_MEMBER: u8 = 0x8;
}

/// The MGID of the IPoIB IPv4 broadcast group of partition `pkey` (RFC 4391 §4):
/// `ff12:401b:PPPP:0000:0000:0000:ffff:ffff`, link-local scope, the P_Key with the full-member
/// bit set. For the default partition: `ff12:401b:ffff:0000:0000:0000:ffff:ffff`.
pub fn ipoib_broadcast_mgid(pkey: PKey) -> Gid {
    let p = (pkey.0 | 0x8000).to_be_bytes();
    Gid([
        0xff, 0x12, 0x40, 0x1b, p[0], p[1], 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
    ])
}

/// MCMemberRecord ComponentMask bits (IBA §15.2.5.17; opensm `IB_MCR_COMPMASK_*`).
pub mod mcmember_comp {
    /// MGID.
    pub const MGID: u64 = 1 << 0;
    /// PortGID.
    pub const PORT_GID: u64 = 1 << 1;
    /// Q_Key.
    pub const Q_KEY: u64 = 1 << 2;
    /// MLID.
    pub const MLID: u64 = 1 << 3;
    /// MTUSelector.
    pub const MTU_SELECTOR: u64 = 1 << 4;
    /// MTU.
    pub const MTU: u64 = 1 << 5;
    /// TClass.
    pub const TCLASS: u64 = 1 << 6;
    /// P_Key.
    pub const P_KEY: u64 = 1 << 7;
    /// RateSelector.
    pub const RATE_SELECTOR: u64 = 1 << 8;
    /// Rate.
    pub const RATE: u64 = 1 << 9;
    /// PacketLifeTimeSelector.
    pub const PACKET_LIFE_TIME_SELECTOR: u64 = 1 << 10;
    /// PacketLifeTime.
    pub const PACKET_LIFE_TIME: u64 = 1 << 11;
    /// SL.
    pub const SL: u64 = 1 << 12;
    /// FlowLabel.
    pub const FLOW_LABEL: u64 = 1 << 13;
    /// HopLimit.
    pub const HOP_LIMIT: u64 = 1 << 14;
    /// Scope.
    pub const SCOPE: u64 = 1 << 15;
    /// JoinState.
    pub const JOIN_STATE: u64 = 1 << 16;
    /// ProxyJoin.
    pub const PROXY_JOIN: u64 = 1 << 17;
    /// What every join and leave must carry (opensm's `JOIN_MC_COMP_MASK`): MGID, PortGID,
    /// JoinState.
    pub const JOIN: u64 = MGID | PORT_GID | JOIN_STATE;
    /// What a join must carry to create a group that does not exist yet (IBA §15.4.2.3,
    /// o15-0.2.x; opensm's `REQUIRED_MC_CREATE_COMP`): MGID, PortGID, JoinState, Q_Key, P_Key,
    /// SL, FlowLabel, TClass.
    pub const CREATE: u64 = MGID | PORT_GID | JOIN_STATE | Q_KEY | P_KEY | SL | FLOW_LABEL | TCLASS;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::attr::{NodeType, PortPhysicalState, PortState};
    use crate::mad::{Body, MAD_LEN};
    use crate::Guid;
    use proptest::prelude::*;
    use std::string::ToString;
    use std::vec::Vec;

    /// saquery's PathRecord query (SubnAdmGetTable, DGID|SGID|NumbPath) as it leaves the
    /// requester, built byte by byte from the offsets of IBA §15.2.1.1 and §15.2.5.16.
    fn query_bytes() -> [u8; 256] {
        let mut b = [0u8; 256];
        b[0] = 1;
        b[1] = 0x03; // SubnAdm
        b[2] = 0x02; // ClassVersion 2
        b[3] = 0x12; // SubnAdmGetTable
        b[8..16].copy_from_slice(&0x0000_0001_0000_0007u64.to_be_bytes()); // TID
        b[16..18].copy_from_slice(&[0x00, 0x35]); // PathRecord
        b[48..56].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0x10, 0x0c]); // DGID|SGID|NumbPath
                                                                    // PathRecord template in the data area (offset 56).
        let r = &mut b[56..120];
        r[8..16].copy_from_slice(&0xfe80_0000_0000_0000u64.to_be_bytes()); // DGID prefix
        r[16..24].copy_from_slice(&0x0002_c903_0000_0002u64.to_be_bytes()); // DGID guid
        r[24..32].copy_from_slice(&0xfe80_0000_0000_0000u64.to_be_bytes()); // SGID prefix
        r[32..40].copy_from_slice(&0x0002_c903_0000_0001u64.to_be_bytes()); // SGID guid
        r[49] = 0x01; // NumbPath 1
        b
    }

    fn dgid() -> Gid {
        Gid::from_prefix_guid(0xfe80_0000_0000_0000, Guid(0x0002_c903_0000_0002))
    }

    fn sgid() -> Gid {
        Gid::from_prefix_guid(0xfe80_0000_0000_0000, Guid(0x0002_c903_0000_0001))
    }

    fn template() -> PathRecord {
        let mut bytes = [0u8; 64];
        bytes[49] = 1;
        let mut p = PathRecord::parse(&bytes).unwrap();
        p.dgid = dgid();
        p.sgid = sgid();
        p
    }

    #[test]
    fn test_deconstruct() {
        let bytes = query_bytes();
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.header().mgmt_class(), MgmtClass::SubnAdm);
        assert_eq!(packet.header().class_version(), 2);
        assert_eq!(packet.header().method(), Method::GetTable);
        assert_eq!(packet.header().attr_id(), AttrId::PATH_RECORD);
        assert_eq!(packet.rmpp_version(), 0);
        assert_eq!(packet.rmpp_type(), RmppType::Unused);
        assert_eq!(packet.sm_key(), 0);
        assert_eq!(packet.attr_offset(), 0);
        assert_eq!(
            packet.comp_mask(),
            path_comp::DGID | path_comp::SGID | path_comp::NUMB_PATH
        );
        let pr = PathRecord::parse(packet.data()).unwrap();
        assert_eq!(pr.dgid, dgid());
        assert_eq!(pr.sgid, sgid());
        assert_eq!(pr.numb_path, 1);
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0xa5u8; 256];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        super::super::Repr::request(
            MgmtClass::SubnAdm,
            2,
            Method::GetTable,
            0x0000_0001_0000_0007,
            AttrId::PATH_RECORD,
            0,
        )
        .emit(&mut packet.header_mut());
        packet.set_rmpp_version(0);
        packet.set_rmpp_type(RmppType::Unused);
        packet.set_rmpp_resp_time_flags(0, 0);
        packet.set_rmpp_status(0);
        packet.set_rmpp_data1(0);
        packet.set_rmpp_data2(0);
        packet.set_sm_key(0);
        packet.set_attr_offset(0);
        packet.set_comp_mask(0x100c);
        packet.data_mut().fill(0);
        template().emit(packet.data_mut());
        assert_eq!(bytes, query_bytes());
    }

    #[test]
    fn test_parse() {
        let bytes = query_bytes();
        let repr = Repr::parse(&Packet::new_unchecked(&bytes[..])).unwrap();
        let mut data = [0u8; DATA_LEN];
        template().emit(&mut data);
        let expect = Repr::request(
            Method::GetTable,
            0x0000_0001_0000_0007,
            AttrId::PATH_RECORD,
            0x100c,
            &data,
        );
        assert_eq!(repr, expect);
    }

    #[test]
    fn test_emit() {
        let mut record = [0u8; PathRecord::LEN];
        template().emit(&mut record);
        // The request carries just the record; emit pads the rest of the data area.
        let repr = Repr::request(
            Method::GetTable,
            0x0000_0001_0000_0007,
            AttrId::PATH_RECORD,
            path_comp::DGID | path_comp::SGID | path_comp::NUMB_PATH,
            &record,
        );
        let mut bytes = [0x5au8; 256];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, query_bytes());
    }

    #[test]
    fn test_impossible_len() {
        let bytes = query_bytes();
        assert_eq!(
            Packet::new_checked(&bytes[..255]).unwrap_err(),
            Error::Truncated("SA MAD")
        );
        assert!(Repr::parse(&Packet::new_unchecked(&bytes[..100])).is_err());
        assert_eq!(
            PathRecord::parse(&[0u8; 63]),
            Err(Error::Truncated("PathRecord"))
        );
        assert_eq!(
            NodeRecord::parse(&[0u8; 107]),
            Err(Error::Truncated("NodeRecord"))
        );
        assert_eq!(
            PortInfoRecord::parse(&[0u8; 67]),
            Err(Error::Truncated("PortInfoRecord"))
        );
    }

    #[test]
    fn rmpp_header_bits() {
        let mut bytes = [0u8; 256];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_rmpp_resp_time_flags(0x1f, rmpp_flags::ACTIVE | rmpp_flags::LAST);
        assert_eq!(packet.buffer[26], 0xfd);
        assert_eq!(packet.rmpp_resp_time(), 0x1f);
        assert_eq!(packet.rmpp_flags(), 0x5);
        packet.set_rmpp_data1(1);
        packet.set_rmpp_data2(0x0102_0304);
        assert_eq!(&packet.buffer[28..36], &[0, 0, 0, 1, 1, 2, 3, 4]);
    }

    /// A PathRecord response as opensm returns it for a 4X QDR path on the default partition.
    fn path_record_bytes() -> [u8; 64] {
        let mut r = [0u8; 64];
        r[0..8].copy_from_slice(&0x1000_0000_0000_0001u64.to_be_bytes()); // ServiceID
        r[8..24].copy_from_slice(&dgid().0);
        r[24..40].copy_from_slice(&sgid().0);
        r[40..42].copy_from_slice(&[0x00, 0x02]); // DLID 2
        r[42..44].copy_from_slice(&[0x00, 0x01]); // SLID 1
        r[44..48].copy_from_slice(&[0x80, 0x12, 0x34, 0x40]); // Raw, FlowLabel 0x01234, HL 64
        r[48] = 0x20; // TClass
        r[49] = 0x81; // Reversible, NumbPath 1
        r[50..52].copy_from_slice(&[0xff, 0xff]); // P_Key
        r[52..54].copy_from_slice(&[0x12, 0x35]); // QosClass 0x123, SL 5
        r[54] = 0x85; // MtuSelector Exactly, MTU 4096
        r[55] = 0x87; // RateSelector Exactly, Rate 40 Gb/s
        r[56] = 0x92; // PacketLifeTimeSelector Exactly, PacketLifeTime 18
        r[57] = 0x01; // Preference
        r
    }

    fn path_record() -> PathRecord {
        PathRecord {
            service_id: 0x1000_0000_0000_0001,
            dgid: dgid(),
            sgid: sgid(),
            dlid: Lid(2),
            slid: Lid(1),
            raw_traffic: true,
            flow_label: 0x01234,
            hop_limit: 64,
            tclass: 0x20,
            reversible: true,
            numb_path: 1,
            pkey: PKey::DEFAULT,
            qos_class: 0x123,
            sl: 5,
            mtu_selector: Selector::Exactly,
            mtu: Mtu::Mtu4096,
            rate_selector: Selector::Exactly,
            rate: 7,
            packet_life_time_selector: Selector::Exactly,
            packet_life_time: 18,
            preference: 1,
        }
    }

    #[test]
    fn path_record_layout() {
        assert_eq!(PathRecord::parse(&path_record_bytes()), Ok(path_record()));
        let mut out = [0xa5u8; 64];
        path_record().emit(&mut out);
        assert_eq!(out, path_record_bytes());
    }

    fn node_record_bytes() -> [u8; 108] {
        let mut r = [0u8; 108];
        r[0..2].copy_from_slice(&[0x00, 0x07]); // LID 7
        r[4] = 1; // BaseVersion
        r[5] = 1; // ClassVersion
        r[6] = 2; // Switch
        r[7] = 36; // NumPorts
        r[16..24].copy_from_slice(&0x0008_f105_0020_1234u64.to_be_bytes()); // NodeGUID
        r[44..52].copy_from_slice(b"switch-A");
        r
    }

    #[test]
    fn node_record_layout() {
        let n = NodeRecord::parse(&node_record_bytes()).unwrap();
        assert_eq!(n.lid, Lid(7));
        assert_eq!(n.node_info.node_type, NodeType::Switch);
        assert_eq!(n.node_info.num_ports, 36);
        assert_eq!(n.node_info.node_guid, Guid(0x0008_f105_0020_1234));
        assert_eq!(n.node_description.text(), "switch-A");
        let mut out = [0xa5u8; 108];
        n.emit(&mut out);
        assert_eq!(out, node_record_bytes());
        assert_eq!(attr_offset_for(NodeRecord::LEN), 14);
    }

    fn port_info_record_bytes() -> [u8; 68] {
        let mut r = [0u8; 68];
        r[0..2].copy_from_slice(&[0x00, 0x04]); // EndportLID 4
        r[2] = 1; // PortNum
        r[3] = 0; // Options
        r[4 + 16..4 + 18].copy_from_slice(&[0x00, 0x04]); // PortInfo.LID 4
        r[4 + 32] = 0x74; // LinkSpeedSupported 7, Active
        r[4 + 33] = 0x50; // LinkUp
        r
    }

    #[test]
    fn port_info_record_layout() {
        let p = PortInfoRecord::parse(&port_info_record_bytes()).unwrap();
        assert_eq!(p.endport_lid, Lid(4));
        assert_eq!(p.port_num, 1);
        assert_eq!(p.port_info.lid, Lid(4));
        assert_eq!(p.port_info.port_state, PortState::Active);
        assert_eq!(p.port_info.port_physical_state, PortPhysicalState::LinkUp);
        let mut out = [0xa5u8; 68];
        p.emit(&mut out);
        assert_eq!(out, port_info_record_bytes());
        assert_eq!(attr_offset_for(PortInfoRecord::LEN), 9);
    }

    #[test]
    fn get_table_response_and_records() {
        let query_bytes = query_bytes();
        let query = Repr::parse(&Packet::new_unchecked(&query_bytes[..])).unwrap();
        let mut data = [0u8; DATA_LEN];
        path_record().emit(&mut data[..64]);
        let mut second = path_record();
        second.dlid = Lid(3);
        second.emit(&mut data[64..128]);
        let resp = query.response(0, PathRecord::LEN, 2, &data);
        assert_eq!(resp.header.method, Method::GetTableResp);
        assert_eq!(resp.attr_offset, 8);
        assert_eq!(resp.rmpp.rmpp_type, RmppType::Data);
        assert!(resp.rmpp.is_active());
        assert_eq!(resp.rmpp.flags, 0x7);
        assert_eq!(resp.rmpp.data1, 1);
        assert_eq!(resp.rmpp.data2, 20 + 128);
        let mut bytes = [0u8; MAD_LEN];
        resp.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(&bytes[24..28], &[0x01, 0x01, 0x07, 0x00]);
        assert_eq!(&bytes[44..46], &[0x00, 0x08]);
        let parsed = match Body::parse(&bytes).unwrap() {
            Body::Sa(sa) => sa,
            other => panic!("unexpected {other:?}"),
        };
        let dlids: Vec<Lid> = parsed
            .records()
            .take(2)
            .map(|r| PathRecord::parse(r).unwrap().dlid)
            .collect();
        assert_eq!(dlids, [Lid(2), Lid(3)]);
        assert_eq!(parsed.records().count(), 3); // 200 / 64: the caller bounds by PayloadLength
        assert_eq!(records(&data, 0).count(), 0);

        let get = Repr::request(Method::Get, 1, AttrId::NODE_RECORD, node_comp::LID, &[]);
        let resp = get.response(STATUS_NO_RECORDS, NodeRecord::LEN, 0, &[]);
        assert_eq!(resp.header.method, Method::GetResp);
        assert_eq!(resp.header.status, 0x0300);
        assert_eq!(resp.rmpp, RmppHeader::default());
    }

    #[test]
    fn component_mask_bits() {
        assert_eq!(path_comp::PREFERENCE, 0x40_0000);
        assert_eq!(node_comp::NODE_DESCRIPTION, 0x4000);
        assert_eq!(port_info_comp::CAPABILITY_MASK, 0x80);
        assert_eq!(port_info_comp::LINK_SPEED_EXT_ENABLED, 1 << 57);
    }

    /// The IPoIB broadcast group's record as an SA answers a join of port GUID
    /// 0x0002c90300000001: MLID 0xC000, Q_Key 0x0B1B, 2048-byte MTU, 10 Gb/s, full member.
    fn mc_member_record_bytes() -> [u8; 52] {
        let mut r = [0u8; 52];
        r[0..16].copy_from_slice(&[
            0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
        ]); // MGID
        r[16..32].copy_from_slice(&sgid().0); // PortGID
        r[32..36].copy_from_slice(&[0x00, 0x00, 0x0b, 0x1b]); // Q_Key
        r[36..38].copy_from_slice(&[0xc0, 0x00]); // MLID
        r[38] = 0x84; // MTUSelector Exactly, MTU 2048
        r[39] = 0x00; // TClass
        r[40..42].copy_from_slice(&[0xff, 0xff]); // P_Key
        r[42] = 0x83; // RateSelector Exactly, Rate 10 Gb/s
        r[43] = 0x92; // PacketLifeTimeSelector Exactly, PacketLifeTime 18
        r[44..48].copy_from_slice(&[0x51, 0x23, 0x45, 0x40]); // SL 5, FlowLabel 0x12345, HL 64
        r[48] = 0x21; // Scope 2 (link-local), JoinState FullMember
        r[49] = 0x80; // ProxyJoin
        r
    }

    fn mc_member_record() -> McMemberRecord {
        McMemberRecord {
            mgid: ipoib_broadcast_mgid(PKey::DEFAULT),
            port_gid: sgid(),
            q_key: QKey(0x0b1b),
            mlid: Lid(0xc000),
            mtu_selector: Selector::Exactly,
            mtu: Mtu::Mtu2048,
            tclass: 0,
            pkey: PKey::DEFAULT,
            rate_selector: Selector::Exactly,
            rate: 3,
            packet_life_time_selector: Selector::Exactly,
            packet_life_time: 18,
            sl: 5,
            flow_label: 0x12345,
            hop_limit: 64,
            scope: 2,
            join_state: join_state::FULL_MEMBER,
            proxy_join: true,
        }
    }

    #[test]
    fn mc_member_record_layout() {
        assert_eq!(
            McMemberRecord::parse(&mc_member_record_bytes()),
            Ok(mc_member_record())
        );
        let mut out = [0xa5u8; 52];
        mc_member_record().emit(&mut out);
        assert_eq!(out, mc_member_record_bytes());
        assert_eq!(attr_offset_for(McMemberRecord::LEN), 7);
        assert_eq!(
            McMemberRecord::parse(&[0u8; 51]),
            Err(Error::Truncated("MCMemberRecord"))
        );
        assert_eq!(
            ipoib_broadcast_mgid(PKey(0x7fff)).to_string(),
            "ff12:401b:ffff:0000:0000:0000:ffff:ffff"
        );
        assert_eq!(ipoib_broadcast_mgid(PKey(0x8001)).0[4..6], [0x80, 0x01]);
    }

    /// A join as the Linux IPoIB driver sends it (SubnAdmSet, MGID|PortGID|JoinState plus
    /// the creation components), parsed from a whole SA MAD.
    #[test]
    fn mc_member_join_request() {
        let mut rec = [0u8; McMemberRecord::LEN];
        let join = McMemberRecord {
            mlid: Lid(0),
            ..mc_member_record()
        };
        join.emit(&mut rec);
        let comp = mcmember_comp::CREATE;
        let repr = Repr::request(Method::Set, 9, AttrId::MC_MEMBER_RECORD, comp, &rec);
        let mut bytes = [0u8; MAD_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[3], 0x02); // SubnAdmSet
        assert_eq!(&bytes[16..18], &[0x00, 0x38]);
        assert_eq!(&bytes[48..56], &[0, 0, 0, 0, 0, 0x01, 0x30, 0xc7]);
        let parsed = Repr::parse(&Packet::new_unchecked(&bytes[..])).unwrap();
        assert_eq!(McMemberRecord::parse(parsed.data), Ok(join));
        assert_eq!(mcmember_comp::JOIN, 0x10003);
        assert_eq!(mcmember_comp::PROXY_JOIN, 0x20000);
    }

    fn arb_bytes(n: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), n)
    }

    proptest! {
        #[test]
        fn sa_roundtrip(
            header in super::super::tests::arb_repr(),
            rmpp in (any::<(u8, u8, u8, u8, u8, u32, u32)>()),
            keys in any::<(u64, u16, u64)>(),
            data in arb_bytes(DATA_LEN),
        ) {
            let (version, ty, resp_time, flags, status, data1, data2) = rmpp;
            let repr = Repr {
                header: super::super::Repr { mgmt_class: MgmtClass::SubnAdm, ..header },
                rmpp: RmppHeader {
                    version,
                    rmpp_type: RmppType::from(ty),
                    resp_time: resp_time & 0x1f,
                    flags: flags & 0x7,
                    status,
                    data1,
                    data2,
                },
                sm_key: keys.0,
                attr_offset: keys.1,
                comp_mask: keys.2,
                data: &data,
            };
            let mut bytes = [0u8; MAD_LEN];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(Repr::parse(&Packet::new_unchecked(&bytes[..])), Ok(repr));
            prop_assert_eq!(Body::parse(&bytes), Ok(Body::Sa(repr)));
        }

        // Records are generated by parsing arbitrary bytes (parse is onto the valid records);
        // emit must give back the bytes with exactly the reserved bits cleared.
        #[test]
        fn path_record_roundtrip(b in arb_bytes(64)) {
            let r = PathRecord::parse(&b).unwrap();
            let mut out = [0xa5u8; 64];
            r.emit(&mut out);
            let mut expect = [0u8; 64];
            expect.copy_from_slice(&b);
            expect[44] &= 0x8f; // Resv(3) after RawTraffic
            expect[58..].fill(0);
            prop_assert_eq!(out, expect);
            prop_assert_eq!(PathRecord::parse(&out), Ok(r));
        }

        #[test]
        fn node_record_roundtrip(b in arb_bytes(108)) {
            let r = NodeRecord::parse(&b).unwrap();
            let mut out = [0xa5u8; 108];
            r.emit(&mut out);
            let mut expect = [0u8; 108];
            expect.copy_from_slice(&b);
            expect[2] = 0;
            expect[3] = 0;
            prop_assert_eq!(out, expect);
            prop_assert_eq!(NodeRecord::parse(&out), Ok(r));
        }

        #[test]
        fn mc_member_record_roundtrip(b in arb_bytes(52)) {
            let r = McMemberRecord::parse(&b).unwrap();
            let mut out = [0xa5u8; 52];
            r.emit(&mut out);
            let mut expect = [0u8; 52];
            expect.copy_from_slice(&b);
            expect[49] &= 0x80; // Reserved(23) after ProxyJoin
            expect[50..].fill(0);
            prop_assert_eq!(out, expect);
            prop_assert_eq!(McMemberRecord::parse(&out), Ok(r));
        }

        #[test]
        fn port_info_record_roundtrip(b in arb_bytes(68)) {
            let r = PortInfoRecord::parse(&b).unwrap();
            let mut out = [0xa5u8; 68];
            r.emit(&mut out);
            prop_assert_eq!(PortInfoRecord::parse(&out), Ok(r));
            prop_assert_eq!(&out[..4], &b[..4]);
        }

        #[test]
        fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(r) = Repr::parse(&Packet::new_unchecked(&b[..])) {
                for rec in r.records() {
                    let _ = PathRecord::parse(rec);
                }
            }
            let _ = PathRecord::parse(&b);
            let _ = NodeRecord::parse(&b);
            let _ = PortInfoRecord::parse(&b);
            let _ = McMemberRecord::parse(&b);
            for off in [0u16, 1, 9, 14, 0xffff] {
                let _ = records(&b, off).count();
            }
        }
    }

    #[test]
    fn data_segments_are_flagged_first_and_last() {
        let first = RmppHeader::data_segment(1, 3, 620);
        assert_eq!(first.flags, rmpp_flags::ACTIVE | rmpp_flags::FIRST);
        assert_eq!((first.data1, first.data2), (1, 620));
        assert_eq!(RmppHeader::data_segment(2, 3, 0).flags, rmpp_flags::ACTIVE);
        let last = RmppHeader::data_segment(3, 3, 40);
        assert_eq!(last.flags, rmpp_flags::ACTIVE | rmpp_flags::LAST);
        assert_eq!(
            RmppHeader::data_segment(1, 1, 84),
            RmppHeader {
                resp_time: 0,
                ..RmppHeader::single_segment(84)
            }
        );
        assert!(last.is_active() && last.rmpp_type == RmppType::Data && last.version == 1);
    }
}
