//! Which SM is master (IBA §14.4.1): the election at the end of a heavy sweep, a standby's
//! polls of the master, and what another SM asks of this one with SubnSet(SMInfo).
//!
//! As opensm (`osm_sminfo_rcv`, `osm_sm_state_mgr`, `osm_state_mgr`):
//! - a DISCOVERING SM that finds a MASTER stands by and polls it, whatever their priorities:
//!   a higher SM that finds a lower master waits for that master to hand the subnet over
//!   instead of configuring it beside it (C14-60.2.1);
//! - a MASTER that finds a higher SM in STANDBY hands over (SubnSet(SMInfo) HANDOVER) and
//!   stands by; a higher SM still DISCOVERING is met at the next election;
//! - a STANDBY whose master stops answering as master takes over (DISCOVERING, heavy sweep);
//! - SubnSet(SMInfo) from the master: HANDOVER makes a standby master at once (heavy sweep),
//!   DISABLE makes it NOT ACTIVE, DISCOVER starts it over; STANDBY moves a NOT ACTIVE SM to
//!   STANDBY; ACKNOWLEDGE (from a standby) needs nothing. The SMA has already answered the Set
//!   with the SMInfo this SM had, as opensm answers before it acts.

use softib_wire::mad::attr::{SmInfo, SmState};
use softib_wire::mad::AttrId;
use softib_wire::Guid;

use super::{Job, LogLevel, Phase, SubnetManager};
use crate::discover::Requester;
use crate::sma::SmControl;

/// The SMInfo control code (attribute modifier of a SubnSet(SMInfo)) HANDOVER (IBA §14.4.1).
const SM_CONTROL_HANDOVER: u32 = 1;

impl SubnetManager {
    /// A SubnSet(SMInfo) with `control` that another SM (whose SMInfo is `from`) sent this
    /// SM's port, which its SMA answered. Acted on as opensm acts on it (module docs); one
    /// that the sender's state does not allow (HANDOVER, DISABLE, STANDBY or DISCOVER from an
    /// SM that is not master, ACKNOWLEDGE from one that is not standby) or this SM's state
    /// does not take is logged and ignored.
    pub fn handle_sm_info_set(
        &mut self,
        now: std::time::Duration,
        control: SmControl,
        from: SmInfo,
    ) {
        self.observe(now);
        let legal = match control {
            SmControl::Acknowledge => from.sm_state == SmState::Standby,
            _ => from.sm_state == SmState::Master,
        };
        if !legal {
            self.log(
                LogLevel::ERROR,
                format!(
                    "ERR 2F04: Check legality failed. {control:?} from SM 0x{:016x} in state {:?}",
                    from.guid.0, from.sm_state
                ),
            );
            return;
        }
        self.log(
            LogLevel::VERBOSE,
            format!(
                "Received SubnSet(SMInfo) {control:?} from SM 0x{:016x}",
                from.guid.0
            ),
        );
        match (self.state, control) {
            (_, SmControl::Acknowledge) => {}
            (SmState::Standby, SmControl::Handover) => self.restart_as(SmState::Master),
            // A master waiting for this one to give up its part of the subnet, or one
            // still discovering: the sweep that follows meets the other SM as it now is.
            (SmState::Master | SmState::Discovering, SmControl::Handover) => self.request_sweep(),
            (SmState::Standby, SmControl::Disable) => {
                self.master = None;
                self.reset_requester();
                self.phase = Phase::Idle;
                self.next_sweep = None;
                self.enter(SmState::NotActive);
            }
            (SmState::Standby | SmState::NotActive, SmControl::Discover) => {
                self.restart_as(SmState::Discovering)
            }
            (SmState::NotActive, SmControl::Standby) => {
                match self.subnet.node_by_port_guid(from.guid) {
                    Some(node) => {
                        self.master = Some((from.guid, self.path(node)));
                        self.enter(SmState::Standby);
                        self.schedule(Some(self.poll_interval()));
                    }
                    None => self.restart_as(SmState::Discovering),
                }
            }
            (state, control) => self.log(
                LogLevel::ERROR,
                format!("ERR 3207: Invalid signal {control:?} in state {state:?}"),
            ),
        }
        self.advance();
    }

    /// The election at the end of a heavy sweep (see the module docs).
    pub(super) fn elect(&mut self) {
        let me = (self.config.priority & 0x0F, self.config.port_guid);
        // IBA §14.4.1.1: higher priority, then lower GUID.
        let greater = |a: (u8, Guid), b: (u8, Guid)| a.0 > b.0 || (a.0 == b.0 && a.1 < b.1);
        if self.state == SmState::Discovering {
            // The highest master there is, if any: this SM polls it and waits.
            let master = self
                .others
                .iter()
                .filter(|(_, (info, _))| info.sm_state == SmState::Master)
                .map(|(&guid, &(info, node))| (info.priority, guid, node))
                .reduce(|a, b| {
                    if greater((b.0, b.1), (a.0, a.1)) {
                        b
                    } else {
                        a
                    }
                });
            if let Some((_, guid, node)) = master {
                self.stand_by(guid, node, "found master SM");
                return;
            }
        }
        let mut winner: Option<(u8, Guid, usize)> = None;
        self.elect_again = false;
        for (&guid, &(info, node)) in &self.others {
            // A master keeps the subnet while a higher SM is still discovering: that SM
            // finds it master and stands by, and the next election hands over to it.
            if info.sm_state == SmState::NotActive {
                continue;
            }
            if self.state == SmState::Master && info.sm_state == SmState::Discovering {
                self.elect_again |= greater((info.priority, guid), me);
                continue;
            }
            let cand = (info.priority, guid);
            if greater(cand, me) && winner.is_none_or(|(p, g, _)| greater(cand, (p, g))) {
                winner = Some((info.priority, guid, node));
            }
        }
        let Some((_, guid, node)) = winner else {
            if self.state != SmState::Master {
                self.enter(SmState::Master);
            }
            self.master = None;
            self.configure_lids();
            return;
        };
        let standby = self
            .others
            .get(&guid)
            .is_some_and(|(i, _)| i.sm_state == SmState::Standby);
        if self.state == SmState::Master && standby {
            // IBA §14.4.1.1: a master that finds a higher SM in Standby hands the subnet over
            // (SubnSet(SMInfo) HANDOVER with its own SMInfo, which says Master), then stands
            // by and polls it (opensm's HANDOVER_SENT).
            self.log(
                LogLevel::VERBOSE,
                format!("osm_sm_state_mgr: handing over to SM 0x{:016x}", guid.0),
            );
            let mine = self.sm_info();
            let path = self.path(node);
            self.requester
                .set(&path, &mine, SM_CONTROL_HANDOVER, 0, Job::Handover);
        }
        self.stand_by(guid, node, "is higher");
    }

    /// Standby from now on, polling the SM `guid` on node `node`.
    fn stand_by(&mut self, guid: Guid, node: usize, why: &str) {
        if self.state != SmState::Standby {
            self.log(
                LogLevel::VERBOSE,
                format!("osm_sm_state_mgr: SM 0x{:016x} {why}: standing by", guid.0),
            );
            self.enter(SmState::Standby);
        }
        self.master = Some((guid, self.path(node)));
        self.schedule(Some(self.poll_interval()));
    }

    /// Standby: asks the master for its SMInfo.
    pub(super) fn poll_master(&mut self) {
        let Some((_, path)) = self.master.clone() else {
            self.master_gone();
            return;
        };
        self.requester
            .get(&path, AttrId::SM_INFO, 0, 0, Job::PollMaster);
        self.phase = Phase::Polling;
    }

    /// Standby: the master did not answer as master.
    pub(super) fn master_gone(&mut self) {
        self.log(
            LogLevel::VERBOSE,
            "osm_sm_state_mgr: the master SM does not answer as master: taking over",
        );
        self.restart_as(SmState::Discovering);
    }

    /// Drops whatever is in flight (a poll of the master) and starts a heavy sweep in
    /// `state`.
    fn restart_as(&mut self, state: SmState) {
        self.master = None;
        self.reset_requester();
        self.enter(state);
        self.start_heavy_sweep();
    }

    fn reset_requester(&mut self) {
        self.requester = Requester::new(
            self.requester.next_tid(),
            self.config.transaction_timeout,
            self.config.retries,
            self.config.max_wire_smps,
        );
    }
}
