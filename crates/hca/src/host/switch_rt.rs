//! A soft switch's turn: frames from its cables (and from cable ends of this daemon, through
//! the switchboard) forwarded by the LFT its SMA holds, link state handed to the SMA, and the
//! SMA's port changes applied to the cables.
//!
//! No SM runs inside a soft switch: SMPs for an SM are dropped. GMPs for the switch are
//! answered by the switch itself (its PMA, [`Switch::handle_packet`]'s `Transmit`); what else
//! it would deliver locally is dropped.

use std::collections::BTreeMap;
use std::io;
use std::time::Instant as StdInstant;

use softib_fabric::{LinkRate, Switch, SwitchAction};
use softib_net::cable::{Cable, CableEvent, CableRecv};

use crate::switchboard::Switchboard;

/// A switch and its cables, indexed by port.
pub(super) struct SwitchRt {
    sw: Switch,
    pub cables: Vec<Option<Cable>>,
    /// Readiness of each port's cable from the last `poll(2)`.
    pub ready: Vec<bool>,
    /// The rate each port trains to when its cable comes up.
    rates: Vec<LinkRate>,
}

/// The most frames taken from one ready cable in one turn.
const RECV_BATCH: usize = 256;

impl SwitchRt {
    /// `rates` names the rate of each port's link; the others train to 4X QDR.
    pub fn new(sw: Switch, cables: Vec<Option<Cable>>, rates: &BTreeMap<u8, LinkRate>) -> SwitchRt {
        let rates = (0..cables.len())
            .map(|p| {
                u8::try_from(p)
                    .ok()
                    .and_then(|p| rates.get(&p).copied())
                    .unwrap_or(LinkRate::QDR_4X)
            })
            .collect();
        SwitchRt {
            sw,
            ready: vec![true; cables.len()],
            cables,
            rates,
        }
    }

    /// One turn; returns whether it forwarded anything.
    pub fn step(
        &mut self,
        std_now: StdInstant,
        buf: &mut [u8],
        sb: &mut Switchboard,
    ) -> io::Result<bool> {
        let mut busy = false;
        for port in 1..self.cables.len() {
            let in_port = port as u8;
            let mut events = Vec::new();
            let mut frames: Vec<(u8, Vec<u8>)> = Vec::new();
            if let Some(cable) = self.cables[port].as_mut() {
                for frame in sb.take(cable.local_addr()) {
                    if !cable.heard_frame() {
                        continue;
                    }
                    busy = true;
                    forward(&mut self.sw, in_port, frame, &mut frames);
                }
                let ready = std::mem::replace(&mut self.ready[port], false);
                for _ in 0..if ready { RECV_BATCH } else { 0 } {
                    match cable.recv(std_now, buf)? {
                        CableRecv::Empty => break,
                        CableRecv::Consumed(e) => events.extend(e),
                        CableRecv::Frame(n) => {
                            busy = true;
                            forward(&mut self.sw, in_port, buf[..n].to_vec(), &mut frames);
                        }
                    }
                }
                // After reading: what the peer sent during a long turn is not silence.
                events.extend(cable.poll(std_now));
            }
            for e in events {
                match e {
                    CableEvent::Up => self.sw.sma_mut().link_up(in_port, self.rates[port]),
                    CableEvent::Down => self.sw.sma_mut().link_down(in_port),
                }
            }
            for (out, frame) in frames {
                if let Some(Some(c)) = self.cables.get_mut(usize::from(out)) {
                    sb.send(c, &frame)?;
                }
            }
        }
        while let Some(e) = self.sw.sma_mut().poll_event() {
            crate::device::apply_sma_event(&mut self.cables, e, std_now);
        }
        // Traps to the master SM (a port went down or came up): it sweeps on them.
        while let Some(action) = self.sw.poll_trap() {
            if let SwitchAction::Transmit { out_port, packet } = action {
                if let Some(Some(c)) = self.cables.get_mut(usize::from(out_port)) {
                    sb.send(c, &packet)?;
                    busy = true;
                }
            }
        }
        Ok(busy)
    }

    /// When its cables next need a turn (beacons, training timeouts).
    pub fn deadlines(&self) -> impl Iterator<Item = StdInstant> + '_ {
        self.cables
            .iter()
            .flatten()
            .filter_map(Cable::next_deadline)
    }
}

/// Hands `frame`, received on `in_port`, to the switch and queues what it sends on.
fn forward(sw: &mut Switch, in_port: u8, frame: Vec<u8>, out: &mut Vec<(u8, Vec<u8>)>) {
    match sw.handle_packet(in_port, &frame) {
        SwitchAction::Forward { out_port } => out.push((out_port, frame)),
        SwitchAction::Replicate { out_ports } => {
            for port in out_ports.iter() {
                out.push((port, frame.clone()));
            }
        }
        SwitchAction::Transmit { out_port, packet } => out.push((out_port, packet)),
        SwitchAction::Local | SwitchAction::ToSm(_) | SwitchAction::Drop(_) => {}
    }
}
