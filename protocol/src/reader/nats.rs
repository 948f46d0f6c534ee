//! The NATS reader's rules, sans-IO (docs/fan-out.md, "What a viewer does", "Gaps"): the
//! session's messages after the keyframe it joined at, taken once each by stream sequence,
//! turned into the verifier's arrivals by the gap rule ([`Follow`]): records verified,
//! repeats skipped, missing records noticed, the keyframe that closes a gap, the gap left
//! open at the end or when the session is lost; a keyframe of another world refused; the
//! silence rule and the resumption of a quiet stream with a new consumer.
//!
//! [`Reader`] holds no client, clock or channel: its driver hands it each message
//! ([`Reader::handle_message`]) and the time ([`Reader::handle_timeout`]), and does what
//! [`Reader::poll_event`] says.

use super::Arrival;
use crate::error::FormatError;
use crate::session::{same_world, Millis};
use crate::wire::nats::{self as wire, another_world, not_a_record, Follow, Leaf, Session, Take};
use crate::wire::{End, PeerRole, ToViewer, Welcome, VERSION};
use crate::World;
use std::collections::VecDeque;

/// How long the reader waits for any message before it gives the session up: longer than
/// over TCP, since a NATS server that restarts takes the client a few reconnection
/// attempts and the reader a new consumer (asked for every 3 s of quiet) to resume.
pub const SILENCE_MS: u64 = 30_000;
/// How long without a message before the reader reads on with a new consumer.
pub const RESUME_AFTER_MS: u64 = 3_000;

/// A fault planted in the reader on purpose, for the seeded simulation's `--plant`: only
/// a build with the `plants` feature (the simulation's) can set one, and only there is it
/// looked at.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    /// The end is handed over before the gap it leaves open.
    EndBeforeOpenGap,
    /// The reader's half of the verifier's `accept-duplicate`: a message delivered again
    /// is taken again, and a record of the step just handed over is handed over again.
    PassRepeats,
    /// The reader's half of the verifier's `skip-gap-check`: a record past the next step
    /// is handed over.
    PassSkips,
    /// The reader's half of the verifier's `accept-foreign-keyframe`: a keyframe of
    /// another world is taken as the session's.
    PassForeignKeyframes,
}

impl Plant {
    /// The plants of the reader alone, with their names on the command line (the other
    /// two are set with the verifier's).
    pub const ALL: [(Plant, &'static str); 1] = [(Plant::EndBeforeOpenGap, "end-before-open-gap")];
}

/// What the driver does next, in order.
#[derive(Debug)]
pub enum Event {
    /// Hand this to the verifier, in order.
    Deliver(Arrival),
    /// The stream has been quiet: read on with a new consumer from this stream sequence.
    Resume { from_seq: u64 },
    /// The session sent nothing for [`SILENCE_MS`]: the reader gives it up (an open gap,
    /// if any, was delivered first).
    Silent,
}

/// What a reader joined at a keyframe hands over first: the keyframe's `world` as the
/// attach snapshot of connection `connection`, under a welcome as a host's would read with
/// the host's `rate` (the keyframe's header; no heartbeat, ring or queue: NATS keeps them).
pub fn joined(world: World, rate: u32, connection: u64) -> Arrival {
    let welcome = Welcome {
        version: VERSION,
        role: PeerRole::Host as u8,
        rate,
        heartbeat_ms: 0,
        ring: 0,
        queue: 0,
    };
    Arrival::Attached {
        welcome,
        world,
        connection,
    }
}

/// The NATS reader: see the module's documentation.
#[derive(Debug)]
pub struct Reader {
    /// `URL/NAME`, as a message's place begins in errors.
    name: String,
    session: Session,
    /// The session's world: a keyframe must be of it.
    world: World,
    follow: Follow,
    /// The last stream sequence taken.
    last_seq: u64,
    /// The stream's last sequence, at or below the last one taken when the driver read on
    /// ([`Reader::handle_stream_last`]): its message is read again (0: none).
    reread: u64,
    /// When the last message came.
    heard: Millis,
    /// When the driver last looked (a message, a request, the resume timer).
    woke: Millis,
    host_step: u64,
    /// Stopped: the end taken, a refusal, or silence; nothing follows.
    done: bool,
    /// The end was taken (a spool that refused what came with it still opens its gap).
    ended: bool,
    /// The spool's bound was reached (its sentence): records are dropped until a keyframe
    /// taken once the spool has room again closes the gap.
    spool_full: Option<String>,
    /// The spool has no room yet: keyframes do not close the gap.
    draining: bool,
    events: VecDeque<Event>,
    plant: crate::plant::Planted<Plant>,
}

impl Reader {
    /// A reader of `session` on the server named `name` (`URL/NAME`), joined at `world`,
    /// the keyframe at stream sequence `key_seq`, at `now`.
    pub fn new(name: String, session: Session, world: World, key_seq: u64, now: Millis) -> Reader {
        Reader {
            name,
            session,
            follow: Follow::new(world.step),
            host_step: world.step,
            world,
            last_seq: key_seq,
            reread: 0,
            heard: now,
            woke: now,
            done: false,
            ended: false,
            spool_full: None,
            draining: false,
            events: VecDeque::new(),
            plant: Default::default(),
        }
    }

    /// Plants a fault (the simulation's `--plant`).
    #[cfg(feature = "plants")]
    #[doc(hidden)]
    pub fn plant(&mut self, plant: Plant) {
        self.plant.set(plant);
    }

    /// The latest host step heard of.
    pub fn host_step(&self) -> u64 {
        self.host_step
    }

    /// The last stream sequence taken.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// The next event, if any.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Reader::handle_timeout`] must be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        (!self.done).then(|| self.woke.saturating_add(RESUME_AFTER_MS))
    }

    /// The spool refused what was delivered last (its bound, `--spool-max`, reached:
    /// `why`, its sentence): what it did not take is dropped, and so is every record until
    /// the spool has room again ([`Reader::handle_spool_drained`]) and a keyframe comes,
    /// which closes the gap (docs/protocol.md, "The spool's file"). A notice says so.
    pub fn handle_spool_full(&mut self, why: String) {
        if self.done && !self.ended {
            // Stopped by silence or a refusal: nothing follows.
            return;
        }
        if self.ended {
            // The end came with what the spool refused: the gap stays open to its step
            // (the driver hands the end over after it).
            let why = format!(
                "{why}; the stream {} had no keyframe before its end",
                self.session.stream()
            );
            let to = self.host_step;
            self.deliver(Arrival::Gap {
                to,
                world: None,
                why,
            });
            return;
        }
        self.events.retain(|e| !matches!(e, Event::Deliver(_)));
        self.deliver(Arrival::Missing {
            why: format!("{why}; dropping records until the stream's next keyframe"),
        });
        self.spool_full = Some(why);
        self.draining = true;
    }

    /// The spool has room again after [`Reader::handle_spool_full`]: the next keyframe
    /// closes the gap.
    pub fn handle_spool_drained(&mut self) {
        self.draining = false;
    }

    /// Waiting for the spool to have room again after [`Reader::handle_spool_full`].
    pub fn is_draining(&self) -> bool {
        self.spool_full.is_some() && self.draining
    }

    /// The stream's last sequence, as the server gave it when the driver reads on after
    /// [`Event::Resume`]: returns the sequence to read on from. Below the last one taken,
    /// the stream lost its tail (a cluster that lost acknowledged messages) and numbers the
    /// next messages from there again: the reader takes them as new (one it took before is
    /// skipped by its step), not as repeats. At or below the last one taken, the stream's
    /// last message may be such a new one at a sequence taken before (the host's end,
    /// say): the reader reads on from it, and takes it again; the message it took
    /// before, read again, gives nothing and is not a message heard (the silence is not
    /// put off).
    pub fn handle_stream_last(&mut self, last: u64) -> u64 {
        if last != 0 && last <= self.last_seq {
            self.reread = last;
            self.last_seq = last - 1;
        } else {
            self.reread = 0;
            self.last_seq = self.last_seq.min(last);
        }
        self.last_seq.saturating_add(1)
    }

    /// The driver did something else (passed a drift request on, met a read error): the
    /// quiet wait starts again.
    pub fn handle_wake(&mut self, now: Millis) {
        self.woke = now;
    }

    /// The time is `now`: after [`RESUME_AFTER_MS`] without a message the stream is read
    /// on with a new consumer; after [`SILENCE_MS`] the session is given up.
    pub fn handle_timeout(&mut self, now: Millis) {
        if self.done || now < self.woke.saturating_add(RESUME_AFTER_MS) {
            return;
        }
        self.woke = now;
        if now.saturating_sub(self.heard) >= SILENCE_MS {
            self.open_gap(0, "before the session was lost");
            self.done = true;
            self.events.push_back(Event::Silent);
            return;
        }
        // A server's sequence is never the largest (it would have no next); one that says
        // so is read on from there, not overflowed.
        self.events.push_back(Event::Resume {
            from_seq: self.last_seq.saturating_add(1),
        });
    }

    /// One message of the stream, on `subject` at stream sequence `seq` (0: not known).
    /// A message delivered again (a new consumer's) is skipped. Returns the end message,
    /// or the refusal of a malformed message, a keyframe of another world or a frame
    /// that is not a record (what was whole and valid before it is delivered first).
    ///
    /// # Errors
    /// The refusal, naming the subject, the stream sequence and the byte offset.
    pub fn handle_message(
        &mut self,
        now: Millis,
        subject: &str,
        seq: u64,
        payload: &[u8],
    ) -> Result<Option<End>, FormatError> {
        let reread = std::mem::take(&mut self.reread);
        let reread = seq != 0 && reread == seq;
        let heard = std::mem::replace(&mut self.heard, now);
        self.woke = now;
        let again = seq <= self.last_seq && seq != 0 && !self.plant.is(Plant::PassRepeats);
        if self.done || again {
            return Ok(None);
        }
        self.last_seq = self.last_seq.max(seq);
        let place = format!("{}: subject {subject}, stream sequence {seq}", self.name);
        let events = self.events.len();
        let taken = self.take(subject, &place, payload);
        if reread && matches!(taken, Ok(None)) && self.events.len() == events {
            // The message taken before, read again: the stream said nothing new.
            self.heard = heard;
        }
        // The end or a refusal: nothing follows.
        if !matches!(taken, Ok(None)) {
            self.done = true;
        }
        taken
    }

    fn take(
        &mut self,
        subject: &str,
        place: &str,
        payload: &[u8],
    ) -> Result<Option<End>, FormatError> {
        match self.session.leaf(subject) {
            Leaf::Records => self.records(place, payload).map(|()| None),
            Leaf::Keyframes => self.keyframe(place, payload).map(|()| None),
            Leaf::End => {
                let end = wire::end(place, payload)?;
                self.ended = true;
                if self.plant.is(Plant::EndBeforeOpenGap) {
                    self.deliver(Arrival::End(end.clone()));
                    self.open_gap(end.host_step, "before its end");
                    return Ok(Some(end));
                }
                self.open_gap(end.host_step, "before its end");
                self.deliver(Arrival::End(end.clone()));
                Ok(Some(end))
            }
            Leaf::Other => Ok(None),
        }
    }

    fn deliver(&mut self, a: Arrival) {
        self.events.push_back(Event::Deliver(a));
    }

    fn keyframe(&mut self, place: &str, payload: &[u8]) -> Result<(), FormatError> {
        let world = wire::keyframe(place, payload)?;
        if !same_world(&world, &self.world) && !self.plant.is(Plant::PassForeignKeyframes) {
            return Err(another_world(place));
        }
        self.host_step = self.host_step.max(world.step);
        if let Some(full) = &self.spool_full {
            if !self.draining && world.step >= self.follow.next() {
                let why = format!(
                    "{full}; continuing from the stream {}'s keyframe at step {}",
                    self.session.stream(),
                    world.step
                );
                self.spool_full = None;
                self.follow = Follow::new(world.step);
                self.deliver(Arrival::Gap {
                    to: world.step,
                    world: Some(world),
                    why,
                });
            }
            return Ok(());
        }
        if let Some(from) = self.follow.keyframe(world.step) {
            let why = format!(
                "steps {from}..{} are not on the stream {}; continuing from its keyframe at step {}",
                world.step,
                self.session.stream(),
                world.step
            );
            self.deliver(Arrival::Gap {
                to: world.step,
                world: Some(world),
                why,
            });
        }
        Ok(())
    }

    /// The records of a `rec` message, each whole and valid one before a bad frame taken.
    fn records(&mut self, place: &str, payload: &[u8]) -> Result<(), FormatError> {
        for f in wire::frames(place, payload)? {
            let (at, m) = f?;
            let ToViewer::Record(r) = m else {
                return Err(not_a_record(place, at, &m));
            };
            self.host_step = self.host_step.max(r.step.saturating_add(1));
            if self.spool_full.is_some() {
                continue;
            }
            let next = self.follow.next();
            if self.plant.is(Plant::PassRepeats) && r.step.wrapping_add(1) == next
                || self.plant.is(Plant::PassSkips) && r.step > next
            {
                self.deliver(Arrival::Record(r));
                continue;
            }
            match self.follow.record(r.step) {
                Take::Verify => self.deliver(Arrival::Record(r)),
                Take::Missing => {
                    let from = self.follow.next();
                    let why = wire::waiting(&self.session.stream(), from, r.step);
                    self.deliver(Arrival::Missing { why });
                }
                Take::Repeat | Take::Skip => {}
            }
        }
        Ok(())
    }

    /// The stream ends (at the host's step `host_step`) or is lost (0) with steps heard of
    /// past the viewer's: they are a gap no keyframe closed.
    fn open_gap(&mut self, host_step: u64, when: &str) {
        if let Some(full) = self.spool_full.take() {
            // Records were dropped from a step the verifier knows: the gap runs to the
            // last step heard of, whatever the follower took before the bound.
            let to = self.host_step.max(host_step);
            self.deliver(Arrival::Gap {
                to,
                world: None,
                why: format!(
                    "{full}; the stream {} had no keyframe {when}",
                    self.session.stream()
                ),
            });
            return;
        }
        // The steps heard of are the follower's, and those the spool dropped before the
        // keyframe that closed its gap (records past that keyframe's step among them).
        if let Some((from, to)) = self.follow.open_gap(host_step.max(self.host_step)) {
            let why = format!(
                "steps {from}..{to} are not on the stream {} {when}",
                self.session.stream()
            );
            self.deliver(Arrival::Gap {
                to,
                world: None,
                why,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{EndReason, HostCodec, Record, SnapshotKind};
    use bytes::{Bytes, BytesMut};

    use crate::reader::test_world as world;

    fn frames(ms: &[ToViewer]) -> Vec<u8> {
        let mut b = BytesMut::new();
        for m in ms {
            HostCodec::new("t").encode(m, &mut b).unwrap();
        }
        b.to_vec()
    }

    fn recs(steps: std::ops::Range<u64>) -> Vec<u8> {
        let ms: Vec<ToViewer> = steps
            .map(|step| {
                ToViewer::Record(Record {
                    step,
                    hash: step,
                    input: Bytes::new(),
                })
            })
            .collect();
        frames(&ms)
    }

    fn key(w: World) -> Vec<u8> {
        frames(&[ToViewer::Snapshot {
            kind: SnapshotKind::Attach,
            world: w,
        }])
    }

    fn drain(r: &mut Reader) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(e) = r.poll_event() {
            out.push(match e {
                Event::Deliver(Arrival::Record(r)) => format!("record {}", r.step),
                Event::Deliver(Arrival::Gap { to, world, why }) => {
                    format!(
                        "gap to {to}{}: {why}",
                        if world.is_some() { " (keyframe)" } else { "" }
                    )
                }
                Event::Deliver(Arrival::Missing { .. }) => "missing".into(),
                Event::Deliver(Arrival::End(e)) => format!("end {}", e.host_step),
                Event::Deliver(other) => format!("{other:?}"),
                Event::Resume { from_seq } => format!("resume from {from_seq}"),
                Event::Silent => "silent".into(),
            });
        }
        out
    }

    fn reader() -> Reader {
        let s = Session::new("demo").unwrap();
        Reader::new("nats://127.0.0.1:4222/demo".into(), s, world(1, 10), 5, 0)
    }

    #[test]
    fn records_are_taken_once_by_sequence_and_a_gap_closes_at_the_next_keyframe() {
        let mut r = reader();
        let rec = Session::new("demo").unwrap().records();
        let keys = Session::new("demo").unwrap().keyframes();
        assert_eq!(r.handle_message(1, &rec, 6, &recs(10..12)), Ok(None));
        // The same message again (a new consumer's): skipped.
        assert_eq!(r.handle_message(2, &rec, 6, &recs(10..12)), Ok(None));
        assert_eq!(drain(&mut r), ["record 10", "record 11"]);
        // Step 12 never comes: a record past it is noticed, the keyframe closes the gap.
        assert_eq!(r.handle_message(3, &rec, 8, &recs(14..15)), Ok(None));
        assert_eq!(r.handle_message(4, &keys, 9, &key(world(1, 20))), Ok(None));
        assert_eq!(
            drain(&mut r),
            [
                "missing".to_string(),
                "gap to 20 (keyframe): steps 12..20 are not on the stream OSTM_demo; continuing from its keyframe at step 20".into()
            ]
        );
        assert_eq!(r.host_step(), 20);
    }

    #[test]
    fn a_full_spool_drops_records_until_a_keyframe_after_it_drained() {
        let mut r = reader();
        let rec = Session::new("demo").unwrap().records();
        let keys = Session::new("demo").unwrap().keyframes();
        assert_eq!(r.handle_message(1, &rec, 6, &recs(10..12)), Ok(None));
        drain(&mut r);
        // The spool refused those: records and keyframes are dropped while it has no room.
        r.handle_spool_full("full".into());
        assert!(r.is_draining());
        assert_eq!(r.handle_message(2, &rec, 7, &recs(12..20)), Ok(None));
        assert_eq!(r.handle_message(3, &keys, 8, &key(world(1, 20))), Ok(None));
        assert_eq!(r.handle_message(4, &rec, 9, &recs(20..30)), Ok(None));
        assert_eq!(drain(&mut r), ["missing"]);
        // Room again: the next keyframe closes the gap, named by the bound; records follow.
        r.handle_spool_drained();
        assert_eq!(r.handle_message(5, &rec, 10, &recs(30..40)), Ok(None));
        assert_eq!(r.handle_message(6, &keys, 11, &key(world(1, 40))), Ok(None));
        assert_eq!(r.handle_message(7, &rec, 12, &recs(40..41)), Ok(None));
        assert_eq!(
            drain(&mut r),
            [
                "gap to 40 (keyframe): full; continuing from the stream OSTM_demo's keyframe at step 40",
                "record 40"
            ]
        );
        // The end in the same batch as what the spool refused: the gap stays open to it.
        let mut r = reader();
        let end = Session::new("demo").unwrap().end();
        let msg = frames(&[ToViewer::End(End {
            reason: EndReason::Finished,
            text: "done".into(),
            host_step: 30,
        })]);
        assert_eq!(r.handle_message(1, &rec, 6, &recs(10..30)), Ok(None));
        assert!(r.handle_message(2, &end, 7, &msg).unwrap().is_some());
        drain(&mut r);
        r.handle_spool_full("full".into());
        assert_eq!(
            drain(&mut r),
            ["gap to 30: full; the stream OSTM_demo had no keyframe before its end"]
        );
        let mut r = reader();
        assert_eq!(r.handle_message(1, &rec, 6, &recs(10..12)), Ok(None));
        drain(&mut r);
        // Full again, and the end comes first: the gap stays open to the end's step.
        r.handle_spool_full("full".into());
        assert_eq!(r.handle_message(8, &rec, 13, &recs(41..45)), Ok(None));
        let end = Session::new("demo").unwrap().end();
        let msg = frames(&[ToViewer::End(End {
            reason: EndReason::Finished,
            text: "done".into(),
            host_step: 50,
        })]);
        assert!(r.handle_message(9, &end, 14, &msg).unwrap().is_some());
        assert_eq!(
            drain(&mut r),
            [
                "missing",
                "gap to 50: full; the stream OSTM_demo had no keyframe before its end",
                "end 50"
            ]
        );
    }

    #[test]
    fn a_keyframe_of_another_world_is_refused_with_its_place() {
        let mut r = reader();
        let keys = Session::new("demo").unwrap().keyframes();
        let e = r
            .handle_message(1, &keys, 7, &key(world(2, 20)))
            .unwrap_err();
        assert_eq!(
            e,
            another_world("nats://127.0.0.1:4222/demo: subject ostm.demo.key, stream sequence 7")
        );
        assert_eq!(r.poll_timeout(), None);
    }

    /// Found by the fuzz target: a refused end message left the reader's resume timer
    /// running.
    #[test]
    fn nothing_follows_a_refusal() {
        let mut r = reader();
        let end = Session::new("demo").unwrap().end();
        assert!(r.handle_message(1, &end, 6, &[]).is_err());
        assert_eq!(r.poll_timeout(), None);
        r.handle_timeout(100_000);
        assert!(drain(&mut r).is_empty());
    }

    #[test]
    fn the_end_leaves_a_gap_open_to_its_host_step() {
        let mut r = reader();
        let end = Session::new("demo").unwrap().end();
        let msg = frames(&[ToViewer::End(End {
            reason: EndReason::Finished,
            text: "done".into(),
            host_step: 15,
        })]);
        let got = r.handle_message(1, &end, 6, &msg).unwrap().unwrap();
        assert_eq!(got.host_step, 15);
        assert_eq!(
            drain(&mut r),
            [
                "gap to 15: steps 10..15 are not on the stream OSTM_demo before its end",
                "end 15"
            ]
        );
    }

    /// Found by the simulated JetStream: a cluster that lost its acknowledged tail numbered
    /// new messages from below the reader's last sequence, and the reader skipped them as
    /// taken.
    #[test]
    fn a_stream_whose_sequences_went_back_is_read_from_its_last() {
        let mut r = reader();
        let rec = Session::new("demo").unwrap().records();
        let keys = Session::new("demo").unwrap().keyframes();
        assert_eq!(r.handle_message(1, &rec, 6, &recs(10..12)), Ok(None));
        assert_eq!(r.handle_message(2, &rec, 7, &recs(12..14)), Ok(None));
        drain(&mut r);
        // Sequence 7 was lost: the stream's last is 6, and its next messages are 7, 8.
        assert_eq!(r.handle_stream_last(9), 8);
        // Its last message, 6, is read again: the one taken (a repeat).
        assert_eq!(r.handle_stream_last(6), 6);
        assert_eq!(r.handle_message(3, &rec, 6, &recs(10..12)), Ok(None));
        assert_eq!(r.handle_message(3, &rec, 7, &recs(16..17)), Ok(None));
        assert_eq!(r.handle_message(4, &keys, 8, &key(world(1, 20))), Ok(None));
        assert_eq!(
            drain(&mut r),
            [
                "missing".to_string(),
                "gap to 20 (keyframe): steps 14..20 are not on the stream OSTM_demo; continuing from its keyframe at step 20".into()
            ]
        );
    }

    /// Found by the seeded simulation (seed 1802): every node of the cluster killed at
    /// once lost every message, the keyframe the reader joined at (sequence 5) with them;
    /// the host's end, published again, was stored at sequence 5 too. The reader read on
    /// from 6 and never got it; it reads the stream's last message again now.
    #[test]
    fn the_end_numbered_at_the_sequence_taken_last_is_taken() {
        let mut r = reader();
        let end = Session::new("demo").unwrap().end();
        let msg = frames(&[ToViewer::End(End {
            reason: EndReason::Finished,
            text: "done".into(),
            host_step: 10,
        })]);
        r.handle_timeout(RESUME_AFTER_MS);
        assert_eq!(drain(&mut r), ["resume from 6"]);
        assert_eq!(r.handle_stream_last(5), 5);
        assert!(r.handle_message(3_500, &end, 5, &msg).unwrap().is_some());
        assert_eq!(drain(&mut r), ["end 10"]);
    }

    /// The stream's last message read again at each read-on of a quiet stream is the one
    /// taken: it gives nothing, and the session is given up 30 s after the last message
    /// heard, as before.
    #[test]
    fn the_last_message_read_again_does_not_put_the_silence_off() {
        let mut r = reader();
        let rec = Session::new("demo").unwrap().records();
        assert_eq!(r.handle_message(1_000, &rec, 6, &recs(10..11)), Ok(None));
        drain(&mut r);
        let mut now = r.poll_timeout().unwrap();
        let mut resumes = 0;
        loop {
            r.handle_timeout(now);
            let got = drain(&mut r);
            if got == ["silent"] {
                break;
            }
            assert_eq!(got, ["resume from 7"]);
            resumes += 1;
            assert_eq!(r.handle_stream_last(6), 6);
            assert_eq!(r.handle_message(now, &rec, 6, &recs(10..11)), Ok(None));
            assert!(drain(&mut r).is_empty());
            now = r.poll_timeout().unwrap();
        }
        assert_eq!(now, 1_000 + SILENCE_MS);
        assert_eq!(resumes, 9);
    }

    /// Found by the fuzz target's oracle: the spool's gap closed by a keyframe behind
    /// records it dropped (step 17, records to 17 heard of), then silence: the steps
    /// heard of past the keyframe are a gap, named to the last one.
    #[test]
    fn silence_after_a_spool_gap_closed_behind_the_records_names_their_gap() {
        let mut r = reader();
        let rec = Session::new("demo").unwrap().records();
        let keys = Session::new("demo").unwrap().keyframes();
        assert_eq!(r.handle_message(1, &rec, 6, &recs(10..12)), Ok(None));
        drain(&mut r);
        r.handle_spool_full("full".into());
        assert_eq!(r.handle_message(2, &rec, 7, &recs(12..18)), Ok(None));
        r.handle_spool_drained();
        assert_eq!(r.handle_message(3, &keys, 8, &key(world(1, 17))), Ok(None));
        assert_eq!(
            drain(&mut r),
            [
                "missing",
                "gap to 17 (keyframe): full; continuing from the stream OSTM_demo's keyframe at step 17"
            ]
        );
        r.handle_timeout(3 + SILENCE_MS);
        assert_eq!(
            drain(&mut r),
            [
                "gap to 18: steps 17..18 are not on the stream OSTM_demo before the session was lost",
                "silent"
            ]
        );
    }

    /// Found by the fuzz target (`fixtures/fuzz/nats_reader/largest-sequence`): a message
    /// at the largest stream sequence overflowed the sequence to read on from.
    #[test]
    fn a_message_at_the_largest_sequence_is_read_on_from_there() {
        let mut r = reader();
        let rec = Session::new("demo").unwrap().records();
        assert_eq!(r.handle_message(1, &rec, u64::MAX, &recs(10..11)), Ok(None));
        assert_eq!(drain(&mut r), ["record 10"]);
        r.handle_timeout(1 + RESUME_AFTER_MS);
        assert_eq!(drain(&mut r), [format!("resume from {}", u64::MAX)]);
        assert_eq!(r.handle_stream_last(u64::MAX), u64::MAX);
    }

    #[test]
    fn a_quiet_stream_is_read_on_every_three_seconds_and_given_up_after_thirty() {
        let mut r = reader();
        let rec = Session::new("demo").unwrap().records();
        assert_eq!(r.handle_message(1_000, &rec, 6, &recs(10..11)), Ok(None));
        drain(&mut r);
        assert_eq!(r.poll_timeout(), Some(4_000));
        r.handle_timeout(3_999);
        assert!(drain(&mut r).is_empty());
        let mut now = 4_000;
        let mut resumes = 0;
        loop {
            r.handle_timeout(now);
            let got = drain(&mut r);
            if got == ["resume from 7"] {
                resumes += 1;
                now = r.poll_timeout().unwrap();
                continue;
            }
            assert_eq!(got, ["silent"]);
            break;
        }
        assert_eq!(now, 1_000 + SILENCE_MS);
        assert_eq!(resumes, 9);
        assert_eq!(r.poll_timeout(), None);
    }
}
