//! The process data path: what the daemon does for a client whose own engine holds its QPs —
//! QPN blocks and memory keys unique on the device, the objects that engine made (so that
//! `softib res` shows them), and the device's steering group the client's socket joins.
//! Reclamation and the quarantine of what a client held are `client::reclaim`'s.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use softib_engine::QPN_BLOCK;
use softib_proto::{ErrorKind, Event, ProcessObject, Response};
use softib_wire::{Gid, Qpn};

use softib_net::ring::PacketRing;

use super::{passed_fd, refused, Handled};
use crate::device::Device;
use crate::host::client::{
    Client, MAX_AHS_PER_CLIENT, MAX_CQS_PER_CLIENT, MAX_MRS_PER_CLIENT, MAX_PDS_PER_CLIENT,
    MAX_QPS_PER_CLIENT,
};
use crate::host::host_rt::Host;
use crate::host::peer_rings::{end_fds, EngineId, EventChannel};
use crate::host::quarantine::Held;

/// The most QPN blocks a client holds on a device: its QP limit's worth.
const MAX_BLOCKS_PER_CLIENT: usize = MAX_QPS_PER_CLIENT / QPN_BLOCK as usize;

/// `AllocQpnBlock`: a block the daemon's engine sets aside, steered to the client's socket
/// once it joined.
pub(super) fn alloc_qpn_block(h: &mut Host, c: &mut Client, dev: u32) -> Handled {
    let d = h.dev(dev)?;
    if c.owned.qpn_blocks.len() >= MAX_BLOCKS_PER_CLIENT {
        return Err(refused(
            ErrorKind::Exhausted,
            format!(
                "a client may hold at most {MAX_BLOCKS_PER_CLIENT} QPN blocks \
                 ({MAX_QPS_PER_CLIENT} QPs)"
            ),
        ));
    }
    let first = d.hca_mut().reserve_qpn_block()?;
    if let Some((group, socket)) = d.steering() {
        if let Err(e) = group.add_block(c.id, first.value(), socket) {
            d.hca_mut().release_qpn_block(first);
            return Err(refused(
                ErrorKind::Exhausted,
                format!("cannot steer the new QPN block to the client: {e}"),
            ));
        }
    }
    c.owned.qpn_blocks.insert((dev, first));
    Ok(Response::QpnBlock {
        first,
        count: QPN_BLOCK,
    })
}

/// `AllocMrKey`: a key the daemon's engine sets aside; counted as one of the client's MRs.
pub(super) fn alloc_mr_key(h: &mut Host, c: &mut Client, dev: u32) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    if c.owned.mrs.len() + c.owned.keys.len() >= MAX_MRS_PER_CLIENT {
        return Err(refused(
            ErrorKind::Exhausted,
            format!("a client may register at most {MAX_MRS_PER_CLIENT} MRs"),
        ));
    }
    let key = hca.reserve_key()?;
    c.owned.keys.insert((dev, key));
    Ok(Response::MrKey(key))
}

/// `FreeMrKey`: the region is gone; its key is quarantined before the daemon hands it out
/// again.
pub(super) fn free_mr_key(h: &mut Host, c: &mut Client, dev: u32, key: u32) -> Handled {
    h.dev(dev)?;
    if !c.owned.keys.remove(&(dev, key)) {
        return Err(refused(
            ErrorKind::NotFound,
            format!("no memory key {key:#x} on device {dev} belongs to this client"),
        ));
    }
    h.quarantine
        .hold(std::time::Instant::now(), dev, Held::Key(key));
    Ok(Response::Ok)
}

/// `Own`: the client's engine made `object`; a QP must be numbered from the client's blocks.
pub(super) fn own(h: &mut Host, c: &mut Client, dev: u32, object: ProcessObject) -> Handled {
    h.dev(dev)?;
    let of_kind = |o: &ProcessObject| std::mem::discriminant(o) == std::mem::discriminant(&object);
    let held = c.owned.process.iter().filter(|(_, o)| of_kind(o)).count();
    let (limit, what) = match object {
        ProcessObject::Qp(qpn) => {
            if !c.owned.has_qpn(dev, qpn) {
                return Err(refused(
                    ErrorKind::Invalid,
                    format!(
                        "QP {qpn} is not numbered from a QPN block of this client on device \
                         {dev} (ask for one with AllocQpnBlock)"
                    ),
                ));
            }
            (MAX_QPS_PER_CLIENT, "QPs")
        }
        ProcessObject::Pd(_) => (MAX_PDS_PER_CLIENT, "PDs"),
        ProcessObject::Cq(_) | ProcessObject::Srq(_) => (MAX_CQS_PER_CLIENT, "CQs or SRQs"),
        ProcessObject::Ah(_) => (MAX_AHS_PER_CLIENT, "AHs"),
    };
    if held >= limit {
        return Err(refused(
            ErrorKind::Exhausted,
            format!("a client may hold at most {limit} {what}"),
        ));
    }
    if !c.owned.process.insert((dev, object)) {
        return Err(refused(
            ErrorKind::Busy,
            format!("{object:?} on device {dev} is registered already"),
        ));
    }
    Ok(Response::Ok)
}

/// `Disown`: the client's engine destroyed `object`.
pub(super) fn disown(h: &mut Host, c: &mut Client, dev: u32, object: ProcessObject) -> Handled {
    h.dev(dev)?;
    if !c.owned.process.remove(&(dev, object)) {
        return Err(refused(
            ErrorKind::NotFound,
            format!("no {object:?} on device {dev} belongs to this client"),
        ));
    }
    Ok(Response::Ok)
}

/// `SteerJoin`: maps the client's hand-on ring, binds the client's member of the device's
/// reuseport group; the socket goes with the answer.
pub(super) fn steer_join(
    h: &mut Host,
    c: &mut Client,
    fds: &mut Vec<OwnedFd>,
    dev: u32,
    hand_on: u32,
) -> Handled {
    let ring = passed_fd(fds, "SteerJoin arrived without its hand-on ring")?;
    let d = h.dev(dev)?;
    let Some((group, socket)) = d.steering() else {
        return Err(refused(
            ErrorKind::Invalid,
            format!(
                "device {dev} is an emulated IB device: its data path stays in the daemon \
                 (every packet of an IB port passes the daemon's cable)"
            ),
        ));
    };
    let addr = socket.local_addr().map_err(|e| {
        refused(
            ErrorKind::Invalid,
            format!("the device's socket has no address: {e}"),
        )
    })?;
    if c.owned.steered.contains(&dev) {
        return Err(refused(
            ErrorKind::Busy,
            format!("this client joined device {dev}'s steering group already"),
        ));
    }
    let ring = PacketRing::from_fd(ring, hand_on as usize)
        .map_err(|e| refused(ErrorKind::Invalid, format!("the hand-on ring: {e}")))?;
    let (member, index) = group.join(c.id, socket).map_err(|e| {
        refused(
            ErrorKind::Busy,
            format!("cannot join device {dev}'s steering group at {addr}: {e}"),
        )
    })?;
    c.owned.steered.insert(dev);
    c.hand_on.insert(dev, ring);
    c.reply_fds.push(OwnedFd::from(member));
    Ok(Response::Steered { addr, index })
}

/// `SteerLeave`: the client closes its member; its blocks go to the daemon.
pub(super) fn steer_leave(h: &mut Host, c: &mut Client, dev: u32) -> Handled {
    let d = h.dev(dev)?;
    c.hand_on.remove(&dev);
    if !c.owned.steered.remove(&dev) {
        return Err(refused(
            ErrorKind::NotFound,
            format!("this client did not join device {dev}'s steering group"),
        ));
    }
    if let Some((group, socket)) = d.steering() {
        group.leave(c.id, socket).map_err(|e| {
            refused(
                ErrorKind::Invalid,
                format!("cannot steer device {dev} without the client: {e}"),
            )
        })?;
    }
    Ok(Response::Ok)
}

/// `OpenEvents`: the client's engine on `dev` takes events on the stream that came with the
/// request and is woken through the eventfd that came after it.
pub(super) fn open_events(
    h: &mut Host,
    c: &mut Client,
    fds: &mut Vec<OwnedFd>,
    dev: u32,
    counters: u32,
) -> Handled {
    let inbound = passed_fd(fds, "OpenEvents arrived without its inbound ring")?;
    let page = passed_fd(fds, "OpenEvents arrived without its counter page")?;
    let bell = passed_fd(fds, "OpenEvents arrived without its doorbell")?;
    let stream = passed_fd(fds, "OpenEvents arrived without its event stream")?;
    if h.dev(dev)?.steering().is_none() {
        return Err(refused(
            ErrorKind::Invalid,
            format!("device {dev} is an emulated IB device: it has no process engines"),
        ));
    }
    if !c.owned.steered.contains(&dev) {
        return Err(refused(
            ErrorKind::WrongState,
            format!("join device {dev}'s steering group (SteerJoin) before OpenEvents"),
        ));
    }
    let stream = UnixStream::from(stream);
    stream.set_nonblocking(true).map_err(|e| {
        refused(
            ErrorKind::Invalid,
            format!("the event stream cannot be made non-blocking: {e}"),
        )
    })?;
    let counters = softib_net::counters::CounterPage::from_fd(page, counters as usize)
        .map_err(|e| refused(ErrorKind::Invalid, format!("the counter page: {e}")))?;
    let inbound = PacketRing::from_fd(inbound, softib_proto::INBOUND_RING_BYTES)
        .map_err(|e| refused(ErrorKind::Invalid, format!("the inbound ring: {e}")))?;
    let d = h.dev(dev)?;
    let mut ch = EventChannel {
        stream,
        bell,
        counters,
        capture: None,
        // The engine read the port's state from the device list before it started; a change
        // since is told at the end of this turn.
        port_up: true,
        inbound,
    };
    // The device's faults and capture as they are now, before the answer: the engine takes
    // them before its first packet.
    let spec = d.roce_faults();
    if spec != softib_net::fault::FaultSpec::default() {
        let _ = ch.push(&Event::Faults { spec }, &[]);
    }
    if d.captured().is_some() {
        crate::host::oversight::start_or_stop(&mut ch, true);
    }
    // A second OpenEvents replaces the first; what the old page counted is kept.
    if let Some(old) = c.event_channels.insert(dev, ch) {
        h.departed.keep(dev, &old.counters);
    }
    Ok(Response::Ok)
}

/// The address of device `dev`'s socket, if it is a RoCE device.
fn roce_addr(d: &mut Device) -> Option<std::net::SocketAddr> {
    d.steering().and_then(|(_, s)| s.local_addr().ok())
}

/// The first QPN of each block client `c` holds on device `dev`.
fn blocks_of(c: &Client, dev: u32) -> Vec<u32> {
    c.owned
        .qpn_blocks
        .iter()
        .filter(|(d, _)| *d == dev)
        .map(|(_, first)| first.value())
        .collect()
}

/// `RingTo`: rings between the asker's engine on `dev` and the engine that owns `dqpn` at
/// `dgid`, when that is another client's on a device of this host (see `peer_rings`).
pub(super) fn ring_to(
    h: &mut Host,
    clients: &mut BTreeMap<u64, Client>,
    id: u64,
    dev: u32,
    dgid: Gid,
    dqpn: Qpn,
) -> Handled {
    let no = |why: String| Ok(Response::NoRing(why));
    let Some(_) = roce_addr(h.dev(dev)?) else {
        return no(format!("device {dev} is not a RoCE device"));
    };
    let ip = softib_link::roce::framing::ip_of(&dgid);
    let target = h.devs.iter_mut().enumerate().find_map(|(i, d)| {
        let addr = roce_addr(d).filter(|a| a.ip() == ip)?;
        let owner = d.steering().and_then(|(g, _)| g.owner_of(dqpn.value()));
        Some((i as u32, addr, owner))
    });
    let Some((tdev, peer, owner)) = target else {
        return no(format!("{ip} is not a RoCE device of this daemon"));
    };
    let Some(owner) = owner.filter(|o| *o != id) else {
        return no(format!(
            "QP {dqpn} on {ip} is not another process engine's (the daemon's, this session's, \
             or nobody's)"
        ));
    };
    let me: EngineId = (id, dev);
    let other: EngineId = (owner, tdev);
    let (Some(mine), Some(theirs)) = (clients.get(&id), clients.get(&owner)) else {
        return no(format!("the owner of QP {dqpn} is gone"));
    };
    if mine.uid != theirs.uid {
        // A ring is shared memory between the two processes: only between processes of one
        // user, which could reach each other's memory anyway (decision 3).
        return no(format!(
            "the owner of QP {dqpn} is another user's process (uid {}): through the kernel",
            theirs.uid
        ));
    }
    let peer_blocks = blocks_of(theirs, tdev);
    let peer_pid = theirs.peer_pid;
    if let Some(pair) = h.peer_rings.find(me, other) {
        return Ok(Response::Ring {
            id: pair,
            peer,
            peer_blocks,
            peer_pid,
            fresh: false,
        });
    }
    let (Some(my_events), Some(their_events)) = (
        mine.event_channels.get(&dev),
        theirs.event_channels.get(&tdev),
    ) else {
        return no("an engine without an event channel (OpenEvents)".into());
    };
    let Some(my_addr) = h.devs.get_mut(dev as usize).and_then(roce_addr) else {
        return no(format!("device {dev} is not a RoCE device"));
    };
    let failed = |e: std::io::Error| refused(ErrorKind::Exhausted, format!("rings to a peer: {e}"));
    let rings = h.peer_rings.make().map_err(failed)?;
    let told = their_events.push(
        &Event::Ring {
            id: rings.id,
            peer: my_addr,
            peer_blocks: blocks_of(mine, dev),
            peer_pid: mine.peer_pid,
        },
        &end_fds(&rings.to_b, &rings.to_a, &my_events.bell),
    );
    if !told {
        return no(format!("the owner of QP {dqpn} does not take events"));
    }
    let streams = [
        my_events.stream.try_clone().map_err(failed)?,
        their_events.stream.try_clone().map_err(failed)?,
    ];
    let fds = [
        rings.to_a.fd().try_clone_to_owned().map_err(failed)?,
        rings.to_b.fd().try_clone_to_owned().map_err(failed)?,
        their_events
            .bell
            .as_fd()
            .try_clone_to_owned()
            .map_err(failed)?,
    ];
    h.peer_rings.record(rings.id, [me, other], streams);
    if let Some(c) = clients.get_mut(&id) {
        c.reply_fds.extend(fds);
    }
    Ok(Response::Ring {
        id: rings.id,
        peer,
        peer_blocks,
        peer_pid,
        fresh: true,
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant as StdInstant};

    use softib_proto::Request;
    use softib_wire::Qpn;

    use super::*;
    use crate::host::quarantine::QUARANTINE;
    use crate::host::testing::{qp_init, TestHost};

    fn block(t: &mut TestHost, id: u64) -> Qpn {
        match t.ok(id, Request::AllocQpnBlock { dev: 0 }) {
            Response::QpnBlock { first, count } => {
                assert_eq!(count, QPN_BLOCK);
                first
            }
            r => panic!("not a block: {r:?}"),
        }
    }

    fn key(t: &mut TestHost, id: u64) -> u32 {
        match t.ok(id, Request::AllocMrKey { dev: 0 }) {
            Response::MrKey(k) => k,
            r => panic!("not a key: {r:?}"),
        }
    }

    #[test]
    fn blocks_are_unique_and_the_daemons_own_qps_stay_out_of_them() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        let (a1, a2, b1) = (block(&mut t, a), block(&mut t, a), block(&mut t, b));
        let starts = [a1.value(), a2.value(), b1.value()];
        for (i, s) in starts.iter().enumerate() {
            assert_eq!(s % QPN_BLOCK, 0);
            assert!(starts[i + 1..].iter().all(|o| o.abs_diff(*s) >= QPN_BLOCK));
        }
        // QPs made in the daemon's engine (the daemon path) never land in a block.
        for _ in 0..4 {
            let (_, _, qpn) = t.qp(b);
            for s in starts {
                assert!(!(s..s + QPN_BLOCK).contains(&qpn.value()), "{qpn}");
            }
        }
        assert!(t.hca().qpn_reserved(Qpn::new(a2.value() + 63)));
    }

    #[test]
    fn a_process_engines_objects_count_as_its_own() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        let first = block(&mut t, a);
        let qpn = Qpn::new(first.value() + 3);
        for object in [
            ProcessObject::Pd(1),
            ProcessObject::Cq(2),
            ProcessObject::Qp(qpn),
            ProcessObject::Ah(4),
        ] {
            t.ok(a, Request::Own { dev: 0, object });
        }
        key(&mut t, a);
        // Someone else's QPN, or one outside every block, is refused.
        let (kind, message) = t.refused(
            b,
            Request::Own {
                dev: 0,
                object: ProcessObject::Qp(qpn),
            },
        );
        assert_eq!(kind, ErrorKind::Invalid);
        assert!(message.contains("AllocQpnBlock"), "{message}");
        assert_eq!(
            t.refused(
                a,
                Request::Own {
                    dev: 0,
                    object: ProcessObject::Pd(1)
                }
            )
            .0,
            ErrorKind::Busy
        );
        let Response::Resources(list) = t.ok(b, Request::Resources) else {
            panic!("no resources");
        };
        let mine = list
            .iter()
            .find(|r| r.program == format!("client{a}"))
            .unwrap();
        assert_eq!(mine.per_device, vec![(0, [1, 1, 1, 1, 1])]);
        t.ok(
            a,
            Request::Disown {
                dev: 0,
                object: ProcessObject::Ah(4),
            },
        );
        assert_eq!(
            t.refused(
                a,
                Request::Disown {
                    dev: 0,
                    object: ProcessObject::Ah(4)
                }
            )
            .0,
            ErrorKind::NotFound
        );
        assert_eq!(t.clients[&a].owned.count(0), [1, 1, 1, 1, 0]);
    }

    #[test]
    fn a_clients_blocks_and_keys_are_quarantined_when_it_goes_then_released() {
        let mut t = TestHost::new();
        let a = t.client();
        let first = block(&mut t, a);
        let k = key(&mut t, a);
        let freed = key(&mut t, a);
        t.ok(a, Request::FreeMrKey { dev: 0, key: freed });
        assert_eq!(
            t.refused(a, Request::FreeMrKey { dev: 0, key: freed }).0,
            ErrorKind::NotFound
        );
        t.drop_client(a);
        assert_eq!(t.host.quarantine.len(), 3);
        assert!(t.host.quarantine.holds(0, Held::Block(first)));
        // Still set aside: the daemon's engine neither numbers a QP in the block nor
        // registers under the keys while they are held.
        assert!(t.hca().qpn_reserved(first));
        assert!(t.hca().key_reserved(k) && t.hca().key_reserved(freed));
        let soon = StdInstant::now() + Duration::from_secs(1);
        assert_eq!(t.host.quarantine.release_due(soon, &mut t.host.devs), 0);
        let later = StdInstant::now() + QUARANTINE + Duration::from_secs(1);
        assert_eq!(t.host.quarantine.release_due(later, &mut t.host.devs), 3);
        assert!(!t.hca().qpn_reserved(first));
        assert!(!t.hca().key_reserved(k));
        // The numbers are free for a QP the daemon's engine makes now.
        let pd = t.hca().alloc_pd().unwrap();
        let cq = t.hca().create_cq(4).unwrap();
        let inside = Qpn::new(first.value() + 1);
        t.hca()
            .create_qp_numbered(qp_init(pd.0, cq.0), inside)
            .unwrap();
    }

    #[test]
    fn an_ib_device_has_no_event_channel_and_no_rings() {
        let mut t = TestHost::new();
        let a = t.client();
        let (ours, theirs) = UnixStream::pair().unwrap();
        let bell = rustix::event::eventfd(0, rustix::event::EventfdFlags::NONBLOCK).unwrap();
        let page = softib_net::counters::CounterPage::create(&["drop.x"]).unwrap();
        let inbound = PacketRing::create("t", softib_proto::INBOUND_RING_BYTES).unwrap();
        let (kind, msg) = t.refused_with(
            a,
            vec![
                OwnedFd::from(theirs),
                bell,
                page.fd().try_clone_to_owned().unwrap(),
                inbound.fd().try_clone_to_owned().unwrap(),
            ],
            Request::OpenEvents {
                dev: 0,
                counters: 1,
            },
        );
        assert_eq!(kind, ErrorKind::Invalid, "{msg}");
        assert!(msg.contains("emulated IB device"), "{msg}");
        drop(ours);
        match t.ok(
            a,
            Request::RingTo {
                dev: 0,
                dgid: Gid::default(),
                dqpn: Qpn::new(0x2000),
            },
        ) {
            Response::NoRing(why) => assert!(why.contains("not a RoCE device"), "{why}"),
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn an_ib_device_keeps_the_daemon_path() {
        let mut t = TestHost::new();
        let a = t.client();
        let ring = PacketRing::create("softib-unit-hand-on", 4096).unwrap();
        let fd = ring.fd().try_clone_to_owned().unwrap();
        let join = Request::SteerJoin {
            dev: 0,
            hand_on: 4096,
        };
        let (kind, message) = t.refused_with(a, vec![fd], join);
        assert_eq!(kind, ErrorKind::Invalid);
        assert!(message.contains("emulated IB"), "{message}");
        assert_eq!(
            t.refused(a, Request::SteerLeave { dev: 0 }).0,
            ErrorKind::NotFound
        );
    }
}
