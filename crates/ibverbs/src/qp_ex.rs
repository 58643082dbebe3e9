//! The `ibv_wr_*` API: the function-pointer table of `struct ibv_qp_ex`.
//!
//! `ibv_wr_start` opens a batch (waiting, as rdma-core's providers take the send queue's
//! lock, while another thread has one open), each `ibv_wr_<op>` starts a work request with
//! the `wr_id` and `wr_flags` the program wrote into the `ibv_qp_ex`, the `ibv_wr_set_*`
//! calls fill its data and destination, and `ibv_wr_complete` posts the batch as one list
//! (returning the first error any call of the batch met; nothing is posted then), or
//! `ibv_wr_abort` drops it.

use std::ffi::{c_int, c_void};
use std::thread::ThreadId;

use softib::{Qpn, RKey, RemoteAddr, SendFlags, SendWr, Sge, UdDest, WrOpcode};
use softib_verbs_abi as abi;
use softib_verbs_abi::send_ops as ops;

use crate::objects::{ctx_of, object, Qp};
use crate::refused;

/// The `IBV_QP_EX_WITH_*` operations softib has.
pub(crate) const SUPPORTED_SEND_OPS: u64 = ops::RDMA_WRITE
    | ops::RDMA_WRITE_WITH_IMM
    | ops::SEND
    | ops::SEND_WITH_IMM
    | ops::RDMA_READ
    | ops::ATOMIC_CMP_AND_SWP
    | ops::ATOMIC_FETCH_AND_ADD
    | ops::SEND_WITH_INV;

/// A batch being built.
#[derive(Default)]
pub(crate) struct Batch {
    /// The thread that opened it (`ibv_wr_start`), while it is open.
    owner: Option<ThreadId>,
    wrs: Vec<SendWr>,
    /// The first error of the batch, which `ibv_wr_complete` returns.
    error: Option<c_int>,
}

/// Fills the `ibv_wr_*` table of a QP.
pub(crate) fn fill(c: &mut abi::IbvQpEx) {
    c.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    c.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    c.wr_bind_mw = Some(wr_bind_mw);
    c.wr_local_inv = Some(wr_local_inv);
    c.wr_rdma_read = Some(wr_rdma_read);
    c.wr_rdma_write = Some(wr_rdma_write);
    c.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    c.wr_send = Some(wr_send);
    c.wr_send_imm = Some(wr_send_imm);
    c.wr_send_inv = Some(wr_send_inv);
    c.wr_send_tso = Some(wr_send_tso);
    c.wr_set_ud_addr = Some(wr_set_ud_addr);
    c.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    c.wr_set_inline_data = Some(wr_set_inline_data);
    c.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    c.wr_set_sge = Some(wr_set_sge);
    c.wr_set_sge_list = Some(wr_set_sge_list);
    c.wr_start = Some(wr_start);
    c.wr_complete = Some(wr_complete);
    c.wr_abort = Some(wr_abort);
    c.wr_atomic_write = Some(wr_atomic_write);
}

fn qp<'a>(p: *mut abi::IbvQpEx) -> Option<&'a Qp> {
    // SAFETY: the program passes the `ibv_qp_ex` of a QP it created.
    unsafe { object::<Qp>(p) }.ok()
}

/// Runs `f` on the open batch of the calling thread; a call outside `ibv_wr_start` /
/// `ibv_wr_complete` has no batch to go to and is dropped.
fn with_batch(p: *mut abi::IbvQpEx, f: impl FnOnce(&Qp, &mut Batch)) {
    let _ = crate::catch(|| {
        let Some(q) = qp(p) else { return };
        let mut b = q.batch.lock().unwrap_or_else(|e| e.into_inner());
        if b.owner != Some(std::thread::current().id()) {
            return;
        }
        f(q, &mut b);
    });
}

/// Starts a work request of the batch.
fn start_wr(p: *mut abi::IbvQpEx, op: u64, opcode: WrOpcode) {
    with_batch(p, |q, b| {
        if q.send_ops.is_some_and(|allowed| allowed & op == 0) {
            // An operation the QP was not created for.
            b.error.get_or_insert(libc::EINVAL);
            return;
        }
        // SAFETY: fields of the live QP the program wrote for this request.
        let (wr_id, wr_flags) = unsafe { ((*q.c.get()).wr_id, (*q.c.get()).wr_flags) };
        let keep = abi::send_flags::FENCE | abi::send_flags::SIGNALED | abi::send_flags::SOLICITED;
        b.wrs.push(SendWr {
            wr_id,
            opcode,
            sg_list: Vec::new(),
            flags: SendFlags(wr_flags & keep),
            inline_data: None,
            ud: None,
        });
    });
}

/// Changes the last work request of the batch (an error if there is none).
fn last_wr(p: *mut abi::IbvQpEx, f: impl FnOnce(&mut SendWr) -> Result<(), c_int>) {
    with_batch(p, |_, b| {
        let r = match b.wrs.last_mut() {
            Some(w) => f(w),
            None => Err(libc::EINVAL),
        };
        if let Err(e) = r {
            b.error.get_or_insert(e);
        }
    });
}

/// An operation softib does not have: the batch fails with EOPNOTSUPP.
fn unsupported(p: *mut abi::IbvQpEx) {
    with_batch(p, |_, b| {
        b.error.get_or_insert(libc::EOPNOTSUPP);
    });
}

fn remote(rkey: u32, addr: u64) -> RemoteAddr {
    RemoteAddr {
        addr,
        rkey: RKey(rkey),
    }
}

unsafe extern "C" fn wr_start(p: *mut abi::IbvQpEx) {
    let _ = crate::catch(|| {
        let Some(q) = qp(p) else { return };
        let me = std::thread::current().id();
        let mut b = q.batch.lock().unwrap_or_else(|e| e.into_inner());
        while b.owner.is_some_and(|o| o != me) {
            b = q.batch_done.wait(b).unwrap_or_else(|e| e.into_inner());
        }
        b.owner = Some(me);
        b.wrs.clear();
        b.error = None;
    });
}

unsafe extern "C" fn wr_complete(p: *mut abi::IbvQpEx) -> c_int {
    crate::catch(|| {
        let Some(q) = qp(p) else {
            return libc::EINVAL;
        };
        let mut b = q.batch.lock().unwrap_or_else(|e| e.into_inner());
        if b.owner != Some(std::thread::current().id()) {
            // No `ibv_wr_start` on this thread.
            return libc::EINVAL;
        }
        let wrs = std::mem::take(&mut b.wrs);
        let error = b.error.take();
        let r = match error {
            Some(e) => e,
            None if wrs.is_empty() => 0,
            None => {
                // SAFETY: a QP's context outlives it.
                let ctx = unsafe { ctx_of(q.ctx) };
                let r = ctx.lock().ctx.post_send(ctx.dev, q.qpn, wrs);
                match r {
                    Ok(()) => 0,
                    Err(e) => refused("ibv_wr_complete", &e),
                }
            }
        };
        // Posted while the batch was still this thread's, so batches post in order.
        b.owner = None;
        drop(b);
        q.batch_done.notify_one();
        r
    })
    .unwrap_or(libc::EIO)
}

unsafe extern "C" fn wr_abort(p: *mut abi::IbvQpEx) {
    let _ = crate::catch(|| {
        let Some(q) = qp(p) else { return };
        let mut b = q.batch.lock().unwrap_or_else(|e| e.into_inner());
        if b.owner == Some(std::thread::current().id()) {
            b.wrs.clear();
            b.error = None;
            b.owner = None;
            drop(b);
            q.batch_done.notify_one();
        }
    });
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    p: *mut abi::IbvQpEx,
    rkey: u32,
    addr: u64,
    compare: u64,
    swap: u64,
) {
    start_wr(
        p,
        ops::ATOMIC_CMP_AND_SWP,
        WrOpcode::AtomicCmpAndSwp {
            remote: remote(rkey, addr),
            compare,
            swap,
        },
    );
}

unsafe extern "C" fn wr_atomic_fetch_add(p: *mut abi::IbvQpEx, rkey: u32, addr: u64, add: u64) {
    start_wr(
        p,
        ops::ATOMIC_FETCH_AND_ADD,
        WrOpcode::AtomicFetchAndAdd {
            remote: remote(rkey, addr),
            add,
        },
    );
}

unsafe extern "C" fn wr_rdma_read(p: *mut abi::IbvQpEx, rkey: u32, addr: u64) {
    start_wr(p, ops::RDMA_READ, WrOpcode::RdmaRead(remote(rkey, addr)));
}

unsafe extern "C" fn wr_rdma_write(p: *mut abi::IbvQpEx, rkey: u32, addr: u64) {
    start_wr(p, ops::RDMA_WRITE, WrOpcode::RdmaWrite(remote(rkey, addr)));
}

unsafe extern "C" fn wr_rdma_write_imm(p: *mut abi::IbvQpEx, rkey: u32, addr: u64, imm: u32) {
    start_wr(
        p,
        ops::RDMA_WRITE_WITH_IMM,
        // `imm_data` comes in network order.
        WrOpcode::RdmaWriteWithImm(remote(rkey, addr), u32::from_be(imm)),
    );
}

unsafe extern "C" fn wr_send(p: *mut abi::IbvQpEx) {
    start_wr(p, ops::SEND, WrOpcode::Send);
}

unsafe extern "C" fn wr_send_imm(p: *mut abi::IbvQpEx, imm: u32) {
    start_wr(
        p,
        ops::SEND_WITH_IMM,
        WrOpcode::SendWithImm(u32::from_be(imm)),
    );
}

unsafe extern "C" fn wr_send_inv(p: *mut abi::IbvQpEx, rkey: u32) {
    start_wr(p, ops::SEND_WITH_INV, WrOpcode::SendWithInv(RKey(rkey)));
}

/// Memory windows, local invalidate, TSO (raw packet QPs), XRC and atomic write are not
/// softib's: QPs cannot be created with them, and a call fails its batch.
unsafe extern "C" fn wr_bind_mw(
    p: *mut abi::IbvQpEx,
    _mw: *mut c_void,
    _rkey: u32,
    _i: *const c_void,
) {
    unsupported(p);
}
unsafe extern "C" fn wr_local_inv(p: *mut abi::IbvQpEx, _rkey: u32) {
    unsupported(p);
}
unsafe extern "C" fn wr_send_tso(p: *mut abi::IbvQpEx, _hdr: *mut c_void, _sz: u16, _mss: u16) {
    unsupported(p);
}
unsafe extern "C" fn wr_set_xrc_srqn(p: *mut abi::IbvQpEx, _srqn: u32) {
    unsupported(p);
}
unsafe extern "C" fn wr_atomic_write(
    p: *mut abi::IbvQpEx,
    _rkey: u32,
    _addr: u64,
    _v: *const c_void,
) {
    unsupported(p);
}

unsafe extern "C" fn wr_set_ud_addr(
    p: *mut abi::IbvQpEx,
    ah: *mut abi::IbvAh,
    qpn: u32,
    qkey: u32,
) {
    last_wr(p, |w| {
        w.ud = Some(UdDest {
            ah: crate::ah::handle_of(ah)?,
            remote_qpn: Qpn::new(qpn),
            remote_qkey: qkey,
        });
        Ok(())
    });
}

unsafe extern "C" fn wr_set_sge(p: *mut abi::IbvQpEx, lkey: u32, addr: u64, length: u32) {
    last_wr(p, |w| {
        w.sg_list = vec![Sge { addr, length, lkey }];
        w.inline_data = None;
        Ok(())
    });
}

unsafe extern "C" fn wr_set_sge_list(p: *mut abi::IbvQpEx, n: usize, list: *const abi::IbvSge) {
    last_wr(p, |w| {
        if n > 0 && list.is_null() {
            return Err(libc::EINVAL);
        }
        let list: &[abi::IbvSge] = if n == 0 {
            &[]
        } else {
            // SAFETY: the program's array of `n` SGEs.
            unsafe { std::slice::from_raw_parts(list, n) }
        };
        w.sg_list = list
            .iter()
            .map(|s| Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            })
            .collect();
        w.inline_data = None;
        Ok(())
    });
}

/// Inline data is copied now: the program may reuse its buffer once the call returns.
fn set_inline(w: &mut SendWr, parts: &[(u64, usize)]) -> Result<(), c_int> {
    if w.opcode.is_read_or_atomic() {
        return Err(libc::EINVAL);
    }
    let sges: Vec<Sge> = parts
        .iter()
        .map(|&(addr, len)| Sge {
            addr,
            length: u32::try_from(len).unwrap_or(u32::MAX),
            lkey: 0,
        })
        .collect();
    if parts.iter().any(|&(a, l)| a == 0 && l > 0) {
        return Err(libc::EINVAL);
    }
    w.inline_data = Some(crate::qp::inline_bytes(&sges));
    w.sg_list.clear();
    w.flags = SendFlags(w.flags.0 | abi::send_flags::INLINE);
    Ok(())
}

unsafe extern "C" fn wr_set_inline_data(p: *mut abi::IbvQpEx, addr: *mut c_void, length: usize) {
    last_wr(p, |w| set_inline(w, &[(addr as u64, length)]));
}

unsafe extern "C" fn wr_set_inline_data_list(
    p: *mut abi::IbvQpEx,
    n: usize,
    list: *const abi::IbvDataBuf,
) {
    last_wr(p, |w| {
        if n > 0 && list.is_null() {
            return Err(libc::EINVAL);
        }
        let list: &[abi::IbvDataBuf] = if n == 0 {
            &[]
        } else {
            // SAFETY: the program's array of `n` buffers.
            unsafe { std::slice::from_raw_parts(list, n) }
        };
        let parts: Vec<(u64, usize)> = list.iter().map(|b| (b.addr as u64, b.length)).collect();
        set_inline(w, &parts)
    });
}
