//! Arbitrary bytes as what a perftest peer sends on the out-of-band TCP connection
//! (`softib-perftest::exchange`), cut into the messages a side reads in the order it reads
//! them: the 16-byte version, the two system-data ints and the MTU (when that version sends
//! them), the negotiation the two versions agree on (the legacy block, or the key=value
//! version, length and string), key messages with or without a GID while they decode, and
//! the five BW report parts. The seeds are real exchanges (upstream perftest 6.06 on rxe).
//!
//! * No decoder panics, whatever the bytes; the version rules (`has_sys_data`,
//!   `mtu_msg_len`, `Negotiation::between`, ...) take any version text.
//! * `NegotiateParams::compare` of a decoded block against softib's own never panics and
//!   its error prints.
//! * What decodes round-trips: a key message that decodes and encodes decodes to the same
//!   `Dest`; a decoded negotiation re-encodes to a block that decodes equal (legacy) or to a
//!   string that decodes with every key received (key=value); a BW report too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_perftest::exchange::{
    decode_i32, decode_mtu, decode_version, effective_mtu, BwReport, Dest, NegotiateParams,
    Negotiation, PeerVersion, LEGACY_NEGOTIATE_LEN, SOFTIB_PERFTEST_VERSION, VERSION_LEN,
};

/// Takes the next `n` bytes (fewer at the end: a peer that closed early).
fn take<'a>(rest: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, tail) = rest.split_at(n.min(rest.len()));
    *rest = tail;
    head
}

fuzz_target!(|input: &[u8]| {
    let mut rest = input;
    let local = PeerVersion::new(SOFTIB_PERFTEST_VERSION);
    let Ok(remote) = decode_version(take(&mut rest, VERSION_LEN)) else {
        // Not text: decode what follows with softib's own rules.
        key_and_reports(rest, &local);
        return;
    };
    let _ = (
        remote.has_sys_data(),
        remote.has_mtu_exchange(),
        remote.upstream_rejects(),
    );
    if remote.has_sys_data() {
        let _ = decode_i32("page size", take(&mut rest, 4));
        let _ = decode_i32("cache line size", take(&mut rest, 4));
    }
    if remote.has_mtu_exchange() {
        let theirs = decode_mtu(take(&mut rest, remote.mtu_msg_len()));
        for local_mtu in 1..=5 {
            let m = effective_mtu(local_mtu, theirs);
            assert!(m >= 1 && m <= local_mtu, "mtu {m}");
        }
    }
    let format = Negotiation::between(&local, &remote);
    // softib's own block: every field zero (the decoding of an empty string).
    let mine = NegotiateParams::decode_kv("").0;
    match format {
        Negotiation::None => {}
        Negotiation::Legacy => {
            if let Ok(p) = NegotiateParams::decode_legacy(take(&mut rest, LEGACY_NEGOTIATE_LEN)) {
                let again =
                    NegotiateParams::decode_legacy(&p.encode_legacy()).expect("re-encoded block");
                assert_eq!(again, p, "legacy round trip");
                if let Err(e) = mine.compare(&p, format, &["test_method", "size", "verb"]) {
                    let _ = e.to_string();
                }
            }
        }
        Negotiation::KeyValue => {
            let _ = decode_i32("negotiation version", take(&mut rest, 4));
            let len = decode_i32("negotiation string length", take(&mut rest, 4)).unwrap_or(0);
            // The exchange refuses more than 1 MiB; a fuzz input is far shorter anyway.
            let len = len as u32 as usize;
            let text = String::from_utf8_lossy(take(&mut rest, len));
            let (p, received) = NegotiateParams::decode_kv(&text);
            let (again, all) = NegotiateParams::decode_kv(&p.encode_kv());
            assert_eq!(again, p, "key=value round trip");
            assert_eq!(all.len(), 20, "every key is written");
            if let Err(e) = mine.compare(&p, format, &received) {
                let _ = e.to_string();
            }
        }
    }
    key_and_reports(rest, &remote);
});

/// Key messages (hand shakes, barriers, the closing one) until one does not decode, then the
/// five BW report parts.
fn key_and_reports(mut rest: &[u8], remote: &PeerVersion) {
    // Each message is tried both ways (a side assumes the peer uses a GID exactly when it
    // does); the input goes on after the longer form that decoded, else the shorter.
    loop {
        let mut consumed = 0;
        for with_gid in [true, false] {
            let len = if with_gid { 108 } else { 59 };
            let msg = &rest[..len.min(rest.len())];
            match Dest::decode(msg, with_gid) {
                Ok(d) => {
                    assert_eq!(d.gid.is_some(), with_gid);
                    if let Ok(bytes) = d.encode() {
                        let back =
                            Dest::decode(&bytes, with_gid).expect("an encoded key message decodes");
                        assert_eq!(back, d, "key message round trip");
                    }
                    if consumed == 0 {
                        consumed = msg.len();
                    }
                }
                Err(e) => {
                    let _ = e.to_string();
                }
            }
        }
        if consumed == 0 {
            break;
        }
        take(&mut rest, consumed);
    }
    let n = remote.bw_iters_len();
    let parts: Vec<Vec<u8>> = [8, n, 8, 8, 8]
        .iter()
        .map(|&k| take(&mut rest, k).to_vec())
        .collect();
    if let Ok(r) = BwReport::decode(&parts) {
        let back = BwReport::decode(&r.encode(n)).expect("an encoded report decodes");
        assert_eq!(back.size, r.size);
        assert_eq!(back.iters, r.iters);
        assert_eq!(back.bw_peak.to_bits(), r.bw_peak.to_bits());
        assert_eq!(back.bw_avg.to_bits(), r.bw_avg.to_bits());
        assert_eq!(back.msg_rate.to_bits(), r.msg_rate.to_bits());
    }
}
