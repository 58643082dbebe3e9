//! The daemon's oversight of process engines (decision 9 of docs/dev/process-datapath.md):
//! a RoCE device's faults and capture reach every process engine on it over its event
//! channel (`Event::Faults`, `Event::Capture`), the packets those engines capture come back
//! through a ring per engine that the loop drains into the device's pcap, and their counters
//! (a `CounterPage` each engine keeps) are added to the device's own — while the engine
//! lives, and after it went (`Departed`), so that a device's counts never go down.

use std::collections::BTreeMap;
use std::os::fd::AsFd;

use softib_net::counters::CounterPage;
use softib_net::fault::{FaultSpec, FaultStats};
use softib_net::ring::PacketRing;
use softib_proto::{self as proto, DeviceInfo, Event};

use super::client::Client;
use super::host_rt::Host;

/// What the engines of clients that went counted, per device, by counter name.
#[derive(Debug, Default)]
pub(super) struct Departed {
    by_dev: BTreeMap<u32, BTreeMap<String, u64>>,
}

impl Departed {
    /// Keeps the final values of an engine's page on `dev`.
    pub fn keep(&mut self, dev: u32, page: &CounterPage) {
        let kept = self.by_dev.entry(dev).or_default();
        for (name, v) in page.values() {
            *kept.entry(name.to_string()).or_default() += v;
        }
    }

    /// A device removed (`softib link del`): what its engines counted goes with it.
    pub fn forget(&mut self, dev: u32) {
        self.by_dev.remove(&dev);
    }
}

/// Every counter the engines of `dev` have, live or departed, summed by name.
fn engine_counters(h: &Host, clients: &BTreeMap<u64, Client>, dev: u32) -> BTreeMap<String, u64> {
    let mut sum: BTreeMap<String, u64> = h.departed.by_dev.get(&dev).cloned().unwrap_or_default();
    for ch in clients.values().filter_map(|c| c.event_channels.get(&dev)) {
        for (name, v) in ch.counters.values() {
            let at = sum.entry(name.to_string()).or_default();
            *at = at.saturating_add(v);
        }
    }
    sum
}

/// Adds the drops of `dev`'s process engines to its own (`info.drops`, by reason).
pub(super) fn add_drops(
    h: &Host,
    clients: &BTreeMap<u64, Client>,
    dev: u32,
    info: &mut DeviceInfo,
) {
    let engines = engine_counters(h, clients, dev);
    for (name, v) in engines {
        let Some(reason) = name.strip_prefix("drop.") else {
            continue;
        };
        if v == 0 {
            continue;
        }
        match info.drops.iter_mut().find(|(r, _)| r == reason) {
            Some((_, n)) => *n = n.saturating_add(v),
            None => info.drops.push((reason.to_string(), v)),
        }
    }
}

/// What the faults of `dev`'s process engines did.
pub(super) fn fault_stats(h: &Host, clients: &BTreeMap<u64, Client>, dev: u32) -> FaultStats {
    let engines = engine_counters(h, clients, dev);
    let get = |n: &str| engines.get(&format!("fault.{n}")).copied().unwrap_or(0);
    FaultStats {
        lost: get("lost"),
        duplicated: get("duplicated"),
        reordered: get("reordered"),
        corrupted: get("corrupted"),
        delayed: get("delayed"),
    }
}

/// Tells every process engine on `dev` that its faults are now `spec`.
pub(super) fn tell_faults(clients: &BTreeMap<u64, Client>, dev: u32, spec: FaultSpec) {
    for ch in clients.values().filter_map(|c| c.event_channels.get(&dev)) {
        // An engine that does not read its channel keeps its old faults (never waiting).
        let _ = ch.push(&Event::Faults { spec }, &[]);
    }
}

/// Starts (`on`) or stops the capture of every process engine on `dev`. A start gives each a
/// fresh ring; a stop drains what each captured into the device's capture first.
pub(super) fn tell_capture(h: &mut Host, clients: &mut BTreeMap<u64, Client>, dev: u32, on: bool) {
    if !on {
        drain(h, clients);
    }
    for ch in clients
        .values_mut()
        .filter_map(|c| c.event_channels.get_mut(&dev))
    {
        start_or_stop(ch, on);
    }
}

/// Gives the engine of `ch` a capture ring (`on`) or takes it away.
pub(super) fn start_or_stop(ch: &mut super::peer_rings::EventChannel, on: bool) {
    if !on {
        ch.capture = None;
        let _ = ch.push(&Event::Capture { on: false }, &[]);
        return;
    }
    let Ok(ring) = PacketRing::create("softib-capture", proto::CAPTURE_RING_BYTES) else {
        return;
    };
    if ch.push(&Event::Capture { on: true }, &[ring.fd().as_fd()]) {
        ch.capture = Some(ring);
    }
}

/// Tells the process engines whose device's port went up or down since they were last told
/// (every turn: one comparison per engine).
pub(super) fn tell_ports(h: &Host, clients: &mut BTreeMap<u64, Client>) {
    for c in clients.values_mut() {
        for (&dev, ch) in &mut c.event_channels {
            let Some(up) = h.devs.get(dev as usize).and_then(|d| d.roce_up()) else {
                continue;
            };
            if up != ch.port_up
                && ch.push(
                    &Event::Port {
                        port: 1,
                        active: up,
                    },
                    &[],
                )
            {
                ch.port_up = up;
            }
        }
    }
}

/// Writes what the process engines captured into their devices' captures (every turn).
pub(super) fn drain(h: &mut Host, clients: &mut BTreeMap<u64, Client>) {
    let mut buf = Vec::new();
    for c in clients.values_mut() {
        for (&dev, ch) in &mut c.event_channels {
            let Some(ring) = &ch.capture else {
                continue;
            };
            let Some(d) = h.devs.get_mut(dev as usize) else {
                continue;
            };
            loop {
                match ring.pop(&mut buf) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => {
                        // A scribbled ring: this engine's capture ends.
                        ch.capture = None;
                        break;
                    }
                }
                if let Some((at, packet)) = proto::parse_capture_record(&buf) {
                    d.capture_from_engine(at, packet);
                }
            }
        }
    }
}
