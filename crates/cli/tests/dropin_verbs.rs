//! The drop-in libibverbs.so.1 under unmodified Debian programs: its symbols and their
//! versions, every consumer loading under BIND_NOW, ibverbs-utils between two softib hosts,
//! `ibv_devinfo` byte for byte against softib's own, and a C program of ours compiled against
//! Debian's headers for what the tools leave untested.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dropin;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use dropin::{build_c, have, hosts, our_library, pair, port, readelf, text, Run, SOFTIB};

/// The table the library is built from: (node, symbol).
fn exports() -> BTreeSet<(String, String)> {
    let t = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../ibverbs/exports.txt"),
    )
    .unwrap();
    t.lines()
        .filter(|l| l.starts_with("IBVERBS"))
        .map(|l| {
            let mut f = l.split_whitespace();
            (f.next().unwrap().to_string(), f.next().unwrap().to_string())
        })
        .collect()
}

/// `symbol@VERSION` (or `@@`) entries of `readelf --dyn-syms`, defined or not.
fn dyn_syms(file: &Path, defined: bool) -> BTreeSet<(String, String)> {
    readelf(&["--dyn-syms", "-W"], file)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (ndx, name) = (f.get(6)?, f.get(7)?);
            if (*ndx == "UND") == defined {
                return None;
            }
            let (sym, ver) = name.split_once('@')?;
            Some((ver.trim_start_matches('@').to_string(), sym.to_string()))
        })
        .collect()
}

#[test]
fn the_library_exports_exactly_its_table_with_rdma_cores_versions() {
    if !have("readelf", "binutils") {
        return;
    }
    // The library `softib run` gives programs (made on its first run).
    let _ = Command::new(SOFTIB)
        .args(["run", "--no-dev", "--", "true"])
        .status();
    let lib = std::fs::canonicalize(our_library()).unwrap();
    let d = readelf(&["-d"], &lib);
    assert!(d.contains("Library soname: [libibverbs.so.1]"), "{d}");
    assert!(d.contains("BIND_NOW"), "{d}");
    let defined = dyn_syms(&lib, true);
    let table = exports();
    assert_eq!(
        defined, table,
        "the library's versioned symbols are not exports.txt's"
    );
    // Nothing else of consequence: no unversioned or Rust-internal definition a program could
    // bind to.
    let stray: Vec<String> = readelf(&["--dyn-syms", "-W"], &lib)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (ndx, name) = (*f.get(6)?, *f.get(7)?);
            (ndx != "UND" && f.get(3).is_some_and(|t| *t != "SECTION") && !name.contains('@'))
                .then(|| name.to_string())
        })
        .filter(|n| n != "Name")
        .collect();
    assert!(stray.is_empty(), "defined without a version: {stray:?}");
    // The version nodes are rdma-core's, the public ones each a child of the one before.
    let v = readelf(&["-V", "-W"], &lib);
    for node in [
        "IBVERBS_1.0",
        "IBVERBS_1.1",
        "IBVERBS_1.5",
        "IBVERBS_1.14",
        "IBVERBS_PRIVATE_34",
    ] {
        assert!(v.contains(&format!("Name: {node}")), "{node} missing:\n{v}");
    }
}

/// Every installed program and library that links libibverbs.so.1, as the loader resolves
/// it for the programs the tests run (providers only the real libibverbs loads are left out).
fn consumers() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for dir in [
        "/usr/bin",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu/ucx",
    ] {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            // Each library once, by its soname-like name.
            if name.contains(".so.") && name.matches('.').count() > 2 {
                continue;
            }
            if !p.is_file() || p.is_symlink() && dir == "/usr/bin" {
                continue;
            }
            let Ok(o) = Command::new("readelf").arg("-d").arg(&p).output() else {
                continue;
            };
            if text(&o.stdout).contains("Shared library: [libibverbs.so.1]") {
                v.push(p);
            }
        }
    }
    v
}

#[test]
fn every_consumer_imports_only_what_the_library_defines_and_loads_under_bind_now() {
    if !have("readelf", "binutils") || !have("ib_send_bw", "perftest") {
        return;
    }
    let table = exports();
    let all = consumers();
    let names: Vec<String> = all
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "ib_send_bw",
        "ib_write_lat",
        "ibv_devinfo",
        "ibv_rc_pingpong",
        "libmlx5.so.1",
        "libefa.so.1",
        "librdmacm.so.1",
        "libfabric.so.1",
        "libuct_ib.so.0",
    ] {
        if names.iter().any(|n| n == want) {
            continue;
        }
        // Only a package that is not installed may be missing (skipped above otherwise).
        assert!(
            std::env::var_os("CI").is_none_or(|v| v != "true"),
            "{want} is not installed under CI=true (found {names:?})"
        );
    }
    let lib_dir = our_library().parent().unwrap().to_path_buf();
    // The directory of links exists once `softib run` has run once.
    let _ = Command::new(SOFTIB)
        .args(["run", "--no-dev", "--", "true"])
        .status();
    for c in &all {
        let wanted: BTreeSet<(String, String)> = dyn_syms(c, false)
            .into_iter()
            .filter(|(v, _)| v.starts_with("IBVERBS_"))
            .collect();
        let missing: Vec<_> = wanted.difference(&table).collect();
        assert!(
            missing.is_empty(),
            "{} imports what softib's libibverbs lacks: {missing:?}",
            c.display()
        );
        // The loader agrees: every symbol and version resolves at once.
        let o = Command::new("ldd")
            .arg("-r")
            .arg(c)
            .env("LD_LIBRARY_PATH", &lib_dir)
            .env("LD_BIND_NOW", "1")
            .output()
            .unwrap();
        let out = text(&o.stdout) + &text(&o.stderr);
        assert!(
            !out.contains("undefined symbol") && !out.contains("not found"),
            "{}: {out}",
            c.display()
        );
        assert!(
            out.contains(&format!(
                "libibverbs.so.1 => {}",
                lib_dir.join("libibverbs.so.1").display()
            )),
            "{} does not resolve libibverbs.so.1 to softib's: {out}",
            c.display()
        );
    }
}

#[test]
fn ibv_devinfo_prints_byte_for_byte_what_softibs_own_prints() {
    if !have("ibv_devinfo", "ibverbs-utils") {
        return;
    }
    let h = hosts();
    for args in [&["-v"][..], &[], &["-d", "rxe0", "-i", "1"], &["-l"]] {
        let mut a = vec!["ibv_devinfo"];
        a.extend(args);
        let theirs = Run::start(&h.a, &a, &[]).wait();
        theirs.ok();
        let ours = Command::new(SOFTIB)
            .args(&a)
            .env("SOFTIB_RUNTIME_DIR", &h.a.dir)
            .output()
            .unwrap();
        assert_eq!(
            theirs.stdout,
            text(&ours.stdout),
            "ibv_devinfo {args:?} under the drop-in differs from softib's own"
        );
    }
    let d = Run::start(&h.a, &["ibv_devices"], &[]).wait();
    d.ok();
    assert!(d.stdout.contains("rxe0"), "{}", d.stdout);
}

#[test]
fn without_a_daemon_a_program_is_told_what_to_start_and_sees_no_devices() {
    if !have("ibv_devinfo", "ibverbs-utils") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("softib-dropin-none-{}", std::process::id()));
    let o = Command::new(SOFTIB)
        .args(["run", "--host"])
        .arg(&dir)
        .args(["--", "ibv_devinfo"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(
        err.matches("softib daemon").count(),
        1,
        "one line saying what to start:\n{err}"
    );
    assert!(err.contains("No IB devices found"), "{err}");
    let d = Command::new(SOFTIB)
        .args(["run", "--host"])
        .arg(&dir)
        .args(["--", "ibv_devices"])
        .output()
        .unwrap();
    assert!(d.status.success(), "{}", text(&d.stderr));
    assert!(!text(&d.stdout).contains("rxe"), "{}", text(&d.stdout));
}

/// Asserts a pingpong pair moved its data: both sides report the bytes and iterations.
fn pingpong_moved(server: &dropin::Done, client: &dropin::Done, iters: u32) {
    server.ok();
    client.ok();
    for d in [server, client] {
        let all = d.stdout.clone() + &d.stderr;
        assert!(
            all.contains(&format!("{iters} iters in")) && all.contains(" bytes in "),
            "{}: {all}",
            d.what
        );
    }
}

#[test]
fn the_ibverbs_utils_pingpongs_run_between_two_hosts_with_and_without_events() {
    if !have("ibv_rc_pingpong", "ibverbs-utils") {
        return;
    }
    for prog in [
        "ibv_rc_pingpong",
        "ibv_uc_pingpong",
        "ibv_ud_pingpong",
        "ibv_srq_pingpong",
    ] {
        for events in [false, true] {
            let p = port().to_string();
            let mut args = vec![prog, "-d", "rxe0", "-g", "1", "-n", "50", "-p", &p];
            if prog == "ibv_ud_pingpong" {
                args.extend(["-s", "1024"]);
            }
            if events {
                args.push("-e");
            }
            let (s, c) = pair(&args, &args, &[]);
            pingpong_moved(&s, &c, 50);
        }
    }
}

#[test]
fn the_pingpongs_wait_for_completion_events_on_the_process_data_path() {
    if !have("ibv_rc_pingpong", "ibverbs-utils") {
        return;
    }
    for prog in ["ibv_rc_pingpong", "ibv_ud_pingpong"] {
        let p = port().to_string();
        let mut args = vec![prog, "-d", "rxe0", "-g", "1", "-n", "50", "-p", &p, "-e"];
        if prog == "ibv_ud_pingpong" {
            args.extend(["-s", "1024"]);
        }
        let (s, c) = pair(&args, &args, &[("SOFTIB_DATAPATH", "process")]);
        pingpong_moved(&s, &c, 50);
    }
}

#[test]
fn ibv_xsrq_pingpong_is_told_xrc_is_not_supported() {
    if !have("ibv_xsrq_pingpong", "ibverbs-utils") {
        return;
    }
    let h = hosts();
    let p = port().to_string();
    let d = Run::start(&h.a, &["ibv_xsrq_pingpong", "-d", "rxe0", "-p", &p], &[]).wait();
    d.loaded_ours();
    assert!(!d.status.success(), "XRC cannot work: {}", d.stdout);
    assert!(
        d.stderr
            .contains("XRC (ibv_open_xrcd) is not supported by softib devices"),
        "{}",
        d.stderr
    );
}

/// What softib's Rust API reports for the two bad work requests the C program posts: an
/// RDMA WRITE whose SGE runs past its MR, and one that runs past the remote MR.
fn rust_api_statuses(dir: &Path) -> (u8, u8) {
    use softib::{AccessFlags, Device, Mtu, QpType, RemoteAddr, SendFlags, SendWr, WrOpcode};
    let dev = Device::open_at(dir, Some("rxe0")).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let access = AccessFlags::LOCAL_WRITE
        .with(AccessFlags::REMOTE_WRITE)
        .with(AccessFlags::REMOTE_READ);
    let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
    let ma = pd.register_slice(&mut a, access).unwrap();
    let mb = pd.register_slice(&mut b, access).unwrap();
    let cq = dev.create_cq(16).unwrap();
    let status = |len: usize, remote: u64| {
        let q = pd.create_qp(QpType::Rc, &cq, &cq, 8).unwrap();
        let p = pd.create_qp(QpType::Rc, &cq, &cq, 8).unwrap();
        q.connect(&p.endpoint().unwrap(), Mtu::Mtu1024).unwrap();
        p.connect(&q.endpoint().unwrap(), Mtu::Mtu1024).unwrap();
        q.post_send(vec![SendWr {
            wr_id: 1,
            opcode: WrOpcode::RdmaWrite(RemoteAddr {
                addr: remote,
                rkey: softib::RKey(mb.rkey()),
            }),
            sg_list: vec![ma.sge(0, len)],
            flags: SendFlags::SIGNALED,
            inline_data: None,
            ud: None,
        }])
        .unwrap();
        cq.wait(std::time::Duration::from_secs(10)).unwrap().status as u8
    };
    let past_local = status(4097, mb.addr());
    let past_remote = status(64, mb.addr() + 4096 - 32);
    (past_local, past_remote)
}

#[test]
fn a_c_program_built_against_debians_headers_covers_the_rest() {
    if !have("cc", "gcc") || !Path::new("/usr/include/infiniband/verbs.h").exists() {
        assert!(
            std::env::var_os("CI").is_none_or(|v| v != "true"),
            "no C compiler or verbs.h under CI=true: .ci/run installs gcc and libibverbs-dev"
        );
        eprintln!("skipped: needs gcc and libibverbs-dev");
        return;
    }
    let h = hosts();
    let work = h.a.dir.join("c");
    let exe_s = build_c(&work, "verbs_check", &["ibverbs"]);
    let libs = work.join("lib");
    assert!(libs.join("libibverbs.so.1").exists() && libs.join("libibverbs.so").exists());
    // Registered memory moved onto a memory file the daemon maps (the default), and reached
    // by cross-memory attach (SOFTIB_SHARE_MR=0): the same program passes either way.
    let process = Run::start(&h.a, &[&exe_s, "rxe0", "1"], &[("SOFTIB_SHARE_MR", "0")]).wait();
    process.ok();
    assert!(process.stdout.contains("shared 0"), "{}", process.stdout);
    // The daemon's data path first; the process path below must print the same.
    let d = Run::start(
        &h.a,
        &[&exe_s, "rxe0", "1"],
        &[("SOFTIB_DATAPATH", "daemon")],
    )
    .wait();
    d.ok();
    assert!(d.stdout.contains("shared 1"), "{}", d.stdout);
    assert!(
        d.stdout
            .contains("ok registration keeps the contents; fork gives the child its own copy"),
        "{}",
        d.stdout
    );
    for check in [
        "ok query device ex",
        "ok wr_rdma_write, wr_rdma_write_imm, wr_rdma_read",
        "ok wr_atomic_fetch_add + wr_atomic_cmp_swp",
        "ok ibv_post_send atomics, completion channel",
        "ok srq with its limit event",
        "ok last WQE reached when an SRQ's QP enters the error state",
        "ok a CQ that overflows raises CQ error and QP fatal",
        "ok threads posting and polling on one context",
        "ok bad input",
        "ok cleanup",
    ] {
        assert!(d.stdout.contains(check), "{check}:\n{}", d.stdout);
    }
    let status = |name: &str| -> u8 {
        d.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("status {name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no status {name}:\n{}", d.stdout))
    };
    let (local, remote) = rust_api_statuses(&h.a.dir);
    assert_eq!(status("local_sge_past_mr"), local, "a WR past its MR");
    assert_eq!(
        status("remote_write_past_mr"),
        remote,
        "a WRITE past the remote MR"
    );
    // IBV_WC_LOC_PROT_ERR and IBV_WC_REM_ACCESS_ERR, as rdma-core's providers report them.
    assert_eq!((local, remote), (4, 10));
    // The process data path: the same, and the memory moved with the progress thread parked.
    let p = Run::start(
        &h.a,
        &[&exe_s, "rxe0", "1"],
        &[("SOFTIB_DATAPATH", "process")],
    )
    .wait();
    p.ok();
    assert!(p.stdout.contains("shared 1"), "{}", p.stdout);
    let same = |l: &&str| l.starts_with("ok ") || l.starts_with("status ");
    assert_eq!(
        p.stdout.lines().filter(same).collect::<Vec<_>>(),
        d.stdout.lines().filter(same).collect::<Vec<_>>(),
        "process path against daemon path"
    );
}
