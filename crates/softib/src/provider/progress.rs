//! The engine's progress thread and the daemon's event channel it reads.
//!
//! The progress thread runs the engine while no application thread does: the passive side of
//! a transfer (the target of a WRITE never calls the library), timers, what the daemon pushes
//! (rings to other processes' engines, faults, a capture, the port's state), and the daemon's
//! hang-up, after which every QP goes to the error state. Decision 7 of
//! docs/dev/process-datapath.md says when it spins and when it sleeps.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant as StdInstant};

use softib_engine::{AttrMask, QpAttr};
use softib_net::ring::PacketRing;
use softib_proto::Event;
use softib_wire::Qpn;

use super::engine::Station;
use super::{log, pause, timespec, Shared};

/// The engine's event channel (`OpenEvents`) and what has been read of it.
pub(crate) struct DaemonEvents {
    pub(super) stream: std::os::unix::net::UnixStream,
    pub(super) reader: softib_proto::FrameReader,
}

/// Takes what the daemon pushed on the engine's event channel (without waiting: the stream is
/// non-blocking), on whichever thread holds the engine — the progress thread when the
/// channel is readable, a post that needs rings the daemon said it pushed. False once the
/// channel closed (or was never open).
pub(super) fn read_daemon_events(st: &mut Station) -> bool {
    let Some(mut ev) = st.daemon_events.take() else {
        return false;
    };
    let open = matches!(ev.reader.fill(&ev.stream), Ok(true));
    take_events(st, &mut ev.reader);
    if open {
        st.daemon_events = Some(ev);
    }
    open
}

/// What the daemon pushed on the event channel: rings to a peer's engine, or a peer gone.
fn take_events(st: &mut Station, reader: &mut softib_proto::FrameReader) {
    loop {
        let frame = match reader.next_frame() {
            Ok(Some(f)) => f,
            Ok(None) => return,
            Err(e) => {
                log(format_args!("the daemon's event channel: {e}"));
                return;
            }
        };
        match softib_proto::decode::<Event>(&frame) {
            Ok(Event::Ring {
                id,
                peer,
                peer_blocks,
                peer_pid,
            }) => {
                if reader.fds.len() < 3 {
                    log(format_args!(
                        "rings to {peer} came without their descriptors"
                    ));
                    continue;
                }
                let mut fds = reader.fds.drain(..3);
                let (Some(a), Some(b), Some(c)) = (fds.next(), fds.next(), fds.next()) else {
                    continue;
                };
                drop(fds);
                if st.peers.has(id) {
                    st.peers.route(id, peer, &peer_blocks);
                } else if let Err(e) = st.peers.add(id, peer, peer_pid, &peer_blocks, [a, b, c]) {
                    log(format_args!("cannot map the rings to {peer}: {e}"));
                }
            }
            Ok(Event::RingGone { id }) => {
                st.peer_gone(id);
                // UD destinations are asked about again (another engine may hold them now).
                st.ud_asked.clear();
                st.ca.clear_ud_local();
            }
            Ok(Event::Faults { spec }) => st.oversight.set_faults(spec),
            Ok(Event::Port { port, active }) => {
                let _ = st.ca.hca_mut().set_port_active(port, active);
            }
            Ok(Event::Capture { on: false }) => st.oversight.capture = None,
            Ok(Event::Capture { on: true }) => {
                if reader.fds.is_empty() {
                    log(format_args!("a capture came without its ring"));
                    continue;
                }
                let fd = reader.fds.remove(0);
                match PacketRing::from_fd(fd, softib_proto::CAPTURE_RING_BYTES) {
                    Ok(ring) => st.oversight.capture = Some(ring),
                    Err(e) => log(format_args!("cannot map the capture ring: {e}")),
                }
            }
            Err(e) => log(format_args!("the daemon's event channel: {e}")),
        }
    }
}

/// How long the progress thread keeps looking for work after the last turn that had some,
/// yielding between looks, before it sleeps (`SOFTIB_PROVIDER_SPIN_US`; the daemon's loop does
/// the same with `SOFTIB_DAEMON_SPIN_US`). Work comes in bursts — the next message of a
/// ping-pong, the rest of a window — and a sleeping thread pays a wakeup for each.
const PROGRESS_SPIN: Duration = Duration::from_micros(50);

/// How long the progress thread leaves the socket and the timers to an application thread it
/// found turning the engine (`Shared::app_turning`) before it looks again: the most a
/// datagram waits when that thread leaves just after the progress thread looked.
const SOCKET_DEFER: Duration = Duration::from_micros(20);

/// [`PROGRESS_SPIN`], or `SOFTIB_PROVIDER_SPIN_US`: read once per process (a poll asks for it,
/// and reading the environment takes a lock and an allocation).
pub(super) fn progress_spin() -> Duration {
    static SPIN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        std::env::var("SOFTIB_PROVIDER_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(PROGRESS_SPIN, Duration::from_micros)
    })
}

/// The progress thread: sleeps on the socket, the kick and its timer until the engine's
/// deadline, then runs a turn — what arrived, the due timers, what is to send — and, for
/// [`PROGRESS_SPIN`] after a turn that had work, keeps turning without sleeping. While it
/// spins it never waits for the engine's lock: an application thread that holds it (a poll,
/// a post) runs the engine itself, so the progress thread yields to it instead. Woken by the
/// socket or a timer alone while an application thread turns the engine in a poll, it leaves
/// both to that thread for [`SOCKET_DEFER`] and looks again.
///
/// Peers write the kick only when nobody looks at the rings: the progress thread looks while
/// it spins, an application thread while it polls or posts (`Station::app_looks`).
///
/// It also watches the control connection (`control`): when the daemon goes (stopped,
/// restarted, killed), the HCA's identity goes with it — QPN and key uniqueness, steering — so
/// every QP moves to the error state, its outstanding work completing with
/// IBV_WC_WR_FLUSH_ERR, as on a device that was removed; control verbs then fail with
/// `DaemonGone`.
pub(super) fn progress(shared: &Shared, control: OwnedFd, events: OwnedFd) {
    use rustix::event::{PollFd, PollFlags};
    let mut control = Some(control);
    let mut events = Some(events);
    let spin = progress_spin();
    let mut last_busy: Option<StdInstant> = None;
    // Until when the socket and the timers are left to an application thread that turns.
    let mut deferred: Option<StdInstant> = None;
    let mut drain = [0u8; 8];
    while !shared.stop.load(Ordering::Acquire) {
        pause::park_point();
        let spinning = last_busy.is_some_and(|t| t.elapsed() < spin);
        let defer_left = deferred
            .map(|d| d.saturating_duration_since(StdInstant::now()))
            .filter(|d| !d.is_zero());
        let timeout = if spinning {
            Some(Duration::ZERO)
        } else if defer_left.is_some() {
            // It stopped looking at the rings (under the lock) in the sleep before it deferred.
            defer_left
        } else {
            let mut st = shared.station.lock().unwrap_or_else(|p| p.into_inner());
            // Peers write the kick from now on; what they put in before, while this thread
            // looked, is taken now — whatever an application thread seems to be doing: one
            // that stopped looking may be on its way to sleep, and nobody rang for these.
            if st.progress_looks(false) {
                Some(Duration::ZERO)
            } else {
                let (engine, at) = st.next_wakeup();
                shared.sleeping_until.store(
                    engine.map_or(u64::MAX, |t| t.as_micros()),
                    Ordering::Release,
                );
                // What the timer is set for is covered by this sleep's own deadline now.
                shared.timer_at.store(u64::MAX, Ordering::Release);
                at.map(|at| at.saturating_duration_since(StdInstant::now()))
            }
        };
        let timeout = timeout.map(timespec);
        let events_fd = events.as_ref().map(|e| e.as_fd());
        // While deferred, the socket's place holds the kick again (looked at twice, harmless).
        let socket = if defer_left.is_some() {
            shared.kick.as_fd()
        } else {
            shared.socket.as_fd()
        };
        let mut pfd = [
            PollFd::from_borrowed_fd(socket, PollFlags::IN),
            PollFd::new(&shared.kick, PollFlags::IN),
            PollFd::from_borrowed_fd(events_fd.unwrap_or(shared.kick.as_fd()), PollFlags::IN),
            PollFd::new(&shared.groups, PollFlags::IN),
            PollFd::new(&shared.timer, PollFlags::IN),
            // Only the peer's hang-up, never the answers the application thread reads.
            PollFd::new(control.as_ref().unwrap_or(&shared.kick), PollFlags::RDHUP),
        ];
        let n = if control.is_some() { 6 } else { 5 };
        let _ = rustix::event::poll(&mut pfd[..n], timeout.as_ref());
        let kicked = pfd[1].revents().contains(PollFlags::IN);
        if kicked {
            let _ = rustix::io::read(&shared.kick, &mut drain);
        }
        let event = events.is_some() && !pfd[2].revents().is_empty();
        if pfd[4].revents().contains(PollFlags::IN) {
            let _ = rustix::io::read(&shared.timer, &mut drain);
        }
        let gone = n == 6
            && pfd[5]
                .revents()
                .intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR);
        if shared.stop.load(Ordering::Acquire) {
            break;
        }
        let grouped = !pfd[3].revents().is_empty();
        if !spinning
            && !kicked
            && !event
            && !gone
            && !grouped
            && shared.app_turning.load(Ordering::SeqCst) > 0
        {
            // Only the socket or a timer, and an application thread turns the engine: its
            // turns take both (taking the lock now would only make it wait). Looked at again
            // in a moment, in case it has left.
            deferred = Some(StdInstant::now() + SOCKET_DEFER);
            continue;
        }
        deferred = None;
        // Woken by the socket or a timer alone, it leaves the engine to an application thread
        // that holds it (a post or a poll, which take what arrived and send what waits) and
        // looks again in a moment, as when one turns (`SOCKET_DEFER`): a streaming poster's
        // flush timer then costs its poster no wait on the lock.
        let routine = !kicked && !event && !gone && !grouped;
        // An event from the daemon (faults, a capture, rings) is taken now, even from under a
        // polling application thread: only this thread reads the channel.
        let mut st = if (spinning || routine) && !gone && !event {
            match shared.station.try_lock() {
                Ok(st) => st,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) if spinning => {
                    std::thread::yield_now();
                    continue;
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    deferred = Some(StdInstant::now() + SOCKET_DEFER);
                    continue;
                }
            }
        } else {
            shared.station.lock().unwrap_or_else(|p| p.into_inner())
        };
        if gone {
            control = None;
            fail_all(&mut st);
        }
        if event && !read_daemon_events(&mut st) {
            events = None;
        }
        let busy = st.turn();
        if busy {
            // While it spins, peers need not write the kick.
            st.progress_looks(true);
        }
        drop(st);
        if busy && shared.app_waiting.load(Ordering::SeqCst) > 0 {
            let _ = rustix::io::write(&shared.app_bell, &1u64.to_ne_bytes());
        }
        if busy {
            last_busy = Some(StdInstant::now());
        } else if spinning {
            std::thread::yield_now();
        }
    }
}

/// Moves every QP to the error state (the daemon is gone).
fn fail_all(st: &mut Station) {
    let qpns: Vec<Qpn> = st.ca.hca().qpns().collect();
    let err = QpAttr {
        qp_state: softib_engine::verbs::QpState::Err,
        ..QpAttr::default()
    };
    for qpn in qpns {
        let _ = st.ca.modify_qp(qpn, &err, AttrMask::STATE);
    }
}
