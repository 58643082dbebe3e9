//! The out-of-band TCP exchange of upstream perftest ("Data ex. method : Ethernet").
//!
//! Facts from `src/perftest_communication.c`, `perftest_communication.h` and
//! `perftest_negotiation.{c,h}` of `linux-rdma/perftest`. Every message is a fixed-size
//! blob written with one `write()` and read with one `read()`, with no framing. For every
//! symmetric exchange the **client writes then reads, the server reads then writes**, so
//! the server is always the side that waits first. The sequence a runner drives:
//!
//! 1. connect ([`ExchangeListener::accept`] / [`Exchange::connect`]),
//! 2. [`Exchange::exchange_versions`] (16-byte version strings),
//! 3. [`Exchange::exchange_sys_data`] (page size, cache line; peers >= 5.32),
//! 4. [`Exchange::exchange_mtu`] (MTU enum as decimal text; peers >= 5.1),
//! 5. [`Exchange::negotiate`] (parameter block; peers >= 6.28),
//! 6. [`Exchange::hand_shake`] once per QP with the key message ([`Dest`]), then again as
//!    barriers, [`Exchange::exchange_bw_reports`] for BW results, [`Exchange::close`].
//!
//! Which optional steps run and how wide some fields are depends on the *peer's* version
//! string (upstream compares `atof(rem_version)` against thresholds); [`PeerVersion`] keeps
//! those rules in one place. Older perftest (e.g. Debian's 4.5 package) differs only
//! through those thresholds: it skips the steps its version predates.
//!
//! With `-R` the same messages travel as SENDs over a QP that rdma_cm connected
//! ("Data ex. method : rdma_cm", [`Exchange::over_messages`]): each write is one message,
//! each read takes one, and the hand shake carries `struct pingpong_dest` in binary
//! ([`Dest::encode_binary`]) instead of the key text.
//!
//! One file on purpose (about 1,500 lines): every message of the exchange and its version
//! rules together, so that a byte-compatibility question has one place to look.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::args::{AtomicType, Mode, PerftestArgs, Test, TestMethod, TestType};

/// The version string softib announces. 6.29 is the last upstream version whose
/// parameter negotiation uses the fixed 312-byte block, which softib implements fully;
/// newer peers keep using that block with a 6.29 peer.
pub const SOFTIB_PERFTEST_VERSION: &str = "6.29";
/// Upstream `MAX_VERSION`: the version buffer is 16 bytes, NUL padded.
pub const VERSION_LEN: usize = 16;
/// Upstream `KEY_MSG_SIZE`: key message without GID.
pub const KEY_MSG_SIZE: usize = 59;
/// Upstream `KEY_MSG_SIZE_GID`: key message with GID.
pub const KEY_MSG_SIZE_GID: usize = 108;
/// Size of the legacy negotiation block on x86-64 without MLX5DV (17 fields + padding +
/// a host-endian `struct ibv_device_attr` of 232 bytes).
pub const LEGACY_NEGOTIATE_LEN: usize = 312;
/// Offset of the `ibv_device_attr` inside the legacy block.
const LEGACY_ATTR_OFFSET: usize = 80;
/// Offset of `max_qp_rd_atom` inside `struct ibv_device_attr` (x86-64 layout).
const ATTR_MAX_QP_RD_ATOM: usize = 144;
/// Upstream `NEGOTIATION_VERSION` of the key=value negotiation (peers >= 6.30).
pub const KV_NEGOTIATION_VERSION: i32 = 0;

/// Which side of the exchange this process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// No address given: listens, accepts one client, reads first.
    Server,
    /// Connects to the server, writes first.
    Client,
}

impl Role {
    fn peer_name(self) -> &'static str {
        match self {
            Role::Server => "client",
            Role::Client => "server",
        }
    }
}

/// Errors of the exchange. Each names the message and the peer involved.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The server could not listen.
    #[error("cannot listen on {addr} for the perftest exchange: {source}; is another perftest server running there? choose another port with -p")]
    Bind {
        /// Address we tried.
        addr: String,
        /// OS error.
        source: io::Error,
    },
    /// No client connected in time.
    #[error("no client connected to {addr} within {secs} s; start the client with this host's address, or raise --timeout")]
    AcceptTimeout {
        /// Listening address.
        addr: SocketAddr,
        /// Seconds waited.
        secs: u64,
    },
    /// The client could not connect within the timeout.
    #[error("could not connect to the perftest server at {addr} within {secs} s ({last}); is the server started with the same -p port? raise --timeout to wait longer")]
    Connect {
        /// Server address as given.
        addr: String,
        /// Seconds tried.
        secs: u64,
        /// The last error seen.
        last: String,
    },
    /// A read did not complete in time.
    #[error("timed out after {secs} s waiting for the {what} from the {peer_role} at {peer}; the peer may be stuck, run different options, or be an incompatible perftest version")]
    Timeout {
        /// Message awaited.
        what: &'static str,
        /// "server" or "client".
        peer_role: &'static str,
        /// Peer address.
        peer: SocketAddr,
        /// Seconds waited.
        secs: u64,
    },
    /// The peer closed the connection.
    #[error("the {peer_role} at {peer} closed the connection while we waited for the {what}; check the {peer_role}'s error output")]
    Closed {
        /// Message awaited.
        what: &'static str,
        /// "server" or "client".
        peer_role: &'static str,
        /// Peer address.
        peer: SocketAddr,
    },
    /// Any other error of the connection (the socket, or the QP of an rdma_cm exchange).
    #[error("error during the {what} with {peer}: {source}")]
    Io {
        /// Message being exchanged.
        what: &'static str,
        /// Peer address.
        peer: SocketAddr,
        /// OS error.
        source: io::Error,
    },
    /// A message that does not have upstream's format.
    #[error("malformed {what}: {detail}")]
    Malformed {
        /// Message.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// A value that cannot be encoded in upstream's fixed-width format.
    #[error("cannot encode the {what}: {detail}")]
    Encode {
        /// Message.
        what: &'static str,
        /// What is out of range.
        detail: String,
    },
    /// The negotiation found different parameters on both sides.
    #[error(" {field} mismatch: local={local}, remote={remote} (pass the same options to server and client)")]
    Mismatch {
        /// Upstream's field name.
        field: &'static str,
        /// Our value, as upstream prints it.
        local: String,
        /// Their value.
        remote: String,
    },
}

type Result<T> = std::result::Result<T, ExchangeError>;

// ---------------------------------------------------------------------------------------
// Versions
// ---------------------------------------------------------------------------------------

/// The peer's version string and the version-dependent rules upstream applies to it.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerVersion {
    /// The string as received, up to the first NUL.
    pub text: String,
    /// `atof(text)`: the leading decimal number, 0 if none.
    pub value: f64,
}

impl PeerVersion {
    /// Parses a version string the way upstream does (`atof`).
    pub fn new(text: &str) -> Self {
        PeerVersion {
            text: text.to_string(),
            value: atof(text),
        }
    }

    /// `check_sys_data` runs for peers >= 5.32 (a double comparison upstream).
    pub fn has_sys_data(&self) -> bool {
        self.value >= 5.32
    }

    /// `check_mtu` exchanges MTUs with peers >= 5.1. Upstream compares a `float`, so
    /// exactly "5.1" does not qualify (5.1f < 5.1); we reproduce that.
    pub fn has_mtu_exchange(&self) -> bool {
        f64::from(self.value as f32) >= 5.1
    }

    /// The MTU text buffer is 2 bytes for peers >= 5.31, 4 bytes before (`float` compare).
    pub fn mtu_msg_len(&self) -> usize {
        if f64::from(self.value as f32) >= 5.31 {
            2
        } else {
            4
        }
    }

    /// `xchg_bw_reports` sends iterations as 8 bytes for peers >= 5.33, else 4
    /// (`float remote_version` upstream).
    pub fn bw_iters_len(&self) -> usize {
        if f64::from(self.value as f32) >= 5.33 {
            8
        } else {
            4
        }
    }

    /// Upstream 6.x refuses peers older than 5.70 ("Current implementation is not
    /// compatible with versions older than 5.70"). softib does not enforce it so that
    /// older peers still work; runners may.
    pub fn upstream_rejects(&self) -> bool {
        self.value < 5.70
    }
}

/// Which parameter negotiation both sides run. Upstream picks it from the *peer's*
/// version; since the peer picks it from ours, softib uses the lower of the two so both
/// sides always agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Negotiation {
    /// Either side older than 6.28: nothing is exchanged.
    None,
    /// 6.28 and 6.29: the fixed [`LEGACY_NEGOTIATE_LEN`]-byte block.
    Legacy,
    /// 6.30 and newer: version int, then a length-prefixed `name=hex;` string.
    KeyValue,
}

impl Negotiation {
    /// The negotiation for a local and a remote version.
    pub fn between(local: &PeerVersion, remote: &PeerVersion) -> Self {
        let v = local.value.min(remote.value);
        // 6.28 is a perftest release number, not an approximation of tau.
        #[allow(clippy::approx_constant)]
        let first_negotiating = 6.28;
        if v < first_negotiating {
            Negotiation::None
        } else if v <= 6.29 {
            Negotiation::Legacy
        } else {
            Negotiation::KeyValue
        }
    }
}

/// C's `atof` restricted to what version strings contain: the leading `[+-]digits[.digits]`.
fn atof(s: &str) -> f64 {
    let s = s.trim_start();
    let mut end = 0;
    let b = s.as_bytes();
    if end < b.len() && (b[end] == b'+' || b[end] == b'-') {
        end += 1;
    }
    let mut dot = false;
    while end < b.len() && (b[end].is_ascii_digit() || (b[end] == b'.' && !dot)) {
        dot |= b[end] == b'.';
        end += 1;
    }
    s[..end].trim_end_matches('.').parse().unwrap_or(0.0)
}

/// Encodes a version string into upstream's 16-byte NUL-padded buffer.
pub fn encode_version(version: &str) -> Result<[u8; VERSION_LEN]> {
    let bytes = version.as_bytes();
    if bytes.len() >= VERSION_LEN || bytes.contains(&0) {
        return Err(ExchangeError::Encode {
            what: "version string",
            detail: format!("{version:?} must be at most 15 bytes without NUL"),
        });
    }
    let mut out = [0u8; VERSION_LEN];
    out[..bytes.len()].copy_from_slice(bytes);
    Ok(out)
}

/// Decodes the peer's 16-byte version buffer (text up to the first NUL).
pub fn decode_version(buf: &[u8]) -> Result<PeerVersion> {
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    let text = std::str::from_utf8(&buf[..end]).map_err(|_| ExchangeError::Malformed {
        what: "version string",
        detail: format!("not text: {:02x?}", &buf[..end]),
    })?;
    Ok(PeerVersion::new(text))
}

// ---------------------------------------------------------------------------------------
// System data and MTU
// ---------------------------------------------------------------------------------------

/// What `check_sys_data` exchanges: each side keeps the maximum of both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SysData {
    /// `cycle_buffer`: the page size (`sysconf(_SC_PAGESIZE)`, 4096 default).
    pub cycle_buffer: i32,
    /// L1 data cache line size (64 default).
    pub cache_line_size: i32,
}

impl Default for SysData {
    fn default() -> Self {
        SysData {
            cycle_buffer: 4096,
            cache_line_size: 64,
        }
    }
}

/// Encodes a 4-byte big-endian int (`hton_int`).
pub fn encode_i32(v: i32) -> [u8; 4] {
    v.to_be_bytes()
}

/// Decodes a 4-byte big-endian int.
pub fn decode_i32(what: &'static str, buf: &[u8]) -> Result<i32> {
    let a: [u8; 4] = buf.try_into().map_err(|_| ExchangeError::Malformed {
        what,
        detail: format!("expected 4 bytes, got {}", buf.len()),
    })?;
    Ok(i32::from_be_bytes(a))
}

/// The `enum ibv_mtu` value of an MTU in bytes (256 -> 1 ... 4096 -> 5).
pub fn mtu_enum(bytes: u32) -> Option<u8> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// Bytes of an `enum ibv_mtu` value (upstream `MTU_SIZE`).
pub fn mtu_bytes(mtu_enum: u8) -> Option<u32> {
    (1..=5).contains(&mtu_enum).then(|| 1u32 << (7 + mtu_enum))
}

/// Encodes the MTU message: the enum value as decimal text (`sprintf("%d")`), NUL
/// terminated, in a buffer of `len` bytes (2 for peers >= 5.31, 4 before).
pub fn encode_mtu(mtu_enum: u8, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let text = mtu_enum.to_string();
    let n = text.len().min(len.saturating_sub(1));
    out[..n].copy_from_slice(&text.as_bytes()[..n]);
    out
}

/// Decodes the peer's MTU message (`strtol(rem, NULL, 10)`): `None` if not a number.
pub fn decode_mtu(buf: &[u8]) -> Option<u8> {
    let digits: String = buf
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .map(|b| char::from(*b))
        .collect();
    digits.parse().ok()
}

/// Upstream's rule: use the remote MTU if it is valid (1..=5) and smaller than ours.
pub fn effective_mtu(local: u8, remote: Option<u8>) -> u8 {
    match remote {
        Some(r) if (1..=5).contains(&r) && local > r => r,
        _ => local,
    }
}

// ---------------------------------------------------------------------------------------
// Parameter negotiation
// ---------------------------------------------------------------------------------------

/// The parameters both sides must agree on (`struct perftest_parameters_negotiate`).
/// Values are upstream's enum codes; build them with [`NegotiateParams::from_args`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NegotiateParams {
    /// `enum ctx_test_method`: RUN_REGULAR 0, RUN_ALL 1, RUN_INFINITELY 2.
    pub test_method: i32,
    /// RC 0, UC 1, UD 2.
    pub connection_type: i32,
    /// `VerbType`; the numbering differs between the two negotiation formats, see
    /// [`verb_code`].
    pub verb: i32,
    /// LAT 0, BW 1.
    pub tst: i32,
    /// CMP_AND_SWAP 0, FETCH_AND_ADD 1.
    pub atomic_type: i32,
    /// ITERATIONS 0, DURATION 1.
    pub test_type: i32,
    /// GBS 0, MBS 1.
    pub report_fmt: i32,
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// AES-XTS (always 0 in softib).
    pub aes_xts: i32,
    /// Number of QPs.
    pub num_of_qps: i32,
    /// `-D` seconds.
    pub duration: i32,
    /// rdma_cm in use (0).
    pub use_rdma_cm: i32,
    /// write-with-immediate (0).
    pub use_write_with_imm: i32,
    /// 0.
    pub no_enhanced_reorder: i32,
    /// 0.
    pub sig_offload: i32,
    /// 0.
    pub data_validation: i32,
    /// The device's `max_qp_rd_atom`; the peer clips `-o` to it.
    pub max_qp_rd_atom: i32,
    /// TX depth (compared by the key=value format only).
    pub tx_depth: i32,
    /// `-b` (compared by the key=value format only).
    pub duplex: i32,
}

/// Upstream's `VerbType` code of a test in a negotiation format. Up to 6.29 the enum was
/// `{SEND, WRITE, WRITE_IMM, READ, ATOMIC}`; 6.30+ added SEND_IMM after SEND.
pub fn verb_code(test: Test, format: Negotiation) -> i32 {
    let legacy = match test {
        Test::Send => 0,
        Test::Write => 1,
        Test::Read => 3,
        Test::Atomic => 4,
    };
    match (format, test) {
        (Negotiation::KeyValue, Test::Send) => 0,
        (Negotiation::KeyValue, _) => legacy + 1,
        _ => legacy,
    }
}

impl NegotiateParams {
    /// Fills the block from parsed arguments, the format in use and the device's
    /// `max_qp_rd_atom`.
    pub fn from_args(a: &PerftestArgs, format: Negotiation, max_qp_rd_atom: i32) -> Self {
        let sat = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
        NegotiateParams {
            test_method: match a.test_method {
                TestMethod::Regular => 0,
                TestMethod::All => 1,
                TestMethod::Infinitely => 2,
            },
            connection_type: a.connection.code(),
            verb: verb_code(a.test, format),
            tst: match a.mode {
                Mode::Lat => 0,
                Mode::Bw => 1,
            },
            atomic_type: match a.atomic_type {
                AtomicType::CmpAndSwap => 0,
                AtomicType::FetchAndAdd => 1,
            },
            test_type: match a.test_type {
                TestType::Iterations => 0,
                TestType::Duration => 1,
            },
            report_fmt: if a.report_gbits { 0 } else { 1 },
            size: a.size,
            iters: a.iters,
            aes_xts: 0,
            num_of_qps: sat(a.num_qps),
            duration: sat(a.duration),
            use_rdma_cm: 0,
            use_write_with_imm: 0,
            no_enhanced_reorder: 0,
            sig_offload: 0,
            data_validation: 0,
            max_qp_rd_atom,
            tx_depth: sat(a.tx_depth),
            duplex: i32::from(a.duplex),
        }
    }

    /// Encodes the 6.28/6.29 block: ints and u64s big-endian at their C struct offsets,
    /// then a host-endian (x86-64, little-endian) `ibv_device_attr` of which only
    /// `max_qp_rd_atom` is filled, as upstream >= 6.30 does when it talks to such a peer.
    pub fn encode_legacy(&self) -> [u8; LEGACY_NEGOTIATE_LEN] {
        let mut b = [0u8; LEGACY_NEGOTIATE_LEN];
        let ints1 = [
            self.test_method,
            self.connection_type,
            self.verb,
            self.tst,
            self.atomic_type,
            self.test_type,
            self.report_fmt,
        ];
        for (i, v) in ints1.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes());
        }
        // Offset 28..32 is alignment padding before the first uint64_t.
        b[32..40].copy_from_slice(&self.size.to_be_bytes());
        b[40..48].copy_from_slice(&self.iters.to_be_bytes());
        let ints2 = [
            self.aes_xts,
            self.num_of_qps,
            self.duration,
            self.use_rdma_cm,
            self.use_write_with_imm,
            self.no_enhanced_reorder,
            self.sig_offload,
            self.data_validation,
        ];
        for (i, v) in ints2.iter().enumerate() {
            b[48 + i * 4..52 + i * 4].copy_from_slice(&v.to_be_bytes());
        }
        let at = LEGACY_ATTR_OFFSET + ATTR_MAX_QP_RD_ATOM;
        b[at..at + 4].copy_from_slice(&self.max_qp_rd_atom.to_le_bytes());
        b
    }

    /// Decodes a 6.28/6.29 block. `tx_depth` and `duplex` are not in it (left 0).
    pub fn decode_legacy(buf: &[u8]) -> Result<Self> {
        if buf.len() < LEGACY_NEGOTIATE_LEN {
            return Err(ExchangeError::Malformed {
                what: "negotiation block",
                detail: format!("expected {LEGACY_NEGOTIATE_LEN} bytes, got {}", buf.len()),
            });
        }
        let i = |o: usize| i32::from_be_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
        let u = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&buf[o..o + 8]);
            u64::from_be_bytes(a)
        };
        let at = LEGACY_ATTR_OFFSET + ATTR_MAX_QP_RD_ATOM;
        Ok(NegotiateParams {
            test_method: i(0),
            connection_type: i(4),
            verb: i(8),
            tst: i(12),
            atomic_type: i(16),
            test_type: i(20),
            report_fmt: i(24),
            size: u(32),
            iters: u(40),
            aes_xts: i(48),
            num_of_qps: i(52),
            duration: i(56),
            use_rdma_cm: i(60),
            use_write_with_imm: i(64),
            no_enhanced_reorder: i(68),
            sig_offload: i(72),
            data_validation: i(76),
            max_qp_rd_atom: i32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]),
            tx_depth: 0,
            duplex: 0,
        })
    }

    /// The key=value fields in upstream's table order, as (name, network-order bytes).
    fn kv_fields(&self) -> Vec<(&'static str, Vec<u8>)> {
        let i = |v: i32| v.to_be_bytes().to_vec();
        vec![
            ("test_method", i(self.test_method)),
            ("connection_type", i(self.connection_type)),
            ("verb", i(self.verb)),
            ("tst", i(self.tst)),
            ("atomicType", i(self.atomic_type)),
            ("test_type", i(self.test_type)),
            ("report_fmt", i(self.report_fmt)),
            ("size", self.size.to_be_bytes().to_vec()),
            ("iters", self.iters.to_be_bytes().to_vec()),
            ("aes_xts", i(self.aes_xts)),
            ("duplex", i(self.duplex)),
            ("num_of_qps", i(self.num_of_qps)),
            ("duration", i(self.duration)),
            ("use_rdma_cm", i(self.use_rdma_cm)),
            ("use_write_with_imm", i(self.use_write_with_imm)),
            ("no_enhanced_reorder", i(self.no_enhanced_reorder)),
            ("sig_offload", i(self.sig_offload)),
            ("data_validation", i(self.data_validation)),
            ("tx_depth", i(self.tx_depth)),
            ("max_qp_rd_atom", i(self.max_qp_rd_atom)),
        ]
    }

    /// Encodes the 6.30+ string `name=hexbytes;...` (no NUL; the length travels first).
    pub fn encode_kv(&self) -> String {
        let mut s = String::new();
        for (name, bytes) in self.kv_fields() {
            s.push_str(name);
            s.push('=');
            for b in bytes {
                s.push_str(&format!("{b:02x}"));
            }
            s.push(';');
        }
        s
    }

    /// Decodes a 6.30+ string. Unknown keys are ignored and missing keys leave
    /// `received` false, as upstream does; returns the values and which names arrived.
    pub fn decode_kv(text: &str) -> (Self, Vec<&'static str>) {
        let mut p = NegotiateParams::zero();
        let mut received = Vec::new();
        for token in text.split(';').filter(|t| !t.is_empty()) {
            let Some((key, hex)) = token.split_once('=') else {
                continue;
            };
            let Some(name) = KV_NAMES.iter().find(|n| **n == key) else {
                continue;
            };
            let width = if *name == "size" || *name == "iters" {
                8
            } else {
                4
            };
            let Some(bytes) = parse_hex_bytes(hex, width) else {
                continue;
            };
            let mut be = [0u8; 8];
            be[8 - width..].copy_from_slice(&bytes);
            let v64 = u64::from_be_bytes(be);
            let v32 = v64 as u32 as i32;
            match *name {
                "test_method" => p.test_method = v32,
                "connection_type" => p.connection_type = v32,
                "verb" => p.verb = v32,
                "tst" => p.tst = v32,
                "atomicType" => p.atomic_type = v32,
                "test_type" => p.test_type = v32,
                "report_fmt" => p.report_fmt = v32,
                "size" => p.size = v64,
                "iters" => p.iters = v64,
                "aes_xts" => p.aes_xts = v32,
                "duplex" => p.duplex = v32,
                "num_of_qps" => p.num_of_qps = v32,
                "duration" => p.duration = v32,
                "use_rdma_cm" => p.use_rdma_cm = v32,
                "use_write_with_imm" => p.use_write_with_imm = v32,
                "no_enhanced_reorder" => p.no_enhanced_reorder = v32,
                "sig_offload" => p.sig_offload = v32,
                "data_validation" => p.data_validation = v32,
                "tx_depth" => p.tx_depth = v32,
                "max_qp_rd_atom" => p.max_qp_rd_atom = v32,
                _ => continue,
            }
            received.push(*name);
        }
        (p, received)
    }

    fn zero() -> Self {
        NegotiateParams {
            test_method: 0,
            connection_type: 0,
            verb: 0,
            tst: 0,
            atomic_type: 0,
            test_type: 0,
            report_fmt: 0,
            size: 0,
            iters: 0,
            aes_xts: 0,
            num_of_qps: 0,
            duration: 0,
            use_rdma_cm: 0,
            use_write_with_imm: 0,
            no_enhanced_reorder: 0,
            sig_offload: 0,
            data_validation: 0,
            max_qp_rd_atom: 0,
            tx_depth: 0,
            duplex: 0,
        }
    }

    /// Upstream's comparison: the first mismatching field (in table order, only fields
    /// the peer sent) is an error worded as upstream prints it.
    pub fn compare(&self, remote: &Self, format: Negotiation, received: &[&str]) -> Result<()> {
        const OFF_ON: &[&str] = &["OFF", "ON"];
        let verbs: &[&str] = if format == Negotiation::KeyValue {
            &["SEND", "SEND_IMM", "WRITE", "WRITE_IMM", "READ", "ATOMIC"]
        } else {
            &["SEND", "WRITE", "WRITE_IMM", "READ", "ATOMIC"]
        };
        let checks: Vec<(&'static str, i64, i64, Option<&[&str]>)> = vec![
            (
                "test_method",
                self.test_method.into(),
                remote.test_method.into(),
                Some(&["RUN_REGULAR", "RUN_ALL", "RUN_INFINITELY"]),
            ),
            (
                "connection_type",
                self.connection_type.into(),
                remote.connection_type.into(),
                Some(&["RC", "UC", "UD", "RawEth", "XRC", "DC", "SRD"]),
            ),
            ("verb", self.verb.into(), remote.verb.into(), Some(verbs)),
            (
                "tst",
                self.tst.into(),
                remote.tst.into(),
                Some(&["LAT", "BW", "LAT_BY_BW", "FS_RATE"]),
            ),
            (
                "atomicType",
                self.atomic_type.into(),
                remote.atomic_type.into(),
                Some(&["CMP_AND_SWAP", "FETCH_AND_ADD"]),
            ),
            (
                "test_type",
                self.test_type.into(),
                remote.test_type.into(),
                Some(&["ITERATIONS", "DURATION"]),
            ),
            (
                "report_fmt",
                self.report_fmt.into(),
                remote.report_fmt.into(),
                Some(&["GBS", "MBS"]),
            ),
            ("size", self.size as i64, remote.size as i64, None),
            ("iters", self.iters as i64, remote.iters as i64, None),
            (
                "aes_xts",
                self.aes_xts.into(),
                remote.aes_xts.into(),
                Some(OFF_ON),
            ),
            (
                "duplex",
                self.duplex.into(),
                remote.duplex.into(),
                Some(OFF_ON),
            ),
            (
                "num_of_qps",
                self.num_of_qps.into(),
                remote.num_of_qps.into(),
                None,
            ),
            (
                "duration",
                self.duration.into(),
                remote.duration.into(),
                None,
            ),
            (
                "use_rdma_cm",
                self.use_rdma_cm.into(),
                remote.use_rdma_cm.into(),
                Some(OFF_ON),
            ),
            (
                "use_write_with_imm",
                self.use_write_with_imm.into(),
                remote.use_write_with_imm.into(),
                Some(OFF_ON),
            ),
            (
                "no_enhanced_reorder",
                self.no_enhanced_reorder.into(),
                remote.no_enhanced_reorder.into(),
                Some(OFF_ON),
            ),
            (
                "sig_offload",
                self.sig_offload.into(),
                remote.sig_offload.into(),
                Some(OFF_ON),
            ),
            (
                "data_validation",
                self.data_validation.into(),
                remote.data_validation.into(),
                Some(OFF_ON),
            ),
            (
                "tx_depth",
                self.tx_depth.into(),
                remote.tx_depth.into(),
                None,
            ),
        ];
        for (field, l, r, names) in checks {
            if !received.contains(&field) || l == r {
                continue;
            }
            let show =
                |v: i64| match names.and_then(|n| usize::try_from(v).ok().and_then(|i| n.get(i))) {
                    Some(s) => (*s).to_string(),
                    None => v.to_string(),
                };
            return Err(ExchangeError::Mismatch {
                field,
                local: show(l),
                remote: show(r),
            });
        }
        Ok(())
    }
}

const KV_NAMES: &[&str] = &[
    "test_method",
    "connection_type",
    "verb",
    "tst",
    "atomicType",
    "test_type",
    "report_fmt",
    "size",
    "iters",
    "aes_xts",
    "duplex",
    "num_of_qps",
    "duration",
    "use_rdma_cm",
    "use_write_with_imm",
    "no_enhanced_reorder",
    "sig_offload",
    "data_validation",
    "tx_depth",
    "max_qp_rd_atom",
];

/// Names the legacy block carries (everything but `tx_depth` and `duplex`).
const LEGACY_NAMES: &[&str] = &[
    "test_method",
    "connection_type",
    "verb",
    "tst",
    "atomicType",
    "test_type",
    "report_fmt",
    "size",
    "iters",
    "aes_xts",
    "num_of_qps",
    "duration",
    "use_rdma_cm",
    "use_write_with_imm",
    "no_enhanced_reorder",
    "sig_offload",
    "data_validation",
    "max_qp_rd_atom",
];

fn parse_hex_bytes(hex: &str, n: usize) -> Option<Vec<u8>> {
    if hex.len() < n * 2 || !hex.is_ascii() {
        return None;
    }
    (0..n)
        .map(|i| u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).ok())
        .collect()
}

// ---------------------------------------------------------------------------------------
// Key messages
// ---------------------------------------------------------------------------------------

/// One QP's connection data (`struct pingpong_dest`), sent as upstream's key message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Dest {
    /// Port LID (16 bits).
    pub lid: u16,
    /// Outstanding reads/atomics this side accepts (printed as 4 hex digits).
    pub out_reads: u32,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Initial PSN (24 bits).
    pub psn: u32,
    /// R_Key of the buffer.
    pub rkey: u32,
    /// Virtual address of the buffer.
    pub vaddr: u64,
    /// SRQ number (XRC/DC only; 0 otherwise).
    pub srqn: u32,
    /// GID, present exactly when a GID index is in use on both sides.
    pub gid: Option<[u8; 16]>,
}

impl Dest {
    /// Encodes the key message: `%04x:%04x:%06x:%06x:%08x:%016llx:%08x` plus NUL
    /// (59 bytes), or with a GID the 16 GID bytes as `%02x:` between VADDR and SRQN and a
    /// trailing `:` (108 bytes).
    pub fn encode(&self) -> Result<Vec<u8>> {
        let too_big = |field: &str, v: u32, max: u32| {
            (v > max).then(|| ExchangeError::Encode {
                what: "key message",
                detail: format!("{field} {v:#x} does not fit upstream's field (max {max:#x})"),
            })
        };
        if let Some(e) = [
            too_big("out_reads", self.out_reads, 0xffff),
            too_big("QPN", self.qpn, 0xff_ffff),
            too_big("PSN", self.psn, 0xff_ffff),
        ]
        .into_iter()
        .flatten()
        .next()
        {
            return Err(e);
        }
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        match self.gid {
            None => s.push_str(&format!("{:08x}", self.srqn)),
            Some(gid) => {
                for b in gid {
                    s.push_str(&format!("{b:02x}:"));
                }
                s.push_str(&format!("{:08x}:", self.srqn));
            }
        }
        let mut out = s.into_bytes();
        out.push(0);
        debug_assert_eq!(out.len(), key_msg_len(self.gid.is_some()));
        Ok(out)
    }

    /// Decodes a key message. `with_gid` is the receiver's own choice: upstream assumes
    /// the peer uses a GID exactly when it does itself.
    pub fn decode(buf: &[u8], with_gid: bool) -> Result<Self> {
        let bad = |detail: String| ExchangeError::Malformed {
            what: "key message",
            detail,
        };
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        let text = std::str::from_utf8(&buf[..end])
            .map_err(|_| bad(format!("not text: {:02x?}", &buf[..end])))?;
        let fields: Vec<&str> = text.split(':').collect();
        let want = if with_gid { 24 } else { 7 };
        if fields.len() < want {
            return Err(bad(format!(
                "{text:?} has {} fields, expected {want}; one side uses a GID (-x) and the other does not",
                fields.len()
            )));
        }
        let hex = |i: usize, name: &str| {
            u64::from_str_radix(fields[i], 16)
                .map_err(|_| bad(format!("{name} {:?} is not hex in {text:?}", fields[i])))
        };
        let narrow = |v: u64, name: &str, max: u64| {
            if v > max {
                Err(bad(format!("{name} {v:#x} out of range in {text:?}")))
            } else {
                Ok(v)
            }
        };
        let mut d = Dest {
            lid: narrow(hex(0, "LID")?, "LID", 0xffff)? as u16,
            out_reads: narrow(hex(1, "OUT_READS")?, "OUT_READS", u64::from(u32::MAX))? as u32,
            qpn: narrow(hex(2, "QPN")?, "QPN", 0xff_ffff)? as u32,
            psn: narrow(hex(3, "PSN")?, "PSN", 0xff_ffff)? as u32,
            rkey: narrow(hex(4, "RKEY")?, "RKEY", u64::from(u32::MAX))? as u32,
            vaddr: hex(5, "VADDR")?,
            srqn: 0,
            gid: None,
        };
        if with_gid {
            let mut gid = [0u8; 16];
            for (k, g) in gid.iter_mut().enumerate() {
                *g = narrow(hex(6 + k, "GID byte")?, "GID byte", 0xff)? as u8;
            }
            d.gid = Some(gid);
            d.srqn = narrow(hex(22, "SRQN")?, "SRQN", u64::from(u32::MAX))? as u32;
        } else {
            d.srqn = narrow(hex(6, "SRQN")?, "SRQN", u64::from(u32::MAX))? as u32;
        }
        Ok(d)
    }
}

/// Bytes of upstream's `struct pingpong_dest` (perftest 4.5/6.06, x86-64): lid, out_reads,
/// qpn, psn, rkey (ints), 4 bytes of padding, vaddr (u64), gid (16), srqn, gid_index.
pub const DEST_BINARY_LEN: usize = 56;

impl Dest {
    /// The hand shake of an rdma_cm exchange (`rdma_write_keys`): `struct pingpong_dest`
    /// with every integer big-endian (upstream's `HAVE_ENDIAN` build) and the GID raw. The
    /// GID is all zeros when none is in use; the padding and `gid_index` are zero.
    pub fn encode_binary(&self) -> [u8; DEST_BINARY_LEN] {
        let mut b = [0u8; DEST_BINARY_LEN];
        b[0..4].copy_from_slice(&u32::from(self.lid).to_be_bytes());
        b[4..8].copy_from_slice(&self.out_reads.to_be_bytes());
        b[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        b[12..16].copy_from_slice(&self.psn.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        b[32..48].copy_from_slice(&self.gid.unwrap_or([0; 16]));
        b[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        b
    }

    /// Decodes [`Dest::encode_binary`]'s layout as upstream's `rdma_read_keys` does (which
    /// does not read `srqn`: 0 here). `with_gid` is the receiver's own choice, as for the
    /// text message.
    pub fn decode_binary(buf: &[u8], with_gid: bool) -> Result<Self> {
        let b: &[u8; DEST_BINARY_LEN] = buf
            .get(..DEST_BINARY_LEN)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| ExchangeError::Malformed {
                what: "QP keys (rdma_cm hand shake)",
                detail: format!(
                    "{} bytes, struct pingpong_dest has {DEST_BINARY_LEN}",
                    buf.len()
                ),
            })?;
        let be32 = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let mut vaddr = [0u8; 8];
        vaddr.copy_from_slice(&b[24..32]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[32..48]);
        Ok(Dest {
            // Upstream's LID is an int; a port's LID is 16 bits.
            lid: be32(0) as u16,
            out_reads: be32(4),
            qpn: be32(8) & 0xff_ffff,
            psn: be32(12) & 0xff_ffff,
            rkey: be32(16),
            vaddr: u64::from_be_bytes(vaddr),
            srqn: 0,
            gid: with_gid.then_some(gid),
        })
    }
}

/// The key message size for a side with or without a GID.
pub fn key_msg_len(with_gid: bool) -> usize {
    if with_gid {
        KEY_MSG_SIZE_GID
    } else {
        KEY_MSG_SIZE
    }
}

// ---------------------------------------------------------------------------------------
// BW reports
// ---------------------------------------------------------------------------------------

/// What `xchg_bw_reports` carries (`struct bw_report_data`, per-port fields excluded).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct BwReport {
    /// Message size.
    pub size: u64,
    /// Iterations × QPs.
    pub iters: u64,
    /// Peak bandwidth (report units).
    pub bw_peak: f64,
    /// Average bandwidth (report units).
    pub bw_avg: f64,
    /// Message rate in Mpps.
    pub msg_rate: f64,
}

impl BwReport {
    /// The five messages in order: size (8 B), iters (8 or 4 B), peak, avg, rate
    /// (8-byte doubles), all big-endian (`hton_long`, `hton_double`).
    pub fn encode(&self, iters_len: usize) -> Vec<Vec<u8>> {
        let iters = if iters_len == 4 {
            (self.iters as u32).to_be_bytes().to_vec()
        } else {
            self.iters.to_be_bytes().to_vec()
        };
        vec![
            self.size.to_be_bytes().to_vec(),
            iters,
            self.bw_peak.to_bits().to_be_bytes().to_vec(),
            self.bw_avg.to_bits().to_be_bytes().to_vec(),
            self.msg_rate.to_bits().to_be_bytes().to_vec(),
        ]
    }

    /// Decodes the five messages produced by [`BwReport::encode`].
    pub fn decode(parts: &[Vec<u8>]) -> Result<Self> {
        let bad = |detail: String| ExchangeError::Malformed {
            what: "BW report",
            detail,
        };
        if parts.len() != 5 {
            return Err(bad(format!("expected 5 parts, got {}", parts.len())));
        }
        let u64_of = |b: &[u8]| -> Result<u64> {
            match b.len() {
                8 => Ok(u64::from_be_bytes(
                    b.try_into().map_err(|_| bad("size".into()))?,
                )),
                4 => Ok(u64::from(u32::from_be_bytes(
                    b.try_into().map_err(|_| bad("size".into()))?,
                ))),
                n => Err(bad(format!("field of {n} bytes"))),
            }
        };
        let f = |b: &[u8]| -> Result<f64> {
            let a: [u8; 8] = b
                .try_into()
                .map_err(|_| bad(format!("double of {} bytes", b.len())))?;
            Ok(f64::from_bits(u64::from_be_bytes(a)))
        };
        Ok(BwReport {
            size: u64_of(&parts[0])?,
            iters: u64_of(&parts[1])?,
            bw_peak: f(&parts[2])?,
            bw_avg: f(&parts[3])?,
            msg_rate: f(&parts[4])?,
        })
    }
}

// ---------------------------------------------------------------------------------------
// The connection
// ---------------------------------------------------------------------------------------

/// The server's listening socket, before a client arrives.
pub struct ExchangeListener {
    listener: TcpListener,
    addr: SocketAddr,
}

impl ExchangeListener {
    /// Binds like upstream (`SO_REUSEADDR` is std's default on Unix). Use
    /// `0.0.0.0:<-p port>` for the real tool.
    pub fn bind(addr: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind(addr).map_err(|source| ExchangeError::Bind {
            addr: addr.to_string(),
            source,
        })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ExchangeError::Bind {
                addr: addr.to_string(),
                source,
            })?;
        Ok(ExchangeListener { listener, addr })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Accepts one client. `accept_timeout` `None` waits forever as upstream does; every
    /// later read times out after `io_timeout`. The listening socket is closed afterwards.
    pub fn accept(
        self,
        accept_timeout: Option<Duration>,
        io_timeout: Duration,
    ) -> Result<Exchange> {
        let io = |source| ExchangeError::Io {
            what: "accept",
            peer: self.addr,
            source,
        };
        let (stream, peer) = match accept_timeout {
            None => self.listener.accept().map_err(io)?,
            Some(limit) => crate::oob::accept_within(&self.listener, limit)
                .map_err(io)?
                .ok_or(ExchangeError::AcceptTimeout {
                    addr: self.addr,
                    secs: limit.as_secs(),
                })?,
        };
        Exchange::from_stream(stream, peer, Role::Server, io_timeout)
    }
}

/// A connection that carries messages rather than a byte stream: each [`send`] is one
/// message the peer takes with one [`recv`]. perftest's rdma_cm exchange is one: SENDs over
/// an RC QP that rdma_cm connected (`ctx_xchg_data_rdma`).
///
/// [`send`]: MessageCarrier::send
/// [`recv`]: MessageCarrier::recv
pub trait MessageCarrier {
    /// Sends `data` as one message and waits until the peer has it.
    fn send(&mut self, data: &[u8]) -> io::Result<()>;
    /// Takes the next message: its first `len` bytes. `TimedOut` when none came in time,
    /// `ConnectionReset` when the connection broke.
    fn recv(&mut self, len: usize) -> io::Result<Vec<u8>>;
}

enum Carrier {
    Tcp(TcpStream),
    Messages(Box<dyn MessageCarrier>),
}

/// An established out-of-band connection.
pub struct Exchange {
    carrier: Carrier,
    peer: SocketAddr,
    role: Role,
    timeout: Duration,
}

impl Exchange {
    fn from_stream(
        stream: TcpStream,
        peer: SocketAddr,
        role: Role,
        timeout: Duration,
    ) -> Result<Self> {
        let io = |source| ExchangeError::Io {
            what: "socket setup",
            peer,
            source,
        };
        stream.set_nonblocking(false).map_err(io)?;
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        // Small fixed messages, each awaited by the peer: send them at once.
        stream.set_nodelay(true).map_err(io)?;
        Ok(Exchange {
            carrier: Carrier::Tcp(stream),
            peer,
            role,
            timeout,
        })
    }

    /// The exchange over a message carrier (`-R`: a QP rdma_cm connected to `peer`);
    /// `timeout` is what the carrier's waits are bounded by, for the messages.
    pub fn over_messages(
        carrier: Box<dyn MessageCarrier>,
        peer: SocketAddr,
        role: Role,
        timeout: Duration,
    ) -> Self {
        Exchange {
            carrier: Carrier::Messages(carrier),
            peer,
            role,
            timeout,
        }
    }

    /// Whether the exchange runs over rdma_cm's QP.
    pub fn is_rdma_cm(&self) -> bool {
        matches!(self.carrier, Carrier::Messages(_))
    }

    /// Waits until the peer closes the connection: how a side with nothing to do outlives a
    /// peer that runs until it is stopped. There is no time limit on a peer that runs, but a
    /// peer that vanishes (its host down, no FIN) is noticed by TCP keepalive within about
    /// 10 s (5 s idle, then 5 probes a second apart) and ends the wait as a close would.
    pub fn wait_closed(&mut self) -> Result<()> {
        use rustix::net::sockopt;
        use std::io::Read;
        let peer = self.peer;
        let io = |source: std::io::Error| ExchangeError::Io {
            what: "waiting for the peer to finish",
            peer,
            source,
        };
        let Carrier::Tcp(stream) = &mut self.carrier else {
            return Err(io(io::Error::new(
                io::ErrorKind::Unsupported,
                "an rdma_cm exchange cannot wait for the peer to go",
            )));
        };
        sockopt::set_socket_keepalive(&*stream, true).map_err(|e| io(e.into()))?;
        sockopt::set_tcp_keepidle(&*stream, Duration::from_secs(5)).map_err(|e| io(e.into()))?;
        sockopt::set_tcp_keepintvl(&*stream, Duration::from_secs(1)).map_err(|e| io(e.into()))?;
        sockopt::set_tcp_keepcnt(&*stream, 5).map_err(|e| io(e.into()))?;
        stream.set_read_timeout(None).map_err(io)?;
        let mut buf = [0u8; 256];
        loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => return Ok(()),
                Ok(_) => {}
            }
        }
    }

    /// Connects to `host:port`, retrying until `timeout` passes (the server may not be
    /// listening yet). Every later read also times out after `timeout`.
    pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<Self> {
        let target = format!("{host}:{port}");
        let resolve = || {
            target
                .to_socket_addrs()
                .map(Iterator::collect)
                .map_err(|e| format!("cannot resolve {host:?}: {e}"))
        };
        match crate::oob::connect_retrying(resolve, timeout) {
            Ok((s, addr)) => Self::from_stream(s, addr, Role::Client, timeout),
            Err(last) => Err(ExchangeError::Connect {
                addr: target,
                secs: timeout.as_secs(),
                last,
            }),
        }
    }

    /// Our role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn write_msg(&mut self, what: &'static str, data: &[u8]) -> Result<()> {
        let r = match &mut self.carrier {
            Carrier::Tcp(s) => s.write_all(data),
            Carrier::Messages(m) => m.send(data),
        };
        r.map_err(|e| self.map_err(what, e))
    }

    fn read_msg(&mut self, what: &'static str, len: usize) -> Result<Vec<u8>> {
        let r = match &mut self.carrier {
            Carrier::Tcp(s) => {
                let mut buf = vec![0u8; len];
                s.read_exact(&mut buf).map(|()| buf)
            }
            Carrier::Messages(m) => m.recv(len),
        };
        r.map_err(|e| self.map_err(what, e))
    }

    fn map_err(&self, what: &'static str, e: io::Error) -> ExchangeError {
        let peer_role = self.role.peer_name();
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ExchangeError::Timeout {
                what,
                peer_role,
                peer: self.peer,
                secs: self.timeout.as_secs(),
            },
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe => ExchangeError::Closed {
                what,
                peer_role,
                peer: self.peer,
            },
            _ => ExchangeError::Io {
                what,
                peer: self.peer,
                source: e,
            },
        }
    }

    /// One symmetric exchange (`ctx_xchg_data_ethernet`): the client writes then reads,
    /// the server reads then writes. `their_len` bytes are read.
    pub fn xchg(&mut self, what: &'static str, mine: &[u8], their_len: usize) -> Result<Vec<u8>> {
        match self.role {
            Role::Client => {
                self.write_msg(what, mine)?;
                self.read_msg(what, their_len)
            }
            Role::Server => {
                let theirs = self.read_msg(what, their_len)?;
                self.write_msg(what, mine)?;
                Ok(theirs)
            }
        }
    }

    /// `exchange_versions`: swaps the 16-byte version buffers.
    pub fn exchange_versions(&mut self, local: &str) -> Result<PeerVersion> {
        let mine = encode_version(local)?;
        let theirs = self.xchg("version string", &mine, VERSION_LEN)?;
        decode_version(&theirs)
    }

    /// `check_sys_data`: for peers >= 5.32 swaps page size and cache line size (two
    /// 4-byte big-endian ints) and returns the maxima; otherwise returns `local`.
    pub fn exchange_sys_data(&mut self, remote: &PeerVersion, local: SysData) -> Result<SysData> {
        if !remote.has_sys_data() {
            return Ok(local);
        }
        let cb = self.xchg(
            "page size (system data)",
            &encode_i32(local.cycle_buffer),
            4,
        )?;
        let cl = self.xchg(
            "cache line size (system data)",
            &encode_i32(local.cache_line_size),
            4,
        )?;
        Ok(SysData {
            cycle_buffer: local.cycle_buffer.max(decode_i32("page size", &cb)?),
            cache_line_size: local
                .cache_line_size
                .max(decode_i32("cache line size", &cl)?),
        })
    }

    /// `check_mtu`: swaps the MTU enum (peers >= 5.1) and returns the effective enum value.
    pub fn exchange_mtu(&mut self, remote: &PeerVersion, local_mtu_enum: u8) -> Result<u8> {
        if !remote.has_mtu_exchange() {
            return Ok(local_mtu_enum);
        }
        let len = remote.mtu_msg_len();
        let theirs = self.xchg("MTU", &encode_mtu(local_mtu_enum, len), len)?;
        Ok(effective_mtu(local_mtu_enum, decode_mtu(&theirs)))
    }

    /// `negotiate_params`: exchanges the parameter block in the format both sides pick
    /// and compares it. Returns the peer's `max_qp_rd_atom` when it sent one (the caller
    /// clips `-o` to it: " out_reads is greater than remote max_qp_rd_atom...").
    pub fn negotiate(
        &mut self,
        format: Negotiation,
        local: &NegotiateParams,
    ) -> Result<Option<i32>> {
        match format {
            Negotiation::None => Ok(None),
            Negotiation::Legacy => {
                let theirs = self.xchg(
                    "parameter negotiation block",
                    &local.encode_legacy(),
                    LEGACY_NEGOTIATE_LEN,
                )?;
                let remote = NegotiateParams::decode_legacy(&theirs)?;
                local.compare(&remote, format, LEGACY_NAMES)?;
                Ok(Some(remote.max_qp_rd_atom))
            }
            Negotiation::KeyValue => {
                let v = self.xchg(
                    "negotiation version",
                    &encode_i32(KV_NEGOTIATION_VERSION),
                    4,
                )?;
                let remote_version = decode_i32("negotiation version", &v)?;
                if remote_version != KV_NEGOTIATION_VERSION {
                    // Upstream skips the negotiation on a version mismatch.
                    return Ok(None);
                }
                let text = local.encode_kv();
                let len = u32::try_from(text.len()).map_err(|_| ExchangeError::Encode {
                    what: "negotiation string",
                    detail: "longer than 4 GiB".into(),
                })?;
                let rl = self.xchg("negotiation string length", &len.to_be_bytes(), 4)?;
                let remote_len = decode_i32("negotiation string length", &rl)? as u32 as usize;
                // Real peers send about 600 bytes; refuse absurd sizes instead of allocating.
                if remote_len > 1 << 20 {
                    return Err(ExchangeError::Malformed {
                        what: "negotiation string length",
                        detail: format!("{remote_len} bytes is not a perftest negotiation"),
                    });
                }
                let theirs = self.xchg("negotiation string", text.as_bytes(), remote_len)?;
                let remote_text = String::from_utf8_lossy(&theirs);
                let (remote, received) = NegotiateParams::decode_kv(&remote_text);
                local.compare(&remote, format, &received)?;
                Ok(received
                    .contains(&"max_qp_rd_atom")
                    .then_some(remote.max_qp_rd_atom))
            }
        }
    }

    /// `ctx_hand_shake`: swaps key messages. Also used as a barrier (resending QP 0's).
    pub fn hand_shake(&mut self, mine: &Dest) -> Result<Dest> {
        let with_gid = mine.gid.is_some();
        if self.is_rdma_cm() {
            let what = "QP keys (rdma_cm hand shake)";
            let theirs = self.xchg(what, &mine.encode_binary(), DEST_BINARY_LEN)?;
            return Dest::decode_binary(&theirs, with_gid);
        }
        let msg = mine.encode()?;
        let theirs = self.xchg("QP key message (hand shake)", &msg, key_msg_len(with_gid))?;
        Dest::decode(&theirs, with_gid)
    }

    /// `xchg_bw_reports`: five symmetric exchanges; returns the peer's report.
    pub fn exchange_bw_reports(
        &mut self,
        remote: &PeerVersion,
        mine: &BwReport,
    ) -> Result<BwReport> {
        let iters_len = remote.bw_iters_len();
        let parts = mine.encode(iters_len);
        let names: [&'static str; 5] = [
            "BW report (size)",
            "BW report (iterations)",
            "BW report (peak)",
            "BW report (average)",
            "BW report (message rate)",
        ];
        let mut theirs = Vec::with_capacity(5);
        for (part, what) in parts.iter().zip(names) {
            theirs.push(self.xchg(what, part, part.len())?);
        }
        BwReport::decode(&theirs)
    }

    /// `ctx_close_connection`: a last hand shake, then (over TCP) `"done"` with its NUL
    /// (which no peer reads; upstream writes it), then the socket closes. An rdma_cm
    /// exchange ends with the hand shake; its connection is the caller's to tear down.
    pub fn close(mut self, mine: &Dest) -> Result<()> {
        self.hand_shake(mine)?;
        if let Carrier::Tcp(stream) = &mut self.carrier {
            // The peer may be gone already: it has what it needs.
            let _ = std::io::Write::write_all(stream, b"done\0");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV4};

    fn dest(gid: bool) -> Dest {
        Dest {
            lid: 0x0001,
            out_reads: 0x10,
            qpn: 0x48,
            psn: 0x9f7e92,
            rkey: 0x1234abcd,
            vaddr: 0x7f00_dead_beef,
            srqn: 0,
            gid: gid.then_some([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 1]),
        }
    }

    #[test]
    fn key_message_without_gid_is_59_bytes() {
        let m = dest(false).encode().unwrap();
        assert_eq!(m.len(), KEY_MSG_SIZE);
        assert_eq!(
            &m[..58],
            b"0001:0010:000048:9f7e92:1234abcd:00007f00deadbeef:00000000"
        );
        assert_eq!(m[58], 0);
        assert_eq!(Dest::decode(&m, false).unwrap(), dest(false));
    }

    #[test]
    fn key_message_with_gid_is_108_bytes() {
        let m = dest(true).encode().unwrap();
        assert_eq!(m.len(), KEY_MSG_SIZE_GID);
        let text = std::str::from_utf8(&m[..107]).unwrap();
        assert_eq!(
            text,
            "0001:0010:000048:9f7e92:1234abcd:00007f00deadbeef:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:01:00000000:"
        );
        assert_eq!(Dest::decode(&m, true).unwrap(), dest(true));
    }

    #[test]
    fn key_message_errors() {
        let m = dest(false).encode().unwrap();
        let e = Dest::decode(&m, true).unwrap_err().to_string();
        assert!(e.contains("GID"), "{e}");
        assert!(Dest::decode(b"zz:0:0:0:0:0:0\0", false).is_err());
        assert!(Dest {
            qpn: 0x100_0000,
            ..dest(false)
        }
        .encode()
        .is_err());
        assert!(Dest::decode(&[0xff; 59], false).is_err());
    }

    #[test]
    fn versions() {
        let v = encode_version("6.29").unwrap();
        assert_eq!(&v[..5], b"6.29\0");
        assert_eq!(v.len(), 16);
        let p = decode_version(&v).unwrap();
        assert_eq!((p.text.as_str(), p.value), ("6.29", 6.29));
        assert!(encode_version("0123456789abcdef").is_err());
        let old = PeerVersion::new("5.30");
        assert!(!old.has_sys_data() && old.has_mtu_exchange());
        assert_eq!((old.mtu_msg_len(), old.bw_iters_len()), (4, 4));
        let new = PeerVersion::new("6.29");
        assert_eq!((new.mtu_msg_len(), new.bw_iters_len()), (2, 8));
        assert!(PeerVersion::new("4.5").upstream_rejects());
        assert!(
            !PeerVersion::new("5.1").has_mtu_exchange(),
            "float compare quirk"
        );
        assert_eq!(atof("6.30-1"), 6.3);
        assert_eq!(atof("x"), 0.0);
        let l = PeerVersion::new(SOFTIB_PERFTEST_VERSION);
        assert_eq!(
            Negotiation::between(&l, &PeerVersion::new("6.31")),
            Negotiation::Legacy
        );
        assert_eq!(
            Negotiation::between(&l, &PeerVersion::new("6.10")),
            Negotiation::None
        );
        assert_eq!(
            Negotiation::between(&PeerVersion::new("6.30"), &PeerVersion::new("6.31")),
            Negotiation::KeyValue
        );
    }

    #[test]
    fn mtu_messages() {
        assert_eq!(encode_mtu(5, 2), b"5\0");
        assert_eq!(encode_mtu(3, 4), b"3\0\0\0");
        assert_eq!(decode_mtu(b"4\0"), Some(4));
        assert_eq!(decode_mtu(b"\0\0"), None);
        assert_eq!(effective_mtu(5, Some(3)), 3);
        assert_eq!(effective_mtu(3, Some(5)), 3);
        assert_eq!(effective_mtu(3, Some(9)), 3);
        assert_eq!((mtu_enum(4096), mtu_bytes(3)), (Some(5), Some(1024)));
    }

    fn params() -> NegotiateParams {
        let argv = ["ib_write_bw", "-n", "100", "host"];
        let a = match PerftestArgs::parse_from(Test::Write, Mode::Bw, argv).unwrap() {
            crate::args::Parsed::Run(a) => *a,
            _ => unreachable!(),
        };
        NegotiateParams::from_args(&a, Negotiation::Legacy, 16)
    }

    #[test]
    fn legacy_block_layout() {
        let b = params().encode_legacy();
        assert_eq!(b.len(), 312);
        assert_eq!(&b[0..4], &[0, 0, 0, 0], "RUN_REGULAR");
        assert_eq!(&b[8..12], &[0, 0, 0, 1], "WRITE is 1 up to 6.29");
        assert_eq!(&b[12..16], &[0, 0, 0, 1], "BW");
        assert_eq!(&b[16..20], &[0, 0, 0, 1], "FETCH_AND_ADD");
        assert_eq!(&b[24..28], &[0, 0, 0, 1], "MBS");
        assert_eq!(&b[32..40], &65536u64.to_be_bytes());
        assert_eq!(&b[40..48], &100u64.to_be_bytes());
        assert_eq!(&b[52..56], &[0, 0, 0, 1], "one QP");
        assert_eq!(&b[56..60], &[0, 0, 0, 5], "default duration");
        assert_eq!(&b[224..228], &[16, 0, 0, 0], "max_qp_rd_atom, host endian");
        let back = NegotiateParams::decode_legacy(&b).unwrap();
        assert_eq!(
            back,
            NegotiateParams {
                tx_depth: 0,
                duplex: 0,
                ..params()
            }
        );
    }

    #[test]
    fn kv_string() {
        let p = NegotiateParams {
            verb: verb_code(Test::Write, Negotiation::KeyValue),
            ..params()
        };
        let s = p.encode_kv();
        assert!(s.starts_with(
            "test_method=00000000;connection_type=00000000;verb=00000002;tst=00000001;"
        ));
        assert!(s.contains(";size=0000000000010000;iters=0000000000000064;"));
        assert!(s.ends_with(";tx_depth=00000064;max_qp_rd_atom=00000010;"));
        let (back, received) = NegotiateParams::decode_kv(&format!("{s}unknown=00;"));
        assert_eq!(back, p);
        assert_eq!(received.len(), 20);
        let (_, partial) = NegotiateParams::decode_kv("size=00;iters=zz;tst=00000001");
        assert_eq!(partial, vec!["tst"]);
    }

    #[test]
    fn negotiation_mismatch_is_named() {
        let a = params();
        let b = NegotiateParams {
            iters: 200,
            ..params()
        };
        let e = a
            .compare(&b, Negotiation::Legacy, LEGACY_NAMES)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(" iters mismatch: local=100, remote=200"),
            "{e}"
        );
        let c = NegotiateParams {
            connection_type: 1,
            ..params()
        };
        let e = a
            .compare(&c, Negotiation::Legacy, LEGACY_NAMES)
            .unwrap_err()
            .to_string();
        assert!(e.contains("local=RC, remote=UC"), "{e}");
        let d = NegotiateParams {
            tx_depth: 7,
            ..params()
        };
        assert!(
            a.compare(&d, Negotiation::Legacy, LEGACY_NAMES).is_ok(),
            "legacy has no tx_depth"
        );
    }

    #[test]
    fn bw_report_bytes() {
        let r = BwReport {
            size: 65536,
            iters: 100,
            bw_peak: 1.5,
            bw_avg: 2.0,
            msg_rate: 0.25,
        };
        let parts = r.encode(8);
        assert_eq!(parts[0], 65536u64.to_be_bytes());
        assert_eq!(parts[1], 100u64.to_be_bytes());
        assert_eq!(parts[2], [0x3f, 0xf8, 0, 0, 0, 0, 0, 0]);
        assert_eq!(BwReport::decode(&parts).unwrap(), r);
        let old = r.encode(4);
        assert_eq!(old[1], [0, 0, 0, 100]);
        assert_eq!(BwReport::decode(&old).unwrap(), r);
    }

    /// One direction of an in-memory message carrier pair: every send is one message.
    struct Pipe {
        tx: std::sync::mpsc::Sender<Vec<u8>>,
        rx: std::sync::mpsc::Receiver<Vec<u8>>,
        sent: std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
    }

    impl MessageCarrier for Pipe {
        fn send(&mut self, data: &[u8]) -> io::Result<()> {
            self.sent.lock().unwrap().push(data.len());
            self.tx
                .send(data.to_vec())
                .map_err(|_| io::Error::from(io::ErrorKind::ConnectionReset))
        }
        fn recv(&mut self, len: usize) -> io::Result<Vec<u8>> {
            match self.rx.recv_timeout(Duration::from_secs(5)) {
                Ok(m) if m.len() >= len => Ok(m[..len].to_vec()),
                Ok(m) => Err(io::Error::other(format!("{} bytes, not {len}", m.len()))),
                Err(_) => Err(io::Error::from(io::ErrorKind::TimedOut)),
            }
        }
    }

    fn pipes() -> (Pipe, Pipe, std::sync::Arc<std::sync::Mutex<Vec<usize>>>) {
        let (a_tx, b_rx) = std::sync::mpsc::channel();
        let (b_tx, a_rx) = std::sync::mpsc::channel();
        let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let a = Pipe {
            tx: a_tx,
            rx: a_rx,
            sent: sent.clone(),
        };
        let b = Pipe {
            tx: b_tx,
            rx: b_rx,
            sent: std::sync::Arc::new(std::sync::Mutex::new(Vec::new())),
        };
        (a, b, sent)
    }

    #[test]
    fn binary_keys_are_pingpong_dest_big_endian() {
        let d = dest(true);
        let b = d.encode_binary();
        assert_eq!(&b[0..4], &[0, 0, 0, 1]);
        assert_eq!(&b[8..12], &[0, 0, 0, 0x48]);
        assert_eq!(&b[12..16], &[0, 0x9f, 0x7e, 0x92]);
        assert_eq!(&b[16..20], &[0x12, 0x34, 0xab, 0xcd]);
        assert_eq!(&b[20..24], &[0; 4], "padding");
        assert_eq!(&b[24..32], &0x7f00_dead_beefu64.to_be_bytes());
        assert_eq!(&b[32..48], &d.gid.unwrap());
        assert_eq!(Dest::decode_binary(&b, true).unwrap(), d);
        let no_gid = Dest::decode_binary(&dest(false).encode_binary(), false).unwrap();
        assert_eq!(no_gid, dest(false));
        let e = Dest::decode_binary(&b[..40], true).unwrap_err().to_string();
        assert!(e.contains("40 bytes") && e.contains("56"), "{e}");
    }

    /// Over rdma_cm's QP every exchange is one message each way, the hand shake is the
    /// binary `struct pingpong_dest`, and closing sends no "done".
    #[test]
    fn an_exchange_over_messages_sends_one_message_per_write() {
        let (a, b, client_sent) = pipes();
        let peer = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 18515));
        let t = Duration::from_secs(5);
        let server = std::thread::spawn(move || {
            let mut x = Exchange::over_messages(Box::new(b), peer, Role::Server, t);
            assert!(x.is_rdma_cm());
            let v = x.exchange_versions("6.06").unwrap();
            let sys = x.exchange_sys_data(&v, SysData::default()).unwrap();
            let mtu = x.exchange_mtu(&v, 3).unwrap();
            let rem = x.hand_shake(&dest(true)).unwrap();
            x.close(&dest(true)).unwrap();
            (v, sys, mtu, rem)
        });
        let mut c = Exchange::over_messages(Box::new(a), peer, Role::Client, t);
        let v = c.exchange_versions("6.29").unwrap();
        c.exchange_sys_data(&v, SysData::default()).unwrap();
        assert_eq!(c.exchange_mtu(&v, 5).unwrap(), 3);
        let d = Dest {
            psn: 0x1234,
            ..dest(true)
        };
        assert_eq!(c.hand_shake(&d).unwrap(), dest(true));
        c.close(&d).unwrap();
        let (sv, _, smtu, srem) = server.join().unwrap();
        assert_eq!((sv.text.as_str(), v.text.as_str()), ("6.29", "6.06"));
        assert_eq!(smtu, 3);
        assert_eq!(srem, d);
        // version, page size, cache line, MTU, two hand shakes.
        assert_eq!(*client_sent.lock().unwrap(), [16, 4, 4, 2, 56, 56]);
        let mut x = Exchange::over_messages(Box::new(pipes().0), peer, Role::Client, t);
        assert!(x.wait_closed().is_err());
    }

    #[test]
    fn client_server_over_loopback() {
        let listener =
            ExchangeListener::bind(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)))
                .unwrap();
        let port = listener.local_addr().port();
        let t = Duration::from_secs(5);
        let server = std::thread::spawn(move || {
            let mut x = listener.accept(Some(t), t).unwrap();
            assert_eq!(x.role(), Role::Server);
            let v = x.exchange_versions("6.29").unwrap();
            let sys = x
                .exchange_sys_data(
                    &v,
                    SysData {
                        cycle_buffer: 4096,
                        cache_line_size: 128,
                    },
                )
                .unwrap();
            let mtu = x.exchange_mtu(&v, 3).unwrap();
            let fmt = Negotiation::between(&PeerVersion::new("6.29"), &v);
            let rd = x.negotiate(fmt, &params()).unwrap();
            let rem = x.hand_shake(&dest(true)).unwrap();
            let rep = x.exchange_bw_reports(&v, &BwReport::default()).unwrap();
            x.close(&dest(true)).unwrap();
            (v, sys, mtu, rd, rem, rep)
        });
        let mut c = Exchange::connect("127.0.0.1", port, t).unwrap();
        let v = c.exchange_versions("6.29").unwrap();
        let sys = c
            .exchange_sys_data(
                &v,
                SysData {
                    cycle_buffer: 65536,
                    cache_line_size: 64,
                },
            )
            .unwrap();
        let mtu = c.exchange_mtu(&v, 5).unwrap();
        let rd = c
            .negotiate(
                Negotiation::Legacy,
                &NegotiateParams {
                    max_qp_rd_atom: 8,
                    ..params()
                },
            )
            .unwrap();
        let d = Dest {
            psn: 0x52d4c,
            ..dest(true)
        };
        let rem = c.hand_shake(&d).unwrap();
        let mine = BwReport {
            size: 65536,
            iters: 100,
            bw_peak: 26.86,
            bw_avg: 25.56,
            msg_rate: 0.000409,
        };
        let rep = c.exchange_bw_reports(&v, &mine).unwrap();
        c.close(&d).unwrap();
        let (sv, ssys, smtu, srd, srem, srep) = server.join().unwrap();
        assert_eq!(v.text, "6.29");
        assert_eq!(sv.text, "6.29");
        assert_eq!(
            sys,
            SysData {
                cycle_buffer: 65536,
                cache_line_size: 128
            }
        );
        assert_eq!(ssys, sys);
        assert_eq!((mtu, smtu), (3, 3));
        assert_eq!((rd, srd), (Some(16), Some(8)));
        assert_eq!(rem, dest(true));
        assert_eq!(srem, d);
        assert_eq!(srep, mine);
        assert_eq!(rep, BwReport::default());
    }

    #[test]
    fn read_timeout_names_message_and_peer() {
        let listener =
            ExchangeListener::bind(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)))
                .unwrap();
        let port = listener.local_addr().port();
        let t = Duration::from_millis(200);
        let server = std::thread::spawn(move || {
            let mut x = listener.accept(Some(Duration::from_secs(5)), t).unwrap();
            x.exchange_versions("6.29").unwrap_err()
        });
        // A client that connects and says nothing.
        let c = Exchange::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        let e = server.join().unwrap().to_string();
        assert!(
            e.contains("version string") && e.contains("from the client"),
            "{e}"
        );
        drop(c);
    }

    #[test]
    fn connect_gives_up_after_timeout() {
        // Bind then drop to get a port nobody listens on.
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let e = Exchange::connect("127.0.0.1", port, Duration::from_millis(300))
            .err()
            .unwrap();
        assert!(e.to_string().contains("could not connect"), "{e}");
    }

    #[test]
    fn closed_peer_is_reported() {
        let listener =
            ExchangeListener::bind(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)))
                .unwrap();
        let port = listener.local_addr().port();
        let server = std::thread::spawn(move || {
            let x = listener.accept(None, Duration::from_secs(5)).unwrap();
            drop(x);
        });
        let mut c = Exchange::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        server.join().unwrap();
        let e = c.hand_shake(&dest(false)).unwrap_err().to_string();
        assert!(e.contains("server") && e.contains("key message"), "{e}");
    }
}
