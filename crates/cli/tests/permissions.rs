//! Who may do what on a host's HCA, tried with real Unix users (made here with `useradd`,
//! which needs root; without root the test says so and checks nothing else):
//!
//! - by default only the daemon's owner (and root) is served; another user is refused at
//!   Hello with what to do;
//! - `--allow-users` and `--allow-group` give verbs to the users named and the group's
//!   members, and nobody else;
//! - management — faults, capture, ports, links, the SM's role, SMP Sets — stays with the
//!   owner and root: an admitted user is refused each, with the permission named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use softib::{AccessFlags, Context, Device, Error, ErrorKind, FaultSpec, LinkConfig, QpType};

mod common;
use common::{wait_until, Kill, SOFTIB};

const OWNER: &str = "softib-t-owner";
const USER: &str = "softib-t-user";
const MEMBER: &str = "softib-t-member";
const OTHER: &str = "softib-t-other";
const GROUP: &str = "softib-t-grp";

/// What each operation of [`permission_child`] came to: `ok`, `permission: …` or
/// `error: …`.
type Results = BTreeMap<String, String>;

/// The management operations and the verbs the child tries.
const MANAGEMENT: &[&str] = &[
    "faults", "capture", "port", "link_add", "link_del", "sm_agent", "set_sm", "smp_set",
];
const VERBS: &[&str] = &["devices", "rc_write", "mad_agent", "smp_get", "link_show"];

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success() || out.status.code() == Some(9),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The uid and gid of user `name`.
fn ids(name: &str) -> (u32, u32) {
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, name]).output().unwrap();
        assert!(out.status.success(), "id {flag} {name}");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    (id("-u"), id("-g"))
}

/// Makes the test's users and group (kept between runs: useradd answers 9 for one that
/// exists).
fn make_users() {
    run(Command::new("groupadd").args(["-f", "--system", GROUP]));
    for (name, extra) in [
        (OWNER, None),
        (USER, None),
        (MEMBER, Some(GROUP)),
        (OTHER, None),
    ] {
        let mut c = Command::new("useradd");
        c.args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            "--user-group",
        ]);
        if let Some(g) = extra {
            c.args(["-G", g]);
        }
        run(c.arg(name));
    }
}

/// `cmd` run as user `name`, with the groups /etc/group gives it (`setpriv --init-groups`;
/// std's `Command::uid` would drop the supplementary ones).
fn as_user(name: &str, program: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={name}"),
        &format!("--regid={}", ids(name).1),
        "--init-groups",
        "--",
        program,
    ]);
    c
}

/// `softib daemon` as the owner on `dir` with `flags`, once it answers, and `rxe0` on lo at
/// `addr`, added by the owner.
fn daemon(dir: &Path, flags: &[&str], addr: &str) -> Kill {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let (uid, gid) = ids(OWNER);
    std::os::unix::fs::chown(dir, Some(uid), Some(gid)).unwrap();
    let d = Kill(
        as_user(OWNER, SOFTIB)
            .arg("daemon")
            .args(flags)
            .env("SOFTIB_RUNTIME_DIR", dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until("softibd did not start", Duration::from_secs(10), || {
        Context::open_at(dir).is_ok()
    });
    let out = as_user(OWNER, SOFTIB)
        .args([
            "link", "add", "rxe0", "type", "rxe", "netdev", "lo", "--addr", addr,
        ])
        .env("SOFTIB_RUNTIME_DIR", dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the owner adds a link: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    d
}

/// What [`permission_child`] found when run as `user` (`None`: as root, this process's user).
fn try_as(user: Option<&str>, dir: &Path, link_addr: &str) -> Results {
    let exe = std::env::current_exe().unwrap();
    let exe = exe.to_str().unwrap();
    let mut c = match user {
        Some(u) => as_user(u, exe),
        None => Command::new(exe),
    };
    let out = c
        .args(["--exact", "permission_child", "--ignored", "--nocapture"])
        .env("SOFTIB_PERM_DIR", dir)
        .env("SOFTIB_PERM_LINK_ADDR", link_addr)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let results: Results = text
        .lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert!(
        !results.is_empty(),
        "the child as {user:?} said nothing: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    results
}

fn result<'a>(r: &'a Results, op: &str) -> &'a str {
    r.get(op).map_or("missing", String::as_str)
}

/// Served everything: verbs work, and management is at least not refused for permission
/// (a RoCE device has no SM to be, so those ops fail on their own grounds).
fn assert_manages(who: &str, r: &Results) {
    for op in VERBS.iter().chain(MANAGEMENT) {
        assert!(
            !result(r, op).starts_with("permission"),
            "{who} {op}: {}",
            result(r, op)
        );
    }
    for op in [
        "devices",
        "rc_write",
        "link_show",
        "faults",
        "capture",
        "link_add",
        "link_del",
    ] {
        assert_eq!(result(r, op), "ok", "{who} {op}");
    }
}

/// Verbs work; each management request is refused, naming the permission and the owner.
fn assert_verbs_only(who: &str, r: &Results, owner_uid: u32) {
    for op in ["devices", "rc_write", "link_show"] {
        assert_eq!(result(r, op), "ok", "{who} {op}");
    }
    for op in ["mad_agent", "smp_get"] {
        assert!(
            !result(r, op).starts_with("permission"),
            "{who} {op}: {}",
            result(r, op)
        );
    }
    for op in MANAGEMENT {
        let got = result(r, op);
        assert!(
            got.starts_with("permission: permission denied:")
                && got.contains("needs the management permission")
                && got.contains(&format!("owner (uid {owner_uid}) and root")),
            "{who} {op}: {got}"
        );
    }
}

fn assert_not_admitted(who: &str, r: &Results, uid: u32) {
    let got = result(r, "hello");
    assert!(
        got.starts_with("permission:")
            && got.contains(&format!("uid {uid} may not use this HCA"))
            && got.contains("--allow-users"),
        "{who}: {got}"
    );
    assert_eq!(r.len(), 1, "{who} got further than Hello: {r:?}");
}

#[test]
fn verbs_for_the_users_admitted_management_for_the_owner_and_root() {
    if !rustix::process::geteuid().is_root() {
        println!("not root: cannot make the users this test needs (useradd); nothing checked");
        return;
    }
    make_users();
    let owner_uid = ids(OWNER).0;
    let base = std::env::temp_dir().join(format!("softib-perm-{}", std::process::id()));

    // By default: the owner and root only.
    let dir = base.join("default");
    let d = daemon(&dir, &[], "127.0.0.171");
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dir.join("softibd.sock")), 0o700);
    assert_manages("the owner", &try_as(Some(OWNER), &dir, "127.0.0.181"));
    assert_manages("root", &try_as(None, &dir, "127.0.0.182"));
    // The socket's mode keeps another user from connecting at all.
    let r = try_as(Some(USER), &dir, "");
    let got = result(&r, "hello");
    assert!(
        got.starts_with("error: cannot reach softibd") && got.contains("Permission denied"),
        "a user by default: {got}"
    );
    assert_eq!(
        r.len(),
        1,
        "a user by default got further than Hello: {r:?}"
    );
    drop(d);

    // Admitted users and a group.
    let dir = base.join("allow");
    let d = daemon(
        &dir,
        &["--allow-users", USER, "--allow-group", GROUP],
        "127.0.0.172",
    );
    assert_eq!(mode(dir.join("softibd.sock")), 0o777);
    assert_eq!(mode(dir.clone()), 0o755);
    assert_verbs_only(
        "an admitted user",
        &try_as(Some(USER), &dir, "127.0.0.183"),
        owner_uid,
    );
    assert_verbs_only(
        "a member of the group",
        &try_as(Some(MEMBER), &dir, "127.0.0.184"),
        owner_uid,
    );
    let (other_uid, _) = ids(OTHER);
    assert_not_admitted("another user", &try_as(Some(OTHER), &dir, ""), other_uid);
    assert_manages("the owner", &try_as(Some(OWNER), &dir, "127.0.0.185"));
    assert_manages("root", &try_as(None, &dir, "127.0.0.186"));

    // The tools say it too, and exit non-zero.
    let out = as_user(USER, SOFTIB)
        .args(["link", "set", "rxe0", "fault", "loss", "1%"])
        .env("SOFTIB_RUNTIME_DIR", &dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("setting faults needs the management permission"),
        "{stderr}"
    );
    drop(d);
    let _ = std::fs::remove_dir_all(&base);
}

/// Started by the test above as another user: tries each operation on the daemon in
/// `SOFTIB_PERM_DIR` and prints `RESULT op=…` for each.
#[test]
#[ignore = "started by verbs_for_the_users_admitted_management_for_the_owner_and_root"]
fn permission_child() {
    let Some(dir) = std::env::var_os("SOFTIB_PERM_DIR").map(PathBuf::from) else {
        return;
    };
    let link_addr = std::env::var("SOFTIB_PERM_LINK_ADDR").unwrap_or_default();
    let say = |op: &str, r: Result<(), Error>| {
        let v = match r {
            Ok(()) => "ok".to_string(),
            Err(Error::Refused {
                kind: ErrorKind::Permission,
                message,
            }) => format!("permission: {message}"),
            Err(e) => format!("error: {e}"),
        };
        println!("RESULT {op}={}", v.replace('\n', " "));
    };
    let mut ctx = match Context::open_at(&dir) {
        Ok(c) => c,
        Err(e) => return say("hello", Err(e)),
    };
    say("devices", ctx.devices().map(drop));
    say("link_show", ctx.links().map(drop));
    say("rc_write", rc_write(&dir));
    say("mad_agent", ctx.open_mad(0, 1, false));
    let mut smp = [0u8; 256];
    smp[0] = 1; // base version
    smp[1] = 0x81; // directed-route SMP
    smp[2] = 1;
    smp[3] = 0x01; // Get
    say("smp_get", ctx.send_smp(0, 1, None, &smp));
    smp[3] = 0x02; // Set
    say("smp_set", ctx.send_smp(0, 1, None, &smp));
    say("faults", ctx.set_faults(0, 0, FaultSpec::default()));
    let pcap = std::env::temp_dir().join(format!("softib-perm-{}.pcap", std::process::id()));
    say(
        "capture",
        ctx.capture(0, Some(&pcap))
            .and_then(|_| ctx.capture(0, None))
            .map(drop),
    );
    let _ = std::fs::remove_file(&pcap);
    say("port", ctx.set_port_enabled(0, 1, true));
    let name = format!("rxp{}", std::process::id() % 10_000);
    let added = ctx.link_add(LinkConfig {
        name: name.clone(),
        netdev: "lo".into(),
        addr: link_addr.parse().unwrap_or([127, 0, 0, 180].into()),
        udp_port: 4791,
    });
    let added_ok = added.is_ok();
    say("link_add", added);
    if added_ok {
        say("link_del", ctx.link_del(&name));
    } else {
        say("link_del", ctx.link_del("rxe0"));
    }
    say("sm_agent", ctx.open_mad(0, 1, true));
    say("set_sm", ctx.set_sm(0, 1, None));
}

/// A checked 64 KiB RC WRITE between two QPs of `rxe0`.
fn rc_write(dir: &Path) -> Result<(), Error> {
    let all = AccessFlags::LOCAL_WRITE
        .with(AccessFlags::REMOTE_WRITE)
        .with(AccessFlags::REMOTE_READ);
    let d = Device::open_at(dir, Some("rxe0"))?;
    let pd = d.alloc_pd()?;
    let cq = d.create_cq(16)?;
    const LEN: usize = 64 << 10;
    let (a, b) = (d.alloc_buffer(LEN)?, d.alloc_buffer(LEN)?);
    let (mr_a, mr_b) = (pd.register(&a, all)?, pd.register(&b, all)?);
    let qa = pd.create_qp(QpType::Rc, &cq, &cq, 4)?;
    let qb = pd.create_qp(QpType::Rc, &cq, &cq, 4)?;
    let (ea, eb) = (
        qa.endpoint_with(Some(&mr_a))?,
        qb.endpoint_with(Some(&mr_b))?,
    );
    qa.connect(&eb, softib::Mtu::Mtu1024)?;
    qb.connect(&ea, softib::Mtu::Mtu1024)?;
    let data: Vec<u8> = (0..LEN as u32).map(|i| (i * 7 + 3) as u8).collect();
    a.write(0, &data);
    qa.write(&mr_a, 0, LEN, eb.addr, eb.rkey, 1)?;
    let wcs = cq.poll_wait(1, Duration::from_secs(20))?;
    let mut got = vec![0u8; LEN];
    if wcs.len() != 1 || wcs[0].status != softib::WcStatus::Success || !b.read(0, &mut got) {
        return Err(Error::Unexpected("the WRITE did not complete successfully"));
    }
    if got != data {
        return Err(Error::Unexpected("the WRITE's bytes differ"));
    }
    Ok(())
}
