//! The loop: wait until a descriptor is readable or a deadline is due, then give every host
//! and switch a turn.
//!
//! While work keeps coming the loop turns without sleeping (and, for [`DAEMON_SPIN`] after
//! the last busy turn, yields instead of sleeping); then it sleeps in `poll(2)` until the
//! earliest cable, engine or parked deadline, at most a second. A busy turn looks at the
//! descriptors that carry work — clients, doorbells, RoCE sockets, cables to other processes —
//! and only every [`QUIET_POLL_EVERY`] at those that carry none while the fabric is busy: the
//! hosts' listeners and the sockets of cables whose both ends are this process's, where
//! frames go in-process and only beacons use the socket. A fabric of 504 hosts has some 2,000
//! of those, and polling them every turn cost more than the turn's work. Clients need not ring their
//! submission ring's doorbell while the loop turns: each ring's polling flag says whether it
//! does.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use softib_engine::Instant;

use super::host_rt::HostRt;
use super::switch_rt::SwitchRt;
use super::SOCKET_NAME;
use crate::device::Device;
use crate::switchboard::Owner;

/// How many rounds of turns for the nodes with frames waiting one step gives at most (a route
/// has at most 64 hops), before every node has its turn again.
const MAX_INNER_ROUNDS: usize = 64;

/// How often a busy loop also polls the listeners and the in-process cables' sockets.
const QUIET_POLL_EVERY: StdDuration = StdDuration::from_millis(10);

/// How long the loop keeps looking for work after its last busy turn before it sleeps.
const DAEMON_SPIN: StdDuration = StdDuration::from_micros(50);

/// The daemon: hosts and switches and the loop that drives them.
pub struct Daemon {
    pub(super) hosts: Vec<HostRt>,
    pub(super) switches: Vec<SwitchRt>,
    /// In-process delivery between this daemon's own cable ends.
    pub(super) sb: crate::switchboard::Switchboard,
    pub(super) origin: StdInstant,
    pub(super) buf: Vec<u8>,
    /// An eventfd in the poll set: [`Waker::wake`] ends a sleep at once.
    pub(super) wake: Arc<OwnedFd>,
    /// `wait`'s scratch, kept between turns: what each polled descriptor is, which are ready.
    pub(super) slots: Vec<Slot>,
    pub(super) ready: Vec<usize>,
    /// When `wait` last polled every descriptor.
    pub(super) polled_all: StdInstant,
}

/// What a polled descriptor belongs to.
#[derive(Debug, Clone, Copy)]
pub(super) enum Slot {
    Wake,
    Listener(usize),
    HostDev(usize, usize, usize),
    Client(usize, u64),
    SwitchCable(usize, usize),
    Doorbell(usize, u64),
}

/// Wakes a [`Daemon`]'s loop from another thread — after setting its stop flag, so that it
/// stops at once instead of at the end of an idle sleep (up to a second).
#[derive(Debug, Clone)]
pub struct Waker(Arc<OwnedFd>);

impl Waker {
    /// Ends the loop's current or next sleep.
    pub fn wake(&self) {
        let _ = rustix::io::write(&*self.0, &1u64.to_ne_bytes());
    }
}

/// A daemon running its loop on a thread of its own (tests, the `softib` crate's embedded
/// mode): stopped and joined when dropped.
#[derive(Debug)]
pub struct DaemonThread {
    stop: Arc<AtomicBool>,
    waker: Waker,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DaemonThread {
    /// Builds a daemon with `build` on a new thread (a daemon stays on the thread it was made
    /// on) and runs it there; fails with `build`'s error, or when it takes over 10 seconds.
    pub fn spawn(
        build: impl FnOnce() -> io::Result<Daemon> + Send + 'static,
    ) -> io::Result<DaemonThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread =
            std::thread::Builder::new()
                .name("softibd".into())
                .spawn(move || match build() {
                    Ok(mut daemon) => {
                        let _ = tx.send(Ok(daemon.waker()));
                        if let Err(e) = daemon.run(&s) {
                            eprintln!("softibd (thread): the loop stopped: {e}");
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                })?;
        match rx.recv_timeout(StdDuration::from_secs(10)) {
            Ok(Ok(waker)) => Ok(DaemonThread {
                stop,
                waker,
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the daemon thread did not start within 10 s",
            )),
        }
    }

    /// Whether its loop still runs.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for DaemonThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The loop may sleep up to a second when idle.
        self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Daemon {
    /// A handle that wakes this daemon's loop from another thread.
    pub fn waker(&self) -> Waker {
        Waker(self.wake.clone())
    }

    /// Runs until `stop` is set.
    pub fn run(&mut self, stop: &Arc<AtomicBool>) -> io::Result<()> {
        let mut busy = true;
        let mut last_busy = StdInstant::now();
        let mut heartbeat =
            super::liveness::Heartbeat::start(self.hosts.iter().map(|h| h.dir.as_path()));
        let spin = std::env::var("SOFTIB_DAEMON_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(DAEMON_SPIN, StdDuration::from_micros);
        while !stop.load(Ordering::Relaxed) {
            let timeout = if busy {
                last_busy = StdInstant::now();
                StdDuration::ZERO
            } else if last_busy.elapsed() < spin {
                // Work tends to come in bursts (a reply, the next message): look again soon
                // rather than sleep and pay a wakeup, but let others run meanwhile.
                std::thread::yield_now();
                StdDuration::ZERO
            } else {
                // Signals (the stop flag) interrupt the wait; everything else that is due
                // has a deadline in `next_wait`.
                self.next_wait().min(StdDuration::from_secs(1))
            };
            // While the loop keeps turning, clients need not ring a doorbell after a post:
            // the next turn drains their rings anyway. Before it may sleep it says so in every
            // ring and then looks at them once more (a post that skipped the doorbell just
            // before is seen here; one after it rings).
            let polling = timeout.is_zero();
            let waiting = self.set_rings_polling(polling);
            let timeout = if waiting { StdDuration::ZERO } else { timeout };
            self.wait(timeout)?;
            busy = self.step()?;
            heartbeat.beat(StdInstant::now());
        }
        heartbeat.stop();
        for h in &self.hosts {
            let _ = std::fs::remove_file(h.dir.join(SOCKET_NAME));
        }
        Ok(())
    }

    /// Tells every client's submission ring whether this loop is polling it; when it is not,
    /// returns whether a ring holds posts already (so the loop must not sleep).
    fn set_rings_polling(&self, polling: bool) -> bool {
        let mut waiting = false;
        for c in self.hosts.iter().flat_map(|h| h.clients.values()) {
            waiting |= super::rings::set_polling(c, polling);
        }
        waiting
    }

    /// One round of work; returns whether there may be more to do right away.
    pub fn step(&mut self) -> io::Result<bool> {
        let mut busy = false;
        let std_now = StdInstant::now();
        let now = self.now();
        // Datagrams between this daemon's RoCE devices are handed over in-process, and the RC
        // QPs between them go in-process — except to a device some of whose QPs live in a
        // process's own engine (the process data path): only the kernel's steering reaches
        // those, so everything for that device goes through it.
        self.sb.roce.set_ends(
            self.hosts
                .iter()
                .flat_map(|h| h.host.devs.iter())
                .filter(|d| !d.has_process_engines())
                .filter_map(Device::roce_addr),
        );
        let ends = self.sb.roce.ends();
        for d in self.hosts.iter_mut().flat_map(|h| h.host.devs.iter_mut()) {
            d.set_local_peers(ends);
        }
        for h in &mut self.hosts {
            busy |= h.step(std_now, now, &self.origin, &mut self.buf, &mut self.sb)?;
        }
        for s in &mut self.switches {
            busy |= s.step(std_now, &mut self.buf, &mut self.sb)?;
        }
        // Frames between this daemon's nodes: more turns for just the nodes they wait for,
        // so that a packet crosses its whole route in this round, at a cost of the nodes it
        // passes rather than of every node of the fabric per hop.
        for _ in 0..MAX_INNER_ROUNDS {
            let waiting = self.sb.take_waiting();
            if waiting.is_empty() {
                break;
            }
            for o in waiting {
                match o {
                    Owner::Host(i) => {
                        let now = self.now();
                        if let Some(h) = self.hosts.get_mut(i) {
                            h.step(std_now, now, &self.origin, &mut self.buf, &mut self.sb)?;
                        }
                    }
                    Owner::Switch(i) => {
                        if let Some(s) = self.switches.get_mut(i) {
                            s.step(std_now, &mut self.buf, &mut self.sb)?;
                        }
                    }
                }
            }
        }
        Ok(busy || self.sb.is_busy())
    }

    fn now(&self) -> Instant {
        engine_now(&self.origin)
    }

    /// How long the loop may sleep: until the earliest cable, engine or parked deadline.
    fn next_wait(&self) -> StdDuration {
        let std_now = StdInstant::now();
        let now = self.now();
        let mut wait = StdDuration::from_secs(1);
        let mut consider = |t: StdInstant| {
            wait = wait.min(t.saturating_duration_since(std_now));
        };
        for h in &self.hosts {
            for d in &h.host.devs {
                let (engine, link) = d.deadlines();
                if let Some(t) = link {
                    consider(t);
                }
                if let Some(t) = engine {
                    consider(
                        std_now + StdDuration::from_micros(t.saturating_since(now).as_micros()),
                    );
                }
            }
            for c in h.clients.values() {
                if let Some(p) = &c.parked {
                    consider(p.until());
                }
            }
            if let Some(t) = h.host.cm.next_deadline() {
                consider(t);
            }
        }
        for s in &self.switches {
            for t in s.deadlines() {
                consider(t);
            }
        }
        wait
    }

    /// Sleeps until a socket is readable or `timeout` passes, and records which are.
    fn wait(&mut self, timeout: StdDuration) -> io::Result<()> {
        // Kept between turns (no allocation per turn but the poll set's own).
        let mut slots = std::mem::take(&mut self.slots);
        let mut ready = std::mem::take(&mut self.ready);
        slots.clear();
        ready.clear();
        let all = !timeout.is_zero() || self.polled_all.elapsed() >= QUIET_POLL_EVERY;
        if all {
            self.polled_all = StdInstant::now();
        }
        let sb = &self.sb;
        let wanted =
            |peer: Option<std::net::SocketAddr>| all || !peer.is_some_and(|p| sb.has_end(&p));
        {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(slots.capacity().max(8));
            fds.push(PollFd::new(&*self.wake, PollFlags::IN));
            slots.push(Slot::Wake);
            for (hi, h) in self.hosts.iter().enumerate() {
                if all {
                    fds.push(PollFd::new(&h.listener, PollFlags::IN));
                    slots.push(Slot::Listener(hi));
                }
                for (di, d) in h.host.devs.iter().enumerate() {
                    d.each_socket(|k, sock, peer| {
                        if wanted(peer) {
                            fds.push(PollFd::new(sock, PollFlags::IN));
                            slots.push(Slot::HostDev(hi, di, k));
                        }
                    });
                }
                for (id, conn) in &h.conns {
                    fds.push(PollFd::new(&conn.stream, PollFlags::IN));
                    slots.push(Slot::Client(hi, *id));
                    if let Some((_, bell)) = h.clients.get(id).and_then(|c| c.submit.as_ref()) {
                        fds.push(PollFd::new(bell, PollFlags::IN));
                        slots.push(Slot::Doorbell(hi, *id));
                    }
                }
            }
            for (si, s) in self.switches.iter().enumerate() {
                for (p, c) in s.cables.iter().enumerate() {
                    if let Some(c) = c.as_ref().filter(|c| wanted(Some(c.peer_addr()))) {
                        fds.push(PollFd::new(c.socket(), PollFlags::IN));
                        slots.push(Slot::SwitchCable(si, p));
                    }
                }
            }
            let ts = Timespec {
                tv_sec: timeout.as_secs() as i64,
                tv_nsec: i64::from(timeout.subsec_nanos()),
            };
            match poll(&mut fds, Some(&ts)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    self.slots = slots;
                    self.ready = ready;
                    return Err(e.into());
                }
            }
            ready.extend(
                fds.iter()
                    .enumerate()
                    .filter(|(_, f)| !f.revents().is_empty())
                    .map(|(i, _)| i),
            );
        }
        for &i in &ready {
            match slots[i] {
                Slot::Wake => {
                    let mut b = [0u8; 8];
                    let _ = rustix::io::read(&*self.wake, &mut b);
                }
                Slot::Listener(h) => self.hosts[h].listener_ready = true,
                Slot::HostDev(h, d, k) => self.hosts[h].host.devs[d].mark_ready(k),
                Slot::Client(h, id) => {
                    self.hosts[h].ready_clients.insert(id);
                }
                Slot::SwitchCable(s, p) => self.switches[s].ready[p] = true,
                Slot::Doorbell(h, id) => {
                    if let Some((_, bell)) = self.hosts[h]
                        .clients
                        .get(&id)
                        .and_then(|c| c.submit.as_ref())
                    {
                        // Reset the eventfd; the ring itself is drained every turn.
                        let mut b = [0u8; 8];
                        let _ = rustix::io::read(bell, &mut b);
                    }
                }
            }
        }
        self.slots = slots;
        self.ready = ready;
        Ok(())
    }
}

/// The engine's clock: microseconds since the daemon was built.
pub(super) fn engine_now(origin: &StdInstant) -> Instant {
    Instant::from_micros(origin.elapsed().as_micros() as u64)
}
