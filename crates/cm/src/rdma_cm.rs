//! rdma_cm's conventions on top of the IB CM, for every softib consumer that speaks to
//! rdma_cm peers (softib's librdmacm, and softib's own perftest with `-R`): the private-data
//! header that names the IP addresses and ports of a connection (the first
//! [`CmaHeader::LEN`] bytes of a REQ's or SIDR_REQ's private data), and the addresses a
//! passive side reads back out of it; and the Q_Key of its UD QPs.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use softib_wire::mad::cm::{CmaAddrs, CmaHeader};

/// The Q_Key rdma_cm gives UD QPs of the IP port spaces (`RDMA_UDP_QKEY`), which its
/// SIDR_REPs name.
pub const UDP_QKEY: u32 = 0x0123_4567;

/// `ip` as 16 bytes (IPv4-mapped for IPv4), as the header carries an IPv6 pair.
pub fn v6(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// Fills `out` (a REQ's or SIDR_REQ's private data) with rdma_cm's header for a connection
/// from `src` to `dst`, then the consumer's `user` bytes. Returns how many bytes of `user`
/// did not fit (the caller refuses the call when that is not zero).
pub fn private_data(src: SocketAddr, dst: SocketAddr, user: &[u8], out: &mut [u8]) -> usize {
    let addrs = match (src.ip().to_canonical(), dst.ip().to_canonical()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => CmaAddrs::V4 {
            src: s.octets(),
            dst: d.octets(),
        },
        (s, d) => CmaAddrs::V6 {
            src: v6(s),
            dst: v6(d),
        },
    };
    if out.len() < CmaHeader::LEN {
        return user.len();
    }
    CmaHeader {
        src_port: src.port(),
        addrs,
    }
    .emit(out);
    let room = out.len() - CmaHeader::LEN;
    let n = user.len().min(room);
    out[CmaHeader::LEN..CmaHeader::LEN + n].copy_from_slice(&user[..n]);
    user.len() - n
}

/// The addresses a request's rdma_cm header names, as the passive side sees them: the
/// requester's address and port, and this side's address (the port is the service's).
/// `None` when the private data does not start with a version 0 header.
pub fn request_addrs(private_data: &[u8]) -> Option<(SocketAddr, IpAddr)> {
    let hdr = CmaHeader::parse(private_data).ok()?;
    let (peer, ours): (IpAddr, IpAddr) = match hdr.addrs {
        CmaAddrs::V4 { src, dst } => (src.into(), dst.into()),
        CmaAddrs::V6 { src, dst } => (
            Ipv6Addr::from(src).to_canonical(),
            Ipv6Addr::from(dst).to_canonical(),
        ),
    };
    Some((SocketAddr::new(peer, hdr.src_port), ours))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use softib_wire::mad::cm::private_len;

    #[test]
    fn an_ipv4_request_names_both_addresses_and_the_requesters_port() {
        let src: SocketAddr = "10.0.0.2:40000".parse().unwrap();
        let dst: SocketAddr = "10.0.0.3:18515".parse().unwrap();
        let mut pd = [0u8; private_len::REQ];
        assert_eq!(private_data(src, dst, b"hello", &mut pd), 0);
        let (peer, ours) = request_addrs(&pd).unwrap();
        assert_eq!(peer, src);
        assert_eq!(ours, dst.ip());
        assert_eq!(&pd[CmaHeader::LEN..CmaHeader::LEN + 5], b"hello");
    }

    #[test]
    fn mixed_families_travel_as_ipv6_and_come_back_canonical() {
        let src: SocketAddr = "[fe80::1]:1".parse().unwrap();
        let dst: SocketAddr = "10.0.0.3:2".parse().unwrap();
        let mut pd = [0u8; private_len::REQ];
        private_data(src, dst, &[], &mut pd);
        let (peer, ours) = request_addrs(&pd).unwrap();
        assert_eq!(peer, src);
        assert_eq!(ours, dst.ip());
    }

    #[test]
    fn what_does_not_fit_is_counted_and_no_header_is_none() {
        let a: SocketAddr = "10.0.0.2:1".parse().unwrap();
        let mut pd = [0u8; CmaHeader::LEN + 2];
        assert_eq!(private_data(a, a, b"abcd", &mut pd), 2);
        let mut short = [0u8; 4];
        assert_eq!(private_data(a, a, b"ab", &mut short), 2);
        let mut bad = [0u8; private_len::REQ];
        bad[0] = 7;
        assert_eq!(request_addrs(&bad), None);
        assert_eq!(request_addrs(&[0u8; 3]), None);
    }
}
