//! Parity with ibsim: the same topology file (topoB) on Debian's ibsim (umad2sim + the real
//! opensm) and on softib (+ the same opensm), and the same unmodified tools run on node4 of
//! each. Their outputs are compared after normalising only what must differ (the time
//! `ibnetdiscover` stamps its header with, the SM's activity count in `sminfo` and `saquery
//! SMIR`, which counts the MADs it sent so far); each difference that remains is written down
//! here as an ibsim deviation, with the section of the spec that softib follows instead
//! (docs/dropin.md has the same table):
//!
//! | output | on both | deviation of ibsim (0.10) |
//! | --- | --- | --- |
//! | `ibnetdiscover` (also `-p`, `-g`), `ibroute 5`, `ibroute 6` (also `-M`, `-a`), `ibtracert 2 4`, `ibaddr`, `ibhosts`, `ibswitches`, `ibqueryerrors`, `smpquery nodeinfo 4`, `smpquery guids 4`, `smpquery pkeys 5 1`, `smpquery MEPI 4 1`, `sminfo`, `saquery LR`, `saquery SMIR`, `saquery -s`, `saquery -m`, `saquery MCMR`, `saquery -d 4` | equal | — |
//! | `iblinkinfo` | equal but for "(Could be 12X )" | ibsim's ports claim LinkWidthSupported 12X, which neither a ConnectX-3 nor an SX6036 has (IBA §14.2.5.6, PortInfo; softib gives 1X\|4X): the tool's hint, "( )" on softib |
//! | `saquery SWIR`, `smpquery switchinfo 5` | equal but for LinearFDBCap | ibsim's switches say 0x7800 entries whatever the model; an SX6036 has 0xC000 (IBA §14.2.5.4, SwitchInfo) |
//! | `smpquery portinfo 4 1`, `saquery PIR` (the first part of softib's, below) | equal but for PortInfo fields | ibsim keeps its own M_KeyLeasePeriod (4089), SubnetTimeout (31), LocalPhyErrors and OverrunErrors thresholds (0) where opensm Sets 0, 18, 8 and 8 (IBA §14.2.5.6: fields the SM sets, which softib's SMA takes); and claims LinkWidthSupported 1X-12X and CapabilityMask2 0x30 (2X, HDR), which a ConnectX-3 has not |
//! | `smpquery nodeinfo 5`, `smpquery portinfo 5 35` (a switch, LID-routed) | equal but for LocalPort (and the PortInfo fields above), and NodeInfo's Revision | LocalPortNum is "the link port which received this SMP" (IBA §14.2.5.3, §14.2.5.6): softib's switch answers 35, where the SMP came in; ibsim delivers a LID-routed SMP to port 0 and answers 0. Revision is the manufacturer's (§14.2.5.3): ibsim's one switch template says 0xA1 for every model, softib's switches 0 (a topology file gives none) |
//! | `saquery` (NR), `saquery -p`, `saquery PIR` | ibsim's is the first part of softib's | umad2sim does no RMPP (IBA §13.6): a GetTable response of more than one MAD reaches the tool as its first segment only (1 NodeRecord, 3 PathRecords, the last of them with a tail of garbage); softib reassembles them all |
//!
//! Not compared, because their values are the vendor's or the moment's, not a matter of
//! parity: `smpquery sl2vl`/`vlarb` (the initial SL-to-VL and VL arbitration tables, which
//! opensm leaves alone without QoS: ibsim maps SL n to VL n, softib every SL to VL0) and
//! `perfquery` (the counters count each fabric's own traffic).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod dropin;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{repo, stop, text, Fabric, SOFTIB};
use dropin::have;

const UMAD2SIM: &str = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so";
const SM_GUID: &str = "0xe41d2d0300c00001";

/// How an output on ibsim relates to the same on softib.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parity {
    /// Equal once normalised.
    Equal,
    /// ibsim's is the start of softib's: only the first RMPP segment reached the tool.
    FirstSegment,
}

/// A tool compared, as run on node4 (in /usr/sbin), and the fields of its output (line
/// prefixes) that differ by one of ibsim's deviations only it shows.
struct Tool {
    cmd: &'static str,
    parity: Parity,
    masked: &'static [&'static str],
}

const fn tool(cmd: &'static str) -> Tool {
    Tool {
        cmd,
        parity: Parity::Equal,
        masked: &[],
    }
}

/// A LID-routed SMP to a switch reaches its management port through a link port; ibsim
/// answers LocalPortNum 0, softib the link port (IBA §14.2.5.3, §14.2.5.6).
const LOCAL_PORT: &str = "LocalPort:";

const TOOLS: &[Tool] = &[
    tool("ibnetdiscover"),
    tool("ibnetdiscover -p"),
    tool("ibnetdiscover -g"),
    tool("iblinkinfo"),
    tool("ibroute 5"),
    tool("ibroute 6"),
    tool("ibroute -M 5"),
    tool("ibroute -M 6"),
    tool("ibroute -a 5"),
    tool("ibtracert 2 4"),
    tool("ibaddr"),
    tool("ibaddr 3"),
    tool("ibhosts"),
    tool("ibswitches"),
    tool("ibqueryerrors"),
    tool("smpquery nodeinfo 4"),
    Tool {
        cmd: "smpquery nodeinfo 5",
        parity: Parity::Equal,
        masked: &[LOCAL_PORT, "Revision:"],
    },
    tool("smpquery portinfo 4 1"),
    Tool {
        cmd: "smpquery portinfo 5 35",
        parity: Parity::Equal,
        masked: &[LOCAL_PORT],
    },
    tool("smpquery switchinfo 5"),
    tool("smpquery guids 4"),
    tool("smpquery pkeys 5 1"),
    tool("smpquery MEPI 4 1"),
    tool("sminfo"),
    tool("saquery LR"),
    tool("saquery SWIR"),
    tool("saquery SMIR"),
    tool("saquery -s"),
    tool("saquery -m"),
    tool("saquery MCMR"),
    tool("saquery -d 4"),
    Tool {
        cmd: "saquery",
        parity: Parity::FirstSegment,
        masked: &[],
    },
    Tool {
        cmd: "saquery -p",
        parity: Parity::FirstSegment,
        masked: &[],
    },
    Tool {
        cmd: "saquery PIR",
        parity: Parity::FirstSegment,
        masked: &[],
    },
];

/// What must differ (the time `ibnetdiscover` stamps its header with; the SM's activity
/// count, which counts its MADs so far), and the ibsim deviations of the table above, taken
/// out. Of a table that reaches an ibsim tool as one RMPP segment, the last of several
/// records is left out on both: on ibsim its tail is whatever the tool's buffer held (it
/// changes from run to run).
fn normalise(out: &str, tool: &Tool) -> String {
    let records = out.matches("Record dump:").count();
    let out = match (tool.parity, out.rfind("Record dump:")) {
        (Parity::FirstSegment, Some(at)) if records > 1 => {
            out[..at].rsplit_once('\n').map_or("", |(kept, _)| kept)
        }
        _ => out,
    };
    // PortInfo fields ibsim keeps at its own values whatever the SM Sets or the port is.
    const PORT_INFO_OWN: &[&str] = &[
        "MkeyLeasePeriod:",
        "SubnetTimeout:",
        "LocalPhysErr:",
        "OverrunErr:",
        "LinkWidthSupported:",
        "CapabilityMask2:",
    ];
    out.lines()
        .filter(|l| {
            !matches!(
                l.trim(),
                "IsLinkWidth2xSupported" | "IsLinkSpeedHDRSupported"
            )
        })
        .map(|l| {
            let t = l.trim_start();
            if l.starts_with("# Topology file: generated on ") {
                "# Topology file: generated on (time)".to_string()
            } else if let Some((head, _)) = l.split_once(", activity count ") {
                // sminfo: "... activity count N priority P state S ..."
                let tail = l.split_once(" priority ").map_or("", |(_, t)| t);
                format!("{head}, activity count (n) priority {tail}")
            } else if t.starts_with("ActCount....") {
                "ActCount (n)".to_string()
            } else if t.starts_with("LinearFDBCap....") || t.starts_with("LinearFdbCap:....") {
                "LinearFDBCap (model)".to_string()
            } else if let Some(f) = PORT_INFO_OWN
                .iter()
                .chain(tool.masked)
                .find(|f| t.starts_with(*f))
            {
                format!("{f} (ibsim's own)")
            } else {
                l.replace(" (Could be 12X )", " ( )")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A program stopped when the test ends, however it ends.
struct Killed(Option<std::process::Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            stop(c);
        }
    }
}

/// Debian's ibsim on topoB, the real opensm on its node1 through umad2sim, and a way to run
/// the tools there.
struct Ibsim {
    dir: PathBuf,
    sockname: String,
    _sim: Killed,
    _sm: Killed,
}

impl Ibsim {
    fn start() -> Ibsim {
        let dir = std::env::temp_dir().join(format!("softib-it-ibsim-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("cache")).unwrap();
        let sockname = format!("softib-parity-{}", std::process::id());
        let sim = Command::new("/usr/bin/ibsim")
            .args(["-s", "-n"])
            .arg(repo("topologies/topoB.net"))
            .env("IBSIM_SOCKNAME", &sockname)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let sim = Killed(Some(sim));
        // ibsim listens once it has read the file; the SM's first umad_open needs it.
        std::thread::sleep(Duration::from_millis(300));
        let sm = Command::new("/usr/sbin/opensm")
            .args(["-g", SM_GUID, "-e", "-f"])
            .arg(dir.join("opensm.log"))
            .env("LD_PRELOAD", UMAD2SIM)
            .env("IBSIM_SOCKNAME", &sockname)
            .env("SIM_HOST", "node1")
            .env("OSM_CACHE_DIR", dir.join("cache"))
            .env("OSM_TMP_DIR", dir.join("cache"))
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Ibsim {
            dir,
            sockname,
            _sim: sim,
            _sm: Killed(Some(sm)),
        }
    }

    /// `cmd` (a tool of /usr/sbin with its arguments) on node4 of the simulated fabric.
    fn run(&self, cmd: &str) -> String {
        let mut args = cmd.split(' ');
        let prog = Path::new("/usr/sbin").join(args.next().unwrap());
        let out = Command::new(prog)
            .args(args)
            .env("LD_PRELOAD", UMAD2SIM)
            .env("IBSIM_SOCKNAME", &self.sockname)
            .env("SIM_HOST", "node4")
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        format!("{}{}", text(&out.stdout), text(&out.stderr))
    }
}

impl Drop for Ibsim {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every tool's output from `run`, once the fabric has settled: two rounds in a row the same
/// (the SM has swept, programmed the tables and joined the IPoIB group), with every link
/// Active.
fn settled(what: &str, run: impl Fn(&str) -> String) -> Vec<String> {
    let t0 = Instant::now();
    let mut last: Option<Vec<String>> = None;
    loop {
        let now: Vec<String> = TOOLS.iter().map(|t| normalise(&run(t.cmd), t)).collect();
        let links_up = TOOLS
            .iter()
            .position(|t| t.cmd == "iblinkinfo")
            .is_some_and(|i| now[i].matches("Active/  LinkUp").count() == 12);
        if links_up && last.as_ref() == Some(&now) {
            return now;
        }
        if t0.elapsed() > Duration::from_secs(120) {
            let changing: Vec<&str> = TOOLS
                .iter()
                .zip(&now)
                .enumerate()
                .filter(|(i, (_, o))| last.as_ref().is_none_or(|l| &l[*i] != *o))
                .map(|(_, (t, _))| t.cmd)
                .collect();
            panic!(
                "{what} did not settle (links up: {links_up}; still changing: {changing:?}); last outputs:\n{}",
                now.join("\n----\n")
            );
        }
        last = Some(now);
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn the_real_tools_print_on_softib_what_they_print_on_ibsim_but_for_ibsims_deviations() {
    if !have("/usr/bin/ibsim", "ibsim-utils")
        || !have(UMAD2SIM, "libumad2sim0")
        || !have("/usr/sbin/opensm", "opensm")
        || !have("/usr/sbin/ibnetdiscover", "infiniband-diags")
    {
        return;
    }
    let sim = Ibsim::start();
    let on_ibsim = settled("ibsim", |c| sim.run(c));
    let f = Fabric::up("topologies/topoB.net", "parity", &["--no-sm"]);
    let sm = Command::new(SOFTIB)
        .args(["fabric", "exec", "node1", "--dir"])
        .arg(&f.dir)
        .args(["--", "/usr/sbin/opensm", "-g", SM_GUID, "-e", "-f"])
        .arg(f.dir.join("opensm.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _sm = Killed(Some(sm));
    let on_softib = settled("softib", |c| {
        let mut args = vec![format!("/usr/sbin/{}", c.split(' ').next().unwrap())];
        args.extend(c.split(' ').skip(1).map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = f.exec("node4", &args);
        format!("{}{}", text(&out.stdout), text(&out.stderr))
    });
    for ((tool, sim), softib) in TOOLS.iter().zip(&on_ibsim).zip(&on_softib) {
        let cmd = tool.cmd;
        match tool.parity {
            Parity::Equal => assert_eq!(sim, softib, "`{cmd}`: ibsim, then softib"),
            Parity::FirstSegment => {
                let differ = sim
                    .lines()
                    .zip(softib.lines())
                    .position(|(a, b)| a != b)
                    .map(|i| (sim.lines().nth(i), softib.lines().nth(i)));
                assert!(
                    softib.starts_with(sim.as_str())
                        && softib.len() > sim.len()
                        && sim.contains("Record dump:"),
                    "`{cmd}`: ibsim's (one RMPP segment) is not the start of softib's \
                     (first difference, ibsim then softib: {differ:?}):\n{sim}\n----\n{softib}"
                );
            }
        }
    }
}
