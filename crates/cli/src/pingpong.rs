//! `ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong`: rdma-core's libibverbs example
//! programs over the `softib` verbs API.
//!
//! Same flags (getopt style), the same out-of-band TCP exchange byte for byte (written so that
//! the other side can be rdma-core's own binary), the same send/receive alternation and the
//! same output lines. `-e` is accepted: softib's CQ poll already sleeps until a completion
//! arrives. Where
//! upstream would wait forever — no client, a port that is not Active, a peer that went
//! away, a lost UC/UD message — softib stops after `--timeout` seconds and says why.

use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use softib::{
    AccessFlags, AddressVector, AhHandle, AttrMask, Buffer, Context, CqHandle, DeviceInfo, Gid,
    GlobalRoute, Lid, MrKeys, Mtu, PdHandle, PortInfo, Psn, QpAttr, QpCap, QpInitAttr, QpState,
    QpType, Qpn, RecvWr, SendFlags, SendWr, Sge, UdDest, WcStatus, WrOpcode,
};

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
    fn from_program(name: &str) -> Option<Transport> {
        match name {
            "ibv_rc_pingpong" => Some(Transport::Rc),
            "ibv_uc_pingpong" => Some(Transport::Uc),
            "ibv_ud_pingpong" => Some(Transport::Ud),
            _ => None,
        }
    }
}

/// Upstream's work request ids: a bit each, so that `pending` is a mask of both.
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// The Q_Key both UD sides use (upstream's constant).
const UD_QKEY: u32 = 0x1111_1111;
/// The GRH area at the start of every UD receive buffer.
const GRH_BYTES: usize = 40;
/// The byte upstream fills its buffer with.
const FILL: u8 = 0x7b;
/// Upstream marks one byte per page for `-c` (`sysconf(_SC_PAGESIZE)`); 4096 on the
/// platforms softib runs on, and the pattern only interoperates if both sides agree on it.
const PAGE: usize = 4096;
/// `sizeof "0000:000000:000000:00000000000000000000000000000000"`: the message with its NUL.
const MSG_LEN: usize = 52;
/// `sizeof "done"`.
const DONE: &[u8; 5] = b"done\0";

/// Options as parsed.
#[derive(Debug, Clone, PartialEq)]
struct Args {
    port: u16,
    ib_dev: Option<String>,
    ib_port: u8,
    size: u32,
    mtu: Mtu,
    rx_depth: u32,
    iters: u32,
    sl: u8,
    events: bool,
    gid_idx: Option<u8>,
    chk: bool,
    timeout: Duration,
    server: Option<String>,
}

impl Args {
    fn defaults(t: Transport) -> Args {
        Args {
            port: 18515,
            ib_dev: None,
            ib_port: 1,
            // ud_pingpong's code says 1024 (its usage text says 2048; the code wins).
            size: if t == Transport::Ud { 1024 } else { 4096 },
            mtu: Mtu::Mtu1024,
            rx_depth: 500,
            iters: 1000,
            sl: 0,
            events: false,
            gid_idx: None,
            chk: false,
            timeout: Duration::from_secs(15),
            server: None,
        }
    }
}

/// What an option means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opt {
    Port,
    IbDev,
    IbPort,
    Size,
    Mtu,
    RxDepth,
    Iters,
    Sl,
    Events,
    GidIdx,
    Chk,
    Timeout,
    Help,
    /// An upstream option softib does not implement, with the reason.
    Refused(&'static str),
}

struct OptSpec {
    short: Option<char>,
    long: &'static str,
    has_arg: bool,
    opt: Opt,
}

const fn spec(short: Option<char>, long: &'static str, has_arg: bool, opt: Opt) -> OptSpec {
    OptSpec {
        short,
        long,
        has_arg,
        opt,
    }
}

/// The options of one program: upstream's, in upstream's order, then softib's own.
fn options(t: Transport) -> Vec<OptSpec> {
    let mut v = vec![
        spec(Some('p'), "port", true, Opt::Port),
        spec(Some('d'), "ib-dev", true, Opt::IbDev),
        spec(Some('i'), "ib-port", true, Opt::IbPort),
        spec(Some('s'), "size", true, Opt::Size),
    ];
    if t != Transport::Ud {
        v.push(spec(Some('m'), "mtu", true, Opt::Mtu));
    }
    v.extend([
        spec(Some('r'), "rx-depth", true, Opt::RxDepth),
        spec(Some('n'), "iters", true, Opt::Iters),
        spec(Some('l'), "sl", true, Opt::Sl),
        spec(Some('e'), "events", false, Opt::Events),
        spec(Some('g'), "gid-idx", true, Opt::GidIdx),
        spec(Some('c'), "chk", false, Opt::Chk),
    ]);
    if t == Transport::Rc {
        v.extend([
            spec(
                Some('o'),
                "odp",
                false,
                Opt::Refused("softib registers memory up front; it has no on-demand paging"),
            ),
            spec(
                Some('O'),
                "iodp",
                false,
                Opt::Refused("softib has no (implicit) on-demand paging"),
            ),
            spec(
                Some('P'),
                "prefetch",
                false,
                Opt::Refused("prefetch applies to on-demand paging, which softib does not have"),
            ),
            spec(
                Some('t'),
                "ts",
                false,
                Opt::Refused("softib's completions carry no hardware timestamps"),
            ),
            spec(
                Some('j'),
                "dm",
                false,
                Opt::Refused("softib has no device memory to allocate"),
            ),
            spec(
                Some('N'),
                "new_send",
                false,
                Opt::Refused("softib offers only the classic ibv_post_send interface"),
            ),
        ]);
    }
    v.push(spec(None, "timeout", true, Opt::Timeout));
    v.push(spec(None, "help", false, Opt::Help));
    v
}

fn usage(prog: &str, t: Transport) -> String {
    let mut u = String::new();
    u.push_str("Usage:\n");
    u.push_str(&format!(
        "  {prog}            start a server and wait for connection\n"
    ));
    u.push_str(&format!(
        "  {prog} <host>     connect to server at <host>\n"
    ));
    u.push_str("\nOptions:\n");
    u.push_str("  -p, --port=<port>      listen on/connect to port <port> (default 18515)\n");
    u.push_str("  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)\n");
    u.push_str("  -i, --ib-port=<port>   use port <port> of IB device (default 1)\n");
    if t == Transport::Ud {
        u.push_str("  -s, --size=<size>      size of message to exchange (default 1024)\n");
    } else {
        u.push_str("  -s, --size=<size>      size of message to exchange (default 4096)\n");
        u.push_str("  -m, --mtu=<size>       path MTU (default 1024)\n");
    }
    u.push_str("  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)\n");
    u.push_str("  -n, --iters=<iters>    number of exchanges (default 1000)\n");
    u.push_str("  -l, --sl=<sl>          service level value\n");
    u.push_str("  -e, --events           sleep on CQ events (default poll)\n");
    u.push_str("  -g, --gid-idx=<gid index> local port gid index\n");
    u.push_str("  -c, --chk              validate received buffer\n");
    u.push_str(
        "      --timeout=<sec>    (softib) give up and explain after <sec> seconds without \
         progress (default 15)\n",
    );
    u
}

/// What parsing decided.
#[derive(Debug)]
enum Parsed {
    Run(Args),
    /// Stop with this exit code (after printing what was printed).
    Exit(u8),
}

/// `strtoul(s, NULL, 0)`'s syntax: `0x` hex, leading `0` octal, else decimal; but the whole
/// string must be a number (upstream silently reads garbage as 0).
fn c_number(s: &str) -> Option<i64> {
    let t = s.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if t.len() > 1 && t.starts_with('0') {
        i64::from_str_radix(&t[1..], 8).ok()?
    } else {
        t.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

/// A usage error: getopt's message on stderr, the usage on stdout, exit 1 (as upstream).
fn usage_error(prog: &str, t: Transport, msg: &str) -> Parsed {
    if !msg.is_empty() {
        eprintln!("{prog}: {msg}");
    }
    print!("{}", usage(prog, t));
    Parsed::Exit(1)
}

fn parse(prog: &str, t: Transport, argv: &[String]) -> Parsed {
    let specs = options(t);
    let mut a = Args::defaults(t);
    let mut positionals: Vec<String> = Vec::new();
    let mut i = 0;
    // (option, its argument) in command-line order; applied after the scan.
    let mut found: Vec<(Opt, String, Option<String>)> = Vec::new();
    while i < argv.len() {
        let arg = &argv[i];
        i += 1;
        if arg == "--" {
            positionals.extend(argv[i..].iter().cloned());
            break;
        }
        if let Some(body) = arg.strip_prefix("--") {
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            // getopt_long accepts an unambiguous prefix of a long name.
            let exact = specs.iter().find(|s| s.long == name);
            let matches: Vec<&OptSpec> =
                specs.iter().filter(|s| s.long.starts_with(name)).collect();
            let s = match (exact, matches.len()) {
                (Some(s), _) => s,
                (None, 1) => matches[0],
                (None, 0) => {
                    return usage_error(prog, t, &format!("unrecognized option '--{name}'"))
                }
                (None, _) => {
                    let names: Vec<String> =
                        matches.iter().map(|s| format!("'--{}'", s.long)).collect();
                    return usage_error(
                        prog,
                        t,
                        &format!(
                            "option '--{name}' is ambiguous; possibilities: {}",
                            names.join(" ")
                        ),
                    );
                }
            };
            let shown = format!("--{}", s.long);
            if s.has_arg {
                let v = match inline {
                    Some(v) => v,
                    None if i < argv.len() => {
                        i += 1;
                        argv[i - 1].clone()
                    }
                    None => {
                        return usage_error(
                            prog,
                            t,
                            &format!("option '--{}' requires an argument", s.long),
                        )
                    }
                };
                found.push((s.opt, shown, Some(v)));
            } else {
                if inline.is_some() {
                    return usage_error(
                        prog,
                        t,
                        &format!("option '--{}' doesn't allow an argument", s.long),
                    );
                }
                found.push((s.opt, shown, None));
            }
            continue;
        }
        if arg.len() > 1 && arg.starts_with('-') {
            // A cluster of short options; one taking an argument ends it.
            let chars: Vec<char> = arg.chars().skip(1).collect();
            let mut k = 0;
            while k < chars.len() {
                let c = chars[k];
                k += 1;
                let Some(s) = specs.iter().find(|s| s.short == Some(c)) else {
                    return usage_error(prog, t, &format!("invalid option -- '{c}'"));
                };
                let shown = format!("-{c}");
                if s.has_arg {
                    let rest: String = chars[k..].iter().collect();
                    let v = if !rest.is_empty() {
                        rest
                    } else if i < argv.len() {
                        i += 1;
                        argv[i - 1].clone()
                    } else {
                        return usage_error(
                            prog,
                            t,
                            &format!("option requires an argument -- '{c}'"),
                        );
                    };
                    found.push((s.opt, shown, Some(v)));
                    break;
                }
                found.push((s.opt, shown, None));
            }
            continue;
        }
        // GNU getopt permutes: the server name may come before the options.
        positionals.push(arg.clone());
    }
    for (opt, shown, val) in found {
        let v = val.unwrap_or_default();
        let num = || c_number(&v);
        let bad = |what: &str| -> Parsed {
            eprintln!("{prog}: invalid {what} '{v}' for {shown}");
            Parsed::Exit(1)
        };
        match opt {
            Opt::Port => match num() {
                Some(p) if (0..=65535).contains(&p) => a.port = p as u16,
                _ => return usage_error(prog, t, ""),
            },
            Opt::IbDev => a.ib_dev = Some(v.clone()),
            Opt::IbPort => match num() {
                Some(p) if (1..=255).contains(&p) => a.ib_port = p as u8,
                _ => return usage_error(prog, t, ""),
            },
            Opt::Size => match num().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => a.size = n,
                None => return bad("size"),
            },
            Opt::Mtu => match num()
                .and_then(|n| usize::try_from(n).ok())
                .and_then(Mtu::from_bytes)
            {
                Some(m) => a.mtu = m,
                None => return usage_error(prog, t, ""),
            },
            Opt::RxDepth => match num().and_then(|n| u32::try_from(n).ok()) {
                // Zero receives would make the first message wait forever (upstream hangs).
                Some(0) => {
                    eprintln!(
                        "{prog}: -r 0: at least one receive must be posted, or no message \
                         can ever arrive"
                    );
                    return Parsed::Exit(1);
                }
                Some(n) => a.rx_depth = n,
                None => return bad("receive depth"),
            },
            Opt::Iters => match num().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => a.iters = n,
                None => return bad("iteration count"),
            },
            Opt::Sl => match num() {
                Some(n) if (0..=15).contains(&n) => a.sl = n as u8,
                _ => return bad("service level (0-15)"),
            },
            Opt::Events => a.events = true,
            Opt::GidIdx => match num() {
                // Upstream's "no GID" is -1.
                Some(n) if n < 0 => a.gid_idx = None,
                Some(n) if n <= 255 => a.gid_idx = Some(n as u8),
                _ => return bad("GID index"),
            },
            Opt::Chk => a.chk = true,
            Opt::Timeout => match v.trim().parse::<f64>() {
                Ok(s) if s > 0.0 && s.is_finite() && s < 1e9 => {
                    a.timeout = Duration::from_secs_f64(s)
                }
                _ => return bad("timeout in seconds"),
            },
            Opt::Help => {
                print!("{}", usage(prog, t));
                return Parsed::Exit(0);
            }
            Opt::Refused(why) => {
                eprintln!("{prog}: {shown} is not supported by softib: {why}");
                return Parsed::Exit(1);
            }
        }
    }
    match positionals.len() {
        0 => {}
        1 => a.server = positionals.pop(),
        _ => return usage_error(prog, t, ""),
    }
    Parsed::Run(a)
}

/// One side's address as the exchange carries it (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Dest {
    lid: u16,
    qpn: u32,
    psn: u32,
    gid: [u8; 16],
}

impl Dest {
    /// `"%04x:%06x:%06x:%s"` with the GID as upstream's `gid_to_wire_gid` writes it, NUL
    /// padded to the fixed message size.
    ///
    /// `gid_to_wire_gid` prints each 32-bit word of the raw GID after `htonl` of its native
    /// load, which on either byte order is the bytes in memory order: plain hex of the 16
    /// bytes.
    fn to_wire(self) -> [u8; MSG_LEN] {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!(
            "{:04x}:{:06x}:{:06x}:{gid}",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff
        );
        let mut msg = [0u8; MSG_LEN];
        let n = text.len().min(MSG_LEN - 1);
        msg[..n].copy_from_slice(&text.as_bytes()[..n]);
        msg
    }

    /// Parses what `sscanf(msg, "%x:%x:%x:%s")` + `wire_gid_to_gid` read.
    fn from_wire(msg: &[u8]) -> Option<Dest> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end]).ok()?;
        let mut f = text.splitn(4, ':');
        let lid = u32::from_str_radix(f.next()?, 16).ok()?;
        let qpn = u32::from_str_radix(f.next()?, 16).ok()?;
        let psn = u32::from_str_radix(f.next()?, 16).ok()?;
        let g = f.next()?.trim();
        if g.len() < 32 || !g.is_char_boundary(32) {
            return None;
        }
        let mut gid = [0u8; 16];
        for (k, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(g.get(2 * k..2 * k + 2)?, 16).ok()?;
        }
        Some(Dest {
            lid: u16::try_from(lid).ok()?,
            qpn: qpn & 0xff_ffff,
            psn: psn & 0xff_ffff,
            gid,
        })
    }

    /// Upstream uses a GRH exactly when the peer's GID has a nonzero interface id.
    fn global(&self) -> bool {
        self.gid[8..].iter().any(|&b| b != 0)
    }
}

/// `inet_ntop(AF_INET6, ...)` as glibc writes it: like Rust's, except that glibc also writes
/// the deprecated IPv4-compatible form (`::a.b.c.d`) in dotted quad.
fn gid_text(gid: &[u8; 16]) -> String {
    let a = Ipv6Addr::from(*gid);
    let w = a.segments();
    if w[..6].iter().all(|&x| x == 0) && w[6] != 0 {
        return format!("::{}.{}.{}.{}", gid[12], gid[13], gid[14], gid[15]);
    }
    a.to_string()
}

/// The address lines; `ibv_ud_pingpong` writes a colon before the GID of its local line.
fn address_line(t: Transport, local: bool, d: &Dest) -> String {
    let (label, sep) = match (local, t) {
        (true, Transport::Ud) => ("  local address:  ", ":"),
        (true, _) => ("  local address:  ", ","),
        (false, _) => ("  remote address: ", ","),
    };
    format!(
        "{label}LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {}",
        d.lid,
        d.qpn,
        d.psn,
        gid_text(&d.gid)
    )
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

/// The local resources (`struct pingpong_context`).
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

impl Pp {
    /// `pp_init_ctx`: buffer, PD, MR, CQ, QP, and the QP to INIT.
    fn new(
        mut ctx: Context,
        dev: u32,
        info: DeviceInfo,
        port: PortInfo,
        a: &Args,
        t: Transport,
    ) -> Result<Pp> {
        let size = a.size as usize;
        let len = if t == Transport::Ud {
            size + GRH_BYTES
        } else {
            size
        };
        let buf = ctx
            .alloc_buffer(len.max(1))
            .map_err(|e| because("Couldn't allocate work buf.", e))?;
        buf.write(0, &vec![FILL; len]);
        let pd = ctx
            .alloc_pd(dev)
            .map_err(|e| because("Couldn't allocate PD", e))?;
        let mr = ctx
            .reg_mr(dev, pd, &buf, 0, len.max(1), AccessFlags::LOCAL_WRITE)
            .map_err(|e| because("Couldn't register MR", e))?;
        let cq = ctx
            .create_cq(dev, a.rx_depth.saturating_add(1))
            .map_err(|e| because("Couldn't create CQ", e))?;
        let qp_type = match t {
            Transport::Rc => QpType::Rc,
            Transport::Uc => QpType::Uc,
            Transport::Ud => QpType::Ud,
        };
        let qpn = ctx
            .create_qp(
                dev,
                QpInitAttr {
                    qp_type,
                    pd,
                    send_cq: cq,
                    recv_cq: cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: 1,
                        max_recv_wr: a.rx_depth,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    sq_sig_all: false,
                },
            )
            .map_err(|e| because("Couldn't create QP", e))?;
        let mut attr = QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: a.ib_port,
            ..QpAttr::default()
        };
        let mut mask = AttrMask::STATE
            .with(AttrMask::PKEY_INDEX)
            .with(AttrMask::PORT);
        if t == Transport::Ud {
            attr.qkey = UD_QKEY;
            mask = mask.with(AttrMask::QKEY);
        } else {
            // Sends only: no remote access at all.
            attr.qp_access_flags = AccessFlags::NONE;
            mask = mask.with(AttrMask::ACCESS_FLAGS);
        }
        ctx.modify_qp(dev, qpn, &attr, mask)
            .map_err(|e| because("Failed to modify QP to INIT", e))?;
        Ok(Pp {
            ctx,
            dev,
            info,
            port,
            t,
            pd,
            cq,
            qpn,
            buf,
            mr,
            ah: None,
            size,
            rx_depth: a.rx_depth,
        })
    }

    /// Posts `n` receives of the whole buffer (UD: the GRH area and the message).
    fn post_recv(&mut self, n: u32) -> Result<()> {
        let length = if self.t == Transport::Ud {
            self.size + GRH_BYTES
        } else {
            self.size
        } as u32;
        let wrs = (0..n)
            .map(|_| RecvWr {
                wr_id: RECV_WRID,
                sg_list: vec![Sge {
                    addr: self.buf.addr(),
                    length,
                    lkey: self.mr.lkey,
                }],
            })
            .collect();
        self.ctx
            .post_recv(self.dev, self.qpn, wrs)
            .map_err(|e| because(&format!("Couldn't post receive ({n})"), e))
    }

    /// Posts the one send (UD: from after the GRH area, to the peer's QP).
    fn post_send(&mut self, remote: &Dest) -> Result<()> {
        let off = if self.t == Transport::Ud {
            GRH_BYTES
        } else {
            0
        };
        let wr = SendWr {
            wr_id: SEND_WRID,
            opcode: WrOpcode::Send,
            sg_list: vec![Sge {
                addr: self.buf.addr() + off as u64,
                length: self.size as u32,
                lkey: self.mr.lkey,
            }],
            flags: SendFlags::SIGNALED,
            inline_data: None,
            ud: self.ah.map(|ah| UdDest {
                ah,
                remote_qpn: Qpn::new(remote.qpn),
                remote_qkey: UD_QKEY,
            }),
        };
        self.ctx
            .post_send(self.dev, self.qpn, vec![wr])
            .map_err(|e| because("Couldn't post send", e))
    }

    fn av(&self, a: &Args, d: &Dest) -> AddressVector {
        AddressVector {
            dlid: Lid(d.lid),
            sl: a.sl,
            src_path_bits: 0,
            static_rate: 0,
            grh: d.global().then(|| GlobalRoute {
                dgid: Gid(d.gid),
                flow_label: 0,
                // Upstream passes its -g as is (-1 without it, which the kernel refuses);
                // index 0 is what such a peer can only have meant.
                sgid_index: a.gid_idx.unwrap_or(0),
                hop_limit: 1,
                traffic_class: 0,
            }),
            port_num: a.ib_port,
        }
    }

    /// `pp_connect_ctx`: RTR and RTS with upstream's attributes (UD: and the AH).
    fn connect(&mut self, a: &Args, my_psn: u32, d: &Dest) -> Result<()> {
        let av = self.av(a, d);
        let (rtr, rtr_mask, rts, rts_mask) = match self.t {
            Transport::Ud => (
                QpAttr {
                    qp_state: QpState::Rtr,
                    ..QpAttr::default()
                },
                AttrMask::STATE,
                QpAttr {
                    qp_state: QpState::Rts,
                    sq_psn: Psn::new(my_psn),
                    ..QpAttr::default()
                },
                AttrMask::STATE.with(AttrMask::SQ_PSN),
            ),
            Transport::Uc | Transport::Rc => {
                let rtr = QpAttr {
                    qp_state: QpState::Rtr,
                    path_mtu: a.mtu,
                    dest_qp_num: Qpn::new(d.qpn),
                    rq_psn: Psn::new(d.psn),
                    max_dest_rd_atomic: 1,
                    min_rnr_timer: 12,
                    ah_attr: av,
                    ..QpAttr::default()
                };
                let mut rtr_mask = AttrMask::STATE
                    .with(AttrMask::AV)
                    .with(AttrMask::PATH_MTU)
                    .with(AttrMask::DEST_QPN)
                    .with(AttrMask::RQ_PSN);
                let rts = QpAttr {
                    qp_state: QpState::Rts,
                    timeout: 14,
                    retry_cnt: 7,
                    rnr_retry: 7,
                    sq_psn: Psn::new(my_psn),
                    max_rd_atomic: 1,
                    ..rtr
                };
                let mut rts_mask = AttrMask::STATE.with(AttrMask::SQ_PSN);
                if self.t == Transport::Rc {
                    rtr_mask = rtr_mask
                        .with(AttrMask::MAX_DEST_RD_ATOMIC)
                        .with(AttrMask::MIN_RNR_TIMER);
                    rts_mask = rts_mask
                        .with(AttrMask::TIMEOUT)
                        .with(AttrMask::RETRY_CNT)
                        .with(AttrMask::RNR_RETRY)
                        .with(AttrMask::MAX_QP_RD_ATOMIC);
                }
                (rtr, rtr_mask, rts, rts_mask)
            }
        };
        self.ctx
            .modify_qp(self.dev, self.qpn, &rtr, rtr_mask)
            .map_err(|e| because("Failed to modify QP to RTR", e))?;
        self.ctx
            .modify_qp(self.dev, self.qpn, &rts, rts_mask)
            .map_err(|e| because("Failed to modify QP to RTS", e))?;
        if self.t == Transport::Ud {
            let ah = self
                .ctx
                .create_ah(self.dev, self.pd, av)
                .map_err(|e| because("Failed to create AH", e))?;
            self.ah = Some(ah);
        }
        Ok(())
    }

    /// What to say when nothing completed for `--timeout`: where it stopped, the port, and
    /// what the HCA dropped.
    fn stalled(
        &mut self,
        timeout: Duration,
        rcnt: u32,
        scnt: u32,
        iters: u32,
        waiting: &str,
    ) -> Fail {
        let mut msg = format!(
            "No completion for {} s while {waiting}: {rcnt} of {iters} messages received, \
             {scnt} of {iters} sent.",
            timeout.as_secs_f64()
        );
        match self.ctx.devices() {
            Ok(devs) => {
                if let Some(d) = devs.iter().find(|d| d.name == self.info.name) {
                    if let Some(p) = d.ports.iter().find(|p| p.number == self.port.number) {
                        if p.state != 4 {
                            msg.push('\n');
                            msg.push_str(&p.why_not_active(&d.name).unwrap_or_default());
                        }
                    }
                    if d.drops.is_empty() {
                        msg.push_str(
                            "\nThis HCA dropped nothing: the peer sent nothing more (did it \
                             exit, or is its port no longer Active?).",
                        );
                    } else {
                        msg.push_str("\nThis HCA has dropped (counts since it started):");
                        for (r, n) in &d.drops {
                            msg.push_str(&format!(" {r}={n}"));
                        }
                    }
                }
            }
            Err(e) => msg.push_str(&format!("\n(could not ask the HCA why: {e})")),
        }
        if self.t != Transport::Rc {
            msg.push_str(
                "\nUC and UD do not retransmit: one lost message stops a ping-pong for good \
                 (RC recovers).",
            );
        }
        Fail(msg)
    }
}

/// A TCP stream's remaining time until `deadline`, at least a millisecond (zero means
/// "no timeout" to the socket calls).
fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

fn io_why(e: &std::io::Error, timeout: Duration) -> String {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            "the peer closed the connection: it exited or refused the exchange".to_string()
        }
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
            "the peer sent nothing for {} s (--timeout)",
            timeout.as_secs_f64()
        ),
        _ => e.to_string(),
    }
}

/// `pp_client_exch_dest`: connect, send ours, read theirs, send "done".
fn client_exchange(a: &Args, host: &str, mine: &Dest) -> Result<Dest> {
    let deadline = Instant::now() + a.timeout;
    let addrs: Vec<SocketAddr> = match (host, a.port).to_socket_addrs() {
        Ok(it) => it.collect(),
        Err(e) => return fail(format!("{e} for {host}:{}", a.port)),
    };
    // Upstream tries once; softib retries a refused connection until the timeout, so that a
    // client started a moment before its server still finds it.
    let mut last_err = None;
    let mut stream = None;
    while stream.is_none() {
        for addr in &addrs {
            match TcpStream::connect_timeout(addr, left(deadline)) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last_err = Some(e),
            }
        }
        if stream.is_none() {
            if Instant::now() >= deadline {
                let why = last_err.map_or_else(|| "no address".to_string(), |e| e.to_string());
                return fail(format!(
                    "Couldn't connect to {host}:{}\n ({why} for {} s: is the server running \
                     and listening on port {}?)",
                    a.port,
                    a.timeout.as_secs_f64(),
                    a.port
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let Some(mut s) = stream else {
        return fail(format!("Couldn't connect to {host}:{}", a.port));
    };
    // The exchange itself gets a full --timeout of its own, however long connecting took.
    let deadline = Instant::now() + a.timeout;
    let _ = s.set_write_timeout(Some(left(deadline)));
    if let Err(e) = s.write_all(&mine.to_wire()) {
        return Err(because(
            "Couldn't send local address",
            io_why(&e, a.timeout),
        ));
    }
    let mut msg = [0u8; MSG_LEN];
    let _ = s.set_read_timeout(Some(left(deadline)));
    let exchanged = s.read_exact(&mut msg).and_then(|()| s.write_all(DONE));
    if let Err(e) = exchanged {
        return Err(because(
            "Couldn't read/write remote address",
            io_why(&e, a.timeout),
        ));
    }
    Dest::from_wire(&msg).ok_or_else(|| {
        Fail(format!(
            "Couldn't read/write remote address\n (the server sent {:?}, not \
             LID:QPN:PSN:GID)",
            String::from_utf8_lossy(&msg).trim_end_matches('\0')
        ))
    })
}

/// `pp_server_exch_dest`: accept, read theirs, connect the QP, send ours, read "done".
fn server_exchange(a: &Args, pp: &mut Pp, mine: &Dest) -> Result<Dest> {
    let listener = TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], a.port)))
        .map_err(|e| because(&format!("Couldn't listen to port {}", a.port), e))?;
    let deadline = Instant::now() + a.timeout;
    // Upstream waits in accept() forever; softib gives up after --timeout.
    let _ = listener.set_nonblocking(true);
    let mut s = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return fail(format!(
                        "No client connected to port {} within {} s (--timeout): start the \
                         client with this host's name, or raise --timeout",
                        a.port,
                        a.timeout.as_secs_f64()
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(because("accept() failed", e)),
        }
    };
    drop(listener);
    // The exchange itself gets a full --timeout of its own, however long the wait was.
    let deadline = Instant::now() + a.timeout;
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(left(deadline)));
    let mut msg = [0u8; MSG_LEN];
    if let Err(e) = s.read_exact(&mut msg) {
        return Err(because(
            &format!("0/{MSG_LEN}: Couldn't read remote address"),
            io_why(&e, a.timeout),
        ));
    }
    let Some(remote) = Dest::from_wire(&msg) else {
        return fail(format!(
            "{MSG_LEN}/{MSG_LEN}: Couldn't read remote address\n (the client sent {:?}, not \
             LID:QPN:PSN:GID)",
            String::from_utf8_lossy(&msg).trim_end_matches('\0')
        ));
    };
    if let Err(Fail(m)) = pp.connect(a, mine.psn, &remote) {
        return fail(format!("{m}\nCouldn't connect to remote QP"));
    }
    let _ = s.set_write_timeout(Some(left(deadline)));
    let _ = s.set_read_timeout(Some(left(deadline)));
    let mut done = [0u8; DONE.len()];
    let sent = s
        .write_all(&mine.to_wire())
        .and_then(|()| s.read_exact(&mut done));
    if let Err(e) = sent {
        return Err(because(
            "Couldn't send/recv local address",
            io_why(&e, a.timeout),
        ));
    }
    Ok(remote)
}

/// A PSN as upstream draws it (`lrand48() & 0xffffff`), from the process's random seed.
fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    (h.finish() as u32) & 0xff_ffff
}

/// Runs the program named `name` (`ibv_rc_pingpong`, ...) with `args` (without argv[0]).
/// Returns the exit code: 0, or 1 as upstream for every failure.
pub fn main(name: &str, args: &[String]) -> anyhow::Result<u8> {
    let Some(t) = Transport::from_program(name) else {
        anyhow::bail!("{name} is not a pingpong program");
    };
    let a = match parse(name, t, args) {
        Parsed::Run(a) => a,
        Parsed::Exit(code) => return Ok(code),
    };
    match run(t, &a) {
        Ok(code) => Ok(code),
        Err(Fail(msg)) => {
            let _ = std::io::stdout().flush();
            eprintln!("{msg}");
            Ok(1)
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
        let pick = port
            .gids
            .iter()
            .position(|g| g.0[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff])
            .unwrap_or(0);
        eprintln!(
            "(softib) {} is RoCE: using GID index {pick}, the device's address (-g chooses \
             another)",
            info.name
        );
        gid_idx = Some(pick as u8);
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
    println!("{}", address_line(t, true, &mine));
    let _ = std::io::stdout().flush();

    let remote = match &a.server {
        Some(host) => client_exchange(a, host, &mine)?,
        None => server_exchange(a, &mut pp, &mine)?,
    };
    println!("{}", address_line(t, false, &remote));
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
    let mut last = Instant::now();
    while rcnt < a.iters || scnt < a.iters {
        let wait = a
            .timeout
            .saturating_sub(last.elapsed())
            .min(Duration::from_millis(100));
        let wcs = pp
            .ctx
            .poll_cq(pp.dev, pp.cq, 16, wait)
            .map_err(|e| because("poll CQ failed", e))?;
        if wcs.is_empty() {
            if last.elapsed() >= a.timeout {
                let waiting = if pending & SEND_WRID != 0 {
                    "waiting for the send to complete"
                } else {
                    "waiting for the peer's message"
                };
                return Err(pp.stalled(a.timeout, rcnt, scnt, a.iters, waiting));
            }
            continue;
        }
        last = Instant::now();
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
    print!("{}", result_lines(a.size, a.iters, elapsed));
    let mut code = 0;
    if !client && a.chk {
        let off = if t == Transport::Ud { GRH_BYTES } else { 0 };
        let mut data = vec![0u8; pp.size];
        if !pp.buf.read(off, &mut data) {
            return fail("Couldn't read the receive buffer");
        }
        for p in invalid_pages(&data) {
            println!("invalid data in page {p}");
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

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn run_args(t: Transport, v: &[&str]) -> Args {
        match parse("ibv_rc_pingpong", t, &args(v)) {
            Parsed::Run(a) => a,
            Parsed::Exit(c) => panic!("exit {c} for {v:?}"),
        }
    }

    #[test]
    fn wire_message_round_trips_and_has_upstreams_size() {
        let d = Dest {
            lid: 2,
            qpn: 0x123,
            psn: 0x4a5b6c,
            gid: [
                0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0xe4, 0x1d, 0x2d, 0x03, 0, 0xb4, 0x7d, 0x01,
            ],
        };
        let w = d.to_wire();
        assert_eq!(
            &w[..51],
            b"0002:000123:4a5b6c:fe80000000000000e41d2d0300b47d01"
        );
        assert_eq!(w[51], 0);
        assert_eq!(
            w.len(),
            "0000:000000:000000:00000000000000000000000000000000\0".len()
        );
        assert_eq!(Dest::from_wire(&w), Some(d));
        assert!(d.global());
        assert_eq!(Dest::from_wire(b"zz:1:2:00"), None);
        assert_eq!(Dest::from_wire(b"0001:000001:000001:0011"), None);
    }

    #[test]
    fn address_lines_print_like_upstream() {
        let mut d = Dest {
            lid: 1,
            qpn: 0x123,
            psn: 0x4a5b6c,
            gid: [0; 16],
        };
        assert_eq!(
            address_line(Transport::Rc, true, &d),
            "  local address:  LID 0x0001, QPN 0x000123, PSN 0x4a5b6c, GID ::"
        );
        assert_eq!(
            address_line(Transport::Ud, true, &d),
            "  local address:  LID 0x0001, QPN 0x000123, PSN 0x4a5b6c: GID ::"
        );
        d.gid[10] = 0xff;
        d.gid[11] = 0xff;
        d.gid[12..].copy_from_slice(&[127, 0, 0, 2]);
        assert_eq!(
            address_line(Transport::Ud, false, &d),
            "  remote address: LID 0x0001, QPN 0x000123, PSN 0x4a5b6c, GID ::ffff:127.0.0.2"
        );
        let mut compat = [0u8; 16];
        compat[12..].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(gid_text(&compat), "::1.2.3.4");
        let mut one = [0u8; 16];
        one[15] = 1;
        assert_eq!(gid_text(&one), "::1");
    }

    #[test]
    fn results_use_upstreams_arithmetic() {
        assert_eq!(
            result_lines(4096, 1000, Duration::from_micros(50_000)),
            "8192000 bytes in 0.05 seconds = 1310.72 Mbit/sec\n\
             1000 iters in 0.05 seconds = 50.00 usec/iter\n"
        );
    }

    #[test]
    fn flags_parse_getopt_style() {
        let a = run_args(
            Transport::Rc,
            &[
                "-p18600",
                "-s",
                "0x100",
                "-ec",
                "--iters=5",
                "--rx-d",
                "8",
                "host",
                "-g",
                "-1",
            ],
        );
        assert_eq!(a.port, 18600);
        assert_eq!(a.size, 256);
        assert!(a.events && a.chk);
        assert_eq!(a.iters, 5);
        assert_eq!(a.rx_depth, 8);
        assert_eq!(a.server.as_deref(), Some("host"));
        assert_eq!(a.gid_idx, None);
        assert_eq!(run_args(Transport::Ud, &[]).size, 1024);
        assert_eq!(run_args(Transport::Uc, &["-m", "2048"]).mtu, Mtu::Mtu2048);
        assert_eq!(
            run_args(Transport::Rc, &["--timeout", "2"]).timeout,
            Duration::from_secs(2)
        );
    }

    #[test]
    fn unsupported_and_unknown_flags_stop() {
        for (t, v) in [
            (Transport::Rc, vec!["-o"]),
            (Transport::Rc, vec!["--new_send"]),
            (Transport::Rc, vec!["-m", "1000"]),
            (Transport::Ud, vec!["-m", "1024"]),
            (Transport::Uc, vec!["-t"]),
            (Transport::Rc, vec!["a", "b"]),
            (Transport::Rc, vec!["-p", "70000"]),
            (Transport::Rc, vec!["-r", "0"]),
            (Transport::Rc, vec!["--s", "1"]),
        ] {
            assert!(matches!(parse("x", t, &args(&v)), Parsed::Exit(1)), "{v:?}");
        }
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
