//! Arbitrary bytes as what the process data path's control channels carry (`softib-proto`):
//! what a process engine reads from the daemon, and what the daemon reads back.
//!
//! * `proto::decode` of an `Event` (the daemon's pushes on a process's event channel: rings
//!   from another engine, a ring gone) never panics; what decodes round-trips (encode → a
//!   frame whose prefix is its body's length → decode gives an equal event → encode gives
//!   the same bytes).
//! * The input as an event channel's stream: `FrameReader` fed it in pieces (the first byte
//!   chooses their size, 1–64), each frame decoded as an `Event` as the progress thread
//!   does; nothing panics and no frame is longer than `MAX_FRAME`.
//! * `parse_hand_on` of a hand-on record (a datagram steered to the wrong process, handed on
//!   to the daemon with its sender's address) never panics; what parses re-encodes to the
//!   same address bytes (`hand_on_addr`) followed by the same datagram.
//! * `liveness::Beat::decode` of the heartbeat file a waiting client reads never panics;
//!   what decodes encodes to the same 16 bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_proto::{self as proto, liveness::Beat, Event, FrameReader, MAX_FRAME};

fuzz_target!(|input: &[u8]| {
    if let Ok(ev) = proto::decode::<Event>(input) {
        let _ = format!("{ev:?}");
        let frame = proto::encode(&ev).expect("a decoded event encodes");
        assert!(frame.len() >= 4);
        let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        assert_eq!(len, frame.len() - 4, "the length prefix is the body's length");
        let again: Event = proto::decode(&frame[4..]).expect("an encoded event decodes");
        assert_eq!(again, ev, "event round trip");
        assert_eq!(proto::encode(&again).expect("re-encode"), frame);
    }
    event_stream(input);
    if let Some((from, data)) = proto::parse_hand_on(input) {
        assert_eq!(
            proto::hand_on_addr(from)[..],
            input[..proto::HAND_ON_ADDR_LEN],
            "hand-on address round trip ({from})"
        );
        assert_eq!(data, &input[proto::HAND_ON_ADDR_LEN..]);
    } else {
        assert!(input.len() < proto::HAND_ON_ADDR_LEN);
    }
    if let Some(beat) = Beat::decode(input) {
        assert_eq!(beat.encode()[..], input[..Beat::LEN], "heartbeat round trip");
    }
});

/// The bytes as the event channel's stream, read the way a process engine reads it.
fn event_stream(input: &[u8]) {
    let Some((&k, stream)) = input.split_first() else {
        return;
    };
    let piece = usize::from(k % 64) + 1;
    let mut r = FrameReader::default();
    'feed: for chunk in stream.chunks(piece) {
        r.push(chunk);
        loop {
            match r.next_frame() {
                Ok(Some(f)) => {
                    assert!(f.len() <= MAX_FRAME);
                    if let Ok(ev) = proto::decode::<Event>(&f) {
                        let _ = format!("{ev:?}");
                    }
                }
                Ok(None) => break,
                Err(_) => break 'feed,
            }
        }
    }
}
