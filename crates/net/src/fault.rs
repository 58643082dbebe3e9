//! Live fault injection on a port's egress: loss, duplication, reordering, delay and
//! corruption of the frames a link sends (`softib link set DEV fault ...`).
//!
//! The deterministic simulator (`softib-sim`) is where protocol behaviour under faults is
//! proven; this is for people: watch RC recover on a real daemon, see a UD benchmark count its
//! drops, rehearse a flaky cable. Random choices come from a seeded generator so a run can be
//! repeated.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

/// The longest delay a port may add (what `delay` accepts: under 60,000 s).
pub const MAX_DELAY: Duration = Duration::from_secs(60_000);

/// What to do to a port's outgoing frames. Probabilities are in [0, 1], the delay at most
/// [`MAX_DELAY`]; deserializing checks both ([`FaultSpec::validate`]), so a spec that
/// arrives on the control socket is as sane as one [`FaultSpec::parse`] made.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "FaultSpecFields")]
pub struct FaultSpec {
    /// Drop a frame.
    pub loss: f64,
    /// Send a frame twice.
    pub dup: f64,
    /// Hold a frame back and send it after the next one.
    pub reorder: f64,
    /// Flip one bit of a frame (the receiver's CRC check catches it).
    pub corrupt: f64,
    /// Delay every frame by this much (order kept).
    pub delay: Duration,
    /// The seed of the random choices.
    pub seed: u64,
}

/// [`FaultSpec`]'s fields as they travel, before [`FaultSpec::validate`].
#[derive(serde::Deserialize)]
struct FaultSpecFields {
    loss: f64,
    dup: f64,
    reorder: f64,
    corrupt: f64,
    delay: Duration,
    seed: u64,
}

impl TryFrom<FaultSpecFields> for FaultSpec {
    type Error = String;
    fn try_from(f: FaultSpecFields) -> Result<FaultSpec, String> {
        let spec = FaultSpec {
            loss: f.loss,
            dup: f.dup,
            reorder: f.reorder,
            corrupt: f.corrupt,
            delay: f.delay,
            seed: f.seed,
        };
        spec.validate()?;
        Ok(spec)
    }
}

impl FaultSpec {
    /// Checks that every probability is in [0, 1] (not NaN) and the delay at most
    /// [`MAX_DELAY`]; the error names the first field that is not.
    pub fn validate(&self) -> Result<(), String> {
        for (name, p) in [
            ("loss", self.loss),
            ("dup", self.dup),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{name} {p}: a probability must be in [0, 1]"));
            }
        }
        if self.delay > MAX_DELAY {
            return Err(format!(
                "delay {:?}: at most {} s",
                self.delay,
                MAX_DELAY.as_secs()
            ));
        }
        Ok(())
    }

    /// Whether the spec changes nothing.
    pub fn is_none(&self) -> bool {
        self.loss == 0.0
            && self.dup == 0.0
            && self.reorder == 0.0
            && self.corrupt == 0.0
            && self.delay.is_zero()
    }

    /// Parses `loss 1% dup 0.5% reorder 1% corrupt 0.1% delay 5ms seed 7`, or the same as
    /// `loss=1%,dup=0.005,delay=500` (any subset, any order; a probability is a percentage or
    /// a fraction; a delay without a unit is in microseconds; `none` or `off` clears). Errors
    /// name the word that is wrong.
    pub fn parse<S: AsRef<str>>(words: &[S]) -> Result<FaultSpec, String> {
        let mut spec = FaultSpec::default();
        let tokens: Vec<&str> = words
            .iter()
            .flat_map(|w| w.as_ref().split(','))
            .flat_map(|w| w.splitn(2, '='))
            .filter(|t| !t.is_empty())
            .collect();
        let mut it = tokens.into_iter();
        while let Some(key) = it.next() {
            if key == "none" || key == "off" {
                spec = FaultSpec::default();
                continue;
            }
            let value = it
                .next()
                .ok_or_else(|| format!("fault {key} needs a value (e.g. {key} 1%)"))?;
            match key {
                "loss" => spec.loss = probability(key, value)?,
                "dup" | "duplicate" => spec.dup = probability(key, value)?,
                "reorder" => spec.reorder = probability(key, value)?,
                "corrupt" => spec.corrupt = probability(key, value)?,
                "delay" => spec.delay = duration(value)?,
                "seed" => {
                    spec.seed = value
                        .parse()
                        .map_err(|_| format!("seed {value}: expected an integer"))?
                }
                other => {
                    return Err(format!(
                    "unknown fault {other} (loss, dup, reorder, corrupt, delay, seed, none or off)"
                ))
                }
            }
        }
        Ok(spec)
    }
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_none() {
            return f.write_str("none");
        }
        let mut sep = "";
        for (name, p) in [
            ("loss", self.loss),
            ("dup", self.dup),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
        ] {
            if p > 0.0 {
                write!(f, "{sep}{name} {}%", p * 100.0)?;
                sep = " ";
            }
        }
        if !self.delay.is_zero() {
            write!(f, "{sep}delay {}ms", self.delay.as_secs_f64() * 1000.0)?;
        }
        Ok(())
    }
}

fn probability(key: &str, v: &str) -> Result<f64, String> {
    let (num, scale) = match v.strip_suffix('%') {
        Some(n) => (n, 0.01),
        None => (v, 1.0),
    };
    let p = num
        .parse::<f64>()
        .ok()
        .map(|x| x * scale)
        .filter(|x| (0.0..=1.0).contains(x))
        .ok_or_else(|| format!("{key} {v}: expected a probability like 1% or 0.01"))?;
    Ok(p)
}

fn duration(v: &str) -> Result<Duration, String> {
    let (num, unit) = v
        .find(|c: char| c.is_ascii_alphabetic())
        .map_or((v, "us"), |i| (&v[..i], &v[i..]));
    let n: f64 = num
        .parse()
        .ok()
        .filter(|x: &f64| *x >= 0.0 && *x < 60_000.0)
        .ok_or_else(|| format!("delay {v}: expected a duration like 5ms or 200us"))?;
    let micros = match unit {
        "us" => n,
        "ms" => n * 1e3,
        "s" => n * 1e6,
        _ => return Err(format!("delay {v}: units are us, ms or s")),
    };
    Ok(Duration::from_micros(micros as u64))
}

/// What a port's faults did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FaultStats {
    /// Frames dropped.
    pub lost: u64,
    /// Extra copies sent.
    pub duplicated: u64,
    /// Frames sent after a later one.
    pub reordered: u64,
    /// Frames sent with a flipped bit.
    pub corrupted: u64,
    /// Frames delayed.
    pub delayed: u64,
}

/// The faults of one port. `D` is where a frame goes (a cable has one peer: `()`; a RoCE
/// device names the destination of each datagram).
#[derive(Debug, Clone)]
pub struct Faults<D = ()> {
    spec: FaultSpec,
    rng: u64,
    held: Option<(D, Vec<u8>)>,
    delayed: VecDeque<(Instant, D, Vec<u8>)>,
    stats: FaultStats,
}

impl<D> Default for Faults<D> {
    fn default() -> Faults<D> {
        Faults {
            spec: FaultSpec::default(),
            rng: 0,
            held: None,
            delayed: VecDeque::new(),
            stats: FaultStats::default(),
        }
    }
}

impl<D: Copy> Faults<D> {
    /// Faults per `spec`.
    pub fn new(spec: FaultSpec) -> Faults<D> {
        Faults {
            rng: spec.seed ^ 0x9E37_79B9_7F4A_7C15,
            spec,
            ..Faults::default()
        }
    }

    /// The spec in force.
    pub fn spec(&self) -> FaultSpec {
        self.spec
    }

    /// Whether frames pass untouched: no faults set and none held or delayed.
    pub fn is_idle(&self) -> bool {
        self.spec.is_none() && self.held.is_none() && self.delayed.is_empty()
    }

    /// What the faults did so far.
    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    fn next(&mut self) -> f64 {
        // splitmix64: small, fast, and good enough for fault choices.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Passes `frame` (for `dest`) through the faults; `send` is called for each frame that
    /// goes out now.
    pub fn apply<E>(
        &mut self,
        now: Instant,
        dest: D,
        frame: &[u8],
        mut send: impl FnMut(D, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.spec.is_none() && self.held.is_none() && self.delayed.is_empty() {
            return send(dest, frame);
        }
        if self.next() < self.spec.loss {
            self.stats.lost += 1;
            return Ok(());
        }
        let mut f = frame.to_vec();
        if !f.is_empty() && self.next() < self.spec.corrupt {
            let at = (self.next() * f.len() as f64) as usize % f.len();
            let bit = (self.next() * 8.0) as u32 % 8;
            f[at] ^= 1 << bit;
            self.stats.corrupted += 1;
        }
        let copies = if self.next() < self.spec.dup {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut out = Vec::with_capacity(2);
            if self.held.is_none() && self.next() < self.spec.reorder {
                self.stats.reordered += 1;
                self.held = Some((dest, f.clone()));
                continue;
            }
            out.push((dest, f.clone()));
            if let Some(h) = self.held.take() {
                out.push(h);
            }
            for (d, o) in out {
                // A delay past what the clock can represent (only a spec that skipped
                // `validate` has one) is not applied.
                match now.checked_add(self.spec.delay) {
                    Some(at) if !self.spec.delay.is_zero() => {
                        self.stats.delayed += 1;
                        self.delayed.push_back((at, d, o));
                    }
                    _ => send(d, &o)?,
                }
            }
        }
        Ok(())
    }

    /// Sends the delayed frames whose time has come.
    pub fn poll<E>(
        &mut self,
        now: Instant,
        mut send: impl FnMut(D, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        while self.delayed.front().is_some_and(|(t, _, _)| *t <= now) {
            if let Some((_, d, f)) = self.delayed.pop_front() {
                send(d, &f)?;
            }
        }
        Ok(())
    }

    /// When the next delayed frame is due.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.delayed.front().map(|(t, _, _)| *t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(spec: &str, n: usize) -> (Vec<Vec<u8>>, FaultStats) {
        let words: Vec<&str> = spec.split_whitespace().collect();
        let mut f: Faults = Faults::new(FaultSpec::parse(&words).unwrap());
        let mut out = Vec::new();
        let now = Instant::now();
        for i in 0..n {
            f.apply::<()>(now, (), &[i as u8, 0, 0, 0], |(), b| {
                out.push(b.to_vec());
                Ok(())
            })
            .unwrap();
        }
        f.poll::<()>(now + Duration::from_secs(1), |(), b| {
            out.push(b.to_vec());
            Ok(())
        })
        .unwrap();
        (out, f.stats())
    }

    #[test]
    fn no_faults_pass_everything_in_order() {
        let (out, s) = run("none", 100);
        assert_eq!(out.len(), 100);
        assert!(out.windows(2).all(|w| w[0][0] < w[1][0]));
        assert_eq!(s, FaultStats::default());
    }

    #[test]
    fn each_fault_does_what_it_says_at_about_its_rate() {
        let (out, s) = run("loss 10% seed 3", 2000);
        assert_eq!(out.len() as u64 + s.lost, 2000);
        assert!((120..=280).contains(&s.lost), "{s:?}");
        let (out, s) = run("dup 10%", 2000);
        assert_eq!(out.len() as u64, 2000 + s.duplicated);
        let (out, s) = run("reorder 10%", 2000);
        assert!(s.reordered > 100, "{s:?}");
        assert!(out.windows(2).any(|w| w[0][0] > w[1][0]));
        let (out, s) = run("corrupt 5%", 2000);
        let changed = out
            .iter()
            .filter(|f| f[1..] != [0, 0, 0] || f[0] as usize > 255)
            .count();
        assert!(s.corrupted > 50 && changed as u64 <= s.corrupted, "{s:?}");
        let a = FaultSpec::parse(&["loss=10%,dup=0.1,reorder=10%,delay=500,corrupt=1%"]).unwrap();
        let b = FaultSpec::parse(&["loss", "10%", "dup", "10%", "reorder", "0.1", "corrupt"]).err();
        assert!(b.is_some_and(|e| e.contains("corrupt needs a value")));
        assert_eq!((a.loss, a.dup, a.reorder, a.corrupt), (0.1, 0.1, 0.1, 0.01));
        assert_eq!(a.delay, Duration::from_micros(500));
        assert!(FaultSpec::parse(&["off"]).unwrap().is_none());
        assert!(FaultSpec::parse(&["loss=2", "x"]).is_err());
        let (out, s) = run("delay 5ms", 10);
        assert_eq!((out.len(), s.delayed), (10, 10));
    }

    #[test]
    fn a_delay_past_the_clock_never_panics() {
        // fuzz (control_proto): a SetFaults request with a delay of u64::MAX seconds made
        // `now + delay` overflow the Instant and panic the daemon's loop.
        let spec = FaultSpec {
            delay: Duration::MAX,
            ..FaultSpec::default()
        };
        assert!(spec.validate().unwrap_err().contains("delay"));
        let mut f: Faults = Faults::new(spec);
        let mut out = 0;
        f.apply::<()>(Instant::now(), (), &[1, 2, 3], |(), _| {
            out += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(out, 1, "sent at once, not held forever");
        assert_eq!(f.next_deadline(), None);
    }

    #[test]
    fn validate_refuses_what_parse_would_not_make() {
        assert_eq!(FaultSpec::default().validate(), Ok(()));
        let ok = FaultSpec::parse(&["loss", "100%", "delay", "59999s"]).unwrap();
        assert_eq!(ok.validate(), Ok(()));
        for (name, spec) in [
            (
                "loss",
                FaultSpec {
                    loss: f64::NAN,
                    ..FaultSpec::default()
                },
            ),
            (
                "dup",
                FaultSpec {
                    dup: 1.5,
                    ..FaultSpec::default()
                },
            ),
            (
                "reorder",
                FaultSpec {
                    reorder: -0.1,
                    ..FaultSpec::default()
                },
            ),
            (
                "corrupt",
                FaultSpec {
                    corrupt: f64::INFINITY,
                    ..FaultSpec::default()
                },
            ),
            (
                "delay",
                FaultSpec {
                    delay: MAX_DELAY + Duration::from_nanos(1),
                    ..FaultSpec::default()
                },
            ),
        ] {
            assert!(spec.validate().unwrap_err().starts_with(name), "{name}");
        }
    }

    #[test]
    fn bad_specs_name_the_problem() {
        assert!(FaultSpec::parse(&["loss"])
            .unwrap_err()
            .contains("needs a value"));
        assert!(FaultSpec::parse(&["loss", "150%"])
            .unwrap_err()
            .contains("probability"));
        assert!(FaultSpec::parse(&["jitter", "1ms"])
            .unwrap_err()
            .contains("unknown fault jitter"));
        assert!(FaultSpec::parse(&["delay", "5parsecs"])
            .unwrap_err()
            .contains("units"));
        let s = FaultSpec::parse(&["loss", "1%", "delay", "2ms"]).unwrap();
        assert_eq!(s.to_string(), "loss 1% delay 2ms");
    }
}
