//! Tests of the multicast groups: joins, leaves, queries, MLIDs (the trees are tested on real
//! fabrics in `tests/sm.rs`).

use super::*;
use softib_wire::mad::sa::STATUS_INSUFFICIENT_COMPONENTS;

fn gid(guid: u64) -> Gid {
    Gid::from_prefix_guid(0xfe80_0000_0000_0000, Guid(guid))
}

/// A 4X QDR port with a 2048-byte MTU.
fn port(guid: u64) -> PortCaps {
    PortCaps {
        guid: Guid(guid),
        mtu: Mtu::Mtu2048,
        rate: 7,
    }
}

fn mgid(last: u8) -> Gid {
    Gid([
        0xff, 0x12, 0x60, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, last,
    ])
}

/// A creating join of `mgid` by port `guid`.
fn create(mgid: Gid, guid: u64) -> McMemberRecord {
    McMemberRecord {
        mgid,
        port_gid: gid(guid),
        q_key: QKey(0x1234),
        pkey: PKey::DEFAULT,
        sl: 1,
        flow_label: 0,
        tclass: 0,
        join_state: join_state::FULL_MEMBER,
        ..McMemberRecord::default()
    }
}

fn bcast() -> Gid {
    sa::ipoib_broadcast_mgid(PKey::DEFAULT)
}

#[test]
fn the_broadcast_group_is_pre_created_as_opensm_does() {
    let g = McGroups::with_ipoib_broadcast();
    assert_eq!(g.len(), 1);
    let b = g.get(&bcast()).unwrap();
    assert!(b.well_known && b.members.is_empty());
    let r = b.record;
    assert_eq!(r.mlid, Lid(0xC000));
    assert_eq!(r.q_key, QKey(0x0B1B));
    assert_eq!((r.mtu_selector, r.mtu), (Selector::Exactly, Mtu::Mtu2048));
    assert_eq!((r.rate_selector, r.rate), (Selector::Exactly, 3));
    assert_eq!(r.packet_life_time, 18);
    assert_eq!((r.scope, r.sl, r.pkey), (2, 0, PKey::DEFAULT));
    assert_eq!(g.by_mlid(Lid(0xC000)).map(|g| g.record.mgid), Some(bcast()));
}

#[test]
fn join_existing_group_and_or_the_join_states() {
    let mut g = McGroups::with_ipoib_broadcast();
    let mut req = McMemberRecord {
        mgid: bcast(),
        port_gid: gid(1),
        join_state: join_state::NON_MEMBER,
        ..McMemberRecord::default()
    };
    let c = g.join(&req, comp::JOIN, port(1), false).unwrap();
    assert!(c.ports_changed);
    assert_eq!((c.record.mlid, c.record.q_key), (Lid(0xC000), IPOIB_Q_KEY));
    assert_eq!((c.record.port_gid, c.record.join_state), (gid(1), 2));
    req.join_state = join_state::FULL_MEMBER;
    let c = g.join(&req, comp::JOIN, port(1), false).unwrap();
    assert!(!c.ports_changed, "already a member port");
    assert_eq!(g.get(&bcast()).unwrap().members[&Guid(1)].join_state, 3);
    // Components that do not match the group.
    for (mask, f) in [
        (
            comp::Q_KEY,
            (|r: &mut McMemberRecord| r.q_key = QKey(1)) as fn(&mut McMemberRecord),
        ),
        (comp::SL, |r| r.sl = 3),
        (comp::TCLASS, |r| r.tclass = 1),
        (comp::P_KEY, |r| r.pkey = PKey(0xFFFE)),
        (comp::MTU | comp::MTU_SELECTOR, |r| {
            r.mtu_selector = Selector::Exactly;
            r.mtu = Mtu::Mtu4096;
        }),
        (comp::RATE | comp::RATE_SELECTOR, |r| {
            r.rate_selector = Selector::GreaterThan;
            r.rate = 3;
        }),
    ] {
        let mut bad = req;
        f(&mut bad);
        assert_eq!(
            g.join(&bad, comp::JOIN | mask, port(2), false),
            Err(sa::STATUS_REQ_INVALID),
            "mask {mask:#x}"
        );
    }
    // Selectors the group does satisfy.
    let mut ok = req;
    ok.mtu_selector = Selector::LessThan;
    ok.mtu = Mtu::Mtu4096;
    ok.rate_selector = Selector::GreaterThan;
    ok.rate = 2;
    ok.pkey = PKey(0x7FFF); // limited member of the same partition
    let mask = comp::JOIN | comp::MTU | comp::MTU_SELECTOR | comp::RATE | comp::RATE_SELECTOR;
    assert!(g.join(&ok, mask | comp::P_KEY, port(2), false).is_ok());
    // A port whose MTU is below the group's cannot join; JoinState 0 is invalid.
    let small = PortCaps {
        mtu: Mtu::Mtu1024,
        ..port(3)
    };
    assert_eq!(
        g.join(&req, comp::JOIN, small, false),
        Err(sa::STATUS_REQ_INVALID)
    );
    let mut none = req;
    none.join_state = 0;
    assert_eq!(
        g.join(&none, comp::JOIN, port(3), false),
        Err(sa::STATUS_REQ_INVALID)
    );
    assert_eq!(
        g.join(&req, comp::MGID | comp::PORT_GID, port(3), false),
        Err(STATUS_INSUFFICIENT_COMPONENTS)
    );
}

#[test]
fn create_needs_components_and_a_full_member() {
    let mut g = McGroups::with_ipoib_broadcast();
    let req = create(mgid(1), 1);
    assert_eq!(
        g.join(&req, comp::JOIN, port(1), false),
        Err(STATUS_INSUFFICIENT_COMPONENTS)
    );
    let mut non = req;
    non.join_state = join_state::NON_MEMBER;
    assert_eq!(
        g.join(&non, comp::CREATE, port(1), false),
        Err(sa::STATUS_REQ_INVALID)
    );
    let mut bad_pkey = req;
    bad_pkey.pkey = PKey(0x8000);
    assert_eq!(
        g.join(&bad_pkey, comp::CREATE, port(1), false),
        Err(sa::STATUS_REQ_INVALID)
    );
    // An exact MTU above the port's is not realizable; nothing is left behind.
    let mut big = req;
    big.mtu_selector = Selector::Exactly;
    big.mtu = Mtu::Mtu4096;
    assert_eq!(
        g.join(
            &big,
            comp::CREATE | comp::MTU | comp::MTU_SELECTOR,
            port(1),
            false
        ),
        Err(sa::STATUS_REQ_INVALID)
    );
    assert_eq!(g.len(), 1);
    let c = g.join(&req, comp::CREATE, port(1), true).unwrap();
    assert_eq!(c.record.mlid, Lid(0xC001));
    assert_eq!((c.record.q_key, c.record.sl), (QKey(0x1234), 1));
    // Not asked: the port's MTU and rate, PacketLifeTime 18, all "exactly".
    assert_eq!(
        (c.record.mtu, c.record.rate, c.record.packet_life_time),
        (Mtu::Mtu2048, 7, 18)
    );
    assert!(c.record.proxy_join);
    assert_eq!(
        g.get(&mgid(1)).unwrap().record.mtu_selector,
        Selector::Exactly
    );
}

#[test]
fn mtu_and_rate_selectors_on_create() {
    let m = comp::MTU | comp::MTU_SELECTOR;
    let with_mtu = |sel, mtu| McMemberRecord {
        mtu_selector: sel,
        mtu,
        ..create(mgid(1), 1)
    };
    let port = Mtu::Mtu2048;
    assert_eq!(
        realize_mtu(&with_mtu(Selector::GreaterThan, Mtu::Mtu1024), m, port),
        Some(Mtu::Mtu2048)
    );
    assert_eq!(
        realize_mtu(&with_mtu(Selector::GreaterThan, Mtu::Mtu2048), m, port),
        None
    );
    assert_eq!(
        realize_mtu(&with_mtu(Selector::LessThan, Mtu::Mtu2048), m, port),
        Some(Mtu::Mtu1024)
    );
    assert_eq!(
        realize_mtu(&with_mtu(Selector::LessThan, Mtu::Mtu4096), m, port),
        Some(Mtu::Mtu2048)
    );
    assert_eq!(
        realize_mtu(&with_mtu(Selector::LessThan, Mtu::Mtu256), m, port),
        None
    );
    assert_eq!(
        realize_mtu(&with_mtu(Selector::Largest, Mtu::Mtu256), m, port),
        Some(port)
    );
    assert_eq!(
        realize_mtu(&with_mtu(Selector::Exactly, Mtu::Mtu512), m, port),
        Some(Mtu::Mtu512)
    );
    let r = comp::RATE | comp::RATE_SELECTOR;
    let with_rate = |sel, rate| McMemberRecord {
        rate_selector: sel,
        rate,
        ..create(mgid(1), 1)
    };
    // Port 40 Gb/s (7): greater than 10 gives 40; less than 40 gives 30 (4); less than
    // 2.5 is nothing.
    assert_eq!(
        realize_rate(&with_rate(Selector::GreaterThan, 3), r, 7),
        Some(7)
    );
    assert_eq!(
        realize_rate(&with_rate(Selector::GreaterThan, 7), r, 7),
        None
    );
    assert_eq!(
        realize_rate(&with_rate(Selector::LessThan, 7), r, 7),
        Some(4)
    );
    assert_eq!(realize_rate(&with_rate(Selector::LessThan, 2), r, 7), None);
    assert_eq!(
        realize_rate(&with_rate(Selector::LessThan, 9), r, 7),
        Some(7)
    );
    assert_eq!(
        realize_rate(&with_rate(Selector::Exactly, 3), r, 7),
        Some(3)
    );
    assert_eq!(
        realize_rate(&with_rate(Selector::Exactly, 3), 0, 7),
        Some(7)
    );
}

#[test]
fn leave_clears_bits_and_deletes_groups_without_full_members() {
    let mut g = McGroups::with_ipoib_broadcast();
    g.join(&create(mgid(1), 1), comp::CREATE, port(1), false)
        .unwrap();
    let mut nm = create(mgid(1), 2);
    nm.join_state = join_state::NON_MEMBER | join_state::SEND_ONLY_NON_MEMBER;
    g.join(&nm, comp::JOIN, port(2), false).unwrap();
    // Port 2 drops send-only: still a member.
    let mut drop = nm;
    drop.join_state = join_state::SEND_ONLY_NON_MEMBER;
    let c = g.leave(&drop, comp::JOIN, Guid(2)).unwrap();
    assert_eq!(
        (c.record.join_state, c.ports_changed),
        (join_state::NON_MEMBER, false)
    );
    // Bits it does not hold, a port that is not a member, a group that does not exist.
    assert_eq!(
        g.leave(&drop, comp::JOIN, Guid(2)),
        Err(sa::STATUS_REQ_INVALID)
    );
    assert_eq!(
        g.leave(&drop, comp::JOIN, Guid(9)),
        Err(sa::STATUS_REQ_INVALID)
    );
    assert_eq!(
        g.leave(&create(mgid(7), 1), comp::JOIN, Guid(1)),
        Err(sa::STATUS_REQ_INVALID)
    );
    // The only full member leaves: the group goes, non-member and all; its MLID is free.
    let c = g.leave(&create(mgid(1), 1), comp::JOIN, Guid(1)).unwrap();
    assert!(c.ports_changed);
    assert!(g.get(&mgid(1)).is_none());
    let c = g
        .join(&create(mgid(2), 1), comp::CREATE, port(1), false)
        .unwrap();
    assert_eq!(c.record.mlid, Lid(0xC001));
    // The pre-created group stays when empty; without JoinState in the mask all bits go.
    let mut b = create(bcast(), 5);
    b.q_key = IPOIB_Q_KEY;
    g.join(&b, comp::JOIN, port(5), false).unwrap();
    g.leave(&b, comp::MGID | comp::PORT_GID, Guid(5)).unwrap();
    assert!(g.get(&bcast()).unwrap().members.is_empty());
}

#[test]
fn mlids_run_out() {
    let mut g = McGroups::new(2);
    g.join(&create(mgid(1), 1), comp::CREATE, port(1), false)
        .unwrap();
    g.join(&create(mgid(2), 1), comp::CREATE, port(1), false)
        .unwrap();
    assert_eq!(
        g.join(&create(mgid(3), 1), comp::CREATE, port(1), false),
        Err(sa::STATUS_NO_RESOURCES)
    );
    assert_eq!(g.len(), 2);
}

#[test]
fn queries_by_component_mask() {
    let mut g = McGroups::with_ipoib_broadcast();
    g.join(&create(mgid(1), 1), comp::CREATE, port(1), false)
        .unwrap();
    let mut b = create(bcast(), 2);
    b.join_state = join_state::NON_MEMBER;
    g.join(&b, comp::JOIN, port(2), false).unwrap();
    g.join(&create(bcast(), 3), comp::JOIN, port(3), false)
        .unwrap();
    let any = McMemberRecord::default();
    // Untrusted, no PortGID: one record per group, no member data.
    let all = g.query(&any, 0, false);
    assert_eq!(all.len(), 2);
    assert!(all
        .iter()
        .all(|r| r.port_gid == Gid::default() && r.join_state == 0));
    // By MGID, by MLID.
    let mut t = any;
    t.mgid = bcast();
    assert_eq!(g.query(&t, comp::MGID, false).len(), 1);
    t.mlid = Lid(0xC001);
    assert_eq!(g.query(&t, comp::MLID, false)[0].mgid, mgid(1));
    // Trusted: every member of every group; with JoinState, only the matching ones.
    assert_eq!(g.query(&any, 0, true).len(), 3);
    let mut js = any;
    js.join_state = join_state::NON_MEMBER;
    let r = g.query(&js, comp::JOIN_STATE, true);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].port_gid, gid(2));
    // By PortGID: that member's record in each of its groups.
    let mut p = any;
    p.port_gid = gid(1);
    let r = g.query(&p, comp::PORT_GID, false);
    assert_eq!((r.len(), r[0].mgid, r[0].join_state), (1, mgid(1), 1));
    // Q_Key that no group has.
    let mut q = any;
    q.q_key = QKey(5);
    assert!(g.query(&q, comp::Q_KEY, false).is_empty());
}

proptest::proptest! {
    /// Any sequence of joins and leaves keeps the groups consistent: one MLID per group, in
    /// range; every group but the pre-created one has a full member; nothing panics.
    #[test]
    fn joins_and_leaves_keep_the_groups_consistent(
        ops in proptest::collection::vec(
            (proptest::prelude::any::<bool>(), 0u8..5, 1u64..6, 0u8..16, 0usize..4),
            1..60,
        )
    ) {
        let masks = [comp::JOIN, comp::CREATE, comp::MGID | comp::PORT_GID, 0];
        let mut g = McGroups::new(3);
        for (is_join, group, guid, js, mask) in ops {
            let mut req = if group == 0 { create(bcast(), guid) } else { create(mgid(group), guid) };
            req.join_state = js;
            let mask = masks[mask];
            let _ = if is_join {
                g.join(&req, mask, port(guid), false)
            } else {
                g.leave(&req, mask, Guid(guid))
            };
            let mlids: BTreeSet<u16> = g.iter().map(|x| x.mlid().0).collect();
            proptest::prop_assert_eq!(mlids.len(), g.len());
            proptest::prop_assert!(mlids.iter().all(|&m| (0xC000..0xC003).contains(&m)));
            for x in g.iter() {
                proptest::prop_assert!(x.well_known || x.has_full_member());
                proptest::prop_assert!(x.members.values().all(|m| m.join_state != 0));
            }
        }
    }
}
