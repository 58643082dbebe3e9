//! Tests of the SMA: attributes, status codes, M_Key, port states, directed route.

use super::*;
use crate::topology::{LinkRate, Topology};
use proptest::prelude::*;
use softib_wire::mad::attr::{capability_mask, link_speed, link_width, SmState};
use softib_wire::mad::{MgmtClass, Repr as MadHeader};

const TOPO_A: &str = include_str!("../../tests/data/topoA.net");
const TOPO_B: &str = include_str!("../../tests/data/topoB.net");

/// test213 of topology A, both ports cabled at 4X QDR.
fn ca() -> Sma {
    let t = Topology::parse(TOPO_A).unwrap();
    let mut sma = Sma::from_node(t.node_by_id("test213").unwrap());
    sma.link_up(1, LinkRate::QDR_4X);
    sma.link_up(2, LinkRate::QDR_4X);
    sma
}

/// sw1 of topology B, ports 1, 2, 35, 36 cabled.
fn switch() -> Sma {
    let t = Topology::parse(TOPO_B).unwrap();
    let mut sma = Sma::from_node(t.node_by_id("sw1").unwrap());
    for p in [1, 2, 35, 36] {
        sma.link_up(p, LinkRate::QDR_4X);
    }
    sma
}

fn get(attr: AttrId, attr_mod: u32) -> smp::Repr {
    smp::Repr::lid_get(0x42, attr, attr_mod, 0)
}

fn set<A: SmpAttribute>(attr: &A, attr_mod: u32) -> smp::Repr {
    smp::Repr::lid_set(0x43, A::ATTR_ID, attr_mod, 0, attr.to_data())
}

fn with_key(mut smp: smp::Repr, m_key: u64) -> smp::Repr {
    smp.m_key = m_key;
    smp
}

/// Answers `req` on `port` and returns (status, data), insisting on a response.
fn ask(sma: &mut Sma, port: u8, req: &smp::Repr) -> (u16, [u8; DATA_LEN]) {
    let r = sma.handle_smp(port, req).expect("a response");
    assert_eq!(Some(r.header.method), req.header.method.response());
    assert_eq!(r.header.tid, req.header.tid);
    assert_eq!(r.header.attr_id, req.header.attr_id);
    (r.header.status, r.data)
}

fn port_info(sma: &mut Sma, in_port: u8, port: u32) -> PortInfo {
    let (st, data) = ask(sma, in_port, &get(AttrId::PORT_INFO, port));
    assert_eq!(st, status::SUCCESS);
    PortInfo::parse(&data).unwrap()
}

// ---- NodeInfo, NodeDescription ----------------------------------------------------------

#[test]
fn node_info_of_a_ca_names_the_arrival_port() {
    let mut sma = ca();
    let (st, data) = ask(&mut sma, 2, &get(AttrId::NODE_INFO, 0));
    assert_eq!(st, status::SUCCESS);
    let ni = NodeInfo::parse(&data).unwrap();
    assert_eq!(ni.node_type, NodeType::Ca);
    assert_eq!(ni.num_ports, 2);
    assert_eq!(ni.node_guid, Guid(0xe41d2d0300b47d00));
    assert_eq!(ni.port_guid, Guid(0xe41d2d0300b47d02));
    assert_eq!(ni.system_image_guid, Guid(0xe41d2d0300b47d03));
    assert_eq!(ni.local_port_num, 2);
    assert_eq!((ni.vendor_id, ni.device_id), (0x02c9, 0x1003));
    assert_eq!(ni.partition_cap, 64);
    assert_eq!((ni.base_version, ni.class_version), (1, 1));
}

#[test]
fn node_info_of_a_switch_has_the_port0_guid() {
    let mut sma = switch();
    let (_, data) = ask(&mut sma, 35, &get(AttrId::NODE_INFO, 0));
    let ni = NodeInfo::parse(&data).unwrap();
    assert_eq!(ni.node_type, NodeType::Switch);
    assert_eq!(ni.num_ports, 36);
    assert_eq!(ni.port_guid, Guid(0x7cfe900300a0b0c0));
    assert_eq!(ni.local_port_num, 35);
    assert_eq!(ni.device_id, 0xc738);
}

#[test]
fn node_description_get_and_read_only() {
    let mut sma = switch();
    let (st, data) = ask(&mut sma, 1, &get(AttrId::NODE_DESCRIPTION, 0));
    assert_eq!(st, status::SUCCESS);
    assert_eq!(
        NodeDescription::parse(&data).unwrap().text(),
        "MF0;sw1:SX6036/U1"
    );
    let (st, _) = ask(&mut sma, 1, &set(&NodeDescription::new("x"), 0));
    assert_eq!(st, status::UNSUPPORTED_METHOD_ATTR);
    sma.set_description("renamed");
    assert_eq!(sma.description().text(), "renamed");
}

// ---- Status codes ---------------------------------------------------------------------------

#[test]
fn status_codes_for_what_is_not_supported() {
    let mut sma = ca();
    // An attribute the SMA does not have, and switch-only attributes on a CA.
    for attr in [
        AttrId::LED_INFO,
        AttrId::SWITCH_INFO,
        AttrId::LINEAR_FORWARDING_TABLE,
        AttrId::SM_INFO,
        AttrId(0x7777),
    ] {
        assert_eq!(
            ask(&mut sma, 1, &get(attr, 0)).0,
            status::UNSUPPORTED_METHOD_ATTR
        );
    }
    // NodeInfo is read-only.
    let ni = sma.node_info(1);
    let (st, _) = ask(&mut sma, 1, &set(&ni, 0));
    assert_eq!(st, status::UNSUPPORTED_METHOD_ATTR);
    // A request method SMAs do not implement.
    let mut m = get(AttrId::NODE_INFO, 0);
    m.header.method = Method::GetTable;
    assert_eq!(ask(&mut sma, 1, &m).0, status::UNSUPPORTED_METHOD);
    // Versions.
    let mut v = get(AttrId::NODE_INFO, 0);
    v.header.base_version = 2;
    assert_eq!(ask(&mut sma, 1, &v).0, status::BAD_VERSION);
    let mut v = get(AttrId::NODE_INFO, 0);
    v.header.class_version = 2;
    assert_eq!(ask(&mut sma, 1, &v).0, status::BAD_VERSION);
    let c = *sma.counters();
    assert_eq!((c.unsupported, c.bad_version), (7, 2));
    // Error responses echo the request's data.
    let mut bad = get(AttrId(0x7777), 0);
    bad.data[0] = 0xAB;
    assert_eq!(ask(&mut sma, 1, &bad).1[0], 0xAB);
}

#[test]
fn no_response_to_responses_traps_and_foreign_ports() {
    let mut sma = ca();
    let req = get(AttrId::NODE_INFO, 0);
    let resp = req.response(0, req.data);
    assert_eq!(sma.handle_smp(1, &resp), None);
    for m in [Method::Trap, Method::TrapRepress, Method::Send] {
        let mut t = req;
        t.header.method = m;
        assert_eq!(sma.handle_smp(1, &t), None);
    }
    // A CA has no port 0 or 3.
    assert_eq!(sma.handle_smp(0, &req), None);
    assert_eq!(sma.handle_smp(3, &req), None);
    let mut other = req;
    other.header.mgmt_class = MgmtClass::SubnAdm;
    assert_eq!(sma.handle_smp(1, &other), None);
    assert_eq!(sma.counters().ignored, 7);
    assert_eq!(sma.counters().requests, 0);
}

// ---- PortInfo ------------------------------------------------------------------------------

#[test]
fn power_on_port_info_before_any_sm() {
    let mut sma = ca();
    let pi = port_info(&mut sma, 1, 0);
    assert_eq!(pi.local_port_num, 1);
    assert_eq!(pi.lid, Lid(0));
    assert_eq!(pi.master_sm_lid, Lid(0));
    assert_eq!(pi.gid_prefix, 0);
    assert_eq!(pi.capability_mask, 0x0050_c048);
    assert_eq!(pi.port_state, PortState::Init);
    assert_eq!(pi.port_physical_state, PortPhysicalState::LinkUp);
    assert_eq!(pi.link_width_active, link_width::W4X);
    assert_eq!(pi.link_width_enabled, link_width::W1X | link_width::W4X);
    assert_eq!(pi.link_speed_active, link_speed::QDR);
    assert_eq!(pi.link_speed_enabled, 0x7);
    assert_eq!(pi.mtu_cap, Mtu::Mtu2048);
    assert_eq!(pi.guid_cap, 32);
    // attr_mod 2 from port 1 reads port 2, with LocalPortNum still the arrival port.
    let p2 = port_info(&mut sma, 1, 2);
    assert_eq!((p2.local_port_num, p2.port_state), (1, PortState::Init));
    assert_eq!(
        ask(&mut sma, 1, &get(AttrId::PORT_INFO, 3)).0,
        status::INVALID_ATTR_VALUE
    );
    assert_eq!(
        ask(&mut sma, 1, &get(AttrId::PORT_INFO, 0x100)).0,
        status::INVALID_ATTR_VALUE
    );
    // Bit 31, SMSupportsExtendedSpeeds (opensm sets it), leaves the port number as it is.
    let (code, data) = ask(&mut sma, 1, &get(AttrId::PORT_INFO, 0x8000_0002));
    assert_eq!(code, status::SUCCESS);
    assert_eq!(PortInfo::parse(&data).unwrap().port_state, PortState::Init);
}

#[test]
fn switch_port_info_port0_and_external_ports() {
    let mut sma = switch();
    let p0 = port_info(&mut sma, 1, 0);
    assert_eq!(p0.port_state, PortState::Active);
    assert_eq!(p0.port_physical_state, PortPhysicalState::LinkUp);
    assert_eq!(p0.capability_mask, 0x0000_c048);
    assert_eq!(p0.local_port_num, 1);
    let p35 = port_info(&mut sma, 1, 35);
    assert_eq!(p35.port_state, PortState::Init);
    assert_eq!(p35.capability_mask, 0);
    let p3 = port_info(&mut sma, 1, 3);
    assert_eq!(
        (p3.port_state, p3.port_physical_state),
        (PortState::Down, PortPhysicalState::Polling)
    );
    assert_eq!(
        ask(&mut sma, 1, &get(AttrId::PORT_INFO, 37)).0,
        status::INVALID_ATTR_VALUE
    );
}

/// The PortInfo an SM would Set: the current one with `f` applied.
fn modified(sma: &mut Sma, port: u32, f: impl FnOnce(&mut PortInfo)) -> PortInfo {
    let mut pi = port_info(sma, 1, port);
    pi.port_state = PortState::NoChange;
    pi.port_physical_state = PortPhysicalState::NoChange;
    f(&mut pi);
    pi
}

#[test]
fn port_info_set_assigns_lid_and_walks_the_states() {
    let mut sma = ca();
    let pi = modified(&mut sma, 1, |p| {
        p.lid = Lid(2);
        p.master_sm_lid = Lid(1);
        p.gid_prefix = 0xfe80_0000_0000_0000;
        p.subnet_timeout = 18;
    });
    let (st, data) = ask(&mut sma, 1, &set(&pi, 1));
    assert_eq!(st, status::SUCCESS);
    let got = PortInfo::parse(&data).unwrap();
    assert_eq!((got.lid, got.master_sm_lid), (Lid(2), Lid(1)));
    assert_eq!(got.gid_prefix, 0xfe80_0000_0000_0000);
    assert_eq!(got.port_state, PortState::Init, "NoChange keeps Init");
    assert_eq!(sma.lid(1), Some((Lid(2), 0)));
    assert!(sma.accepts_dlid(1, Lid(2)) && !sma.accepts_dlid(1, Lid(3)));
    assert!(sma.accepts_dlid(1, Lid::PERMISSIVE));
    assert!(!sma.accepts_dlid(2, Lid(2)), "port 2 has its own LID");

    // Init -> Active directly is invalid, and nothing of that Set is applied.
    let bad = modified(&mut sma, 1, |p| {
        p.port_state = PortState::Active;
        p.lid = Lid(9);
    });
    assert_eq!(
        ask(&mut sma, 1, &set(&bad, 1)).0,
        status::INVALID_ATTR_VALUE
    );
    assert_eq!(sma.lid(1), Some((Lid(2), 0)));
    assert_eq!(sma.port_state(1), Some(PortState::Init));

    for (want, got) in [
        (PortState::Armed, PortState::Armed),
        (PortState::Active, PortState::Active),
    ] {
        let pi = modified(&mut sma, 1, |p| p.port_state = want);
        let (st, data) = ask(&mut sma, 1, &set(&pi, 1));
        assert_eq!(st, status::SUCCESS);
        assert_eq!(PortInfo::parse(&data).unwrap().port_state, got);
    }
    // Setting Init is never valid.
    let pi = modified(&mut sma, 1, |p| p.port_state = PortState::Init);
    assert_eq!(ask(&mut sma, 1, &set(&pi, 1)).0, status::INVALID_ATTR_VALUE);
    // Down from Active: the link layer is asked to take the link down.
    let pi = modified(&mut sma, 1, |p| p.port_state = PortState::Down);
    assert_eq!(ask(&mut sma, 1, &set(&pi, 1)).0, status::SUCCESS);
    assert_eq!(sma.port_state(1), Some(PortState::Down));
    assert_eq!(
        sma.poll_event(),
        Some(SmaEvent::LinkDown {
            port: 1,
            retrain: true
        })
    );
    assert_eq!(sma.poll_event(), None);
    // Armed is invalid while the link has not trained again.
    let pi = modified(&mut sma, 1, |p| p.port_state = PortState::Armed);
    assert_eq!(ask(&mut sma, 1, &set(&pi, 1)).0, status::INVALID_ATTR_VALUE);
    sma.link_up(1, LinkRate::QDR_4X);
    assert_eq!(sma.port_state(1), Some(PortState::Init));
}

#[test]
fn port_state_transition_table() {
    use PortState::*;
    let states = [Down, Init, Armed, Active];
    for cur in states {
        for phys_up in [false, true] {
            assert_eq!(port_state_transition(cur, NoChange, phys_up), Some(cur));
            assert_eq!(port_state_transition(cur, Down, phys_up), Some(Down));
            assert_eq!(port_state_transition(cur, Init, phys_up), None);
            assert_eq!(
                port_state_transition(cur, PortState::Unknown(5), phys_up),
                None
            );
            let armed = phys_up && matches!(cur, Init | Armed);
            assert_eq!(
                port_state_transition(cur, Armed, phys_up),
                armed.then_some(Armed)
            );
            let active = phys_up && matches!(cur, Armed | Active);
            assert_eq!(
                port_state_transition(cur, Active, phys_up),
                active.then_some(Active)
            );
        }
    }
}

#[test]
fn port_info_set_rejects_invalid_values() {
    let mut sma = ca();
    type Case = fn(&mut PortInfo);
    let cases: [Case; 9] = [
        |p| p.lid = Lid(0xC000),
        |p| p.lid = Lid::PERMISSIVE,
        |p| p.master_sm_lid = Lid(0xFFFF),
        |p| p.link_width_enabled = link_width::W8X,
        |p| p.link_speed_enabled = 0x8,
        |p| p.neighbor_mtu = Mtu::Mtu4096,
        |p| p.operational_vls = 5,
        |p| p.link_down_default_state = 3,
        |p| p.port_physical_state = PortPhysicalState::LinkUp,
    ];
    let before = port_info(&mut sma, 1, 1);
    for f in cases {
        let pi = modified(&mut sma, 1, f);
        assert_eq!(ask(&mut sma, 1, &set(&pi, 1)).0, status::INVALID_ATTR_VALUE);
        assert_eq!(port_info(&mut sma, 1, 1), before);
    }
    assert_eq!(sma.counters().invalid_value, 9);
    // 0xFF / 0xF mean "set to supported".
    let pi = modified(&mut sma, 1, |p| {
        p.link_width_enabled = 0xFF;
        p.link_speed_enabled = 0xF;
    });
    let (st, data) = ask(&mut sma, 1, &set(&pi, 1));
    assert_eq!(st, status::SUCCESS);
    let got = PortInfo::parse(&data).unwrap();
    assert_eq!(
        (got.link_width_enabled, got.link_speed_enabled),
        (0x03, 0x07)
    );
}

#[test]
fn disabled_port_stays_down_until_polling() {
    let mut sma = ca();
    let pi = modified(&mut sma, 2, |p| {
        p.port_physical_state = PortPhysicalState::Disabled;
    });
    assert_eq!(ask(&mut sma, 2, &set(&pi, 2)).0, status::SUCCESS);
    let now = sma.port_info(2).copied().unwrap();
    assert_eq!(
        (now.port_state, now.port_physical_state),
        (PortState::Down, PortPhysicalState::Disabled)
    );
    assert_eq!(
        sma.poll_event(),
        Some(SmaEvent::LinkDown {
            port: 2,
            retrain: false
        })
    );
    sma.link_up(2, LinkRate::QDR_4X);
    assert_eq!(
        sma.port_state(2),
        Some(PortState::Down),
        "Disabled ignores training"
    );
    let pi = modified(&mut sma, 2, |p| {
        p.port_physical_state = PortPhysicalState::Polling;
    });
    // Port 2 is Disabled, so ask through port 1.
    assert_eq!(ask(&mut sma, 1, &set(&pi, 2)).0, status::SUCCESS);
    assert_eq!(sma.poll_event(), Some(SmaEvent::LinkEnabled { port: 2 }));
    sma.link_up(2, LinkRate::QDR_4X);
    assert_eq!(sma.port_state(2), Some(PortState::Init));
}

#[test]
fn client_reregister_is_an_event_not_state() {
    let mut sma = ca();
    let pi = modified(&mut sma, 1, |p| p.client_reregister = true);
    let (_, data) = ask(&mut sma, 1, &set(&pi, 1));
    assert!(!PortInfo::parse(&data).unwrap().client_reregister);
    assert_eq!(
        sma.poll_event(),
        Some(SmaEvent::ClientReregister { port: 1 })
    );
}

#[test]
fn switch_external_port_set_ignores_port0_fields() {
    let mut sma = switch();
    let pi = modified(&mut sma, 35, |p| {
        p.lid = Lid(0xFFFF); // reserved on external ports: ignored, not invalid
        p.m_key = 7;
        p.port_state = PortState::Armed;
    });
    assert_eq!(ask(&mut sma, 1, &set(&pi, 35)).0, status::SUCCESS);
    let got = sma.port_info(35).copied().unwrap();
    assert_eq!(
        (got.lid, got.m_key, got.port_state),
        (Lid(0), 0, PortState::Armed)
    );
    // Port 0 keeps Active whatever state is asked for.
    let p0 = modified(&mut sma, 0, |p| {
        p.lid = Lid(5);
        p.port_state = PortState::Armed;
    });
    assert_eq!(ask(&mut sma, 1, &set(&p0, 0)).0, status::SUCCESS);
    assert_eq!(sma.port_state(0), Some(PortState::Active));
    assert_eq!(
        sma.lid(17),
        Some((Lid(5), 0)),
        "a switch is addressed by port 0's LID"
    );
    assert!(sma.accepts_dlid(2, Lid(5)));
}

// ---- M_Key ----------------------------------------------------------------------------------

fn set_m_key(sma: &mut Sma, in_port: u8, port: u32, key: u64, protect: u8, old_key: u64) {
    let pi = modified(sma, port, |p| {
        p.m_key = key;
        p.m_key_protect_bits = protect;
    });
    let (st, _) = ask(sma, in_port, &with_key(set(&pi, port), old_key));
    assert_eq!(st, status::SUCCESS);
}

#[test]
fn m_key_protect_level_0() {
    let mut sma = ca();
    set_m_key(&mut sma, 1, 1, 0x1234, 0, 0);
    // Get with a wrong key succeeds and shows the key.
    let pi = PortInfo::parse(&ask(&mut sma, 1, &with_key(get(AttrId::PORT_INFO, 1), 9)).1).unwrap();
    assert_eq!(pi.m_key, 0x1234);
    // Set with a wrong key is discarded and counted.
    let req = with_key(set(&modified(&mut sma, 1, |p| p.lid = Lid(7)), 1), 9);
    assert_eq!(sma.handle_smp(1, &req), None);
    assert_eq!(sma.lid(1), Some((Lid(0), 0)));
    assert_eq!(sma.counters().m_key_violations, 1);
    assert_eq!(sma.port_info(1).unwrap().m_key_violations, 1);
    // With the key it is applied.
    let req = with_key(set(&modified(&mut sma, 1, |p| p.lid = Lid(7)), 1), 0x1234);
    assert_eq!(ask(&mut sma, 1, &req).0, status::SUCCESS);
    assert_eq!(sma.lid(1), Some((Lid(7), 0)));
    // Port 2 has its own key (0): anything goes there.
    let p2 = modified(&mut sma, 2, |_| {});
    assert!(sma.handle_smp(2, &with_key(set(&p2, 2), 5)).is_some());
}

#[test]
fn m_key_protect_level_1_hides_the_key() {
    let mut sma = ca();
    set_m_key(&mut sma, 1, 1, 0x1234, 1, 0);
    let pi = PortInfo::parse(&ask(&mut sma, 1, &with_key(get(AttrId::PORT_INFO, 1), 9)).1).unwrap();
    assert_eq!((pi.m_key, pi.m_key_protect_bits), (0, 1));
    let pi =
        PortInfo::parse(&ask(&mut sma, 1, &with_key(get(AttrId::PORT_INFO, 1), 0x1234)).1).unwrap();
    assert_eq!(pi.m_key, 0x1234);
    assert_eq!(sma.handle_smp(1, &with_key(set(&pi, 1), 9)), None);
    assert_eq!(sma.counters().m_key_violations, 1);
}

#[test]
fn an_m_key_lease_started_by_a_refusal_clears_the_protection_when_it_runs_out() {
    let mut sma = ca();
    let pi = modified(&mut sma, 1, |p| {
        p.m_key = 0xBEEF;
        p.m_key_protect_bits = 2;
        p.m_key_lease_period = 2;
    });
    assert_eq!(
        ask(&mut sma, 1, &with_key(set(&pi, 1), 0)).0,
        status::SUCCESS
    );
    let wrong = with_key(get(AttrId::PORT_INFO, 1), 7);
    assert_eq!(sma.poll_timeout(), None, "no lease before a refusal");
    // Refused at t = 0 s: the lease runs 2 s; a second refusal does not extend it.
    sma.handle_timeout(0);
    assert_eq!(sma.handle_smp(1, &wrong), None);
    assert_eq!(sma.poll_timeout(), Some(2_000_000));
    sma.handle_timeout(1_000_000);
    assert_eq!(sma.handle_smp(1, &wrong), None);
    assert_eq!(sma.poll_timeout(), Some(2_000_000));
    // The key holder speaks within the lease: it stops, the protection stays.
    let right = with_key(get(AttrId::PORT_INFO, 1), 0xBEEF);
    assert_eq!(ask(&mut sma, 1, &right).0, status::SUCCESS);
    assert_eq!(sma.poll_timeout(), None);
    sma.handle_timeout(5_000_000);
    assert_eq!(sma.port_info(1).unwrap().m_key_protect_bits, 2);
    assert_eq!(sma.handle_smp(1, &wrong), None);
    // Nobody with the key answers this time: at its end the protect bits go to 0, and a
    // Get without the key is answered (a Set still needs it).
    assert_eq!(sma.poll_timeout(), Some(7_000_000));
    sma.handle_timeout(6_999_999);
    assert_eq!(sma.port_info(1).unwrap().m_key_protect_bits, 2);
    sma.handle_timeout(7_000_000);
    assert_eq!(sma.port_info(1).unwrap().m_key_protect_bits, 0);
    assert_eq!(sma.poll_timeout(), None);
    assert_eq!(ask(&mut sma, 1, &wrong).0, status::SUCCESS);
    let req = with_key(set(&modified(&mut sma, 1, |p| p.lid = Lid(9)), 1), 7);
    assert_eq!(sma.handle_smp(1, &req), None);
    // A lease period of 0 never runs out.
    let pi = modified(&mut sma, 1, |p| {
        p.m_key_protect_bits = 2;
        p.m_key_lease_period = 0;
    });
    assert_eq!(
        ask(&mut sma, 1, &with_key(set(&pi, 1), 0xBEEF)).0,
        status::SUCCESS
    );
    assert_eq!(sma.handle_smp(1, &wrong), None);
    assert_eq!(sma.poll_timeout(), None);
}

#[test]
fn m_key_protect_levels_2_and_3_refuse_gets() {
    for protect in [2, 3] {
        let mut sma = switch();
        // A switch's key lives in port 0 and guards every port.
        set_m_key(&mut sma, 1, 0, 0xAAAA, protect, 0);
        for attr in [AttrId::NODE_INFO, AttrId::PORT_INFO, AttrId(0x7777)] {
            assert_eq!(sma.handle_smp(35, &with_key(get(attr, 35), 1)), None);
        }
        assert_eq!(sma.counters().m_key_violations, 3);
        assert_eq!(sma.port_info(0).unwrap().m_key_violations, 3);
        let (st, _) = ask(&mut sma, 35, &with_key(get(AttrId::NODE_INFO, 0), 0xAAAA));
        assert_eq!(st, status::SUCCESS);
        // The violation counter is reset by an authenticated Set.
        let pi = PortInfo {
            m_key_violations: 0,
            port_state: PortState::NoChange,
            port_physical_state: PortPhysicalState::NoChange,
            ..*sma.port_info(0).unwrap()
        };
        ask(&mut sma, 1, &with_key(set(&pi, 0), 0xAAAA));
        assert_eq!(sma.port_info(0).unwrap().m_key_violations, 0);
    }
}

// ---- SwitchInfo, LFT ------------------------------------------------------------------------

#[test]
fn switch_info_get_set() {
    let mut sma = switch();
    let (st, data) = ask(&mut sma, 1, &get(AttrId::SWITCH_INFO, 0));
    assert_eq!(st, status::SUCCESS);
    let si = SwitchInfo::parse(&data).unwrap();
    assert_eq!(si.linear_fdb_cap, 0xC000);
    assert_eq!(si.linear_fdb_top, 0);
    assert!(si.enhanced_port0 && si.port_state_change);
    let mut new = si;
    new.linear_fdb_top = 6;
    new.life_time_value = 18;
    new.port_state_change = true; // write 1 to clear
    let (st, data) = ask(&mut sma, 1, &set(&new, 0));
    assert_eq!(st, status::SUCCESS);
    let got = SwitchInfo::parse(&data).unwrap();
    assert_eq!((got.linear_fdb_top, got.life_time_value), (6, 18));
    assert!(!got.port_state_change);
    // LinearFDBCap is read-only; a top beyond it is invalid.
    new.linear_fdb_cap = 1;
    new.linear_fdb_top = 0xC000;
    assert_eq!(
        ask(&mut sma, 1, &set(&new, 0)).0,
        status::INVALID_ATTR_VALUE
    );
    assert_eq!(sma.switch_info().unwrap().linear_fdb_cap, 0xC000);
    // A link change sets PortStateChange again.
    sma.link_down(36);
    assert!(sma.switch_info().unwrap().port_state_change);
}

fn lft_block(entries: &[(usize, u8)]) -> LinearForwardingTable {
    let mut lft = LinearForwardingTable::default();
    for &(i, p) in entries {
        lft.ports[i] = p;
    }
    lft
}

#[test]
fn lft_blocks_and_lookup() {
    let mut sma = switch();
    let block0 = lft_block(&[(1, 1), (2, 2), (3, 35), (4, 36), (5, 0), (6, 35)]);
    assert_eq!(ask(&mut sma, 1, &set(&block0, 0)).0, status::SUCCESS);
    // Until LinearFDBTop covers them, the entries do not route.
    assert_eq!(sma.lft_port(Lid(3)), None);
    let mut si = *sma.switch_info().unwrap();
    si.linear_fdb_top = 6;
    ask(&mut sma, 1, &set(&si, 0));
    assert_eq!(sma.lft_port(Lid(3)), Some(35));
    assert_eq!(sma.lft_port(Lid(5)), Some(0));
    assert_eq!(sma.lft_port(Lid(0)), None);
    assert_eq!(sma.lft_port(Lid(7)), None);
    let (st, data) = ask(&mut sma, 1, &get(AttrId::LINEAR_FORWARDING_TABLE, 0));
    assert_eq!(st, status::SUCCESS);
    assert_eq!(LinearForwardingTable::parse(&data).unwrap(), block0);
    // An unwritten block reads as "no route".
    let (_, data) = ask(&mut sma, 1, &get(AttrId::LINEAR_FORWARDING_TABLE, 100));
    assert_eq!(
        LinearForwardingTable::parse(&data).unwrap(),
        LinearForwardingTable::default()
    );
    // The last block is 0xC000 / 64 - 1 = 767.
    assert_eq!(
        ask(&mut sma, 1, &get(AttrId::LINEAR_FORWARDING_TABLE, 767)).0,
        status::SUCCESS
    );
    assert_eq!(
        ask(&mut sma, 1, &get(AttrId::LINEAR_FORWARDING_TABLE, 768)).0,
        status::INVALID_ATTR_VALUE
    );
    // A port the switch does not have.
    let bad = lft_block(&[(9, 37)]);
    assert_eq!(
        ask(&mut sma, 1, &set(&bad, 0)).0,
        status::INVALID_ATTR_VALUE
    );
    assert_eq!(sma.lft_port(Lid(6)), Some(35));
}

#[test]
fn mft_blocks_positions_and_lookup() {
    let mut sma = switch();
    assert_eq!(sma.switch_info().unwrap().multicast_fdb_cap, 1024);
    // Block 0, position 0 (ports 0..=15): MLID 0xC000 to ports 1 and 2, 0xC001 to port 1.
    let mut p0 = MulticastForwardingTable::default();
    p0.port_masks[0] = 0b110; // ports 1, 2
    p0.port_masks[1] = 0b010; // port 1
    assert_eq!(
        ask(
            &mut sma,
            1,
            &set(&p0, MulticastForwardingTable::attr_mod(0, 0))
        )
        .0,
        status::SUCCESS
    );
    // Position 2 holds ports 32..=47.
    let mut p2 = MulticastForwardingTable::default();
    p2.port_masks[0] = 1 << 3; // port 35
    assert_eq!(
        ask(
            &mut sma,
            1,
            &set(&p2, MulticastForwardingTable::attr_mod(0, 2))
        )
        .0,
        status::SUCCESS
    );
    assert_eq!(sma.mft_ports(Lid(0xC000)), PortMask::from_ports([1, 2, 35]));
    assert_eq!(sma.mft_ports(Lid(0xC001)), PortMask::from_ports([1]));
    assert!(sma.mft_ports(Lid(0xC002)).is_empty());
    assert!(sma.mft_ports(Lid(5)).is_empty());
    assert!(sma.mft_ports(Lid(0xFFFF)).is_empty());
    // Get reads back one position at a time.
    let (st, data) = ask(
        &mut sma,
        1,
        &get(AttrId::MULTICAST_FORWARDING_TABLE, 0x2000_0000),
    );
    assert_eq!(st, status::SUCCESS);
    assert_eq!(MulticastForwardingTable::parse(&data).unwrap(), p2);
    let (_, data) = ask(&mut sma, 1, &get(AttrId::MULTICAST_FORWARDING_TABLE, 0));
    assert_eq!(MulticastForwardingTable::parse(&data).unwrap(), p0);
    // Rewriting position 0 leaves position 2 alone.
    p0.port_masks[0] = 0;
    ask(&mut sma, 1, &set(&p0, 0));
    assert_eq!(sma.mft_ports(Lid(0xC000)), PortMask::from_ports([35]));
    // The last block is 1024 / 32 - 1 = 31; positions go to 36 / 16 = 2.
    assert_eq!(
        ask(&mut sma, 1, &get(AttrId::MULTICAST_FORWARDING_TABLE, 31)).0,
        status::SUCCESS
    );
    for bad in [32, 0x3000_0000, 0x1FF] {
        assert_eq!(
            ask(&mut sma, 1, &get(AttrId::MULTICAST_FORWARDING_TABLE, bad)).0,
            status::INVALID_ATTR_VALUE,
            "{bad:#x}"
        );
    }
    // Port 37 (bit 5 of position 2) does not exist: nothing changes.
    let mut bad = MulticastForwardingTable::default();
    bad.port_masks[0] = 1 << 5;
    assert_eq!(
        ask(
            &mut sma,
            1,
            &set(&bad, MulticastForwardingTable::attr_mod(0, 2))
        )
        .0,
        status::INVALID_ATTR_VALUE
    );
    assert_eq!(sma.mft_ports(Lid(0xC000)), PortMask::from_ports([35]));
    // A CA has no MFT.
    let mut ca = ca();
    assert_eq!(
        ask(&mut ca, 1, &get(AttrId::MULTICAST_FORWARDING_TABLE, 0)).0,
        status::UNSUPPORTED_METHOD_ATTR
    );
}

#[test]
fn multicast_fdb_top_is_stored_and_checked() {
    let mut sma = switch();
    let mut si = *sma.switch_info().unwrap();
    si.multicast_fdb_top = 0xC01F;
    assert_eq!(ask(&mut sma, 1, &set(&si, 0)).0, status::SUCCESS);
    assert_eq!(sma.switch_info().unwrap().multicast_fdb_top, 0xC01F);
    // 0xBFFF ("no entries") is fine; beyond MulticastFDBCap is not.
    si.multicast_fdb_top = 0xBFFF;
    assert_eq!(ask(&mut sma, 1, &set(&si, 0)).0, status::SUCCESS);
    si.multicast_fdb_top = 0xC400;
    assert_eq!(ask(&mut sma, 1, &set(&si, 0)).0, status::INVALID_ATTR_VALUE);
    assert_eq!(sma.switch_info().unwrap().multicast_fdb_top, 0xBFFF);
    // Without IsMulticastFDBTopSupported the top is not enforced.
    let mut mft = MulticastForwardingTable::default();
    mft.port_masks[0] = 0b10;
    ask(&mut sma, 1, &set(&mft, 0));
    assert_eq!(sma.mft_ports(Lid(0xC000)), PortMask::from_ports([1]));
    let cap = sma.port_info(0).unwrap().capability_mask;
    sma.set_capability_mask(0, cap | capability_mask::IS_MULTICAST_FDB_TOP_SUPPORTED);
    assert!(sma.mft_ports(Lid(0xC000)).is_empty());
    si.multicast_fdb_top = 0xC000;
    ask(&mut sma, 1, &set(&si, 0));
    assert_eq!(sma.mft_ports(Lid(0xC000)), PortMask::from_ports([1]));
}

// ---- GUIDInfo, P_KeyTable, SMInfo -----------------------------------------------------------

#[test]
fn guid_info_blocks() {
    let mut sma = ca();
    let (st, data) = ask(&mut sma, 2, &get(AttrId::GUID_INFO, 0));
    assert_eq!(st, status::SUCCESS);
    let g = GuidInfo::parse(&data).unwrap();
    assert_eq!(g.guids[0], Guid(0xe41d2d0300b47d02));
    assert_eq!(g.guids[1], Guid(0));
    let mut new = g;
    new.guids[0] = Guid(1); // read-only
    new.guids[1] = Guid(0xA11A5);
    let (_, data) = ask(&mut sma, 2, &set(&new, 0));
    let got = GuidInfo::parse(&data).unwrap();
    assert_eq!(
        (got.guids[0], got.guids[1]),
        (Guid(0xe41d2d0300b47d02), Guid(0xA11A5))
    );
    assert_eq!(sma.guids(2).unwrap().len(), 32);
    assert_eq!(
        sma.guids(1).unwrap()[1],
        Guid(0),
        "port 1 has its own table"
    );
    assert_eq!(
        ask(&mut sma, 2, &get(AttrId::GUID_INFO, 3)).0,
        status::SUCCESS
    );
    assert_eq!(
        ask(&mut sma, 2, &get(AttrId::GUID_INFO, 4)).0,
        status::INVALID_ATTR_VALUE
    );
    // A switch has one GUID, on port 0.
    let mut sw = switch();
    let (_, data) = ask(&mut sw, 5, &get(AttrId::GUID_INFO, 0));
    assert_eq!(
        GuidInfo::parse(&data).unwrap().guids[0],
        Guid(0x7cfe900300a0b0c0)
    );
    assert_eq!(
        ask(&mut sw, 5, &get(AttrId::GUID_INFO, 1)).0,
        status::INVALID_ATTR_VALUE
    );
}

#[test]
fn p_key_table_blocks() {
    let mut sma = ca();
    let (st, data) = ask(&mut sma, 1, &get(AttrId::P_KEY_TABLE, 0));
    assert_eq!(st, status::SUCCESS);
    let t = PKeyTable::parse(&data).unwrap();
    assert_eq!(t.pkeys[0], PKey::DEFAULT);
    assert!(t.pkeys[1..].iter().all(|k| k.0 == 0));
    let mut new = PKeyTable::default();
    new.pkeys[0] = PKey(0x8001);
    assert_eq!(ask(&mut sma, 1, &set(&new, 1)).0, status::SUCCESS);
    assert_eq!(sma.pkeys(1).unwrap()[32], PKey(0x8001));
    assert_eq!(sma.pkeys(2).unwrap()[32], PKey(0));
    // 64 entries: blocks 0 and 1 only. A CA ignores the port bits? No: they must be zero.
    assert_eq!(
        ask(&mut sma, 1, &get(AttrId::P_KEY_TABLE, 2)).0,
        status::INVALID_ATTR_VALUE
    );

    let mut sw = switch();
    let (st, _) = ask(
        &mut sw,
        1,
        &get(AttrId::P_KEY_TABLE, PKeyTable::attr_mod(1, 35)),
    );
    assert_eq!(
        st,
        status::SUCCESS,
        "external ports have PartitionEnforcementCap entries"
    );
    assert_eq!(
        ask(
            &mut sw,
            1,
            &get(AttrId::P_KEY_TABLE, PKeyTable::attr_mod(1, 0))
        )
        .0,
        status::INVALID_ATTR_VALUE,
        "port 0 has PartitionCap = 8 entries"
    );
    assert_eq!(
        ask(
            &mut sw,
            1,
            &get(AttrId::P_KEY_TABLE, PKeyTable::attr_mod(0, 37))
        )
        .0,
        status::INVALID_ATTR_VALUE
    );
    assert_eq!(
        ask(&mut sw, 1, &get(AttrId::P_KEY_TABLE, 0x0100_0000)).0,
        status::INVALID_ATTR_VALUE
    );
}

#[test]
fn sm_info_only_with_an_sm() {
    let mut sma = ca();
    assert_eq!(
        ask(&mut sma, 1, &get(AttrId::SM_INFO, 0)).0,
        status::UNSUPPORTED_METHOD_ATTR
    );
    let info = SmInfo {
        guid: Guid(0xe41d2d0300b47d01),
        sm_key: 0x5EC7E7,
        act_count: 3,
        priority: 5,
        sm_state: SmState::Master,
    };
    sma.set_sm_info(Some(info));
    let mask = sma.port_info(1).unwrap().capability_mask | capability_mask::IS_SM;
    sma.set_capability_mask(1, mask);
    assert_eq!(port_info(&mut sma, 1, 1).capability_mask, 0x0050_c04a);
    let (st, data) = ask(&mut sma, 1, &get(AttrId::SM_INFO, 0));
    assert_eq!(st, status::SUCCESS);
    let got = SmInfo::parse(&data).unwrap();
    assert_eq!(got, info, "an M_Key of 0 hides nothing");
    let from = SmInfo {
        guid: Guid(0x99),
        sm_key: 0,
        act_count: 0,
        priority: 1,
        sm_state: SmState::Discovering,
    };
    assert_eq!(ask(&mut sma, 1, &set(&from, 5)).0, status::SUCCESS);
    assert_eq!(
        sma.poll_event(),
        Some(SmaEvent::SmInfoSet {
            port: 1,
            control: SmControl::Discover,
            from
        })
    );
    assert_eq!(
        ask(&mut sma, 1, &set(&from, 9)).0,
        status::INVALID_ATTR_VALUE
    );
    assert_eq!(sma.poll_event(), None);
    // With an M_Key in force, the holder of the key sees SM_Key, no one else.
    set_m_key(&mut sma, 1, 1, 0x77, 0, 0);
    let got = SmInfo::parse(&ask(&mut sma, 1, &get(AttrId::SM_INFO, 0)).1).unwrap();
    assert_eq!(got, SmInfo { sm_key: 0, ..info });
    let got = SmInfo::parse(&ask(&mut sma, 1, &with_key(get(AttrId::SM_INFO, 0), 0x77)).1).unwrap();
    assert_eq!(got.sm_key, 0x5EC7E7);
}

/// An SM that holds the port's IsSM but gave the SMA no SMInfo (the real opensm through the
/// drop-in libibumad) answers SMInfo itself: requests for it go to it, directed-route (with
/// the hop pointer past the end, as its response needs) and LID-routed; the rest the SMA
/// still answers, and without IsSM SMInfo stays unsupported.
#[test]
fn sm_info_for_an_sm_that_answers_itself_goes_to_it() {
    let mut sma = ca();
    let mut dr_sm_info = smp::Repr::dr_get(9, AttrId::SM_INFO, 0, 0, &[1, 1]).unwrap();
    dr_sm_info.dr.as_mut().unwrap().hop_ptr = 2;
    let lid_sm_info = get(AttrId::SM_INFO, 0);
    assert!(!sma.is_for_local_sm(1, &lid_sm_info));
    assert!(matches!(
        sma.receive_smp(1, Lid(7), &lid_sm_info),
        SmiOutput::Send(out) if out.smp.header.status == status::UNSUPPORTED_METHOD_ATTR
    ));
    let mask = sma.port_info(1).unwrap().capability_mask | capability_mask::IS_SM;
    sma.set_capability_mask(1, mask);
    assert!(sma.is_for_local_sm(1, &lid_sm_info));
    assert!(!sma.is_for_local_sm(2, &lid_sm_info), "port 2 has no SM");
    assert_eq!(
        sma.receive_smp(1, Lid(7), &lid_sm_info),
        SmiOutput::ToSm(lid_sm_info)
    );
    match sma.receive_smp(1, Lid::PERMISSIVE, &dr_sm_info) {
        SmiOutput::ToSm(s) => {
            let d = s.dr.unwrap();
            assert_eq!((d.hop_ptr, d.return_path[2]), (3, 1));
        }
        other => panic!("{other:?}"),
    }
    // The SM's response leaves along the return path.
    let mut resp = dr_sm_info.response(0, [0; 64]);
    {
        let d = resp.dr.as_mut().unwrap();
        d.hop_ptr = 3;
        d.return_path[1..=2].copy_from_slice(&[4, 1]);
    }
    assert!(matches!(
        sma.send_dr(1, &resp),
        DrAction::Forward { out_port: 1, .. }
    ));
    let node_info = get(AttrId::NODE_INFO, 0);
    assert!(!sma.is_for_local_sm(1, &node_info));
    assert!(matches!(
        sma.receive_smp(1, Lid(7), &node_info),
        SmiOutput::Send(_)
    ));
    // softib's own SM gives the SMA its SMInfo: the SMA answers.
    sma.set_sm_info(Some(SmInfo {
        guid: Guid(0xe41d2d0300b47d01),
        sm_key: 0,
        act_count: 0,
        priority: 0,
        sm_state: SmState::Master,
    }));
    assert!(!sma.is_for_local_sm(1, &lid_sm_info));
}

#[test]
fn sl2vl_vl_arbitration_and_mellanox_extended_port_info() {
    let mut sw = switch();
    // SL2VL of output port 1 from input port 2: all VL0, a Set kept, a VL beyond VLCap
    // (VL0–7) refused, VL15 (drop) allowed.
    let m = (2 << 8) | 1;
    let (st, data) = ask(&mut sw, 1, &get(AttrId::SL_TO_VL_TABLE, m));
    assert_eq!((st, &data[..8]), (status::SUCCESS, &[0u8; 8][..]));
    let mut t = [0u8; DATA_LEN];
    t[0] = 0x1F;
    let set_t = |t| smp::Repr::lid_set(0x44, AttrId::SL_TO_VL_TABLE, m, 0, t);
    assert_eq!(ask(&mut sw, 1, &set_t(t)).1[0], 0x1F);
    assert_eq!(ask(&mut sw, 1, &get(AttrId::SL_TO_VL_TABLE, m)).1[0], 0x1F);
    assert_eq!(
        ask(&mut sw, 1, &get(AttrId::SL_TO_VL_TABLE, 1)).1[0],
        0,
        "input port 0"
    );
    t[0] = 0x08;
    assert_eq!(ask(&mut sw, 1, &set_t(t)).0, status::INVALID_ATTR_VALUE);
    // VLArbitrationTable blocks 1–4 only.
    let (st, _) = ask(
        &mut sw,
        1,
        &get(AttrId::VL_ARBITRATION_TABLE, (2 << 16) | 1),
    );
    assert_eq!(st, status::SUCCESS);
    let (st, _) = ask(
        &mut sw,
        1,
        &get(AttrId::VL_ARBITRATION_TABLE, (5 << 16) | 1),
    );
    assert_eq!(st, status::INVALID_ATTR_VALUE);
    // MLNXExtendedPortInfo: no FDR10 anywhere; a Mellanox device answers it, others not.
    let (st, data) = ask(&mut sw, 1, &get(AttrId::MLNX_EXTENDED_PORT_INFO, 35));
    assert_eq!((st, data), (status::SUCCESS, [0; DATA_LEN]));
    let mut other = Sma::new(SmaConfig::ca(1, Guid(0x10)));
    let (st, _) = ask(&mut other, 1, &get(AttrId::MLNX_EXTENDED_PORT_INFO, 0));
    assert_eq!(st, status::UNSUPPORTED_METHOD_ATTR);
}

// ---- Links ----------------------------------------------------------------------------------

#[test]
fn link_up_and_down() {
    let t = Topology::parse(TOPO_B).unwrap();
    let mut sma = Sma::from_node(t.node_by_id("node1").unwrap());
    assert_eq!(sma.port_state(1), Some(PortState::Down));
    assert!(!sma.link_is_up(1));
    sma.link_up(1, LinkRate::QDR_4X);
    assert_eq!(sma.port_state(1), Some(PortState::Init));
    assert!(sma.link_is_up(1));
    sma.link_down(1);
    let pi = sma.port_info(1).copied().unwrap();
    assert_eq!(
        (pi.port_state, pi.port_physical_state),
        (PortState::Down, PortPhysicalState::Polling)
    );
    // Nonexistent ports are ignored.
    sma.link_up(0, LinkRate::QDR_4X);
    sma.link_up(2, LinkRate::QDR_4X);
    assert_eq!(sma.port_info(2), None);
    assert_eq!(sma.port_info(0), None);
    // Armed -> Active when a data packet arrives.
    sma.link_up(1, LinkRate::QDR_4X);
    assert!(!sma.note_data_received(1));
    let pi = modified(&mut sma, 1, |p| p.port_state = PortState::Armed);
    ask(&mut sma, 1, &set(&pi, 1));
    assert!(sma.note_data_received(1));
    assert_eq!(sma.port_state(1), Some(PortState::Active));
}

// ---- Directed route -------------------------------------------------------------------------

/// A DR Get along `path` as it is at a hop: HopPointer `ptr`, D bit `inbound`, ReturnPath
/// entries `ret`.
fn dr_at(path: &[u8], ptr: u8, inbound: bool, ret: &[u8]) -> smp::Repr {
    let mut s = smp::Repr::dr_get(9, AttrId::NODE_INFO, 0, 0, path).unwrap();
    let d = s.dr.as_mut().unwrap();
    d.hop_ptr = ptr;
    d.direction_inbound = inbound;
    d.return_path[1..=ret.len()].copy_from_slice(ret);
    if inbound {
        s.header.method = Method::GetResp;
    }
    s
}

fn dr(action: &DrAction) -> (u8, [u8; 64]) {
    let s = match action {
        DrAction::Deliver(s) | DrAction::Forward { smp: s, .. } => s,
        DrAction::Drop(r) => panic!("dropped: {r:?}"),
    };
    let d = s.dr.unwrap();
    (d.hop_ptr, d.return_path)
}

#[test]
fn c14_9_2_switch_relays_outbound() {
    let mut sw = switch();
    let a = sw.process_dr(1, &dr_at(&[1, 35, 2], 1, false, &[]));
    let DrAction::Forward { out_port, .. } = a else {
        panic!("{a:?}")
    };
    assert_eq!(out_port, 35);
    let (ptr, ret) = dr(&a);
    assert_eq!((ptr, ret[1]), (2, 1));
    assert_eq!(sw.counters().dr_forwarded, 1);
    // Out of a port with no link, port 0, or a port the switch does not have.
    for (egress, why) in [
        (3, DrDrop::EgressPortDown),
        (0, DrDrop::BadEgressPort),
        (37, DrDrop::BadEgressPort),
    ] {
        assert_eq!(
            sw.process_dr(1, &dr_at(&[1, egress, 2], 1, false, &[])),
            DrAction::Drop(why)
        );
        assert!(sw.counters().dr_dropped(why) > 0);
    }
}

#[test]
fn c14_9_2_a_ca_does_not_relay() {
    let mut ca = ca();
    assert_eq!(
        ca.process_dr(1, &dr_at(&[1, 2, 1], 1, false, &[])),
        DrAction::Drop(DrDrop::NotASwitch)
    );
    assert_eq!(
        ca.process_dr(1, &dr_at(&[1, 2, 1], 2, true, &[1, 1])),
        DrAction::Drop(DrDrop::NotASwitch)
    );
}

#[test]
fn c14_9_3_destination_records_the_return_port() {
    let mut ca = ca();
    let a = ca.process_dr(2, &dr_at(&[1, 35, 2], 3, false, &[1, 35]));
    assert!(matches!(a, DrAction::Deliver(_)));
    let (ptr, ret) = dr(&a);
    assert_eq!((ptr, &ret[1..4]), (4, &[1, 35, 2][..]));
    // The SMA's response then leaves by that port, HopPointer back to HopCount (C14-13:1).
    let DrAction::Deliver(req) = a else {
        unreachable!()
    };
    let resp = ca.handle_smp(2, &req).unwrap();
    let b = ca.send_dr(2, &resp);
    assert!(matches!(b, DrAction::Forward { out_port: 2, .. }), "{b:?}");
    assert_eq!(dr(&b).0, 3);
    // On a CA, the response cannot leave through another port's SMI.
    assert_eq!(
        ca.send_dr(1, &resp),
        DrAction::Drop(DrDrop::WrongEgressPort)
    );
}

#[test]
fn c14_9_1_and_5_bad_hop_pointers() {
    let mut sw = switch();
    // Received with HopPointer 0: the sender did not advance it.
    assert_eq!(
        sw.process_dr(1, &dr_at(&[1, 35], 0, false, &[])),
        DrAction::Drop(DrDrop::BadHopPointer)
    );
    // Beyond HopCount + 1.
    assert_eq!(
        sw.process_dr(1, &dr_at(&[1, 35], 4, false, &[])),
        DrAction::Drop(DrDrop::BadHopPointer)
    );
    // HopCount + 1: already at the destination (C14-9:4).
    assert!(matches!(
        sw.process_dr(1, &dr_at(&[1, 35], 3, false, &[])),
        DrAction::Deliver(_)
    ));
    // A response arriving with HopPointer = HopCount + 1 (C14-13:1) or > HopCount + 1.
    for ptr in [3, 9] {
        assert_eq!(
            sw.process_dr(1, &dr_at(&[1, 35], ptr, true, &[1, 1])),
            DrAction::Drop(DrDrop::BadHopPointer)
        );
    }
    let mut too_long = dr_at(&[1], 1, false, &[]);
    too_long.dr.as_mut().unwrap().hop_cnt = 64;
    assert_eq!(
        sw.process_dr(1, &too_long),
        DrAction::Drop(DrDrop::HopCountTooLarge)
    );
    assert_eq!(
        sw.process_dr(1, &get(AttrId::NODE_INFO, 0)),
        DrAction::Drop(DrDrop::NotDirectedRoute)
    );
    assert_eq!(
        sw.process_dr(0, &dr_at(&[1], 1, false, &[])),
        DrAction::Drop(DrDrop::BadIngressPort)
    );
}

#[test]
fn c14_13_responses_walk_the_return_path() {
    let mut sw = switch();
    // sw2 of the [1, 35, 2] walk: the response from node4 arrives on port 2 with HopPointer 3.
    let a = sw.process_dr(2, &dr_at(&[1, 35, 2], 3, true, &[1, 35, 1]));
    assert!(matches!(a, DrAction::Forward { out_port: 35, .. }), "{a:?}");
    assert_eq!(dr(&a).0, 2);
    let a = sw.process_dr(35, &dr_at(&[1, 35, 2], 2, true, &[1, 35, 1]));
    assert!(matches!(a, DrAction::Forward { out_port: 1, .. }), "{a:?}");
    assert_eq!(dr(&a).0, 1);
    // At the requester: HopPointer 1 -> 0, to the SM.
    let mut ca = ca();
    let a = ca.process_dr(1, &dr_at(&[1, 35, 2], 1, true, &[1, 35, 1]));
    assert!(matches!(a, DrAction::Deliver(_)));
    assert_eq!(dr(&a).0, 0);
    assert!(matches!(
        ca.process_dr(1, &dr_at(&[1], 0, true, &[1])),
        DrAction::Deliver(_)
    ));
}

#[test]
fn lid_routed_parts_are_not_walked() {
    let mut ca = ca();
    let mut s = dr_at(&[1], 1, false, &[]);
    s.dr.as_mut().unwrap().dr_dlid = Lid(4);
    assert_eq!(ca.process_dr(1, &s), DrAction::Drop(DrDrop::LidRoutedPart));
    let mut s = dr_at(&[1], 1, true, &[1]);
    s.dr.as_mut().unwrap().dr_slid = Lid(4);
    assert_eq!(ca.process_dr(1, &s), DrAction::Drop(DrDrop::LidRoutedPart));
    let mut s = dr_at(&[1], 0, false, &[]);
    s.dr.as_mut().unwrap().dr_slid = Lid(4);
    assert_eq!(ca.send_dr(1, &s), DrAction::Drop(DrDrop::LidRoutedPart));
}

#[test]
fn send_dr_from_the_local_sm() {
    let mut ca = ca();
    let req = smp::Repr::dr_get(1, AttrId::NODE_INFO, 0, 0, &[2, 5]).unwrap();
    assert_eq!(ca.send_dr(1, &req), DrAction::Drop(DrDrop::WrongEgressPort));
    let a = ca.send_dr(2, &req);
    assert!(matches!(a, DrAction::Forward { out_port: 2, .. }));
    assert_eq!(dr(&a).0, 1);
    assert_eq!(
        ca.send_dr(2, &dr_at(&[2, 5], 1, false, &[])),
        DrAction::Drop(DrDrop::BadHopPointer)
    );
    // HopCount 0: the local SMA, and its answer straight back to the SM.
    let local = smp::Repr::dr_get(2, AttrId::PORT_INFO, 0, 0, &[]).unwrap();
    let DrAction::Deliver(at_sma) = ca.send_dr(2, &local) else {
        panic!()
    };
    assert_eq!(at_sma.dr.unwrap().hop_ptr, 1);
    let resp = ca.handle_smp(2, &at_sma).unwrap();
    assert_eq!(PortInfo::parse(&resp.data).unwrap().local_port_num, 2);
    let DrAction::Deliver(back) = ca.send_dr(2, &resp) else {
        panic!()
    };
    assert_eq!(back.dr.unwrap().hop_ptr, 0);
    // A switch's SM may use any port.
    let mut sw = switch();
    let a = sw.send_dr(
        0,
        &smp::Repr::dr_get(3, AttrId::NODE_INFO, 0, 0, &[36]).unwrap(),
    );
    assert!(matches!(a, DrAction::Forward { out_port: 36, .. }));
}

#[test]
fn receive_smp_answers_dr_and_lid_routed_requests() {
    let mut ca = ca();
    // The last hop of a DR Get: the answer goes back out of the arrival port.
    match ca.receive_smp(1, Lid::PERMISSIVE, &dr_at(&[1, 1], 2, false, &[4])) {
        SmiOutput::Send(out) => {
            assert_eq!(
                (out.out_port, out.dlid, out.slid),
                (1, Lid::PERMISSIVE, Lid::PERMISSIVE)
            );
            let d = out.smp.dr.unwrap();
            assert!(d.direction_inbound);
            assert_eq!((d.hop_ptr, d.return_path[1], d.return_path[2]), (2, 4, 1));
            assert_eq!(NodeInfo::parse(&out.smp.data).unwrap().local_port_num, 1);
        }
        other => panic!("{other:?}"),
    }
    // A LID-routed Get from LID 1 before this port has a LID: answered from the permissive LID.
    match ca.receive_smp(2, Lid(1), &get(AttrId::NODE_INFO, 0)) {
        SmiOutput::Send(out) => {
            assert_eq!(
                (out.out_port, out.dlid, out.slid),
                (2, Lid(1), Lid::PERMISSIVE)
            );
            assert!(out.smp.dr.is_none());
        }
        other => panic!("{other:?}"),
    }
    // A response (for an SM here) and a discarded request.
    let resp = get(AttrId::NODE_INFO, 0).response(0, [0; 64]);
    assert_eq!(ca.receive_smp(1, Lid(1), &resp), SmiOutput::ToSm(resp));
    assert_eq!(
        ca.receive_smp(1, Lid::PERMISSIVE, &dr_at(&[1, 2, 1], 1, false, &[])),
        SmiOutput::Nothing
    );
}

/// A directed route that begins LID-routed (ibportstate's peer query: DrSLID the
/// requester's LID, sent to the switch's LID): the switch starts the directed part, and
/// the response, back at the switch, goes LID-routed to DrSLID.
#[test]
fn a_directed_route_with_a_lid_routed_start() {
    let mut sw = switch();
    let mut req = smp::Repr::dr_get(7, AttrId::NODE_INFO, 0, 0, &[2]).unwrap();
    req.dr.as_mut().unwrap().dr_slid = Lid(3);
    match sw.receive_smp(36, Lid(3), &req) {
        SmiOutput::Send(out) => {
            assert_eq!((out.out_port, out.dlid), (2, Lid::PERMISSIVE));
            assert_eq!(out.smp.dr.unwrap().hop_ptr, 1);
        }
        other => panic!("{other:?}"),
    }
    let mut resp = req.response(0, [0; 64]);
    {
        let d = resp.dr.as_mut().unwrap();
        d.hop_ptr = 1;
        d.return_path[1] = 1;
    }
    match sw.receive_smp(2, Lid::PERMISSIVE, &resp) {
        SmiOutput::Send(out) => {
            assert_eq!(
                (out.out_port, out.dlid),
                (0, Lid(3)),
                "by the LFT to DrSLID"
            );
            assert_eq!(out.smp.dr.unwrap().hop_ptr, 0);
        }
        other => panic!("{other:?}"),
    }
    // Without a DrSLID, hop pointer 0 on arrival is still an error (C14-9:1).
    let plain = smp::Repr::dr_get(8, AttrId::NODE_INFO, 0, 0, &[2]).unwrap();
    assert_eq!(sw.receive_smp(36, Lid(3), &plain), SmiOutput::Nothing);
}

// ---- Robustness -----------------------------------------------------------------------------

fn any_smp() -> impl Strategy<Value = smp::Repr> {
    (
        proptest::collection::vec(any::<u8>(), 256),
        any::<bool>(),
        0u8..4,
        0u8..6,
    )
        .prop_map(|(mut bytes, dr, ptr, cnt)| {
            bytes[0] = 1;
            bytes[1] = if dr { 0x81 } else { 0x01 };
            bytes[2] = 1;
            // Keep the route short so that walks sometimes succeed.
            bytes[6] = ptr;
            bytes[7] = cnt;
            smp::Repr::parse(&smp::Packet::new_unchecked(&bytes[..])).unwrap()
        })
}

proptest! {
    #[test]
    fn never_panics_on_any_smp(
        smps in proptest::collection::vec((any_smp(), 0u8..40, 0u8..9), 1..30),
        use_switch in any::<bool>(),
    ) {
        let mut sma = if use_switch { switch() } else { ca() };
        for (smp, port, attr) in smps {
            let mut smp = smp;
            // Aim at real attributes most of the time.
            let ids = [0x10u16, 0x11, 0x12, 0x14, 0x15, 0x16, 0x19, 0x1B, 0x20];
            smp.header.attr_id = AttrId(ids[usize::from(attr)]);
            let _ = sma.handle_smp(port, &smp);
            let _ = sma.process_dr(port, &smp);
            let _ = sma.send_dr(port, &smp);
            let _ = sma.receive_smp(port, Lid(port.into()), &smp);
            while sma.poll_event().is_some() {}
        }
        let _ = sma.lft_port(Lid(5));
        let _ = sma.mft_ports(Lid(0xC000));
    }

    #[test]
    fn header_roundtrip_of_responses(tid in any::<u64>(), attr_mod in 0u32..3) {
        let mut sma = ca();
        let req = smp::Repr::dr_get(tid, AttrId::PORT_INFO, attr_mod, 0, &[]).unwrap();
        let DrAction::Deliver(at) = sma.send_dr(1, &req) else { panic!() };
        let resp = sma.handle_smp(1, &at).unwrap();
        let h: MadHeader = resp.header;
        prop_assert_eq!(h.tid, tid);
        prop_assert_eq!(h.method, Method::GetResp);
        prop_assert!(resp.dr.unwrap().direction_inbound);
    }
}

#[test]
fn a_capability_mask_change_is_trap_144_to_the_master_sm() {
    let mut sma = ca();
    // No LID and no master SM yet: nobody to tell.
    let mask = port_info(&mut sma, 1, 1).capability_mask;
    sma.set_capability_mask(1, mask | capability_mask::IS_SM);
    assert!(sma.poll_trap().is_none());
    // The SM gave the port LID 2 and said it is at LID 1.
    let mut pi = port_info(&mut sma, 1, 1);
    pi.lid = Lid(2);
    pi.master_sm_lid = Lid(1);
    pi.port_state = PortState::NoChange;
    pi.port_physical_state = PortPhysicalState::NoChange;
    assert_eq!(ask(&mut sma, 1, &set(&pi, 1)).0, status::SUCCESS);
    assert!(sma.poll_trap().is_none());
    // IsSM cleared (an SM on this port stopped): Trap 144 with the new mask.
    sma.set_capability_mask(1, mask);
    let t = sma.poll_trap().expect("Trap 144");
    assert_eq!((t.out_port, t.dlid, t.slid), (1, Lid(1), Lid(2)));
    assert_eq!(t.smp.header.method, Method::Trap);
    assert_eq!(t.smp.header.attr_id, AttrId::NOTICE);
    let n = t.smp.data;
    assert_eq!(n[0], 0x80 | 4, "generic, informational");
    assert_eq!(&n[1..4], &[0, 0, 1], "a CA produced it");
    assert_eq!(u16::from_be_bytes([n[4], n[5]]), 144);
    assert_eq!(u16::from_be_bytes([n[12], n[13]]), 2, "the port's LID");
    assert_eq!(u32::from_be_bytes([n[16], n[17], n[18], n[19]]), mask);
    // The same mask again is no change.
    sma.set_capability_mask(1, mask);
    assert!(sma.poll_trap().is_none());
}
