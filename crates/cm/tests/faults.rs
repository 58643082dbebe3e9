//! The CM machine between two to four nodes over a network that loses, duplicates, delays
//! and reorders its MADs, seed after seed, each seed its own world (TigerBeetle's swarm): the
//! number of nodes and connections, the loss, duplication and delay, the CM's retry count,
//! and what each consumer does (accept at once or late, reject, which side disconnects).
//!
//! The oracle watches the events each side's consumer hears and every MAD the network
//! delivers, and checks per connection:
//! - each side is established at most once, and the active side hears exactly one outcome of
//!   its connect (established, rejected or timed out);
//! - a rejection carries the reason that fits what the passive consumer did (ConsumerDefined
//!   for a reject, Timeout when a side gave up, InvalidCommID for a REP that reached an
//!   active side which had given up); nothing else;
//! - never half-open: the passive side is established only if the active side is, and when
//!   the active side is established alone, the network lost every RTU to the passive side
//!   and the passive side's REJ (the one case no CM can close: the data path finds it);
//! - teardown: when both sides were established, both hear Disconnected exactly once, unless
//!   the network lost every DREQ towards the side that did not;
//! - what must be answered is: every DREQ that arrives by a DREP, a REP for a connection
//!   established here by the RTU again;
//! - liveness: once the network falls quiet, every machine holds no connection but the
//!   half-open ones explained above, and no timer.
//!
//! Across the seeds the faults must have fired and every path been taken (retransmits,
//! MRAs, duplicate REPs and DREQs answered, timeouts, consumer rejects): an oracle that saw
//! nothing happen would pass vacuously. `CM_FAULT_SEEDS=N` runs more seeds; a failure names
//! its seed, and `CM_FAULT_SEED=S` runs that one alone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Duration;

use softib_cm::msg::private_len;
use softib_cm::{
    AcceptParams, Cm, CommId, Config, ConnectParams, Counters, Event, Message, Path, RejectReason,
    TransportService,
};
use softib_wire::psn::Psn;
use softib_wire::types::{Guid, PKey, Qpn};

const SERVICE: u64 = 0x0106_0000_0000_4853;
/// The QPN of connection `n`'s active side (and so the connection's name at the passive
/// side, which hears it in the REQ).
const QPN_BASE: u32 = 0x1000;

/// A tiny deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The world one seed makes.
#[derive(Debug, Clone)]
struct Swarm {
    nodes: usize,
    conns: usize,
    loss: u64,
    dup: u64,
    max_delay_us: u64,
    retries: u8,
}

impl Swarm {
    fn new(rng: &mut Rng) -> Swarm {
        Swarm {
            nodes: 2 + rng.below(3) as usize,
            conns: 3 + rng.below(8) as usize,
            // A quarter of the worlds lose nothing: there every prompt accept must connect.
            loss: if rng.chance(25) { 0 } else { rng.below(41) },
            dup: rng.below(31),
            max_delay_us: rng.below(30_000),
            retries: 1 + rng.below(15) as u8,
        }
    }
}

/// What the passive consumer does with the connection's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Accept,
    /// Accepts after this long (duplicate REQs meanwhile get MRAs; the active side may give up).
    AcceptLate(Duration),
    Reject,
}

/// Who tears the connection down once it is established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Teardown {
    Active,
    Passive,
    Both,
}

/// What one side's consumer heard.
#[derive(Debug, Default, Clone)]
struct Side {
    established: u32,
    rejected: Vec<RejectReason>,
    timed_out: u32,
    disconnected: u32,
    time_wait_exits: u32,
}

#[derive(Debug)]
struct Conn {
    active: usize,
    passive: usize,
    answer: Answer,
    teardown: Teardown,
    active_id: CommId,
    /// Every connection the passive machine made of this one's REQs (a REQ that comes again
    /// after the first was rejected is a new request to the machine, as in the kernel's CM).
    passive_ids: Vec<CommId>,
    a: Side,
    p: Side,
}

/// A MAD on its way.
struct InFlight {
    at: Duration,
    seq: u64,
    to: usize,
    from: usize,
    mad: [u8; 256],
}

/// What a consumer does later.
enum Action {
    Accept { node: usize, id: CommId },
    Disconnect { node: usize, id: CommId },
}

/// Everything the network delivered, by (receiving node, message name, the receiver's
/// communication ID the message names).
type Delivered = BTreeMap<(usize, &'static str, CommId), u32>;

struct World {
    rng: Rng,
    swarm: Swarm,
    now: Duration,
    cms: Vec<Cm<usize>>,
    net: Vec<InFlight>,
    seq: u64,
    actions: Vec<(Duration, Action)>,
    conns: Vec<Conn>,
    /// (node, local ID) → connection, for both sides.
    by_id: BTreeMap<(usize, CommId), usize>,
    delivered: Delivered,
    /// Messages the spec says must be answered that were not.
    unanswered: Vec<String>,
    sent: u64,
    lost: u64,
    duplicated: u64,
}

fn connect_params(qpn: u32) -> ConnectParams {
    ConnectParams {
        service_id: SERVICE,
        local_qpn: Qpn::new(qpn),
        starting_psn: Psn::new(1),
        responder_resources: 1,
        initiator_depth: 1,
        transport: TransportService::Rc,
        pkey: PKey(0xFFFF),
        path_mtu: 3,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        primary: Path::default(),
        private_data: [0; private_len::REQ],
    }
}

fn accept_params(qpn: u32) -> AcceptParams {
    AcceptParams {
        local_qpn: Qpn::new(qpn),
        starting_psn: Psn::new(2),
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        srq: false,
        private_data: [0; private_len::REP],
    }
}

impl World {
    fn new(seed: u64) -> World {
        let mut rng = Rng::new(seed);
        let swarm = Swarm::new(&mut rng);
        let cms = (0..swarm.nodes)
            .map(|n| {
                let mut cm = Cm::new(Config {
                    local_ca_guid: Guid(0x100 + n as u64),
                    first_comm_id: ((n as u32) << 24) | 1,
                    response_timeout: 14, // 67 ms
                    max_cm_retries: swarm.retries,
                    time_wait: Duration::from_millis(100),
                    mra_service_timeout: 16, // 268 ms
                });
                cm.listen(SERVICE, 64).expect("listen");
                cm
            })
            .collect();
        World {
            rng,
            swarm,
            now: Duration::ZERO,
            cms,
            net: Vec::new(),
            seq: 0,
            actions: Vec::new(),
            conns: Vec::new(),
            by_id: BTreeMap::new(),
            delivered: BTreeMap::new(),
            unanswered: Vec::new(),
            sent: 0,
            lost: 0,
            duplicated: 0,
        }
    }

    /// Starts the seed's connections, each from a node to another, spread over 50 ms.
    fn start(&mut self) {
        for n in 0..self.swarm.conns {
            let active = self.rng.below(self.swarm.nodes as u64) as usize;
            let passive = (active + 1 + self.rng.below(self.swarm.nodes as u64 - 1) as usize)
                % self.swarm.nodes;
            let answer = match self.rng.below(10) {
                0 | 1 => Answer::Reject,
                2 | 3 => Answer::AcceptLate(Duration::from_millis(self.rng.below(400))),
                _ => Answer::Accept,
            };
            let teardown = match self.rng.below(5) {
                0 | 1 => Teardown::Active,
                2 | 3 => Teardown::Passive,
                _ => Teardown::Both,
            };
            let at = Duration::from_micros(self.rng.below(50_000));
            self.now = self.now.max(at);
            let id =
                self.cms[active].connect(self.now, passive, &connect_params(QPN_BASE + n as u32));
            self.by_id.insert((active, id), n);
            self.conns.push(Conn {
                active,
                passive,
                answer,
                teardown,
                active_id: id,
                passive_ids: Vec::new(),
                a: Side::default(),
                p: Side::default(),
            });
            self.pump();
        }
    }

    /// Moves what the machines send into the network (losing, duplicating and delaying it).
    fn pump(&mut self) {
        for from in 0..self.cms.len() {
            let out: Vec<_> = std::iter::from_fn(|| self.cms[from].poll_transmit()).collect();
            self.send(from, out);
        }
    }

    fn send(&mut self, from: usize, out: Vec<(usize, [u8; 256])>) {
        {
            for (to, mad) in out {
                self.sent += 1;
                if self.rng.chance(self.swarm.loss) {
                    self.lost += 1;
                    continue;
                }
                let copies = if self.rng.chance(self.swarm.dup) {
                    self.duplicated += 1;
                    2
                } else {
                    1
                };
                for _ in 0..copies {
                    let at = self.now
                        + Duration::from_micros(self.rng.below(self.swarm.max_delay_us + 1));
                    self.seq += 1;
                    self.net.push(InFlight {
                        at,
                        seq: self.seq,
                        to,
                        from,
                        mad,
                    });
                }
            }
        }
    }

    /// The next moment something happens, if anything will.
    fn next_moment(&self) -> Option<Duration> {
        let net = self.net.iter().map(|m| m.at).min();
        let timers = self.cms.iter().filter_map(Cm::poll_timeout).min();
        let actions = self.actions.iter().map(|a| a.0).min();
        [net, timers, actions].into_iter().flatten().min()
    }

    /// Runs until nothing is left to happen (or a bound of simulated time passes: a machine
    /// that keeps a timer forever is a liveness failure the oracle reports).
    fn run(&mut self) {
        let bound = Duration::from_secs(600);
        while let Some(t) = self.next_moment() {
            if t > bound {
                break;
            }
            self.now = self.now.max(t);
            self.deliver_due();
            for cm in &mut self.cms {
                cm.handle_timeout(self.now);
            }
            self.consume_events();
            self.act_due();
            self.consume_events();
            self.pump();
        }
    }

    fn deliver_due(&mut self) {
        // Arrival order; equal times in the order sent.
        self.net.sort_by_key(|m| (m.at, m.seq));
        let due = self.net.iter().take_while(|m| m.at <= self.now).count();
        let arrived: Vec<InFlight> = self.net.drain(..due).collect();
        for m in arrived {
            if let Ok((_, msg)) = Message::parse(&m.mad) {
                let named = match msg {
                    Message::Rej(x) => x.remote_comm_id,
                    Message::Rtu(x) => x.remote_comm_id,
                    Message::Dreq(x) => x.remote_comm_id,
                    Message::Drep(x) => x.remote_comm_id,
                    Message::Rep(x) => x.remote_comm_id,
                    Message::Mra(x) => x.remote_comm_id,
                    _ => 0,
                };
                *self.delivered.entry((m.to, msg.name(), named)).or_default() += 1;
            }
            // What the spec says must be answered, whatever the state of the rest: a DREQ by
            // a DREP (IBA §12.9.8.4, also a duplicate in TimeWait and one for a connection
            // this side does not know), a REP for a connection established here by the RTU
            // again (its RTU was lost).
            let must = match Message::parse(&m.mad) {
                Ok((_, Message::Dreq(_))) => Some("DREP"),
                Ok((_, Message::Rep(x))) if self.cms[m.to].is_established(x.remote_comm_id) => {
                    Some("RTU")
                }
                _ => None,
            };
            self.cms[m.to].handle_mad(self.now, m.from, &m.mad);
            let out: Vec<_> = std::iter::from_fn(|| self.cms[m.to].poll_transmit()).collect();
            if let Some(answer) = must {
                let answered = out.iter().any(|(to, mad)| {
                    *to == m.from && Message::parse(mad).is_ok_and(|(_, x)| x.name() == answer)
                });
                if !answered {
                    self.unanswered.push(format!(
                        "node {} did not answer a {} from node {} with a {answer} at {:?}",
                        m.to,
                        Message::parse(&m.mad).map_or("?", |(_, x)| x.name()),
                        m.from,
                        self.now
                    ));
                }
            }
            self.send(m.to, out);
        }
    }

    fn act_due(&mut self) {
        let now = self.now;
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.actions)
            .into_iter()
            .partition(|a| a.0 <= now);
        self.actions = later;
        for (_, action) in due {
            match action {
                Action::Accept { node, id } => {
                    let n = self.by_id[&(node, id)];
                    // The active side may have given up meanwhile (its REJ took the request).
                    let _ = self.cms[node].accept(now, id, &accept_params(0x8000 + n as u32));
                }
                Action::Disconnect { node, id } => {
                    // The peer's DREQ may have come first.
                    let _ = self.cms[node].disconnect(now, id, &[]);
                }
            }
        }
    }

    fn consume_events(&mut self) {
        for node in 0..self.cms.len() {
            while let Some(e) = self.cms[node].poll_event() {
                self.on_event(node, e);
            }
        }
    }

    fn on_event(&mut self, node: usize, e: Event<usize>) {
        let now = self.now;
        let id = match &e {
            Event::ConnectRequest { id, req, from } => {
                let n = (req.local_qpn.value() - QPN_BASE) as usize;
                let c = &mut self.conns[n];
                assert_eq!(
                    (node, *from),
                    (c.passive, c.active),
                    "a REQ at the wrong node"
                );
                c.passive_ids.push(*id);
                self.by_id.insert((node, *id), n);
                match c.answer {
                    Answer::Accept => {
                        self.cms[node]
                            .accept(now, *id, &accept_params(0x8000 + n as u32))
                            .expect("accept a fresh request");
                    }
                    Answer::AcceptLate(after) => {
                        self.actions
                            .push((now + after, Action::Accept { node, id: *id }));
                    }
                    Answer::Reject => {
                        self.cms[node]
                            .reject(*id, RejectReason::ConsumerDefined, b"no")
                            .expect("reject a fresh request");
                    }
                }
                return;
            }
            Event::Reply { id, .. } => {
                self.cms[node]
                    .ready_to_use(*id, &[])
                    .expect("RTU after a REP");
                return;
            }
            Event::Established { id }
            | Event::Rejected { id, .. }
            | Event::TimedOut { id, .. }
            | Event::Disconnected { id }
            | Event::TimeWaitExit { id } => *id,
            other => panic!("node {node} heard {other:?}"),
        };
        let n = *self.by_id.get(&(node, id)).unwrap_or_else(|| {
            panic!("node {node}: an event for unknown connection {id:#x}: {e:?}")
        });
        let c = &mut self.conns[n];
        let active = node == c.active && id == c.active_id;
        let side = if active { &mut c.a } else { &mut c.p };
        assert!(
            side.time_wait_exits == 0,
            "node {node}: {e:?} after the connection left TimeWait"
        );
        match e {
            Event::Established { .. } => {
                side.established += 1;
                let mine = match c.teardown {
                    Teardown::Active => active,
                    Teardown::Passive => !active,
                    Teardown::Both => true,
                };
                if mine {
                    let after = Duration::from_micros(self.rng.below(100_000));
                    self.actions
                        .push((now + after, Action::Disconnect { node, id }));
                }
            }
            Event::Rejected { reason, .. } => side.rejected.push(reason),
            Event::TimedOut { active: a, .. } => {
                assert_eq!(a, active, "TimedOut says the wrong side");
                side.timed_out += 1;
            }
            Event::Disconnected { .. } => side.disconnected += 1,
            Event::TimeWaitExit { .. } => side.time_wait_exits += 1,
            _ => unreachable!(),
        }
    }

    /// How many times the network delivered message `name` to `node` naming its `id`.
    fn got(&self, node: usize, name: &'static str, id: CommId) -> u32 {
        self.delivered.get(&(node, name, id)).copied().unwrap_or(0)
    }

    /// The oracle (see the module docs); returns the connections left half-open with their
    /// explanation checked, per node.
    fn check(&self) -> Result<Vec<usize>, String> {
        if let Some(first) = self.unanswered.first() {
            return Err(first.clone());
        }
        let mut half_open = vec![0usize; self.cms.len()];
        for (n, c) in self.conns.iter().enumerate() {
            let say = |what: &str| Err(format!("connection {n} ({c:?}): {what}"));
            if c.a.established > 1 || c.p.established > 1 {
                return say("established more than once");
            }
            let outcomes = c.a.established + c.a.rejected.len() as u32 + c.a.timed_out;
            if outcomes != 1 {
                return say("the active side heard not exactly one outcome of its connect");
            }
            let fits = |r: &RejectReason| match c.answer {
                Answer::Reject => *r == RejectReason::ConsumerDefined,
                _ => *r == RejectReason::Timeout,
            };
            if !c.a.rejected.iter().all(fits) {
                return say("rejected with a reason that does not fit what the consumer did");
            }
            // The active side gave up (Timeout), or had given up when the REP came and so no
            // longer knew the connection it names (InvalidCommID, IBA §12.6.5).
            let fits_passive = |r: &RejectReason| match r {
                RejectReason::Timeout => true,
                RejectReason::InvalidCommId => c.a.established == 0,
                _ => false,
            };
            if !c.p.rejected.iter().all(fits_passive) {
                return say("the passive side was rejected with a reason that does not fit");
            }
            if c.answer == Answer::Reject && (c.a.established + c.p.established) > 0 {
                return say("established although the consumer rejected it");
            }
            if c.p.established == 1 && c.a.established == 0 {
                return say("half-open: the passive side alone is established");
            }
            let rtus_to_passive: u32 = c
                .passive_ids
                .iter()
                .map(|&p| self.got(c.passive, "RTU", p))
                .sum();
            if c.a.established == 1 && c.p.established == 0 {
                // The passive side gave up on its REP: the active side hears of it through the
                // passive's REJ, as a disconnect.
                let rej_to_active = self.got(c.active, "REJ", c.active_id);
                if c.a.disconnected == 0 && (rtus_to_passive > 0 || rej_to_active > 0) {
                    return say("half-open although an RTU or the passive's REJ got through");
                }
                if c.a.disconnected == 0 {
                    half_open[c.active] += 1;
                }
                continue;
            }
            if c.a.established == 1 && c.p.established == 1 {
                for (mine, theirs, node, ids) in [
                    (&c.a, &c.p, c.active, vec![c.active_id]),
                    (&c.p, &c.a, c.passive, c.passive_ids.clone()),
                ] {
                    if mine.disconnected > 1 {
                        return say("disconnected more than once");
                    }
                    if mine.disconnected == 0 {
                        let dreqs: u32 = ids.iter().map(|&i| self.got(node, "DREQ", i)).sum();
                        if theirs.disconnected == 0 || dreqs > 0 {
                            return say(
                                "a side never heard of the teardown although a DREQ reached it",
                            );
                        }
                        half_open[node] += 1;
                    }
                }
            }
        }
        // Liveness: the network fell quiet; only the explained half-open connections stay.
        for (node, cm) in self.cms.iter().enumerate() {
            if cm.connections() != half_open[node] || cm.poll_timeout().is_some() {
                return Err(format!(
                    "node {node} still holds {} connections ({} explained) and timer {:?}",
                    cm.connections(),
                    half_open[node],
                    cm.poll_timeout()
                ));
            }
        }
        if self.swarm.loss == 0 {
            for (n, c) in self.conns.iter().enumerate() {
                if c.answer == Answer::Accept
                    && (c.a.established, c.a.disconnected, c.p.disconnected) != (1, 1, 1)
                {
                    return Err(format!(
                        "connection {n} ({c:?}) did not connect and disconnect without loss"
                    ));
                }
            }
        }
        Ok(half_open)
    }
}

/// What all the seeds together did, so that the test knows the paths it checks were taken.
#[derive(Debug, Default)]
struct Coverage {
    established: u32,
    consumer_rejected: u32,
    timed_out_active: u32,
    timed_out_passive: u32,
    torn_down: u32,
    half_open: usize,
    lost: u64,
    duplicated: u64,
    counters: Counters,
}

fn add(total: &mut Counters, c: Counters) {
    total.retransmits += c.retransmits;
    total.duplicate_req += c.duplicate_req;
    total.duplicate_rep += c.duplicate_rep;
    total.duplicate_dreq += c.duplicate_dreq;
    total.timeouts += c.timeouts;
    total.unknown_comm_id += c.unknown_comm_id;
    total.wrong_state += c.wrong_state;
}

fn run_seed(seed: u64, cov: &mut Coverage) {
    let mut w = World::new(seed);
    w.start();
    w.run();
    match w.check() {
        Ok(half_open) => cov.half_open += half_open.iter().sum::<usize>(),
        Err(e) => panic!(
            "seed {seed} ({:?}): {e}\nreproduce: CM_FAULT_SEED={seed} cargo test -p softib-cm --test faults",
            w.swarm
        ),
    }
    for c in &w.conns {
        cov.established += c.a.established;
        cov.consumer_rejected +=
            c.a.rejected
                .iter()
                .filter(|r| **r == RejectReason::ConsumerDefined)
                .count() as u32;
        cov.timed_out_active += c.a.timed_out;
        cov.timed_out_passive += c.p.timed_out;
        cov.torn_down += u32::from(c.a.disconnected + c.p.disconnected == 2);
    }
    cov.lost += w.lost;
    cov.duplicated += w.duplicated;
    for cm in &w.cms {
        add(&mut cov.counters, cm.counters());
    }
}

#[test]
fn every_connection_establishes_once_or_fails_with_the_right_event_under_faults() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    if let Some(seed) = env("CM_FAULT_SEED") {
        run_seed(seed, &mut Coverage::default());
        return;
    }
    let seeds = env("CM_FAULT_SEEDS").unwrap_or(2000);
    let mut cov = Coverage::default();
    for seed in 0..seeds {
        run_seed(seed, &mut cov);
    }
    eprintln!("{seeds} seeds: {cov:?}");
    let c = &cov.counters;
    assert!(
        cov.lost > 0 && cov.duplicated > 0,
        "no fault fired: {cov:?}"
    );
    assert!(
        cov.established > 0
            && cov.consumer_rejected > 0
            && cov.timed_out_active > 0
            && cov.timed_out_passive > 0
            && cov.torn_down > 0,
        "an outcome never happened: {cov:?}"
    );
    assert!(
        c.retransmits > 0
            && c.duplicate_req > 0
            && c.duplicate_rep > 0
            && c.duplicate_dreq > 0
            && c.timeouts > 0,
        "a recovery path was never taken: {cov:?}"
    );
}
