//! An HCA on emulated IB cables: its `IbCa` (the engine, native framing and the SMA), the
//! cables of its ports with their faults and capture, and what the SM's Sets do to them.

use super::*;

/// An HCA on IB cables.
pub(crate) struct IbDev {
    pub ca: IbCa<ShmMemory>,
    pub cables: Vec<Option<Cable>>,
    /// Readiness of each port's cable from the last `poll(2)`.
    pub ready: Vec<bool>,
    /// Injected faults on each port's egress.
    pub faults: Vec<Faults>,
    /// `softib capture`: every frame sent or received on any port.
    pub capture: Option<PcapWriter>,
    /// Where the PMA's counters were last cleared (`perfquery -r`).
    pub pma: crate::pma::PmaBaselines,
}

impl IbDev {
    pub(super) fn receive(
        &mut self,
        std_now: StdInstant,
        now: Instant,
        buf: &mut [u8],
        sb: &mut Switchboard,
    ) -> io::Result<bool> {
        let mut busy = false;
        for pi in 1..self.cables.len() {
            let Some(cable) = self.cables[pi].as_mut() else {
                continue;
            };
            let port = pi as u8;
            let mut events = Vec::new();
            for frame in sb.take(cable.local_addr()) {
                if cable.heard_frame() {
                    busy = true;
                    capture(&mut self.capture, &frame);
                    self.ca.handle_frame(now, port, &frame);
                }
            }
            if self.ready[pi] {
                // Drained unless the batch limit stops us first (then: still ready).
                self.ready[pi] = false;
                for i in 0..256 {
                    match cable.recv(std_now, buf)? {
                        CableRecv::Empty => break,
                        CableRecv::Consumed(e) => events.extend(e),
                        CableRecv::Frame(n) => {
                            busy = true;
                            capture(&mut self.capture, &buf[..n]);
                            self.ca.handle_frame(now, port, &buf[..n]);
                        }
                    }
                    if i == 255 {
                        self.ready[pi] = true;
                        busy = true;
                    }
                }
            }
            // The peer's silence is judged after what it sent has been read (a long turn leaves
            // its beacons waiting in the socket, not missing).
            events.extend(cable.poll(std_now));
            for e in events {
                match e {
                    CableEvent::Up => self.ca.link_up(port),
                    CableEvent::Down => self.ca.link_down(port),
                }
            }
        }
        while let Some(e) = self.ca.poll_sma_event() {
            apply_sma_event(&mut self.cables, e, std_now);
        }
        self.ca.handle_timeout(now);
        Ok(busy)
    }

    pub(super) fn transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        sb: &mut Switchboard,
    ) -> io::Result<bool> {
        let std_now = StdInstant::now();
        for (p, f) in self.faults.iter_mut().enumerate() {
            if let Some(Some(c)) = self.cables.get_mut(p) {
                let cap = &mut self.capture;
                f.poll(std_now, |(), frame| {
                    capture(cap, frame);
                    sb.send(c, frame)
                })?;
            }
        }
        let mut sent = 0;
        while let Some((port, len)) = self.ca.poll_frame(now, buf) {
            let p = usize::from(port);
            if let (Some(Some(c)), Some(f)) = (self.cables.get_mut(p), self.faults.get_mut(p)) {
                let cap = &mut self.capture;
                f.apply(std_now, (), &buf[..len], |(), frame| {
                    capture(cap, frame);
                    sb.send(c, frame)
                })?;
            }
            sent += 1;
            if sent >= 1024 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Pulls out or plugs in the cable of `port`.
    pub fn set_port_enabled(&mut self, port: u8, enabled: bool) -> bool {
        let Some(Some(cable)) = self.cables.get_mut(usize::from(port)) else {
            return false;
        };
        if cable.set_enabled(enabled, StdInstant::now()) == Some(CableEvent::Down) {
            self.ca.link_down(port);
        }
        true
    }

    pub(super) fn info(&self) -> DeviceInfo {
        let id = self.ca.identity();
        let hca = self.ca.hca();
        let ports = (1..=id.num_ports)
            .map(|p| {
                let info = self.ca.sma().port_info(p);
                let attr = hca.port(p);
                PortInfo {
                    number: p,
                    state: info.map_or(1, |i| u8::from(i.port_state)),
                    phys_state: info.map_or(3, |i| u8::from(i.port_physical_state)),
                    rate: info.map_or(0, port_rate),
                    width: info.map_or(0, |i| i.link_width_active),
                    speed: info.map_or(0, |i| i.link_speed_active),
                    lid: info.map_or(Lid(0), |i| i.lid),
                    lmc: info.map_or(0, |i| i.lmc),
                    sm_lid: info.map_or(Lid(0), |i| i.master_sm_lid),
                    capability_mask: info.map_or(0, |i| i.capability_mask),
                    port_guid: id.port_guid(p),
                    link_layer_ib: true,
                    max_mtu: attr.map_or(Mtu::Mtu2048, |a| a.max_mtu),
                    active_mtu: attr.map_or(Mtu::Mtu2048, |a| a.active_mtu),
                    gids: attr.map_or_else(Vec::new, |a| a.gids.clone()),
                }
            })
            .collect();
        DeviceInfo {
            name: id.name.clone(),
            ca_type: id.ca_type(),
            description: id.description.clone(),
            fw_ver: id.fw_ver.clone(),
            hw_ver: id.hw_ver,
            node_guid: id.node_guid,
            sys_image_guid: id.sys_image_guid,
            vendor_id: id.vendor_id,
            vendor_part_id: u32::from(id.device_id),
            attr: hca.device().clone(),
            ports,
            drops: drops(hca),
            verbs: None,
        }
    }
}

/// The SM moved a port Down (retrain) or Disabled/enabled it: act on the cable.
pub(crate) fn apply_sma_event(cables: &mut [Option<Cable>], e: SmaEvent, now: StdInstant) {
    match e {
        SmaEvent::LinkDown { port, retrain } => {
            // The cable's far end stops hearing this one and goes down too; a Disabled
            // port stays silent until the SM enables it.
            if let Some(Some(c)) = cables.get_mut(usize::from(port)) {
                c.set_enabled(false, now);
                if retrain {
                    c.set_enabled(true, now);
                }
            }
        }
        SmaEvent::LinkEnabled { port } => {
            if let Some(Some(c)) = cables.get_mut(usize::from(port)) {
                c.set_enabled(true, now);
            }
        }
        SmaEvent::ClientReregister { .. } | SmaEvent::SmInfoSet { .. } => {}
    }
}
