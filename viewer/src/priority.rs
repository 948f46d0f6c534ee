//! Thread priorities (Linux `nice` steps per thread): the verifier runs below the reader,
//! a view below the verifier, so reading the socket comes first when all want the CPU.

/// Lowers the calling thread's priority by `by` nice steps (best effort; 0 leaves it): the
/// verifier's below the reader's, a view's below the verifier's.
pub fn lower_thread_priority(by: i32) {
    if by <= 0 {
        return;
    }
    // SAFETY: gettid and setpriority take plain integers and touch no memory of ours.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid);
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid, now + by);
    }
}
