//! The path MTU enumeration (IBA §14.2.5.6 PortInfo NeighborMTU/MTUCap; libibverbs
//! `enum ibv_mtu`): the payload size of one packet.

enum_with_unknown! {
    /// A path MTU code as PortInfo, PathRecord and `ibv_port_attr` carry it.
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    pub enum Mtu(u8) {
        /// 256 bytes.
        Mtu256 = 1,
        /// 512 bytes.
        Mtu512 = 2,
        /// 1024 bytes.
        Mtu1024 = 3,
        /// 2048 bytes.
        Mtu2048 = 4,
        /// 4096 bytes.
        Mtu4096 = 5,
    }
}

impl Mtu {
    /// The MTU in bytes, or `None` for a reserved code.
    pub fn bytes(self) -> Option<usize> {
        match self {
            Mtu::Unknown(_) => None,
            known => Some(1usize << (7 + u8::from(known))),
        }
    }

    /// The MTU code for exactly `bytes` bytes, if it is one of the five sizes.
    pub fn from_bytes(bytes: usize) -> Option<Mtu> {
        match bytes {
            256 => Some(Mtu::Mtu256),
            512 => Some(Mtu::Mtu512),
            1024 => Some(Mtu::Mtu1024),
            2048 => Some(Mtu::Mtu2048),
            4096 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }

    /// The largest MTU whose packets (plus `overhead` header bytes) fit in `link_mtu` bytes,
    /// as rxe derives the IB MTU from a netdev MTU (overhead 80 there).
    pub fn largest_fitting(link_mtu: usize, overhead: usize) -> Option<Mtu> {
        let room = link_mtu.checked_sub(overhead)?;
        [
            Mtu::Mtu4096,
            Mtu::Mtu2048,
            Mtu::Mtu1024,
            Mtu::Mtu512,
            Mtu::Mtu256,
        ]
        .into_iter()
        .find(|m| m.bytes().is_some_and(|b| b <= room))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_sizes() {
        assert_eq!(Mtu::from(5).bytes(), Some(4096));
        assert_eq!(Mtu::from(1).bytes(), Some(256));
        assert_eq!(Mtu::from(0), Mtu::Unknown(0));
        assert_eq!(Mtu::Unknown(9).bytes(), None);
        assert_eq!(Mtu::from_bytes(2048), Some(Mtu::Mtu2048));
        assert_eq!(u8::from(Mtu::Mtu1024), 3);
    }

    #[test]
    fn rxe_netdev_mtu_rule() {
        assert_eq!(Mtu::largest_fitting(1500, 80), Some(Mtu::Mtu1024));
        assert_eq!(Mtu::largest_fitting(9000, 80), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::largest_fitting(100, 80), None);
    }
}
