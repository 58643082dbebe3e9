//! The `netdev` module deals with *network interfaces as the host reports them*: whether one
//! is up, its MAC address and MTU (`/sys/class/net/IFACE`), and the EUI-64 a MAC gives.
//!
//! A RoCEv2 device follows its interface as rxe does (netdev events): its port is Active while
//! the interface is up, its MTU comes from the interface's, its GUID from the interface's MAC.

use std::io;
use std::path::Path;

/// What the host knows about a network interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Netdev {
    /// Up (or "unknown", as `lo` reports).
    pub up: bool,
    /// The MAC address (zeros for `lo`).
    pub mac: [u8; 6],
    /// The interface MTU.
    pub mtu: u32,
}

/// Reads an interface's state from sysfs; an error names the interface that does not exist.
pub fn netdev(name: &str) -> io::Result<Netdev> {
    let base = Path::new("/sys/class/net").join(name);
    if name.contains('/') || !base.exists() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no network interface {name} (see `ip link`)"),
        ));
    }
    let read = |f: &str| std::fs::read_to_string(base.join(f)).unwrap_or_default();
    Ok(Netdev {
        up: is_up(&read("operstate")),
        mac: parse_mac(&read("address")),
        mtu: read("mtu").trim().parse().unwrap_or(1500),
    })
}

/// Whether interface `name` is operationally up (one read of its `operstate`: what the
/// periodic check of a RoCE port needs, cheaply). An interface that is gone is down.
pub fn netdev_up(name: &str) -> bool {
    if name.contains('/') {
        return false;
    }
    let path = Path::new("/sys/class/net").join(name).join("operstate");
    std::fs::read_to_string(path).is_ok_and(|s| is_up(&s))
}

/// An `operstate` that lets traffic through: "up", or "unknown" (`lo`, some tunnels).
fn is_up(operstate: &str) -> bool {
    matches!(operstate.trim(), "up" | "unknown")
}

/// A MAC address as sysfs prints it (`02:00:0a:00:00:01`); unreadable parts are zero.
fn parse_mac(text: &str) -> [u8; 6] {
    let mut mac = [0u8; 6];
    for (i, part) in text.trim().split(':').take(6).enumerate() {
        mac[i] = u8::from_str_radix(part, 16).unwrap_or(0);
    }
    mac
}

/// The modified EUI-64 of a MAC (the universal/local bit flipped, `ff:fe` in the middle), as
/// rxe makes its node GUID, big-endian in a `u64`.
pub fn eui64(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eui64_flips_the_universal_bit_and_inserts_fffe() {
        assert_eq!(
            eui64([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
            0x5054_00ff_fe12_3456
        );
    }

    #[test]
    fn sysfs_text_parses() {
        assert_eq!(parse_mac("02:00:0a:00:00:01\n"), [0x02, 0, 0x0a, 0, 0, 1]);
        assert_eq!(parse_mac("garbage"), [0; 6]);
        assert!(is_up("unknown\n") && is_up("up") && !is_up("down") && !is_up(""));
    }

    #[test]
    fn loopback_is_up_and_a_missing_interface_is_named() {
        let lo = netdev("lo").unwrap();
        assert!(lo.up && netdev_up("lo"));
        let e = netdev("softib-no-such-if").unwrap_err();
        assert!(e.to_string().contains("softib-no-such-if"), "{e}");
        assert!(!netdev_up("softib-no-such-if") && !netdev_up("../lo"));
    }
}
