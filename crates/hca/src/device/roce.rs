//! A RoCEv2 device on an IP address: its `RoceCa` and what it cannot have — the device's
//! socket (the first member of its SO_REUSEPORT steering group) and the per-QP source
//! sockets, the send queue and its flush, the datagrams for process engines it forwards,
//! multicast groups, live faults and capture, and the interface's operational state.

use super::*;

/// A RoCEv2 device: its `RoceCa` (the engine and the RoCEv2 framing) and the sockets, faults,
/// capture and send queue around it.
pub(crate) struct RoceDev {
    pub config: LinkConfig,
    pub ca: RoceCa<ShmMemory>,
    pub link: UdpLink,
    pub ready: bool,
    /// Whether the interface is up (the port is Active).
    pub up: bool,
    pub(super) next_check: StdInstant,
    /// Datagrams the socket cut short (larger than a receive slot) or that came from an address
    /// that is not IP.
    pub(super) rx_truncated: u64,
    /// What the kernel dropped because the socket's receive buffer was full, as it counts it
    /// (`SO_RXQ_OVFL`: a datagram, or a whole GSO run of up to 64, counts once). RC recovers
    /// them by retransmission; UD loses them, as on a congested wire.
    pub rx_overflow: u64,
    /// Datagrams the kernel would not take (a full socket buffer, an unreachable destination).
    pub tx_dropped: u64,
    /// Injected faults on egress, per (source key — the UDP source port and whether the
    /// packet goes in-process —, destination).
    pub faults: Faults<(SrcKey, SocketAddr)>,
    /// `softib capture`: every datagram sent or received, with its IP and UDP headers.
    pub capture: Option<PcapWriter>,
    /// Sockets bound to the UDP source ports rxe derives per QP
    /// ([`framing::rxe_source_port`]); everything is received on `link` (destination port 4791).
    pub(super) src_links: std::collections::BTreeMap<u16, UdpLink>,
    /// Source ports that could not be bound (taken, or too many sockets): sent from `link`.
    pub(super) src_refused: std::collections::BTreeSet<u16>,
    /// A turn's datagrams, by source key, sent together at its end (`softib_net::batch`).
    pub(super) tx: TxQueue<SrcKey>,
    /// Receive slots (made on first use: 1 MiB).
    pub(super) rx: Option<Box<RxBatch>>,
    /// The processes whose own engines receive on the device's address (`link` is member 0).
    pub steer: SteerGroup,
    /// Datagrams for another process's QPNs that reached the wrong socket while the group
    /// changed (handed on by a process, or received on `link`), waiting for the host to put
    /// them into their owner's inbound ring ([`Device::take_forwards`]).
    pub(super) forwards: std::collections::VecDeque<Forward>,
    /// Such datagrams lost: too many waiting, or their owner could not take them.
    pub handed_on_lost: u64,
    /// The IPv4 multicast groups QPs of the device are attached to: a socket each, bound to
    /// the group's address and joined on the device's interface (the kernel tells a
    /// group's datagrams apart only by the socket that receives them).
    pub(super) groups: Vec<Group>,
}

/// A datagram for process `owner`'s engine that reached the daemon.
#[derive(Debug)]
pub struct Forward {
    /// The client whose engine holds the DestQP.
    pub owner: u64,
    /// Its sender.
    pub from: SocketAddr,
    /// Its index in its GRO run (the IPv4 Identification its ICRC was sealed for).
    pub index: u16,
    /// The UDP payload, sealed.
    pub data: Vec<u8>,
}

/// The most datagrams waiting to be forwarded on one device.
pub(super) const MAX_FORWARDS: usize = 4096;

/// The DestQP of a RoCEv2 UDP payload (its BTH), if it is long enough.
pub(super) fn dest_qpn(data: &[u8]) -> Option<u32> {
    data.get(5..8)
        .map(|b| u32::from_be_bytes([0, b[0], b[1], b[2]]))
}

/// Where a device keeps the datagrams it forwards, and counts those it loses.
pub(super) struct Forwarding<'a> {
    pub(super) steer: &'a SteerGroup,
    pub(super) queue: &'a mut std::collections::VecDeque<Forward>,
    pub(super) lost: &'a mut u64,
}

impl Forwarding<'_> {
    /// Queues a datagram for the process that owns its DestQP, if one does (else false: the
    /// daemon's engine takes it). `from_owner` when that process handed it on itself: its
    /// engine does not hold the QPN (a block it just gave back), so it is lost.
    pub(super) fn forward(
        &mut self,
        from: SocketAddr,
        index: u16,
        data: &[u8],
        from_owner: Option<u64>,
    ) -> bool {
        let Some(owner) = dest_qpn(data).and_then(|q| self.steer.owner_of(q)) else {
            return false;
        };
        if Some(owner) == from_owner || self.queue.len() >= MAX_FORWARDS {
            *self.lost += 1;
        } else {
            self.queue.push_back(Forward {
                owner,
                from,
                index,
                data: data.to_vec(),
            });
        }
        true
    }
}

impl RoceDev {
    pub(super) fn forwarding(&mut self) -> Forwarding<'_> {
        Forwarding {
            steer: &self.steer,
            queue: &mut self.forwards,
            lost: &mut self.handed_on_lost,
        }
    }
}

/// One IPv4 multicast group a RoCE device receives.
pub(super) struct Group {
    pub(super) addr: std::net::Ipv4Addr,
    pub(super) socket: UdpSocket,
    pub(super) ready: bool,
    /// The QPs attached to it: the last to go (detached or destroyed) closes the socket.
    pub(super) members: std::collections::BTreeSet<Qpn>,
}

/// Bytes queued in a turn after which they are sent at once rather than at the turn's end.
/// Small enough that the kernel copies them out of the send queue while they are still in
/// this core's L2 cache: on a machine whose DRAM copies at 6 GB/s, 1 MiB here held inter-host
/// 64 KiB WRITEs at MTU 9000 to 1.1–1.5 GB/s and 256 KiB gives 1.4–2.2 GB/s (MTU 1500, bound
/// per packet, is the same either way; on a machine with twice the memory bandwidth the two
/// were level).
pub(super) const TX_FLUSH_BYTES: usize = 1 << 18;

/// The most per-QP source sockets a device opens; QPs beyond share the device's own port.
pub(super) const MAX_SOURCE_SOCKETS: usize = 512;

/// A device's view of [`LocalRoce`] when it flushes its queue: from its address, by source
/// port.
pub(super) struct FromAddr<'a> {
    local: &'a mut LocalRoce,
    ip: IpAddr,
}

impl softib_net::batch::Loopback<SrcKey> for FromAddr<'_> {
    fn is_local(&self, to: &SocketAddr) -> bool {
        self.local.is_local(to)
    }

    fn deliver(&mut self, key: SrcKey, to: SocketAddr, index: u16, bytes: &[u8]) {
        // Whatever went through the queue was sealed: the receiver checks it.
        self.local.deliver(
            SocketAddr::new(self.ip, key.port),
            to,
            index,
            bytes,
            true,
            key.in_process,
        );
    }
}

impl RoceDev {
    /// A RoCEv2 device on `config`'s address; fails with a message naming what is wrong.
    pub fn new(config: LinkConfig, seed: u64) -> io::Result<RoceDev> {
        let nd = netdev(&config.netdev)?;
        let local = SocketAddr::new(config.addr, config.udp_port);
        let link = UdpLink::bind_reuseport_with(local, true).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "{}: cannot use {local} ({e}); is the address on {} and the port free?",
                    config.name, config.netdev
                ),
            )
        })?;
        // rxe takes its GUID from the MAC; interfaces without one (lo) get the address mixed
        // in, so that two devices on one interface still differ.
        let guid = Guid(if nd.mac == [0; 6] {
            let ip = match config.addr {
                IpAddr::V4(a) => a.octets().to_vec(),
                IpAddr::V6(a) => a.octets().to_vec(),
            };
            let n = ip.len();
            eui64([0, 0, 0, ip[n - 3], ip[n - 2], ip[n - 1]])
        } else {
            eui64(nd.mac)
        });
        let mut hc = HcaConfig::with_seed(seed);
        hc.device.node_guid = guid;
        hc.device.sys_image_guid = guid;
        let mut link_local = [0u8; 16];
        link_local[0] = 0xfe;
        link_local[1] = 0x80;
        link_local[8..].copy_from_slice(&guid.0.to_be_bytes());
        hc.ports = vec![PortAttr {
            max_mtu: Mtu::Mtu4096,
            active_mtu: framing::ib_mtu_for(nd.mtu),
            lid: Lid(0),
            gids: vec![Gid(link_local), framing::gid_of(config.addr)],
            pkeys: vec![softib_wire::PKey::DEFAULT],
            active: nd.up,
        }];
        let ca = RoceCa::new(
            Hca::new(hc, ShmMemory::new()),
            RoceConfig::new(link.local_addr()),
        );
        let steer = SteerGroup::new(link.local_addr());
        Ok(RoceDev {
            ca,
            link,
            ready: true,
            up: nd.up,
            next_check: StdInstant::now() + OPERSTATE_EVERY,
            rx_truncated: 0,
            rx_overflow: 0,
            tx_dropped: 0,
            faults: Faults::default(),
            capture: None,
            src_links: std::collections::BTreeMap::new(),
            src_refused: std::collections::BTreeSet::new(),
            tx: TxQueue::new(),
            rx: None,
            steer,
            forwards: Default::default(),
            handed_on_lost: 0,
            groups: Vec::new(),
            config,
        })
    }

    pub(super) fn local(&self) -> SocketAddr {
        self.link.local_addr()
    }

    /// Receives IPv4 multicast group `group` for QP `qpn` (one more member if it does
    /// already): a socket bound to the group and the device's port, a member on the device's
    /// interface.
    pub(super) fn join_group(&mut self, group: std::net::Ipv4Addr, qpn: Qpn) -> io::Result<()> {
        if let Some(g) = self.groups.iter_mut().find(|g| g.addr == group) {
            g.members.insert(qpn);
            return Ok(());
        }
        let IpAddr::V4(local) = self.config.addr else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{}: IPv4 multicast group {group} on a device with an IPv6 address",
                    self.config.name
                ),
            ));
        };
        let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", self.config.name));
        softib_net::mcast::send_from(self.link.socket(), local).map_err(named)?;
        let socket = softib_net::mcast::join(group, self.local().port(), local).map_err(named)?;
        self.groups.push(Group {
            addr: group,
            socket,
            ready: true,
            members: std::collections::BTreeSet::from([qpn]),
        });
        Ok(())
    }

    /// QP `qpn` leaves the groups `which` picks; a group's last member closes its socket
    /// (leaving the group).
    pub(super) fn leave_groups(&mut self, which: impl Fn(std::net::Ipv4Addr) -> bool, qpn: Qpn) {
        for g in self.groups.iter_mut().filter(|g| which(g.addr)) {
            g.members.remove(&qpn);
        }
        self.groups.retain(|g| !g.members.is_empty());
    }

    /// The datagrams of the groups whose sockets are readable, to the engine.
    pub(super) fn receive_groups(&mut self, now: Instant) -> bool {
        let mut busy = false;
        let mut buf = [0u8; 9216];
        for g in &mut self.groups {
            if !std::mem::take(&mut g.ready) {
                continue;
            }
            // A bounded number a turn, as the device's own socket gets.
            for _ in 0..64 {
                match g.socket.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        let d = Incoming::wire(from, 0, &buf[..n]);
                        let _ = self.ca.handle_group_datagram(now, &d, g.addr);
                        busy = true;
                    }
                    Err(_) => break,
                }
            }
        }
        busy
    }

    pub(super) fn receive(
        &mut self,
        std_now: StdInstant,
        now: Instant,
        local_in: &mut LocalRoce,
    ) -> io::Result<bool> {
        if std_now >= self.next_check {
            self.next_check = std_now + OPERSTATE_EVERY;
            // The port follows the interface, as rxe's does (netdev events).
            let up = netdev_up(&self.config.netdev);
            if up != self.up {
                self.up = up;
                let _ = self.ca.hca_mut().set_port_active(1, up);
            }
        }
        let mut busy = false;
        let local = self.local();
        let (ca, capture, name) = (&mut self.ca, &mut self.capture, &self.config.name);
        // From this daemon's other devices (or this one) first: they were sent earlier.
        local_in.drain(local, |from, index, data, sealed, in_process, payload| {
            let d = Incoming {
                from,
                index,
                data,
                sealed,
                in_process,
                payload,
            };
            busy |= accept(ca, capture, name, local, now, &d);
        });
        if self.ready {
            self.ready = false;
            let batch = self.rx.get_or_insert_with(|| Box::new(RxBatch::new()));
            // At most 16 calls a turn, so that sending and the clients get their turn too.
            for call in 0..16 {
                if self.link.recv_batch(batch)? == 0 {
                    break;
                }
                self.rx_truncated += batch.malformed() as u64;
                if let Some(n) = batch.overflows() {
                    self.rx_overflow = self.rx_overflow.max(u64::from(n));
                }
                let steered = self.steer.has_members();
                let mut fwd = Forwarding {
                    steer: &self.steer,
                    queue: &mut self.forwards,
                    lost: &mut self.handed_on_lost,
                };
                for dg in batch.datagrams() {
                    // Steered here while the group changed: for a process's engine.
                    if steered && fwd.forward(dg.from, dg.index, dg.data, None) {
                        continue;
                    }
                    let d = Incoming::wire(dg.from, dg.index, dg.data);
                    busy |= accept(&mut self.ca, &mut self.capture, name, local, now, &d);
                }
                if call == 15 {
                    self.ready = true;
                    busy = true;
                }
            }
        }
        busy |= self.receive_groups(now);
        self.ca.handle_timeout(now);
        Ok(busy)
    }

    pub(super) fn transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        local_out: &mut LocalRoce,
    ) -> io::Result<bool> {
        let more = self.queue_transmit(now, buf, local_out);
        self.flush(local_out);
        Ok(more)
    }

    /// Sends what is queued — to this daemon's own devices in-process, to others through the
    /// kernel; what the kernel would not take is lost, as on a wire.
    pub(super) fn flush(&mut self, local_out: &mut LocalRoce) {
        let me = self.link.local_addr();
        let (link, srcs) = (&self.link, &self.src_links);
        let out = self.tx.flush_or_deliver(
            |key| {
                if key.port == me.port() {
                    Some(link)
                } else {
                    srcs.get(&key.port)
                }
            },
            &mut FromAddr {
                local: local_out,
                ip: me.ip(),
            },
        );
        self.tx_dropped += out.dropped;
    }

    /// Queues what the engine has to send (and delayed frames whose time has come); returns
    /// whether more may be waiting. Each datagram is built where it will most likely wait —
    /// the in-process queue's free room or the send queue's ([`RoceCa::poll_transmit`]) — so
    /// that it is queued where it lies.
    pub(super) fn queue_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        local_out: &mut LocalRoce,
    ) -> bool {
        self.release_held();
        let trust_local = self.trust_local();
        self.ca.set_trust_local(trust_local);
        let faults_idle = self.faults.is_idle();
        let room = buf.len();
        let mut sent = 0;
        while let Some(mut t) =
            self.ca
                .poll_transmit(now, self.tx.space(room), local_out.space(room))
        {
            t.src_port = self.source_socket(t.src_port);
            if t.local && trust_local {
                self.hand_over(t, room, local_out);
            } else if !t.local && faults_idle {
                // Sealed where it lies, for its place in its GSO run.
                let gso = self.gso(t.src_port);
                let from = SocketAddr::new(self.local().ip(), t.src_port);
                if let Some((index, stored)) = self.ca.commit(&mut self.tx, &t, gso) {
                    capture_sent(&mut self.capture, from, t.to, index, stored);
                }
            } else {
                // Through the faults (which may hold, repeat or change it), from a copy.
                let pkt: &mut [u8] = if t.local {
                    local_out.space(room)
                } else {
                    buf[..t.datagram_len()]
                        .copy_from_slice(&self.tx.space(room)[..t.datagram_len()]);
                    &mut buf[..]
                };
                if self.ca.seal(&t, pkt) {
                    self.apply_faults(&t, &pkt[..t.datagram_len()]);
                }
            }
            if self.tx.bytes() >= TX_FLUSH_BYTES {
                self.flush(local_out);
            }
            sent += 1;
            if sent >= 1024 {
                return true;
            }
        }
        false
    }

    /// Hands a datagram for a device of this daemon over unsealed, where it was built (see
    /// [`RoceDev::trust_local`]; the receiver knows not to check). A payload left in memory
    /// goes as the mapping of the client's buffer it lies in when it lies in one (the
    /// receiving device copies it from there into its own client's: one copy in all), else
    /// whole.
    pub(super) fn hand_over(
        &mut self,
        mut t: RoceTransmit,
        room: usize,
        local_out: &mut LocalRoce,
    ) {
        let mut handed = None;
        if let Some(p) = t.packet.payload {
            handed = self
                .ca
                .hca()
                .memory()
                .borrow(p.region, p.addr, p.len as usize)
                .map(|(map, off)| LocalPayload {
                    map,
                    off,
                    len: p.len as usize,
                });
            if handed.is_none() && !self.ca.materialize(&mut t, local_out.space(room)) {
                return;
            }
        }
        let from = SocketAddr::new(self.local().ip(), t.src_port);
        let in_process = t.packet.in_process;
        local_out.commit_parts(from, t.to, 0, t.datagram_len(), false, in_process, handed);
    }

    /// Passes a sealed datagram through the device's faults into the send queue.
    pub(super) fn apply_faults(&mut self, t: &RoceTransmit, frame: &[u8]) {
        let gso = self.gso(t.src_port);
        let ip = self.local().ip();
        let (ca, tx, cap) = (&mut self.ca, &mut self.tx, &mut self.capture);
        let _ = self.faults.apply(
            StdInstant::now(),
            (t.key(), t.to),
            frame,
            |(key, to), frame| -> Result<(), ()> {
                let (index, stored) = ca.queue(tx, key, to, frame, gso);
                capture_sent(cap, SocketAddr::new(ip, key.port), to, index, stored);
                Ok(())
            },
        );
    }

    /// Queues the datagrams the faults held back whose time has come.
    pub(super) fn release_held(&mut self) {
        let ip = self.local().ip();
        let (link, srcs) = (&self.link, &self.src_links);
        let (ca, tx, cap) = (&mut self.ca, &mut self.tx, &mut self.capture);
        let _ = self
            .faults
            .poll(StdInstant::now(), |(key, to), frame| -> Result<(), ()> {
                let gso = srcs.get(&key.port).unwrap_or(link).gso();
                let (index, stored) = ca.queue(tx, key, to, frame, gso);
                capture_sent(cap, SocketAddr::new(ip, key.port), to, index, stored);
                Ok(())
            });
    }

    /// Whether the socket of source port `port` sends GSO runs.
    pub(super) fn gso(&self, port: u16) -> bool {
        self.src_links.get(&port).unwrap_or(&self.link).gso()
    }

    /// Whether datagrams for this daemon's own devices may go unsealed: nothing between here
    /// and the receiving device — no capture, no fault — could see or change them, so the
    /// ICRC (two CRC passes per packet, a fifth of the daemon's time in intra-host runs)
    /// would protect nothing.
    pub(super) fn trust_local(&self) -> bool {
        self.capture.is_none() && self.faults.is_idle()
    }

    /// The port a packet meant to leave from `want` really leaves from: a socket bound to it
    /// (made on first use), or the device's own port when it cannot be had.
    pub(super) fn source_socket(&mut self, want: u16) -> u16 {
        let main = self.local().port();
        if want == main || self.src_links.contains_key(&want) {
            return want;
        }
        if self.src_refused.contains(&want) || self.src_links.len() >= MAX_SOURCE_SOCKETS {
            return main;
        }
        match UdpLink::bind(SocketAddr::new(self.local().ip(), want)) {
            Ok(l) => {
                self.src_links.insert(want, l);
                want
            }
            Err(_) => {
                self.src_refused.insert(want);
                main
            }
        }
    }

    pub(super) fn info(&self) -> DeviceInfo {
        let hca = self.ca.hca();
        let attr = hca.port(1);
        let guid = hca.device().node_guid;
        DeviceInfo {
            name: self.config.name.clone(),
            ca_type: String::new(),
            description: format!("{} {}", self.config.name, self.config.netdev),
            fw_ver: String::new(),
            hw_ver: 0,
            node_guid: guid,
            sys_image_guid: guid,
            vendor_id: 0xff_ffff,
            vendor_part_id: 0,
            attr: hca.device().clone(),
            ports: vec![PortInfo::roce(
                guid,
                self.up,
                attr.map_or(Mtu::Mtu4096, |a| a.max_mtu),
                attr.map_or(Mtu::Mtu1024, |a| a.active_mtu),
                attr.map_or_else(Vec::new, |a| a.gids.clone()),
            )],
            drops: {
                let mut d = drops(hca);
                // Datagrams that never reached the engine, by reason.
                d.extend(
                    self.ca
                        .drops()
                        .nonzero()
                        .map(|(r, n)| (r.name().to_string(), n)),
                );
                if self.rx_truncated > 0 {
                    d.push(("datagram_truncated".to_string(), self.rx_truncated));
                }
                if self.rx_overflow > 0 {
                    d.push(("rcvbuf_overflow".to_string(), self.rx_overflow));
                }
                if self.tx_dropped > 0 {
                    d.push(("tx_refused".to_string(), self.tx_dropped));
                }
                if self.handed_on_lost > 0 {
                    d.push(("handed_on_lost".to_string(), self.handed_on_lost));
                }
                d
            },
            verbs: None,
        }
    }
}

/// Captures a received datagram (a device of this daemon's unsealed one as the wire would
/// have carried it) and hands it to the device's `RoceCa`; returns whether the engine took it.
pub(super) fn accept(
    ca: &mut RoceCa<ShmMemory>,
    capture: &mut Option<PcapWriter>,
    name: &str,
    local: SocketAddr,
    now: Instant,
    d: &Incoming<'_>,
) -> bool {
    if capture.is_some() {
        let ident = if d.from.is_ipv4() { d.index } else { 0 };
        let frame = if d.sealed {
            framing::datagram(d.from, local, d.data, ident)
        } else {
            framing::wire_datagram(d.from, local, d.data, d.payload, ident)
        };
        if let Some(f) = frame {
            self::capture(capture, &f);
        }
    }
    match ca.handle_datagram(now, d) {
        Ok(()) => true,
        Err(e) => {
            // Asked once, not per datagram (a flood is many), and rate-limited: a flood must
            // not become a flood of log lines.
            static DEBUG: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            static DROPS_LOG: std::sync::Mutex<RateLog> = std::sync::Mutex::new(RateLog::new());
            if *DEBUG.get_or_init(|| std::env::var_os("SOFTIB_DEBUG").is_some()) {
                if let Ok(mut log) = DROPS_LOG.lock() {
                    log.say(|| format!("{name}: dropped a datagram from {}: {e}", d.from));
                }
            }
            false
        }
    }
}

/// Captures a queued datagram with the IPv4 Identification its place (`index`) in its GSO run
/// gives it.
pub(super) fn capture_sent(
    cap: &mut Option<PcapWriter>,
    from: SocketAddr,
    to: SocketAddr,
    index: u16,
    stored: &[u8],
) {
    if cap.is_some() {
        let index = if from.is_ipv4() { index } else { 0 };
        if let Some(d) = framing::datagram(from, to, stored, index) {
            capture(cap, &d);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A BTH-sized UDP payload for DestQP `qpn`.
    fn bth(qpn: u32) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        b
    }

    #[test]
    fn a_datagram_for_a_process_qpn_goes_to_its_owner_unless_the_owner_handed_it_on() {
        let device = softib_net::steer::bind_reuseport("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut steer = SteerGroup::new(device.local_addr().unwrap());
        let (_member, _) = steer.join(7, &device).unwrap();
        steer.add_block(7, 0x1000, &device).unwrap();
        let (mut queue, mut lost) = (std::collections::VecDeque::new(), 0);
        let mut f = Forwarding {
            steer: &steer,
            queue: &mut queue,
            lost: &mut lost,
        };
        let from: SocketAddr = "127.0.0.9:5000".parse().unwrap();
        // Received on the daemon's socket, or handed on by another engine: to the owner.
        assert!(f.forward(from, 3, &bth(0x1001), None));
        assert!(f.forward(from, 0, &bth(0x1002), Some(8)));
        // Handed on by the owner itself (it gave the QPN back): lost.
        assert!(f.forward(from, 0, &bth(0x1003), Some(7)));
        // Nobody's (the daemon's QPs, QP1, quarantined QPNs): the daemon's engine takes it.
        assert!(!f.forward(from, 0, &bth(0x2000), None));
        assert!(!f.forward(from, 0, &[0u8; 4], None));
        let got: Vec<_> = queue
            .iter()
            .map(|f| (f.owner, f.index, f.data.len()))
            .collect();
        assert_eq!(got, [(7, 3, 12), (7, 0, 12)]);
        assert_eq!(lost, 1);
    }
}
