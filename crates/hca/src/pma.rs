//! The performance management agent every port runs on QP1 (IBA §16.1): PortCounters and
//! PortCountersExtended from the engine's per-port counters, what `perfquery` reads, and
//! their PerfSet, which clears the counters CounterSelect names (`perfquery -r`, `-x -r`).
//!
//! The engine's counters only grow; a PerfSet records, per port, where each selected counter
//! stood ([`PmaBaselines`]), and the PMA reports the counts since. Both attributes read the
//! same counters (PortCounters' 32-bit ones saturate, the extended ones do not), so clearing
//! PortXmitData through either clears it for both, as on a ConnectX.

use std::collections::BTreeMap;

use softib_engine::counters::PortCounters as Raw;
use softib_engine::Memory;
use softib_wire::mad::perf::{
    self, counter_select as sel, counter_select_ext as sel_ext, PortCounters, PortCountersExtended,
};
use softib_wire::mad::{status, AttrId, Method, MAD_LEN};

use crate::ib::IbCa;

/// Per port, the engine's counters as of the last PerfSet that cleared each of them.
#[derive(Debug, Default)]
pub struct PmaBaselines(BTreeMap<u8, Raw>);

impl PmaBaselines {
    /// The counts of `port` since they were last cleared.
    fn since(&self, port: u8, raw: Raw) -> Raw {
        let Some(b) = self.0.get(&port) else {
            return raw;
        };
        Raw {
            xmit_data_words: raw.xmit_data_words.saturating_sub(b.xmit_data_words),
            rcv_data_words: raw.rcv_data_words.saturating_sub(b.rcv_data_words),
            xmit_pkts: raw.xmit_pkts.saturating_sub(b.xmit_pkts),
            rcv_pkts: raw.rcv_pkts.saturating_sub(b.rcv_pkts),
            rcv_errors: raw.rcv_errors.saturating_sub(b.rcv_errors),
            xmit_discards: raw.xmit_discards.saturating_sub(b.xmit_discards),
            ..raw
        }
    }

    /// Clears the counters of `port` that `select` names ([`Counter`]s), as they stand in
    /// `raw` now.
    fn clear(&mut self, port: u8, raw: Raw, select: &[Counter]) {
        let b = self.0.entry(port).or_default();
        for c in select {
            match c {
                Counter::XmitData => b.xmit_data_words = raw.xmit_data_words,
                Counter::RcvData => b.rcv_data_words = raw.rcv_data_words,
                Counter::XmitPkts => b.xmit_pkts = raw.xmit_pkts,
                Counter::RcvPkts => b.rcv_pkts = raw.rcv_pkts,
                Counter::RcvErrors => b.rcv_errors = raw.rcv_errors,
                Counter::XmitDiscards => b.xmit_discards = raw.xmit_discards,
            }
        }
    }
}

/// The counters the engine keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counter {
    XmitData,
    RcvData,
    XmitPkts,
    RcvPkts,
    RcvErrors,
    XmitDiscards,
}

/// The engine's counters a PortCounters CounterSelect names (the others are always 0).
fn selected(mask: u16) -> Vec<Counter> {
    [
        (sel::PORT_XMIT_DATA, Counter::XmitData),
        (sel::PORT_RCV_DATA, Counter::RcvData),
        (sel::PORT_XMIT_PKTS, Counter::XmitPkts),
        (sel::PORT_RCV_PKTS, Counter::RcvPkts),
        (sel::PORT_RCV_ERRORS, Counter::RcvErrors),
        (sel::PORT_XMIT_DISCARDS, Counter::XmitDiscards),
    ]
    .into_iter()
    .filter(|(bit, _)| mask & bit != 0)
    .map(|(_, c)| c)
    .collect()
}

/// The engine's counters a PortCountersExtended CounterSelect names: every packet is
/// unicast, so the unicast counters are the packet counters.
fn selected_ext(mask: u16) -> Vec<Counter> {
    [
        (sel_ext::PORT_XMIT_DATA, Counter::XmitData),
        (sel_ext::PORT_RCV_DATA, Counter::RcvData),
        (
            sel_ext::PORT_XMIT_PKTS | sel_ext::PORT_UNICAST_XMIT_PKTS,
            Counter::XmitPkts,
        ),
        (
            sel_ext::PORT_RCV_PKTS | sel_ext::PORT_UNICAST_RCV_PKTS,
            Counter::RcvPkts,
        ),
    ]
    .into_iter()
    .filter(|(bits, _)| mask & bits != 0)
    .map(|(_, c)| c)
    .collect()
}

/// The PerfGetResp to a PMA request that arrived on `port`, or `None` for a MAD that gets no
/// response (not a request, not parseable).
pub fn answer<M: Memory>(
    ca: &IbCa<M>,
    baselines: &mut PmaBaselines,
    port: u8,
    request: &[u8; MAD_LEN],
) -> Option<[u8; MAD_LEN]> {
    let req = perf::Repr::parse(&perf::Packet::new_checked(&request[..]).ok()?).ok()?;
    if req.header.method.is_response() {
        return None;
    }
    let raw = ca.hca().counters(port).copied().unwrap_or_default();
    let mut data = [0u8; perf::DATA_LEN];
    if req.header.base_version != 1 || req.header.class_version != perf::CLASS_VERSION {
        return Some(req.response_mad(status::BAD_VERSION, &data));
    }
    let status = match (req.header.method, req.header.attr_id) {
        (Method::Get, AttrId::CLASS_PORT_INFO) => {
            // CapabilityMask: extended width counters supported (perfquery -x works).
            data[2..4].copy_from_slice(&perf::capability_mask::EXT_WIDTH_SUPPORTED.to_be_bytes());
            data[0] = 1;
            data[1] = perf::CLASS_VERSION;
            status::SUCCESS
        }
        (Method::Get | Method::Set, AttrId::PORT_COUNTERS) => {
            if req.header.method == Method::Set {
                match PortCounters::parse(req.data) {
                    Ok(set) => baselines.clear(port, raw, &selected(set.counter_select)),
                    Err(_) => return Some(req.response_mad(status::INVALID_ATTR_VALUE, &data)),
                }
            }
            let c = baselines.since(port, raw);
            let sat32 = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
            let sat16 = |v: u64| u16::try_from(v).unwrap_or(u16::MAX);
            let pc = PortCounters {
                port_select: port,
                port_rcv_errors: sat16(c.rcv_errors),
                port_xmit_discards: sat16(c.xmit_discards),
                port_xmit_data: sat32(c.xmit_data_words),
                port_rcv_data: sat32(c.rcv_data_words),
                port_xmit_pkts: sat32(c.xmit_pkts),
                port_rcv_pkts: sat32(c.rcv_pkts),
                ..PortCounters::default()
            };
            pc.emit(&mut data);
            status::SUCCESS
        }
        (Method::Get | Method::Set, AttrId::PORT_COUNTERS_EXTENDED) => {
            if req.header.method == Method::Set {
                match PortCountersExtended::parse(req.data) {
                    Ok(set) => baselines.clear(port, raw, &selected_ext(set.counter_select)),
                    Err(_) => return Some(req.response_mad(status::INVALID_ATTR_VALUE, &data)),
                }
            }
            let c = baselines.since(port, raw);
            let pc = PortCountersExtended {
                port_select: port,
                port_xmit_data: c.xmit_data_words,
                port_rcv_data: c.rcv_data_words,
                port_xmit_pkts: c.xmit_pkts,
                port_rcv_pkts: c.rcv_pkts,
                port_unicast_xmit_pkts: c.xmit_pkts,
                port_unicast_rcv_pkts: c.rcv_pkts,
                ..PortCountersExtended::default()
            };
            pc.emit(&mut data);
            status::SUCCESS
        }
        (Method::Get | Method::Set, _) => status::UNSUPPORTED_METHOD_ATTR,
        _ => status::UNSUPPORTED_METHOD,
    };
    Some(req.response_mad(status, &data))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(n: u64) -> Raw {
        Raw {
            xmit_data_words: 10 * n,
            rcv_data_words: 20 * n,
            xmit_pkts: n,
            rcv_pkts: 2 * n,
            ..Raw::default()
        }
    }

    #[test]
    fn a_perf_set_clears_what_counter_select_names_and_only_on_its_port() {
        let mut b = PmaBaselines::default();
        assert_eq!(b.since(1, raw(5)), raw(5));
        b.clear(
            1,
            raw(5),
            &selected(sel::PORT_XMIT_DATA | sel::PORT_XMIT_PKTS),
        );
        let now = b.since(1, raw(7));
        assert_eq!((now.xmit_data_words, now.xmit_pkts), (20, 2));
        assert_eq!(
            (now.rcv_data_words, now.rcv_pkts),
            (140, 14),
            "not selected"
        );
        assert_eq!(b.since(2, raw(7)), raw(7), "another port");
        // The extended attribute's unicast bits are the packet counters.
        b.clear(1, raw(7), &selected_ext(sel_ext::PORT_UNICAST_RCV_PKTS));
        assert_eq!(b.since(1, raw(7)).rcv_pkts, 0);
        assert_eq!(selected(0xFFFF).len(), 6);
        assert_eq!(selected_ext(0x00FF).len(), 4);
    }
}
