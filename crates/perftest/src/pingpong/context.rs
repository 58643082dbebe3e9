//! The local resources of a pingpong program (`struct pingpong_context`): buffer, PD, MR, CQ
//! and QP, the QP's transitions with upstream's attributes, the posts, and what to say when
//! nothing completes.

use std::time::Duration;

use softib::{
    AccessFlags, AddressVector, AttrMask, Context, DeviceInfo, Gid, GlobalRoute, Lid, PortInfo,
    Psn, QpAttr, QpCap, QpInitAttr, QpState, QpType, Qpn, RecvWr, SendFlags, SendWr, Sge, UdDest,
    WrOpcode,
};

use super::args::Args;
use super::exchange::Dest;
use super::{because, Fail, Pp, Result, Transport, FILL, GRH_BYTES, RECV_WRID, SEND_WRID};
use crate::port::StallWatch;

impl Pp {
    /// `pp_init_ctx`: buffer, PD, MR, CQ, QP, and the QP to INIT.
    pub(super) fn new(
        mut ctx: Context,
        dev: u32,
        info: DeviceInfo,
        port: PortInfo,
        a: &Args,
        t: Transport,
    ) -> Result<Pp> {
        let size = a.size as usize;
        let len = if t == Transport::Ud {
            size + GRH_BYTES
        } else {
            size
        };
        let buf = ctx
            .alloc_buffer(len.max(1))
            .map_err(|e| because("Couldn't allocate work buf.", e))?;
        buf.write(0, &vec![FILL; len]);
        let pd = ctx
            .alloc_pd(dev)
            .map_err(|e| because("Couldn't allocate PD", e))?;
        let mr = ctx
            .reg_mr(dev, pd, &buf, 0, len.max(1), AccessFlags::LOCAL_WRITE)
            .map_err(|e| because("Couldn't register MR", e))?;
        let cq = ctx
            .create_cq(dev, a.rx_depth.saturating_add(1))
            .map_err(|e| because("Couldn't create CQ", e))?;
        let qp_type = match t {
            Transport::Rc => QpType::Rc,
            Transport::Uc => QpType::Uc,
            Transport::Ud => QpType::Ud,
        };
        let qpn = ctx
            .create_qp(
                dev,
                QpInitAttr {
                    qp_type,
                    pd,
                    send_cq: cq,
                    recv_cq: cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: 1,
                        max_recv_wr: a.rx_depth,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    sq_sig_all: false,
                },
            )
            .map_err(|e| because("Couldn't create QP", e))?;
        // Sends only: no remote access at all.
        let (attr, mask) = crate::port::init_attr(t == Transport::Ud, a.ib_port, AccessFlags::NONE);
        ctx.modify_qp(dev, qpn, &attr, mask)
            .map_err(|e| because("Failed to modify QP to INIT", e))?;
        Ok(Pp {
            ctx,
            dev,
            info,
            port,
            t,
            pd,
            cq,
            qpn,
            buf,
            mr,
            ah: None,
            size,
            rx_depth: a.rx_depth,
        })
    }

    /// Posts `n` receives of the whole buffer (UD: the GRH area and the message).
    pub(super) fn post_recv(&mut self, n: u32) -> Result<()> {
        let length = if self.t == Transport::Ud {
            self.size + GRH_BYTES
        } else {
            self.size
        } as u32;
        let wrs = (0..n)
            .map(|_| RecvWr {
                wr_id: RECV_WRID,
                sg_list: vec![Sge {
                    addr: self.buf.addr(),
                    length,
                    lkey: self.mr.lkey,
                }],
            })
            .collect();
        self.ctx
            .post_recv(self.dev, self.qpn, wrs)
            .map_err(|e| because(&format!("Couldn't post receive ({n})"), e))
    }

    /// Posts the one send (UD: from after the GRH area, to the peer's QP).
    pub(super) fn post_send(&mut self, remote: &Dest) -> Result<()> {
        let off = if self.t == Transport::Ud {
            GRH_BYTES
        } else {
            0
        };
        let wr = SendWr {
            wr_id: SEND_WRID,
            opcode: WrOpcode::Send,
            sg_list: vec![Sge {
                addr: self.buf.addr() + off as u64,
                length: self.size as u32,
                lkey: self.mr.lkey,
            }],
            flags: SendFlags::SIGNALED,
            inline_data: None,
            ud: self.ah.map(|ah| UdDest {
                ah,
                remote_qpn: Qpn::new(remote.qpn),
                remote_qkey: softib::UD_QKEY,
            }),
        };
        self.ctx
            .post_send(self.dev, self.qpn, vec![wr])
            .map_err(|e| because("Couldn't post send", e))
    }

    fn av(&self, a: &Args, d: &Dest) -> AddressVector {
        AddressVector {
            dlid: Lid(d.lid),
            sl: a.sl,
            src_path_bits: 0,
            static_rate: 0,
            grh: d.global().then(|| GlobalRoute {
                dgid: Gid(d.gid),
                flow_label: 0,
                // Upstream passes its -g as is (-1 without it, which the kernel refuses);
                // index 0 is what such a peer can only have meant.
                sgid_index: a.gid_idx.unwrap_or(0),
                hop_limit: 1,
                traffic_class: 0,
            }),
            port_num: a.ib_port,
        }
    }

    /// `pp_connect_ctx`: RTR and RTS with upstream's attributes (UD: and the AH).
    pub(super) fn connect(&mut self, a: &Args, my_psn: u32, d: &Dest) -> Result<()> {
        let av = self.av(a, d);
        if self.t == Transport::Ud {
            let rtr = QpAttr {
                qp_state: QpState::Rtr,
                ..QpAttr::default()
            };
            self.ctx
                .modify_qp(self.dev, self.qpn, &rtr, AttrMask::STATE)
                .map_err(|e| because("Failed to modify QP to RTR", e))?;
            let rts = QpAttr {
                qp_state: QpState::Rts,
                sq_psn: Psn::new(my_psn),
                ..QpAttr::default()
            };
            self.ctx
                .modify_qp(
                    self.dev,
                    self.qpn,
                    &rts,
                    AttrMask::STATE.with(AttrMask::SQ_PSN),
                )
                .map_err(|e| because("Failed to modify QP to RTS", e))?;
        } else {
            let c = crate::port::ConnectedQp {
                reliable: self.t == Transport::Rc,
                mtu: a.mtu,
                remote_qpn: Qpn::new(d.qpn),
                remote_psn: Psn::new(d.psn),
                local_psn: Psn::new(my_psn),
                av,
                max_dest_rd_atomic: 1,
                max_rd_atomic: 1,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
            };
            crate::port::ready_connected(&mut self.ctx, self.dev, self.qpn, &c)
                .map_err(|e| because(&format!("Failed to modify QP to {}", e.to), e.source))?;
        }
        if self.t == Transport::Ud {
            let ah = self
                .ctx
                .create_ah(self.dev, self.pd, av)
                .map_err(|e| because("Failed to create AH", e))?;
            self.ah = Some(ah);
        }
        Ok(())
    }

    /// What to say when nothing completed for `--timeout`: where it stopped, the port, and
    /// what the HCA dropped.
    pub(super) fn stalled(
        &mut self,
        watch: &StallWatch,
        timeout: Duration,
        rcnt: u32,
        scnt: u32,
        iters: u32,
        waiting: &str,
    ) -> Fail {
        let mut msg = format!(
            "No completion for {} s while {waiting}: {rcnt} of {iters} messages received, \
             {scnt} of {iters} sent.",
            timeout.as_secs_f64()
        );
        let (dev, port) = (self.info.name.clone(), self.port.number);
        match watch.diagnose(&mut self.ctx, &dev, port) {
            Ok(Some(stall)) => {
                if let Some(why) = &stall.port_down {
                    msg.push('\n');
                    msg.push_str(why);
                }
                let span = stall.drops_span();
                if stall.relevant_drops().is_empty() {
                    msg.push_str(&format!(
                        "\nThis HCA dropped nothing{span}: the peer sent nothing more (did \
                         it exit, or is its port no longer Active?)."
                    ));
                } else {
                    let span = match span.as_str() {
                        "" => " (counts since it started)",
                        s => s,
                    };
                    msg.push_str(&format!("\nThis HCA has dropped{span}:"));
                    for (r, n) in stall.relevant_drops() {
                        msg.push_str(&format!(" {r}={n}"));
                    }
                }
            }
            Ok(None) => {}
            Err(e) => msg.push_str(&format!("\n(could not ask the HCA why: {e})")),
        }
        if self.t != Transport::Rc {
            msg.push_str(
                "\nUC and UD do not retransmit: one lost message stops a ping-pong for good \
                 (RC recovers).",
            );
        }
        Fail(msg)
    }
}
