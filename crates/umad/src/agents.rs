//! What the kernel's umad driver does for one open port, as a sans-IO machine: agents
//! registered per management class, class version, method mask (and OUI for the vendor
//! classes 0x30–0x4F), each with an agent id; the upper 32 bits of a request's TID rewritten to
//! the sending agent's, so that its response comes back to that agent; requests that get no
//! response within their timeout sent again, and after their retries handed back with status
//! ETIMEDOUT; RMPP responses reassembled, and large sends segmented, for agents that ask.
//! (Linux `drivers/infiniband/core/user_mad.c` and `mad.c` are the reference; IBA §13.4.)
//!
//! [`Agents`] never touches a socket or a clock: MADs come in with [`Agents::receive`], time
//! with [`Agents::expire`], and what the program reads leaves through [`Agents::pop`].

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use softib::mad::rmpp::{Reassembly, SA_HEADER_LEN};
use softib_wire::mad::sa::{self, rmpp_flags};
use softib_wire::mad::MAD_LEN;

/// Offset of the TID in a MAD's common header.
const TID_OFFSET: usize = 8;
/// Where the RMPP header starts and where an SA segment's data starts (IBA §13.6.2).
const RMPP_OFFSET: usize = 24;
const SA_DATA_OFFSET: usize = sa::HEADER_LEN;
/// The data of one SA segment.
const SA_SEG_DATA: usize = sa::DATA_LEN;
/// Agents one open port may register (`UMAD_CA_MAX_AGENTS`).
pub const MAX_AGENTS: usize = 32;
/// MADs waiting for the program beyond this are dropped (the kernel's queue is also bounded).
const MAX_QUEUED: usize = 4096;
/// Requests waiting for a response, per port.
const MAX_OUTSTANDING: usize = 4096;

/// The subnet management classes, which live on QP0.
pub fn is_smi_class(class: u8) -> bool {
    class == 0x01 || class == 0x81
}

/// The vendor classes whose agents also name an OUI (IBA §13.4.4, "vendor range 2").
pub fn is_vendor_oui_class(class: u8) -> bool {
    (0x30..=0x4f).contains(&class)
}

/// Whether a MAD with this method is a response (IBA §13.4.5: the R bit; TrapRepress is the
/// response to a Trap).
pub fn is_response(method: u8) -> bool {
    method & 0x80 != 0 || method == 0x07
}

/// One `umad_register`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    /// The management class (IBA §13.4.4).
    pub class: u8,
    /// Its class version.
    pub class_version: u8,
    /// Bit m: the agent receives requests with method m.
    pub methods: u128,
    /// For the vendor classes 0x30–0x4F.
    pub oui: [u8; 3],
    /// 0: no RMPP; 1: the library reassembles and segments for the agent.
    pub rmpp_version: u8,
}

#[derive(Debug, Clone, Copy)]
struct Agent {
    reg: Registration,
    hi_tid: u32,
}

/// A MAD (with where it came from or goes) as the program sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// The agent it is for.
    pub agent: u32,
    /// 0, or ETIMEDOUT for a request that got no response.
    pub status: u32,
    /// The sender's LID and QP (host order); 0 for a timed-out send.
    pub slid: u16,
    /// The sender's QP.
    pub src_qpn: u32,
    /// Whether it came on QP1 (a GMP) rather than QP0.
    pub qp1: bool,
    /// The MAD (longer than 256 bytes once reassembled; the 24-byte common header of the
    /// request for a timed-out send).
    pub data: Vec<u8>,
}

/// What a program hands `umad_send`.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    /// The sending agent.
    pub agent: u32,
    /// The MAD (more than 256 bytes for an RMPP agent's SA send).
    pub mad: &'a [u8],
    /// The destination LID (ignored for a directed-route SMP).
    pub dlid: u16,
    /// The destination QP of a GMP.
    pub dest_qpn: u32,
    /// How long to wait for the response of a request (0: no response expected).
    pub timeout_ms: u32,
    /// How many times to send it again when none comes.
    pub retries: u32,
}

/// A send that expects a response.
#[derive(Debug, Clone)]
struct Outstanding {
    agent: u32,
    class: u8,
    deadline: Instant,
    timeout: Duration,
    retries_left: u32,
    /// What to send again.
    send: Send,
}

/// A MAD to put on the wire: the daemon's SendSmp or SendGmp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Send {
    /// QP0 (an SMP) or QP1.
    pub smi: bool,
    /// Directed route from this port: SMP class 0x81 whose DrSLID is not a unicast LID. A
    /// directed-route SMP with a DrSLID (ibportstate's peer query) travels LID-routed to
    /// `dlid` first, where its directed part begins (IBA §14.2.2.1).
    pub directed: bool,
    /// The destination LID (ignored for a directed-route SMP).
    pub dlid: u16,
    /// The destination QP of a GMP.
    pub dest_qpn: u32,
    /// One or more 256-byte MADs (RMPP segments).
    pub mads: Vec<[u8; MAD_LEN]>,
}

/// Why a registration or send is refused: the errno value the kernel would give.
pub type Errno = i32;

/// The agents of one open port and the MADs in flight for them.
#[derive(Debug)]
pub struct Agents {
    slots: Vec<Option<Agent>>,
    /// The TID upper halves of this port's agents start here.
    hi_tid_base: u32,
    outstanding: BTreeMap<u64, Outstanding>,
    queue: VecDeque<Delivered>,
    /// RMPP responses being reassembled, by TID.
    reassembly: BTreeMap<u64, (Reassembly, Delivered)>,
    /// MADs nobody registered for (and responses nobody waits for).
    pub unclaimed: u64,
    /// MADs dropped because the program did not read its queue.
    pub overflow: u64,
}

impl Agents {
    /// No agents yet; their TIDs' upper halves are `hi_tid_base + agent id` (unique per
    /// process and port, so that responses find their way among all agents of the host).
    pub fn new(hi_tid_base: u32) -> Agents {
        Agents {
            slots: Vec::new(),
            hi_tid_base,
            outstanding: BTreeMap::new(),
            queue: VecDeque::new(),
            reassembly: BTreeMap::new(),
            unclaimed: 0,
            overflow: 0,
        }
    }

    /// Registers an agent; returns its id. EINVAL when another agent of this port already
    /// receives one of its methods of the class (as the kernel's "method in use"), ENOMEM past
    /// [`MAX_AGENTS`].
    pub fn register(&mut self, reg: Registration) -> Result<u32, Errno> {
        if reg.rmpp_version > 1 {
            return Err(libc::EINVAL);
        }
        let clash = self.slots.iter().flatten().any(|a| {
            a.reg.class == reg.class
                && a.reg.class_version == reg.class_version
                && a.reg.oui == reg.oui
                && a.reg.methods & reg.methods != 0
        });
        if clash {
            return Err(libc::EINVAL);
        }
        let id = match self.slots.iter().position(Option::is_none) {
            Some(free) => free,
            None if self.slots.len() < MAX_AGENTS => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => return Err(libc::ENOMEM),
        };
        self.slots[id] = Some(Agent {
            reg,
            hi_tid: self.hi_tid_base.wrapping_add(id as u32),
        });
        Ok(id as u32)
    }

    /// Unregisters agent `id`; its outstanding sends are forgotten. EINVAL for an unknown id.
    pub fn unregister(&mut self, id: u32) -> Result<(), Errno> {
        let slot = self
            .slots
            .get_mut(id as usize)
            .filter(|s| s.is_some())
            .ok_or(libc::EINVAL)?;
        *slot = None;
        self.outstanding.retain(|_, o| o.agent != id);
        self.queue.retain(|d| d.agent != id);
        Ok(())
    }

    /// The registration of agent `id`.
    pub fn registration(&self, id: u32) -> Option<Registration> {
        self.slots
            .get(id as usize)
            .copied()
            .flatten()
            .map(|a| a.reg)
    }

    /// Whether any agent receives requests of a class only the SM answers (SMPs, SA).
    pub fn wants_sm_requests(&self) -> bool {
        self.slots
            .iter()
            .flatten()
            .any(|a| a.reg.methods != 0 && (is_smi_class(a.reg.class) || a.reg.class == 0x03))
    }

    /// `umad_send` of `o.mad` (the bytes after the header, zero-padded to a whole MAD):
    /// returns what to send now. A request gets the agent's TID upper half and, with a
    /// timeout, is remembered until its response comes or its retries run out.
    pub fn send(&mut self, now: Instant, o: &Outgoing<'_>) -> Result<Send, Errno> {
        let Outgoing {
            agent: id,
            mad,
            dlid,
            dest_qpn,
            timeout_ms,
            retries,
        } = *o;
        let agent = self
            .slots
            .get(id as usize)
            .copied()
            .flatten()
            .ok_or(libc::EINVAL)?;
        if mad.len() < RMPP_OFFSET {
            return Err(libc::EINVAL);
        }
        let mut bytes = mad.to_vec();
        let (class, method) = (bytes[1], bytes[3]);
        let request = !is_response(method);
        if request {
            let low = u32::from_be_bytes(
                bytes[TID_OFFSET + 4..TID_OFFSET + 8]
                    .try_into()
                    .map_err(|_| libc::EINVAL)?,
            );
            let tid = (u64::from(agent.hi_tid) << 32) | u64::from(low);
            bytes[TID_OFFSET..TID_OFFSET + 8].copy_from_slice(&tid.to_be_bytes());
        }
        let rmpp = agent.reg.rmpp_version > 0 && class == 0x03;
        // An RMPP agent's MAD that says RMPP is active is segmented even when it fits one
        // MAD: the segment number and FIRST/LAST are the kernel's to set (opensm's SA sends
        // a one-record GetTableResp so).
        let mads = if bytes.len() > MAD_LEN || (rmpp && sa_rmpp_active(&bytes)) {
            if !rmpp {
                // Only SA agents that asked for RMPP may send more than one MAD.
                return Err(libc::EINVAL);
            }
            segments(&bytes)
        } else {
            let mut m = [0u8; MAD_LEN];
            m[..bytes.len()].copy_from_slice(&bytes);
            vec![m]
        };
        let send = Send {
            smi: is_smi_class(agent.reg.class),
            directed: class == 0x81 && !matches!(dr_slid(&bytes), Some(1..=0xBFFF)),
            dlid,
            dest_qpn,
            mads,
        };
        if request && timeout_ms > 0 {
            if self.outstanding.len() >= MAX_OUTSTANDING {
                return Err(libc::ENOMEM);
            }
            let tid = tid_of(&send.mads[0]);
            let timeout = Duration::from_millis(u64::from(timeout_ms));
            self.outstanding.insert(
                tid,
                Outstanding {
                    agent: id,
                    class,
                    deadline: now + timeout,
                    timeout,
                    retries_left: retries,
                    send: send.clone(),
                },
            );
        }
        Ok(send)
    }

    /// A MAD arrived (`qp1`: on QP1) from `slid`/`src_qpn`: queued for the agent it is for —
    /// a response for the agent whose request it answers (dropped when none waits for it, as
    /// the kernel drops an unsolicited response), a request for the agent registered for its
    /// class, version and method.
    pub fn receive(&mut self, mad: &[u8], qp1: bool, slid: u16, src_qpn: u32) {
        if mad.len() < RMPP_OFFSET {
            self.unclaimed += 1;
            return;
        }
        let (class, class_version, method) = (mad[1], mad[2], mad[3]);
        let tid = tid_of(mad);
        let mut delivered = Delivered {
            agent: 0,
            status: 0,
            slid,
            src_qpn,
            qp1,
            data: mad.to_vec(),
        };
        if is_response(method) {
            let Some(o) = self.outstanding.get(&tid).filter(|o| o.class == class) else {
                self.unclaimed += 1;
                return;
            };
            delivered.agent = o.agent;
            let rmpp = self
                .registration(o.agent)
                .is_some_and(|r| r.rmpp_version > 0);
            if rmpp && class == 0x03 && sa_rmpp_active(mad) {
                let (r, _) = self
                    .reassembly
                    .entry(tid)
                    .or_insert_with(|| (Reassembly::new(), delivered.clone()));
                r.add(mad);
                let done = r.is_complete();
                if !done {
                    return;
                }
                let Some((r, first)) = self.reassembly.remove(&tid) else {
                    return;
                };
                let (Some(table), Some(segs)) = (r.table(), r.segments()) else {
                    return;
                };
                let mut data = segs[0][..SA_DATA_OFFSET].to_vec();
                data.extend_from_slice(&table.payload);
                delivered = Delivered { data, ..first };
            }
            self.outstanding.remove(&tid);
            self.push(delivered);
            return;
        }
        let oui = [
            *mad.get(37).unwrap_or(&0),
            *mad.get(38).unwrap_or(&0),
            *mad.get(39).unwrap_or(&0),
        ];
        let found = self.slots.iter().enumerate().find_map(|(i, a)| {
            let a = a.as_ref()?;
            let r = a.reg;
            (r.class == class
                && r.class_version == class_version
                && r.methods & (1u128 << (method & 0x7f)) != 0
                && (!is_vendor_oui_class(class) || r.oui == oui)
                && is_smi_class(class) != qp1)
                .then_some(i as u32)
        });
        match found {
            Some(id) => {
                delivered.agent = id;
                self.push(delivered);
            }
            None => self.unclaimed += 1,
        }
    }

    fn push(&mut self, d: Delivered) {
        if self.queue.len() >= MAX_QUEUED {
            self.overflow += 1;
            return;
        }
        self.queue.push_back(d);
    }

    /// Time passed: requests past their deadline are sent again (returned) while retries
    /// remain, and then handed back with status ETIMEDOUT.
    pub fn expire(&mut self, now: Instant) -> Vec<Send> {
        let due: Vec<u64> = self
            .outstanding
            .iter()
            .filter(|(_, o)| o.deadline <= now)
            .map(|(t, _)| *t)
            .collect();
        let mut resend = Vec::new();
        for tid in due {
            let Some(o) = self.outstanding.get_mut(&tid) else {
                continue;
            };
            if o.retries_left > 0 {
                o.retries_left -= 1;
                o.deadline = now + o.timeout;
                resend.push(o.send.clone());
                continue;
            }
            let Some(o) = self.outstanding.remove(&tid) else {
                continue;
            };
            self.reassembly.remove(&tid);
            self.push(Delivered {
                agent: o.agent,
                status: libc::ETIMEDOUT as u32,
                slid: 0,
                src_qpn: 0,
                qp1: !o.send.smi,
                data: o.send.mads[0][..RMPP_OFFSET].to_vec(),
            });
        }
        resend
    }

    /// When [`Agents::expire`] next has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.outstanding.values().map(|o| o.deadline).min()
    }

    /// The oldest MAD for the program, if its `room` bytes hold it; `Err(needed)` (and the
    /// MAD stays first) when they do not.
    pub fn pop(&mut self, room: usize) -> Option<Result<Delivered, (Delivered, usize)>> {
        let first = self.queue.front()?;
        if first.data.len() > room {
            return Some(Err((first.clone(), first.data.len())));
        }
        self.queue.pop_front().map(Ok)
    }

    /// Whether a MAD waits for the program.
    pub fn has_queued(&self) -> bool {
        !self.queue.is_empty()
    }
}

/// The DrSLID of a directed-route SMP (bytes 32–33).
fn dr_slid(mad: &[u8]) -> Option<u16> {
    mad.get(32..34).map(|b| u16::from_be_bytes([b[0], b[1]]))
}

fn tid_of(mad: &[u8]) -> u64 {
    mad.get(TID_OFFSET..TID_OFFSET + 8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_be_bytes)
}

/// Whether an SA MAD's RMPP header says RMPP is active.
fn sa_rmpp_active(mad: &[u8]) -> bool {
    mad.get(RMPP_OFFSET + 2)
        .is_some_and(|f| f & rmpp_flags::ACTIVE != 0)
}

/// An SA MAD longer than one MAD, as RMPP DATA segments (IBA §13.6.4): each repeats the
/// first 56 bytes with its RMPP header (version 1, DATA, ACTIVE, FIRST/LAST, SegmentNumber,
/// PayloadLength: the whole payload in the first, the rest of it in the last) and carries the
/// next 200 bytes of the SA data.
fn segments(bytes: &[u8]) -> Vec<[u8; MAD_LEN]> {
    let data = &bytes[SA_DATA_OFFSET..];
    let n = data.len().div_ceil(SA_SEG_DATA).max(1);
    // PayloadLength counts each segment's SA header with its data.
    let total = data.len() + n * SA_HEADER_LEN;
    (0..n)
        .map(|i| {
            let mut m = [0u8; MAD_LEN];
            m[..SA_DATA_OFFSET].copy_from_slice(&bytes[..SA_DATA_OFFSET]);
            let chunk = &data[i * SA_SEG_DATA..((i + 1) * SA_SEG_DATA).min(data.len())];
            m[SA_DATA_OFFSET..SA_DATA_OFFSET + chunk.len()].copy_from_slice(chunk);
            let first = i == 0;
            let last = i + 1 == n;
            let mut flags = rmpp_flags::ACTIVE;
            if first {
                flags |= rmpp_flags::FIRST;
            }
            if last {
                flags |= rmpp_flags::LAST;
            }
            let paylen = if first {
                total
            } else if last {
                chunk.len() + SA_HEADER_LEN
            } else {
                0
            };
            m[RMPP_OFFSET] = 1; // RMPPVersion
            m[RMPP_OFFSET + 1] = 1; // RMPPType DATA
            m[RMPP_OFFSET + 2] = flags; // RRespTime 0 | RMPPFlags
            m[RMPP_OFFSET + 3] = 0; // RMPPStatus
            m[RMPP_OFFSET + 4..RMPP_OFFSET + 8].copy_from_slice(&((i + 1) as u32).to_be_bytes());
            m[RMPP_OFFSET + 8..RMPP_OFFSET + 12].copy_from_slice(&(paylen as u32).to_be_bytes());
            m
        })
        .collect()
}

#[cfg(test)]
mod tests;
