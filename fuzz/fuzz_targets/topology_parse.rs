//! Arbitrary text into the topology parser (`softib-fabric::topology`, the ibnetdiscover /
//! ibsim format that `softib fabric up` and the daemon read).
//!
//! * `Topology::parse` never panics, whatever the text (bytes that are not UTF-8 are read
//!   lossily, as a file with a stray byte would be).
//! * What parses round-trips: `to_ibnetdiscover` gives a text that parses to an equal
//!   topology, and writing that again gives the same text.
//! * What parses is consistent: every link's ends name existing nodes and ports within their
//!   port counts, each end is cabled once and `peer` is symmetric, and node ids and GUIDs
//!   look up the nodes that carry them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_fabric::topology::Topology;

/// Longer texts only slow the fuzzer down: the parser works line by line.
const MAX_INPUT: usize = 16 * 1024;

fuzz_target!(|input: &[u8]| {
    let text = String::from_utf8_lossy(&input[..input.len().min(MAX_INPUT)]);
    let Ok(t) = Topology::parse(&text) else {
        return;
    };
    check(&t);
    let written = t.to_ibnetdiscover();
    let back = Topology::parse(&written)
        .unwrap_or_else(|e| panic!("written topology does not parse: {e}\n{written}"));
    assert_eq!(back, t, "round trip\n{written}");
    assert_eq!(back.to_ibnetdiscover(), written, "writing is stable");
});

fn check(t: &Topology) {
    for (i, n) in t.nodes().iter().enumerate() {
        assert_eq!(t.node_index(&n.id), Some(i));
        assert_eq!(t.node_by_guid(n.node_guid), Some(i));
    }
    let mut seen = std::collections::BTreeSet::new();
    for l in t.links() {
        for (end, other) in [(l.a, l.b), (l.b, l.a)] {
            let node = t.node(end.node).expect("a link end names a node");
            assert!(end.port >= 1 && end.port <= node.num_ports, "{end:?}");
            assert!(seen.insert(end), "{end:?} cabled twice");
            assert_eq!(t.peer(end), Some(other));
            assert_eq!(l.other(end), Some(other));
            assert_eq!(t.link_at(end), Some(l));
        }
    }
    assert_eq!(seen.len(), 2 * t.link_count());
}
