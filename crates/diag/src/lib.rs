//! `softib-diag` — the output of the InfiniBand diagnostics, as pure formatting functions.
//!
//! Every function here turns data that softib already has (a device's attributes, a
//! [`Subnet`](softib_fabric::subnet::Subnet) found by a directed-route sweep, SMP/PMA/SA
//! attributes from `softib-wire`) into exactly the text the real tool prints, byte for byte,
//! so that scripts written against `ibstat`, `ibv_devinfo`, `ibnetdiscover`, `iblinkinfo`,
//! `smpquery`, `perfquery` and `saquery` keep working against softib. The reference outputs
//! are the golden captures in `tests/golden/` (opensm + infiniband-diags 44 on ibsim, and
//! rxe for the verbs tools).
//!
//! * [`device`]: `ibstat`, `ibstatus`, `ibv_devices`, `ibv_devinfo` over [`device::DeviceView`];
//! * [`fabric`]: `ibnodes`, `ibhosts`, `ibswitches`, `ibnetdiscover`, `iblinkinfo`, `ibaddr`
//!   over a [`Subnet`](softib_fabric::subnet::Subnet);
//! * [`smp`]: `smpquery` (nodeinfo, portinfo, nodedesc, switchinfo, pkeys), `perfquery` and
//!   `saquery` record dumps.
//!
//! Nothing here does I/O, reads a clock or panics: timestamps are parameters, and malformed
//! or unexpected values print the way the C tools print them (`???`, `invalid ...`).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod device;
pub mod fabric;
mod fmt;

pub use fmt::ctime_utc;
pub mod smp;
