//! CA and port enumeration, as libibumad does it from sysfs — here from the host's tree in its
//! runtime directory (`DIR/sys/class/infiniband/NAME/...`, which the daemon keeps:
//! `softib_hca::sysfs`), or from `$SYSFS_PATH` as rdma-core's libibverbs allows. Numbers are
//! read as `strtoul(…, 0)` reads them ("4: ACTIVE" is 4, "40 Gb/sec (4X QDR)" is 40), the
//! default CA and port are chosen as rdma-core's `resolve_ca_name`/`resolve_ca_port` choose
//! them (the first CA with an Active InfiniBand port, else one whose link is up, ...).

use std::ffi::{c_char, c_int, CString};
use std::path::{Path, PathBuf};

use softib_verbs_abi::umad::{
    UmadCa, UmadDeviceNode, UmadPort, UMAD_CA_MAX_PORTS, UMAD_CA_NAME_LEN, UMAD_MAX_DEVICES,
};

use crate::{c_str, ffi_neg};

/// The sysfs root: `$SYSFS_PATH` (as rdma-core, unless set-uid), else the runtime
/// directory's `sys`.
pub(crate) fn sysfs_root() -> PathBuf {
    // SAFETY: getuid and geteuid only read the process's ids.
    let suid = unsafe { libc::getuid() != libc::geteuid() };
    match std::env::var("SYSFS_PATH") {
        Ok(p) if !suid && !p.is_empty() => PathBuf::from(p.trim_end_matches('/')),
        _ => softib::runtime_dir().join("sys"),
    }
}

fn class_dir() -> PathBuf {
    sysfs_root().join("class/infiniband")
}

/// `strtoul(text, NULL, 0)`: leading blanks, then hex (`0x`), octal (`0`) or decimal digits,
/// stopping at the first other character; `None` when there is no digit.
pub(crate) fn parse_uint(text: &str) -> Option<u64> {
    let t = text.trim_start();
    let (digits, radix) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (h, 16)
    } else if t.starts_with('0') {
        (t, 8)
    } else {
        (t, 10)
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    if end == 0 {
        return None;
    }
    u64::from_str_radix(&digits[..end], radix).ok()
}

/// A GUID file ("0002:c903:0000:1001") as a number.
fn parse_guid(text: &str) -> Option<u64> {
    let hex: String = text.trim().split(':').collect();
    (hex.len() == 16).then(|| u64::from_str_radix(&hex, 16).ok())?
}

/// A GID file ("fe80:0000:0000:0000:0002:c903:0000:1001") as 16 bytes.
fn parse_gid(text: &str) -> Option<[u8; 16]> {
    let hex: String = text.trim().split(':').collect();
    if hex.len() != 32 {
        return None;
    }
    u128::from_str_radix(&hex, 16).ok().map(u128::to_be_bytes)
}

fn read(dir: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(file)).ok()
}

fn read_uint(dir: &Path, file: &str) -> Result<u64, c_int> {
    read(dir, file)
        .as_deref()
        .and_then(parse_uint)
        .ok_or(libc::EIO)
}

/// One port as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PortDesc {
    pub number: u8,
    pub base_lid: u32,
    pub lmc: u32,
    pub sm_lid: u32,
    pub sm_sl: u32,
    pub state: u32,
    pub phys_state: u32,
    pub rate: u32,
    pub capmask: u32,
    pub gid: [u8; 16],
    pub pkeys: Vec<u16>,
    pub link_layer: String,
}

impl PortDesc {
    fn is_ib(&self) -> bool {
        self.link_layer == "InfiniBand" || self.link_layer == "IB"
    }
}

/// One CA as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CaDesc {
    pub name: String,
    pub node_type: u32,
    pub fw_ver: String,
    pub ca_type: String,
    pub hw_ver: String,
    pub node_guid: u64,
    pub system_guid: u64,
    /// By port number (0 for a switch's).
    pub ports: Vec<PortDesc>,
}

impl CaDesc {
    fn numports(&self) -> u8 {
        self.ports.iter().map(|p| p.number).max().unwrap_or(0)
    }

    fn port(&self, n: u8) -> Option<&PortDesc> {
        self.ports.iter().find(|p| p.number == n)
    }
}

fn read_port(dir: &Path, number: u8) -> Result<PortDesc, c_int> {
    let d = dir.join(number.to_string());
    let pkey_dir = d.join("pkeys");
    let mut pkeys: Vec<(usize, u16)> = Vec::new();
    for e in std::fs::read_dir(&pkey_dir)
        .map_err(|_| libc::EIO)?
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(i) = name.parse::<usize>() else {
            continue;
        };
        let v = read_uint(&pkey_dir, &name).unwrap_or(0);
        pkeys.push((i, v as u16));
    }
    if pkeys.is_empty() {
        return Err(libc::EIO);
    }
    let size = pkeys.iter().map(|(i, _)| i + 1).max().unwrap_or(0);
    let mut table = vec![0u16; size];
    for (i, v) in pkeys {
        table[i] = v;
    }
    Ok(PortDesc {
        number,
        base_lid: read_uint(&d, "lid")? as u32,
        lmc: read_uint(&d, "lid_mask_count")? as u32,
        sm_lid: read_uint(&d, "sm_lid")? as u32,
        sm_sl: read_uint(&d, "sm_sl")? as u32,
        state: read_uint(&d, "state")? as u32,
        phys_state: read_uint(&d, "phys_state")? as u32,
        rate: read_uint(&d, "rate")? as u32,
        capmask: read_uint(&d, "cap_mask")? as u32,
        gid: read(&d, "gids/0")
            .as_deref()
            .and_then(parse_gid)
            .ok_or(libc::EIO)?,
        pkeys: table,
        link_layer: read(&d, "link_layer")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| "IB".into()),
    })
}

/// Reads CA `name` (ENOENT when there is none, EIO when its files are not what sysfs has).
pub(crate) fn read_ca(name: &str) -> Result<CaDesc, c_int> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(libc::ENOENT);
    }
    let dir = class_dir().join(name);
    let node_type = read_uint(&dir, "node_type").map_err(|_| libc::ENOENT)? as u32;
    let text = |f: &str| {
        read(&dir, f)
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default()
    };
    let guid = |f: &str| {
        read(&dir, f)
            .as_deref()
            .and_then(parse_guid)
            .ok_or(libc::EIO)
    };
    let ports_dir = dir.join("ports");
    let mut numbers: Vec<u8> = Vec::new();
    for e in std::fs::read_dir(&ports_dir)
        .map_err(|_| libc::ENOENT)?
        .flatten()
    {
        let n = e.file_name().to_string_lossy().parse::<u8>();
        match n {
            Ok(n) if usize::from(n) < UMAD_CA_MAX_PORTS => numbers.push(n),
            _ => return Err(libc::EIO),
        }
    }
    numbers.sort_unstable();
    let ports = numbers
        .into_iter()
        .map(|n| read_port(&ports_dir, n))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(CaDesc {
        name: name.to_string(),
        node_type,
        fw_ver: text("fw_ver"),
        ca_type: text("hca_type"),
        hw_ver: text("hw_rev"),
        node_guid: guid("node_guid")?,
        system_guid: guid("sys_image_guid")?,
        ports,
    })
}

/// The CA names, sorted, of the IB node types (1–3).
pub(crate) fn ca_names() -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(class_dir()) else {
        return Vec::new();
    };
    let mut names: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            read_uint(&class_dir().join(n), "node_type").is_ok_and(|t| (1..=3).contains(&t))
        })
        .collect();
    names.sort();
    names
}

/// rdma-core's `resolve_ca_port`: for a requested port (`port > 0`), `Ok(true)` if it is an
/// Active IB port, `Ok(false)` if its link is not disabled; otherwise the first Active IB
/// port (`true`), else the first linked-up one, else the first not disabled (`false`).
fn resolve_port(ca: &CaDesc, port: &mut u8) -> Result<bool, ()> {
    if ca.node_type == 2 {
        *port = 0;
        return Ok(true);
    }
    if *port > 0 {
        let p = ca.port(*port).filter(|p| p.is_ib()).ok_or(())?;
        return match (p.state, p.phys_state) {
            (4, _) => Ok(true),
            (_, 3) => Err(()),
            _ => Ok(false),
        };
    }
    let ib = || ca.ports.iter().filter(|p| p.is_ib());
    if let Some(p) = ib().find(|p| p.state == 4) {
        *port = p.number;
        return Ok(true);
    }
    if let Some(p) = ib()
        .find(|p| p.phys_state == 5)
        .or_else(|| ca.ports.iter().find(|p| p.phys_state != 3))
    {
        *port = p.number;
        return Ok(false);
    }
    Err(())
}

/// rdma-core's `resolve_ca_name`: the CA named (its best port found when `port` is 0), or the
/// first CA with an Active port, else the first with a usable one. ENODEV when none.
pub(crate) fn resolve(name: Option<&str>, port: Option<&mut u8>) -> Result<String, c_int> {
    match (name, port) {
        (Some(n), None) => Ok(n.to_string()),
        (Some(n), Some(p)) if *p != 0 => Ok(n.to_string()),
        (Some(n), Some(p)) => {
            let ca = read_ca(n)?;
            resolve_port(&ca, p).map_err(|_| libc::ENODEV)?;
            Ok(n.to_string())
        }
        (None, mut port) => {
            let mut fallback: Option<(String, u8)> = None;
            for n in ca_names() {
                let Ok(ca) = read_ca(&n) else { continue };
                let mut p = port.as_deref().copied().unwrap_or(0);
                match resolve_port(&ca, &mut p) {
                    Ok(true) => {
                        if let Some(bp) = port.as_deref_mut() {
                            *bp = p;
                        }
                        return Ok(n);
                    }
                    Ok(false) if fallback.is_none() => fallback = Some((n, p)),
                    _ => {}
                }
            }
            let (n, p) = fallback.ok_or(libc::ENODEV)?;
            if let Some(bp) = port {
                *bp = p;
            }
            Ok(n)
        }
    }
}

fn opt_str<'a>(p: *const c_char) -> Result<Option<&'a str>, c_int> {
    if p.is_null() {
        Ok(None)
    } else {
        c_str(p).map(Some)
    }
}

fn copy_name(dst: &mut [c_char], src: &str) {
    dst.fill(0);
    let room = dst.len().saturating_sub(1);
    for (d, s) in dst.iter_mut().zip(src.bytes().take(room)) {
        *d = s as c_char;
    }
}

fn fill_port(ca: &str, p: &PortDesc, out: &mut UmadPort) -> Result<(), c_int> {
    // SAFETY: calloc of the pkey table's size; NULL is checked. Freed by umad_release_port.
    let pkeys = unsafe { libc::calloc(p.pkeys.len().max(1), 2) } as *mut u16;
    if pkeys.is_null() {
        return Err(libc::ENOMEM);
    }
    // SAFETY: `pkeys` holds `p.pkeys.len()` u16s.
    unsafe { std::ptr::copy_nonoverlapping(p.pkeys.as_ptr(), pkeys, p.pkeys.len()) };
    copy_name(&mut out.ca_name, ca);
    out.portnum = c_int::from(p.number);
    out.base_lid = p.base_lid;
    out.lmc = p.lmc;
    out.sm_lid = p.sm_lid;
    out.sm_sl = p.sm_sl;
    out.state = p.state;
    out.phys_state = p.phys_state;
    out.rate = p.rate;
    out.capmask = p.capmask.to_be();
    out.gid_prefix = u64::from_ne_bytes(p.gid[..8].try_into().unwrap_or_default());
    out.port_guid = u64::from_ne_bytes(p.gid[8..].try_into().unwrap_or_default());
    out.pkeys_size = p.pkeys.len() as u32;
    out.pkeys = pkeys;
    copy_name(&mut out.link_layer, &p.link_layer);
    Ok(())
}

/// `umad_init`: succeeds when the host's tree is there (the real one checks the kernel
/// module's ABI version), and says what to start when it is not.
pub(crate) extern "C" fn umad_init() -> c_int {
    let dir = class_dir();
    if dir.is_dir() {
        return 0;
    }
    crate::say(format!(
        "no softib host at {} (no {}): start a fabric (`softib fabric up FILE`) and run the \
         program with `softib fabric exec NODE -- PROG`, or start `softib daemon` and use \
         `softib run -- PROG`",
        softib::runtime_dir().display(),
        dir.display()
    ));
    -1
}

/// `umad_done`.
pub(crate) extern "C" fn umad_done() -> c_int {
    0
}

/// `umad_get_cas_names`.
pub(crate) extern "C" fn umad_get_cas_names(
    cas: *mut [c_char; UMAD_CA_NAME_LEN],
    max: c_int,
) -> c_int {
    ffi_neg(|| {
        if cas.is_null() || max < 0 {
            return Err(libc::EINVAL);
        }
        let names = ca_names();
        let n = names.len().min(max as usize);
        for (i, name) in names.iter().take(n).enumerate() {
            // SAFETY: the caller's array has `max` entries; `i < max`.
            let slot = unsafe { &mut *cas.add(i) };
            copy_name(slot, name);
        }
        Ok(n as c_int)
    })
}

/// `umad_get_ca_portguids`: the GUID of each port 0..=numports (0 where there is none),
/// in network order; -ENOMEM when `max` is too small.
pub(crate) extern "C" fn umad_get_ca_portguids(
    ca_name: *const c_char,
    portguids: *mut u64,
    max: c_int,
) -> c_int {
    ffi_neg(|| {
        let name = resolve(opt_str(ca_name)?, None)?;
        let ca = read_ca(&name)?;
        let n = usize::from(ca.numports()) + 1;
        if portguids.is_null() {
            return Ok(0);
        }
        if n > usize::try_from(max).unwrap_or(0) {
            return Err(libc::ENOMEM);
        }
        for i in 0..n {
            let g = ca.port(i as u8).map_or(0, |p| {
                u64::from_ne_bytes(p.gid[8..].try_into().unwrap_or_default())
            });
            // SAFETY: the caller's array has `max >= n` entries.
            unsafe { *portguids.add(i) = g };
        }
        Ok(n as c_int)
    })
}

/// `umad_get_ca`.
pub(crate) extern "C" fn umad_get_ca(ca_name: *const c_char, out: *mut UmadCa) -> c_int {
    ffi_neg(|| {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        let name = resolve(opt_str(ca_name)?, None)?;
        let ca = read_ca(&name)?;
        // SAFETY: the caller passes a umad_ca_t to fill.
        let out = unsafe { &mut *out };
        copy_name(&mut out.ca_name, &ca.name);
        out.node_type = ca.node_type;
        out.numports = c_int::from(ca.numports());
        copy_name(&mut out.fw_ver, &ca.fw_ver);
        copy_name(&mut out.ca_type, &ca.ca_type);
        copy_name(&mut out.hw_ver, &ca.hw_ver);
        out.node_guid = ca.node_guid.to_be();
        out.system_guid = ca.system_guid.to_be();
        out.ports = [std::ptr::null_mut(); UMAD_CA_MAX_PORTS];
        for p in &ca.ports {
            // SAFETY: calloc of one umad_port_t; NULL checked; freed by umad_release_ca.
            let slot = unsafe { libc::calloc(1, std::mem::size_of::<UmadPort>()) } as *mut UmadPort;
            if slot.is_null() {
                release_ca(out);
                return Err(libc::ENOMEM);
            }
            // SAFETY: `slot` is a zeroed umad_port_t of ours.
            if let Err(e) = fill_port(&ca.name, p, unsafe { &mut *slot }) {
                // SAFETY: ours, from calloc above.
                unsafe { libc::free(slot.cast()) };
                release_ca(out);
                return Err(e);
            }
            out.ports[usize::from(p.number)] = slot;
        }
        Ok(0)
    })
}

fn release_port(p: &mut UmadPort) {
    if !p.pkeys.is_null() {
        // SAFETY: `pkeys` came from calloc in fill_port (or is NULL).
        unsafe { libc::free(p.pkeys.cast()) };
    }
    p.pkeys = std::ptr::null_mut();
    p.pkeys_size = 0;
}

fn release_ca(ca: &mut UmadCa) {
    for slot in &mut ca.ports {
        if slot.is_null() {
            continue;
        }
        // SAFETY: each non-NULL slot is a umad_port_t umad_get_ca calloc'ed.
        unsafe {
            release_port(&mut **slot);
            libc::free(slot.cast());
        }
        *slot = std::ptr::null_mut();
    }
}

/// `umad_release_ca`.
pub(crate) extern "C" fn umad_release_ca(ca: *mut UmadCa) -> c_int {
    if ca.is_null() {
        return -libc::ENODEV;
    }
    // SAFETY: a umad_ca_t umad_get_ca filled.
    release_ca(unsafe { &mut *ca });
    0
}

/// `umad_get_port`.
pub(crate) extern "C" fn umad_get_port(
    ca_name: *const c_char,
    portnum: c_int,
    out: *mut UmadPort,
) -> c_int {
    ffi_neg(|| {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        let mut port = u8::try_from(portnum).map_err(|_| libc::EINVAL)?;
        let name = resolve(opt_str(ca_name)?, Some(&mut port))?;
        let ca = read_ca(&name)?;
        let p = ca.port(port).ok_or(libc::EIO)?;
        // SAFETY: the caller passes a umad_port_t to fill.
        fill_port(&name, p, unsafe { &mut *out })?;
        Ok(0)
    })
}

/// `umad_release_port`.
pub(crate) extern "C" fn umad_release_port(port: *mut UmadPort) -> c_int {
    if port.is_null() {
        return -libc::ENODEV;
    }
    // SAFETY: a umad_port_t umad_get_port filled.
    release_port(unsafe { &mut *port });
    0
}

/// The IsSM file of a port: `DIR/issm/NAME-PORT`, which the daemon watches (a program holding
/// it open is the SM of that port).
pub(crate) fn issm_path(ca: &str, port: u8) -> PathBuf {
    softib::runtime_dir()
        .join("issm")
        .join(format!("{ca}-{port}"))
}

/// `umad_get_issm_path`.
pub(crate) extern "C" fn umad_get_issm_path(
    ca_name: *const c_char,
    portnum: c_int,
    path: *mut c_char,
    max: c_int,
) -> c_int {
    ffi_neg(|| {
        let mut port = u8::try_from(portnum).map_err(|_| libc::EINVAL)?;
        let name = resolve(opt_str(ca_name)?, Some(&mut port))?;
        read_ca(&name)?.port(port).ok_or(libc::EINVAL)?;
        let p = issm_path(&name, port);
        let bytes = p.as_os_str().as_encoded_bytes();
        let max = usize::try_from(max).unwrap_or(0);
        if path.is_null() || max == 0 {
            return Err(libc::EINVAL);
        }
        let n = bytes.len().min(max - 1);
        // SAFETY: the caller's buffer has `max` bytes; we write n + 1 <= max.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), path as *mut u8, n);
            *path.add(n) = 0;
        }
        Ok(0)
    })
}

/// `umad_get_ca_device_list`: the CAs as a list the caller frees with
/// `umad_free_ca_device_list`; NULL (errno 0) when there is none.
pub(crate) extern "C" fn umad_get_ca_device_list() -> *mut UmadDeviceNode {
    let names = ca_names();
    let mut head: *mut UmadDeviceNode = std::ptr::null_mut();
    for name in names.iter().take(UMAD_MAX_DEVICES).rev() {
        let Ok(c) = CString::new(name.as_str()) else {
            continue;
        };
        // SAFETY: calloc of one node; NULL checked; freed by umad_free_ca_device_list.
        let node = unsafe { libc::calloc(1, std::mem::size_of::<UmadDeviceNode>()) }
            as *mut UmadDeviceNode;
        // SAFETY: strdup copies our NUL-terminated name into malloc'ed memory.
        let dup = unsafe { libc::strdup(c.as_ptr()) };
        if node.is_null() || dup.is_null() {
            // SAFETY: free(NULL) is allowed; these are ours.
            unsafe {
                libc::free(node.cast());
                libc::free(dup.cast());
            }
            umad_free_ca_device_list(head);
            crate::set_errno(libc::ENOMEM);
            return std::ptr::null_mut();
        }
        // SAFETY: `node` is a zeroed node of ours.
        unsafe {
            (*node).next = head;
            (*node).ca_name = dup;
        }
        head = node;
    }
    crate::set_errno(0);
    head
}

/// `umad_free_ca_device_list`.
pub(crate) extern "C" fn umad_free_ca_device_list(mut head: *mut UmadDeviceNode) {
    while !head.is_null() {
        // SAFETY: every node and name of the list came from umad_get_ca_device_list.
        unsafe {
            let next = (*head).next;
            libc::free((*head).ca_name as *mut libc::c_void);
            libc::free(head.cast());
            head = next;
        }
    }
}

/// `umad_sort_ca_device_list`: sorts the list by name (`size`: its length, or 0 to count).
pub(crate) extern "C" fn umad_sort_ca_device_list(
    head: *mut *mut UmadDeviceNode,
    _size: usize,
) -> c_int {
    if head.is_null() {
        return -libc::EINVAL;
    }
    let mut nodes: Vec<*mut UmadDeviceNode> = Vec::new();
    // SAFETY: `head` points at the caller's list head; the list is of well-formed nodes.
    let mut n = unsafe { *head };
    while !n.is_null() {
        nodes.push(n);
        // SAFETY: as above.
        n = unsafe { (*n).next };
    }
    let name = |p: &*mut UmadDeviceNode| {
        // SAFETY: each node's ca_name is a NUL-terminated string (or NULL).
        unsafe {
            let s = (**p).ca_name;
            if s.is_null() {
                Vec::new()
            } else {
                std::ffi::CStr::from_ptr(s).to_bytes().to_vec()
            }
        }
    };
    nodes.sort_by_key(name);
    let mut next: *mut UmadDeviceNode = std::ptr::null_mut();
    for &node in nodes.iter().rev() {
        // SAFETY: relinking the caller's own nodes.
        unsafe { (*node).next = next };
        next = node;
    }
    // SAFETY: as above.
    unsafe { *head = next };
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_strtoul_reads_them() {
        assert_eq!(parse_uint("4: ACTIVE\n"), Some(4));
        assert_eq!(parse_uint("0x1f\n"), Some(0x1f));
        assert_eq!(parse_uint("40 Gb/sec (4X QDR)\n"), Some(40));
        assert_eq!(parse_uint("0x00000000\n"), Some(0));
        assert_eq!(parse_uint("017"), Some(0o17));
        assert_eq!(parse_uint("Active"), None);
        assert_eq!(
            parse_guid("0002:c903:0000:1001\n"),
            Some(0x0002_c903_0000_1001)
        );
        assert_eq!(parse_guid("0002:c903"), None);
        let g = parse_gid("fe80:0000:0000:0000:0002:c903:0000:1001\n").unwrap();
        assert_eq!(g[0], 0xfe);
        assert_eq!(g[15], 0x01);
    }

    fn port(number: u8, state: u32, phys: u32, ll: &str) -> PortDesc {
        PortDesc {
            number,
            base_lid: 1,
            lmc: 0,
            sm_lid: 1,
            sm_sl: 0,
            state,
            phys_state: phys,
            rate: 40,
            capmask: 0,
            gid: [0; 16],
            pkeys: vec![0xffff],
            link_layer: ll.into(),
        }
    }

    #[test]
    fn the_default_port_is_the_first_active_infiniband_one() {
        let mut ca = CaDesc {
            name: "sib0".into(),
            node_type: 1,
            fw_ver: String::new(),
            ca_type: String::new(),
            hw_ver: String::new(),
            node_guid: 1,
            system_guid: 1,
            ports: vec![
                port(1, 2, 5, "InfiniBand"),
                port(2, 4, 5, "Ethernet"),
                port(3, 4, 5, "InfiniBand"),
            ],
        };
        let mut p = 0;
        assert_eq!(resolve_port(&ca, &mut p), Ok(true));
        assert_eq!(p, 3);
        // Only linked up: the first such, not Active.
        ca.ports[2].state = 2;
        let mut p = 0;
        assert_eq!(resolve_port(&ca, &mut p), Ok(false));
        assert_eq!(p, 1);
        // A port asked for by number must be InfiniBand.
        let mut p = 2;
        assert_eq!(resolve_port(&ca, &mut p), Err(()));
        // A switch's SMA is port 0.
        ca.node_type = 2;
        let mut p = 1;
        assert_eq!(resolve_port(&ca, &mut p), Ok(true));
        assert_eq!(p, 0);
    }
}
