//! `RoceCa` without sockets: two devices joined by a queue in memory.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::net::SocketAddr;

use softib_engine::memory::{RegionId, VecMemory};
use softib_engine::qp::AddressVector;
use softib_engine::verbs::{
    QpType, RecvWr, RemoteAddr, SendFlags, SendWr, Sge, UdDest, WcStatus, WorkCompletion, WrOpcode,
};
use softib_engine::{CqHandle, Instant, PdHandle, IN_PROCESS_MAX_LEN};
use softib_net::batch::Loopback;
use softib_net::TxQueue;
use softib_wire::crc::ICRC_LEN;
use softib_wire::packet::RoceV2Repr;
use softib_wire::{Qpn, RKey};

use super::framing::{self, rxe_source_port};
use super::*;

#[path = "../../tests/common/mod.rs"]
mod common;
use common::{av_to, rc_up as rc_up_on, BUF};

const LEN: usize = 1 << 20;
const ROOM: usize = IN_PROCESS_MAX_LEN + ICRC_LEN;

struct Dev {
    ca: RoceCa<VecMemory>,
    pd: PdHandle,
    cq: CqHandle,
    key: u32,
    tx: TxQueue<SrcKey>,
    local_room: Vec<u8>,
}

fn dev(addr: &str, seed: u64) -> Dev {
    let addr: SocketAddr = addr.parse().unwrap();
    let e = common::engine(addr.ip(), seed, LEN);
    Dev {
        ca: RoceCa::new(e.hca, RoceConfig::new(addr)),
        pd: e.pd,
        cq: e.cq,
        key: e.key,
        tx: TxQueue::with_hash_seed(7),
        local_room: vec![0; ROOM],
    }
}

fn addr(d: &Dev) -> SocketAddr {
    d.ca.config().addr
}

fn create_qp(d: &mut Dev, t: QpType) -> Qpn {
    let (pd, cq) = (d.pd, d.cq);
    common::create_qp(d.ca.hca_mut(), pd, cq, t)
}

/// RESET → INIT → RTR → RTS towards `to`, through the `RoceCa`.
fn rc_up(d: &mut Dev, qpn: Qpn, remote: Qpn, to: SocketAddr) {
    rc_up_on(&mut d.ca, qpn, remote, av_to(to.ip()));
}

fn ud_up(d: &mut Dev, qpn: Qpn) {
    common::ud_up(&mut d.ca, qpn);
}

fn write(d: &mut Dev, qpn: Qpn, wr_id: u64, len: u32, rkey: u32, remote: u64) {
    let opcode = WrOpcode::RdmaWrite(RemoteAddr {
        addr: remote,
        rkey: RKey(rkey),
    });
    let sge = Sge {
        addr: BUF,
        length: len,
        lkey: d.key,
    };
    d.ca.hca_mut()
        .post_send(qpn, common::wr(wr_id, opcode, sge))
        .unwrap();
}

/// Posts a signaled 17-byte UD SEND from `qpn` through `ah` to QP `remote_qpn`.
fn ud_send(d: &mut Dev, qpn: Qpn, ah: softib_engine::AhHandle, remote_qpn: Qpn, lkey: u32) {
    let wr = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        sg_list: vec![Sge {
            addr: BUF,
            length: 17,
            lkey,
        }],
        flags: SendFlags::SIGNALED,
        inline_data: None,
        ud: Some(UdDest {
            ah,
            remote_qpn,
            remote_qkey: 0x1111_1111,
        }),
    };
    d.ca.hca_mut().post_send(qpn, wr).unwrap();
}

/// A datagram as it left a device: from where, to where, its index, its bytes, whether sealed.
#[derive(Debug, Clone)]
struct Sent {
    from: SocketAddr,
    to: SocketAddr,
    index: u16,
    bytes: Vec<u8>,
    in_process: bool,
}

/// Takes a queue's datagrams in the order a flush hands them on (every destination is ours).
struct Collect<'a> {
    ip: std::net::IpAddr,
    out: &'a mut Vec<Sent>,
}

impl Loopback<SrcKey> for Collect<'_> {
    fn is_local(&self, _: &SocketAddr) -> bool {
        true
    }
    fn deliver(&mut self, key: SrcKey, to: SocketAddr, index: u16, bytes: &[u8]) {
        self.out.push(Sent {
            from: SocketAddr::new(self.ip, key.port),
            to,
            index,
            bytes: bytes.to_vec(),
            in_process: key.in_process,
        });
    }
}

/// Everything `d` has to send: queued datagrams (in GSO runs when `gso`), sealed, in flush
/// order; datagrams for local peers sealed and returned too, with their transmits.
fn drain(d: &mut Dev, gso: bool) -> (Vec<Sent>, Vec<RoceTransmit>) {
    let mut local = Vec::new();
    let mut ts = Vec::new();
    let now = Instant::from_micros(1);
    while let Some(t) = d.ca.poll_transmit(now, d.tx.space(ROOM), &mut d.local_room) {
        ts.push(t);
        if t.local {
            assert!(d.ca.seal(&t, &mut d.local_room));
            local.push(Sent {
                from: SocketAddr::new(addr(d).ip(), t.src_port),
                to: t.to,
                index: 0,
                bytes: d.local_room[..t.datagram_len()].to_vec(),
                in_process: t.packet.in_process,
            });
        } else {
            d.ca.commit(&mut d.tx, &t, gso).unwrap();
        }
    }
    let mut out = Vec::new();
    d.tx.flush_or_deliver(
        |_| None,
        &mut Collect {
            ip: addr(d).ip(),
            out: &mut out,
        },
    );
    out.extend(local);
    (out, ts)
}

fn deliver(d: &mut Dev, sent: &[Sent]) -> Vec<Result<(), RoceDrop>> {
    let now = Instant::from_micros(2);
    sent.iter()
        .map(|s| {
            let inc = Incoming {
                in_process: s.in_process,
                ..Incoming::wire(s.from, s.index, &s.bytes)
            };
            d.ca.handle_datagram(now, &inc)
        })
        .collect()
}

/// Runs both devices until neither has anything to send.
fn settle(a: &mut Dev, b: &mut Dev, gso: bool) -> (Vec<WorkCompletion>, Vec<WorkCompletion>) {
    for _ in 0..100 {
        let (sa, _) = drain(a, gso);
        let (sb, _) = drain(b, gso);
        if sa.is_empty() && sb.is_empty() {
            break;
        }
        assert!(deliver(b, &sa).iter().all(Result::is_ok));
        assert!(deliver(a, &sb).iter().all(Result::is_ok));
    }
    let mut wa = Vec::new();
    while let Some(wc) = a.ca.hca_mut().poll_cq(a.cq) {
        wa.push(wc);
    }
    let mut wb = Vec::new();
    while let Some(wc) = b.ca.hca_mut().poll_cq(b.cq) {
        wb.push(wc);
    }
    (wa, wb)
}

fn rc_pair() -> (Dev, Dev, Qpn, Qpn) {
    let (mut a, mut b) = (dev("10.0.0.1:4791", 1), dev("10.0.0.2:4791", 2));
    let qa = create_qp(&mut a, QpType::Rc);
    let qb = create_qp(&mut b, QpType::Rc);
    let (ta, tb) = (addr(&a), addr(&b));
    rc_up(&mut a, qa, qb, tb);
    rc_up(&mut b, qb, qa, ta);
    (a, b, qa, qb)
}

#[test]
fn a_write_is_sealed_opened_and_lands() {
    let (mut a, mut b, qa, _) = rc_pair();
    for (i, byte) in
        a.ca.hca_mut()
            .memory_mut()
            .bytes_mut(RegionId(1))
            .unwrap()
            .iter_mut()
            .enumerate()
            .take(5000)
    {
        *byte = (i * 7) as u8;
    }
    let key = b.key;
    write(&mut a, qa, 1, 5000, key, BUF + 0x8_0000);
    let (wa, _) = settle(&mut a, &mut b, false);
    assert_eq!(wa.len(), 1);
    assert_eq!(wa[0].status, WcStatus::Success);
    let got = &b.ca.hca().memory().bytes(RegionId(1)).unwrap()[0x8_0000..0x8_0000 + 5000];
    let want = &a.ca.hca().memory().bytes(RegionId(1)).unwrap()[..5000];
    assert_eq!(got, want);
    assert_eq!(a.ca.drops().total() + b.ca.drops().total(), 0);
}

#[test]
fn bad_datagrams_are_dropped_before_the_engine_and_counted_by_reason() {
    let (mut a, mut b, qa, _) = rc_pair();
    let key = b.key;
    write(&mut a, qa, 1, 100, key, BUF);
    let (sent, _) = drain(&mut a, false);
    assert_eq!(sent.len(), 1);
    let good = sent[0].clone();
    let mut flipped = good.clone();
    flipped.bytes[20] ^= 0x04;
    let mut short = good.clone();
    short.bytes.truncate(15);
    let mut rd = good.clone();
    rd.bytes[0] = 0x40; // an RD opcode: softib has no RD
    let mut wrong_port = good.clone();
    wrong_port.from.set_port(wrong_port.from.port() ^ 1);
    let v6 = Sent {
        from: "[fd00::1]:4791".parse().unwrap(),
        ..good.clone()
    };
    let before = b.ca.hca().counters(1).unwrap().rcv_pkts;
    let got = deliver(&mut b, &[flipped, short, rd, wrong_port, v6]);
    assert_eq!(
        got,
        [
            Err(RoceDrop::BadIcrc),
            Err(RoceDrop::TooShort),
            Err(RoceDrop::UnsupportedOpcode),
            Err(RoceDrop::BadIcrc),
            Err(RoceDrop::AddressFamily),
        ]
    );
    // None of them reached the engine.
    assert_eq!(b.ca.hca().counters(1).unwrap().rcv_pkts, before);
    let d = b.ca.drops();
    assert_eq!(
        (
            d.get(RoceDrop::BadIcrc),
            d.get(RoceDrop::TooShort),
            d.get(RoceDrop::UnsupportedOpcode),
            d.get(RoceDrop::AddressFamily),
            d.total()
        ),
        (2, 1, 1, 1, 5)
    );
    assert_eq!(
        d.nonzero().map(|(r, _)| r.name()).collect::<Vec<_>>(),
        [
            "datagram_too_short",
            "address_family_mismatch",
            "unsupported_opcode",
            "bad_icrc"
        ]
    );
    // Every reason has its own name, found by its place.
    for (i, r) in RoceDrop::ALL.iter().enumerate() {
        assert_eq!(*r as usize, i);
        assert!(RoceDrop::ALL[..i].iter().all(|o| o.name() != r.name()));
    }
    // The intact one still goes through.
    assert_eq!(deliver(&mut b, &[good]), [Ok(())]);
    assert_eq!(b.ca.hca().counters(1).unwrap().rcv_pkts, before + 1);
}

#[test]
fn a_message_leaves_as_one_gso_run_each_segment_sealed_for_its_identification() {
    let (mut a, mut b, qa, _) = rc_pair();
    let key = b.key;
    // 16 KiB at MTU 1024: a FIRST, 14 MIDDLEs, a LAST, all 1024 bytes of payload. The FIRST
    // carries the RETH, so it is longer than the rest, and the MIDDLE after it (shorter, so it
    // can only end a run) ends its run: two runs, of 2 and 14.
    write(&mut a, qa, 1, 16 * 1024, key, BUF);
    let (sent, ts) = drain(&mut a, true);
    assert_eq!(sent.len(), 16);
    // The indices count up within each run; one source port, one destination.
    assert_eq!(
        sent.iter().map(|s| s.index).collect::<Vec<_>>(),
        (0..2).chain(0..14).collect::<Vec<u16>>()
    );
    assert!(sent
        .iter()
        .all(|s| s.from == sent[0].from && s.to == addr(&b)));
    // Each is what the wire must carry: valid for the Identification the kernel gives it, and
    // not for 0 (but the first).
    for s in &sent {
        let wire = framing::datagram(s.from, s.to, &s.bytes, s.index).unwrap();
        assert!(
            RoceV2Repr::parse(&wire).unwrap().icrc_ok,
            "segment {}",
            s.index
        );
        let alone = framing::datagram(s.from, s.to, &s.bytes, 0).unwrap();
        assert_eq!(RoceV2Repr::parse(&alone).unwrap().icrc_ok, s.index == 0);
    }
    assert!(ts.iter().all(|t| !t.local && !t.packet.in_process));
    // The receiver checks each for its index first and takes them all.
    assert!(deliver(&mut b, &sent).iter().all(Result::is_ok));
    let (wa, _) = settle(&mut a, &mut b, true);
    assert_eq!(wa.len(), 1);
    assert_eq!(wa[0].status, WcStatus::Success);
    // A receiver of softib senders only rejects a segment given the wrong index.
    b.ca.config.senders = Senders::Softib;
    let mut moved = sent[3].clone();
    moved.index = 4;
    assert_eq!(deliver(&mut b, &[moved.clone()]), [Err(RoceDrop::BadIcrc)]);
    // A device without the QP refuses it before its ICRC is computed, counting why.
    let mut other = dev("10.0.0.2:4791", 3);
    assert_eq!(deliver(&mut other, &[moved]), [Err(RoceDrop::Screened)]);
    assert_eq!(other.ca.drops().get(RoceDrop::Screened), 1);
    assert_eq!(other.ca.drops().get(RoceDrop::BadIcrc), 0);
    assert_eq!(
        other
            .ca
            .hca()
            .drops()
            .get(softib_engine::counters::DropReason::UnknownQp),
        1
    );
}

#[test]
fn a_qp_whose_path_leads_to_a_local_peer_goes_in_process_from_rtr() {
    let (mut a, mut b) = (dev("10.0.0.1:4791", 1), dev("10.0.0.2:4791", 2));
    let (ta, tb) = (addr(&a), addr(&b));
    a.ca.set_local_peers([ta, tb]);
    b.ca.set_local_peers([ta, tb]);
    a.ca.set_trust_local(true);
    let qa = create_qp(&mut a, QpType::Rc);
    let qb = create_qp(&mut b, QpType::Rc);
    let other = create_qp(&mut a, QpType::Rc);
    rc_up(&mut a, qa, qb, tb);
    rc_up(&mut b, qb, qa, ta);
    rc_up(
        &mut a,
        other,
        Qpn::new(0x99),
        "10.0.0.9:4791".parse().unwrap(),
    );
    let key = b.key;
    // 64 KiB to the local peer: two in-process segments, built in the local room, the payload
    // left in memory; the same to a remote peer: 64 MTU packets on the wire.
    write(&mut a, qa, 1, 64 * 1024, key, BUF);
    write(&mut a, other, 2, 64 * 1024, key, BUF);
    let now = Instant::from_micros(1);
    let mut to_local = Vec::new();
    let mut to_wire = 0;
    while let Some(t) = a.ca.poll_transmit(now, a.tx.space(ROOM), &mut a.local_room) {
        if t.local {
            to_local.push(t);
        } else {
            assert!(!t.packet.in_process && t.packet.payload.is_none());
            assert_eq!(t.packet.src_qpn, other);
            to_wire += 1;
        }
    }
    assert_eq!(to_wire, 64);
    assert_eq!(to_local.len(), 2);
    for t in &to_local {
        assert!(t.packet.in_process);
        let p = t.packet.payload.expect("left in memory for the local peer");
        assert!(p.len as usize > 1024);
        assert_eq!(t.to, tb);
    }
    // Nothing trusted between: the same packets come out whole, to be sealed.
    a.ca.set_trust_local(false);
    write(&mut a, qa, 3, 64 * 1024, key, BUF);
    let (sent, ts) = drain(&mut a, false);
    assert_eq!(sent.len(), 2);
    assert!(ts.iter().all(|t| t.local && t.packet.payload.is_none()));
    assert_eq!(
        ts.iter().map(|t| t.packet.len).sum::<usize>(),
        2 * 12 + 16 + 64 * 1024
    );
    // B's responses to A are in-process too: its QP was decided at its RTR.
    assert!(deliver(&mut b, &sent).iter().all(Result::is_ok));
    let (_, tsb) = drain(&mut b, false);
    assert!(!tsb.is_empty() && tsb.iter().all(|t| t.local && t.packet.in_process));
    // The peers change: the QP is decided again, from its path.
    a.ca.set_local_peers([ta]);
    write(&mut a, qa, 4, 64 * 1024, key, BUF);
    let (sent, ts) = drain(&mut a, false);
    assert_eq!(sent.len(), 64);
    assert!(ts.iter().all(|t| !t.local && !t.packet.in_process));
}

#[test]
fn packets_leave_from_the_source_port_rxe_uses_for_their_qp() {
    let (mut a, mut b, qa, qb) = rc_pair();
    let key = b.key;
    write(&mut a, qa, 1, 10, key, BUF);
    let (_, ts) = drain(&mut a, false);
    assert_eq!(ts.len(), 1);
    assert_eq!(
        ts[0].src_port,
        rxe_source_port(false, 0, qa.value(), qb.value())
    );
    assert_eq!((ts[0].packet.src_qpn, ts[0].packet.dest_qpn), (qa, qb));
    // UD: from the port of the sending QP alone, whatever the destination QP.
    let ua = create_qp(&mut a, QpType::Ud);
    let ub = create_qp(&mut b, QpType::Ud);
    ud_up(&mut a, ua);
    ud_up(&mut b, ub);
    let (pd, lkey) = (a.pd, a.key);
    let ah = a.ca.hca_mut().create_ah(pd, av_to(addr(&b).ip())).unwrap();
    let bkey = b.key;
    b.ca.hca_mut()
        .post_recv(
            ub,
            RecvWr {
                wr_id: 5,
                sg_list: vec![Sge {
                    addr: BUF,
                    length: 2048,
                    lkey: bkey,
                }],
            },
        )
        .unwrap();
    ud_send(&mut a, ua, ah, ub, lkey);
    let (sent, ts) = drain(&mut a, false);
    assert_eq!(ts[0].src_port, rxe_source_port(true, 0, ua.value(), 0));
    assert_eq!(sent[0].from.port(), ts[0].src_port);
    // The receiver fills the UD GRH area from the datagram's addresses (IPv4: the header in
    // the second half).
    assert!(deliver(&mut b, &sent).iter().all(Result::is_ok));
    let wc = b.ca.hca_mut().poll_cq(b.cq).unwrap();
    assert_eq!(
        (wc.status, wc.byte_len, wc.grh),
        (WcStatus::Success, 57, true)
    );
    let area = &b.ca.hca().memory().bytes(RegionId(1)).unwrap()[..40];
    assert_eq!(area[20], 0x45);
    assert_eq!(&area[32..36], &[10, 0, 0, 1]);
}

#[test]
fn ud_datagrams_to_a_destination_declared_local_come_out_local() {
    let (mut a, b, _, _) = rc_pair();
    let ua = create_qp(&mut a, QpType::Ud);
    ud_up(&mut a, ua);
    let (pd, lkey) = (a.pd, a.key);
    let to = addr(&b).ip();
    let ah = a.ca.hca_mut().create_ah(pd, av_to(to)).unwrap();
    let send = |a: &mut Dev, remote_qpn: Qpn| {
        ud_send(a, ua, ah, remote_qpn, lkey);
        let (_, ts) = drain(a, false);
        assert_eq!(ts.len(), 1);
        ts[0].local
    };
    let (near, far) = (Qpn::new(0x2001), Qpn::new(0x3001));
    a.ca.set_ud_local(to, near, true);
    assert!(send(&mut a, near), "declared local");
    assert!(!send(&mut a, far), "another QP at the same address");
    a.ca.set_ud_local(to, near, false);
    assert!(!send(&mut a, near), "no longer local");
    a.ca.set_ud_local(to, near, true);
    a.ca.clear_ud_local();
    assert!(!send(&mut a, near), "forgotten");
}

#[test]
fn a_packet_built_in_the_wrong_room_is_moved_and_one_without_a_grh_is_counted() {
    let (mut a, b, qa, _) = rc_pair();
    let ta = addr(&a);
    let tb = addr(&b);
    let key = b.key;
    // The first packet to a now-local peer is built in the wire room (the previous went
    // there) and must come out in the local room.
    a.ca.set_local_peers([ta, tb]);
    write(&mut a, qa, 1, 100, key, BUF);
    let now = Instant::from_micros(1);
    let t =
        a.ca.poll_transmit(now, a.tx.space(ROOM), &mut a.local_room)
            .unwrap();
    assert!(t.local);
    let in_local = a.local_room[..t.packet.len].to_vec();
    let bth = softib_wire::bth::Packet::new_checked(&in_local[..]).unwrap();
    assert_eq!(bth.dest_qpn(), t.packet.dest_qpn);
    assert_eq!(bth.opcode(), t.packet.opcode);
    // A path without a GRH goes nowhere on RoCE.
    let q = create_qp(&mut a, QpType::Rc);
    let no_grh = AddressVector {
        port_num: 1,
        ..AddressVector::default()
    };
    rc_up_on(&mut a.ca, q, Qpn::new(5), no_grh);
    write(&mut a, q, 2, 10, key, BUF);
    let (sent, _) = drain(&mut a, false);
    assert!(sent.is_empty());
    assert_eq!(a.ca.drops().get(RoceDrop::NoGrh), 1);
    assert!(b.ca.drops().total() == 0);
}
