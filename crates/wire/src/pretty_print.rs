//! One-line, tcpdump-style descriptions of packets, for logs and `softib pcap decode`.
//!
//! Each `Display` impl prints only what the headers say; nothing here can fail or allocate.

use core::fmt;

use crate::ip::IpRepr;
use crate::packet::{IbPacketRepr, RoceV2Repr, TransportRepr};

impl fmt::Display for TransportRepr {
    /// `RC SEND_ONLY QP=0x000012 PSN=11487214 ackreq se pad=2 pkey=0xffff RETH(va=0x… rkey=0x… len=…)`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.bth;
        write!(f, "{} QP={} PSN={}", b.opcode, b.dest_qpn, b.psn)?;
        if b.ack_req {
            f.write_str(" ackreq")?;
        }
        if b.solicited {
            f.write_str(" se")?;
        }
        if b.mig_req {
            f.write_str(" migreq")?;
        }
        if b.fecn {
            f.write_str(" fecn")?;
        }
        if b.becn {
            f.write_str(" becn")?;
        }
        if b.pad_count != 0 {
            write!(f, " pad={}", b.pad_count)?;
        }
        write!(f, " pkey={}", b.pkey)?;
        if let Some(d) = &self.deth {
            write!(f, " DETH(qkey={} srcqp={})", d.qkey, d.src_qpn)?;
        }
        if let Some(r) = &self.reth {
            write!(
                f,
                " RETH(va=0x{:x} rkey={} len={})",
                r.va, r.rkey, r.dma_len
            )?;
        }
        if let Some(a) = &self.atomic_eth {
            write!(
                f,
                " AtomicETH(va=0x{:x} rkey={} swap_add=0x{:x} compare=0x{:x})",
                a.va, a.rkey, a.swap_add, a.compare
            )?;
        }
        if let Some(a) = &self.aeth {
            write!(f, " AETH({} msn={})", a.syndrome, a.msn)?;
        }
        if let Some(a) = &self.atomic_ack_eth {
            write!(f, " AtomicAckETH(orig=0x{:x})", a.orig)?;
        }
        if let Some(i) = &self.immdt {
            write!(f, " imm=0x{:08x}", i.data)?;
        }
        if let Some(i) = &self.ieth {
            write!(f, " IETH(rkey={})", i.rkey)?;
        }
        Ok(())
    }
}

/// Prints an IPv4 address or an IPv6 address in its usual text form.
struct IpAddr<'a>(&'a IpRepr, bool);

impl fmt::Display for IpAddr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpRepr::V4(r) => {
                let a = if self.1 { r.src } else { r.dst };
                write!(f, "{}", core::net::Ipv4Addr::from(a))
            }
            IpRepr::V6(r) => {
                let a = if self.1 { r.src } else { r.dst };
                write!(f, "{}", core::net::Ipv6Addr::from(a))
            }
        }
    }
}

impl fmt::Display for RoceV2Repr<'_> {
    /// `10.0.0.1.49732 > 10.0.0.2.4791: RC SEND_ONLY QP=… PSN=… … len=64`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{} > {}.{}: {} len={}",
            IpAddr(&self.ip, true),
            self.udp.src_port,
            IpAddr(&self.ip, false),
            self.udp.dst_port,
            self.transport,
            self.payload.len()
        )
    }
}

impl fmt::Display for IbPacketRepr<'_> {
    /// `LID 1 > LID 2 VL0 SL0: UD SEND_ONLY QP=… len=256`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LID {} > LID {} VL{} SL{}",
            self.lrh.slid, self.lrh.dlid, self.lrh.vl, self.lrh.sl
        )?;
        if let Some(g) = &self.grh {
            write!(f, " GRH({} > {} hop={})", g.sgid, g.dgid, g.hop_limit)?;
        }
        write!(f, ": {} len={}", self.transport, self.payload.len())
    }
}
