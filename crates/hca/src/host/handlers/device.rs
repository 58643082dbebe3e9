//! The devices and who uses them: the device list with its ports, every client's resources
//! (`softib res`), and the asynchronous events of the client's objects and of the ports.

use std::collections::BTreeMap;

use softib_proto::{ClientResources, Response};

use crate::device::Device;
use crate::host::client::Client;
use crate::host::host_rt::Host;

/// `ListDevices`: every device of the host, with its ports' state.
pub(super) fn list_devices(h: &Host) -> Response {
    Response::Devices(h.devs.iter().map(Device::info).collect())
}

/// `Resources`: what each client (that said Hello) holds on each device.
pub(super) fn resources(h: &Host, clients: &BTreeMap<u64, Client>) -> Response {
    let ndev = h.devs.len() as u32;
    let list = clients
        .values()
        .filter(|c| c.hello)
        .map(|c| ClientResources {
            pid: c.pid,
            program: c.program.clone(),
            per_device: (0..ndev).map(|d| (d, c.owned.count(d))).collect(),
            buffers: c.owned.buffers.len() as u32,
        })
        .collect();
    Response::Resources(list)
}

/// `AsyncEvents`: the events `events::route_events` kept for the client since it last asked.
pub(super) fn async_events(c: &mut Client) -> Response {
    Response::AsyncEvents(c.events.drain(..).collect())
}
