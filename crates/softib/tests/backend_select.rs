//! `Device::open` chooses its backend as `Context::open` does: with `SOFTIB_BACKEND=rdma-core`
//! it goes to rdma-core (which, on a host without RDMA devices or without libibverbs, says
//! so), never to a daemon. (Its own test binary: it sets the process's environment.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[test]
fn device_open_follows_softib_backend() {
    std::env::set_var("SOFTIB_BACKEND", "rdma-core");
    // Wherever this runs, the answer is rdma-core's: a device (on a host with one) or why not.
    match softib::Device::open(None) {
        Ok(d) => eprintln!("an rdma-core device here: {}", d.info().name),
        Err(e) => {
            let m = e.to_string();
            assert!(
                !m.contains("softibd") && (m.contains("libibverbs") || m.contains("RDMA")),
                "{m}"
            );
        }
    }
    std::env::set_var("SOFTIB_BACKEND", "nonsense");
    let e = softib::Device::open(None).unwrap_err().to_string();
    assert!(e.contains("SOFTIB_BACKEND=nonsense"), "{e}");
}
