//! Small formatting helpers shared by the tools: C library behaviours (`inet_ntop`, `ctime`)
//! and libibmad's dotted field layout.

use core::fmt::Write as _;

/// `inet_ntop(AF_INET6, ...)` as glibc writes it: lowercase groups without leading zeros, the
/// longest run (at least two) of zero groups as `::` (the first if tied), and the embedded
/// IPv4 form for IPv4-compatible (`::a.b.c.d`) and IPv4-mapped (`::ffff:a.b.c.d`) addresses.
/// `ibaddr`, `saquery` and `ibv_devinfo` (RoCE v2 GIDs) all print GIDs this way.
pub(crate) fn inet_ntop6(raw: &[u8; 16]) -> String {
    let mut words = [0u16; 8];
    for (i, w) in words.iter_mut().enumerate() {
        *w = u16::from_be_bytes([raw[2 * i], raw[2 * i + 1]]);
    }
    // Longest run of zero words; glibc ignores runs of length 1.
    let (mut best_base, mut best_len) = (None::<usize>, 0usize);
    let mut i = 0;
    while i < 8 {
        if words[i] == 0 {
            let start = i;
            while i < 8 && words[i] == 0 {
                i += 1;
            }
            let len = i - start;
            if len > best_len {
                best_base = Some(start);
                best_len = len;
            }
        } else {
            i += 1;
        }
    }
    if best_len < 2 {
        best_base = None;
    }
    let mut out = String::with_capacity(40);
    let mut i = 0;
    while i < 8 {
        if let Some(base) = best_base {
            if i >= base && i < base + best_len {
                if i == base {
                    out.push(':');
                }
                i += 1;
                continue;
            }
        }
        if i != 0 {
            out.push(':');
        }
        // The IPv4 tail, exactly under glibc's condition.
        if i == 6
            && best_base == Some(0)
            && (best_len == 6 || (best_len == 5 && words[5] == 0xffff))
        {
            let _ = write!(out, "{}.{}.{}.{}", raw[12], raw[13], raw[14], raw[15]);
            return out;
        }
        let _ = write!(out, "{:x}", words[i]);
        i += 1;
    }
    if best_base.is_some_and(|b| b + best_len == 8) {
        out.push(':');
    }
    out
}

/// `ctime()` without its trailing newline, in UTC: `Sun Nov 29 23:40:13 2026`. The tools print
/// local time; callers wanting that pass their own text to the formatters instead.
pub fn ctime_utc(unix_seconds: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix_seconds.div_euclid(86_400);
    let secs = unix_seconds.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let wd = DAYS[days.rem_euclid(7) as usize];
    let mon = MONTHS[(month - 1).clamp(0, 11) as usize];
    format!(
        "{wd} {mon} {day:>2} {:02}:{:02}:{:02} {year}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// libibmad's `mad_dump_field` layout: the name, a colon, dots up to column 33, the value.
pub(crate) fn dotted(out: &mut String, prefix: &str, name: &str, value: &str) {
    out.push_str(prefix);
    out.push_str(name);
    out.push(':');
    for _ in name.len() + 1..33 {
        out.push('.');
    }
    out.push_str(value);
    out.push('\n');
}

/// The SA record layout of `saquery`: a tab pair, the name, dots up to 24 characters, the value.
pub(crate) fn sa_field(out: &mut String, name: &str, value: &str) {
    out.push_str("\t\t");
    out.push_str(name);
    for _ in name.len()..24 {
        out.push('.');
    }
    out.push_str(value);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(s: [u16; 8]) -> [u8; 16] {
        let mut b = [0u8; 16];
        for (i, w) in s.iter().enumerate() {
            b[2 * i..2 * i + 2].copy_from_slice(&w.to_be_bytes());
        }
        b
    }

    #[test]
    fn ntop_like_glibc() {
        assert_eq!(
            inet_ntop6(&gid([0xfe80, 0, 0, 0, 0xe41d, 0x2d03, 0xb4, 0x7d01])),
            "fe80::e41d:2d03:b4:7d01"
        );
        assert_eq!(
            inet_ntop6(&gid([0, 0, 0, 0, 0xe41d, 0x2d03, 0xb4, 0x7d01])),
            "::e41d:2d03:b4:7d01"
        );
        assert_eq!(
            inet_ntop6(&gid([0, 0, 0, 0, 0, 0xffff, 0x0a4d, 0x0001])),
            "::ffff:10.77.0.1"
        );
        assert_eq!(inet_ntop6(&[0; 16]), "::");
        assert_eq!(inet_ntop6(&gid([1, 0, 0, 0, 0, 0, 0, 0])), "1::");
        assert_eq!(
            inet_ntop6(&gid([1, 0, 2, 0, 3, 0, 4, 0])),
            "1:0:2:0:3:0:4:0"
        );
        assert_eq!(
            inet_ntop6(&gid([0xfe80, 0, 0, 0, 0x5054, 0xff, 0xfe00, 0x9902])),
            "fe80::5054:ff:fe00:9902"
        );
    }

    #[test]
    fn ctime_format() {
        // 2026-11-29 23:40:13 UTC.
        assert_eq!(ctime_utc(1_795_995_613), "Sun Nov 29 23:40:13 2026");
        assert_eq!(ctime_utc(0), "Thu Jan  1 00:00:00 1970");
    }
}
