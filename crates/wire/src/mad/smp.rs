//! Subnet management packets (SMPs, IBA vol 1 §14.2.1): the MADs of the subnet manager and the
//! subnet management agents, sent on QP0.
//!
//! A LID-routed SMP (MgmtClass 0x01, §14.2.1.1) is routed by the switches' forwarding tables:
//!
//! ```text
//!   0: common MAD header (24 bytes)
//!  24: M_Key(64)
//!  32: Reserved (32 bytes)
//!  64: SMP data (64 bytes)
//! 128: Reserved (128 bytes)
//! ```
//!
//! A directed-route SMP (MgmtClass 0x81, §14.2.1.2) carries its own path as a list of egress
//! ports, so it works before any LID has been assigned:
//!
//! ```text
//!   4: D(1) Status(15)        6: HopPointer(8)   7: HopCount(8)     (in the common header)
//!  24: M_Key(64)
//!  32: DrSLID(16)  DrDLID(16)
//!  36: Reserved (28 bytes)
//!  64: SMP data (64 bytes)
//! 128: InitialPath (64 bytes)  — InitialPath[i] is the egress port at hop i, i in 1..=HopCount
//! 192: ReturnPath (64 bytes)   — filled in hop by hop with the ingress ports
//! ```
//!
//! The D bit is 0 on the way out and 1 on the way back; DrSLID and DrDLID are the permissive
//! LID (0xFFFF) when the whole path is directed (the usual case for opensm's discovery).

use super::{status, AttrId, Method, MgmtClass};
use crate::bytes::{read_u16, read_u64, write_u16, write_u64};
use crate::{Error, Lid, Result};

/// The ClassVersion of subnet management (1).
pub const CLASS_VERSION: u8 = 1;

/// Length of the SMP data area.
pub const DATA_LEN: usize = 64;

/// Length of the InitialPath and ReturnPath arrays.
pub const PATH_LEN: usize = 64;

/// The largest hop count a directed route can have: the paths are indexed 1..=HopCount.
pub const MAX_HOPS: u8 = 63;

mod field {
    use core::ops::Range;
    pub const M_KEY: usize = 24;
    pub const DR_SLID: usize = 32;
    pub const DR_DLID: usize = 34;
    pub const DR_RESERVED: Range<usize> = 36..64;
    pub const LID_RESERVED1: Range<usize> = 32..64;
    pub const DATA: Range<usize> = 64..128;
    pub const INITIAL_PATH: Range<usize> = 128..192;
    pub const RETURN_PATH: Range<usize> = 192..256;
    pub const LID_RESERVED2: Range<usize> = 128..256;
    pub const STATUS: usize = 4;
    pub const HOP_PTR: usize = 6;
    pub const HOP_CNT: usize = 7;
}

/// A read/write view of an SMP (either routing) at the start of a buffer.
///
/// The directed-route accessors read the bytes whatever the class is; it is the caller's job
/// to look at the class first ([`Packet::is_directed_route`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length (see the crate's panic-freedom contract).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole 256-byte SMP.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a whole SMP; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < super::MAD_LEN {
            Err(Error::Truncated("SMP"))
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

    /// Whether MgmtClass is 0x81 (directed route).
    #[inline]
    pub fn is_directed_route(&self) -> bool {
        self.header().mgmt_class() == MgmtClass::SubnDirectedRoute
    }

    /// M_Key.
    #[inline]
    pub fn m_key(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::M_KEY)
    }

    /// The D bit (bit 15 of Status) of a directed-route SMP: set on the way back.
    #[inline]
    pub fn direction_inbound(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::STATUS) & status::DIRECTION != 0
    }

    /// The 15-bit status of a directed-route SMP (Status without the D bit).
    #[inline]
    pub fn dr_status(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::STATUS) & !status::DIRECTION
    }

    /// HopPointer (the upper byte of ClassSpecific).
    #[inline]
    pub fn hop_ptr(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_PTR]
    }

    /// HopCount (the lower byte of ClassSpecific).
    #[inline]
    pub fn hop_cnt(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_CNT]
    }

    /// DrSLID.
    #[inline]
    pub fn dr_slid(&self) -> Lid {
        Lid(read_u16(self.buffer.as_ref(), field::DR_SLID))
    }

    /// DrDLID.
    #[inline]
    pub fn dr_dlid(&self) -> Lid {
        Lid(read_u16(self.buffer.as_ref(), field::DR_DLID))
    }

    /// The 64-byte SMP data area (the attribute).
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }

    /// InitialPath (64 bytes; entry 0 is unused).
    #[inline]
    pub fn initial_path(&self) -> &[u8] {
        &self.buffer.as_ref()[field::INITIAL_PATH]
    }

    /// ReturnPath (64 bytes; entry 0 is unused).
    #[inline]
    pub fn return_path(&self) -> &[u8] {
        &self.buffer.as_ref()[field::RETURN_PATH]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// A mutable view of the common MAD header.
    pub fn header_mut(&mut self) -> super::Packet<&mut [u8]> {
        super::Packet::new_unchecked(self.buffer.as_mut())
    }

    /// Sets M_Key.
    #[inline]
    pub fn set_m_key(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::M_KEY, value);
    }

    /// Sets the D bit, leaving the 15 status bits alone.
    #[inline]
    pub fn set_direction_inbound(&mut self, value: bool) {
        let b = self.buffer.as_mut();
        let s = read_u16(b, field::STATUS) & !status::DIRECTION;
        write_u16(
            b,
            field::STATUS,
            s | if value { status::DIRECTION } else { 0 },
        );
    }

    /// Sets HopPointer.
    #[inline]
    pub fn set_hop_ptr(&mut self, value: u8) {
        self.buffer.as_mut()[field::HOP_PTR] = value;
    }

    /// Sets HopCount.
    #[inline]
    pub fn set_hop_cnt(&mut self, value: u8) {
        self.buffer.as_mut()[field::HOP_CNT] = value;
    }

    /// Sets DrSLID.
    #[inline]
    pub fn set_dr_slid(&mut self, value: Lid) {
        write_u16(self.buffer.as_mut(), field::DR_SLID, value.0);
    }

    /// Sets DrDLID.
    #[inline]
    pub fn set_dr_dlid(&mut self, value: Lid) {
        write_u16(self.buffer.as_mut(), field::DR_DLID, value.0);
    }

    /// The SMP data area, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }

    /// InitialPath, writable.
    #[inline]
    pub fn initial_path_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::INITIAL_PATH]
    }

    /// ReturnPath, writable.
    #[inline]
    pub fn return_path_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::RETURN_PATH]
    }

    /// Zeroes the reserved areas of a LID-routed SMP (bytes 32..64 and 128..256).
    pub fn clear_lid_routed_reserved(&mut self) {
        let b = self.buffer.as_mut();
        b[field::LID_RESERVED1].fill(0);
        b[field::LID_RESERVED2].fill(0);
    }

    /// Zeroes the reserved area of a directed-route SMP (bytes 36..64).
    pub fn clear_directed_route_reserved(&mut self) {
        self.buffer.as_mut()[field::DR_RESERVED].fill(0);
    }
}

/// The directed-route part of a directed-route SMP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DirectedRoute {
    /// The D bit: `false` on the way from the requester, `true` on the way back.
    pub direction_inbound: bool,
    /// HopPointer: the index of the current hop in the paths.
    pub hop_ptr: u8,
    /// HopCount: the number of directed hops (0 = the local port).
    pub hop_cnt: u8,
    /// DrSLID: the LID-routed part before the directed part (permissive if none).
    pub dr_slid: Lid,
    /// DrDLID: the LID-routed part after the directed part (permissive if none).
    pub dr_dlid: Lid,
    /// InitialPath: the egress port at hop i in entry i (1..=HopCount).
    pub initial_path: [u8; PATH_LEN],
    /// ReturnPath: the ingress port at hop i in entry i, filled in on the way out.
    pub return_path: [u8; PATH_LEN],
}

impl DirectedRoute {
    /// A purely directed outbound route: DrSLID = DrDLID = permissive, HopPointer 0, D = 0,
    /// HopCount = `path.len()` and InitialPath\[1..=HopCount\] = `path` (the egress port at
    /// each hop, starting with the requester's own port). An empty path reaches the local SMA.
    pub fn new(path: &[u8]) -> Result<DirectedRoute> {
        if path.len() > usize::from(MAX_HOPS) {
            return Err(Error::Malformed("directed route longer than 63 hops"));
        }
        let mut initial_path = [0u8; PATH_LEN];
        initial_path[1..=path.len()].copy_from_slice(path);
        Ok(DirectedRoute {
            direction_inbound: false,
            hop_ptr: 0,
            hop_cnt: path.len() as u8,
            dr_slid: Lid::PERMISSIVE,
            dr_dlid: Lid::PERMISSIVE,
            initial_path,
            return_path: [0u8; PATH_LEN],
        })
    }

    /// The egress ports of the directed part, InitialPath\[1..=HopCount\] (a HopCount above 63
    /// is clamped to 63).
    pub fn path(&self) -> &[u8] {
        let n = usize::from(self.hop_cnt.min(MAX_HOPS));
        &self.initial_path[1..=n]
    }

    /// The ingress ports recorded so far, ReturnPath\[1..=HopCount\] (clamped to 63 hops).
    pub fn return_ports(&self) -> &[u8] {
        let n = usize::from(self.hop_cnt.min(MAX_HOPS));
        &self.return_path[1..=n]
    }

    /// Whether both DrSLID and DrDLID are permissive: the route is directed end to end.
    pub fn is_pure(&self) -> bool {
        self.dr_slid == Lid::PERMISSIVE && self.dr_dlid == Lid::PERMISSIVE
    }
}

/// The meaningful contents of an SMP.
///
/// For a directed-route SMP (`dr` is `Some`) the D bit, HopPointer and HopCount live in `dr`:
/// [`Repr::parse`] strips the D bit from `header.status` (keeping bits 0–14) and sets
/// `header.class_specific` to 0, and [`Repr::emit`] writes Status and ClassSpecific from
/// `header.status` and `dr`, ignoring `header.class_specific`. Whether the route is directed is
/// decided by `header.mgmt_class` on parse and by `dr` on emit; the constructors keep the two
/// consistent. Reserved areas are not kept and are emitted as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The common MAD header.
    pub header: super::Repr,
    /// M_Key.
    pub m_key: u64,
    /// The directed-route fields, for MgmtClass 0x81.
    pub dr: Option<DirectedRoute>,
    /// The SMP data: the attribute (see [`super::attr`]).
    pub data: [u8; DATA_LEN],
}

impl Repr {
    /// A request SMP. LID-routed (class 0x01) when `dr` is `None`, directed-route (0x81)
    /// otherwise.
    pub fn new(
        method: Method,
        tid: u64,
        attr_id: AttrId,
        attr_mod: u32,
        m_key: u64,
        dr: Option<DirectedRoute>,
        data: [u8; DATA_LEN],
    ) -> Repr {
        let class = if dr.is_some() {
            MgmtClass::SubnDirectedRoute
        } else {
            MgmtClass::SubnLid
        };
        Repr {
            header: super::Repr::request(class, CLASS_VERSION, method, tid, attr_id, attr_mod),
            m_key,
            dr,
            data,
        }
    }

    /// A directed-route SubnGet along `path` (the egress port at each hop; see
    /// [`DirectedRoute::new`]), as the SM sends during discovery.
    pub fn dr_get(
        tid: u64,
        attr_id: AttrId,
        attr_mod: u32,
        m_key: u64,
        path: &[u8],
    ) -> Result<Repr> {
        let dr = DirectedRoute::new(path)?;
        Ok(Repr::new(
            Method::Get,
            tid,
            attr_id,
            attr_mod,
            m_key,
            Some(dr),
            [0; DATA_LEN],
        ))
    }

    /// A directed-route SubnSet of `data` along `path`.
    pub fn dr_set(
        tid: u64,
        attr_id: AttrId,
        attr_mod: u32,
        m_key: u64,
        path: &[u8],
        data: [u8; DATA_LEN],
    ) -> Result<Repr> {
        let dr = DirectedRoute::new(path)?;
        Ok(Repr::new(
            Method::Set,
            tid,
            attr_id,
            attr_mod,
            m_key,
            Some(dr),
            data,
        ))
    }

    /// A LID-routed SubnGet.
    pub fn lid_get(tid: u64, attr_id: AttrId, attr_mod: u32, m_key: u64) -> Repr {
        Repr::new(
            Method::Get,
            tid,
            attr_id,
            attr_mod,
            m_key,
            None,
            [0; DATA_LEN],
        )
    }

    /// A LID-routed SubnSet of `data`.
    pub fn lid_set(
        tid: u64,
        attr_id: AttrId,
        attr_mod: u32,
        m_key: u64,
        data: [u8; DATA_LEN],
    ) -> Repr {
        Repr::new(Method::Set, tid, attr_id, attr_mod, m_key, None, data)
    }

    /// Whether this is a directed-route SMP.
    pub fn is_directed_route(&self) -> bool {
        self.dr.is_some()
    }

    /// The response an SMA sends to this request (IBA §14.2.2): Method becomes GetResp (for
    /// Get and Set; TrapRepress for Trap), Status `status`, the data `data`; a directed-route
    /// SMP gets its D bit set and keeps HopPointer, HopCount and both paths, so that the SMI
    /// walks ReturnPath back. TID, attribute and M_Key are kept.
    pub fn response(&self, status: u16, data: [u8; DATA_LEN]) -> Repr {
        let mut header = self.header.response(status);
        let dr = self.dr.map(|mut dr| {
            header.status &= !super::status::DIRECTION;
            dr.direction_inbound = true;
            dr
        });
        Repr {
            header,
            m_key: self.m_key,
            dr,
            data,
        }
    }

    /// Parses an SMP; the layout is chosen by MgmtClass (0x81 directed route, anything else is
    /// read as LID-routed).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        let mut header = super::Repr::parse(&packet.header())?;
        let dr = if header.mgmt_class == MgmtClass::SubnDirectedRoute {
            header.status &= !status::DIRECTION;
            header.class_specific = 0;
            let mut initial_path = [0u8; PATH_LEN];
            initial_path.copy_from_slice(packet.initial_path());
            let mut return_path = [0u8; PATH_LEN];
            return_path.copy_from_slice(packet.return_path());
            Some(DirectedRoute {
                direction_inbound: packet.direction_inbound(),
                hop_ptr: packet.hop_ptr(),
                hop_cnt: packet.hop_cnt(),
                dr_slid: packet.dr_slid(),
                dr_dlid: packet.dr_dlid(),
                initial_path,
                return_path,
            })
        } else {
            None
        };
        let mut data = [0u8; DATA_LEN];
        data.copy_from_slice(packet.data());
        Ok(Repr {
            header,
            m_key: packet.m_key(),
            dr,
            data,
        })
    }

    /// The number of bytes `emit` writes: [`super::MAD_LEN`].
    pub const fn buffer_len(&self) -> usize {
        super::MAD_LEN
    }

    /// Writes the SMP into the first 256 bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let mut header = self.header;
        if let Some(dr) = &self.dr {
            header.status &= !status::DIRECTION;
            if dr.direction_inbound {
                header.status |= status::DIRECTION;
            }
            header.class_specific = u16::from_be_bytes([dr.hop_ptr, dr.hop_cnt]);
        }
        header.emit(&mut packet.header_mut());
        packet.set_m_key(self.m_key);
        packet.data_mut().copy_from_slice(&self.data);
        match &self.dr {
            Some(dr) => {
                packet.set_dr_slid(dr.dr_slid);
                packet.set_dr_dlid(dr.dr_dlid);
                packet.clear_directed_route_reserved();
                packet.initial_path_mut().copy_from_slice(&dr.initial_path);
                packet.return_path_mut().copy_from_slice(&dr.return_path);
            }
            None => packet.clear_lid_routed_reserved(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A directed-route SubnGet(PortInfo) for port 3 at two hops (egress ports 1 then 5),
    /// M_Key 0, as it leaves the SM: D=0, HopPointer 0, HopCount 2. Built byte by byte from
    /// the offsets of IBA §14.2.1.2.
    fn dr_get_bytes() -> [u8; 256] {
        let mut b = [0u8; 256];
        b[0] = 0x01; // BaseVersion
        b[1] = 0x81; // SubnDirectedRoute
        b[2] = 0x01; // ClassVersion
        b[3] = 0x01; // SubnGet
        b[6] = 0x00; // HopPointer
        b[7] = 0x02; // HopCount
        b[8..16].copy_from_slice(&[0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef]); // TID
        b[16] = 0x00;
        b[17] = 0x15; // PortInfo
        b[23] = 0x03; // AttributeModifier: port 3
        b[32..34].copy_from_slice(&[0xff, 0xff]); // DrSLID permissive
        b[34..36].copy_from_slice(&[0xff, 0xff]); // DrDLID permissive
        b[129] = 1; // InitialPath[1]
        b[130] = 5; // InitialPath[2]
        b
    }

    fn dr_get_repr() -> Repr {
        Repr::dr_get(0xdead_beef, AttrId::PORT_INFO, 3, 0, &[1, 5]).unwrap()
    }

    /// The GetResp the switch's SMA returns: D=1, HopPointer 3 (HopCount+1 at the SMA), the
    /// return path recorded (arrived on port 7 at hop 1, port 2 at hop 2), M_Key 0x1122..,
    /// status 0, a recognisable data area.
    fn dr_resp_bytes() -> [u8; 256] {
        let mut b = dr_get_bytes();
        b[3] = 0x81; // SubnGetResp
        b[4] = 0x80; // D bit
        b[6] = 0x03; // HopPointer
        b[24..32].copy_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
        for (i, x) in b[64..128].iter_mut().enumerate() {
            *x = i as u8;
        }
        b[193] = 7; // ReturnPath[1]
        b[194] = 2; // ReturnPath[2]
        b
    }

    /// A LID-routed SubnGetResp(NodeDescription) with status "invalid attribute value".
    fn lid_resp_bytes() -> [u8; 256] {
        let mut b = [0u8; 256];
        b[0] = 0x01;
        b[1] = 0x01; // SubnLid
        b[2] = 0x01;
        b[3] = 0x81; // SubnGetResp
        b[4] = 0x00;
        b[5] = 0x1c; // status: invalid attribute value
        b[15] = 0x42; // TID
        b[17] = 0x10; // NodeDescription
        b[24..32].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 9]); // M_Key 9
        b[64..72].copy_from_slice(b"switch-0");
        b
    }

    #[test]
    fn test_deconstruct() {
        let bytes = dr_get_bytes();
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert!(packet.is_directed_route());
        assert_eq!(packet.header().method(), Method::Get);
        assert_eq!(packet.header().attr_id(), AttrId::PORT_INFO);
        assert_eq!(packet.header().attr_mod(), 3);
        assert_eq!(packet.header().tid(), 0xdead_beef);
        assert!(!packet.direction_inbound());
        assert_eq!(packet.hop_ptr(), 0);
        assert_eq!(packet.hop_cnt(), 2);
        assert_eq!(packet.dr_slid(), Lid::PERMISSIVE);
        assert_eq!(packet.dr_dlid(), Lid::PERMISSIVE);
        assert_eq!(&packet.initial_path()[..3], &[0, 1, 5]);
        assert_eq!(packet.m_key(), 0);

        let bytes = dr_resp_bytes();
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert!(packet.direction_inbound());
        assert_eq!(packet.dr_status(), 0);
        assert_eq!(packet.header().status(), 0x8000);
        assert_eq!(packet.hop_ptr(), 3);
        assert_eq!(packet.m_key(), 0x1122_3344_5566_7788);
        assert_eq!(&packet.return_path()[..3], &[0, 7, 2]);
        assert_eq!(packet.data()[63], 63);

        let bytes = lid_resp_bytes();
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert!(!packet.is_directed_route());
        assert_eq!(packet.header().status(), status::INVALID_ATTR_VALUE);
        assert_eq!(packet.m_key(), 9);
        assert_eq!(&packet.data()[..8], b"switch-0");
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0xa5u8; 256];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        {
            let mut h = packet.header_mut();
            h.set_base_version(1);
            h.set_mgmt_class(MgmtClass::SubnDirectedRoute);
            h.set_class_version(1);
            h.set_method(Method::Get);
            h.set_status(0);
            h.set_tid(0xdead_beef);
            h.set_attr_id(AttrId::PORT_INFO);
            h.set_attr_mod(3);
        }
        packet.set_hop_ptr(0);
        packet.set_hop_cnt(2);
        packet.set_direction_inbound(false);
        packet.set_m_key(0);
        packet.set_dr_slid(Lid::PERMISSIVE);
        packet.set_dr_dlid(Lid::PERMISSIVE);
        packet.clear_directed_route_reserved();
        packet.data_mut().fill(0);
        packet.initial_path_mut().fill(0);
        packet.initial_path_mut()[1] = 1;
        packet.initial_path_mut()[2] = 5;
        packet.return_path_mut().fill(0);
        assert_eq!(bytes, dr_get_bytes());

        // The D bit does not disturb the 15 status bits.
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.header_mut().set_status(0x001c);
        packet.set_direction_inbound(true);
        assert_eq!(packet.header().status(), 0x801c);
        assert_eq!(packet.dr_status(), 0x001c);
        packet.set_direction_inbound(false);
        assert_eq!(packet.header().status(), 0x001c);
    }

    #[test]
    fn test_parse() {
        let bytes = dr_get_bytes();
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&bytes[..])),
            Ok(dr_get_repr())
        );

        let bytes = lid_resp_bytes();
        let repr = Repr::parse(&Packet::new_unchecked(&bytes[..])).unwrap();
        assert_eq!(repr.header.mgmt_class, MgmtClass::SubnLid);
        assert_eq!(repr.header.method, Method::GetResp);
        assert_eq!(repr.header.status, status::INVALID_ATTR_VALUE);
        assert_eq!(repr.header.tid, 0x42);
        assert_eq!(repr.header.attr_id, AttrId::NODE_DESCRIPTION);
        assert_eq!(repr.m_key, 9);
        assert!(repr.dr.is_none());
        assert_eq!(&repr.data[..8], b"switch-0");
    }

    #[test]
    fn test_emit() {
        let mut bytes = [0x5au8; 256];
        dr_get_repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, dr_get_bytes());

        let lid = Repr::parse(&Packet::new_unchecked(&lid_resp_bytes()[..])).unwrap();
        let mut bytes = [0x5au8; 256];
        lid.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, lid_resp_bytes());
    }

    #[test]
    fn test_impossible_len() {
        let bytes = dr_get_bytes();
        assert_eq!(
            Packet::new_checked(&bytes[..255]).unwrap_err(),
            Error::Truncated("SMP")
        );
        assert!(Repr::parse(&Packet::new_unchecked(&bytes[..64])).is_err());
        assert!(DirectedRoute::new(&[1u8; 64]).is_err());
        assert!(DirectedRoute::new(&[1u8; 63]).is_ok());
    }

    #[test]
    fn response_transform() {
        // The SMA has walked the route: HopPointer = HopCount + 1, ReturnPath recorded.
        let mut req = dr_get_repr();
        req.m_key = 0x1122_3344_5566_7788;
        if let Some(dr) = req.dr.as_mut() {
            dr.hop_ptr = 3;
            dr.return_path[1] = 7;
            dr.return_path[2] = 2;
        }
        let mut data = [0u8; 64];
        for (i, x) in data.iter_mut().enumerate() {
            *x = i as u8;
        }
        let resp = req.response(status::SUCCESS, data);
        let mut bytes = [0u8; 256];
        resp.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, dr_resp_bytes());
        let dr = resp.dr.unwrap();
        assert!(dr.direction_inbound);
        assert_eq!(dr.path(), &[1, 5]);
        assert_eq!(dr.return_ports(), &[7, 2]);

        // A Set is answered with GetResp too, a LID-routed SMP gets no D bit.
        let set = Repr::lid_set(1, AttrId::PORT_INFO, 1, 0, [0; 64]);
        let resp = set.response(status::INVALID_ATTR_VALUE, set.data);
        assert_eq!(resp.header.method, Method::GetResp);
        assert_eq!(resp.header.status, 0x001c);
        assert!(resp.dr.is_none());
    }

    #[test]
    fn local_route_and_clamping() {
        let local = Repr::dr_get(1, AttrId::NODE_INFO, 0, 0, &[]).unwrap();
        let dr = local.dr.unwrap();
        assert_eq!((dr.hop_cnt, dr.hop_ptr), (0, 0));
        assert!(dr.path().is_empty() && dr.is_pure());
        let wild = DirectedRoute { hop_cnt: 200, ..dr };
        assert_eq!(wild.path().len(), 63);
        assert_eq!(wild.return_ports().len(), 63);
    }

    pub(crate) fn arb_dr() -> impl Strategy<Value = DirectedRoute> {
        (
            any::<(bool, u8, u8, u16, u16)>(),
            proptest::collection::vec(any::<u8>(), 128),
        )
            .prop_map(|((d, ptr, cnt, slid, dlid), paths)| {
                let mut initial_path = [0u8; PATH_LEN];
                initial_path.copy_from_slice(&paths[..64]);
                let mut return_path = [0u8; PATH_LEN];
                return_path.copy_from_slice(&paths[64..]);
                DirectedRoute {
                    direction_inbound: d,
                    hop_ptr: ptr,
                    hop_cnt: cnt,
                    dr_slid: Lid(slid),
                    dr_dlid: Lid(dlid),
                    initial_path,
                    return_path,
                }
            })
    }

    /// A strategy over every consistent SMP `Repr` (class matches `dr`, no D bit or
    /// ClassSpecific in the header of a directed-route one).
    pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> {
        (
            super::super::tests::arb_repr(),
            any::<u64>(),
            proptest::option::of(arb_dr()),
            proptest::collection::vec(any::<u8>(), 64),
        )
            .prop_map(|(mut header, m_key, dr, bytes)| {
                let mut data = [0u8; DATA_LEN];
                data.copy_from_slice(&bytes);
                if dr.is_some() {
                    header.mgmt_class = MgmtClass::SubnDirectedRoute;
                    header.status &= !status::DIRECTION;
                    header.class_specific = 0;
                } else {
                    header.mgmt_class = MgmtClass::SubnLid;
                }
                Repr {
                    header,
                    m_key,
                    dr,
                    data,
                }
            })
    }

    proptest! {
        #[test]
        fn parse_emit_roundtrip(repr in arb_repr()) {
            let mut bytes = [0u8; super::super::MAD_LEN];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(Repr::parse(&Packet::new_unchecked(&bytes[..])), Ok(repr));
            prop_assert_eq!(
                super::super::Body::parse(&bytes),
                Ok(super::super::Body::Smp(repr))
            );
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(repr) = Repr::parse(&Packet::new_unchecked(&bytes[..])) {
                if let Some(dr) = repr.dr {
                    let _ = (dr.path(), dr.return_ports());
                }
                let _ = repr.response(0, repr.data);
            }
        }
    }
}
