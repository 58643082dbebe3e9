//! A whole fabric in one daemon: hosts with their control sockets, cables on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use softib_hca::host::host_dir;

mod common;
use common::{start_topology, Agent, Running, RATES, TOPO_A};

fn start(topo: &str, name: &str) -> Running {
    start_topology(topo, name, 7)
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ctx(dir: &Path, host: &str) -> softib::Context {
    softib::Context::open_at(&host_dir(dir, host)).unwrap()
}

#[test]
fn back_to_back_ports_train_to_initializing_without_an_sm() {
    let f = start(TOPO_A, "train");
    let mut a = ctx(&f.dir, "test213");
    let mut b = ctx(&f.dir, "test214");
    assert_eq!(a.host(), "test213");
    wait_for(
        "both ports of both hosts LinkUp/Init",
        Duration::from_secs(5),
        || {
            [&mut a, &mut b].into_iter().all(|c| {
                let d = c.devices().unwrap();
                d[0].ports.iter().all(|p| p.phys_state == 5 && p.state == 2)
            })
        },
    );
    let d = a.devices().unwrap();
    assert_eq!(d[0].name, "mlx4_0");
    assert_eq!(d[0].ca_type, "MT4099");
    assert_eq!(d[0].ports.len(), 2);
    assert_eq!(d[0].ports[0].rate, 40);
    assert_eq!(d[0].ports[0].lid.0, 0);
}

#[test]
fn a_client_cannot_use_another_clients_objects_and_bad_requests_get_errors() {
    let f = start(TOPO_A, "own");
    let mut a = ctx(&f.dir, "test213");
    let mut b = ctx(&f.dir, "test213");
    let pd = a.alloc_pd(0).unwrap();
    let cq = a.create_cq(0, 16).unwrap();
    let err = b.create_cq(1, 16).unwrap_err().to_string();
    assert!(err.contains("no device 1"), "{err}");
    let err = b.destroy_cq(0, cq).unwrap_err().to_string();
    assert!(err.contains("belongs to this client"), "{err}");
    let err = b.dealloc_pd(0, pd).unwrap_err().to_string();
    assert!(err.contains("belongs to this client"), "{err}");
    // Garbage on the socket: the daemon answers with an error and keeps serving others.
    {
        use std::io::Write;
        let mut raw = std::os::unix::net::UnixStream::connect(
            host_dir(&f.dir, "test213").join("softibd.sock"),
        )
        .unwrap();
        raw.write_all(&[5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff])
            .unwrap();
        raw.write_all(&[0xff, 0xff, 0xff, 0x7f]).unwrap();
    }
    // When `a` goes away its objects are reclaimed; the daemon still serves `b`.
    drop(a);
    let _ = b.devices().unwrap();
    let buf = b.alloc_buffer(4096).unwrap();
    let pd = b.alloc_pd(0).unwrap();
    let err = b
        .reg_mr(0, pd, &buf, 4000, 200, softib::AccessFlags::LOCAL_WRITE)
        .unwrap_err()
        .to_string();
    assert!(err.contains("not inside buffer"), "{err}");
    b.reg_mr(0, pd, &buf, 0, 4096, softib::AccessFlags::LOCAL_WRITE)
        .unwrap();
}

/// PortInfo of `port` of the node at the end of `path`, once its link is up.
fn trained_port(agent: &mut Agent, path: &[u8], port: u8) -> softib_wire::mad::attr::PortInfo {
    use softib_wire::mad::attr::PortPhysicalState;
    let t0 = Instant::now();
    loop {
        if let Some((softib_wire::mad::status::SUCCESS, pi)) = agent.get_port_info_of(path, port, 0)
        {
            if pi.port_physical_state == PortPhysicalState::LinkUp {
                return pi;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "port {port} at the end of {path:?} never trained"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn every_port_trains_to_the_rate_of_its_link_in_the_topology() {
    use softib_fabric::{LinkSpeed, LinkWidth};
    let f = start(RATES, "rates");
    let mut h1 = Agent::open(&f, "h1", false);
    let mut h2 = Agent::open(&f, "h2", false);
    let rate = |pi: &softib_wire::mad::attr::PortInfo| {
        (
            pi.link_width_active,
            pi.link_speed_active,
            pi.link_speed_ext_active,
        )
    };
    let edr_4x = (
        LinkWidth::X4.bit(),
        LinkSpeed::Edr.speed_active(),
        LinkSpeed::Edr.ext_speed_active(),
    );
    let sdr_1x = (
        LinkWidth::X1.bit(),
        LinkSpeed::Sdr.speed_active(),
        LinkSpeed::Sdr.ext_speed_active(),
    );
    assert_ne!(edr_4x, sdr_1x);
    // The switch, one hop from h1: port 1 faces h1, port 2 faces h2.
    assert_eq!(rate(&trained_port(&mut h1, &[1], 1)), edr_4x);
    assert_eq!(rate(&trained_port(&mut h1, &[1], 2)), sdr_1x);
    // Each CA's own port, as its SMA answers (hop count 0).
    assert_eq!(rate(&trained_port(&mut h1, &[], 1)), edr_4x);
    assert_eq!(rate(&trained_port(&mut h2, &[], 1)), sdr_1x);
}

#[test]
fn the_sysfs_files_follow_a_port_info_set_before_its_answer_returns() {
    // libibumad reads a port's LID and SM LID from sysfs (saquery finds the SA there): the
    // files must say what the SM set by the time the SM hears its Set succeeded, not at
    // their next periodic update a second later.
    let f = start(TOPO_A, "sysfs");
    let mut sm = Agent::open(&f, "test213", true);
    let port = host_dir(&f.dir, "test213").join("sys/class/infiniband/mlx4_0/ports/1");
    let read = |name: &str| std::fs::read_to_string(port.join(name)).unwrap_or_default();
    wait_for("test213's sysfs files", Duration::from_secs(5), || {
        read("lid") == "0x0\n"
    });
    let mut pi = trained_port(&mut sm, &[], 1);
    pi.port_state = softib_wire::mad::attr::PortState::NoChange;
    pi.port_physical_state = softib_wire::mad::attr::PortPhysicalState::NoChange;
    for lid in [7, 9, 11] {
        pi.lid = softib_wire::Lid(lid);
        pi.master_sm_lid = softib_wire::Lid(lid);
        assert_eq!(
            sm.set_port_info(&[], 0, &pi),
            Some(softib_wire::mad::status::SUCCESS)
        );
        assert_eq!(read("lid"), format!("0x{lid:x}\n"));
        assert_eq!(read("sm_lid"), format!("0x{lid:x}\n"));
    }
}

/// A host daemon in a thread with two RoCEv2 devices on loopback addresses.
fn start_roce(name: &str, udp_port: u16) -> Running {
    let r = common::start_host(name, 11);
    let mut c = softib::Context::open_at(&r.dir).unwrap();
    for (n, ip) in [("rxe0", "127.0.0.2"), ("rxe1", "127.0.0.3")] {
        c.link_add(softib::LinkConfig {
            name: n.into(),
            netdev: "lo".into(),
            addr: ip.parse().unwrap(),
            udp_port,
        })
        .unwrap();
    }
    r
}

/// Brings an RC QP on `dev` of `ctx` to RTS towards `remote` (qpn, gid).
fn rc_qp(
    ctx: &mut softib::Context,
    dev: u32,
    pd: softib::PdHandle,
    cq: softib::CqHandle,
) -> softib::Qpn {
    use softib::*;
    let qpn = ctx
        .create_qp(dev, common::qp_init(QpType::Rc, pd, cq, 64, false))
        .unwrap();
    let a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: AccessFlags::REMOTE_WRITE.with(AccessFlags::REMOTE_READ),
        ..QpAttr::default()
    };
    ctx.modify_qp(
        dev,
        qpn,
        &a,
        AttrMask::STATE
            .with(AttrMask::PKEY_INDEX)
            .with(AttrMask::PORT)
            .with(AttrMask::ACCESS_FLAGS),
    )
    .unwrap();
    qpn
}

fn connect(
    ctx: &mut softib::Context,
    dev: u32,
    qpn: softib::Qpn,
    rqpn: softib::Qpn,
    rgid: softib::Gid,
) {
    use softib::*;
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: rqpn,
        rq_psn: Psn::new(100),
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        ah_attr: AddressVector {
            grh: Some(GlobalRoute {
                dgid: rgid,
                flow_label: 0,
                sgid_index: 1,
                hop_limit: 64,
                traffic_class: 0,
            }),
            port_num: 1,
            ..AddressVector::default()
        },
        ..QpAttr::default()
    };
    ctx.modify_qp(
        dev,
        qpn,
        &rtr,
        AttrMask::STATE
            .with(AttrMask::AV)
            .with(AttrMask::PATH_MTU)
            .with(AttrMask::DEST_QPN)
            .with(AttrMask::RQ_PSN)
            .with(AttrMask::MAX_DEST_RD_ATOMIC)
            .with(AttrMask::MIN_RNR_TIMER),
    )
    .unwrap();
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: Psn::new(100),
        timeout: 8,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
        ..QpAttr::default()
    };
    ctx.modify_qp(
        dev,
        qpn,
        &rts,
        AttrMask::STATE
            .with(AttrMask::SQ_PSN)
            .with(AttrMask::TIMEOUT)
            .with(AttrMask::RETRY_CNT)
            .with(AttrMask::RNR_RETRY)
            .with(AttrMask::MAX_QP_RD_ATOMIC),
    )
    .unwrap();
}

#[test]
fn rc_writes_arrive_intact_through_loss_duplication_reordering_and_corruption() {
    use softib::*;
    let f = start_roce("faults", 24791 + (std::process::id() % 1000) as u16);
    let mut a = softib::Context::open_at(&f.dir).unwrap();
    let mut b = softib::Context::open_at(&f.dir).unwrap();
    let spec = FaultSpec::parse(&[
        "loss", "3%", "dup", "2%", "reorder", "3%", "corrupt", "3%", "seed", "5",
    ])
    .unwrap();
    a.set_faults(0, 1, spec).unwrap();
    b.set_faults(1, 1, spec).unwrap();
    const LEN: usize = 1 << 20;
    let mut src = a.alloc_buffer(LEN).unwrap();
    let dst = b.alloc_buffer(LEN).unwrap();
    // A pattern that no misplaced or stale byte could match by accident.
    let mut x: u32 = 0x1234_5678;
    for byte in src.as_mut_slice().iter_mut() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *byte = x as u8;
    }
    let (pa, pb) = (a.alloc_pd(0).unwrap(), b.alloc_pd(1).unwrap());
    let mra = a
        .reg_mr(0, pa, &src, 0, LEN, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mrb = b
        .reg_mr(
            1,
            pb,
            &dst,
            0,
            LEN,
            AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_WRITE),
        )
        .unwrap();
    let (cqa, cqb) = (a.create_cq(0, 128).unwrap(), b.create_cq(1, 128).unwrap());
    let qa = rc_qp(&mut a, 0, pa, cqa);
    let qb = rc_qp(&mut b, 1, pb, cqb);
    let gid_a = a.devices().unwrap()[0].ports[0].gids[1];
    let gid_b = b.devices().unwrap()[1].ports[0].gids[1];
    connect(&mut a, 0, qa, qb, gid_b);
    connect(&mut b, 1, qb, qa, gid_a);
    // 128 writes of 8 KiB, in rounds of 16 whose last is signaled: between two devices of
    // one daemon the QPs are in-process from RTR (a write is one 8 KiB packet), and enough
    // packets must cross the faults for each of them to act.
    let chunk = LEN / 128;
    for round in 0..8 {
        let wrs: Vec<SendWr> = (0..16)
            .map(|k| {
                let i = round * 16 + k;
                SendWr {
                    wr_id: i as u64,
                    opcode: WrOpcode::RdmaWrite(RemoteAddr {
                        addr: mrb.addr + (i * chunk) as u64,
                        rkey: RKey(mrb.rkey),
                    }),
                    sg_list: vec![Sge {
                        addr: mra.addr + (i * chunk) as u64,
                        length: chunk as u32,
                        lkey: mra.lkey,
                    }],
                    flags: if k == 15 {
                        SendFlags::SIGNALED
                    } else {
                        SendFlags::default()
                    },
                    inline_data: None,
                    ud: None,
                }
            })
            .collect();
        a.post_send(0, qa, wrs).unwrap();
        let t0 = Instant::now();
        let wc = loop {
            let wcs = a.poll_cq(0, cqa, 16, Duration::from_millis(200)).unwrap();
            if let Some(w) = wcs.into_iter().next() {
                break w;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "no completion in 60 s (round {round})"
            );
        };
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert_eq!(wc.wr_id, (round * 16 + 15) as u64);
    }
    assert!(
        dst.as_slice() == src.as_slice(),
        "the destination differs from the source"
    );
    // Every fault acted, on the WRITEs' way or on the ACKs'.
    let (sa, sb) = (a.faults(0).unwrap()[0].2, b.faults(1).unwrap()[0].2);
    assert!(
        sa.lost + sb.lost > 0
            && sa.duplicated + sb.duplicated > 0
            && sa.reordered + sb.reordered > 0
            && sa.corrupted + sb.corrupted > 0,
        "{sa:?} {sb:?}"
    );
    eprintln!("faults on the WRITEs' way: {sa:?}; on the ACKs': {sb:?}");
}
