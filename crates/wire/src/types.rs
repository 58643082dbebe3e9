//! Identifiers the specification names, as newtypes with the spec's usual formatting.

use core::fmt;

/// A Local Identifier (IBA §4.1.3): 16 bits, routed by switches. `0xFFFF` is the permissive LID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Lid(pub u16);

impl Lid {
    /// The permissive LID (IBA §4.1.3, C4-1), used by directed-route SMPs.
    pub const PERMISSIVE: Lid = Lid(0xFFFF);
    /// The reserved LID 0: "no LID assigned yet".
    pub const UNASSIGNED: Lid = Lid(0);
    /// Whether this LID is in the multicast range 0xC000..=0xFFFE.
    pub fn is_multicast(self) -> bool {
        (0xC000..0xFFFF).contains(&self.0)
    }
}

impl fmt::Display for Lid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A Queue Pair Number: 24 bits (IBA §9.2, BTH DestQP). QP0 is the SMI, QP1 the GSI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Qpn(u32);

/// Deserializes the plain 24-bit value (as the derived form would, for formats that write a
/// newtype as its content) and refuses one with any of the upper 8 bits set, so a value read
/// from a control socket keeps the invariant [`Qpn::new`] keeps.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Qpn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Qpn, D::Error> {
        let v = <u32 as serde::Deserialize>::deserialize(d)?;
        if v > 0x00FF_FFFF {
            return Err(<D::Error as serde::de::Error>::custom("a QPN has 24 bits"));
        }
        Ok(Qpn(v))
    }
}

impl Qpn {
    /// The subnet management interface's QP.
    pub const SMI: Qpn = Qpn(0);
    /// The general services interface's QP.
    pub const GSI: Qpn = Qpn(1);
    /// The multicast QPN (all 24 bits set), used with a multicast DLID.
    pub const MULTICAST: Qpn = Qpn(0x00FF_FFFF);
    /// A QPN from the low 24 bits of `value` (the upper 8 bits are dropped).
    pub const fn new(value: u32) -> Qpn {
        Qpn(value & 0x00FF_FFFF)
    }
    /// The 24-bit value.
    pub const fn value(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Qpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:06x}", self.0)
    }
}

/// A Partition Key (IBA §10.9): bit 15 is the membership type (1 = full), bits 0..15 the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PKey(pub u16);

impl PKey {
    /// The default partition, full membership.
    pub const DEFAULT: PKey = PKey(0xFFFF);
    /// The 15-bit partition base, without the membership bit.
    pub fn base(self) -> u16 {
        self.0 & 0x7FFF
    }
    /// Whether the key denotes full membership.
    pub fn is_full_member(self) -> bool {
        self.0 & 0x8000 != 0
    }
}

impl fmt::Display for PKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:04x}", self.0)
    }
}

/// A Queue Key (IBA §10.2.4): checks UD and GSI access. Bit 31 set means privileged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct QKey(pub u32);

impl QKey {
    /// The well-known Q_Key of the GSI (QP1), IBA §13.5.3.
    pub const GSI: QKey = QKey(0x8001_0000);
    /// Whether this is a privileged (controlled) Q_Key: bit 31 set.
    pub fn is_privileged(self) -> bool {
        self.0 & 0x8000_0000 != 0
    }
}

impl fmt::Display for QKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:08x}", self.0)
    }
}

/// A Remote Key (R_Key), naming a memory region or window to the remote side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RKey(pub u32);

impl fmt::Display for RKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:08x}", self.0)
    }
}

/// A 64-bit Globally Unique Identifier (EUI-64) of a node, port or system image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Guid(pub u64);

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:016x}", self.0)
    }
}

/// A 128-bit Global Identifier: subnet prefix and interface ID, or an IPv6 address (RoCEv2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID made from a subnet prefix and a port GUID (IBA §4.1.1).
    pub fn from_prefix_guid(prefix: u64, guid: Guid) -> Gid {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&prefix.to_be_bytes());
        b[8..].copy_from_slice(&guid.0.to_be_bytes());
        Gid(b)
    }
    /// The RoCEv2 GID of an IPv4 address: the IPv4-mapped IPv6 address `::ffff:a.b.c.d`.
    pub fn from_ipv4(addr: [u8; 4]) -> Gid {
        let mut b = [0u8; 16];
        b[10] = 0xFF;
        b[11] = 0xFF;
        b[12..].copy_from_slice(&addr);
        Gid(b)
    }
    /// The IPv4 address if this GID is IPv4-mapped.
    pub fn to_ipv4(&self) -> Option<[u8; 4]> {
        if self.0[..10].iter().all(|&b| b == 0) && self.0[10] == 0xFF && self.0[11] == 0xFF {
            Some([self.0[12], self.0[13], self.0[14], self.0[15]])
        } else {
            None
        }
    }
    /// The upper 64 bits: the subnet prefix.
    pub fn prefix(&self) -> u64 {
        u64::from_be_bytes([
            self.0[0], self.0[1], self.0[2], self.0[3], self.0[4], self.0[5], self.0[6], self.0[7],
        ])
    }
    /// The lower 64 bits: the interface ID (a port GUID on IB).
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes([
            self.0[8], self.0[9], self.0[10], self.0[11], self.0[12], self.0[13], self.0[14],
            self.0[15],
        ])
    }
}

impl fmt::Display for Gid {
    /// Colon-separated 16-bit groups as libibverbs and ibstat print GIDs
    /// (`fe80:0000:0000:0000:e41d:2d03:00b4:7d01`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for i in 0..8 {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", self.0[2 * i], self.0[2 * i + 1])?;
        }
        Ok(())
    }
}
