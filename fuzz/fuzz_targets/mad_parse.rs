//! Arbitrary bytes (up to 300, a MAD is 256) into every MAD parser of softib-wire: the whole-MAD
//! `Body::parse`, the common header, the SMP, SA and PMA layouts, and every attribute and record.
//!
//! * No parser may panic, whatever the bytes.
//! * What parses must be stable: `parse(emit(parse(bytes))) == parse(bytes)`; emission writes
//!   exactly its length whatever the buffer held before (reserved bits as zero) and emitting the
//!   re-parsed value gives the same bytes.
//! * A buffer one byte shorter than an attribute must be refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_fuzz::{display_len, emit_checked};
use softib_wire::mad::{self, attr, class_port_info, perf, sa, smp, Body, MAD_LEN};

/// The longest input looked at.
const MAX_INPUT: usize = 300;

fuzz_target!(|input: &[u8]| {
    let data = &input[..input.len().min(MAX_INPUT)];

    // The whole MAD.
    if let Ok(body) = Body::parse(data) {
        check_body(data, &body);
    }

    // Each layout on its own, whatever the MgmtClass says.
    if let Ok(h) = mad::Repr::parse(&mad::Packet::new_unchecked(data)) {
        let bytes = emit_checked(mad::HEADER_LEN, |b| {
            h.emit(&mut mad::Packet::new_unchecked(b))
        });
        let back = mad::Repr::parse(&mad::Packet::new_unchecked(&bytes[..]))
            .expect("an emitted MAD header parses");
        assert_eq!(back, h);
        names(&h);
    }
    if let Ok(s) = smp::Repr::parse(&smp::Packet::new_unchecked(data)) {
        let bytes = emit_checked(MAD_LEN, |b| s.emit(&mut smp::Packet::new_unchecked(b)));
        let back = smp::Repr::parse(&smp::Packet::new_unchecked(&bytes[..]))
            .expect("an emitted SMP parses");
        assert_eq!(back, s);
        if let Some(dr) = &s.dr {
            let _ = (dr.path().len(), dr.return_ports().len(), dr.is_pure());
        }
        smp_attributes(&s.data);
    }
    if let Ok(s) = sa::Repr::parse(&sa::Packet::new_unchecked(data)) {
        let bytes = emit_checked(MAD_LEN, |b| s.emit(&mut sa::Packet::new_unchecked(b)));
        let back = sa::Repr::parse(&sa::Packet::new_unchecked(&bytes[..]))
            .expect("an emitted SA MAD parses");
        assert_eq!(back, s);
        let _ = s.rmpp.is_active();
        for record in s.records() {
            assert_eq!(record.len(), usize::from(s.attr_offset) * 8);
            sa_records(record);
        }
        sa_records(s.data);
    }
    if let Ok(p) = perf::Repr::parse(&perf::Packet::new_unchecked(data)) {
        let bytes = emit_checked(MAD_LEN, |b| p.emit(&mut perf::Packet::new_unchecked(b)));
        let back = perf::Repr::parse(&perf::Packet::new_unchecked(&bytes[..]))
            .expect("an emitted PMA MAD parses");
        assert_eq!(back, p);
        pma_attributes(p.data);
    }

    // Every attribute and record parser straight on the bytes, and on the bytes after a MAD
    // header, where they would sit.
    smp_attributes(data);
    sa_records(data);
    pma_attributes(data);
    if let Some(rest) = data.get(mad::HEADER_LEN..) {
        smp_attributes(rest);
        pma_attributes(rest);
    }
    if let Some((&offset, rest)) = data.split_first() {
        for record in sa::records(rest, u16::from(offset)) {
            assert_eq!(record.len(), usize::from(offset) * 8);
        }
    }
});

fn check_body(data: &[u8], body: &Body<'_>) {
    assert_eq!(body.buffer_len(), MAD_LEN);
    assert_eq!(
        Body::parse(&data[..MAD_LEN]).as_ref(),
        Ok(body),
        "bytes after the 256th changed the parse"
    );
    let bytes = emit_checked(MAD_LEN, |b| body.emit(b));
    let back = Body::parse(&bytes).expect("an emitted MAD parses");
    assert_eq!(&back, body, "Body::parse(emit(body)) != body");
    assert_eq!(emit_checked(MAD_LEN, |b| back.emit(b)), bytes);
    names(body.header());
    let _ = body.attr_name();
    let _ = body.directed_route().map(|dr| dr.path().len());
}

fn names(h: &mad::Repr) {
    display_len(&h.mgmt_class);
    display_len(&h.method);
    display_len(&h.attr_id);
    let _ = (h.mgmt_class.description(), h.method.name(), h.method_name());
    let _ = (h.attr_name(), h.method.response(), h.response(0));
}

/// Checks one attribute type: if `bytes` parse, the value re-emits stably; if there are enough
/// bytes, one fewer must be refused.
macro_rules! attribute {
    ($ty:ty, $bytes:expr) => {{
        let bytes: &[u8] = $bytes;
        if let Ok(a) = <$ty>::parse(bytes) {
            let out = emit_checked(<$ty>::LEN, |b| a.emit(b));
            let back = <$ty>::parse(&out)
                .unwrap_or_else(|e| panic!("emitted {} does not parse: {e}", stringify!($ty)));
            assert_eq!(back, a, "{}: parse(emit(a)) != a", stringify!($ty));
            assert_eq!(emit_checked(<$ty>::LEN, |b| back.emit(b)), out);
        }
        if bytes.len() >= <$ty>::LEN {
            assert!(<$ty>::parse(&bytes[..<$ty>::LEN - 1]).is_err());
        }
    }};
}

fn smp_attributes(bytes: &[u8]) {
    attribute!(attr::NodeInfo, bytes);
    attribute!(attr::NodeDescription, bytes);
    attribute!(attr::PortInfo, bytes);
    attribute!(attr::SwitchInfo, bytes);
    attribute!(attr::LinearForwardingTable, bytes);
    attribute!(attr::GuidInfo, bytes);
    attribute!(attr::PKeyTable, bytes);
    attribute!(attr::SmInfo, bytes);
    if let Ok(nd) = attr::NodeDescription::parse(bytes) {
        assert!(nd.text().len() <= nd.as_bytes().len());
    }
}

fn sa_records(bytes: &[u8]) {
    attribute!(sa::PathRecord, bytes);
    attribute!(sa::NodeRecord, bytes);
    attribute!(sa::PortInfoRecord, bytes);
    attribute!(class_port_info::Repr, bytes);
}

fn pma_attributes(bytes: &[u8]) {
    attribute!(perf::PortCounters, bytes);
    attribute!(perf::PortCountersExtended, bytes);
    attribute!(class_port_info::Repr, bytes);
}
