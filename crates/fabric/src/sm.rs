//! The subnet manager (IBA vol 1 §14.4) and its SA, as a sans-IO state machine that behaves
//! like opensm.
//!
//! [`SubnetManager`] is driven by the runtime that owns the SM's local port: it sends what
//! [`SubnetManager::poll_transmit`] gives (directed-route SMPs, initial path from hop 0) out of
//! that port, hands the GetResps back to [`SubnetManager::handle_response`], calls
//! [`SubnetManager::handle_timeout`] when [`SubnetManager::poll_timeout`] says, answers SMInfo
//! on the local SMA with [`SubnetManager::sm_info`], and passes SA MADs (QP1, class 0x03) to
//! [`SubnetManager::handle_sa`].
//!
//! # What a sweep does (opensm's `osm_state_mgr`, golden `B-stock/osm-topoB/opensm.log`)
//!
//! 1. Heavy sweep: a [`Discovery`] crawl of the whole subnet ("INITIATING HEAVY SWEEP" …
//!    "HEAVY SWEEP COMPLETE").
//! 2. Election (IBA §14.4.1): the SMInfo of every other port whose CapabilityMask has IsSM.
//!    The master is the SM with the highest priority, ties to the lower port GUID
//!    (`osm_sm_is_greater_than`); an SM that loses goes Standby and from then on only polls
//!    the master's SMInfo, taking over (a heavy sweep and a new election) when the master stops
//!    answering or is no longer master.
//! 3. LIDs (`osm_lid_mgr`): a port keeps the LID `guid2lid` gives it, else the LID it already
//!    has if no one else holds it, else the lowest free LID; the SM's own port is served first
//!    (LID 1 on a fresh subnet), then the others in opensm's `port_guid_tbl` order (the GUID's
//!    bytes in network order read as a little-endian number). Each end port gets a PortInfo
//!    Set with its LID, LMC 0, MasterSMLID, MasterSMSL 0, the subnet prefix and M_Key 0,
//!    PortState NoChange ("SUBNET LID CONFIG"), skipped when nothing would change.
//! 4. Routing ([`Routing`]): SwitchInfo (LinearFDBTop, LifeTimeValue, PortStateChange cleared)
//!    and the LFT blocks that changed, per switch ("SWITCH TABLE CONFIG"); then multicast
//!    ([`mcast`]): the MulticastForwardingTable blocks (per PortMask position) that changed
//!    ("SWITCHES CONFIGURED FOR MULTICAST").
//! 5. Every cabled port in Init is Set Armed, then every Armed port Active ("SET LINKS TO ARMED
//!    STATE", "SET LINKS TO ACTIVE STATE"), then "SUBNET UP".
//! 6. Light sweeps every `sweep_interval`: SwitchInfo of every switch and PortInfo of every
//!    cabled CA port; a switch with PortStateChange, a CA port whose state changed, or one
//!    that no longer answers starts a heavy sweep, which re-routes and re-activates.
//!
//! Logging: [`SubnetManager::poll_log`] gives opensm.log messages with opensm's levels
//! ([`LogLevel`]); [`SubnetManager::poll_console`] the lines opensm prints on stdout
//! ("Entering DISCOVERING state", "Entering MASTER state", "Entering STANDBY state"). As the
//! golden runs show, "SUBNET UP" goes to the log only.
//!
//! Multicast: the SA's MCMemberRecord joins and leaves ([`SubnetManager::handle_sa`]) change
//! the groups ([`mcast::McGroups`], the IPoIB broadcast group pre-created); when the member
//! ports change, the master SM reprograms the MFTs at once if it is idle, else as soon as the
//! current sweep is done; every heavy sweep recomputes them too.
//!
//! Election (`sm/election.rs`): a DISCOVERING SM that finds a master stands by; a master
//! that finds a higher SM in Standby at a heavy sweep (a light sweep that sees a port's IsSM
//! change starts one, and so does Trap 144 from that port's SMA) hands the subnet over with
//! SubnSet(SMInfo) HANDOVER, then stands by and polls the new master; the SubnSet(SMInfo)s
//! other SMs send this one ([`SubnetManager::handle_sm_info_set`]) are acted on as opensm
//! acts on them.
//!
//! Not done: LMC > 0, M_Key protection, P_Key tables, TrapRepress (the runtime calls
//! [`SubnetManager::request_sweep`] for a trap 128 or 144 and answers none).
//!
//! This file is the sweep's state machine (about 1,350 lines, one concept: the order of an
//! SM's steps); the election (`sm/election.rs`), routing (`sm/routing.rs`) and multicast
//! (`sm/mcast.rs`) are their own files.

mod election;
pub mod mcast;
mod routing;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use softib_wire::mad::attr::{
    capability_mask, LinearForwardingTable, MulticastForwardingTable, PortInfo, PortPhysicalState,
    PortState, SmInfo, SmState, SwitchInfo,
};
use softib_wire::mad::sa::McMemberRecord;
use softib_wire::mad::{attr_name, smp, status, AttrId, Method, MgmtClass, BASE_VERSION};
use softib_wire::{Guid, Lid};

use crate::discover::{Discovery, DiscoveryConfig, Done, Requester, DEFAULT_MAX_WIRE_SMPS};
use crate::sa;
use crate::subnet::{PortRef, Subnet};
use crate::switch::PortMask;

use mcast::{McGroups, PortCaps};

/// The routing engine (opensm `-R`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Routing {
    /// Shortest paths, balanced over equal ports (opensm's default `minhop`).
    #[default]
    MinHop,
    /// Up/down: deadlock-free on any topology (opensm `updn`, roots chosen automatically).
    UpDown,
}

impl Routing {
    /// The engine's opensm name.
    pub fn name(self) -> &'static str {
        match self {
            Routing::MinHop => "minhop",
            Routing::UpDown => "updn",
        }
    }
}

/// How the SM runs (opensm's options of the same meaning).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmConfig {
    /// The GUID of the port the SM runs on (`-g`).
    pub port_guid: Guid,
    /// SM priority, 0..=15 (`-p`); higher wins the election.
    pub priority: u8,
    /// Time between light sweeps (`-s`); `None` (opensm `-s 0`): no periodic sweeps.
    pub sweep_interval: Option<Duration>,
    /// The routing engine (`-R`).
    pub routing: Routing,
    /// Port GUID → LID from a previous run (opensm's `guid2lid` file), so LIDs stay put
    /// across SM restarts.
    pub guid2lid: BTreeMap<Guid, Lid>,
    /// SM_Key, shown in SMInfo (`--sm_key`); opensm's default is 1 (`OSM_DEFAULT_SM_KEY`),
    /// and an opensm takes part in an election only with SMs whose SM_Key is its own.
    pub sm_key: u64,
    /// The subnet prefix given to every port (`--subnet_prefix`).
    pub subnet_prefix: u64,
    /// How long to wait for an SMP response (`-t`).
    pub transaction_timeout: Duration,
    /// Resends of an SMP before it is given up (`--retries`).
    pub retries: u8,
    /// SMPs in flight at once (`max_wire_smps`).
    pub max_wire_smps: usize,
}

impl Default for SmConfig {
    /// opensm's defaults: priority 0, sweep every 10 s, minhop, SM_Key 1, prefix 0xfe80::,
    /// 200 ms timeout, 3 retries, 4 SMPs on the wire. The port GUID is 0: set it.
    fn default() -> Self {
        SmConfig {
            port_guid: Guid(0),
            priority: 0,
            sweep_interval: Some(Duration::from_secs(10)),
            routing: Routing::MinHop,
            guid2lid: BTreeMap::new(),
            sm_key: 1,
            subnet_prefix: 0xfe80_0000_0000_0000,
            transaction_timeout: Duration::from_millis(200),
            retries: 3,
            max_wire_smps: DEFAULT_MAX_WIRE_SMPS,
        }
    }
}

/// An opensm log level (the `0x..` after the timestamp in opensm.log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogLevel(pub u8);

impl LogLevel {
    /// OSM_LOG_ERROR.
    pub const ERROR: LogLevel = LogLevel(0x01);
    /// OSM_LOG_INFO.
    pub const INFO: LogLevel = LogLevel(0x02);
    /// OSM_LOG_VERBOSE.
    pub const VERBOSE: LogLevel = LogLevel(0x04);
    /// OSM_LOG_DEBUG.
    pub const DEBUG: LogLevel = LogLevel(0x08);
    /// OSM_LOG_SYS: also printed on the console.
    pub const SYS: LogLevel = LogLevel(0x80);
}

/// One opensm.log message (the runtime adds the timestamp).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// The level.
    pub level: LogLevel,
    /// The text, without a trailing newline.
    pub text: String,
}

/// What the SM's requests are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    /// SMInfo of another SM's node, for the election.
    SmInfo { node: usize, guid: Guid },
    /// PortInfo Set of an end port or a port state change.
    SetPortInfo { at: PortRef },
    /// SwitchInfo Set.
    SetSwitchInfo { node: usize },
    /// LFT block Set.
    SetLft { node: usize },
    /// MFT block Set.
    SetMft { node: usize },
    /// Light sweep: SwitchInfo of a switch.
    LightSwitchInfo { node: usize },
    /// Light sweep: PortInfo of a CA port.
    LightPortInfo { at: PortRef },
    /// Standby: the master's SMInfo.
    PollMaster,
    /// SMInfo Set(HANDOVER) to the higher SM this master gives the subnet to.
    Handover,
}

/// Where the SM is in its work.
#[derive(Debug, Clone)]
enum Phase {
    /// A heavy sweep's crawl.
    Discovering(Box<Discovery>),
    /// SMInfo of the other SMs in flight.
    Electing,
    /// PortInfo Sets of LIDs in flight.
    LidConfig,
    /// SwitchInfo and LFT Sets in flight.
    SwitchConfig,
    /// MFT Sets in flight: part of a heavy sweep (`sweep`) or after a membership change.
    McastConfig { sweep: bool },
    /// PortState Armed Sets in flight.
    Arming,
    /// PortState Active Sets in flight.
    Activating,
    /// Nothing in flight: waiting for the next sweep (master) or poll (standby).
    Idle,
    /// A light sweep in flight; `changed` once something differs.
    LightSweep { changed: bool },
    /// Standby: the master's SMInfo in flight.
    Polling,
}

/// The subnet manager (see the module docs).
#[derive(Debug, Clone)]
pub struct SubnetManager {
    config: SmConfig,
    local_port: u8,
    state: SmState,
    act_count: u32,
    now: Option<Duration>,
    phase: Phase,
    requester: Requester<Job>,
    subnet: Subnet,
    guid2lid: BTreeMap<Guid, Lid>,
    /// The LFT last programmed into each switch, by node GUID.
    lfts: BTreeMap<Guid, Vec<u8>>,
    /// The multicast groups the SA keeps.
    groups: McGroups,
    /// The MFT entries last programmed into each switch, by node GUID.
    mfts: BTreeMap<Guid, BTreeMap<Lid, PortMask>>,
    /// Group membership changed since the MFTs were last computed.
    mcast_dirty: bool,
    /// Other SMs answering the election: port GUID → (SMInfo, node).
    others: BTreeMap<Guid, (SmInfo, usize)>,
    /// Standby: the master's port GUID and the route to its node.
    master: Option<(Guid, Vec<u8>)>,
    sm_lid: Lid,
    next_sweep: Option<Duration>,
    sweep_requested: bool,
    /// A higher SM was still discovering at the election: the next sweep is heavy, so that
    /// the next election meets it in Standby and hands over.
    elect_again: bool,
    subnet_up: bool,
    /// A Set failed or a route was given up during this sweep.
    sweep_errors: bool,
    /// Heavy sweeps in a row started because of errors.
    error_resweeps: u8,
    unknown_tids: u64,
    log: VecDeque<LogLine>,
    console: VecDeque<String>,
}

/// How often a standby SM polls the master when no sweep interval is set (opensm's
/// `sminfo_polling_timeout`).
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(10);

/// Immediate heavy sweeps after a sweep with errors, before settling for what works.
const MAX_ERROR_RESWEEPS: u8 = 3;

/// opensm's default `packet_life_time` (SwitchInfo.LifeTimeValue, PathRecord PacketLifeTime).
pub(crate) const PACKET_LIFE_TIME: u8 = 0x12;

impl SubnetManager {
    /// An SM on local port `local_port` (a CA port number, or 0 on a switch). It starts in
    /// DISCOVERING with a heavy sweep: the first SMPs are ready to be polled.
    pub fn new(config: SmConfig, local_port: u8) -> Self {
        let guid2lid = config.guid2lid.clone();
        let requester = Requester::new(
            1,
            config.transaction_timeout,
            config.retries,
            config.max_wire_smps,
        );
        let mut sm = SubnetManager {
            config,
            local_port,
            state: SmState::Discovering,
            act_count: 0,
            now: None,
            phase: Phase::Idle,
            requester,
            subnet: Subnet::default(),
            guid2lid,
            lfts: BTreeMap::new(),
            groups: McGroups::with_ipoib_broadcast(),
            mfts: BTreeMap::new(),
            mcast_dirty: false,
            others: BTreeMap::new(),
            master: None,
            sm_lid: Lid(0),
            next_sweep: None,
            sweep_requested: false,
            elect_again: false,
            subnet_up: false,
            sweep_errors: false,
            error_resweeps: 0,
            unknown_tids: 0,
            log: VecDeque::new(),
            console: VecDeque::new(),
        };
        sm.enter(SmState::Discovering);
        sm.start_heavy_sweep();
        sm
    }

    // --- Driving --------------------------------------------------------------------------

    /// Time has come to `now` (monotonic, any epoch): retries, sweeps and polls that are due.
    pub fn handle_timeout(&mut self, now: Duration) {
        self.observe(now);
        match &mut self.phase {
            Phase::Discovering(d) => d.handle_timeout(now),
            _ => {
                for done in self.requester.handle_timeout(now) {
                    self.done(done);
                }
            }
        }
        self.advance();
    }

    /// When [`SubnetManager::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let smp = match &self.phase {
            Phase::Discovering(d) => d.poll_timeout(),
            _ => self.requester.poll_timeout(),
        };
        let sweep = match self.phase {
            Phase::Idle => self.next_sweep,
            _ => None,
        };
        match (smp, sweep) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next directed-route SMP to send out of the SM's port.
    pub fn poll_transmit(&mut self) -> Option<smp::Repr> {
        match &mut self.phase {
            Phase::Discovering(d) => d.poll_transmit(),
            _ => self.requester.poll_transmit(),
        }
    }

    /// A response (GetResp) that arrived for the SM. Matched by TID; others are counted
    /// ([`SubnetManager::unknown_tids`]) and ignored.
    pub fn handle_response(&mut self, now: Duration, response: &smp::Repr) {
        self.observe(now);
        match &mut self.phase {
            Phase::Discovering(d) => {
                if !d.handle_response(now, response) {
                    self.unknown_tids += 1;
                }
            }
            _ => match self.requester.handle_response(now, response) {
                Some(done) => self.done(done),
                None => self.unknown_tids += 1,
            },
        }
        self.advance();
    }

    /// A trap arrived or the operator asks (opensm console `resweep heavy`): a heavy sweep as
    /// soon as the current work is done. A standby SM polls its master instead.
    pub fn request_sweep(&mut self) {
        self.sweep_requested = true;
        self.advance();
    }

    // --- What it shows --------------------------------------------------------------------

    /// The SM's state: Discovering, Master or Standby.
    pub fn state(&self) -> SmState {
        self.state
    }

    /// What the local SMA answers for SMInfo.
    pub fn sm_info(&self) -> SmInfo {
        SmInfo {
            guid: self.config.port_guid,
            sm_key: self.config.sm_key,
            act_count: self.act_count,
            priority: self.config.priority & 0x0F,
            sm_state: self.state,
        }
    }

    /// The subnet of the last heavy sweep, with what the SM has set since.
    pub fn subnet(&self) -> &Subnet {
        &self.subnet
    }

    /// Port GUID → LID: every LID handed out (this run's and the configuration's), for the
    /// runtime to save as opensm saves `guid2lid`.
    pub fn guid2lid(&self) -> &BTreeMap<Guid, Lid> {
        &self.guid2lid
    }

    /// The SM's own LID (0 until assigned).
    pub fn sm_lid(&self) -> Lid {
        self.sm_lid
    }

    /// The LFT the SM programmed into a switch, by node GUID (index = LID).
    pub fn lft(&self, switch: Guid) -> Option<&[u8]> {
        self.lfts.get(&switch).map(Vec::as_slice)
    }

    /// The multicast groups (MCMemberRecord joins, the pre-created IPoIB broadcast group).
    pub fn mc_groups(&self) -> &McGroups {
        &self.groups
    }

    /// The MFT entries the SM programmed into a switch, by node GUID: MLID → ports.
    pub fn mft(&self, switch: Guid) -> Option<&BTreeMap<Lid, PortMask>> {
        self.mfts.get(&switch)
    }

    /// Whether the last heavy sweep got to SUBNET UP and nothing is being reconfigured.
    pub fn is_subnet_up(&self) -> bool {
        self.subnet_up
    }

    /// Responses that matched no request in flight.
    pub fn unknown_tids(&self) -> u64 {
        self.unknown_tids
    }

    /// The next opensm.log message.
    pub fn poll_log(&mut self) -> Option<LogLine> {
        self.log.pop_front()
    }

    /// The next line opensm would print on stdout.
    pub fn poll_console(&mut self) -> Option<String> {
        self.console.pop_front()
    }

    /// Answers an SA MAD (the 256 bytes received on QP1 from `slid`). Returns the response:
    /// one MAD, or for a GetTableResp that needs several the RMPP DATA segments one after the
    /// other (a multiple of 256 bytes), or `None` when nothing is to be sent (not a request,
    /// or too short to answer).
    ///
    /// MCMemberRecord SubnAdmSet (join) and SubnAdmDelete (leave) change the multicast groups
    /// (see [`mcast`]); when the member ports change, the MFT Sets follow through
    /// [`SubnetManager::poll_transmit`].
    pub fn handle_sa(&mut self, slid: Lid, request: &[u8]) -> Option<Vec<u8>> {
        if let Some(resp) = self.handle_mcmember_change(slid, request) {
            return Some(resp);
        }
        let view = sa::SaView {
            subnet: &self.subnet,
            lfts: &self.lfts,
            sm_info: self.sm_info(),
            sm_lid: self.sm_lid,
            subnet_prefix: self.config.subnet_prefix,
            groups: &self.groups,
        };
        sa::handle(&view, slid, request)
    }

    /// Answers an MCMemberRecord Set or Delete; `None` for any other MAD.
    fn handle_mcmember_change(&mut self, slid: Lid, request: &[u8]) -> Option<Vec<u8>> {
        let packet = softib_wire::mad::sa::Packet::new_checked(request).ok()?;
        let req = softib_wire::mad::sa::Repr::parse(&packet).ok()?;
        let h = &req.header;
        if h.mgmt_class != MgmtClass::SubnAdm
            || h.attr_id != AttrId::MC_MEMBER_RECORD
            || !matches!(h.method, Method::Set | Method::Delete)
        {
            return None;
        }
        let result = if h.base_version != BASE_VERSION
            || h.class_version != softib_wire::mad::sa::CLASS_VERSION
        {
            Err(status::BAD_VERSION)
        } else {
            self.mcmember_change(slid, &req)
        };
        let (code, record) = match result {
            Ok(r) => {
                let mut b = vec![0u8; McMemberRecord::LEN];
                r.emit(&mut b);
                (status::SUCCESS, Some(b))
            }
            Err(code) => (code, None),
        };
        let resp = sa::respond(&req, code, McMemberRecord::LEN, record);
        self.advance();
        Some(resp)
    }

    /// A join or leave (see [`mcast`]); errors are SA status codes.
    fn mcmember_change(
        &mut self,
        slid: Lid,
        req: &softib_wire::mad::sa::Repr<'_>,
    ) -> Result<McMemberRecord, u16> {
        use softib_wire::mad::sa as wsa;
        let rec = McMemberRecord::parse(req.data).map_err(|_| wsa::STATUS_REQ_INVALID)?;
        if req.comp_mask & wsa::mcmember_comp::PORT_GID == 0 {
            return Err(wsa::STATUS_INSUFFICIENT_COMPONENTS);
        }
        if rec.port_gid.prefix() != self.config.subnet_prefix {
            return Err(wsa::STATUS_INVALID_GID);
        }
        let guid = Guid(rec.port_gid.interface_id());
        let target = self.port_by_guid(guid).ok_or(wsa::STATUS_REQ_INVALID)?;
        let requester = self
            .subnet
            .node_by_lid(slid)
            .ok_or(wsa::STATUS_REQ_INVALID)?;
        let requester_guid = self.subnet.nodes[requester.node].port_guid(requester.port);
        let change = if req.header.method == Method::Set {
            let pi = self.subnet.nodes[target.node]
                .port(target.port)
                .copied()
                .ok_or(wsa::STATUS_REQ_INVALID)?;
            let caps = PortCaps {
                guid,
                mtu: pi.mtu_cap,
                rate: sa::rate_code(sa::rate_tenths(&pi)),
            };
            self.groups
                .join(&rec, req.comp_mask, caps, requester_guid != Some(guid))?
        } else {
            self.groups.leave(&rec, req.comp_mask, guid)?
        };
        let verb = if req.header.method == Method::Set {
            "joined"
        } else {
            "left"
        };
        self.log(
            LogLevel::VERBOSE,
            format!(
                "mcmr: port 0x{:016x} {verb} MGID {} (MLID 0x{:04X}, JoinState 0x{:x})",
                guid.0, rec.mgid, change.record.mlid.0, rec.join_state
            ),
        );
        if change.ports_changed {
            self.mcast_dirty = true;
        }
        Ok(change.record)
    }

    /// The end port with port GUID `guid`: a CA port, or a switch's port 0.
    fn port_by_guid(&self, guid: Guid) -> Option<PortRef> {
        self.end_ports()
            .into_iter()
            .find(|&(_, g)| g == guid)
            .map(|(p, _)| p)
    }

    // --- Internals ------------------------------------------------------------------------

    fn observe(&mut self, now: Duration) {
        self.now = Some(self.now.map_or(now, |n| n.max(now)));
    }

    fn now(&self) -> Duration {
        self.now.unwrap_or(Duration::ZERO)
    }

    fn log(&mut self, level: LogLevel, text: impl Into<String>) {
        self.log.push_back(LogLine {
            level,
            text: text.into(),
        });
    }

    fn enter(&mut self, state: SmState) {
        self.state = state;
        let name = match state {
            SmState::Master => "MASTER",
            SmState::Standby => "STANDBY",
            SmState::Discovering => "DISCOVERING",
            _ => "NOT ACTIVE",
        };
        let line = format!("Entering {name} state");
        self.log(LogLevel::SYS, line.clone());
        self.console.push_back(line);
    }

    fn start_heavy_sweep(&mut self) {
        self.sweep_requested = false;
        self.subnet_up = false;
        self.log(LogLevel::VERBOSE, "INITIATING HEAVY SWEEP");
        let d = Discovery::new(
            DiscoveryConfig {
                local_port: self.local_port,
                m_key: 0,
                timeout: self.config.transaction_timeout,
                retries: self.config.retries,
                max_wire_smps: self.config.max_wire_smps,
            },
            self.requester.next_tid(),
        );
        self.phase = Phase::Discovering(Box::new(d));
    }

    fn sweep_interval(&self) -> Option<Duration> {
        self.config.sweep_interval.filter(|d| !d.is_zero())
    }

    /// Moves on while the current phase is finished.
    fn advance(&mut self) {
        loop {
            let finished = match &self.phase {
                Phase::Discovering(d) => d.is_done(),
                Phase::Idle => {
                    if self.mcast_dirty && self.state == SmState::Master {
                        self.configure_multicast(false);
                        continue;
                    }
                    if self.sweep_requested {
                        if self.state == SmState::Standby {
                            self.sweep_requested = false;
                            self.poll_master();
                        } else {
                            self.start_heavy_sweep();
                        }
                        continue;
                    }
                    match self.next_sweep {
                        Some(t) if self.now.is_some_and(|n| n >= t) => {
                            self.next_sweep = None;
                            if self.state == SmState::Standby {
                                self.poll_master();
                            } else {
                                self.start_light_sweep();
                            }
                            continue;
                        }
                        _ => return,
                    }
                }
                _ => self.requester.is_idle(),
            };
            if !finished {
                return;
            }
            let phase = std::mem::replace(&mut self.phase, Phase::Idle);
            match phase {
                Phase::Discovering(d) => self.discovered(*d),
                Phase::Electing => self.elect(),
                Phase::LidConfig => self.configure_switches(),
                Phase::SwitchConfig => self.configure_multicast(true),
                Phase::McastConfig { sweep: true } => {
                    self.log(LogLevel::VERBOSE, "SWITCHES CONFIGURED FOR MULTICAST");
                    self.set_port_states(PortState::Armed)
                }
                Phase::McastConfig { sweep: false } => {}
                Phase::Arming => self.set_port_states(PortState::Active),
                Phase::Activating => self.subnet_is_up(),
                Phase::LightSweep { changed } => {
                    if changed || self.sweep_requested || self.elect_again {
                        self.log(
                            LogLevel::VERBOSE,
                            "osm_state_mgr: light sweep found a change: heavy sweep",
                        );
                        self.start_heavy_sweep();
                    } else {
                        self.schedule(self.sweep_interval());
                    }
                }
                Phase::Polling => {
                    // The master answered as master (a failure would have started a sweep).
                    if self.state == SmState::Standby {
                        self.schedule(Some(self.poll_interval()));
                    }
                }
                Phase::Idle => {}
            }
        }
    }

    fn schedule(&mut self, after: Option<Duration>) {
        self.phase = Phase::Idle;
        self.next_sweep = after.map(|d| self.now() + d);
    }

    fn poll_interval(&self) -> Duration {
        self.sweep_interval().unwrap_or(DEFAULT_POLL_INTERVAL)
    }

    /// A response or a loss of the SM's own requests.
    fn done(&mut self, done: Done<Job>) {
        match done {
            Done::Answered(job, resp) => {
                let ok = resp.header.status & !status::DIRECTION == status::SUCCESS;
                if !ok {
                    self.sweep_errors = true;
                    let path = resp.dr.map(|d| d.path().to_vec()).unwrap_or_default();
                    self.log(
                        LogLevel::ERROR,
                        format!(
                            "ERR: {} of {} (modifier {}) via path {:?} failed with status 0x{:04x}",
                            resp.header.method_name(),
                            smp_attr_name(resp.header.attr_id),
                            resp.header.attr_mod,
                            path,
                            resp.header.status
                        ),
                    );
                }
                self.answered(job, &resp, ok);
            }
            Done::Lost(job, req) => {
                self.sweep_errors = true;
                let path = req.dr.map(|d| d.path().to_vec()).unwrap_or_default();
                self.log(
                    LogLevel::ERROR,
                    format!(
                        "ERR: timeout on {} of {} (modifier {}) via path {:?} after {} retries",
                        req.header.method_name(),
                        smp_attr_name(req.header.attr_id),
                        req.header.attr_mod,
                        path,
                        self.config.retries
                    ),
                );
                self.lost(job);
            }
        }
    }

    fn answered(&mut self, job: Job, resp: &smp::Repr, ok: bool) {
        match job {
            Job::SmInfo { node, guid } => {
                if let (true, Ok(info)) = (ok, SmInfo::parse(&resp.data)) {
                    self.others.insert(guid, (info, node));
                }
            }
            Job::SetPortInfo { at } => {
                if let (true, Ok(pi)) = (ok, PortInfo::parse(&resp.data)) {
                    self.store_port_info(at, pi);
                }
            }
            Job::SetSwitchInfo { node } => {
                if let (true, Ok(si)) = (ok, SwitchInfo::parse(&resp.data)) {
                    if let Some(n) = self.subnet.nodes.get_mut(node) {
                        n.switch_info = Some(si);
                    }
                }
            }
            Job::SetLft { .. } | Job::Handover => {}
            Job::SetMft { node } => {
                if !ok {
                    self.forget_mft(node);
                }
            }
            Job::LightSwitchInfo { node } => {
                let changed = match SwitchInfo::parse(&resp.data) {
                    Ok(si) if ok => {
                        if si.port_state_change {
                            let guid = self.subnet.nodes.get(node).map(|n| n.info.node_guid);
                            self.log(
                                LogLevel::VERBOSE,
                                format!(
                                    "light sweep: switch 0x{:016x} reports PortStateChange",
                                    guid.unwrap_or(Guid(0)).0
                                ),
                            );
                        }
                        si.port_state_change
                    }
                    _ => true,
                };
                self.note_light_change(changed);
            }
            Job::LightPortInfo { at } => {
                let known = self.subnet.nodes.get(at.node).and_then(|n| n.port(at.port));
                let changed = match (PortInfo::parse(&resp.data), known) {
                    (Ok(pi), Some(k)) if ok => {
                        // A port whose IsSM changed is an SM started or stopped: the heavy
                        // sweep's election meets it (opensm learns it from trap 144).
                        pi.port_physical_state != k.port_physical_state
                            || pi.port_state != k.port_state
                            || (pi.capability_mask ^ k.capability_mask) & capability_mask::IS_SM
                                != 0
                    }
                    _ => true,
                };
                if changed {
                    let guid = self
                        .subnet
                        .nodes
                        .get(at.node)
                        .map_or(Guid(0), |n| n.info.node_guid);
                    self.log(
                        LogLevel::VERBOSE,
                        format!(
                            "light sweep: port {} of node 0x{:016x} changed state",
                            at.port, guid.0
                        ),
                    );
                }
                self.note_light_change(changed);
            }
            Job::PollMaster => {
                let still = ok
                    && SmInfo::parse(&resp.data).is_ok_and(|i| {
                        i.sm_state == SmState::Master
                            && self.master.as_ref().is_some_and(|(g, _)| *g == i.guid)
                    });
                if !still {
                    self.master_gone();
                }
            }
        }
    }

    fn lost(&mut self, job: Job) {
        match job {
            Job::LightSwitchInfo { .. } | Job::LightPortInfo { .. } => self.note_light_change(true),
            Job::PollMaster => self.master_gone(),
            Job::SetMft { node } => self.forget_mft(node),
            // A Set lost for good: the next sweep will find the port as it is and try again.
            _ => {}
        }
    }

    fn note_light_change(&mut self, changed: bool) {
        if let Phase::LightSweep { changed: c } = &mut self.phase {
            *c |= changed;
        }
    }

    fn store_port_info(&mut self, at: PortRef, pi: PortInfo) {
        if let Some(slot) = self
            .subnet
            .nodes
            .get_mut(at.node)
            .and_then(|n| n.ports.get_mut(usize::from(at.port)))
        {
            *slot = Some(pi);
        }
    }

    fn path(&self, node: usize) -> Vec<u8> {
        self.subnet
            .nodes
            .get(node)
            .map(|n| n.dr_path.clone())
            .unwrap_or_default()
    }

    // --- Heavy sweep, election ------------------------------------------------------------

    fn discovered(&mut self, d: Discovery) {
        for f in d.failures() {
            self.log(
                LogLevel::ERROR,
                format!(
                    "ERR: discovery: no answer to {} (modifier {}) via path {:?}: route given up",
                    smp_attr_name(f.attr_id),
                    f.attr_mod,
                    f.path
                ),
            );
        }
        self.unknown_tids += d.unknown_tids();
        self.sweep_errors = !d.failures().is_empty();
        self.requester = Requester::new(
            d.next_tid(),
            self.config.transaction_timeout,
            self.config.retries,
            self.config.max_wire_smps,
        );
        let subnet = d.into_result();
        self.log(LogLevel::VERBOSE, "HEAVY SWEEP COMPLETE");
        if subnet.nodes.is_empty() {
            // Not even the local port answered: try again later.
            self.log(
                LogLevel::ERROR,
                "ERR: heavy sweep found nothing (the local port did not answer)",
            );
            self.subnet = subnet;
            self.schedule(Some(self.poll_interval()));
            return;
        }
        // Switches new to this sweep get their LFT written whole.
        let known: Vec<Guid> = self.lfts.keys().copied().collect();
        for g in known {
            if subnet.node_by_guid(g).is_none() {
                self.lfts.remove(&g);
            }
        }
        self.mfts.retain(|&g, _| subnet.node_by_guid(g).is_some());
        self.subnet = subnet;
        self.act_count = self.act_count.wrapping_add(1);
        // Other SMs: every end port with IsSM but ours.
        self.others.clear();
        let mut asks = Vec::new();
        for (i, n) in self.subnet.nodes.iter().enumerate() {
            for p in end_ports_of(n) {
                let Some(pi) = n.port(p) else { continue };
                let Some(guid) = n.port_guid(p) else { continue };
                if pi.capability_mask & capability_mask::IS_SM != 0 && guid != self.config.port_guid
                {
                    asks.push((i, guid, n.dr_path.clone()));
                }
            }
        }
        for (node, guid, path) in asks {
            self.requester
                .get(&path, AttrId::SM_INFO, 0, 0, Job::SmInfo { node, guid });
        }
        self.phase = Phase::Electing;
    }

    // --- Configuration --------------------------------------------------------------------

    /// Every end port of the subnet: a switch's port 0, each CA port that was read.
    fn end_ports(&self) -> Vec<(PortRef, Guid)> {
        let mut out = Vec::new();
        for (i, n) in self.subnet.nodes.iter().enumerate() {
            for p in end_ports_of(n) {
                if let Some(g) = n.port_guid(p) {
                    out.push((PortRef { node: i, port: p }, g));
                }
            }
        }
        out
    }

    /// The LID of each end port (opensm's `osm_lid_mgr`, see the module docs).
    fn assign_lids(&mut self) -> BTreeMap<PortRef, Lid> {
        const MAX_UNICAST: u16 = 0xBFFF;
        let mine = PortRef {
            node: 0,
            port: self.local_port,
        };
        let mut ports = self.end_ports();
        // The SM's own port first, then opensm's port_guid_tbl order.
        ports.sort_by_key(|&(p, g)| (p != mine, lid_order_key(g)));
        let present: BTreeMap<Guid, PortRef> = ports.iter().map(|&(p, g)| (g, p)).collect();
        let mut used: BTreeMap<Lid, Guid> = BTreeMap::new();
        let mut out: BTreeMap<PortRef, Lid> = BTreeMap::new();
        let valid = |l: Lid| (1..=MAX_UNICAST).contains(&l.0);
        // 1. guid2lid, as long as two ports do not claim one LID.
        for &(p, g) in &ports {
            if let Some(&l) = self.guid2lid.get(&g) {
                if valid(l) && !used.contains_key(&l) {
                    used.insert(l, g);
                    out.insert(p, l);
                }
            }
        }
        // LIDs of ports not in the subnet now stay reserved for them.
        let reserved: BTreeMap<Lid, Guid> = self
            .guid2lid
            .iter()
            .filter(|(g, _)| !present.contains_key(g))
            .map(|(&g, &l)| (l, g))
            .collect();
        // 2. The LID a port already has.
        for &(p, g) in &ports {
            if out.contains_key(&p) {
                continue;
            }
            let l = self.subnet.nodes[p.node].lid(p.port);
            if valid(l) && !used.contains_key(&l) && !reserved.contains_key(&l) {
                used.insert(l, g);
                out.insert(p, l);
            }
        }
        // 3. The lowest free LID.
        let mut next = 1u16;
        for &(p, g) in &ports {
            if out.contains_key(&p) {
                continue;
            }
            while next <= MAX_UNICAST
                && (used.contains_key(&Lid(next)) || reserved.contains_key(&Lid(next)))
            {
                next += 1;
            }
            if next > MAX_UNICAST {
                self.log(LogLevel::ERROR, "ERR: no free unicast LID left");
                break;
            }
            used.insert(Lid(next), g);
            out.insert(p, Lid(next));
        }
        for (&l, &g) in &used {
            self.guid2lid.insert(g, l);
        }
        self.sm_lid = out.get(&mine).copied().unwrap_or(Lid(0));
        out
    }

    fn configure_lids(&mut self) {
        self.log(
            LogLevel::VERBOSE,
            "SM LID ASSIGNMENT COMPLETE - STARTING SUBNET LID CONFIG",
        );
        let lids = self.assign_lids();
        let sm_lid = self.sm_lid;
        let prefix = self.config.subnet_prefix;
        let mut sets = Vec::new();
        for (&at, &lid) in &lids {
            let Some(cur) = self.subnet.nodes[at.node].port(at.port) else {
                continue;
            };
            let mut pi = *cur;
            pi.lid = lid;
            pi.lmc = 0;
            pi.master_sm_lid = sm_lid;
            pi.master_sm_sl = 0;
            pi.gid_prefix = prefix;
            pi.m_key = 0;
            if pi == *cur {
                continue;
            }
            pi.port_state = PortState::NoChange;
            pi.port_physical_state = PortPhysicalState::NoChange;
            sets.push((at, pi));
        }
        for (at, pi) in sets {
            let path = self.path(at.node);
            self.requester
                .set(&path, &pi, u32::from(at.port), 0, Job::SetPortInfo { at });
        }
        self.phase = Phase::LidConfig;
    }

    fn configure_switches(&mut self) {
        self.log(
            LogLevel::VERBOSE,
            "LID ASSIGNMENT COMPLETE - STARTING SWITCH TABLE CONFIG",
        );
        let lids: BTreeMap<PortRef, Lid> = self
            .end_ports()
            .into_iter()
            .filter_map(|(p, _)| {
                let l = self.subnet.nodes[p.node].lid(p.port);
                (l != Lid(0)).then_some((p, l))
            })
            .collect();
        let (tables, used, error) = routing::compute(&self.subnet, &lids, self.config.routing);
        if let Some(e) = error {
            self.log(LogLevel::ERROR, format!("ucast_mgr_route: {e}"));
        }
        let max_lid = lids.values().map(|l| l.0).max().unwrap_or(0);
        for (node, lft) in tables {
            let Some(n) = self.subnet.nodes.get(node) else {
                continue;
            };
            let guid = n.info.node_guid;
            let path = n.dr_path.clone();
            if let Some(mut si) = n.switch_info {
                let want_clear = si.port_state_change;
                if si.linear_fdb_top != max_lid
                    || si.life_time_value != PACKET_LIFE_TIME
                    || want_clear
                {
                    si.linear_fdb_top = max_lid;
                    si.life_time_value = PACKET_LIFE_TIME;
                    // PortStateChange is write-1-to-clear.
                    si.port_state_change = want_clear;
                    self.requester
                        .set(&path, &si, 0, 0, Job::SetSwitchInfo { node });
                }
            }
            let old = self.lfts.get(&guid);
            for (block, chunk) in lft
                .chunks(LinearForwardingTable::ENTRIES_PER_BLOCK)
                .enumerate()
            {
                let start = block * LinearForwardingTable::ENTRIES_PER_BLOCK;
                let same = old.is_some_and(|o| {
                    o.get(start..start + chunk.len()) == Some(chunk)
                        && (o.len() <= start + chunk.len() || o.len() == lft.len())
                });
                if same {
                    continue;
                }
                let mut b = LinearForwardingTable::default();
                b.ports[..chunk.len()].copy_from_slice(chunk);
                self.requester.set(
                    &path,
                    &b,
                    u32::try_from(block).unwrap_or(u32::MAX),
                    0,
                    Job::SetLft { node },
                );
            }
            self.lfts.insert(guid, lft);
        }
        self.log(
            LogLevel::INFO,
            format!(
                "osm_ucast_mgr_process: {} tables configured on all switches",
                used.name()
            ),
        );
        self.phase = Phase::SwitchConfig;
    }

    /// Programs the MFTs: the blocks and PortMask positions whose entries differ from what each
    /// switch was last given (all of a switch the SM has not programmed yet). `sweep`: as
    /// part of a heavy sweep, after the unicast tables.
    fn configure_multicast(&mut self, sweep: bool) {
        if sweep {
            self.log(LogLevel::VERBOSE, "SWITCHES CONFIGURED FOR UNICAST");
        }
        self.mcast_dirty = false;
        for g in self.groups.iter().filter(|_| sweep) {
            if g.members.is_empty() {
                let line = format!(
                    "mcast_mgr_build_spanning_tree: MLID 0x{:04X} has 0 members - nothing to do",
                    g.mlid().0
                );
                self.log.push_back(LogLine {
                    level: LogLevel::VERBOSE,
                    text: line,
                });
            }
        }
        let want = mcast::compute_mfts(&self.subnet, &self.groups);
        let per = MulticastForwardingTable::ENTRIES_PER_BLOCK;
        let mut sets = Vec::new();
        let mut errors = Vec::new();
        for (node, n) in self.subnet.nodes.iter().enumerate() {
            if !n.is_switch() {
                continue;
            }
            let guid = n.info.node_guid;
            let cap = n.switch_info.map_or(0, |si| si.multicast_fdb_cap);
            let mut new = want.get(&node).cloned().unwrap_or_default();
            new.retain(|&mlid, _| {
                let fits = mlid.0 - MulticastForwardingTable::MLID_BASE < cap;
                if !fits {
                    errors.push(format!(
                        "ERR: MLID 0x{:04X} is beyond MulticastFDBCap {cap} of switch 0x{:016x}",
                        mlid.0, guid.0
                    ));
                }
                fits
            });
            let old = self.mfts.get(&guid);
            let known = old.is_some();
            let empty = BTreeMap::new();
            let old = old.unwrap_or(&empty);
            let mut blocks: BTreeSet<u16> = new
                .keys()
                .chain(old.keys())
                .filter_map(|&m| MulticastForwardingTable::position(m).map(|(b, _)| b))
                .collect();
            if !known {
                // A switch this SM has not programmed may hold a previous SM's entries: every
                // block in use is written whole.
                blocks.extend(
                    self.groups
                        .iter()
                        .filter(|g| g.mlid().0 - MulticastForwardingTable::MLID_BASE < cap)
                        .filter_map(|g| MulticastForwardingTable::position(g.mlid()))
                        .map(|(b, _)| b),
                );
            }
            let positions = n.info.num_ports / 16;
            for block in blocks {
                for position in 0..=positions {
                    let mut table = MulticastForwardingTable::default();
                    let mut differs = false;
                    for (i, slot) in table.port_masks.iter_mut().enumerate().take(per) {
                        let mlid = MulticastForwardingTable::mlid(block, i);
                        let now = new.get(&mlid).map_or(0, |m| m.mask16(position));
                        let was = old.get(&mlid).map_or(0, |m| m.mask16(position));
                        *slot = now;
                        differs |= now != was || !known;
                    }
                    if differs {
                        sets.push((n.dr_path.clone(), table, block, position, node));
                    }
                }
            }
            self.mfts.insert(guid, new);
        }
        for e in errors {
            self.log(LogLevel::ERROR, e);
        }
        for (path, table, block, position, node) in sets {
            self.requester.set(
                &path,
                &table,
                MulticastForwardingTable::attr_mod(block, position),
                0,
                Job::SetMft { node },
            );
        }
        self.phase = Phase::McastConfig { sweep };
    }

    /// An MFT Set failed or was lost: program the whole switch next time.
    fn forget_mft(&mut self, node: usize) {
        if let Some(n) = self.subnet.nodes.get(node) {
            self.mfts.remove(&n.info.node_guid);
        }
    }

    /// The cabled ports of the subnet, by node in discovery order.
    fn cabled_ports(&self) -> Vec<PortRef> {
        let mut v: Vec<PortRef> = self.subnet.links.iter().flat_map(|l| [l.a, l.b]).collect();
        v.sort();
        v.dedup();
        v
    }

    fn set_port_states(&mut self, state: PortState) {
        let (banner, from, name) = if state == PortState::Armed {
            (
                "LINKS PORTS CONFIGURED - SET LINKS TO ARMED STATE",
                PortState::Init,
                "ARMED",
            )
        } else {
            (
                "LINKS ARMED - SET LINKS TO ACTIVE STATE",
                PortState::Armed,
                "ACTIVE",
            )
        };
        self.log(LogLevel::VERBOSE, banner);
        let mut sets = Vec::new();
        let mut last_node = None;
        for at in self.cabled_ports() {
            let Some(&cur) = self.subnet.nodes[at.node].port(at.port) else {
                continue;
            };
            if cur.port_state != from || cur.port_physical_state != PortPhysicalState::LinkUp {
                continue;
            }
            if last_node != Some(at.node) {
                last_node = Some(at.node);
                let guid = self.subnet.nodes[at.node].info.node_guid;
                self.log(
                    LogLevel::DEBUG,
                    format!(
                        "link_mgr_process_node: Node 0x{:016x} going to {name}",
                        guid.0
                    ),
                );
            }
            let mut pi = cur;
            pi.port_state = state;
            pi.port_physical_state = PortPhysicalState::NoChange;
            sets.push((at, pi));
        }
        for (at, pi) in sets {
            let path = self.path(at.node);
            self.requester
                .set(&path, &pi, u32::from(at.port), 0, Job::SetPortInfo { at });
        }
        self.phase = if state == PortState::Armed {
            Phase::Arming
        } else {
            Phase::Activating
        };
    }

    fn subnet_is_up(&mut self) {
        // opensm sweeps again at once after errors; a fault that persists is given up on
        // after a few tries rather than sweeping forever.
        if self.sweep_errors && self.error_resweeps < MAX_ERROR_RESWEEPS {
            self.error_resweeps += 1;
            self.log(
                LogLevel::ERROR,
                "ERR: osm_state_mgr: errors during initialization: heavy sweep again",
            );
            self.start_heavy_sweep();
            return;
        }
        self.error_resweeps = 0;
        self.subnet_up = true;
        self.log(LogLevel::INFO, "SUBNET UP");
        if self.sweep_requested {
            self.start_heavy_sweep();
        } else {
            self.schedule(self.sweep_interval());
        }
    }

    fn start_light_sweep(&mut self) {
        let mut jobs = Vec::new();
        let cabled = self.cabled_ports();
        for (i, n) in self.subnet.nodes.iter().enumerate() {
            if n.is_switch() {
                jobs.push((
                    n.dr_path.clone(),
                    AttrId::SWITCH_INFO,
                    0,
                    Job::LightSwitchInfo { node: i },
                ));
            }
        }
        for at in cabled {
            let n = &self.subnet.nodes[at.node];
            if !n.is_switch() {
                jobs.push((
                    n.dr_path.clone(),
                    AttrId::PORT_INFO,
                    u32::from(at.port),
                    Job::LightPortInfo { at },
                ));
            }
        }
        for (path, attr, m, job) in jobs {
            self.requester.get(&path, attr, m, 0, job);
        }
        self.phase = Phase::LightSweep { changed: false };
    }
}

/// The spec name of an SMP attribute, for log messages.
fn smp_attr_name(id: AttrId) -> String {
    attr_name(MgmtClass::SubnDirectedRoute, id).map_or_else(|| id.to_string(), str::to_string)
}

/// The end ports of a node: a switch's port 0; each CA port that was read.
fn end_ports_of(n: &crate::subnet::SubnetNode) -> Vec<u8> {
    if n.is_switch() {
        vec![0]
    } else {
        (1..=n.info.num_ports)
            .filter(|&p| n.port(p).is_some())
            .collect()
    }
}

/// The key opensm sorts ports by when it hands out LIDs (`port_guid_tbl`, a `cl_qmap` keyed
/// by the GUID as stored, in network byte order, read as a little-endian number).
pub fn lid_order_key(guid: Guid) -> u64 {
    u64::from_le_bytes(guid.0.to_be_bytes())
}
