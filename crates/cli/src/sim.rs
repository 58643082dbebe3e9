//! `softib sim`: runs the deterministic fault simulator (`softib-sim`) over a range of seeds.
//!
//! Each seed derives a whole configuration (HCAs, QP pairs, MTU, faults, timers, workload);
//! the fault flags override what the seeds chose. Every failing seed gets one line with the
//! exact command that reproduces it; then `N passed, M failed`. The exit code is 1 if any
//! seed failed. With `--seeds 1` (a reproduction) a failure prints its configuration and log.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use clap::Args;
use softib_sim::workload::OpKind;
use softib_sim::{run_seed, Failure, Mtu, Overrides, QpType, Stats};

use crate::exit;

/// Arguments of `softib sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// How many seeds to run.
    #[arg(long, value_name = "N", default_value_t = 100)]
    seeds: u64,
    /// The first seed.
    #[arg(long, value_name = "S", default_value_t = 0)]
    first_seed: u64,
    /// Packet loss on every link direction (0.1 or 10%).
    #[arg(long, value_name = "P", value_parser = parse_probability)]
    loss: Option<f64>,
    /// Packet duplication on every link direction.
    #[arg(long, value_name = "P", value_parser = parse_probability)]
    dup: Option<f64>,
    /// Packet reordering on every link direction.
    #[arg(long, value_name = "P", value_parser = parse_probability)]
    reorder: Option<f64>,
    /// Packet corruption on every link direction (caught by the receiver's ICRC check and
    /// dropped).
    #[arg(long, value_name = "P", value_parser = parse_probability)]
    corrupt: Option<f64>,
    /// Whether links are partitioned for a while (on or off; default: the seed decides).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    partitions: Option<bool>,
    /// Whether the workload moves QPs to ERR and reconnects them (on or off).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    disruptions: Option<bool>,
    /// Whether receives are sometimes posted late (on or off).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    late_recvs: Option<bool>,
    /// Whether every HCA is a device of one daemon, so that RC QPs go in-process from RTR as
    /// the daemon's do: SENDs, WRITEs and READ responses in 60 KiB segments (on or off).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    in_process: Option<bool>,
    /// Whether the HCAs' RoCEv2 addresses are IPv6 (on) or IPv4 (off).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    ipv6: Option<bool>,
    /// Whether datagrams leave in GSO runs, each segment sealed for the IPv4 Identification
    /// its place gives it (on), or each alone (off).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    gso: Option<bool>,
    /// Make every QP pair of this transport.
    #[arg(long, value_name = "rc|uc|ud", value_parser = parse_qp_type)]
    qp_type: Option<QpType>,
    /// The number of HCAs (1 to 4).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=4))]
    hcas: Option<u8>,
    /// The number of QP pairs.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pairs: Option<u16>,
    /// The path MTU (256, 512, 1024, 2048 or 4096).
    #[arg(long, value_name = "BYTES", value_parser = parse_mtu)]
    mtu: Option<Mtu>,
    /// The most work requests one QP end posts.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=2000))]
    max_ops: Option<u16>,
    /// Only these operations, comma-separated: send, send_with_imm, rdma_write,
    /// rdma_write_with_imm, rdma_read, atomic_cmp_and_swp, atomic_fetch_and_add.
    #[arg(long, value_name = "LIST", value_parser = parse_ops)]
    ops: Option<u8>,
    /// Worker threads (seeds run independently; the output does not depend on this).
    #[arg(long, short = 'j', value_name = "N")]
    jobs: Option<usize>,
    /// Also print a summary line for every passing seed and the log of every failing one.
    #[arg(long, short = 'v')]
    verbose: bool,
    /// Put every packet into the log (with --seeds 1, to see what went wrong).
    #[arg(long)]
    trace: bool,
}

/// Parses `0.1` or `10%` into a probability.
fn parse_probability(s: &str) -> Result<f64, String> {
    let (num, scale) = match s.strip_suffix('%') {
        Some(n) => (n, 100.0),
        None => (s, 1.0),
    };
    let p = num
        .trim()
        .parse::<f64>()
        .map_err(|e| format!("{s:?} is not a probability: {e}"))?
        / scale;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{s:?} is not between 0 and 1 (0% and 100%)"))
    }
}

/// Parses `on`/`off` (or `yes`/`no`, `true`/`false`, `1`/`0`).
fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "yes" | "true" | "1" => Ok(true),
        "off" | "no" | "false" | "0" => Ok(false),
        _ => Err(format!("{s:?} is neither on nor off")),
    }
}

/// Parses `rc`, `uc` or `ud`.
fn parse_qp_type(s: &str) -> Result<QpType, String> {
    match s.to_ascii_lowercase().as_str() {
        "rc" => Ok(QpType::Rc),
        "uc" => Ok(QpType::Uc),
        "ud" => Ok(QpType::Ud),
        _ => Err(format!("{s:?} is not rc, uc or ud")),
    }
}

/// Parses a comma-separated list of operation names into a mask over `OpKind::ALL`.
fn parse_ops(s: &str) -> Result<u8, String> {
    let mut mask = 0u8;
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let i = OpKind::ALL
            .iter()
            .position(|k| k.to_string().eq_ignore_ascii_case(name))
            .ok_or_else(|| format!("{name:?} is not an operation"))?;
        mask |= 1 << i;
    }
    if mask == 0 {
        return Err(String::from("no operation given"));
    }
    Ok(mask)
}

/// Parses an MTU in bytes.
fn parse_mtu(s: &str) -> Result<Mtu, String> {
    s.parse::<usize>()
        .ok()
        .and_then(Mtu::from_bytes)
        .ok_or_else(|| format!("{s:?} is not one of 256, 512, 1024, 2048, 4096"))
}

/// Runs `softib sim`.
pub fn run(args: &SimArgs) -> anyhow::Result<u8> {
    let overrides = Overrides {
        loss: args.loss,
        dup: args.dup,
        reorder: args.reorder,
        corrupt: args.corrupt,
        partitions: args.partitions,
        disruptions: args.disruptions,
        late_recvs: args.late_recvs,
        qp_type: args.qp_type,
        hcas: args.hcas.map(usize::from),
        pairs: args.pairs.map(usize::from),
        mtu: args.mtu,
        max_ops: args.max_ops.map(usize::from),
        ops: args.ops,
        trace: args.trace,
        in_process: args.in_process,
        ipv6: args.ipv6,
        gso: args.gso,
    };
    let reproducing = args.seeds == 1;
    let verbose = args.verbose || reproducing;
    // A panic inside the engine becomes a failing seed (run_seed catches it); say where it
    // happened only when asked, so a long run stays one line per failure.
    std::panic::set_hook(Box::new(move |info| {
        if verbose {
            eprintln!("softib sim: {info}");
        }
    }));
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, 256);
    let first = args.first_seed;
    let end = first.saturating_add(args.seeds);
    let started = Instant::now();
    let next = AtomicU64::new(first);
    let (tx, rx) = mpsc::channel::<(u64, Result<Stats, Failure>)>();
    let mut out = io::stdout().lock();
    let (mut passed, mut failed) = (0u64, 0u64);
    std::thread::scope(|scope| -> io::Result<()> {
        for _ in 0..jobs {
            let tx = tx.clone();
            let next = &next;
            scope.spawn(move || loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= end {
                    break;
                }
                if tx.send((seed, run_seed(seed, &overrides))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        // Print in seed order, whatever order the workers finish in.
        let mut pending = BTreeMap::new();
        let mut expect = first;
        for (seed, result) in rx {
            pending.insert(seed, result);
            while let Some(result) = pending.remove(&expect) {
                match result {
                    Ok(stats) => {
                        passed += 1;
                        if reproducing {
                            for l in &stats.log {
                                writeln!(out, "{l}")?;
                            }
                        }
                        if verbose {
                            writeln!(out, "{stats}")?;
                        }
                    }
                    Err(f) => {
                        failed += 1;
                        if verbose {
                            write!(out, "{f}")?;
                        }
                        writeln!(
                            out,
                            "seed {} FAILED: {}; reproduce: softib sim --seeds 1 --first-seed {}{}",
                            f.seed,
                            f.message.replace('\n', " "),
                            f.seed,
                            overrides.cli_flags()
                        )?;
                    }
                }
                expect += 1;
            }
        }
        Ok(())
    })?;
    writeln!(out, "{passed} passed, {failed} failed")?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "softib sim: {} seeds in {secs:.1} s ({:.1} seeds/s, {jobs} jobs)",
        passed + failed,
        (passed + failed) as f64 / secs.max(1e-9)
    );
    Ok(if failed > 0 {
        exit::FOUND_PROBLEMS
    } else {
        exit::OK
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_parse_as_fractions_or_percentages() {
        assert_eq!(parse_probability("0.1"), Ok(0.1));
        assert_eq!(parse_probability("10%"), Ok(0.1));
        assert_eq!(parse_probability("0"), Ok(0.0));
        assert_eq!(parse_probability("100%"), Ok(1.0));
        assert!(parse_probability("1.5").is_err());
        assert!(parse_probability("-1%").is_err());
        assert!(parse_probability("x").is_err());
    }

    #[test]
    fn operation_lists_parse_into_masks() {
        assert_eq!(parse_ops("send"), Ok(1));
        assert_eq!(parse_ops("rdma_read,ATOMIC_FETCH_AND_ADD"), Ok(0b101_0000));
        assert!(parse_ops("nop").is_err());
        assert!(parse_ops("").is_err());
    }
}
