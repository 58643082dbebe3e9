//! [`SmpMachine`]: how a runtime drives the SMP-speaking machines of this crate.
//!
//! [`Discovery`] (the crawl behind `ibnetdiscover` and friends) and [`SubnetManager`] (opensm)
//! talk to a subnet the same way: they hand out directed-route SMPs to be sent out of one port,
//! take the responses back, resend on their own timers and say when they next need the time.
//! A runtime — the `softib` tools over the MAD agent, [`TestFabric::drive`] in memory — moves
//! SMPs between either machine and a port through this one trait, and keeps no transaction
//! state of its own: the machines match TIDs, retry and give up themselves.
//!
//! [`TestFabric::drive`]: crate::testing::TestFabric::drive

use std::time::Duration;

use softib_wire::mad::smp;

use crate::discover::Discovery;
use crate::sm::SubnetManager;

/// A sans-IO machine that speaks SMPs. Time is a [`Duration`] since an origin the runtime
/// picks, the same for every call.
pub trait SmpMachine {
    /// The next SMP to send.
    fn poll_transmit(&mut self) -> Option<smp::Repr>;
    /// A response arrived.
    fn handle_response(&mut self, now: Duration, response: &smp::Repr);
    /// Time passed.
    fn handle_timeout(&mut self, now: Duration);
    /// When [`SmpMachine::handle_timeout`] is next due.
    fn poll_timeout(&self) -> Option<Duration>;
}

impl SmpMachine for Discovery {
    fn poll_transmit(&mut self) -> Option<smp::Repr> {
        Discovery::poll_transmit(self)
    }
    fn handle_response(&mut self, now: Duration, response: &smp::Repr) {
        Discovery::handle_response(self, now, response);
    }
    fn handle_timeout(&mut self, now: Duration) {
        Discovery::handle_timeout(self, now)
    }
    fn poll_timeout(&self) -> Option<Duration> {
        Discovery::poll_timeout(self)
    }
}

impl SmpMachine for SubnetManager {
    fn poll_transmit(&mut self) -> Option<smp::Repr> {
        SubnetManager::poll_transmit(self)
    }
    fn handle_response(&mut self, now: Duration, response: &smp::Repr) {
        SubnetManager::handle_response(self, now, response)
    }
    fn handle_timeout(&mut self, now: Duration) {
        SubnetManager::handle_timeout(self, now)
    }
    fn poll_timeout(&self) -> Option<Duration> {
        SubnetManager::poll_timeout(self)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::discover::DiscoveryConfig;
    use crate::sm::SmConfig;
    use crate::testing::TestFabric;
    use crate::topology::Topology;
    use softib_wire::mad::attr::PortState;

    #[test]
    fn the_sm_and_a_crawl_run_through_the_one_trait() {
        let t = Topology::fat_tree(8).unwrap();
        let mut f = TestFabric::new(t);
        let host = f.topology().node_index("host1").unwrap();
        let guid = f.topology().nodes()[host].port_guid(1).unwrap();
        let mut sm = SubnetManager::new(
            SmConfig {
                port_guid: guid,
                sweep_interval: None,
                ..SmConfig::default()
            },
            1,
        );
        let machine: &mut dyn SmpMachine = &mut sm;
        f.drive(host, 1, machine, Duration::from_secs(60));
        assert!(sm.is_subnet_up());
        let other = f.topology().node_index("host2").unwrap();
        assert_eq!(f.sma(other).port_state(1), Some(PortState::Active));

        // A crawl from another host then finds what the SM configured.
        let mut d = Discovery::new(DiscoveryConfig::default(), 1);
        f.drive(other, 1, &mut d, Duration::from_secs(60));
        assert!(d.is_done());
        assert_eq!(d.result().nodes.len(), f.topology().nodes().len());
        assert!(
            d.result().nodes.iter().all(|n| n.lid(1).0 != 0),
            "every node has its LID"
        );
    }

    #[test]
    fn a_machine_whose_smps_are_lost_is_driven_by_its_timers_to_its_end() {
        // host1's only cable is unplugged: the crawl of its port gets no answer beyond its own
        // node and gives up by its timers, which the driver honours.
        let t = Topology::fat_tree(8).unwrap();
        let mut f = TestFabric::new(t);
        let host = f.topology().node_index("host1").unwrap();
        let mut d = Discovery::new(
            DiscoveryConfig {
                local_port: 2,
                ..DiscoveryConfig::default()
            },
            1,
        );
        let end = f.drive(host, 2, &mut d, Duration::from_secs(60));
        assert!(d.is_done());
        assert!(!d.failures().is_empty());
        assert!(end > Duration::ZERO, "time moved: {end:?}");
    }
}
