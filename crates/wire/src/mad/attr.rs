//! Subnet management attributes (IBA vol 1 §14.2.5): the contents of an SMP's 64-byte data
//! area.
//!
//! Every attribute is a plain struct with `LEN` (its length in bytes), `parse(&[u8])` (checks
//! the length, never panics) and `emit(&mut [u8])` (writes exactly `LEN` bytes, reserved bits
//! as zero; the buffer must be at least `LEN` bytes long). The [`SmpAttribute`] trait adds the
//! AttributeID and conversions from and to a whole SMP data area.
//!
//! Bit positions were checked against the field tables of libibmad (`fields.c`, which gives
//! every field's bit offset) and the structures of opensm's `ib_types.h`.

use super::smp::DATA_LEN;
use super::AttrId;
use crate::bytes::{
    read_u16, read_u24, read_u32, read_u64, write_u16, write_u24, write_u32, write_u64,
};
use crate::mtu::Mtu;
use crate::{Error, Guid, Lid, PKey, Result};

/// An attribute that travels in the data area of an SMP.
pub trait SmpAttribute: Sized {
    /// The attribute's AttributeID.
    const ATTR_ID: AttrId;
    /// The attribute's length in bytes (at most 64).
    const LEN: usize;
    /// Parses the attribute from the start of an SMP data area.
    fn from_data(data: &[u8]) -> Result<Self>;
    /// Writes the attribute into the start of an SMP data area (at least 64 bytes).
    fn write_data(&self, data: &mut [u8]);
    /// The attribute as a whole zero-padded SMP data area.
    fn to_data(&self) -> [u8; DATA_LEN] {
        let mut data = [0u8; DATA_LEN];
        self.write_data(&mut data);
        data
    }
}

macro_rules! smp_attribute {
    ($ty:ty, $id:expr) => {
        impl SmpAttribute for $ty {
            const ATTR_ID: AttrId = $id;
            const LEN: usize = <$ty>::LEN;
            fn from_data(data: &[u8]) -> Result<Self> {
                <$ty>::parse(data)
            }
            fn write_data(&self, data: &mut [u8]) {
                self.emit(data)
            }
        }
    };
}

fn take<'a>(bytes: &'a [u8], len: usize, what: &'static str) -> Result<&'a [u8]> {
    bytes.get(..len).ok_or(Error::Truncated(what))
}

enum_with_unknown! {
    /// NodeInfo.NodeType (IBA §14.2.5.3).
    pub enum NodeType(u8) {
        /// Channel adapter (an HCA or TCA).
        Ca = 1,
        /// Switch.
        Switch = 2,
        /// Router.
        Router = 3,
    }
}

impl NodeType {
    /// The name ibnetdiscover and smpquery print ("Channel Adapter", "Switch", "Router").
    pub fn name(self) -> &'static str {
        match self {
            NodeType::Ca => "Channel Adapter",
            NodeType::Switch => "Switch",
            NodeType::Router => "Router",
            NodeType::Unknown(_) => "Unknown",
        }
    }
}

/// NodeInfo (AttributeID 0x0011, IBA §14.2.5.3, 40 bytes).
///
/// ```text
///  0: BaseVersion(8) ClassVersion(8) NodeType(8) NumPorts(8)
///  4: SystemImageGUID(64)
/// 12: NodeGUID(64)
/// 20: PortGUID(64)
/// 28: PartitionCap(16) DeviceID(16)
/// 32: Revision(32)
/// 36: LocalPortNum(8) VendorID(24)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeInfo {
    /// BaseVersion of the MADs the node supports (1).
    pub base_version: u8,
    /// ClassVersion of subnet management the node supports (1).
    pub class_version: u8,
    /// NodeType.
    pub node_type: NodeType,
    /// NumPorts: physical ports (a switch's port 0 is not counted).
    pub num_ports: u8,
    /// SystemImageGUID.
    pub system_image_guid: Guid,
    /// NodeGUID.
    pub node_guid: Guid,
    /// PortGUID of the port the SMP arrived on (a switch's port 0 GUID for switches).
    pub port_guid: Guid,
    /// PartitionCap: entries in the P_Key table.
    pub partition_cap: u16,
    /// DeviceID.
    pub device_id: u16,
    /// Revision.
    pub revision: u32,
    /// LocalPortNum: the port the SMP arrived on.
    pub local_port_num: u8,
    /// VendorID (24 bits, an IEEE OUI).
    pub vendor_id: u32,
}

impl NodeInfo {
    /// Length in bytes.
    pub const LEN: usize = 40;

    /// Parses a NodeInfo.
    pub fn parse(bytes: &[u8]) -> Result<NodeInfo> {
        let b = take(bytes, Self::LEN, "NodeInfo")?;
        Ok(NodeInfo {
            base_version: b[0],
            class_version: b[1],
            node_type: NodeType::from(b[2]),
            num_ports: b[3],
            system_image_guid: Guid(read_u64(b, 4)),
            node_guid: Guid(read_u64(b, 12)),
            port_guid: Guid(read_u64(b, 20)),
            partition_cap: read_u16(b, 28),
            device_id: read_u16(b, 30),
            revision: read_u32(b, 32),
            local_port_num: b[36],
            vendor_id: read_u24(b, 37),
        })
    }

    /// Writes the NodeInfo into the first [`NodeInfo::LEN`] bytes of `bytes`.
    pub fn emit(&self, bytes: &mut [u8]) {
        let b = &mut bytes[..Self::LEN];
        b[0] = self.base_version;
        b[1] = self.class_version;
        b[2] = self.node_type.into();
        b[3] = self.num_ports;
        write_u64(b, 4, self.system_image_guid.0);
        write_u64(b, 12, self.node_guid.0);
        write_u64(b, 20, self.port_guid.0);
        write_u16(b, 28, self.partition_cap);
        write_u16(b, 30, self.device_id);
        write_u32(b, 32, self.revision);
        b[36] = self.local_port_num;
        write_u24(b, 37, self.vendor_id & 0x00FF_FFFF);
    }
}

smp_attribute!(NodeInfo, AttrId::NODE_INFO);

/// NodeDescription (AttributeID 0x0010, IBA §14.2.5.2): 64 bytes of UTF-8 text, NUL-padded
/// but not NUL-terminated when all 64 bytes are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeDescription {
    /// The 64 raw bytes.
    pub raw: [u8; 64],
}

impl Default for NodeDescription {
    fn default() -> Self {
        NodeDescription { raw: [0; 64] }
    }
}

impl NodeDescription {
    /// Length in bytes.
    pub const LEN: usize = 64;

    /// A description from `text`, truncated to 64 bytes (at a character boundary) and padded
    /// with NULs.
    pub fn new(text: &str) -> NodeDescription {
        let mut end = text.len().min(Self::LEN);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let mut raw = [0u8; 64];
        raw[..end].copy_from_slice(&text.as_bytes()[..end]);
        NodeDescription { raw }
    }

    /// The bytes up to the first NUL (all 64 if there is none).
    pub fn as_bytes(&self) -> &[u8] {
        let end = self.raw.iter().position(|&b| b == 0).unwrap_or(Self::LEN);
        &self.raw[..end]
    }

    /// The text up to the first NUL; if those bytes are not valid UTF-8, the longest valid
    /// prefix.
    pub fn text(&self) -> &str {
        let bytes = self.as_bytes();
        match core::str::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => core::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(),
        }
    }

    /// Parses a NodeDescription.
    pub fn parse(bytes: &[u8]) -> Result<NodeDescription> {
        let b = take(bytes, Self::LEN, "NodeDescription")?;
        let mut raw = [0u8; 64];
        raw.copy_from_slice(b);
        Ok(NodeDescription { raw })
    }

    /// Writes the 64 bytes into `bytes`.
    pub fn emit(&self, bytes: &mut [u8]) {
        bytes[..Self::LEN].copy_from_slice(&self.raw);
    }
}

smp_attribute!(NodeDescription, AttrId::NODE_DESCRIPTION);

enum_with_unknown! {
    /// PortInfo.PortState, the logical link state (IBA §14.2.5.6 table 149).
    pub enum PortState(u8) {
        /// No state change (in a Set).
        NoChange = 0,
        /// Down (includes failed links).
        Down = 1,
        /// Initialize: the link is up, the port has no LID configured yet.
        Init = 2,
        /// Armed.
        Armed = 3,
        /// Active: data traffic flows.
        Active = 4,
    }
}

impl PortState {
    /// The name ibstat prints ("Down", "Initializing", "Armed", "Active").
    pub fn name(self) -> &'static str {
        match self {
            PortState::NoChange => "NoChange",
            PortState::Down => "Down",
            PortState::Init => "Initializing",
            PortState::Armed => "Armed",
            PortState::Active => "Active",
            PortState::Unknown(_) => "Unknown",
        }
    }

    /// The name Linux's sysfs `ports/N/state` prints after the number (`ib_port_state`
    /// order: "NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER").
    pub fn sysfs_name(self) -> &'static str {
        match u8::from(self) {
            0 => "NOP",
            1 => "DOWN",
            2 => "INIT",
            3 => "ARMED",
            4 => "ACTIVE",
            5 => "ACTIVE_DEFER",
            _ => "UNKNOWN",
        }
    }
}

enum_with_unknown! {
    /// PortInfo.PortPhysicalState (IBA §14.2.5.6 table 149).
    pub enum PortPhysicalState(u8) {
        /// No state change (in a Set).
        NoChange = 0,
        /// Sleep.
        Sleep = 1,
        /// Polling.
        Polling = 2,
        /// Disabled.
        Disabled = 3,
        /// PortConfigurationTraining.
        PortConfigurationTraining = 4,
        /// LinkUp.
        LinkUp = 5,
        /// LinkErrorRecovery.
        LinkErrorRecovery = 6,
        /// PhyTest.
        PhyTest = 7,
    }
}

impl PortPhysicalState {
    /// The name ibstat prints ("Sleep", "Polling", ..., "LinkUp").
    pub fn name(self) -> &'static str {
        match self {
            PortPhysicalState::NoChange => "NoChange",
            PortPhysicalState::Sleep => "Sleep",
            PortPhysicalState::Polling => "Polling",
            PortPhysicalState::Disabled => "Disabled",
            PortPhysicalState::PortConfigurationTraining => "PortConfigurationTraining",
            PortPhysicalState::LinkUp => "LinkUp",
            PortPhysicalState::LinkErrorRecovery => "LinkErrorRecovery",
            PortPhysicalState::PhyTest => "PhyTest",
            PortPhysicalState::Unknown(_) => "Unknown",
        }
    }

    /// The name Linux's sysfs `ports/N/phys_state` prints after the number ("Phy Test"
    /// with its space, "<unknown>" beyond the table).
    pub fn sysfs_name(self) -> &'static str {
        match u8::from(self) {
            1 => "Sleep",
            2 => "Polling",
            3 => "Disabled",
            4 => "PortConfigurationTraining",
            5 => "LinkUp",
            6 => "LinkErrorRecovery",
            7 => "Phy Test",
            _ => "<unknown>",
        }
    }
}

/// PortInfo.CapabilityMask bits (IBA §14.2.5.6 table 148; opensm `IB_PORT_CAP_*`).
pub mod capability_mask {
    /// IsSM: an SM runs on this port.
    pub const IS_SM: u32 = 0x0000_0002;
    /// IsNoticeSupported.
    pub const IS_NOTICE_SUPPORTED: u32 = 0x0000_0004;
    /// IsTrapSupported.
    pub const IS_TRAP_SUPPORTED: u32 = 0x0000_0008;
    /// IsOptionalIPDSupported.
    pub const IS_OPTIONAL_IPD_SUPPORTED: u32 = 0x0000_0010;
    /// IsAutomaticMigrationSupported.
    pub const IS_AUTOMATIC_MIGRATION_SUPPORTED: u32 = 0x0000_0020;
    /// IsSLMappingSupported.
    pub const IS_SL_MAPPING_SUPPORTED: u32 = 0x0000_0040;
    /// IsM_KeyNVRAM.
    pub const IS_M_KEY_NVRAM: u32 = 0x0000_0080;
    /// IsP_KeyNVRAM.
    pub const IS_P_KEY_NVRAM: u32 = 0x0000_0100;
    /// IsLEDInfoSupported.
    pub const IS_LED_INFO_SUPPORTED: u32 = 0x0000_0200;
    /// IsSMdisabled.
    pub const IS_SM_DISABLED: u32 = 0x0000_0400;
    /// IsSystemImageGUIDSupported.
    pub const IS_SYSTEM_IMAGE_GUID_SUPPORTED: u32 = 0x0000_0800;
    /// IsPKeySwitchExternalPortTrapSupported.
    pub const IS_P_KEY_SWITCH_EXTERNAL_PORT_TRAP_SUPPORTED: u32 = 0x0000_1000;
    /// IsCableInfoSupported.
    pub const IS_CABLE_INFO_SUPPORTED: u32 = 0x0000_2000;
    /// IsExtendedSpeedsSupported.
    pub const IS_EXTENDED_SPEEDS_SUPPORTED: u32 = 0x0000_4000;
    /// IsCapabilityMask2Supported.
    pub const IS_CAPABILITY_MASK2_SUPPORTED: u32 = 0x0000_8000;
    /// IsCommunicationManagementSupported.
    pub const IS_COMMUNICATION_MANAGEMENT_SUPPORTED: u32 = 0x0001_0000;
    /// IsSNMPTunnelingSupported.
    pub const IS_SNMP_TUNNELING_SUPPORTED: u32 = 0x0002_0000;
    /// IsReinitSupported.
    pub const IS_REINIT_SUPPORTED: u32 = 0x0004_0000;
    /// IsDeviceManagementSupported.
    pub const IS_DEVICE_MANAGEMENT_SUPPORTED: u32 = 0x0008_0000;
    /// IsVendorClassSupported.
    pub const IS_VENDOR_CLASS_SUPPORTED: u32 = 0x0010_0000;
    /// IsDRNoticeSupported.
    pub const IS_DR_NOTICE_SUPPORTED: u32 = 0x0020_0000;
    /// IsCapabilityMaskNoticeSupported.
    pub const IS_CAPABILITY_MASK_NOTICE_SUPPORTED: u32 = 0x0040_0000;
    /// IsBootManagementSupported.
    pub const IS_BOOT_MANAGEMENT_SUPPORTED: u32 = 0x0080_0000;
    /// IsLinkRoundTripLatencySupported.
    pub const IS_LINK_ROUND_TRIP_LATENCY_SUPPORTED: u32 = 0x0100_0000;
    /// IsClientReregistrationSupported.
    pub const IS_CLIENT_REREGISTRATION_SUPPORTED: u32 = 0x0200_0000;
    /// IsOtherLocalChangesNoticeSupported.
    pub const IS_OTHER_LOCAL_CHANGES_NOTICE_SUPPORTED: u32 = 0x0400_0000;
    /// IsLinkSpeedWidthPairsTableSupported.
    pub const IS_LINK_SPEED_WIDTH_PAIRS_TABLE_SUPPORTED: u32 = 0x0800_0000;
    /// IsVendorSpecificMadsTableSupported.
    pub const IS_VENDOR_SPECIFIC_MADS_TABLE_SUPPORTED: u32 = 0x1000_0000;
    /// IsMcastPkeyTrapSuppressionSupported.
    pub const IS_MCAST_PKEY_TRAP_SUPPRESSION_SUPPORTED: u32 = 0x2000_0000;
    /// IsMulticastFDBTopSupported.
    pub const IS_MULTICAST_FDB_TOP_SUPPORTED: u32 = 0x4000_0000;
    /// IsHierarchyInfoSupported.
    pub const IS_HIERARCHY_INFO_SUPPORTED: u32 = 0x8000_0000;
}

/// PortInfo.LinkWidth* bits (IBA §14.2.5.6): 1X, 4X, 8X, 12X, 2X.
pub mod link_width {
    /// 1X.
    pub const W1X: u8 = 0x01;
    /// 4X.
    pub const W4X: u8 = 0x02;
    /// 8X.
    pub const W8X: u8 = 0x04;
    /// 12X.
    pub const W12X: u8 = 0x08;
    /// 2X.
    pub const W2X: u8 = 0x10;
    /// In LinkWidthEnabled of a Set: "set to LinkWidthSupported".
    pub const SET_TO_SUPPORTED: u8 = 0xFF;
}

/// PortInfo.LinkSpeed* bits (IBA §14.2.5.6): SDR, DDR, QDR; LinkSpeedActive 0 means "see
/// LinkSpeedExtActive".
pub mod link_speed {
    /// 2.5 Gb/s (SDR).
    pub const SDR: u8 = 0x1;
    /// 5.0 Gb/s (DDR).
    pub const DDR: u8 = 0x2;
    /// 10.0 Gb/s (QDR).
    pub const QDR: u8 = 0x4;
    /// In LinkSpeedEnabled of a Set: "set to LinkSpeedSupported".
    pub const SET_TO_SUPPORTED: u8 = 0xF;
    /// LinkSpeedExt bit: 14.0625 Gb/s (FDR).
    pub const EXT_FDR: u8 = 0x1;
    /// LinkSpeedExt bit: 25.78125 Gb/s (EDR).
    pub const EXT_EDR: u8 = 0x2;
    /// LinkSpeedExt bit: 53.125 Gb/s (HDR).
    pub const EXT_HDR: u8 = 0x4;
}

/// PortInfo (AttributeID 0x0015, IBA §14.2.5.6, 64 bytes), every field.
///
/// ```text
///  0: M_Key(64)
///  8: GidPrefix(64)
/// 16: LID(16) MasterSMLID(16)
/// 20: CapabilityMask(32)
/// 24: DiagCode(16) M_KeyLeasePeriod(16)
/// 28: LocalPortNum(8) LinkWidthEnabled(8) LinkWidthSupported(8) LinkWidthActive(8)
/// 32: LinkSpeedSupported(4) PortState(4) | PortPhysicalState(4) LinkDownDefaultState(4)
///     | M_KeyProtectBits(2) Resv(3) LMC(3) | LinkSpeedActive(4) LinkSpeedEnabled(4)
/// 36: NeighborMTU(4) MasterSMSL(4) | VLCap(4) InitType(4) | VLHighLimit(8)
///     | VLArbitrationHighCap(8)
/// 40: VLArbitrationLowCap(8) | InitTypeReply(4) MTUCap(4) | VLStallCount(3) HOQLife(5)
///     | OperationalVLs(4) PartitionEnforcementInbound(1) ..Outbound(1)
///       FilterRawInbound(1) FilterRawOutbound(1)
/// 44: M_KeyViolations(16) P_KeyViolations(16)
/// 48: Q_KeyViolations(16) GUIDCap(8) ClientReregister(1)
///     MulticastPKeyTrapSuppressionEnabled(2) SubnetTimeOut(5)
/// 52: Resv(3) RespTimeValue(5) | LocalPhyErrors(4) OverrunErrors(4) | MaxCreditHint(16)
/// 56: Resv(8) LinkRoundTripLatency(24)
/// 60: CapabilityMask2(16) | LinkSpeedExtActive(4) LinkSpeedExtSupported(4)
///     | Resv(3) LinkSpeedExtEnabled(5)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortInfo {
    /// M_Key.
    pub m_key: u64,
    /// GidPrefix: the subnet prefix.
    pub gid_prefix: u64,
    /// LID: the port's base LID.
    pub lid: Lid,
    /// MasterSMLID: the LID of the master SM.
    pub master_sm_lid: Lid,
    /// CapabilityMask (see [`capability_mask`]).
    pub capability_mask: u32,
    /// DiagCode.
    pub diag_code: u16,
    /// M_KeyLeasePeriod.
    pub m_key_lease_period: u16,
    /// LocalPortNum: the port the SMP arrived on.
    pub local_port_num: u8,
    /// LinkWidthEnabled (see [`link_width`]).
    pub link_width_enabled: u8,
    /// LinkWidthSupported.
    pub link_width_supported: u8,
    /// LinkWidthActive.
    pub link_width_active: u8,
    /// LinkSpeedSupported (4 bits, see [`link_speed`]).
    pub link_speed_supported: u8,
    /// PortState (4 bits).
    pub port_state: PortState,
    /// PortPhysicalState (4 bits).
    pub port_physical_state: PortPhysicalState,
    /// LinkDownDefaultState (4 bits): 0 no change, 1 Sleep, 2 Polling.
    pub link_down_default_state: u8,
    /// M_KeyProtectBits (2 bits).
    pub m_key_protect_bits: u8,
    /// LMC (3 bits): 2^LMC LIDs per port.
    pub lmc: u8,
    /// LinkSpeedActive (4 bits).
    pub link_speed_active: u8,
    /// LinkSpeedEnabled (4 bits).
    pub link_speed_enabled: u8,
    /// NeighborMTU (4 bits).
    pub neighbor_mtu: Mtu,
    /// MasterSMSL (4 bits): the SL to reach the master SM.
    pub master_sm_sl: u8,
    /// VLCap (4 bits): 1 VL0, 2 VL0–1, 3 VL0–3, 4 VL0–7, 5 VL0–14.
    pub vl_cap: u8,
    /// InitType (4 bits).
    pub init_type: u8,
    /// VLHighLimit.
    pub vl_high_limit: u8,
    /// VLArbitrationHighCap.
    pub vl_arbitration_high_cap: u8,
    /// VLArbitrationLowCap.
    pub vl_arbitration_low_cap: u8,
    /// InitTypeReply (4 bits).
    pub init_type_reply: u8,
    /// MTUCap (4 bits).
    pub mtu_cap: Mtu,
    /// VLStallCount (3 bits).
    pub vl_stall_count: u8,
    /// HOQLife (5 bits).
    pub hoq_life: u8,
    /// OperationalVLs (4 bits), coded like VLCap.
    pub operational_vls: u8,
    /// PartitionEnforcementInbound.
    pub partition_enforcement_inbound: bool,
    /// PartitionEnforcementOutbound.
    pub partition_enforcement_outbound: bool,
    /// FilterRawInbound.
    pub filter_raw_inbound: bool,
    /// FilterRawOutbound.
    pub filter_raw_outbound: bool,
    /// M_KeyViolations.
    pub m_key_violations: u16,
    /// P_KeyViolations.
    pub p_key_violations: u16,
    /// Q_KeyViolations.
    pub q_key_violations: u16,
    /// GUIDCap: entries in the GUIDInfo table.
    pub guid_cap: u8,
    /// ClientReregister.
    pub client_reregister: bool,
    /// MulticastPKeyTrapSuppressionEnabled (2 bits).
    pub multicast_pkey_trap_suppression_enabled: u8,
    /// SubnetTimeOut (5 bits): 4.096 µs × 2^SubnetTimeOut.
    pub subnet_timeout: u8,
    /// RespTimeValue (5 bits): 4.096 µs × 2^RespTimeValue.
    pub resp_time_value: u8,
    /// LocalPhyErrors threshold (4 bits).
    pub local_phy_errors: u8,
    /// OverrunErrors threshold (4 bits).
    pub overrun_errors: u8,
    /// MaxCreditHint.
    pub max_credit_hint: u16,
    /// LinkRoundTripLatency (24 bits).
    pub link_round_trip_latency: u32,
    /// CapabilityMask2.
    pub capability_mask2: u16,
    /// LinkSpeedExtActive (4 bits).
    pub link_speed_ext_active: u8,
    /// LinkSpeedExtSupported (4 bits).
    pub link_speed_ext_supported: u8,
    /// LinkSpeedExtEnabled (5 bits).
    pub link_speed_ext_enabled: u8,
}

impl PortInfo {
    /// Length in bytes.
    pub const LEN: usize = 64;

    /// Parses a PortInfo.
    pub fn parse(bytes: &[u8]) -> Result<PortInfo> {
        let b = take(bytes, Self::LEN, "PortInfo")?;
        let hi = |at: usize| b[at] >> 4;
        let lo = |at: usize| b[at] & 0x0F;
        Ok(PortInfo {
            m_key: read_u64(b, 0),
            gid_prefix: read_u64(b, 8),
            lid: Lid(read_u16(b, 16)),
            master_sm_lid: Lid(read_u16(b, 18)),
            capability_mask: read_u32(b, 20),
            diag_code: read_u16(b, 24),
            m_key_lease_period: read_u16(b, 26),
            local_port_num: b[28],
            link_width_enabled: b[29],
            link_width_supported: b[30],
            link_width_active: b[31],
            link_speed_supported: hi(32),
            port_state: PortState::from(lo(32)),
            port_physical_state: PortPhysicalState::from(hi(33)),
            link_down_default_state: lo(33),
            m_key_protect_bits: b[34] >> 6,
            lmc: b[34] & 0x07,
            link_speed_active: hi(35),
            link_speed_enabled: lo(35),
            neighbor_mtu: Mtu::from(hi(36)),
            master_sm_sl: lo(36),
            vl_cap: hi(37),
            init_type: lo(37),
            vl_high_limit: b[38],
            vl_arbitration_high_cap: b[39],
            vl_arbitration_low_cap: b[40],
            init_type_reply: hi(41),
            mtu_cap: Mtu::from(lo(41)),
            vl_stall_count: b[42] >> 5,
            hoq_life: b[42] & 0x1F,
            operational_vls: hi(43),
            partition_enforcement_inbound: b[43] & 0x08 != 0,
            partition_enforcement_outbound: b[43] & 0x04 != 0,
            filter_raw_inbound: b[43] & 0x02 != 0,
            filter_raw_outbound: b[43] & 0x01 != 0,
            m_key_violations: read_u16(b, 44),
            p_key_violations: read_u16(b, 46),
            q_key_violations: read_u16(b, 48),
            guid_cap: b[50],
            client_reregister: b[51] & 0x80 != 0,
            multicast_pkey_trap_suppression_enabled: (b[51] >> 5) & 0x03,
            subnet_timeout: b[51] & 0x1F,
            resp_time_value: b[52] & 0x1F,
            local_phy_errors: hi(53),
            overrun_errors: lo(53),
            max_credit_hint: read_u16(b, 54),
            link_round_trip_latency: read_u24(b, 57),
            capability_mask2: read_u16(b, 60),
            link_speed_ext_active: hi(62),
            link_speed_ext_supported: lo(62),
            link_speed_ext_enabled: b[63] & 0x1F,
        })
    }

    /// Writes the PortInfo into the first [`PortInfo::LEN`] bytes of `bytes`; reserved bits
    /// become zero and every field is masked to its width.
    pub fn emit(&self, bytes: &mut [u8]) {
        let b = &mut bytes[..Self::LEN];
        let nib = |h: u8, l: u8| ((h & 0x0F) << 4) | (l & 0x0F);
        write_u64(b, 0, self.m_key);
        write_u64(b, 8, self.gid_prefix);
        write_u16(b, 16, self.lid.0);
        write_u16(b, 18, self.master_sm_lid.0);
        write_u32(b, 20, self.capability_mask);
        write_u16(b, 24, self.diag_code);
        write_u16(b, 26, self.m_key_lease_period);
        b[28] = self.local_port_num;
        b[29] = self.link_width_enabled;
        b[30] = self.link_width_supported;
        b[31] = self.link_width_active;
        b[32] = nib(self.link_speed_supported, self.port_state.into());
        b[33] = nib(
            self.port_physical_state.into(),
            self.link_down_default_state,
        );
        b[34] = ((self.m_key_protect_bits & 0x03) << 6) | (self.lmc & 0x07);
        b[35] = nib(self.link_speed_active, self.link_speed_enabled);
        b[36] = nib(self.neighbor_mtu.into(), self.master_sm_sl);
        b[37] = nib(self.vl_cap, self.init_type);
        b[38] = self.vl_high_limit;
        b[39] = self.vl_arbitration_high_cap;
        b[40] = self.vl_arbitration_low_cap;
        b[41] = nib(self.init_type_reply, self.mtu_cap.into());
        b[42] = ((self.vl_stall_count & 0x07) << 5) | (self.hoq_life & 0x1F);
        b[43] = ((self.operational_vls & 0x0F) << 4)
            | (u8::from(self.partition_enforcement_inbound) << 3)
            | (u8::from(self.partition_enforcement_outbound) << 2)
            | (u8::from(self.filter_raw_inbound) << 1)
            | u8::from(self.filter_raw_outbound);
        write_u16(b, 44, self.m_key_violations);
        write_u16(b, 46, self.p_key_violations);
        write_u16(b, 48, self.q_key_violations);
        b[50] = self.guid_cap;
        b[51] = (u8::from(self.client_reregister) << 7)
            | ((self.multicast_pkey_trap_suppression_enabled & 0x03) << 5)
            | (self.subnet_timeout & 0x1F);
        b[52] = self.resp_time_value & 0x1F;
        b[53] = nib(self.local_phy_errors, self.overrun_errors);
        write_u16(b, 54, self.max_credit_hint);
        b[56] = 0;
        write_u24(b, 57, self.link_round_trip_latency & 0x00FF_FFFF);
        write_u16(b, 60, self.capability_mask2);
        b[62] = nib(self.link_speed_ext_active, self.link_speed_ext_supported);
        b[63] = self.link_speed_ext_enabled & 0x1F;
    }
}

smp_attribute!(PortInfo, AttrId::PORT_INFO);

/// SwitchInfo (AttributeID 0x0012, IBA §14.2.5.4, 20 bytes).
///
/// ```text
///  0: LinearFDBCap(16) RandomFDBCap(16)
///  4: MulticastFDBCap(16) LinearFDBTop(16)
///  8: DefaultPort(8) DefaultMulticastPrimaryPort(8) DefaultMulticastNotPrimaryPort(8)
///     LifeTimeValue(5) PortStateChange(1) OptimizedSLtoVLMappingProgramming(2)
/// 12: LIDsPerPort(16) PartitionEnforcementCap(16)
/// 16: InboundEnforcementCap(1) OutboundEnforcementCap(1) FilterRawInboundCap(1)
///     FilterRawOutboundCap(1) EnhancedPort0(1) Resv(11) MulticastFDBTop(16)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SwitchInfo {
    /// LinearFDBCap: LFT entries supported.
    pub linear_fdb_cap: u16,
    /// RandomFDBCap.
    pub random_fdb_cap: u16,
    /// MulticastFDBCap.
    pub multicast_fdb_cap: u16,
    /// LinearFDBTop: the highest LID programmed in the LFT.
    pub linear_fdb_top: u16,
    /// DefaultPort.
    pub default_port: u8,
    /// DefaultMulticastPrimaryPort.
    pub default_multicast_primary_port: u8,
    /// DefaultMulticastNotPrimaryPort.
    pub default_multicast_not_primary_port: u8,
    /// LifeTimeValue (5 bits).
    pub life_time_value: u8,
    /// PortStateChange: a port changed state (write 1 to clear).
    pub port_state_change: bool,
    /// OptimizedSLtoVLMappingProgramming (2 bits).
    pub optimized_sl_to_vl_mapping_programming: u8,
    /// LIDsPerPort.
    pub lids_per_port: u16,
    /// PartitionEnforcementCap.
    pub partition_enforcement_cap: u16,
    /// InboundEnforcementCap.
    pub inbound_enforcement_cap: bool,
    /// OutboundEnforcementCap.
    pub outbound_enforcement_cap: bool,
    /// FilterRawInboundCap.
    pub filter_raw_inbound_cap: bool,
    /// FilterRawOutboundCap.
    pub filter_raw_outbound_cap: bool,
    /// EnhancedPort0: port 0 is an enhanced port 0.
    pub enhanced_port0: bool,
    /// MulticastFDBTop.
    pub multicast_fdb_top: u16,
}

impl SwitchInfo {
    /// Length in bytes.
    pub const LEN: usize = 20;

    /// Parses a SwitchInfo.
    pub fn parse(bytes: &[u8]) -> Result<SwitchInfo> {
        let b = take(bytes, Self::LEN, "SwitchInfo")?;
        Ok(SwitchInfo {
            linear_fdb_cap: read_u16(b, 0),
            random_fdb_cap: read_u16(b, 2),
            multicast_fdb_cap: read_u16(b, 4),
            linear_fdb_top: read_u16(b, 6),
            default_port: b[8],
            default_multicast_primary_port: b[9],
            default_multicast_not_primary_port: b[10],
            life_time_value: b[11] >> 3,
            port_state_change: b[11] & 0x04 != 0,
            optimized_sl_to_vl_mapping_programming: b[11] & 0x03,
            lids_per_port: read_u16(b, 12),
            partition_enforcement_cap: read_u16(b, 14),
            inbound_enforcement_cap: b[16] & 0x80 != 0,
            outbound_enforcement_cap: b[16] & 0x40 != 0,
            filter_raw_inbound_cap: b[16] & 0x20 != 0,
            filter_raw_outbound_cap: b[16] & 0x10 != 0,
            enhanced_port0: b[16] & 0x08 != 0,
            multicast_fdb_top: read_u16(b, 18),
        })
    }

    /// Writes the SwitchInfo into the first [`SwitchInfo::LEN`] bytes of `bytes`.
    pub fn emit(&self, bytes: &mut [u8]) {
        let b = &mut bytes[..Self::LEN];
        write_u16(b, 0, self.linear_fdb_cap);
        write_u16(b, 2, self.random_fdb_cap);
        write_u16(b, 4, self.multicast_fdb_cap);
        write_u16(b, 6, self.linear_fdb_top);
        b[8] = self.default_port;
        b[9] = self.default_multicast_primary_port;
        b[10] = self.default_multicast_not_primary_port;
        b[11] = ((self.life_time_value & 0x1F) << 3)
            | (u8::from(self.port_state_change) << 2)
            | (self.optimized_sl_to_vl_mapping_programming & 0x03);
        write_u16(b, 12, self.lids_per_port);
        write_u16(b, 14, self.partition_enforcement_cap);
        b[16] = (u8::from(self.inbound_enforcement_cap) << 7)
            | (u8::from(self.outbound_enforcement_cap) << 6)
            | (u8::from(self.filter_raw_inbound_cap) << 5)
            | (u8::from(self.filter_raw_outbound_cap) << 4)
            | (u8::from(self.enhanced_port0) << 3);
        b[17] = 0;
        write_u16(b, 18, self.multicast_fdb_top);
    }
}

smp_attribute!(SwitchInfo, AttrId::SWITCH_INFO);

/// One block of a switch's LinearForwardingTable (AttributeID 0x0019, IBA §14.2.5.10): the
/// egress ports of 64 consecutive LIDs. The AttributeModifier is the block number: block `n`
/// holds LIDs `64n..64n+63`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinearForwardingTable {
    /// The egress port of each LID of the block ([`LinearForwardingTable::NO_PORT`] = drop).
    pub ports: [u8; 64],
}

impl Default for LinearForwardingTable {
    fn default() -> Self {
        LinearForwardingTable {
            ports: [Self::NO_PORT; 64],
        }
    }
}

impl LinearForwardingTable {
    /// Length in bytes.
    pub const LEN: usize = 64;
    /// LIDs per block.
    pub const ENTRIES_PER_BLOCK: usize = 64;
    /// The port number that means "no route" (opensm `IB_INVALID_PORT_NUM`).
    pub const NO_PORT: u8 = 0xFF;

    /// The block number (the AttributeModifier) and the index in the block of `lid`.
    pub fn position(lid: Lid) -> (u32, usize) {
        (u32::from(lid.0) / 64, usize::from(lid.0) % 64)
    }

    /// Parses an LFT block.
    pub fn parse(bytes: &[u8]) -> Result<LinearForwardingTable> {
        let b = take(bytes, Self::LEN, "LinearForwardingTable")?;
        let mut ports = [0u8; 64];
        ports.copy_from_slice(b);
        Ok(LinearForwardingTable { ports })
    }

    /// Writes the 64 entries into `bytes`.
    pub fn emit(&self, bytes: &mut [u8]) {
        bytes[..Self::LEN].copy_from_slice(&self.ports);
    }
}

smp_attribute!(LinearForwardingTable, AttrId::LINEAR_FORWARDING_TABLE);

/// One block of a switch's MulticastForwardingTable (AttributeID 0x001B, IBA §14.2.5.12): for
/// 32 consecutive MLIDs, a 16-bit PortMask each, covering 16 of the switch's ports. The
/// AttributeModifier holds the block number in bits 0–8 (block `n` covers MLIDs
/// `0xC000 + 32n ..= 0xC000 + 32n + 31`) and the PortMask position in bits 28–31 (position `p`
/// covers ports `16p ..= 16p + 15`; bit `i` of a mask is port `16p + i`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MulticastForwardingTable {
    /// The PortMask of each MLID of the block.
    pub port_masks: [u16; 32],
}

impl MulticastForwardingTable {
    /// Length in bytes.
    pub const LEN: usize = 64;
    /// MLIDs per block.
    pub const ENTRIES_PER_BLOCK: usize = 32;
    /// Ports per PortMask.
    pub const PORTS_PER_MASK: usize = 16;
    /// The first multicast LID, the MLID of entry 0 of block 0.
    pub const MLID_BASE: u16 = 0xC000;
    /// The highest block number the AttributeModifier can name (9 bits).
    pub const MAX_BLOCK: u16 = 0x1FF;
    /// The highest PortMask position (4 bits).
    pub const MAX_POSITION: u8 = 0xF;

    /// The block number and the index in the block of multicast LID `mlid`, or `None` if
    /// `mlid` is not in 0xC000..=0xFFFE.
    pub fn position(mlid: Lid) -> Option<(u16, usize)> {
        if !mlid.is_multicast() {
            return None;
        }
        let off = mlid.0 - Self::MLID_BASE;
        Some((off / 32, usize::from(off % 32)))
    }

    /// The MLID of entry `index` of block `block`.
    pub fn mlid(block: u16, index: usize) -> Lid {
        let off = u32::from(block) * 32 + (index as u32 % 32);
        Lid(Self::MLID_BASE.wrapping_add(off as u16))
    }

    /// The PortMask position holding `port` and the bit of `port` in that mask.
    pub fn port_position(port: u8) -> (u8, u16) {
        (port / 16, 1u16 << (port % 16))
    }

    /// The AttributeModifier addressing block `block` (9 bits) at PortMask position
    /// `position` (4 bits).
    pub fn attr_mod(block: u16, position: u8) -> u32 {
        (u32::from(position & 0x0F) << 28) | u32::from(block & Self::MAX_BLOCK)
    }

    /// The block number and the PortMask position an AttributeModifier names (reserved bits
    /// 9–27 ignored).
    pub fn from_attr_mod(attr_mod: u32) -> (u16, u8) {
        ((attr_mod & 0x1FF) as u16, (attr_mod >> 28) as u8)
    }

    /// Parses an MFT block.
    pub fn parse(bytes: &[u8]) -> Result<MulticastForwardingTable> {
        let b = take(bytes, Self::LEN, "MulticastForwardingTable")?;
        let mut port_masks = [0u16; 32];
        for (i, m) in port_masks.iter_mut().enumerate() {
            *m = read_u16(b, 2 * i);
        }
        Ok(MulticastForwardingTable { port_masks })
    }

    /// Writes the 32 PortMasks into `bytes`.
    pub fn emit(&self, bytes: &mut [u8]) {
        let b = &mut bytes[..Self::LEN];
        for (i, m) in self.port_masks.iter().enumerate() {
            write_u16(b, 2 * i, *m);
        }
    }
}

smp_attribute!(MulticastForwardingTable, AttrId::MULTICAST_FORWARDING_TABLE);

/// One block of a port's GUIDInfo table (AttributeID 0x0014, IBA §14.2.5.5): 8 GUIDs; the
/// AttributeModifier is the block number. Entry 0 of block 0 is the port GUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GuidInfo {
    /// The 8 GUIDs of the block.
    pub guids: [Guid; 8],
}

impl GuidInfo {
    /// Length in bytes.
    pub const LEN: usize = 64;

    /// Parses a GUIDInfo block.
    pub fn parse(bytes: &[u8]) -> Result<GuidInfo> {
        let b = take(bytes, Self::LEN, "GUIDInfo")?;
        let mut guids = [Guid(0); 8];
        for (i, g) in guids.iter_mut().enumerate() {
            *g = Guid(read_u64(b, 8 * i));
        }
        Ok(GuidInfo { guids })
    }

    /// Writes the 8 GUIDs into `bytes`.
    pub fn emit(&self, bytes: &mut [u8]) {
        let b = &mut bytes[..Self::LEN];
        for (i, g) in self.guids.iter().enumerate() {
            write_u64(b, 8 * i, g.0);
        }
    }
}

smp_attribute!(GuidInfo, AttrId::GUID_INFO);

/// One block of a P_KeyTable (AttributeID 0x0016, IBA §14.2.5.7): 32 P_Keys. The
/// AttributeModifier holds the block number (bits 0–15) and, for a switch, the port number
/// (bits 16–23).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PKeyTable {
    /// The 32 P_Keys of the block (0 = empty entry).
    pub pkeys: [PKey; 32],
}

impl PKeyTable {
    /// Length in bytes.
    pub const LEN: usize = 64;

    /// Parses a P_KeyTable block.
    pub fn parse(bytes: &[u8]) -> Result<PKeyTable> {
        let b = take(bytes, Self::LEN, "P_KeyTable")?;
        let mut pkeys = [PKey(0); 32];
        for (i, p) in pkeys.iter_mut().enumerate() {
            *p = PKey(read_u16(b, 2 * i));
        }
        Ok(PKeyTable { pkeys })
    }

    /// Writes the 32 P_Keys into `bytes`.
    pub fn emit(&self, bytes: &mut [u8]) {
        let b = &mut bytes[..Self::LEN];
        for (i, p) in self.pkeys.iter().enumerate() {
            write_u16(b, 2 * i, p.0);
        }
    }

    /// The AttributeModifier addressing block `block` of port `port` (port is ignored by CAs).
    pub fn attr_mod(block: u16, port: u8) -> u32 {
        (u32::from(port) << 16) | u32::from(block)
    }
}

smp_attribute!(PKeyTable, AttrId::P_KEY_TABLE);

enum_with_unknown! {
    /// SMInfo.SMState (IBA §14.2.5.13).
    pub enum SmState(u8) {
        /// Not active.
        NotActive = 0,
        /// Discovering.
        Discovering = 1,
        /// Standby.
        Standby = 2,
        /// Master.
        Master = 3,
    }
}

impl SmState {
    /// The name sminfo prints ("SMINFO_NOTACT", ...) without the prefix: "NotActive",
    /// "Discovering", "Standby", "Master".
    pub fn name(self) -> &'static str {
        match self {
            SmState::NotActive => "NotActive",
            SmState::Discovering => "Discovering",
            SmState::Standby => "Standby",
            SmState::Master => "Master",
            SmState::Unknown(_) => "Unknown",
        }
    }
}

/// SMInfo (AttributeID 0x0020, IBA §14.2.5.13, 21 bytes).
///
/// ```text
///  0: GUID(64)
///  8: SM_Key(64)
/// 16: ActCount(32)
/// 20: Priority(4) SMState(4)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SmInfo {
    /// GUID: the SM's port GUID.
    pub guid: Guid,
    /// SM_Key (zero unless the requester proves it knows it).
    pub sm_key: u64,
    /// ActCount: incremented by a master SM as a heartbeat.
    pub act_count: u32,
    /// Priority (4 bits).
    pub priority: u8,
    /// SMState (4 bits).
    pub sm_state: SmState,
}

impl SmInfo {
    /// Length in bytes.
    pub const LEN: usize = 21;

    /// Parses an SMInfo.
    pub fn parse(bytes: &[u8]) -> Result<SmInfo> {
        let b = take(bytes, Self::LEN, "SMInfo")?;
        Ok(SmInfo {
            guid: Guid(read_u64(b, 0)),
            sm_key: read_u64(b, 8),
            act_count: read_u32(b, 16),
            priority: b[20] >> 4,
            sm_state: SmState::from(b[20] & 0x0F),
        })
    }

    /// Writes the SMInfo into the first [`SmInfo::LEN`] bytes of `bytes`.
    pub fn emit(&self, bytes: &mut [u8]) {
        let b = &mut bytes[..Self::LEN];
        write_u64(b, 0, self.guid.0);
        write_u64(b, 8, self.sm_key);
        write_u32(b, 16, self.act_count);
        b[20] = ((self.priority & 0x0F) << 4) | (u8::from(self.sm_state) & 0x0F);
    }
}

smp_attribute!(SmInfo, AttrId::SM_INFO);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::{format, vec::Vec};

    /// `emit(parse(bytes))` must give back `bytes` with exactly the reserved bits cleared:
    /// `defined` has a 1 for every bit that belongs to a field.
    fn check_bits_preserved<A: SmpAttribute + core::fmt::Debug + PartialEq>(
        bytes: &[u8],
        defined: &[u8],
    ) -> core::result::Result<(), TestCaseError> {
        let a = A::from_data(bytes).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        let mut out = [0xA5u8; 64];
        a.write_data(&mut out);
        for (i, mask) in defined.iter().enumerate() {
            let expect = if i < A::LEN { bytes[i] & mask } else { 0xA5 };
            prop_assert_eq!(out[i], expect, "byte {}", i);
        }
        prop_assert_eq!(A::from_data(&out).ok(), Some(a));
        Ok(())
    }

    // --- NodeInfo: a ConnectX-3 HCA port as smpquery shows it ---
    fn node_info_bytes() -> [u8; 40] {
        let mut b = [0u8; 40];
        b[0] = 1;
        b[1] = 1;
        b[2] = 1; // CA
        b[3] = 2; // 2 ports
        b[4..12].copy_from_slice(&0x0002_c903_00a1_b2c3u64.to_be_bytes()); // SystemImageGUID
        b[12..20].copy_from_slice(&0x0002_c903_00a1_b2c0u64.to_be_bytes()); // NodeGUID
        b[20..28].copy_from_slice(&0x0002_c903_00a1_b2c1u64.to_be_bytes()); // PortGUID
        b[28..30].copy_from_slice(&[0x00, 0x80]); // PartitionCap 128
        b[30..32].copy_from_slice(&[0x10, 0x03]); // DeviceID 0x1003 (4099)
        b[32..36].copy_from_slice(&[0, 0, 0, 1]); // Revision 1
        b[36] = 1; // LocalPortNum
        b[37..40].copy_from_slice(&[0x00, 0x02, 0xc9]); // VendorID Mellanox
        b
    }

    fn node_info() -> NodeInfo {
        NodeInfo {
            base_version: 1,
            class_version: 1,
            node_type: NodeType::Ca,
            num_ports: 2,
            system_image_guid: Guid(0x0002_c903_00a1_b2c3),
            node_guid: Guid(0x0002_c903_00a1_b2c0),
            port_guid: Guid(0x0002_c903_00a1_b2c1),
            partition_cap: 128,
            device_id: 4099,
            revision: 1,
            local_port_num: 1,
            vendor_id: 0x0002c9,
        }
    }

    #[test]
    fn node_info_test_deconstruct() {
        let b = node_info_bytes();
        let n = NodeInfo::parse(&b).unwrap();
        assert_eq!(n.node_type, NodeType::Ca);
        assert_eq!(n.node_type.name(), "Channel Adapter");
        assert_eq!(n.node_guid, Guid(0x0002_c903_00a1_b2c0));
        assert_eq!(n.device_id, 0x1003);
        assert_eq!(n.local_port_num, 1);
        assert_eq!(n.vendor_id, 0x2c9);
        assert_eq!(NodeType::from(2), NodeType::Switch);
        assert_eq!(NodeType::from(9), NodeType::Unknown(9));
    }

    #[test]
    fn node_info_test_construct() {
        let mut out = [0xa5u8; 64];
        node_info().write_data(&mut out);
        assert_eq!(out[..40], node_info_bytes());
        assert_eq!(out[40], 0xa5, "emit writes exactly LEN bytes");
        assert_eq!(node_info().to_data()[..40], node_info_bytes());
        assert_eq!(node_info().to_data()[40..], [0u8; 24]);
    }

    #[test]
    fn node_info_test_parse() {
        assert_eq!(NodeInfo::parse(&node_info_bytes()), Ok(node_info()));
    }

    #[test]
    fn node_info_test_emit() {
        let mut out = [0u8; 40];
        node_info().emit(&mut out);
        assert_eq!(out, node_info_bytes());
    }

    #[test]
    fn node_info_test_impossible_len() {
        assert_eq!(
            NodeInfo::parse(&node_info_bytes()[..39]),
            Err(Error::Truncated("NodeInfo"))
        );
    }

    // --- NodeDescription ---
    #[test]
    fn node_description() {
        let d = NodeDescription::new("mlx4_0 HCA-1");
        assert_eq!(d.text(), "mlx4_0 HCA-1");
        assert_eq!(d.as_bytes(), b"mlx4_0 HCA-1");
        assert_eq!(d.raw[12..], [0u8; 52]);
        let mut out = [0xa5u8; 64];
        d.emit(&mut out);
        assert_eq!(NodeDescription::parse(&out), Ok(d));
        assert_eq!(
            NodeDescription::from_data(&out).unwrap().text(),
            "mlx4_0 HCA-1"
        );

        // 64 bytes exactly: no NUL at all.
        let long = "x".repeat(70);
        let d = NodeDescription::new(&long);
        assert_eq!(d.text().len(), 64);
        // Truncation respects character boundaries (é is 2 bytes: 63 + 2 > 64).
        let s = format!("{}é", "a".repeat(63));
        assert_eq!(NodeDescription::new(&s).text(), "a".repeat(63));
        // Invalid UTF-8 gives the valid prefix.
        let mut raw = [0u8; 64];
        raw[..4].copy_from_slice(&[b'o', b'k', 0xff, b'x']);
        assert_eq!(NodeDescription { raw }.text(), "ok");
        assert_eq!(
            NodeDescription::parse(&raw[..63]),
            Err(Error::Truncated("NodeDescription"))
        );
    }

    // --- PortInfo: an active 4X QDR HCA port at LID 4 whose SM is itself (ibstat seed) ---
    fn port_info_bytes() -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes()); // M_Key
        b[8..16].copy_from_slice(&0xfe80_0000_0000_0000u64.to_be_bytes()); // GidPrefix
        b[16..18].copy_from_slice(&[0x00, 0x04]); // LID 4
        b[18..20].copy_from_slice(&[0x00, 0x04]); // MasterSMLID 4
        b[20..24].copy_from_slice(&[0x02, 0x51, 0x48, 0x6a]); // CapabilityMask
        b[24..26].copy_from_slice(&[0x00, 0x00]); // DiagCode
        b[26..28].copy_from_slice(&[0x00, 0x0f]); // M_KeyLeasePeriod 15
        b[28] = 1; // LocalPortNum
        b[29] = 0x03; // LinkWidthEnabled 1X|4X
        b[30] = 0x03; // LinkWidthSupported
        b[31] = 0x02; // LinkWidthActive 4X
        b[32] = 0x74; // LinkSpeedSupported 7, PortState Active
        b[33] = 0x52; // PhysState LinkUp, LinkDownDefault Polling
        b[34] = 0x42; // M_KeyProtectBits 1, LMC 2
        b[35] = 0x47; // LinkSpeedActive QDR, LinkSpeedEnabled 7
        b[36] = 0x50; // NeighborMTU 4096, MasterSMSL 0
        b[37] = 0x41; // VLCap VL0-7, InitType 1
        b[38] = 0x00; // VLHighLimit
        b[39] = 0x08; // VLArbitrationHighCap
        b[40] = 0x08; // VLArbitrationLowCap
        b[41] = 0x25; // InitTypeReply 2, MTUCap 4096
        b[42] = 0xf3; // VLStallCount 7, HOQLife 19
        b[43] = 0x4a; // OperationalVLs 4, PartEnfIn, FilterRawIn
        b[44..46].copy_from_slice(&[0x00, 0x01]); // M_KeyViolations
        b[46..48].copy_from_slice(&[0x00, 0x02]); // P_KeyViolations
        b[48..50].copy_from_slice(&[0x00, 0x03]); // Q_KeyViolations
        b[50] = 128; // GUIDCap
        b[51] = 0xb2; // ClientReregister, McastPKeyTrapSupp 1, SubnetTimeOut 18
        b[52] = 0x10; // RespTimeValue 16
        b[53] = 0x8a; // LocalPhyErrors 8, OverrunErrors 10
        b[54..56].copy_from_slice(&[0x12, 0x34]); // MaxCreditHint
        b[56..60].copy_from_slice(&[0x00, 0x01, 0x02, 0x03]); // LinkRoundTripLatency
        b[60..62].copy_from_slice(&[0x00, 0x20]); // CapabilityMask2
        b[62] = 0x13; // LinkSpeedExtActive 1 (FDR), LinkSpeedExtSupported 3
        b[63] = 0x1e; // LinkSpeedExtEnabled 30
        b
    }

    fn port_info() -> PortInfo {
        PortInfo {
            m_key: 0x0102_0304_0506_0708,
            gid_prefix: 0xfe80_0000_0000_0000,
            lid: Lid(4),
            master_sm_lid: Lid(4),
            capability_mask: 0x0251_486a,
            diag_code: 0,
            m_key_lease_period: 15,
            local_port_num: 1,
            link_width_enabled: 3,
            link_width_supported: 3,
            link_width_active: link_width::W4X,
            link_speed_supported: 7,
            port_state: PortState::Active,
            port_physical_state: PortPhysicalState::LinkUp,
            link_down_default_state: 2,
            m_key_protect_bits: 1,
            lmc: 2,
            link_speed_active: link_speed::QDR,
            link_speed_enabled: 7,
            neighbor_mtu: Mtu::Mtu4096,
            master_sm_sl: 0,
            vl_cap: 4,
            init_type: 1,
            vl_high_limit: 0,
            vl_arbitration_high_cap: 8,
            vl_arbitration_low_cap: 8,
            init_type_reply: 2,
            mtu_cap: Mtu::Mtu4096,
            vl_stall_count: 7,
            hoq_life: 19,
            operational_vls: 4,
            partition_enforcement_inbound: true,
            partition_enforcement_outbound: false,
            filter_raw_inbound: true,
            filter_raw_outbound: false,
            m_key_violations: 1,
            p_key_violations: 2,
            q_key_violations: 3,
            guid_cap: 128,
            client_reregister: true,
            multicast_pkey_trap_suppression_enabled: 1,
            subnet_timeout: 18,
            resp_time_value: 16,
            local_phy_errors: 8,
            overrun_errors: 10,
            max_credit_hint: 0x1234,
            link_round_trip_latency: 0x010203,
            capability_mask2: 0x0020,
            link_speed_ext_active: link_speed::EXT_FDR,
            link_speed_ext_supported: 3,
            link_speed_ext_enabled: 30,
        }
    }

    /// The bits of PortInfo that belong to a field (reserved: byte 34 bits 5–3, byte 52 bits
    /// 7–5, byte 56, byte 63 bits 7–5).
    fn port_info_defined() -> [u8; 64] {
        let mut m = [0xffu8; 64];
        m[34] = 0xc7;
        m[52] = 0x1f;
        m[56] = 0x00;
        m[63] = 0x1f;
        m
    }

    #[test]
    fn port_info_test_deconstruct() {
        let p = PortInfo::parse(&port_info_bytes()).unwrap();
        use capability_mask::*;
        assert_eq!(p.lid, Lid(4));
        assert_eq!(
            p.capability_mask,
            IS_CLIENT_REREGISTRATION_SUPPORTED
                | IS_CAPABILITY_MASK_NOTICE_SUPPORTED
                | IS_VENDOR_CLASS_SUPPORTED
                | IS_COMMUNICATION_MANAGEMENT_SUPPORTED
                | IS_EXTENDED_SPEEDS_SUPPORTED
                | IS_SYSTEM_IMAGE_GUID_SUPPORTED
                | IS_SL_MAPPING_SUPPORTED
                | IS_AUTOMATIC_MIGRATION_SUPPORTED
                | IS_TRAP_SUPPORTED
                | IS_SM
        );
        assert_eq!(p.port_state, PortState::Active);
        assert_eq!(p.port_state.name(), "Active");
        assert_eq!(p.port_physical_state.name(), "LinkUp");
        assert_eq!(p.lmc, 2);
        assert_eq!(p.m_key_protect_bits, 1);
        assert_eq!(p.neighbor_mtu.bytes(), Some(4096));
        assert_eq!(p.hoq_life, 19);
        assert!(p.client_reregister);
        assert_eq!(p.subnet_timeout, 18);
        assert_eq!(p.link_round_trip_latency, 0x010203);
        assert_eq!(p.link_speed_ext_enabled, 30);
    }

    #[test]
    fn port_info_test_construct() {
        let mut out = [0xa5u8; 64];
        port_info().emit(&mut out);
        assert_eq!(out, port_info_bytes());
        // Reserved bits are cleared even when the buffer held garbage.
        let mut garbage = port_info_bytes();
        garbage[34] |= 0x38;
        garbage[52] |= 0xe0;
        garbage[56] = 0xff;
        garbage[63] |= 0xe0;
        let mut out = [0xffu8; 64];
        PortInfo::parse(&garbage).unwrap().emit(&mut out);
        assert_eq!(out, port_info_bytes());
    }

    #[test]
    fn port_info_test_parse() {
        assert_eq!(PortInfo::parse(&port_info_bytes()), Ok(port_info()));
    }

    #[test]
    fn port_info_test_emit() {
        assert_eq!(port_info().to_data(), port_info_bytes());
    }

    #[test]
    fn port_info_test_impossible_len() {
        assert_eq!(
            PortInfo::parse(&port_info_bytes()[..63]),
            Err(Error::Truncated("PortInfo"))
        );
    }

    #[test]
    fn port_info_single_bits() {
        // Each flag lands on the bit libibmad's fields.c names (BITSOFFS, MSB-first offsets).
        type Case = (fn(&mut PortInfo), usize, u8);
        let cases: [Case; 8] = [
            (|p| p.partition_enforcement_inbound = true, 43, 0x08), // bit 348
            (|p| p.partition_enforcement_outbound = true, 43, 0x04), // bit 349
            (|p| p.filter_raw_inbound = true, 43, 0x02),            // bit 350
            (|p| p.filter_raw_outbound = true, 43, 0x01),           // bit 351
            (|p| p.client_reregister = true, 51, 0x80),             // bit 408
            (|p| p.lmc = 7, 34, 0x07),                              // bits 277..280
            (|p| p.m_key_protect_bits = 3, 34, 0xc0),               // bits 272..274
            (|p| p.vl_stall_count = 7, 42, 0xe0),                   // bits 336..339
        ];
        let zero = PortInfo::parse(&[0u8; 64]).unwrap();
        for (set, at, bits) in cases {
            let mut p = zero;
            set(&mut p);
            let out = p.to_data();
            let mut expect = [0u8; 64];
            expect[at] = bits;
            assert_eq!(out, expect, "byte {at}");
        }
    }

    // --- SwitchInfo ---
    fn switch_info_bytes() -> [u8; 20] {
        [
            0xc0, 0x00, // LinearFDBCap 49152
            0x00, 0x00, // RandomFDBCap
            0x10, 0x00, // MulticastFDBCap 4096
            0x00, 0x0c, // LinearFDBTop 12
            0x00, 0xff, 0x00, // DefaultPort 0, DefMcastPrim 255, DefMcastNotPrim 0
            0x9c, // LifeTimeValue 19, PortStateChange 1, OptSLtoVL 0
            0x00, 0x01, // LIDsPerPort 1
            0x00, 0x20, // PartitionEnforcementCap 32
            0xa8, 0x00, // InboundEnfCap, FilterRawInCap, EnhancedPort0
            0xc0, 0x00, // MulticastFDBTop 0xc000
        ]
    }

    fn switch_info() -> SwitchInfo {
        SwitchInfo {
            linear_fdb_cap: 49152,
            random_fdb_cap: 0,
            multicast_fdb_cap: 4096,
            linear_fdb_top: 12,
            default_port: 0,
            default_multicast_primary_port: 255,
            default_multicast_not_primary_port: 0,
            life_time_value: 19,
            port_state_change: true,
            optimized_sl_to_vl_mapping_programming: 0,
            lids_per_port: 1,
            partition_enforcement_cap: 32,
            inbound_enforcement_cap: true,
            outbound_enforcement_cap: false,
            filter_raw_inbound_cap: true,
            filter_raw_outbound_cap: false,
            enhanced_port0: true,
            multicast_fdb_top: 0xc000,
        }
    }

    #[test]
    fn switch_info_test_deconstruct() {
        let s = SwitchInfo::parse(&switch_info_bytes()).unwrap();
        assert_eq!(s.linear_fdb_top, 12);
        assert_eq!(s.life_time_value, 19);
        assert!(s.port_state_change && s.enhanced_port0);
        assert_eq!(s.multicast_fdb_top, 0xc000);
    }

    #[test]
    fn switch_info_test_construct() {
        let mut out = [0xa5u8; 20];
        switch_info().emit(&mut out);
        assert_eq!(out, switch_info_bytes());
    }

    #[test]
    fn switch_info_test_parse() {
        assert_eq!(SwitchInfo::parse(&switch_info_bytes()), Ok(switch_info()));
    }

    #[test]
    fn switch_info_test_emit() {
        assert_eq!(switch_info().to_data()[..20], switch_info_bytes());
    }

    #[test]
    fn switch_info_test_impossible_len() {
        assert_eq!(
            SwitchInfo::parse(&switch_info_bytes()[..19]),
            Err(Error::Truncated("SwitchInfo"))
        );
    }

    // --- Tables ---
    #[test]
    fn tables() {
        let mut b = [0u8; 64];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8;
        }
        let lft = LinearForwardingTable::parse(&b).unwrap();
        assert_eq!(lft.ports[5], 5);
        assert_eq!(lft.to_data(), b);
        assert_eq!(LinearForwardingTable::position(Lid(130)), (2, 2));
        assert_eq!(LinearForwardingTable::default().ports[0], 0xff);

        let g = GuidInfo::parse(&b).unwrap();
        assert_eq!(g.guids[0], Guid(0x0001_0203_0405_0607));
        assert_eq!(g.guids[7], Guid(0x3839_3a3b_3c3d_3e3f));
        assert_eq!(g.to_data(), b);

        let p = PKeyTable::parse(&b).unwrap();
        assert_eq!(p.pkeys[0], PKey(0x0001));
        assert_eq!(p.pkeys[31], PKey(0x3e3f));
        assert_eq!(p.to_data(), b);
        assert_eq!(PKeyTable::attr_mod(3, 7), 0x0007_0003);

        for len in [0, 63] {
            assert!(LinearForwardingTable::parse(&b[..len]).is_err());
            assert!(GuidInfo::parse(&b[..len]).is_err());
            assert!(PKeyTable::parse(&b[..len]).is_err());
        }
    }

    // --- MulticastForwardingTable ---
    /// Block 2 of an MFT, PortMask position 0: MLID 0xC040 to ports 1 and 3, MLID 0xC05F to
    /// port 15, as an SMP data area (IBA §14.2.5.12).
    fn mft_bytes() -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..2].copy_from_slice(&[0x00, 0x0a]); // entry 0: ports 1, 3
        b[62..64].copy_from_slice(&[0x80, 0x00]); // entry 31: port 15
        b
    }

    #[test]
    fn mft_layout() {
        let mft = MulticastForwardingTable::parse(&mft_bytes()).unwrap();
        assert_eq!(mft.port_masks[0], 0x000a);
        assert_eq!(mft.port_masks[31], 0x8000);
        assert!(mft.port_masks[1..31].iter().all(|&m| m == 0));
        let mut out = [0xa5u8; 64];
        mft.emit(&mut out);
        assert_eq!(out, mft_bytes());
        assert_eq!(mft.to_data(), mft_bytes());
        assert_eq!(
            MulticastForwardingTable::parse(&mft_bytes()[..63]),
            Err(Error::Truncated("MulticastForwardingTable"))
        );
    }

    #[test]
    fn mft_positions() {
        type Mft = MulticastForwardingTable;
        assert_eq!(Mft::position(Lid(0xC000)), Some((0, 0)));
        assert_eq!(Mft::position(Lid(0xC05F)), Some((2, 31)));
        assert_eq!(Mft::position(Lid(0xFFFE)), Some((0x1FF, 30)));
        assert_eq!(Mft::position(Lid(0xFFFF)), None);
        assert_eq!(Mft::position(Lid(0xBFFF)), None);
        assert_eq!(Mft::mlid(2, 31), Lid(0xC05F));
        assert_eq!(Mft::port_position(3), (0, 0x0008));
        assert_eq!(Mft::port_position(17), (1, 0x0002));
        assert_eq!(Mft::attr_mod(2, 0), 0x0000_0002);
        assert_eq!(Mft::attr_mod(0x1FF, 2), 0x2000_01FF);
        assert_eq!(Mft::from_attr_mod(0x2000_01FF), (0x1FF, 2));
        assert_eq!(Mft::from_attr_mod(0xF0FF_FE05), (0x005, 0xF));
    }

    // --- SMInfo ---
    fn sm_info_bytes() -> [u8; 21] {
        let mut b = [0u8; 21];
        b[0..8].copy_from_slice(&0x0002_c903_00a1_b2c1u64.to_be_bytes());
        b[8..16].copy_from_slice(&0x0000_0000_0000_0001u64.to_be_bytes());
        b[16..20].copy_from_slice(&[0, 0, 0x01, 0x00]); // ActCount 256
        b[20] = 0xf3; // Priority 15, Master
        b
    }

    fn sm_info() -> SmInfo {
        SmInfo {
            guid: Guid(0x0002_c903_00a1_b2c1),
            sm_key: 1,
            act_count: 256,
            priority: 15,
            sm_state: SmState::Master,
        }
    }

    #[test]
    fn sm_info_test_deconstruct() {
        let s = SmInfo::parse(&sm_info_bytes()).unwrap();
        assert_eq!(s.priority, 15);
        assert_eq!(s.sm_state, SmState::Master);
        assert_eq!(s.sm_state.name(), "Master");
        assert_eq!(s.act_count, 256);
    }

    #[test]
    fn sm_info_test_construct() {
        let mut out = [0xa5u8; 21];
        sm_info().emit(&mut out);
        assert_eq!(out, sm_info_bytes());
    }

    #[test]
    fn sm_info_test_parse() {
        assert_eq!(SmInfo::parse(&sm_info_bytes()), Ok(sm_info()));
    }

    #[test]
    fn sm_info_test_emit() {
        assert_eq!(sm_info().to_data()[..21], sm_info_bytes());
    }

    #[test]
    fn sm_info_test_impossible_len() {
        assert_eq!(
            SmInfo::parse(&sm_info_bytes()[..20]),
            Err(Error::Truncated("SMInfo"))
        );
    }

    #[test]
    fn attribute_ids() {
        assert_eq!(NodeInfo::ATTR_ID, AttrId(0x0011));
        assert_eq!(NodeDescription::ATTR_ID, AttrId(0x0010));
        assert_eq!(SwitchInfo::ATTR_ID, AttrId(0x0012));
        assert_eq!(GuidInfo::ATTR_ID, AttrId(0x0014));
        assert_eq!(PortInfo::ATTR_ID, AttrId(0x0015));
        assert_eq!(PKeyTable::ATTR_ID, AttrId(0x0016));
        assert_eq!(LinearForwardingTable::ATTR_ID, AttrId(0x0019));
        assert_eq!(MulticastForwardingTable::ATTR_ID, AttrId(0x001B));
        assert_eq!(SmInfo::ATTR_ID, AttrId(0x0020));
    }

    pub(crate) fn arb_data() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 64)
    }

    proptest! {
        // Reprs are generated by parsing arbitrary bytes: parse is onto the valid Reprs, so
        // this is parse ∘ emit = identity over all of them, and the masks show that every
        // non-reserved bit is carried.
        #[test]
        fn node_info_roundtrip(b in arb_data()) {
            let mut defined = [0xffu8; 64];
            defined[40..].fill(0);
            check_bits_preserved::<NodeInfo>(&b, &defined)?;
        }

        #[test]
        fn node_description_roundtrip(b in arb_data()) {
            check_bits_preserved::<NodeDescription>(&b, &[0xff; 64])?;
        }

        #[test]
        fn port_info_roundtrip(b in arb_data()) {
            check_bits_preserved::<PortInfo>(&b, &port_info_defined())?;
        }

        #[test]
        fn switch_info_roundtrip(b in arb_data()) {
            let mut defined = [0u8; 64];
            defined[..20].fill(0xff);
            defined[16] = 0xf8;
            defined[17] = 0;
            check_bits_preserved::<SwitchInfo>(&b, &defined)?;
        }

        #[test]
        fn tables_roundtrip(b in arb_data()) {
            check_bits_preserved::<LinearForwardingTable>(&b, &[0xff; 64])?;
            check_bits_preserved::<MulticastForwardingTable>(&b, &[0xff; 64])?;
            check_bits_preserved::<GuidInfo>(&b, &[0xff; 64])?;
            check_bits_preserved::<PKeyTable>(&b, &[0xff; 64])?;
        }

        #[test]
        fn sm_info_roundtrip(b in arb_data()) {
            let mut defined = [0u8; 64];
            defined[..21].fill(0xff);
            check_bits_preserved::<SmInfo>(&b, &defined)?;
        }

        #[test]
        fn node_description_text_roundtrip(s in "\\PC{0,70}") {
            let d = NodeDescription::new(&s);
            prop_assert!(s.starts_with(d.text()));
            prop_assert!(d.text().len() <= 64);
            prop_assert_eq!(NodeDescription::parse(&d.to_data()), Ok(d));
        }

        #[test]
        fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..70)) {
            let _ = NodeInfo::parse(&b);
            let _ = NodeDescription::parse(&b).map(|d| d.text().len());
            let _ = PortInfo::parse(&b);
            let _ = SwitchInfo::parse(&b);
            let _ = LinearForwardingTable::parse(&b);
            let _ = MulticastForwardingTable::parse(&b);
            let _ = GuidInfo::parse(&b);
            let _ = PKeyTable::parse(&b);
            let _ = SmInfo::parse(&b);
        }
    }
}
