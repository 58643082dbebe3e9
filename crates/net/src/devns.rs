//! A private `/dev` with extra device files, for a program about to be exec'd: the calling
//! process moves into a mount namespace of its own (and, unprivileged, a user namespace that
//! maps its uid and gid to themselves, so that it may mount), where `/dev` is a tmpfs holding
//! everything the real `/dev` holds (each entry bind-mounted from it, directories with their
//! submounts) plus the files asked for, each a bind mount of `/dev/null`.
//!
//! What it is for: UCX offers a verbs device only if `/dev/infiniband/<dev_name>` is a
//! character device it may read and write (it only `stat`s and `access`es it), which
//! softib's devices, having no kernel driver, do not have. Nothing outside the namespace
//! changes, and it ends with the program.
//!
//! Must be called while the process has one thread (a user namespace requires it).

use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};
use rustix::mount::{MountFlags, MountPropagationFlags};

/// Moves into a private mount namespace whose `/dev` also holds `extra` (paths under
/// `/dev`, e.g. `infiniband/uverbs0`).
pub fn private_dev(extra: &[&str]) -> io::Result<()> {
    let root = rustix::process::geteuid().is_root();
    let flags = if root {
        rustix::thread::UnshareFlags::NEWNS
    } else {
        rustix::thread::UnshareFlags::NEWNS | rustix::thread::UnshareFlags::NEWUSER
    };
    let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
    #[allow(unsafe_code)]
    // SAFETY: no FILES flag: the descriptor table is not unshared, so no thread can be left
    // with descriptors of another table (and the caller has no other thread).
    unsafe { rustix::thread::unshare_unsafe(flags) }?;
    if !root {
        // The new user namespace maps us to ourselves: same uid and gid inside, and the
        // capabilities to mount in the namespace we own (dropped again at exec).
        std::fs::write("/proc/self/setgroups", "deny")?;
        std::fs::write("/proc/self/uid_map", format!("{0} {0} 1", uid.as_raw()))?;
        std::fs::write("/proc/self/gid_map", format!("{0} {0} 1", gid.as_raw()))?;
    }
    // Nothing mounted here may reach the host's namespace.
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )?;
    // The real /dev stays reachable through this descriptor once the tmpfs hides it.
    let old = rustix::fs::open(
        "/dev",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let old_path = |name: &std::ffi::OsStr| {
        let mut p = std::path::PathBuf::from(format!("/proc/self/fd/{}", old.as_raw_fd()));
        p.push(name);
        p
    };
    let entries: Vec<(std::ffi::OsString, FileType)> = std::fs::read_dir("/dev")?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let t = rustix::fs::lstat(e.path()).ok()?;
            Some((e.file_name(), FileType::from_raw_mode(t.st_mode)))
        })
        .collect();
    rustix::mount::mount(
        "tmpfs",
        "/dev",
        "tmpfs",
        MountFlags::NOSUID,
        Some(c"mode=755"),
    )?;
    for (name, kind) in &entries {
        let to = Path::new("/dev").join(name);
        match kind {
            FileType::Symlink => {
                let target = std::fs::read_link(old_path(name))?;
                std::os::unix::fs::symlink(target, &to)?;
            }
            FileType::Directory => {
                std::fs::create_dir(&to)?;
                rustix::mount::mount_bind_recursive(old_path(name), &to)?;
            }
            _ => {
                std::fs::File::create(&to)?;
                rustix::mount::mount_bind(old_path(name), &to)?;
            }
        }
    }
    for e in extra {
        let first = Path::new(e)
            .components()
            .next()
            .map(|c| c.as_os_str().to_os_string());
        if entries.iter().any(|(n, _)| Some(n) == first.as_ref()) {
            // Under a directory of the real /dev: leave it as it is.
            continue;
        }
        let to = Path::new("/dev").join(e);
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir)?;
        }
        if rustix::fs::lstat(&to).is_err() {
            std::fs::File::create(&to)?;
            rustix::mount::mount_bind(old_path("null".as_ref()), &to)?;
        }
    }
    Ok(())
}
