//! MADs built with softib-wire's `mad` API, and the values tshark must decode from them.
//!
//! Every SMP attribute softib implements, LID-routed and directed-route, Get and GetResp; SA
//! Get/GetTable (and their responses) of PathRecord, NodeRecord and PortInfoRecord; PMA
//! PortCounters and PortCountersExtended Get and GetResp. The expected values are written from
//! the structs given to softib (and, for the header bits, from the spec), never read back from
//! softib's output.

use softib_wire::mad::attr::{
    GuidInfo, LinearForwardingTable, NodeDescription, NodeInfo, NodeType, PKeyTable, PortInfo,
    PortPhysicalState, PortState, SmInfo, SmState, SmpAttribute, SwitchInfo,
};
use softib_wire::mad::perf::{self, PortCounters, PortCountersExtended};
use softib_wire::mad::sa::{self, NodeRecord, PathRecord, PortInfoRecord, Selector};
use softib_wire::mad::smp::{self, DirectedRoute};
use softib_wire::mad::{self, AttrId, Body, Method, MAD_LEN};
use softib_wire::{Gid, Guid, Lid, Mtu, PKey};

/// A value tshark must show for a field.
#[derive(Debug, Clone)]
pub enum Want {
    /// Every occurrence of the field equals this number (and there is at least one).
    N(u64),
    /// The occurrences of the field, in order, are exactly these numbers.
    Ns(Vec<u64>),
    /// An FT_BYTES field: exactly these bytes.
    Bytes(Vec<u8>),
    /// A string field.
    S(String),
}

/// One MAD and what tshark must decode from it.
pub struct MadCase {
    /// For messages.
    pub name: String,
    /// 0 for SMPs (QP0), 1 for GMPs (QP1).
    pub qpn: u32,
    /// The 256 bytes, as emitted by softib.
    pub mad: [u8; MAD_LEN],
    /// tshark field name → value. (tshark 4.0 decodes only the first record of an SA table,
    /// so only that one is listed for a GetTableResp.)
    pub want: Vec<(&'static str, Want)>,
}

type Fields = Vec<(&'static str, Want)>;

fn n(v: impl Into<u64>) -> Want {
    Want::N(v.into())
}

/// The common MAD header as it must appear on the wire. For a directed-route SMP, Status
/// carries the D bit in bit 15 and ClassSpecific is HopPointer:HopCount (IBA §14.2.1.2).
fn header_want(h: &mad::Repr, dr: Option<&DirectedRoute>) -> Fields {
    let (status, class_specific) = match dr {
        Some(dr) => (
            (h.status & 0x7FFF) | if dr.direction_inbound { 0x8000 } else { 0 },
            (u16::from(dr.hop_ptr) << 8) | u16::from(dr.hop_cnt),
        ),
        None => (h.status, h.class_specific),
    };
    vec![
        ("infiniband.mad.baseversion", n(h.base_version)),
        ("infiniband.mad.mgmtclass", n(u8::from(h.mgmt_class))),
        ("infiniband.mad.classversion", n(h.class_version)),
        ("infiniband.mad.method", n(u8::from(h.method))),
        ("infiniband.mad.status", n(status)),
        ("infiniband.mad.classspecific", n(class_specific)),
        ("infiniband.mad.transactionid", n(h.tid)),
        ("infiniband.mad.attributeid", n(h.attr_id.0)),
        ("infiniband.mad.attributemodifier", n(h.attr_mod)),
    ]
}

fn node_info() -> NodeInfo {
    NodeInfo {
        base_version: 1,
        class_version: 1,
        node_type: NodeType::Ca,
        num_ports: 2,
        system_image_guid: Guid(0x0002_c903_000a_0b00),
        node_guid: Guid(0x0002_c903_000a_0b01),
        port_guid: Guid(0x0002_c903_000a_0b02),
        partition_cap: 64,
        device_id: 0x1003,
        revision: 0x0000_00a0,
        local_port_num: 2,
        vendor_id: 0x00_02c9,
    }
}

fn node_info_want(x: &NodeInfo) -> Fields {
    vec![
        ("infiniband.nodeinfo.baseversion", n(x.base_version)),
        ("infiniband.nodeinfo.classversion", n(x.class_version)),
        ("infiniband.nodeinfo.nodetype", n(u8::from(x.node_type))),
        ("infiniband.nodeinfo.numports", n(x.num_ports)),
        (
            "infiniband.nodeinfo.systemimageguid",
            n(x.system_image_guid.0),
        ),
        ("infiniband.nodeinfo.nodeguid", n(x.node_guid.0)),
        ("infiniband.nodeinfo.portguid", n(x.port_guid.0)),
        ("infiniband.nodeinfo.partitioncap", n(x.partition_cap)),
        ("infiniband.nodeinfo.deviceid", n(x.device_id)),
        ("infiniband.nodeinfo.revision", n(x.revision)),
        ("infiniband.nodeinfo.localportnum", n(x.local_port_num)),
        ("infiniband.nodeinfo.vendorid", n(x.vendor_id)),
    ]
}

const NODE_DESC: &str = "softib-tshark-test HCA-1";

fn node_desc_want(x: &NodeDescription) -> Fields {
    vec![(
        "infiniband.nodedescription.nodestring",
        Want::S(x.text().to_string()),
    )]
}

fn port_info() -> PortInfo {
    PortInfo {
        m_key: 0x1122_3344_5566_7788,
        gid_prefix: 0xfe80_0000_0000_0000,
        lid: Lid(0x0012),
        master_sm_lid: Lid(0x0001),
        capability_mask: 0x0251_0a6a,
        diag_code: 0x0003,
        m_key_lease_period: 0x00f0,
        local_port_num: 1,
        link_width_enabled: 0x03,
        link_width_supported: 0x03,
        link_width_active: 0x02,
        link_speed_supported: 0x7,
        port_state: PortState::Active,
        port_physical_state: PortPhysicalState::LinkUp,
        link_down_default_state: 2,
        m_key_protect_bits: 1,
        lmc: 2,
        link_speed_active: 0x4,
        link_speed_enabled: 0x7,
        neighbor_mtu: Mtu::Mtu4096,
        master_sm_sl: 3,
        vl_cap: 4,
        init_type: 0x5,
        vl_high_limit: 0x11,
        vl_arbitration_high_cap: 8,
        vl_arbitration_low_cap: 9,
        init_type_reply: 0x6,
        mtu_cap: Mtu::Mtu2048,
        vl_stall_count: 7,
        hoq_life: 0x13,
        operational_vls: 3,
        partition_enforcement_inbound: true,
        partition_enforcement_outbound: false,
        filter_raw_inbound: true,
        filter_raw_outbound: false,
        m_key_violations: 0x0101,
        p_key_violations: 0x0202,
        q_key_violations: 0x0303,
        guid_cap: 32,
        client_reregister: true,
        multicast_pkey_trap_suppression_enabled: 1,
        subnet_timeout: 18,
        resp_time_value: 17,
        local_phy_errors: 0xA,
        overrun_errors: 0x5,
        max_credit_hint: 0x0400,
        link_round_trip_latency: 0x01_2345,
        capability_mask2: 0x0020,
        link_speed_ext_active: 0x1,
        link_speed_ext_supported: 0x3,
        link_speed_ext_enabled: 0x1E,
    }
}

/// The PortInfo fields tshark 4.0 decodes (it has no field for MulticastPKeyTrapSuppression,
/// CapabilityMask2 or the LinkSpeedExt* fields; those are checked by the byte round trip in
/// softib's own tests only).
fn port_info_want(x: &PortInfo) -> Fields {
    let b = |v: bool| n(u8::from(v));
    vec![
        ("infiniband.portinfo.m_key", n(x.m_key)),
        ("infiniband.portinfo.guid", n(x.gid_prefix)),
        ("infiniband.portinfo.lid", n(x.lid.0)),
        ("infiniband.portinfo.mastersmlid", n(x.master_sm_lid.0)),
        ("infiniband.portinfo.capabilitymask", n(x.capability_mask)),
        ("infiniband.portinfo.diagcode", n(x.diag_code)),
        (
            "infiniband.portinfo.m_keyleaseperiod",
            n(x.m_key_lease_period),
        ),
        ("infiniband.portinfo.localportnum", n(x.local_port_num)),
        (
            "infiniband.portinfo.linkwidthenabled",
            n(x.link_width_enabled),
        ),
        (
            "infiniband.portinfo.linkwidthsupported",
            n(x.link_width_supported),
        ),
        (
            "infiniband.portinfo.linkwidthactive",
            n(x.link_width_active),
        ),
        (
            "infiniband.portinfo.linkspeedsupported",
            n(x.link_speed_supported),
        ),
        ("infiniband.portinfo.portstate", n(u8::from(x.port_state))),
        (
            "infiniband.portinfo.portphysicalstate",
            n(u8::from(x.port_physical_state)),
        ),
        (
            "infiniband.portinfo.linkdowndefaultstate",
            n(x.link_down_default_state),
        ),
        (
            "infiniband.portinfo.m_keyprotectbits",
            n(x.m_key_protect_bits),
        ),
        ("infiniband.portinfo.lmc", n(x.lmc)),
        (
            "infiniband.portinfo.linkspeedactive",
            n(x.link_speed_active),
        ),
        (
            "infiniband.portinfo.linkspeedenabled",
            n(x.link_speed_enabled),
        ),
        (
            "infiniband.portinfo.neighbormtu",
            n(u8::from(x.neighbor_mtu)),
        ),
        ("infiniband.portinfo.mastersmsl", n(x.master_sm_sl)),
        ("infiniband.portinfo.vlcap", n(x.vl_cap)),
        ("infiniband.portinfo.inittype", n(x.init_type)),
        ("infiniband.portinfo.vlhighlimit", n(x.vl_high_limit)),
        (
            "infiniband.portinfo.vlarbitrationhighcap",
            n(x.vl_arbitration_high_cap),
        ),
        (
            "infiniband.portinfo.vlarbitrationlowcap",
            n(x.vl_arbitration_low_cap),
        ),
        ("infiniband.portinfo.inittypereply", n(x.init_type_reply)),
        ("infiniband.portinfo.mtucap", n(u8::from(x.mtu_cap))),
        ("infiniband.portinfo.vlstallcount", n(x.vl_stall_count)),
        ("infiniband.portinfo.hoqlife", n(x.hoq_life)),
        ("infiniband.portinfo.operationalvls", n(x.operational_vls)),
        (
            "infiniband.portinfo.partitionenforcementinbound",
            b(x.partition_enforcement_inbound),
        ),
        (
            "infiniband.portinfo.partitionenforcementoutbound",
            b(x.partition_enforcement_outbound),
        ),
        (
            "infiniband.portinfo.filterrawinbound",
            b(x.filter_raw_inbound),
        ),
        (
            "infiniband.portinfo.filterrawoutbound",
            b(x.filter_raw_outbound),
        ),
        ("infiniband.portinfo.m_keyviolations", n(x.m_key_violations)),
        ("infiniband.portinfo.p_keyviolations", n(x.p_key_violations)),
        ("infiniband.portinfo.q_keyviolations", n(x.q_key_violations)),
        ("infiniband.portinfo.guidcap", n(x.guid_cap)),
        (
            "infiniband.portinfo.clientreregister",
            b(x.client_reregister),
        ),
        ("infiniband.portinfo.subnettimeout", n(x.subnet_timeout)),
        ("infiniband.portinfo.resptimevalue", n(x.resp_time_value)),
        ("infiniband.portinfo.localphyerrors", n(x.local_phy_errors)),
        ("infiniband.portinfo.overrunerrors", n(x.overrun_errors)),
        ("infiniband.portinfo.maxcredithint", n(x.max_credit_hint)),
        (
            "infiniband.portinfo.linkroundtriplatency",
            n(x.link_round_trip_latency),
        ),
    ]
}

fn switch_info() -> SwitchInfo {
    SwitchInfo {
        linear_fdb_cap: 0xC000,
        random_fdb_cap: 0,
        multicast_fdb_cap: 0x0400,
        linear_fdb_top: 0x0042,
        default_port: 1,
        default_multicast_primary_port: 0xFF,
        default_multicast_not_primary_port: 0xFF,
        life_time_value: 0x12,
        port_state_change: true,
        optimized_sl_to_vl_mapping_programming: 2,
        lids_per_port: 1,
        partition_enforcement_cap: 32,
        inbound_enforcement_cap: true,
        outbound_enforcement_cap: false,
        filter_raw_inbound_cap: true,
        filter_raw_outbound_cap: false,
        enhanced_port0: true,
        multicast_fdb_top: 0xC01F,
    }
}

fn switch_info_want(x: &SwitchInfo) -> Fields {
    let b = |v: bool| n(u8::from(v));
    vec![
        ("infiniband.switchinfo.linearfdbcap", n(x.linear_fdb_cap)),
        ("infiniband.switchinfo.randomfdbcap", n(x.random_fdb_cap)),
        (
            "infiniband.switchinfo.multicastfdbcap",
            n(x.multicast_fdb_cap),
        ),
        ("infiniband.switchinfo.linearfdbtop", n(x.linear_fdb_top)),
        ("infiniband.switchinfo.defaultport", n(x.default_port)),
        (
            "infiniband.switchinfo.defaultmulticastprimaryport",
            n(x.default_multicast_primary_port),
        ),
        (
            "infiniband.switchinfo.defaultmulticastnotprimaryport",
            n(x.default_multicast_not_primary_port),
        ),
        ("infiniband.switchinfo.lifetimevalue", n(x.life_time_value)),
        (
            "infiniband.switchinfo.portstatechange",
            b(x.port_state_change),
        ),
        (
            "infiniband.switchinfo.optimizedsltovlmappingprogramming",
            n(x.optimized_sl_to_vl_mapping_programming),
        ),
        ("infiniband.switchinfo.lidsperport", n(x.lids_per_port)),
        (
            "infiniband.switchinfo.partitionenforcementcap",
            n(x.partition_enforcement_cap),
        ),
        (
            "infiniband.switchinfo.inboundenforcementcap",
            b(x.inbound_enforcement_cap),
        ),
        (
            "infiniband.switchinfo.outboundenforcementcap",
            b(x.outbound_enforcement_cap),
        ),
        (
            "infiniband.switchinfo.filterrawinboundcap",
            b(x.filter_raw_inbound_cap),
        ),
        (
            "infiniband.switchinfo.filterrawoutboundcap",
            b(x.filter_raw_outbound_cap),
        ),
        (
            "infiniband.switchinfo.enhancedportzero",
            b(x.enhanced_port0),
        ),
    ]
}

fn lft() -> LinearForwardingTable {
    let mut ports = [0u8; 64];
    for (i, p) in ports.iter_mut().enumerate() {
        *p = if i % 9 == 0 { 0xFF } else { (i % 36) as u8 };
    }
    LinearForwardingTable { ports }
}

fn lft_want(x: &LinearForwardingTable) -> Fields {
    vec![(
        "infiniband.linearforwardingtable.port",
        Want::Ns(x.ports.iter().map(|&p| u64::from(p)).collect()),
    )]
}

fn guid_info() -> GuidInfo {
    let mut guids = [Guid(0); 8];
    for (i, g) in guids.iter_mut().enumerate() {
        *g = Guid(0x0002_c903_000a_0b02 + 0x100 * i as u64);
    }
    GuidInfo { guids }
}

fn pkey_table() -> PKeyTable {
    let mut pkeys = [PKey(0); 32];
    pkeys[0] = PKey(0xFFFF);
    pkeys[1] = PKey(0x7FFF);
    pkeys[2] = PKey(0x8001);
    pkeys[31] = PKey(0x1234);
    PKeyTable { pkeys }
}

fn pkey_table_want(x: &PKeyTable) -> Fields {
    vec![
        (
            "infiniband.p_keytable.membershiptype",
            Want::Ns(x.pkeys.iter().map(|p| u64::from(p.0 >> 15)).collect()),
        ),
        (
            "infiniband.p_keytable.p_keybase",
            Want::Ns(x.pkeys.iter().map(|p| u64::from(p.0 & 0x7FFF)).collect()),
        ),
    ]
}

fn sm_info() -> SmInfo {
    SmInfo {
        guid: Guid(0x0002_c903_000a_0b01),
        sm_key: 0x0123_4567_89ab_cdef,
        act_count: 0x0000_1234,
        priority: 0xC,
        sm_state: SmState::Master,
    }
}

fn sm_info_want(x: &SmInfo) -> Fields {
    vec![
        ("infiniband.sminfo.guid", n(x.guid.0)),
        ("infiniband.sminfo.sm_key", n(x.sm_key)),
        ("infiniband.sminfo.actcount", n(x.act_count)),
        ("infiniband.sminfo.priority", n(x.priority)),
        ("infiniband.sminfo.smstate", n(u8::from(x.sm_state))),
    ]
}

fn emit_body(body: &Body<'_>) -> [u8; MAD_LEN] {
    let mut out = [0u8; MAD_LEN];
    body.emit(&mut out);
    out
}

/// Directed route used by the DR SMPs: out of port 1, then port 3, then port 7.
const PATH: [u8; 3] = [1, 3, 7];

fn smp_cases(
    out: &mut Vec<MadCase>,
    name: &str,
    attr_id: AttrId,
    attr_mod: u32,
    data: [u8; smp::DATA_LEN],
    attr_want: Fields,
) {
    let m_key = 0x0000_0000_0000_0000;
    let tid = 0x0000_5eed_0000_0000 | u64::from(attr_id.0) << 8;
    for dr in [false, true] {
        let get = if dr {
            smp::Repr::dr_get(tid + 1, attr_id, attr_mod, m_key, &PATH).expect("route")
        } else {
            smp::Repr::lid_get(tid, attr_id, attr_mod, 0x1122_3344_5566_7788)
        };
        let mut resp = get.response(0, data);
        if let Some(r) = resp.dr.as_mut() {
            // On the way back the return path has been filled in hop by hop.
            r.return_path[1..=PATH.len()].copy_from_slice(&[2, 5, 1]);
            r.hop_ptr = r.hop_cnt;
        }
        for (what, smp) in [("Get", get), ("GetResp", resp)] {
            let routing = if dr { "DR" } else { "LID" };
            let mut want = header_want(&smp.header, smp.dr.as_ref());
            match &smp.dr {
                None => want.push(("infiniband.smplid.mkey", n(smp.m_key))),
                Some(r) => {
                    want.push(("infiniband.smplid.mkey", n(smp.m_key)));
                    want.push(("infiniband.smpdirected.hoppointer", n(r.hop_ptr)));
                    want.push(("infiniband.smpdirected.hopcount", n(r.hop_cnt)));
                    want.push(("infiniband.smpdirected.drslid", n(r.dr_slid.0)));
                    want.push(("infiniband.smpdirected.drdlid", n(r.dr_dlid.0)));
                    want.push((
                        "infiniband.smpdirected.initialpath",
                        Want::Bytes(r.initial_path.to_vec()),
                    ));
                    want.push((
                        "infiniband.smpdirected.returnpath",
                        Want::Bytes(r.return_path.to_vec()),
                    ));
                }
            }
            if what == "GetResp" {
                want.extend(attr_want.iter().cloned());
            }
            out.push(MadCase {
                name: format!("SMP {routing} {what}({name})"),
                qpn: 0,
                mad: emit_body(&Body::Smp(smp)),
                want,
            });
        }
    }
}

fn path_record() -> PathRecord {
    PathRecord {
        service_id: 0,
        dgid: Gid([
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0x0a, 0x0b, 0x02,
        ]),
        sgid: Gid([
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0x0a, 0x0b, 0x01,
        ]),
        dlid: Lid(0x0012),
        slid: Lid(0x0001),
        raw_traffic: false,
        flow_label: 0x12345,
        hop_limit: 0x40,
        tclass: 0x68,
        reversible: true,
        numb_path: 1,
        pkey: PKey(0xFFFF),
        qos_class: 0,
        sl: 3,
        mtu_selector: Selector::Exactly,
        mtu: Mtu::Mtu4096,
        rate_selector: Selector::Exactly,
        rate: 7,
        packet_life_time_selector: Selector::Exactly,
        packet_life_time: 18,
        preference: 0,
    }
}

fn path_record_want(recs: &[PathRecord]) -> Fields {
    let ns = |f: &dyn Fn(&PathRecord) -> u64| Want::Ns(recs.iter().map(f).collect());
    let gids = |f: &dyn Fn(&PathRecord) -> Gid| -> Want {
        // FT_IPv6 fields: tshark prints GIDs as IPv6 addresses.
        let v: Vec<String> = recs
            .iter()
            .map(|r| std::net::Ipv6Addr::from(f(r).0).to_string())
            .collect();
        Want::S(v.join(","))
    };
    vec![
        ("infiniband.pathrecord.dgid", gids(&|r| r.dgid)),
        ("infiniband.pathrecord.sgid", gids(&|r| r.sgid)),
        ("infiniband.pathrecord.dlid", ns(&|r| r.dlid.0.into())),
        ("infiniband.pathrecord.slid", ns(&|r| r.slid.0.into())),
        (
            "infiniband.pathrecord.rawtraffic",
            ns(&|r| r.raw_traffic.into()),
        ),
        (
            "infiniband.pathrecord.flowlabel",
            ns(&|r| r.flow_label.into()),
        ),
        (
            "infiniband.pathrecord.hoplimit",
            ns(&|r| r.hop_limit.into()),
        ),
        ("infiniband.pathrecord.tclass", ns(&|r| r.tclass.into())),
        (
            "infiniband.pathrecord.reversible",
            ns(&|r| r.reversible.into()),
        ),
        (
            "infiniband.pathrecord.numbpath",
            ns(&|r| r.numb_path.into()),
        ),
        ("infiniband.pathrecord.p_key", ns(&|r| r.pkey.0.into())),
        ("infiniband.pathrecord.sl", ns(&|r| r.sl.into())),
        (
            "infiniband.pathrecord.mtuselector",
            ns(&|r| u8::from(r.mtu_selector).into()),
        ),
        ("infiniband.pathrecord.mtu", ns(&|r| u8::from(r.mtu).into())),
        (
            "infiniband.pathrecord.rateselector",
            ns(&|r| u8::from(r.rate_selector).into()),
        ),
        ("infiniband.pathrecord.rate", ns(&|r| r.rate.into())),
        (
            "infiniband.pathrecord.packetlifetimeselector",
            ns(&|r| u8::from(r.packet_life_time_selector).into()),
        ),
        (
            "infiniband.pathrecord.packetlifetime",
            ns(&|r| r.packet_life_time.into()),
        ),
        (
            "infiniband.pathrecord.preference",
            ns(&|r| r.preference.into()),
        ),
    ]
}

/// Records laid out `attr_offset × 8` bytes apart, as an SA response carries them.
fn records<T>(recs: &[T], len: usize, emit: impl Fn(&T, &mut [u8])) -> Vec<u8> {
    let stride = usize::from(sa::attr_offset_for(len)) * 8;
    let mut data = vec![0u8; stride * recs.len()];
    for (i, r) in recs.iter().enumerate() {
        emit(r, &mut data[i * stride..]);
    }
    data
}

fn sa_header_want(r: &sa::Repr<'_>) -> Fields {
    let mut want = header_want(&r.header, None);
    want.extend([
        ("infiniband.sa.smkey", n(r.sm_key)),
        ("infiniband.sa.attributeoffset", n(r.attr_offset)),
        ("infiniband.sa.componentmask", n(r.comp_mask)),
        ("infiniband.rmpp.rmppversion", n(r.rmpp.version)),
        ("infiniband.rmpp.rmpptype", n(u8::from(r.rmpp.rmpp_type))),
        ("infiniband.rmpp.rresptime", n(r.rmpp.resp_time)),
        ("infiniband.rmpp.rmppflags", n(r.rmpp.flags)),
        ("infiniband.rmpp.rmppstatus", n(r.rmpp.status)),
    ]);
    want
}

/// The SA exchanges of one record type: Get and GetTable with the first record as template,
/// and their responses (GetResp with the first record, GetTableResp with all of them).
struct SaSpec<'a> {
    name: &'static str,
    attr_id: AttrId,
    comp_mask: u64,
    record_len: usize,
    /// The records, `AttributeOffset × 8` bytes apart.
    table: &'a [u8],
    table_records: usize,
    /// What tshark must show for the first record. tshark 4.0 decodes only the first record
    /// of a GetTableResp, so the others are not checked by it.
    first_record_want: Fields,
}

fn sa_cases(out: &mut Vec<MadCase>, spec: SaSpec<'_>) {
    let name = spec.name;
    let template = &spec.table[..spec.record_len];
    for (k, method) in [Method::Get, Method::GetTable].into_iter().enumerate() {
        let tid = 0x0000_5a00_0000_0000 | (u64::from(spec.attr_id.0) << 8) | k as u64;
        let req = sa::Repr::request(method, tid, spec.attr_id, spec.comp_mask, template);
        let mut want = sa_header_want(&req);
        want.extend(spec.first_record_want.iter().cloned());
        out.push(MadCase {
            name: format!("SA {method:?}({name})"),
            qpn: 1,
            mad: emit_body(&Body::Sa(req)),
            want,
        });
        let (data, n_rec) = if method == Method::Get {
            let stride = usize::from(sa::attr_offset_for(spec.record_len)) * 8;
            (&spec.table[..stride], 1)
        } else {
            (spec.table, spec.table_records)
        };
        let resp = req.response(0, spec.record_len, n_rec, data);
        let mut want = sa_header_want(&resp);
        if resp.rmpp.is_active() {
            want.push(("infiniband.rmpp.segmentnumber", n(resp.rmpp.data1)));
            want.push(("infiniband.rmpp.payloadlength", n(resp.rmpp.data2)));
        }
        want.extend(spec.first_record_want.iter().cloned());
        out.push(MadCase {
            name: format!("SA {:?}({name})", resp.header.method),
            qpn: 1,
            mad: emit_body(&Body::Sa(resp)),
            want,
        });
    }
}

fn port_counters() -> PortCounters {
    PortCounters {
        port_select: 1,
        counter_select: 0xFFFF,
        symbol_error_counter: 0x0101,
        link_error_recovery_counter: 2,
        link_downed_counter: 3,
        port_rcv_errors: 0x0404,
        port_rcv_remote_physical_errors: 0x0505,
        port_rcv_switch_relay_errors: 0x0606,
        port_xmit_discards: 0x0707,
        port_xmit_constraint_errors: 8,
        port_rcv_constraint_errors: 9,
        counter_select2: 0,
        local_link_integrity_errors: 0xA,
        excessive_buffer_overrun_errors: 0xB,
        qp1_dropped: 0,
        vl15_dropped: 0x0C0C,
        port_xmit_data: 0x0D0D_0D0D,
        port_rcv_data: 0x0E0E_0E0E,
        port_xmit_pkts: 0x0F0F_0F0F,
        port_rcv_pkts: 0x1010_1010,
        port_xmit_wait: 0,
    }
}

fn port_counters_want(x: &PortCounters) -> Fields {
    vec![
        ("infiniband.portcounters.portselect", n(x.port_select)),
        ("infiniband.portcounters.counterselect", n(x.counter_select)),
        (
            "infiniband.portcounters.symbolerrorcounter",
            n(x.symbol_error_counter),
        ),
        (
            "infiniband.portcounters.linkerrorrecoverycounter",
            n(x.link_error_recovery_counter),
        ),
        (
            "infiniband.portcounters.linkdownedcounter",
            n(x.link_downed_counter),
        ),
        (
            "infiniband.portcounters.portrcverrors",
            n(x.port_rcv_errors),
        ),
        (
            "infiniband.portcounters.portrcvremotephysicalerrors",
            n(x.port_rcv_remote_physical_errors),
        ),
        (
            "infiniband.portcounters.portrcvswitchrelayerrors",
            n(x.port_rcv_switch_relay_errors),
        ),
        (
            "infiniband.portcounters.portxmitdiscards",
            n(x.port_xmit_discards),
        ),
        (
            "infiniband.portcounters.portxmitconstrainterrors",
            n(x.port_xmit_constraint_errors),
        ),
        (
            "infiniband.portcounters.portrcvconstrainterrors",
            n(x.port_rcv_constraint_errors),
        ),
        (
            "infiniband.portcounters.locallinkintegrityerrors",
            n(x.local_link_integrity_errors),
        ),
        (
            "infiniband.portcounters.excessivebufferoverrunerrors",
            n(x.excessive_buffer_overrun_errors),
        ),
        ("infiniband.portcounters.vl15dropped", n(x.vl15_dropped)),
        ("infiniband.portcounters.portxmitdata", n(x.port_xmit_data)),
        ("infiniband.portcounters.portrcvdata", n(x.port_rcv_data)),
        ("infiniband.portcounters.portxmitpkts", n(x.port_xmit_pkts)),
        ("infiniband.portcounters.portrcvpkts", n(x.port_rcv_pkts)),
    ]
}

fn port_counters_ext() -> PortCountersExtended {
    PortCountersExtended {
        port_select: 1,
        counter_select: 0x00FF,
        counter_select2: 0,
        port_xmit_data: 0x0102_0304_0506_0708,
        port_rcv_data: 0x1112_1314_1516_1718,
        port_xmit_pkts: 0x2122_2324_2526_2728,
        port_rcv_pkts: 0x3132_3334_3536_3738,
        port_unicast_xmit_pkts: 0x4142_4344_4546_4748,
        port_unicast_rcv_pkts: 0x5152_5354_5556_5758,
        port_multicast_xmit_pkts: 0x6162_6364_6566_6768,
        port_multicast_rcv_pkts: 0x7172_7374_7576_7778,
    }
}

fn port_counters_ext_want(x: &PortCountersExtended) -> Fields {
    vec![
        ("infiniband.portcounters_ext.portselect", n(x.port_select)),
        (
            "infiniband.portcounters_ext.counterselect",
            n(x.counter_select),
        ),
        (
            "infiniband.portcounters_ext.portxmitdata",
            n(x.port_xmit_data),
        ),
        (
            "infiniband.portcounters_ext.portrcvdata",
            n(x.port_rcv_data),
        ),
        (
            "infiniband.portcounters_ext.portxmitpkts",
            n(x.port_xmit_pkts),
        ),
        (
            "infiniband.portcounters_ext.portrcvpkts",
            n(x.port_rcv_pkts),
        ),
        (
            "infiniband.portcounters_ext.portunicastxmitpkts",
            n(x.port_unicast_xmit_pkts),
        ),
        (
            "infiniband.portcounters_ext.portunicastrcvpkts",
            n(x.port_unicast_rcv_pkts),
        ),
        (
            "infiniband.portcounters_ext.portmulticastxmitpkts",
            n(x.port_multicast_xmit_pkts),
        ),
        (
            "infiniband.portcounters_ext.portmulticastrcvpkts",
            n(x.port_multicast_rcv_pkts),
        ),
    ]
}

fn pma_cases(out: &mut Vec<MadCase>) {
    let pc = port_counters();
    let mut pc_bytes = [0u8; PortCounters::LEN];
    pc.emit(&mut pc_bytes);
    let query = PortCounters {
        port_select: 1,
        counter_select: 0,
        ..PortCounters::default()
    };
    let mut q_bytes = [0u8; PortCounters::LEN];
    query.emit(&mut q_bytes);
    let get = perf::Repr::request(
        Method::Get,
        0x0000_7e57_0000_0001,
        AttrId::PORT_COUNTERS,
        0,
        &q_bytes,
    );
    let resp = get.response(0, &pc_bytes);
    for (what, r, x) in [("Get", get, query), ("GetResp", resp, pc)] {
        let mut want = header_want(&r.header, None);
        want.extend(port_counters_want(&x));
        out.push(MadCase {
            name: format!("PMA {what}(PortCounters)"),
            qpn: 1,
            mad: emit_body(&Body::Perf(r)),
            want,
        });
    }
    let pce = port_counters_ext();
    let mut pce_bytes = [0u8; PortCountersExtended::LEN];
    pce.emit(&mut pce_bytes);
    let query = PortCountersExtended {
        port_select: 1,
        ..PortCountersExtended::default()
    };
    let mut q_bytes = [0u8; PortCountersExtended::LEN];
    query.emit(&mut q_bytes);
    let get = perf::Repr::request(
        Method::Get,
        0x0000_7e57_0000_0002,
        AttrId::PORT_COUNTERS_EXTENDED,
        0,
        &q_bytes,
    );
    let resp = get.response(0, &pce_bytes);
    for (what, r, x) in [("Get", get, query), ("GetResp", resp, pce)] {
        let mut want = header_want(&r.header, None);
        want.extend(port_counters_ext_want(&x));
        out.push(MadCase {
            name: format!("PMA {what}(PortCountersExtended)"),
            qpn: 1,
            mad: emit_body(&Body::Perf(r)),
            want,
        });
    }
}

/// Every MAD case.
pub fn mad_cases() -> Vec<MadCase> {
    let mut out = Vec::new();
    // SMPs: every attribute softib implements.
    let ni = node_info();
    smp_cases(
        &mut out,
        "NodeInfo",
        NodeInfo::ATTR_ID,
        0,
        ni.to_data(),
        node_info_want(&ni),
    );
    let nd = NodeDescription::new(NODE_DESC);
    smp_cases(
        &mut out,
        "NodeDescription",
        NodeDescription::ATTR_ID,
        0,
        nd.to_data(),
        node_desc_want(&nd),
    );
    let pi = port_info();
    smp_cases(
        &mut out,
        "PortInfo",
        PortInfo::ATTR_ID,
        1,
        pi.to_data(),
        port_info_want(&pi),
    );
    let si = switch_info();
    smp_cases(
        &mut out,
        "SwitchInfo",
        SwitchInfo::ATTR_ID,
        0,
        si.to_data(),
        switch_info_want(&si),
    );
    let t = lft();
    smp_cases(
        &mut out,
        "LinearForwardingTable",
        LinearForwardingTable::ATTR_ID,
        0,
        t.to_data(),
        lft_want(&t),
    );
    // tshark 4.0 has no fields for GUIDInfo: header only.
    smp_cases(
        &mut out,
        "GUIDInfo",
        GuidInfo::ATTR_ID,
        0,
        guid_info().to_data(),
        Vec::new(),
    );
    let pk = pkey_table();
    smp_cases(
        &mut out,
        "P_KeyTable",
        PKeyTable::ATTR_ID,
        0x0001_0000, // port 1, block 0
        pk.to_data(),
        pkey_table_want(&pk),
    );
    let sm = sm_info();
    smp_cases(
        &mut out,
        "SMInfo",
        SmInfo::ATTR_ID,
        0,
        sm.to_data(),
        sm_info_want(&sm),
    );

    // SA: PathRecord, NodeRecord, PortInfoRecord.
    let pr = path_record();
    let mut pr2 = pr;
    pr2.dlid = Lid(0x0013);
    pr2.sl = 5;
    let mut pr3 = pr;
    pr3.dlid = Lid(0x0014);
    pr3.tclass = 0;
    let prs = [pr, pr2, pr3];
    let table = records(&prs, PathRecord::LEN, |r, b| r.emit(b));
    sa_cases(
        &mut out,
        SaSpec {
            name: "PathRecord",
            attr_id: AttrId::PATH_RECORD,
            comp_mask: sa::path_comp::DGID | sa::path_comp::SGID | sa::path_comp::NUMB_PATH,
            record_len: PathRecord::LEN,
            table: &table,
            table_records: prs.len(),
            first_record_want: path_record_want(&prs[..1]),
        },
    );
    let nr = NodeRecord {
        lid: Lid(0x0012),
        node_info: ni,
        node_description: nd,
    };
    let nr_bytes = records(&[nr], NodeRecord::LEN, |r, b| r.emit(b));
    let mut nr_want = vec![("infiniband.sa.lid", n(nr.lid.0))];
    nr_want.extend(node_info_want(&ni));
    nr_want.extend(node_desc_want(&nd));
    sa_cases(
        &mut out,
        SaSpec {
            name: "NodeRecord",
            attr_id: AttrId::NODE_RECORD,
            comp_mask: sa::node_comp::LID,
            record_len: NodeRecord::LEN,
            table: &nr_bytes,
            table_records: 1,
            first_record_want: nr_want,
        },
    );
    let pir = PortInfoRecord {
        endport_lid: Lid(0x0012),
        port_num: 1,
        options: 0,
        port_info: pi,
    };
    let mut pir2 = pir;
    pir2.endport_lid = Lid(0x0013);
    pir2.port_info.lid = Lid(0x0013);
    let pirs = [pir, pir2];
    let pir_want = |recs: &[PortInfoRecord]| -> Fields {
        let mut w = vec![
            (
                "infiniband.sa.endportlid",
                Want::Ns(recs.iter().map(|r| u64::from(r.endport_lid.0)).collect()),
            ),
            (
                "infiniband.sa.portnum",
                Want::Ns(recs.iter().map(|r| u64::from(r.port_num)).collect()),
            ),
            (
                "infiniband.portinfo.lid",
                Want::Ns(recs.iter().map(|r| u64::from(r.port_info.lid.0)).collect()),
            ),
        ];
        if recs.len() == 1 {
            w.extend(
                port_info_want(&recs[0].port_info)
                    .into_iter()
                    .filter(|(k, _)| *k != "infiniband.portinfo.lid"),
            );
        }
        w
    };
    let pir_table = records(&pirs, PortInfoRecord::LEN, |r, b| r.emit(b));
    sa_cases(
        &mut out,
        SaSpec {
            name: "PortInfoRecord",
            attr_id: AttrId::PORT_INFO_RECORD,
            comp_mask: 0x1, // EndportLID
            record_len: PortInfoRecord::LEN,
            table: &pir_table,
            table_records: pirs.len(),
            first_record_want: pir_want(&pirs[..1]),
        },
    );

    // PMA.
    pma_cases(&mut out);
    out
}
