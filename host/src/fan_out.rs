//! The fan-out: a fixed number of tasks ([`FAN_OUTS`]), whatever the viewers, that the
//! stepping loop wakes when it has published ([`Hub::stepped`]). Each writes the new
//! records itself to every plain-TCP connection of its share that had sent all records
//! before them (its writer parked in its [`Direct`] slot); the first also wakes the
//! connections waiting for records otherwise (TLS ones, [`Hub::published`]). The records
//! come from the hub's ring; the fan-out keeps only who is registered with it.

use crate::direct::{Direct, Round};
use crate::hub::{Hub, FAN_OUTS};
use crate::unpoisoned::unpoisoned;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The connections registered for direct writes, dealt out to the fan-out tasks in turn.
pub struct FanOut {
    /// Connections that can take direct writes, registered since their task last looked.
    joining: [Mutex<Vec<Weak<Direct>>>; FAN_OUTS],
    /// Connections registered so far.
    registered: AtomicU64,
}

impl Default for FanOut {
    fn default() -> Self {
        FanOut::new()
    }
}

impl FanOut {
    pub fn new() -> FanOut {
        FanOut {
            joining: std::array::from_fn(|_| Mutex::new(Vec::new())),
            registered: AtomicU64::new(0),
        }
    }

    /// Lets a fan-out task write to this connection directly whenever its writer is
    /// parked.
    pub fn register(&self, hub: &Hub, direct: &Arc<Direct>) {
        let part = self.registered.fetch_add(1, Ordering::Relaxed) as usize % FAN_OUTS;
        hub.fan_out_busy(part);
        unpoisoned(self.joining[part].lock()).push(Arc::downgrade(direct));
    }

    /// Runs fan-out task `part` (of [`FAN_OUTS`]): each time the stepping loop has published
    /// (once for any number of steps published meanwhile), writes the new records to
    /// every connection of its share whose writer is parked ([`Direct::offer`]); part 0
    /// also wakes every connection waiting for records. Once the stream has ended, it
    /// makes a last round (the last records) and wakes every parked connection of its
    /// share to send its end; then it returns.
    pub async fn run(&self, hub: &Hub, part: usize) {
        let mut conns: Vec<Weak<Direct>> = Vec::new();
        let mut round = Round::default();
        loop {
            // Read before the round: a round that starts after the end was set writes the
            // last records.
            let ended = hub.has_ended();
            if part == 0 {
                hub.published().notify_waiters();
            }
            conns.append(&mut *unpoisoned(self.joining[part].lock()));
            round.clear();
            let now = tokio::time::Instant::now();
            let mut i = 0;
            while let Some(c) = conns.get(i) {
                // The connections' slots are cold (one per viewer, each touched once a
                // round): ask for the one two ahead while this one's `send` runs.
                if let Some(ahead) = conns.get(i + 2) {
                    prefetch(ahead.as_ptr());
                }
                match c.upgrade() {
                    Some(direct) => {
                        direct.offer(hub, &mut round, now);
                        i += 1;
                    }
                    None => {
                        conns.swap_remove(i);
                    }
                }
            }
            if ended {
                for direct in conns.iter().filter_map(Weak::upgrade) {
                    direct.wake();
                }
                return;
            }
            hub.stepped(part).notified().await;
        }
    }
}

/// Asks the CPU to bring the memory at `p` into its cache, without waiting for it; a hint
/// only (nothing is read, so any address will do).
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing and cannot fault, whatever the address; SSE is in
    // every x86-64 CPU.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::tests::{run, world};
    use crate::hub::{Limits, Take};
    use ostm_protocol::wire::End;

    #[tokio::test]
    async fn the_fan_out_wakes_every_waiting_connection() {
        let hub = std::sync::Arc::new(Hub::new(world(), Limits { queue: 4, ring: 8 }));
        let fan_out = std::sync::Arc::new(FanOut::new());
        let fan = tokio::spawn({
            let (hub, fan_out) = (hub.clone(), fan_out.clone());
            async move { fan_out.run(&hub, 0).await }
        });
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let hub = hub.clone();
                let mut at = hub.join(None).unwrap().position;
                tokio::spawn(async move {
                    loop {
                        let notified = hub.published().notified();
                        tokio::pin!(notified);
                        notified.as_mut().enable();
                        match hub.take(&mut at, 64, &mut Vec::new()) {
                            Take::Nothing => notified.await,
                            other => {
                                return matches!(
                                    other,
                                    Take::Records {
                                        after: 1,
                                        more: false
                                    }
                                )
                            }
                        }
                    }
                })
            })
            .collect();
        tokio::task::yield_now().await;
        let mut w = world();
        let hub2 = hub.clone();
        std::thread::spawn(move || run(&hub2, &mut w, 1))
            .join()
            .unwrap();
        for t in waiters {
            assert!(tokio::time::timeout(std::time::Duration::from_secs(30), t)
                .await
                .expect("woken")
                .unwrap());
        }
        hub.end(End {
            reason: ostm_protocol::wire::EndReason::Finished,
            text: String::new(),
            host_step: 1,
        });
        tokio::time::timeout(std::time::Duration::from_secs(30), fan)
            .await
            .expect("the fan-out ends with the stream")
            .unwrap();
    }
}
