//! Links: RoCE devices added on a network interface, deleted and listed (persisted in
//! `links.json` on a real host, so a restarted daemon brings them back), and an IB port's
//! cable pulled out or plugged in.

use std::collections::BTreeMap;

use softib_proto::{ErrorKind, LinkConfig, Response};

use super::{refused, Handled};
use crate::device::{Device, RoceDev};
use crate::host::client::Client;
use crate::host::host_rt::Host;

/// `LinkAdd`: a RoCE device named `config.name` on its interface, appended to the devices.
pub(super) fn link_add(h: &mut Host, config: LinkConfig) -> Handled {
    if h.devs.iter().any(|d| d.name() == config.name) {
        return Err(refused(
            ErrorKind::Busy,
            format!("a device named {} exists already", config.name),
        ));
    }
    if config.name.is_empty()
        || config.name.len() > 63
        || !config
            .name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
    {
        return Err(refused(
            ErrorKind::Invalid,
            format!(
                "device name {:?}: use 1 to 63 letters, digits, '_' or '-'",
                config.name
            ),
        ));
    }
    let seed = h.seed ^ (h.devs.len() as u64).wrapping_mul(0x9e37_79b9);
    let d = RoceDev::new(config, seed).map_err(|e| refused(ErrorKind::Invalid, e.to_string()))?;
    h.devs.push(Device::Roce(Box::new(d)));
    save_links(h);
    Ok(Response::Ok)
}

/// `LinkDel`: deletes the RoCE device `name`, if it is the last device and no client uses it.
pub(super) fn link_del(h: &mut Host, clients: &BTreeMap<u64, Client>, name: &str) -> Handled {
    let Some(at) = h.devs.iter().position(|d| d.name() == name) else {
        return Err(refused(ErrorKind::NotFound, format!("no device {name}")));
    };
    if !matches!(h.devs[at], Device::Roce(_)) {
        return Err(refused(
            ErrorKind::Invalid,
            format!("{name} is an IB HCA of the fabric; only RoCE links can be deleted"),
        ));
    }
    if at + 1 != h.devs.len() {
        // Device indexes are how clients name devices: only the last may go while the daemon
        // runs (the others are gone after a restart).
        return Err(refused(
            ErrorKind::Busy,
            format!(
                "{name} is not the last device; delete the devices added after it                              first, or restart the daemon after `link del`"
            ),
        ));
    }
    if clients.values().any(|c| c.owned.uses(at as u32)) {
        return Err(refused(
            ErrorKind::Busy,
            format!("{name} is in use by a client (its PDs or QPs exist)"),
        ));
    }
    h.devs.remove(at);
    h.departed.forget(at as u32);
    save_links(h);
    Ok(Response::Ok)
}

/// `LinkShow`: the RoCE devices' configurations and whether each is up.
pub(super) fn link_show(h: &Host) -> Response {
    Response::Links(
        h.devs
            .iter()
            .filter_map(|d| match d {
                Device::Roce(r) => Some((r.config.clone(), r.up)),
                Device::Ib(_) => None,
            })
            .collect(),
    )
}

/// `SetPortEnabled`: pulls out (or plugs back in) the cable of `port` of IB device `dev`.
pub(super) fn set_port_enabled(h: &mut Host, dev: u32, port: u8, enabled: bool) -> Handled {
    if h.ib(dev)?.set_port_enabled(port, enabled) {
        Ok(Response::Ok)
    } else {
        Err(refused(
            ErrorKind::NotFound,
            format!("port {port} has no cable to pull or plug"),
        ))
    }
}

/// Persists the RoCE devices, so a restarted daemon brings them back.
fn save_links(h: &Host) {
    let Some(path) = &h.links_file else {
        return;
    };
    let links: Vec<&LinkConfig> = h
        .devs
        .iter()
        .filter_map(|d| match d {
            Device::Roce(r) => Some(&r.config),
            Device::Ib(_) => None,
        })
        .collect();
    let text = serde_json::to_string_pretty(&links).unwrap_or_default();
    let tmp = path.with_extension("tmp");
    // Write then rename: a crash never leaves a half-written configuration.
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

#[cfg(test)]
mod tests {
    use softib_proto::Request;

    use super::*;
    use crate::host::testing::TestHost;

    /// A RoCE device on the loopback interface, on a port the kernel picks (it sends nothing).
    fn lo(name: &str) -> Request {
        Request::LinkAdd(LinkConfig {
            name: name.into(),
            netdev: "lo".into(),
            addr: "127.0.0.1".parse().unwrap(),
            udp_port: 0,
        })
    }

    fn saved(path: &std::path::Path) -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap();
        let links: Vec<LinkConfig> = serde_json::from_str(&text).unwrap();
        links.into_iter().map(|l| l.name).collect()
    }

    #[test]
    fn a_link_needs_a_new_valid_name_and_is_persisted() {
        let mut t = TestHost::new();
        let file =
            std::env::temp_dir().join(format!("softib-unit-links-{}.json", std::process::id()));
        t.host.links_file = Some(file.clone());
        let a = t.client();
        assert_eq!(
            t.refused(a, lo("mlx4_0")),
            (
                ErrorKind::Busy,
                "a device named mlx4_0 exists already".into()
            )
        );
        for bad in ["", "a b", &"x".repeat(64)] {
            assert_eq!(
                t.refused(a, lo(bad)),
                (
                    ErrorKind::Invalid,
                    format!("device name {bad:?}: use 1 to 63 letters, digits, '_' or '-'")
                )
            );
        }
        t.ok(a, lo("rxe0"));
        t.ok(a, lo("rxe1"));
        assert_eq!(saved(&file), ["rxe0", "rxe1"]);
        let Response::Links(links) = t.ok(a, Request::LinkShow) else {
            panic!("no links");
        };
        let names: Vec<_> = links.iter().map(|(l, _)| l.name.as_str()).collect();
        assert_eq!(names, ["rxe0", "rxe1"]);
        let _ = std::fs::remove_file(&file);
    }

    #[test]
    fn only_the_last_unused_roce_link_can_be_deleted() {
        let mut t = TestHost::new();
        let file =
            std::env::temp_dir().join(format!("softib-unit-del-{}.json", std::process::id()));
        t.host.links_file = Some(file.clone());
        let a = t.client();
        t.ok(a, lo("rxe0"));
        t.ok(a, lo("rxe1"));
        let del = |name: &str| Request::LinkDel { name: name.into() };
        assert_eq!(
            t.refused(a, del("nope")),
            (ErrorKind::NotFound, "no device nope".into())
        );
        assert_eq!(
            t.refused(a, del("mlx4_0")),
            (
                ErrorKind::Invalid,
                "mlx4_0 is an IB HCA of the fabric; only RoCE links can be deleted".into()
            )
        );
        let (kind, message) = t.refused(a, del("rxe0"));
        assert_eq!(kind, ErrorKind::Busy);
        assert!(
            message.starts_with("rxe0 is not the last device"),
            "{message}"
        );
        // rxe1 is device 2.
        let pd = t.handle(a, Request::AllocPd { dev: 2 });
        assert_eq!(
            t.refused(a, del("rxe1")),
            (
                ErrorKind::Busy,
                "rxe1 is in use by a client (its PDs or QPs exist)".into()
            )
        );
        t.ok(a, Request::DeallocPd { dev: 2, pd });
        t.ok(a, del("rxe1"));
        assert_eq!(t.host.devs.len(), 2);
        assert_eq!(saved(&file), ["rxe0"]);
        let _ = std::fs::remove_file(&file);
    }

    #[test]
    fn only_a_cabled_ib_port_can_be_pulled() {
        let mut t = TestHost::new();
        let a = t.client();
        t.ok(a, lo("rxe0"));
        let pull = |dev| Request::SetPortEnabled {
            dev,
            port: 1,
            enabled: false,
        };
        // The test host's HCA has no cables.
        assert_eq!(
            t.refused(a, pull(0)),
            (
                ErrorKind::NotFound,
                "port 1 has no cable to pull or plug".into()
            )
        );
        assert_eq!(
            t.refused(a, pull(1)),
            (
                ErrorKind::Invalid,
                "device 1 is a RoCE device: it has no subnet management (QP0/QP1)".into()
            )
        );
    }
}
