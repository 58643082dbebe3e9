//! Arbitrary bytes as what a client writes on a daemon's control socket (`softib-proto`).
//!
//! * `proto::decode` of a `Request` (what the daemon reads) and of a `Response` (what the
//!   `softib` library reads), and the decoding of a submission-ring entry (`proto::Submit`),
//!   never panic, whatever the bytes.
//! * A message that decodes round-trips: encoding it gives a frame whose length prefix is its
//!   body's length, the body decodes, and encoding that again gives the same bytes.
//! * `FrameReader` fed the bytes in pieces (the first input byte chooses their size) yields
//!   exactly the frames a plain reading of the length prefixes gives, refuses a length over
//!   `MAX_FRAME` as soon as the prefix is complete, and never buffers more than it was given.
//! * The requests decoded one after the other from the input are served the way the daemon
//!   serves them, against a `softib-engine` HCA over `VecMemory`: PD, MR (inside one client
//!   buffer, as the daemon checks), CQ, QP, AH, post, poll, modify, query and destroy with
//!   whatever handles and attributes the bytes name, and `SetFaults` into a port's `Faults`
//!   with frames passed through it. Nothing may panic, every packet the engine then sends
//!   must parse, and `poll_transmit` must run dry.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_engine::qp::requester::MAX_TRANSPORT_LEN;
use softib_engine::{
    AhHandle, CqHandle, Duration, Hca, HcaConfig, Instant, PdHandle, RegionId, VecMemory,
};
use softib_proto::{self as proto, FrameReader, Request, Response, Submit, MAX_FRAME};
use softib_net::fault::Faults;

/// The client buffer MRs must lie inside (the daemon's `AttachBuffer` check).
const BUF_BASE: u64 = 0x10_0000;
const BUF_LEN: u64 = 64 * 1024;
/// At most this many requests are served per input.
const MAX_REQUESTS: usize = 64;

fuzz_target!(|input: &[u8]| {
    if let Ok(req) = proto::decode::<Request>(input) {
        round_trip_request(&req);
    }
    if let Ok(resp) = proto::decode::<Response>(input) {
        round_trip_response(&resp);
    }
    // A submission-ring entry (the daemon pops and decodes it without a request).
    if let Ok(sub) = Submit::decode(input) {
        let _ = format!("{sub:?}");
        let bytes = postcard::to_stdvec(&sub).expect("a decoded entry encodes");
        let again: Submit = postcard::from_bytes(&bytes).expect("an encoded entry decodes");
        assert_eq!(
            postcard::to_stdvec(&again).expect("re-encode"),
            bytes,
            "submission entry round trip"
        );
    }
    frames(input);
    serve(input);
});

fn round_trip_request(req: &Request) {
    let _ = format!("{req:?}");
    let frame = proto::encode(req).expect("a decoded request encodes");
    let body = check_frame(&frame);
    let again: Request = proto::decode(body).expect("an encoded request decodes");
    assert_eq!(
        proto::encode(&again).expect("re-encode"),
        frame,
        "request round trip"
    );
}

fn round_trip_response(resp: &Response) {
    let _ = format!("{resp:?}");
    let frame = proto::encode(resp).expect("a decoded response encodes");
    let body = check_frame(&frame);
    let again: Response = proto::decode(body).expect("an encoded response decodes");
    assert_eq!(
        proto::encode(&again).expect("re-encode"),
        frame,
        "response round trip"
    );
}

/// The length prefix of an encoded frame is its body's length; returns the body.
fn check_frame(frame: &[u8]) -> &[u8] {
    assert!(frame.len() >= 4);
    let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
    assert_eq!(len, frame.len() - 4);
    &frame[4..]
}

/// `FrameReader` against a plain reading of the length prefixes.
fn frames(input: &[u8]) {
    let Some((&k, stream)) = input.split_first() else {
        return;
    };
    let piece = usize::from(k % 64) + 1;
    // What a plain reading gives: whole frames, then an error or an incomplete tail.
    let mut want = Vec::new();
    let mut at = 0;
    let mut too_large = false;
    while stream.len() - at >= 4 {
        let len = u32::from_le_bytes([stream[at], stream[at + 1], stream[at + 2], stream[at + 3]])
            as usize;
        if len > MAX_FRAME {
            too_large = true;
            break;
        }
        if stream.len() - at - 4 < len {
            break;
        }
        want.push(&stream[at + 4..at + 4 + len]);
        at += 4 + len;
    }
    let mut r = FrameReader::default();
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut refused = false;
    let mut fed = 0;
    'feed: for chunk in stream.chunks(piece) {
        r.push(chunk);
        fed += chunk.len();
        assert!(r.buffered() <= fed);
        loop {
            match r.next_frame() {
                Ok(Some(f)) => got.push(f),
                Ok(None) => break,
                Err(msg) => {
                    assert!(msg.contains("allowed"), "{msg}");
                    refused = true;
                    break 'feed;
                }
            }
        }
        assert_eq!(r.has_data(), r.buffered() > 0);
    }
    assert_eq!(got.len(), want.len(), "frames");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.as_slice(), *w);
    }
    assert_eq!(refused, too_large, "a too-large length is refused");
    if !refused {
        assert_eq!(r.buffered(), stream.len() - at, "the incomplete tail stays");
    }
}

/// Serves the requests in `input` the way the daemon does.
fn serve(input: &[u8]) {
    let mut hca = Hca::new(HcaConfig::with_seed(1), VecMemory::new());
    let mut faults: Faults<u8> = Faults::new(Default::default());
    let mut now = Instant::from_micros(1_000);
    let mut wall = std::time::Instant::now();
    let mut next_region = 1u64;
    let mut rest = input;
    let mut buf = vec![0u8; MAX_TRANSPORT_LEN];
    // A frame to pass through the port's faults.
    let frame = [0x5au8; 64];
    for _ in 0..MAX_REQUESTS {
        let Ok((req, tail)) = postcard::take_from_bytes::<Request>(rest) else {
            break;
        };
        rest = tail;
        match req {
            Request::AllocPd { .. } => {
                let _ = hca.alloc_pd();
            }
            Request::DeallocPd { pd, .. } => {
                let _ = hca.dealloc_pd(PdHandle(pd));
            }
            Request::RegMr {
                pd,
                addr,
                len,
                access,
                ..
            } => {
                let inside = addr
                    .checked_sub(BUF_BASE)
                    .and_then(|off| off.checked_add(len))
                    .is_some_and(|end| end <= BUF_LEN);
                if inside {
                    let region = RegionId(next_region);
                    next_region += 1;
                    if hca.reg_mr(PdHandle(pd), addr, len, access, region).is_ok() {
                        hca.memory_mut().add(region, BUF_BASE, BUF_LEN as usize);
                    }
                }
            }
            Request::DeregMr { lkey, .. } => {
                let _ = hca.dereg_mr(lkey);
            }
            Request::CreateCq { cqe, .. } => {
                let _ = hca.create_cq(cqe);
            }
            Request::DestroyCq { cq, .. } => {
                let _ = hca.destroy_cq(CqHandle(cq));
            }
            Request::CreateQp { init, .. } => {
                let _ = hca.create_qp(init);
            }
            Request::ModifyQp {
                qpn, attr, mask, ..
            } => {
                let _ = hca.modify_qp(qpn, &attr, mask);
            }
            Request::QueryQp { qpn, .. } => {
                if let Ok(q) = hca.query_qp(qpn) {
                    let _ = format!("{q:?}");
                }
            }
            Request::DestroyQp { qpn, .. } => {
                let _ = hca.destroy_qp(qpn);
            }
            Request::CreateAh { pd, av, .. } => {
                let _ = hca.create_ah(PdHandle(pd), av);
            }
            Request::DestroyAh { ah, .. } => {
                let _ = hca.destroy_ah(AhHandle(ah));
            }
            Request::PostSend { qpn, wrs, .. } => {
                for wr in wrs {
                    if hca.post_send(qpn, wr).is_err() {
                        break;
                    }
                }
            }
            Request::PostRecv { qpn, wrs, .. } => {
                for wr in wrs {
                    if hca.post_recv(qpn, wr).is_err() {
                        break;
                    }
                }
            }
            Request::PollCq { cq, max, .. } => {
                let mut n = 0;
                while n < max && hca.poll_cq(CqHandle(cq)).is_some() {
                    n += 1;
                }
            }
            Request::SetFaults { spec, .. } => {
                let _ = format!("{spec}");
                faults = Faults::new(spec);
            }
            _ => {}
        }
        // What the daemon's loop does between requests: frames through the port's faults,
        // the engine's packets, timers.
        for i in 0..4u8 {
            let _ = faults.apply(wall, i, &frame, |_, f| {
                assert_eq!(f.len(), frame.len());
                Ok::<(), ()>(())
            });
        }
        let _ = faults.poll(wall, |_, _| Ok::<(), ()>(()));
        let _ = faults.next_deadline();
        wall += std::time::Duration::from_millis(100);
        let mut sent = 0;
        while let Some(t) = hca.poll_transmit(now, &mut buf) {
            assert!(t.len <= buf.len());
            softib_wire::packet::parse_body(&buf[..t.len])
                .expect("every packet the engine sends parses");
            sent += 1;
            assert!(sent < 10_000, "poll_transmit never runs dry");
        }
        now = now + Duration::from_micros(100_000);
        hca.handle_timeout(now);
        while hca.poll_event().is_some() {}
    }
}
