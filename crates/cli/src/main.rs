//! `softib` — one binary, every softib tool.
//!
//! This crate only parses arguments, calls the libraries and formats output; it holds no
//! protocol logic of its own (that lives in `softib-wire` and the crates above it).

#[macro_use]
mod exit;
mod daemon;
mod demo;
mod dropin;
mod fabric;
mod ipoib;
mod pcap;
mod sim;
mod tools;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// softib: RDMA without RDMA hardware.
#[derive(Debug, Parser)]
#[command(name = "softib", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The seed scenario end to end: two hosts, two subnets, opensm, ibnodes, perftest.
    Demo(demo::DemoArgs),
    /// Work with packet captures of InfiniBand and RoCEv2 traffic.
    Pcap {
        #[command(subcommand)]
        command: pcap::PcapCommand,
    },
    /// Run the deterministic fault simulator over many seeds.
    Sim(sim::SimArgs),
    /// Run softibd, the HCA daemon of this host (RoCEv2 devices from `softib link add`).
    Daemon(daemon::DaemonArgs),
    /// Add, show or delete RoCEv2 devices (like `rdma link`).
    Link {
        #[command(subcommand)]
        command: daemon::LinkCommand,
    },
    /// Make links named after every tool (`ibstat`, `opensm`, `ib_send_bw`, ...) to this binary.
    InstallLinks {
        /// The directory for the links (e.g. ~/.local/bin).
        dir: std::path::PathBuf,
    },
    /// Objects per device, like `rdma res show` (`-v`: per process).
    Res {
        /// Per process.
        #[arg(short, long)]
        verbose: bool,
    },
    /// Capture a device's traffic into a pcap file (native IB or RoCEv2, with valid ICRCs).
    Capture(daemon::CaptureArgs),
    /// IP over InfiniBand: an IP interface (TUN) on an IB port, like the kernel's ib0.
    Ipoib {
        #[command(subcommand)]
        command: ipoib::IpoibCommand,
    },
    /// Run one switch of a topology as a process of its own (cables on fixed UDP ports).
    Switch(fabric::SwitchArgs),
    /// Bring up, use and stop whole InfiniBand fabrics from a topology file.
    Fabric {
        #[command(subcommand)]
        command: fabric::FabricCommand,
    },
    /// Run an unmodified RDMA program (perftest, ibv_*, UCX, infiniband-diags, opensm, ...) on
    /// softib: softib's libibverbs.so.1 and libibumad.so.3 first on its library path, the
    /// host's daemon as its device.
    Run(dropin::RunArgs),
    /// Print the variables `softib run` sets, for a shell: eval "$(softib env)".
    Env(dropin::EnvArgs),
    /// Write softib's drop-in libraries (libibverbs.so.1, libibumad.so.3) into a directory.
    InstallLibs {
        /// The directory (e.g. ~/.local/lib/softib).
        dir: std::path::PathBuf,
    },
}

/// `softib install-links DIR`: a symlink per tool, so `ibstat` runs softib's.
fn install_links(dir: &std::path::Path) -> anyhow::Result<u8> {
    use anyhow::Context as _;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let exe = std::env::current_exe().context("finding the softib executable")?;
    let mut made = 0;
    for tool in fabric::TOOLS {
        let link = dir.join(tool);
        match std::fs::symlink_metadata(&link) {
            // Replace only our own links; anything else is the user's (or rdma-core's).
            Ok(m) if m.file_type().is_symlink() => {
                if std::fs::read_link(&link).ok().as_deref() != Some(exe.as_path()) {
                    eprintln!("{}: a link to something else; left alone", link.display());
                    continue;
                }
                std::fs::remove_file(&link)?;
            }
            Ok(_) => {
                eprintln!("{}: exists and is not a link; left alone", link.display());
                continue;
            }
            Err(_) => {}
        }
        std::os::unix::fs::symlink(&exe, &link)
            .with_context(|| format!("linking {}", link.display()))?;
        made += 1;
    }
    note!("{made} links to {} in {}", exe.display(), dir.display());
    Ok(exit::OK)
}

/// Runs a tool by its upstream name (`ibstat`, `opensm`, `ib_send_bw`, ...).
fn run_tool(name: &str, args: &[String]) -> Option<anyhow::Result<u8>> {
    Some(match name {
        "ibstat" => tools::ibstat(args),
        "ibstatus" => tools::ibstatus(args),
        "ibv_devices" => tools::ibv_devices(args),
        "ibv_devinfo" => tools::ibv_devinfo(args),
        "ibnodes" | "ibhosts" | "ibswitches" | "ibnetdiscover" | "iblinkinfo" => {
            tools::fabric_tool(name, args)
        }
        "opensm" => tools::opensm(args),
        "smpquery" => tools::smpquery(args),
        "perfquery" => tools::perfquery(args),
        "saquery" => tools::saquery(args),
        "sminfo" => tools::sminfo(args),
        "ibaddr" => tools::ibaddr(args),
        "ibroute" => tools::ibroute(args),
        "ibv_rc_pingpong" | "ibv_uc_pingpong" | "ibv_ud_pingpong" => {
            let t = softib_perftest::pingpong::Transport::from_program(name)?;
            Ok(softib_perftest::pingpong::main(t, args))
        }
        _ => {
            use softib_perftest::{Mode, Test};
            let (test, mode) = match name {
                "ib_send_bw" => (Test::Send, Mode::Bw),
                "ib_send_lat" => (Test::Send, Mode::Lat),
                "ib_write_bw" => (Test::Write, Mode::Bw),
                "ib_write_lat" => (Test::Write, Mode::Lat),
                "ib_read_bw" => (Test::Read, Mode::Bw),
                "ib_read_lat" => (Test::Read, Mode::Lat),
                "ib_atomic_bw" => (Test::Atomic, Mode::Bw),
                "ib_atomic_lat" => (Test::Atomic, Mode::Lat),
                _ => return None,
            };
            let mut argv = vec![name.to_string()];
            argv.extend(args.iter().cloned());
            Ok(softib_perftest::run::main(test, mode, &argv))
        }
    })
}

fn main() -> ExitCode {
    // Invoked through a link named like a tool (`ibstat`), or as `softib ibstat ...`: the tool
    // parses its own arguments the way its upstream namesake does.
    let argv: Vec<String> = std::env::args().collect();
    let argv0 = argv
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(r) = run_tool(&argv0, argv.get(1..).unwrap_or_default()) {
        return exit::finish(r);
    }
    if let Some(name) = argv.get(1) {
        if let Some(r) = run_tool(name, argv.get(2..).unwrap_or_default()) {
            return exit::finish(r);
        }
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Pcap { command } => pcap::run(command),
        Command::Sim(args) => sim::run(&args),
        Command::Fabric { command } => fabric::run(command),
        Command::Demo(args) => demo::run(&args),
        Command::Daemon(args) => daemon::daemon(&args),
        Command::Link { command } => daemon::link(command),
        Command::Capture(args) => daemon::capture(&args),
        Command::Res { verbose } => daemon::res(verbose),
        Command::Ipoib { command } => ipoib::run(command),
        Command::Switch(args) => fabric::switch(&args),
        Command::InstallLinks { dir } => install_links(&dir),
        Command::Run(args) => dropin::run(&args),
        Command::Env(args) => dropin::env(&args),
        Command::InstallLibs { dir } => dropin::install_libs(&dir),
    };
    exit::finish(result)
}
