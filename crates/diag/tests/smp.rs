//! `smpquery`, `perfquery`, `saquery` against the golden captures.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod common;

use common::{ca_info, ca_port, golden, switch_port};
use softib_diag::smp::{
    ibroute_multicast, perfquery, perfquery_extended, portid_dr, portid_lid,
    saquery_mcmember_groups, saquery_mcmember_members, saquery_mcmember_records,
    saquery_node_records, saquery_path_records, saquery_portinfo_records, smpquery_nodedesc,
    smpquery_nodeinfo, smpquery_pkeys, smpquery_portinfo, smpquery_switchinfo,
};
use softib_wire::mad::attr::{NodeDescription, PortState, SwitchInfo};
use softib_wire::mad::perf::{PortCounters, PortCountersExtended};
use softib_wire::mad::sa::{McMemberRecord, NodeRecord, PathRecord, PortInfoRecord, Selector};
use softib_wire::{Gid, Guid, Lid, Mtu, PKey, QKey};

const T213: u64 = 0xe41d_2d03_00b4_7d00;
const T214: u64 = 0xe41d_2d03_00b4_7e90;

#[test]
fn nodeinfo_and_nodedesc() {
    assert_eq!(
        smpquery_nodeinfo(&portid_lid(Lid(1)), &ca_info(T213, 2, 1)),
        golden("A-stock/postsm-smpquery-nodeinfo-1.txt")
    );
    assert_eq!(
        smpquery_nodeinfo(&portid_lid(Lid(2)), &ca_info(T214, 2, 1)),
        golden("A-stock/postsm-smpquery-nodeinfo-2.txt")
    );
    assert_eq!(
        smpquery_nodeinfo(&portid_dr(&[]), &ca_info(T213, 2, 1)),
        golden("A-stock/postsm-test213-smpquery-D-nodeinfo-0.txt")
    );
    assert_eq!(
        smpquery_nodedesc(&NodeDescription::new("test213 mlx4_0")),
        golden("A-stock/postsm-smpquery-nodedesc-1.txt")
    );
}

#[test]
fn portinfo() {
    let p1 = ca_port(1, 1, true, true);
    assert_eq!(
        smpquery_portinfo(&portid_lid(Lid(1)), 1, &p1),
        golden("A-stock/postsm-smpquery-portinfo-1-1.txt")
    );
    assert_eq!(
        smpquery_portinfo(&portid_lid(Lid(1)), 0, &p1),
        golden("A-stock/postsm-smpquery-portinfo-1.txt")
    );
    assert_eq!(
        smpquery_portinfo(&portid_dr(&[]), 0, &p1),
        golden("A-stock/postsm-test213-smpquery-D-portinfo-0.txt")
    );
    // Port 2 of test213 is on the other (unmanaged) subnet: still INIT, no LID.
    assert_eq!(
        smpquery_portinfo(&portid_lid(Lid(1)), 2, &ca_port(0, 0, false, false)),
        golden("A-stock/postsm-smpquery-portinfo-1-2.txt")
    );
    assert_eq!(
        smpquery_portinfo(&portid_lid(Lid(2)), 1, &ca_port(2, 1, false, true)),
        golden("A-stock/postsm-smpquery-portinfo-2-1.txt")
    );
    // A down and a cabled switch port before the SM.
    assert_eq!(
        smpquery_portinfo(&portid_dr(&[1]), 3, &switch_port(false, false)),
        golden("B-stock/presm-smpquery-D-portinfo-0_1-3.txt")
    );
    let isl = switch_port(true, false);
    assert_eq!(isl.port_state, PortState::Init);
    assert_eq!(
        smpquery_portinfo(&portid_dr(&[1]), 35, &isl),
        golden("B-stock/presm-smpquery-D-portinfo-0_1-35.txt")
    );
}

#[test]
fn switchinfo_and_pkeys() {
    let si = SwitchInfo {
        linear_fdb_cap: 30720,
        multicast_fdb_cap: 1024,
        port_state_change: true,
        partition_enforcement_cap: 64,
        filter_raw_inbound_cap: true,
        filter_raw_outbound_cap: true,
        enhanced_port0: true,
        ..SwitchInfo::default()
    };
    assert_eq!(
        smpquery_switchinfo(&portid_dr(&[1]), &si),
        golden("B-stock/presm-smpquery-D-switchinfo-0_1.txt")
    );
    assert_eq!(
        smpquery_pkeys(&[PKey::DEFAULT], 64),
        golden("A-stock/postsm-smpquery-pkeys-1.txt")
    );
    assert_eq!(
        smpquery_pkeys(&[PKey(0x8001)], 3),
        "   0: 0x8001 0x0000 0x0000\n3 pkeys capacity for this port\n"
    );
    assert_eq!(smpquery_pkeys(&[], 0), "0 pkeys capacity for this port\n");
}

#[test]
fn perfquery_counters() {
    let pc = PortCounters {
        port_select: 1,
        counter_select: 0,
        symbol_error_counter: 0,
        link_error_recovery_counter: 0,
        link_downed_counter: 0,
        port_rcv_errors: 0,
        port_rcv_remote_physical_errors: 0,
        port_rcv_switch_relay_errors: 0,
        port_xmit_discards: 0,
        port_xmit_constraint_errors: 0,
        port_rcv_constraint_errors: 0,
        counter_select2: 0,
        local_link_integrity_errors: 0,
        excessive_buffer_overrun_errors: 0,
        qp1_dropped: 0,
        vl15_dropped: 0,
        port_xmit_data: 6840,
        port_rcv_data: 6840,
        port_xmit_pkts: 95,
        port_rcv_pkts: 95,
        port_xmit_wait: 0,
    };
    assert_eq!(
        perfquery(&portid_lid(Lid(1)), 1, 0x1200, &pc),
        golden("A-stock/postsm-perfquery-1.txt")
    );
    let ext = PortCountersExtended {
        port_select: 1,
        counter_select: 0,
        counter_select2: 0,
        port_xmit_data: 6840,
        port_rcv_data: 6840,
        port_xmit_pkts: 95,
        port_rcv_pkts: 95,
        port_unicast_xmit_pkts: 0,
        port_unicast_rcv_pkts: 0,
        port_multicast_xmit_pkts: 0,
        port_multicast_rcv_pkts: 0,
    };
    assert_eq!(
        perfquery_extended(&portid_lid(Lid(1)), 1, 0x1200, 0, &ext),
        golden("A-stock/postsm-perfquery-x-1.txt")
    );
}

#[test]
fn saquery_records() {
    let nr = NodeRecord {
        lid: Lid(1),
        node_info: ca_info(T213, 2, 1),
        node_description: NodeDescription::new("test213 mlx4_0"),
    };
    let mut raw = [0u8; NodeRecord::LEN];
    nr.emit(&mut raw);
    assert_eq!(
        saquery_node_records([&raw[..]]),
        golden("A-stock/postsm-saquery-NR.txt")
    );
    assert_eq!(
        saquery_node_records([&raw[..]]),
        golden("A-stock/postsm-test213-saquery.txt")
    );
    assert_eq!(saquery_node_records([&raw[..10]]), "");

    let pir = [
        PortInfoRecord {
            endport_lid: Lid(1),
            port_num: 1,
            options: 0,
            port_info: ca_port(1, 1, true, true),
        },
        PortInfoRecord {
            endport_lid: Lid(2),
            port_num: 1,
            options: 0,
            port_info: ca_port(2, 1, false, true),
        },
    ];
    assert_eq!(
        saquery_portinfo_records(&pir),
        golden("A-stock/postsm-saquery-PIR.txt")
    );

    let gid = |g: u64| Gid::from_prefix_guid(0xfe80_0000_0000_0000, Guid(g));
    let path = |dgid, sgid, dlid, slid, life| PathRecord {
        service_id: 0,
        dgid: gid(dgid),
        sgid: gid(sgid),
        dlid: Lid(dlid),
        slid: Lid(slid),
        raw_traffic: false,
        flow_label: 0,
        hop_limit: 0,
        tclass: 0,
        reversible: true,
        numb_path: 0,
        pkey: PKey::DEFAULT,
        qos_class: 0,
        sl: 0,
        mtu_selector: Selector::Exactly,
        mtu: Mtu::Mtu2048,
        rate_selector: Selector::Exactly,
        rate: 7,
        packet_life_time_selector: Selector::Exactly,
        packet_life_time: life,
        preference: 0,
    };
    let mut records = [[0u8; 64]; 3];
    path(T213 + 1, T213 + 1, 1, 1, 0).emit(&mut records[0]);
    path(T213 + 1, T214 + 1, 1, 2, 0x12).emit(&mut records[1]);
    // ibsim's third record is garbage past the GIDs; reproduce its bytes.
    let third = PathRecord {
        dlid: Lid(0),
        slid: Lid(0),
        tclass: 0x25,
        reversible: false,
        pkey: PKey(0),
        mtu_selector: Selector::GreaterThan,
        mtu: Mtu::Unknown(0),
        rate_selector: Selector::GreaterThan,
        rate: 0,
        packet_life_time_selector: Selector::GreaterThan,
        ..path(T214 + 1, T213 + 1, 0, 0, 0)
    };
    third.emit(&mut records[2]);
    records[2][58..64].copy_from_slice(&[0xEE, 0xF2, 0x07, 0, 0, 0]);
    assert_eq!(
        saquery_path_records(records.iter().map(|r| &r[..])),
        golden("A-stock/postsm-saquery-PR.txt")
    );
}

/// The IPoIB broadcast group as opensm answers for it with no members (golden A-stock).
fn broadcast_group() -> McMemberRecord {
    McMemberRecord {
        mgid: Gid([
            0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
        ]),
        port_gid: Gid([0; 16]),
        q_key: QKey(0x0b1b),
        mlid: Lid(0xc000),
        mtu_selector: Selector::Exactly,
        mtu: Mtu::Mtu2048,
        tclass: 0,
        pkey: PKey::DEFAULT,
        rate_selector: Selector::Exactly,
        rate: 3,
        packet_life_time_selector: Selector::Exactly,
        packet_life_time: 0x12,
        sl: 0,
        flow_label: 0,
        hop_limit: 0,
        scope: 2,
        join_state: 0,
        proxy_join: false,
    }
}

#[test]
fn saquery_multicast_records() {
    let g = [broadcast_group()];
    assert_eq!(
        saquery_mcmember_records(&g),
        golden("A-stock/postsm-saquery-MCMR.txt")
    );
    assert_eq!(
        saquery_mcmember_groups(&g),
        golden("A-stock/postsm-saquery-g.txt")
    );
    assert_eq!(
        saquery_mcmember_members(&g, &[]),
        golden("A-stock/postsm-saquery-m.txt")
    );
    // A member: its node's description, its JoinState in ScopeState.
    let nr = NodeRecord {
        lid: Lid(1),
        node_info: ca_info(T213, 2, 1),
        node_description: NodeDescription::new("test213 mlx4_0"),
    };
    let member = McMemberRecord {
        port_gid: Gid::from_prefix_guid(0xfe80_0000_0000_0000, nr.node_info.port_guid),
        join_state: 1,
        ..broadcast_group()
    };
    let text = saquery_mcmember_members(&[member], &[nr]);
    assert!(text.contains("\t\tPortGid.................fe80::e41d:2d03:b4:7d01\n"));
    assert!(text.contains("\t\tScopeState..............0x21\n"));
    assert!(text.ends_with("\t\tNodeDescription.........test213 mlx4_0\n"));
}

#[test]
fn ibroute_multicast_tables() {
    let sw1 = ibroute_multicast(
        "Lid 5",
        0x7cfe_9003_00a0_b0c0,
        "MF0;sw1:SX6036/U1",
        0xc000,
        0xc3ff,
        36,
        &[],
    );
    assert_eq!(sw1, golden("B-stock/postsm-ibroute-M-5.txt"));
    let sw2 = ibroute_multicast(
        "Lid 6",
        0x7cfe_9003_00a0_b1c0,
        "MF0;sw2:SX6036/U1",
        0xc000,
        0xc3ff,
        36,
        &[(0xc001, vec![])],
    );
    assert_eq!(sw2, golden("B-stock/postsm-ibroute-M-6.txt"));
    // Rows: two characters per port, 'x' where the MLID goes out.
    let t = ibroute_multicast(
        "Lid 5",
        1,
        "sw",
        0xc000,
        0xc3ff,
        36,
        &[(0xc000, vec![1, 35])],
    );
    let row = format!("0xc000        x {}x   ", "  ".repeat(33));
    assert!(
        t.contains(&format!("\n{row}\n1 valid mlids dumped \n")),
        "{t}"
    );
}
