//! The screen a packet passes before the link pays for its ICRC (a CRC over the whole
//! datagram, the costliest check of all): what its BTH alone shows cannot be for this HCA is
//! dropped at once, so that a flood of junk aimed at a port costs a few loads per datagram
//! instead of a CRC, and the legitimate traffic beside it keeps the CPU.

use softib_wire::{bth, Qpn, Transport};

use super::Hca;
use crate::counters::DropReason;
use crate::memory::Memory;
use crate::verbs::{QpState, QpType};

impl<M: Memory> Hca<M> {
    /// Whether a packet arriving on `port` whose transport headers start with `headers` may
    /// be for this HCA, judged by its BTH: a transport version other than 0, a DestQP no QP
    /// has (multicast aside), an opcode of another transport than its QP's, a QP that does
    /// not receive, a P_Key outside the QP's partition (or two limited members) — each
    /// dropped and counted by the reason, in the order, and with the P_Key violation, that
    /// [`Hca::handle_packet`] gives. Anything else, a BTH too short to read included, is let
    /// through to be checked in full there.
    pub fn screen(&mut self, port: u8, headers: &[u8]) -> bool {
        let Ok(b) = bth::Packet::new_checked(headers) else {
            return true;
        };
        let Some(reason) = self.screen_reason(port, &b) else {
            return true;
        };
        self.res.drop_packet(reason);
        if reason == DropReason::PKeyMismatch {
            if let Some(c) = self.res.counters_mut(port) {
                c.pkey_violations += 1;
            }
        }
        false
    }

    fn screen_reason(&self, port: u8, b: &bth::Packet<&[u8]>) -> Option<DropReason> {
        if b.tver() != 0 {
            return Some(DropReason::TransportVersion);
        }
        // An inactive port, and multicast, are the full path's to judge.
        if !self.res.port(port).is_some_and(|p| p.active) || b.dest_qpn() == Qpn::MULTICAST {
            return None;
        }
        let Some(qp) = self.qps.get(&b.dest_qpn()) else {
            return Some(DropReason::UnknownQp);
        };
        let transport_ok = matches!(
            (b.opcode().transport(), qp.qp_type()),
            (Transport::Rc, QpType::Rc) | (Transport::Uc, QpType::Uc) | (Transport::Ud, QpType::Ud)
        );
        if !transport_ok {
            return Some(DropReason::WrongTransport);
        }
        if !matches!(
            qp.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            return Some(DropReason::QpNotReceiving);
        }
        let own = self.res.pkey(qp.attr.port_num, qp.attr.pkey_index);
        let theirs = b.pkey();
        if own.base() != theirs.base() || (!own.is_full_member() && !theirs.is_full_member()) {
            return Some(DropReason::PKeyMismatch);
        }
        None
    }
}
