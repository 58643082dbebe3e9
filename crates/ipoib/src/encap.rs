//! What IPoIB puts on the wire: the 4-byte encapsulation header (RFC 4391 §6), the 20-byte
//! hardware address (RFC 4391 §9.1.1) and IPoIB ARP (RFC 4391 §9.1, RFC 826 with InfiniBand
//! addresses), plus which IPv4 destinations go to the broadcast group.

use std::net::Ipv4Addr;

use softib::{Gid, Qpn};

/// The IPoIB encapsulation header: EtherType and 16 reserved bits (RFC 4391 §6).
pub const ENCAP_LEN: usize = 4;
/// A UD receive buffer starts with the 40-byte GRH area.
pub const GRH_LEN: usize = 40;
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// ARP hardware type for InfiniBand (RFC 4391 §9.1.1).
pub const ARPHRD_INFINIBAND: u16 = 32;
/// The IPoIB hardware address: 1 byte of flags, the 3-byte QPN, the 16-byte GID.
pub const HW_LEN: usize = 20;
/// An IPoIB ARP message: the fixed 8 bytes, then sender and target hardware and IPv4
/// addresses.
pub const ARP_LEN: usize = 8 + 2 * (HW_LEN + 4);

/// ARP operation: request.
pub const ARP_REQUEST: u16 = 1;
/// ARP operation: reply.
pub const ARP_REPLY: u16 = 2;

/// An IPoIB hardware address (flags 0: datagram mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwAddr(pub [u8; HW_LEN]);

impl HwAddr {
    /// The address of UD QP `qpn` on the port with GID `gid`.
    pub fn new(qpn: Qpn, gid: Gid) -> HwAddr {
        let mut h = [0u8; HW_LEN];
        h[1..4].copy_from_slice(&qpn.value().to_be_bytes()[1..]);
        h[4..].copy_from_slice(&gid.0);
        HwAddr(h)
    }

    /// The QPN (24 bits).
    pub fn qpn(&self) -> Qpn {
        Qpn::new(u32::from_be_bytes([0, self.0[1], self.0[2], self.0[3]]))
    }

    /// The port GID.
    pub fn gid(&self) -> Gid {
        let mut g = [0u8; 16];
        g.copy_from_slice(&self.0[4..]);
        Gid(g)
    }
}

impl std::fmt::Display for HwAddr {
    /// As `ip link` shows an IPoIB address: 20 bytes in hex, colon separated.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for HwAddr {
    type Err = String;

    /// The address as [`Display`](std::fmt::Display) writes it (and `ip link` shows it).
    fn from_str(s: &str) -> Result<HwAddr, String> {
        let mut h = [0u8; HW_LEN];
        let mut n = 0;
        for part in s.split(':') {
            let b = u8::from_str_radix(part, 16)
                .ok()
                .filter(|_| part.len() == 2 && n < HW_LEN)
                .ok_or_else(|| format!("{s:?} is not an IPoIB hardware address (20 hex bytes)"))?;
            h[n] = b;
            n += 1;
        }
        if n != HW_LEN {
            return Err(format!("{s:?} has {n} bytes, an IPoIB hardware address 20"));
        }
        Ok(HwAddr(h))
    }
}

/// `payload` behind the encapsulation header of `ethertype`.
pub fn encapsulate(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(ENCAP_LEN + payload.len());
    frame.extend_from_slice(&ethertype.to_be_bytes());
    frame.extend_from_slice(&[0, 0]);
    frame.extend_from_slice(payload);
    frame
}

/// A received UD message: the GRH area, then an encapsulated packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received<'a> {
    /// The sender's port GID (from the GRH).
    pub sgid: Gid,
    /// The EtherType.
    pub ethertype: u16,
    /// What follows the encapsulation header.
    pub payload: &'a [u8],
}

impl<'a> Received<'a> {
    /// Splits a received buffer; `None` when it is too short to hold the GRH area and the
    /// encapsulation header.
    pub fn parse(data: &'a [u8]) -> Option<Received<'a>> {
        let frame = data.get(GRH_LEN..).filter(|f| f.len() >= ENCAP_LEN)?;
        let mut sgid = [0u8; 16];
        sgid.copy_from_slice(&data[8..24]);
        Some(Received {
            sgid: Gid(sgid),
            ethertype: u16::from_be_bytes([frame[0], frame[1]]),
            payload: &frame[ENCAP_LEN..],
        })
    }
}

/// An IPoIB ARP message (hardware type InfiniBand, protocol IPv4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arp {
    /// [`ARP_REQUEST`] or [`ARP_REPLY`].
    pub op: u16,
    /// Sender hardware address.
    pub sha: HwAddr,
    /// Sender IPv4 address.
    pub spa: Ipv4Addr,
    /// Target hardware address (zero in a request).
    pub tha: HwAddr,
    /// Target IPv4 address.
    pub tpa: Ipv4Addr,
}

impl Arp {
    /// Parses an ARP message; `None` when it is short or not InfiniBand/IPv4 with 20-byte
    /// hardware and 4-byte protocol addresses.
    pub fn parse(a: &[u8]) -> Option<Arp> {
        if a.len() < ARP_LEN
            || u16::from_be_bytes([a[0], a[1]]) != ARPHRD_INFINIBAND
            || u16::from_be_bytes([a[2], a[3]]) != ETHERTYPE_IPV4
            || usize::from(a[4]) != HW_LEN
            || a[5] != 4
        {
            return None;
        }
        let hw = |at: usize| {
            let mut h = [0u8; HW_LEN];
            h.copy_from_slice(&a[at..at + HW_LEN]);
            HwAddr(h)
        };
        let ip = |at: usize| Ipv4Addr::new(a[at], a[at + 1], a[at + 2], a[at + 3]);
        Some(Arp {
            op: u16::from_be_bytes([a[6], a[7]]),
            sha: hw(8),
            spa: ip(8 + HW_LEN),
            tha: hw(12 + HW_LEN),
            tpa: ip(12 + 2 * HW_LEN),
        })
    }

    /// The message's [`ARP_LEN`] bytes.
    pub fn emit(&self) -> Vec<u8> {
        let mut a = Vec::with_capacity(ARP_LEN);
        a.extend_from_slice(&ARPHRD_INFINIBAND.to_be_bytes());
        a.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        a.push(HW_LEN as u8);
        a.push(4);
        a.extend_from_slice(&self.op.to_be_bytes());
        a.extend_from_slice(&self.sha.0);
        a.extend_from_slice(&self.spa.octets());
        a.extend_from_slice(&self.tha.0);
        a.extend_from_slice(&self.tpa.octets());
        a
    }
}

/// Whether an IPv4 packet to `dst` goes to the broadcast group: the limited broadcast, any
/// multicast address (carried by the broadcast group), or the directed broadcast of the
/// interface's subnet (`ifaddr`: its address and netmask).
pub fn is_broadcast(dst: Ipv4Addr, ifaddr: Option<(Ipv4Addr, Ipv4Addr)>) -> bool {
    if dst.is_broadcast() || dst.is_multicast() {
        return true;
    }
    let Some((addr, mask)) = ifaddr else {
        return false;
    };
    let host = !u32::from(mask);
    host != 0
        && u32::from(dst) & host == host
        && u32::from(dst) & u32::from(mask) == u32::from(addr) & u32::from(mask)
}

/// The destination of an IPv4 packet; `None` for anything that is not IPv4.
pub fn ipv4_destination(pkt: &[u8]) -> Option<Ipv4Addr> {
    if pkt.first().map(|b| b >> 4) != Some(4) || pkt.len() < 20 {
        return None;
    }
    Some(Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn gid(last: u8) -> Gid {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[15] = last;
        Gid(g)
    }

    #[test]
    fn a_hardware_address_is_flags_qpn_gid() {
        let h = HwAddr::new(Qpn::new(0x12_3456), gid(7));
        assert_eq!(&h.0[..4], &[0, 0x12, 0x34, 0x56]);
        assert_eq!(h.qpn(), Qpn::new(0x12_3456));
        assert_eq!(h.gid(), gid(7));
        assert!(h.to_string().starts_with("00:12:34:56:fe:80:00"));
        assert_eq!(h.to_string().len(), 20 * 3 - 1);
        assert_eq!(h.to_string().parse::<HwAddr>(), Ok(h));
        assert!("00:12".parse::<HwAddr>().is_err());
        assert!("zz".parse::<HwAddr>().is_err());
        let long = format!("{h}:00");
        assert!(long.parse::<HwAddr>().is_err());
    }

    #[test]
    fn arp_round_trips_in_rfc_4391_layout() {
        let a = Arp {
            op: ARP_REQUEST,
            sha: HwAddr::new(Qpn::new(0x48), gid(1)),
            spa: Ipv4Addr::new(10, 0, 0, 1),
            tha: HwAddr([0; HW_LEN]),
            tpa: Ipv4Addr::new(10, 0, 0, 2),
        };
        let b = a.emit();
        assert_eq!(b.len(), ARP_LEN);
        assert_eq!(&b[..8], &[0, 32, 8, 0, 20, 4, 0, 1]);
        assert_eq!(&b[28..32], &[10, 0, 0, 1]);
        assert_eq!(&b[52..56], &[10, 0, 0, 2]);
        assert_eq!(Arp::parse(&b), Some(a));
    }

    #[test]
    fn arp_that_is_not_infiniband_ipv4_is_refused() {
        let good = Arp {
            op: ARP_REPLY,
            sha: HwAddr([1; HW_LEN]),
            spa: Ipv4Addr::LOCALHOST,
            tha: HwAddr([2; HW_LEN]),
            tpa: Ipv4Addr::LOCALHOST,
        }
        .emit();
        assert!(Arp::parse(&good[..ARP_LEN - 1]).is_none(), "short");
        for (at, v) in [(1, 1), (3, 0xdd), (4, 6), (5, 16)] {
            let mut b = good.clone();
            b[at] = v;
            assert!(Arp::parse(&b).is_none(), "byte {at} = {v}");
        }
    }

    #[test]
    fn a_received_buffer_splits_after_the_grh_area() {
        let mut data = vec![0u8; GRH_LEN];
        data[8..24].copy_from_slice(&gid(9).0);
        data.extend(encapsulate(ETHERTYPE_ARP, b"xyz"));
        let r = Received::parse(&data).unwrap();
        assert_eq!(
            (r.sgid, r.ethertype, r.payload),
            (gid(9), ETHERTYPE_ARP, &b"xyz"[..])
        );
        assert!(Received::parse(&data[..GRH_LEN + 3]).is_none());
    }

    #[test]
    fn broadcasts_are_the_limited_multicast_and_the_subnets_own() {
        let ifaddr = Some((Ipv4Addr::new(10, 1, 0, 5), Ipv4Addr::new(255, 255, 0, 0)));
        assert!(is_broadcast(Ipv4Addr::BROADCAST, None));
        assert!(is_broadcast(Ipv4Addr::new(224, 0, 0, 1), None));
        assert!(is_broadcast(Ipv4Addr::new(10, 1, 255, 255), ifaddr));
        assert!(
            !is_broadcast(Ipv4Addr::new(10, 2, 255, 255), ifaddr),
            "another subnet"
        );
        assert!(!is_broadcast(Ipv4Addr::new(10, 1, 0, 6), ifaddr));
        assert!(
            !is_broadcast(Ipv4Addr::new(10, 1, 255, 255), None),
            "no address yet"
        );
        let host_route = Some((Ipv4Addr::new(10, 1, 0, 5), Ipv4Addr::BROADCAST));
        assert!(!is_broadcast(Ipv4Addr::new(10, 1, 0, 5), host_route));
    }

    #[test]
    fn only_ipv4_has_a_destination() {
        let mut p = vec![0x45u8; 20];
        p[16..20].copy_from_slice(&[192, 168, 1, 2]);
        assert_eq!(ipv4_destination(&p), Some(Ipv4Addr::new(192, 168, 1, 2)));
        p[0] = 0x60;
        assert_eq!(ipv4_destination(&p), None);
        assert_eq!(ipv4_destination(&[0x45; 19]), None);
    }
}
