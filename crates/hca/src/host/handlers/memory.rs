//! Memory: shared buffers a client attaches, protection domains, and memory regions —
//! over part of an attached buffer (`RegMr`) or over the client's own memory, reached by
//! cross-memory attach (`RegMrProcess`).

use std::os::fd::OwnedFd;
use std::rc::Rc;

use softib_engine::verbs::AccessFlags;
use softib_engine::PdHandle;
use softib_net::procmem::ProcessMemory;
use softib_net::shm::SharedRegion;
use softib_proto::{ErrorKind, Response};

use super::{passed_fd, refused, Handled};
use crate::host::client::{
    owns, Client, MAX_BUFFERS_PER_CLIENT, MAX_MRS_PER_CLIENT, MAX_PDS_PER_CLIENT,
};
use crate::host::host_rt::Host;

/// Where a region lies in the client's address space, and what it allows.
pub(in crate::host) struct Span {
    pub addr: u64,
    pub len: u64,
    pub access: AccessFlags,
}

/// `AttachBuffer`: maps the memfd that came with the request; its handle names it in `RegMr`.
pub(super) fn attach_buffer(
    h: &mut Host,
    c: &mut Client,
    fds: &mut Vec<OwnedFd>,
    len: u64,
    addr: u64,
) -> Handled {
    if c.owned.buffers.len() >= MAX_BUFFERS_PER_CLIENT {
        return Err(refused(
            ErrorKind::Exhausted,
            format!("a client may attach at most {MAX_BUFFERS_PER_CLIENT} buffers"),
        ));
    }
    let fd = passed_fd(fds, "AttachBuffer arrived without its memfd")?;
    let len = usize::try_from(len)
        .map_err(|_| refused(ErrorKind::Invalid, "buffer length does not fit"))?;
    let map = SharedRegion::from_fd(fd, len)
        .map_err(|e| refused(ErrorKind::Invalid, format!("cannot map the buffer: {e}")))?;
    let b = h.new_buffer();
    c.owned.buffers.insert(b, (Rc::new(map), addr));
    Ok(Response::Handle(b))
}

/// `DetachBuffer`: forgets a buffer no region uses any more.
pub(super) fn detach_buffer(c: &mut Client, buffer: u64) -> Handled {
    match c.owned.buffers.get(&buffer) {
        Some((map, _)) if Rc::strong_count(map) > 1 => Err(refused(
            ErrorKind::Busy,
            "memory regions still use this buffer",
        )),
        Some(_) => {
            c.owned.buffers.remove(&buffer);
            Ok(Response::Ok)
        }
        None => Err(refused(ErrorKind::NotFound, format!("no buffer {buffer}"))),
    }
}

/// `AllocPd`.
pub(super) fn alloc_pd(h: &mut Host, c: &mut Client, dev: u32) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    if c.owned.pds.len() >= MAX_PDS_PER_CLIENT {
        return Err(refused(
            ErrorKind::Exhausted,
            format!("a client may allocate at most {MAX_PDS_PER_CLIENT} PDs"),
        ));
    }
    let pd = hca.alloc_pd()?;
    c.owned.pds.insert((dev, pd.0));
    Ok(Response::Handle(u64::from(pd.0)))
}

/// `DeallocPd` of one of the client's PDs.
pub(super) fn dealloc_pd(h: &mut Host, c: &mut Client, dev: u32, pd: u32) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.pds, dev, pd, "PD")?;
    hca.dealloc_pd(PdHandle(pd))?;
    c.owned.pds.remove(&(dev, pd));
    Ok(Response::Ok)
}

/// `RegMr`: a region inside one of the client's attached buffers, in one of its PDs.
pub(super) fn reg_mr(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    pd: u32,
    buffer: u64,
    span: Span,
) -> Handled {
    h.dev(dev)?;
    owns(&c.owned.pds, dev, pd, "PD")?;
    if c.owned.mrs.len() >= MAX_MRS_PER_CLIENT {
        return Err(refused(
            ErrorKind::Exhausted,
            format!("a client may register at most {MAX_MRS_PER_CLIENT} MRs"),
        ));
    }
    let Some((map, base)) = c.owned.buffers.get(&buffer) else {
        return Err(refused(ErrorKind::NotFound, format!("no buffer {buffer}")));
    };
    let Span { addr, len, access } = span;
    let inside = addr
        .checked_sub(*base)
        .and_then(|off| off.checked_add(len))
        .is_some_and(|end| end <= map.len() as u64);
    if !inside {
        return Err(refused(
            ErrorKind::Invalid,
            format!(
                "the region [{addr:#x}, +{len}) is not inside buffer {buffer} \
                 ([{base:#x}, +{}))",
                map.len()
            ),
        ));
    }
    let region = h.new_region();
    let hca = h.dev(dev)?.hca_mut();
    let key = hca.reg_mr(PdHandle(pd), addr, len, access, region)?;
    hca.memory_mut().add(region, *base, Rc::clone(map));
    c.owned.mrs.insert((dev, key), region);
    Ok(Response::Mr {
        lkey: key,
        rkey: key,
    })
}

/// `RegMrProcess`: a region of the client's own memory, which the daemon reaches by
/// cross-memory attach into the process at the other end of the socket.
pub(super) fn reg_mr_process(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    pd: u32,
    span: Span,
) -> Handled {
    h.dev(dev)?;
    owns(&c.owned.pds, dev, pd, "PD")?;
    if c.owned.mrs.len() >= MAX_MRS_PER_CLIENT {
        return Err(refused(
            ErrorKind::Exhausted,
            format!("a client may register at most {MAX_MRS_PER_CLIENT} MRs"),
        ));
    }
    let Span { addr, len, access } = span;
    if len == 0 || addr.checked_add(len).is_none() {
        return Err(refused(
            ErrorKind::Invalid,
            format!("a region of {len} bytes at {addr:#x} is not a region"),
        ));
    }
    // Who the client is comes from the kernel, not from its Hello.
    let mem = ProcessMemory::new(c.peer_pid).map_err(|e| {
        refused(
            ErrorKind::Invalid,
            format!("cannot tell which process the client is: {e}"),
        )
    })?;
    // Touch both ends now, so a refusal comes back here and not as a failed RDMA operation
    // later.
    let mut probe = [0u8; 1];
    if let Err(e) = mem
        .read(addr, &mut probe)
        .and_then(|()| mem.read(addr + len - 1, &mut probe))
    {
        let hint = if e.raw_os_error() == Some(1) {
            " (EPERM: the daemon may not attach to this process — run both as \
             the same user with prctl(PR_SET_PTRACER) or \
             /proc/sys/kernel/yama/ptrace_scope 0, or register a buffer from \
             alloc_buffer instead)"
        } else {
            ""
        };
        return Err(refused(
            ErrorKind::Invalid,
            format!(
                "cannot reach [{addr:#x}, +{len}) of pid {}: {e}{hint}",
                mem.pid()
            ),
        ));
    }
    let region = h.new_region();
    let hca = h.dev(dev)?.hca_mut();
    let key = hca.reg_mr(PdHandle(pd), addr, len, access, region)?;
    hca.memory_mut().add_process(region, mem);
    c.owned.mrs.insert((dev, key), region);
    Ok(Response::Mr {
        lkey: key,
        rkey: key,
    })
}

/// `DeregMr` of one of the client's regions; its memory is no longer reachable.
pub(super) fn dereg_mr(h: &mut Host, c: &mut Client, dev: u32, lkey: u32) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    let Some(&region) = c.owned.mrs.get(&(dev, lkey)) else {
        return Err(refused(ErrorKind::NotFound, format!("no MR {lkey:#x}")));
    };
    hca.dereg_mr(lkey)?;
    hca.memory_mut().remove(region);
    c.owned.mrs.remove(&(dev, lkey));
    Ok(Response::Ok)
}
