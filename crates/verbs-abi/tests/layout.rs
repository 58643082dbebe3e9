//! The declarations against the installed `<infiniband/verbs.h>`: a C program compiled here
//! prints `sizeof` and `offsetof` of every struct and field the crate's compile-time asserts
//! name, and they must be what Rust computes. Skips (with a message) without a C compiler
//! or libibverbs-dev, except under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::mem::{offset_of, size_of};
use std::process::Command;

use softib_verbs_abi::rdma_cm::*;
use softib_verbs_abi::*;

/// (C struct, C field or "" for the size, what Rust says).
fn rust_side() -> Vec<(&'static str, &'static str, usize)> {
    macro_rules! entries {
        ($($t:ty => $c:literal [$($f:ident),*]),* $(,)?) => {{
            let mut v = Vec::new();
            $(
                v.push(($c, "", size_of::<$t>()));
                $(v.push(($c, stringify!($f), offset_of!($t, $f)));)*
            )*
            v
        }};
    }
    entries![
        IbvDevice => "ibv_device" [node_type, transport_type, name, dev_name, dev_path, ibdev_path],
        IbvContextOps => "ibv_context_ops" [alloc_mw, bind_mw, dealloc_mw, poll_cq, req_notify_cq,
            post_srq_recv, post_send, post_recv],
        IbvContext => "ibv_context" [device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat],
        VerbsContext => "verbs_context" [query_port, advise_mr, alloc_null_mr, create_cq_ex,
            query_device_ex, open_qp, create_qp_ex, get_srq_num, create_srq_ex, open_xrcd,
            close_xrcd, sz, context],
        IbvPd => "ibv_pd" [context, handle],
        IbvMr => "ibv_mr" [context, pd, addr, length, handle, lkey, rkey],
        IbvCompChannel => "ibv_comp_channel" [context, fd, refcnt],
        IbvCq => "ibv_cq" [context, channel, cq_context, handle, cqe, mutex, cond,
            comp_events_completed, async_events_completed],
        IbvCqEx => "ibv_cq_ex" [comp_mask, status, wr_id, start_poll, next_poll, end_poll,
            read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num, read_src_qp,
            read_wc_flags, read_slid, read_sl, read_dlid_path_bits, read_completion_ts,
            read_cvlan, read_flow_tag, read_tm_info, read_completion_wallclock_ns],
        IbvCqInitAttrEx => "ibv_cq_init_attr_ex" [cqe, cq_context, channel, comp_vector, wc_flags,
            comp_mask, flags, parent_domain],
        IbvSrq => "ibv_srq" [context, srq_context, pd, handle, mutex, cond, events_completed],
        IbvSrqAttr => "ibv_srq_attr" [max_wr, max_sge, srq_limit],
        IbvSrqInitAttr => "ibv_srq_init_attr" [srq_context, attr],
        IbvSrqInitAttrEx => "ibv_srq_init_attr_ex" [srq_context, attr, comp_mask, srq_type, pd,
            xrcd, cq, tm_cap],
        IbvQp => "ibv_qp" [context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state,
            qp_type, mutex, cond, events_completed],
        IbvQpEx => "ibv_qp_ex" [qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp,
            wr_atomic_fetch_add, wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write,
            wr_rdma_write_imm, wr_send, wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr,
            wr_set_xrc_srqn, wr_set_inline_data, wr_set_inline_data_list, wr_set_sge,
            wr_set_sge_list, wr_start, wr_complete, wr_abort, wr_atomic_write],
        IbvDataBuf => "ibv_data_buf" [addr, length],
        IbvQpCap => "ibv_qp_cap" [max_send_wr, max_recv_wr, max_send_sge, max_recv_sge,
            max_inline_data],
        IbvQpInitAttr => "ibv_qp_init_attr" [qp_context, send_cq, recv_cq, srq, cap, qp_type,
            sq_sig_all],
        IbvQpInitAttrEx => "ibv_qp_init_attr_ex" [qp_context, send_cq, recv_cq, srq, cap, qp_type,
            sq_sig_all, comp_mask, pd, xrcd, create_flags, max_tso_header, rwq_ind_tbl,
            rx_hash_conf, source_qpn, send_ops_flags],
        IbvGlobalRoute => "ibv_global_route" [dgid, flow_label, sgid_index, hop_limit, traffic_class],
        IbvAhAttr => "ibv_ah_attr" [grh, dlid, sl, src_path_bits, static_rate, is_global, port_num],
        IbvQpAttr => "ibv_qp_attr" [qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn,
            sq_psn, dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index,
            alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic,
            min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout,
            rate_limit],
        IbvAh => "ibv_ah" [context, pd, handle],
        IbvSge => "ibv_sge" [addr, length, lkey],
        IbvSendWr => "ibv_send_wr" [wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr],
        IbvRecvWr => "ibv_recv_wr" [wr_id, next, sg_list, num_sge],
        IbvWc => "ibv_wc" [wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp,
            wc_flags, pkey_index, slid, sl, dlid_path_bits],
        IbvGrh => "ibv_grh" [version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid],
        IbvDeviceAttr => "ibv_device_attr" [fw_ver, node_guid, sys_image_guid, max_mr_size,
            page_size_cap, vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags,
            max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom,
            max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee,
            max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp,
            max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr,
            max_srq, max_srq_wr, max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt],
        IbvDeviceAttrEx => "ibv_device_attr_ex" [orig_attr, comp_mask, odp_caps,
            completion_timestamp_mask, hca_core_clock, device_cap_flags_ex, max_dm_size,
            pci_atomic_caps, xrc_odp_caps, phys_port_cnt_ex],
        IbvPortAttr => "ibv_port_attr" [state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags,
            max_msg_sz, bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num,
            sm_sl, subnet_timeout, init_type_reply, active_width, active_speed, phys_state,
            link_layer, flags, port_cap_flags2],
        IbvGidEntry => "ibv_gid_entry" [gid, gid_index, port_num, gid_type, ndev_ifindex],
        IbvAsyncEvent => "ibv_async_event" [element, event_type],
        IbvEce => "ibv_ece" [vendor_id, options, comp_mask],
        IbvPollCqAttr => "ibv_poll_cq_attr" [comp_mask],
        IbvQueryDeviceExInput => "ibv_query_device_ex_input" [comp_mask],
        IbUverbsAhAttr => "ib_uverbs_ah_attr" [dgid, flow_label, sgid_index, hop_limit,
            traffic_class, dlid, sl, src_path_bits, static_rate, is_global, port_num],
        IbUverbsQpAttr => "ib_uverbs_qp_attr" [qp_attr_mask, qp_state, ah_attr, alt_ah_attr,
            max_send_wr, max_inline_data, pkey_index, en_sqd_async_notify, port_num, alt_timeout],
        IbUserPathRec => "ib_user_path_rec" [dgid, sgid, dlid, slid, raw_traffic, flow_label,
            reversible, mtu, pkey, hop_limit, traffic_class, numb_path, sl, mtu_selector,
            rate_selector, rate, packet_life_time_selector, packet_life_time, preference],
        IbvSaPathRec => "ibv_sa_path_rec" [dgid, sgid, dlid, slid, raw_traffic, flow_label,
            hop_limit, traffic_class, reversible, numb_path, pkey, sl, mtu_selector, mtu,
            rate_selector, rate, packet_life_time_selector, packet_life_time, preference],
        RdmaEventChannel => "rdma_event_channel" [fd],
        RdmaIbAddr => "rdma_ib_addr" [sgid, dgid, pkey],
        RdmaAddr => "rdma_addr" [src_addr, dst_addr, ibaddr],
        RdmaRoute => "rdma_route" [addr, path_rec, num_paths],
        RdmaCmId => "rdma_cm_id" [verbs, channel, context, qp, route, ps, port_num, event,
            send_cq_channel, send_cq, recv_cq_channel, recv_cq, srq, pd, qp_type],
        RdmaConnParam => "rdma_conn_param" [private_data, private_data_len, responder_resources,
            initiator_depth, flow_control, retry_count, rnr_retry_count, srq, qp_num],
        RdmaUdParam => "rdma_ud_param" [private_data, private_data_len, ah_attr, qp_num, qkey],
        RdmaCmEvent => "rdma_cm_event" [id, listen_id, event, status, param],
        RdmaAddrinfo => "rdma_addrinfo" [ai_flags, ai_family, ai_qp_type, ai_port_space,
            ai_src_len, ai_dst_len, ai_src_addr, ai_dst_addr, ai_src_canonname, ai_dst_canonname,
            ai_route_len, ai_route, ai_connect_len, ai_connect, ai_next],
    ]
}

/// What a C name of a Rust field is where they differ.
fn c_field(s: &str, f: &str) -> String {
    match (s, f) {
        ("ibv_device", "ops") => "_ops".into(),
        ("rdma_addr", "ibaddr") => "addr.ibaddr".into(),
        ("ib_uverbs_ah_attr", f)
            if [
                "dgid",
                "flow_label",
                "sgid_index",
                "hop_limit",
                "traffic_class",
            ]
            .contains(&f) =>
        {
            format!("grh.{f}")
        }
        _ => f.to_string(),
    }
}

#[test]
fn layout_matches_the_installed_header() {
    let ci = std::env::var_os("CI").is_some_and(|v| v == "true");
    let header = std::path::Path::new("/usr/include/infiniband/verbs.h");
    let cm_header = std::path::Path::new("/usr/include/rdma/rdma_cma.h");
    let cc = Command::new("cc").arg("--version").output().is_ok();
    if !header.exists() || !cm_header.exists() || !cc {
        assert!(
            !ci,
            "CI=true: no C compiler, {} or {} (.ci/run installs gcc, libibverbs-dev and \
             librdmacm-dev)",
            header.display(),
            cm_header.display()
        );
        eprintln!("skipped: needs a C compiler, libibverbs-dev and librdmacm-dev");
        return;
    }
    let entries = rust_side();
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\n\
         #include <infiniband/sa.h>\n#include <rdma/ib_user_verbs.h>\n#include <rdma/ib_user_sa.h>\n\
         #include <rdma/rdma_cma.h>\n\
         int main(void) {\n",
    );
    for (s, f, _) in &entries {
        if f.is_empty() {
            c.push_str(&format!("printf(\"%zu\\n\", sizeof(struct {s}));\n"));
        } else {
            c.push_str(&format!(
                "printf(\"%zu\\n\", offsetof(struct {s}, {}));\n",
                c_field(s, f)
            ));
        }
    }
    c.push_str("return 0; }\n");
    let dir = std::env::temp_dir().join(format!("softib-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, c).unwrap();
    let o = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = Command::new(&exe).output().unwrap();
    let got: Vec<usize> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(got.len(), entries.len());
    let wrong: Vec<String> = entries
        .iter()
        .zip(&got)
        .filter(|((_, _, r), c)| r != *c)
        .map(|((s, f, r), c)| format!("{s}.{f}: Rust {r}, C {c}"))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        wrong.is_empty(),
        "layouts differ from the header:\n{}",
        wrong.join("\n")
    );
}
