//! A warning said once, then at most once per period with the count of what happened
//! since (TLS handshakes refused with an expired certificate, NATS publishes that failed):
//! a fault that repeats thousands of times a second gives a line every period, not a line
//! each time. The counters and metrics count every one; this only spares the log.

use std::time::{Duration, Instant};

/// What happened since the last warning, and when that was.
#[derive(Debug, Default)]
pub struct Tally {
    /// The last warning, if any since the count started.
    pub warned: Option<Instant>,
    /// Counted since the last warning.
    pub since: u64,
}

impl Tally {
    /// Counts `n` more. When a warning is due (the first, or `every` after the last) the
    /// count since the last one is returned and starts over.
    pub fn add(&mut self, n: u64, every: Duration) -> Option<u64> {
        self.since += n;
        if self.warned.is_some_and(|at| at.elapsed() < every) {
            return None;
        }
        self.warned = Some(Instant::now());
        Some(std::mem::take(&mut self.since))
    }
}

#[cfg(test)]
mod tests {
    use super::Tally;
    use std::time::Duration;

    #[test]
    fn the_first_is_said_then_counted_until_the_period_has_passed() {
        let mut t = Tally::default();
        assert_eq!(t.add(1, Duration::from_secs(60)), Some(1));
        assert_eq!(t.add(3, Duration::from_secs(60)), None);
        assert_eq!(t.add(1, Duration::from_secs(60)), None);
        assert_eq!(t.since, 5 - 1);
        assert_eq!(t.add(2, Duration::ZERO), Some(6), "the count since");
        assert_eq!(t.since, 0);
    }
}
