//! Device and port attributes: what `ibv_query_device` and `ibv_query_port` report, and the
//! limits the engine enforces. Defaults follow the Linux rxe driver (`rxe_param.h`); every
//! value can be changed.

use softib_wire::{Gid, Guid, Lid, Mtu, PKey};

/// Device-wide attributes and limits (`struct ibv_device_attr`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DeviceAttr {
    /// Node GUID.
    pub node_guid: Guid,
    /// System image GUID.
    pub sys_image_guid: Guid,
    /// Vendor ID (IEEE OUI).
    pub vendor_id: u32,
    /// Vendor part ID.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Firmware version text.
    pub fw_ver: String,
    /// Largest registrable region in bytes.
    pub max_mr_size: u64,
    /// Maximum number of QPs.
    pub max_qp: u32,
    /// Maximum work requests per queue.
    pub max_qp_wr: u32,
    /// Maximum scatter/gather elements per WR.
    pub max_sge: u32,
    /// Maximum number of CQs.
    pub max_cq: u32,
    /// Maximum CQ entries.
    pub max_cqe: u32,
    /// Maximum number of MRs.
    pub max_mr: u32,
    /// Maximum number of PDs.
    pub max_pd: u32,
    /// Maximum outstanding READ/atomic requests a QP may have as a responder.
    pub max_qp_rd_atom: u8,
    /// Maximum outstanding READ/atomic requests a QP may issue.
    pub max_qp_init_rd_atom: u8,
    /// Maximum number of SRQs.
    pub max_srq: u32,
    /// Maximum WRs per SRQ.
    pub max_srq_wr: u32,
    /// Maximum number of address handles.
    pub max_ah: u32,
    /// Maximum inline data per send WR.
    pub max_inline_data: u32,
    /// Largest message in bytes.
    pub max_msg_sz: u32,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
}

impl Default for DeviceAttr {
    fn default() -> DeviceAttr {
        DeviceAttr {
            node_guid: Guid(0),
            sys_image_guid: Guid(0),
            vendor_id: 0,
            vendor_part_id: 0,
            hw_ver: 0,
            fw_ver: String::from("0.1.0"),
            max_mr_size: u64::MAX,
            max_qp: 0x10000,
            max_qp_wr: 0x4000,
            max_sge: 32,
            max_cq: 0x4000,
            max_cqe: (1 << 15) - 1,
            max_mr: 0x40000,
            max_pd: 0x10000,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_srq: 0x4000,
            max_srq_wr: 0x4000,
            max_ah: 0x8000,
            max_inline_data: 400,
            max_msg_sz: 0x80_0000,
            phys_port_cnt: 1,
        }
    }
}

/// Per-port attributes (`struct ibv_port_attr`) as the engine needs them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PortAttr {
    /// The largest MTU the port supports.
    pub max_mtu: Mtu,
    /// The MTU in use (UD messages may not exceed it).
    pub active_mtu: Mtu,
    /// The port's base LID (0 on RoCE).
    pub lid: Lid,
    /// The GID table.
    pub gids: Vec<Gid>,
    /// The P_Key table.
    pub pkeys: Vec<PKey>,
    /// Whether the port is active (data packets flow only then).
    pub active: bool,
}

impl Default for PortAttr {
    fn default() -> PortAttr {
        PortAttr {
            max_mtu: Mtu::Mtu4096,
            active_mtu: Mtu::Mtu4096,
            lid: Lid(0),
            gids: Vec::new(),
            pkeys: vec![PKey::DEFAULT],
            active: true,
        }
    }
}

/// Transport tuning that is not a verbs attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportConfig {
    /// The requester sets AckReq at least every this many packets of a long message
    /// (rxe's `RXE_MAX_PKT_PER_ACK`, 64).
    pub max_pkt_per_ack: u32,
    /// At most this many PSNs may be outstanding (unacknowledged) on an RC QP (rxe's
    /// `RXE_MAX_UNACKED_PSNS`, 128).
    pub max_unacked_psns: u32,
}

impl Default for TransportConfig {
    fn default() -> TransportConfig {
        TransportConfig {
            max_pkt_per_ack: 64,
            max_unacked_psns: 128,
        }
    }
}

/// Everything an [`crate::Hca`] is made from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HcaConfig {
    /// Device attributes.
    pub device: DeviceAttr,
    /// One entry per port; port numbers start at 1.
    pub ports: Vec<PortAttr>,
    /// Transport tuning.
    pub transport: TransportConfig,
    /// The seed of every random choice (initial QPNs, key bits).
    pub seed: u64,
}

impl HcaConfig {
    /// A one-port configuration with rxe's defaults and the given seed.
    pub fn with_seed(seed: u64) -> HcaConfig {
        HcaConfig {
            device: DeviceAttr::default(),
            ports: vec![PortAttr::default()],
            transport: TransportConfig::default(),
            seed,
        }
    }
}
