//! A sysfs-style view of a host's devices in its runtime directory, `DIR/sys/class/infiniband/
//! NAME/...`, with the files rdma-core's tools read (through `ibv_read_sysfs_file`, which the
//! drop-in libibverbs points at this tree through `ibv_device::ibdev_path`) and libibumad
//! reads, in the kernel's formats: `node_type`, `node_guid`, `sys_image_guid`, `fw_ver`,
//! `hw_rev`, `hca_type`, `node_desc`, and per port `state`, `phys_state`, `rate`, `lid`,
//! `lid_mask_count`, `sm_lid`, `sm_sl`, `cap_mask`, `link_layer`, `gids/N`,
//! `gid_attrs/types/N`, `pkeys/0`; and `class/infiniband_verbs/` with each device's `ibdev`.
//!
//! The daemon keeps it current ([`SysfsTree::sync`] once a second, and at once when the SM
//! changes a port's state, LID, SM LID or CapabilityMask): a file is rewritten only when its
//! text changes. A new file appears whole (written aside, then renamed); one that exists is
//! rewritten in place — one write of its few bytes at its start, then its length — because
//! replacing it by rename makes and frees an inode per change, and when an SM brings a fabric
//! of 504 hosts up, ext4's inode allocator, scanning past the recently freed ones, took
//! seconds per turn of the loop. For the instant between the write and the truncation a
//! reader may see the new text followed by the tail of a longer old one, after the new text's
//! newline; the readers (libibumad, libibverbs) read the first line.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use softib_proto::DeviceInfo;

/// The tree of one host, and what was last written to it.
#[derive(Debug)]
pub struct SysfsTree {
    root: PathBuf,
    written: BTreeMap<PathBuf, String>,
    /// The directories made so far (a fabric's hosts write often; a mkdir per file adds up).
    dirs: std::collections::BTreeSet<PathBuf>,
}

impl SysfsTree {
    /// The tree under `dir/sys` (nothing is written until [`SysfsTree::sync`]).
    pub fn new(dir: &Path) -> SysfsTree {
        SysfsTree {
            root: dir.join("sys"),
            written: BTreeMap::new(),
            dirs: Default::default(),
        }
    }

    /// Writes what changed since the last call, and removes the files of devices that are
    /// gone.
    pub fn sync(&mut self, devices: &[DeviceInfo]) -> io::Result<()> {
        let mut now: BTreeMap<PathBuf, String> = BTreeMap::new();
        now.insert(
            PathBuf::from("class/infiniband_verbs/abi_version"),
            "6\n".into(),
        );
        for (i, d) in devices.iter().enumerate() {
            let dev = PathBuf::from("class/infiniband").join(&d.name);
            for (rel, text) in files(d) {
                now.insert(dev.join(rel), text);
            }
            now.insert(
                PathBuf::from(format!("class/infiniband_verbs/uverbs{i}/ibdev")),
                format!("{}\n", d.name),
            );
        }
        for (rel, text) in &now {
            if self.written.get(rel) == Some(text) {
                continue;
            }
            let path = self.root.join(rel);
            if let Some(dir) = path.parent() {
                if !self.dirs.contains(dir) {
                    std::fs::create_dir_all(dir)?;
                    self.dirs.insert(dir.to_path_buf());
                }
            }
            if !self.written.contains_key(rel) || rewrite_in_place(&path, text).is_err() {
                let tmp = path.with_extension("softib-tmp");
                std::fs::write(&tmp, text)?;
                std::fs::rename(&tmp, &path)?;
            }
        }
        for gone in self.written.keys().filter(|k| !now.contains_key(*k)) {
            let _ = std::fs::remove_file(self.root.join(gone));
        }
        self.written = now;
        Ok(())
    }
}

/// Replaces the text of the file at `path`, which exists: one write at its start, then its
/// length. See the module docs for why not by rename.
fn rewrite_in_place(path: &Path, text: &str) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all_at(text.as_bytes(), 0)?;
    f.set_len(text.len() as u64)
}

fn guid(v: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (v >> 48) & 0xffff,
        (v >> 32) & 0xffff,
        (v >> 16) & 0xffff,
        v & 0xffff
    )
}

/// The kernel's `rate` file ("40 Gb/sec (4X QDR)") from PortInfo's width and speed codes.
fn rate(width: u8, speed: u8) -> String {
    let (tenths, name) = match speed {
        2 => (50, "DDR"),
        4 => (100, "QDR"),
        8 => (100, "FDR10"),
        16 => (140, "FDR"),
        32 => (250, "EDR"),
        64 => (500, "HDR"),
        128 => (1000, "NDR"),
        _ => (25, "SDR"),
    };
    let lanes = match width {
        1 => 1,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 4,
    };
    let r = tenths * lanes;
    let half = if r % 10 != 0 { ".5" } else { "" };
    format!("{}{half} Gb/sec ({lanes}X {name})\n", r / 10)
}

/// A device's files, by path relative to its directory.
pub fn files(d: &DeviceInfo) -> Vec<(String, String)> {
    let mut f = vec![
        ("node_type".to_string(), "1: CA\n".to_string()),
        ("node_guid".into(), format!("{}\n", guid(d.node_guid.0))),
        (
            "sys_image_guid".into(),
            format!("{}\n", guid(d.sys_image_guid.0)),
        ),
        ("fw_ver".into(), format!("{}\n", d.fw_ver)),
        (
            "hw_rev".into(),
            // Empty where there is no hardware (rxe), the revision in hex otherwise.
            if d.ca_type.is_empty() {
                "\n".into()
            } else {
                format!("{:x}\n", d.hw_ver)
            },
        ),
        ("hca_type".into(), format!("{}\n", d.ca_type)),
        ("node_desc".into(), format!("{}\n", d.description)),
    ];
    for p in &d.ports {
        let n = p.number;
        let state = softib_wire::mad::attr::PortState::from(p.state).sysfs_name();
        let phys = softib_wire::mad::attr::PortPhysicalState::from(p.phys_state).sysfs_name();
        let port = |name: &str| format!("ports/{n}/{name}");
        f.push((port("state"), format!("{}: {state}\n", p.state)));
        f.push((port("phys_state"), format!("{}: {phys}\n", p.phys_state)));
        f.push((port("rate"), rate(p.width, p.speed)));
        f.push((port("lid"), format!("0x{:x}\n", p.lid.0)));
        f.push((port("lid_mask_count"), format!("{}\n", p.lmc)));
        f.push((port("sm_lid"), format!("0x{:x}\n", p.sm_lid.0)));
        f.push((port("sm_sl"), "0\n".into()));
        f.push((port("cap_mask"), format!("0x{:08x}\n", p.capability_mask)));
        f.push((
            port("link_layer"),
            if p.link_layer_ib {
                "InfiniBand\n".into()
            } else {
                "Ethernet\n".into()
            },
        ));
        f.push((port("pkeys/0"), "0xffff\n".into()));
        for (i, g) in p.gids.iter().enumerate() {
            let text: Vec<String> =
                g.0.chunks(2)
                    .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
                    .collect();
            f.push((port(&format!("gids/{i}")), format!("{}\n", text.join(":"))));
            f.push((
                port(&format!("gid_attrs/types/{i}")),
                if p.link_layer_ib {
                    "IB/RoCE v1\n".into()
                } else {
                    "RoCE v2\n".into()
                },
            ));
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use softib_proto::PortInfo;
    use softib_wire::{Gid, Guid, Mtu};

    fn roce() -> DeviceInfo {
        DeviceInfo {
            name: "rxe0".into(),
            ca_type: String::new(),
            description: "rxe0 lo".into(),
            fw_ver: String::new(),
            hw_ver: 0,
            node_guid: Guid(0x0200_00ff_fe00_0002),
            sys_image_guid: Guid(0x0200_00ff_fe00_0002),
            vendor_id: 0xff_ffff,
            vendor_part_id: 0,
            attr: softib_engine::DeviceAttr::default(),
            ports: vec![PortInfo::roce(
                Guid(0x0200_00ff_fe00_0002),
                true,
                Mtu::Mtu4096,
                Mtu::Mtu1024,
                vec![Gid([
                    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 2,
                ])],
            )],
            drops: Vec::new(),
            verbs: None,
        }
    }

    #[test]
    fn files_are_in_the_kernels_formats() {
        let f: BTreeMap<String, String> = files(&roce()).into_iter().collect();
        assert_eq!(f["node_guid"], "0200:00ff:fe00:0002\n");
        assert_eq!(f["ports/1/state"], "4: ACTIVE\n");
        assert_eq!(f["ports/1/phys_state"], "5: LinkUp\n");
        assert_eq!(f["ports/1/rate"], "10 Gb/sec (1X FDR10)\n");
        assert_eq!(f["ports/1/link_layer"], "Ethernet\n");
        assert_eq!(
            f["ports/1/gids/0"],
            "0000:0000:0000:0000:0000:ffff:7f00:0002\n"
        );
        assert_eq!(f["ports/1/gid_attrs/types/0"], "RoCE v2\n");
        assert_eq!(f["ports/1/cap_mask"], "0x00010000\n");
        assert_eq!(f["fw_ver"], "\n");
        assert_eq!(rate(2, 4), "40 Gb/sec (4X QDR)\n");
        assert_eq!(rate(1, 1), "2.5 Gb/sec (1X SDR)\n");
    }

    #[test]
    fn sync_writes_changes_and_removes_what_is_gone() {
        let dir = std::env::temp_dir().join(format!("softib-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut t = SysfsTree::new(&dir);
        let mut d = roce();
        t.sync(std::slice::from_ref(&d)).unwrap();
        let state = dir.join("sys/class/infiniband/rxe0/ports/1/state");
        assert_eq!(std::fs::read_to_string(&state).unwrap(), "4: ACTIVE\n");
        use std::os::unix::fs::MetadataExt;
        let inode = std::fs::metadata(&state).unwrap().ino();
        d.ports[0].state = 1;
        t.sync(std::slice::from_ref(&d)).unwrap();
        // Shorter, and in the same file: no inode made and freed per change.
        assert_eq!(std::fs::read_to_string(&state).unwrap(), "1: DOWN\n");
        assert_eq!(std::fs::metadata(&state).unwrap().ino(), inode);
        t.sync(&[]).unwrap();
        assert!(!state.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
