//! perftest-compatible benchmarks for softib: the verbs-independent half.
//!
//! Upstream perftest (`linux-rdma/perftest`) ships `ib_{send,write,read,atomic}_{bw,lat}`.
//! People and scripts know their flags, their out-of-band TCP exchange and their output
//! byte for byte, so this crate reproduces all three without touching the verbs API:
//!
//! - [`args`]: the command line, with upstream's flags, defaults and validation per test.
//! - [`exchange`]: the out-of-band TCP exchange ("Data ex. method : Ethernet"), wire
//!   compatible with upstream perftest (6.x, and the older layouts older peers use).
//! - [`rdma_cm`]: `-R`, the QPs and the exchange connected with the InfiniBand CM as
//!   upstream connects them with librdmacm.
//! - [`report`]: the banner, the address lines, the BW and latency tables, `--out_json`.
//!
//! - [`run`]: the run loop over the `softib` verbs API, which fills [`report::BwResult`] /
//!   [`report::LatResult`] with timestamps.
//!
//! Beside them, rdma-core's `ibv_{rc,uc,ud}_pingpong` examples ([`pingpong`]), which share
//! what is the same: the TCP under the out-of-band exchange ([`oob`]: connect with retries,
//! accept within a timeout) and the facts a stall is explained by ([`port`]: the port not
//! Active, what the HCA dropped; the GID a RoCE port sends from). Their exchange messages
//! differ (rdma-core's pingpong has its own text format) and stay apart.

/// `print!` that does not panic when stdout is gone (`ib_send_bw ... | head`): the output is
/// lost, the run goes on, so the peer waiting on the other end of the exchange is not left
/// hanging by a process that died mid-test.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

/// `println!` as [`out!`] is `print!`.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

pub mod args;
pub mod exchange;
pub mod oob;
pub mod pingpong;
pub mod port;
pub mod rdma_cm;
pub mod report;
pub mod run;

pub use args::{AtomicType, Connection, Mode, Parsed, PerftestArgs, Test};
