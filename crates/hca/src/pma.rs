//! The performance management agent every port runs on QP1 (IBA §16.1): PortCounters and
//! PortCountersExtended from the engine's per-port counters, what `perfquery` reads.

use softib_engine::Memory;
use softib_wire::mad::perf::{self, PortCounters, PortCountersExtended};
use softib_wire::mad::{status, AttrId, Method, MAD_LEN};

use crate::ib::IbCa;

/// The PerfGetResp to a PMA request that arrived on `port`, or `None` for a MAD that gets no
/// response (not a request, not parseable).
pub fn answer<M: Memory>(ca: &IbCa<M>, port: u8, request: &[u8; MAD_LEN]) -> Option<[u8; MAD_LEN]> {
    let req = perf::Repr::parse(&perf::Packet::new_checked(&request[..]).ok()?).ok()?;
    if req.header.method.is_response() {
        return None;
    }
    let c = ca.hca().counters(port).copied().unwrap_or_default();
    let mut data = [0u8; perf::DATA_LEN];
    let status = match (req.header.method, req.header.attr_id) {
        (Method::Get, AttrId::CLASS_PORT_INFO) => {
            // CapabilityMask: extended width counters supported (perfquery -x works).
            data[2..4].copy_from_slice(&perf::capability_mask::EXT_WIDTH_SUPPORTED.to_be_bytes());
            data[0] = 1;
            data[1] = perf::CLASS_VERSION;
            status::SUCCESS
        }
        (Method::Get, AttrId::PORT_COUNTERS) => {
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
        (Method::Get, AttrId::PORT_COUNTERS_EXTENDED) => {
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
    let resp = req.response(status, &data);
    let mut out = [0u8; MAD_LEN];
    resp.emit(&mut perf::Packet::new_unchecked(&mut out[..]));
    Some(out)
}
