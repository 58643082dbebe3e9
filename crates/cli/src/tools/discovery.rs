//! The fabric diagnostics that sweep the subnet: `ibnodes`, `ibhosts`, `ibswitches`,
//! `ibnetdiscover`, `iblinkinfo` — a `softib-fabric` [`Discovery`] driven through the MAD
//! agent, its [`Subnet`] formatted by `softib-diag`.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use softib::mad::MadAgent;
use softib::Context;
use softib_fabric::discover::{Discovery, DiscoveryConfig};
use softib_fabric::subnet::Subnet;

use super::{pick_port, port_flag, print, smp_round, Flags};
use crate::exit;

/// Discovers the subnet behind `port` by a directed-route sweep.
pub fn discover(ctx: &mut Context, port: u8, timeout: Duration) -> Result<Subnet> {
    let mut agent = MadAgent::open(ctx, 0, port)?;
    let mut d = Discovery::new(
        DiscoveryConfig {
            local_port: port,
            ..DiscoveryConfig::default()
        },
        u64::from(std::process::id()) << 32,
    );
    let origin = Instant::now();
    while !d.is_done() {
        if origin.elapsed() > timeout {
            bail!(
                "the directed-route sweep from port {port} did not finish in {timeout:?} \
                 ({} nodes found so far)",
                d.result().nodes.len()
            );
        }
        smp_round(ctx, &mut agent, &mut d, origin, Duration::from_millis(50))?;
    }
    for f in d.failures() {
        eprintln!(
            "ibwarn: no answer to {} (modifier {}) via directed route {:?}",
            softib_wire::mad::attr_name(softib_wire::mad::MgmtClass::SubnDirectedRoute, f.attr_id)
                .unwrap_or("an attribute"),
            f.attr_mod,
            f.path
        );
    }
    Ok(d.into_result())
}

/// `ibnodes`, `ibhosts`, `ibswitches`, `ibnetdiscover`, `iblinkinfo`.
pub fn fabric_tool(tool: &str, args: &[String]) -> Result<u8> {
    let mut f = Flags::new(args);
    let port = port_flag(&mut f)?;
    let json = f.take_switch(&["--json"]);
    let mut nd = softib_diag::fabric::IbnetdiscoverArgs::default();
    let mut li = softib_diag::fabric::IblinkinfoArgs::default();
    if tool == "ibnetdiscover" {
        if f.take_switch(&["-l", "--list"]) {
            nd.list = Some(softib_diag::fabric::NodeFilter::All);
        }
        if f.take_switch(&["-H", "--Hca_list"]) {
            nd.list = Some(softib_diag::fabric::NodeFilter::Cas);
        }
        if f.take_switch(&["-S", "--Switch_list"]) {
            nd.list = Some(softib_diag::fabric::NodeFilter::Switches);
        }
        nd.group = f.take_switch(&["-g", "--grouping"]);
        nd.ports = f.take_switch(&["-p", "--ports"]);
    }
    if tool == "iblinkinfo" {
        li.line = f.take_switch(&["-l", "--line"]);
        li.down_only = f.take_switch(&["-d", "--down"]);
    }
    let pos = f.positional(tool)?;
    let mut ctx = Context::open()?;
    let port = pick_port(&mut ctx, port)?;
    let subnet = discover(&mut ctx, port, Duration::from_secs(20))?;
    let text = match tool {
        "ibnodes" if json => format!(
            "{}\n",
            serde_json::to_string_pretty(&softib_diag::fabric::ibnodes_json(&subnet))?
        ),
        "ibnodes" => softib_diag::fabric::ibnodes(&subnet),
        "ibhosts" => softib_diag::fabric::ibhosts(&subnet),
        "ibswitches" => softib_diag::fabric::ibswitches(&subnet),
        "iblinkinfo" => softib_diag::fabric::iblinkinfo(&subnet, &li),
        _ => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            let text =
                softib_diag::fabric::ibnetdiscover(&subnet, &nd, &softib_diag::ctime_utc(now));
            if let Some(file) = pos.first() {
                std::fs::write(file, &text).with_context(|| format!("writing {file}"))?;
                return Ok(exit::OK);
            }
            text
        }
    };
    print(&text)
}
