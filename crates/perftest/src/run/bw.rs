//! A bandwidth run (`ib_*_bw`): the posting window, CQ moderation, the receive side, duration
//! and iteration modes, `--run_infinitely`, and the report both sides print.

use super::*;

impl Local {
    /// One BW measurement at `size`; prints the row(s). Returns the report for JSON.
    ///
    /// Who does what: the client sends (or writes, reads, atomics); with `-b` both sides do.
    /// Receives exist only in send tests, on the server (and with `-b` on both). A side with
    /// nothing to post — the server of a write/read/atomic test — waits at the barrier and
    /// prints the client's report, as upstream's does.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn bw(
        &mut self,
        args: &PerftestArgs,
        size: u64,
        remotes: &[Dest],
        ex: &mut Exchange,
        mine: &Dest,
        unit: BwUnit,
        remote_version: &PeerVersion,
    ) -> Result<Option<exchange::BwReport>> {
        let server = args.is_server();
        let ud = args.connection == Connection::Ud;
        let nq = self.qps.len();
        let sender = !server || args.duplex;
        let receiver = args.test == Test::Send && (server || args.duplex);
        let duration = (args.test_type == crate::args::TestType::Duration)
            .then(|| Duration::from_secs(u64::from(args.duration.max(1))));
        // Iteration mode: exactly `iters` per QP. Duration mode: as many as fit.
        let iters = if duration.is_some() {
            u64::MAX
        } else {
            args.iters
        };
        let total = iters.saturating_mul(nq as u64);
        let rx_depth = u64::from(args.rx_depth.max(1)).min(iters);
        if receiver {
            for (q, &qpn) in self.qps.clone().iter().enumerate() {
                let wrs = (0..rx_depth)
                    .map(|i| self.recv_wr((q as u64) << 48 | i, size, ud))
                    .collect();
                self.ctx.post_recv(self.dev, qpn, wrs)?;
            }
        }
        let send = args.test == Test::Send;
        let all = args.test_method == crate::args::TestMethod::All;
        // The barrier before a run: send tests always (the receives are posted), the others
        // only bidirectional (upstream's write/read/atomic clients start right away).
        if send || args.duplex {
            ex.hand_shake(mine)?;
        }
        let infinite = args.test_method == crate::args::TestMethod::Infinitely;
        if !sender && !receiver && infinite {
            // The client runs until it is stopped; so does this side, until it goes away.
            ex.wait_closed()?;
            return Ok(None);
        }
        if !sender && !receiver {
            // Nothing to do here: wait for the client to finish (once for the whole test,
            // even with -a), then print its numbers.
            ex.hand_shake(mine)?;
            let theirs = ex.exchange_bw_reports(remote_version, &exchange::BwReport::default())?;
            out!("{}", report::bw_row(&theirs, None, unit));
            return Ok(Some(theirs));
        }
        let origin = Instant::now();
        let stamps = if sender && duration.is_none() {
            total as usize
        } else {
            0
        };
        let mut tposted = vec![0u64; stamps];
        let mut tcompleted = vec![0u64; stamps];
        let depth = u64::from(args.tx_depth.max(1));
        let post_list = u64::from(args.post_list.max(1)).min(depth);
        // A moderation group larger than the queue would never end signaled.
        let cq_mod = u64::from(args.cq_mod.max(1)).min(depth);
        let mut scnt = vec![0u64; nq];
        let mut ccnt = vec![0u64; nq];
        let mut rposted = vec![rx_depth; nq];
        let mut received = 0u64;
        // Stamps in global post and completion order across QPs, as upstream keeps them
        // (`totscnt`, `totccnt`): the peak windows are computed over that order.
        let (mut totscnt, mut totccnt) = (0usize, 0usize);
        let mut watch = StallWatch::new();
        let mut sending = sender;
        // --run_infinitely: a report per `-D` seconds of what completed in it, forever.
        let mut window = (Instant::now(), 0u64);
        loop {
            // Done sending: time is up (or every WR posted) and every signaled WR completed.
            // After a -D run the WRs past the last signaled one complete unseen, as upstream
            // leaves them.
            let sent_done = !sender
                || (!sending
                    && scnt
                        .iter()
                        .zip(&ccnt)
                        .all(|(&s, &c)| c >= if s == iters { s } else { s - s % cq_mod }))
                || ccnt.iter().sum::<u64>() >= total;
            let recv_done = !receiver || received >= total;
            if sent_done && recv_done {
                break;
            }
            if let (true, Some(d)) = (infinite, duration) {
                if window.0.elapsed() >= d {
                    let done = if sender { ccnt.iter().sum() } else { received };
                    let ns = window.0.elapsed().as_nanos() as u64;
                    let mut r = BwResult::from_args(args, vec![0], vec![ns]);
                    r.no_peak = true;
                    r.duration_mode = true;
                    r.iters = done - window.1;
                    r.bytes = if args.test == Test::Atomic { 8 } else { size };
                    out!("{}", report::bw_row(&r.compute(unit)?, None, unit));
                    let _ = std::io::Write::flush(&mut std::io::stdout());
                    window = (Instant::now(), done);
                }
            }
            if let Some(d) = duration.filter(|_| !infinite) {
                let over = origin.elapsed() >= d;
                if over {
                    sending = false;
                }
                // A receiver in duration mode stops once the sender has had its time and
                // the line has been quiet for a moment.
                if over && receiver && watch.still_for() > Duration::from_millis(300) && sent_done {
                    break;
                }
            }
            if sending {
                for q in 0..nq {
                    // As upstream: keep up to tx_depth WRs outstanding, every cq_mod-th
                    // signaled, so the queue never drains while a signaled one completes;
                    // each post carries `-l` WRs (one by default), as upstream's
                    // `ibv_post_send` of its post list does.
                    loop {
                        let room = depth.saturating_sub(scnt[q] - ccnt[q]);
                        let n = post_list.min(room).min(iters - scnt[q]);
                        if n == 0 || (n < post_list && iters - scnt[q] >= post_list) {
                            break;
                        }
                        let now = origin.elapsed().as_nanos() as u64;
                        let wrs: Vec<SendWr> = (0..n)
                            .map(|i| {
                                let k = scnt[q] + i;
                                if let Some(t) = tposted.get_mut(totscnt + i as usize) {
                                    *t = now;
                                }
                                let signaled = (k + 1) % cq_mod == 0 || k + 1 == iters;
                                self.work_request(
                                    args,
                                    size,
                                    q,
                                    &remotes[q],
                                    (q as u64) << 48 | k,
                                    signaled,
                                )
                            })
                            .collect();
                        self.ctx.post_send(self.dev, self.qps[q], wrs)?;
                        scnt[q] += n;
                        totscnt += n as usize;
                    }
                }
            }
            let side = if server { "server" } else { "client" };
            let wcs = self.poll(Duration::from_millis(20), side)?;
            if wcs.is_empty() {
                if watch.still_for() > self.timeout {
                    let (what, done, need) = if !recv_done {
                        ("receiving messages", received, total)
                    } else {
                        ("waiting for send completions", ccnt.iter().sum(), total)
                    };
                    return Err(self.stalled(&watch, what, done, need));
                }
                watch.idle(&mut self.ctx, &self.info.name, self.port.number);
                continue;
            }
            watch.progressed();
            let now = origin.elapsed().as_nanos() as u64;
            let mut repost = vec![0u64; nq];
            for w in wcs {
                let q = (w.wr_id >> 48) as usize;
                let k = w.wr_id & 0xffff_ffff_ffff;
                if q >= nq {
                    continue;
                }
                if is_receive(w.opcode) {
                    received += 1;
                    if rposted[q] < iters {
                        repost[q] += 1;
                    }
                    continue;
                }
                // A signaled completion retires its whole moderation group.
                let retired = (k + 1).saturating_sub(ccnt[q]) as usize;
                for t in tcompleted.iter_mut().skip(totccnt).take(retired) {
                    *t = now;
                }
                totccnt += retired;
                ccnt[q] = ccnt[q].max(k + 1);
            }
            for (q, n) in repost.into_iter().enumerate() {
                if n > 0 {
                    let wrs = (0..n)
                        .map(|i| self.recv_wr((q as u64) << 48 | (rposted[q] + i), size, ud))
                        .collect();
                    self.ctx.post_recv(self.dev, self.qps[q], wrs)?;
                    rposted[q] += n;
                }
            }
        }
        let elapsed = origin.elapsed().as_nanos() as u64;
        let mut r = if sender && duration.is_none() && args.no_peak {
            // -N: upstream keeps only the first post and the last completion.
            let first = tposted.first().copied().unwrap_or(0);
            let last = tcompleted.last().copied().unwrap_or(elapsed);
            BwResult::from_args(args, vec![first], vec![last])
        } else if sender && duration.is_none() {
            BwResult::from_args(args, tposted, tcompleted)
        } else {
            // Receivers and duration runs have no per-message stamps: start and end only.
            let mut r = BwResult::from_args(args, vec![0], vec![elapsed]);
            r.no_peak = true;
            if duration.is_some() {
                r.iters = if sender { ccnt.iter().sum() } else { received };
                r.duration_mode = true;
            }
            r
        };
        r.bytes = if args.test == Test::Atomic { 8 } else { size };
        let rep = r.compute(unit)?;
        // Upstream's order after a run (perftest 6.06 and 6.x alike): write/read/atomic -a -b
        // meet between the run and the reports; send tests meet after the reports, and only
        // between the sizes of -a; a unidirectional write/read/atomic client meets the server
        // once after the last size (`finish_bw`).
        if !send && args.duplex && all {
            ex.hand_shake(mine)?;
        }
        let reports_go_across = args.duplex && !(send && duration.is_some());
        if reports_go_across {
            let theirs = ex.exchange_bw_reports(remote_version, &rep)?;
            if args.duplex && args.report_both {
                out!("{}", report::bw_row(&rep, None, unit));
                out!("{}", report::bw_row(&theirs, None, unit));
            } else if args.duplex {
                out!("{}", report::bw_row(&rep, Some(&theirs), unit));
            } else {
                out!("{}", report::bw_row(&rep, None, unit));
            }
        } else {
            out!("{}", report::bw_row(&rep, None, unit));
        }
        if send && all {
            ex.hand_shake(mine)?;
        }
        Ok(Some(rep))
    }
}
