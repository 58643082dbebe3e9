//! `softib-fabric` — InfiniBand fabric management as a pure, sans-IO library.
//!
//! This crate is the management layer of softib's emulated InfiniBand link: what every node of
//! a fabric runs besides its transport, and what the subnet manager needs to know about
//! fabrics.
//!
//! * [`topology`]: fabric descriptions in the ibnetdiscover / ibsim text format (parser with
//!   ibsim's GUID allocation rules, writer, fat-tree generator);
//! * [`sma`]: the subnet management agent every node runs (IBA vol 1 §14.2): NodeInfo,
//!   NodeDescription, PortInfo, SwitchInfo, LinearForwardingTable, GUIDInfo, P_KeyTable and
//!   SMInfo, M_Key checking, port state rules, and the directed-route SMI;
//! * [`switch`]: the soft switch's data plane — forwarding by the LFT, VL15 to the SMA,
//!   PortCounters;
//! * [`smp_packet`]: SMPs inside native IB packets (LRH on VL15, BTH, DETH, MAD, ICRC, VCRC);
//! * [`discover`]: the directed-route crawl of a subnet (the SM's heavy sweep, ibnetdiscover);
//! * [`machine`]: [`SmpMachine`], the one interface through which a runtime drives the crawl
//!   and the SM;
//! * [`sm`]: the subnet manager — election, LIDs, routing, port states, sweeps — and
//!   [`sa`], the subnet administration queries it answers;
//! * [`testing`]: an in-memory fabric of SMAs and switches built from a topology, for tests.
//!
//! # What it must never do
//!
//! No sockets, threads, clocks, OS randomness or `unsafe`, and no `HashMap` iteration: every
//! output is a pure function of the inputs, so the simulator can replay any run. Nodes reach
//! each other only through MADs and packets handed in and out by the caller; nothing here knows
//! how bytes travel. Network input never causes a panic: malformed packets are dropped and
//! counted, SMP faults become MAD status codes or silent discards as the specification says.
//! Errors that are the caller's (a bad topology text, a bad node) are `Result`s naming what is
//! wrong.
//!
//! Spec references are to the InfiniBand Architecture Specification, volume 1 ("IBA").
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod discover;
pub mod machine;
pub mod sa;
pub mod sm;
pub mod sma;
pub mod smp_packet;
pub mod subnet;
pub mod switch;
pub mod testing;
pub mod topology;

pub use discover::{Discovery, DiscoveryConfig};
pub use machine::SmpMachine;
pub use sm::{LogLevel, LogLine, Routing, SmConfig, SubnetManager};
pub use sma::{DrAction, DrDrop, Sma, SmaConfig, SmaCounters, SmaEvent, SmiOutput};
pub use switch::{PortCounters, Switch, SwitchAction, SwitchDrop};
pub use topology::{
    BuildError, Endpoint, Link, LinkRate, LinkSpeed, LinkWidth, Node, NodeKind, ParseError,
    Topology,
};
