//! What the daemon does to and sees of the wire: faults injected on a device's egress
//! (loss, duplication, reordering, delay, corruption) and a packet capture of everything a
//! device sends and receives.

use std::path::PathBuf;

use softib_net::fault::FaultSpec;
use softib_proto::{ErrorKind, Response};

use super::{refused, Handled};
use crate::host::host_rt::Host;

/// `SetFaults` of `port` of `dev` (0: every port).
pub(super) fn set_faults(h: &mut Host, dev: u32, port: u8, spec: FaultSpec) -> Handled {
    if h.dev(dev)?.set_faults(port, spec) {
        Ok(Response::Ok)
    } else {
        Err(refused(
            ErrorKind::NotFound,
            format!("device {dev} has no port {port}"),
        ))
    }
}

/// `Faults`: what is injected on each port of `dev`, and what it did.
pub(super) fn faults(h: &mut Host, dev: u32) -> Handled {
    Ok(Response::Faults(h.dev(dev)?.faults()))
}

/// `Capture`: starts writing `dev`'s packets to `path` (absolute: the daemon writes it), or
/// stops with `None`; answers with the number of packets the capture it stopped wrote.
pub(super) fn capture(h: &mut Host, dev: u32, path: Option<String>) -> Handled {
    let path = path.map(PathBuf::from);
    if path.as_ref().is_some_and(|p| !p.is_absolute()) {
        return Err(refused(
            ErrorKind::Invalid,
            "the capture file must be an absolute path (the daemon writes it)",
        ));
    }
    match h.dev(dev)?.set_capture(path.as_deref()) {
        Ok(n) => Ok(Response::Handle(n)),
        Err(e) => Err(refused(ErrorKind::Invalid, format!("capture: {e}"))),
    }
}

/// `CaptureCount`: how many packets the running capture wrote (0 when none runs).
pub(super) fn capture_count(h: &mut Host, dev: u32) -> Handled {
    Ok(Response::Handle(h.dev(dev)?.captured().unwrap_or(0)))
}
