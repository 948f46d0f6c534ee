//! The invariants. Safety, checked as the run goes: a step is verified only when the
//! viewer's hash for that step number equals the host's, and never twice; a drift is
//! reported only where one was planted, at exactly its step, body, field and stage; no
//! other failure without a hostile message to explain it. Over TCP: a connection never
//! hands over a record out of order or twice, each connection that attaches has a number
//! of its own, a reader stops for good only for a reason the run explains (its budget
//! counted from the end of its latest connection), and the host never judges silent a
//! viewer it heard from within the timeout nor ends a stream before the records owed. At
//! the end: every recording and everything recovered verifies and holds only verified steps; the verdict names every
//! step never verified; `ok` only when the viewer's world reached the host's last step
//! and the count adds up, and every step from the attach to the end is verified or in a
//! named gap or resync; a planted drift met is reported; a step the NATS cluster lost
//! after acknowledging it is named as a gap by every viewer it passed; two viewers agree
//! on every step both verified; the stream stores each message id once. Liveness
//! (`--liveness`): once the faults stop, every viewer verifies again up to the host's
//! last step.

use crate::{Sim, QUEUE, TICK_MS};
use ostm_protocol::format::ostm::{Replay, Verdict};
use ostm_protocol::format::recording::journal::{finish_order, Finish};
use ostm_protocol::serve::conn::{Left, Why};
use ostm_protocol::session::{Failure, Stages, Stop};
use ostm_protocol::wire::EndReason;
use std::collections::BTreeSet;

/// How the real viewer's message begins when a write to the recording fails (a full
/// disk), and when its finish does: the only failures a full disk may explain.
pub const WRITE: &str = "cannot write the recording";
pub const FINISH: &str = "cannot finish the recording";
/// The end of the NATS reader's refusal of a keyframe of another world.
pub const ANOTHER_WORLD: &str = "found one of another world";

/// A record verified by viewer `i` for `step` of the host's life `life`, with `hash`.
pub fn on_verified(sim: &mut Sim, i: usize, life: u32, step: u64, hash: u64) {
    match sim.hashes.get(&(life, step)) {
        Some(&h) if h == hash => {}
        Some(&h) => sim.violate(format!(
            "viewer {i} verified step {step} with hash {hash:016x}, the host's is {h:016x}"
        )),
        None => sim.violate(format!(
            "viewer {i} verified step {step}, which the host (life {life}) never sent"
        )),
    }
    if sim.viewers[i].hashes.contains_key(&(life, step)) {
        sim.violate(format!("viewer {i} verified step {step} twice"));
    }
}

/// A new connection of viewer `i` attached with `number`; the latest before had `last`.
/// Each carries a number no earlier one had: a drift request goes only to the connection
/// that sent its step.
pub fn new_number(sim: &mut Sim, i: usize, number: u64, last: u64) {
    if number <= last {
        sim.violate(format!(
            "viewer {i}: a new connection attached with number {number}, an earlier one had {last}: a drift request would go to a connection that did not send its step"
        ));
    }
}

/// A connection of viewer `i` handed over records from step `first`, where `next` was
/// next (its attach snapshot's, its resync's, or after the record before): never a record
/// out of order or twice.
pub fn in_order(sim: &mut Sim, i: usize, next: Option<u64>, first: u64) {
    if let Some(next) = next.filter(|&n| n != first) {
        sim.violate(format!(
            "viewer {i}: its connection delivered a record for step {first} where step {next} was next"
        ));
    }
}

/// Viewer `i`'s TCP reader stopped for good with `why`, `failing_ms` after its latest
/// connection ended, with a reconnection budget of `budget_ms`; `first_faulted`: it never
/// attached and a fault met its first connection; `after_end`: the host had ended and its
/// last connection had not attached. Explained only by a budget run out from the end of
/// the latest connection (a viewer reconnecting after a working connection has its whole
/// budget again), a first connection that met a fault, or an attempt the host's end
/// refused.
/// Returns whether it is explained.
pub fn reader_stop(
    sim: &mut Sim,
    i: usize,
    why: &str,
    failing_ms: u64,
    budget_ms: u64,
    first_faulted: bool,
    after_end: bool,
) -> bool {
    let gave_up = why.starts_with("gave up reconnecting");
    let why = if gave_up && failing_ms < budget_ms {
        format!(
            "viewer {i} gave up reconnecting {failing_ms} ms after its connection ended, its budget is {budget_ms} ms: {why}"
        )
    } else if gave_up || after_end || first_faulted {
        return true;
    } else {
        format!("viewer {i}'s reader stopped for good though the host was honest: {why}")
    };
    sim.violate(why);
    false
}

/// The host's connection to viewer `i` left (`heard_ms`: when it last heard from the
/// viewer; `behind`: the records it was behind the host's ring; `silence`: its silence
/// timeout in ms). A viewer it heard from
/// within the silence timeout is never judged silent; the stream's end comes after the
/// records owed, unless the viewer was more than the queue behind (the end in place of a
/// resync).
pub fn host_left(sim: &mut Sim, i: usize, left: &Left, heard_ms: u64, behind: u64, silence: u64) {
    let Why::Ended(end) = &left.why else {
        return;
    };
    let silent_for = (sim.now * TICK_MS).saturating_sub(heard_ms);
    if end.reason == EndReason::Silent && silent_for + TICK_MS < silence {
        sim.violate(format!(
            "viewer {i}: the host judged it silent though it heard from it {silent_for} ms before (the silence timeout is {silence} ms)"
        ));
    }
    if sim.host.ended.as_ref() == Some(end) && left.step < end.host_step && behind as usize <= QUEUE
    {
        sim.violate(format!(
            "viewer {i}: the host ended its stream at step {} before the records it owed ({behind} records from step {})",
            end.host_step, left.step
        ));
    }
}

/// Viewer `i` stopped: is the stop true?
pub fn on_stop(sim: &mut Sim, i: usize) {
    if sim.viewers[i].stop_checked {
        return;
    }
    sim.viewers[i].stop_checked = true;
    let planted = sim.planted;
    let foreign = sim.foreign_keyframes > 0;
    let v = &sim.viewers[i];
    let why = match v.core.stop() {
        Some(Stop::Drift(d)) => match planted {
            None => Some(format!("viewer {i} reported a drift at step {} where none was planted", d.step)),
            Some((_, p)) if d.step != p.step => Some(format!(
                "viewer {i} reported a drift at step {}, planted at step {}",
                d.step, p.step
            )),
            Some((_, p)) => match (&d.field, &d.stages) {
                (Some(f), _) if (f.body, f.field) != (Some(usize::from(p.body)), "velocity.x") => Some(format!(
                    "viewer {i} named body {:?} {} for a drift planted in body {} velocity.x",
                    f.body, f.field, p.body
                )),
                (_, Stages::PartAt { stage, .. }) => Some(format!(
                    "viewer {i} said the worlds part at stage {} for a change made outside the step",
                    stage.name()
                )),
                (None, _) if d.note.is_none() => {
                    Some(format!("viewer {i} named no field and said not why"))
                }
                _ => None,
            },
        },
        Some(Stop::Failed(Failure::KeyframeOfAnotherWorld)) if foreign => None,
        // The NATS reader refuses the stray keyframe, naming its place.
        Some(Stop::Failed(Failure::Other(s))) if foreign && s.contains(ANOTHER_WORLD) => None,
        Some(Stop::Failed(Failure::Other(s)))
            if v.stopped_by_full_disk
                && [WRITE, FINISH]
                    .iter()
                    .any(|w| s.starts_with(&format!("{w}: "))) =>
        {
            None
        }
        // The reader's last word, checked when it came (`tcp::final_word`).
        Some(Stop::Failed(Failure::Other(_))) if v.lost_for_good => None,
        Some(Stop::Failed(f)) => Some(format!("viewer {i} failed though the host was honest: {f}")),
        Some(Stop::Asked) => Some(format!("viewer {i} stopped as asked, though nothing asked")),
        Some(Stop::HostEnded(_)) | Some(Stop::Interrupted) | None => None,
    };
    if let Some(why) = why {
        sim.violate(why);
    }
}

/// A file was finished (or recovered) by the real `assemble`, which takes the steps of
/// [`finish_order`] in turn. The disk is modelled as a lost fsync would leave it: a crash
/// after any step keeps only what was synced. The finished name must never point at bytes
/// a crash could still lose.
pub fn finish_is_durable(sim: &mut Sim, what: &str) {
    let (mut synced, mut renamed) = (false, false);
    for (n, step) in finish_order().iter().enumerate() {
        match step {
            Finish::SyncTemp => synced = true,
            Finish::RenameOver => renamed = true,
        }
        if renamed && !synced {
            sim.violate(format!(
                "{what}: a crash after step {} of finishing ({step:?}) leaves the finished name on bytes never synced",
                n + 1
            ));
            return;
        }
    }
    if !(synced && renamed) {
        sim.violate(format!(
            "{what}: finishing left the file unsynced or unnamed"
        ));
    }
}

/// The checks at the end of the run.
pub fn at_end(sim: &mut Sim) {
    for i in 0..sim.viewers.len() {
        verdict_names_every_gap(sim, i);
        ok_only_at_the_hosts_last_step(sim, i);
        ok_accounts_for_every_step(sim, i);
        lost_acknowledged_named(sim, i);
        nats_gap_explained_by_the_stream(sim, i);
        planted_drift_reported(sim, i);
        recordings_verify(sim, i);
        if sim.cfg.liveness {
            verifying_again(sim, i);
        }
        if sim.violation.is_some() {
            return;
        }
    }
    viewers_agree(sim);
    stream_stores_each_id_once(sim);
    readers_not_stranded(sim);
}

/// No NATS reader is left at the end past the stream's last sequence (a cluster that lost
/// its tail numbers new messages from below it again: a reader waiting past them would
/// skip them as taken and hear nothing until the stream caught up).
fn readers_not_stranded(sim: &mut Sim) {
    let Some(n) = sim.stream.as_ref() else {
        return;
    };
    let stranded = (0..sim.viewers.len())
        // Still reading when the run ended (a viewer stopped earlier read no further).
        .filter(|&i| {
            sim.viewers[i].reads_nats()
                && matches!(sim.viewers[i].core.stop(), Some(Stop::Interrupted))
        })
        .find_map(|i| n.stranded(i).map(|(taken, last)| (i, taken, last)));
    if let Some((i, taken, last)) = stranded {
        sim.violate(format!(
            "viewer {i}'s NATS reader took sequence {taken}, past the stream's last ({last}): it skips what the stream numbers again"
        ));
    }
}

/// The named stretches of viewer `i`'s verdict (gaps, an open one included, and resyncs),
/// each `from..to`.
fn named(sim: &Sim, i: usize) -> Vec<(u64, u64)> {
    let s = sim.viewers[i].core.summary(sim.host.world.step);
    s.gaps
        .iter()
        .chain(s.resynced.iter())
        .map(|g| (g.from, g.to))
        .collect()
}

/// An `ok` verdict accounts for every step from the attach to the end's host step: each
/// one verified, or in a gap or resync the verdict names, never both.
fn ok_accounts_for_every_step(sim: &mut Sim, i: usize) {
    let v = &sim.viewers[i];
    let (Some(Stop::HostEnded(end)), Some(from)) = (v.core.stop(), v.core.attached_at()) else {
        return;
    };
    let s = v.core.summary(sim.host.world.step);
    // A host restarted numbers its steps again: the stretches are of two lives.
    if !end.reason.is_clean() || s.tally().open || sim.host.life != 0 {
        return;
    }
    let named = named(sim, i);
    let in_named = |step: u64| named.iter().any(|&(f, t)| f <= step && step < t);
    let mut verified = v.verified.iter().map(|&(_, step)| step).peekable();
    let mut why = None;
    for step in from..end.host_step {
        let was = verified.peek() == Some(&step);
        if was {
            verified.next();
        }
        match (was, in_named(step)) {
            (true, true) => {
                why = Some(format!(
                    "viewer {i}: ok, and step {step} is both verified and in a named gap or resync"
                ));
            }
            (false, false) => {
                why = Some(format!(
                    "viewer {i}: ok, though step {step} (from the attach at {from} to the end at {}) was neither verified nor named",
                    end.host_step
                ));
            }
            _ => {}
        }
        if why.is_some() {
            break;
        }
    }
    if let Some(why) = why {
        sim.violate(why);
    }
}

/// A step the NATS cluster lost after acknowledging it (a gap the host never dropped) is
/// verified (read before the loss) or named as a gap by every NATS viewer whose stretch
/// from its attach to its last step passed it.
fn lost_acknowledged_named(sim: &mut Sim, i: usize) {
    let Some(n) = sim.stream.as_ref() else {
        return;
    };
    let v = &sim.viewers[i];
    let (Some(from), true) = (v.core.attached_at(), v.reads_nats()) else {
        return;
    };
    // Passed: a step verified after it.
    let to = v.verified.last().map_or(from, |&(_, s)| s.max(from));
    let named = named(sim, i);
    let lost = n.lost_steps.range(from..to).find(|&&s| {
        !v.hashes.contains_key(&(0, s)) && !named.iter().any(|&(f, t)| f <= s && s < t)
    });
    if let Some(&step) = lost {
        let why = format!(
            "viewer {i}: step {step}, lost by the NATS cluster after it was acknowledged, was passed over: neither verified nor in a named gap"
        );
        sim.violate(why);
    }
}

/// A NATS viewer's gap left open at the end is explained by the stream (its reader's
/// reasons name it), never by a host's queue, which NATS has not.
fn nats_gap_explained_by_the_stream(sim: &mut Sim, i: usize) {
    let Some(n) = sim.stream.as_ref() else {
        return;
    };
    let v = &sim.viewers[i];
    if !v.reads_nats() || !matches!(v.core.stop(), Some(Stop::HostEnded(_))) {
        return;
    }
    let s = v.core.summary(sim.host.world.step);
    let stream = n.session.stream();
    if let Some(why) = s.open_gap.filter(|w| !w.contains(&stream)) {
        sim.violate(format!(
            "viewer {i} (NATS): its gap open at the end is explained as \"{why}\", not by the stream"
        ));
    }
}

/// Two viewers agree on every step both verified (of the same host life).
fn viewers_agree(sim: &mut Sim) {
    let mut why = None;
    'pairs: for a in 0..sim.viewers.len() {
        for b in a + 1..sim.viewers.len() {
            let (x, y) = (&sim.viewers[a].hashes, &sim.viewers[b].hashes);
            for (key, h) in x {
                if y.get(key).is_some_and(|g| g != h) {
                    why = Some(format!(
                        "viewers {a} and {b} verified step {} with different hashes",
                        key.1
                    ));
                    break 'pairs;
                }
            }
        }
    }
    if let Some(why) = why {
        sim.violate(why);
    }
}

/// The stream stores each message id once (a repeat within the duplicate window is not
/// stored again).
fn stream_stores_each_id_once(sim: &mut Sim) {
    let Some(n) = sim.stream.as_ref() else {
        return;
    };
    let mut seen = BTreeSet::new();
    let twice = n
        .cluster
        .stored()
        .find(|e| !seen.insert(e.id.as_str()))
        .map(|e| (e.id.clone(), e.seq));
    if let Some((id, seq)) = twice {
        sim.violate(format!(
            "the stream stores the message id {id} twice (again at sequence {seq})"
        ));
    }
}

/// Every stretch of steps the viewer never verified is in its verdict: between two runs of
/// verified steps a gap or a resync with exactly those ends, and a stream that ended while
/// the records had stopped a gap left open from there.
fn verdict_names_every_gap(sim: &mut Sim, i: usize) {
    let host_step = sim.host.world.step;
    let v = &sim.viewers[i];
    let s = v.core.summary(host_step);
    let named: BTreeSet<(u64, u64)> = s
        .gaps
        .iter()
        .chain(s.resynced.iter())
        .map(|g| (g.from, g.to))
        .collect();
    // Whether the named stretches lead from `from` to `to`, one after the other.
    // Several stretches may start at one step (a reconnection behind a restarted host,
    // then a gap from the same step): any of them may lead on.
    let chain = |from: u64, to: u64| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(at) = stack.pop() {
            if at == to {
                return true;
            }
            if seen.insert(at) {
                stack.extend(named.iter().filter(|(f, _)| *f == at).map(|&(_, t)| t));
            }
        }
        false
    };
    let mut why = None;
    let mut prev: Option<(u32, u64)> = None;
    // Runs of verified steps: where one ends and the next begins.
    for &(life, step) in &v.verified {
        match prev {
            Some((pl, ps)) if (pl, ps + 1) != (life, step) && !chain(ps + 1, step) => {
                why = Some(format!(
                    "viewer {i}: steps {} to {step} were never verified and the verdict does not say so (gaps {:?}, resyncs {:?})",
                    ps + 1,
                    s.gaps,
                    s.resynced
                ));
                break;
            }
            None => {
                if let Some(a) = s.attached_at.filter(|&a| !chain(a, step)) {
                    why = Some(format!(
                        "viewer {i}: attached at step {a}, first verified step {step}, and the verdict names nothing between"
                    ));
                    break;
                }
            }
            _ => {}
        }
        prev = Some((life, step));
    }
    if why.is_none() && v.waiting_at_end && s.open_gap.is_none() {
        why = Some(format!(
            "viewer {i}: the stream ended while steps from {} were missing, and the verdict has no open gap (gaps {:?})",
            s.step, s.gaps
        ));
    }
    if why.is_none() && s.verified != v.verified.len() as u64 {
        why = Some(format!(
            "viewer {i}: the verdict says {} steps verified, {} were",
            s.verified,
            v.verified.len()
        ));
    }
    if let Some(why) = why {
        sim.violate(why);
    }
}

/// A viewer whose verdict would be `ok` (the host ended the stream cleanly, no gap left
/// open) reached the end's host step: every step from the attach to it was verified, or
/// jumped over by a resync or a gap a snapshot closed, each named; and the verdict's count
/// adds up (docs/protocol.md, "The verdict's count").
fn ok_only_at_the_hosts_last_step(sim: &mut Sim, i: usize) {
    let v = &sim.viewers[i];
    let Some(Stop::HostEnded(end)) = v.core.stop() else {
        return;
    };
    let s = v.core.summary(sim.host.world.step);
    let t = s.tally();
    let why = if end.reason.is_clean() && !t.open && s.step < end.host_step {
        Some(format!(
            "viewer {i}: ok at step {} though the host ended the stream at step {}: steps {}..{} were never verified and no gap is open ({t})",
            s.step, end.host_step, s.step, end.host_step
        ))
    } else if t.open && t.to < end.host_step {
        Some(format!(
            "viewer {i}: its open gap ends at step {}, the host ended at step {}",
            t.to, end.host_step
        ))
    } else {
        t.total
            .filter(|&total| t.verified + t.not_verified() != total)
            .map(|total| {
                format!(
                    "viewer {i}: the count does not add up: {t} ({} verified + {} not, of {total})",
                    t.verified,
                    t.not_verified()
                )
            })
    };
    if let Some(why) = why {
        sim.violate(why);
    }
}

/// A viewer that met the perturbed record with its world at the step before it reported
/// the drift.
fn planted_drift_reported(sim: &mut Sim, i: usize) {
    let v = &sim.viewers[i];
    if v.met_perturbed && !matches!(v.core.stop(), Some(Stop::Drift(_))) {
        let why = format!(
            "viewer {i} met the planted drift and did not report it ({:?})",
            v.core
                .stop()
                .map(|s| format!("{s:?}").chars().take(80).collect::<String>())
        );
        sim.violate(why);
    }
}

/// Every file the viewer's recording finished or recovered verifies, and holds only steps
/// the viewer verified, with the same hashes.
fn recordings_verify(sim: &mut Sim, i: usize) {
    for (path, life) in sim.viewers[i].files() {
        let replay = match Replay::read_file(&path) {
            Ok(r) => r,
            Err(e) => {
                sim.violate(format!("viewer {i}: {} does not read: {e}", path.display()));
                return;
            }
        };
        if let v @ Verdict::Mismatch { .. } = replay.verify(|_| {}) {
            sim.violate(format!(
                "viewer {i}: {} does not verify: {v:?}",
                path.display()
            ));
            return;
        }
        let start = replay.start_step();
        let rows = replay.hashes.clone().unwrap_or_default();
        for (n, row) in rows.iter().enumerate().skip(1) {
            let step = start + n as u64 - 1;
            if sim.viewers[i].hashes.get(&(life, step)) != Some(row) {
                sim.violate(format!(
                    "viewer {i}: {} holds step {step}, which the viewer did not verify with that hash",
                    path.display()
                ));
                return;
            }
        }
    }
}

/// Liveness: the faults stopped; every viewer not stopped by the planted drift verified up
/// to the host's last step.
fn verifying_again(sim: &mut Sim, i: usize) {
    let host_step = sim.host.world.step;
    let v = &sim.viewers[i];
    // The host's end in place of a resync leaves a viewer behind, as the real host does.
    if v.stopped_by_full_disk
        || v.ended_behind
        || v.lost_for_good
        || matches!(
            v.core.stop(),
            Some(Stop::Drift(_) | Stop::Failed(Failure::KeyframeOfAnotherWorld))
        )
        || matches!(v.core.stop(), Some(Stop::Failed(Failure::Other(s))) if s.contains(ANOTHER_WORLD))
    {
        return;
    }
    let last = v.verified.last().map(|&(_, s)| s + 1);
    if last != Some(host_step) && v.core.world().step != host_step {
        let why = format!(
            "viewer {i} ({:?}) is at step {} (last verified {:?}) when the host ended at {host_step}, {} ticks after the faults stopped",
            v.transport,
            v.core.world().step,
            last,
            sim.now.saturating_sub(sim.quiet_after)
        );
        sim.violate(why);
        return;
    }
    // Verifying again soon after the faults stop: within the silence timeout (a link
    // stalled until then is given up and made again) and a little more.
    let bound = sim.quiet_after + crate::SILENCE_TICKS + 100;
    if let Some(t) = v.verifying_again_at.filter(|&t| t > bound) {
        let why = format!(
            "viewer {i} verified again only at tick {t}, {} ticks after the faults stopped",
            t - sim.quiet_after
        );

        sim.violate(why);
    }
}
