//! The perftest command line: upstream's flags, defaults and validation, per test.
//!
//! Facts come from `src/perftest_parameters.c` (`usage`, `init_perftest_params`, `parser`,
//! `force_dependecies`) and `perftest_parameters.h` (the `DEF_*`/`MIN_*`/`MAX_*` values).
//! The parser is getopt_long-like on purpose: upstream accepts `-n100`, `-n 100`,
//! `--iters=100`, `--iters 100` and bundled short flags (`-aF`), and numbers in C's
//! `strtol(..., 0)` syntax (`0x10`, `010`), so scripts written for it keep working.
//!
//! Every upstream flag softib does not implement is refused by name
//! ([`ArgsError::Unsupported`]) instead of being silently ignored.
//!
//! One file on purpose (about 1,200 lines): perftest's whole option table with each tool's
//! checks, in upstream's order, so that the two can be compared flag by flag.

use std::fmt;
use std::time::Duration;

/// Which verb the benchmark exercises (the binary's first word).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// `ib_send_*`: SEND / RECV.
    Send,
    /// `ib_write_*`: RDMA WRITE.
    Write,
    /// `ib_read_*`: RDMA READ.
    Read,
    /// `ib_atomic_*`: fetch-and-add or compare-and-swap.
    Atomic,
}

impl Test {
    /// The name upstream prints in the banner (`testsStr[]`).
    pub fn banner_name(self) -> &'static str {
        match self {
            Test::Send => "Send",
            Test::Write => "RDMA_Write",
            Test::Read => "RDMA_Read",
            Test::Atomic => "Atomic",
        }
    }

    /// True for the verbs whose latency is a full round trip (upstream `rtt_factor` 1).
    pub fn is_read_like(self) -> bool {
        matches!(self, Test::Read | Test::Atomic)
    }
}

/// Bandwidth or latency flavour (the binary's last word).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `*_bw`.
    Bw,
    /// `*_lat`.
    Lat,
}

/// QP transport (`-c`). softib implements RC, UC and UD; XRC, DC, SRD are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connection {
    /// Reliable connection (default).
    Rc,
    /// Unreliable connection.
    Uc,
    /// Unreliable datagram (send tests only).
    Ud,
}

impl Connection {
    /// Upstream's name (`connStr[]`).
    pub fn name(self) -> &'static str {
        match self {
            Connection::Rc => "RC",
            Connection::Uc => "UC",
            Connection::Ud => "UD",
        }
    }

    /// Upstream's numeric code (`#define RC 0`, `UC 1`, `UD 2`), used on the wire.
    pub fn code(self) -> i32 {
        match self {
            Connection::Rc => 0,
            Connection::Uc => 1,
            Connection::Ud => 2,
        }
    }
}

/// Atomic operation (`-A`), atomic tests only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicType {
    /// `CMP_AND_SWAP` (upstream enum value 0).
    CmpAndSwap,
    /// `FETCH_AND_ADD` (upstream enum value 1, the default).
    FetchAndAdd,
}

impl AtomicType {
    /// Upstream's name (`atomicTypesStr[]`).
    pub fn name(self) -> &'static str {
        match self {
            AtomicType::CmpAndSwap => "CMP_AND_SWAP",
            AtomicType::FetchAndAdd => "FETCH_AND_ADD",
        }
    }
}

/// How the test iterates (`enum ctx_test_method`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestMethod {
    /// One size, `-n` iterations or `-D` seconds.
    Regular,
    /// `-a`: sweep sizes 2..2^23.
    All,
    /// `--run_infinitely`: report every `-D` seconds, forever.
    Infinitely,
}

/// Whether the run is bounded by iterations or by time (`TestMethod` upstream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestType {
    /// `-n` iterations.
    Iterations,
    /// `-D` seconds.
    Duration,
}

/// Upstream `DEF_PORT`.
pub const DEFAULT_TCP_PORT: u16 = 18515;
/// Upstream `MAX_SIZE`: the largest size `-a` reaches (2^23).
pub const MAX_SIZE: u64 = 8_388_608;
/// Upstream `DEF_SIZE_ATOMIC`: atomics always move 8 bytes.
pub const ATOMIC_SIZE: u64 = 8;
/// Upstream `DEFAULT_JSON_FILE_NAME`.
pub const DEFAULT_JSON_FILE: &str = "perftest_out.json";
/// Upstream `MSG_SIZE_CQ_MOD_LIMIT`: above this size CQ moderation is switched off.
const MSG_SIZE_CQ_MOD_LIMIT: u64 = 8192;
/// Upstream `DEF_RX_SEND`.
const DEF_RX_SEND: u32 = 512;
/// Upstream `UC_MAX_RX`.
const UC_MAX_RX: u64 = 16000;
/// Upstream `MAX_INLINE_UD`.
const MAX_INLINE_UD: u32 = 884;
/// Upstream `RESULT_LINE`, printed before most of its warnings.
const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// What the command line asked for.
#[derive(Clone, Debug, PartialEq)]
pub enum Parsed {
    /// Run the benchmark with these arguments.
    Run(Box<PerftestArgs>),
    /// `-h`: print this usage text and exit successfully.
    Help(String),
    /// `-V`: print this version line and exit successfully.
    Version(String),
}

/// A refused command line. Each message names the flag and what to do instead.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArgsError {
    /// An upstream perftest flag that softib does not implement.
    #[error("{flag} is an upstream perftest option that softib does not implement yet; remove it from the command line")]
    Unsupported {
        /// The flag as upstream spells it, e.g. `-R/--rdma_cm`.
        flag: String,
    },
    /// A flag neither upstream nor softib knows.
    #[error("unknown option {0}; run with -h to list the options")]
    Unknown(String),
    /// A flag that needs a value was last on the line.
    #[error("option {0} needs a value, e.g. {0} 100")]
    MissingValue(String),
    /// A flag that takes no value was given one (`--all=3`).
    #[error("option {0} takes no value")]
    UnexpectedValue(String),
    /// A value that does not parse or is out of range.
    #[error("{flag}: {reason}")]
    BadValue {
        /// The flag.
        flag: String,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// The same flag twice (upstream: " Duplicated argument").
    #[error("duplicated argument {0}; give each option once")]
    Duplicate(String),
    /// More than one positional argument.
    #[error("unexpected argument {0:?}: only one server address may be given")]
    ExtraPositional(String),
    /// A combination upstream refuses; the text is upstream's reason.
    #[error("{0}")]
    Invalid(String),
}

/// The parsed and validated arguments of one perftest binary.
///
/// Values are final after [`PerftestArgs::parse_from`]: defaults are filled and upstream's
/// `force_dependecies` adjustments are applied. Two adjustments need the device:
/// [`PerftestArgs::apply_mtu`] (UD size vs MTU) and the inline/outstanding-read defaults
/// (`inline_size`/`out_reads` are `None` when the device decides).
#[derive(Clone, Debug, PartialEq)]
pub struct PerftestArgs {
    /// The verb.
    pub test: Test,
    /// BW or latency.
    pub mode: Mode,
    /// Server address; `None` means this side is the server.
    pub server: Option<String>,
    /// `-p`: TCP port of the out-of-band exchange (18515).
    pub port: u16,
    /// `-d`: device name (`None`: the first device).
    pub ib_dev: Option<String>,
    /// `-i`: HCA port (1).
    pub ib_port: u8,
    /// `-m`: requested MTU in bytes (`None`: the port's active MTU).
    pub mtu: Option<u32>,
    /// `-s`: message size in bytes (65536 BW, 2 lat, 8 atomic; 2^23 with `-a`).
    pub size: u64,
    /// True when `-s` was given (decides between clamping and refusing UD sizes > MTU).
    pub size_requested: bool,
    /// `-n`: iterations (5000 write BW, 1000 otherwise; 0 in duration mode).
    pub iters: u64,
    /// `-t`: send queue depth (128 BW, 1 lat; clipped to iterations).
    pub tx_depth: u32,
    /// `-r`: receive queue depth (512 send/write, 1 read/atomic; see `force_dependecies`).
    pub rx_depth: u32,
    /// `-u`: local ACK timeout exponent (14).
    pub qp_timeout: u8,
    /// `-S`: service level (0).
    pub sl: u8,
    /// `-x`: GID index (`None` = upstream's -1, no GRH on IB).
    pub gid_index: Option<u8>,
    /// `-a`, `--run_infinitely` or neither.
    pub test_method: TestMethod,
    /// `-D` turns this into [`TestType::Duration`].
    pub test_type: TestType,
    /// `-D`: seconds (5 when not given).
    pub duration: u32,
    /// `-f`: margin in seconds (duration/4 in duration mode, -1 otherwise as upstream).
    pub margin: i32,
    /// `-F`: do not warn about the CPU frequency governor.
    pub cpu_freq_f: bool,
    /// `-c`: transport (RC).
    pub connection: Connection,
    /// `-q`: number of QPs (1).
    pub num_qps: u32,
    /// `-e`: sleep on CQ events instead of polling.
    pub use_event: bool,
    /// `-I`: max inline size (`None`: the device decides; 0 for read/atomic).
    pub inline_size: Option<u32>,
    /// `-o`: outstanding reads/atomics (`None`: the device maximum).
    pub out_reads: Option<u32>,
    /// `-b`: bidirectional.
    pub duplex: bool,
    /// `-Q`: CQ moderation (100; 1 for messages > 8192 B unless requested).
    pub cq_mod: u32,
    /// True when `-Q` was given.
    pub cq_mod_requested: bool,
    /// `-N` (or forced): no peak bandwidth, the peak column prints 0.00.
    pub no_peak: bool,
    /// `-A`: atomic operation (FETCH_AND_ADD).
    pub atomic_type: AtomicType,
    /// `-l`: send WQEs per post (1).
    pub post_list: u32,
    /// `--report_gbits`: Gb/s instead of MiB/s.
    pub report_gbits: bool,
    /// `--report-both`: with `-b`, print local and remote results separately.
    pub report_both: bool,
    /// `--out_json`: also write the JSON report.
    pub out_json: bool,
    /// `--out_json_file`: where (`perftest_out.json`).
    pub out_json_file: String,
    /// `--use_old_post_send`: classic `ibv_post_send` instead of `ibv_wr_*`.
    pub use_old_post_send: bool,
    /// `-R/--rdma_cm`: the QPs are connected with the InfiniBand CM as rdma_cm does (REQ,
    /// REP, RTU on QP1, to rdma_cm's service ID of `-p`), and the exchange runs over a QP of
    /// its own connected the same way ("Data ex. method : rdma_cm").
    pub rdma_cm: bool,
    /// softib's `--timeout SEC` (15): how long any out-of-band step may wait.
    pub timeout: Duration,
    /// Notices upstream prints to stdout while parsing (e.g. "WARNING: BW peak won't be
    /// measured in this run."), in order, without trailing newline; the runner prints them.
    pub notices: Vec<String>,
}

impl PerftestArgs {
    /// True on the server side (no address given).
    pub fn is_server(&self) -> bool {
        self.server.is_none()
    }

    /// Parses `argv` (program name first, as in `std::env::args()`) for one binary.
    pub fn parse_from<I, S>(test: Test, mode: Mode, argv: I) -> Result<Parsed, ArgsError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let argv: Vec<String> = argv.into_iter().map(Into::into).collect();
        let prog = argv
            .first()
            .cloned()
            .unwrap_or_else(|| binary_name(test, mode));
        let mut a = Self::defaults(test, mode);
        let mut st = ParseState::default();
        let mut positionals = Vec::new();
        let mut i = 1;
        while i < argv.len() {
            let arg = &argv[i];
            i += 1;
            if arg == "--" {
                positionals.extend(argv[i..].iter().cloned());
                break;
            }
            if let Some(body) = arg.strip_prefix("--") {
                let (name, inline) = match body.split_once('=') {
                    Some((n, v)) => (n, Some(v.to_string())),
                    None => (body, None),
                };
                let spec = lookup_long(name).ok_or_else(|| classify_unknown_long(name))?;
                let value = if spec.takes_arg {
                    match inline {
                        Some(v) => Some(v),
                        None => {
                            let v = argv
                                .get(i)
                                .cloned()
                                .ok_or_else(|| ArgsError::MissingValue(format!("--{name}")))?;
                            i += 1;
                            Some(v)
                        }
                    }
                } else if inline.is_some() {
                    return Err(ArgsError::UnexpectedValue(format!("--{name}")));
                } else {
                    None
                };
                if let Some(done) = a.apply(spec, value, &mut st, &prog)? {
                    return Ok(done);
                }
            } else if arg.len() > 1 && arg.starts_with('-') {
                // A bundle of short flags; the first one that takes a value eats the rest
                // of the word or the next word, as getopt does.
                let chars: Vec<char> = arg[1..].chars().collect();
                let mut k = 0;
                while k < chars.len() {
                    let c = chars[k];
                    k += 1;
                    let spec = lookup_short(c).ok_or_else(|| classify_unknown_short(c))?;
                    let value = if spec.takes_arg {
                        if k < chars.len() {
                            let v: String = chars[k..].iter().collect();
                            k = chars.len();
                            Some(v)
                        } else {
                            let v = argv
                                .get(i)
                                .cloned()
                                .ok_or_else(|| ArgsError::MissingValue(format!("-{c}")))?;
                            i += 1;
                            Some(v)
                        }
                    } else {
                        None
                    };
                    if let Some(done) = a.apply(spec, value, &mut st, &prog)? {
                        return Ok(done);
                    }
                }
            } else {
                positionals.push(arg.clone());
            }
        }
        match positionals.len() {
            0 => {}
            1 => a.server = positionals.pop(),
            _ => return Err(ArgsError::ExtraPositional(positionals[1].clone())),
        }
        a.force_dependencies()?;
        Ok(Parsed::Run(Box::new(a)))
    }

    /// The defaults of `init_perftest_params` for this binary.
    fn defaults(test: Test, mode: Mode) -> Self {
        let bw = mode == Mode::Bw;
        PerftestArgs {
            test,
            mode,
            server: None,
            port: DEFAULT_TCP_PORT,
            ib_dev: None,
            ib_port: 1,
            mtu: None,
            size: match (test, bw) {
                (Test::Atomic, _) => ATOMIC_SIZE,
                (_, true) => 65536,
                (_, false) => 2,
            },
            size_requested: false,
            iters: if bw && test == Test::Write {
                5000
            } else {
                1000
            },
            tx_depth: if bw { 128 } else { 1 },
            rx_depth: if matches!(test, Test::Send | Test::Write) {
                DEF_RX_SEND
            } else {
                1
            },
            qp_timeout: 14,
            sl: 0,
            gid_index: None,
            test_method: TestMethod::Regular,
            test_type: TestType::Iterations,
            duration: 5,
            margin: -1,
            cpu_freq_f: false,
            connection: Connection::Rc,
            num_qps: 1,
            use_event: false,
            inline_size: None,
            out_reads: None,
            duplex: false,
            cq_mod: 100,
            cq_mod_requested: false,
            no_peak: false,
            atomic_type: AtomicType::FetchAndAdd,
            post_list: 1,
            report_gbits: false,
            report_both: false,
            out_json: false,
            out_json_file: DEFAULT_JSON_FILE.to_string(),
            use_old_post_send: false,
            rdma_cm: false,
            timeout: Duration::from_secs(15),
            notices: Vec::new(),
        }
    }

    /// Applies one option. Returns `Some` for `-h`/`-V`, which end parsing.
    fn apply(
        &mut self,
        spec: &OptSpec,
        value: Option<String>,
        st: &mut ParseState,
        prog: &str,
    ) -> Result<Option<Parsed>, ArgsError> {
        let flag = spec.display();
        if st.seen.contains(&spec.opt) {
            return Err(ArgsError::Duplicate(flag));
        }
        st.seen.push(spec.opt);
        let v = value.unwrap_or_default();
        let bad = |reason: String| ArgsError::BadValue {
            flag: spec.display(),
            reason,
        };
        let bw = self.mode == Mode::Bw;
        match spec.opt {
            Opt::Port => {
                self.port = int_in_range(&v, 1, 65535).map_err(bad)? as u16;
            }
            Opt::IbDev => self.ib_dev = Some(v),
            Opt::IbPort => {
                self.ib_port = int_in_range(&v, 1, 255)
                    .map_err(|r| bad(format!("{r}; IB ports are numbered from 1")))?
                    as u8;
            }
            Opt::Mtu => {
                let m = int_in_range(&v, 0, i64::from(i32::MAX)).map_err(bad)?;
                if ![256, 512, 1024, 2048, 4096].contains(&m) {
                    return Err(bad(format!(
                        "invalid MTU {m}; choose from {{256,512,1024,2048,4096}}"
                    )));
                }
                self.mtu = Some(m as u32);
            }
            Opt::Size => {
                let (digits, factor) = if let Some(d) = v.strip_suffix('K') {
                    (d, 1024)
                } else if let Some(d) = v.strip_suffix('M') {
                    (d, 1024 * 1024)
                } else {
                    (v.as_str(), 1)
                };
                let max = i64::from(u32::MAX / 2);
                let n = parse_c_int(digits).map_err(bad)?;
                let size = n.checked_mul(factor).filter(|s| (1..=max).contains(s));
                self.size = size.ok_or_else(|| {
                    bad(format!(
                        "Message Size should be between 1 and {max} (suffixes K and M allowed)"
                    ))
                })? as u64;
                self.size_requested = true;
            }
            Opt::Iters => self.iters = int_in_range(&v, 5, 100_000_000).map_err(bad)? as u64,
            Opt::TxDepth => self.tx_depth = int_in_range(&v, 1, 15000).map_err(bad)? as u32,
            Opt::QpTimeout => {
                self.qp_timeout = int_in_range(&v, 0, 31)
                    .map_err(|r| bad(format!("{r}; the ACK timeout is a 5-bit exponent")))?
                    as u8;
            }
            Opt::Sl => self.sl = int_in_range(&v, 0, 15).map_err(bad)? as u8,
            Opt::GidIndex => self.gid_index = Some(int_in_range(&v, 0, 64).map_err(bad)? as u8),
            Opt::All => self.test_method = TestMethod::All,
            Opt::CpuFreq => self.cpu_freq_f = true,
            Opt::Connection => {
                self.connection = match v.as_str() {
                    "RC" => Connection::Rc,
                    "UC" => {
                        if self.test.is_read_like() {
                            return Err(ArgsError::Invalid(
                                "UC connection not possible in READ/ATOMIC verbs".into(),
                            ));
                        }
                        Connection::Uc
                    }
                    "UD" => {
                        if self.test != Test::Send {
                            return Err(ArgsError::Invalid(
                                "UD connection only possible in SEND verb".into(),
                            ));
                        }
                        Connection::Ud
                    }
                    "XRC" | "DC" | "SRD" | "RawEth" => {
                        return Err(ArgsError::Unsupported {
                            flag: format!("-c {v}"),
                        })
                    }
                    _ => {
                        return Err(bad(format!(
                            "invalid connection type {v:?}; choose from {{RC,UC,UD}}"
                        )))
                    }
                };
            }
            Opt::Qp => {
                if !bw {
                    return Err(ArgsError::Invalid(
                        "Multiple QPs only available on bw tests".into(),
                    ));
                }
                self.num_qps = int_in_range(&v, 1, 16384).map_err(bad)? as u32;
            }
            Opt::Events => {
                if self.test == Test::Write {
                    return Err(ArgsError::Invalid(
                        "Events feature not available on WRITE verb".into(),
                    ));
                }
                self.use_event = true;
            }
            Opt::InlineSize => {
                let n = int_in_range(&v, 0, 912).map_err(bad)? as u32;
                if self.test.is_read_like() {
                    return Err(ArgsError::Invalid(
                        "Inline feature not available on READ/Atomic verbs".into(),
                    ));
                }
                self.inline_size = Some(n);
            }
            Opt::Outs => {
                let n = int_in_range(&v, 1, i64::from(i32::MAX)).map_err(bad)? as u32;
                if !self.test.is_read_like() {
                    return Err(ArgsError::Invalid(
                        "Setting Outstanding reads only available on READ verb".into(),
                    ));
                }
                self.out_reads = Some(n);
            }
            Opt::RxDepth => {
                let n = int_in_range(&v, 1, 16384).map_err(bad)? as u32;
                if self.test.is_read_like() && n > 1 {
                    return Err(ArgsError::Invalid(
                        "On RDMA verbs rx depth can be only 1".into(),
                    ));
                }
                self.rx_depth = n;
            }
            Opt::Bidirectional => {
                if !bw {
                    return Err(ArgsError::Invalid(
                        "Bidirectional is only available in BW test".into(),
                    ));
                }
                self.duplex = true;
            }
            Opt::CqMod => {
                self.cq_mod = int_in_range(&v, 1, 1024).map_err(bad)? as u32;
                self.cq_mod_requested = true;
            }
            Opt::NoPeak => {
                if !bw {
                    return Err(ArgsError::Invalid("NoPeak only valid for BW tests".into()));
                }
                self.no_peak = true;
            }
            Opt::Version => {
                return Ok(Some(Parsed::Version(format!(
                    "Version: {}",
                    crate::exchange::SOFTIB_PERFTEST_VERSION
                ))))
            }
            Opt::Help => return Ok(Some(Parsed::Help(usage(prog, self.test, self.mode)))),
            Opt::AtomicType => {
                if self.test != Test::Atomic {
                    return Err(ArgsError::Invalid(
                        "You are not running the atomic_lat/bw test! To change the atomic action type, you must run one of the atomic tests".into(),
                    ));
                }
                self.atomic_type = match v.as_str() {
                    "CMP_AND_SWAP" => AtomicType::CmpAndSwap,
                    "FETCH_AND_ADD" => AtomicType::FetchAndAdd,
                    _ => {
                        return Err(bad(format!(
                            "invalid atomic type {v:?}; choose from {{CMP_AND_SWAP,FETCH_AND_ADD}}"
                        )))
                    }
                };
            }
            Opt::PostList => {
                self.post_list = int_in_range(&v, 1, i64::from(i32::MAX)).map_err(bad)? as u32
            }
            Opt::Duration => {
                self.duration = int_in_range(&v, 1, i64::from(i32::MAX)).map_err(bad)? as u32;
                self.test_type = TestType::Duration;
            }
            Opt::Margin => {
                self.margin = int_in_range(&v, 0, i64::from(i32::MAX)).map_err(bad)? as i32
            }
            Opt::ReportGbits => self.report_gbits = true,
            Opt::ReportBoth => self.report_both = true,
            Opt::OutJson => self.out_json = true,
            Opt::OutJsonFile => {
                if v.is_empty() {
                    return Err(bad("needs a file name".into()));
                }
                self.out_json_file = v;
            }
            Opt::UseOldPostSend => self.use_old_post_send = true,
            Opt::RdmaCm => self.rdma_cm = true,
            Opt::RunInfinitely => st.run_infinitely = true,
            Opt::Timeout => {
                let secs = int_in_range(&v, 1, 86_400)
                    .map_err(|r| bad(format!("{r} (seconds to wait for the peer)")))?;
                self.timeout = Duration::from_secs(secs as u64);
            }
        }
        if st.run_infinitely {
            self.test_method = TestMethod::Infinitely;
        }
        Ok(None)
    }

    /// Upstream's `force_dependecies`, restricted to the options softib implements.
    fn force_dependencies(&mut self) -> Result<(), ArgsError> {
        let bw = self.mode == Mode::Bw;
        if self.rdma_cm {
            self.check_rdma_cm()?;
        }
        if self.test == Test::Write {
            self.rx_depth = 1;
        }
        if self.test_method != TestMethod::Infinitely && self.test_type == TestType::Iterations {
            self.tx_depth = self.tx_depth.min(clamp_u32(self.iters));
            if self.test == Test::Send {
                self.rx_depth = self.rx_depth.min(clamp_u32(self.iters));
            }
            if matches!(self.connection, Connection::Ud | Connection::Uc)
                && self.rx_depth == DEF_RX_SEND
            {
                self.rx_depth = clamp_u32(self.iters.min(UC_MAX_RX));
            }
        }
        // Upstream turns CQ moderation off for big messages because one completion per
        // 100 large WQEs makes the peak calculation meaningless.
        if self.size > MSG_SIZE_CQ_MOD_LIMIT
            && self.connection != Connection::Ud
            && self.test_method != TestMethod::All
            && !self.use_event
        {
            if !self.cq_mod_requested {
                self.cq_mod = 1;
            } else if self.cq_mod > 1 {
                self.notices.push(RESULT_LINE.into());
                self.notices
                    .push("Warning: Large message requested and CQ moderation enabled".into());
                self.notices
                    .push("Warning: It can lead to inaccurate results".into());
            }
        }
        if self.cq_mod > self.tx_depth {
            self.cq_mod = self.tx_depth;
        }
        if self.test.is_read_like() {
            self.inline_size = Some(0);
        }
        if self.test_method == TestMethod::All {
            self.size = MAX_SIZE;
        }
        if self.test == Test::Atomic && self.size != ATOMIC_SIZE {
            return Err(ArgsError::Invalid(
                "Message size cannot be changed for Atomic tests (they always move 8 bytes; drop -s/-a)".into(),
            ));
        }
        if self.post_list > 1 {
            if !bw {
                return Err(ArgsError::Invalid(
                    "Post list is supported in BW tests only".into(),
                ));
            }
            if self.test_type == TestType::Iterations && self.iters % u64::from(self.post_list) != 0
            {
                return Err(ArgsError::Invalid(
                    "Number of iterations must be a multiple of post list size".into(),
                ));
            }
            if !self.cq_mod_requested {
                self.cq_mod = self.post_list;
                self.notices.push(RESULT_LINE.into());
                self.notices.push(
                    "Post List requested - CQ moderation will be the size of the post list".into(),
                );
            } else if self.post_list % self.cq_mod != 0 {
                return Err(ArgsError::Invalid(
                    "Post list size must be a multiple of CQ moderation".into(),
                ));
            }
        }
        if self.test_type == TestType::Duration {
            // Upstream counts iterations in a global counter in duration mode.
            self.iters = 0;
            if !self.no_peak && bw {
                self.notices
                    .push(" WARNING: BW peak won't be measured in this run.".into());
            }
            self.no_peak = true;
            if self.use_event {
                return Err(ArgsError::Invalid(
                    "Duration mode doesn't work with events.".into(),
                ));
            }
            if self.test_method == TestMethod::All {
                return Err(ArgsError::Invalid(
                    "Duration mode currently doesn't support running on all sizes.".into(),
                ));
            }
        }
        // A unidirectional send server only counts receives: there is no post time.
        if self.test == Test::Send && bw && self.is_server() && !self.duplex {
            if !self.no_peak {
                self.notices
                    .push(" WARNING: BW peak won't be measured in this run.".into());
            }
            self.no_peak = true;
        }
        if self.test_method == TestMethod::Infinitely {
            if !self.no_peak && bw {
                self.notices
                    .push(" WARNING: BW peak won't be measured in this run.".into());
            }
            self.no_peak = true;
            self.test_type = TestType::Duration;
            if self.use_event {
                return Err(ArgsError::Invalid(
                    "run_infinitely does not support events feature yet.".into(),
                ));
            }
            if !bw {
                return Err(ArgsError::Invalid(
                    "run_infinitely exists only in BW tests for now.".into(),
                ));
            }
            if self.duplex && self.test == Test::Send {
                return Err(ArgsError::Invalid(
                    "run_infinitely mode is not supported in SEND or WRITE_IMM Bidirectional BW test"
                        .into(),
                ));
            }
        }
        if self.test_type == TestType::Duration && self.margin == -1 {
            self.margin = (self.duration / 4) as i32;
        }
        if self.connection == Connection::Ud && self.inline_size.is_some_and(|n| n > MAX_INLINE_UD)
        {
            self.notices.push(RESULT_LINE.into());
            self.notices.push(format!(
                "Setting inline size to {MAX_INLINE_UD} (Max inline size in UD)"
            ));
            self.inline_size = Some(MAX_INLINE_UD);
        }
        // Upstream works around a bug with odd receive depths in SEND.
        if self.test == Test::Send
            && self.rx_depth % 2 == 1
            && self.test_method == TestMethod::Regular
        {
            self.rx_depth += 1;
        }
        if self.test_type == TestType::Iterations && self.iters > 20000 && !self.no_peak && bw {
            self.notices
                .push(" WARNING: BW peak won't be measured in this run.".into());
            self.no_peak = true;
        }
        if i64::from(self.duration) <= 2 * i64::from(self.margin) {
            return Err(ArgsError::Invalid(
                "please check that DURATION > 2*MARGIN (-D must be more than twice -f)".into(),
            ));
        }
        if self.report_both && !self.duplex {
            // Upstream accepts it and ignores it; softib says so instead of ignoring it.
            self.notices.push(
                " Note: --report-both only changes the output of bidirectional (-b) tests.".into(),
            );
        }
        Ok(())
    }

    /// What `-R` cannot be combined with: upstream's refusals in its words, then softib's
    /// own (what softib's CM path does not have yet).
    fn check_rdma_cm(&self) -> Result<(), ArgsError> {
        match self.connection {
            Connection::Uc => {
                return Err(ArgsError::Invalid(format!(
                    "{RESULT_LINE}\n UC is not supported in librdmacm"
                )))
            }
            Connection::Rc | Connection::Ud => {}
        }
        if self.test_method == TestMethod::Infinitely {
            return Err(ArgsError::Invalid(
                "--run_infinitely with -R is not implemented in softib's own perftest yet; \
                 run with -D <seconds>, or without -R"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Applies the negotiated MTU (bytes) to the message size, as upstream's `check_mtu`:
    /// a UD message larger than the MTU is clamped (with `-a` or without `-s`, returning
    /// upstream's two stderr lines) or refused.
    pub fn apply_mtu(&mut self, mtu_bytes: u64) -> Result<Vec<String>, ArgsError> {
        if self.connection != Connection::Ud || self.size <= mtu_bytes {
            return Ok(Vec::new());
        }
        if self.test_method == TestMethod::All || !self.size_requested {
            self.size = mtu_bytes;
            Ok(vec![
                format!(" Max msg size in UD is MTU {mtu_bytes}"),
                " Changing to this MTU".to_string(),
            ])
        } else {
            Err(ArgsError::Invalid(format!(
                " Max message size in UD cannot be greater than MTU ({mtu_bytes}); use -s {mtu_bytes} or less"
            )))
        }
    }

    /// The message sizes to run: `[size]`, or for `-a` 2^1..2^23 (UD: up to the MTU).
    pub fn sizes(&self, mtu_bytes: u64) -> Vec<u64> {
        if self.test_method != TestMethod::All {
            return vec![self.size];
        }
        let max_pow = if self.connection == Connection::Ud {
            // log2(MTU) + 1, so the sweep ends at the MTU itself.
            u64::BITS - mtu_bytes.max(1).leading_zeros()
        } else {
            24
        };
        (1..max_pow).map(|p| 1u64 << p).collect()
    }
}

fn clamp_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn binary_name(test: Test, mode: Mode) -> String {
    let t = match test {
        Test::Send => "send",
        Test::Write => "write",
        Test::Read => "read",
        Test::Atomic => "atomic",
    };
    let m = match mode {
        Mode::Bw => "bw",
        Mode::Lat => "lat",
    };
    format!("ib_{t}_{m}")
}

#[derive(Default)]
struct ParseState {
    seen: Vec<Opt>,
    run_infinitely: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Opt {
    Port,
    IbDev,
    IbPort,
    Mtu,
    Size,
    Iters,
    TxDepth,
    QpTimeout,
    Sl,
    GidIndex,
    All,
    CpuFreq,
    Connection,
    Qp,
    Events,
    InlineSize,
    Outs,
    RxDepth,
    Bidirectional,
    CqMod,
    NoPeak,
    Version,
    Help,
    AtomicType,
    PostList,
    Duration,
    Margin,
    ReportGbits,
    ReportBoth,
    OutJson,
    OutJsonFile,
    UseOldPostSend,
    RdmaCm,
    RunInfinitely,
    Timeout,
}

struct OptSpec {
    short: Option<char>,
    long: &'static str,
    takes_arg: bool,
    opt: Opt,
}

impl OptSpec {
    fn display(&self) -> String {
        match self.short {
            Some(c) => format!("-{c}/--{}", self.long),
            None => format!("--{}", self.long),
        }
    }
}

const fn o(short: Option<char>, long: &'static str, takes_arg: bool, opt: Opt) -> OptSpec {
    OptSpec {
        short,
        long,
        takes_arg,
        opt,
    }
}

/// The options softib implements, with upstream's short and long names.
const SUPPORTED: &[OptSpec] = &[
    o(Some('p'), "port", true, Opt::Port),
    o(Some('d'), "ib-dev", true, Opt::IbDev),
    o(Some('i'), "ib-port", true, Opt::IbPort),
    o(Some('m'), "mtu", true, Opt::Mtu),
    o(Some('s'), "size", true, Opt::Size),
    o(Some('n'), "iters", true, Opt::Iters),
    o(Some('t'), "tx-depth", true, Opt::TxDepth),
    o(Some('u'), "qp-timeout", true, Opt::QpTimeout),
    o(Some('S'), "sl", true, Opt::Sl),
    o(Some('x'), "gid-index", true, Opt::GidIndex),
    o(Some('a'), "all", false, Opt::All),
    o(Some('F'), "CPU-freq", false, Opt::CpuFreq),
    o(Some('c'), "connection", true, Opt::Connection),
    o(Some('q'), "qp", true, Opt::Qp),
    o(Some('e'), "events", false, Opt::Events),
    o(Some('I'), "inline_size", true, Opt::InlineSize),
    o(Some('o'), "outs", true, Opt::Outs),
    o(Some('r'), "rx-depth", true, Opt::RxDepth),
    o(Some('b'), "bidirectional", false, Opt::Bidirectional),
    o(Some('Q'), "cq-mod", true, Opt::CqMod),
    o(Some('N'), "noPeak", false, Opt::NoPeak),
    o(Some('V'), "version", false, Opt::Version),
    o(Some('h'), "help", false, Opt::Help),
    o(Some('A'), "atomic_type", true, Opt::AtomicType),
    o(Some('l'), "post_list", true, Opt::PostList),
    o(Some('D'), "duration", true, Opt::Duration),
    o(Some('f'), "margin", true, Opt::Margin),
    o(None, "report_gbits", false, Opt::ReportGbits),
    o(None, "report-both", false, Opt::ReportBoth),
    o(None, "out_json", false, Opt::OutJson),
    o(None, "out_json_file", true, Opt::OutJsonFile),
    o(None, "use_old_post_send", false, Opt::UseOldPostSend),
    o(Some('R'), "rdma_cm", false, Opt::RdmaCm),
    o(None, "run_infinitely", false, Opt::RunInfinitely),
    o(None, "timeout", true, Opt::Timeout),
];

/// Upstream short options softib does not implement (perftest 6.x `getopt_long` string).
const UNSUPPORTED_SHORT: &[(char, &str)] = &[
    ('B', "source_mac"),
    ('C', "report-cycles"),
    ('E', "dest_mac"),
    ('g', "mcg"),
    ('G', "use_rss"),
    ('H', "report-histogram"),
    ('j', "source_ip"),
    ('J', "dest_ip"),
    ('k', "source_port"),
    ('K', "dest_port"),
    ('L', "hop_limit"),
    ('M', "MGID"),
    ('O', "dualport"),
    ('P', "client"),
    ('T', "tos"),
    ('U', "report-unsorted"),
    ('v', "mac_fwd"),
    ('w', "limit_bw"),
    ('W', "report-counters"),
    ('X', "vector"),
    ('y', "limit_msgrate"),
    ('Y', "ethertype"),
    ('z', "comm_rdma_cm"),
    ('Z', "server"),
];

/// Upstream long-only options softib does not implement.
const UNSUPPORTED_LONG: &[&str] = &[
    "force-link",
    "remote_mac",
    "local_mac",
    "remote_ip",
    "local_ip",
    "remote_port",
    "local_port",
    "use-srq",
    "no_lock",
    "use-null-mr",
    "reversed",
    "pkey_index",
    "tcp",
    "burst_size",
    "typical_pkt_size",
    "rate_limit",
    "rate_limit_type",
    "rate_units",
    "output",
    "cpu_util",
    "latency_gap",
    "flow_label",
    "retry_count",
    "dont_xchg_versions",
    "payload_file_path",
    "use_cuda",
    "use_cuda_bus_id",
    "use_cuda_dmabuf",
    "use_rocm",
    "use_neuron",
    "use_neuron_dmabuf",
    "use_hl",
    "use_mlu",
    "mmap",
    "mmap-offset",
    "ipv6",
    "ipv6-addr",
    "raw_ipv6",
    "report-per-port",
    "odp",
    "use_hugepages",
    "promiscuous",
    "sniffer",
    "raw_mcast",
    "mr_per_qp",
    "dlid",
    "tclass",
    "wait_destroy",
    "flows",
    "flows_burst",
    "reply_every",
    "perform_warm_up",
    "vlan_en",
    "vlan_pcp",
    "recv_post_list",
    "aes_xts",
    "encrypt_on_tx",
    "sig_before",
    "aes_block_size",
    "kek_path",
    "credentials_path",
    "data_enc_keys_number",
    "data_enc_key_app_path",
    "log_dci_streams",
    "log_active_dci_streams",
    "disable_pcie_relaxed",
    "use_ooo",
    "congest_type",
    "bind_source_ip",
    "write_with_imm",
    "no_ddp",
    "unsolicited_write",
    "connectionless",
    "data_validation",
    "report-histogrm",
];

fn lookup_long(name: &str) -> Option<&'static OptSpec> {
    SUPPORTED.iter().find(|s| s.long == name)
}

fn lookup_short(c: char) -> Option<&'static OptSpec> {
    SUPPORTED.iter().find(|s| s.short == Some(c))
}

fn classify_unknown_long(name: &str) -> ArgsError {
    let upstream =
        UNSUPPORTED_LONG.contains(&name) || UNSUPPORTED_SHORT.iter().any(|(_, l)| *l == name);
    match UNSUPPORTED_SHORT.iter().find(|(_, l)| *l == name) {
        Some((c, l)) => ArgsError::Unsupported {
            flag: format!("-{c}/--{l}"),
        },
        None if upstream => ArgsError::Unsupported {
            flag: format!("--{name}"),
        },
        None => ArgsError::Unknown(format!("--{name}")),
    }
}

fn classify_unknown_short(c: char) -> ArgsError {
    match UNSUPPORTED_SHORT.iter().find(|(s, _)| *s == c) {
        Some((s, l)) => ArgsError::Unsupported {
            flag: format!("-{s}/--{l}"),
        },
        None => ArgsError::Unknown(format!("-{c}")),
    }
}

/// Parses an integer the way C's `strtol(s, &end, 0)` does with a full-string check:
/// optional sign, `0x`/`0X` hex, leading `0` octal, otherwise decimal.
fn parse_c_int(s: &str) -> Result<i64, String> {
    let t = s.trim_start();
    let (neg, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) =
        if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (16, h)
        } else if body.len() > 1 && body.starts_with('0') {
            (8, &body[1..])
        } else {
            (10, body)
        };
    if digits.is_empty() {
        return Err(format!("{s:?} is not a number"));
    }
    let v = i64::from_str_radix(digits, radix).map_err(|_| format!("{s:?} is not a number"))?;
    Ok(if neg { -v } else { v })
}

fn int_in_range(s: &str, min: i64, max: i64) -> Result<i64, String> {
    let v = parse_c_int(s)?;
    if v < min || v > max {
        return Err(format!("should be between {min} and {max}, got {v}"));
    }
    Ok(v)
}

/// The `-h` text: upstream's layout for the options softib implements.
fn usage(prog: &str, test: Test, mode: Mode) -> String {
    let bw = mode == Mode::Bw;
    let mut u = String::new();
    let mut line = |s: &str| {
        u.push_str(s);
        u.push('\n');
    };
    line("Usage:");
    line(&format!(
        "  {prog}            start a server and wait for connection"
    ));
    line(&format!("  {prog} <host>     connect to server at <host>"));
    line("");
    line("Options:");
    if test != Test::Atomic {
        line("  -a, --all  Run sizes from 2 till 2^23");
    } else {
        line("  -A, --atomic_type=<type>  type of atomic operation from {CMP_AND_SWAP,FETCH_AND_ADD} (default FETCH_AND_ADD)");
    }
    if bw {
        line("  -b, --bidirectional  Measure bidirectional bandwidth (default unidirectional)");
    }
    line(match test {
        Test::Send => "  -c, --connection=<RC/UC/UD>  Connection type RC/UC/UD (default RC)",
        Test::Write => "  -c, --connection=<RC/UC>  Connection type RC/UC (default RC)",
        _ => "  -c, --connection=<RC>  Connection type RC (default RC)",
    });
    line("  -d, --ib-dev=<dev>  Use IB device <dev> (default first device found)");
    line("  -D, --duration  Run test for a customized period of seconds.");
    if test != Test::Write {
        line("  -e, --events  Sleep on CQ events (default poll)");
    }
    line("  -f, --margin  measure results within margins. (default=2sec)");
    line("  -F, --CPU-freq  Do not show a warning even if cpufreq_ondemand module is loaded, and cpu-freq is not on max.");
    line("  -h, --help  Show this help screen.");
    line("  -i, --ib-port=<port>  Use port <port> of IB device (default 1)");
    if !test.is_read_like() {
        line("  -I, --inline_size=<size>  Max size of message to be sent in inline");
    }
    if bw {
        line("  -l, --post_list=<list size>");
        line(" Post list of send WQEs of <list size> size (instead of single post)");
    }
    line("  -m, --mtu=<mtu>  MTU size : 256 - 4096 (default port mtu)");
    let iters = if bw && test == Test::Write {
        5000
    } else {
        1000
    };
    line(&format!(
        "  -n, --iters=<iters>  Number of exchanges (at least 5, default {iters})"
    ));
    if bw {
        line("  -N, --noPeak Cancel peak-bw calculation (default with peak up to iters=20000)");
    }
    if test.is_read_like() {
        line("  -o, --outs=<num>  num of outstanding read/atom(default max of device)");
    }
    line(&format!(
        "  -p, --port=<port>  Listen on/connect to port <port> (default {DEFAULT_TCP_PORT})"
    ));
    if bw {
        line("  -q, --qp=<num of qp's>  Num of qp's(default 1)");
        line("  -Q, --cq-mod  Generate Cqe only after <--cq-mod> completion");
    }
    if test == Test::Send {
        line("  -r, --rx-depth=<dep>  Rx queue size (default 512).");
    }
    if test != Test::Atomic {
        let s = if bw { 65536 } else { 2 };
        line(&format!(
            "  -s, --size=<size>  Size of message to exchange (default {s})"
        ));
    }
    line("  -R, --rdma_cm  Connect QPs with rdma_cm and run test on those QPs");
    line("  -S, --sl=<sl>  SL (default 0)");
    if bw {
        line("  -t, --tx-depth=<dep>  Size of tx queue (default 128)");
    }
    line("  -u, --qp-timeout=<timeout>  QP timeout, timeout value is 4 usec * 2 ^(timeout), default 14");
    line("  -V, --version  Display version number");
    line("  -x, --gid-index=<index>  Test uses GID with GID index");
    line("");
    line("      --out_json  Save the report in a json file");
    line(&format!("      --out_json_file=<file>  Name of the report json file. (Default: {DEFAULT_JSON_FILE} in the working directory) "));
    line("      --use_old_post_send Use old post send flow (ibv_post_send).");
    if bw {
        line("      --report-both  Report RX & TX results separately on Bidirectional BW tests");
        line(
            "      --report_gbits  Report Max/Average BW of test in Gbit/sec (instead of MiB/sec)",
        );
        line("      --run_infinitely  Run test forever, print results every <duration> seconds");
    }
    line("      --timeout=<sec>  softib: seconds to wait for the peer at each exchange step (default 15)");
    u
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.banner_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(test: Test, mode: Mode, args: &[&str]) -> PerftestArgs {
        let argv = std::iter::once("prog").chain(args.iter().copied());
        match PerftestArgs::parse_from(test, mode, argv).unwrap() {
            Parsed::Run(a) => *a,
            other => panic!("expected a run, got {other:?}"),
        }
    }

    fn err(test: Test, mode: Mode, args: &[&str]) -> ArgsError {
        let argv = std::iter::once("prog").chain(args.iter().copied());
        PerftestArgs::parse_from(test, mode, argv).unwrap_err()
    }

    #[test]
    fn defaults_per_test() {
        let a = run(Test::Send, Mode::Bw, &["host"]);
        assert_eq!(
            (a.size, a.iters, a.tx_depth, a.rx_depth),
            (65536, 1000, 128, 512)
        );
        assert_eq!(a.port, 18515);
        assert_eq!(a.cq_mod, 1, "cq moderation is off above 8192 B");
        assert_eq!(a.qp_timeout, 14);
        assert_eq!(a.timeout, Duration::from_secs(15));
        assert_eq!(a.server.as_deref(), Some("host"));

        let a = run(Test::Write, Mode::Bw, &[]);
        assert_eq!((a.iters, a.rx_depth, a.tx_depth), (5000, 1, 128));
        assert!(a.is_server());

        let a = run(Test::Send, Mode::Lat, &[]);
        assert_eq!((a.size, a.iters, a.tx_depth, a.cq_mod), (2, 1000, 1, 1));

        let a = run(Test::Atomic, Mode::Bw, &["h"]);
        assert_eq!(
            (a.size, a.atomic_type, a.inline_size),
            (8, AtomicType::FetchAndAdd, Some(0))
        );
        assert_eq!(a.rx_depth, 1);

        let a = run(Test::Read, Mode::Lat, &["h"]);
        assert_eq!((a.size, a.iters), (2, 1000));
    }

    #[test]
    fn golden_rxe_command_lines() {
        // ib_send_bw -d rxe0 -x 1 -n 100 -F 10.77.0.2: the golden banner shows TX depth 100,
        // CQ Moderation 1 on the client and RX depth 100 on the server.
        let c = run(
            Test::Send,
            Mode::Bw,
            &["-d", "rxe0", "-x", "1", "-n", "100", "-F", "10.77.0.2"],
        );
        assert_eq!((c.tx_depth, c.cq_mod, c.gid_index), (100, 1, Some(1)));
        let s = run(
            Test::Send,
            Mode::Bw,
            &["-d", "rxe1", "-x", "1", "-n", "100", "-F"],
        );
        assert_eq!(s.rx_depth, 100);
        assert!(s.no_peak, "a send server has no post times");
        assert_eq!(
            s.notices,
            vec![" WARNING: BW peak won't be measured in this run."]
        );
    }

    #[test]
    fn getopt_forms() {
        let a = run(
            Test::Write,
            Mode::Bw,
            &["-n100", "--size=4K", "-aF", "--tx-depth", "0x10"],
        );
        assert_eq!(a.iters, 100);
        assert_eq!(a.test_method, TestMethod::All);
        assert_eq!(a.size, MAX_SIZE, "-a sweeps up to 2^23");
        assert!(a.cpu_freq_f);
        assert_eq!(a.tx_depth, 16);
        let a = run(Test::Send, Mode::Bw, &["-s", "1M", "-Q", "10", "h"]);
        assert_eq!((a.size, a.cq_mod), (1 << 20, 10));
        assert!(a.notices.iter().any(|n| n.contains("Large message")));
    }

    #[test]
    fn validation_like_upstream() {
        assert_eq!(
            err(Test::Write, Mode::Bw, &["-c", "UD"]),
            ArgsError::Invalid("UD connection only possible in SEND verb".into())
        );
        assert!(matches!(
            err(Test::Read, Mode::Bw, &["-c", "UC"]),
            ArgsError::Invalid(_)
        ));
        assert!(
            matches!(err(Test::Atomic, Mode::Bw, &["-s", "16"]), ArgsError::Invalid(m) if m.contains("Atomic"))
        );
        assert!(matches!(
            err(Test::Atomic, Mode::Bw, &["-a"]),
            ArgsError::Invalid(_)
        ));
        assert!(matches!(
            err(Test::Send, Mode::Bw, &["-n", "4"]),
            ArgsError::BadValue { .. }
        ));
        assert!(matches!(
            err(Test::Send, Mode::Lat, &["-b"]),
            ArgsError::Invalid(_)
        ));
        assert!(matches!(
            err(Test::Send, Mode::Lat, &["-q", "2"]),
            ArgsError::Invalid(_)
        ));
        assert!(matches!(
            err(Test::Write, Mode::Bw, &["-e"]),
            ArgsError::Invalid(_)
        ));
        assert!(matches!(
            err(Test::Read, Mode::Bw, &["-I", "10"]),
            ArgsError::Invalid(_)
        ));
        assert!(matches!(
            err(Test::Send, Mode::Bw, &["-o", "4"]),
            ArgsError::Invalid(_)
        ));
        assert!(matches!(
            err(Test::Send, Mode::Bw, &["-A", "CMP_AND_SWAP"]),
            ArgsError::Invalid(_)
        ));
        assert!(matches!(
            err(Test::Send, Mode::Bw, &["-m", "1000"]),
            ArgsError::BadValue { .. }
        ));
        assert!(matches!(
            err(Test::Send, Mode::Bw, &["-n", "abc"]),
            ArgsError::BadValue { .. }
        ));
        assert_eq!(
            err(Test::Send, Mode::Bw, &["-n", "10", "-n", "20"]),
            ArgsError::Duplicate("-n/--iters".into())
        );
        assert!(matches!(
            err(Test::Send, Mode::Bw, &["-l", "3", "-n", "10"]),
            ArgsError::Invalid(_)
        ));
        assert!(
            matches!(err(Test::Send, Mode::Bw, &["-f", "3"]), ArgsError::Invalid(m) if m.contains("MARGIN"))
        );
        assert!(matches!(
            err(Test::Send, Mode::Bw, &["a", "b"]),
            ArgsError::ExtraPositional(_)
        ));
        assert!(matches!(
            err(Test::Send, Mode::Bw, &["-n"]),
            ArgsError::MissingValue(_)
        ));
    }

    #[test]
    fn unimplemented_upstream_flags_are_named() {
        assert_eq!(
            err(Test::Send, Mode::Bw, &["-z"]),
            ArgsError::Unsupported {
                flag: "-z/--comm_rdma_cm".into()
            }
        );
        assert_eq!(
            err(Test::Send, Mode::Bw, &["--use-srq"]),
            ArgsError::Unsupported {
                flag: "--use-srq".into()
            }
        );
        assert_eq!(
            err(Test::Send, Mode::Bw, &["--comm_rdma_cm"]),
            ArgsError::Unsupported {
                flag: "-z/--comm_rdma_cm".into()
            }
        );
        assert_eq!(
            err(Test::Send, Mode::Bw, &["-c", "XRC"]),
            ArgsError::Unsupported {
                flag: "-c XRC".into()
            }
        );
        assert_eq!(
            err(Test::Send, Mode::Bw, &["--bogus"]),
            ArgsError::Unknown("--bogus".into())
        );
        let msg = err(Test::Send, Mode::Bw, &["-az"]).to_string();
        assert!(
            msg.contains("-z/--comm_rdma_cm") && msg.contains("remove it"),
            "{msg}"
        );
    }

    #[test]
    fn rdma_cm_is_taken_and_what_it_cannot_do_is_named() {
        let a = run(Test::Write, Mode::Bw, &["-R", "h"]);
        assert!(a.rdma_cm);
        assert!(run(Test::Send, Mode::Lat, &["--rdma_cm"]).rdma_cm);
        assert!(!run(Test::Send, Mode::Bw, &[]).rdma_cm);
        let uc = err(Test::Send, Mode::Bw, &["-R", "-c", "UC"]).to_string();
        assert!(uc.ends_with(" UC is not supported in librdmacm"), "{uc}");
        assert!(run(Test::Send, Mode::Lat, &["-R", "-c", "UD"]).rdma_cm);
        let inf = err(Test::Write, Mode::Bw, &["-R", "--run_infinitely"]).to_string();
        assert!(inf.contains("--run_infinitely with -R"), "{inf}");
    }

    #[test]
    fn ud_and_modes() {
        let a = run(Test::Send, Mode::Bw, &["-c", "UD", "-n", "20000", "h"]);
        assert_eq!(a.rx_depth, 16000);
        let mut a = run(Test::Send, Mode::Bw, &["-c", "UD", "h"]);
        let msgs = a.apply_mtu(2048).unwrap();
        assert_eq!(
            msgs,
            vec![" Max msg size in UD is MTU 2048", " Changing to this MTU"]
        );
        assert_eq!(a.size, 2048);
        let mut a = run(Test::Send, Mode::Bw, &["-c", "UD", "-s", "4096", "h"]);
        assert!(a.apply_mtu(1024).is_err());
        let a = run(Test::Send, Mode::Bw, &["-c", "UD", "-a", "h"]);
        assert_eq!(
            a.sizes(1024),
            vec![2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
        );
        let a = run(Test::Write, Mode::Bw, &["-a", "h"]);
        let s = a.sizes(4096);
        assert_eq!((s.len(), s[0], s[22]), (23, 2, 1 << 23));

        let a = run(Test::Write, Mode::Bw, &["-D", "8", "h"]);
        assert_eq!(
            (a.test_type, a.iters, a.margin, a.no_peak),
            (TestType::Duration, 0, 2, true)
        );
        let a = run(Test::Write, Mode::Bw, &["--run_infinitely", "h"]);
        assert_eq!(
            (a.test_method, a.test_type),
            (TestMethod::Infinitely, TestType::Duration)
        );
        assert!(matches!(
            err(Test::Write, Mode::Lat, &["--run_infinitely"]),
            ArgsError::Invalid(_)
        ));
        let a = run(Test::Write, Mode::Bw, &["-n", "30000", "h"]);
        assert!(a.no_peak);
    }

    #[test]
    fn help_and_version() {
        let argv = ["ib_write_bw", "-h"];
        match PerftestArgs::parse_from(Test::Write, Mode::Bw, argv).unwrap() {
            Parsed::Help(t) => {
                assert!(t.starts_with("Usage:\n  ib_write_bw            start a server"));
                assert!(t.contains("default 5000"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            PerftestArgs::parse_from(Test::Write, Mode::Bw, ["p", "-V"]).unwrap(),
            Parsed::Version(v) if v.starts_with("Version: ")
        ));
    }

    #[test]
    fn c_integers() {
        assert_eq!(parse_c_int("0x1f"), Ok(31));
        assert_eq!(parse_c_int("010"), Ok(8));
        assert_eq!(parse_c_int("-3"), Ok(-3));
        assert!(parse_c_int("12a").is_err());
        assert!(parse_c_int("").is_err());
    }
}
