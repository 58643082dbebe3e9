//! A latency run (`ib_*_lat`): the ping-pong of SENDs, or of WRITEs that the peer sees land
//! by polling memory, READs and atomics one at a time, and the per-iteration stamps.

use super::*;

impl Local {
    /// One latency measurement at `size`. Returns the statistics to print on this side.
    pub(super) fn lat(
        &mut self,
        args: &PerftestArgs,
        size: u64,
        remotes: &[Dest],
        ex: &mut Exchange,
        mine: &Dest,
    ) -> Result<Option<report::LatStats>> {
        let server = args.is_server();
        let ud = args.connection == Connection::Ud;
        let iters = args.iters;
        let r = remotes[0];
        let qpn = self.qps[0];
        let origin = Instant::now();
        let mut tposted = Vec::with_capacity(iters as usize);
        match args.test {
            Test::Read | Test::Atomic => {
                ex.hand_shake(mine)?;
                if server {
                    // The server only waits, in the closing hand shake.
                    return Ok(None);
                }
                for i in 0..iters {
                    tposted.push(origin.elapsed().as_nanos() as u64);
                    let wr = self.work_request(args, size, 0, &r, i, true);
                    self.ctx.post_send(self.dev, qpn, vec![wr])?;
                    self.wait_one(false, i, iters, "waiting for a read or atomic response")?;
                }
            }
            Test::Send => {
                self.ctx
                    .post_recv(self.dev, qpn, vec![self.recv_wr(0, size, ud)])?;
                ex.hand_shake(mine)?;
                for i in 0..iters {
                    if server {
                        self.wait_one(true, i, iters, "waiting for the client's message")?;
                        self.ctx
                            .post_recv(self.dev, qpn, vec![self.recv_wr(i + 1, size, ud)])?;
                        tposted.push(origin.elapsed().as_nanos() as u64);
                        let wr = self.work_request(args, size, 0, &r, i, true);
                        self.ctx.post_send(self.dev, qpn, vec![wr])?;
                        self.wait_one(false, i, iters, "waiting for a send completion")?;
                    } else {
                        tposted.push(origin.elapsed().as_nanos() as u64);
                        let wr = self.work_request(args, size, 0, &r, i, true);
                        self.ctx.post_send(self.dev, qpn, vec![wr])?;
                        self.wait_one(false, i, iters, "waiting for a send completion")?;
                        self.wait_one(true, i, iters, "waiting for the server's reply")?;
                        self.ctx
                            .post_recv(self.dev, qpn, vec![self.recv_wr(i + 1, size, ud)])?;
                    }
                }
            }
            Test::Write => {
                // Ping-pong on the last byte of each side's receive area (perftest's scheme).
                let last_at = (self.recv_off + size - 1) as usize;
                let send_last = (size - 1) as usize;
                self.buf.write(last_at, &[0]);
                ex.hand_shake(mine)?;
                for i in 0..iters {
                    // Upstream's marks: the i-th message carries (char)(i + 1), wrapping.
                    // The server writes first and the client answers (upstream's
                    // run_iter_lat_write: the server skips its wait before its first post).
                    let mark = (i + 1) as u8;
                    if !server {
                        self.wait_byte(last_at, mark, i, iters)?;
                    }
                    tposted.push(origin.elapsed().as_nanos() as u64);
                    self.buf.write(send_last, &[mark]);
                    let wr = self.work_request(args, size, 0, &r, i, true);
                    self.ctx.post_send(self.dev, qpn, vec![wr])?;
                    if server {
                        self.wait_byte(last_at, mark, i, iters)?;
                    }
                    self.wait_one(false, i, iters, "waiting for a write completion")?;
                }
            }
        }
        let res = LatResult::from_post_times(args.test, size, &tposted);
        let mut stats = res.compute()?;
        stats.iters = iters;
        Ok(Some(stats))
    }

    /// Waits for one completion of the given side (`recv`: a receive; otherwise a send,
    /// write, read or atomic), keeping completions of the other side for later.
    fn wait_one(&mut self, recv: bool, i: u64, n: u64, what: &str) -> Result<()> {
        let mut watch = StallWatch::new();
        loop {
            if let Some(at) = self.held.iter().position(|w| is_receive(w.opcode) == recv) {
                self.held.remove(at);
                return Ok(());
            }
            let side = if self.server { "server" } else { "client" };
            let wcs = self.poll(Duration::from_millis(100), side)?;
            self.held.extend(wcs);
            if self.held.iter().any(|w| is_receive(w.opcode) == recv) {
                continue;
            }
            if watch.still_for() > self.timeout {
                return Err(self.stalled(&watch, what, i, n));
            }
            watch.idle(&mut self.ctx, &self.info.name, self.port.number);
        }
    }

    fn wait_byte(&mut self, at: usize, mark: u8, i: u64, n: u64) -> Result<()> {
        let t0 = Instant::now();
        let mut watch = StallWatch::new();
        let mut b = [0u8; 1];
        loop {
            if self.buf.read(at, &mut b) && b[0] == mark {
                return Ok(());
            }
            if watch.still_for() > self.timeout {
                return Err(self.stalled(&watch, "waiting for the peer's RDMA WRITE", i, n));
            }
            watch.idle(&mut self.ctx, &self.info.name, self.port.number);
            // The daemon that moves the peer's bytes needs a CPU too: on a machine with fewer
            // cores than spinning processes a spinner holds it back. Spin (yielding) for a
            // moment, then sleep in short naps.
            if t0.elapsed() < Duration::from_micros(200) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }
}
