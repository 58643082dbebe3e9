//! The values both sides exchange: devices and ports as the tools show them, MADs, RoCE links,
//! what each client owns, and why a request failed.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use softib_wire::{Gid, Guid, Lid, Mtu, Qpn};

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    /// Malformed or out-of-order request, or a wrong protocol version.
    Protocol,
    /// No such object (or not this client's).
    NotFound,
    /// An argument is not acceptable.
    Invalid,
    /// A queue, table or per-client limit is full.
    Exhausted,
    /// The object is in use.
    Busy,
    /// The QP's state does not allow it.
    WrongState,
    /// The client's user may not do it (not admitted, or management without the owner's
    /// rights); the message names the permission and who has it.
    Permission,
}

/// A device as `ibv_devices`, `ibstat` and `ibv_devinfo` show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Name (`mlx4_0`).
    pub name: String,
    /// CA type (`MT4099`).
    pub ca_type: String,
    /// NodeDescription.
    pub description: String,
    /// Firmware version.
    pub fw_ver: String,
    /// Hardware version.
    pub hw_ver: u32,
    /// NodeGUID.
    pub node_guid: Guid,
    /// SystemImageGUID.
    pub sys_image_guid: Guid,
    /// VendorID.
    pub vendor_id: u32,
    /// Vendor part ID.
    pub vendor_part_id: u32,
    /// Device limits.
    pub attr: softib_engine::DeviceAttr,
    /// Ports 1..=N.
    pub ports: Vec<PortInfo>,
    /// Packets and messages the HCA dropped, by reason (only nonzero counts): what explains
    /// a benchmark that stopped making progress.
    pub drops: Vec<(String, u64)>,
    /// What a real device's verbs report beyond `attr` (`ibv_devinfo -v`): filled by the
    /// rdma-core backend, absent for softib's own devices (the tools then show softib's).
    pub verbs: Option<VerbsAttr>,
}

/// The limits and flags of a real RDMA device that `ibv_devinfo -v` prints and softib's
/// [`softib_engine::DeviceAttr`] does not carry (`struct ibv_device_attr`, `ibv_context`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerbsAttr {
    /// `device_cap_flags`.
    pub device_cap_flags: u32,
    /// `page_size_cap`.
    pub page_size_cap: u64,
    /// `max_sge_rd`.
    pub max_sge_rd: i32,
    /// `max_res_rd_atom`.
    pub max_res_rd_atom: i32,
    /// `atomic_cap` (0 none, 1 HCA, 2 global).
    pub atomic_cap: u32,
    /// `max_mw`.
    pub max_mw: i32,
    /// `max_mcast_grp`.
    pub max_mcast_grp: i32,
    /// `max_mcast_qp_attach`.
    pub max_mcast_qp_attach: i32,
    /// `max_total_mcast_qp_attach`.
    pub max_total_mcast_qp_attach: i32,
    /// `max_ah`.
    pub max_ah: i32,
    /// `max_srq_sge`.
    pub max_srq_sge: i32,
    /// `max_pkeys`.
    pub max_pkeys: u16,
    /// `local_ca_ack_delay`.
    pub local_ca_ack_delay: u8,
    /// `ibv_context::num_comp_vectors`.
    pub num_comp_vectors: i32,
    /// Per port, in order (`struct ibv_port_attr`).
    pub ports: Vec<VerbsPortAttr>,
}

/// The port attributes of a real device that [`PortInfo`] does not carry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerbsPortAttr {
    /// `max_msg_sz`.
    pub max_msg_sz: u32,
    /// `max_vl_num` (the encoded value: 1 = 1 VL, 2 = 2, 3 = 4, 4 = 8, 5 = 15).
    pub max_vl_num: u8,
    /// `pkey_tbl_len`.
    pub pkey_tbl_len: u16,
    /// `gid_tbl_len`.
    pub gid_tbl_len: i32,
    /// `subnet_timeout`.
    pub subnet_timeout: u8,
}

/// A port as the tools show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PortInfo {
    /// Port number.
    pub number: u8,
    /// PortState (1 Down, 2 Init, 3 Armed, 4 Active).
    pub state: u8,
    /// PortPhysicalState (2 Polling, 3 Disabled, 5 LinkUp).
    pub phys_state: u8,
    /// Rate in Gb/s (40 for 4X QDR).
    pub rate: u32,
    /// LinkWidthActive bits.
    pub width: u8,
    /// LinkSpeedActive bits.
    pub speed: u8,
    /// Base LID.
    pub lid: Lid,
    /// LMC.
    pub lmc: u8,
    /// The master SM's LID.
    pub sm_lid: Lid,
    /// CapabilityMask.
    pub capability_mask: u32,
    /// Port GUID.
    pub port_guid: Guid,
    /// `true` for InfiniBand, `false` for Ethernet (RoCE).
    pub link_layer_ib: bool,
    /// Largest MTU.
    pub max_mtu: Mtu,
    /// Active MTU.
    pub active_mtu: Mtu,
    /// GID table.
    pub gids: Vec<Gid>,
}

impl PortInfo {
    /// Port 1 of a RoCE device as rxe reports it: no LIDs, 1X at 25 Gb/s (rate 10 in the
    /// kernel's encoding), the device-management capability bit only; Active/LinkUp while its
    /// interface is up, Down/Disabled otherwise.
    pub fn roce(guid: Guid, up: bool, max_mtu: Mtu, active_mtu: Mtu, gids: Vec<Gid>) -> PortInfo {
        PortInfo {
            number: 1,
            state: if up { 4 } else { 1 },
            phys_state: if up { 5 } else { 3 },
            rate: 10,
            width: 1,
            speed: 8,
            lid: Lid(0),
            lmc: 0,
            sm_lid: Lid(0),
            capability_mask: 0x0001_0000,
            port_guid: guid,
            link_layer_ib: false,
            max_mtu,
            active_mtu,
            gids,
        }
    }

    /// The logical state's name, as `ibstat` prints it.
    pub fn state_name(&self) -> &'static str {
        match self.state {
            1 => "Down",
            2 => "Initializing",
            3 => "Armed",
            4 => "Active",
            _ => "???",
        }
    }

    /// Why this port, on device `dev`, carries no data and what to do about it; `None` when it
    /// is Active. One sentence, shared by every tool that must explain a stall.
    pub fn why_not_active(&self, dev: &str) -> Option<String> {
        if self.state == 4 {
            return None;
        }
        let why = match (self.phys_state, self.state) {
            (5, 2) | (5, 3) => format!(
                "its link is up but no subnet manager has configured it (LID {}, SM lid {}); \
                 start one on this subnet, e.g. `opensm -g 0x{:016x}` on a host of it, and the \
                 port becomes Active after the SM's sweep",
                self.lid.0, self.sm_lid.0, self.port_guid.0
            ),
            (5, _) => "its link is up but its logical state does not carry data".into(),
            (3, _) => "it is Disabled".into(),
            _ => "its link is down: no cable, or the port at the other end is not up".into(),
        };
        Some(format!(
            "Port {} of {dev} is {}, not Active: {why}.",
            self.number,
            self.state_name()
        ))
    }
}

/// What one client owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientResources {
    /// Its process id (as it said in Hello).
    pub pid: u32,
    /// Its program name.
    pub program: String,
    /// Per device index: (PDs, CQs, QPs, MRs, AHs).
    pub per_device: Vec<(u32, [u32; 5])>,
    /// Shared buffers attached.
    pub buffers: u32,
}

/// A MAD received for an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mad {
    /// Device index.
    pub dev: u32,
    /// Port.
    pub port: u8,
    /// QP0 or QP1.
    pub qp: MadQp,
    /// The sender's LID.
    pub slid: Lid,
    /// The sender's QP.
    pub src_qpn: Qpn,
    /// The sender's GID, when the MAD came with one (always on RoCE, where it is the
    /// sender's address).
    pub sgid: Option<Gid>,
    /// 256 bytes.
    pub mad: Vec<u8>,
}

/// Which QP a management datagram came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MadQp {
    /// QP0: an SMP (for the local SM: a response to one of its requests).
    Smi,
    /// QP1: a GMP (SA, PMA, ...).
    Gsi,
}

/// A RoCEv2 device as `softib link add` configures it (and as the daemon persists it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkConfig {
    /// Device name (`rxe0`).
    pub name: String,
    /// The network interface it is bound to (`eth0`, `lo`).
    pub netdev: String,
    /// The address it sends from and listens on.
    pub addr: IpAddr,
    /// The UDP port (4791 unless a test needs another).
    pub udp_port: u16,
}
