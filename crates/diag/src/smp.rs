//! `smpquery` (nodeinfo, nodedesc, portinfo, switchinfo, pkeys), `perfquery` (PortCounters,
//! PortCountersExtended) and `saquery` (NodeRecord, PortInfoRecord, PathRecord) output, in
//! libibmad's dotted layout, from the `softib-wire` attribute structs.
//!
//! The "port id" in the headers is what the tool was pointed at: [`portid_lid`] for a
//! LID-routed query (`Lid 1`), [`portid_dr`] for a directed-route one
//! (`DR path slid 65535; dlid 65535; 0,1`).

use core::fmt::Write as _;

use softib_wire::mad::attr::{NodeDescription, NodeInfo, PortInfo, SwitchInfo};
use softib_wire::mad::perf::{PortCounters, PortCountersExtended};
use softib_wire::mad::sa::{McMemberRecord, NodeRecord, PathRecord, PortInfoRecord, Selector};
use softib_wire::{Lid, Mtu, PKey};

use crate::fabric::{physstate, portstate};
use crate::fmt::{dotted, inet_ntop6, sa_field};

/// The port id text of a LID-routed query: `Lid 1`.
pub fn portid_lid(lid: Lid) -> String {
    format!("Lid {}", lid.0)
}

/// The port id text of a directed-route query from the local port: `DR path slid 65535; dlid
/// 65535; 0,1` (`path` is the hops after hop 0, as in `SubnetNode::dr_path`).
pub fn portid_dr(path: &[u8]) -> String {
    let mut s = String::from("DR path slid 65535; dlid 65535; 0");
    for hop in path {
        let _ = write!(s, ",{hop}");
    }
    s
}

/// `smpquery nodeinfo`.
pub fn smpquery_nodeinfo(portid: &str, ni: &NodeInfo) -> String {
    let mut out = format!("# Node info: {portid}\n");
    dump_nodeinfo(&mut out, ni);
    out
}

fn dump_nodeinfo(out: &mut String, ni: &NodeInfo) {
    dotted(out, "", "BaseVers", &ni.base_version.to_string());
    dotted(out, "", "ClassVers", &ni.class_version.to_string());
    dotted(out, "", "NodeType", ni.node_type.name());
    dotted(out, "", "NumPorts", &ni.num_ports.to_string());
    dotted(
        out,
        "",
        "SystemGuid",
        &format!("0x{:016x}", ni.system_image_guid.0),
    );
    dotted(out, "", "Guid", &format!("0x{:016x}", ni.node_guid.0));
    dotted(out, "", "PortGuid", &format!("0x{:016x}", ni.port_guid.0));
    dotted(out, "", "PartCap", &ni.partition_cap.to_string());
    dotted(out, "", "DevId", &format!("0x{:04x}", ni.device_id));
    dotted(out, "", "Revision", &format!("0x{:08x}", ni.revision));
    dotted(out, "", "LocalPort", &ni.local_port_num.to_string());
    dotted(out, "", "VendorId", &format!("0x{:06x}", ni.vendor_id));
}

/// `smpquery nodedesc`.
pub fn smpquery_nodedesc(nd: &NodeDescription) -> String {
    format!("Node Description:..................{}\n", nd.text())
}

fn joined(value: u8, names: &[(u8, &str)]) -> String {
    let parts: Vec<&str> = names
        .iter()
        .filter(|(bit, _)| value & bit != 0)
        .map(|(_, n)| *n)
        .collect();
    if parts.is_empty() {
        format!("undefined ({value})")
    } else {
        parts.join(" or ")
    }
}

const WIDTHS: &[(u8, &str)] = &[(1, "1X"), (2, "4X"), (4, "8X"), (8, "12X"), (16, "2X")];
const SPEEDS: &[(u8, &str)] = &[(1, "2.5 Gbps"), (2, "5.0 Gbps"), (4, "10.0 Gbps")];
const EXT_SPEEDS: &[(u8, &str)] = &[
    (1, "14.0625 Gbps"),
    (2, "25.78125 Gbps"),
    (4, "53.125 Gbps"),
    (8, "106.25 Gbps"),
];

const CAP_NAMES: &[&str] = &[
    "",
    "IsSM",
    "IsNoticeSupported",
    "IsTrapSupported",
    "IsOptionalIPDSupported",
    "IsAutomaticMigrationSupported",
    "IsSLMappingSupported",
    "IsMkeyNVRAM",
    "IsPkeyNVRAM",
    "IsLedInfoSupported",
    "IsSMdisabled",
    "IsSystemImageGUIDsupported",
    "IsPkeySwitchExternalPortTrapSupported",
    "IsCableInfoSupported",
    "IsExtendedSpeedsSupported",
    "IsCapabilityMask2Supported",
    "IsCommunicatonManagementSupported",
    "IsSNMPTunnelingSupported",
    "IsReinitSupported",
    "IsDeviceManagementSupported",
    "IsVendorClassSupported",
    "IsDRNoticeSupported",
    "IsCapabilityMaskNoticeSupported",
    "IsBootManagementSupported",
    "IsLinkRoundTripLatencySupported",
    "IsClientRegistrationSupported",
    "IsOtherLocalChangesNoticeSupported",
    "IsLinkSpeedWidthPairsTableSupported",
    "IsVendorSpecificMadsTableSupported",
    "IsMcastPkeyTrapSuppressionSupported",
    "IsMulticastFDBTopSupported",
    "IsHierarchyInfoSupported",
];

const CAP2_NAMES: &[(u16, &str)] = &[
    (0x0001, "IsSetNodeDescriptionSupported"),
    (0x0002, "IsPortInfoExtendedSupported"),
    (0x0004, "IsVirtualizationSupported"),
    (0x0008, "IsSwitchPortStateTableSupported"),
    (0x0010, "IsLinkWidth2xSupported"),
    (0x0020, "IsLinkSpeedHDRSupported"),
    (0x0400, "IsLinkSpeedNDRSupported"),
    (0x0800, "IsExtendedSpeeds2Supported"),
    (0x1000, "IsLinkSpeedXDRSupported"),
];

fn mtu(m: Mtu) -> String {
    match m.bytes() {
        Some(b) => b.to_string(),
        None => format!("undefined ({})", u8::from(m)),
    }
}

fn vls(v: u8, zero: &str) -> String {
    match v {
        0 => zero.into(),
        1 => "VL0".into(),
        2 => "VL0-1".into(),
        3 => "VL0-3".into(),
        4 => "VL0-7".into(),
        5 => "VL0-14".into(),
        other => format!("reserved ({other})"),
    }
}

/// The PortInfo fields (shared by `smpquery portinfo` and `saquery PIR`), each line after
/// `prefix`; the capability names are always indented by four tabs.
fn dump_portinfo(out: &mut String, prefix: &str, pi: &PortInfo) {
    let d = |out: &mut String, name: &str, value: String| dotted(out, prefix, name, &value);
    d(out, "Mkey", "<not displayed>".into());
    d(out, "GidPrefix", format!("0x{:016x}", pi.gid_prefix));
    d(out, "Lid", pi.lid.0.to_string());
    d(out, "SMLid", pi.master_sm_lid.0.to_string());
    d(out, "CapMask", format!("0x{:x}", pi.capability_mask));
    for (bit, name) in CAP_NAMES.iter().enumerate() {
        if !name.is_empty() && pi.capability_mask & (1u32 << bit) != 0 {
            let _ = writeln!(out, "\t\t\t\t{name}");
        }
    }
    d(out, "DiagCode", format!("0x{:04x}", pi.diag_code));
    d(out, "MkeyLeasePeriod", pi.m_key_lease_period.to_string());
    d(out, "LocalPort", pi.local_port_num.to_string());
    d(
        out,
        "LinkWidthEnabled",
        joined(pi.link_width_enabled, WIDTHS),
    );
    d(
        out,
        "LinkWidthSupported",
        joined(pi.link_width_supported, WIDTHS),
    );
    d(out, "LinkWidthActive", joined(pi.link_width_active, WIDTHS));
    d(
        out,
        "LinkSpeedSupported",
        joined(pi.link_speed_supported, SPEEDS),
    );
    d(out, "LinkState", portstate(pi.port_state));
    d(out, "PhysLinkState", physstate(pi.port_physical_state));
    let lds = match pi.link_down_default_state {
        0 => "NoChange".to_string(),
        1 => "Sleep".to_string(),
        2 => "Polling".to_string(),
        other => format!("?({other})"),
    };
    d(out, "LinkDownDefState", lds);
    d(out, "ProtectBits", pi.m_key_protect_bits.to_string());
    d(out, "LMC", pi.lmc.to_string());
    d(out, "LinkSpeedActive", joined(pi.link_speed_active, SPEEDS));
    d(
        out,
        "LinkSpeedEnabled",
        joined(pi.link_speed_enabled, SPEEDS),
    );
    d(out, "NeighborMTU", mtu(pi.neighbor_mtu));
    d(out, "SMSL", pi.master_sm_sl.to_string());
    d(out, "VLCap", vls(pi.vl_cap, "reserved (0)"));
    d(out, "InitType", format!("0x{:02x}", pi.init_type));
    d(out, "VLHighLimit", pi.vl_high_limit.to_string());
    d(out, "VLArbHighCap", pi.vl_arbitration_high_cap.to_string());
    d(out, "VLArbLowCap", pi.vl_arbitration_low_cap.to_string());
    d(out, "InitReply", format!("0x{:02x}", pi.init_type_reply));
    d(out, "MtuCap", mtu(pi.mtu_cap));
    d(out, "VLStallCount", pi.vl_stall_count.to_string());
    d(out, "HoqLife", pi.hoq_life.to_string());
    d(out, "OperVLs", vls(pi.operational_vls, "No change"));
    d(
        out,
        "PartEnforceInb",
        u8::from(pi.partition_enforcement_inbound).to_string(),
    );
    d(
        out,
        "PartEnforceOutb",
        u8::from(pi.partition_enforcement_outbound).to_string(),
    );
    d(
        out,
        "FilterRawInb",
        u8::from(pi.filter_raw_inbound).to_string(),
    );
    d(
        out,
        "FilterRawOutb",
        u8::from(pi.filter_raw_outbound).to_string(),
    );
    d(out, "MkeyViolations", pi.m_key_violations.to_string());
    d(out, "PkeyViolations", pi.p_key_violations.to_string());
    d(out, "QkeyViolations", pi.q_key_violations.to_string());
    d(out, "GuidCap", pi.guid_cap.to_string());
    d(
        out,
        "ClientReregister",
        u8::from(pi.client_reregister).to_string(),
    );
    d(
        out,
        "McastPkeyTrapSuppressionEnabled",
        pi.multicast_pkey_trap_suppression_enabled.to_string(),
    );
    d(out, "SubnetTimeout", pi.subnet_timeout.to_string());
    d(out, "RespTimeVal", pi.resp_time_value.to_string());
    d(out, "LocalPhysErr", pi.local_phy_errors.to_string());
    d(out, "OverrunErr", pi.overrun_errors.to_string());
    d(out, "MaxCreditHint", pi.max_credit_hint.to_string());
    d(out, "RoundTrip", pi.link_round_trip_latency.to_string());
    d(
        out,
        "CapabilityMask2",
        format!("0x{:x}", pi.capability_mask2),
    );
    for (bit, name) in CAP2_NAMES {
        if pi.capability_mask2 & bit != 0 {
            let _ = writeln!(out, "\t\t\t\t{name}");
        }
    }
    let ext_active = if pi.link_speed_ext_active == 0 {
        "No Extended Speed".to_string()
    } else {
        joined(pi.link_speed_ext_active, EXT_SPEEDS)
    };
    d(out, "LinkSpeedExtActive", ext_active);
    let ext = |v: u8| {
        if v == 0 {
            "0".to_string()
        } else {
            joined(v, EXT_SPEEDS)
        }
    };
    d(
        out,
        "LinkSpeedExtSupported",
        ext(pi.link_speed_ext_supported),
    );
    d(out, "LinkSpeedExtEnabled", ext(pi.link_speed_ext_enabled));
}

/// `smpquery portinfo <target> [port]`: `port` is the port number asked for (0 when omitted).
pub fn smpquery_portinfo(portid: &str, port: u8, pi: &PortInfo) -> String {
    let mut out = format!("# Port info: {portid} port {port}\n");
    dump_portinfo(&mut out, "", pi);
    out
}

/// `smpquery switchinfo`.
pub fn smpquery_switchinfo(portid: &str, si: &SwitchInfo) -> String {
    let mut out = format!("# Switch info: {portid}\n");
    let b = |v: bool| u8::from(v).to_string();
    dotted(&mut out, "", "LinearFdbCap", &si.linear_fdb_cap.to_string());
    dotted(&mut out, "", "RandomFdbCap", &si.random_fdb_cap.to_string());
    dotted(
        &mut out,
        "",
        "McastFdbCap",
        &si.multicast_fdb_cap.to_string(),
    );
    dotted(&mut out, "", "LinearFdbTop", &si.linear_fdb_top.to_string());
    dotted(&mut out, "", "DefPort", &si.default_port.to_string());
    dotted(
        &mut out,
        "",
        "DefMcastPrimPort",
        &si.default_multicast_primary_port.to_string(),
    );
    dotted(
        &mut out,
        "",
        "DefMcastNotPrimPort",
        &si.default_multicast_not_primary_port.to_string(),
    );
    dotted(&mut out, "", "LifeTime", &si.life_time_value.to_string());
    dotted(&mut out, "", "StateChange", &b(si.port_state_change));
    dotted(
        &mut out,
        "",
        "OptSLtoVLMapping",
        &si.optimized_sl_to_vl_mapping_programming.to_string(),
    );
    dotted(&mut out, "", "LidsPerPort", &si.lids_per_port.to_string());
    dotted(
        &mut out,
        "",
        "PartEnforceCap",
        &si.partition_enforcement_cap.to_string(),
    );
    dotted(
        &mut out,
        "",
        "InboundPartEnf",
        &b(si.inbound_enforcement_cap),
    );
    dotted(
        &mut out,
        "",
        "OutboundPartEnf",
        &b(si.outbound_enforcement_cap),
    );
    dotted(
        &mut out,
        "",
        "FilterRawInbound",
        &b(si.filter_raw_inbound_cap),
    );
    dotted(
        &mut out,
        "",
        "FilterRawOutbound",
        &b(si.filter_raw_outbound_cap),
    );
    dotted(&mut out, "", "EnhancedPort0", &b(si.enhanced_port0));
    dotted(
        &mut out,
        "",
        "MulticastFDBTop",
        &format!("0x{:04x}", si.multicast_fdb_top),
    );
    out
}

/// `smpquery pkeys`: the first `partition_cap` entries of the P_Key table (eight per line),
/// then the capacity. Entries missing from `pkeys` print as 0.
pub fn smpquery_pkeys(pkeys: &[PKey], partition_cap: u16) -> String {
    let mut out = String::new();
    for i in 0..usize::from(partition_cap) {
        if i % 8 == 0 {
            let _ = write!(out, "{i:4}: ");
        }
        let _ = write!(out, "0x{:04x}", pkeys.get(i).map_or(0, |p| p.0));
        out.push(if i % 8 == 7 { '\n' } else { ' ' });
    }
    if partition_cap % 8 != 0 {
        // A partial last line: drop the separator left after its last entry.
        out.pop();
        out.push('\n');
    }
    let _ = writeln!(out, "{partition_cap} pkeys capacity for this port");
    out
}

/// `perfquery [lid] [port]`: PortCounters; `cap_mask` is the PMA's ClassPortInfo
/// CapabilityMask (PortXmitWait is shown only when bit 12 says it is supported).
pub fn perfquery(portid: &str, port: u8, cap_mask: u16, pc: &PortCounters) -> String {
    let mut out = format!("# Port counters: {portid} port {port} (CapMask: 0x{cap_mask:02X})\n");
    let mut d = |name: &str, v: String| dotted(&mut out, "", name, &v);
    d("PortSelect", pc.port_select.to_string());
    d("CounterSelect", format!("0x{:04x}", pc.counter_select));
    d("SymbolErrorCounter", pc.symbol_error_counter.to_string());
    d(
        "LinkErrorRecoveryCounter",
        pc.link_error_recovery_counter.to_string(),
    );
    d("LinkDownedCounter", pc.link_downed_counter.to_string());
    d("PortRcvErrors", pc.port_rcv_errors.to_string());
    d(
        "PortRcvRemotePhysicalErrors",
        pc.port_rcv_remote_physical_errors.to_string(),
    );
    d(
        "PortRcvSwitchRelayErrors",
        pc.port_rcv_switch_relay_errors.to_string(),
    );
    d("PortXmitDiscards", pc.port_xmit_discards.to_string());
    d(
        "PortXmitConstraintErrors",
        pc.port_xmit_constraint_errors.to_string(),
    );
    d(
        "PortRcvConstraintErrors",
        pc.port_rcv_constraint_errors.to_string(),
    );
    d("CounterSelect2", format!("0x{:02x}", pc.counter_select2));
    d(
        "LocalLinkIntegrityErrors",
        pc.local_link_integrity_errors.to_string(),
    );
    d(
        "ExcessiveBufferOverrunErrors",
        pc.excessive_buffer_overrun_errors.to_string(),
    );
    d("QP1Dropped", pc.qp1_dropped.to_string());
    d("VL15Dropped", pc.vl15_dropped.to_string());
    d("PortXmitData", pc.port_xmit_data.to_string());
    d("PortRcvData", pc.port_rcv_data.to_string());
    d("PortXmitPkts", pc.port_xmit_pkts.to_string());
    d("PortRcvPkts", pc.port_rcv_pkts.to_string());
    if cap_mask & softib_wire::mad::perf::capability_mask::PORT_XMIT_WAIT_SUPPORTED != 0 {
        d("PortXmitWait", pc.port_xmit_wait.to_string());
    }
    out
}

/// `perfquery -x [lid] [port]`: PortCountersExtended; the unicast/multicast counters are
/// shown when `cap_mask` has the full extended-width bit (bit 9).
pub fn perfquery_extended(
    portid: &str,
    port: u8,
    cap_mask: u16,
    cap_mask2: u32,
    pc: &PortCountersExtended,
) -> String {
    let mut out = format!(
        "# Port extended counters: {portid} port {port} (CapMask: 0x{cap_mask:02X} CapMask2: 0x{cap_mask2:07x})\n"
    );
    let mut d = |name: &str, v: String| dotted(&mut out, "", name, &v);
    d("PortSelect", pc.port_select.to_string());
    d("CounterSelect", format!("0x{:04x}", pc.counter_select));
    d("PortXmitData", pc.port_xmit_data.to_string());
    d("PortRcvData", pc.port_rcv_data.to_string());
    d("PortXmitPkts", pc.port_xmit_pkts.to_string());
    d("PortRcvPkts", pc.port_rcv_pkts.to_string());
    if cap_mask & softib_wire::mad::perf::capability_mask::EXT_WIDTH_SUPPORTED != 0 {
        d("PortUnicastXmitPkts", pc.port_unicast_xmit_pkts.to_string());
        d("PortUnicastRcvPkts", pc.port_unicast_rcv_pkts.to_string());
        d(
            "PortMulticastXmitPkts",
            pc.port_multicast_xmit_pkts.to_string(),
        );
        d(
            "PortMulticastRcvPkts",
            pc.port_multicast_rcv_pkts.to_string(),
        );
    }
    out
}

/// `saquery NR` (and plain `saquery`): NodeRecords from their raw SA bytes (the reserved
/// field is printed as received); records too short to parse are skipped.
pub fn saquery_node_records<'a>(records: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut out = String::new();
    for raw in records {
        let Ok(r) = NodeRecord::parse(raw) else {
            continue;
        };
        let reserved = raw
            .get(2..4)
            .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
        let ni = &r.node_info;
        out.push_str("NodeRecord dump:\n");
        sa_field(&mut out, "lid", &r.lid.0.to_string());
        sa_field(&mut out, "reserved", &format!("0x{reserved:X}"));
        sa_field(
            &mut out,
            "base_version",
            &format!("0x{:X}", ni.base_version),
        );
        sa_field(
            &mut out,
            "class_version",
            &format!("0x{:X}", ni.class_version),
        );
        sa_field(&mut out, "node_type", ni.node_type.name());
        sa_field(&mut out, "num_ports", &ni.num_ports.to_string());
        sa_field(
            &mut out,
            "sys_guid",
            &format!("0x{:016x}", ni.system_image_guid.0),
        );
        sa_field(&mut out, "node_guid", &format!("0x{:016x}", ni.node_guid.0));
        sa_field(&mut out, "port_guid", &format!("0x{:016x}", ni.port_guid.0));
        sa_field(
            &mut out,
            "partition_cap",
            &format!("0x{:X}", ni.partition_cap),
        );
        sa_field(&mut out, "device_id", &format!("0x{:X}", ni.device_id));
        sa_field(&mut out, "revision", &format!("0x{:X}", ni.revision));
        sa_field(&mut out, "port_num", &ni.local_port_num.to_string());
        sa_field(&mut out, "vendor_id", &format!("0x{:X}", ni.vendor_id));
        sa_field(&mut out, "NodeDescription", r.node_description.text());
    }
    out
}

/// `saquery PIR`: PortInfoRecords.
pub fn saquery_portinfo_records(records: &[PortInfoRecord]) -> String {
    let mut out = String::new();
    for r in records {
        out.push_str("PortInfoRecord dump:\n\tRID\n");
        sa_field(&mut out, "EndPortLid", &r.endport_lid.0.to_string());
        sa_field(&mut out, "PortNum", &r.port_num.to_string());
        sa_field(&mut out, "Options", &format!("0x{:X}", r.options));
        out.push_str("\tPortInfo dump:\n");
        dump_portinfo(&mut out, "\t\t", &r.port_info);
    }
    out
}

/// `saquery PR` / `saquery -p`: PathRecords from their raw SA bytes (`resv2` is printed as
/// received); records too short to parse are skipped.
pub fn saquery_path_records<'a>(records: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut out = String::new();
    for raw in records {
        let Ok(p) = PathRecord::parse(raw) else {
            continue;
        };
        let resv2 = raw.get(58..64).map_or(0u64, |b| {
            b.iter().fold(0u64, |acc, &x| acc << 8 | u64::from(x))
        });
        let hop_flow_raw = u32::from(p.raw_traffic) << 31
            | (p.flow_label & 0xF_FFFF) << 8
            | u32::from(p.hop_limit);
        let sel = |s: softib_wire::mad::sa::Selector, v: u8| (u8::from(s) & 3) << 6 | (v & 0x3F);
        out.push_str("PathRecord dump:\n");
        sa_field(&mut out, "service_id", &format!("0x{:016x}", p.service_id));
        sa_field(&mut out, "dgid", &inet_ntop6(&p.dgid.0));
        sa_field(&mut out, "sgid", &inet_ntop6(&p.sgid.0));
        sa_field(&mut out, "dlid", &p.dlid.0.to_string());
        sa_field(&mut out, "slid", &p.slid.0.to_string());
        sa_field(&mut out, "hop_flow_raw", &format!("0x{hop_flow_raw:X}"));
        sa_field(&mut out, "tclass", &format!("0x{:X}", p.tclass));
        sa_field(
            &mut out,
            "num_path_revers",
            &format!("0x{:X}", u8::from(p.reversible) << 7 | (p.numb_path & 0x7F)),
        );
        sa_field(&mut out, "pkey", &format!("0x{:X}", p.pkey.0));
        sa_field(&mut out, "qos_class", &format!("0x{:X}", p.qos_class));
        sa_field(&mut out, "sl", &format!("0x{:X}", p.sl));
        sa_field(
            &mut out,
            "mtu",
            &format!("0x{:X}", sel(p.mtu_selector, u8::from(p.mtu))),
        );
        sa_field(
            &mut out,
            "rate",
            &format!("0x{:X}", sel(p.rate_selector, p.rate)),
        );
        sa_field(
            &mut out,
            "pkt_life",
            &format!(
                "0x{:X}",
                sel(p.packet_life_time_selector, p.packet_life_time)
            ),
        );
        sa_field(&mut out, "preference", &format!("0x{:X}", p.preference));
        sa_field(&mut out, "resv2", &format!("0x{resv2:012X}"));
    }
    out
}

/// `saquery MCMR`: MCMemberRecords as the SA returned them (infiniband-diags
/// `dump_one_mcmember_record`).
pub fn saquery_mcmember_records(records: &[McMemberRecord]) -> String {
    let mut out = String::new();
    let sel = |s: Selector, v: u8| (u8::from(s) & 3) << 6 | (v & 0x3F);
    for r in records {
        out.push_str("MCMember Record dump:\n");
        sa_field(&mut out, "MGID", &inet_ntop6(&r.mgid.0));
        sa_field(&mut out, "PortGid", &inet_ntop6(&r.port_gid.0));
        sa_field(&mut out, "qkey", &format!("0x{:x}", r.q_key.0));
        sa_field(&mut out, "mlid", &format!("0x{:x}", r.mlid.0));
        sa_field(
            &mut out,
            "mtu",
            &format!("0x{:x}", sel(r.mtu_selector, u8::from(r.mtu))),
        );
        sa_field(&mut out, "TClass", &format!("0x{:x}", r.tclass));
        sa_field(&mut out, "pkey", &format!("0x{:x}", r.pkey.0));
        sa_field(
            &mut out,
            "rate",
            &format!("0x{:x}", sel(r.rate_selector, r.rate)),
        );
        sa_field(
            &mut out,
            "pkt_life",
            &format!(
                "0x{:x}",
                sel(r.packet_life_time_selector, r.packet_life_time)
            ),
        );
        sa_field(&mut out, "SL", &format!("0x{:x}", r.sl));
        sa_field(&mut out, "FlowLabel", &format!("0x{:x}", r.flow_label));
        sa_field(&mut out, "HopLimit", &format!("0x{:x}", r.hop_limit));
        sa_field(&mut out, "Scope", &format!("0x{:x}", r.scope));
        sa_field(&mut out, "JoinState", &format!("0x{:x}", r.join_state));
        sa_field(
            &mut out,
            "ProxyJoin",
            &format!("0x{:x}", u8::from(r.proxy_join)),
        );
    }
    out
}

/// `saquery -g`: one block per multicast group (infiniband-diags
/// `dump_multicast_group_record`).
pub fn saquery_mcmember_groups(records: &[McMemberRecord]) -> String {
    let mut out = String::new();
    let sel = |s: Selector, v: u8| (u8::from(s) & 3) << 6 | (v & 0x3F);
    for r in records {
        out.push_str("MCMemberRecord group dump:\n");
        sa_field(&mut out, "MGID", &inet_ntop6(&r.mgid.0));
        sa_field(&mut out, "Mlid", &format!("0x{:X}", r.mlid.0));
        sa_field(
            &mut out,
            "Mtu",
            &format!("0x{:X}", sel(r.mtu_selector, u8::from(r.mtu))),
        );
        sa_field(&mut out, "pkey", &format!("0x{:X}", r.pkey.0));
        sa_field(
            &mut out,
            "Rate",
            &format!("0x{:X}", sel(r.rate_selector, r.rate)),
        );
        sa_field(&mut out, "SL", &format!("0x{:X}", r.sl));
    }
    out
}

/// `saquery -m`: one block per record, with the NodeDescription of the member port found in
/// `nodes` (the NodeRecords saquery asks for first), `<unknown>` when none has its GUID
/// (infiniband-diags `dump_multicast_member_record`).
pub fn saquery_mcmember_members(records: &[McMemberRecord], nodes: &[NodeRecord]) -> String {
    let mut out = String::new();
    for r in records {
        let guid = r.port_gid.interface_id();
        let name = nodes
            .iter()
            .find(|n| n.node_info.port_guid.0 == guid)
            .map_or_else(
                || "<unknown>".to_string(),
                |n| n.node_description.text().to_string(),
            );
        out.push_str("MCMemberRecord member dump:\n");
        sa_field(&mut out, "MGID", &inet_ntop6(&r.mgid.0));
        sa_field(&mut out, "Mlid", &format!("0x{:X}", r.mlid.0));
        sa_field(&mut out, "PortGid", &inet_ntop6(&r.port_gid.0));
        sa_field(
            &mut out,
            "ScopeState",
            &format!("0x{:X}", (r.scope << 4) | (r.join_state & 0x0F)),
        );
        sa_field(
            &mut out,
            "ProxyJoin",
            &format!("0x{:X}", u8::from(r.proxy_join)),
        );
        sa_field(&mut out, "NodeDescription", &name);
    }
    out
}

/// `ibroute -M`: a switch's multicast forwarding table (infiniband-diags
/// `dump_multicast_tables`): the header for MLIDs `first..=last` of the switch `portid`
/// (`Lid 5`, or a DR path) with `num_ports` ports, then one row per MLID in `entries` — the
/// MLID and its ports, only MLIDs with at least one port — and the count.
pub fn ibroute_multicast(
    portid: &str,
    node_guid: u64,
    description: &str,
    first: u16,
    last: u16,
    num_ports: u8,
    entries: &[(u16, Vec<u8>)],
) -> String {
    let mut out = format!(
        "Multicast mlids [0x{first:x}-0x{last:x}] of switch {portid} guid 0x{node_guid:016x} ({description}):\n"
    );
    if num_ports > 9 {
        out.push_str("            ");
        for i in 0..=num_ports {
            out.push(if i % 10 == 0 {
                char::from(b'0' + i / 10 % 10)
            } else {
                ' '
            });
            out.push(' ');
        }
        out.push('\n');
    }
    out.push_str("     Ports: ");
    for i in 0..=num_ports {
        let _ = write!(out, "{} ", i % 10);
    }
    out.push_str("\n MLid\n");
    let mut n = 0;
    for (mlid, ports) in entries {
        if ports.is_empty() || *mlid < first || *mlid > last {
            continue;
        }
        let _ = write!(out, "0x{mlid:04x}      ");
        for i in 0..=num_ports {
            out.push_str(if ports.contains(&i) { "x " } else { "  " });
        }
        out.push('\n');
        n += 1;
    }
    let _ = writeln!(out, "{n} valid mlids dumped ");
    out
}
