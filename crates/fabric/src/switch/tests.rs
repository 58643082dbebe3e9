//! Tests of the switch data plane.

use super::*;
use crate::testing::data_packet;
use crate::topology::{LinkRate, Topology};
use proptest::prelude::*;
use softib_wire::mad::attr::{
    LinearForwardingTable, MulticastForwardingTable, NodeInfo, PortInfo, PortPhysicalState,
    PortState, SmpAttribute,
};
use softib_wire::mad::{status, AttrId, Method, MAD_LEN};

const TOPO_B: &str = include_str!("../../tests/data/topoB.net");

fn sm_set<A: SmpAttribute>(sw: &mut Switch, attr: &A, attr_mod: u32) {
    let req = smp::Repr::lid_set(1, A::ATTR_ID, attr_mod, 0, attr.to_data());
    let resp = sw.sma_mut().handle_smp(0, &req).unwrap();
    assert_eq!(resp.header.status, status::SUCCESS);
}

fn set_state(sw: &mut Switch, port: u8, state: PortState) {
    let mut pi = *sw.sma().port_info(port).unwrap();
    pi.port_state = state;
    pi.port_physical_state = PortPhysicalState::NoChange;
    sm_set(sw, &pi, u32::from(port));
}

/// sw1 of topology B with the LIDs and LFT opensm gave it (golden B-stock: LID 5;
/// 1->p1, 2->p2, 3->p35, 4->p36, 5->p0, 6->p35), ports 1, 2, 35, 36 Active.
fn sw1() -> Switch {
    let t = Topology::parse(TOPO_B).unwrap();
    let mut sw = Switch::from_node(t.node_by_id("sw1").unwrap()).unwrap();
    for p in [1, 2, 35, 36] {
        sw.sma_mut().link_up(p, LinkRate::QDR_4X);
    }
    let mut p0 = *sw.sma().port_info(0).unwrap();
    p0.lid = Lid(5);
    p0.port_state = PortState::NoChange;
    sm_set(&mut sw, &p0, 0);
    let mut lft = LinearForwardingTable::default();
    for (lid, port) in [(1, 1), (2, 2), (3, 35), (4, 36), (5, 0), (6, 35)] {
        lft.ports[lid] = port;
    }
    sm_set(&mut sw, &lft, 0);
    let mut si = *sw.sma().switch_info().unwrap();
    si.linear_fdb_top = 6;
    sm_set(&mut sw, &si, 0);
    for p in [1, 2, 35, 36] {
        set_state(&mut sw, p, PortState::Armed);
        set_state(&mut sw, p, PortState::Active);
    }
    sw
}

fn packet_to(dlid: u16) -> Vec<u8> {
    data_packet(Lid(1), Lid(dlid), 0x10, b"hello fabric")
}

fn words(p: &[u8]) -> u64 {
    ((p.len() - 2) / 4) as u64
}

#[test]
fn forwards_by_the_lft_and_counts() {
    let mut sw = sw1();
    let p = packet_to(3);
    assert_eq!(
        sw.handle_packet(1, &p),
        SwitchAction::Forward { out_port: 35 }
    );
    assert_eq!(
        sw.handle_packet(1, &packet_to(4)),
        SwitchAction::Forward { out_port: 36 }
    );
    assert_eq!(
        sw.handle_packet(35, &packet_to(2)),
        SwitchAction::Forward { out_port: 2 }
    );
    let c1 = sw.counters(1).unwrap();
    assert_eq!((c1.rcv_pkts, c1.rcv_data), (2, 2 * words(&p)));
    let c35 = sw.counters(35).unwrap();
    assert_eq!((c35.xmit_pkts, c35.xmit_data), (1, words(&p)));
    assert_eq!((c35.rcv_pkts, c35.xmit_discards), (1, 0));
    assert_eq!(sw.counters(2).unwrap().xmit_pkts, 1);
}

#[test]
fn no_route_is_dropped_and_counted() {
    let mut sw = sw1();
    // Above LinearFDBTop, and a LID inside it whose entry is 255.
    for lid in [7, 100, 0xBFFF] {
        assert_eq!(
            sw.handle_packet(2, &packet_to(lid)),
            SwitchAction::Drop(SwitchDrop::NoRoute)
        );
    }
    let mut lft = LinearForwardingTable::default();
    lft.ports[..7].copy_from_slice(&[255, 1, 2, 35, 36, 0, 255]);
    sm_set(&mut sw, &lft, 0);
    assert_eq!(
        sw.handle_packet(2, &packet_to(6)),
        SwitchAction::Drop(SwitchDrop::NoRoute)
    );
    assert_eq!(sw.dropped(SwitchDrop::NoRoute), 4);
    assert_eq!(sw.counters(2).unwrap().rcv_switch_relay_errors, 4);
    for (lid, why) in [
        (0, SwitchDrop::BadDlid),
        (0xFFFF, SwitchDrop::BadDlid),
        (0xC001, SwitchDrop::Multicast),
    ] {
        assert_eq!(
            sw.handle_packet(2, &packet_to(lid)),
            SwitchAction::Drop(why)
        );
    }
    assert_eq!(sw.counters(2).unwrap().rcv_switch_relay_errors, 7);
}

#[test]
fn multicast_is_replicated_by_the_mft() {
    let mut sw = sw1();
    // MLID 0xC000 to ports 0, 1, 2 and 35 (ports 32..=47 are position 2); 0xC001 to port 1.
    let mut p0 = MulticastForwardingTable::default();
    p0.port_masks[0] = 0b111;
    p0.port_masks[1] = 0b010;
    sm_set(&mut sw, &p0, MulticastForwardingTable::attr_mod(0, 0));
    let mut p2 = MulticastForwardingTable::default();
    p2.port_masks[0] = 1 << 3;
    sm_set(&mut sw, &p2, MulticastForwardingTable::attr_mod(0, 2));
    let p = packet_to(0xC000);
    // Every port of the entry but the ingress port and port 0.
    assert_eq!(
        sw.handle_packet(1, &p),
        SwitchAction::Replicate {
            out_ports: PortMask::from_ports([2, 35])
        }
    );
    assert_eq!(
        sw.handle_packet(35, &p),
        SwitchAction::Replicate {
            out_ports: PortMask::from_ports([1, 2])
        }
    );
    // From a port outside the entry: all of it.
    assert_eq!(
        sw.handle_packet(36, &p),
        SwitchAction::Replicate {
            out_ports: PortMask::from_ports([1, 2, 35])
        }
    );
    let c2 = sw.counters(2).unwrap();
    assert_eq!((c2.xmit_pkts, c2.xmit_data), (3, 3 * words(&p)));
    assert_eq!(sw.counters(35).unwrap().xmit_pkts, 2);
    // The only port of 0xC001 is the ingress port: nothing leaves, no relay error.
    assert_eq!(
        sw.handle_packet(1, &packet_to(0xC001)),
        SwitchAction::Drop(SwitchDrop::MulticastNoEgress)
    );
    assert_eq!(sw.counters(1).unwrap().rcv_switch_relay_errors, 0);
    // No entry: dropped and counted as before.
    assert_eq!(
        sw.handle_packet(1, &packet_to(0xC002)),
        SwitchAction::Drop(SwitchDrop::Multicast)
    );
    assert_eq!(sw.counters(1).unwrap().rcv_switch_relay_errors, 1);
    // An egress port that is not Active is skipped and counts a discard.
    sw.sma_mut().link_down(2);
    assert_eq!(
        sw.handle_packet(1, &p),
        SwitchAction::Replicate {
            out_ports: PortMask::from_ports([35])
        }
    );
    assert_eq!(sw.counters(2).unwrap().xmit_discards, 1);
}

#[test]
fn port_mask_bits() {
    let mut m = PortMask::from_ports([0, 1, 15, 16, 35, 64, 255]);
    assert_eq!(m.len(), 7);
    assert_eq!(m.mask16(0), 0x8003);
    assert_eq!(m.mask16(1), 0x0001);
    assert_eq!(m.mask16(2), 0x0008);
    assert_eq!(m.mask16(4), 0x0001);
    assert_eq!(m.mask16(15), 0x8000);
    m.set_mask16(2, 0x0003);
    assert!(m.contains(32) && m.contains(33) && !m.contains(35));
    m.remove(255);
    assert_eq!(m.iter().collect::<Vec<_>>(), [0, 1, 15, 16, 32, 33, 64]);
    assert!(PortMask::EMPTY.is_empty());
}

#[test]
fn port0_and_hairpin() {
    let mut sw = sw1();
    assert_eq!(sw.handle_packet(1, &packet_to(5)), SwitchAction::Local);
    // Back out of the input port only because the LFT says so.
    assert_eq!(
        sw.handle_packet(1, &packet_to(1)),
        SwitchAction::Forward { out_port: 1 }
    );
    assert_eq!(sw.counters(1).unwrap().xmit_pkts, 1);
}

#[test]
fn port_states_gate_data_but_not_smps() {
    let t = Topology::parse(TOPO_B).unwrap();
    let mut sw = sw1();
    // Port 2 back to Init (as after a retrain): data in is refused.
    sw.sma_mut().link_down(2);
    sw.sma_mut().link_up(2, LinkRate::QDR_4X);
    assert_eq!(
        sw.handle_packet(2, &packet_to(3)),
        SwitchAction::Drop(SwitchDrop::IngressNotActive)
    );
    // Data out of it is discarded and counted.
    assert_eq!(
        sw.handle_packet(1, &packet_to(2)),
        SwitchAction::Drop(SwitchDrop::EgressNotActive)
    );
    assert_eq!(sw.counters(2).unwrap().xmit_discards, 1);
    // Armed: the first data packet makes it Active (IBA §7.2).
    set_state(&mut sw, 2, PortState::Armed);
    assert_eq!(
        sw.handle_packet(2, &packet_to(3)),
        SwitchAction::Forward { out_port: 35 }
    );
    assert_eq!(sw.sma().port_state(2), Some(PortState::Active));
    // A port without a link: nothing can arrive on it.
    assert_eq!(
        sw.handle_packet(3, &packet_to(3)),
        SwitchAction::Drop(SwitchDrop::IngressLinkDown)
    );
    assert_eq!(
        sw.handle_packet(0, &packet_to(3)),
        SwitchAction::Drop(SwitchDrop::BadIngressPort)
    );
    assert_eq!(
        sw.handle_packet(37, &packet_to(3)),
        SwitchAction::Drop(SwitchDrop::BadIngressPort)
    );
    // SMPs still reach the SMA through an Init port.
    let mut fresh = Switch::from_node(t.node_by_id("sw2").unwrap()).unwrap();
    fresh.sma_mut().link_up(35, LinkRate::QDR_4X);
    let mut req = smp::Repr::dr_get(7, AttrId::NODE_INFO, 0, 0, &[35]).unwrap();
    req.dr.as_mut().unwrap().hop_ptr = 1;
    let bytes = smp_packet::emit(Lid::PERMISSIVE, Lid::PERMISSIVE, &req);
    let SwitchAction::Transmit { out_port, packet } = fresh.handle_packet(35, &bytes) else {
        panic!()
    };
    assert_eq!(out_port, 35);
    let resp = smp_packet::parse(&packet).unwrap().smp;
    assert_eq!(resp.header.method, Method::GetResp);
    let ni = NodeInfo::parse(&resp.data).unwrap();
    assert_eq!(
        (ni.node_guid.0, ni.local_port_num),
        (0x7cfe900300a0b1c0, 35)
    );
    assert_eq!(fresh.counters(35).unwrap().xmit_pkts, 1);
    assert_eq!(fresh.counters(35).unwrap().rcv_pkts, 1);
}

#[test]
fn corrupt_and_truncated_packets() {
    let mut sw = sw1();
    let mut p = packet_to(3);
    let last = p.len() - 1;
    p[last] ^= 0xFF;
    assert_eq!(
        sw.handle_packet(1, &p),
        SwitchAction::Drop(SwitchDrop::BadVcrc)
    );
    let p = packet_to(3);
    assert_eq!(
        sw.handle_packet(1, &p[..p.len() - 1]),
        SwitchAction::Drop(SwitchDrop::Malformed)
    );
    assert_eq!(
        sw.handle_packet(1, &p[..5]),
        SwitchAction::Drop(SwitchDrop::Malformed)
    );
    assert_eq!(sw.counters(1).unwrap().rcv_errors, 3);
    assert_eq!(sw.counters(1).unwrap().rcv_pkts, 0);
}

#[test]
fn directed_route_smps_are_relayed() {
    let mut sw = sw1();
    // From node1 along [1, 35, 2]: at sw1 with HopPointer 1.
    let mut req = smp::Repr::dr_get(8, AttrId::NODE_INFO, 0, 0, &[1, 35, 2]).unwrap();
    req.dr.as_mut().unwrap().hop_ptr = 1;
    let bytes = smp_packet::emit(Lid::PERMISSIVE, Lid::PERMISSIVE, &req);
    let SwitchAction::Transmit { out_port, packet } = sw.handle_packet(1, &bytes) else {
        panic!()
    };
    assert_eq!(out_port, 35);
    let fwd = smp_packet::parse(&packet).unwrap();
    assert_eq!(
        (fwd.lrh.dlid, fwd.lrh.slid),
        (Lid::PERMISSIVE, Lid::PERMISSIVE)
    );
    let d = fwd.smp.dr.unwrap();
    assert_eq!((d.hop_ptr, d.return_path[1]), (2, 1));
    // Out of a dead port: consumed.
    let mut bad = req;
    bad.dr.as_mut().unwrap().initial_path[2] = 3;
    let bytes = smp_packet::emit(Lid::PERMISSIVE, Lid::PERMISSIVE, &bad);
    assert_eq!(
        sw.handle_packet(1, &bytes),
        SwitchAction::Drop(SwitchDrop::SmpConsumed)
    );
    assert_eq!(
        sw.sma()
            .counters()
            .dr_dropped(crate::sma::DrDrop::EgressPortDown),
        1
    );
}

#[test]
fn lid_routed_smps() {
    let mut sw = sw1();
    // Passing through: relayed like data, by DLID.
    let req = smp::Repr::lid_get(9, AttrId::NODE_INFO, 0, 0);
    let through = smp_packet::emit(Lid(3), Lid(1), &req);
    assert_eq!(
        sw.handle_packet(1, &through),
        SwitchAction::Forward { out_port: 35 }
    );
    // To the switch's own LID: answered, routed back to the requester's LID by the LFT.
    let to_me = smp_packet::emit(Lid(5), Lid(4), &req);
    let SwitchAction::Transmit { out_port, packet } = sw.handle_packet(36, &to_me) else {
        panic!()
    };
    assert_eq!(out_port, 36);
    let resp = smp_packet::parse(&packet).unwrap();
    assert_eq!((resp.lrh.dlid, resp.lrh.slid), (Lid(4), Lid(5)));
    assert_eq!(NodeInfo::parse(&resp.smp.data).unwrap().local_port_num, 36);
    // Permissive DLID: for whoever receives it.
    let perm = smp_packet::emit(
        Lid::PERMISSIVE,
        Lid(2),
        &smp::Repr::lid_get(10, AttrId::PORT_INFO, 2, 0),
    );
    let SwitchAction::Transmit { out_port, packet } = sw.handle_packet(2, &perm) else {
        panic!()
    };
    assert_eq!(out_port, 2);
    let pi = PortInfo::parse(&smp_packet::parse(&packet).unwrap().smp.data).unwrap();
    assert_eq!((pi.local_port_num, pi.port_state), (2, PortState::Active));
    // A VL15 packet for the switch that is not an SMP (a UD packet to QP 0x10): the VL is
    // not covered by the ICRC, so only the VCRC needs redoing.
    let mut junk = packet_to(5);
    junk[0] = (junk[0] & 0x0F) | 0xF0;
    let n = junk.len();
    let vcrc = softib_wire::crc::vcrc(&junk[..n - 2]);
    junk[n - 2..].copy_from_slice(&vcrc.to_le_bytes());
    assert_eq!(
        sw.handle_packet(1, &junk),
        SwitchAction::Drop(SwitchDrop::NotAnSmp)
    );
}

#[test]
fn an_sm_on_the_switch() {
    let mut sw = sw1();
    let req = smp::Repr::dr_get(11, AttrId::NODE_INFO, 0, 0, &[]).unwrap();
    let SwitchAction::ToSm(resp) = sw.send_smp(&req) else {
        panic!()
    };
    assert_eq!(NodeInfo::parse(&resp.data).unwrap().local_port_num, 0);
    let req = smp::Repr::dr_get(12, AttrId::NODE_INFO, 0, 0, &[36, 1]).unwrap();
    let SwitchAction::Transmit { out_port, packet } = sw.send_smp(&req) else {
        panic!()
    };
    assert_eq!(out_port, 36);
    assert_eq!(
        smp_packet::parse(&packet).unwrap().smp.dr.unwrap().hop_ptr,
        1
    );
    let req = smp::Repr::dr_get(13, AttrId::NODE_INFO, 0, 0, &[3]).unwrap();
    assert_eq!(
        sw.send_smp(&req),
        SwitchAction::Drop(SwitchDrop::SmpConsumed)
    );
}

#[test]
fn not_a_switch_config() {
    let t = Topology::parse(TOPO_B).unwrap();
    assert!(Switch::from_node(t.node_by_id("node1").unwrap()).is_none());
    assert_eq!(SwitchDrop::ALL.len(), 13);
    assert_eq!(SwitchDrop::NoRoute.name(), "no_route");
}

proptest! {
    #[test]
    fn never_panics(packets in proptest::collection::vec(
        (0u8..40, proptest::collection::vec(any::<u8>(), 0..400)), 1..20)
    ) {
        let mut sw = sw1();
        for (port, bytes) in packets {
            let _ = sw.handle_packet(port, &bytes);
        }
    }

    #[test]
    fn valid_smps_with_any_contents_never_panic(
        data in proptest::collection::vec(any::<u8>(), 256),
        dlid in prop_oneof![Just(0xFFFFu16), Just(5u16), any::<u16>()],
        port in 1u8..37,
    ) {
        let mut sw = sw1();
        let mut bytes = data.clone();
        bytes[0] = 1;
        bytes[1] = if data[1] & 1 == 0 { 0x81 } else { 0x01 };
        bytes[2] = 1;
        bytes[7] &= 7;
        bytes[6] &= 7;
        let smp = smp::Repr::parse(&smp::Packet::new_unchecked(&bytes[..])).unwrap();
        let _ = sw.handle_packet(port, &smp_packet::emit(Lid(dlid), Lid(1), &smp));
    }
}

/// A GMP from QP 1 of LID 1 (behind port 1) to the switch's LID 5, QP 1.
fn gmp_to_switch(mad: &[u8; MAD_LEN]) -> Vec<u8> {
    smp_packet::emit_mad(
        &smp_packet::MadAddress {
            vl: 0,
            sl: 0,
            dlid: Lid(5),
            slid: Lid(1),
            dest_qpn: Qpn::GSI,
            src_qpn: Qpn::GSI,
            qkey: QKey::GSI,
        },
        mad,
    )
}

/// The MAD the switch sent back towards LID 1, by port 1.
fn answer_of(action: SwitchAction) -> [u8; MAD_LEN] {
    let SwitchAction::Transmit { out_port, packet } = action else {
        panic!("no answer: {action:?}");
    };
    assert_eq!(out_port, 1);
    let p = smp_packet::parse_mad(&packet).unwrap();
    assert_eq!(
        (p.addr.dlid, p.addr.slid, p.addr.dest_qpn, p.addr.src_qpn),
        (Lid(1), Lid(5), Qpn::GSI, Qpn::GSI)
    );
    p.mad
}

#[test]
fn port_0_answers_perf_mgt_for_every_port_and_the_spec_status_for_other_classes() {
    use softib_wire::mad::perf;
    let mut sw = sw1();
    // Traffic through port 35 first.
    assert_eq!(
        sw.handle_packet(1, &packet_to(3)),
        SwitchAction::Forward { out_port: 35 }
    );
    let mut data = [0u8; perf::DATA_LEN];
    data[1] = 35;
    let mut mad = [0u8; MAD_LEN];
    perf::Repr::request(Method::Get, 9, AttrId::PORT_COUNTERS, 0, &data)
        .emit(&mut perf::Packet::new_unchecked(&mut mad[..]));
    let resp = answer_of(sw.handle_packet(1, &gmp_to_switch(&mad)));
    let r = perf::Repr::parse(&perf::Packet::new_checked(&resp[..]).unwrap()).unwrap();
    assert_eq!(
        (r.header.method, r.header.status, r.header.tid),
        (Method::GetResp, status::SUCCESS, 9)
    );
    let pc = perf::PortCounters::parse(r.data).unwrap();
    assert_eq!((pc.port_select, pc.port_xmit_pkts), (35, 1));
    // SubnAdm is no switch's: a Get comes back unsupported; a response gets nothing.
    let mut sa = mad;
    sa[1] = u8::from(MgmtClass::SubnAdm);
    sa[2] = 2;
    let resp = answer_of(sw.handle_packet(1, &gmp_to_switch(&sa)));
    let h = mad::Repr::parse(&mad::Packet::new_unchecked(&resp[..])).unwrap();
    assert_eq!(
        (h.mgmt_class, h.method, h.status),
        (
            MgmtClass::SubnAdm,
            Method::GetResp,
            status::UNSUPPORTED_METHOD_ATTR
        )
    );
    assert_eq!(
        sw.handle_packet(1, &gmp_to_switch(&resp)),
        SwitchAction::Drop(SwitchDrop::GmpConsumed)
    );
}
