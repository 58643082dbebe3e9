//! perftest's output, byte for byte: the waiting box, the banner, the address lines, the
//! BW and latency tables, `--out_json`, and the "120 Seconds" message.
//!
//! Facts from `ctx_print_test_info`, `print_report_bw`, `print_full_bw_report`,
//! `print_report_lat` (`src/perftest_parameters.c`), `ctx_print_pingpong_data`
//! (`src/perftest_communication.c`) and the format macros of `perftest_parameters.h` /
//! `perftest_communication.h`. Upstream measures with the CPU cycle counter; softib's
//! runner gives nanoseconds, so "cycles per second" is 10^9 here and the same integer
//! arithmetic (including upstream's truncations) is applied to nanoseconds.
//!
//! Two banner layouts exist because the banner changed between releases:
//! [`BannerStyle::V6`] follows perftest 6.x, [`BannerStyle::V4_5`] the Debian 12
//! `perftest 4.5+0.17` package that produced the rxe golden output.

use crate::args::{Connection, Mode, PerftestArgs, Test, TestType};
use crate::exchange::{BwReport, Dest};

/// Upstream `RESULT_LINE` (87 dashes and a newline).
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------\n";

/// The server's box before a client connects (upstream prints a blank line first).
pub const WAITING_FOR_CLIENT: &str = "\n************************************\n* Waiting for client to connect... *\n************************************\n";

/// Errors of the report math: the runner handed in unusable timestamps.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReportError {
    /// Not enough samples or timestamps.
    #[error("cannot produce a report: {0}")]
    BadInput(String),
}

/// Which release's banner and header layout to print.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BannerStyle {
    /// perftest 6.x (the reference release is 6.29).
    V6,
    /// Debian's perftest 4.5+0.17, as in the rxe golden output.
    V4_5,
}

/// The link layer (`link_layer_str`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    /// Native InfiniBand.
    Ib,
    /// RoCE.
    Ethernet,
}

impl LinkLayer {
    fn name(self) -> &'static str {
        match self {
            LinkLayer::Ib => "IB",
            LinkLayer::Ethernet => "Ethernet",
        }
    }
}

/// Everything the banner prints. [`BannerInfo::new`] fills it from the arguments and
/// the device facts a runner knows after opening the device.
#[derive(Clone, Debug, PartialEq)]
pub struct BannerInfo {
    /// Layout.
    pub style: BannerStyle,
    /// The verb.
    pub test: Test,
    /// BW or latency.
    pub mode: Mode,
    /// Atomic operation name (atomic tests only).
    pub atomic_type: Option<&'static str>,
    /// `-b`.
    pub duplex: bool,
    /// `-l`.
    pub post_list: u32,
    /// Device name.
    pub device: String,
    /// QPs.
    pub num_qps: u32,
    /// Transport type string ("IB" for IB and RoCE devices).
    pub transport: &'static str,
    /// Connection type.
    pub connection: Connection,
    /// True on the client side.
    pub is_client: bool,
    /// `--use_old_post_send`: the "ibv_wr* API" line prints OFF.
    pub use_old_post_send: bool,
    /// TX depth.
    pub tx_depth: u32,
    /// RX depth.
    pub rx_depth: u32,
    /// CQ moderation.
    pub cq_mod: u32,
    /// Path MTU in bytes.
    pub mtu_bytes: u64,
    /// Link layer.
    pub link: LinkLayer,
    /// GID index line, if one is in use.
    pub gid_index: Option<u8>,
    /// Max inline data (send/write).
    pub inline_size: u32,
    /// Outstanding reads (read/atomic).
    pub out_reads: u32,
    /// "PCIe relax order" value: `Some("ON"/"OFF")` like a build with relaxed-ordering
    /// support, `None` like a build without it ("Unsupported"). softib has no PCIe, so
    /// [`BannerInfo::new`] uses `None` for V6 and "ON" for V4_5 (as in the golden file).
    pub pcie_relax_order: Option<&'static str>,
    /// `-R`: the QPs are connected with rdma_cm, which is also the exchange.
    pub rdma_cm: bool,
}

impl BannerInfo {
    /// Fills the banner from the arguments and device facts. `inline_size`/`out_reads`
    /// are the effective values after the device decided (upstream's `check_link`).
    pub fn new(
        style: BannerStyle,
        args: &PerftestArgs,
        device: &str,
        mtu_bytes: u64,
        link: LinkLayer,
        inline_size: u32,
        out_reads: u32,
    ) -> Self {
        BannerInfo {
            style,
            test: args.test,
            mode: args.mode,
            atomic_type: (args.test == Test::Atomic).then(|| args.atomic_type.name()),
            duplex: args.duplex,
            post_list: args.post_list,
            device: device.to_string(),
            num_qps: args.num_qps,
            transport: "IB",
            connection: args.connection,
            is_client: !args.is_server(),
            use_old_post_send: args.use_old_post_send,
            tx_depth: args.tx_depth,
            rx_depth: args.rx_depth,
            cq_mod: args.cq_mod,
            mtu_bytes,
            link,
            // On RoCE upstream forces GID index 0 when none was given (check_link).
            gid_index: args
                .gid_index
                .or((link == LinkLayer::Ethernet).then_some(0)),
            inline_size,
            out_reads,
            pcie_relax_order: match style {
                BannerStyle::V6 => None,
                BannerStyle::V4_5 => Some("ON"),
            },
            rdma_cm: args.rdma_cm,
        }
    }

    /// The title line's test words, e.g. "Atomic FETCH_AND_ADD Bidirectional BW".
    fn title(&self) -> String {
        let mut t = format!("{} ", self.test.banner_name());
        if let Some(a) = self.atomic_type {
            t.push_str(a);
            t.push(' ');
        }
        match self.mode {
            Mode::Bw => {
                if self.duplex {
                    t.push_str("Bidirectional ");
                }
                if self.post_list > 1 {
                    t.push_str("Post List ");
                }
                t.push_str("BW ");
            }
            Mode::Lat => t.push_str("Latency "),
        }
        t.push_str("Test");
        t
    }

    /// The banner between two result lines, as `ctx_print_test_info` prints it.
    pub fn render(&self) -> String {
        let on_off = |b: bool| if b { "ON" } else { "OFF" };
        let mut s = String::from(RESULT_LINE);
        s.push_str(&format!("                    {}\n", self.title()));
        s.push_str(&format!(
            " Dual-port       : OFF\t\tDevice         : {}\n",
            self.device
        ));
        s.push_str(&format!(
            " Number of qps   : {}\t\tTransport type : {}\n",
            self.num_qps, self.transport
        ));
        s.push_str(&format!(
            " Connection type : {}\t\tUsing SRQ      : OFF\n",
            self.connection.name()
        ));
        match self.style {
            BannerStyle::V6 => {
                match self.pcie_relax_order {
                    Some(v) => s.push_str(&format!(
                        " PCIe relax order: {v}\t\tLock-free      : Unsupported\n"
                    )),
                    None => {
                        s.push_str(" PCIe relax order: Unsupported\t\tLock-free\t: Unsupported\n")
                    }
                }
                s.push_str(&format!(
                    " ibv_wr* API     : {}\t\tUsing Enhanced Reorder      : OFF\n",
                    on_off(!self.use_old_post_send)
                ));
            }
            BannerStyle::V4_5 => {
                s.push_str(&format!(
                    " PCIe relax order: {}\n",
                    self.pcie_relax_order.unwrap_or("Unsupported")
                ));
                s.push_str(&format!(
                    " ibv_wr* API     : {}\n",
                    on_off(!self.use_old_post_send)
                ));
            }
        }
        if self.is_client || self.duplex {
            s.push_str(&format!(" TX depth        : {}\n", self.tx_depth));
        }
        if self.post_list > 1 {
            s.push_str(&format!(" Post List       : {}\n", self.post_list));
        }
        if self.test == Test::Send && (!self.is_client || self.duplex) {
            s.push_str(&format!(" RX depth        : {}\n", self.rx_depth));
        }
        if self.mode == Mode::Bw {
            s.push_str(&format!(" CQ Moderation   : {}\n", self.cq_mod));
        }
        s.push_str(&format!(" Mtu             : {}[B]\n", self.mtu_bytes));
        s.push_str(&format!(" Link type       : {}\n", self.link.name()));
        if let Some(g) = self.gid_index {
            s.push_str(&format!(" GID index       : {g}\n"));
        }
        if self.test.is_read_like() {
            s.push_str(&format!(" Outstand reads  : {}\n", self.out_reads));
        } else {
            s.push_str(&format!(" Max inline data : {}[B]\n", self.inline_size));
        }
        if self.rdma_cm {
            s.push_str(" rdma_cm QPs\t : ON\n");
            s.push_str(" Data ex. method : rdma_cm");
            if !self.is_client {
                // Upstream prints this with the banner, after the connection is made.
                s.push('\n');
                s.push_str(RESULT_LINE);
                s.push_str(" Waiting for client rdma_cm QP to connect\n");
                s.push_str(" Please run the same command with the IB/RoCE interface IP");
            }
            s.push('\n');
        } else {
            s.push_str(" rdma_cm QPs\t : OFF\n");
            s.push_str(" Data ex. method : Ethernet\n");
        }
        s.push_str(RESULT_LINE);
        s
    }

    /// The `test_info` object of `--out_json` (`write_test_info_to_file`).
    pub fn json_test_info(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("test".into(), self.title().replace(' ', "_").into());
        m.insert("Dual_port".into(), "OFF".into());
        m.insert("Device".into(), self.device.clone().into());
        m.insert("Number_of_qps".into(), self.num_qps.into());
        m.insert("Transport_type".into(), self.transport.into());
        m.insert("Connection_type".into(), self.connection.name().into());
        m.insert("Using_SRQ".into(), "OFF".into());
        m.insert(
            "PCIe_relax_order".into(),
            self.pcie_relax_order.unwrap_or("Unsupported").into(),
        );
        m.insert(
            "ibv_wr_API".into(),
            (if self.use_old_post_send { "OFF" } else { "ON" }).into(),
        );
        if self.is_client || self.duplex {
            m.insert("TX_depth".into(), self.tx_depth.into());
        }
        if self.post_list > 1 {
            m.insert("Post_List".into(), self.post_list.into());
        }
        if self.test == Test::Send && (!self.is_client || self.duplex) {
            m.insert("RX_depth".into(), self.rx_depth.into());
        }
        if self.mode == Mode::Bw {
            m.insert("CQ_Moderation".into(), self.cq_mod.into());
        }
        m.insert("Mtu".into(), self.mtu_bytes.into());
        m.insert("Link_type".into(), self.link.name().into());
        if let Some(g) = self.gid_index {
            m.insert("GID_index".into(), g.into());
        }
        if self.test.is_read_like() {
            m.insert("Outstand_reads".into(), self.out_reads.into());
        } else {
            m.insert("Max_inline_data".into(), self.inline_size.into());
        }
        let (qps, method) = if self.rdma_cm {
            ("ON", "rdma_cm")
        } else {
            ("OFF", "Ethernet")
        };
        m.insert("rdma_cm_QPs".into(), qps.into());
        m.insert("Use_ROCm_memory".into(), "OFF".into());
        m.insert("Data_ex_method".into(), method.into());
        serde_json::Value::Object(m)
    }
}

/// C's `%#0{width}x`: "0x" plus zero-padded hex filling `width` characters in total,
/// except that 0 gets no prefix (glibc prints 0 as plain zeros).
pub fn c_alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0, width = width)
    } else {
        let digits = width.saturating_sub(2);
        format!("0x{v:0digits$x}")
    }
}

/// Which side an address line describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// " local address: ..."
    Local,
    /// " remote address: ..."
    Remote,
}

/// One QP's address line(s) (`ctx_print_pingpong_data`): the basic line, the read
/// `OUT` and RDMA `RKey`/`VAddr` parts, and the decimal GID line when a GID is in use.
pub fn address_lines(side: Side, test: Test, dest: &Dest) -> String {
    let side = match side {
        Side::Local => "local",
        Side::Remote => "remote",
    };
    let mut s = format!(
        " {side} address: LID {} QPN {} PSN {}",
        c_alt_hex(dest.lid.into(), 4),
        c_alt_hex(dest.qpn.into(), 6),
        c_alt_hex(dest.psn.into(), 6)
    );
    // Upstream's switch falls through from READ to WRITE; atomics print neither.
    if test == Test::Read {
        s.push_str(&format!(" OUT {}", c_alt_hex(dest.out_reads.into(), 4)));
    }
    if matches!(test, Test::Read | Test::Write) {
        s.push_str(&format!(
            " RKey {} VAddr {}",
            c_alt_hex(dest.rkey.into(), 8),
            c_alt_hex(dest.vaddr, 16)
        ));
    }
    s.push('\n');
    if let Some(g) = dest.gid {
        let parts: Vec<String> = g.iter().map(|b| format!("{b:02}")).collect();
        s.push_str(&format!(" GID: {}\n", parts.join(":")));
    }
    s
}

/// The bandwidth unit of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BwUnit {
    /// 2^20 bytes per second (upstream's default, "MiB/sec" or "MB/sec").
    MiB,
    /// 10^9 bits per second (`--report_gbits`).
    Gbit,
}

impl BwUnit {
    /// Upstream's `format_factor`.
    fn factor(self) -> u64 {
        match self {
            BwUnit::MiB => 0x10_0000,
            BwUnit::Gbit => 125_000_000,
        }
    }
}

/// The BW table header: result line, column titles, newline.
pub fn bw_table_header(style: BannerStyle, unit: BwUnit) -> String {
    let u = match (unit, style) {
        (BwUnit::Gbit, _) => "Gb/sec",
        (BwUnit::MiB, BannerStyle::V6) => "MiB/sec",
        (BwUnit::MiB, BannerStyle::V4_5) => "MB/sec",
    };
    format!(
        "{RESULT_LINE} #bytes     #iterations    BW peak[{u}]    BW average[{u}]   MsgRate[Mpps]\n"
    )
}

/// What a BW runner measured.
///
/// Timestamps are nanoseconds from any fixed origin. With peak measurement on,
/// `tposted[i]` is the post time of WQE `i` and `tcompleted[j]` the time its completion
/// was polled, for all `iters × num_qps` WQEs (only entries at signaled positions — every
/// `cq_mod`-th and the last — are read). With `no_peak`, upstream only stamps the start
/// (`tposted[0]`) and the end (`tcompleted[0]`); vectors of length 1 are fine.
#[derive(Clone, Debug, PartialEq)]
pub struct BwResult {
    /// Message size.
    pub bytes: u64,
    /// Iterations per QP (in duration mode: the total count).
    pub iters: u64,
    /// QPs (1 unless `-q`).
    pub num_qps: u32,
    /// Post timestamps (ns).
    pub tposted: Vec<u64>,
    /// Completion timestamps (ns).
    pub tcompleted: Vec<u64>,
    /// CQ moderation in effect.
    pub cq_mod: u32,
    /// Post list in effect.
    pub post_list: u32,
    /// Peak measurement off (`-N`, duration mode, send server, > 20000 iterations).
    pub no_peak: bool,
    /// Duration mode: `iters` is already the total, not per QP.
    pub duration_mode: bool,
}

impl BwResult {
    /// Builds the inputs from the arguments; the runner adds the timestamps.
    pub fn from_args(args: &PerftestArgs, tposted: Vec<u64>, tcompleted: Vec<u64>) -> Self {
        BwResult {
            bytes: args.size,
            iters: args.iters,
            num_qps: args.num_qps,
            tposted,
            tcompleted,
            cq_mod: args.cq_mod,
            post_list: args.post_list,
            no_peak: args.no_peak,
            duration_mode: args.test_type == TestType::Duration,
        }
    }

    /// Upstream's `print_report_bw` math: average from first post to last completion,
    /// peak from the fastest window between a post and a signaled completion.
    pub fn compute(&self, unit: BwUnit) -> Result<BwReport, ReportError> {
        const TICKS: u64 = 1_000_000_000;
        let bad = |m: &str| Err(ReportError::BadInput(m.to_string()));
        let n = if self.duration_mode {
            self.iters
        } else {
            self.iters.saturating_mul(u64::from(self.num_qps))
        };
        if n == 0 {
            return bad("no iterations were measured");
        }
        if self.tposted.is_empty() || self.tcompleted.is_empty() {
            return bad("no timestamps were recorded");
        }
        let needed = if self.no_peak { 1 } else { n };
        if (self.tposted.len() as u64) < needed || (self.tcompleted.len() as u64) < needed {
            return bad(&format!(
                "{n} iterations need {needed} post and completion timestamps, got {} and {}",
                self.tposted.len(),
                self.tcompleted.len()
            ));
        }
        let posted = |i: u64| self.tposted[i as usize];
        let completed = |i: u64| self.tcompleted[i as usize];
        // Upstream seeds this with tcompleted[0] - tposted[0], which is unwritten (and
        // wraps to a huge value) when cq_mod > 1; the loop below always visits the i = 0
        // windows, so starting from the maximum gives the same answer without relying on
        // an unsignaled slot.
        let mut opt_delta = u64::MAX;
        if !self.no_peak {
            let cq_mod = u64::from(self.cq_mod.max(1));
            let step = u64::from(self.post_list.max(1));
            let mut i = 0;
            while i < n {
                // Signaled completions sit at the ends of cq_mod blocks.
                let mut j = (i + 1).div_ceil(cq_mod) * cq_mod - 1;
                while j < n {
                    let t = completed(j).saturating_sub(posted(i)) / (j - i + 1);
                    opt_delta = opt_delta.min(t);
                    j += cq_mod;
                }
                if n % cq_mod != 0 {
                    let j = n - 1;
                    let t = completed(j).saturating_sub(posted(i)) / (j - i + 1);
                    opt_delta = opt_delta.min(t);
                }
                i += step;
            }
        }
        let last = if self.no_peak { 0 } else { n - 1 };
        let total = completed(last).saturating_sub(posted(0));
        if total == 0 {
            return bad("the run took zero time; timestamps must be in nanoseconds");
        }
        let factor = unit.factor();
        let total = total as f64;
        let bw_avg = (self.bytes as f64 * n as f64 * TICKS as f64) / (total * factor as f64);
        let msg_rate = (n as f64 * TICKS as f64) / (total * 1_000_000.0);
        // Upstream does the peak in integer cycles_t; zero when peak is off.
        let peak_up = if self.no_peak {
            0
        } else {
            self.bytes.saturating_mul(TICKS)
        };
        // A window measured as 0 ns (two stamps in one clock tick) would print "inf"; one
        // tick is the finest the clock can tell.
        let peak_down = opt_delta.max(1).saturating_mul(factor);
        let bw_peak = if peak_up == 0 {
            0.0
        } else {
            peak_up as f64 / peak_down as f64
        };
        Ok(BwReport {
            size: self.bytes,
            iters: n,
            bw_peak,
            bw_avg,
            msg_rate,
        })
    }
}

/// One BW table row (`print_full_bw_report`). With `remote`, the peer's numbers are added
/// (bidirectional totals). Gb/s results below 0.1 print with 6 decimals like upstream.
pub fn bw_row(mine: &BwReport, remote: Option<&BwReport>, unit: BwUnit) -> String {
    let (mut peak, mut avg, mut rate) = (mine.bw_peak, mine.bw_avg, mine.msg_rate);
    // Upstream decides extended accuracy on the local average, before adding the remote.
    let extended = unit == BwUnit::Gbit && mine.bw_avg < 0.1;
    if let Some(r) = remote {
        peak += r.bw_peak;
        avg += r.bw_avg;
        rate += r.msg_rate;
    }
    if extended {
        format!(
            " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}\n",
            mine.size, mine.iters, peak, avg, rate
        )
    } else {
        format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}\n",
            mine.size, mine.iters, peak, avg, rate
        )
    }
}

/// The `results` object of a BW `--out_json` report.
pub fn bw_json(info: &BannerInfo, mine: &BwReport, remote: Option<&BwReport>) -> serde_json::Value {
    let (mut peak, mut avg, mut rate) = (mine.bw_peak, mine.bw_avg, mine.msg_rate);
    if let Some(r) = remote {
        peak += r.bw_peak;
        avg += r.bw_avg;
        rate += r.msg_rate;
    }
    let mut results = serde_json::Map::new();
    results.insert("MsgSize".into(), mine.size.into());
    results.insert("n_iterations".into(), mine.iters.into());
    results.insert("BW_peak".into(), peak.into());
    results.insert("BW_average".into(), avg.into());
    results.insert("MsgRate".into(), rate.into());
    let mut top = serde_json::Map::new();
    top.insert("test_info".into(), info.json_test_info());
    top.insert("results".into(), serde_json::Value::Object(results));
    serde_json::Value::Object(top)
}

/// The latency table header: result line, column titles (with upstream's trailing
/// space), newline.
pub fn lat_table_header() -> String {
    format!("{RESULT_LINE} #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n")
}

/// What a latency runner measured.
#[derive(Clone, Debug, PartialEq)]
pub struct LatResult {
    /// Message size.
    pub bytes: u64,
    /// Iterations as given with `-n` (printed in the table).
    pub iters: u64,
    /// One sample per iteration gap, in ns: upstream's `tposted[i+1] - tposted[i]`, one
    /// full ping-pong (send/write) or one read/atomic round trip.
    pub samples_ns: Vec<u64>,
    /// The verb, which decides whether the table shows RTT/2 (send, write) or the RTT.
    pub test: Test,
}

impl LatResult {
    /// Builds samples from per-iteration post timestamps (ns), as upstream does.
    pub fn from_post_times(test: Test, bytes: u64, tposted: &[u64]) -> Self {
        LatResult {
            bytes,
            iters: tposted.len() as u64,
            samples_ns: tposted
                .windows(2)
                .map(|w| w[1].saturating_sub(w[0]))
                .collect(),
            test,
        }
    }

    /// Upstream's `print_report_lat` statistics, in microseconds.
    pub fn compute(&self) -> Result<LatStats, ReportError> {
        if self.samples_ns.len() < 3 {
            return Err(ReportError::BadInput(format!(
                "latency needs at least 3 samples (4 iterations), got {}",
                self.samples_ns.len()
            )));
        }
        let rtt_factor = if self.test.is_read_like() { 1.0 } else { 2.0 };
        // ns -> usec, then one-way for ping-pong verbs.
        let q = 1000.0 * rtt_factor;
        let mut d = self.samples_ns.clone();
        d.sort_unstable();
        // Upstream drops the two largest samples (LAT_MEASURE_TAIL) from the statistics.
        let n = d.len() - 2;
        let median = if (n - 1) % 2 == 1 {
            (d[n / 2] + d[n / 2 - 1]) / 2
        } else {
            d[n / 2]
        };
        let avg = d[..n].iter().map(|v| *v as f64 / q).sum::<f64>() / n as f64;
        // Upstream truncates each deviation and its square to int; reproduced on purpose.
        let var_sum: f64 = d[..n]
            .iter()
            .map(|v| {
                let dev = (avg - *v as f64 / q) as i64;
                dev.saturating_mul(dev) as f64
            })
            .sum();
        let i99 = ((n as f64) * 0.99).ceil() as usize;
        let i999 = ((n as f64) * 0.999).ceil() as usize;
        Ok(LatStats {
            bytes: self.bytes,
            iters: self.iters,
            t_min: d[0] as f64 / q,
            t_max: d[n] as f64 / q,
            t_typical: median as f64 / q,
            t_avg: avg,
            t_stdev: (var_sum / n as f64).sqrt(),
            p99: d[i99.min(d.len() - 1)] as f64 / q,
            p99_9: d[i999.min(d.len() - 1)] as f64 / q,
        })
    }
}

/// The latency table's numbers (microseconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatStats {
    /// Message size.
    pub bytes: u64,
    /// Iterations.
    pub iters: u64,
    /// Smallest sample.
    pub t_min: f64,
    /// Upstream's "max": `sorted[n]` with n = samples - 2, i.e. the second-largest sample.
    pub t_max: f64,
    /// Median.
    pub t_typical: f64,
    /// Mean.
    pub t_avg: f64,
    /// Standard deviation (with upstream's integer truncation).
    pub t_stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p99_9: f64,
}

impl LatStats {
    /// The table row (`REPORT_FMT_LAT`).
    pub fn row(&self) -> String {
        format!(
            " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}\n",
            self.bytes, self.iters, self.t_min, self.t_max, self.t_typical, self.t_avg, self.t_stdev, self.p99, self.p99_9
        )
    }

    /// The `--out_json` document for a latency run.
    pub fn json(&self, info: &BannerInfo) -> serde_json::Value {
        let mut r = serde_json::Map::new();
        r.insert("MsgSize".into(), self.bytes.into());
        r.insert("n_iterations".into(), self.iters.into());
        r.insert("t_min".into(), self.t_min.into());
        r.insert("t_max".into(), self.t_max.into());
        r.insert("t_typical".into(), self.t_typical.into());
        r.insert("t_avg".into(), self.t_avg.into());
        r.insert("t_stdev".into(), self.t_stdev.into());
        r.insert("percentile_99".into(), self.p99.into());
        r.insert("percentile_99_9".into(), self.p99_9.into());
        let mut top = serde_json::Map::new();
        top.insert("test_info".into(), info.json_test_info());
        top.insert("results".into(), serde_json::Value::Object(r));
        serde_json::Value::Object(top)
    }
}

/// Upstream's `check_alive` message when a receiver saw no progress (UD/UC loss, dead
/// peer), printed to stdout before the receive loop gives up.
pub fn did_not_get_message(total_received: u64, total_required: u64) -> String {
    format!(
        " Did not get Message for 120 Seconds, exiting..\n Total Received={total_received}, Total Iters Required={total_required}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Parsed;

    fn args(test: Test, mode: Mode, a: &[&str]) -> PerftestArgs {
        let argv = std::iter::once("prog").chain(a.iter().copied());
        match PerftestArgs::parse_from(test, mode, argv).unwrap() {
            Parsed::Run(a) => *a,
            other => panic!("{other:?}"),
        }
    }

    const GID1: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 10, 77, 0, 1];
    const GID2: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 10, 77, 0, 2];

    /// The client half of /work/shared/golden/rxe/smoke_ib_send_bw.txt.
    const GOLDEN_CLIENT: &str =
        "---------------------------------------------------------------------------------------
                    Send BW Test
 Dual-port       : OFF\t\tDevice         : rxe0
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 PCIe relax order: ON
 ibv_wr* API     : OFF
 TX depth        : 100
 CQ Moderation   : 1
 Mtu             : 1024[B]
 Link type       : Ethernet
 GID index       : 1
 Max inline data : 0[B]
 rdma_cm QPs\t : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 local address: LID 0000 QPN 0x0011 PSN 0x539a19
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:01
 remote address: LID 0000 QPN 0x0011 PSN 0x52d4c
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      100              26.86              25.56  \t\t   0.000409
---------------------------------------------------------------------------------------
";

    #[test]
    fn golden_rxe_send_bw_client() {
        let a = args(
            Test::Send,
            Mode::Bw,
            &[
                "-d",
                "rxe0",
                "-x",
                "1",
                "-n",
                "100",
                "-F",
                "--use_old_post_send",
                "10.77.0.2",
            ],
        );
        let info = BannerInfo::new(
            BannerStyle::V4_5,
            &a,
            "rxe0",
            1024,
            LinkLayer::Ethernet,
            0,
            1,
        );
        let local = Dest {
            qpn: 0x11,
            psn: 0x539a19,
            gid: Some(GID1),
            ..Dest::default()
        };
        let remote = Dest {
            qpn: 0x11,
            psn: 0x52d4c,
            gid: Some(GID2),
            ..Dest::default()
        };
        let rep = BwReport {
            size: 65536,
            iters: 100,
            bw_peak: 26.86,
            bw_avg: 25.56,
            msg_rate: 0.000409,
        };
        let mut out = info.render();
        out.push_str(&address_lines(Side::Local, Test::Send, &local));
        out.push_str(&address_lines(Side::Remote, Test::Send, &remote));
        out.push_str(&bw_table_header(BannerStyle::V4_5, BwUnit::MiB));
        out.push_str(&bw_row(&rep, None, BwUnit::MiB));
        out.push_str(RESULT_LINE);
        assert_eq!(out, GOLDEN_CLIENT);
    }

    #[test]
    fn golden_rxe_send_bw_server_banner() {
        let a = args(
            Test::Send,
            Mode::Bw,
            &[
                "-d",
                "rxe1",
                "-x",
                "1",
                "-n",
                "100",
                "-F",
                "--use_old_post_send",
            ],
        );
        let info = BannerInfo::new(
            BannerStyle::V4_5,
            &a,
            "rxe1",
            1024,
            LinkLayer::Ethernet,
            0,
            1,
        );
        let banner = info.render();
        assert!(
            banner
                .contains(" ibv_wr* API     : OFF\n RX depth        : 100\n CQ Moderation   : 1\n"),
            "{banner}"
        );
        assert!(!banner.contains("TX depth"));
        let row = bw_row(
            &BwReport {
                size: 65536,
                iters: 100,
                bw_peak: 0.0,
                bw_avg: 26.55,
                msg_rate: 0.000425,
            },
            None,
            BwUnit::MiB,
        );
        assert_eq!(
            row,
            " 65536      100              0.00               26.55  \t\t   0.000425\n"
        );
        assert_eq!(
            WAITING_FOR_CLIENT,
            "\n************************************\n* Waiting for client to connect... *\n************************************\n"
        );
    }

    #[test]
    fn v6_banner_for_atomic_and_read() {
        let a = args(Test::Atomic, Mode::Bw, &["-A", "CMP_AND_SWAP", "-b", "h"]);
        let info = BannerInfo::new(BannerStyle::V6, &a, "sib0", 4096, LinkLayer::Ib, 0, 16);
        let expected = format!(
            "{RESULT_LINE}                    Atomic CMP_AND_SWAP Bidirectional BW Test
 Dual-port       : OFF\t\tDevice         : sib0
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 PCIe relax order: Unsupported\t\tLock-free\t: Unsupported
 ibv_wr* API     : ON\t\tUsing Enhanced Reorder      : OFF
 TX depth        : 128
 CQ Moderation   : 100
 Mtu             : 4096[B]
 Link type       : IB
 Outstand reads  : 16
 rdma_cm QPs\t : OFF
 Data ex. method : Ethernet
{RESULT_LINE}"
        );
        assert_eq!(info.render(), expected);
        let a = args(Test::Write, Mode::Lat, &[]);
        let t = BannerInfo::new(BannerStyle::V6, &a, "sib0", 1024, LinkLayer::Ib, 220, 1).render();
        assert!(t.contains("                    RDMA_Write Latency Test\n"));
        assert!(!t.contains("CQ Moderation") && !t.contains("TX depth") && !t.contains("RX depth"));
        assert!(t.contains(" Max inline data : 220[B]\n"));
    }

    /// `-R`: upstream's two lines, and on the server its "Waiting for client rdma_cm QP"
    /// note between result lines (printed, as upstream does, once the QPs are connected).
    #[test]
    fn rdma_cm_banner_lines() {
        let tail = |a: &PerftestArgs| {
            let b = BannerInfo::new(BannerStyle::V6, a, "rxe0", 1024, LinkLayer::Ethernet, 0, 1);
            let r = b.render();
            let from = r.find(" rdma_cm QPs").unwrap();
            (r[from..].to_string(), b.json_test_info())
        };
        let (client, json) = tail(&args(Test::Write, Mode::Bw, &["-R", "h"]));
        assert_eq!(
            client,
            format!(" rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n{RESULT_LINE}")
        );
        assert_eq!(json["Data_ex_method"], "rdma_cm");
        assert_eq!(json["rdma_cm_QPs"], "ON");
        let (server, _) = tail(&args(Test::Write, Mode::Bw, &["-R"]));
        assert_eq!(
            server,
            format!(
                " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n{RESULT_LINE} Waiting for client rdma_cm QP to connect\n Please run the same command with the IB/RoCE interface IP\n{RESULT_LINE}"
            )
        );
    }

    #[test]
    fn address_line_variants() {
        let d = Dest {
            lid: 1,
            out_reads: 16,
            qpn: 0x48,
            psn: 0x9f7e92,
            rkey: 0x1234,
            vaddr: 0x7f00_1000,
            srqn: 0,
            gid: None,
        };
        assert_eq!(
            address_lines(Side::Local, Test::Send, &d),
            " local address: LID 0x01 QPN 0x0048 PSN 0x9f7e92\n"
        );
        assert_eq!(
            address_lines(Side::Remote, Test::Read, &d),
            " remote address: LID 0x01 QPN 0x0048 PSN 0x9f7e92 OUT 0x10 RKey 0x001234 VAddr 0x0000007f001000\n"
        );
        assert_eq!(
            address_lines(Side::Local, Test::Write, &d),
            " local address: LID 0x01 QPN 0x0048 PSN 0x9f7e92 RKey 0x001234 VAddr 0x0000007f001000\n"
        );
        assert_eq!(c_alt_hex(0, 6), "000000");
        assert_eq!(c_alt_hex(0x12345678, 8), "0x12345678");
    }

    #[test]
    fn bw_math() {
        // 10 WQEs of 1 MiB, one every 1 ms, each completing 1 ms after its post.
        let tposted: Vec<u64> = (0..10).map(|i| i * 1_000_000).collect();
        let tcompleted: Vec<u64> = tposted.iter().map(|t| t + 1_000_000).collect();
        let r = BwResult {
            bytes: 1 << 20,
            iters: 10,
            num_qps: 1,
            tposted,
            tcompleted,
            cq_mod: 1,
            post_list: 1,
            no_peak: false,
            duration_mode: false,
        };
        let rep = r.compute(BwUnit::MiB).unwrap();
        // 10 MiB in 10 ms = 1000 MiB/s; fastest window: 10 WQEs in 10 ms -> 1 ms each.
        assert!((rep.bw_avg - 1000.0).abs() < 1e-9, "{rep:?}");
        assert!((rep.bw_peak - 1000.0).abs() < 1e-9, "{rep:?}");
        assert!((rep.msg_rate - 0.001).abs() < 1e-12);
        assert_eq!(rep.iters, 10);
        let g = r.compute(BwUnit::Gbit).unwrap();
        assert!((g.bw_avg - 8.388608).abs() < 1e-9);
        assert_eq!(
            bw_row(&g, None, BwUnit::Gbit),
            " 1048576    10               8.39               8.39   \t\t   0.001000\n"
        );
        let small = BwReport {
            size: 2,
            iters: 5,
            bw_peak: 0.01,
            bw_avg: 0.02,
            msg_rate: 0.5,
        };
        assert_eq!(
            bw_row(&small, None, BwUnit::Gbit),
            " 2          5           0.010000            0.020000            0.500000\n"
        );
        let sum = bw_row(&rep, Some(&rep), BwUnit::MiB);
        assert!(sum.contains("2000.00"), "{sum}");
        let np = BwResult {
            no_peak: true,
            tposted: vec![0],
            tcompleted: vec![10_000_000],
            ..r.clone()
        };
        assert_eq!(np.compute(BwUnit::MiB).unwrap().bw_peak, 0.0);
        let short = BwResult {
            tposted: vec![0; 3],
            ..r.clone()
        };
        assert!(short.compute(BwUnit::MiB).is_err());
        let zero = BwResult { iters: 0, ..r };
        assert!(zero.compute(BwUnit::MiB).is_err());
    }

    #[test]
    fn bw_peak_with_cq_moderation() {
        // cq_mod 4 over 8 WQEs: completions only at indices 3 and 7.
        let tposted: Vec<u64> = (0..8).map(|i| i * 100).collect();
        let mut tcompleted = vec![0u64; 8];
        tcompleted[3] = 1000;
        tcompleted[7] = 1200;
        let r = BwResult {
            bytes: 1000,
            iters: 8,
            num_qps: 1,
            tposted,
            tcompleted,
            cq_mod: 4,
            post_list: 1,
            no_peak: false,
            duration_mode: false,
        };
        let rep = r.compute(BwUnit::MiB).unwrap();
        // Windows end only at signaled slots 3 and 7; the best is post 0 .. completion 7:
        // 1200/8 = 150 ns per WQE (post 4 .. completion 7 gives 800/4 = 200).
        let expected_peak = (1000u64 * 1_000_000_000) as f64 / (150 * 0x10_0000) as f64;
        assert_eq!(rep.bw_peak, expected_peak);
    }

    #[test]
    fn lat_math_and_row() {
        // 10 iterations -> 9 RTT samples of 10..90 us (ns input).
        let samples: Vec<u64> = (1..=9).map(|i| i * 10_000).collect();
        let send = LatResult {
            bytes: 2,
            iters: 10,
            samples_ns: samples.clone(),
            test: Test::Send,
        };
        let s = send.compute().unwrap();
        // One-way = RTT/2; stats over the 7 smallest (10..70 us -> 5..35 us).
        assert_eq!(s.t_min, 5.0);
        assert_eq!(s.t_max, 40.0, "sorted[n] after dropping two");
        assert_eq!(s.t_typical, 20.0);
        assert_eq!(s.t_avg, 20.0);
        assert_eq!(s.p99, 40.0);
        // Deviations 15,10,5,0,5,10,15 -> squares sum 700 / 7 = 100 -> 10.
        assert_eq!(s.t_stdev, 10.0);
        assert_eq!(
            s.row(),
            " 2       10          5.00           40.00        20.00    \t       20.00       \t10.00  \t\t40.00   \t\t40.00  \n"
        );
        let read = LatResult {
            test: Test::Read,
            ..send.clone()
        };
        assert_eq!(
            read.compute().unwrap().t_min,
            10.0,
            "read reports the full RTT"
        );
        let even: Vec<u64> = (1..=8).map(|i| i * 1000).collect();
        let e = LatResult {
            bytes: 2,
            iters: 9,
            samples_ns: even,
            test: Test::Atomic,
        }
        .compute()
        .unwrap();
        assert_eq!(
            e.t_typical, 3.5,
            "median of 6 is the mean of the middle two"
        );
        assert!(LatResult {
            samples_ns: vec![1, 2],
            ..send
        }
        .compute()
        .is_err());
        let from = LatResult::from_post_times(Test::Send, 2, &[0, 10, 30, 60]);
        assert_eq!((from.iters, from.samples_ns.clone()), (4, vec![10, 20, 30]));
        assert!(lat_table_header().ends_with("99.9% percentile[usec] \n"));
    }

    #[test]
    fn json_reports() {
        let a = args(Test::Write, Mode::Bw, &["h"]);
        let info = BannerInfo::new(BannerStyle::V6, &a, "sib0", 4096, LinkLayer::Ib, 0, 1);
        let rep = BwReport {
            size: 65536,
            iters: 5000,
            bw_peak: 1.0,
            bw_avg: 2.0,
            msg_rate: 3.0,
        };
        let j = bw_json(&info, &rep, None);
        assert_eq!(j["test_info"]["test"], "RDMA_Write_BW_Test");
        assert_eq!(j["test_info"]["TX_depth"], 128);
        assert_eq!(j["results"]["BW_average"], 2.0);
        assert_eq!(j["results"]["MsgSize"], 65536);
        let keys: Vec<&String> = j["test_info"].as_object().unwrap().keys().collect();
        assert_eq!(keys.first().map(|k| k.as_str()), Some("test"));
        assert!(
            did_not_get_message(3, 1000).contains("Total Received=3, Total Iters Required=1000")
        );
    }
}
