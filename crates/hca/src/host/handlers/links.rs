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
