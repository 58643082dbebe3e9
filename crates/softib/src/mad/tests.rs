//! The blocking agent over a fake transport: what a request does when the fabric answers at
//! once, late, twice, wrongly or never.
#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;

use softib_wire::mad::sa::{self, RmppHeader};

use super::*;

/// What arrives in answer to the n-th send (counting from 0).
type Script = Box<dyn FnMut(usize, &[u8; MAD_LEN]) -> Vec<Mad>>;

/// A fabric that answers each send as its script says.
struct Fake {
    sends: Vec<(MadDest, [u8; MAD_LEN])>,
    inbox: VecDeque<Mad>,
    script: Script,
    fail_sends: bool,
}

impl Fake {
    fn new(script: impl FnMut(usize, &[u8; MAD_LEN]) -> Vec<Mad> + 'static) -> Fake {
        Fake {
            sends: Vec::new(),
            inbox: VecDeque::new(),
            script: Box::new(script),
            fail_sends: false,
        }
    }

    fn tids(&self) -> Vec<u64> {
        self.sends
            .iter()
            .map(|(_, m)| mad::Packet::new_unchecked(&m[..]).tid())
            .collect()
    }
}

impl MadTransport for Fake {
    fn send(
        &mut self,
        _dev: u32,
        _port: u8,
        to: &MadDest,
        mad: &[u8; MAD_LEN],
    ) -> crate::Result<()> {
        if self.fail_sends {
            return Err(crate::Error::Unexpected("the daemon went away"));
        }
        let n = self.sends.len();
        self.sends.push((to.clone(), *mad));
        let answers = (self.script)(n, mad);
        self.inbox.extend(answers);
        Ok(())
    }

    fn receive(&mut self, max: u32, wait: Duration) -> crate::Result<Vec<Mad>> {
        if self.inbox.is_empty() {
            // As the daemon does: nothing to give, so the wait is spent.
            std::thread::sleep(wait);
        }
        let n = self.inbox.len().min(max as usize);
        Ok(self.inbox.drain(..n).collect())
    }
}

fn agent() -> MadAgent {
    MadAgent::new(0, 1, 0x5eed).with_policy(RetryPolicy {
        timeout: Duration::from_millis(20),
        tries: 3,
    })
}

fn gsi(b: [u8; MAD_LEN]) -> Mad {
    Mad {
        dev: 0,
        port: 1,
        qp: MadQp::Gsi,
        slid: Lid(1),
        src_qpn: Qpn::new(1),
        sgid: None,
        mad: b.to_vec(),
    }
}

/// The SMA's GetResp to `request`, with `status` and NodeInfo-ish data.
fn sma_answer(request: &[u8; MAD_LEN], status: u16) -> Mad {
    let r = smp::Repr::parse(&smp::Packet::new_unchecked(&request[..])).unwrap();
    let mut b = [0u8; MAD_LEN];
    r.response(status, [0x42; 64])
        .emit(&mut smp::Packet::new_unchecked(&mut b[..]));
    Mad {
        qp: MadQp::Smi,
        slid: Lid(5),
        src_qpn: Qpn::new(0),
        ..gsi(b)
    }
}

/// SubnGet(NodeInfo) of LID 5.
fn node_info(a: &mut MadAgent, f: &mut Fake) -> Result<smp::Repr, MadError> {
    a.smp_get(f, &SmpDest::Lid(Lid(5)), AttrId::NODE_INFO, 0)
}

fn with_tid(m: &[u8; MAD_LEN], tid: u64) -> [u8; MAD_LEN] {
    let mut b = *m;
    mad::Packet::new_unchecked(&mut b[..]).set_tid(tid);
    b
}

#[test]
fn an_smp_answered_at_once_is_parsed() {
    let mut f = Fake::new(|_, req| vec![sma_answer(req, 0)]);
    let mut a = agent();
    let r = node_info(&mut a, &mut f).unwrap();
    assert_eq!(r.data, [0x42; 64]);
    assert_eq!(f.sends.len(), 1);
    assert_eq!(f.sends[0].0, MadDest::Smp(SmpDest::Lid(Lid(5))));
    assert_eq!(f.tids()[0] >> 32, 0x5eed);
}

#[test]
fn a_lost_request_is_sent_again_with_the_same_tid() {
    // The first two sends are lost; the third is answered.
    let mut f = Fake::new(|n, req| {
        if n < 2 {
            vec![]
        } else {
            vec![sma_answer(req, 0)]
        }
    });
    let mut a = agent();
    a.smp_get(&mut f, &SmpDest::Route(vec![1, 3]), AttrId::NODE_INFO, 0)
        .unwrap();
    let tids = f.tids();
    assert_eq!(tids.len(), 3);
    assert!(tids.iter().all(|&t| t == tids[0]), "{tids:x?}");
    assert_eq!(a.counters().resends, 2);
    // The next request is a new transaction.
    node_info(&mut a, &mut f).unwrap();
    assert_ne!(f.tids()[3], tids[0]);
}

#[test]
fn no_answer_gives_up_after_the_last_try_naming_what_and_whom() {
    let mut f = Fake::new(|_, _| vec![]);
    let mut a = agent();
    let e = a
        .smp_get(&mut f, &SmpDest::Route(vec![1, 3]), AttrId::PORT_INFO, 2)
        .unwrap_err();
    assert_eq!(f.sends.len(), 3);
    assert_eq!(
        e.to_string(),
        "no answer to SubnGet(PortInfo, modifier 2) from DR path [1, 3] after 3 tries of 20ms \
         (is the port Active and the LID assigned?)"
    );
    let mut f = Fake::new(|_, _| vec![]);
    let e = a
        .sa_query(
            &mut f,
            Lid(1),
            Method::Set,
            AttrId::MC_MEMBER_RECORD,
            0,
            &[],
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "no answer to SubnAdmSet(MCMemberRecord) from LID 1 after 3 tries of 20ms (is an SM \
         running?)"
    );
}

#[test]
fn strays_wait_for_recv_and_duplicates_are_dropped() {
    let mut f = Fake::new(|_, req| {
        let tid = mad::Packet::new_unchecked(&req[..]).tid();
        let stray = sma_answer(&with_tid(req, tid ^ 0xff), 0);
        let answer = sma_answer(req, 0);
        vec![stray, answer.clone(), answer]
    });
    let mut a = agent();
    node_info(&mut a, &mut f).unwrap();
    let rest = a.recv(&mut f, Duration::ZERO).unwrap();
    assert_eq!(rest.len(), 1, "the stray, not the duplicate");
    assert_ne!(
        mad::Packet::new_unchecked(&rest[0].mad[..]).tid(),
        f.tids()[0]
    );
    let c = a.counters();
    assert_eq!((c.strays, c.duplicates), (1, 1));
}

#[test]
fn an_error_status_names_the_responder_and_the_request() {
    let mut f = Fake::new(|_, req| vec![sma_answer(req, 0x001c)]);
    let mut a = agent();
    let e = node_info(&mut a, &mut f).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the SMA at LID 5 answered SubnGet(NodeInfo) with MAD status 0x001c"
    );
    // The D bit of a directed-route answer is not an error.
    let mut f = Fake::new(|_, req| vec![sma_answer(req, 0)]);
    a.smp_get(&mut f, &SmpDest::Route(vec![]), AttrId::NODE_INFO, 0)
        .unwrap();
}

#[test]
fn an_sa_table_in_segments_out_of_order_is_whole() {
    // Three segments of 40-byte records: 5 records each in the first two, 2 in the last.
    let mut f = Fake::new(|_, req| {
        let q = sa::Repr::parse(&sa::Packet::new_unchecked(&req[..])).unwrap();
        let seg = |n: u32| {
            let data = [n as u8; sa::DATA_LEN];
            let mut r = q.response(0, 40, 12, &data);
            r.rmpp = RmppHeader::data_segment(n, 3, if n == 1 { 3 * 20 + 12 * 40 } else { 0 });
            let mut b = [0u8; MAD_LEN];
            r.emit(&mut sa::Packet::new_unchecked(&mut b[..]));
            gsi(b)
        };
        vec![seg(2), seg(3), seg(2), seg(1)]
    });
    let mut a = agent();
    let r = a
        .sa_query(
            &mut f,
            Lid(1),
            Method::GetTable,
            AttrId::NODE_RECORD,
            0,
            &[],
        )
        .unwrap();
    assert_eq!(r.segments().count(), 3);
    let table = r.table().unwrap();
    let firsts: Vec<u8> = table.records().map(|rec| rec[0]).collect();
    assert_eq!(firsts, vec![1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3]);
    assert_eq!(f.sends[0].0, MadDest::gsi(Lid(1)));
}

#[test]
fn a_failed_send_is_reported_and_forgotten() {
    let mut f = Fake::new(|_, req| vec![sma_answer(req, 0)]);
    f.fail_sends = true;
    let mut a = agent();
    let e = node_info(&mut a, &mut f).unwrap_err();
    assert!(matches!(e, MadError::Transport(_)), "{e}");
    f.fail_sends = false;
    node_info(&mut a, &mut f).unwrap();
    assert_eq!(a.tx.outstanding(), 0);
}

#[test]
fn an_answer_goes_back_as_its_segments() {
    let mut f = Fake::new(|_, _| vec![]);
    let mut a = agent();
    let to = Mad {
        slid: Lid(9),
        src_qpn: Qpn::new(1),
        ..gsi([0; MAD_LEN])
    };
    let mut two = vec![1u8; MAD_LEN];
    two.extend([2u8; MAD_LEN]);
    a.respond(&mut f, &to, &two).unwrap();
    assert_eq!(f.sends.len(), 2);
    assert_eq!(f.sends[1].1[0], 2);
    assert!(f.sends.iter().all(|(d, _)| *d == MadDest::gsi(Lid(9))));
    assert!(a.respond(&mut f, &to, &[0; 100]).is_err());
    assert!(a.respond(&mut f, &to, &[]).is_err());
}
