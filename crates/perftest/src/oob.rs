//! The TCP under an out-of-band exchange, whatever its messages: connecting to a server that
//! may not listen yet, accepting a client within a time limit, the time left until a
//! deadline. perftest's exchange ([`crate::exchange`]) and rdma-core's pingpong exchange
//! ([`crate::pingpong`]) carry different messages over the same connection handling.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How long a retry waits after a round in which nothing accepted, or an accept found no
/// client.
const POLL: Duration = Duration::from_millis(10);
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The time left until `deadline`, at least a millisecond: zero means "no timeout" to the
/// socket calls.
pub fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// Connects to the first address `resolve` gives that accepts, asking `resolve` again and
/// retrying until `timeout` has passed: a server started a moment after its client is still
/// found. The error is what the last try said (`resolve`'s error, or the last connect's).
pub fn connect_retrying(
    mut resolve: impl FnMut() -> Result<Vec<SocketAddr>, String>,
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), String> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no address");
    loop {
        match resolve() {
            Ok(addrs) => {
                for addr in addrs {
                    match TcpStream::connect_timeout(&addr, remaining(deadline)) {
                        Ok(s) => return Ok((s, addr)),
                        Err(e) => last = e.to_string(),
                    }
                }
            }
            Err(e) => last = e,
        }
        if Instant::now() >= deadline {
            return Err(last);
        }
        std::thread::sleep(RETRY_PAUSE);
    }
}

/// Accepts one client on `listener` within `limit`; `None` when none came. The listener is
/// left non-blocking.
pub fn accept_within(
    listener: &TcpListener,
    limit: Duration,
) -> io::Result<Option<(TcpStream, SocketAddr)>> {
    // std has no accept timeout: poll a non-blocking listener.
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + limit;
    loop {
        match listener.accept() {
            Ok(pair) => return Ok(Some(pair)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                std::thread::sleep(POLL);
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::net::Ipv4Addr;

    fn free_port() -> SocketAddr {
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap()
            .local_addr()
            .unwrap()
    }

    #[test]
    fn a_client_started_before_its_server_still_connects() {
        let addr = free_port();
        let server = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let l = TcpListener::bind(addr).unwrap();
            accept_within(&l, Duration::from_secs(5)).unwrap().is_some()
        });
        let mut asked = 0;
        let (_, got) = connect_retrying(
            || {
                asked += 1;
                Ok(vec![addr])
            },
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(got, addr);
        assert!(asked > 1, "retried: {asked}");
        assert!(server.join().unwrap());
    }

    #[test]
    fn no_server_gives_the_last_error_after_the_timeout() {
        let addr = free_port();
        let e = connect_retrying(|| Ok(vec![addr]), Duration::from_millis(100)).unwrap_err();
        assert!(e.contains("refused"), "{e}");
        let e =
            connect_retrying(|| Err("cannot resolve \"x\"".into()), Duration::ZERO).unwrap_err();
        assert_eq!(e, "cannot resolve \"x\"");
        assert_eq!(
            connect_retrying(|| Ok(vec![]), Duration::ZERO).unwrap_err(),
            "no address"
        );
    }

    #[test]
    fn no_client_is_none_after_the_limit() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        assert!(accept_within(&l, Duration::from_millis(30))
            .unwrap()
            .is_none());
        assert!(remaining(Instant::now()) >= Duration::from_millis(1));
    }
}
