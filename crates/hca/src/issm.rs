//! The IsSM files: what `umad_get_issm_path` names for a port (`DIR/issm/NAME-PORT`, a FIFO
//! per InfiniBand port of the host). As with the kernel's `/dev/infiniband/issmN`, a program
//! holding the file open is an SM on that port: the port's CapabilityMask says IsSM while it
//! does, and not once it closes it or exits (opensm opens it at start, `osm_vendor_set_sm`).
//!
//! The daemon notices a reader by opening the FIFO's write end without blocking (which fails
//! with ENXIO while nobody reads it) and its going away by POLLERR on that end; it looks
//! [`IssmFiles::poll`] when it brings the sysfs files up to date.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use softib_proto::DeviceInfo;

/// The FIFOs of a host's ports and who holds them.
#[derive(Debug)]
pub struct IssmFiles {
    dir: PathBuf,
    /// (device index, port) → the FIFO and, while a program holds it, our write end.
    ports: BTreeMap<(u32, u8), (PathBuf, Option<OwnedFd>)>,
    failed: bool,
}

impl IssmFiles {
    /// The files under `runtime_dir/issm` (made by the first [`IssmFiles::poll`]).
    pub fn new(runtime_dir: &Path) -> IssmFiles {
        IssmFiles {
            dir: runtime_dir.join("issm"),
            ports: BTreeMap::new(),
            failed: false,
        }
    }

    /// The InfiniBand ports of `devices`, as [`IssmFiles::poll`] takes them.
    pub fn ib_ports(devices: &[DeviceInfo]) -> Vec<(u32, String, u8)> {
        let mut v = Vec::new();
        for (i, d) in devices.iter().enumerate() {
            for p in d.ports.iter().filter(|p| p.link_layer_ib) {
                v.push((i as u32, d.name.clone(), p.number));
            }
        }
        v
    }

    /// Makes the FIFOs of `ports` (device index, device name, port) that are missing, and
    /// returns the ports whose IsSM changed: (device index, port, now held).
    pub fn poll(&mut self, ports: &[(u32, String, u8)]) -> Vec<(u32, u8, bool)> {
        let mut changes = Vec::new();
        for (dev, name, number) in ports {
            let key = (*dev, *number);
            if !self.ports.contains_key(&key) {
                let path = self.dir.join(format!("{name}-{number}"));
                if let Err(e) = make_fifo(&path) {
                    if !self.failed {
                        eprintln!("softibd: cannot make {}: {e}", path.display());
                        self.failed = true;
                    }
                    continue;
                }
                self.ports.insert(key, (path, None));
            }
            let Some((path, held)) = self.ports.get_mut(&key) else {
                continue;
            };
            let was = held.is_some();
            *held = match held.take() {
                Some(fd) if still_read(&fd) => Some(fd),
                _ => rustix::fs::open(
                    &*path,
                    OFlags::WRONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .ok(),
            };
            if was != held.is_some() {
                changes.push((key.0, key.1, !was));
            }
        }
        changes
    }
}

/// Makes the FIFO at `path` unless one is there (a stale file of another kind is replaced).
fn make_fifo(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_fifo() => return Ok(()),
        Ok(_) => std::fs::remove_file(path)?,
        Err(_) => {}
    }
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )?;
    Ok(())
}

/// Whether somebody still has the FIFO open for reading (POLLERR on the write end says not).
fn still_read(fd: &OwnedFd) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        fd,
        rustix::event::PollFlags::OUT,
    )];
    match rustix::event::poll(
        &mut fds,
        Some(&rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        }),
    ) {
        Ok(_) => !fds[0].revents().intersects(rustix::event::PollFlags::ERR),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn holding_the_file_open_is_being_the_sm() {
        let dir = std::env::temp_dir().join(format!("softib-issm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut f = IssmFiles::new(&dir);
        let devs = [(0, "mlx4_0".to_string(), 1)];
        assert!(f.poll(&devs).is_empty());
        let path = dir.join("issm/mlx4_0-1");
        // As opensm opens it: read-only, not blocking.
        let sm = rustix::fs::open(&path, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty()).unwrap();
        assert_eq!(f.poll(&devs), [(0, 1, true)]);
        assert!(f.poll(&devs).is_empty());
        drop(sm);
        assert_eq!(f.poll(&devs), [(0, 1, false)]);
        assert!(f.poll(&devs).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
