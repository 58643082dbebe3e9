//! Shared test fixtures: golden files and the subnets ibsim's sweeps saw.
#![allow(dead_code)] // Each test binary uses a different part.

use softib_fabric::subnet::{PortRef, Subnet, SubnetNode};
use softib_wire::mad::attr::{
    NodeInfo, NodeType, PortInfo, PortPhysicalState, PortState, SwitchInfo,
};
use softib_wire::{Guid, Lid, Mtu};

/// A golden file, minus the capture script's `$ command` / `[exit N]` framing (rxe only).
pub fn golden(path: &str) -> String {
    let text = std::fs::read_to_string(format!(
        "{}/tests/golden/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    if lines.first().is_some_and(|l| l.starts_with("$ ")) {
        lines.remove(0);
    }
    if lines.last().is_some_and(|l| l.starts_with("[exit ")) {
        lines.pop();
    }
    lines.concat()
}

/// The ctime text in an ibnetdiscover golden's header (empty for the list variants, which
/// have no header).
pub fn timestamp(golden_text: &str) -> String {
    golden_text
        .lines()
        .find_map(|l| l.strip_prefix("# Topology file: generated on "))
        .unwrap_or_default()
        .to_string()
}

/// A CA port as ibsim reports it (4X QDR cabled port, ibsim's supported masks).
pub fn ca_port(lid: u16, sm_lid: u16, is_sm: bool, post_sm: bool) -> PortInfo {
    PortInfo {
        m_key: 0,
        gid_prefix: if post_sm { 0xfe80_0000_0000_0000 } else { 0 },
        lid: Lid(lid),
        master_sm_lid: Lid(sm_lid),
        capability_mask: if is_sm { 0x0050_c04a } else { 0x0050_c048 },
        diag_code: 0,
        m_key_lease_period: 4089,
        local_port_num: 1,
        link_width_enabled: 0x03,
        link_width_supported: 0x1f,
        link_width_active: 0x02,
        link_speed_supported: 0x7,
        port_state: if post_sm {
            PortState::Active
        } else {
            PortState::Init
        },
        port_physical_state: PortPhysicalState::LinkUp,
        link_down_default_state: 2,
        m_key_protect_bits: 0,
        lmc: 0,
        link_speed_active: 0x4,
        link_speed_enabled: 0x7,
        neighbor_mtu: Mtu::Mtu2048,
        master_sm_sl: 0,
        vl_cap: 4,
        init_type: 0,
        vl_high_limit: 0,
        vl_arbitration_high_cap: 8,
        vl_arbitration_low_cap: 8,
        init_type_reply: 0,
        mtu_cap: Mtu::Mtu2048,
        vl_stall_count: 7,
        hoq_life: 0,
        operational_vls: 4,
        partition_enforcement_inbound: false,
        partition_enforcement_outbound: false,
        filter_raw_inbound: false,
        filter_raw_outbound: false,
        m_key_violations: 0,
        p_key_violations: 0,
        q_key_violations: 0,
        guid_cap: 32,
        client_reregister: false,
        multicast_pkey_trap_suppression_enabled: 0,
        subnet_timeout: 31,
        resp_time_value: 0,
        local_phy_errors: 0,
        overrun_errors: 0,
        max_credit_hint: 0,
        link_round_trip_latency: 0,
        capability_mask2: 0x30,
        link_speed_ext_active: 0,
        link_speed_ext_supported: 0,
        link_speed_ext_enabled: 0,
    }
}

/// A switch's port 0 as ibsim reports it.
pub fn switch_port0(lid: u16, post_sm: bool) -> PortInfo {
    PortInfo {
        lid: Lid(lid),
        master_sm_lid: Lid(if post_sm { 1 } else { 0 }),
        gid_prefix: if post_sm { 0xfe80_0000_0000_0000 } else { 0 },
        capability_mask: 0xc048,
        link_width_enabled: 0x02,
        port_state: PortState::Active,
        link_speed_active: 1,
        link_speed_enabled: 1,
        neighbor_mtu: Mtu::Mtu256,
        mtu_cap: Mtu::Mtu1024,
        vl_stall_count: 0,
        guid_cap: 1,
        resp_time_value: 8,
        ..ca_port(lid, 0, false, post_sm)
    }
}

/// A switch's external port as ibsim reports it: cabled (4X QDR) or Down/Polling.
pub fn switch_port(cabled: bool, post_sm: bool) -> PortInfo {
    let base = PortInfo {
        gid_prefix: 0,
        capability_mask: 0,
        m_key_lease_period: 0,
        guid_cap: 0,
        subnet_timeout: 0,
        capability_mask2: 0,
        ..ca_port(0, 0, false, post_sm)
    };
    if cabled {
        base
    } else {
        PortInfo {
            link_width_enabled: 0x02,
            port_state: PortState::Down,
            port_physical_state: PortPhysicalState::Polling,
            link_speed_active: 1,
            link_speed_enabled: 1,
            local_phy_errors: 4,
            ..base
        }
    }
}

/// A CA's NodeInfo (mlx4-like, as in the topology files), entered through `port`.
pub fn ca_info(node_guid: u64, num_ports: u8, port: u8) -> NodeInfo {
    NodeInfo {
        base_version: 1,
        class_version: 1,
        node_type: NodeType::Ca,
        num_ports,
        system_image_guid: Guid(node_guid + 3),
        node_guid: Guid(node_guid),
        port_guid: Guid(node_guid + u64::from(port)),
        partition_cap: 64,
        device_id: 0x1003,
        revision: 0xa1,
        local_port_num: port,
        vendor_id: 0x2c9,
    }
}

fn ca(node_guid: u64, num_ports: u8, port: u8, desc: &str, info: PortInfo) -> SubnetNode {
    let mut ports = vec![None; usize::from(num_ports) + 1];
    ports[usize::from(port)] = Some(info);
    SubnetNode {
        info: ca_info(node_guid, num_ports, port),
        description: desc.into(),
        dr_path: Vec::new(),
        ports,
        switch_info: None,
    }
}

/// Topology A (test213 <-> test214, port 1 to port 1 and port 2 to port 2) swept from
/// test213 port `port`: the SM runs on test213, so it has LID 1.
pub fn topo_a(port: u8, post_sm: bool) -> Subnet {
    let lid = |l: u16| if post_sm { l } else { 0 };
    let mut subnet = Subnet::default();
    let mut p213 = ca_port(lid(1), lid(1), post_sm, post_sm);
    p213.local_port_num = port;
    subnet
        .nodes
        .push(ca(0xe41d_2d03_00b4_7d00, 2, port, "test213 mlx4_0", p213));
    let mut p214 = ca_port(lid(2), lid(1), false, post_sm);
    p214.local_port_num = port;
    let mut n214 = ca(0xe41d_2d03_00b4_7e90, 2, port, "test214 mlx4_0", p214);
    n214.dr_path = vec![port];
    subnet.nodes.push(n214);
    subnet.add_link(PortRef { node: 0, port }, PortRef { node: 1, port });
    subnet
}

pub const SW1: u64 = 0x7cfe_9003_00a0_b0c0;
pub const SW2: u64 = 0x7cfe_9003_00a0_b1c0;
pub const NODE_GUIDS: [u64; 4] = [
    0xe41d_2d03_00c0_0000,
    0xe41d_2d03_00c0_0010,
    0xe41d_2d03_00c0_0020,
    0xe41d_2d03_00c0_0030,
];

fn switch(guid: u64, lid: u16, desc: &str, cabled: &[u8]) -> SubnetNode {
    let mut ports = vec![Some(switch_port0(lid, true))];
    for p in 1..=36u8 {
        ports.push(Some(switch_port(cabled.contains(&p), true)));
    }
    SubnetNode {
        info: NodeInfo {
            base_version: 1,
            class_version: 1,
            node_type: NodeType::Switch,
            num_ports: 36,
            system_image_guid: Guid(guid),
            node_guid: Guid(guid),
            port_guid: Guid(guid),
            partition_cap: 64,
            device_id: 0xc738,
            revision: 0xa1,
            local_port_num: 1,
            vendor_id: 0x2c9,
        },
        description: desc.into(),
        dr_path: Vec::new(),
        ports,
        switch_info: Some(SwitchInfo {
            linear_fdb_cap: 30720,
            multicast_fdb_cap: 1024,
            linear_fdb_top: 6,
            port_state_change: false,
            partition_enforcement_cap: 64,
            filter_raw_inbound_cap: true,
            filter_raw_outbound_cap: true,
            enhanced_port0: true,
            ..SwitchInfo::default()
        }),
    }
}

/// Topology B after opensm (minhop), swept from node `from` (0 = node1 .. 3 = node4). The
/// nodes are stored in an order no BFS would produce (the sweeping node first, then switches,
/// then the other CAs), to show the formatters recompute libibnetdisc's order.
pub fn topo_b(from: usize) -> Subnet {
    let mut subnet = Subnet::default();
    let mut order = vec![from];
    order.extend((0..4).filter(|&i| i != from));
    // nodes: [from CA, sw1, sw2, other CAs...]
    let mut index_of_ca = [0usize; 4];
    let ca_node = |i: usize| {
        let lid = (i + 1) as u16;
        ca(
            NODE_GUIDS[i],
            1,
            1,
            &format!("node{} mlx4_0", i + 1),
            ca_port(lid, 1, i == 0, true),
        )
    };
    subnet.nodes.push(ca_node(from));
    index_of_ca[from] = 0;
    subnet
        .nodes
        .push(switch(SW1, 5, "MF0;sw1:SX6036/U1", &[1, 2, 35, 36]));
    subnet
        .nodes
        .push(switch(SW2, 6, "MF0;sw2:SX6036/U1", &[1, 2, 35, 36]));
    for &i in &order[1..] {
        index_of_ca[i] = subnet.nodes.len();
        subnet.nodes.push(ca_node(i));
    }
    let (sw1, sw2) = (1, 2);
    for (i, &at) in index_of_ca.iter().enumerate() {
        let (sw, port) = if i < 2 {
            (sw1, i as u8 + 1)
        } else {
            (sw2, i as u8 - 1)
        };
        subnet.add_link(PortRef { node: at, port: 1 }, PortRef { node: sw, port });
    }
    for p in [35, 36] {
        subnet.add_link(
            PortRef { node: sw1, port: p },
            PortRef { node: sw2, port: p },
        );
    }
    subnet
}
