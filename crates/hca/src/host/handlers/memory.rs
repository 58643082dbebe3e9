//! Memory: shared buffers a client attaches, protection domains, and memory regions —
//! over part of an attached buffer (`RegMr`) or over the client's own memory, reached by
//! cross-memory attach (`RegMrProcess`).

use std::os::fd::OwnedFd;
use std::rc::Rc;

use softib_engine::verbs::AccessFlags;
use softib_engine::{PdHandle, RegionId};
use softib_net::procmem::ProcessMemory;
use softib_net::shm::SharedRegion;
use softib_proto::{ErrorKind, Response};

use super::{destroy_owned, passed_fd, refused, Handled, Refused};
use crate::host::client::{
    owns, within_limit, Client, MAX_BUFFERS_PER_CLIENT, MAX_MRS_PER_CLIENT, MAX_PDS_PER_CLIENT,
};
use crate::host::host_rt::Host;
use crate::shm_memory::ShmMemory;

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
    within_limit(c.owned.buffers.len(), MAX_BUFFERS_PER_CLIENT, "buffers")?;
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
    within_limit(c.owned.pds.len(), MAX_PDS_PER_CLIENT, "PDs")?;
    let pd = hca.alloc_pd()?;
    c.owned.pds.insert((dev, pd.0));
    Ok(Response::Handle(u64::from(pd.0)))
}

/// `DeallocPd` of one of the client's PDs.
pub(super) fn dealloc_pd(h: &mut Host, c: &mut Client, dev: u32, pd: u32) -> Handled {
    destroy_owned(h, &mut c.owned.pds, dev, pd, "PD", |hca| {
        hca.dealloc_pd(PdHandle(pd))
    })
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
    may_register(h, c, dev, pd)?;
    let Some((map, base)) = c.owned.buffers.get(&buffer) else {
        return Err(refused(ErrorKind::NotFound, format!("no buffer {buffer}")));
    };
    let Span { addr, len, .. } = span;
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
    let (map, base) = (Rc::clone(map), *base);
    register(h, c, dev, pd, span, |memory, region| {
        memory.add(region, base, map)
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
    may_register(h, c, dev, pd)?;
    let Span { addr, len, .. } = span;
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
    register(h, c, dev, pd, span, |memory, region| {
        memory.add_process(region, mem)
    })
}

/// What a region of either kind is checked for first: the device, the client's own PD, and
/// room under the client's MR limit.
fn may_register(h: &mut Host, c: &Client, dev: u32, pd: u32) -> Result<(), Refused> {
    h.dev(dev)?;
    owns(&c.owned.pds, dev, pd, "PD")?;
    within_limit(c.owned.mrs.len(), MAX_MRS_PER_CLIENT, "MRs")?;
    Ok(())
}

/// Registers `span` with the engine for client `c` and lets `reach` tell the engine's memory
/// where the new region's bytes are.
fn register(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    pd: u32,
    span: Span,
    reach: impl FnOnce(&mut ShmMemory, RegionId),
) -> Handled {
    let region = h.new_region();
    let hca = h.dev(dev)?.hca_mut();
    let key = hca.reg_mr(PdHandle(pd), span.addr, span.len, span.access, region)?;
    reach(hca.memory_mut(), region);
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

#[cfg(test)]
mod tests {
    use softib_proto::Request;

    use super::*;
    use crate::host::testing::TestHost;

    fn buffer(len: usize) -> (SharedRegion, OwnedFd) {
        let map = SharedRegion::create("softib-unit-buffer", len).unwrap();
        let fd = map.fd().try_clone_to_owned().unwrap();
        (map, fd)
    }

    fn reg_mr(buffer: u64, addr: u64, len: u64) -> Request {
        Request::RegMr {
            dev: 0,
            pd: 1,
            buffer,
            addr,
            len,
            access: AccessFlags::LOCAL_WRITE,
        }
    }

    #[test]
    fn a_pd_is_only_its_allocators() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        let pd = t.handle(a, Request::AllocPd { dev: 0 });
        let foreign = format!("no PD {pd} on device 0 belongs to this client");
        assert_eq!(
            t.refused(b, Request::DeallocPd { dev: 0, pd }),
            (ErrorKind::NotFound, foreign.clone())
        );
        assert_eq!(
            t.refused(
                b,
                Request::CreateAh {
                    dev: 0,
                    pd,
                    av: Default::default()
                }
            ),
            (ErrorKind::NotFound, foreign)
        );
        // Still there for its owner, once.
        t.ok(a, Request::DeallocPd { dev: 0, pd });
        assert_eq!(
            t.refused(a, Request::DeallocPd { dev: 0, pd }).0,
            ErrorKind::NotFound
        );
    }

    #[test]
    fn a_region_lies_inside_its_buffer_which_outlives_it() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        assert_eq!(
            t.refused(a, Request::AttachBuffer { len: 4096, addr: 0 }),
            (
                ErrorKind::Protocol,
                "AttachBuffer arrived without its memfd".into()
            )
        );
        let (_map, fd) = buffer(4096);
        let attach = Request::AttachBuffer {
            len: 4096,
            addr: 0x10000,
        };
        let Some(Response::Handle(buf)) = t.call_with(a, vec![fd], attach) else {
            panic!("not attached");
        };
        assert_eq!(t.handle(a, Request::AllocPd { dev: 0 }), 1);
        assert_eq!(
            t.refused(a, reg_mr(buf, 0x10000 + 4000, 200)),
            (
                ErrorKind::Invalid,
                format!("the region [0x10fa0, +200) is not inside buffer {buf} ([0x10000, +4096))")
            )
        );
        assert_eq!(
            t.refused(a, reg_mr(buf + 1, 0x10000, 64)),
            (ErrorKind::NotFound, format!("no buffer {}", buf + 1))
        );
        let Response::Mr { lkey, .. } = t.ok(a, reg_mr(buf, 0x10800, 0x800)) else {
            panic!("no MR");
        };
        assert!(t.hca().mr(lkey).is_some());
        assert_eq!(
            t.refused(a, Request::DetachBuffer { buffer: buf }),
            (
                ErrorKind::Busy,
                "memory regions still use this buffer".into()
            )
        );
        // Another client can neither deregister it nor see the buffer.
        assert_eq!(
            t.refused(b, Request::DeregMr { dev: 0, lkey }),
            (ErrorKind::NotFound, format!("no MR {lkey:#x}"))
        );
        assert_eq!(
            t.refused(b, Request::DetachBuffer { buffer: buf }).0,
            ErrorKind::NotFound
        );
        t.ok(a, Request::DeregMr { dev: 0, lkey });
        assert!(t.hca().mr(lkey).is_none());
        // The engine's memory let go of the mapping: the buffer may go now.
        t.ok(a, Request::DetachBuffer { buffer: buf });
    }

    #[test]
    fn a_process_region_is_reached_in_the_process_the_kernel_names() {
        let mut t = TestHost::new();
        let a = t.client();
        let pd = t.handle(a, Request::AllocPd { dev: 0 });
        let mine = vec![7u8; 256];
        let region = |addr: u64, len: u64| Request::RegMrProcess {
            dev: 0,
            pd,
            addr,
            len,
            access: AccessFlags::LOCAL_WRITE,
        };
        let addr = mine.as_ptr() as u64;
        assert!(matches!(t.ok(a, region(addr, 256)), Response::Mr { .. }));
        assert_eq!(
            t.refused(a, region(addr, 0)),
            (
                ErrorKind::Invalid,
                format!("a region of 0 bytes at {addr:#x} is not a region")
            )
        );
        // Nothing is mapped at page 0 of any process.
        let (kind, message) = t.refused(a, region(8, 16));
        assert_eq!(kind, ErrorKind::Invalid);
        let pid = std::process::id();
        assert!(
            message.starts_with(&format!("cannot reach [0x8, +16) of pid {pid}: ")),
            "{message}"
        );
        // A client the kernel could not name gets no region at all.
        t.clients.get_mut(&a).unwrap().peer_pid = 0;
        let (kind, message) = t.refused(a, region(addr, 256));
        assert_eq!(kind, ErrorKind::Invalid);
        assert!(
            message.starts_with("cannot tell which process the client is"),
            "{message}"
        );
    }
}
