//! Direct writes: a plain-TCP connection that has sent every record published so far
//! parks its writer here while it waits, and the fan-out task writes each new record to
//! its socket itself with one non-blocking write, so that a viewer that keeps up costs
//! no task wake and no poll per record. Whatever the fan-out cannot write at once (the
//! socket's buffer is full, the viewer is more than one write behind, the write failed)
//! it hands back to the connection's task, which continues from exactly the byte where
//! the fan-out stopped. The writer is in one place at a time: here (the fan-out may
//! write) or with the task (only it writes), moved under the slot's lock.

use crate::framing::{rest_of, Writer, MAX_SLICES};
use crate::hub::Hub;
use crate::unpoisoned::unpoisoned;
use ostm_protocol::serve::conn::with_host_step;
pub use ostm_protocol::serve::Handed;
use ostm_protocol::wire::EncodedFrame;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;

/// One connection's place for its parked writer; shared by its task and the fan-out.
pub struct Direct {
    slot: Mutex<Slot>,
    /// Wakes the task: the fan-out handed the writer back, or the stream ended.
    wake: Notify,
}

struct Slot {
    /// The parked writer (the fan-out may write with it), or `None` while the task writes.
    writer: Option<Writer>,
    /// The parked writer's socket, when it is plain TCP: kept here so that the fan-out
    /// reads it from the slot it has locked anyway, not through the writer's stream (a
    /// cache miss per connection per record, one connection after another).
    fd: Option<RawFd>,
    /// The number of the next record to send.
    position: u64,
    /// The step the records sent bring the viewer to.
    step: u64,
    /// When the last write that completed was made.
    last_sent: Instant,
    /// Set by the fan-out when it stops writing for the task: the writer stays parked
    /// until the task takes it, and the fan-out leaves it alone meanwhile.
    handed: Option<Handed>,
}

/// What the task finds when it takes its writer back.
pub struct Unparked {
    pub writer: Writer,
    pub position: u64,
    pub step: u64,
    pub last_sent: Instant,
    pub handed: Option<Handed>,
}

/// The records one fan-out round writes to connections at one position: taken from the
/// ring once per position and round, however many connections are there.
struct Prepared {
    position: u64,
    count: u64,
    after: u64,
    frames: Vec<EncodedFrame>,
}

/// A fan-out round's prepared writes (a few positions at most: the connections that keep
/// up are all at the host's head or one or two records behind it).
#[derive(Default)]
pub struct Round {
    prepared: Vec<Prepared>,
}

/// Prepared writes kept per round at most (the oldest is dropped for a new one).
const PREPARED: usize = 8;

impl Round {
    /// Forgets what the previous round prepared (the host's step has moved since).
    pub fn clear(&mut self) {
        self.prepared.clear();
    }

    /// The write for a connection at `position`: `None` when the connection is more than
    /// one write behind (or nothing lies past it).
    fn get(&mut self, hub: &Hub, position: u64) -> Option<&Prepared> {
        if let Some(i) = self.prepared.iter().position(|p| p.position == position) {
            return self.prepared.get(i);
        }
        let mut frames = Vec::new();
        let (count, after) = hub.take_all_within(position, &mut frames)?;
        with_host_step(&mut frames, after, hub.step());
        if self.prepared.len() >= PREPARED {
            self.prepared.remove(0);
        }
        self.prepared.push(Prepared {
            position,
            count,
            after,
            frames,
        });
        self.prepared.last()
    }
}

impl Direct {
    pub fn new() -> Direct {
        Direct {
            slot: Mutex::new(Slot {
                writer: None,
                fd: None,
                position: 0,
                step: 0,
                last_sent: Instant::now(),
                handed: None,
            }),
            wake: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        unpoisoned(self.slot.lock())
    }

    /// Parks the task's writer, which has sent every record before `position`. `Err`
    /// gives it back at once when a record was published or the stream ended since the
    /// task last looked (the fan-out's round for it may have passed this connection by).
    /// Create the [`Direct::woken`] future (and `enable` it) before parking.
    pub fn park(
        &self,
        hub: &Hub,
        writer: Writer,
        position: u64,
        step: u64,
        last_sent: Instant,
    ) -> Result<(), Writer> {
        let mut slot = self.lock();
        // Under the slot's lock: a round that looks at this slot later read the ring's head
        // before it, and one that looked earlier made the head seen here at least as new.
        if hub.head() != position || hub.ended().is_some() {
            return Err(writer);
        }
        let fd = match &writer {
            Writer::Tcp(w) => Some(w.as_ref().as_raw_fd()),
            Writer::Tls(_) => None,
        };
        *slot = Slot {
            writer: Some(writer),
            fd,
            position,
            step,
            last_sent,
            handed: None,
        };
        Ok(())
    }

    /// The notification the parked task waits on.
    pub fn woken(&self) -> tokio::sync::futures::Notified<'_> {
        self.wake.notified()
    }

    /// Takes the parked writer back, with what the fan-out did meanwhile. `None` if it
    /// was not parked.
    pub fn unpark(&self) -> Option<Unparked> {
        let mut slot = self.lock();
        let writer = slot.writer.take()?;
        slot.fd = None;
        Some(Unparked {
            writer,
            position: slot.position,
            step: slot.step,
            last_sent: slot.last_sent,
            handed: slot.handed.take(),
        })
    }

    /// Wakes the parked task (the stream has ended).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The fan-out's turn at this connection: when its writer is parked and records lie
    /// past its position, writes them (one non-blocking vectored write), or hands the
    /// writer back to the task with what is left.
    pub fn offer(&self, hub: &Hub, round: &mut Round, now: Instant) {
        let mut slot = self.lock();
        if slot.handed.is_some() || hub.head() == slot.position {
            return;
        }
        let Some(fd) = slot.fd else {
            return;
        };
        let Some(p) = round.get(hub, slot.position) else {
            slot.handed = Some(Handed::Behind);
            drop(slot);
            self.wake.notify_one();
            return;
        };
        // One `send` on the socket itself (non-blocking, as tokio made it): the record of a
        // step alone, or a few with the heartbeat ahead of them in one vectored send. It
        // leaves tokio's readiness alone: when it would block, the task's own write finds
        // that out again and waits.
        // SAFETY: `fd` is the socket of the writer parked in this slot (`park`), which
        // keeps it open: the writer leaves the slot only through `unpark`, under the lock
        // held here until the write is done.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let sock = socket2::SockRef::from(&fd);
        let sent = match &p.frames[..] {
            [one] => sock.send(&one.0),
            frames => {
                let mut slices = [IoSlice::new(&[]); MAX_SLICES];
                for (s, f) in slices.iter_mut().zip(frames) {
                    *s = IoSlice::new(&f.0);
                }
                sock.send_vectored(&slices[..frames.len().min(slices.len())])
            }
        };
        let handed = match sent {
            Ok(written) => {
                let rest = rest_of(&p.frames, written);
                if rest.is_empty() {
                    slot.position = p.position + p.count;
                    slot.step = p.after;
                    slot.last_sent = now;
                    return;
                }
                Handed::Rest {
                    frames: rest,
                    after: p.after,
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) =>
            {
                Handed::Rest {
                    frames: p.frames.clone(),
                    after: p.after,
                }
            }
            Err(e) => Handed::Failed(e),
        };
        if matches!(handed, Handed::Rest { .. }) {
            // Every byte is written before the records past these: the task continues there.
            slot.position = p.position + p.count;
        }
        slot.handed = Some(handed);
        drop(slot);
        self.wake.notify_one();
    }
}
