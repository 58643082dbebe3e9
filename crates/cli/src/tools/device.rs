//! The device tools: `ibstat`, `ibstatus`, `ibv_devices`, `ibv_devinfo` — the daemon's (or
//! rdma-core's) view of this host's devices, formatted by `softib-diag`.

use anyhow::{anyhow, Result};
use softib::{Context, DeviceInfo};
use softib_diag::device::{DeviceView, GidEntry, GidType, IbstatArgs, LinkLayer, PortView};
use softib_wire::mad::attr::{NodeType, PortPhysicalState, PortState};

use super::{diag_result, print, Flags};

/// Converts the daemon's view of a device into what the formatters print: the values
/// `softib::verbs_attr` computes, which the drop-in libibverbs returns too.
pub fn device_view(d: &DeviceInfo) -> DeviceView {
    let v = softib::verbs_attr::device_attr(d);
    let attrs = softib_diag::device::DeviceAttrs {
        fw_ver: v.fw_ver,
        vendor_id: v.vendor_id,
        vendor_part_id: v.vendor_part_id,
        hw_ver: v.hw_ver,
        phys_port_cnt: v.phys_port_cnt,
        max_mr_size: v.max_mr_size,
        page_size_cap: v.page_size_cap,
        max_qp: v.max_qp,
        max_qp_wr: v.max_qp_wr,
        device_cap_flags: v.device_cap_flags,
        device_cap_flags_ex: u64::from(v.device_cap_flags),
        max_sge: v.max_sge,
        max_sge_rd: v.max_sge_rd,
        max_cq: v.max_cq,
        max_cqe: v.max_cqe,
        max_mr: v.max_mr,
        max_pd: v.max_pd,
        max_qp_rd_atom: v.max_qp_rd_atom,
        max_res_rd_atom: v.max_res_rd_atom,
        max_qp_init_rd_atom: v.max_qp_init_rd_atom,
        atomic_cap: v.atomic_cap,
        max_mw: v.max_mw,
        max_mcast_grp: v.max_mcast_grp,
        max_mcast_qp_attach: v.max_mcast_qp_attach,
        max_total_mcast_qp_attach: v.max_total_mcast_qp_attach,
        max_ah: v.max_ah,
        max_srq: v.max_srq,
        max_srq_wr: v.max_srq_wr,
        max_srq_sge: v.max_srq_sge,
        max_pkeys: v.max_pkeys,
        local_ca_ack_delay: v.local_ca_ack_delay,
        num_comp_vectors: v.num_comp_vectors,
        ..Default::default()
    };
    DeviceView {
        name: d.name.clone(),
        node_type: NodeType::Ca,
        ca_type: d.ca_type.clone(),
        fw_ver: d.fw_ver.clone(),
        // sysfs hw_rev is empty for rxe (no hardware) and the revision in hex otherwise.
        hw_rev: if d.ca_type.is_empty() {
            String::new()
        } else {
            format!("{:x}", d.hw_ver)
        },
        node_guid: d.node_guid,
        sys_image_guid: d.sys_image_guid,
        attrs,
        ports: d
            .ports
            .iter()
            .filter_map(|p| Some((p, softib::verbs_attr::port_attr(d, p.number)?)))
            .map(|(p, a)| PortView {
                number: p.number,
                state: PortState::from(a.state),
                phys_state: PortPhysicalState::from(a.phys_state),
                active_width: a.active_width,
                active_speed: a.active_speed,
                lid: a.lid,
                lmc: a.lmc,
                sm_lid: a.sm_lid,
                sm_sl: a.sm_sl,
                capability_mask: a.port_cap_flags,
                capability_mask2: a.port_cap_flags2,
                port_guid: p.port_guid,
                link_layer: if a.link_layer_ib {
                    LinkLayer::InfiniBand
                } else {
                    LinkLayer::Ethernet
                },
                max_mtu: a.max_mtu,
                active_mtu: a.active_mtu,
                max_msg_sz: a.max_msg_sz,
                max_vl_num: a.max_vl_num,
                bad_pkey_cntr: a.bad_pkey_cntr,
                qkey_viol_cntr: a.qkey_viol_cntr,
                pkey_tbl_len: a.pkey_tbl_len,
                gid_tbl_len: a.gid_tbl_len,
                subnet_timeout: a.subnet_timeout,
                init_type_reply: a.init_type_reply,
                gids: p
                    .gids
                    .iter()
                    .enumerate()
                    .map(|(i, g)| GidEntry {
                        index: i as u16,
                        gid: *g,
                        gid_type: match softib::verbs_attr::gid_type(p) {
                            softib::verbs_attr::GidType::IbRoceV1 => GidType::IbRoceV1,
                            softib::verbs_attr::GidType::RoceV2 => GidType::RoceV2,
                        },
                    })
                    .collect(),
                ..PortView::default()
            })
            .collect(),
    }
}

fn devices() -> Result<Vec<DeviceView>> {
    let mut ctx = Context::open()?;
    Ok(ctx.devices()?.iter().map(device_view).collect())
}

/// `ibstat [-l] [-s] [-p] [--json] [ca_name] [portnum]`.
pub fn ibstat(args: &[String]) -> Result<u8> {
    let mut f = Flags::new(args);
    let list = f.take_switch(&["-l", "--list_of_cas"]);
    let short = f.take_switch(&["-s", "--short"]);
    let port_guids = f.take_switch(&["-p", "--port_list"]);
    let json = f.take_switch(&["--json"]);
    let pos = f.positional("ibstat")?;
    let port = match pos.get(1) {
        Some(p) => Some(
            p.parse()
                .map_err(|_| anyhow!("ibstat: bad port number {p}"))?,
        ),
        None => None,
    };
    let a = IbstatArgs {
        list,
        short,
        port_guids,
        device: pos.first().cloned(),
        port,
    };
    let devs = devices()?;
    if json {
        let v = softib_diag::device::ibstat_json(&devs, &a).map_err(|e| anyhow!("{e}"))?;
        return print(&format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    diag_result(softib_diag::device::ibstat(&devs, &a), "ibstat")
}

/// `ibstatus [devname[:port]]...`.
pub fn ibstatus(args: &[String]) -> Result<u8> {
    let pos = Flags::new(args).positional("ibstatus")?;
    let targets = pos
        .iter()
        .map(|t| match t.split_once(':') {
            Some((d, p)) => Ok((d.to_string(), Some(p.parse()?))),
            None => Ok((t.clone(), None)),
        })
        .collect::<Result<Vec<_>, std::num::ParseIntError>>()
        .map_err(|e| anyhow!("ibstatus: bad port: {e}"))?;
    diag_result(
        softib_diag::device::ibstatus(&devices()?, &targets),
        "ibstatus",
    )
}

/// `ibv_devices`.
pub fn ibv_devices(args: &[String]) -> Result<u8> {
    Flags::new(args).positional("ibv_devices")?;
    print(&softib_diag::device::ibv_devices(&devices()?))
}

/// `ibv_devinfo [-d dev] [-i port] [-v] [-l]`.
pub fn ibv_devinfo(args: &[String]) -> Result<u8> {
    let mut f = Flags::new(args);
    let verbose = f.take_switch(&["-v", "--verbose"]);
    let list = f.take_switch(&["-l", "--list"]);
    let dev = f.take_value(&["-d", "--ib-dev"])?;
    let port = match f.take_value(&["-i", "--ib-port"])? {
        Some(p) => Some(
            p.parse()
                .map_err(|_| anyhow!("ibv_devinfo: bad port {p}"))?,
        ),
        None => None,
    };
    f.positional("ibv_devinfo")?;
    let devs = devices()?;
    if list {
        return print(&softib_diag::device::ibv_devinfo_list(&devs));
    }
    diag_result(
        softib_diag::device::ibv_devinfo(&devs, verbose, dev.as_deref(), port),
        "ibv_devinfo",
    )
}

#[cfg(test)]
mod device_view_tests {
    use super::*;
    use softib::{Gid, Guid, Mtu, PortInfo, VerbsAttr, VerbsPortAttr};

    /// What the rdma-core backend reads from the kernel's rxe in the qemu guest (its
    /// `ibv_query_device`, `ibv_query_port` and `ibv_context`), as a `DeviceInfo`.
    fn rxe_through_rdma_core() -> DeviceInfo {
        let guid = Guid(0x98ae_96ff_fecb_c0f2);
        let attr = softib::DeviceAttr {
            node_guid: guid,
            sys_image_guid: guid,
            vendor_id: 0xff_ffff,
            vendor_part_id: 0,
            hw_ver: 0,
            fw_ver: String::new(),
            max_mr_size: u64::MAX,
            max_qp: 1_048_560,
            max_qp_wr: 1_048_576,
            max_sge: 32,
            max_cq: 1_048_576,
            max_cqe: 32_767,
            max_mr: 524_287,
            max_pd: 1_048_576,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_srq: 917_503,
            max_srq_wr: 1_048_576,
            max_ah: 32_767,
            max_msg_sz: 0x80_0000,
            phys_port_cnt: 1,
            ..softib::DeviceAttr::default()
        };
        let mut gid0 = [0u8; 16];
        gid0[0] = 0xfe;
        gid0[1] = 0x80;
        gid0[8..].copy_from_slice(&guid.0.to_be_bytes());
        let mut gid1 = [0u8; 16];
        gid1[10] = 0xff;
        gid1[11] = 0xff;
        gid1[12..].copy_from_slice(&[10, 77, 0, 1]);
        DeviceInfo {
            name: "rxe0".into(),
            ca_type: String::new(),
            description: String::new(),
            fw_ver: String::new(),
            hw_ver: 0,
            node_guid: guid,
            sys_image_guid: guid,
            vendor_id: 0xff_ffff,
            vendor_part_id: 0,
            attr,
            ports: vec![PortInfo::roce(
                guid,
                true,
                Mtu::Mtu4096,
                Mtu::Mtu1024,
                vec![Gid(gid0), Gid(gid1)],
            )],
            drops: Vec::new(),
            verbs: Some(VerbsAttr {
                device_cap_flags: 0x0122_3c76,
                page_size_cap: 0xffff_f000,
                max_sge_rd: 32,
                max_res_rd_atom: 258_048,
                atomic_cap: 1,
                max_mw: 524_287,
                max_mcast_grp: 8192,
                max_mcast_qp_attach: 56,
                max_total_mcast_qp_attach: 458_752,
                max_ah: 32_767,
                max_srq_sge: 27,
                max_pkeys: 64,
                local_ca_ack_delay: 15,
                num_comp_vectors: 2,
                ports: vec![VerbsPortAttr {
                    max_msg_sz: 0x80_0000,
                    max_vl_num: 1,
                    pkey_tbl_len: 1,
                    gid_tbl_len: 1024,
                    subnet_timeout: 0,
                }],
            }),
        }
    }

    #[test]
    fn a_real_devices_verbs_attributes_print_as_rdma_cores_ibv_devinfo_does() {
        let golden = include_str!("../../../diag/tests/golden/rxe/ibv_devinfo_v_rxe0.txt");
        // The golden is the command, its output and its exit status.
        let want: String = golden
            .lines()
            .skip(1)
            .take_while(|l| !l.starts_with("[exit"))
            .map(|l| format!("{l}\n"))
            .collect();
        let got = softib_diag::device::ibv_devinfo(
            &[device_view(&rxe_through_rdma_core())],
            true,
            Some("rxe0"),
            None,
        )
        .unwrap();
        assert_eq!(got.trim_end(), want.trim_end());
    }
}
