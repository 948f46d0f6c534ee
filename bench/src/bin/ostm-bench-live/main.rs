//! `ostm-bench-live`: the live stream's benchmark (run by `scripts/bench-live` and
//! `scripts/bench-fanout`; docs/performance.md gives its tables).
//!
//! For each rate and viewer count it runs, one after the other on the same machine:
//! - **plain**: the baseline, a plain loop writing the host's record bytes to the same
//!   number of loopback sockets ([`plain`]);
//! - **tcp**: the real `ostm-host serve` on 127.0.0.1 port 0 with that many in-process
//!   viewers ([`readers`]: each verifies every record it receives, as `ostm-viewer` does);
//! - **nats** (with `--nats URL`): the same host publishing to that NATS server, and the
//!   same number of in-process viewers reading the session through it;
//! - **cluster**: a 3-node JetStream cluster of nats-servers on 127.0.0.1 (testkit's
//!   [`Cluster`]) started for the case, the host publishing with `--replicas 3`, the
//!   viewers spread over the nodes in turn.
//!
//! Through NATS the host is then interrupted (it publishes the end) and the viewers are
//! given [`END_WAIT`] to reach it: the row counts those that verified every step from
//! their attach to the end.
//!
//! Each case measures a fixed window once every viewer has attached: the host's and the
//! viewers' CPU time (from /proc and getrusage, so the other's share of the cores does not
//! blur it), steps and verified steps per second, p50/p99 latency from the host's step (its
//! hidden `--stamps` file) to a viewer's verdict on it (same machine, same clock), resyncs,
//! the host's memory per viewer, and the machine's other load.
//!
//! With `--attach-steps N` it then measures one real `ostm-viewer attach` process's CPU
//! time per verified step beside offline `ostm-viewer verify`'s on the same steps ([`attach`]).

mod attach;
mod cpu;
mod plain;
mod readers;
mod server;

use ostm_testkit::Cluster;
use readers::Verifier;
use server::Server;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The name ostm-host gives its stepping loop's thread (serve.rs, `STEPPER_THREAD`).
const STEPPER_THREAD: &str = "ostm-stepper";

/// The nodes of the cluster case, and the replicas of its session's stream.
const CLUSTER_NODES: usize = 3;

/// How long viewers through NATS are given to reach the host's end after it is
/// interrupted.
const END_WAIT: Duration = Duration::from_secs(30);

const USAGE: &str = "usage: ostm-bench-live [--host PATH] [--viewer PATH] [--viewers 1,10,100,1000]
       [--rate 60,max] [--seconds 5] [--transport tcp[,nats][,cluster]] [--nats URL] [--nats-pid PID]
       [--attach-steps 2000000] [--attach-runs 2] [--out DIR]
       ostm-bench-live plain-host --viewers N --rate R|max --stamps FILE --stamp-every K
       ostm-bench-live readers --addr HOST:PORT --viewers N

Examples:
  ostm-bench-live --host target/release/ostm-host --rate 60 --viewers 1000 --seconds 10
  ostm-bench-live --transport tcp,nats --nats nats://127.0.0.1:4222 --attach-steps 0
  ostm-bench-live --transport cluster --viewers 1000 --attach-steps 0   # starts 3 nats-servers

Exit status: 0 every case measured; 2 bad arguments, or a case that could not be measured
(a server that did not start, a viewer that failed over TCP, no viewer attached, nothing
verified): no row for it, and a sentence saying why. Through NATS a row counts the viewers
that attached and that verified to the host's end; those that failed are named on stderr.";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Plain,
    Tcp,
    Nats,
    Cluster,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Plain => "plain loop (baseline)",
            Transport::Tcp => "tcp",
            Transport::Nats => "nats",
            Transport::Cluster => "nats cluster (3 nodes)",
        }
    }

    /// The viewers read the session through NATS.
    fn nats(self) -> bool {
        matches!(self, Transport::Nats | Transport::Cluster)
    }
}

struct Args {
    host: PathBuf,
    viewer: PathBuf,
    viewers: Vec<usize>,
    rates: Vec<Option<u32>>,
    window: Duration,
    transports: Vec<Transport>,
    nats: Option<String>,
    nats_pid: Option<u32>,
    attach_steps: u64,
    attach_runs: usize,
    out: PathBuf,
}

fn fail(msg: &str) -> ! {
    eprintln!("ostm-bench-live: {msg}\n{USAGE}");
    std::process::exit(2);
}

fn parse_rate(s: &str) -> Option<u32> {
    if s == "max" {
        return None;
    }
    match s.parse::<u32>() {
        Ok(n) if n > 0 => Some(n),
        _ => fail(&format!(
            "--rate: expected steps per second or `max`, found `{s}`"
        )),
    }
}

fn parse_list<T>(k: &str, v: &str, f: impl Fn(&str) -> Option<T>) -> Vec<T> {
    let out: Vec<T> = v
        .split(',')
        .map(|x| f(x.trim()))
        .collect::<Option<_>>()
        .unwrap_or_default();
    if out.is_empty() {
        fail(&format!("{k}: cannot read `{v}`"));
    }
    out
}

fn parse() -> Args {
    let mut a = Args {
        host: PathBuf::from("target/release/ostm-host"),
        viewer: PathBuf::from("target/release/ostm-viewer"),
        viewers: vec![1, 10, 100, 1000],
        rates: vec![Some(60), None],
        window: Duration::from_secs(5),
        transports: vec![Transport::Tcp],
        nats: None,
        nats_pid: None,
        attach_steps: 2_000_000,
        attach_runs: 2,
        out: std::env::temp_dir(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        if k == "--help" || k == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let Some(v) = it.next() else {
            fail(&format!("{k} needs a value"))
        };
        let num = |v: &str| {
            v.parse::<u64>()
                .unwrap_or_else(|_| fail(&format!("{k}: expected a number, found `{v}`")))
        };
        match k.as_str() {
            "--host" => a.host = PathBuf::from(v),
            "--viewer" => a.viewer = PathBuf::from(v),
            "--viewers" => a.viewers = parse_list(&k, &v, |x| x.parse().ok().filter(|&n| n > 0)),
            "--rate" => a.rates = parse_list(&k, &v, |x| Some(parse_rate(x))),
            "--seconds" => a.window = Duration::from_secs(num(&v).max(1)),
            "--transport" => {
                a.transports = parse_list(&k, &v, |x| match x {
                    "tcp" => Some(Transport::Tcp),
                    "nats" => Some(Transport::Nats),
                    "cluster" => Some(Transport::Cluster),
                    _ => None,
                })
            }
            "--nats" => a.nats = Some(v),
            "--nats-pid" => a.nats_pid = Some(num(&v) as u32),
            "--attach-steps" => a.attach_steps = num(&v),
            "--attach-runs" => a.attach_runs = num(&v).max(1) as usize,
            "--out" => a.out = PathBuf::from(v),
            _ => fail(&format!("unknown option {k}")),
        }
    }
    if a.transports.contains(&Transport::Nats) && a.nats.is_none() {
        fail("--transport nats needs --nats URL");
    }
    if let Err(e) = writable_dir(&a.out) {
        fail(&format!("--out {}: {e}", a.out.display()));
    }
    if !a.host.is_file() {
        fail(&format!(
            "--host {}: no such file (build it: cargo build --release -p ostm-host)",
            a.host.display()
        ));
    }
    if a.attach_steps > 0 && !a.viewer.is_file() {
        fail(&format!(
            "--viewer {}: no such file (build it: cargo build --release -p ostm-viewer, \
             or give --attach-steps 0)",
            a.viewer.display()
        ));
    }
    a
}

/// Whether files can be made in `dir` (the cases' stamp files and recordings go there).
fn writable_dir(dir: &Path) -> Result<(), String> {
    if !dir.is_dir() {
        return Err("no such directory: create it first, or give another".into());
    }
    let probe = dir.join(format!(".ostm-bench-live-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| format!("cannot write a file there: {e}"))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Steps between two stamps: every step at a set rate up to 1 000/s, else every 64th.
fn stamp_every(rate: Option<u32>) -> u64 {
    match rate {
        Some(r) if r <= 1000 => 1,
        _ => 64,
    }
}

fn rate_arg(rate: Option<u32>) -> String {
    rate.map_or_else(|| "max".to_string(), |r| r.to_string())
}

/// One case's figures.
struct Row {
    transport: Transport,
    viewers: usize,
    attached: usize,
    /// Viewers that verified every step from their attach to the host's end (through
    /// NATS only).
    to_the_end: Option<usize>,
    host_steps_per_s: f64,
    verified_per_viewer_per_s: f64,
    host_cpu_per_step_us: f64,
    stepper_cpu_per_step_us: f64,
    host_cpu_per_record_us: f64,
    viewers_cpu_per_record_us: f64,
    /// Each server's (the one, or each node of the cluster).
    nats_cpu_per_record_us: Vec<f64>,
    /// The cluster's node names, the stream's leader marked.
    nodes: Vec<String>,
    p50_us: f64,
    p99_us: f64,
    resyncs: u64,
    memory_per_viewer_kib: f64,
    other_load_cores: f64,
}

fn start_server(
    args: &Args,
    t: Transport,
    nats: &str,
    rate: Option<u32>,
    n: usize,
    stamps: &Path,
    session: &str,
) -> Result<Server, String> {
    let every = stamp_every(rate).to_string();
    let mut cmd = match t {
        Transport::Plain => {
            let me = std::env::current_exe()
                .map_err(|e| format!("cannot find this program to run the plain loop: {e}"))?;
            let mut c = Command::new(me);
            c.arg("plain-host").args(["--viewers", &n.to_string()]);
            c
        }
        Transport::Tcp | Transport::Nats | Transport::Cluster => {
            let mut c = Command::new(&args.host);
            c.args(["serve", "--listen", "127.0.0.1:0", "--status-ms", "0"])
                .args(["--max-viewers", &(n + 16).to_string()])
                .args(["--max-waiting", "4096", "--max-waiting-per-address", "4096"]);
            if t.nats() {
                c.args(["--publish", nats, "--session", session]);
            }
            if t == Transport::Cluster {
                c.args(["--replicas", &CLUSTER_NODES.to_string()]);
            }
            c
        }
    };
    cmd.args(["--rate", &rate_arg(rate)])
        .arg("--stamps")
        .arg(stamps)
        .args(["--stamp-every", &every]);
    let what = match t {
        Transport::Plain => "the plain loop".to_string(),
        _ => args.host.display().to_string(),
    };
    server::start(cmd, &what)
}

fn stop_server(s: Server, t: Transport) {
    server::stop(
        s,
        if t == Transport::Plain {
            "-KILL"
        } else {
            "-INT"
        },
    );
}

fn read_stamps(path: &Path) -> std::collections::BTreeMap<u64, u128> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (a, b) = l.split_once(' ')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// What is measured at the start and the end of the window.
struct Mark {
    at: Instant,
    ns: u128,
    host: Duration,
    stepper: Option<Duration>,
    viewers: Duration,
    nats: Vec<Duration>,
    machine_busy: u64,
    verified: u64,
    resyncs: u64,
}

fn mark(pid: u32, nats_pids: &[u32], counts: &[Arc<readers::Counts>]) -> Mark {
    Mark {
        at: Instant::now(),
        ns: readers::now_ns(),
        host: cpu::proc_cpu(pid),
        stepper: cpu::thread_cpu(pid, STEPPER_THREAD),
        viewers: cpu::self_cpu(),
        nats: nats_pids.iter().map(|&p| cpu::proc_cpu(p)).collect(),
        machine_busy: cpu::machine_ticks().0,
        verified: counts
            .iter()
            .map(|c| c.verified.load(Ordering::Relaxed))
            .sum(),
        resyncs: counts
            .iter()
            .map(|c| c.resyncs.load(Ordering::Relaxed))
            .sum(),
    }
}

fn run_case(
    args: &Args,
    rt: &tokio::runtime::Runtime,
    t: Transport,
    rate: Option<u32>,
    n: usize,
    case: usize,
) -> Result<Row, String> {
    let stamps = args.out.join(format!("stamps-{case}.txt"));
    let session = format!("bench{}x{case}", std::process::id());
    // The case's own cluster, every node killed when the case ends.
    let cluster = match t {
        Transport::Cluster => Some(Cluster::try_start(CLUSTER_NODES)?),
        _ => None,
    };
    // The servers the host publishes to, those the viewers read through (in turn), and
    // the processes whose CPU is measured.
    let (publish, reads, nats_pids): (String, Vec<String>, Vec<u32>) = match (&cluster, t) {
        (Some(c), _) => (
            c.urls(),
            c.nodes.iter().map(|n| n.url()).collect(),
            c.nodes.iter().filter_map(|n| n.pid()).collect(),
        ),
        (None, Transport::Nats) => {
            let url = args.nats.clone().unwrap_or_default();
            (url.clone(), vec![url], args.nats_pid.into_iter().collect())
        }
        _ => (String::new(), Vec::new(), Vec::new()),
    };
    let server = start_server(args, t, &publish, rate, n, &stamps, &session)?;
    let pid = server.child.id();
    // At --rate max the host's record ring is full by then, so that what it holds is not
    // counted against the viewers.
    std::thread::sleep(Duration::from_secs(1));
    let rss_before = cpu::rss_kib(pid);
    let attached = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let every = stamp_every(rate);
    let mut counts = Vec::with_capacity(n);
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let v = Verifier::new(every);
            counts.push(v.counts.clone());
            let (attached, stop) = (attached.clone(), stop.clone());
            match t {
                Transport::Plain | Transport::Tcp => {
                    rt.spawn(readers::tcp(server.addr.clone(), v, attached, stop))
                }
                Transport::Nats | Transport::Cluster => rt.spawn(readers::nats(
                    reads[i % reads.len()].clone(),
                    session.clone(),
                    v,
                    attached,
                    stop,
                )),
            }
        })
        .collect();
    // Until every viewer has attached or ended (one that failed will not attach).
    let deadline = Instant::now() + Duration::from_secs(60);
    let ended =
        |tasks: &[tokio::task::JoinHandle<_>]| tasks.iter().filter(|t| t.is_finished()).count();
    while attached.load(Ordering::Relaxed) + ended(&tasks) < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(1));
    let a = mark(pid, &nats_pids, &counts);
    std::thread::sleep(args.window);
    let b = mark(pid, &nats_pids, &counts);
    let rss_during = cpu::rss_kib(pid);
    let nodes: Vec<String> = cluster.as_ref().map_or_else(Vec::new, |c| {
        let leader = c
            .stream_cluster(
                &ostm_protocol::wire::nats::Session::new(&session)
                    .map(|s| s.stream())
                    .unwrap_or_default(),
            )
            .map(|(l, _)| l);
        c.nodes
            .iter()
            .map(|n| {
                if leader.as_deref() == Some(n.name.as_str()) {
                    format!("{} (leader)", n.name)
                } else {
                    n.name.clone()
                }
            })
            .collect()
    });
    let mut server = Some(server);
    if t.nats() {
        // The host publishes its end when interrupted: each viewer is given a while to
        // reach it.
        if let Some(s) = server.take() {
            stop_server(s, t);
        }
        let until = Instant::now() + END_WAIT;
        while ended(&tasks) < n && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    stop.cancel();
    let results: Vec<Result<Verifier, String>> = rt.block_on(async {
        let mut out = Vec::new();
        for task in tasks {
            out.push(task.await.unwrap_or_else(|e| Err(e.to_string())));
        }
        out
    });
    if let Some(s) = server {
        stop_server(s, t);
    }
    drop(cluster);
    let host_ns = read_stamps(&stamps);
    let _ = std::fs::remove_file(&stamps);
    let secs = b.at.duration_since(a.at).as_secs_f64();
    // The host's rate over the window, from its first and last stamps inside it.
    let inside: Vec<(&u64, &u128)> = host_ns
        .iter()
        .filter(|(_, &ns)| ns >= a.ns && ns <= b.ns)
        .collect();
    let host_steps_per_s = match (inside.first(), inside.last()) {
        (Some((s0, t0)), Some((s1, t1))) if t1 > t0 => {
            (**s1 - **s0) as f64 / ((**t1 - **t0) as f64 / 1e9)
        }
        _ => 0.0,
    };
    let host_steps = host_steps_per_s * secs;
    let mut lat_us = Vec::new();
    let attached = attached.load(Ordering::Relaxed);
    let mut failed = n.saturating_sub(attached);
    let mut to_the_end = 0;
    // Each distinct failure once, with how many viewers it stopped.
    let mut errors = std::collections::BTreeMap::<&str, usize>::new();
    for r in &results {
        match r {
            Ok(v) => {
                to_the_end += usize::from(v.verified_to_the_end());
                for (step, at) in &v.verdicts {
                    if *at < a.ns || *at > b.ns {
                        continue;
                    }
                    if let Some(h) = host_ns.get(step) {
                        lat_us.push((*at as f64 - *h as f64) / 1000.0);
                    }
                }
            }
            Err(e) => {
                if !e.starts_with(readers::NOT_ATTACHED) {
                    failed += 1;
                }
                *errors.entry(e.as_str()).or_default() += 1;
            }
        }
    }
    for (e, count) in &errors {
        eprintln!("{count} {} viewer(s) failed: {e}", t.name());
    }
    lat_us.sort_by(f64::total_cmp);
    let records = b.verified.saturating_sub(a.verified) as f64;
    // Nothing to divide by, or figures of fewer viewers than the row names: no row of
    // zeros and ratios, but why.
    let first_error = errors.keys().next().copied().unwrap_or("no error reported");
    if attached == 0 {
        return Err(format!("none of the {n} viewers attached ({first_error})"));
    }
    if failed > 0 && !t.nats() {
        return Err(format!(
            "{failed} of the {n} viewers failed or never attached ({first_error})"
        ));
    }
    if host_steps_per_s <= 0.0 {
        return Err(format!(
            "the host made no step the bench saw in the {secs:.1} s window (no stamps in {})",
            args.out.display()
        ));
    }
    if records == 0.0 {
        return Err(format!(
            "no viewer verified a step in the {secs:.1} s window ({first_error})"
        ));
    }
    let us = |d: Duration, per: f64| {
        if per > 0.0 {
            d.as_secs_f64() * 1e6 / per
        } else {
            f64::NAN
        }
    };
    let host_cpu = b.host.saturating_sub(a.host);
    let nats_cpu: Vec<Duration> = b
        .nats
        .iter()
        .zip(&a.nats)
        .map(|(y, x)| y.saturating_sub(*x))
        .collect();
    let ours = host_cpu + b.viewers.saturating_sub(a.viewers) + nats_cpu.iter().sum::<Duration>();
    let busy =
        b.machine_busy.saturating_sub(a.machine_busy) as f64 / cpu::ticks_per_second() as f64;
    Ok(Row {
        transport: t,
        viewers: n,
        attached,
        to_the_end: t.nats().then_some(to_the_end),
        host_steps_per_s,
        verified_per_viewer_per_s: records / n as f64 / secs,
        host_cpu_per_step_us: us(host_cpu, host_steps),
        stepper_cpu_per_step_us: match (a.stepper, b.stepper) {
            (Some(x), Some(y)) => us(y.saturating_sub(x), host_steps),
            _ => f64::NAN,
        },
        host_cpu_per_record_us: us(host_cpu, records),
        viewers_cpu_per_record_us: us(b.viewers.saturating_sub(a.viewers), records),
        nats_cpu_per_record_us: nats_cpu.iter().map(|&d| us(d, records)).collect(),
        nodes,
        p50_us: percentile(&lat_us, 0.5),
        p99_us: percentile(&lat_us, 0.99),
        resyncs: b.resyncs.saturating_sub(a.resyncs),
        memory_per_viewer_kib: rss_during.saturating_sub(rss_before) as f64 / n as f64,
        other_load_cores: ((busy - ours.as_secs_f64()) / secs).max(0.0),
    })
}

/// Runs a case, or stops the bench saying why it cannot measure it (exit 2).
fn case_or_stop(
    args: &Args,
    rt: &tokio::runtime::Runtime,
    t: Transport,
    rate: Option<u32>,
    n: usize,
    case: usize,
) -> Row {
    run_case(args, rt, t, rate, n, case).unwrap_or_else(|e| {
        eprintln!(
            "ostm-bench-live: cannot measure {} with {n} viewers at --rate {}: {e}",
            t.name(),
            rate_arg(rate)
        );
        std::process::exit(2);
    })
}

fn f(x: f64, digits: usize) -> String {
    if x.is_nan() {
        "-".into()
    } else {
        format!("{x:.digits$}")
    }
}

fn print_row(r: &Row, plain: Option<&Row>) {
    let ratio = match (r.transport, plain) {
        (Transport::Plain, _) => "1".to_string(),
        (_, Some(p)) => f(r.host_cpu_per_record_us / p.host_cpu_per_record_us, 2),
        _ => "-".into(),
    };
    let mem = if r.transport.nats() {
        "-".to_string()
    } else {
        f(r.memory_per_viewer_kib, 1)
    };
    println!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {ratio} | {} | {} | {} | {} | {} | {mem} | {} |",
        r.transport.name(),
        r.viewers,
        r.attached,
        r.to_the_end.map_or("-".into(), |k| k.to_string()),
        f(r.host_steps_per_s, 0),
        f(r.verified_per_viewer_per_s, 0),
        f(r.host_cpu_per_step_us, 1),
        f(r.stepper_cpu_per_step_us, 1),
        f(r.host_cpu_per_record_us, 2),
        f(r.viewers_cpu_per_record_us, 2),
        if r.nats_cpu_per_record_us.is_empty() {
            "-".to_string()
        } else {
            let each: Vec<String> = r
                .nats_cpu_per_record_us
                .iter()
                .enumerate()
                .map(|(i, &x)| match r.nodes.get(i) {
                    Some(name) => format!("{name} {}", f(x, 2)),
                    None => f(x, 2),
                })
                .collect();
            each.join(" / ")
        },
        f(r.p50_us, 0),
        f(r.p99_us, 0),
        r.resyncs,
        f(r.other_load_cores, 2),
    );
}

fn main() {
    let mut raw = std::env::args().skip(1);
    match raw.next().as_deref() {
        Some("plain-host") => return plain_host(raw.collect()),
        Some("readers") => return readers_only(raw.collect()),
        _ => {}
    }
    let args = parse();
    let most = args.viewers.iter().copied().max().unwrap_or(1) as u64;
    // The viewers' sockets here, the host's there (children inherit the limit), and room.
    match cpu::raise_fd_limit(most + 256) {
        Ok(n) => println!("open-file limit: {n}"),
        Err(e) => fail(&e),
    }
    println!("load average before: {}", cpu::loadavg());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut case = 0;
    for &rate in &args.rates {
        println!();
        println!(
            "host --rate {}, {} s per case",
            rate_arg(rate),
            args.window.as_secs()
        );
        println!();
        println!("| transport | viewers | attached | verified to the end | host steps/s | verified steps/s per viewer | host CPU per step (µs) | stepping thread CPU per step (µs) | host CPU per delivered record (µs) | × plain loop | viewers' CPU per verified step (µs) | nats-server CPU per delivered record (µs; each node's) | p50 latency (µs) | p99 latency (µs) | resyncs | host memory per viewer (KiB) | other load (cores) |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for &n in &args.viewers {
            case += 1;
            let plain = case_or_stop(&args, &rt, Transport::Plain, rate, n, case);
            print_row(&plain, None);
            for &t in &args.transports {
                case += 1;
                let r = case_or_stop(&args, &rt, t, rate, n, case);
                print_row(&r, Some(&plain));
            }
        }
    }
    println!();
    println!("load average after: {}", cpu::loadavg());
    if args.attach_steps > 0 {
        println!();
        if let Err(e) = attach::run(
            &args.host,
            &args.viewer,
            args.attach_steps,
            args.attach_runs,
            &args.out,
        ) {
            eprintln!("ostm-bench-live: cannot measure attach beside verify: {e}");
            std::process::exit(2);
        }
    }
}

/// `plain-host --viewers N --rate R|max --stamps FILE --stamp-every K`.
fn plain_host(rest: Vec<String>) {
    let (mut viewers, mut rate, mut stamps, mut every) = (1, None, PathBuf::from("stamps.txt"), 64);
    let mut it = rest.into_iter();
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_default();
        match k.as_str() {
            "--viewers" => viewers = v.parse().unwrap_or(1),
            "--rate" => rate = parse_rate(&v),
            "--stamps" => stamps = PathBuf::from(v),
            "--stamp-every" => every = v.parse().unwrap_or(64),
            _ => fail(&format!("plain-host: unknown option {k}")),
        }
    }
    plain::main(viewers, rate, &stamps, every);
}

/// `readers --addr HOST:PORT --viewers N`: N in-process viewers of a host started
/// elsewhere (under a profiler, say), until its stream ends; prints what they verified.
fn readers_only(rest: Vec<String>) {
    let (mut addr, mut n) = (String::new(), 1usize);
    let mut it = rest.into_iter();
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_default();
        match k.as_str() {
            "--addr" => addr = v,
            "--viewers" => n = v.parse().unwrap_or(1),
            _ => fail(&format!("readers: unknown option {k}")),
        }
    }
    if addr.is_empty() {
        fail("readers: --addr HOST:PORT is needed (the host to read)");
    }
    if let Err(e) = cpu::raise_fd_limit(n as u64 + 64) {
        fail(&e);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let attached = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let results: Vec<Result<Verifier, String>> = rt.block_on(async {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                tokio::spawn(readers::tcp(
                    addr.clone(),
                    Verifier::new(u64::MAX),
                    attached.clone(),
                    stop.clone(),
                ))
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap_or_else(|e| Err(e.to_string())));
        }
        out
    });
    let verified: u64 = results
        .iter()
        .flatten()
        .map(|v| v.counts.verified.load(Ordering::Relaxed))
        .sum();
    let failed = results.iter().filter(|r| r.is_err()).count();
    for e in results.iter().filter_map(|r| r.as_ref().err()) {
        eprintln!("viewer failed: {e}");
    }
    let attached = attached.load(Ordering::Relaxed);
    println!("viewers {n} attached {attached} failed {failed} verified {verified}");
    if failed > 0 || attached < n || verified == 0 {
        eprintln!(
            "ostm-bench-live readers: measured nothing whole: {attached} of {n} viewers \
             attached, {failed} failed, {verified} steps verified (is a host serving {addr}?)"
        );
        std::process::exit(2);
    }
}
