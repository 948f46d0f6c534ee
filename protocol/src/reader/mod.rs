//! The viewer's readers, sans-IO: what a reader hands the verifier ([`Arrival`], and the
//! one mapping of it to the verifier's [`Input`]), and the readers' rules as machines in
//! the shape of [`crate::session::Verifier`]: [`tcp::Reader`] (the TCP/TLS reader's
//! handshake deadlines, silence, heartbeats, reconnection schedule and budget, and the
//! runs of whole records it takes from a read).
//!
//! A driver (the viewer's reader thread, the seeded simulation, the fuzz target) moves
//! bytes and time between the operating system, or a simulated network, and a machine:
//!
//! ```text
//!   socket ── handle_data(buf) / handle_connected / handle_timeout(now) ──▶ tcp::Reader
//!          ◀── poll_transmit() (hello, heartbeats, drift requests) ──────
//!                              poll_event() ── Arrival ──▶ spool ──▶ Verifier
//! ```

pub mod nats;
pub mod tcp;

use crate::session::{Input, Verifier};
use crate::wire::{End, Record, RecordRun, Welcome};
use crate::World;

/// One thing a reader hands the verifier, in stream order.
#[derive(Debug)]
pub enum Arrival {
    /// A connection's handshake is done: the host's welcome and its attach snapshot (the
    /// first connection, and each reconnection). `connection` numbers the reader's
    /// connections from 1 (the drift request goes only to the one that sent the step).
    Attached {
        welcome: Welcome,
        world: World,
        connection: u64,
    },
    Record(Record),
    /// Record frames as they came, decoded by the verifier.
    Records(RecordRun),
    /// A resync snapshot.
    Resync(World),
    /// Steps that never came (on NATS: they are not on the stream), from the viewer's step
    /// to `to`: the viewer continues from `world`, the keyframe at step `to` that closed
    /// the gap, or, with none, the stream ended (or was lost) first. Reported as a gap.
    Gap {
        to: u64,
        world: Option<World>,
        why: String,
    },
    /// Records are missing from the NATS stream at the viewer's step (a record past it
    /// came): the viewer waits for a keyframe, which a `Gap` then gives. A notice for the
    /// driver: the verifier is not told.
    Missing {
        why: String,
    },
    /// The host's end message.
    End(End),
    /// The connection failed or closed without an end; `last` when no reconnection follows.
    Lost {
        why: String,
        last: bool,
    },
}

impl Arrival {
    /// Gives the verifier an arrival other than records (the one mapping from what a
    /// reader read to the verifier's [`Input`]); records are handed back for the driver to
    /// decode and verify one by one ([`Verifier::handle_record`]), and a notice of missing
    /// records for it to report.
    pub fn give(self, v: &mut Verifier) -> Option<Arrival> {
        let input = match self {
            Arrival::Attached {
                world, connection, ..
            } => Input::Attached { world, connection },
            Arrival::Resync(world) => Input::Resync(world),
            Arrival::End(e) => Input::End(e),
            Arrival::Lost { why, last } => Input::Lost { why, last },
            // With the keyframe that closed it the world restarts there; without one the
            // records stopped at the viewer's step and the gap stays open to the end.
            Arrival::Gap {
                world: Some(world),
                why,
                ..
            } => Input::Rejoined { world, why },
            Arrival::Gap {
                world: None, why, ..
            } => Input::Missing { why },
            back @ (Arrival::Record(_) | Arrival::Records(_) | Arrival::Missing { .. }) => {
                return Some(back)
            }
        };
        v.handle(input);
        None
    }
}

/// A small 2D world of three bodies from `seed`, at `step`: what the readers' tests attach
/// to and refuse as another world.
#[cfg(test)]
pub(crate) fn test_world(seed: u32, step: u64) -> World {
    use crate::sim::world::{Dims, Setup};
    let mut w = World::new(
        Setup {
            dims: Dims::Two,
            bodies: 3,
            seed,
        },
        None,
    );
    w.step = step;
    w
}
