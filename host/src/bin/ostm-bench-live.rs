//! `ostm-bench-live`: the live stream's benchmark (run by `scripts/bench-live`).
//!
//! For each viewer count it starts the real `ostm-host` at `--rate max` on 127.0.0.1 port
//! 0, attaches that many in-process viewers (each verifies every record it receives, as
//! `ostm-viewer` does), measures for a fixed window, and reports per viewer: verified steps
//! per second, p50/p99 latency from the host's step (its `--stamps` file) to the viewer's
//! verdict on it (same machine, same clock), resyncs, and host memory per viewer (the
//! host's resident set with the viewers attached, minus before). Beside it, in the same
//! run, the baseline: the same record bytes sent over a plain loopback TCP socket.

use futures::{SinkExt, StreamExt};
use ostm_protocol::op::for_each_op;
use ostm_protocol::scenario::Scenario;
use ostm_protocol::wire::{
    Hello, HostCodec, PeerRole, Record, SnapshotKind, ToHost, ToViewer, ViewerCodec, VERSION,
};
use ostm_protocol::{Dims, Setup, World};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;

const STAMP_EVERY: u64 = 64;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn rss_kib(pid: u32) -> u64 {
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

#[derive(Default)]
struct ViewerResult {
    verified: u64,
    resyncs: u64,
    /// (world step, unix ns when verified), for steps that are multiples of STAMP_EVERY.
    verdicts: Vec<(u64, u128)>,
}

async fn one_viewer(addr: String, window: Duration) -> Result<ViewerResult, String> {
    let stream = TcpStream::connect(&addr).await.map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut conn = Framed::new(stream, ViewerCodec::new(addr));
    let hello = Hello {
        version: VERSION,
        role: PeerRole::Viewer as u8,
        token: Vec::new(),
    };
    conn.send(ToHost::Hello(hello))
        .await
        .map_err(|e| e.to_string())?;
    let mut world: Option<World> = None;
    let mut out = ViewerResult::default();
    let mut ops = Vec::new();
    let deadline = tokio::time::Instant::now() + window;
    let mut last_beat = Instant::now();
    loop {
        let msg = match tokio::time::timeout_at(deadline, conn.next()).await {
            Err(_) => break,
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(e.to_string()),
            Ok(Some(Ok(m))) => m,
        };
        match msg {
            ToViewer::Snapshot { kind, world: w } => {
                if kind == SnapshotKind::Resync {
                    out.resyncs += 1;
                }
                world = Some(w);
            }
            ToViewer::Record(Record { step, hash, input }) => {
                let Some(w) = world.as_mut() else {
                    return Err("a record before the snapshot".into());
                };
                if w.step != step {
                    return Err(format!("record {step} for world at {}", w.step));
                }
                ops.clear();
                let _ = for_each_op("record", &input, 0, |op| ops.push(op));
                w.step(&ops);
                if w.hash() != hash {
                    return Err(format!("drift at step {}", w.step));
                }
                out.verified += 1;
                if w.step % STAMP_EVERY == 0 {
                    out.verdicts.push((w.step, now_ns()));
                }
            }
            ToViewer::End(_) => break,
            _ => {}
        }
        if last_beat.elapsed() > Duration::from_millis(1000) {
            last_beat = Instant::now();
            let step = world.as_ref().map_or(0, |w| w.step);
            let _ = conn.send(ToHost::Heartbeat { viewer_step: step }).await;
        }
    }
    Ok(out)
}

/// The record frames of the embedded world's first `n` steps, back to back.
fn record_bytes(n: u64) -> Vec<u8> {
    let setup = Setup {
        dims: Dims::Three,
        bodies: 24,
        seed: 10_000,
    };
    let mut world = World::new(setup, None);
    let mut scenario = Scenario::new(setup.seed);
    let mut out = Vec::new();
    for _ in 0..n {
        let ops = scenario.next_input(&world);
        let step = world.step;
        world.step(&ops);
        let rec = Record {
            step,
            hash: world.hash(),
            input: ostm_protocol::op::encode_input(&ops).into(),
        };
        match HostCodec::encode_frame(&ToViewer::Record(rec)) {
            Ok(f) => out.extend_from_slice(&f.0),
            Err(e) => panic!("cannot encode: {e}"),
        }
    }
    out
}

/// Sends `bytes` repeatedly over a loopback socket for `window`; returns bytes per second.
async fn raw_loopback(bytes: Vec<u8>, window: Duration) -> f64 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let reader = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let mut buf = vec![0u8; 64 * 1024];
        let mut total = 0u64;
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n as u64,
            }
        }
        total
    });
    let mut w = TcpStream::connect(addr).await.expect("connect");
    w.set_nodelay(true).expect("nodelay");
    let start = Instant::now();
    while start.elapsed() < window {
        if w.write_all(&bytes).await.is_err() {
            break;
        }
    }
    let _ = w.shutdown().await;
    drop(w);
    let total = reader.await.unwrap_or(0);
    total as f64 / start.elapsed().as_secs_f64()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

struct Args {
    host: PathBuf,
    viewers: Vec<usize>,
    window: Duration,
    out: PathBuf,
}

fn parse() -> Args {
    let mut a = Args {
        host: PathBuf::from("target/release/ostm-host"),
        viewers: vec![1, 10, 100],
        window: Duration::from_secs(5),
        out: std::env::temp_dir(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_default();
        match k.as_str() {
            "--host" => a.host = PathBuf::from(v),
            "--viewers" => a.viewers = v.split(',').filter_map(|x| x.parse().ok()).collect(),
            "--seconds" => a.window = Duration::from_secs(v.parse().unwrap_or(5)),
            "--out" => a.out = PathBuf::from(v),
            _ => {
                eprintln!("usage: ostm-bench-live [--host PATH] [--viewers 1,10,100] [--seconds 5] [--out DIR]");
                std::process::exit(2);
            }
        }
    }
    a
}

fn run_case(args: &Args, rt: &tokio::runtime::Runtime, n: usize, raw_rec_per_s: f64) {
    let stamps = args.out.join(format!("stamps-{n}.txt"));
    let mut host = Command::new(&args.host)
        .args(["serve", "--listen", "127.0.0.1:0", "--rate", "max"])
        .args([
            "--status-ms",
            "0",
            "--viewer-queue",
            "256",
            "--max-viewers",
            "1000",
        ])
        .arg("--stamps")
        .arg(&stamps)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ostm-host");
    let pid = host.id();
    let mut lines = BufReader::new(host.stdout.take().expect("stdout")).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    let addr = first.rsplit(' ').next().unwrap_or_default().to_string();
    std::thread::sleep(Duration::from_millis(300));
    let rss_before = rss_kib(pid);
    let window = args.window;
    let results = rt.block_on(async {
        let tasks: Vec<_> = (0..n)
            .map(|_| tokio::spawn(one_viewer(addr.clone(), window)))
            .collect();
        tokio::time::sleep(window / 2).await;
        let rss_during = rss_kib(pid);
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap_or_else(|e| Err(e.to_string())));
        }
        (rss_during, out)
    });
    let (rss_during, results) = results;
    let _ = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
    let _ = host.wait();
    let host_ns = read_stamps(&stamps);
    let mut lat_us = Vec::new();
    let (mut verified, mut resyncs, mut failed) = (0u64, 0u64, 0usize);
    for r in &results {
        match r {
            Ok(r) => {
                verified += r.verified;
                resyncs += r.resyncs;
                for (step, t) in &r.verdicts {
                    if let Some(h) = host_ns.get(step) {
                        lat_us.push((*t as f64 - *h as f64) / 1000.0);
                    }
                }
            }
            Err(e) => {
                failed += 1;
                eprintln!("viewer failed: {e}");
            }
        }
    }
    lat_us.sort_by(|a, b| a.total_cmp(b));
    let per_viewer = verified as f64 / n as f64 / window.as_secs_f64();
    let mem = rss_during.saturating_sub(rss_before) as f64 / n as f64;
    println!(
        "| {n} | {per_viewer:.0} | {:.1}% | {:.0} | {:.0} | {} | {mem:.0} | {failed} |",
        100.0 * per_viewer / raw_rec_per_s,
        percentile(&lat_us, 0.5),
        percentile(&lat_us, 0.99),
        resyncs,
    );
    let _ = std::fs::remove_file(&stamps);
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

fn main() {
    let args = parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let bytes = record_bytes(100_000);
    let frame_avg = bytes.len() as f64 / 100_000.0;
    let raw = rt.block_on(raw_loopback(bytes, args.window));
    let raw_rec = raw / frame_avg;
    println!(
        "baseline: plain loopback TCP, the same record bytes: {:.0} MB/s = {raw_rec:.0} records/s ({frame_avg:.1} bytes per record)",
        raw / 1e6
    );
    println!();
    println!("| viewers | verified steps/s per viewer | of baseline | p50 latency (µs) | p99 latency (µs) | resyncs (all viewers) | host memory per viewer (KiB) | failed |");
    println!("|---|---|---|---|---|---|---|---|");
    for &n in &args.viewers {
        run_case(&args, &rt, n, raw_rec);
    }
}
