//! The InfiniBand tools people know — `ibstat`, `ibv_devinfo`, `ibnodes`, `ibnetdiscover`,
//! `opensm`, ... — over a softib host's daemon. Each is a thin shell: arguments in, the
//! `softib` API (its MAD agent, [`softib::mad::MadAgent`]) and the sans-IO machines of
//! `softib-fabric` in the middle, `softib-diag`'s formatting out.
//!
//! By concept: [`device`] (the device tools), [`discovery`] (the tools that sweep the subnet),
//! [`opensm`], [`query`] (the queries of one node or agent); here, what they share — flags,
//! the local port, the MAD shell of a query, and the loop that drives an SMP machine.

mod device;
mod discovery;
mod opensm;
mod query;

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use softib::mad::{MadAgent, MadDest, Response, SmpDest};
use softib::{Context, Mad, MadQp};
use softib_fabric::SmpMachine;
use softib_wire::mad::{smp, AttrId, Method, MAD_LEN};

use crate::exit;

pub use device::{ibstat, ibstatus, ibv_devices, ibv_devinfo};
pub use discovery::fabric_tool;
pub use opensm::opensm;
pub use query::{ibaddr, ibroute, perfquery, saquery, sminfo, smpquery};

/// Pulls the value of a flag that takes one (`-d mlx4_0`, `-dmlx4_0`, `--ib-dev=x`).
struct Flags {
    args: Vec<String>,
}

impl Flags {
    fn new(args: &[String]) -> Flags {
        Flags {
            args: args.to_vec(),
        }
    }

    fn take_switch(&mut self, names: &[&str]) -> bool {
        let before = self.args.len();
        self.args.retain(|a| !names.contains(&a.as_str()));
        before != self.args.len()
    }

    fn take_value(&mut self, names: &[&str]) -> Result<Option<String>> {
        let mut i = 0;
        while i < self.args.len() {
            let a = self.args[i].clone();
            for n in names {
                if a == *n {
                    if i + 1 >= self.args.len() {
                        bail!("option {n} needs a value");
                    }
                    let v = self.args.remove(i + 1);
                    self.args.remove(i);
                    return Ok(Some(v));
                }
                if n.starts_with("--") {
                    if let Some(v) = a.strip_prefix(&format!("{n}=")) {
                        let v = v.to_string();
                        self.args.remove(i);
                        return Ok(Some(v));
                    }
                } else if a.len() > n.len() && a.starts_with(n) {
                    let v = a[n.len()..].to_string();
                    self.args.remove(i);
                    return Ok(Some(v));
                }
            }
            i += 1;
        }
        Ok(None)
    }

    /// What is left must be positional; an unknown flag is refused by name.
    fn positional(self, tool: &str) -> Result<Vec<String>> {
        if let Some(f) = self.args.iter().find(|a| a.starts_with('-') && a.len() > 1) {
            bail!("{tool}: option {f} is not supported by softib's {tool}");
        }
        Ok(self.args)
    }
}

fn print(text: &str) -> Result<u8> {
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(exit::OK)
}

fn diag_result(r: Result<String, softib_diag::device::DiagError>, tool: &str) -> Result<u8> {
    match r {
        Ok(t) => print(&t),
        Err(e) => {
            eprintln!("{tool}: {e}");
            Ok(exit::FAILED)
        }
    }
}

/// One turn of driving `m` (the SM, a discovery crawl) through `agent`: sends what the machine
/// has, waits for responses or its next deadline (at most `max_wait`), and feeds them in. The
/// machine keeps its own transactions; the agent only carries its SMPs. Returns the GMPs that
/// arrived meanwhile (SA requests, for the SM's SA), the traps (SubnTrap SMPs, for the SM to
/// sweep on) and the SubnSet(SMInfo)s another SM sent this one.
fn smp_round(
    ctx: &mut Context,
    agent: &mut MadAgent,
    m: &mut dyn SmpMachine,
    origin: Instant,
    max_wait: Duration,
) -> Result<Vec<Mad>> {
    m.handle_timeout(origin.elapsed());
    while let Some(s) = m.poll_transmit() {
        let mut b = [0u8; MAD_LEN];
        s.emit(&mut smp::Packet::new_unchecked(&mut b[..]));
        let path = s.dr.map(|d| d.path().to_vec()).unwrap_or_default();
        agent.send(ctx, &MadDest::Smp(SmpDest::Route(path)), &b)?;
    }
    let wait = m
        .poll_timeout()
        .map_or(max_wait, |t| t.saturating_sub(origin.elapsed()))
        .min(max_wait);
    let mut gmps = Vec::new();
    for mad in agent.recv(ctx, wait)? {
        match mad.qp {
            MadQp::Smi => match smp::Repr::parse(&smp::Packet::new_unchecked(&mad.mad[..])) {
                // Traps and the SMInfo Sets the SMA passes on are for the SM, not answers.
                Ok(r) if matches!(r.header.method, Method::Trap | Method::Set) => gmps.push(mad),
                Ok(r) => m.handle_response(origin.elapsed(), &r),
                Err(_) => {}
            },
            MadQp::Gsi => gmps.push(mad),
        }
    }
    Ok(gmps)
}

/// The local port tools use: `-P N`, else the first port whose link is up.
fn pick_port(ctx: &mut Context, want: Option<u8>) -> Result<u8> {
    let devs = ctx.devices()?;
    let d = devs
        .first()
        .ok_or_else(|| anyhow!("this host has no devices"))?;
    if let Some(p) = want {
        if d.ports.iter().any(|q| q.number == p) {
            return Ok(p);
        }
        bail!("{} has no port {p}", d.name);
    }
    Ok(d.ports
        .iter()
        .find(|p| p.phys_state == 5)
        .or(d.ports.first())
        .map_or(1, |p| p.number))
}

fn port_flag(f: &mut Flags) -> Result<Option<u8>> {
    f.take_switch(&["-C"]);
    Ok(match f.take_value(&["-P", "--Port"])? {
        Some(p) => Some(p.parse().map_err(|_| anyhow!("bad port {p}"))?),
        None => None,
    })
}

/// The MAD shell of a query tool: the host's context and the MAD agent on the chosen port.
struct Agent {
    ctx: Context,
    mad: MadAgent,
}

impl Agent {
    fn open(port: Option<u8>) -> Result<Agent> {
        let mut ctx = Context::open()?;
        let port = pick_port(&mut ctx, port)?;
        let mad = MadAgent::open(&mut ctx, 0, port)?;
        Ok(Agent { ctx, mad })
    }

    fn local_port(&mut self) -> Result<softib::PortInfo> {
        let port = self.mad.port();
        self.ctx
            .devices()?
            .into_iter()
            .flat_map(|d| d.ports)
            .find(|p| p.number == port)
            .ok_or_else(|| anyhow!("no port {port}"))
    }

    /// SubnGet of `attr` at `dest`.
    fn smp_get(&mut self, dest: &SmpDest, attr: AttrId, modifier: u32) -> Result<smp::Repr> {
        Ok(self.mad.smp_get(&mut self.ctx, dest, attr, modifier)?)
    }

    /// SubnGet of attribute `A` at `dest`, parsed.
    fn get<A: softib_wire::mad::attr::SmpAttribute>(
        &mut self,
        dest: &SmpDest,
        modifier: u32,
    ) -> Result<A> {
        Ok(self.mad.get(&mut self.ctx, dest, modifier)?)
    }

    /// A GMP request to QP1 at `dlid`, and its answer.
    fn gmp(&mut self, dlid: softib::Lid, mad: [u8; MAD_LEN]) -> Result<Response> {
        Ok(self.mad.request(&mut self.ctx, MadDest::gsi(dlid), mad)?)
    }

    /// Every record of an SA GetTable of `attr` (template all zero, ComponentMask 0).
    fn sa_table(&mut self, sm_lid: softib::Lid, attr: AttrId) -> Result<softib::mad::rmpp::Table> {
        use softib_wire::mad::Method;
        self.mad
            .sa_query(&mut self.ctx, sm_lid, Method::GetTable, attr, 0, &[])?
            .table()
            .ok_or_else(|| anyhow!("saquery: the SA's answer is not a whole RMPP transfer"))
    }
}

fn parse_dest(arg: &str, dr: bool) -> Result<SmpDest> {
    if dr {
        let path: Result<Vec<u8>, _> = arg.split(',').map(|h| h.trim().parse::<u8>()).collect();
        let path = path.map_err(|_| anyhow!("bad directed route {arg} (e.g. 0,1,3)"))?;
        // The first hop of a -D path is 0: the local node.
        Ok(SmpDest::Route(path.into_iter().skip(1).collect()))
    } else {
        let lid = if let Some(h) = arg.strip_prefix("0x") {
            u16::from_str_radix(h, 16)
        } else {
            arg.parse()
        }
        .map_err(|_| anyhow!("bad LID {arg}"))?;
        Ok(SmpDest::Lid(softib::Lid(lid)))
    }
}
