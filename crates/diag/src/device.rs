//! Device diagnostics: `ibstat`, `ibstatus`, `ibv_devices` and `ibv_devinfo`.
//!
//! The input is a [`DeviceView`]: what the kernel would expose for one RDMA device, split the
//! way the tools read it — the sysfs strings that `ibstat` and `ibstatus` print (through
//! libibumad or `cat`), and the verbs attributes (`ibv_query_device_ex`, `ibv_query_port`,
//! `ibv_query_gid_ex`) that `ibv_devinfo` prints. They disagree on purpose in places: rxe has an
//! empty sysfs `fw_ver` but `ibv_devinfo` shows `0.0.0`, the ibsim shim writes `IB` as the link
//! layer where the kernel writes `InfiniBand`. Keeping both lets every golden be reproduced.

use core::fmt::Write as _;

use serde_json::{json, Value};
use softib_wire::mad::attr::{NodeType, PortPhysicalState, PortState};
use softib_wire::{Gid, Guid, Lid, Mtu};

use crate::fmt::inet_ntop6;

/// An error a tool reports instead of (or after part of) its output: the text it writes to
/// stderr (without libibumad's `ibwarn: [pid] function:` decoration) and its exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiagError {
    /// The message, e.g. `CA: 'ibsim0' has no port number 2 - max (1)`.
    pub message: String,
    /// The exit status the real tool returns (255 for `exit(-1)`).
    pub exit_code: i32,
}

impl DiagError {
    fn new(message: impl Into<String>, exit_code: i32) -> DiagError {
        DiagError {
            message: message.into(),
            exit_code,
        }
    }
}

impl core::fmt::Display for DiagError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DiagError {}

/// A port's link layer (`ibv_port_attr.link_layer`, sysfs `ports/N/link_layer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkLayer {
    /// Native InfiniBand.
    #[default]
    InfiniBand,
    /// RoCE: InfiniBand transport over Ethernet.
    Ethernet,
}

impl LinkLayer {
    /// The name both the kernel (sysfs) and `ibv_devinfo` use.
    pub fn name(self) -> &'static str {
        match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
        }
    }
}

/// A GID table entry's type (`ibv_gid_entry.gid_type`): decides how `ibv_devinfo -v` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GidType {
    /// An InfiniBand GID, or a RoCE v1 GID on Ethernet: printed as eight hex groups.
    #[default]
    IbRoceV1,
    /// A RoCE v2 GID (an IPv6 or IPv4-mapped address): printed like `inet_ntop`.
    RoceV2,
}

/// One entry of a port's GID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GidEntry {
    /// The index in the GID table.
    pub index: u16,
    /// The GID.
    pub gid: Gid,
    /// Its type.
    pub gid_type: GidType,
}

/// One port of a device, as sysfs and `ibv_query_port` describe it.
#[derive(Debug, Clone, PartialEq)]
pub struct PortView {
    /// Port number (1-based on CAs).
    pub number: u8,
    /// Logical state (PortInfo.PortState / `ibv_port_attr.state`).
    pub state: PortState,
    /// Physical state.
    pub phys_state: PortPhysicalState,
    /// Active link width, PortInfo encoding (0x1 1X, 0x2 4X, 0x4 8X, 0x8 12X, 0x10 2X), which
    /// is also `ibv_port_attr.active_width`.
    pub active_width: u8,
    /// Active speed as `ibv_port_attr.active_speed` encodes it: 1 SDR, 2 DDR, 4 QDR, 8 FDR10,
    /// 16 FDR, 32 EDR, 64 HDR, 128 NDR.
    pub active_speed: u8,
    /// Base LID.
    pub lid: Lid,
    /// LMC.
    pub lmc: u8,
    /// The SM's LID.
    pub sm_lid: Lid,
    /// The SM's SL.
    pub sm_sl: u8,
    /// PortInfo.CapabilityMask (host order).
    pub capability_mask: u32,
    /// PortInfo.CapabilityMask2.
    pub capability_mask2: u16,
    /// The port GUID.
    pub port_guid: Guid,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// The text sysfs holds for the link layer when it is not the kernel's (the ibsim shim
    /// writes `IB`); `None` prints [`LinkLayer::name`].
    pub link_layer_sysfs: Option<String>,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// Active MTU.
    pub active_mtu: Mtu,
    /// Largest message size.
    pub max_msg_sz: u32,
    /// `max_vl_num` code (1: 1 VL, 2: 2, 3: 4, 4: 8, 5: 15).
    pub max_vl_num: u8,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// InitTypeReply.
    pub init_type_reply: u8,
    /// The valid GID table entries (entries with a zero interface ID are not printed).
    pub gids: Vec<GidEntry>,
}

impl Default for PortView {
    /// Port 1, Down/Polling, 4X SDR, no LID, MTU 256, an empty GID table.
    fn default() -> Self {
        PortView {
            number: 1,
            state: PortState::Down,
            phys_state: PortPhysicalState::Polling,
            active_width: 0x02,
            active_speed: 1,
            lid: Lid(0),
            lmc: 0,
            sm_lid: Lid(0),
            sm_sl: 0,
            capability_mask: 0,
            capability_mask2: 0,
            port_guid: Guid(0),
            link_layer: LinkLayer::InfiniBand,
            link_layer_sysfs: None,
            max_mtu: Mtu::Mtu256,
            active_mtu: Mtu::Mtu256,
            max_msg_sz: 0,
            max_vl_num: 1,
            bad_pkey_cntr: 0,
            qkey_viol_cntr: 0,
            pkey_tbl_len: 0,
            gid_tbl_len: 0,
            subnet_timeout: 0,
            init_type_reply: 0,
            gids: Vec::new(),
        }
    }
}

impl PortView {
    /// The sysfs link-layer text.
    fn link_layer_text(&self) -> &str {
        self.link_layer_sysfs
            .as_deref()
            .unwrap_or(self.link_layer.name())
    }

    /// The sysfs `rate` file as the kernel's `rate_show` writes it ("40 Gb/sec (4X QDR)"), and
    /// the rate in tenths of Gb/s; `None` when the width is not one the kernel knows (its
    /// read then fails).
    pub fn sysfs_rate(&self) -> Option<(u32, String)> {
        let (per_lane, name) = match self.active_speed {
            2 => (50, "DDR"),
            4 => (100, "QDR"),
            8 => (100, "FDR10"),
            16 => (140, "FDR"),
            32 => (250, "EDR"),
            64 => (500, "HDR"),
            128 => (1000, "NDR"),
            // The kernel defaults every other value to SDR.
            _ => (25, "SDR"),
        };
        let lanes = match self.active_width {
            0x01 => 1,
            0x02 => 4,
            0x04 => 8,
            0x08 => 12,
            0x10 => 2,
            _ => return None,
        };
        let rate = per_lane * lanes;
        let half = if rate % 10 != 0 { ".5" } else { "" };
        Some((
            rate,
            format!("{}{half} Gb/sec ({lanes}X {name})", rate / 10),
        ))
    }

    /// GID index 0 (the default GID), or zero if the table has none.
    fn default_gid(&self) -> Gid {
        self.gids
            .iter()
            .find(|g| g.index == 0)
            .map_or(Gid::default(), |g| g.gid)
    }
}

/// `struct ibv_device_attr_ex` (with the original attributes flattened in): what
/// `ibv_devinfo` prints about a device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[allow(missing_docs)] // The field names are libibverbs' and printed verbatim.
pub struct DeviceAttrs {
    /// Firmware version as verbs format it (`0.0.0` for rxe); not printed when empty.
    pub fw_ver: String,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    /// sysfs `board_id`, printed when present.
    pub board_id: Option<String>,
    pub phys_port_cnt: u8,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub max_qp: i32,
    pub max_qp_wr: i32,
    pub device_cap_flags: u32,
    pub max_sge: i32,
    pub max_sge_rd: i32,
    pub max_cq: i32,
    pub max_cqe: i32,
    pub max_mr: i32,
    pub max_pd: i32,
    pub max_qp_rd_atom: i32,
    pub max_ee_rd_atom: i32,
    pub max_res_rd_atom: i32,
    pub max_qp_init_rd_atom: i32,
    pub max_ee_init_rd_atom: i32,
    /// 0 ATOMIC_NONE, 1 ATOMIC_HCA, 2 ATOMIC_GLOB.
    pub atomic_cap: u32,
    pub max_ee: i32,
    pub max_rdd: i32,
    pub max_mw: i32,
    pub max_raw_ipv6_qp: i32,
    pub max_raw_ethy_qp: i32,
    pub max_mcast_grp: i32,
    pub max_mcast_qp_attach: i32,
    pub max_total_mcast_qp_attach: i32,
    pub max_ah: i32,
    pub max_fmr: i32,
    pub max_map_per_fmr: i32,
    pub max_srq: i32,
    pub max_srq_wr: i32,
    pub max_srq_sge: i32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub odp_general_caps: u64,
    pub odp_rc_caps: u32,
    pub odp_uc_caps: u32,
    pub odp_ud_caps: u32,
    pub odp_xrc_caps: u32,
    pub completion_timestamp_mask: u64,
    /// kHz.
    pub hca_core_clock: u64,
    pub raw_packet_caps: u32,
    pub device_cap_flags_ex: u64,
    pub max_tso: u32,
    pub tso_supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_function: u8,
    pub rx_hash_fields_mask: u64,
    pub rss_supported_qpts: u32,
    pub max_wq_type_rq: u32,
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    pub packet_pacing_supported_qpts: u32,
    pub tm_max_rndv_hdr_size: u32,
    pub tm_max_num_tags: u32,
    pub tm_max_ops: u32,
    pub tm_max_sge: u32,
    pub tm_flags: u32,
    pub max_cq_count: u16,
    pub max_cq_period: u16,
    pub max_dm_size: u64,
    pub num_comp_vectors: i32,
}

/// One RDMA device.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceView {
    /// Device name (`mlx4_0`, `rxe0`, `ibsim0`).
    pub name: String,
    /// Node type; `ibstat` says `CA` or `Switch` from it.
    pub node_type: NodeType,
    /// sysfs `hca_type` (`MT4099`; empty for rxe, `simulator` under ibsim).
    pub ca_type: String,
    /// sysfs `fw_ver` (empty for rxe).
    pub fw_ver: String,
    /// sysfs `hw_rev` (`a1`; empty for rxe).
    pub hw_rev: String,
    /// Node GUID.
    pub node_guid: Guid,
    /// System image GUID.
    pub sys_image_guid: Guid,
    /// The verbs attributes.
    pub attrs: DeviceAttrs,
    /// Ports, in ascending port number.
    pub ports: Vec<PortView>,
}

impl Default for DeviceView {
    /// An unnamed CA with no ports and zero attributes.
    fn default() -> Self {
        DeviceView {
            name: String::new(),
            node_type: NodeType::Ca,
            ca_type: String::new(),
            fw_ver: String::new(),
            hw_rev: String::new(),
            node_guid: Guid(0),
            sys_image_guid: Guid(0),
            attrs: DeviceAttrs::default(),
            ports: Vec::new(),
        }
    }
}

impl DeviceView {
    /// "Number of ports" as libibumad reports it: the highest port number present (under ibsim
    /// a process attached to port 2 sees `2` with only port 2 listed).
    pub fn umad_num_ports(&self) -> u8 {
        self.ports.iter().map(|p| p.number).max().unwrap_or(0)
    }

    fn port(&self, number: u8) -> Option<&PortView> {
        self.ports.iter().find(|p| p.number == number)
    }

    fn type_str(&self) -> &'static str {
        // ibstat's node_type_str table.
        match self.node_type {
            NodeType::Ca => "CA",
            NodeType::Switch => "Switch",
            NodeType::Router => "Router",
            NodeType::Unknown(4) => "iWARP RNIC",
            NodeType::Unknown(_) => "???",
        }
    }
}

/// The options of `ibstat [-l] [-s] [-p] [<ca_name> [portnum]]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IbstatArgs {
    /// `-l`: list CA names only.
    pub list: bool,
    /// `-s`: short output, no ports.
    pub short: bool,
    /// `-p`: list port GUIDs only.
    pub port_guids: bool,
    /// `<ca_name>`: only this device (matched like ibstat: the argument starts with the name).
    pub device: Option<String>,
    /// `[portnum]`: only this port, printed without the CA header.
    pub port: Option<u8>,
}

fn select<'a>(devs: &'a [DeviceView], args: &IbstatArgs) -> Result<&'a [DeviceView], DiagError> {
    match &args.device {
        None => Ok(devs),
        Some(want) => {
            // ibstat compares only strlen(ca_name) bytes: "mlx4_0x" selects mlx4_0.
            let at = devs
                .iter()
                .position(|d| want.as_bytes().starts_with(d.name.as_bytes()))
                .ok_or_else(|| DiagError::new(format!("'{want}' IB device can't be found"), 255))?;
            Ok(&devs[at..=at])
        }
    }
}

fn ibstat_port(out: &mut String, port: &PortView, alone: bool) {
    let (hdr, pre) = if alone { ("", "") } else { ("\t", "\t\t") };
    let state = match u8::from(port.state) {
        s @ 0..=4 => ["???", "Down", "Initializing", "Armed", "Active"][usize::from(s)],
        _ => "???",
    };
    let phys = match u8::from(port.phys_state) {
        s @ 0..=7 => [
            "No state change",
            "Sleep",
            "Polling",
            "Disabled",
            "PortConfigurationTraining",
            "LinkUp",
            "LinkErrorRecovery",
            "PhyTest",
        ][usize::from(s)],
        _ => "???",
    };
    let _ = writeln!(out, "{hdr}Port {}:", port.number);
    let _ = writeln!(out, "{pre}State: {state}");
    let _ = writeln!(out, "{pre}Physical state: {phys}");
    let rate = port.sysfs_rate().map_or(0, |(tenths, _)| tenths / 10);
    if port.active_speed == 8 {
        let _ = writeln!(out, "{pre}Rate: {rate} (FDR10)");
    } else if rate != 2 {
        let _ = writeln!(out, "{pre}Rate: {rate}");
    } else {
        let _ = writeln!(out, "{pre}Rate: 2.5");
    }
    let _ = writeln!(out, "{pre}Base lid: {}", port.lid.0);
    let _ = writeln!(out, "{pre}LMC: {}", port.lmc);
    let _ = writeln!(out, "{pre}SM lid: {}", port.sm_lid.0);
    let _ = writeln!(out, "{pre}Capability mask: 0x{:08x}", port.capability_mask);
    let _ = writeln!(out, "{pre}Port GUID: 0x{:016x}", port.port_guid.0);
    let _ = writeln!(out, "{pre}Link layer: {}", port.link_layer_text());
}

/// `ibstat` with its options.
pub fn ibstat(devs: &[DeviceView], args: &IbstatArgs) -> Result<String, DiagError> {
    let selected = select(devs, args)?;
    let mut out = String::new();
    if args.port_guids {
        for d in selected {
            // umad_get_ca_portguids lists ports 0..=numports and ibstat skips zero GUIDs.
            let mut ports: Vec<&PortView> = d.ports.iter().collect();
            ports.sort_by_key(|p| p.number);
            for p in ports.into_iter().filter(|p| p.port_guid.0 != 0) {
                let _ = writeln!(out, "0x{:016x}", p.port_guid.0);
            }
        }
        return Ok(out);
    }
    for d in selected {
        if args.list {
            let _ = writeln!(out, "{}", d.name);
            continue;
        }
        if let NodeType::Unknown(0) = d.node_type {
            // libibumad reports node type 0 for a device it could not read: ibstat skips it.
            continue;
        }
        let ty = d.type_str();
        if let (false, Some(n)) = (args.short, args.port.filter(|_| args.device.is_some())) {
            let Some(port) = d.port(n) else {
                return Err(DiagError::new(
                    format!(
                        "{ty}: '{}' has no port number {n} - max ({})",
                        d.name,
                        d.umad_num_ports()
                    ),
                    255,
                ));
            };
            let _ = writeln!(out, "{ty}: '{}'", d.name);
            ibstat_port(&mut out, port, true);
            continue;
        }
        let _ = writeln!(out, "{ty} '{}'", d.name);
        let _ = writeln!(out, "\t{ty} type: {}", d.ca_type);
        let _ = writeln!(out, "\tNumber of ports: {}", d.umad_num_ports());
        let _ = writeln!(out, "\tFirmware version: {}", d.fw_ver);
        let _ = writeln!(out, "\tHardware version: {}", d.hw_rev);
        let _ = writeln!(out, "\tNode GUID: 0x{:016x}", d.node_guid.0);
        let _ = writeln!(out, "\tSystem image GUID: 0x{:016x}", d.sys_image_guid.0);
        if !args.short {
            let mut ports: Vec<&PortView> = d.ports.iter().collect();
            ports.sort_by_key(|p| p.number);
            for p in ports {
                ibstat_port(&mut out, p, false);
            }
        }
    }
    Ok(out)
}

/// `ibstat --json` (a softib extension): the same devices and ports as [`ibstat`] selects,
/// as a JSON array of CAs with their ports. `-l`/`-p`/`-s` narrow the content the same way.
pub fn ibstat_json(devs: &[DeviceView], args: &IbstatArgs) -> Result<Value, DiagError> {
    let selected = select(devs, args)?;
    if args.list {
        return Ok(Value::Array(
            selected
                .iter()
                .map(|d| Value::from(d.name.clone()))
                .collect(),
        ));
    }
    if args.port_guids {
        return Ok(Value::Array(
            selected
                .iter()
                .flat_map(|d| d.ports.iter())
                .filter(|p| p.port_guid.0 != 0)
                .map(|p| Value::from(format!("0x{:016x}", p.port_guid.0)))
                .collect(),
        ));
    }
    let port_json = |p: &PortView| {
        let rate = p.sysfs_rate();
        json!({
            "port": p.number,
            "state": PortState::name(p.state),
            "state_code": u8::from(p.state),
            "physical_state": p.phys_state.name(),
            "physical_state_code": u8::from(p.phys_state),
            "rate": rate.as_ref().map(|(tenths, _)| f64::from(*tenths) / 10.0),
            "rate_text": rate.map(|(_, text)| text),
            "base_lid": p.lid.0,
            "lmc": p.lmc,
            "sm_lid": p.sm_lid.0,
            "capability_mask": format!("0x{:08x}", p.capability_mask),
            "port_guid": format!("0x{:016x}", p.port_guid.0),
            "link_layer": p.link_layer_text(),
        })
    };
    let mut cas = Vec::new();
    for d in selected {
        let only = args.port.filter(|_| args.device.is_some());
        if let Some(n) = only {
            if d.port(n).is_none() {
                return Err(DiagError::new(
                    format!(
                        "{}: '{}' has no port number {n} - max ({})",
                        d.type_str(),
                        d.name,
                        d.umad_num_ports()
                    ),
                    255,
                ));
            }
        }
        let ports: Vec<Value> = if args.short {
            Vec::new()
        } else {
            d.ports
                .iter()
                .filter(|p| only.is_none_or(|n| p.number == n))
                .map(port_json)
                .collect()
        };
        cas.push(json!({
            "name": d.name,
            "type": d.type_str(),
            "ca_type": d.ca_type,
            "num_ports": d.umad_num_ports(),
            "firmware_version": d.fw_ver,
            "hardware_version": d.hw_rev,
            "node_guid": format!("0x{:016x}", d.node_guid.0),
            "system_image_guid": format!("0x{:016x}", d.sys_image_guid.0),
            "ports": ports,
        }));
    }
    Ok(Value::Array(cas))
}

/// `ibstatus [devname[:port] ...]`: `targets` empty means every device (sorted by name, as the
/// shell glob lists them), a `None` port means all ports of that device.
pub fn ibstatus(
    devs: &[DeviceView],
    targets: &[(String, Option<u8>)],
) -> Result<String, DiagError> {
    if devs.is_empty() {
        // `echo "Fatal error: " $*` puts two spaces after the colon.
        return Err(DiagError::new("Fatal error:  No devices", 255));
    }
    let mut out = String::new();
    let mut sorted: Vec<&DeviceView> = devs.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let all: Vec<(String, Option<u8>)>;
    let targets = if targets.is_empty() {
        all = sorted.iter().map(|d| (d.name.clone(), None)).collect();
        &all[..]
    } else {
        targets
    };
    for (name, port) in targets {
        let Some(dev) = sorted.iter().find(|d| &d.name == name) else {
            return Err(DiagError::new(
                format!(
                    "Fatal error:  device '{name}': sys files not found (/sys/class/infiniband/{name}/ports)"
                ),
                255,
            ));
        };
        let numbers: Vec<u8> = match port {
            Some(n) => vec![*n],
            None => {
                // `echo *` in the ports directory: names sorted as text ("10" before "2").
                let mut v: Vec<u8> = dev.ports.iter().map(|p| p.number).collect();
                v.sort_by_key(|n| n.to_string());
                v
            }
        };
        for n in numbers {
            let _ = writeln!(out, "Infiniband device '{}' port {n} status:", dev.name);
            match dev.port(n) {
                Some(p) => {
                    let rate = p
                        .sysfs_rate()
                        .map_or_else(|| "unknown".to_string(), |(_, s)| s);
                    let _ = writeln!(out, "\tdefault gid:\t {}", p.default_gid());
                    let _ = writeln!(out, "\tbase lid:\t 0x{:x}", p.lid.0);
                    let _ = writeln!(out, "\tsm lid:\t\t 0x{:x}", p.sm_lid.0);
                    let _ = writeln!(
                        out,
                        "\tstate:\t\t {}: {}",
                        u8::from(p.state),
                        p.state.sysfs_name()
                    );
                    let _ = writeln!(
                        out,
                        "\tphys state:\t {}: {}",
                        u8::from(p.phys_state),
                        p.phys_state.sysfs_name()
                    );
                    let _ = writeln!(out, "\trate:\t\t {rate}");
                    let _ = writeln!(out, "\tlink_layer:\t {}", p.link_layer_text());
                }
                None => {
                    // The script's fallbacks when a sysfs file cannot be read.
                    out.push_str(
                        "\tdefault gid:\t unknown\n\tbase lid:\t unknown\n\tsm lid:\t\t unknown\n\tstate:\t\t unknown\n\tphys state:\t unknown\n\trate:\t\t unknown\n\tlink_layer:\t IB\n",
                    );
                }
            }
            out.push('\n');
        }
    }
    Ok(out)
}

/// `ibv_devices`.
pub fn ibv_devices(devs: &[DeviceView]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "    {:<16}\t   node GUID", "device");
    let _ = writeln!(out, "    {:<16}\t----------------", "------");
    for d in devs {
        let _ = writeln!(out, "    {:<16}\t{:016x}", d.name, d.node_guid.0);
    }
    out
}

/// `ibv_devinfo -l`.
pub fn ibv_devinfo_list(devs: &[DeviceView]) -> String {
    let mut out = format!(
        "{} HCA{} found:\n",
        devs.len(),
        if devs.len() != 1 { "s" } else { "" }
    );
    for d in devs {
        let _ = writeln!(out, "\t{}", d.name);
    }
    out.push('\n');
    out
}

fn guid_str(g: Guid) -> String {
    let v = g.0;
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (v >> 48) & 0xffff,
        (v >> 32) & 0xffff,
        (v >> 16) & 0xffff,
        v & 0xffff
    )
}

fn mtu_str(m: Mtu) -> &'static str {
    match m {
        Mtu::Mtu256 => "256",
        Mtu::Mtu512 => "512",
        Mtu::Mtu1024 => "1024",
        Mtu::Mtu2048 => "2048",
        Mtu::Mtu4096 => "4096",
        Mtu::Unknown(_) => "invalid MTU",
    }
}

fn flag_lines(out: &mut String, value: u64, names: &[(u64, &str)], unknown_fmt_upper: bool) {
    let mut known = 0u64;
    for &(bit, name) in names {
        known |= bit;
        if value & bit != 0 {
            let _ = writeln!(out, "\t\t\t\t\t{name}");
        }
    }
    if value & !known != 0 {
        if unknown_fmt_upper {
            let _ = writeln!(out, "\t\t\t\t\tUnknown flags: 0x{:X}", value & !known);
        } else {
            let _ = writeln!(out, "\t\t\t\t\tUnknown flags: 0x{:x}", value & !known);
        }
    }
}

const DEVICE_CAP_FLAGS: &[(u64, &str)] = &[
    (1, "RESIZE_MAX_WR"),
    (1 << 1, "BAD_PKEY_CNTR"),
    (1 << 2, "BAD_QKEY_CNTR"),
    (1 << 3, "RAW_MULTI"),
    (1 << 4, "AUTO_PATH_MIG"),
    (1 << 5, "CHANGE_PHY_PORT"),
    (1 << 6, "UD_AV_PORT_ENFORCE"),
    (1 << 7, "CURR_QP_STATE_MOD"),
    (1 << 8, "SHUTDOWN_PORT"),
    (1 << 9, "INIT_TYPE"),
    (1 << 10, "PORT_ACTIVE_EVENT"),
    (1 << 11, "SYS_IMAGE_GUID"),
    (1 << 12, "RC_RNR_NAK_GEN"),
    (1 << 13, "SRQ_RESIZE"),
    (1 << 14, "N_NOTIFY_CQ"),
    (1 << 17, "MEM_WINDOW"),
    (1 << 18, "UD_IP_CSUM"),
    (1 << 20, "XRC"),
    (1 << 21, "MEM_MGT_EXTENSIONS"),
    (1 << 23, "MEM_WINDOW_TYPE_2A"),
    (1 << 24, "MEM_WINDOW_TYPE_2B"),
    (1 << 25, "RC_IP_CSUM"),
    (1 << 26, "RAW_IP_CSUM"),
    (1 << 29, "MANAGED_FLOW_STEERING"),
];

const ODP_TRANSPORT: &[(u64, &str)] = &[
    (1, "SUPPORT_SEND"),
    (1 << 1, "SUPPORT_RECV"),
    (1 << 2, "SUPPORT_WRITE"),
    (1 << 3, "SUPPORT_READ"),
    (1 << 4, "SUPPORT_ATOMIC"),
    (1 << 5, "SUPPORT_SRQ"),
];

/// Bits of `supported_qpts`: 1 << IBV_QPT_RAW_PACKET (8), 1 << IBV_QPT_UD (4).
const QPTS: &[(u64, &str)] = &[(1 << 8, "SUPPORT_RAW_PACKET"), (1 << 4, "SUPPORT_UD")];

fn odp_transport(out: &mut String, caps: u32) {
    if caps == 0 {
        out.push_str("\t\t\t\t\tNO SUPPORT\n");
    } else {
        flag_lines(out, u64::from(caps), ODP_TRANSPORT, true);
    }
}

fn qpts(out: &mut String, header: &str, qpts: u32) {
    out.push_str(header);
    flag_lines(out, u64::from(qpts), QPTS, true);
}

fn devinfo_verbose_device(out: &mut String, a: &DeviceAttrs) {
    let _ = writeln!(out, "\tmax_mr_size:\t\t\t0x{:x}", a.max_mr_size);
    let _ = writeln!(out, "\tpage_size_cap:\t\t\t0x{:x}", a.page_size_cap);
    let _ = writeln!(out, "\tmax_qp:\t\t\t\t{}", a.max_qp);
    let _ = writeln!(out, "\tmax_qp_wr:\t\t\t{}", a.max_qp_wr);
    let _ = writeln!(out, "\tdevice_cap_flags:\t\t0x{:08x}", a.device_cap_flags);
    flag_lines(out, u64::from(a.device_cap_flags), DEVICE_CAP_FLAGS, true);
    let _ = writeln!(out, "\tmax_sge:\t\t\t{}", a.max_sge);
    let _ = writeln!(out, "\tmax_sge_rd:\t\t\t{}", a.max_sge_rd);
    let _ = writeln!(out, "\tmax_cq:\t\t\t\t{}", a.max_cq);
    let _ = writeln!(out, "\tmax_cqe:\t\t\t{}", a.max_cqe);
    let _ = writeln!(out, "\tmax_mr:\t\t\t\t{}", a.max_mr);
    let _ = writeln!(out, "\tmax_pd:\t\t\t\t{}", a.max_pd);
    let _ = writeln!(out, "\tmax_qp_rd_atom:\t\t\t{}", a.max_qp_rd_atom);
    let _ = writeln!(out, "\tmax_ee_rd_atom:\t\t\t{}", a.max_ee_rd_atom);
    let _ = writeln!(out, "\tmax_res_rd_atom:\t\t{}", a.max_res_rd_atom);
    let _ = writeln!(out, "\tmax_qp_init_rd_atom:\t\t{}", a.max_qp_init_rd_atom);
    let _ = writeln!(out, "\tmax_ee_init_rd_atom:\t\t{}", a.max_ee_init_rd_atom);
    let atomic = match a.atomic_cap {
        0 => "ATOMIC_NONE",
        1 => "ATOMIC_HCA",
        2 => "ATOMIC_GLOB",
        _ => "invalid atomic capability",
    };
    let _ = writeln!(out, "\tatomic_cap:\t\t\t{atomic} ({})", a.atomic_cap);
    let _ = writeln!(out, "\tmax_ee:\t\t\t\t{}", a.max_ee);
    let _ = writeln!(out, "\tmax_rdd:\t\t\t{}", a.max_rdd);
    let _ = writeln!(out, "\tmax_mw:\t\t\t\t{}", a.max_mw);
    let _ = writeln!(out, "\tmax_raw_ipv6_qp:\t\t{}", a.max_raw_ipv6_qp);
    let _ = writeln!(out, "\tmax_raw_ethy_qp:\t\t{}", a.max_raw_ethy_qp);
    let _ = writeln!(out, "\tmax_mcast_grp:\t\t\t{}", a.max_mcast_grp);
    let _ = writeln!(out, "\tmax_mcast_qp_attach:\t\t{}", a.max_mcast_qp_attach);
    let _ = writeln!(
        out,
        "\tmax_total_mcast_qp_attach:\t{}",
        a.max_total_mcast_qp_attach
    );
    let _ = writeln!(out, "\tmax_ah:\t\t\t\t{}", a.max_ah);
    let _ = writeln!(out, "\tmax_fmr:\t\t\t{}", a.max_fmr);
    if a.max_fmr != 0 {
        let _ = writeln!(out, "\tmax_map_per_fmr:\t\t{}", a.max_map_per_fmr);
    }
    let _ = writeln!(out, "\tmax_srq:\t\t\t{}", a.max_srq);
    if a.max_srq != 0 {
        let _ = writeln!(out, "\tmax_srq_wr:\t\t\t{}", a.max_srq_wr);
        let _ = writeln!(out, "\tmax_srq_sge:\t\t\t{}", a.max_srq_sge);
    }
    let _ = writeln!(out, "\tmax_pkeys:\t\t\t{}", a.max_pkeys);
    let _ = writeln!(out, "\tlocal_ca_ack_delay:\t\t{}", a.local_ca_ack_delay);

    out.push_str("\tgeneral_odp_caps:\n");
    flag_lines(
        out,
        a.odp_general_caps,
        &[(1, "ODP_SUPPORT"), (2, "ODP_SUPPORT_IMPLICIT")],
        true,
    );
    out.push_str("\trc_odp_caps:\n");
    odp_transport(out, a.odp_rc_caps);
    out.push_str("\tuc_odp_caps:\n");
    odp_transport(out, a.odp_uc_caps);
    out.push_str("\tud_odp_caps:\n");
    odp_transport(out, a.odp_ud_caps);
    out.push_str("\txrc_odp_caps:\n");
    odp_transport(out, a.odp_xrc_caps);

    if a.completion_timestamp_mask != 0 {
        let _ = writeln!(
            out,
            "\tcompletion timestamp_mask:\t\t\t0x{:016x}",
            a.completion_timestamp_mask
        );
    } else {
        out.push_str("\tcompletion_timestamp_mask not supported\n");
    }
    if a.hca_core_clock != 0 {
        let _ = writeln!(out, "\thca_core_clock:\t\t\t{}kHZ", a.hca_core_clock);
    } else {
        out.push_str("\tcore clock not supported\n");
    }
    if a.raw_packet_caps != 0 {
        out.push_str("\traw packet caps:\n");
        for (bit, name) in [
            (1u32, "C-VLAN stripping offload"),
            (2, "Scatter FCS offload"),
            (4, "IP csum offload"),
            (8, "Delay drop"),
        ] {
            if a.raw_packet_caps & bit != 0 {
                let _ = writeln!(out, "\t\t\t\t\t{name}");
            }
        }
    }
    let _ = writeln!(
        out,
        "\tdevice_cap_flags_ex:\t\t0x{:X}",
        a.device_cap_flags_ex
    );
    flag_lines(
        out,
        a.device_cap_flags_ex & 0xffff_ffff_0000_0000,
        &[
            (1 << 34, "RAW_SCATTER_FCS"),
            (1 << 36, "PCI_WRITE_END_PADDING"),
        ],
        true,
    );
    out.push_str("\ttso_caps:\n");
    let _ = writeln!(out, "\t\tmax_tso:\t\t\t{}", a.max_tso);
    if a.max_tso != 0 {
        qpts(out, "\tsupported_qp:\n", a.tso_supported_qpts);
    }
    out.push_str("\trss_caps:\n");
    let _ = writeln!(
        out,
        "\t\tmax_rwq_indirection_tables:\t\t\t{}",
        a.max_rwq_indirection_tables
    );
    let _ = writeln!(
        out,
        "\t\tmax_rwq_indirection_table_size:\t\t\t{}",
        a.max_rwq_indirection_table_size
    );
    let _ = writeln!(
        out,
        "\t\trx_hash_function:\t\t\t\t0x{:x}",
        a.rx_hash_function
    );
    let _ = writeln!(
        out,
        "\t\trx_hash_fields_mask:\t\t\t\t0x{:X}",
        a.rx_hash_fields_mask
    );
    if a.rss_supported_qpts != 0 {
        qpts(out, "\t\tsupported_qp:\n", a.rss_supported_qpts);
    }
    let _ = writeln!(out, "\tmax_wq_type_rq:\t\t\t{}", a.max_wq_type_rq);
    out.push_str("\tpacket_pacing_caps:\n");
    let _ = writeln!(out, "\t\tqp_rate_limit_min:\t{}kbps", a.qp_rate_limit_min);
    let _ = writeln!(out, "\t\tqp_rate_limit_max:\t{}kbps", a.qp_rate_limit_max);
    if a.qp_rate_limit_max != 0 {
        qpts(out, "\t\tsupported_qp:\n", a.packet_pacing_supported_qpts);
    }
    if a.tm_max_num_tags != 0 {
        let _ = writeln!(out, "\tmax_rndv_hdr_size:\t\t{}", a.tm_max_rndv_hdr_size);
        let _ = writeln!(out, "\tmax_num_tags:\t\t\t{}", a.tm_max_num_tags);
        let _ = writeln!(out, "\tmax_ops:\t\t\t{}", a.tm_max_ops);
        let _ = writeln!(out, "\tmax_sge:\t\t\t{}", a.tm_max_sge);
        out.push_str("\tflags:\n");
        if a.tm_flags & 1 != 0 {
            out.push_str("\t\t\t\t\tIBV_TM_CAP_RC\n");
        }
    } else {
        out.push_str("\ttag matching not supported\n");
    }
    if a.max_cq_count != 0 && a.max_cq_period != 0 {
        out.push_str("\n\tcq moderation caps:\n");
        let _ = writeln!(out, "\t\tmax_cq_count:\t{}", a.max_cq_count);
        let _ = writeln!(out, "\t\tmax_cq_period:\t{} us\n", a.max_cq_period);
    }
    if a.max_dm_size != 0 {
        let _ = writeln!(
            out,
            "\tmaximum available device memory:\t{}Bytes\n",
            a.max_dm_size
        );
    }
    let _ = writeln!(out, "\tnum_comp_vectors:\t\t{}", a.num_comp_vectors);
}

fn devinfo_port(out: &mut String, p: &PortView, verbose: bool) {
    let state = match u8::from(p.state) {
        1 => "PORT_DOWN",
        2 => "PORT_INIT",
        3 => "PORT_ARMED",
        4 => "PORT_ACTIVE",
        _ => "invalid state",
    };
    let _ = writeln!(out, "\t\tport:\t{}", p.number);
    let _ = writeln!(out, "\t\t\tstate:\t\t\t{state} ({})", u8::from(p.state));
    let _ = writeln!(
        out,
        "\t\t\tmax_mtu:\t\t{} ({})",
        mtu_str(p.max_mtu),
        u8::from(p.max_mtu)
    );
    let _ = writeln!(
        out,
        "\t\t\tactive_mtu:\t\t{} ({})",
        mtu_str(p.active_mtu),
        u8::from(p.active_mtu)
    );
    let _ = writeln!(out, "\t\t\tsm_lid:\t\t\t{}", p.sm_lid.0);
    let _ = writeln!(out, "\t\t\tport_lid:\t\t{}", p.lid.0);
    let _ = writeln!(out, "\t\t\tport_lmc:\t\t0x{:02x}", p.lmc);
    let _ = writeln!(out, "\t\t\tlink_layer:\t\t{}", p.link_layer.name());
    if verbose {
        let _ = writeln!(out, "\t\t\tmax_msg_sz:\t\t0x{:x}", p.max_msg_sz);
        let _ = writeln!(out, "\t\t\tport_cap_flags:\t\t0x{:08x}", p.capability_mask);
        let _ = writeln!(out, "\t\t\tport_cap_flags2:\t0x{:04x}", p.capability_mask2);
        let vl = match p.max_vl_num {
            1 => "1",
            2 => "2",
            3 => "4",
            4 => "8",
            5 => "15",
            _ => "invalid value",
        };
        let _ = writeln!(out, "\t\t\tmax_vl_num:\t\t{vl} ({})", p.max_vl_num);
        let _ = writeln!(out, "\t\t\tbad_pkey_cntr:\t\t0x{:x}", p.bad_pkey_cntr);
        let _ = writeln!(out, "\t\t\tqkey_viol_cntr:\t\t0x{:x}", p.qkey_viol_cntr);
        let _ = writeln!(out, "\t\t\tsm_sl:\t\t\t{}", p.sm_sl);
        let _ = writeln!(out, "\t\t\tpkey_tbl_len:\t\t{}", p.pkey_tbl_len);
        let _ = writeln!(out, "\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
        let _ = writeln!(out, "\t\t\tsubnet_timeout:\t\t{}", p.subnet_timeout);
        let _ = writeln!(out, "\t\t\tinit_type_reply:\t{}", p.init_type_reply);
        let width = match p.active_width {
            1 => "1",
            2 => "4",
            4 => "8",
            8 => "12",
            16 => "2",
            _ => "invalid width",
        };
        let _ = writeln!(out, "\t\t\tactive_width:\t\t{width}X ({})", p.active_width);
        let speed = match p.active_speed {
            1 => "2.5 Gbps",
            2 => "5.0 Gbps",
            4 | 8 => "10.0 Gbps",
            16 => "14.0 Gbps",
            32 => "25.0 Gbps",
            64 => "50.0 Gbps",
            128 => "100.0 Gbps",
            _ => "invalid speed",
        };
        let _ = writeln!(out, "\t\t\tactive_speed:\t\t{speed} ({})", p.active_speed);
        let phys = match u8::from(p.phys_state) {
            1 => "SLEEP",
            2 => "POLLING",
            3 => "DISABLED",
            4 => "PORT_CONFIGURATION TRAINNING",
            5 => "LINK_UP",
            6 => "LINK_ERROR_RECOVERY",
            7 => "PHY TEST",
            _ => "invalid physical state",
        };
        let _ = writeln!(
            out,
            "\t\t\tphys_state:\t\t{phys} ({})",
            u8::from(p.phys_state)
        );
        let mut gids: Vec<&GidEntry> = p.gids.iter().collect();
        gids.sort_by_key(|g| g.index);
        for g in gids {
            // devinfo's null_gid() looks only at the interface ID.
            if g.gid.interface_id() == 0 {
                continue;
            }
            let suffix = match (p.link_layer, g.gid_type) {
                (LinkLayer::Ethernet, GidType::IbRoceV1) => ", RoCE v1",
                (LinkLayer::Ethernet, GidType::RoceV2) => ", RoCE v2",
                (LinkLayer::InfiniBand, _) => "",
            };
            let text = match g.gid_type {
                GidType::IbRoceV1 => g.gid.to_string(),
                GidType::RoceV2 => inet_ntop6(&g.gid.0),
            };
            let _ = writeln!(out, "\t\t\tGID[{:>3}]:\t\t{text}{suffix}", g.index);
        }
    }
    out.push('\n');
}

/// `ibv_devinfo [-v] [-d device] [-i port]`.
pub fn ibv_devinfo(
    devs: &[DeviceView],
    verbose: bool,
    device: Option<&str>,
    port: Option<u8>,
) -> Result<String, DiagError> {
    let selected: &[DeviceView] = match device {
        Some(name) => {
            let at = devs
                .iter()
                .position(|d| d.name == name)
                .ok_or_else(|| DiagError::new(format!("IB device '{name}' wasn't found"), 255))?;
            &devs[at..=at]
        }
        None if devs.is_empty() => return Err(DiagError::new("No IB devices found", 255)),
        None => devs,
    };
    let mut out = String::new();
    for d in selected {
        let a = &d.attrs;
        if port.is_some_and(|p| p != 0 && p > a.phys_port_cnt) {
            return Err(DiagError::new("Invalid port requested for device", 4));
        }
        let _ = writeln!(out, "hca_id:\t{}", d.name);
        out.push_str("\ttransport:\t\t\tInfiniBand (0)\n");
        if !a.fw_ver.is_empty() {
            let _ = writeln!(out, "\tfw_ver:\t\t\t\t{}", a.fw_ver);
        }
        let _ = writeln!(out, "\tnode_guid:\t\t\t{}", guid_str(d.node_guid));
        let _ = writeln!(out, "\tsys_image_guid:\t\t\t{}", guid_str(d.sys_image_guid));
        let _ = writeln!(out, "\tvendor_id:\t\t\t0x{:04x}", a.vendor_id);
        let _ = writeln!(out, "\tvendor_part_id:\t\t\t{}", a.vendor_part_id);
        let _ = writeln!(out, "\thw_ver:\t\t\t\t0x{:X}", a.hw_ver);
        if let Some(board) = &a.board_id {
            let _ = writeln!(out, "\tboard_id:\t\t\t{board}");
        }
        let _ = writeln!(out, "\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt);
        if verbose {
            devinfo_verbose_device(&mut out, a);
        }
        for n in 1..=a.phys_port_cnt {
            if port.is_some_and(|p| p != 0 && p != n) {
                continue;
            }
            // A port the view lacks is one ibv_query_port could not read: skipped.
            if let Some(p) = d.port(n) {
                devinfo_port(&mut out, p, verbose);
            }
        }
    }
    Ok(out)
}
