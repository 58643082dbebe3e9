//! The performance management agent of a switch (IBA §16.1): port 0 answers PerfMgt on QP1
//! for every port of the switch, as a real switch does — PortCounters and
//! PortCountersExtended of the port PortSelect names (or of all ports together, 0xFF), their
//! PerfSet clearing what CounterSelect names, and ClassPortInfo saying both are supported.
//! `perfquery LID PORT` and `ibqueryerrors` read a switch through it.
//!
//! The switch's counters are its own (not an engine's that only grow), so a PerfSet sets the
//! selected ones to zero.

use softib_wire::mad::perf::{
    self, capability_mask, counter_select as sel, counter_select_ext as sel_ext, PortCounters,
    PortCountersExtended,
};
use softib_wire::mad::{status, AttrId, Method, MAD_LEN};

use super::PortCounters as Counts;

/// The PerfGetResp to a PMA request for a switch whose ports' counters are `ports` (index 0
/// is port 0), or `None` for a MAD that gets no response (a response, not parseable).
pub(super) fn answer(ports: &mut [Counts], request: &[u8; MAD_LEN]) -> Option<[u8; MAD_LEN]> {
    let req = perf::Repr::parse(&perf::Packet::new_checked(&request[..]).ok()?).ok()?;
    if req.header.method.is_response() {
        return None;
    }
    let mut data = [0u8; perf::DATA_LEN];
    if req.header.base_version != 1 || req.header.class_version != perf::CLASS_VERSION {
        return Some(req.response_mad(status::BAD_VERSION, &data));
    }
    let status = match (req.header.method, req.header.attr_id) {
        (Method::Get, AttrId::CLASS_PORT_INFO) => {
            data[0] = 1;
            data[1] = perf::CLASS_VERSION;
            let cap = capability_mask::ALL_PORT_SELECT | capability_mask::EXT_WIDTH_SUPPORTED;
            data[2..4].copy_from_slice(&cap.to_be_bytes());
            status::SUCCESS
        }
        (Method::Get | Method::Set, AttrId::PORT_COUNTERS) => {
            let Ok(q) = PortCounters::parse(req.data) else {
                return Some(req.response_mad(status::INVALID_ATTR_VALUE, &data));
            };
            let Some(selected) = select(ports, q.port_select) else {
                return Some(req.response_mad(status::INVALID_ATTR_VALUE, &data));
            };
            if req.header.method == Method::Set {
                for c in selected.iter_mut() {
                    clear(c, q.counter_select);
                }
            }
            let c = total(selected);
            let sat32 = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
            let sat16 = |v: u64| u16::try_from(v).unwrap_or(u16::MAX);
            PortCounters {
                port_select: q.port_select,
                counter_select: q.counter_select,
                port_rcv_errors: sat16(c.rcv_errors),
                port_rcv_switch_relay_errors: sat16(c.rcv_switch_relay_errors),
                port_xmit_discards: sat16(c.xmit_discards),
                port_xmit_data: sat32(c.xmit_data),
                port_rcv_data: sat32(c.rcv_data),
                port_xmit_pkts: sat32(c.xmit_pkts),
                port_rcv_pkts: sat32(c.rcv_pkts),
                ..PortCounters::default()
            }
            .emit(&mut data);
            status::SUCCESS
        }
        (Method::Get | Method::Set, AttrId::PORT_COUNTERS_EXTENDED) => {
            let Ok(q) = PortCountersExtended::parse(req.data) else {
                return Some(req.response_mad(status::INVALID_ATTR_VALUE, &data));
            };
            let Some(selected) = select(ports, q.port_select) else {
                return Some(req.response_mad(status::INVALID_ATTR_VALUE, &data));
            };
            if req.header.method == Method::Set {
                for c in selected.iter_mut() {
                    clear_ext(c, q.counter_select);
                }
            }
            let c = total(selected);
            // Every packet a soft switch relays is unicast or multicast alike to it; the
            // packet counters stand for the unicast ones.
            PortCountersExtended {
                port_select: q.port_select,
                counter_select: q.counter_select,
                port_xmit_data: c.xmit_data,
                port_rcv_data: c.rcv_data,
                port_xmit_pkts: c.xmit_pkts,
                port_rcv_pkts: c.rcv_pkts,
                port_unicast_xmit_pkts: c.xmit_pkts,
                port_unicast_rcv_pkts: c.rcv_pkts,
                ..PortCountersExtended::default()
            }
            .emit(&mut data);
            status::SUCCESS
        }
        (Method::Get | Method::Set, _) => status::UNSUPPORTED_METHOD_ATTR,
        _ => status::UNSUPPORTED_METHOD,
    };
    Some(req.response_mad(status, &data))
}

/// The counters PortSelect names: one port, or every port for 0xFF; `None` for a port the
/// switch does not have.
fn select(ports: &mut [Counts], port_select: u8) -> Option<&mut [Counts]> {
    if port_select == perf::ALL_PORTS {
        return Some(ports);
    }
    let i = usize::from(port_select);
    ports.get_mut(i..=i)
}

/// The sum of `ports`' counters (one port's own when there is one).
fn total(ports: &[Counts]) -> Counts {
    ports.iter().fold(Counts::default(), |a, c| Counts {
        xmit_data: a.xmit_data.saturating_add(c.xmit_data),
        rcv_data: a.rcv_data.saturating_add(c.rcv_data),
        xmit_pkts: a.xmit_pkts.saturating_add(c.xmit_pkts),
        rcv_pkts: a.rcv_pkts.saturating_add(c.rcv_pkts),
        rcv_errors: a.rcv_errors.saturating_add(c.rcv_errors),
        rcv_switch_relay_errors: a
            .rcv_switch_relay_errors
            .saturating_add(c.rcv_switch_relay_errors),
        xmit_discards: a.xmit_discards.saturating_add(c.xmit_discards),
    })
}

/// Zeroes the counters a PortCounters CounterSelect names.
fn clear(c: &mut Counts, mask: u16) {
    for (bit, counter) in [
        (sel::PORT_RCV_ERRORS, &mut c.rcv_errors),
        (
            sel::PORT_RCV_SWITCH_RELAY_ERRORS,
            &mut c.rcv_switch_relay_errors,
        ),
        (sel::PORT_XMIT_DISCARDS, &mut c.xmit_discards),
        (sel::PORT_XMIT_DATA, &mut c.xmit_data),
        (sel::PORT_RCV_DATA, &mut c.rcv_data),
        (sel::PORT_XMIT_PKTS, &mut c.xmit_pkts),
        (sel::PORT_RCV_PKTS, &mut c.rcv_pkts),
    ] {
        if mask & bit != 0 {
            *counter = 0;
        }
    }
}

/// Zeroes the counters a PortCountersExtended CounterSelect names.
fn clear_ext(c: &mut Counts, mask: u16) {
    for (bits, counter) in [
        (sel_ext::PORT_XMIT_DATA, &mut c.xmit_data),
        (sel_ext::PORT_RCV_DATA, &mut c.rcv_data),
        (
            sel_ext::PORT_XMIT_PKTS | sel_ext::PORT_UNICAST_XMIT_PKTS,
            &mut c.xmit_pkts,
        ),
        (
            sel_ext::PORT_RCV_PKTS | sel_ext::PORT_UNICAST_RCV_PKTS,
            &mut c.rcv_pkts,
        ),
    ] {
        if mask & bits != 0 {
            *counter = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(attr: AttrId, port_select: u8, method: Method) -> [u8; MAD_LEN] {
        let mut data = [0u8; perf::DATA_LEN];
        data[1] = port_select;
        // CounterSelect: everything.
        data[2..4].copy_from_slice(&0xFFFFu16.to_be_bytes());
        let mut out = [0u8; MAD_LEN];
        perf::Repr::request(method, 7, attr, 0, &data)
            .emit(&mut perf::Packet::new_unchecked(&mut out[..]));
        out
    }

    fn parse(mad: &[u8; MAD_LEN]) -> (u16, [u8; perf::DATA_LEN]) {
        let r = perf::Repr::parse(&perf::Packet::new_checked(&mad[..]).unwrap()).unwrap();
        let mut d = [0u8; perf::DATA_LEN];
        d.copy_from_slice(r.data);
        assert!(r.header.method.is_response());
        assert_eq!(r.header.tid, 7);
        (r.header.status, d)
    }

    fn ports() -> Vec<Counts> {
        (0..4u64)
            .map(|p| Counts {
                xmit_data: 100 * p,
                rcv_pkts: p,
                rcv_switch_relay_errors: p,
                ..Counts::default()
            })
            .collect()
    }

    #[test]
    fn port_select_picks_a_port_or_all_of_them_and_a_port_not_there_is_invalid() {
        let mut p = ports();
        let (st, d) = parse(&answer(&mut p, &get(AttrId::PORT_COUNTERS, 2, Method::Get)).unwrap());
        assert_eq!(st, status::SUCCESS);
        let pc = PortCounters::parse(&d).unwrap();
        assert_eq!(
            (pc.port_select, pc.port_xmit_data, pc.port_rcv_pkts),
            (2, 200, 2)
        );
        assert_eq!(pc.port_rcv_switch_relay_errors, 2);
        let (_, d) = parse(
            &answer(
                &mut p,
                &get(AttrId::PORT_COUNTERS_EXTENDED, 0xFF, Method::Get),
            )
            .unwrap(),
        );
        let x = PortCountersExtended::parse(&d).unwrap();
        assert_eq!((x.port_xmit_data, x.port_unicast_rcv_pkts), (600, 6));
        let (st, _) = parse(&answer(&mut p, &get(AttrId::PORT_COUNTERS, 4, Method::Get)).unwrap());
        assert_eq!(st, status::INVALID_ATTR_VALUE);
    }

    #[test]
    fn a_perf_set_zeroes_the_selected_counters_of_the_selected_port() {
        let mut p = ports();
        answer(&mut p, &get(AttrId::PORT_COUNTERS, 3, Method::Set)).unwrap();
        assert_eq!(p[3], Counts::default());
        assert_eq!(p[2].xmit_data, 200, "another port");
        answer(
            &mut p,
            &get(AttrId::PORT_COUNTERS_EXTENDED, 0xFF, Method::Set),
        )
        .unwrap();
        assert!(p.iter().all(|c| c.xmit_data == 0 && c.rcv_pkts == 0));
        // The extended attribute has no error counters.
        assert_eq!(p[2].rcv_switch_relay_errors, 2);
    }

    #[test]
    fn class_port_info_says_all_port_select_and_extended_counters() {
        let (st, d) =
            parse(&answer(&mut ports(), &get(AttrId::CLASS_PORT_INFO, 0, Method::Get)).unwrap());
        assert_eq!(st, status::SUCCESS);
        let cap = u16::from_be_bytes([d[2], d[3]]);
        assert_ne!(cap & capability_mask::EXT_WIDTH_SUPPORTED, 0);
        assert_ne!(cap & capability_mask::ALL_PORT_SELECT, 0);
    }

    #[test]
    fn what_the_agent_does_not_know_gets_the_spec_status_and_a_response_none() {
        let mut p = ports();
        let (st, _) = parse(&answer(&mut p, &get(AttrId(0x0030), 1, Method::Get)).unwrap());
        assert_eq!(st, status::UNSUPPORTED_METHOD_ATTR);
        let (st, _) = parse(&answer(&mut p, &get(AttrId::PORT_COUNTERS, 1, Method::Send)).unwrap());
        assert_eq!(st, status::UNSUPPORTED_METHOD);
        let mut v2 = get(AttrId::PORT_COUNTERS, 1, Method::Get);
        v2[2] = 2;
        let (st, _) = parse(&answer(&mut p, &v2).unwrap());
        assert_eq!(st, status::BAD_VERSION);
        let resp = answer(&mut p, &get(AttrId::PORT_COUNTERS, 1, Method::Get)).unwrap();
        assert!(answer(&mut p, &resp).is_none());
    }
}
