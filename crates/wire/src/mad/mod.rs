//! Management datagrams (MADs, IBA vol 1 §13.4).
//!
//! A MAD is the fixed-size message every InfiniBand management agent speaks: the subnet
//! manager (SM) and the subnet management agents (SMAs) exchange *SMPs* on QP0 (VL15, class
//! 0x01 LID-routed or 0x81 directed-route); every other class — subnet administration (SA),
//! performance management (PMA), communication management, ... — travels as a *GMP* on QP1
//! with the well-known Q_Key. A MAD is always 256 bytes ([`MAD_LEN`]), and starts with the
//! 24-byte common MAD header (IBA §13.4.2):
//!
//! ```text
//!  0: BaseVersion(8)   MgmtClass(8)   ClassVersion(8)   R(1) Method(7)
//!  4: Status(16)                      ClassSpecific(16)
//!  8: TransactionID(64)
//! 16: AttributeID(16)                 Reserved(16)
//! 20: AttributeModifier(32)
//! ```
//!
//! What follows depends on the management class:
//! * [`smp`]: LID-routed and directed-route SMPs (IBA §14.2.1), whose 64-byte data area holds
//!   one of the attributes of [`attr`];
//! * [`sa`]: SA MADs (IBA §15.2.1) with the RMPP and SA headers and the SA records;
//! * [`perf`]: PMA MADs (IBA §16.1.2) with PortCounters and PortCountersExtended;
//! * [`class_port_info`]: the ClassPortInfo attribute every GSI class shares (IBA §13.4.8.1).
//!
//! [`Body::parse`] decodes a whole MAD down to its class layout; [`Repr`] is the common header
//! alone, for a tool that only wants class, method and attribute (see [`attr_name`] and
//! [`method_name`]).
//!
//! # Naming
//!
//! [`Method::name`] gives the class-independent names of IBA §13.4.5 ("Get", "GetResp",
//! "TrapRepress"); [`method_name`] gives the class-qualified names of the spec's chapters 14–16,
//! which are also what Wireshark's InfiniBand dissector prints ("SubnGet", "SubnAdmGetTable",
//! "PerfGetResp"). Attribute names ([`attr_name`]) are the spec's, as Wireshark prints them
//! ("NodeInfo", "P_KeyTable", "PathRecord").

pub mod attr;
pub mod class_port_info;
pub mod cm;
pub mod perf;
pub mod sa;
pub mod smp;

use core::fmt;

use crate::bytes::{read_u16, read_u32, read_u64, write_u16, write_u32, write_u64};
use crate::{Error, Result};

/// Length of every MAD in bytes (IBA §13.4.1).
pub const MAD_LEN: usize = 256;

/// Length of the common MAD header in bytes.
pub const HEADER_LEN: usize = 24;

/// The only BaseVersion defined by the IBA (1).
pub const BASE_VERSION: u8 = 1;

/// The response bit, bit 7 of the Method byte.
pub const METHOD_RESPONSE_BIT: u8 = 0x80;

mod field {
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: usize = 4;
    pub const CLASS_SPECIFIC: usize = 6;
    pub const TID: usize = 8;
    pub const ATTR_ID: usize = 16;
    pub const RESERVED: usize = 18;
    pub const ATTR_MOD: usize = 20;
}

/// The Status field of the common MAD header (IBA §13.4.7, table 110).
///
/// Bits 0–1 are flags, bits 2–4 a code for an invalid field, bits 8–14 are class-specific (see
/// e.g. [`sa::STATUS_NO_RECORDS`]); in a directed-route SMP, bit 15 is the D (direction) bit
/// and not part of the status.
pub mod status {
    /// No error.
    pub const SUCCESS: u16 = 0x0000;
    /// Busy: the agent cannot answer now; the requester may retry.
    pub const BUSY: u16 = 0x0001;
    /// Redirection required: ClassPortInfo names the agent to ask instead.
    pub const REDIRECT: u16 = 0x0002;
    /// Bad version: the BaseVersion or ClassVersion is not supported.
    pub const BAD_VERSION: u16 = 0x0004;
    /// The method is not supported.
    pub const UNSUPPORTED_METHOD: u16 = 0x0008;
    /// The method is supported but not with this attribute.
    pub const UNSUPPORTED_METHOD_ATTR: u16 = 0x000C;
    /// One or more fields of the attribute or its modifier hold an invalid value.
    pub const INVALID_ATTR_VALUE: u16 = 0x001C;
    /// The mask of the invalid-field code (bits 2–4).
    pub const INVALID_FIELD_MASK: u16 = 0x001C;
    /// The mask of the class-specific status bits (8–14, and 15 outside directed-route SMPs).
    pub const CLASS_SPECIFIC_MASK: u16 = 0xFF00;
    /// The D bit of a directed-route SMP (bit 15): set on the way back to the requester.
    pub const DIRECTION: u16 = 0x8000;

    /// The invalid-field code (bits 2–4): 0 none, 1 bad version, 2 method unsupported,
    /// 3 method/attribute combination unsupported, 7 invalid attribute or modifier value.
    pub const fn invalid_field_code(status: u16) -> u8 {
        ((status & INVALID_FIELD_MASK) >> 2) as u8
    }
}

enum_with_unknown! {
    /// The management class (IBA §13.4.2 table 106), the second byte of every MAD.
    pub enum MgmtClass(u8) {
        /// Subnet management, LID-routed SMPs.
        SubnLid = 0x01,
        /// Subnet administration (the SA).
        SubnAdm = 0x03,
        /// Performance management (the PMA).
        PerfMgt = 0x04,
        /// Baseboard management.
        BoardMgt = 0x05,
        /// Device management.
        DevMgt = 0x06,
        /// Communication management (the CM).
        ComMgt = 0x07,
        /// SNMP tunneling.
        Snmp = 0x08,
        /// Device administration.
        DevAdm = 0x10,
        /// Boot management.
        BootMgt = 0x11,
        /// Bootable image services (BIS).
        Bis = 0x12,
        /// Congestion control (IBA annex A10).
        CongestionMgt = 0x21,
        /// Subnet management, directed-route SMPs.
        SubnDirectedRoute = 0x81,
    }
}

impl MgmtClass {
    /// The class's short name, as the variant is called ("SubnLid", "SubnDirectedRoute",
    /// "SubnAdm", "PerfMgt", ...); vendor classes give "Vendor", others "Unknown".
    pub fn name(self) -> &'static str {
        match self {
            MgmtClass::SubnLid => "SubnLid",
            MgmtClass::SubnAdm => "SubnAdm",
            MgmtClass::PerfMgt => "PerfMgt",
            MgmtClass::BoardMgt => "BoardMgt",
            MgmtClass::DevMgt => "DevMgt",
            MgmtClass::ComMgt => "ComMgt",
            MgmtClass::Snmp => "Snmp",
            MgmtClass::DevAdm => "DevAdm",
            MgmtClass::BootMgt => "BootMgt",
            MgmtClass::Bis => "Bis",
            MgmtClass::CongestionMgt => "CongestionMgt",
            MgmtClass::SubnDirectedRoute => "SubnDirectedRoute",
            MgmtClass::Unknown(_) if self.is_vendor() => "Vendor",
            MgmtClass::Unknown(_) => "Unknown",
        }
    }

    /// A longer description in the words Wireshark uses ("Subnet Management (Directed
    /// Route)", "Subnet Administration", "Performance Management", ...).
    pub fn description(self) -> &'static str {
        match self {
            MgmtClass::SubnLid => "Subnet Management (LID Routed)",
            MgmtClass::SubnAdm => "Subnet Administration",
            MgmtClass::PerfMgt => "Performance Management",
            MgmtClass::BoardMgt => "Baseboard Management",
            MgmtClass::DevMgt => "Device Management",
            MgmtClass::ComMgt => "Communication Management",
            MgmtClass::Snmp => "SNMP Tunneling",
            MgmtClass::DevAdm => "Device Administration",
            MgmtClass::BootMgt => "Boot Management",
            MgmtClass::Bis => "Bootable Image Services",
            MgmtClass::CongestionMgt => "Congestion Control",
            MgmtClass::SubnDirectedRoute => "Subnet Management (Directed Route)",
            MgmtClass::Unknown(_) if self.is_vendor() => "Vendor Specific",
            MgmtClass::Unknown(_) => "Unknown",
        }
    }

    /// Whether this is a subnet management class (0x01 or 0x81): an SMP, sent on QP0.
    pub fn is_smp(self) -> bool {
        matches!(self, MgmtClass::SubnLid | MgmtClass::SubnDirectedRoute)
    }

    /// Whether this is one of the vendor-specific ranges 0x09–0x0F or 0x30–0x4F.
    pub fn is_vendor(self) -> bool {
        let v = u8::from(self);
        (0x09..=0x0F).contains(&v) || (0x30..=0x4F).contains(&v)
    }
}

impl fmt::Display for MgmtClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

enum_with_unknown! {
    /// The method (IBA §13.4.5 table 107 and §15.2.2 table 189), the fourth byte of every
    /// MAD *including* the response bit R: `GetResp` is 0x81.
    pub enum Method(u8) {
        /// Get: read an attribute.
        Get = 0x01,
        /// Set: write an attribute.
        Set = 0x02,
        /// Send: a datagram that asks for no response.
        Send = 0x03,
        /// Trap: an unsolicited notice.
        Trap = 0x05,
        /// Report: the SA forwards a notice to a subscriber.
        Report = 0x06,
        /// TrapRepress: stops the repetition of a trap.
        TrapRepress = 0x07,
        /// GetTable: all records that match (SA).
        GetTable = 0x12,
        /// GetTraceTable: the path trace records (SA).
        GetTraceTable = 0x13,
        /// GetMulti: a multi-packet request (SA).
        GetMulti = 0x14,
        /// Delete: remove a record (SA).
        Delete = 0x15,
        /// GetResp: the response to Get and Set.
        GetResp = 0x81,
        /// ReportResp: the response to Report.
        ReportResp = 0x86,
        /// GetTableResp: the response to GetTable and GetTraceTable.
        GetTableResp = 0x92,
        /// GetMultiResp: the response to GetMulti.
        GetMultiResp = 0x94,
        /// DeleteResp: the response to Delete.
        DeleteResp = 0x95,
    }
}

impl Method {
    /// The class-independent name of IBA §13.4.5 ("Get", "GetResp", ...), "Unknown" otherwise.
    /// See [`method_name`] for the class-qualified name ("SubnGet").
    pub fn name(self) -> &'static str {
        match self {
            Method::Get => "Get",
            Method::Set => "Set",
            Method::Send => "Send",
            Method::Trap => "Trap",
            Method::Report => "Report",
            Method::TrapRepress => "TrapRepress",
            Method::GetTable => "GetTable",
            Method::GetTraceTable => "GetTraceTable",
            Method::GetMulti => "GetMulti",
            Method::Delete => "Delete",
            Method::GetResp => "GetResp",
            Method::ReportResp => "ReportResp",
            Method::GetTableResp => "GetTableResp",
            Method::GetMultiResp => "GetMultiResp",
            Method::DeleteResp => "DeleteResp",
            Method::Unknown(_) => "Unknown",
        }
    }

    /// Whether the R (response) bit is set.
    pub fn is_response(self) -> bool {
        u8::from(self) & METHOD_RESPONSE_BIT != 0
    }

    /// The method of the response to this request: GetResp for Get and Set, TrapRepress for
    /// Trap, ReportResp for Report, GetTableResp for GetTable and GetTraceTable, GetMultiResp
    /// for GetMulti, DeleteResp for Delete; `None` for Send and for responses.
    pub fn response(self) -> Option<Method> {
        match self {
            Method::Get | Method::Set => Some(Method::GetResp),
            Method::Trap => Some(Method::TrapRepress),
            Method::Report => Some(Method::ReportResp),
            Method::GetTable | Method::GetTraceTable => Some(Method::GetTableResp),
            Method::GetMulti => Some(Method::GetMultiResp),
            Method::Delete => Some(Method::DeleteResp),
            _ => None,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Method::Unknown(v) => write!(f, "Unknown(0x{v:02x})"),
            known => f.write_str(known.name()),
        }
    }
}

/// The class-qualified method name the spec's class chapters use, which Wireshark prints too:
/// "SubnGet"/"SubnSet"/"SubnGetResp"/"SubnTrap"/"SubnTrapRepress" for SMPs (IBA §14.2.2),
/// "SubnAdmGet", "SubnAdmGetTable", "SubnAdmGetTableResp", ... for the SA (§15.2.2),
/// "PerfGet"/"PerfSet"/"PerfGetResp" for the PMA (§16.1.1). Other classes get
/// [`Method::name`]. (Wireshark calls 0x07 "SubnTrapResp"; the spec's name is kept here.)
pub fn method_name(class: MgmtClass, method: Method) -> &'static str {
    match class {
        MgmtClass::SubnLid | MgmtClass::SubnDirectedRoute => match method {
            Method::Get => "SubnGet",
            Method::Set => "SubnSet",
            Method::GetResp => "SubnGetResp",
            Method::Trap => "SubnTrap",
            Method::TrapRepress => "SubnTrapRepress",
            other => other.name(),
        },
        MgmtClass::SubnAdm => match method {
            Method::Get => "SubnAdmGet",
            Method::Set => "SubnAdmSet",
            Method::GetResp => "SubnAdmGetResp",
            Method::Report => "SubnAdmReport",
            Method::ReportResp => "SubnAdmReportResp",
            Method::GetTable => "SubnAdmGetTable",
            Method::GetTableResp => "SubnAdmGetTableResp",
            Method::GetTraceTable => "SubnAdmGetTraceTable",
            Method::GetMulti => "SubnAdmGetMulti",
            Method::GetMultiResp => "SubnAdmGetMultiResp",
            Method::Delete => "SubnAdmDelete",
            Method::DeleteResp => "SubnAdmDeleteResp",
            other => other.name(),
        },
        MgmtClass::PerfMgt => match method {
            Method::Get => "PerfGet",
            Method::Set => "PerfSet",
            Method::GetResp => "PerfGetResp",
            other => other.name(),
        },
        _ => method.name(),
    }
}

/// An AttributeID (IBA §13.4.2). The same number names different attributes in different
/// classes (0x0011 is NodeInfo for SMPs, NodeRecord for the SA, PortSamplesResult for the
/// PMA), hence the constants below are grouped by class and [`attr_name`] takes the class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct AttrId(pub u16);

impl AttrId {
    // --- Common to all classes (IBA §13.4.8) ---
    /// ClassPortInfo (all classes).
    pub const CLASS_PORT_INFO: AttrId = AttrId(0x0001);
    /// Notice (SMP and SA).
    pub const NOTICE: AttrId = AttrId(0x0002);
    /// InformInfo (SMP and SA).
    pub const INFORM_INFO: AttrId = AttrId(0x0003);

    // --- Subnet management, IBA §14.2.5 table 145 ---
    /// NodeDescription (SMP).
    pub const NODE_DESCRIPTION: AttrId = AttrId(0x0010);
    /// NodeInfo (SMP).
    pub const NODE_INFO: AttrId = AttrId(0x0011);
    /// SwitchInfo (SMP).
    pub const SWITCH_INFO: AttrId = AttrId(0x0012);
    /// GUIDInfo (SMP).
    pub const GUID_INFO: AttrId = AttrId(0x0014);
    /// PortInfo (SMP).
    pub const PORT_INFO: AttrId = AttrId(0x0015);
    /// P_KeyTable (SMP).
    pub const P_KEY_TABLE: AttrId = AttrId(0x0016);
    /// SLtoVLMappingTable (SMP).
    pub const SL_TO_VL_TABLE: AttrId = AttrId(0x0017);
    /// VLArbitrationTable (SMP).
    pub const VL_ARBITRATION_TABLE: AttrId = AttrId(0x0018);
    /// LinearForwardingTable (SMP).
    pub const LINEAR_FORWARDING_TABLE: AttrId = AttrId(0x0019);
    /// RandomForwardingTable (SMP).
    pub const RANDOM_FORWARDING_TABLE: AttrId = AttrId(0x001A);
    /// MulticastForwardingTable (SMP).
    pub const MULTICAST_FORWARDING_TABLE: AttrId = AttrId(0x001B);
    /// LinkSpeedWidthPairsTable (SMP).
    pub const LINK_SPEED_WIDTH_PAIRS_TABLE: AttrId = AttrId(0x001C);
    /// SMInfo (SMP).
    pub const SM_INFO: AttrId = AttrId(0x0020);
    /// VendorDiag (SMP).
    pub const VENDOR_DIAG: AttrId = AttrId(0x0030);
    /// LedInfo (SMP).
    pub const LED_INFO: AttrId = AttrId(0x0031);
    /// MLNXExtendedPortInfo (SMP, Mellanox vendor-specific range): the FDR10 speed fields
    /// infiniband-diags read from Mellanox devices (libibmad `IB_ATTR_MLNX_EXT_PORT_INFO`).
    pub const MLNX_EXTENDED_PORT_INFO: AttrId = AttrId(0xFF90);

    // --- Subnet administration, IBA §15.2.5 table 195 ---
    /// NodeRecord (SA).
    pub const NODE_RECORD: AttrId = AttrId(0x0011);
    /// PortInfoRecord (SA).
    pub const PORT_INFO_RECORD: AttrId = AttrId(0x0012);
    /// SLtoVLMappingTableRecord (SA).
    pub const SL_TO_VL_TABLE_RECORD: AttrId = AttrId(0x0013);
    /// SwitchInfoRecord (SA).
    pub const SWITCH_INFO_RECORD: AttrId = AttrId(0x0014);
    /// LinearForwardingTableRecord (SA).
    pub const LINEAR_FORWARDING_TABLE_RECORD: AttrId = AttrId(0x0015);
    /// RandomForwardingTableRecord (SA).
    pub const RANDOM_FORWARDING_TABLE_RECORD: AttrId = AttrId(0x0016);
    /// MulticastForwardingTableRecord (SA).
    pub const MULTICAST_FORWARDING_TABLE_RECORD: AttrId = AttrId(0x0017);
    /// SMInfoRecord (SA).
    pub const SM_INFO_RECORD: AttrId = AttrId(0x0018);
    /// LinkRecord (SA).
    pub const LINK_RECORD: AttrId = AttrId(0x0020);
    /// GuidInfoRecord (SA).
    pub const GUID_INFO_RECORD: AttrId = AttrId(0x0030);
    /// ServiceRecord (SA).
    pub const SERVICE_RECORD: AttrId = AttrId(0x0031);
    /// P_KeyTableRecord (SA).
    pub const P_KEY_TABLE_RECORD: AttrId = AttrId(0x0033);
    /// PathRecord (SA).
    pub const PATH_RECORD: AttrId = AttrId(0x0035);
    /// VLArbitrationTableRecord (SA).
    pub const VL_ARBITRATION_TABLE_RECORD: AttrId = AttrId(0x0036);
    /// MCMemberRecord (SA).
    pub const MC_MEMBER_RECORD: AttrId = AttrId(0x0038);
    /// TraceRecord (SA).
    pub const TRACE_RECORD: AttrId = AttrId(0x0039);
    /// MultiPathRecord (SA).
    pub const MULTI_PATH_RECORD: AttrId = AttrId(0x003A);
    /// ServiceAssociationRecord (SA).
    pub const SERVICE_ASSOCIATION_RECORD: AttrId = AttrId(0x003B);
    /// InformInfoRecord (SA).
    pub const INFORM_INFO_RECORD: AttrId = AttrId(0x00F3);

    // --- Performance management, IBA §16.1.3 table 216 ---
    /// PortSamplesControl (PMA).
    pub const PORT_SAMPLES_CONTROL: AttrId = AttrId(0x0010);
    /// PortSamplesResult (PMA).
    pub const PORT_SAMPLES_RESULT: AttrId = AttrId(0x0011);
    /// PortCounters (PMA).
    pub const PORT_COUNTERS: AttrId = AttrId(0x0012);
    /// PortCountersExtended (PMA).
    pub const PORT_COUNTERS_EXTENDED: AttrId = AttrId(0x001D);
    /// PortXmitDataSL (PMA).
    pub const PORT_XMIT_DATA_SL: AttrId = AttrId(0x0036);
    /// PortRcvDataSL (PMA).
    pub const PORT_RCV_DATA_SL: AttrId = AttrId(0x0037);
}

impl fmt::Display for AttrId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:04x}", self.0)
    }
}

/// The spec's name of attribute `id` in management class `class`, or `None` if this crate
/// does not know it. The same number means different things in different classes.
pub fn attr_name(class: MgmtClass, id: AttrId) -> Option<&'static str> {
    let common = match id.0 {
        0x0001 => Some("ClassPortInfo"),
        _ => None,
    };
    let specific = match class {
        MgmtClass::SubnLid | MgmtClass::SubnDirectedRoute => match id.0 {
            0x0002 => Some("Notice"),
            0x0003 => Some("InformInfo"),
            0x0010 => Some("NodeDescription"),
            0x0011 => Some("NodeInfo"),
            0x0012 => Some("SwitchInfo"),
            0x0014 => Some("GUIDInfo"),
            0x0015 => Some("PortInfo"),
            0x0016 => Some("P_KeyTable"),
            0x0017 => Some("SLtoVLMappingTable"),
            0x0018 => Some("VLArbitrationTable"),
            0x0019 => Some("LinearForwardingTable"),
            0x001A => Some("RandomForwardingTable"),
            0x001B => Some("MulticastForwardingTable"),
            0x001C => Some("LinkSpeedWidthPairsTable"),
            0x0020 => Some("SMInfo"),
            0x0030 => Some("VendorDiag"),
            0x0031 => Some("LedInfo"),
            _ => None,
        },
        MgmtClass::SubnAdm => match id.0 {
            0x0002 => Some("Notice"),
            0x0003 => Some("InformInfo"),
            0x0011 => Some("NodeRecord"),
            0x0012 => Some("PortInfoRecord"),
            0x0013 => Some("SLtoVLMappingTableRecord"),
            0x0014 => Some("SwitchInfoRecord"),
            0x0015 => Some("LinearForwardingTableRecord"),
            0x0016 => Some("RandomForwardingTableRecord"),
            0x0017 => Some("MulticastForwardingTableRecord"),
            0x0018 => Some("SMInfoRecord"),
            0x0020 => Some("LinkRecord"),
            0x0030 => Some("GuidInfoRecord"),
            0x0031 => Some("ServiceRecord"),
            0x0033 => Some("P_KeyTableRecord"),
            0x0035 => Some("PathRecord"),
            0x0036 => Some("VLArbitrationTableRecord"),
            0x0038 => Some("MCMemberRecord"),
            0x0039 => Some("TraceRecord"),
            0x003A => Some("MultiPathRecord"),
            0x003B => Some("ServiceAssociationRecord"),
            0x00F3 => Some("InformInfoRecord"),
            _ => None,
        },
        MgmtClass::PerfMgt => match id.0 {
            0x0010 => Some("PortSamplesControl"),
            0x0011 => Some("PortSamplesResult"),
            0x0012 => Some("PortCounters"),
            0x001D => Some("PortCountersExtended"),
            0x0036 => Some("PortXmitDataSL"),
            0x0037 => Some("PortRcvDataSL"),
            _ => None,
        },
        // IBA §12.6: the communication manager's messages.
        MgmtClass::ComMgt => match id.0 {
            0x0010 => Some("ConnectRequest"),
            0x0011 => Some("MsgRcptAck"),
            0x0012 => Some("ConnectReject"),
            0x0013 => Some("ConnectReply"),
            0x0014 => Some("ReadyToUse"),
            0x0015 => Some("DisconnectRequest"),
            0x0016 => Some("DisconnectReply"),
            0x0017 => Some("ServiceIDResReq"),
            0x0018 => Some("ServiceIDResReqResp"),
            0x0019 => Some("LoadAlternatePath"),
            0x001A => Some("AlternatePathResponse"),
            _ => None,
        },
        _ => None,
    };
    specific.or(common)
}

/// A read/write view of the common MAD header at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length (see the crate's panic-freedom contract).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole common MAD header.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the 24-byte common header; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated("MAD header"))
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// BaseVersion (1).
    #[inline]
    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[field::BASE_VERSION]
    }

    /// MgmtClass.
    #[inline]
    pub fn mgmt_class(&self) -> MgmtClass {
        MgmtClass::from(self.buffer.as_ref()[field::MGMT_CLASS])
    }

    /// ClassVersion.
    #[inline]
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[field::CLASS_VERSION]
    }

    /// Method, the whole byte including the R bit.
    #[inline]
    pub fn method(&self) -> Method {
        Method::from(self.buffer.as_ref()[field::METHOD])
    }

    /// The R bit: this MAD is a response.
    #[inline]
    pub fn is_response(&self) -> bool {
        self.buffer.as_ref()[field::METHOD] & METHOD_RESPONSE_BIT != 0
    }

    /// Status, all 16 bits (for a directed-route SMP bit 15 is the D bit).
    #[inline]
    pub fn status(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::STATUS)
    }

    /// ClassSpecific (hop pointer and hop count in a directed-route SMP).
    #[inline]
    pub fn class_specific(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CLASS_SPECIFIC)
    }

    /// TransactionID.
    #[inline]
    pub fn tid(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::TID)
    }

    /// AttributeID.
    #[inline]
    pub fn attr_id(&self) -> AttrId {
        AttrId(read_u16(self.buffer.as_ref(), field::ATTR_ID))
    }

    /// AttributeModifier.
    #[inline]
    pub fn attr_mod(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::ATTR_MOD)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets BaseVersion.
    #[inline]
    pub fn set_base_version(&mut self, value: u8) {
        self.buffer.as_mut()[field::BASE_VERSION] = value;
    }

    /// Sets MgmtClass.
    #[inline]
    pub fn set_mgmt_class(&mut self, value: MgmtClass) {
        self.buffer.as_mut()[field::MGMT_CLASS] = value.into();
    }

    /// Sets ClassVersion.
    #[inline]
    pub fn set_class_version(&mut self, value: u8) {
        self.buffer.as_mut()[field::CLASS_VERSION] = value;
    }

    /// Sets Method, the whole byte including the R bit.
    #[inline]
    pub fn set_method(&mut self, value: Method) {
        self.buffer.as_mut()[field::METHOD] = value.into();
    }

    /// Sets Status, all 16 bits.
    #[inline]
    pub fn set_status(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::STATUS, value);
    }

    /// Sets ClassSpecific.
    #[inline]
    pub fn set_class_specific(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CLASS_SPECIFIC, value);
    }

    /// Sets TransactionID.
    #[inline]
    pub fn set_tid(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::TID, value);
    }

    /// Sets AttributeID and clears the reserved 16 bits after it.
    #[inline]
    pub fn set_attr_id(&mut self, value: AttrId) {
        let b = self.buffer.as_mut();
        write_u16(b, field::ATTR_ID, value.0);
        write_u16(b, field::RESERVED, 0);
    }

    /// Sets AttributeModifier.
    #[inline]
    pub fn set_attr_mod(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::ATTR_MOD, value);
    }
}

/// The common MAD header. The reserved field is not kept: it is emitted as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// BaseVersion (1).
    pub base_version: u8,
    /// MgmtClass.
    pub mgmt_class: MgmtClass,
    /// ClassVersion (1 for SMP and PMA, 2 for SA).
    pub class_version: u8,
    /// Method, the full byte including the R bit.
    pub method: Method,
    /// Status (see [`status`]).
    pub status: u16,
    /// ClassSpecific.
    pub class_specific: u16,
    /// TransactionID.
    pub tid: u64,
    /// AttributeID.
    pub attr_id: AttrId,
    /// AttributeModifier.
    pub attr_mod: u32,
}

impl Repr {
    /// A request header: BaseVersion 1, status and ClassSpecific 0.
    pub const fn request(
        mgmt_class: MgmtClass,
        class_version: u8,
        method: Method,
        tid: u64,
        attr_id: AttrId,
        attr_mod: u32,
    ) -> Repr {
        Repr {
            base_version: BASE_VERSION,
            mgmt_class,
            class_version,
            method,
            status: status::SUCCESS,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod,
        }
    }

    /// The header of the response to this request: the response method (see
    /// [`Method::response`]; a MAD without one gets its method with the R bit set) and
    /// `status`; everything else is kept, as responders must (IBA §13.4.6.2).
    pub fn response(&self, status: u16) -> Repr {
        let method = self
            .method
            .response()
            .unwrap_or_else(|| Method::from(u8::from(self.method) | METHOD_RESPONSE_BIT));
        Repr {
            method,
            status,
            ..*self
        }
    }

    /// Parses the common MAD header.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            base_version: packet.base_version(),
            mgmt_class: packet.mgmt_class(),
            class_version: packet.class_version(),
            method: packet.method(),
            status: packet.status(),
            class_specific: packet.class_specific(),
            tid: packet.tid(),
            attr_id: packet.attr_id(),
            attr_mod: packet.attr_mod(),
        })
    }

    /// The number of bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_base_version(self.base_version);
        packet.set_mgmt_class(self.mgmt_class);
        packet.set_class_version(self.class_version);
        packet.set_method(self.method);
        packet.set_status(self.status);
        packet.set_class_specific(self.class_specific);
        packet.set_tid(self.tid);
        packet.set_attr_id(self.attr_id);
        packet.set_attr_mod(self.attr_mod);
    }

    /// The spec name of this MAD's attribute, if known (see [`attr_name`]).
    pub fn attr_name(&self) -> Option<&'static str> {
        attr_name(self.mgmt_class, self.attr_id)
    }

    /// The class-qualified method name (see [`method_name`]).
    pub fn method_name(&self) -> &'static str {
        method_name(self.mgmt_class, self.method)
    }
}

/// A whole MAD, decoded down to the layout of its management class.
///
/// [`Body::parse`] picks the layout from MgmtClass: 0x01 and 0x81 are SMPs, 0x03 the SA,
/// 0x04 the PMA; any other class keeps its 232 bytes after the common header raw. Nothing
/// else about the header (versions, method, status) makes parsing fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body<'a> {
    /// A subnet management packet, LID-routed or directed-route.
    Smp(smp::Repr),
    /// A subnet administration MAD.
    Sa(sa::Repr<'a>),
    /// A performance management MAD.
    Perf(perf::Repr<'a>),
    /// Any other class: the common header and the 232 bytes after it.
    Other {
        /// The common header.
        header: Repr,
        /// Bytes 24..256 of the MAD.
        data: &'a [u8],
    },
}

impl<'a> Body<'a> {
    /// Parses a MAD: the first [`MAD_LEN`] bytes of `bytes` (later bytes are ignored).
    pub fn parse(bytes: &'a [u8]) -> Result<Body<'a>> {
        let bytes = bytes.get(..MAD_LEN).ok_or(Error::Truncated("MAD"))?;
        let header = Repr::parse(&Packet::new_unchecked(bytes))?;
        Ok(match header.mgmt_class {
            MgmtClass::SubnLid | MgmtClass::SubnDirectedRoute => {
                Body::Smp(smp::Repr::parse(&smp::Packet::new_unchecked(bytes))?)
            }
            MgmtClass::SubnAdm => Body::Sa(sa::Repr::parse(&sa::Packet::new_unchecked(bytes))?),
            MgmtClass::PerfMgt => {
                Body::Perf(perf::Repr::parse(&perf::Packet::new_unchecked(bytes))?)
            }
            _ => Body::Other {
                header,
                data: bytes.get(HEADER_LEN..).unwrap_or_default(),
            },
        })
    }

    /// The common header. For a directed-route SMP, see [`smp::Repr`] for how the D bit, hop
    /// pointer and hop count are kept apart from `status` and `class_specific`.
    pub fn header(&self) -> &Repr {
        match self {
            Body::Smp(r) => &r.header,
            Body::Sa(r) => &r.header,
            Body::Perf(r) => &r.header,
            Body::Other { header, .. } => header,
        }
    }

    /// The directed-route part of a directed-route SMP.
    pub fn directed_route(&self) -> Option<&smp::DirectedRoute> {
        match self {
            Body::Smp(r) => r.dr.as_ref(),
            _ => None,
        }
    }

    /// The attribute's name in its class, if known.
    pub fn attr_name(&self) -> Option<&'static str> {
        self.header().attr_name()
    }

    /// The number of bytes `emit` writes: always [`MAD_LEN`].
    pub const fn buffer_len(&self) -> usize {
        MAD_LEN
    }

    /// Writes the whole MAD into the first [`MAD_LEN`] bytes of `buffer`; reserved fields
    /// become zero. `buffer` must be at least [`MAD_LEN`] bytes long.
    pub fn emit(&self, buffer: &mut [u8]) {
        match self {
            Body::Smp(r) => r.emit(&mut smp::Packet::new_unchecked(buffer)),
            Body::Sa(r) => r.emit(&mut sa::Packet::new_unchecked(buffer)),
            Body::Perf(r) => r.emit(&mut perf::Packet::new_unchecked(buffer)),
            Body::Other { header, data } => {
                header.emit(&mut Packet::new_unchecked(&mut *buffer));
                copy_padded(&mut buffer[HEADER_LEN..MAD_LEN], data);
            }
        }
    }
}

/// Parses a whole MAD; the same as [`Body::parse`].
pub fn parse(bytes: &[u8]) -> Result<Body<'_>> {
    Body::parse(bytes)
}

/// The answer of a MAD layer to a request no agent takes (Linux `ib_mad`'s unmatched
/// response, as the kernel sends it): a Get or Set comes back as GetResp with
/// UNSUPPORTED_METHOD_ATTR (and the D bit for a directed-route SMP), the rest of the MAD as it
/// came; any other method gets no answer (`None`, also for bytes that are no MAD header).
pub fn unmatched_response(request: &[u8; MAD_LEN]) -> Option<[u8; MAD_LEN]> {
    let header = Repr::parse(&Packet::new_unchecked(&request[..])).ok()?;
    if !matches!(header.method, Method::Get | Method::Set) {
        return None;
    }
    let mut h = header.response(status::UNSUPPORTED_METHOD_ATTR);
    h.method = Method::GetResp;
    if header.mgmt_class == MgmtClass::SubnDirectedRoute {
        h.status |= status::DIRECTION;
    }
    let mut out = *request;
    h.emit(&mut Packet::new_unchecked(&mut out[..]));
    Some(out)
}

/// Copies as much of `src` as fits into `dst` and zeroes the rest of `dst`.
pub(crate) fn copy_padded(dst: &mut [u8], src: &[u8]) {
    let n = src.len().min(dst.len());
    dst[..n].copy_from_slice(&src[..n]);
    dst[n..].fill(0);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_get_or_set_nobody_takes_comes_back_unsupported_and_nothing_else_does() {
        let mut mad = [0u8; MAD_LEN];
        Repr::request(MgmtClass::SubnAdm, 2, Method::Set, 0x55, AttrId(0x11), 3)
            .emit(&mut Packet::new_unchecked(&mut mad[..]));
        mad[100] = 0xab;
        let r = unmatched_response(&mad).unwrap();
        let h = Repr::parse(&Packet::new_unchecked(&r[..])).unwrap();
        assert_eq!(
            (h.method, h.status, h.tid, h.attr_id, h.class_version),
            (
                Method::GetResp,
                status::UNSUPPORTED_METHOD_ATTR,
                0x55,
                AttrId(0x11),
                2
            )
        );
        assert_eq!(r[100], 0xab, "the rest as it came");
        mad[3] = u8::from(Method::GetResp);
        assert_eq!(unmatched_response(&mad), None);
        mad[3] = u8::from(Method::Send);
        assert_eq!(unmatched_response(&mad), None);
        mad[1] = u8::from(MgmtClass::SubnDirectedRoute);
        mad[3] = u8::from(Method::Get);
        let r = unmatched_response(&mad).unwrap();
        let h = Repr::parse(&Packet::new_unchecked(&r[..])).unwrap();
        assert_eq!(
            h.status,
            status::UNSUPPORTED_METHOD_ATTR | status::DIRECTION
        );
    }
    use proptest::prelude::*;

    // A SubnGet(NodeInfo) header as opensm's first discovery SMP carries it: class 0x81,
    // hop pointer 0, hop count 1, TID 0x0000_1234_0000_0001.
    pub(crate) static HEADER: [u8; 24] = [
        0x01, 0x81, 0x01, 0x01, // base 1, class DR, class version 1, SubnGet
        0x00, 0x00, 0x00, 0x01, // status 0, hop ptr 0, hop cnt 1
        0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x00, 0x01, // TID
        0x00, 0x11, 0x00, 0x00, // NodeInfo, reserved
        0x00, 0x00, 0x00, 0x00, // attribute modifier
    ];

    fn repr() -> Repr {
        Repr {
            base_version: 1,
            mgmt_class: MgmtClass::SubnDirectedRoute,
            class_version: 1,
            method: Method::Get,
            status: 0,
            class_specific: 0x0001,
            tid: 0x0000_1234_0000_0001,
            attr_id: AttrId::NODE_INFO,
            attr_mod: 0,
        }
    }

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&HEADER[..]).unwrap();
        assert_eq!(packet.base_version(), 1);
        assert_eq!(packet.mgmt_class(), MgmtClass::SubnDirectedRoute);
        assert_eq!(packet.class_version(), 1);
        assert_eq!(packet.method(), Method::Get);
        assert!(!packet.is_response());
        assert_eq!(packet.status(), 0);
        assert_eq!(packet.class_specific(), 1);
        assert_eq!(packet.tid(), 0x1234_0000_0001);
        assert_eq!(packet.attr_id(), AttrId::NODE_INFO);
        assert_eq!(packet.attr_mod(), 0);
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0xa5u8; 24];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_base_version(1);
        packet.set_mgmt_class(MgmtClass::SubnDirectedRoute);
        packet.set_class_version(1);
        packet.set_method(Method::Get);
        packet.set_status(0);
        packet.set_class_specific(1);
        packet.set_tid(0x1234_0000_0001);
        packet.set_attr_id(AttrId::NODE_INFO);
        packet.set_attr_mod(0);
        assert_eq!(bytes, HEADER);
    }

    #[test]
    fn test_parse() {
        assert_eq!(Repr::parse(&Packet::new_unchecked(&HEADER[..])), Ok(repr()));
    }

    #[test]
    fn test_emit() {
        let mut bytes = [0xffu8; 24];
        repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, HEADER);
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            Packet::new_checked(&HEADER[..23]).unwrap_err(),
            Error::Truncated("MAD header")
        );
        assert!(Repr::parse(&Packet::new_unchecked(&HEADER[..0])).is_err());
        assert_eq!(
            Body::parse(&[0u8; MAD_LEN - 1]).unwrap_err(),
            Error::Truncated("MAD")
        );
    }

    #[test]
    fn method_codes_and_names() {
        assert_eq!(u8::from(Method::GetResp), 0x81);
        assert_eq!(Method::from(0x92), Method::GetTableResp);
        assert!(Method::GetResp.is_response());
        assert!(!Method::TrapRepress.is_response());
        assert_eq!(Method::Set.response(), Some(Method::GetResp));
        assert_eq!(Method::GetTable.response(), Some(Method::GetTableResp));
        assert_eq!(Method::Trap.response(), Some(Method::TrapRepress));
        assert_eq!(Method::Send.response(), None);
        assert_eq!(Method::GetResp.name(), "GetResp");
        assert_eq!(
            method_name(MgmtClass::SubnDirectedRoute, Method::Get),
            "SubnGet"
        );
        assert_eq!(
            method_name(MgmtClass::SubnAdm, Method::GetTableResp),
            "SubnAdmGetTableResp"
        );
        assert_eq!(
            method_name(MgmtClass::PerfMgt, Method::GetResp),
            "PerfGetResp"
        );
        assert_eq!(method_name(MgmtClass::ComMgt, Method::Send), "Send");
        assert_eq!(
            method_name(MgmtClass::SubnLid, Method::from(0x7f)),
            "Unknown"
        );
    }

    #[test]
    fn class_codes_and_names() {
        assert_eq!(MgmtClass::from(0x81), MgmtClass::SubnDirectedRoute);
        assert_eq!(u8::from(MgmtClass::SubnAdm), 0x03);
        assert!(MgmtClass::SubnLid.is_smp() && !MgmtClass::SubnAdm.is_smp());
        assert_eq!(MgmtClass::from(0x0A).name(), "Vendor");
        assert_eq!(MgmtClass::from(0x30).description(), "Vendor Specific");
        assert_eq!(MgmtClass::from(0x02).name(), "Unknown");
    }

    #[test]
    fn attribute_names_depend_on_class() {
        let id = AttrId(0x0011);
        assert_eq!(attr_name(MgmtClass::SubnLid, id), Some("NodeInfo"));
        assert_eq!(
            attr_name(MgmtClass::SubnDirectedRoute, id),
            Some("NodeInfo")
        );
        assert_eq!(attr_name(MgmtClass::SubnAdm, id), Some("NodeRecord"));
        assert_eq!(attr_name(MgmtClass::PerfMgt, id), Some("PortSamplesResult"));
        assert_eq!(attr_name(MgmtClass::ComMgt, id), Some("MsgRcptAck"));
        assert_eq!(attr_name(MgmtClass::BoardMgt, id), None);
        assert_eq!(
            attr_name(MgmtClass::ComMgt, AttrId::CLASS_PORT_INFO),
            Some("ClassPortInfo")
        );
        assert_eq!(
            attr_name(MgmtClass::SubnAdm, AttrId::PATH_RECORD),
            Some("PathRecord")
        );
        assert_eq!(
            attr_name(MgmtClass::PerfMgt, AttrId::PORT_COUNTERS_EXTENDED),
            Some("PortCountersExtended")
        );
        assert_eq!(
            attr_name(MgmtClass::SubnLid, AttrId::P_KEY_TABLE),
            Some("P_KeyTable")
        );
    }

    #[test]
    fn status_codes() {
        assert_eq!(status::invalid_field_code(status::BAD_VERSION), 1);
        assert_eq!(status::invalid_field_code(status::UNSUPPORTED_METHOD), 2);
        assert_eq!(
            status::invalid_field_code(status::UNSUPPORTED_METHOD_ATTR),
            3
        );
        assert_eq!(status::invalid_field_code(status::INVALID_ATTR_VALUE), 7);
        assert_eq!(
            status::invalid_field_code(status::BUSY | status::DIRECTION),
            0
        );
    }

    #[test]
    fn response_header() {
        let resp = repr().response(status::INVALID_ATTR_VALUE);
        assert_eq!(resp.method, Method::GetResp);
        assert_eq!(resp.status, 0x001C);
        assert_eq!(resp.tid, repr().tid);
        let send = Repr {
            method: Method::Send,
            ..repr()
        };
        assert_eq!(u8::from(send.response(0).method), 0x83);
    }

    #[test]
    fn body_other_class_keeps_raw_data() {
        let mut bytes = [0u8; MAD_LEN];
        bytes[..24].copy_from_slice(&HEADER);
        bytes[1] = 0x07; // ComMgt
        bytes[24] = 0xAB;
        bytes[255] = 0xCD;
        let body = Body::parse(&bytes).unwrap();
        assert_eq!(body.header().mgmt_class, MgmtClass::ComMgt);
        assert!(body.directed_route().is_none());
        match &body {
            Body::Other { data, .. } => {
                assert_eq!(data.len(), MAD_LEN - HEADER_LEN);
                assert_eq!((data[0], data[231]), (0xAB, 0xCD));
            }
            other => panic!("unexpected {other:?}"),
        }
        let mut out = [0x55u8; MAD_LEN];
        body.emit(&mut out);
        assert_eq!(out, bytes);
    }

    /// A strategy over every header `Repr`.
    pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> {
        (
            any::<(u8, u8, u8, u8)>(),
            any::<(u16, u16)>(),
            any::<u64>(),
            any::<u16>(),
            any::<u32>(),
        )
            .prop_map(
                |((bv, class, cv, method), (status, cs), tid, attr, attr_mod)| Repr {
                    base_version: bv,
                    mgmt_class: MgmtClass::from(class),
                    class_version: cv,
                    method: Method::from(method),
                    status,
                    class_specific: cs,
                    tid,
                    attr_id: AttrId(attr),
                    attr_mod,
                },
            )
    }

    proptest! {
        #[test]
        fn parse_emit_roundtrip(repr in arb_repr()) {
            let mut bytes = [0u8; HEADER_LEN];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(Repr::parse(&Packet::new_unchecked(&bytes[..])), Ok(repr));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Repr::parse(&Packet::new_unchecked(&bytes[..]));
            if let Ok(body) = Body::parse(&bytes) {
                let _ = body.attr_name();
                let _ = body.header().method_name();
                let mut out = [0u8; MAD_LEN];
                body.emit(&mut out);
            }
        }

        #[test]
        fn body_roundtrip_is_stable(bytes in proptest::collection::vec(any::<u8>(), MAD_LEN)) {
            // parse ∘ emit ∘ parse = parse: re-emitting a parsed MAD changes only reserved bits.
            let body = Body::parse(&bytes).unwrap();
            let mut out = [0u8; MAD_LEN];
            body.emit(&mut out);
            prop_assert_eq!(Body::parse(&out).unwrap(), body);
        }
    }
}
