//! `ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong`: rdma-core's libibverbs example
//! programs over the `softib` verbs API.
//!
//! Same flags (getopt style), the same out-of-band TCP exchange byte for byte (written so that
//! the other side can be rdma-core's own binary), the same send/receive alternation and the
//! same output lines. `-e` is accepted: softib's CQ poll already sleeps until a completion
//! arrives. Where upstream would wait forever — no client, a port that is not Active, a peer
//! that went away, a lost UC/UD message — softib stops after `--timeout` seconds and says why.
//!
//! By concept: [`args`] (the getopt command line), [`exchange`] (the out-of-band messages),
//! [`context`] (the verbs resources), here the run loop and the result lines. Shared with
//! perftest: the TCP of the exchange ([`crate::oob`]) and the facts a stall is explained by
//! ([`crate::port`]).

mod args;
mod context;
mod exchange;

use std::io::Write;
use std::time::{Duration, Instant};

use softib::{
    AhHandle, Buffer, Context, CqHandle, DeviceInfo, MrKeys, PdHandle, PortInfo, Qpn, WcStatus,
};

use crate::port::StallWatch;
use args::{parse, Args, Parsed};
use exchange::{address_line, client_exchange, server_exchange, Dest};

/// The transport a pingpong program runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `ibv_rc_pingpong`.
    Rc,
    /// `ibv_uc_pingpong`.
    Uc,
    /// `ibv_ud_pingpong`.
    Ud,
}

impl Transport {
    /// The transport of the program called `name` (`ibv_rc_pingpong`, ...), if it is one.
    pub fn from_program(name: &str) -> Option<Transport> {
        [Transport::Rc, Transport::Uc, Transport::Ud]
            .into_iter()
            .find(|t| t.program() == name)
    }

    /// The program's name.
    pub fn program(self) -> &'static str {
        match self {
            Transport::Rc => "ibv_rc_pingpong",
            Transport::Uc => "ibv_uc_pingpong",
            Transport::Ud => "ibv_ud_pingpong",
        }
    }
}

/// Upstream's work request ids: a bit each, so that `pending` is a mask of both.
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// The GRH area at the start of every UD receive buffer.
const GRH_BYTES: usize = 40;
/// The byte upstream fills its buffer with.
const FILL: u8 = 0x7b;
/// Upstream marks one byte per page for `-c` (`sysconf(_SC_PAGESIZE)`); 4096 on the
/// platforms softib runs on, and the pattern only interoperates if both sides agree on it.
const PAGE: usize = 4096;

/// The local resources (`struct pingpong_context`); made and driven in [`context`].
struct Pp {
    ctx: Context,
    /// The device's index on this host: what every verb names it by.
    dev: u32,
    info: DeviceInfo,
    port: PortInfo,
    t: Transport,
    pd: PdHandle,
    cq: CqHandle,
    qpn: Qpn,
    buf: Buffer,
    mr: MrKeys,
    ah: Option<AhHandle>,
    size: usize,
    rx_depth: u32,
}

/// The two result lines, computed the way upstream does (a `float` of microseconds).
fn result_lines(size: u32, iters: u32, elapsed: Duration) -> String {
    let usec = f64::from(elapsed.as_micros() as f32);
    let bytes = i64::from(size) * i64::from(iters) * 2;
    format!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec\n{iters} iters in {:.2} seconds = {:.2} usec/iter\n",
        usec / 1_000_000.0,
        bytes as f64 * 8.0 / usec,
        usec / 1_000_000.0,
        usec / f64::from(iters),
    )
}

/// Pages of `data` that do not hold what the client sent with `-c`: the fill byte everywhere
/// except a 0 at the start of each page (upstream's `i / page_size % sizeof(char)`).
fn invalid_pages(data: &[u8]) -> Vec<usize> {
    data.chunks(PAGE)
        .enumerate()
        .filter(|(_, page)| {
            page.iter()
                .enumerate()
                .any(|(k, &b)| b != if k == 0 { 0 } else { FILL })
        })
        .map(|(p, _)| p)
        .collect()
}

/// A failure: the lines for stderr (upstream's wording first, softib's explanation after).
struct Fail(String);

type Result<T> = std::result::Result<T, Fail>;

fn fail<T>(msg: impl Into<String>) -> Result<T> {
    Err(Fail(msg.into()))
}

/// Upstream's message, then softib's reason.
fn because(upstream: &str, e: impl std::fmt::Display) -> Fail {
    Fail(format!("{upstream}\n ({e})"))
}

/// What an error completion status means here.
fn explain_status(s: WcStatus) -> &'static str {
    match s {
        WcStatus::RetryExcErr => {
            "the peer stopped acknowledging: its process exited, its port went down, or \
             packets are lost"
        }
        WcStatus::RnrRetryExcErr => "the peer had no receive posted for too long",
        WcStatus::RemInvReqErr => {
            "the peer refused the message: larger than its receive buffer (do both sides use \
             the same -s?)"
        }
        WcStatus::LocLenErr => {
            "a message larger than the receive buffer arrived (do both sides use the same -s?)"
        }
        WcStatus::WrFlushErr => "the QP is in the error state after an earlier failure",
        WcStatus::RemAccessErr | WcStatus::LocProtErr => {
            "a memory key check failed (L_Key or R_Key)"
        }
        _ => "see ibv_wc_status_str in the libibverbs documentation",
    }
}

/// A PSN as upstream draws it (`lrand48() & 0xffffff`), from the process's random seed.
fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    (h.finish() as u32) & 0xff_ffff
}

/// Runs the program of transport `t` with `args` (without argv[0]). Returns the exit code: 0,
/// or 1 as upstream for every failure.
pub fn main(t: Transport, args: &[String]) -> u8 {
    let a = match parse(t.program(), t, args) {
        Parsed::Run(a) => a,
        Parsed::Exit(code) => return code,
    };
    match run(t, &a) {
        Ok(code) => code,
        Err(Fail(msg)) => {
            let _ = std::io::stdout().flush();
            eprintln!("{msg}");
            1
        }
    }
}

fn run(t: Transport, a: &Args) -> Result<u8> {
    let mut ctx = Context::open().map_err(|e| because("Failed to get IB devices list", e))?;
    let devs = ctx
        .devices()
        .map_err(|e| because("Failed to get IB devices list", e))?;
    let names = || {
        devs.iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let dev_index = match &a.ib_dev {
        Some(n) => match devs.iter().position(|d| &d.name == n) {
            Some(i) => i,
            None => {
                return fail(format!(
                    "IB device {n} not found\n (this host has: {})",
                    names()
                ))
            }
        },
        None if devs.is_empty() => return fail("No IB devices found"),
        None => 0,
    };
    let info = devs[dev_index].clone();
    let dev = dev_index as u32;
    let Some(port) = info.ports.iter().find(|p| p.number == a.ib_port).cloned() else {
        return fail(format!(
            "Couldn't get port info\n ({} has no port {}; it has {})",
            info.name,
            a.ib_port,
            info.ports.len()
        ));
    };
    if t == Transport::Ud {
        let mtu = port.active_mtu.bytes().unwrap_or(256);
        if a.size as usize > mtu {
            return fail(format!("Requested size larger than port MTU ({mtu})"));
        }
    }
    // Upstream would go on and wait forever for a message a port that is not Active
    // cannot carry.
    if port.state != 4 {
        let head = if port.link_layer_ib && port.lid.0 == 0 {
            "Couldn't get local LID\n"
        } else {
            ""
        };
        return fail(format!(
            "{head}{}",
            port.why_not_active(&info.name).unwrap_or_default()
        ));
    }
    let mut gid_idx = a.gid_idx;
    if !port.link_layer_ib && gid_idx.is_none() {
        // RoCE addresses by GID. Upstream sends the zero GID without -g (and then cannot
        // reach the peer); softib takes the GID of the device's own address.
        let pick = crate::port::roce_gid_index(&port);
        eprintln!(
            "(softib) {} is RoCE: using GID index {pick}, the device's address (-g chooses \
             another)",
            info.name
        );
        gid_idx = Some(pick);
    }
    let a = &Args {
        gid_idx,
        ..a.clone()
    };
    let mut pp = Pp::new(ctx, dev, info, port.clone(), a, t)?;
    pp.post_recv(a.rx_depth)?;
    let mut routs = a.rx_depth;

    let gid = match a.gid_idx {
        Some(i) => match port.gids.get(usize::from(i)) {
            Some(g) => g.0,
            None if t == Transport::Ud => {
                return fail(format!(
                    "Could not get local gid for gid index {i}\n ({} port {} has {} GIDs)",
                    pp.info.name,
                    port.number,
                    port.gids.len()
                ))
            }
            None => {
                return fail(format!(
                    "can't read sgid of index {i}\n ({} port {} has {} GIDs)",
                    pp.info.name,
                    port.number,
                    port.gids.len()
                ))
            }
        },
        None => [0; 16],
    };
    let mine = Dest {
        lid: port.lid.0,
        qpn: pp.qpn.value(),
        psn: random_psn(),
        gid,
    };
    outln!("{}", address_line(t, true, &mine));
    let _ = std::io::stdout().flush();

    let remote = match &a.server {
        Some(host) => client_exchange(a, host, &mine)?,
        None => server_exchange(a, &mut pp, &mine)?,
    };
    outln!("{}", address_line(t, false, &remote));
    let _ = std::io::stdout().flush();
    let client = a.server.is_some();
    if client {
        pp.connect(a, mine.psn, &remote)?;
    }

    let mut pending = RECV_WRID;
    if client {
        if a.chk {
            let off = if t == Transport::Ud { GRH_BYTES } else { 0 };
            for i in (0..pp.size).step_by(PAGE) {
                pp.buf.write(off + i, &[0]);
            }
        }
        pp.post_send(&remote)?;
        pending |= SEND_WRID;
    }

    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u32, 0u32);
    let mut watch = StallWatch::new();
    while rcnt < a.iters || scnt < a.iters {
        let wait = a
            .timeout
            .saturating_sub(watch.still_for())
            .min(Duration::from_millis(100));
        let wcs = pp
            .ctx
            .poll_cq(pp.dev, pp.cq, 16, wait)
            .map_err(|e| because("poll CQ failed", e))?;
        if wcs.is_empty() {
            if watch.still_for() >= a.timeout {
                let waiting = if pending & SEND_WRID != 0 {
                    "waiting for the send to complete"
                } else {
                    "waiting for the peer's message"
                };
                return Err(pp.stalled(&watch, a.timeout, rcnt, scnt, a.iters, waiting));
            }
            let (dev, port) = (pp.info.name.clone(), pp.port.number);
            watch.idle(&mut pp.ctx, &dev, port);
            continue;
        }
        watch.progressed();
        for wc in wcs {
            if wc.status != WcStatus::Success {
                let mut m = format!(
                    "Failed status {} ({}) for wr_id {}",
                    wc.status.as_str(),
                    wc.status as u8,
                    wc.wr_id as i32
                );
                if t == Transport::Rc {
                    m.push_str("\nparse WC failed 1");
                }
                m.push_str(&format!("\n ({})", explain_status(wc.status)));
                return fail(m);
            }
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs = routs.saturating_sub(1);
                    if routs <= 1 {
                        let n = pp.rx_depth - routs;
                        pp.post_recv(n)?;
                        routs += n;
                    }
                    rcnt += 1;
                }
                other => return fail(format!("Completion for unknown wr_id {}", other as i32)),
            }
            pending &= !wc.wr_id;
            if scnt < a.iters && pending == 0 {
                pp.post_send(&remote)?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let elapsed = start.elapsed();
    out!("{}", result_lines(a.size, a.iters, elapsed));
    let mut code = 0;
    if !client && a.chk {
        let off = if t == Transport::Ud { GRH_BYTES } else { 0 };
        let mut data = vec![0u8; pp.size];
        if !pp.buf.read(off, &mut data) {
            return fail("Couldn't read the receive buffer");
        }
        for p in invalid_pages(&data) {
            outln!("invalid data in page {p}");
            // Upstream exits 0 regardless; a check that cannot fail the run is no check.
            code = 1;
        }
    }
    let _ = std::io::stdout().flush();
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_use_upstreams_arithmetic() {
        assert_eq!(
            result_lines(4096, 1000, Duration::from_micros(50_000)),
            "8192000 bytes in 0.05 seconds = 1310.72 Mbit/sec\n\
             1000 iters in 0.05 seconds = 50.00 usec/iter\n"
        );
    }

    #[test]
    fn chk_pattern_is_checked_per_page() {
        let mut data = vec![FILL; 3 * PAGE];
        data[0] = 0;
        data[PAGE] = 0;
        data[2 * PAGE] = 0;
        assert!(invalid_pages(&data).is_empty());
        data[PAGE + 7] = 1;
        data[2 * PAGE] = FILL;
        assert_eq!(invalid_pages(&data), vec![1, 2]);
    }
}
