//! What a verdict counts (docs/protocol.md, "The verdict's count"): the steps from the
//! attach to the end of the session, how many were verified, and the rest, each stretch
//! never verified counted where it was named (a gap, a resync).

use super::Gap;
use std::fmt;

/// The steps a session covered, verified or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// The step the viewer attached at (`None`: it never did).
    pub from: Option<u64>,
    /// Where the session's steps end: the end of a gap still open, else the viewer's step.
    pub to: u64,
    /// Steps whose hash was compared and equal.
    pub verified: u64,
    /// Every step from `from` to `to` (`to - from`, wrapping as step numbers do), when
    /// every gap's length is known (not after a host restarted behind the viewer or with
    /// another world).
    pub total: Option<u64>,
    /// Steps in gaps of known length, never verified.
    pub in_gaps: u64,
    /// Gaps of known length.
    pub gaps: u64,
    /// Gaps whose length is not known (a restarted host).
    pub unknown_gaps: u64,
    /// Steps resyncs jumped over, never verified.
    pub resynced: u64,
    /// Resyncs.
    pub resyncs: u64,
    /// Whether the last gap was still open when the session ended: the viewer's world
    /// never reached the end of the steps it had heard of.
    pub open: bool,
}

impl Tally {
    /// Counts a session that attached at `attached_at`, ended with its world at `step`,
    /// verified `verified` steps, and never verified the steps of `gaps` (the last one
    /// still open when the session ended, if `open`, as [`super::Verifier::summary`]
    /// gives it) and `resynced`.
    pub fn new(
        attached_at: Option<u64>,
        (step, verified): (u64, u64),
        gaps: &[Gap],
        resynced: &[Gap],
        open: bool,
    ) -> Tally {
        let open = open && !gaps.is_empty();
        let to = match gaps.last() {
            Some(g) if open => g.to.max(step),
            _ => step,
        };
        let known = gaps.iter().filter_map(Gap::steps);
        let unknown_gaps = gaps.iter().filter(|g| g.steps().is_none()).count() as u64;
        Tally {
            from: attached_at,
            to,
            verified,
            total: attached_at
                .filter(|_| unknown_gaps == 0)
                .map(|a| to.wrapping_sub(a)),
            in_gaps: known.clone().sum(),
            gaps: known.count() as u64,
            unknown_gaps,
            resynced: resynced.iter().filter_map(Gap::steps).sum(),
            resyncs: resynced.len() as u64,
            open,
        }
    }

    /// Steps never verified that the count names: in gaps of known length and jumped over
    /// by resyncs.
    pub fn not_verified(&self) -> u64 {
        self.in_gaps + self.resynced
    }
}

/// `n THING` or `n THINGs`.
fn count(n: u64, thing: &str) -> String {
    match n {
        1 => format!("1 {thing}"),
        n => format!("{n} {thing}s"),
    }
}

/// The verdict's count, as its last line ends: `verified V of the T steps from A to B`,
/// then, when some were not, `; X in G gaps and Y in R resyncs not verified`, and the
/// gaps of unknown length (docs/protocol.md, "The verdict's count").
impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(from) = self.from else {
            return write!(f, "verified 0 steps");
        };
        match self.total {
            Some(total) => write!(
                f,
                "verified {} of the {} from {from} to {}",
                self.verified,
                count(total, "step"),
                self.to
            )?,
            None => write!(
                f,
                "verified {} from {from} to {}",
                count(self.verified, "step"),
                self.to
            )?,
        }
        let mut parts = Vec::new();
        if self.gaps > 0 {
            parts.push(format!("{} in {}", self.in_gaps, count(self.gaps, "gap")));
        }
        if self.resyncs > 0 {
            parts.push(format!(
                "{} in {}",
                self.resynced,
                count(self.resyncs, "resync")
            ));
        }
        if !parts.is_empty() {
            write!(f, "; {} not verified", parts.join(" and "))?;
        }
        if self.unknown_gaps > 0 {
            write!(
                f,
                "; {} of unknown length (the host was restarted)",
                count(self.unknown_gaps, "gap")
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Tally;
    use crate::session::Gap;

    /// The count adds up, and says every stretch never verified (docs/protocol.md, "The
    /// verdict's count").
    #[test]
    fn the_count_says_what_was_verified_of_every_step() {
        let all = Tally::new(Some(0), (12000, 12000), &[], &[], false);
        assert_eq!(
            all.to_string(),
            "verified 12000 of the 12000 steps from 0 to 12000"
        );
        let nats = Tally::new(
            Some(0),
            (12000, 11869),
            &[Gap::new(40, 171, "lost")],
            &[],
            false,
        );
        assert_eq!(
            nats.to_string(),
            "verified 11869 of the 12000 steps from 0 to 12000; 131 in 1 gap not verified"
        );
        assert!(!nats.open);
        // The end in place of a resync: the open gap runs to the host's step.
        let behind = Tally::new(
            Some(8782),
            (1423395, 1400000),
            &[Gap::new(1423395, 1500000, "ended")],
            &[Gap::new(10, 14623, "resync")],
            true,
        );
        assert!(behind.open);
        assert_eq!(
            behind.to_string(),
            "verified 1400000 of the 1491218 steps from 8782 to 1500000; 76605 in 1 gap and 14613 in 1 resync not verified"
        );
        assert_eq!(
            behind.verified + behind.not_verified(),
            behind.total.unwrap()
        );
        let mut restarted = Gap::new(500, 20, "lost");
        restarted.behind = true;
        let back = Tally::new(Some(0), (600, 1080), &[restarted], &[], false);
        assert_eq!(
            back.to_string(),
            "verified 1080 steps from 0 to 600; 1 gap of unknown length (the host was restarted)"
        );
        assert_eq!(
            Tally::new(None, (0, 0), &[], &[], false).to_string(),
            "verified 0 steps"
        );
        assert_eq!(
            Tally::new(Some(5), (6, 1), &[], &[], false).to_string(),
            "verified 1 of the 1 step from 5 to 6"
        );
    }
}
