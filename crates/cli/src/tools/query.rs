//! The queries of one node or agent: `smpquery`, `perfquery`, `saquery`, `sminfo`, `ibaddr`,
//! `ibroute` — requests through the MAD agent, answers formatted by `softib-diag`.

use anyhow::{anyhow, bail, Result};
use softib::mad::SmpDest;
use softib_wire::mad::MAD_LEN;

use super::{parse_dest, port_flag, print, Agent, Flags};

/// `smpquery [-D] [-P port] nodeinfo|portinfo|nodedesc|switchinfo|pkeys <lid|path> [port]`.
pub fn smpquery(args: &[String]) -> Result<u8> {
    use softib_wire::mad::attr::{
        NodeDescription, NodeInfo, PKeyTable, PortInfo as Pi, SwitchInfo,
    };
    let mut f = Flags::new(args);
    let port = port_flag(&mut f)?;
    let dr = f.take_switch(&["-D", "--Direct"]);
    let pos = f.positional("smpquery")?;
    let (Some(op), Some(target)) = (pos.first(), pos.get(1)) else {
        bail!("usage: smpquery [-D] [-P port] nodeinfo|portinfo|nodedesc|switchinfo|pkeys <lid|dr_path> [port]");
    };
    let dest = parse_dest(target, dr)?;
    let portid = match &dest {
        SmpDest::Lid(l) => softib_diag::smp::portid_lid(*l),
        SmpDest::Route(p) => softib_diag::smp::portid_dr(p),
    };
    let qport: Option<u8> = pos
        .get(2)
        .map(|p| p.parse())
        .transpose()
        .map_err(|_| anyhow!("bad port number"))?;
    let mut a = Agent::open(port)?;
    let text = match op.as_str() {
        "nodeinfo" | "NI" => {
            softib_diag::smp::smpquery_nodeinfo(&portid, &a.get::<NodeInfo>(&dest, 0)?)
        }
        "nodedesc" | "ND" => {
            softib_diag::smp::smpquery_nodedesc(&a.get::<NodeDescription>(&dest, 0)?)
        }
        "portinfo" | "PI" => {
            let p = qport.unwrap_or(0);
            let pi: Pi = a.get(&dest, u32::from(p))?;
            let shown = if p == 0 { pi.local_port_num } else { p };
            softib_diag::smp::smpquery_portinfo(&portid, shown, &pi)
        }
        "switchinfo" | "SI" => {
            softib_diag::smp::smpquery_switchinfo(&portid, &a.get::<SwitchInfo>(&dest, 0)?)
        }
        "pkeys" | "PK" => {
            let ni: NodeInfo = a.get(&dest, 0)?;
            let t: PKeyTable = a.get(&dest, 0)?;
            softib_diag::smp::smpquery_pkeys(&t.pkeys, ni.partition_cap)
        }
        other => bail!("smpquery: operation {other} is not supported (nodeinfo, portinfo, nodedesc, switchinfo, pkeys)"),
    };
    print(&text)
}

/// `perfquery [-x] [-P port] [lid [port]]`: PortCounters from a port's PMA.
pub fn perfquery(args: &[String]) -> Result<u8> {
    use softib_wire::mad::perf::{self, PortCounters, PortCountersExtended};
    use softib_wire::mad::{AttrId, Method};
    let mut f = Flags::new(args);
    let port = port_flag(&mut f)?;
    let ext = f.take_switch(&["-x", "--extended"]);
    let pos = f.positional("perfquery")?;
    let mut a = Agent::open(port)?;
    let me = a.local_port()?;
    let dlid = match pos.first() {
        Some(l) => match parse_dest(l, false)? {
            SmpDest::Lid(l) => l,
            SmpDest::Route(_) => me.lid,
        },
        None => me.lid,
    };
    if dlid.0 == 0 {
        bail!(
            "perfquery: port {} has no LID (state {}): the PMA is reached by LID once an SM has configured the port",
            me.number,
            me.state_name()
        );
    }
    let qport: u8 = match pos.get(1) {
        Some(p) => p.parse().map_err(|_| anyhow!("bad port number {p}"))?,
        None => me.number,
    };
    let attr = if ext {
        AttrId::PORT_COUNTERS_EXTENDED
    } else {
        AttrId::PORT_COUNTERS
    };
    let mut data = [0u8; 64];
    data[1] = qport;
    let mut b = [0u8; MAD_LEN];
    perf::Repr::request(Method::Get, 0, attr, 0, &data)
        .emit(&mut perf::Packet::new_unchecked(&mut b[..]));
    let resp = a.gmp(dlid, b)?;
    let p = perf::Repr::parse(&perf::Packet::new_unchecked(&resp.mad()[..]))
        .map_err(|e| anyhow!("{e}"))?;
    let portid = softib_diag::smp::portid_lid(dlid);
    let cap = perf::capability_mask::EXT_WIDTH_SUPPORTED;
    let text = if ext {
        let pc = PortCountersExtended::parse(p.data).map_err(|e| anyhow!("{e}"))?;
        softib_diag::smp::perfquery_extended(&portid, qport, cap, 0, &pc)
    } else {
        let pc = PortCounters::parse(p.data).map_err(|e| anyhow!("{e}"))?;
        softib_diag::smp::perfquery(&portid, qport, cap, &pc)
    };
    print(&text)
}

/// `saquery [-P port] [NR|PIR|PR|MCMR|-p|-g|-m]`: records from the SA (NodeRecords by
/// default).
pub fn saquery(args: &[String]) -> Result<u8> {
    use softib_wire::mad::sa;
    use softib_wire::mad::AttrId;
    let mut f = Flags::new(args);
    let port = port_flag(&mut f)?;
    let path = f.take_switch(&["-p", "--path-record"]);
    let groups = f.take_switch(&["-g", "--mgroups"]);
    let members = f.take_switch(&["-m", "--mlist"]);
    let pos = f.positional("saquery")?;
    if groups || members || pos.first().is_some_and(|p| p == "MCMR") {
        let view = match (groups, members) {
            (true, _) => McView::Groups,
            (_, true) => McView::Members,
            _ => McView::Records,
        };
        return saquery_multicast(port, view);
    }
    let what = match (path, pos.first().map(String::as_str)) {
        (true, _) | (_, Some("PR")) => AttrId::PATH_RECORD,
        (_, Some("PIR")) => AttrId::PORT_INFO_RECORD,
        (_, None | Some("NR") | Some("-N")) => AttrId::NODE_RECORD,
        (_, Some(other)) => bail!("saquery: query {other} is not supported (NR, PIR, PR)"),
    };
    let mut a = Agent::open(port)?;
    let me = a.local_port()?;
    if me.sm_lid.0 == 0 {
        bail!(
            "saquery: port {} knows no SM (SM lid 0, state {}): start opensm on this subnet first",
            me.number,
            me.state_name()
        );
    }
    let table = a.sa_table(me.sm_lid, what)?;
    let records: Vec<&[u8]> = table.records().collect();
    let text = if what == AttrId::NODE_RECORD {
        softib_diag::smp::saquery_node_records(records.iter().copied())
    } else if what == AttrId::PATH_RECORD {
        softib_diag::smp::saquery_path_records(records.iter().copied())
    } else {
        let recs: Vec<sa::PortInfoRecord> = records
            .iter()
            .filter_map(|r| sa::PortInfoRecord::parse(r).ok())
            .collect();
        softib_diag::smp::saquery_portinfo_records(&recs)
    };
    print(&text)
}

/// How `saquery` shows MCMemberRecords.
#[derive(Clone, Copy, PartialEq, Eq)]
enum McView {
    /// `MCMR`: every field.
    Records,
    /// `-g`: one block per group.
    Groups,
    /// `-m`: members, with their nodes' descriptions.
    Members,
}

/// `saquery MCMR`, `saquery -g`, `saquery -m`: the multicast groups and their members.
fn saquery_multicast(port: Option<u8>, view: McView) -> Result<u8> {
    use softib_wire::mad::sa::{McMemberRecord, NodeRecord};
    use softib_wire::mad::AttrId;
    let mut a = Agent::open(port)?;
    let me = a.local_port()?;
    if me.sm_lid.0 == 0 {
        bail!(
            "saquery: port {} knows no SM (SM lid 0, state {}): start opensm on this subnet first",
            me.number,
            me.state_name()
        );
    }
    let records: Vec<McMemberRecord> = a
        .sa_table(me.sm_lid, AttrId::MC_MEMBER_RECORD)?
        .records()
        .filter_map(|r| McMemberRecord::parse(r).ok())
        .collect();
    let text = match view {
        McView::Records => softib_diag::smp::saquery_mcmember_records(&records),
        McView::Groups => softib_diag::smp::saquery_mcmember_groups(&records),
        McView::Members => {
            let nodes: Vec<NodeRecord> = a
                .sa_table(me.sm_lid, AttrId::NODE_RECORD)?
                .records()
                .filter_map(|r| NodeRecord::parse(r).ok())
                .collect();
            softib_diag::smp::saquery_mcmember_members(&records, &nodes)
        }
    };
    print(&text)
}

/// `ibroute -M`: the MFT of a switch, every MLID up to MulticastFDBCap (or MulticastFDBTop
/// when the switch sets one), read block by block and PortMask position by position.
fn ibroute_multicast(
    a: &mut Agent,
    dest: &SmpDest,
    lid_text: &str,
    ni: &softib_wire::mad::attr::NodeInfo,
    si: &softib_wire::mad::attr::SwitchInfo,
    description: &str,
) -> Result<u8> {
    use softib_wire::mad::attr::MulticastForwardingTable as Mft;
    let first = Mft::MLID_BASE;
    let mut last = u32::from(first) + u32::from(si.multicast_fdb_cap);
    last = last.saturating_sub(1).min(0xFFFE);
    let top = u32::from(si.multicast_fdb_top);
    if top != 0 && top < last && top >= u32::from(first) - 1 {
        last = top;
    }
    let last = u16::try_from(last).unwrap_or(0xFFFE);
    let chunks = (u16::from(ni.num_ports) + 16) / 16;
    let mut entries: Vec<(u16, Vec<u8>)> = Vec::new();
    if last >= first {
        for block in 0..=(last - first) / 32 {
            let mut masks = vec![[0u16; 32]; usize::from(chunks)];
            for (j, m) in masks.iter_mut().enumerate() {
                *m = a
                    .get::<Mft>(dest, Mft::attr_mod(block, j as u8))?
                    .port_masks;
            }
            // `i` is the entry within the block: it picks the MLID and the same entry in each
            // position's masks.
            #[allow(clippy::needless_range_loop)]
            for i in 0..32usize {
                let mlid = Mft::mlid(block, i).0;
                if mlid > last {
                    break;
                }
                let ports: Vec<u8> = (0..=ni.num_ports)
                    .filter(|&p| masks[usize::from(p / 16)][i] & (1 << (p % 16)) != 0)
                    .collect();
                entries.push((mlid, ports));
            }
        }
    }
    print(&softib_diag::smp::ibroute_multicast(
        lid_text,
        ni.node_guid.0,
        description,
        first,
        last,
        ni.num_ports,
        &entries,
    ))
}

/// `sminfo [-P port]`: the master SM's SMInfo.
pub fn sminfo(args: &[String]) -> Result<u8> {
    use softib_wire::mad::attr::{SmInfo, SmState};
    let mut f = Flags::new(args);
    let port = port_flag(&mut f)?;
    f.positional("sminfo")?;
    let mut a = Agent::open(port)?;
    let me = a.local_port()?;
    if me.sm_lid.0 == 0 {
        eprintln!(
            "sminfo: iberror: failed: query (port {} knows no SM: SM lid 0, state {})",
            me.number,
            me.state_name()
        );
        return Ok(255);
    }
    let i: SmInfo = a.get(&SmpDest::Lid(me.sm_lid), 0)?;
    let (n, name) = match i.sm_state {
        SmState::NotActive => (0, "SMINFO_NOTACTIVE"),
        SmState::Discovering => (1, "SMINFO_DISCOVERING"),
        SmState::Standby => (2, "SMINFO_STANDBY"),
        SmState::Master => (3, "SMINFO_MASTER"),
        SmState::Unknown(v) => (v, "UNKNOWN"),
    };
    print(&format!(
        "sminfo: sm lid {} sm guid 0x{:016x}, activity count {} priority {} state {n} {name}\n",
        me.sm_lid.0, i.guid.0, i.act_count, i.priority
    ))
}

/// `ibaddr [-P port] [lid]`: GID and LID range of a port.
pub fn ibaddr(args: &[String]) -> Result<u8> {
    use softib_wire::mad::attr::{NodeInfo, PortInfo as Pi};
    let mut f = Flags::new(args);
    let port = port_flag(&mut f)?;
    let pos = f.positional("ibaddr")?;
    let mut a = Agent::open(port)?;
    let dest = match pos.first() {
        Some(l) => parse_dest(l, false)?,
        None => SmpDest::Route(Vec::new()),
    };
    let ni: NodeInfo = a.get(&dest, 0)?;
    let pi: Pi = a.get(&dest, 0)?;
    print(&softib_diag::fabric::ibaddr(
        pi.gid_prefix,
        ni.port_guid,
        pi.lid,
        pi.lmc,
    ))
}

/// `ibroute [-P port] [-M] <switch lid>`: the switch's unicast forwarding table, with what
/// each LID reaches; with `-M` its multicast forwarding table.
pub fn ibroute(args: &[String]) -> Result<u8> {
    use softib_wire::mad::attr::{NodeDescription, NodeInfo, NodeType, SwitchInfo};
    use softib_wire::mad::AttrId;
    let mut f = Flags::new(args);
    let port = port_flag(&mut f)?;
    let multicast = f.take_switch(&["-M", "--Multicast"]);
    let all = f.take_switch(&["-a", "--all"]);
    let dr = f.take_switch(&["-D", "--Direct"]);
    let pos = f.positional("ibroute")?;
    let Some(target) = pos.first() else {
        bail!("usage: ibroute [-a] [-D] [-P port] <switch lid | dr path>");
    };
    let dest = parse_dest(target, dr)?;
    let mut a = Agent::open(port)?;
    let ni: NodeInfo = a.get(&dest, 0)?;
    if ni.node_type != NodeType::Switch {
        eprintln!("ibroute: iberror: failed: dump tables: not a switch");
        return Ok(255);
    }
    let si: SwitchInfo = a.get(&dest, 0)?;
    let nd: NodeDescription = a.get(&dest, 0)?;
    let name = |d: &NodeDescription| {
        let end = d.raw.iter().position(|&b| b == 0).unwrap_or(d.raw.len());
        String::from_utf8_lossy(&d.raw[..end]).into_owned()
    };
    let top = si.linear_fdb_top;
    let lid_text = match &dest {
        SmpDest::Lid(l) => format!("Lid {}", l.0),
        SmpDest::Route(p) => softib_diag::smp::portid_dr(p),
    };
    if multicast {
        return ibroute_multicast(&mut a, &dest, &lid_text, &ni, &si, &name(&nd));
    }
    let mut out = format!(
        "Unicast lids [0x0-0x{top:x}] of switch {lid_text} guid 0x{:016x} ({}):\n  Lid  Out   Destination\n       Port     Info \n",
        ni.node_guid.0,
        name(&nd)
    );
    let mut valid = 0;
    let mut block_data = None;
    for lid in 0..=top {
        let block = u32::from(lid / 64);
        if block_data.as_ref().is_none_or(|(b, _)| *b != block) {
            let r = a.smp_get(&dest, AttrId::LINEAR_FORWARDING_TABLE, block)?;
            block_data = Some((block, r.data));
        }
        let Some((_, data)) = &block_data else {
            continue;
        };
        let out_port = data[usize::from(lid % 64)];
        if out_port == 0xff || lid == 0 {
            continue;
        }
        // What the LID reaches: its node, asked by LID.
        let info = match a.smp_get(&SmpDest::Lid(softib::Lid(lid)), AttrId::NODE_INFO, 0) {
            Ok(r) => {
                let n = NodeInfo::parse(&r.data).map_err(|e| anyhow!("{e}"))?;
                let d = a
                    .get::<NodeDescription>(&SmpDest::Lid(softib::Lid(lid)), 0)
                    .map(|d| name(&d))
                    .unwrap_or_default();
                let kind = match n.node_type {
                    NodeType::Switch => "Switch",
                    NodeType::Ca => "Channel Adapter",
                    NodeType::Router => "Router",
                    _ => "Unknown",
                };
                format!("({kind} portguid 0x{:016x}: '{d}')", n.port_guid.0)
            }
            Err(_) if all => "(unreachable)".to_string(),
            Err(_) => continue,
        };
        out.push_str(&format!("0x{lid:04x} {out_port:03} : {info}\n"));
        valid += 1;
    }
    out.push_str(&format!("{valid} valid lids dumped \n"));
    print(&out)
}
