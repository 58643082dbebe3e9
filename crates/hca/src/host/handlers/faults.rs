//! What the daemon does to and sees of the wire: faults injected on a device's egress
//! (loss, duplication, reordering, delay, corruption) and a packet capture of everything a
//! device sends and receives.

use std::collections::BTreeMap;
use std::path::PathBuf;

use softib_net::fault::FaultSpec;
use softib_proto::{ErrorKind, Response};

use super::{refused, Handled};
use crate::host::client::Client;
use crate::host::host_rt::Host;
use crate::host::oversight;

/// `SetFaults` of `port` of `dev` (0: every port); the process engines on a RoCE device are
/// told.
pub(super) fn set_faults(
    h: &mut Host,
    clients: &BTreeMap<u64, Client>,
    dev: u32,
    port: u8,
    spec: FaultSpec,
) -> Handled {
    let d = h.dev(dev)?;
    if d.set_faults(port, spec) {
        if d.steering().is_some() {
            oversight::tell_faults(clients, dev, d.roce_faults());
        }
        Ok(Response::Ok)
    } else {
        Err(refused(
            ErrorKind::NotFound,
            format!("device {dev} has no port {port}"),
        ))
    }
}

/// `Faults`: what is injected on each port of `dev`, and what it did — to the daemon's own
/// packets and to those of the process engines on the device.
pub(super) fn faults(h: &mut Host, clients: &BTreeMap<u64, Client>, dev: u32) -> Handled {
    let mut ports = h.dev(dev)?.faults();
    let engines = oversight::fault_stats(h, clients, dev);
    if let (Some((_, _, s)), true) = (ports.first_mut(), h.dev(dev)?.steering().is_some()) {
        s.lost += engines.lost;
        s.duplicated += engines.duplicated;
        s.reordered += engines.reordered;
        s.corrupted += engines.corrupted;
        s.delayed += engines.delayed;
    }
    Ok(Response::Faults(ports))
}

/// `Capture`: starts writing `dev`'s packets to `path` (absolute: the daemon writes it), or
/// stops with `None`; answers with the number of packets the capture it stopped wrote.
pub(super) fn capture(
    h: &mut Host,
    clients: &mut BTreeMap<u64, Client>,
    dev: u32,
    path: Option<String>,
) -> Handled {
    let path = path.map(PathBuf::from);
    if path.as_ref().is_some_and(|p| !p.is_absolute()) {
        return Err(refused(
            ErrorKind::Invalid,
            "the capture file must be an absolute path (the daemon writes it)",
        ));
    }
    let roce = h.dev(dev)?.steering().is_some();
    if roce && h.dev(dev)?.captured().is_some() {
        // What the engines captured so far goes into the capture that stops.
        oversight::tell_capture(h, clients, dev, false);
    }
    let n = h
        .dev(dev)?
        .set_capture(path.as_deref())
        .map_err(|e| refused(ErrorKind::Invalid, format!("capture: {e}")))?;
    if roce && path.is_some() {
        oversight::tell_capture(h, clients, dev, true);
    }
    Ok(Response::Handle(n))
}

/// `CaptureCount`: how many packets the running capture wrote (0 when none runs).
pub(super) fn capture_count(h: &mut Host, dev: u32) -> Handled {
    Ok(Response::Handle(h.dev(dev)?.captured().unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use softib_proto::Request;

    use super::*;
    use crate::host::testing::TestHost;

    #[test]
    fn faults_are_set_per_existing_port_and_reported() {
        let mut t = TestHost::new();
        let a = t.client();
        let spec = FaultSpec {
            loss: 0.25,
            seed: 3,
            ..Default::default()
        };
        assert_eq!(
            t.refused(
                a,
                Request::SetFaults {
                    dev: 0,
                    port: 9,
                    spec
                }
            ),
            (ErrorKind::NotFound, "device 0 has no port 9".into())
        );
        t.ok(
            a,
            Request::SetFaults {
                dev: 0,
                port: 2,
                spec,
            },
        );
        let Response::Faults(ports) = t.ok(a, Request::Faults { dev: 0 }) else {
            panic!("no faults");
        };
        let specs: Vec<_> = ports.iter().map(|(p, s, _)| (*p, *s)).collect();
        assert_eq!(specs, [(1, FaultSpec::default()), (2, spec)]);
    }

    #[test]
    fn a_capture_goes_to_an_absolute_path_and_stops_with_its_count() {
        let mut t = TestHost::new();
        let a = t.client();
        let capture = |path: Option<&str>| Request::Capture {
            dev: 0,
            path: path.map(Into::into),
        };
        assert_eq!(
            t.refused(a, capture(Some("relative.pcap"))),
            (
                ErrorKind::Invalid,
                "the capture file must be an absolute path (the daemon writes it)".into()
            )
        );
        assert!(matches!(
            t.ok(a, Request::CaptureCount { dev: 0 }),
            Response::Handle(0)
        ));
        let file = std::env::temp_dir().join(format!("softib-unit-{}.pcap", std::process::id()));
        t.ok(a, capture(file.to_str()));
        assert!(t.host.devs[0].captured().is_some(), "no capture runs");
        assert!(matches!(t.ok(a, capture(None)), Response::Handle(0)));
        assert!(
            t.host.devs[0].captured().is_none(),
            "the capture still runs"
        );
        // The pcap header was written.
        assert!(std::fs::metadata(&file).unwrap().len() >= 24);
        let _ = std::fs::remove_file(&file);
    }
}
