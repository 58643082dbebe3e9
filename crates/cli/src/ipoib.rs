//! `softib ipoib add|del|show`: IP over InfiniBand on a softib IB port, as a Linux TUN
//! interface — the arguments, the interface process (`softib ipoib run`, started detached by
//! `add`) and what is printed. The interface itself is `softib-ipoib`.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::{Args, Subcommand};
use softib_ipoib::state::{self, Startup};
use softib_ipoib::{Interface, Settings};

use crate::exit;

/// `softib ipoib ...`.
#[derive(Debug, Subcommand)]
pub enum IpoibCommand {
    /// Create an IPoIB interface on an IB port (a TUN device; set its address with `ip`).
    Add(IfArgs),
    /// Remove an IPoIB interface.
    Del {
        /// The interface (e.g. ib0).
        ifname: String,
    },
    /// Show the IPoIB interfaces of this host.
    Show {
        /// As JSON.
        #[arg(short, long)]
        json: bool,
    },
    /// Run an interface in the foreground (what `add` starts).
    #[command(hide = true)]
    Run(IfArgs),
}

/// Which interface on which port.
#[derive(Debug, Clone, Args)]
pub struct IfArgs {
    /// The interface name (e.g. ib0).
    pub ifname: String,
    /// The device (e.g. mlx4_0).
    #[arg(long, value_name = "DEV")]
    pub dev: String,
    /// The port.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub port: u8,
    /// The partition (P_Key), e.g. 0xffff or 0x8001.
    #[arg(long, value_name = "P", default_value = "0xffff", value_parser = parse_pkey)]
    pub pkey: u16,
}

impl IfArgs {
    fn settings(&self) -> Settings {
        Settings {
            ifname: self.ifname.clone(),
            dev: self.dev.clone(),
            port: self.port,
            pkey: self.pkey,
        }
    }
}

fn parse_pkey(s: &str) -> std::result::Result<u16, String> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u16::from_str_radix(h, 16),
        None => s.parse(),
    };
    v.map_err(|_| format!("{s}: a P_Key is a 16-bit number such as 0xffff"))
}

/// Runs `softib ipoib ...`.
pub fn run(cmd: IpoibCommand) -> Result<u8> {
    match cmd {
        IpoibCommand::Add(a) => add(&a),
        IpoibCommand::Del { ifname } => del(&ifname),
        IpoibCommand::Show { json } => show(json),
        IpoibCommand::Run(a) => {
            let stop = Arc::new(AtomicBool::new(false));
            for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
                signal_hook::flag::register(sig, stop.clone())?;
            }
            Interface::open(&a.settings())?.run(&stop)?;
            Ok(exit::OK)
        }
    }
}

fn add(a: &IfArgs) -> Result<u8> {
    if let Some(s) = state::read(&a.ifname) {
        if state::alive(s.pid) {
            bail!(
                "{} already exists (pid {}); remove it with `softib ipoib del {}`",
                a.ifname,
                s.pid,
                a.ifname
            );
        }
    }
    let dir = state::dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let log = dir.join(format!("{}.log", a.ifname));
    let mut child = crate::fabric::spawn_detached(
        &[
            "ipoib".into(),
            "run".into(),
            a.ifname.clone(),
            "--dev".into(),
            a.dev.clone(),
            "--port".into(),
            a.port.to_string(),
            "--pkey".into(),
            format!("0x{:04x}", a.pkey),
        ],
        &log,
        &[],
    )?;
    // Ready when the interface exists and the process has said so.
    let timeout = Duration::from_secs(10);
    match state::wait_up(&a.ifname, &mut child, timeout)? {
        Startup::Up(s) => {
            note!(
                "{}: IPoIB on {} port {} (P_Key 0x{:04x}), {}, pid {}",
                s.ifname,
                s.dev,
                s.port,
                s.pkey,
                s.state,
                s.pid
            );
            Ok(exit::OK)
        }
        Startup::Exited(status) => {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            bail!(
                "the IPoIB process for {} exited ({status}):\n{}",
                a.ifname,
                text.trim()
            );
        }
        Startup::TimedOut => bail!(
            "waited {timeout:?} for {} to come up; see {}",
            a.ifname,
            log.display()
        ),
    }
}

fn del(ifname: &str) -> Result<u8> {
    let Some(s) = state::stop(ifname, Duration::from_secs(5)) else {
        bail!("no IPoIB interface {ifname} on this host (see `softib ipoib show`)");
    };
    if s.killed {
        eprintln!("{ifname}: pid {} did not stop within 5 s; killed", s.pid);
    }
    note!("{ifname}: removed");
    Ok(exit::OK)
}

fn show(json: bool) -> Result<u8> {
    let all = state::list();
    if json {
        outln!("{}", serde_json::to_string_pretty(&all)?)?;
        return Ok(exit::OK);
    }
    for s in &all {
        outln!("{s}")?;
    }
    if all.is_empty() {
        outln!("no IPoIB interfaces (add one with `softib ipoib add ib0 --dev DEV --port N`)")?;
    }
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkeys_parse_in_hex_or_decimal() {
        assert_eq!(parse_pkey("0xffff"), Ok(0xffff));
        assert_eq!(parse_pkey("32769"), Ok(0x8001));
        assert!(parse_pkey("0x1ffff").is_err());
    }
}
