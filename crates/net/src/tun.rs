//! Linux TUN devices (layer 3, no packet information header) and the few interface settings
//! IPoIB needs: the MTU it sets and the IPv4 address and netmask the user gave the interface.
//!
//! A TUN device lives in the network namespace of the process that creates it, and as long as
//! a file descriptor for it is open. Interface settings are read and written with ioctls on an
//! AF_INET socket of the same namespace.

use std::ffi::CStr;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

/// `struct ifreq`: the interface name and a 24-byte union (sockaddr, flags, MTU, ...).
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: [u8; 24],
}

impl IfReq {
    fn new(name: &str) -> io::Result<IfReq> {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "interface name {name:?}: give 1 to {} bytes without NUL",
                    libc::IFNAMSIZ - 1
                ),
            ));
        }
        let mut r = IfReq {
            name: [0; libc::IFNAMSIZ],
            data: [0; 24],
        };
        r.name[..bytes.len()].copy_from_slice(bytes);
        Ok(r)
    }

    fn name(&self) -> String {
        CStr::from_bytes_until_nul(&self.name)
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// Runs one ioctl that takes a `struct ifreq`.
fn ifreq_ioctl(fd: BorrowedFd<'_>, request: libc::c_ulong, req: &mut IfReq) -> io::Result<()> {
    // SAFETY: every request passed here (TUNSETIFF and the SIOC[GS]IF* ones) reads and
    // writes at most a `struct ifreq`, which `IfReq` is (repr(C), 40 bytes), and the pointer
    // is valid and exclusive for the duration of the call.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, req as *mut IfReq) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: i16 = 0x0001;
const IFF_NO_PI: i16 = 0x1000;

/// An open TUN device.
#[derive(Debug)]
pub struct Tun {
    file: File,
    name: String,
}

impl Tun {
    /// Creates (or attaches to) TUN interface `name` in this process's network namespace.
    pub fn create(name: &str) -> io::Result<Tun> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot open /dev/net/tun ({e}): creating an IP interface needs root \
                         (or CAP_NET_ADMIN) and the tun module"
                    ),
                )
            })?;
        let mut req = IfReq::new(name)?;
        req.data[..2].copy_from_slice(&(IFF_TUN | IFF_NO_PI).to_ne_bytes());
        ifreq_ioctl(file.as_fd(), TUNSETIFF, &mut req).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create TUN interface {name}: {e}"))
        })?;
        Ok(Tun {
            file,
            name: req.name(),
        })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads one IP packet; `WouldBlock` when none is waiting.
    pub fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.file.read(buf)
    }

    /// Writes one IP packet to the kernel.
    pub fn send(&mut self, packet: &[u8]) -> io::Result<()> {
        self.file.write(packet).map(|_| ())
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// Interface settings through an AF_INET socket of this network namespace.
#[derive(Debug)]
pub struct IfConfig {
    sock: OwnedFd,
}

const SIOCGIFFLAGS: libc::c_ulong = 0x8913;
const SIOCGIFADDR: libc::c_ulong = 0x8915;
const SIOCGIFNETMASK: libc::c_ulong = 0x891b;
const SIOCGIFMTU: libc::c_ulong = 0x8921;
const SIOCSIFMTU: libc::c_ulong = 0x8922;

impl IfConfig {
    /// Opens the socket the settings are made through.
    pub fn new() -> io::Result<IfConfig> {
        let sock = rustix::net::socket(
            rustix::net::AddressFamily::INET,
            rustix::net::SocketType::DGRAM,
            None,
        )?;
        // Keep the descriptor ours alone across exec.
        rustix::io::fcntl_setfd(&sock, rustix::io::FdFlags::CLOEXEC)?;
        Ok(IfConfig { sock })
    }

    /// Sets the interface's MTU.
    pub fn set_mtu(&self, name: &str, mtu: u32) -> io::Result<()> {
        let mut req = IfReq::new(name)?;
        let v = i32::try_from(mtu).map_err(|_| io::Error::other("MTU too large"))?;
        req.data[..4].copy_from_slice(&v.to_ne_bytes());
        ifreq_ioctl(self.sock.as_fd(), SIOCSIFMTU, &mut req)
    }

    /// The interface's MTU.
    pub fn mtu(&self, name: &str) -> io::Result<u32> {
        let mut req = IfReq::new(name)?;
        ifreq_ioctl(self.sock.as_fd(), SIOCGIFMTU, &mut req)?;
        let v = i32::from_ne_bytes([req.data[0], req.data[1], req.data[2], req.data[3]]);
        Ok(u32::try_from(v).unwrap_or(0))
    }

    /// Whether the interface is administratively up (`ip link set NAME up`).
    pub fn is_up(&self, name: &str) -> io::Result<bool> {
        let mut req = IfReq::new(name)?;
        ifreq_ioctl(self.sock.as_fd(), SIOCGIFFLAGS, &mut req)?;
        let flags = i16::from_ne_bytes([req.data[0], req.data[1]]);
        Ok(flags & libc::IFF_UP as i16 != 0)
    }

    /// The interface's IPv4 address and netmask, `None` when it has none.
    pub fn ipv4(&self, name: &str) -> io::Result<Option<(Ipv4Addr, Ipv4Addr)>> {
        let mut req = IfReq::new(name)?;
        match ifreq_ioctl(self.sock.as_fd(), SIOCGIFADDR, &mut req) {
            Ok(()) => {}
            // EADDRNOTAVAIL: no address assigned yet.
            Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => return Ok(None),
            Err(e) => return Err(e),
        }
        let addr = sockaddr_in_addr(&req.data);
        let mut req = IfReq::new(name)?;
        ifreq_ioctl(self.sock.as_fd(), SIOCGIFNETMASK, &mut req)?;
        Ok(Some((addr, sockaddr_in_addr(&req.data))))
    }
}

/// The address of a `struct sockaddr_in` (family 2 bytes, port 2 bytes, address 4 bytes).
fn sockaddr_in_addr(data: &[u8; 24]) -> Ipv4Addr {
    Ipv4Addr::new(data[4], data[5], data[6], data[7])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_are_checked() {
        assert!(IfReq::new("ib0").is_ok());
        assert!(IfReq::new("").is_err());
        assert!(IfReq::new("a-name-much-too-long").is_err());
        assert_eq!(
            IfReq::new("ib0").map(|r| r.name()).ok().as_deref(),
            Some("ib0")
        );
    }

    #[test]
    fn ifreq_is_the_kernels_size() {
        assert_eq!(std::mem::size_of::<IfReq>(), 40);
    }
}
