//! Connections that have not finished their handshake: a bounded pool apart from the
//! viewer slots, with a cap per address. A connection must send a whole hello within
//! `HELLO_MS` (`ostm_protocol::serve::conn`) of being accepted (TLS handshake included); when the pool or its
//! address's share is full, the oldest waiting connection (of that address first) is
//! closed to make room, so a flood of idle or garbage connections never keeps a real
//! viewer out (docs/protocol.md, "Connections before their hello").

use crate::unpoisoned::unpoisoned;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio_util::sync::CancellationToken;

/// The pool of connections waiting for their hello.
pub struct Pending {
    inner: Mutex<Inner>,
    max: usize,
    per_address: usize,
}

struct Inner {
    next: u64,
    /// Oldest first: id → (address, eviction token).
    order: BTreeMap<u64, (IpAddr, CancellationToken)>,
    by_address: BTreeMap<IpAddr, BTreeSet<u64>>,
}

/// A connection's place in the pool; leaving is dropping it.
pub struct Admitted {
    pool: Arc<Pending>,
    id: u64,
    /// Cancelled when the connection is closed to make room for a newer one.
    pub evicted: CancellationToken,
}

impl Pending {
    /// A pool of at most `max` connections, at most `per_address` from one IP address.
    pub fn new(max: usize, per_address: usize) -> Arc<Pending> {
        Arc::new(Pending {
            inner: Mutex::new(Inner {
                next: 0,
                order: BTreeMap::new(),
                by_address: BTreeMap::new(),
            }),
            max: max.max(1),
            per_address: per_address.max(1),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        unpoisoned(self.inner.lock())
    }

    /// Takes a new connection from `ip` in; returns its place and how many waiting
    /// connections were closed to make room (0 or 1 or 2).
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> (Admitted, u64) {
        let mut g = self.lock();
        let mut evicted = 0;
        let oldest_here = g
            .by_address
            .get(&ip)
            .filter(|s| s.len() >= self.per_address)
            .and_then(|s| s.first().copied());
        if let Some(id) = oldest_here {
            g.remove(id, true);
            evicted += 1;
        }
        if g.order.len() >= self.max {
            if let Some(id) = g.order.keys().next().copied() {
                g.remove(id, true);
                evicted += 1;
            }
        }
        g.next += 1;
        let id = g.next;
        let token = CancellationToken::new();
        g.order.insert(id, (ip, token.clone()));
        g.by_address.entry(ip).or_default().insert(id);
        drop(g);
        (
            Admitted {
                pool: self.clone(),
                id,
                evicted: token,
            },
            evicted,
        )
    }

    /// Connections waiting now.
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }
}

impl Inner {
    fn remove(&mut self, id: u64, evict: bool) {
        if let Some((ip, token)) = self.order.remove(&id) {
            if evict {
                token.cancel();
            }
            if let Some(set) = self.by_address.get_mut(&ip) {
                set.remove(&id);
                if set.is_empty() {
                    self.by_address.remove(&ip);
                }
            }
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.pool.lock().remove(self.id, false);
    }
}

#[cfg(test)]
mod tests {
    use super::Pending;
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn the_oldest_waiting_connection_makes_room() {
        let a = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
        let b = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        let pool = Pending::new(4, 2);
        let (a1, e) = pool.admit(a);
        assert_eq!(e, 0);
        let (a2, _) = pool.admit(a);
        // A third from `a` closes a's oldest.
        let (a3, e) = pool.admit(a);
        assert_eq!(e, 1);
        assert!(a1.evicted.is_cancelled() && !a2.evicted.is_cancelled());
        let (b1, _) = pool.admit(b);
        let (b2, _) = pool.admit(b);
        assert_eq!(pool.len(), 4);
        // The pool is full: the oldest overall (a2) goes.
        let (c, e) = pool.admit(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)));
        assert_eq!(e, 1);
        assert!(a2.evicted.is_cancelled());
        assert!(!a3.evicted.is_cancelled() && !b1.evicted.is_cancelled());
        drop((a1, a2));
        assert_eq!(pool.len(), 4, "an evicted place was already free");
        drop((a3, b1, b2, c));
        assert_eq!(pool.len(), 0);
    }
}
