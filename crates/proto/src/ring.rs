//! What the shared-memory rings carry, and the rules both sides follow around them.
//!
//! The ring itself — a single-producer, single-consumer ring of fixed slots, each a 2-byte
//! length and a message, with a consumer's polling flag — is `softib_net::ring::Ring`. Two
//! kinds travel between a process and the daemon:
//!
//! - **Completion rings**, one per CQ (`AttachCqRing`, the ring's memfd with the request):
//!   the daemon produces, the library consumes. [`CQ_RING_SLOT_LEN`]-byte slots, each a
//!   completion as [`encode_completion`] writes it (a postcard `WorkCompletion`). The ring has
//!   room for every completion the CQ can hold, so the engine's CQ overflows exactly as it
//!   would without a ring; after the library drains a *full* ring it asks with a `PollCq`, since
//!   completions may be waiting in the daemon's CQ. The library keeps each ring's polling flag
//!   set while it polls; before it sleeps it clears the flags of all its rings and looks once
//!   more. The daemon, after filling a ring whose flag is clear, adds to the client's wakeup
//!   eventfd (`AttachWakeup`), once a turn.
//! - **The submission ring**, one per client (`AttachSubmitRing`, the memfd and a doorbell
//!   eventfd with the request): the library produces, the daemon consumes.
//!   [`SUBMIT_SLOT_LEN`]-byte slots, each a [`Submit`] as [`SubmitRef::encode`] writes it. The
//!   library puts a work request there only after checking it as the verb would (QP state,
//!   queue room counted from polled completions, `softib_engine::check_send_wr`), so the verb
//!   fails at once; anything it cannot vouch for goes as a request. The daemon executes the
//!   ring's entries in order at the start of each turn and before each request of the client;
//!   it sets the polling flag while its loop turns and clears it (then looks once more) before
//!   it may sleep; the library rings the doorbell after a push only when the flag is clear.
//!
//! With the order `Ring::set_polling` gives both stores and loads, one of the two sides always
//! sees the other: no completion or post is slept through.

use serde::{Deserialize, Serialize};
use softib_engine::verbs::{RecvWr, SendWr, WorkCompletion};
use softib_net::ring::LEN_PREFIX;
use softib_wire::Qpn;

/// The size of a completion ring slot.
pub const CQ_RING_SLOT_LEN: usize = 128;
/// The most slots a completion ring may have.
pub const CQ_RING_SLOTS_MAX: u64 = 1 << 16;
/// The size of a submission ring slot.
pub const SUBMIT_SLOT_LEN: usize = 512;
/// The most slots a submission ring may have.
pub const SUBMIT_SLOTS_MAX: u32 = 1 << 16;

/// One entry of a submission ring: a work request for a QP the client owns. The library has
/// checked it as `ibv_post_*` would (queue room, SGEs, inline size, opcode for the QP type),
/// so that the verb fails at once and not here.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Submit {
    /// `ibv_post_send` of one WR.
    Send {
        /// Device index.
        dev: u32,
        /// The QP.
        qpn: Qpn,
        /// The WR.
        wr: SendWr,
    },
    /// `ibv_post_recv` of one WR.
    Recv {
        /// Device index.
        dev: u32,
        /// The QP.
        qpn: Qpn,
        /// The WR.
        wr: RecvWr,
    },
}

/// [`Submit`] by reference, for the library to encode a work request without copying it:
/// the same variants in the same order, so its encoding is exactly [`Submit`]'s.
#[derive(Debug, Clone, Copy, Serialize)]
pub enum SubmitRef<'a> {
    /// `ibv_post_send` of one WR.
    Send {
        /// Device index.
        dev: u32,
        /// The QP.
        qpn: Qpn,
        /// The WR.
        wr: &'a SendWr,
    },
    /// `ibv_post_recv` of one WR.
    Recv {
        /// Device index.
        dev: u32,
        /// The QP.
        qpn: Qpn,
        /// The WR.
        wr: &'a RecvWr,
    },
}

/// The most bytes one submission entry may have: a slot less the ring's length prefix.
pub const SUBMIT_ENTRY_MAX: usize = SUBMIT_SLOT_LEN - LEN_PREFIX;
/// The most bytes one completion entry may have.
pub const COMPLETION_ENTRY_MAX: usize = CQ_RING_SLOT_LEN - LEN_PREFIX;

impl Submit {
    /// Decodes a submission entry (what the daemon pops).
    #[inline]
    pub fn decode(entry: &[u8]) -> Result<Submit, String> {
        crate::decode(entry)
    }
}

impl SubmitRef<'_> {
    /// Encodes this entry into `buf`; `None` when it does not fit a slot (the library then
    /// posts that work request as a request).
    #[inline]
    pub fn encode<'b>(&self, buf: &'b mut [u8; SUBMIT_ENTRY_MAX]) -> Option<&'b [u8]> {
        postcard::to_slice(self, buf).ok().map(|b| &*b)
    }
}

/// Encodes a completion into `buf`; `None` when it does not fit a slot (a `WorkCompletion`
/// encodes in well under one; postcard refuses rather than truncates).
#[inline]
pub fn encode_completion<'b>(
    wc: &WorkCompletion,
    buf: &'b mut [u8; COMPLETION_ENTRY_MAX],
) -> Option<&'b [u8]> {
    postcard::to_slice(wc, buf).ok().map(|b| &*b)
}

/// Decodes a completion entry.
#[inline]
pub fn decode_completion(bytes: &[u8]) -> Result<WorkCompletion, String> {
    crate::decode(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_submit_by_reference_encodes_as_the_submit_itself() {
        use softib_engine::verbs::{SendFlags, Sge, UdDest, WrOpcode};
        let sges = vec![
            Sge {
                addr: 0x1234_5678_9abc,
                length: 4096,
                lkey: 0x0102_0304,
            },
            Sge {
                addr: 7,
                length: 1,
                lkey: 9,
            },
        ];
        let send = SendWr {
            wr_id: u64::MAX - 3,
            opcode: WrOpcode::SendWithImm(0xdead_beef),
            sg_list: sges.clone(),
            flags: SendFlags::SIGNALED,
            inline_data: Some(vec![1, 2, 3]),
            ud: Some(UdDest {
                ah: softib_engine::AhHandle(5),
                remote_qpn: Qpn::new(0x12_3456),
                remote_qkey: 0x8000_0011,
            }),
        };
        let recv = RecvWr {
            wr_id: 42,
            sg_list: sges,
        };
        let qpn = Qpn::new(0xab_cdef);
        let by_value = [
            Submit::Send {
                dev: 3,
                qpn,
                wr: send.clone(),
            },
            Submit::Recv {
                dev: 1,
                qpn,
                wr: recv.clone(),
            },
        ];
        let by_ref = [
            SubmitRef::Send {
                dev: 3,
                qpn,
                wr: &send,
            },
            SubmitRef::Recv {
                dev: 1,
                qpn,
                wr: &recv,
            },
        ];
        for (v, r) in by_value.iter().zip(&by_ref) {
            let bytes = postcard::to_stdvec(r).unwrap();
            assert_eq!(bytes, postcard::to_stdvec(v).unwrap());
            let back: Submit = postcard::from_bytes(&bytes).unwrap();
            assert_eq!(postcard::to_stdvec(&back).unwrap(), bytes);
        }
    }

    #[test]
    fn an_entry_larger_than_a_slot_is_refused_not_cut() {
        let wr = SendWr {
            wr_id: 1,
            opcode: softib_engine::verbs::WrOpcode::Send,
            sg_list: Vec::new(),
            flags: softib_engine::verbs::SendFlags::default(),
            inline_data: Some(vec![0xab; SUBMIT_SLOT_LEN]),
            ud: None,
        };
        let qpn = Qpn::new(9);
        let mut buf = [0u8; SUBMIT_ENTRY_MAX];
        let big = SubmitRef::Send {
            dev: 0,
            qpn,
            wr: &wr,
        };
        assert!(big.encode(&mut buf).is_none());
        let small = SendWr {
            inline_data: Some(vec![0xab; 64]),
            ..wr.clone()
        };
        let entry = SubmitRef::Send {
            dev: 0,
            qpn,
            wr: &small,
        };
        let bytes = entry.encode(&mut buf).unwrap().to_vec();
        match Submit::decode(&bytes).unwrap() {
            Submit::Send { dev: 0, wr, .. } => assert_eq!(wr, small),
            other => panic!("{other:?}"),
        }
        assert!(Submit::decode(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn a_completion_crosses_a_ring_whole() {
        use softib_engine::verbs::{WcOpcode, WcStatus};
        use softib_net::ring::Ring;
        // The daemon's end maps the memfd the library made, as AttachCqRing does.
        let library = Ring::create("softib-proto-test", 4, CQ_RING_SLOT_LEN).unwrap();
        let daemon = Ring::from_fd(
            library.fd().try_clone_to_owned().unwrap(),
            4,
            CQ_RING_SLOT_LEN,
        )
        .unwrap();
        let wc = WorkCompletion {
            wr_id: u64::MAX,
            status: WcStatus::RemAccessErr,
            opcode: WcOpcode::RecvRdmaWithImm,
            vendor_err: 0x1234,
            byte_len: u32::MAX,
            imm_data: Some(0xdead_beef),
            invalidated_rkey: Some(u32::MAX),
            qp_num: Qpn::new(0xff_fffe),
            src_qp: Qpn::new(0x12_3456),
            grh: true,
            slid: softib_wire::Lid(0xbfff),
            sl: 15,
            pkey_index: u16::MAX,
        };
        let mut buf = [0u8; COMPLETION_ENTRY_MAX];
        assert!(daemon
            .push(encode_completion(&wc, &mut buf).unwrap())
            .unwrap());
        let mut out = Vec::new();
        assert!(library.pop(&mut out).unwrap());
        assert_eq!(decode_completion(&out).unwrap(), wc);
        assert!(decode_completion(&[0xff; 3]).is_err());
    }
}
