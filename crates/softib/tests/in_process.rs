//! RC between two devices of one daemon (`rxe0` and `rxe1`): the daemon marks such QPs
//! in-process, so their SENDs, WRITEs and READ responses go in 60 KiB segments and payloads
//! are copied once, from the sender's buffer straight into the receiver's. Every byte is
//! checked, for messages of several segments with odd lengths, from shared buffers (handed
//! over as they lie) and from memory of the process itself (which the daemon reaches by system
//! calls, so it carries those payloads whole), and through faults (which see every packet
//! whole and sealed); and a READ that is its QP's first packet, sized before the daemon knew
//! where the QP leads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use softib::{CompletionQueue, QpType, WcOpcode, WcStatus};

mod common;
use common::{all, connect, loopback_pair};

const LEN: usize = 1 << 20;

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2] ^ seed)
        .collect()
}

fn done(cq: &CompletionQueue, wr_id: u64, opcode: WcOpcode) -> u32 {
    let wc = cq.wait(Duration::from_secs(10)).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (wr_id, WcStatus::Success, opcode)
    );
    wc.byte_len
}

#[test]
fn rc_between_devices_of_one_daemon_moves_every_byte() {
    let (hca, a, b) = loopback_pair();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(LEN).unwrap(), b.alloc_buffer(LEN).unwrap());
    let mr_a = pd_a.register(&buf_a, all()).unwrap();
    let mr_b = pd_b.register(&buf_b, all()).unwrap();
    let qp_a = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 16).unwrap();
    let qp_b = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 16).unwrap();
    connect(&qp_a, &qp_b);

    // Writes `data` from `from` in A's buffer to `to` in B's, and checks B's bytes.
    let write_and_check = |from: usize, to: usize, data: &[u8], wr_id: u64| {
        buf_a.write(from, data);
        qp_a.write(
            &mr_a,
            from,
            data.len(),
            mr_b.addr() + to as u64,
            mr_b.rkey(),
            wr_id,
        )
        .unwrap();
        done(&cq_a, wr_id, WcOpcode::RdmaWrite);
        let mut got = vec![0u8; data.len()];
        buf_b.read(to, &mut got);
        assert!(got == data, "WRITE of {} bytes (WR {wr_id})", data.len());
    };

    // Reads `data`, put at `from` in B's buffer, by A into `to` in its own, and checks it.
    let read_and_check = |from: usize, to: usize, data: &[u8], wr_id: u64| {
        buf_b.write(from, data);
        qp_a.read(
            &mr_a,
            to,
            data.len(),
            mr_b.addr() + from as u64,
            mr_b.rkey(),
            wr_id,
        )
        .unwrap();
        done(&cq_a, wr_id, WcOpcode::RdmaRead);
        let mut got = vec![0u8; data.len()];
        buf_a.read(to, &mut got);
        assert!(got == data, "READ of {} bytes (WR {wr_id})", data.len());
    };

    // A READ that is B's very first packet starts before the daemon knows where B's QP
    // leads: it is sized for the path MTU, and must be answered so.
    let first = pattern(0xC0, 300_001);
    buf_a.write(LEN / 8, &first);
    qp_b.read(
        &mr_b,
        3,
        first.len(),
        mr_a.addr() + (LEN / 8) as u64,
        mr_a.rkey(),
        1,
    )
    .unwrap();
    done(&cq_b, 1, WcOpcode::RdmaRead);
    let mut got = vec![0u8; first.len()];
    buf_b.read(3, &mut got);
    assert!(got == first, "READ that started before the mark");

    // The first message tells the daemon where the QPs lead; later ones go in-process.
    for (round, len) in [
        (0u8, 100usize),
        (1, 300_001),
        (2, 61_440),
        (3, 61_441),
        (4, 5),
    ] {
        // WRITE from A into B at odd offsets.
        write_and_check(3, 7, &pattern(round, len), 10 + u64::from(round));

        // SEND from B into a receive of A's.
        let data = pattern(round ^ 0x40, len);
        buf_b.write(LEN / 2, &data);
        qp_a.recv(&mr_a, LEN / 2 + 1, len + 9, 20 + u64::from(round))
            .unwrap();
        qp_b.send(&mr_b, LEN / 2, len, None, 30 + u64::from(round))
            .unwrap();
        done(&cq_b, 30 + u64::from(round), WcOpcode::Send);
        assert_eq!(
            done(&cq_a, 20 + u64::from(round), WcOpcode::Recv),
            len as u32
        );
        let mut got = vec![0u8; len];
        buf_a.read(LEN / 2 + 1, &mut got);
        assert!(got == data, "SEND of {len} bytes (round {round})");

        // READ by A of what B holds.
        let data = pattern(round ^ 0x80, len);
        read_and_check(LEN / 4, LEN / 4 + 5, &data, 40 + u64::from(round));
    }

    // Faults on both devices: every packet is now carried whole and sealed (60 KiB segments
    // through loss, duplication and reordering), and still lands exactly.
    let mut ctl = softib::Context::open_at(hca.dir()).unwrap();
    let spec = softib::FaultSpec::parse(&["loss=5%,dup=5%,reorder=5%,seed=11"]).unwrap();
    for name in ["rxe0", "rxe1"] {
        let i = ctl.device_index(name).unwrap();
        ctl.set_faults(i, 1, spec).unwrap();
    }
    for round in 0..12u8 {
        let len = 250_000 + usize::from(round) * 7;
        write_and_check(0, 1, &pattern(round ^ 0x20, len), 70 + u64::from(round));
        // And READs, whose responses come in large segments through the same faults.
        let data = pattern(round ^ 0x60, len);
        read_and_check(LEN / 2, LEN / 2 + 3, &data, 90 + u64::from(round));
    }
    let mut hit = softib::FaultStats::default();
    for name in ["rxe0", "rxe1"] {
        let i = ctl.device_index(name).unwrap();
        for (_, _, st) in ctl.faults(i).unwrap() {
            hit.lost += st.lost;
            hit.duplicated += st.duplicated;
            hit.reordered += st.reordered;
        }
        ctl.set_faults(i, 1, softib::FaultSpec::default()).unwrap();
    }
    eprintln!("faults while in-process: {hit:?}");
    assert!(hit.lost + hit.duplicated + hit.reordered > 0, "{hit:?}");

    // Memory of this process itself, on both sides of a WRITE and a READ.
    let len = 200_003;
    let mut own = pattern(9, len);
    let expect = own.clone();
    {
        let mr_own = pd_a.register_slice(&mut own, all()).unwrap();
        qp_a.write(&mr_own, 0, len, mr_b.addr() + 11, mr_b.rkey(), 50)
            .unwrap();
        done(&cq_a, 50, WcOpcode::RdmaWrite);
    }
    let mut got = vec![0u8; len];
    buf_b.read(11, &mut got);
    assert!(got == expect, "WRITE from process memory");
    let mut sink = vec![0u8; len];
    {
        let mr_sink = pd_b.register_slice(&mut sink, all()).unwrap();
        // B reads from A's shared buffer into its own process memory.
        buf_a.write(100, &expect);
        qp_b.read(&mr_sink, 0, len, mr_a.addr() + 100, mr_a.rkey(), 60)
            .unwrap();
        done(&cq_b, 60, WcOpcode::RdmaRead);
    }
    assert!(sink == expect, "READ into process memory");
}
