//! CPU time, memory and load of processes, from getrusage(2), wait4(2) and /proc.

use std::process::{Child, ExitStatus};
use std::time::Duration;

fn timeval(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
}

/// This process's CPU time so far (user + system, every thread), from getrusage(2).
pub fn self_cpu() -> Duration {
    // SAFETY: getrusage writes one rusage into the zeroed struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return Duration::ZERO;
    }
    timeval(u.ru_utime) + timeval(u.ru_stime)
}

/// Waits for `child` and returns its exit status and CPU time (user + system, all its
/// threads), from wait4(2).
pub fn wait_cpu(child: &mut Child) -> (Option<ExitStatus>, Duration) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: wait4 on our own child's pid, writing into locals we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut u) };
    if r != pid {
        let s = child.wait().ok();
        return (s, Duration::ZERO);
    }
    use std::os::unix::process::ExitStatusExt;
    (
        Some(ExitStatus::from_raw(status)),
        timeval(u.ru_utime) + timeval(u.ru_stime),
    )
}

/// A running process's CPU time so far, in nanoseconds: the sum over its threads of the
/// time on a CPU in /proc/PID/task/*/schedstat (nanosecond resolution, unlike the 10 ms
/// ticks of /proc/PID/stat). Threads that have exited are not counted, so take it over a
/// window in which the process keeps its threads.
pub fn proc_cpu(pid: u32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

/// The CPU time so far of a running process's thread named `name` (its comm), from its
/// schedstat; `None` when it has no such thread.
pub fn thread_cpu(pid: u32, name: &str) -> Option<Duration> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    tasks.flatten().find_map(|t| {
        let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
        if comm.trim_end() != name {
            return None;
        }
        let s = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
        Some(Duration::from_nanos(
            s.split_whitespace().next()?.parse().ok()?,
        ))
    })
}

/// A process's resident set (VmRSS) in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// The machine's CPU time so far, busy and total, in clock ticks (the `cpu` line of
/// /proc/stat: busy is everything but idle and iowait).
pub fn machine_ticks() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// Clock ticks per second (`getconf CLK_TCK`).
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// The 1, 5 and 15 minute load averages, as /proc/loadavg gives them.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Raises this process's open-file limit (which its children inherit) to its hard limit,
/// and returns the new soft limit; an error if that is below `need`.
pub fn raise_fd_limit(need: u64) -> Result<u64, String> {
    // SAFETY: get/setrlimit on a struct we own.
    let mut l: libc::rlimit = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return Err("cannot read the open-file limit".into());
    }
    if l.rlim_cur < l.rlim_max {
        l.rlim_cur = l.rlim_max;
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) } != 0 {
            return Err("cannot raise the open-file limit".into());
        }
    }
    let soft = l.rlim_cur as u64;
    if soft < need {
        return Err(format!(
            "the open-file limit is {soft} (hard limit); this run needs about {need}: raise it (ulimit -Hn, /etc/security/limits.conf)"
        ));
    }
    Ok(soft)
}
