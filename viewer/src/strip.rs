//! The strip of recent steps: which of the steps up to the viewer's world were verified,
//! not seen (jumped over by a resync, or missed while reconnecting), or drifted. One model
//! for both views: the terminal view draws it in cells, the web page in runs.
//!
//! The session's events are turned into stretches of steps ([`Strip::start`],
//! [`Strip::reached`], [`Strip::gap`], [`Strip::drift`]); [`Strip::cells`] cuts the most
//! recent ones into as many cells as the strip is wide, each cell showing the worst of its
//! steps (drift, then not seen, then verified); [`Strip::page_json`] gives the page the
//! runs of its last steps.

use serde_json::json;
use std::collections::VecDeque;

/// What happened to a step, worst last (a cell shows the greatest kind among its steps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// The viewer reproduced the step's hash.
    Verified,
    /// The viewer never saw the step: a resync jumped over it, or the connection was lost.
    Gap,
    /// The step whose hashes differ.
    Drift,
}

/// Steps `from + 1 ..= to` (the worlds reached), all of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stretch {
    from: u64,
    to: u64,
    kind: Kind,
}

/// Stretches kept at most (the oldest are dropped first); a cell with none shows nothing.
/// Each stretch holds a step at least, so the page's [`PAGE_STEPS`] steps are always kept.
const KEPT: usize = PAGE_STEPS as usize + 1;

/// How many steps the page's strip shows, back from the viewer's step.
pub const PAGE_STEPS: u64 = 4096;

/// How far back the strip reaches: this many seconds of steps at the verified rate (or
/// one step per cell, when that is more).
pub const SECONDS: f64 = 60.0;

/// The steps since the attach, as stretches.
#[derive(Debug, Default)]
pub struct Strip {
    stretches: VecDeque<Stretch>,
    /// The step of the viewer's world the last event named (`None` before the attach).
    at: Option<u64>,
    /// The step the current run of stretches starts at.
    first: u64,
}

/// The strip cut into cells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cells {
    /// Steps per cell (1, 2, 5, 10, 20, 50, ...).
    pub per_cell: u64,
    /// The first and last step the cells show (the last is the viewer's world's step;
    /// the first is never before the first step after the attach).
    pub first: u64,
    pub last: u64,
    /// One per cell, oldest first: the worst kind among its steps, `None` for steps
    /// before the attach (or no longer kept).
    pub kinds: Vec<Option<Kind>>,
}

impl Strip {
    /// The viewer attached with its world at `step`.
    pub fn start(&mut self, step: u64) {
        self.stretches.clear();
        self.at = Some(step);
        self.first = step;
    }

    /// The viewer's world reached `step` by verified steps.
    pub fn reached(&mut self, step: u64) {
        if let Some(at) = self.at.filter(|&at| step > at) {
            self.push(at, step, Kind::Verified);
        }
    }

    /// The viewer's world was at `from` and continues from a snapshot at `to`: the steps
    /// between were never seen. A `to` at or below `from` (a host that started again
    /// from an earlier step) starts the strip again at `to`.
    pub fn gap(&mut self, from: u64, to: u64) {
        if self.at.is_none() {
            return;
        }
        self.reached(from);
        if to <= from {
            self.start(to);
        } else {
            self.push(from, to, Kind::Gap);
        }
    }

    /// The hashes of step `step` differ (the record for `step - 1` carried the host's).
    pub fn drift(&mut self, step: u64) {
        if self.at.is_none() || step == 0 {
            return;
        }
        self.reached(step - 1);
        self.push(step - 1, step, Kind::Drift);
    }

    fn push(&mut self, from: u64, to: u64, kind: Kind) {
        self.at = Some(to);
        if let Some(last) = self.stretches.back_mut() {
            if last.kind == kind && last.to == from {
                last.to = to;
                return;
            }
        }
        if self.stretches.len() == KEPT {
            self.stretches.pop_front();
        }
        self.stretches.push_back(Stretch { from, to, kind });
    }

    /// The most recent steps in `width` cells: as many as [`SECONDS`] seconds at `rate`
    /// steps per second take, at most the steps since the attach, at least one per cell;
    /// the steps per cell rounded up to 1, 2 or 5 times a power of ten. `None` before
    /// the attach.
    pub fn cells(&self, width: usize, rate: f64) -> Option<Cells> {
        let last = self.at?;
        let width = width.max(1) as u64;
        let since = last - self.first;
        let horizon = if rate.is_finite() && rate > 0.0 {
            (rate * SECONDS) as u64
        } else {
            0
        };
        let span = since.min(horizon.max(width));
        let per_cell = round_up(span.div_ceil(width).max(1));
        let lo = last.saturating_sub(width * per_cell);
        let mut kinds = vec![None; width as usize];
        // The cell of step `s` (lo < s <= last).
        let cell = |s: u64| (width - 1 - (last - s) / per_cell) as usize;
        for s in self.stretches.iter().filter(|s| s.to > lo) {
            let (a, b) = (cell(s.from.max(lo) + 1), cell(s.to));
            for k in &mut kinds[a..=b] {
                *k = (*k).max(Some(s.kind));
            }
        }
        Some(Cells {
            per_cell,
            first: (lo + 1).max(self.first + 1).min(last),
            last,
            kinds,
        })
    }
}

impl Strip {
    /// The page's strip up to step `now`: `{from, to, runs}`, the runs of the last
    /// [`PAGE_STEPS`] steps, each `[from, to, kind]` with kind `snapshot` (the attach
    /// step's world, from the host), `verified`, `gap` or `drift`, oldest first.
    pub fn page_json(&self, now: u64) -> serde_json::Value {
        let from = now.saturating_sub(PAGE_STEPS);
        let mut runs = Vec::new();
        if self.at.is_some() && self.first + 1 > from {
            runs.push(json!([self.first.max(from), self.first + 1, "snapshot"]));
        }
        for s in &self.stretches {
            // The attach step is the snapshot's: the verified steps start after it.
            let start = if s.kind == Kind::Verified && s.from == self.first {
                self.first + 1
            } else {
                s.from
            };
            if s.to > start && s.to > from {
                runs.push(json!([start.max(from), s.to, s.kind.name()]));
            }
        }
        json!({"from": from, "to": now, "runs": runs})
    }
}

impl Kind {
    /// The kind's name on the page.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Verified => "verified",
            Kind::Gap => "gap",
            Kind::Drift => "drift",
        }
    }
}

/// The smallest of 1, 2, 5, 10, 20, 50, ... at or above `n`.
fn round_up(n: u64) -> u64 {
    let mut p = 1u64;
    loop {
        for m in [1, 2, 5] {
            match p.checked_mul(m) {
                Some(v) if v >= n => return v,
                Some(_) => {}
                None => return u64::MAX,
            }
        }
        match p.checked_mul(10) {
            Some(q) => p = q,
            None => return u64::MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glyphs(c: &Cells) -> String {
        c.kinds
            .iter()
            .map(|k| match k {
                None => ' ',
                Some(Kind::Verified) => 'v',
                Some(Kind::Gap) => 'g',
                Some(Kind::Drift) => 'D',
            })
            .collect()
    }

    #[test]
    fn steps_per_cell_are_one_two_or_five_times_a_power_of_ten() {
        let got: Vec<u64> = [1, 2, 3, 5, 6, 11, 21, 51, 99, 100, 101]
            .into_iter()
            .map(round_up)
            .collect();
        assert_eq!(got, [1, 2, 5, 5, 10, 20, 50, 100, 100, 100, 200]);
        assert_eq!(round_up(u64::MAX), u64::MAX);
    }

    #[test]
    fn a_resync_shows_as_not_seen_between_verified_steps_and_drift_as_the_last_cell() {
        let mut s = Strip::default();
        assert_eq!(s.cells(10, 0.0), None, "nothing before the attach");
        s.start(100);
        s.reached(103);
        s.gap(103, 105);
        s.reached(107);
        let c = s.cells(10, 0.0).unwrap();
        assert_eq!((c.per_cell, c.first, c.last), (1, 101, 107));
        assert_eq!(glyphs(&c), "   vvvggvv");
        s.drift(108);
        let c = s.cells(10, 0.0).unwrap();
        assert_eq!(glyphs(&c), "  vvvggvvD");
        assert_eq!(c.last, 108);
    }

    #[test]
    fn a_long_session_is_cut_into_coarser_cells_that_keep_the_worst_step() {
        let mut s = Strip::default();
        s.start(0);
        s.reached(5000);
        // One step never seen among 10 000: still shown, in its cell.
        s.gap(5000, 5001);
        s.reached(10_000);
        // 10 cells over the last 60 s at 1000 steps/s would be 60 000 steps: only 10 000
        // were seen, so 1000 per cell.
        let c = s.cells(10, 1000.0).unwrap();
        assert_eq!((c.per_cell, c.first, c.last), (1000, 1, 10_000));
        assert_eq!(glyphs(&c), "vvvvvgvvvv");
        // At 10 steps/s the strip reaches back 600 steps: 100 per cell, all verified.
        let c = s.cells(10, 10.0).unwrap();
        assert_eq!((c.per_cell, c.first), (100, 9001));
        assert_eq!(glyphs(&c), "vvvvvvvvvv");
    }

    #[test]
    fn a_host_that_starts_again_earlier_starts_the_strip_again() {
        let mut s = Strip::default();
        s.start(500);
        s.reached(600);
        s.gap(600, 3);
        s.reached(6);
        let c = s.cells(5, 0.0).unwrap();
        assert_eq!((c.first, c.last), (4, 6));
        assert_eq!(glyphs(&c), "  vvv");
    }

    #[test]
    fn stretches_of_one_kind_merge_and_the_oldest_are_dropped_past_the_limit() {
        let mut s = Strip::default();
        s.start(0);
        for i in 1..=100 {
            s.reached(i);
        }
        assert_eq!(s.stretches.len(), 1);
        for i in 0..KEPT as u64 {
            s.gap(100 + 2 * i, 101 + 2 * i);
        }
        assert_eq!(s.stretches.len(), KEPT);
        assert_eq!(s.stretches.back().map(|f| f.kind), Some(Kind::Gap));
        assert!(
            s.stretches.front().is_some_and(|f| f.from > 100),
            "the oldest went"
        );
    }

    /// The page's runs: the attach step's snapshot, then the steps by kind, cut to the last
    /// [`PAGE_STEPS`] steps.
    #[test]
    fn the_page_gets_the_runs_of_its_last_steps_by_kind() {
        let mut s = Strip::default();
        assert_eq!(s.page_json(0)["runs"], json!([]));
        s.start(100);
        s.reached(500);
        s.reached(900);
        s.gap(900, 1200);
        s.reached(1300);
        s.drift(1301);
        let j = s.page_json(1301);
        assert_eq!(j["from"], 0);
        assert_eq!(
            j["runs"],
            json!([
                [100, 101, "snapshot"],
                [101, 900, "verified"],
                [900, 1200, "gap"],
                [1200, 1300, "verified"],
                [1300, 1301, "drift"]
            ])
        );
        // Far ahead: only what lies within the last PAGE_STEPS steps is sent.
        s.reached(20_000);
        let j = s.page_json(20_000);
        assert_eq!(
            j["runs"],
            json!([[20_000 - PAGE_STEPS, 20_000, "verified"]])
        );
        // A gap right after the attach: the snapshot, then the gap.
        let mut s = Strip::default();
        s.start(7);
        s.gap(7, 9);
        assert_eq!(
            s.page_json(9)["runs"],
            json!([[7, 8, "snapshot"], [7, 9, "gap"]])
        );
    }
}
