//! The command line of the pingpong programs, parsed as glibc's getopt_long does: upstream's
//! options in upstream's order (a cluster of short options, `--name=value`, an unambiguous
//! prefix of a long name, the server name anywhere), then softib's own `--timeout`.

use std::time::Duration;

use softib::Mtu;

use super::Transport;

/// Options as parsed.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Args {
    pub(super) port: u16,
    pub(super) ib_dev: Option<String>,
    pub(super) ib_port: u8,
    pub(super) size: u32,
    pub(super) mtu: Mtu,
    pub(super) rx_depth: u32,
    pub(super) iters: u32,
    pub(super) sl: u8,
    pub(super) events: bool,
    pub(super) gid_idx: Option<u8>,
    pub(super) chk: bool,
    pub(super) timeout: Duration,
    pub(super) server: Option<String>,
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
pub(super) enum Parsed {
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
    out!("{}", usage(prog, t));
    Parsed::Exit(1)
}

pub(super) fn parse(prog: &str, t: Transport, argv: &[String]) -> Parsed {
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
                out!("{}", usage(prog, t));
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
}
