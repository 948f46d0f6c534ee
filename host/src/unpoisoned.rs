//! Locks that keep serving after a panic. A panic while holding one of the host's locks
//! leaves plain data behind (rings, lists, counters): the host goes on with it rather than
//! failing every connection after.

use std::sync::{LockResult, PoisonError};

/// The guard of `lock()`, `read()` or `write()`, poisoned or not.
pub fn unpoisoned<G>(r: LockResult<G>) -> G {
    r.unwrap_or_else(PoisonError::into_inner)
}
