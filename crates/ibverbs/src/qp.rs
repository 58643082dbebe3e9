//! Queue pairs: `ibv_create_qp`, `ibv_create_qp_ex` (through `verbs_context`), modify,
//! query, destroy, `ibv_post_send` / `ibv_post_recv` (through `ibv_context_ops`),
//! multicast attach, and the ECE calls softib does not have.

use std::ffi::c_int;
use std::sync::{Condvar, Mutex};

use softib::{
    AccessFlags, AttrMask, Mtu, Psn, QpAttr, QpCap, QpInitAttr, QpState, QpType, Qpn, RKey, RecvWr,
    RemoteAddr, SendFlags, SendWr, Sge, UdDest, WrOpcode,
};
use softib_verbs_abi as abi;

use crate::ah::{av_from_c, av_to_c, pd};
use crate::objects::{ctx_of, free, object, zeroed, Context, Object, Qp};
use crate::{ffi_errno, ffi_ptr, refused};

/// The QP behind a program's `ibv_qp` (or `ibv_qp_ex`, the same pointer).
pub(crate) fn qp<'a>(p: *mut abi::IbvQp) -> Result<&'a Qp, c_int> {
    // SAFETY: the program passes a QP it created (an `ibv_qp` is the head of our
    // `ibv_qp_ex`).
    unsafe { object::<Qp>(p as *mut abi::IbvQpEx) }
}

fn qp_type(t: u32) -> Result<QpType, c_int> {
    match t {
        abi::qp_type::RC => Ok(QpType::Rc),
        abi::qp_type::UC => Ok(QpType::Uc),
        abi::qp_type::UD => Ok(QpType::Ud),
        // XRC and raw packet QPs are not softib's (rxe has neither).
        _ => Err(libc::EOPNOTSUPP),
    }
}

fn c_qp_type(t: QpType) -> u32 {
    match t {
        QpType::Rc => abi::qp_type::RC,
        QpType::Uc => abi::qp_type::UC,
        QpType::Ud => abi::qp_type::UD,
    }
}

fn qp_state(s: u32) -> Result<QpState, c_int> {
    Ok(match s {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return Err(libc::EINVAL),
    })
}

fn c_qp_state(s: QpState) -> u32 {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Sqd => 4,
        QpState::Sqe => 5,
        QpState::Err => 6,
    }
}

fn cap(c: &abi::IbvQpCap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

fn c_cap(c: &QpCap) -> abi::IbvQpCap {
    abi::IbvQpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// What `ibv_create_qp` and `ibv_create_qp_ex` share: the QP in the daemon, and the object.
/// `attr` is the head both init structs start with.
fn create(
    pd_p: *mut abi::IbvPd,
    attr: *mut abi::IbvQpInitAttr,
    send_ops: Option<u64>,
    verb: &str,
) -> Result<*mut Qp, c_int> {
    if attr.is_null() {
        return Err(libc::EINVAL);
    }
    let p = pd(pd_p)?;
    // SAFETY: a PD's context outlives it.
    let ctx = unsafe { ctx_of(p.ctx) };
    // SAFETY: the caller passes a readable, writable init struct (the legacy head of both).
    let a = unsafe { &mut *attr };
    let ty = qp_type(a.qp_type)?;
    if a.send_cq.is_null() || a.recv_cq.is_null() {
        return Err(libc::EINVAL);
    }
    let send_cq = crate::cq::handle_of(a.send_cq, ctx)?;
    let recv_cq = crate::cq::handle_of(a.recv_cq, ctx)?;
    let srq = if a.srq.is_null() {
        None
    } else {
        Some(crate::srq::handle_of(a.srq, ctx)?)
    };
    // Programs probe the limits by asking for more (libfabric searches for the largest
    // inline size this way): beyond them is EINVAL, as a provider answers, and not worth a
    // line on stderr.
    let l = &ctx.limits;
    let c = &a.cap;
    if c.max_send_wr > l.max_qp_wr
        || c.max_recv_wr > l.max_qp_wr
        || c.max_send_sge > l.max_sge
        || c.max_recv_sge > l.max_sge
        || c.max_inline_data > l.max_inline_data
    {
        return Err(libc::EINVAL);
    }
    let init = QpInitAttr {
        qp_type: ty,
        pd: p.handle,
        send_cq,
        recv_cq,
        srq,
        cap: cap(&a.cap),
        sq_sig_all: a.sq_sig_all != 0,
    };
    let mut inner = ctx.lock();
    let qpn = inner
        .ctx
        .create_qp(ctx.dev, init)
        .map_err(|e| refused(verb, &e))?;
    // SAFETY: `ibv_qp_ex` is pointers, integers and optional function pointers.
    let c = unsafe { zeroed::<abi::IbvQpEx>() };
    let q = Box::into_raw(Box::new(Qp {
        c,
        magic: Qp::MAGIC,
        ctx,
        qpn,
        qp_type: ty,
        send_ops,
        batch: Mutex::new(Default::default()),
        batch_done: Condvar::new(),
    }));
    inner.qps.insert(qpn.value(), q);
    drop(inner);
    // What the QP got, as a provider writes it back into the caller's init struct.
    a.cap = c_cap(&init.cap.as_created());
    // SAFETY: a fresh allocation nobody else sees yet.
    let c = unsafe { &mut *(*q).c.get() };
    c.qp_base.context = ctx.ibv();
    c.qp_base.qp_context = a.qp_context;
    c.qp_base.pd = pd_p;
    c.qp_base.send_cq = a.send_cq;
    c.qp_base.recv_cq = a.recv_cq;
    c.qp_base.srq = a.srq;
    c.qp_base.handle = qpn.value();
    c.qp_base.qp_num = qpn.value();
    c.qp_base.state = c_qp_state(QpState::Reset);
    c.qp_base.qp_type = a.qp_type;
    crate::qp_ex::fill(c);
    Ok(q)
}

/// `ibv_create_qp`.
pub(crate) extern "C" fn ibv_create_qp(
    pd: *mut abi::IbvPd,
    attr: *mut abi::IbvQpInitAttr,
) -> *mut abi::IbvQp {
    ffi_ptr(|| Ok(create(pd, attr, None, "ibv_create_qp")? as *mut abi::IbvQp))
}

/// `verbs_context.create_qp_ex` (the inline `ibv_create_qp_ex`): a PD, and optionally the
/// `ibv_wr_*` operations the program will use; XRC, TSO, RSS, create flags and a source
/// QPN are not softib's (EOPNOTSUPP, as rxe answers). Memory windows, local invalidate, TSO
/// and atomic write are refused among the send operations.
pub(crate) unsafe extern "C" fn create_qp_ex(
    context: *mut abi::IbvContext,
    attr: *mut abi::IbvQpInitAttrEx,
) -> *mut abi::IbvQp {
    ffi_ptr(|| {
        // SAFETY: the program passes a context it opened.
        let ctx = unsafe { Context::from_ibv(context)? };
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller passes a readable `ibv_qp_init_attr_ex`.
        let a = unsafe { &*attr };
        use abi::qp_init_attr_mask as m;
        if a.comp_mask & m::PD == 0 {
            return Err(libc::EINVAL);
        }
        if a.comp_mask & !(m::PD | m::SEND_OPS_FLAGS) != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let send_ops = if a.comp_mask & m::SEND_OPS_FLAGS != 0 {
            let supported = crate::qp_ex::SUPPORTED_SEND_OPS;
            if a.send_ops_flags & !supported != 0 {
                return Err(libc::EOPNOTSUPP);
            }
            Some(a.send_ops_flags)
        } else {
            None
        };
        let p = pd(a.pd)?;
        if !std::ptr::eq(p.ctx, ctx) {
            return Err(libc::EINVAL);
        }
        let q = create(
            a.pd,
            attr as *mut abi::IbvQpInitAttr,
            send_ops,
            "ibv_create_qp_ex",
        )?;
        if send_ops.is_some() {
            // SAFETY: a fresh QP.
            unsafe { (*(*q).c.get()).comp_mask = 0 };
        }
        Ok(q as *mut abi::IbvQp)
    })
}

/// `ibv_qp_to_qp_ex`: the `ibv_wr_*` table of a QP created with send operations, else NULL.
pub(crate) extern "C" fn ibv_qp_to_qp_ex(qp: *mut abi::IbvQp) -> *mut abi::IbvQpEx {
    match self::qp(qp) {
        Ok(q) if q.send_ops.is_some() => q.c.get(),
        _ => std::ptr::null_mut(),
    }
}

/// softib's QP attributes for a C `ibv_qp_attr` (the fields of `mask`).
fn attr_from_c(a: &abi::IbvQpAttr, mask: c_int) -> Result<QpAttr, c_int> {
    let mut q = QpAttr::default();
    let has = |bit: AttrMask| mask as u32 & bit.0 != 0;
    if has(AttrMask::STATE) {
        q.qp_state = qp_state(a.qp_state)?;
    }
    if has(AttrMask::CUR_STATE) {
        q.cur_qp_state = qp_state(a.cur_qp_state)?;
    }
    q.path_mtu = Mtu::from(u8::try_from(a.path_mtu).map_err(|_| libc::EINVAL)?);
    q.rq_psn = Psn::new(a.rq_psn);
    q.sq_psn = Psn::new(a.sq_psn);
    q.dest_qp_num = Qpn::new(a.dest_qp_num);
    q.qp_access_flags = AccessFlags(a.qp_access_flags & 0xf);
    q.qkey = a.qkey;
    q.ah_attr = av_from_c(&a.ah_attr);
    q.pkey_index = a.pkey_index;
    q.port_num = a.port_num;
    q.max_rd_atomic = a.max_rd_atomic;
    q.max_dest_rd_atomic = a.max_dest_rd_atomic;
    q.min_rnr_timer = a.min_rnr_timer;
    q.timeout = a.timeout;
    q.retry_cnt = a.retry_cnt;
    q.rnr_retry = a.rnr_retry;
    Ok(q)
}

/// `ibv_modify_qp`.
pub(crate) extern "C" fn ibv_modify_qp(
    qp: *mut abi::IbvQp,
    attr: *mut abi::IbvQpAttr,
    mask: c_int,
) -> c_int {
    ffi_errno(|| {
        let q = self::qp(qp)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        if mask & !abi::qp_attr_mask::STANDARD != 0 {
            // Rate limiting and the kernel-internal bits are not softib's.
            return Err(if mask & abi::qp_attr_mask::RATE_LIMIT != 0 {
                libc::EOPNOTSUPP
            } else {
                libc::EINVAL
            });
        }
        // SAFETY: the caller passes a readable `ibv_qp_attr`.
        let a = unsafe { &*attr };
        let qa = attr_from_c(a, mask)?;
        // SAFETY: a QP's context outlives it.
        let ctx = unsafe { ctx_of(q.ctx) };
        ctx.lock()
            .ctx
            .modify_qp(ctx.dev, q.qpn, &qa, AttrMask(mask as u32))
            .map_err(|e| refused("ibv_modify_qp", &e))?;
        if mask as u32 & AttrMask::STATE.0 != 0 {
            // SAFETY: a field of a live QP (rdma-core updates it the same way).
            unsafe { (*q.c.get()).qp_base.state = a.qp_state };
        }
        Ok(())
    })
}

/// `ibv_query_qp`: every attribute (whatever the mask asks), and the creation attributes.
pub(crate) extern "C" fn ibv_query_qp(
    qp: *mut abi::IbvQp,
    attr: *mut abi::IbvQpAttr,
    _mask: c_int,
    init_attr: *mut abi::IbvQpInitAttr,
) -> c_int {
    ffi_errno(|| {
        let q = self::qp(qp)?;
        if attr.is_null() || init_attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: a QP's context outlives it.
        let ctx = unsafe { ctx_of(q.ctx) };
        let (a, init) = ctx
            .lock()
            .ctx
            .query_qp(ctx.dev, q.qpn)
            .map_err(|e| refused("ibv_query_qp", &e))?;
        let out = abi::IbvQpAttr {
            qp_state: c_qp_state(a.qp_state),
            cur_qp_state: c_qp_state(a.qp_state),
            path_mtu: u32::from(u8::from(a.path_mtu)),
            // IBV_MIG_MIGRATED: no alternate path.
            path_mig_state: 2,
            qkey: a.qkey,
            rq_psn: a.rq_psn.value(),
            sq_psn: a.sq_psn.value(),
            dest_qp_num: a.dest_qp_num.value(),
            qp_access_flags: a.qp_access_flags.0,
            cap: c_cap(&init.cap),
            ah_attr: av_to_c(&a.ah_attr),
            alt_ah_attr: abi::IbvAhAttr::default(),
            pkey_index: a.pkey_index,
            alt_pkey_index: 0,
            en_sqd_async_notify: 0,
            sq_draining: 0,
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            port_num: a.port_num,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            alt_port_num: 0,
            alt_timeout: 0,
            rate_limit: 0,
        };
        // SAFETY: the caller passes writable structs; the QP's fields are live.
        unsafe {
            *attr = out;
            let b = &mut (*q.c.get()).qp_base;
            b.state = out.qp_state;
            *init_attr = abi::IbvQpInitAttr {
                qp_context: b.qp_context,
                send_cq: b.send_cq,
                recv_cq: b.recv_cq,
                srq: b.srq,
                cap: c_cap(&init.cap),
                qp_type: c_qp_type(init.qp_type),
                sq_sig_all: c_int::from(init.sq_sig_all),
            };
        }
        Ok(())
    })
}

/// `ibv_destroy_qp`.
pub(crate) extern "C" fn ibv_destroy_qp(qp: *mut abi::IbvQp) -> c_int {
    ffi_errno(|| {
        let q = self::qp(qp)?;
        // SAFETY: a QP's context outlives it.
        let ctx = unsafe { ctx_of(q.ctx) };
        let mut inner = ctx.lock();
        inner
            .ctx
            .destroy_qp(ctx.dev, q.qpn)
            .map_err(|e| refused("ibv_destroy_qp", &e))?;
        inner.qps.remove(&q.qpn.value());
        drop(inner);
        // SAFETY: ours; not used again.
        unsafe { free(q as *const Qp as *mut Qp, |q| q.magic = 0) };
        Ok(())
    })
}

/// The scatter/gather list of a C work request.
///
/// # Safety
/// `sg` points to `n` readable `ibv_sge`s (or `n` is 0).
unsafe fn sges(sg: *const abi::IbvSge, n: c_int) -> Result<Vec<Sge>, c_int> {
    let n = usize::try_from(n).map_err(|_| libc::EINVAL)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    if sg.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: see the function's contract.
    let list = unsafe { std::slice::from_raw_parts(sg, n) };
    Ok(list
        .iter()
        .map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect())
}

/// The bytes an inline send carries: its SGEs' memory, read now (the program may reuse it
/// as soon as `ibv_post_send` returns).
pub(crate) fn inline_bytes(list: &[Sge]) -> Vec<u8> {
    let mut data = Vec::with_capacity(list.iter().map(|s| s.length as usize).sum());
    for s in list.iter().filter(|s| s.length > 0) {
        // SAFETY: an inline SGE names the program's own readable memory (no L_Key is
        // checked for inline data: that is the point of it).
        data.extend_from_slice(unsafe {
            std::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize)
        });
    }
    data
}

/// softib's form of one C send work request.
fn send_wr(q: &Qp, w: &abi::IbvSendWr) -> Result<SendWr, c_int> {
    use abi::wr_opcode as o;
    // SAFETY: the union member the opcode names; `sg_list` holds `num_sge` entries.
    let (rdma, atomic, ud) = unsafe { (w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let ra = |addr, rkey| RemoteAddr {
        addr,
        rkey: RKey(rkey),
    };
    let opcode = match w.opcode {
        o::RDMA_WRITE => WrOpcode::RdmaWrite(ra(rdma.remote_addr, rdma.rkey)),
        o::RDMA_WRITE_WITH_IMM => {
            WrOpcode::RdmaWriteWithImm(ra(rdma.remote_addr, rdma.rkey), u32::from_be(w.imm_data))
        }
        o::SEND => WrOpcode::Send,
        o::SEND_WITH_IMM => WrOpcode::SendWithImm(u32::from_be(w.imm_data)),
        o::RDMA_READ => WrOpcode::RdmaRead(ra(rdma.remote_addr, rdma.rkey)),
        o::ATOMIC_CMP_AND_SWP => WrOpcode::AtomicCmpAndSwp {
            remote: ra(atomic.remote_addr, atomic.rkey),
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        o::ATOMIC_FETCH_AND_ADD => WrOpcode::AtomicFetchAndAdd {
            remote: ra(atomic.remote_addr, atomic.rkey),
            add: atomic.compare_add,
        },
        o::SEND_WITH_INV => WrOpcode::SendWithInv(RKey(w.imm_data)),
        // Memory windows, local invalidate, TSO and atomic write are not softib's.
        _ => return Err(libc::EINVAL),
    };
    // SAFETY: the program's list of `num_sge` SGEs.
    let sg_list = unsafe { sges(w.sg_list, w.num_sge)? };
    let mut flags = SendFlags(w.send_flags & 0xf);
    let inline_data = if flags.contains(SendFlags::INLINE) && !opcode.is_read_or_atomic() {
        Some(inline_bytes(&sg_list))
    } else {
        flags = SendFlags(flags.0 & !abi::send_flags::INLINE);
        None
    };
    let ud = if q.qp_type == QpType::Ud {
        Some(UdDest {
            ah: crate::ah::handle_of(ud.ah)?,
            remote_qpn: Qpn::new(ud.remote_qpn),
            remote_qkey: ud.remote_qkey,
        })
    } else {
        None
    };
    Ok(SendWr {
        wr_id: w.wr_id,
        opcode,
        sg_list: if inline_data.is_some() {
            Vec::new()
        } else {
            sg_list
        },
        flags,
        inline_data,
        ud,
    })
}

/// Which work request of a list softib refused: its message says "work request N of the
/// list" (or "receive request N"); the ones before it were posted.
fn failed_index(e: &softib::Error) -> usize {
    let text = e.to_string();
    text.split_whitespace()
        .skip_while(|w| *w != "request")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The `n`th entry of a C work-request list.
///
/// # Safety
/// `first` starts a list of at least `n + 1` entries linked by `next`.
unsafe fn nth<T>(first: *mut T, n: usize, next: impl Fn(*mut T) -> *mut T) -> *mut T {
    let mut p = first;
    for _ in 0..n {
        p = next(p);
    }
    p
}

/// `ibv_context_ops.post_send` (the inline `ibv_post_send`): 0, or an errno value with
/// `bad_wr` at the first work request not posted.
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut abi::IbvQp,
    wr: *mut abi::IbvSendWr,
    bad_wr: *mut *mut abi::IbvSendWr,
) -> c_int {
    let set_bad = |p| {
        if !bad_wr.is_null() {
            // SAFETY: the caller passes a writable out-pointer.
            unsafe { *bad_wr = p };
        }
    };
    let r = crate::catch(|| -> Result<(), (c_int, *mut abi::IbvSendWr)> {
        let q = self::qp(qp).map_err(|e| (e, wr))?;
        let mut list = Vec::new();
        let mut p = wr;
        while !p.is_null() {
            // SAFETY: the program's list of work requests, linked by `next`.
            let w = unsafe { &*p };
            match send_wr(q, w) {
                Ok(s) => list.push(s),
                Err(e) if list.is_empty() => return Err((e, p)),
                Err(e) => {
                    // Post the ones before the bad one, as the verb does.
                    post(q, list, wr)?;
                    return Err((e, p));
                }
            }
            p = w.next;
        }
        post(q, list, wr)
    });
    match r {
        Ok(Ok(())) => 0,
        Ok(Err((e, p))) => {
            set_bad(p);
            e
        }
        Err(_) => {
            set_bad(wr);
            libc::EIO
        }
    }
}

fn post(
    q: &Qp,
    list: Vec<SendWr>,
    first: *mut abi::IbvSendWr,
) -> Result<(), (c_int, *mut abi::IbvSendWr)> {
    if list.is_empty() {
        return Ok(());
    }
    // SAFETY: a QP's context outlives it.
    let ctx = unsafe { ctx_of(q.ctx) };
    let r = ctx.lock().ctx.post_send(ctx.dev, q.qpn, list);
    r.map_err(|e| {
        let n = failed_index(&e);
        // SAFETY: softib names a request of the list it was given.
        let bad = unsafe { nth(first, n, |p| (*p).next) };
        (refused("ibv_post_send", &e), bad)
    })
}

/// softib's form of a C receive list; `Err` with the bad entry.
///
/// # Safety
/// `wr` is NULL or starts the program's list of receive requests.
pub(crate) unsafe fn recv_list(
    wr: *mut abi::IbvRecvWr,
) -> Result<Vec<RecvWr>, (c_int, *mut abi::IbvRecvWr)> {
    let mut list = Vec::new();
    let mut p = wr;
    while !p.is_null() {
        // SAFETY: see the function's contract.
        let w = unsafe { &*p };
        // SAFETY: the entry's list of `num_sge` SGEs.
        let sg_list = unsafe { sges(w.sg_list, w.num_sge) }.map_err(|e| (e, p))?;
        list.push(RecvWr {
            wr_id: w.wr_id,
            sg_list,
        });
        p = w.next;
    }
    Ok(list)
}

/// Where a refused receive list went wrong.
pub(crate) fn recv_refused(
    verb: &str,
    e: &softib::Error,
    first: *mut abi::IbvRecvWr,
) -> (c_int, *mut abi::IbvRecvWr) {
    let n = failed_index(e);
    // SAFETY: softib names a request of the list it was given.
    let bad = unsafe { nth(first, n, |p| (*p).next) };
    (refused(verb, e), bad)
}

/// `ibv_context_ops.post_recv` (the inline `ibv_post_recv`).
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut abi::IbvQp,
    wr: *mut abi::IbvRecvWr,
    bad_wr: *mut *mut abi::IbvRecvWr,
) -> c_int {
    let r = crate::catch(|| -> Result<(), (c_int, *mut abi::IbvRecvWr)> {
        let q = self::qp(qp).map_err(|e| (e, wr))?;
        // SAFETY: the program's list.
        let list = unsafe { recv_list(wr)? };
        if list.is_empty() {
            return Ok(());
        }
        // SAFETY: a QP's context outlives it.
        let ctx = unsafe { ctx_of(q.ctx) };
        let r = ctx.lock().ctx.post_recv(ctx.dev, q.qpn, list);
        r.map_err(|e| recv_refused("ibv_post_recv", &e, wr))
    });
    match r {
        Ok(Ok(())) => 0,
        Ok(Err((e, p))) => {
            if !bad_wr.is_null() {
                // SAFETY: the caller passes a writable out-pointer.
                unsafe { *bad_wr = p };
            }
            e
        }
        Err(_) => libc::EIO,
    }
}

/// `ibv_attach_mcast`: a UD QP receives what is sent to the group.
pub(crate) extern "C" fn ibv_attach_mcast(
    qp: *mut abi::IbvQp,
    gid: *const abi::IbvGid,
    lid: u16,
) -> c_int {
    mcast("ibv_attach_mcast", qp, gid, Some(softib::Lid(lid)))
}

/// `ibv_detach_mcast`.
pub(crate) extern "C" fn ibv_detach_mcast(
    qp: *mut abi::IbvQp,
    gid: *const abi::IbvGid,
    _lid: u16,
) -> c_int {
    mcast("ibv_detach_mcast", qp, gid, None)
}

/// Attaches `qp` to the group `gid` (with its LID) or, given no LID, detaches it.
fn mcast(
    verb: &str,
    qp: *mut abi::IbvQp,
    gid: *const abi::IbvGid,
    attach: Option<softib::Lid>,
) -> c_int {
    ffi_errno(|| {
        let q = self::qp(qp)?;
        if gid.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller passes a readable GID.
        let g = softib::Gid(unsafe { (*gid).raw });
        // SAFETY: a QP's context outlives it.
        let ctx = unsafe { ctx_of(q.ctx) };
        let mut inner = ctx.lock();
        let r = match attach {
            Some(lid) => inner.ctx.attach_mcast(ctx.dev, q.qpn, g, lid),
            None => inner.ctx.detach_mcast(ctx.dev, q.qpn, g),
        };
        r.map_err(|e| refused(verb, &e))
    })
}

/// `ibv_query_ece`: Enhanced Connection Establishment is not softib's (EOPNOTSUPP, as rxe's
/// provider answers; librdmacm then connects without it).
pub(crate) extern "C" fn ibv_query_ece(_qp: *mut abi::IbvQp, _ece: *mut abi::IbvEce) -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_set_ece`: see [`ibv_query_ece`].
pub(crate) extern "C" fn ibv_set_ece(_qp: *mut abi::IbvQp, _ece: *mut abi::IbvEce) -> c_int {
    crate::set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// `ibv_query_qp_data_in_order`: 0 — softib promises nothing about the order in which a
/// message's bytes land (`IBV_QUERY_QP_DATA_IN_ORDER_*` unset), as rxe.
pub(crate) extern "C" fn ibv_query_qp_data_in_order(
    _qp: *mut abi::IbvQp,
    _op: u32,
    _flags: u32,
) -> c_int {
    0
}
