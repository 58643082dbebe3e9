//! `opensm`: a `softib-fabric` [`SubnetManager`] driven through the MAD agent of the port it
//! binds to, with opensm's flags, console lines, log file and guid2lid cache.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use softib::mad::MadAgent;
use softib::Context;
use softib_fabric::sm::SubnetManager;
use softib_wire::mad::attr::SmInfo;
use softib_wire::mad::{smp, AttrId, Method};

use super::{pick_port, smp_round, Flags};
use crate::exit;

/// `opensm [-g GUID] [-p PRIO] [-s SEC] [-f LOG] [-e] [-B] [-R minhop|updn] [-o]`.
pub fn opensm(args: &[String]) -> Result<u8> {
    let mut f = Flags::new(args);
    let guid = f.take_value(&["-g", "--guid"])?;
    let priority: u8 = match f.take_value(&["-p", "--priority"])? {
        Some(p) => p
            .parse()
            .ok()
            .filter(|&p: &u8| p <= 15)
            .ok_or_else(|| anyhow!("opensm: -p takes a priority 0..15, not {p}"))?,
        None => 0,
    };
    let sweep: u64 = match f.take_value(&["-s", "--sweep"])? {
        Some(s) => s
            .parse()
            .map_err(|_| anyhow!("opensm: -s takes seconds, not {s}"))?,
        None => 10,
    };
    let log_file = f.take_value(&["-f", "--log_file"])?;
    // opensm.conf's max_wire_smps: SMPs in flight at once. opensm's default is 4; softib's is
    // 16, because an SMP's round trip through soft cables is longer than through hardware
    // (a 504-host fat tree comes up in ~4 s instead of ~7 s).
    let wire_smps: usize =
        match f.take_value(&["--max_wire_smps"])? {
            Some(n) => n.parse().ok().filter(|&n: &usize| n > 0).ok_or_else(|| {
                anyhow!("opensm: --max_wire_smps takes a positive count, not {n}")
            })?,
            None => 16,
        };
    let erase = f.take_switch(&["-e", "--erase_log_file"]);
    let background = f.take_switch(&["-B", "--daemon"]);
    let once = f.take_switch(&["-o", "--once"]);
    f.take_switch(&["-V", "--verbose"]);
    let routing = match f.take_value(&["-R", "--routing_engine"])?.as_deref() {
        None | Some("minhop") => softib_fabric::sm::Routing::MinHop,
        Some("updn") => softib_fabric::sm::Routing::UpDown,
        Some(other) => bail!("opensm: routing engine {other} is not supported (minhop, updn)"),
    };
    f.positional("opensm")?;

    if background {
        // -B: detach. The child runs the same command line without -B.
        let mut child_args = vec!["opensm".to_string()];
        child_args.extend(
            args.iter()
                .filter(|a| *a != "-B" && *a != "--daemon")
                .cloned(),
        );
        let log = std::env::temp_dir().join(format!("softib-opensm-{}.out", std::process::id()));
        let child = crate::fabric::spawn_detached(&child_args, &log, &[])?;
        note!("opensm: running in the background, pid {}", child.id());
        return Ok(exit::OK);
    }

    let mut ctx = Context::open()?;
    let devs = ctx.devices()?;
    let dev = devs
        .first()
        .ok_or_else(|| anyhow!("opensm: this host has no devices"))?;
    let port = match &guid {
        Some(g) => {
            let want = parse_guid(g)?;
            dev.ports
                .iter()
                .find(|p| p.port_guid.0 == want)
                .map(|p| p.number)
                .ok_or_else(|| {
                    anyhow!(
                        "opensm: no local port has GUID {g} (ports: {})",
                        dev.ports
                            .iter()
                            .map(|p| format!("0x{:016x}", p.port_guid.0))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?
        }
        None => pick_port(&mut ctx, None)?,
    };
    let port_guid = dev
        .ports
        .iter()
        .find(|p| p.number == port)
        .map_or(0, |p| p.port_guid.0);
    let log_path = log_file.unwrap_or_else(|| "/var/log/opensm.log".into());
    let mut log = open_log(&log_path, erase)?;
    note!("-------------------------------------------------");
    note!("OpenSM 3.3.23 (softib)");
    note!("Command Line Arguments:");
    note!(" Guid <0x{port_guid:016x}>");
    if priority != 0 {
        note!(" Priority = {priority}");
    }
    if erase {
        note!(" Creating new log file");
    }
    note!(" sweep interval = {sweep}");
    note!(" Log File: {log_path}");
    note!("-------------------------------------------------");
    note!("OpenSM 3.3.23 (softib)\n");
    let _ = std::io::stdout().flush();

    let mut agent = MadAgent::open_sm(&mut ctx, 0, port)?;
    let config = softib_fabric::sm::SmConfig {
        max_wire_smps: wire_smps,
        port_guid: softib::Guid(port_guid),
        priority,
        sweep_interval: (sweep > 0).then(|| Duration::from_secs(sweep)),
        routing,
        ..softib_fabric::sm::SmConfig::default()
    };
    // opensm keeps the LIDs it gave in OSM_CACHE_DIR/guid2lid, so that a restarted SM gives
    // every port the LID it had.
    let cache_dir = std::env::var_os("OSM_CACHE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/var/cache/opensm".into());
    let guid2lid_file = cache_dir.join("guid2lid");
    let mut config = config;
    config.guid2lid = read_guid2lid(&guid2lid_file);
    let mut saved = config.guid2lid.clone();
    let mut sm = SubnetManager::new(config, port);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    log_line(&mut log, 0x80, "OpenSM 3.3.23 (softib)");
    log_line(
        &mut log,
        0x02,
        &format!("osm_opensm_bind: Setting IS_SM on port 0x{port_guid:016x}"),
    );
    let origin = Instant::now();
    let mut announced = None;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let info = sm.sm_info();
        let data = softib_wire::mad::attr::SmpAttribute::to_data(&info);
        let mut bytes = [0u8; 64];
        bytes.copy_from_slice(&data[..64]);
        if announced != Some(bytes) {
            ctx.set_sm(0, port, Some(bytes))?;
            announced = Some(bytes);
        }
        let gmps = smp_round(
            &mut ctx,
            &mut agent,
            &mut sm,
            origin,
            Duration::from_millis(50),
        )?;
        for g in gmps {
            if g.qp == softib::MadQp::Smi {
                let set = smp::Repr::parse(&smp::Packet::new_unchecked(&g.mad[..]))
                    .ok()
                    .filter(|r| {
                        r.header.method == Method::Set && r.header.attr_id == AttrId::SM_INFO
                    });
                if let Some(r) = set {
                    // Another SM's SubnSet(SMInfo) (HANDOVER, ...), answered by the SMA.
                    let control = softib_fabric::sma::SmControl::from_attr_mod(r.header.attr_mod);
                    if let (Some(control), Ok(from)) = (control, SmInfo::parse(&r.data)) {
                        sm.handle_sm_info_set(origin.elapsed(), control, from);
                    }
                    continue;
                }
                // A trap: Link State Changed (128) or Local Changes (144), on which opensm
                // sweeps (its sweep_on_trap).
                let trap = u16::from_be_bytes([g.mad[64 + 4], g.mad[64 + 5]]);
                if g.mad[64] & 0x80 != 0 && matches!(trap, 128 | 144) {
                    log_line(
                        &mut log,
                        0x01,
                        &format!("Received Generic Notice num:{trap} from LID:{}", g.slid.0),
                    );
                    sm.request_sweep();
                }
                continue;
            }
            if let Some(resp) = sm.handle_sa(g.slid, &g.mad) {
                // A table larger than one MAD goes as the RMPP segments the SA made, in order.
                agent.respond(&mut ctx, &g, &resp)?;
            }
        }
        while let Some(l) = sm.poll_log() {
            log_line(&mut log, l.level.0, &l.text);
        }
        if sm.is_subnet_up() && *sm.guid2lid() != saved {
            saved = sm.guid2lid().clone();
            if let Err(e) = write_guid2lid(&guid2lid_file, &saved) {
                log_line(
                    &mut log,
                    0x01,
                    &format!("ERR: cannot write {}: {e}", guid2lid_file.display()),
                );
            }
        }
        while let Some(c) = sm.poll_console() {
            note!("{c}\n");
            let _ = std::io::stdout().flush();
        }
        if once && sm.is_subnet_up() {
            break;
        }
    }
    let _ = ctx.set_sm(0, port, None);
    log_line(&mut log, 0x80, "Exiting SM");
    note!("Exiting SM");
    Ok(exit::OK)
}

/// opensm's guid2lid file: `0x<guid> 0x<min lid> 0x<max lid>` per line.
fn read_guid2lid(path: &std::path::Path) -> std::collections::BTreeMap<softib::Guid, softib::Lid> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let g = u64::from_str_radix(w.next()?.trim_start_matches("0x"), 16).ok()?;
            let lid = u16::from_str_radix(w.next()?.trim_start_matches("0x"), 16).ok()?;
            Some((softib::Guid(g), softib::Lid(lid)))
        })
        .collect()
}

fn write_guid2lid(
    path: &std::path::Path,
    map: &std::collections::BTreeMap<softib::Guid, softib::Lid>,
) -> std::io::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let text: String = map
        .iter()
        .map(|(g, l)| format!("0x{:016x} 0x{:04x} 0x{:04x}\n", g.0, l.0, l.0))
        .collect();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, path)
}

fn parse_guid(s: &str) -> Result<u64> {
    let t = s.trim_start_matches("0x").trim_start_matches("0X");
    u64::from_str_radix(t, 16)
        .map_err(|_| anyhow!("bad GUID {s} (expected hex, e.g. 0xe41d2d0300b47d01)"))
}

fn open_log(path: &str, erase: bool) -> Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.create(true);
    if erase {
        o.write(true).truncate(true);
    } else {
        o.append(true);
    }
    o.open(path)
        .with_context(|| format!("opening the log file {path} (choose another with -f)"))
}

fn log_line(log: &mut std::fs::File, level: u8, text: &str) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let stamp = softib_diag::ctime_utc(now.as_secs() as i64);
    // ctime: "Sun Nov 29 23:40:23 2026" → opensm's "Nov 29 23:40:23".
    let short = stamp.get(4..19).unwrap_or(&stamp);
    let _ = writeln!(
        log,
        "{short} {:06} [{:08X}] 0x{level:02x} -> {text}",
        now.subsec_micros(),
        std::process::id()
    );
}
