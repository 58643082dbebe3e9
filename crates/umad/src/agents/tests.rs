#![allow(clippy::unwrap_used)]

use super::*;

const SMP_DR: u8 = 0x81;
const SA: u8 = 0x03;

fn reg(class: u8, methods: u128, rmpp: u8) -> Registration {
    Registration {
        class,
        class_version: if class == SA { 2 } else { 1 },
        methods,
        oui: [0, 0x14, 0x05],
        rmpp_version: rmpp,
    }
}

/// A MAD of `class` with `method` and the TID `tid`.
fn mad(class: u8, method: u8, tid: u64) -> Vec<u8> {
    let mut m = vec![0u8; MAD_LEN];
    m[0] = 1;
    m[1] = class;
    m[2] = if class == SA { 2 } else { 1 };
    m[3] = method;
    m[8..16].copy_from_slice(&tid.to_be_bytes());
    m
}

#[test]
fn a_request_gets_the_agents_tid_and_its_response_comes_back_to_that_agent() {
    let mut a = Agents::new(0x1000);
    let t0 = Instant::now();
    let first = a.register(reg(SMP_DR, 0, 0)).unwrap();
    let second = a.register(reg(0x04, 0, 0)).unwrap();
    assert_eq!((first, second), (0, 1));
    let request = mad(SMP_DR, 0x01, 0xdead_0000_0042);
    let s = a
        .send(
            t0,
            &Outgoing {
                agent: first,
                mad: &request,
                dlid: 0xffff,
                dest_qpn: 0,
                timeout_ms: 100,
                retries: 2,
            },
        )
        .unwrap();
    assert!(s.smi && s.directed);
    // The upper half is the agent's, the lower the program's.
    let tid = tid_of(&s.mads[0]);
    assert_eq!(tid, 0x0000_1000_0000_0042);
    // A response nobody waits for is dropped; the one that answers goes to the sender.
    a.receive(&mad(SMP_DR, 0x81, 0x0000_1001_0000_0042), false, 0xffff, 0);
    assert!(!a.has_queued());
    a.receive(&mad(SMP_DR, 0x81, tid), false, 0xffff, 0);
    let d = a.pop(MAD_LEN).unwrap().unwrap();
    assert_eq!((d.agent, d.status), (first, 0));
    assert_eq!(a.next_deadline(), None);
    assert_eq!(a.unclaimed, 1);
}

#[test]
fn a_request_without_an_answer_is_retried_and_then_times_out() {
    let mut a = Agents::new(0);
    let t0 = Instant::now();
    let id = a.register(reg(0x04, 0, 0)).unwrap();
    let ms = Duration::from_millis(100);
    a.send(
        t0,
        &Outgoing {
            agent: id,
            mad: &mad(0x04, 0x01, 7),
            dlid: 5,
            dest_qpn: 1,
            timeout_ms: 100,
            retries: 1,
        },
    )
    .unwrap();
    assert!(a.expire(t0 + ms / 2).is_empty());
    // The one retry, sent again as it was.
    let again = a.expire(t0 + ms);
    assert_eq!(again.len(), 1);
    assert_eq!(tid_of(&again[0].mads[0]), 7);
    assert!(!a.has_queued());
    assert!(a.expire(t0 + ms * 2).is_empty());
    let d = a.pop(MAD_LEN).unwrap().unwrap();
    assert_eq!(d.status, libc::ETIMEDOUT as u32);
    assert_eq!(d.data.len(), 24, "the request's common header");
    assert_eq!(tid_of(&d.data), 7);
    // A late response finds nobody waiting.
    a.receive(&mad(0x04, 0x81, 7), true, 5, 1);
    assert!(!a.has_queued());
}

#[test]
fn requests_go_to_the_agent_registered_for_their_method_and_no_clash_is_allowed() {
    let mut a = Agents::new(0);
    let get_set = (1u128 << 0x01) | (1 << 0x02);
    let sm = a.register(reg(SMP_DR, get_set, 0)).unwrap();
    assert_eq!(a.register(reg(SMP_DR, 1 << 0x02, 0)), Err(libc::EINVAL));
    let traps = a.register(reg(0x01, 1 << 0x05, 0)).unwrap();
    assert!(a.wants_sm_requests());
    a.receive(&mad(SMP_DR, 0x02, 1), false, 0xffff, 0);
    a.receive(&mad(0x01, 0x05, 2), false, 3, 0);
    // Method 0x06 nobody takes; a QP1 MAD of an SMP class is not an SMP.
    a.receive(&mad(0x01, 0x06, 3), false, 3, 0);
    a.receive(&mad(SMP_DR, 0x01, 4), true, 3, 0);
    let agents: Vec<u32> =
        std::iter::from_fn(|| a.pop(MAD_LEN).map(|r| r.unwrap().agent)).collect();
    assert_eq!(agents, [sm, traps]);
    assert_eq!(a.unclaimed, 2);
    a.unregister(sm).unwrap();
    assert_eq!(a.unregister(sm), Err(libc::EINVAL));
    assert_eq!(a.register(reg(SMP_DR, 1 << 0x02, 0)), Ok(sm));
}

#[test]
fn vendor_classes_match_on_their_oui() {
    let mut a = Agents::new(0);
    let mut r = reg(0x32, 1 << 0x01, 0);
    r.oui = [0x00, 0x14, 0x05];
    let id = a.register(r).unwrap();
    let mut m = mad(0x32, 0x01, 9);
    m[37..40].copy_from_slice(&[0x00, 0x14, 0x05]);
    a.receive(&m, true, 2, 1);
    m[39] = 0x06;
    a.receive(&m, true, 2, 1);
    assert_eq!(a.pop(MAD_LEN).unwrap().unwrap().agent, id);
    assert!(a.pop(MAD_LEN).is_none());
}

/// An RMPP GetTableResp segment `n` of `last` carrying `fill` as data.
fn segment(tid: u64, n: u32, last: u32, total: u32, fill: u8) -> Vec<u8> {
    let mut m = mad(SA, 0x92, tid);
    m[24] = 1;
    m[25] = 1;
    let mut flags = rmpp_flags::ACTIVE;
    if n == 1 {
        flags |= rmpp_flags::FIRST;
    }
    if n == last {
        flags |= rmpp_flags::LAST;
    }
    m[26] = flags;
    m[28..32].copy_from_slice(&n.to_be_bytes());
    let paylen = if n == 1 { total } else { 0 };
    m[32..36].copy_from_slice(&paylen.to_be_bytes());
    m[54..56].copy_from_slice(&1u16.to_be_bytes()); // AttributeOffset: 8-byte records
    m[56..].fill(fill);
    m
}

#[test]
fn rmpp_segments_are_reassembled_for_an_agent_that_asked() {
    let mut a = Agents::new(0);
    let t0 = Instant::now();
    let id = a.register(reg(SA, 0, 1)).unwrap();
    let s = a
        .send(
            t0,
            &Outgoing {
                agent: id,
                mad: &mad(SA, 0x12, 5),
                dlid: 1,
                dest_qpn: 1,
                timeout_ms: 1000,
                retries: 0,
            },
        )
        .unwrap();
    let tid = tid_of(&s.mads[0]);
    // Two segments: 200 bytes and 40 of records, each with its 20-byte SA header.
    let total = 200 + 40 + 2 * 20;
    a.receive(&segment(tid, 2, 2, total, 0xbb), true, 1, 1);
    assert!(!a.has_queued());
    a.receive(&segment(tid, 1, 2, total, 0xaa), true, 1, 1);
    // Too small a buffer: told how much is needed, and the MAD stays.
    let needed = 56 + 240;
    assert!(matches!(a.pop(256), Some(Err((_, n))) if n == needed));
    let d = a.pop(needed).unwrap().unwrap();
    assert_eq!(d.data.len(), needed);
    assert!(d.data[56..256].iter().all(|&b| b == 0xaa));
    assert!(d.data[256..].iter().all(|&b| b == 0xbb));
}

#[test]
fn a_large_sa_send_is_segmented() {
    let mut a = Agents::new(0);
    let t0 = Instant::now();
    let plain = a.register(reg(0x04, 0, 0)).unwrap();
    let sa = a.register(reg(SA, 1 << 0x12, 1)).unwrap();
    let mut big = mad(SA, 0x92, 3);
    big.resize(56 + 450, 0);
    big[56..].fill(0x11);
    assert_eq!(
        a.send(
            t0,
            &Outgoing {
                agent: plain,
                mad: &big,
                dlid: 1,
                dest_qpn: 1,
                timeout_ms: 0,
                retries: 0
            }
        )
        .unwrap_err(),
        libc::EINVAL,
        "an agent without RMPP sends one MAD"
    );
    let s = a
        .send(
            t0,
            &Outgoing {
                agent: sa,
                mad: &big,
                dlid: 1,
                dest_qpn: 1,
                timeout_ms: 0,
                retries: 0,
            },
        )
        .unwrap();
    assert_eq!(s.mads.len(), 3);
    // They reassemble into what was sent.
    let mut r = Reassembly::new();
    for m in &s.mads {
        assert!(r.add(m));
    }
    let table = r.table().unwrap();
    assert_eq!(table.payload.len(), 450);
    assert!(table.payload.iter().all(|&b| b == 0x11));
    // A response is not remembered: nothing waits for an answer to it.
    assert_eq!(a.next_deadline(), None);
}

#[test]
fn an_rmpp_active_mad_that_fits_one_mad_is_one_numbered_segment() {
    let mut a = Agents::new(0);
    let t0 = Instant::now();
    let sa = a.register(reg(SA, 1 << 0x12, 1)).unwrap();
    let mut m = mad(SA, 0x92, 3);
    m[24] = 1;
    m[26] = rmpp_flags::ACTIVE;
    m.truncate(56 + 64);
    let s = a
        .send(
            t0,
            &Outgoing {
                agent: sa,
                mad: &m,
                dlid: 1,
                dest_qpn: 1,
                timeout_ms: 0,
                retries: 0,
            },
        )
        .unwrap();
    assert_eq!(s.mads.len(), 1);
    let seg = &s.mads[0];
    assert_eq!(
        seg[26] & 0x7,
        rmpp_flags::ACTIVE | rmpp_flags::FIRST | rmpp_flags::LAST
    );
    assert_eq!(u32::from_be_bytes(seg[28..32].try_into().unwrap()), 1);
    assert_eq!(u32::from_be_bytes(seg[32..36].try_into().unwrap()), 64 + 20);
}
