//! A transfer whose traffic a fault drops: softib's perftest stops on both sides, within its
//! `--timeout`, and says what the HCA found — the port's state, the faults set on it, what it
//! dropped — never a silent wait.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{roce_daemon, text, Kill, SOFTIB};

fn softib(dir: &Path, args: &[&str]) -> String {
    let o = Command::new(SOFTIB)
        .args(args)
        .env("SOFTIB_RUNTIME_DIR", dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
    text(&o.stdout)
}

fn start(dir: &Path, args: &[&str]) -> Kill {
    Kill(
        Command::new(SOFTIB)
            .args(args)
            .env("SOFTIB_RUNTIME_DIR", dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// What `k` printed (stdout and stderr together) and how it exited, once it exits within
/// `timeout`.
fn finish(mut k: Kill, timeout: Duration, what: &str) -> (Output, String) {
    use std::io::Read;
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = k.0.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < timeout, "{what} still ran after {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    if let Some(mut o) = k.0.stdout.take() {
        o.read_to_end(&mut stdout).unwrap();
    }
    if let Some(mut e) = k.0.stderr.take() {
        e.read_to_end(&mut stderr).unwrap();
    }
    let all = format!("{}{}", text(&stdout), text(&stderr));
    (
        Output {
            status,
            stdout,
            stderr,
        },
        all,
    )
}

struct Pair {
    base: PathBuf,
    a: PathBuf,
    b: PathBuf,
    _da: Kill,
    _db: Kill,
}

fn pair(name: &str, addrs: (&str, &str)) -> Pair {
    let base = std::env::temp_dir().join(format!("softib-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (a, b) = (base.join("a"), base.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let _da = roce_daemon(&a, addrs.0);
    let _db = roce_daemon(&b, addrs.1);
    Pair {
        base,
        a,
        b,
        _da,
        _db,
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[test]
fn rc_through_a_total_loss_fails_naming_the_fault_and_both_sides_stop() {
    let p = pair("pt-rc-loss", ("127.0.0.96", "127.0.0.97"));
    let port = "18791";
    let server = start(&p.b, &["ib_write_bw", "-d", "rxe0", "-D", "60", "-p", port]);
    std::thread::sleep(Duration::from_millis(300));
    let client = start(
        &p.a,
        &[
            "ib_write_bw",
            "-d",
            "rxe0",
            "-D",
            "60",
            "-p",
            port,
            "127.0.0.1",
        ],
    );
    std::thread::sleep(Duration::from_secs(2));
    softib(&p.a, &["link", "set", "rxe0", "fault", "loss", "100%"]);
    let (c, c_out) = finish(client, Duration::from_secs(20), "the client");
    let (s, s_out) = finish(server, Duration::from_secs(20), "the server");
    assert!(!c.status.success(), "{c_out}");
    assert!(
        c_out.contains("transport retry counter exceeded"),
        "{c_out}"
    );
    assert!(
        c_out.contains("Faults are set on port 1 of rxe0: loss 100% (so far lost "),
        "{c_out}"
    );
    assert!(
        c_out.contains("`softib link set rxe0 fault none`"),
        "{c_out}"
    );
    assert!(!s.status.success(), "the server carried on:\n{s_out}");
}

#[test]
fn ud_through_a_total_loss_stops_both_sides_within_the_timeout() {
    let p = pair("pt-ud-loss", ("127.0.0.98", "127.0.0.99"));
    let port = "18792";
    let args = [
        "ib_send_bw",
        "-d",
        "rxe0",
        "-c",
        "UD",
        "-n",
        "200000",
        // A shallow receive queue: the server drops messages before the fault, which its
        // explanation must not blame for the silence after it.
        "-r",
        "64",
        "--timeout",
        "5",
        "-p",
        port,
    ];
    let server = start(&p.b, &args);
    std::thread::sleep(Duration::from_millis(300));
    let mut client_args = args.to_vec();
    client_args.push("127.0.0.1");
    let client = start(&p.a, &client_args);
    std::thread::sleep(Duration::from_secs(1));
    // The receiving side's egress is untouched; the sender's datagrams all vanish.
    softib(&p.a, &["link", "set", "rxe0", "fault", "loss", "100%"]);
    let (s, s_out) = finish(server, Duration::from_secs(30), "the server");
    let (c, c_out) = finish(client, Duration::from_secs(30), "the client");
    assert!(!s.status.success(), "{s_out}");
    assert!(s_out.contains("No progress for 5 s"), "{s_out}");
    assert!(
        s_out.contains("This HCA dropped nothing in the last ")
            && s_out.contains(" s: the peer did not send"),
        "{s_out}"
    );
    assert!(!c.status.success(), "the client carried on:\n{c_out}");
}
