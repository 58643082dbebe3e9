//! The sysfs-style files: `ibv_get_sysfs_path` and `ibv_read_sysfs_file`, as rdma-core
//! reads them. A softib device's directory (`ibv_device::ibdev_path`) is under its daemon's
//! runtime directory, `DIR/sys/class/infiniband/NAME`, which the daemon keeps up to date
//! (`board_id`, `fw_ver`, `node_guid`, port states, GIDs, ...), so tools that read files
//! there (`ibv_devinfo` reads `board_id`) see softib's values.

use std::ffi::{c_char, c_int, CString};
use std::io::Read;
use std::sync::OnceLock;

use crate::device::c_str;

/// `ibv_get_sysfs_path`: `$SYSFS_PATH` when set (as rdma-core, unless set-uid), else the
/// runtime directory's `sys`.
pub(crate) extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    static PATH: OnceLock<CString> = OnceLock::new();
    PATH.get_or_init(|| {
        // SAFETY: getuid and geteuid only read the process's ids.
        let suid = unsafe { libc::getuid() != libc::geteuid() };
        let path = match std::env::var("SYSFS_PATH") {
            Ok(p) if !suid => p.trim_end_matches('/').to_string(),
            _ => softib::runtime_dir()
                .join("sys")
                .to_string_lossy()
                .into_owned(),
        };
        CString::new(path).unwrap_or_default()
    })
    .as_ptr()
}

/// `ibv_read_sysfs_file`: the file's contents without their final newline, NUL-terminated,
/// and their length; -1 when it cannot be read or does not fit.
pub(crate) extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    let r = crate::catch(|| -> Option<c_int> {
        let path = std::path::Path::new(c_str(dir).ok()?).join(c_str(file).ok()?);
        if buf.is_null() || size == 0 {
            return None;
        }
        let mut data = Vec::new();
        std::fs::File::open(path)
            .ok()?
            .take(size as u64)
            .read_to_end(&mut data)
            .ok()?;
        let mut len = data.len();
        if data.last() == Some(&b'\n') {
            len -= 1;
        } else if len == size {
            // It would not fit with its NUL.
            return None;
        }
        // SAFETY: the caller's buffer has `size` bytes; `len < size`.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), buf as *mut u8, len);
            *buf.add(len) = 0;
        }
        c_int::try_from(len).ok()
    });
    r.ok().flatten().unwrap_or(-1)
}
