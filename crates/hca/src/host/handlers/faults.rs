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
