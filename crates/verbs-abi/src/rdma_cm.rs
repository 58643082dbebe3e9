//! rdma-core's librdmacm C ABI (`<rdma/rdma_cma.h>`, rdma-core 44): the structs consumers
//! read directly (`rdma_cm_id` and its route, `rdma_cm_event`, `rdma_conn_param`,
//! `rdma_ud_param`, `rdma_addrinfo`, `rdma_event_channel`) and the enums' values, for the
//! drop-in `librdmacm.so.1` (`softib-rdmacm`). Sizes and offsets are asserted below, as
//! measured with a C program against Debian's librdmacm-dev 44.0 (x86-64).

use core::ffi::{c_char, c_int, c_void};
use core::mem::{offset_of, size_of};

use crate::{
    IbvAhAttr, IbvCompChannel, IbvContext, IbvCq, IbvGid, IbvPd, IbvQp, IbvSaPathRec, IbvSrq,
};

/// `enum rdma_cm_event_type`.
#[allow(missing_docs)]
pub mod event {
    pub const ADDR_RESOLVED: i32 = 0;
    pub const ADDR_ERROR: i32 = 1;
    pub const ROUTE_RESOLVED: i32 = 2;
    pub const ROUTE_ERROR: i32 = 3;
    pub const CONNECT_REQUEST: i32 = 4;
    pub const CONNECT_RESPONSE: i32 = 5;
    pub const CONNECT_ERROR: i32 = 6;
    pub const UNREACHABLE: i32 = 7;
    pub const REJECTED: i32 = 8;
    pub const ESTABLISHED: i32 = 9;
    pub const DISCONNECTED: i32 = 10;
    pub const DEVICE_REMOVAL: i32 = 11;
    pub const MULTICAST_JOIN: i32 = 12;
    pub const MULTICAST_ERROR: i32 = 13;
    pub const ADDR_CHANGE: i32 = 14;
    pub const TIMEWAIT_EXIT: i32 = 15;
}

/// `enum rdma_port_space`.
#[allow(missing_docs)]
pub mod port_space {
    pub const IPOIB: i32 = 0x0002;
    pub const TCP: i32 = 0x0106;
    pub const UDP: i32 = 0x0111;
    pub const IB: i32 = 0x013F;
}

/// `rdma_set_option` levels and names.
#[allow(missing_docs)]
pub mod option {
    pub const LEVEL_ID: i32 = 0;
    pub const LEVEL_IB: i32 = 1;
    pub const ID_TOS: i32 = 0;
    pub const ID_REUSEADDR: i32 = 1;
    pub const ID_AFONLY: i32 = 2;
    pub const ID_ACK_TIMEOUT: i32 = 3;
    pub const IB_PATH: i32 = 1;
}

/// `rdma_addrinfo::ai_flags`.
#[allow(missing_docs)]
pub mod rai {
    pub const PASSIVE: i32 = 1;
    pub const NUMERICHOST: i32 = 2;
    pub const NOROUTE: i32 = 4;
    pub const FAMILY: i32 = 8;
}

/// `struct rdma_event_channel`: the fd programs poll.
#[repr(C)]
#[derive(Debug)]
pub struct RdmaEventChannel {
    /// Readable while events wait.
    pub fd: c_int,
}

/// `struct sockaddr_storage`'s 128 bytes (8-aligned), which the address unions span.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy)]
pub struct SockaddrStorage(pub [u8; 128]);

impl Default for SockaddrStorage {
    fn default() -> SockaddrStorage {
        SockaddrStorage([0; 128])
    }
}

/// `struct rdma_ib_addr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct RdmaIbAddr {
    pub sgid: IbvGid,
    pub dgid: IbvGid,
    pub pkey: u16,
}

/// `struct rdma_addr`: source and destination socket addresses, and the GIDs.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct RdmaAddr {
    pub src_addr: SockaddrStorage,
    pub dst_addr: SockaddrStorage,
    pub ibaddr: RdmaIbAddr,
}

/// `struct rdma_route`.
#[repr(C)]
#[derive(Debug)]
#[allow(missing_docs)]
pub struct RdmaRoute {
    pub addr: RdmaAddr,
    pub path_rec: *mut IbvSaPathRec,
    pub num_paths: c_int,
}

/// `struct rdma_cm_id`.
#[repr(C)]
#[derive(Debug)]
#[allow(missing_docs)]
pub struct RdmaCmId {
    pub verbs: *mut IbvContext,
    pub channel: *mut RdmaEventChannel,
    pub context: *mut c_void,
    pub qp: *mut IbvQp,
    pub route: RdmaRoute,
    pub ps: c_int,
    pub port_num: u8,
    pub event: *mut RdmaCmEvent,
    pub send_cq_channel: *mut IbvCompChannel,
    pub send_cq: *mut IbvCq,
    pub recv_cq_channel: *mut IbvCompChannel,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub pd: *mut IbvPd,
    pub qp_type: u32,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(missing_docs)]
pub struct RdmaConnParam {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(missing_docs)]
pub struct RdmaUdParam {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: IbvAhAttr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// The `param` union of `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub union RdmaCmEventParam {
    pub conn: RdmaConnParam,
    pub ud: RdmaUdParam,
}

/// `struct rdma_cm_event`.
#[repr(C)]
#[allow(missing_docs)]
pub struct RdmaCmEvent {
    pub id: *mut RdmaCmId,
    pub listen_id: *mut RdmaCmId,
    pub event: c_int,
    pub status: c_int,
    pub param: RdmaCmEventParam,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
#[derive(Debug)]
#[allow(missing_docs)]
pub struct RdmaAddrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: u32,
    pub ai_dst_len: u32,
    pub ai_src_addr: *mut c_void,
    pub ai_dst_addr: *mut c_void,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut RdmaAddrinfo,
}

layout!(RdmaEventChannel, 4);
layout!(RdmaIbAddr, 40, dgid @ 16, pkey @ 32);
layout!(RdmaAddr, 296, dst_addr @ 128, ibaddr @ 256);
layout!(RdmaRoute, 312, path_rec @ 296, num_paths @ 304);
layout!(RdmaCmId, 416, channel @ 8, context @ 16, qp @ 24, route @ 32, ps @ 344,
    port_num @ 348, event @ 352, send_cq_channel @ 360, send_cq @ 368, recv_cq_channel @ 376,
    recv_cq @ 384, srq @ 392, pd @ 400, qp_type @ 408);
layout!(RdmaConnParam, 24, private_data_len @ 8, responder_resources @ 9,
    initiator_depth @ 10, flow_control @ 11, retry_count @ 12, rnr_retry_count @ 13, srq @ 14,
    qp_num @ 16);
layout!(RdmaUdParam, 56, private_data_len @ 8, ah_attr @ 16, qp_num @ 48, qkey @ 52);
layout!(RdmaCmEvent, 80, listen_id @ 8, event @ 16, status @ 20, param @ 24);
layout!(RdmaAddrinfo, 96, ai_family @ 4, ai_qp_type @ 8, ai_port_space @ 12, ai_src_len @ 16,
    ai_dst_len @ 20, ai_src_addr @ 24, ai_dst_addr @ 32, ai_src_canonname @ 40,
    ai_dst_canonname @ 48, ai_route_len @ 56, ai_route @ 64, ai_connect_len @ 72,
    ai_connect @ 80, ai_next @ 88);
