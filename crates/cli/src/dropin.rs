//! Running unmodified RDMA programs on softib: `softib run`, `softib env`,
//! `softib install-libs`, and the library path `softib fabric exec` gives a program.
//!
//! The drop-in libraries — `libibverbs.so.1` (crates/ibverbs), `librdmacm.so.1`
//! (crates/rdmacm) and `libibumad.so.3` (crates/umad) — are found next to this binary — in
//! cargo's target directory as `libibverbs.so`, `librdmacm.so` and `libibumad.so`, installed
//! as `../lib/softib/<soname>` — or in `$SOFTIB_LIB_DIR`. A program finds them through
//! `LD_LIBRARY_PATH`, which comes before the system's library directories, and its host's
//! daemon through `SOFTIB_RUNTIME_DIR`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _, Result};

use crate::exit;

/// The libraries softib provides, by soname.
const LIBS: &[&str] = &["libibverbs.so.1", "librdmacm.so.1", "libibumad.so.3"];

/// The file cargo builds for a soname (`libibverbs.so.1` → `libibverbs.so`).
fn built_name(soname: &str) -> &str {
    soname.rsplit_once('.').map_or(soname, |(base, _)| base)
}

/// `softib run [--host DIR] -- PROG ARGS...`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The host's runtime directory (default: `SOFTIB_RUNTIME_DIR`, else the user's default).
    #[arg(long, value_name = "DIR")]
    host: Option<PathBuf>,
    /// Run the program in this process's mount namespace, without the /dev/infiniband files
    /// that `softib run` otherwise adds where there are none (UCX looks for them).
    #[arg(long)]
    no_dev: bool,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

/// `softib env [--host DIR]`.
#[derive(Debug, clap::Args)]
pub struct EnvArgs {
    /// The host's runtime directory (default: `SOFTIB_RUNTIME_DIR`, else the user's default).
    #[arg(long, value_name = "DIR")]
    host: Option<PathBuf>,
}

/// The directory holding the drop-in libraries under their sonames.
pub fn lib_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("SOFTIB_LIB_DIR") {
        let d = PathBuf::from(d);
        if LIBS.iter().all(|l| d.join(l).exists()) {
            return Ok(d);
        }
        bail!(
            "SOFTIB_LIB_DIR={} does not hold {} (write them there with `softib install-libs {}`)",
            d.display(),
            LIBS.join(", "),
            d.display()
        );
    }
    let exe = std::env::current_exe().context("finding the softib executable")?;
    let exe_dir = exe
        .parent()
        .ok_or_else(|| anyhow!("{} has no directory", exe.display()))?;
    if let Some(prefix) = exe_dir.parent() {
        let installed = prefix.join("lib/softib");
        if LIBS.iter().all(|l| installed.join(l).exists()) {
            return Ok(installed);
        }
    }
    // Cargo's layout: target/<profile>/softib, and each library it was built with in
    // target/<profile>/deps (and, when it was built for its own sake, a copy in
    // target/<profile>, which a build of the tools alone leaves stale): the newer. A
    // directory of links gives them their sonames.
    let dir = exe_dir.join("softib-lib");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for soname in LIBS {
        let file = built_name(soname);
        let candidates = [format!("deps/{file}"), file.to_string()];
        let built = candidates
            .iter()
            .filter_map(|rel| {
                let m = std::fs::metadata(exe_dir.join(rel)).ok()?.modified().ok()?;
                Some((m, rel))
            })
            .max();
        let Some((_, rel)) = built else {
            let krate = match *soname {
                "libibumad.so.3" => "softib-umad",
                "librdmacm.so.1" => "softib-rdmacm",
                _ => "softib-ibverbs",
            };
            bail!(
                "softib's {soname} is not next to {} (looked for {}, {} and {}); build it \
                 with `cargo build -p {krate}` (the same profile as softib), or point \
                 SOFTIB_LIB_DIR at a directory `softib install-libs` wrote",
                exe.display(),
                exe_dir.join(&candidates[0]).display(),
                exe_dir.join(&candidates[1]).display(),
                exe_dir.join("../lib/softib").join(soname).display()
            );
        };
        let link = dir.join(soname);
        let target = Path::new("..").join(rel);
        if std::fs::read_link(&link).ok().as_deref() != Some(target.as_path()) {
            // Made under another name and renamed into place, so that programs starting at
            // the same moment never see a missing or half-made link.
            let tmp = dir.join(format!(".{soname}.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&target, &tmp)
                .with_context(|| format!("linking {}", tmp.display()))?;
            std::fs::rename(&tmp, &link).with_context(|| format!("making {}", link.display()))?;
        }
    }
    Ok(dir)
}

/// `LD_LIBRARY_PATH` with `dir` first.
pub fn library_path(dir: &Path) -> OsString {
    let mut p = dir.as_os_str().to_os_string();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        p.push(":");
        p.push(old);
    }
    p
}

/// `softib run`: becomes PROG, with the drop-in libraries first on its library path.
pub fn run(a: &RunArgs) -> Result<u8> {
    let dir = lib_dir()?;
    let (prog, rest) = a
        .command
        .split_first()
        .ok_or_else(|| anyhow!("no program given (softib run [--host DIR] -- PROG ARGS...)"))?;
    let mut cmd = std::process::Command::new(prog);
    cmd.args(rest).env("LD_LIBRARY_PATH", library_path(&dir));
    if let Some(h) = &a.host {
        cmd.env("SOFTIB_RUNTIME_DIR", h);
    }
    if !a.no_dev {
        device_files(
            &a.host.clone().unwrap_or_else(softib::runtime_dir),
            "softib run",
        );
    }
    // Become the program: its signals, exit status and process are its own.
    use std::os::unix::process::CommandExt;
    let e = cmd.exec();
    Err(anyhow!("running {}: {e}", Path::new(prog).display()))
}

/// Gives the program about to be exec'd the `/dev/infiniband/uverbsN` files of the host's
/// devices, which UCX checks for before it uses a verbs device: where the machine has no
/// `/dev/infiniband`, the process moves into a mount namespace of its own whose `/dev`
/// adds them (bind mounts of `/dev/null`; nothing opens them: softib's library talks to the
/// daemon). Needs root or unprivileged user namespaces; without either, says so and goes on.
pub fn device_files(host: &Path, who: &str) {
    if Path::new("/dev/infiniband").exists() {
        return;
    }
    let Ok(n) = softib::Context::open_at(host).and_then(|mut c| c.devices()) else {
        // No daemon: the library says what to start.
        return;
    };
    let files: Vec<String> = (0..n.len())
        .map(|i| format!("infiniband/uverbs{i}"))
        .collect();
    let names: Vec<&str> = files.iter().map(String::as_str).collect();
    if let Err(e) = softib_net::devns::private_dev(&names) {
        eprintln!(
            "{who}: no private /dev with /dev/infiniband/uverbs* ({e}: needs root or \
             unprivileged user namespaces); programs that look for those files (UCX) will not \
             see softib's devices"
        );
    }
}

/// Quotes a value for a POSIX shell.
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:=@%".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `softib env`: the variables `softib run` sets, as shell commands (`eval "$(softib env)"`).
pub fn env(a: &EnvArgs) -> Result<u8> {
    let dir = lib_dir()?;
    let host = a.host.clone().unwrap_or_else(softib::runtime_dir);
    outln!(
        "export LD_LIBRARY_PATH={}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}",
        shell_quote(&dir.to_string_lossy())
    )?;
    outln!(
        "export SOFTIB_RUNTIME_DIR={}",
        shell_quote(&host.to_string_lossy())
    )?;
    Ok(exit::OK)
}

/// `softib install-libs DIR`: copies the drop-in libraries into DIR under their sonames,
/// with the `libibverbs.so` and `libibumad.so` links a linker looks for.
pub fn install_libs(dir: &Path) -> Result<u8> {
    let from = lib_dir()?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for lib in LIBS {
        let src = std::fs::canonicalize(from.join(lib))
            .with_context(|| format!("finding {}", from.join(lib).display()))?;
        let dst = dir.join(lib);
        if std::fs::canonicalize(&dst).ok().as_deref() == Some(src.as_path()) {
            continue;
        }
        // Written beside and renamed over, so that a program running from DIR keeps its
        // mapping of the old file.
        let tmp = dir.join(format!(".{lib}.{}", std::process::id()));
        std::fs::copy(&src, &tmp)
            .with_context(|| format!("copying {} to {}", src.display(), tmp.display()))?;
        std::fs::rename(&tmp, &dst).with_context(|| format!("writing {}", dst.display()))?;
        let dev = dst.with_file_name(built_name(lib));
        let _ = std::fs::remove_file(&dev);
        std::os::unix::fs::symlink(lib, &dev)
            .with_context(|| format!("linking {}", dev.display()))?;
        note!("{}", dst.display());
    }
    note!(
        "run a program on softib with: LD_LIBRARY_PATH={} SOFTIB_RUNTIME_DIR=<host dir> PROG",
        dir.display()
    );
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting_keeps_plain_paths_and_quotes_the_rest() {
        assert_eq!(shell_quote("/tmp/host-A"), "/tmp/host-A");
        assert_eq!(shell_quote("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn a_soname_names_the_file_cargo_builds() {
        assert_eq!(built_name("libibverbs.so.1"), "libibverbs.so");
        assert_eq!(built_name("libibumad.so.3"), "libibumad.so");
    }
}
