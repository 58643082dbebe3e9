//! Arbitrary bytes as an SA request MAD (QP1, SubnAdm class) to the subnet administrator of
//! a master SM that has swept and configured topology B (`softib-fabric::sa` over the
//! in-memory fabric of `softib-fabric::testing`), and the RMPP reassembly of its answer.
//!
//! * `SubnetManager::handle_sa` never panics, whatever the bytes and the requester's LID.
//! * An answer is whole MADs, each an SA MAD that parses, the request's response method
//!   (`GetResp` to Get and Set, else the method with the response bit) with the request's TransactionID and AttributeID.
//! * An answer of more than one MAD is a well-formed RMPP DATA transfer (IBA §13.6): the
//!   segments numbered 1, 2, ... with FIRST on the first and LAST on the last only; the first's
//!   PayloadLength covers every segment's SA header plus the records and lies within what the
//!   segments carry, the last's its own part. Reassembled as `saquery` does, the payload is a
//!   whole number of records of the answer's AttributeOffset.
//! * `rmpp::Reassembly` (what `saquery` collects answers with) gives the same table whatever
//!   order and duplication the segments arrive in (the bytes after the MAD choose them), and is
//!   never complete before every segment is there.
#![no_main]

use std::cell::RefCell;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use softib::mad::rmpp::Reassembly;
use softib_fabric::sm::{SmConfig, SubnetManager};
use softib_fabric::testing::TestFabric;
use softib_fabric::topology::Topology;
use softib_wire::mad::attr::capability_mask;
use softib_wire::mad::sa::{self, rmpp_flags};
use softib_wire::mad::{Method, MAD_LEN};
use softib_wire::Lid;

const TOPO_B: &str = include_str!("../../topologies/topoB.net");
/// The SA header before the data area: what PayloadLength counts per segment besides records.
const SA_HEADER: usize = 20;

thread_local! {
    static SM: RefCell<SubnetManager> = RefCell::new(master());
}

/// An SM on node1 port 1 of topology B, run until the subnet is up.
fn master() -> SubnetManager {
    let topology = Topology::parse(TOPO_B).expect("topology B parses");
    let node = topology.node_index("node1").expect("node1");
    let guid = topology.nodes()[node].port_guid(1).expect("port 1");
    let mut f = TestFabric::new(topology);
    let config = SmConfig {
        port_guid: guid,
        sweep_interval: None,
        ..SmConfig::default()
    };
    let mask = f.sma(node).port_info(1).expect("port 1").capability_mask;
    f.sma_mut(node)
        .set_capability_mask(1, mask | capability_mask::IS_SM);
    let mut sm = SubnetManager::new(config, 1);
    let mut now = Duration::ZERO;
    for _ in 0..100_000 {
        f.sma_mut(node).set_sm_info(Some(sm.sm_info()));
        while let Some(out) = sm.poll_transmit() {
            if let Some(r) = f.send_dr(node, 1, &out) {
                sm.handle_response(now, &r);
            }
            f.sma_mut(node).set_sm_info(Some(sm.sm_info()));
        }
        match sm.poll_timeout() {
            Some(t) if t <= Duration::from_secs(3600) => {
                now = now.max(t);
                sm.handle_timeout(now);
            }
            _ => break,
        }
    }
    assert!(sm.is_subnet_up(), "the SM brought topology B up");
    sm
}

fuzz_target!(|input: &[u8]| {
    let Some((lid, request)) = input.split_first_chunk::<2>() else {
        return;
    };
    let slid = Lid(u16::from_be_bytes(*lid));
    let Some(resp) = SM.with(|sm| sm.borrow_mut().handle_sa(slid, request)) else {
        return;
    };
    check(request, &resp);
    reassemble(&resp, request.get(MAD_LEN..).unwrap_or(&[]));
});

fn check(request: &[u8], resp: &[u8]) {
    let req = sa::Repr::parse(&sa::Packet::new_checked(request).expect("answered: a whole MAD"))
        .expect("answered: an SA MAD");
    assert!(
        !resp.is_empty() && resp.len() % MAD_LEN == 0,
        "{}",
        resp.len()
    );
    let segs: Vec<sa::Repr<'_>> = resp
        .chunks(MAD_LEN)
        .map(|m| sa::Repr::parse(&sa::Packet::new_checked(m).expect("whole")).expect("parses"))
        .collect();
    for s in &segs {
        // The request's response method (GetResp to Get and Set, GetTableResp to GetTable),
        // else the method with the response bit, as opensm answers.
        let want = req
            .header
            .method
            .response()
            .unwrap_or_else(|| Method::from(u8::from(req.header.method) | 0x80));
        assert_eq!(s.header.method, want);
        assert_eq!(s.header.tid, req.header.tid);
        assert_eq!(s.header.attr_id, req.header.attr_id);
    }
    let n = segs.len();
    let first = &segs[0];
    if n == 1 {
        if first.header.method == Method::GetTableResp && first.header.status == 0 {
            let len = (first.rmpp.data2 as usize)
                .checked_sub(SA_HEADER)
                .expect("PayloadLength counts the SA header");
            assert!(len <= first.data.len());
            let stride = usize::from(first.attr_offset) * 8;
            if stride > 0 {
                assert_eq!(len % stride, 0, "whole records");
            }
        }
        return;
    }
    assert_eq!(first.header.method, Method::GetTableResp);
    for (i, s) in segs.iter().enumerate() {
        assert!(s.rmpp.is_active());
        assert_eq!(s.rmpp.data1 as usize, i + 1, "segment number");
        assert_eq!(s.rmpp.flags & rmpp_flags::FIRST != 0, i == 0);
        assert_eq!(s.rmpp.flags & rmpp_flags::LAST != 0, i + 1 == n);
        assert_eq!(s.attr_offset, first.attr_offset);
    }
    let carried: usize = segs.iter().map(|s| s.data.len()).sum();
    let total = (first.rmpp.data2 as usize)
        .checked_sub(SA_HEADER * n)
        .expect("PayloadLength counts every SA header");
    assert!(total <= carried && total > carried - segs[n - 1].data.len());
    let last = (segs[n - 1].rmpp.data2 as usize)
        .checked_sub(SA_HEADER)
        .expect("the last segment's PayloadLength counts its header");
    assert_eq!(total - (carried - segs[n - 1].data.len()), last);
    let payload: Vec<u8> = segs.iter().flat_map(|s| s.data.iter().copied()).collect();
    let stride = usize::from(first.attr_offset) * 8;
    assert!(stride > 0);
    assert_eq!(payload[..total].len() % stride, 0, "whole records");
}

/// `rmpp::Reassembly` (what `saquery` collects the answer with) gives the same table whatever
/// order and multiplicity the segments arrive in: first as the bytes after the MAD say (each
/// byte picks a segment), then all of them backwards; nothing before every segment is there.
fn reassemble(resp: &[u8], order: &[u8]) {
    let segs: Vec<&[u8]> = resp.chunks(MAD_LEN).collect();
    let mut in_order = Reassembly::new();
    for (i, s) in segs.iter().enumerate() {
        assert!(!in_order.is_complete(), "complete before segment {}", i + 1);
        assert!(in_order.add(s));
    }
    let want = in_order.table().expect("the SA's answer reassembles");
    if want.method == Method::GetTableResp && want.status == 0 {
        let stride = usize::from(want.attr_offset) * 8;
        if stride > 0 {
            assert_eq!(want.records().count() * stride, want.payload.len());
        }
    }
    let mut r = Reassembly::new();
    let mut seen = vec![false; segs.len()];
    for &b in order {
        let i = usize::from(b) % segs.len();
        assert_eq!(r.is_complete(), seen.iter().all(|&x| x));
        seen[i] = true;
        r.add(segs[i]);
    }
    for s in segs.iter().rev() {
        r.add(s);
    }
    assert_eq!(
        r.table().as_ref(),
        Some(&want),
        "reassembly depends on arrival order"
    );
}
