//! `ibstat`, `ibstatus`, `ibv_devices`, `ibv_devinfo` against the golden captures.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod common;

use common::golden;

use softib_diag::device::{
    ibstat, ibstat_json, ibstatus, ibv_devices, ibv_devinfo, DeviceAttrs, DeviceView, GidEntry,
    GidType, IbstatArgs, LinkLayer, PortView,
};
use softib_wire::mad::attr::{PortPhysicalState, PortState};
use softib_wire::{Gid, Guid, Lid, Mtu};

fn ibsim_port(number: u8, post_sm: bool) -> PortView {
    PortView {
        number,
        state: if post_sm {
            PortState::Active
        } else {
            PortState::Init
        },
        phys_state: PortPhysicalState::LinkUp,
        active_width: 0x02,
        active_speed: 4,
        lid: Lid(u16::from(post_sm)),
        sm_lid: Lid(u16::from(post_sm)),
        capability_mask: if post_sm { 0x0050_c04a } else { 0x0050_c048 },
        port_guid: Guid(0xe41d_2d03_00b4_7d00 + u64::from(number)),
        link_layer_sysfs: Some("IB".into()),
        ..PortView::default()
    }
}

/// test213 as the ibsim shim shows it (one port: the one the process is attached to).
fn test213(name: &str, port: u8, post_sm: bool) -> DeviceView {
    let patched = name == "mlx4_0";
    DeviceView {
        name: name.into(),
        ca_type: if patched { "MT4099" } else { "simulator" }.into(),
        fw_ver: if patched { "2.42.5000" } else { "1" }.into(),
        hw_rev: "a1".into(),
        node_guid: Guid(0xe41d_2d03_00b4_7d00),
        sys_image_guid: Guid(0xe41d_2d03_00b4_7d03),
        ports: vec![ibsim_port(port, post_sm)],
        ..DeviceView::default()
    }
}

fn rxe_attrs() -> DeviceAttrs {
    DeviceAttrs {
        fw_ver: "0.0.0".into(),
        vendor_id: 0xffffff,
        vendor_part_id: 0,
        hw_ver: 0,
        phys_port_cnt: 1,
        max_mr_size: u64::MAX,
        page_size_cap: 0xffff_f000,
        max_qp: 1_048_560,
        max_qp_wr: 1_048_576,
        device_cap_flags: 0x0122_3c76,
        max_sge: 32,
        max_sge_rd: 32,
        max_cq: 1_048_576,
        max_cqe: 32767,
        max_mr: 524_287,
        max_pd: 1_048_576,
        max_qp_rd_atom: 128,
        max_res_rd_atom: 258_048,
        max_qp_init_rd_atom: 128,
        atomic_cap: 1,
        max_mw: 524_287,
        max_mcast_grp: 8192,
        max_mcast_qp_attach: 56,
        max_total_mcast_qp_attach: 458_752,
        max_ah: 32767,
        max_srq: 917_503,
        max_srq_wr: 1_048_576,
        max_srq_sge: 27,
        max_pkeys: 64,
        local_ca_ack_delay: 15,
        device_cap_flags_ex: 0x0122_3c76,
        num_comp_vectors: 2,
        ..DeviceAttrs::default()
    }
}

fn rxe(name: &str, guid: u64, ipv4: [u8; 4], speed: u8) -> DeviceView {
    let guid = Guid(guid);
    DeviceView {
        name: name.into(),
        node_guid: guid,
        sys_image_guid: guid,
        attrs: rxe_attrs(),
        ports: vec![PortView {
            number: 1,
            state: PortState::Active,
            phys_state: PortPhysicalState::LinkUp,
            active_width: 0x01,
            active_speed: speed,
            capability_mask: 0x0001_0000,
            port_guid: guid,
            link_layer: LinkLayer::Ethernet,
            max_mtu: Mtu::Mtu4096,
            active_mtu: Mtu::Mtu1024,
            max_msg_sz: 0x80_0000,
            max_vl_num: 1,
            pkey_tbl_len: 1,
            gid_tbl_len: 1024,
            gids: vec![
                GidEntry {
                    index: 0,
                    gid: Gid::from_prefix_guid(0xfe80_0000_0000_0000, guid),
                    gid_type: GidType::RoceV2,
                },
                GidEntry {
                    index: 1,
                    gid: Gid::from_ipv4(ipv4),
                    gid_type: GidType::RoceV2,
                },
            ],
            ..PortView::default()
        }],
        ..DeviceView::default()
    }
}

fn rxe_pair() -> Vec<DeviceView> {
    vec![
        rxe("rxe0", 0x98ae_96ff_fecb_c0f2, [10, 77, 0, 1], 8),
        rxe("rxe1", 0x74bf_f0ff_fecd_70ae, [10, 77, 0, 2], 8),
    ]
}

fn args() -> IbstatArgs {
    IbstatArgs::default()
}

#[test]
fn ibstat_ibsim_stock() {
    let pre = [test213("ibsim0", 1, false)];
    let post = [test213("ibsim0", 1, true)];
    assert_eq!(
        ibstat(&pre, &args()).unwrap(),
        golden("A-stock/presm-test213-ibstat.txt")
    );
    assert_eq!(
        ibstat(&post, &args()).unwrap(),
        golden("A-stock/postsm-test213-ibstat.txt")
    );
    let list = IbstatArgs {
        list: true,
        ..args()
    };
    assert_eq!(
        ibstat(&pre, &list).unwrap(),
        golden("A-stock/presm-test213-ibstat-l.txt")
    );
    let short = IbstatArgs {
        short: true,
        ..args()
    };
    assert_eq!(
        ibstat(&pre, &short).unwrap(),
        golden("A-stock/presm-test213-ibstat-s.txt")
    );
    let guids = IbstatArgs {
        port_guids: true,
        ..args()
    };
    assert_eq!(
        ibstat(&pre, &guids).unwrap(),
        golden("A-stock/presm-test213-ibstat-p.txt")
    );
    assert_eq!(
        ibstat(&post, &guids).unwrap(),
        golden("A-stock/postsm-test213-ibstat-p.txt")
    );
}

#[test]
fn ibstat_ibsim_patched() {
    let p1 = [test213("mlx4_0", 1, true)];
    let named = IbstatArgs {
        device: Some("mlx4_0".into()),
        ..args()
    };
    assert_eq!(
        ibstat(&p1, &named).unwrap(),
        golden("A-patched/named-test213p1-ibstat-mlx4_0.txt")
    );
    let short = IbstatArgs {
        short: true,
        ..args()
    };
    assert_eq!(
        ibstat(&p1, &short).unwrap(),
        golden("A-patched/named-test213p1-ibstat-s.txt")
    );
    let list = IbstatArgs {
        list: true,
        ..args()
    };
    assert_eq!(
        ibstat(&p1, &list).unwrap(),
        golden("A-patched/named-test213p1-ibstat-l.txt")
    );
    // Attached to port 2: "Number of ports: 2" with only port 2 listed.
    let p2 = [test213("mlx4_0", 2, true)];
    assert_eq!(
        ibstat(&p2, &args()).unwrap(),
        golden("A-patched/named-test213p2-ibstat.txt")
    );
    let guids = IbstatArgs {
        port_guids: true,
        ..args()
    };
    assert_eq!(
        ibstat(&p2, &guids).unwrap(),
        golden("A-patched/named-test213p2-ibstat-p.txt")
    );
    let pre2 = [test213("ibsim0", 2, false)];
    assert_eq!(
        ibstat(&pre2, &args()).unwrap(),
        golden("A-patched/presm-test213p2-ibstat.txt")
    );
}

#[test]
fn ibstat_errors_and_single_port() {
    let devs = [test213("ibsim0", 1, false)];
    let port2 = IbstatArgs {
        device: Some("ibsim0".into()),
        port: Some(2),
        ..args()
    };
    let err = ibstat(&devs, &port2).unwrap_err();
    assert_eq!(err.message, "CA: 'ibsim0' has no port number 2 - max (1)");
    assert_eq!(err.exit_code, 255);
    let missing = IbstatArgs {
        device: Some("mlx5_0".into()),
        ..args()
    };
    assert_eq!(
        ibstat(&devs, &missing).unwrap_err().message,
        "'mlx5_0' IB device can't be found"
    );
    let port1 = IbstatArgs {
        device: Some("ibsim0".into()),
        port: Some(1),
        ..args()
    };
    let text = ibstat(&devs, &port1).unwrap();
    assert!(
        text.starts_with("CA: 'ibsim0'\nPort 1:\nState: Initializing\n"),
        "{text}"
    );
    assert_eq!(ibstat(&[], &args()).unwrap(), "");
}

#[test]
fn ibstat_rxe() {
    let devs = rxe_pair();
    assert_eq!(ibstat(&devs, &args()).unwrap(), golden("rxe/ibstat.txt"));
    let one = IbstatArgs {
        device: Some("rxe0".into()),
        ..args()
    };
    assert_eq!(ibstat(&devs, &one).unwrap(), golden("rxe/ibstat_rxe0.txt"));
}

#[test]
fn ibstat_json_shape() {
    let v = ibstat_json(&[test213("mlx4_0", 1, true)], &args()).unwrap();
    assert_eq!(v[0]["name"], "mlx4_0");
    assert_eq!(v[0]["num_ports"], 1);
    assert_eq!(v[0]["node_guid"], "0xe41d2d0300b47d00");
    assert_eq!(v[0]["ports"][0]["state"], "Active");
    assert_eq!(v[0]["ports"][0]["rate"], 40.0);
    assert_eq!(v[0]["ports"][0]["rate_text"], "40 Gb/sec (4X QDR)");
    assert_eq!(v[0]["ports"][0]["capability_mask"], "0x0050c04a");
    assert_eq!(v[0]["ports"][0]["link_layer"], "IB");
}

#[test]
fn ibstatus_rxe_and_ibsim() {
    assert_eq!(
        ibstatus(&rxe_pair(), &[]).unwrap(),
        golden("rxe/ibstatus.txt")
    );
    // ibsim exposes no sysfs to the shell script at all.
    let err = ibstatus(&[], &[]).unwrap_err();
    assert_eq!(
        format!("{}\n", err.message),
        golden("A-stock/postsm-test213-ibstatus.txt")
    );
    let one = ibstatus(&rxe_pair(), &[("rxe1".into(), Some(1))]).unwrap();
    assert!(one.starts_with("Infiniband device 'rxe1' port 1 status:\n"));
}

#[test]
fn ibv_devices_rxe() {
    assert_eq!(ibv_devices(&rxe_pair()), golden("rxe/ibv_devices.txt"));
}

#[test]
fn ibv_devinfo_rxe() {
    let devs = rxe_pair();
    assert_eq!(
        ibv_devinfo(&devs, false, None, None).unwrap(),
        golden("rxe/ibv_devinfo.txt")
    );
    assert_eq!(
        ibv_devinfo(&devs, true, Some("rxe0"), None).unwrap(),
        golden("rxe/ibv_devinfo_v_rxe0.txt")
    );
    assert_eq!(
        ibv_devinfo(&devs, true, Some("rxe1"), None).unwrap(),
        golden("rxe/ibv_devinfo_v_rxe1.txt")
    );
    let eth = [rxe("rxe_eth", 0x5054_00ff_fe00_9902, [10, 99, 0, 2], 1)];
    assert_eq!(
        ibv_devinfo(&eth, true, None, None).unwrap(),
        golden("rxe/ibv_devinfo_v_rxe_eth.txt")
    );
    assert_eq!(
        ibv_devinfo(&devs, false, Some("mlx5_0"), None)
            .unwrap_err()
            .message,
        "IB device 'mlx5_0' wasn't found"
    );
    assert_eq!(
        ibv_devinfo(&devs, false, None, Some(2))
            .unwrap_err()
            .exit_code,
        4
    );
}

#[test]
fn ibv_devinfo_infiniband_port() {
    // An IB port prints its GIDs as eight hex groups without a type suffix.
    let mut dev = test213("mlx4_0", 1, true);
    dev.attrs.phys_port_cnt = 1;
    dev.ports[0].gids = vec![GidEntry {
        index: 0,
        gid: Gid::from_prefix_guid(0xfe80_0000_0000_0000, Guid(0xe41d_2d03_00b4_7d01)),
        gid_type: GidType::IbRoceV1,
    }];
    let text = ibv_devinfo(&[dev], true, None, None).unwrap();
    assert!(text.contains("\t\t\tlink_layer:\t\tInfiniBand\n"), "{text}");
    assert!(
        text.contains("\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:e41d:2d03:00b4:7d01\n"),
        "{text}"
    );
    assert!(text.contains("\t\t\tactive_width:\t\t4X (2)\n"), "{text}");
}

#[test]
fn odd_values_do_not_panic() {
    use softib_wire::mad::attr::NodeType;
    let mut dev = rxe("odd", u64::MAX, [0, 0, 0, 0], 255);
    dev.node_type = NodeType::Unknown(9);
    dev.attrs.atomic_cap = 77;
    dev.attrs.device_cap_flags = u32::MAX;
    dev.attrs.device_cap_flags_ex = u64::MAX;
    dev.attrs.odp_rc_caps = u32::MAX;
    dev.attrs.max_tso = 1;
    dev.attrs.tso_supported_qpts = u32::MAX;
    dev.attrs.tm_max_num_tags = 1;
    dev.attrs.raw_packet_caps = u32::MAX;
    dev.attrs.phys_port_cnt = 255;
    let p = &mut dev.ports[0];
    p.state = PortState::Unknown(200);
    p.phys_state = PortPhysicalState::Unknown(200);
    p.active_width = 0;
    p.max_mtu = Mtu::Unknown(0);
    p.max_vl_num = 99;
    p.gids.push(GidEntry {
        index: u16::MAX,
        gid: Gid([0xff; 16]),
        gid_type: GidType::IbRoceV1,
    });
    let devs = [dev];
    let text = ibstat(&devs, &args()).unwrap();
    assert!(text.contains("State: ???"), "{text}");
    assert!(text.contains("Rate: 0"), "{text}");
    let text = ibv_devinfo(&devs, true, None, Some(1)).unwrap();
    assert!(text.contains("invalid MTU (0)"), "{text}");
    assert!(text.contains("Unknown flags: 0x"), "{text}");
    let text = ibstatus(&devs, &[("odd".into(), Some(7))]).unwrap();
    assert!(text.contains("\tbase lid:\t unknown\n"), "{text}");
    assert!(ibstatus(&devs, &[("nope".into(), None)]).is_err());
    let _ = ibstat_json(
        &devs,
        &IbstatArgs {
            port_guids: true,
            ..args()
        },
    )
    .unwrap();
    assert!(!softib_diag::ctime_utc(i64::MAX).is_empty());
    assert!(!softib_diag::ctime_utc(i64::MIN).is_empty());
}
