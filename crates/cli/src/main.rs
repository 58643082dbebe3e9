//! `softib` — one binary, every softib tool.
//!
//! This crate only parses arguments, calls the libraries and formats output; it holds no
//! protocol logic of its own (that lives in `softib-wire` and the crates above it).

mod exit;
mod pcap;
mod sim;

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
    /// Work with packet captures of InfiniBand and RoCEv2 traffic.
    Pcap {
        #[command(subcommand)]
        command: pcap::PcapCommand,
    },
    /// Run the deterministic fault simulator over many seeds.
    Sim(sim::SimArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Pcap { command } => pcap::run(command),
        Command::Sim(args) => sim::run(&args),
    };
    exit::finish(result)
}
