//! `softib daemon` with RoCEv2 devices (`softib link add ... netdev lo`): the devices, the
//! tools on them, perftest between two of them, and the configuration surviving a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SOFTIB: &str = env!("CARGO_BIN_EXE_softib");

struct Daemon {
    dir: PathBuf,
    child: Option<Child>,
}

impl Daemon {
    fn start(dir: &Path) -> Daemon {
        let child = Command::new(SOFTIB)
            .arg("daemon")
            .env("SOFTIB_RUNTIME_DIR", dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let d = Daemon {
            dir: dir.to_path_buf(),
            child: Some(child),
        };
        let t0 = Instant::now();
        while d.run(&["ibv_devices"]).status.code() != Some(0) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "softibd did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(SOFTIB)
            .args(args)
            .env("SOFTIB_RUNTIME_DIR", &self.dir)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "{args:?}: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        text(&o.stdout)
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Some(p) = rustix::process::Pid::from_raw(c.id() as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
            }
            let _ = c.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn roce_links_carry_perftest_and_survive_a_daemon_restart() {
    let dir = std::env::temp_dir().join(format!("softib-it-links-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let udp = (20000 + std::process::id() % 20000).to_string();
    let mut d = Daemon::start(&dir);
    d.ok(&[
        "link",
        "add",
        "rxe0",
        "type",
        "rxe",
        "netdev",
        "lo",
        "--addr",
        "127.0.0.2",
        "--udp-port",
        &udp,
    ]);
    d.ok(&[
        "link",
        "add",
        "rxe1",
        "type",
        "rxe",
        "netdev",
        "lo",
        "--addr",
        "127.0.0.3",
        "--udp-port",
        &udp,
    ]);
    // Refusals name what is wrong.
    let o = d.run(&[
        "link",
        "add",
        "rxe0",
        "type",
        "rxe",
        "netdev",
        "lo",
        "--addr",
        "127.0.0.4",
    ]);
    assert!(
        text(&o.stderr).contains("exists already"),
        "{}",
        text(&o.stderr)
    );
    let o = d.run(&["link", "add", "rxe9", "type", "rxe", "netdev", "nosuch0"]);
    assert!(
        text(&o.stderr).contains("no network interface nosuch0"),
        "{}",
        text(&o.stderr)
    );
    let o = d.run(&["link", "add", "rxe9", "type", "siw", "netdev", "lo"]);
    assert!(
        text(&o.stderr).contains("type siw is not supported"),
        "{}",
        text(&o.stderr)
    );
    let show = d.ok(&["link", "show"]);
    assert!(
        show.contains("link rxe0/1 state ACTIVE physical_state LINK_UP netdev lo"),
        "{show}"
    );
    assert!(
        show.contains("link rxe1/1 state ACTIVE physical_state LINK_UP netdev lo"),
        "{show}"
    );
    let st = d.ok(&["ibstat", "rxe1"]);
    assert!(
        st.contains("Link layer: Ethernet") && st.contains("State: Active"),
        "{st}"
    );
    let di = d.ok(&["ibv_devinfo", "-d", "rxe0", "-v"]);
    assert!(di.contains("::ffff:127.0.0.2"), "the IPv4-mapped GID: {di}");

    // perftest between the two devices, GID chosen from the device's address.
    let server = Command::new(SOFTIB)
        .args([
            "ib_write_bw",
            "-d",
            "rxe1",
            "-n",
            "200",
            "-s",
            "8192",
            "-p",
            "18661",
        ])
        .env("SOFTIB_RUNTIME_DIR", &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let c = d.run(&[
        "ib_write_bw",
        "-d",
        "rxe0",
        "-n",
        "200",
        "-s",
        "8192",
        "-p",
        "18661",
        "127.0.0.1",
    ]);
    let s = server.wait_with_output().unwrap();
    assert!(
        c.status.success() && s.status.success(),
        "{}{}\n{}{}",
        text(&c.stdout),
        text(&c.stderr),
        text(&s.stdout),
        text(&s.stderr)
    );
    let out = text(&c.stdout);
    assert!(
        out.contains("Link type       : Ethernet") && out.contains("GID index       : 1"),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("8192       200")),
        "{out}"
    );

    // A program using the daemon when it stops gets an error that says so.
    let mut ctx = softib::Context::open_at(&dir).unwrap();
    ctx.devices().unwrap();
    // A restart brings the devices back from the saved configuration.
    d.stop();
    let e = ctx.devices().unwrap_err().to_string();
    assert!(
        e.contains("closed the connection") && e.contains("open the device again"),
        "{e}"
    );
    let d2 = Daemon::start(&dir);
    let show = d2.ok(&["link", "show"]);
    assert_eq!(show.matches("state ACTIVE").count(), 2, "{show}");
    d2.ok(&["link", "del", "rxe1"]);
    let o = d2.run(&["link", "del", "rxe1"]);
    assert!(
        text(&o.stderr).contains("no device rxe1"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(d2.ok(&["link", "show"]).lines().count(), 1);
    drop(d2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_client_killed_mid_transfer_is_reclaimed_and_others_keep_working() {
    let dir = std::env::temp_dir().join(format!("softib-it-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let udp = (20000 + (std::process::id() + 7) % 20000).to_string();
    let d = Daemon::start(&dir);
    d.ok(&[
        "link",
        "add",
        "rxe0",
        "type",
        "rxe",
        "netdev",
        "lo",
        "--addr",
        "127.0.0.2",
        "--udp-port",
        &udp,
    ]);
    d.ok(&[
        "link",
        "add",
        "rxe1",
        "type",
        "rxe",
        "netdev",
        "lo",
        "--addr",
        "127.0.0.3",
        "--udp-port",
        &udp,
    ]);
    let spawn = |args: &[&str]| {
        Command::new(SOFTIB)
            .args(args)
            .env("SOFTIB_RUNTIME_DIR", &dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // A long transfer...
    let server = spawn(&["ib_write_bw", "-d", "rxe1", "-n", "1000000", "-p", "18671"]);
    std::thread::sleep(Duration::from_millis(300));
    let mut client = spawn(&[
        "ib_write_bw",
        "-d",
        "rxe0",
        "-n",
        "1000000",
        "-p",
        "18671",
        "127.0.0.1",
    ]);
    let t0 = Instant::now();
    while !d.ok(&["res"]).contains("0: rxe0: pd 1 cq 1 qp 1") {
        assert!(t0.elapsed() < Duration::from_secs(10), "{}", d.ok(&["res"]));
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    // ... whose client is killed with SIGKILL in the middle.
    client.kill().unwrap();
    client.wait().unwrap();
    let s = server.wait_with_output().unwrap();
    assert!(!s.status.success(), "the server noticed its peer is gone");
    // Everything the killed client owned is gone; the server's too (it exited).
    let t0 = Instant::now();
    loop {
        let r = d.ok(&["res"]);
        if r.contains("0: rxe0: pd 0 cq 0 qp 0 cm_id 0 mr 0 ctx 0")
            && r.contains("1: rxe1: pd 0 cq 0 qp 0")
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "not reclaimed:\n{r}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The daemon goes on serving: a new pair runs to the end.
    let server = spawn(&[
        "ib_send_bw",
        "-d",
        "rxe1",
        "-n",
        "200",
        "-s",
        "4096",
        "-p",
        "18672",
    ]);
    std::thread::sleep(Duration::from_millis(300));
    let c = d.run(&[
        "ib_send_bw",
        "-d",
        "rxe0",
        "-n",
        "200",
        "-s",
        "4096",
        "-p",
        "18672",
        "127.0.0.1",
    ]);
    let s = server.wait_with_output().unwrap();
    assert!(
        c.status.success() && s.status.success(),
        "{}{}",
        text(&c.stderr),
        text(&s.stderr)
    );
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}
