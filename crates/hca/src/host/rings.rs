//! The shared-memory rings between a client and the daemon (`softib_net::ring::Ring` in a
//! memfd both map): the submission ring, whose entries (`proto::Submit`) the daemon executes
//! every turn as if they were `PostSend`/`PostRecv` requests, and a completion ring per CQ,
//! into which the daemon moves the CQ's completions so that the client polls without a
//! request; and on the process data path a hand-on ring per steered device, through which a
//! client's engine hands the daemon the datagrams steered to it that are not its own. A
//! client that scribbles on a ring is dropped (`Client::broken`), never followed.

use std::collections::BTreeMap;

use softib_engine::{CqHandle, Hca};
use softib_net::ring::{Ring, RingError};
use softib_proto as proto;

use super::client::Client;
use super::handlers::post::{post_owned, Post};
use super::host_rt::Host;
use crate::device::Device;
use crate::shm_memory::ShmMemory;

/// Tells the client's submission ring whether the loop is polling it (then the client need
/// not ring the doorbell after a post); when it is not, returns whether the ring holds posts
/// already. A broken ring is left to the turn that drains it.
pub(super) fn set_polling(c: &Client, polling: bool) -> bool {
    match &c.submit {
        Some((ring, _)) => {
            ring.set_polling(polling).is_ok() && !polling && !ring.is_empty().unwrap_or(true)
        }
        None => false,
    }
}

/// Executes the entries waiting in `c`'s submission ring, in order. An entry the engine
/// refuses (the library checked it, so this is rare) loses its WR: counted, and logged the
/// first time.
pub(super) fn drain_submit(h: &mut Host, c: &mut Client) {
    let Some((ring, _)) = &c.submit else {
        return;
    };
    let mut buf = Vec::new();
    loop {
        match ring.pop(&mut buf) {
            Ok(true) => {}
            Ok(false) => break,
            Err(_) => {
                c.broken = true;
                return;
            }
        }
        let Ok(op) = proto::Submit::decode(&buf) else {
            c.broken = true;
            return;
        };
        let (dev, post) = match op {
            proto::Submit::Send { dev, qpn, wr } => (dev, Post::Send(qpn, wr)),
            proto::Submit::Recv { dev, qpn, wr } => (dev, Post::Recv(qpn, wr)),
        };
        let qpn = post.target();
        let result = match h.devs.get_mut(dev as usize).map(Device::hca_mut) {
            Some(hca) => post_owned(hca, &c.owned, dev, post),
            None => Err(format!("no device {dev}")),
        };
        if let Err(e) = result {
            c.submit_errors += 1;
            if c.submit_errors == 1 {
                eprintln!(
                    "softibd[{}]: {} (pid {}): a work request from its submission ring \
                     for QP {qpn} was refused: {e}",
                    h.name, c.program, c.pid
                );
            }
        }
    }
}

/// Moves completions from the engines' CQs into the clients' completion rings (as far as
/// the rings have room; the rest waits in the engine's CQ, which overflows as a CQ does).
/// A client that sleeps waiting for them is woken, once a turn.
pub(super) fn feed_rings(clients: &mut BTreeMap<u64, Client>, devs: &mut [Device]) {
    for c in clients.values_mut() {
        let mut wake = false;
        for (&(dev, cq), ring) in &c.cq_rings {
            let Some(hca) = devs.get_mut(dev as usize).map(Device::hca_mut) else {
                continue;
            };
            match feed_ring(hca, cq, ring) {
                Ok(fed) => {
                    wake |= fed && c.wakeup.is_some() && ring.wants_wakeup() == Ok(true);
                }
                Err(_) => {
                    c.broken = true;
                    break;
                }
            }
        }
        if let (true, Some(fd)) = (wake, &c.wakeup) {
            // An eventfd adds to its counter; a full counter is readable already.
            let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
        }
    }
}

/// Moves `cq`'s completions into `ring` while it has room; whether it moved any.
pub(super) fn feed_ring(hca: &mut Hca<ShmMemory>, cq: u32, ring: &Ring) -> Result<bool, RingError> {
    if hca.cq_len(CqHandle(cq)) == 0 {
        return Ok(false);
    }
    let room = ring.capacity().saturating_sub(ring.len()?);
    let mut buf = [0u8; proto::COMPLETION_ENTRY_MAX];
    let mut fed = false;
    for _ in 0..room {
        let Some(wc) = hca.poll_cq(CqHandle(cq)) else {
            break;
        };
        // A completion that does not fit a slot (none does) is lost loudly, not silently.
        let Some(bytes) = proto::encode_completion(&wc, &mut buf) else {
            eprintln!("softibd: a completion did not fit a ring slot: {wc:?}");
            continue;
        };
        if !ring.push(bytes)? {
            break;
        }
        fed = true;
    }
    Ok(fed)
}

/// Delivers what the clients' engines handed on: to the daemon's own engine when no client
/// owns the datagram's DestQP (its QPs, QP0/QP1, multicast, quarantined QPNs — the engine
/// counts what it cannot deliver), else to the owner ([`forward_to_owners`]).
pub(super) fn drain_hand_on(
    h: &mut Host,
    clients: &mut BTreeMap<u64, Client>,
    now: softib_engine::Instant,
) {
    let mut buf = Vec::new();
    for c in clients.values_mut() {
        for (&dev, ring) in &c.hand_on {
            let Some(d) = h.devs.get_mut(dev as usize) else {
                continue;
            };
            loop {
                let index = match ring.pop(&mut buf) {
                    Ok(Some(tag)) => tag as u16,
                    Ok(None) => break,
                    Err(_) => {
                        c.broken = true;
                        break;
                    }
                };
                let Some((from, data)) = proto::parse_hand_on(&buf) else {
                    c.broken = true;
                    break;
                };
                d.take_handed_on(now, c.id, from, index, data);
            }
        }
    }
}

/// Puts the datagrams that reached the daemon for another process's engine (steered while
/// the group changed: handed on, or received on the device's own socket) into that engine's
/// inbound ring and rings its doorbell; what an engine cannot take (no event channel, a full
/// ring) is lost and counted (`handed_on_lost`), as on a congested wire.
pub(super) fn forward_to_owners(h: &mut Host, clients: &mut BTreeMap<u64, Client>) {
    for (dev, d) in h.devs.iter_mut().enumerate() {
        let forwards = d.take_forwards();
        let mut woken = Vec::new();
        for f in forwards {
            let ch = clients
                .get(&f.owner)
                .and_then(|c| c.event_channels.get(&(dev as u32)));
            let from = proto::hand_on_addr(f.from);
            let pushed = ch.is_some_and(|ch| {
                matches!(
                    ch.inbound.push(u32::from(f.index), &[&from, &f.data]),
                    Ok(true)
                )
            });
            if !pushed {
                d.forward_lost();
            } else if !woken.contains(&f.owner) {
                woken.push(f.owner);
            }
        }
        for owner in woken {
            if let Some(ch) = clients
                .get(&owner)
                .and_then(|c| c.event_channels.get(&(dev as u32)))
            {
                let _ = rustix::io::write(&ch.bell, &1u64.to_ne_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant as StdInstant;

    use softib_net::shm::SharedRegion;
    use softib_proto::{Request, Response, CQ_RING_SLOT_LEN};

    use super::*;
    use crate::host::testing::TestHost;

    #[test]
    fn a_full_ring_leaves_the_rest_in_the_cq_and_a_scribbled_ring_breaks_its_client() {
        let mut t = TestHost::new();
        let a = t.client();
        let (_, cq, qpn) = t.qp(a);
        let ring = Ring::create("softib-unit-cq", 2, CQ_RING_SLOT_LEN).unwrap();
        let fd = ring.fd().try_clone_to_owned().unwrap();
        let r = t.call_with(
            a,
            vec![fd],
            Request::AttachCqRing {
                dev: 0,
                cq,
                slots: 2,
            },
        );
        assert!(matches!(r, Some(Response::Ok)), "{r:?}");
        for wr_id in 0..3 {
            t.recv(a, qpn, wr_id);
        }
        t.fail_qp(a, qpn);
        t.deliver(StdInstant::now());
        assert_eq!((ring.len(), t.hca().cq_len(CqHandle(cq))), (Ok(2), 1));
        let mut entry = Vec::new();
        assert!(ring.pop(&mut entry).unwrap());
        t.deliver(StdInstant::now());
        assert_eq!((ring.len(), t.hca().cq_len(CqHandle(cq))), (Ok(2), 0));
        // In order, none lost.
        let mut ids = vec![proto::decode_completion(&entry).unwrap().wr_id];
        while ring.pop(&mut entry).unwrap() {
            ids.push(proto::decode_completion(&entry).unwrap().wr_id);
        }
        assert_eq!(ids, [0, 1, 2]);
        assert!(!t.clients[&a].broken);
        // The client claims to have consumed more than was ever produced.
        let raw = SharedRegion::from_fd(
            ring.fd().try_clone_to_owned().unwrap(),
            Ring::bytes_for(2, CQ_RING_SLOT_LEN),
        )
        .unwrap();
        raw.write(64, &1000u64.to_ne_bytes()).unwrap();
        // A receive posted to a QP in error completes at once, for the ring.
        t.recv(a, qpn, 9);
        assert_eq!(t.hca().cq_len(CqHandle(cq)), 1);
        t.deliver(StdInstant::now());
        assert!(t.clients[&a].broken);
    }
}
