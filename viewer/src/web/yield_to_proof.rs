//! Frames yield to the proof: when the verifier is behind the host and waits for a CPU, a
//! live page's frames come further apart, so the browser drawing them takes less of the
//! machine from verification (docs/watch.md, "Frames yield to the proof").
//!
//! Every [`SAMPLE_EVERY`] or so the hub reads the verifier thread's scheduler counters
//! (Linux `/proc/self/task/TID/schedstat`: its second number, nanoseconds spent waiting for
//! a CPU). The verifier is *pressed* when, since the last reading, it waited for a CPU at
//! least [`PRESSED`] of the time while at least [`BEHIND`] records waited for it (the
//! backlog of its last status): then the gap between two frames to a tab doubles (from
//! [`FIRST_GAP`] up to [`MAX_GAP`]). When fewer records waited, the gap halves, down to
//! none below [`FIRST_GAP`]; while they still wait but the verifier waited less than
//! [`EASED`] of the time, it halves only every [`CALM`] readings in a row. A verifier that
//! keeps up with its host never holds the page back, however long its wake-ups wait.
//! Without the counters (another system, or no verifier thread yet) there is no gap.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the counters are read, at most.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// Records waiting for the verifier from which on it is behind the host.
pub const BEHIND: u64 = 4096;
/// A verifier behind the host is pressed when it waited for a CPU this part of the time
/// (per mille).
pub const PRESSED: u64 = 100;
/// Below this part of the time (per mille), the pressure has eased.
pub const EASED: u64 = 50;
/// Readings in a row in which a verifier still behind waited less than [`EASED`] before
/// the gap halves.
pub const CALM: u32 = 8;
/// The first gap when the verifier is pressed.
pub const FIRST_GAP: Duration = Duration::from_millis(50);
/// The longest gap: a pressed page still gets a frame a second.
pub const MAX_GAP: Duration = Duration::from_secs(1);

/// The verifier's thread and the gap it calls for.
#[derive(Debug, Default)]
pub struct Yield {
    /// The verifier's thread id (0: not known yet).
    tid: AtomicU64,
    /// The gap between two frames to a tab, in milliseconds.
    gap_ms: AtomicU64,
    /// Records waiting for the verifier at its last status.
    backlog: AtomicU64,
    last: Mutex<Option<Sample>>,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    waited_ns: u64,
    /// Readings in a row, up to this one, in which the verifier was behind but waited
    /// less than [`EASED`].
    calm: u32,
}

impl Yield {
    /// Called on the verifier's thread: notes which thread it is (once).
    pub fn note_verifier_thread(&self) {
        if self.tid.load(Ordering::Relaxed) == 0 {
            // SAFETY: gettid takes no arguments and touches no memory.
            let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u64;
            self.tid.store(tid, Ordering::Relaxed);
        }
    }

    /// The verifier's backlog, from its status.
    pub fn note_backlog(&self, records: u64) {
        self.backlog.store(records, Ordering::Relaxed);
    }

    /// The gap between two frames to a tab now.
    pub fn gap(&self) -> Duration {
        Duration::from_millis(self.gap_ms.load(Ordering::Relaxed))
    }

    /// Reads the verifier's counters when [`SAMPLE_EVERY`] has passed, and sets the gap.
    pub fn sample(&self) {
        let tid = self.tid.load(Ordering::Relaxed);
        if tid == 0 {
            return;
        }
        let Some(waited_ns) = waited(tid) else {
            return;
        };
        let now = Instant::now();
        let mut sample = Sample {
            at: now,
            waited_ns,
            calm: 0,
        };
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let Some(prev) = *last else {
            *last = Some(sample);
            return;
        };
        let wall = now.duration_since(prev.at);
        if wall < SAMPLE_EVERY {
            return;
        }
        let waited = waited_ns
            .saturating_sub(prev.waited_ns)
            .saturating_mul(1000)
            / (wall.as_nanos() as u64).max(1);
        let behind = self.backlog.load(Ordering::Relaxed) >= BEHIND;
        if behind && waited < EASED {
            sample.calm = prev.calm.saturating_add(1);
        }
        *last = Some(sample);
        let gap = next_gap(self.gap(), waited, behind, sample.calm);
        tracing::debug!(
            waited,
            behind,
            gap_ms = gap.as_millis() as u64,
            "the verifier waited for a CPU, per mille"
        );
        self.gap_ms.store(gap.as_millis() as u64, Ordering::Relaxed);
    }
}

/// The gap after a sample in which the verifier waited for a CPU `waited` per mille of the
/// time, `behind` or not, the `calm`-th reading in a row in which it was behind and waited
/// less than [`EASED`]. Frames that yield take less of the CPU, so a verifier still
/// behind waits less: the gap halves only every [`CALM`] such readings, so that it does not
/// open and close by turns.
pub fn next_gap(gap: Duration, waited: u64, behind: bool, calm: u32) -> Duration {
    let half = || {
        let half = gap / 2;
        if half < FIRST_GAP {
            Duration::ZERO
        } else {
            half
        }
    };
    if !behind {
        half()
    } else if waited >= PRESSED {
        (gap * 2).clamp(FIRST_GAP, MAX_GAP)
    } else if waited < EASED && calm > 0 && calm.is_multiple_of(CALM) {
        half()
    } else {
        gap
    }
}

/// Nanoseconds thread `tid` of this process has waited for a CPU so far.
fn waited(tid: u64) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gap_doubles_while_pressed_and_halves_away_once_eased() {
        let mut gap = Duration::ZERO;
        let mut seen = vec![];
        for _ in 0..7 {
            gap = next_gap(gap, PRESSED, true, 0);
            seen.push(gap.as_millis());
        }
        assert_eq!(seen, [50, 100, 200, 400, 800, 1000, 1000]);
        let between = (PRESSED + EASED) / 2;
        assert_eq!(next_gap(gap, between, true, 0), gap, "in between: kept");
        assert_eq!(
            next_gap(gap, 1000, false, 0).as_millis(),
            500,
            "a verifier that keeps up is not pressed, however long it waits"
        );
        // Still behind but calm: the gap halves only every CALM readings.
        let mut seen = vec![];
        for calm in 1..=5 * CALM {
            gap = next_gap(gap, EASED - 1, true, calm);
            seen.push(gap.as_millis());
        }
        let steps: Vec<u128> = seen.iter().step_by(CALM as usize).copied().collect();
        assert_eq!(steps, [1000, 500, 250, 125, 62], "{seen:?}");
        assert_eq!(seen.last(), Some(&0));
        assert_eq!(next_gap(Duration::ZERO, 1000, false, 0), Duration::ZERO);
    }

    /// A "verifier" that spins among more spinning threads than the machine has cores is
    /// seen waiting for a CPU; one that sleeps lets the gap close.
    #[test]
    fn the_counters_show_a_verifier_waiting_and_a_sleeping_one_closes_the_gap() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let y = Arc::new(Yield::default());
        let stop = Arc::new(AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let spin = |note: bool| {
            let (y, stop) = (y.clone(), stop.clone());
            std::thread::spawn(move || {
                if note {
                    y.note_verifier_thread();
                }
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let mut threads = vec![spin(true)];
        threads.extend((0..2 * cores).map(|_| spin(false)));
        while y.tid.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        if waited(y.tid.load(Ordering::Relaxed)).is_none() {
            // A kernel without scheduler statistics: no gap, ever.
            stop.store(true, Ordering::Relaxed);
            y.sample();
            assert_eq!(y.gap(), Duration::ZERO);
            return;
        }
        // Spinning among more spinners than cores, it waits for a CPU much of the time
        // (the more so the busier the machine).
        let tid = y.tid.load(Ordering::Relaxed);
        let (t0, w0) = (Instant::now(), waited(tid).unwrap_or_default());
        std::thread::sleep(SAMPLE_EVERY * 2);
        let w1 = waited(tid).unwrap_or_default();
        let wall = t0.elapsed().as_nanos() as u64;
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        let waited = (w1 - w0) * 1000 / wall.max(1);
        assert!(waited >= PRESSED, "waited {waited} per mille");
        // A verifier with nothing waiting for it (this test's own, sleeping thread, no
        // backlog) lets the gap close.
        let idle = Yield::default();
        idle.note_verifier_thread();
        idle.gap_ms
            .store(MAX_GAP.as_millis() as u64, Ordering::Relaxed);
        for _ in 0..8 {
            idle.sample();
            std::thread::sleep(SAMPLE_EVERY + Duration::from_millis(20));
        }
        idle.sample();
        assert!(
            idle.gap() < MAX_GAP,
            "a sleeping verifier lets the gap close"
        );
    }
}
