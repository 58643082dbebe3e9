//! rdma-core's libibumad C ABI (`<infiniband/umad.h>`, rdma-core 44): the buffer header every
//! MAD travels with, the CA and port descriptions, and the registration attributes, for the
//! drop-in `libibumad.so.3` (`softib-umad`). Layouts measured on Debian 12 x86-64
//! (`../shared/reference/DROPIN-ABI.md` §5.1) and asserted below.

use core::ffi::{c_char, c_int, c_uint};
use core::mem::{offset_of, size_of};

/// `UMAD_CA_NAME_LEN`.
pub const UMAD_CA_NAME_LEN: usize = 20;
/// `UMAD_CA_MAX_PORTS` (ports 0 to 9).
pub const UMAD_CA_MAX_PORTS: usize = 10;
/// `UMAD_MAX_DEVICES`.
pub const UMAD_MAX_DEVICES: usize = 32;
/// `UMAD_USER_RMPP`: the agent does RMPP itself (the library then leaves segments alone).
pub const UMAD_USER_RMPP: u32 = 1;

/// `struct ib_mad_addr`: where a MAD goes or came from, multi-byte fields in network order
/// except `pkey_index`.
#[allow(missing_docs)] // the fields keep their C names
#[repr(C, align(4))]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbMadAddr {
    pub qpn: u32,
    pub qkey: u32,
    pub lid: u16,
    pub sl: u8,
    pub path_bits: u8,
    pub grh_present: u8,
    pub gid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub gid: [u8; 16],
    pub flow_label: u32,
    pub pkey_index: u16,
    pub reserved: [u8; 6],
}

/// `struct ib_user_mad`: the header in front of every MAD a program sends or receives; the
/// MAD follows at `data` (offset 64).
#[allow(missing_docs)] // the fields keep their C names
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbUserMad {
    pub agent_id: u32,
    pub status: u32,
    pub timeout_ms: u32,
    pub retries: u32,
    pub length: u32,
    pub addr: IbMadAddr,
}

/// `umad_port_t`.
#[allow(missing_docs)] // the fields keep their C names
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct UmadPort {
    pub ca_name: [c_char; UMAD_CA_NAME_LEN],
    pub portnum: c_int,
    pub base_lid: c_uint,
    pub lmc: c_uint,
    pub sm_lid: c_uint,
    pub sm_sl: c_uint,
    pub state: c_uint,
    pub phys_state: c_uint,
    pub rate: c_uint,
    /// Network order.
    pub capmask: u32,
    /// Network order.
    pub gid_prefix: u64,
    /// Network order.
    pub port_guid: u64,
    pub pkeys_size: c_uint,
    /// `malloc`ed by `umad_get_port`, freed by `umad_release_port`.
    pub pkeys: *mut u16,
    pub link_layer: [c_char; UMAD_CA_NAME_LEN],
}

/// `umad_ca_t`.
#[allow(missing_docs)] // the fields keep their C names
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct UmadCa {
    pub ca_name: [c_char; UMAD_CA_NAME_LEN],
    pub node_type: c_uint,
    pub numports: c_int,
    pub fw_ver: [c_char; 20],
    pub ca_type: [c_char; 40],
    pub hw_ver: [c_char; 20],
    /// Network order.
    pub node_guid: u64,
    /// Network order.
    pub system_guid: u64,
    /// `malloc`ed by `umad_get_ca`, freed by `umad_release_ca`; NULL where there is no port.
    pub ports: [*mut UmadPort; UMAD_CA_MAX_PORTS],
}

/// `struct umad_device_node`: one CA of `umad_get_ca_device_list`'s list.
#[allow(missing_docs)] // the fields keep their C names
#[repr(C)]
#[derive(Debug)]
pub struct UmadDeviceNode {
    pub next: *mut UmadDeviceNode,
    pub ca_name: *const c_char,
}

/// `struct umad_reg_attr` (`umad_register2`).
#[allow(missing_docs)] // the fields keep their C names
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct UmadRegAttr {
    pub mgmt_class: u8,
    pub mgmt_class_version: u8,
    pub flags: u32,
    pub method_mask: [u64; 2],
    /// In host order, the low 24 bits.
    pub oui: u32,
    pub rmpp_version: u8,
}

layout!(IbMadAddr, 44, qpn @ 0, qkey @ 4, lid @ 8, sl @ 10, path_bits @ 11, grh_present @ 12,
    gid_index @ 13, hop_limit @ 14, traffic_class @ 15, gid @ 16, flow_label @ 32,
    pkey_index @ 36);
layout!(IbUserMad, 64, agent_id @ 0, status @ 4, timeout_ms @ 8, retries @ 12, length @ 16,
    addr @ 20);
layout!(UmadPort, 112, portnum @ 20, base_lid @ 24, sm_lid @ 32, state @ 40, rate @ 48,
    capmask @ 52, gid_prefix @ 56, port_guid @ 64, pkeys_size @ 72, pkeys @ 80,
    link_layer @ 88);
layout!(UmadCa, 208, node_type @ 20, numports @ 24, fw_ver @ 28, ca_type @ 48, hw_ver @ 88,
    node_guid @ 112, system_guid @ 120, ports @ 128);
layout!(UmadDeviceNode, 16, next @ 0, ca_name @ 8);
layout!(UmadRegAttr, 32, flags @ 4, method_mask @ 8, oui @ 24, rmpp_version @ 28);
