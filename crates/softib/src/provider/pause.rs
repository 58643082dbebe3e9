//! Holding every progress thread of this process still, for a caller that must be the only
//! thread running for a moment: the drop-in's `ibv_reg_mr` moves a region's pages onto a
//! memory file, which is safe only when nothing can write them between the copy and the
//! switch (`softib-ibverbs` `share.rs`). A progress thread writes memory of the program's
//! heap (the engine's own allocations and frees), so it parks first.
//!
//! A progress thread looks for a pause at the top of its loop, where it holds no lock and no
//! allocation is half done, and waits on a condition variable (a futex in static memory)
//! until the pause ends. [`pause`] kicks every thread, waits (bounded) until all have parked,
//! and returns a guard that ends the pause when dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use super::Shared;

/// Whether a pause is wanted (what a progress thread looks at every turn, without the lock).
static WANTED: AtomicBool = AtomicBool::new(false);
static STATE: Mutex<State> = Mutex::new(State {
    pausing: false,
    parked: 0,
    threads: Vec::new(),
});
static CHANGED: Condvar = Condvar::new();

struct State {
    /// A pause is on (set by [`pause`], cleared by its guard).
    pausing: bool,
    /// Progress threads parked now.
    parked: usize,
    /// Every engine's shared state, to kick its thread.
    threads: Vec<Weak<Shared>>,
}

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts an engine's progress thread (before it starts).
pub(super) fn register(shared: &Arc<Shared>) {
    let mut st = state();
    st.threads.retain(|w| w.strong_count() > 0);
    st.threads.push(Arc::downgrade(shared));
}

/// Called by a progress thread at the top of its loop: parks while a pause is on.
pub(super) fn park_point() {
    if !WANTED.load(Ordering::Acquire) {
        return;
    }
    let mut st = state();
    if !st.pausing {
        return;
    }
    st.parked += 1;
    CHANGED.notify_all();
    while st.pausing {
        st = CHANGED.wait(st).unwrap_or_else(|p| p.into_inner());
    }
    st.parked -= 1;
    CHANGED.notify_all();
}

/// Every progress thread of this process held still, until dropped.
#[derive(Debug)]
pub struct ProgressPause {
    threads: usize,
}

impl ProgressPause {
    /// How many progress threads are parked (running threads of this library that a caller
    /// counting the process's threads may discount).
    pub fn threads(&self) -> usize {
        self.threads
    }
}

impl Drop for ProgressPause {
    fn drop(&mut self) {
        let mut st = state();
        st.pausing = false;
        WANTED.store(false, Ordering::Release);
        CHANGED.notify_all();
        // The next pause starts only once these have left the park.
        let until = Instant::now() + Duration::from_secs(1);
        while st.parked > 0 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = CHANGED
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// Parks every progress thread of this process, waiting up to `timeout` for them: `None` if
/// one did not park in time (the pause is called off), or another pause is on.
pub fn pause(timeout: Duration) -> Option<ProgressPause> {
    let mut st = state();
    if st.pausing {
        return None;
    }
    st.threads.retain(|w| w.strong_count() > 0);
    let live: Vec<Arc<Shared>> = st.threads.iter().filter_map(Weak::upgrade).collect();
    st.pausing = true;
    WANTED.store(true, Ordering::Release);
    for s in &live {
        s.kick();
    }
    let until = Instant::now() + timeout;
    let mut running;
    loop {
        // A thread told to stop meanwhile (its engine closing) parks no more: not waited for.
        running = live
            .iter()
            .filter(|s| !s.stop.load(Ordering::Acquire))
            .count();
        if st.parked >= running {
            break;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            drop(st);
            // Called off: the guard's drop releases whoever parked.
            drop(ProgressPause { threads: 0 });
            return None;
        }
        st = CHANGED
            .wait_timeout(st, left.min(Duration::from_millis(10)))
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    Some(ProgressPause { threads: running })
}
