//! A TCP link a test can cut and heal: a listener on 127.0.0.1 that forwards each
//! connection it accepts to one target port, byte for byte both ways. Cut, it drops every
//! connection it carries and every one it accepts (the peer sees the connection reset or
//! closed at once, as a firewall that rejects); healed, it forwards again. Its threads stop
//! when it is dropped.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

struct Shared {
    cut: AtomicBool,
    stop: AtomicBool,
    /// Both ends of every connection forwarded now (closed ones are shut down again
    /// harmlessly at a cut).
    open: Mutex<Vec<TcpStream>>,
}

/// A link from `127.0.0.1:port()` to `127.0.0.1:target`.
pub struct Link {
    port: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Link {
    /// Listens on a free port of 127.0.0.1 and forwards to `127.0.0.1:target`.
    ///
    /// # Panics
    /// No port can be bound.
    pub fn start(target: u16) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a link's port");
        let port = listener.local_addr().expect("a link's address").port();
        let shared = Arc::new(Shared {
            cut: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                if s.cut.load(Ordering::SeqCst) {
                    let _ = conn.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(up) = TcpStream::connect(("127.0.0.1", target)) else {
                    let _ = conn.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = conn.set_nodelay(true);
                let _ = up.set_nodelay(true);
                let (Ok(a), Ok(b)) = (conn.try_clone(), up.try_clone()) else {
                    continue;
                };
                {
                    let mut open = s.open.lock().unwrap_or_else(|e| e.into_inner());
                    // Forget the connections that have ended (both pumps shut them).
                    open.retain(|c| c.peer_addr().is_ok());
                    open.push(a);
                    open.push(b);
                }
                pump(conn.try_clone(), up.try_clone());
                pump(Ok(up), Ok(conn));
            }
        });
        Link {
            port,
            shared,
            accept: Some(accept),
        }
    }

    /// The port the link listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Drops every connection the link carries and refuses new ones until [`Link::heal`].
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        let open = std::mem::take(&mut *self.shared.open.lock().unwrap_or_else(|e| e.into_inner()));
        for c in open {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// Forwards new connections again.
    pub fn heal(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
    }

    /// Cut now.
    pub fn is_cut(&self) -> bool {
        self.shared.cut.load(Ordering::SeqCst)
    }
}

/// Copies `from` to `to` on a thread of its own until either ends; then shuts both.
fn pump(from: std::io::Result<TcpStream>, to: std::io::Result<TcpStream>) {
    let (Ok(mut from), Ok(mut to)) = (from, to) else {
        return;
    };
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    });
}

impl Drop for Link {
    fn drop(&mut self) {
        self.cut();
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which then sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An echo server on 127.0.0.1: each connection gets back what it sends.
    fn echo() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut c = c;
                    let mut buf = [0u8; 64];
                    while let Ok(n) = c.read(&mut buf) {
                        if n == 0 || c.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        port
    }

    fn connect(link: &Link) -> TcpStream {
        let c = TcpStream::connect(("127.0.0.1", link.port())).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        c
    }

    /// Whether `c` still carries bytes both ways: a byte sent comes back.
    fn carries(c: &mut TcpStream) -> bool {
        let mut b = [0u8; 1];
        c.write_all(b"x").is_ok() && matches!(c.read(&mut b), Ok(1)) && b == *b"x"
    }

    #[test]
    fn a_cut_drops_and_refuses_connections_and_a_heal_forwards_again() {
        let link = Link::start(echo());
        let mut before = connect(&link);
        assert!(carries(&mut before), "a link forwards");
        link.cut();
        assert!(link.is_cut());
        assert!(
            !carries(&mut before),
            "a cut drops the connections it carries"
        );
        let mut during = connect(&link);
        assert!(!carries(&mut during), "a cut link refuses new connections");
        link.heal();
        let mut after = connect(&link);
        assert!(carries(&mut after), "a healed link forwards again");
    }
}
