//! A pcap writer for `softib capture`: the frames a port sends and receives, in the classic
//! libpcap format that tshark and `softib pcap decode` read.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// LINKTYPE_INFINIBAND: native IB packets, LRH first (what an IB cable carries).
pub const LINKTYPE_INFINIBAND: u32 = 247;
/// LINKTYPE_RAW: raw IPv4/IPv6 packets (RoCEv2 with its IP and UDP headers).
pub const LINKTYPE_RAW: u32 = 101;

/// An open capture file.
#[derive(Debug)]
pub struct PcapWriter {
    out: BufWriter<File>,
    packets: u64,
}

impl PcapWriter {
    /// Creates `path` with a pcap header for `linktype`.
    pub fn create(path: &Path, linktype: u32) -> io::Result<PcapWriter> {
        let f = File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("creating {}: {e}", path.display())))?;
        let mut out = BufWriter::new(f);
        out.write_all(&0xa1b2_c3d4u32.to_le_bytes())?;
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&0i32.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        out.write_all(&65535u32.to_le_bytes())?;
        out.write_all(&linktype.to_le_bytes())?;
        Ok(PcapWriter { out, packets: 0 })
    }

    /// Appends one packet, stamped now.
    pub fn write(&mut self, packet: &[u8]) -> io::Result<()> {
        self.write_at(SystemTime::now(), packet)
    }

    /// Writes one packet seen at `at` (by another process, which said when).
    pub fn write_at(&mut self, at: SystemTime, packet: &[u8]) -> io::Result<()> {
        let t = at.duration_since(UNIX_EPOCH).unwrap_or_default();
        let len = u32::try_from(packet.len()).unwrap_or(u32::MAX);
        self.out.write_all(&(t.as_secs() as u32).to_le_bytes())?;
        self.out.write_all(&t.subsec_micros().to_le_bytes())?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(packet)?;
        self.packets += 1;
        Ok(())
    }

    /// Packets written.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Flushes to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
