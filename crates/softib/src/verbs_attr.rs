//! What the verbs report about a device and its ports: the values of `struct ibv_device_attr`
//! (`ibv_query_device`), `struct ibv_port_attr` (`ibv_query_port`) and each GID's type
//! (`ibv_query_gid_type`), computed from the daemon's [`DeviceInfo`] in this one place.
//!
//! softib's own tools (`softib ibv_devinfo`) and the drop-in `libibverbs.so.1` both print or
//! return these, so an unmodified `ibv_devinfo` under the drop-in shows byte for byte what
//! softib's shows. A real device (the rdma-core backend, [`DeviceInfo::verbs`]) reports its
//! own limits; a softib device reports what the engine enforces.

use softib_wire::{Gid, Lid, Mtu};

use crate::{DeviceInfo, PortInfo};

/// `struct ibv_device_attr` plus `ibv_context::num_comp_vectors`, field for field.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // The field names are libibverbs'.
pub struct IbvDeviceAttr {
    /// As verbs format it: `0.0.0` where the device reports none (rxe).
    pub fw_ver: String,
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: i32,
    pub max_qp_wr: i32,
    pub device_cap_flags: u32,
    pub max_sge: i32,
    pub max_sge_rd: i32,
    pub max_cq: i32,
    pub max_cqe: i32,
    pub max_mr: i32,
    pub max_pd: i32,
    pub max_qp_rd_atom: i32,
    pub max_res_rd_atom: i32,
    pub max_qp_init_rd_atom: i32,
    /// 0 `IBV_ATOMIC_NONE`, 1 `IBV_ATOMIC_HCA`, 2 `IBV_ATOMIC_GLOB`.
    pub atomic_cap: u32,
    pub max_mw: i32,
    pub max_mcast_grp: i32,
    pub max_mcast_qp_attach: i32,
    pub max_total_mcast_qp_attach: i32,
    pub max_ah: i32,
    pub max_srq: i32,
    pub max_srq_wr: i32,
    pub max_srq_sge: i32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
    pub num_comp_vectors: i32,
}

/// `struct ibv_port_attr`, field for field.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // The field names are libibverbs'.
pub struct IbvPortAttr {
    /// `enum ibv_port_state`: 1 Down, 2 Init, 3 Armed, 4 Active.
    pub state: u8,
    pub max_mtu: Mtu,
    pub active_mtu: Mtu,
    pub gid_tbl_len: u32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: Lid,
    pub sm_lid: Lid,
    pub lmc: u8,
    /// The encoded value: 1 = 1 VL, 2 = 2, 3 = 4, 4 = 8, 5 = 15.
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    /// PortInfo encoding (0x1 1X, 0x2 4X, ...).
    pub active_width: u8,
    /// 1 SDR, 2 DDR, 4 QDR, 8 FDR10, 16 FDR, 32 EDR, ...
    pub active_speed: u8,
    pub phys_state: u8,
    /// `true`: `IBV_LINK_LAYER_INFINIBAND`; `false`: `IBV_LINK_LAYER_ETHERNET`.
    pub link_layer_ib: bool,
    pub port_cap_flags2: u16,
}

/// A GID's type as `ibv_query_gid_type` (and sysfs `gid_attrs/types`) give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    /// An InfiniBand GID (or RoCE v1): sysfs `IB/RoCE v1`.
    IbRoceV1,
    /// A RoCE v2 GID: sysfs `RoCE v2`.
    RoceV2,
}

/// `IBV_DEVICE_CURR_QP_STATE_MOD`: `ibv_modify_qp` checks `IBV_QP_CUR_STATE`.
const CURR_QP_STATE_MOD: u32 = 1 << 7;
/// `IBV_DEVICE_PORT_ACTIVE_EVENT`: port state changes raise asynchronous events.
const PORT_ACTIVE_EVENT: u32 = 1 << 10;
/// `IBV_DEVICE_SYS_IMAGE_GUID`.
const SYS_IMAGE_GUID: u32 = 1 << 11;
/// `IBV_DEVICE_RC_RNR_NAK_GEN`: the responder answers RNR NAK when no receive is posted.
const RC_RNR_NAK_GEN: u32 = 1 << 12;

/// Multicast limits of a softib device. The engine enforces none; these are rxe's figures,
/// which programs size their tables by.
const MAX_MCAST_GRP: i32 = 8192;
const MAX_MCAST_QP_ATTACH: i32 = 56;

fn int(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// What `ibv_query_device` reports for `d`.
pub fn device_attr(d: &DeviceInfo) -> IbvDeviceAttr {
    let a = &d.attr;
    let max_qp = int(a.max_qp);
    let mut attr = IbvDeviceAttr {
        // libibverbs shows 0.0.0 where the driver reports no firmware (rxe).
        fw_ver: if d.fw_ver.is_empty() {
            "0.0.0".into()
        } else {
            d.fw_ver.clone()
        },
        node_guid: d.node_guid.0,
        sys_image_guid: d.sys_image_guid.0,
        max_mr_size: a.max_mr_size,
        page_size_cap: 0xffff_f000,
        vendor_id: d.vendor_id,
        vendor_part_id: d.vendor_part_id,
        hw_ver: d.hw_ver,
        max_qp,
        max_qp_wr: int(a.max_qp_wr),
        device_cap_flags: CURR_QP_STATE_MOD | PORT_ACTIVE_EVENT | SYS_IMAGE_GUID | RC_RNR_NAK_GEN,
        max_sge: int(a.max_sge),
        // The engine takes the same scatter/gather lists for READ as for the rest.
        max_sge_rd: int(a.max_sge),
        max_cq: int(a.max_cq),
        max_cqe: int(a.max_cqe),
        max_mr: int(a.max_mr),
        max_pd: int(a.max_pd),
        max_qp_rd_atom: i32::from(a.max_qp_rd_atom),
        max_res_rd_atom: i32::from(a.max_qp_rd_atom).saturating_mul(max_qp),
        max_qp_init_rd_atom: i32::from(a.max_qp_init_rd_atom),
        // The engine executes atomics itself, atomically with respect to the whole HCA.
        atomic_cap: 1,
        max_mw: 0,
        max_mcast_grp: MAX_MCAST_GRP,
        max_mcast_qp_attach: MAX_MCAST_QP_ATTACH,
        max_total_mcast_qp_attach: MAX_MCAST_GRP.saturating_mul(MAX_MCAST_QP_ATTACH),
        max_ah: int(a.max_ah),
        max_srq: int(a.max_srq),
        max_srq_wr: int(a.max_srq_wr),
        max_srq_sge: int(a.max_sge),
        max_pkeys: 64,
        local_ca_ack_delay: 0,
        phys_port_cnt: d.ports.len().min(255) as u8,
        // One completion vector: every CQ signals its channel the same way.
        num_comp_vectors: 1,
    };
    // A real device (the rdma-core backend) says what it has.
    if let Some(v) = &d.verbs {
        attr.device_cap_flags = v.device_cap_flags;
        attr.page_size_cap = v.page_size_cap;
        attr.max_sge_rd = v.max_sge_rd;
        attr.max_res_rd_atom = v.max_res_rd_atom;
        attr.atomic_cap = v.atomic_cap;
        attr.max_mw = v.max_mw;
        attr.max_mcast_grp = v.max_mcast_grp;
        attr.max_mcast_qp_attach = v.max_mcast_qp_attach;
        attr.max_total_mcast_qp_attach = v.max_total_mcast_qp_attach;
        attr.max_ah = v.max_ah;
        attr.max_srq_sge = v.max_srq_sge;
        attr.max_pkeys = v.max_pkeys;
        attr.local_ca_ack_delay = v.local_ca_ack_delay;
        attr.num_comp_vectors = v.num_comp_vectors;
    }
    attr
}

/// What `ibv_query_port` reports for port `number` of `d` (`None`: no such port).
pub fn port_attr(d: &DeviceInfo, number: u8) -> Option<IbvPortAttr> {
    let (i, p) = d
        .ports
        .iter()
        .enumerate()
        .find(|(_, p)| p.number == number)?;
    let v = d.verbs.as_ref().and_then(|v| v.ports.get(i));
    Some(IbvPortAttr {
        state: p.state,
        max_mtu: p.max_mtu,
        active_mtu: p.active_mtu,
        gid_tbl_len: v.map_or(128, |v| u32::try_from(v.gid_tbl_len).unwrap_or(0)),
        port_cap_flags: p.capability_mask,
        max_msg_sz: v.map_or(d.attr.max_msg_sz, |v| v.max_msg_sz),
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: v.map_or(64, |v| v.pkey_tbl_len),
        lid: p.lid,
        sm_lid: p.sm_lid,
        lmc: p.lmc,
        max_vl_num: v.map_or(4, |v| v.max_vl_num),
        sm_sl: 0,
        subnet_timeout: v.map_or(18, |v| v.subnet_timeout),
        init_type_reply: 0,
        active_width: if p.width == 0 { 0x02 } else { p.width },
        active_speed: if p.speed == 0 { 1 } else { p.speed },
        phys_state: p.phys_state,
        link_layer_ib: p.link_layer_ib,
        port_cap_flags2: 0,
    })
}

/// The GID at `index` of `port` (all zeros past the end of the table, as a kernel reports an
/// unused entry), or `None` past `gid_tbl_len`.
pub fn gid(d: &DeviceInfo, port: &PortInfo, index: u32) -> Option<Gid> {
    let len = port_attr(d, port.number)?.gid_tbl_len;
    if index >= len {
        return None;
    }
    Some(
        port.gids
            .get(index as usize)
            .copied()
            .unwrap_or(Gid([0; 16])),
    )
}

/// The type of every GID of `port`: RoCE v2 on Ethernet, InfiniBand otherwise.
pub fn gid_type(port: &PortInfo) -> GidType {
    if port.link_layer_ib {
        GidType::IbRoceV1
    } else {
        GidType::RoceV2
    }
}
