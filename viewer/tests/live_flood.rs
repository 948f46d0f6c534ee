//! A flood of connections that never finish a hello (2 000 idle ones and 200 sending
//! garbage, renewed continuously for 20 s) takes no viewer slot: a good viewer attaches
//! and verifies while it runs, the host sheds the oldest waiting connections, and its
//! memory stays bounded. The real `ostm-host` on 127.0.0.1.

mod live_support;

use live_support::*;
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const IDLE: usize = 2000;
const GARBAGE_PER_ROUND: usize = 20;
const FLOOD: Duration = Duration::from_secs(20);

#[test]
fn a_flood_of_idle_and_garbage_connections_keeps_no_viewer_out() {
    let mut host = Host::start(&["--rate", "500", "--json", "--status-ms", "200"]);
    let addr = host.addr.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicU64::new(0));
    let flood = {
        let (stop, opened, addr) = (stop.clone(), opened.clone(), addr.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut idle: std::collections::VecDeque<TcpStream> = Default::default();
            let mut round = 0u64;
            while started.elapsed() < FLOOD && !stop.load(Ordering::Relaxed) {
                // Keep IDLE connections open, renewing a tenth of them each round.
                let renew = if idle.len() < IDLE {
                    IDLE - idle.len()
                } else {
                    IDLE / 10
                };
                for _ in 0..renew.min(IDLE) {
                    if idle.len() >= IDLE {
                        idle.pop_front();
                    }
                    if let Ok(s) = TcpStream::connect(&addr) {
                        idle.push_back(s);
                        opened.fetch_add(1, Ordering::Relaxed);
                    }
                }
                for i in 0..GARBAGE_PER_ROUND {
                    if let Ok(mut s) = TcpStream::connect(&addr) {
                        let junk: Vec<u8> = (0..64u64)
                            .map(|b| (b.wrapping_mul(31) ^ round ^ i as u64) as u8)
                            .collect();
                        let _ = s.write_all(&junk);
                        opened.fetch_add(1, Ordering::Relaxed);
                    }
                }
                round += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    // Let the flood build up, then sample the host's memory.
    while opened.load(Ordering::Relaxed) < IDLE as u64 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let rss_before = rss_kib(host.pid());
    // A good viewer attaches and verifies while the flood goes on.
    let t = Instant::now();
    let out = viewer(&["check", &addr, "--steps", "200"]);
    let took = t.elapsed();
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).starts_with("ok: verified 200 of the "),
        "{}",
        stdout(&out)
    );
    eprintln!("the viewer attached and verified 200 steps in {took:?} during the flood");
    flood.join().unwrap();
    let rss_after = rss_kib(host.pid());
    // The first status line that counts the good viewer (earlier ones wait in the pipe).
    let v = host.wait_status(|v| v["viewers_total"] == 1);
    assert!(
        v["shed"].as_u64().unwrap() > 0,
        "the oldest waiting connections were closed to make room: {v}"
    );
    assert!(
        v["waiting"].as_u64().unwrap() <= 1024,
        "the waiting pool is bounded: {v}"
    );
    assert!(
        v["protocol_errors"].as_u64().unwrap() > 0,
        "the garbage was refused: {v}"
    );
    assert!(
        rss_after < rss_before + 32 * 1024,
        "the host's memory grew from {rss_before} KiB to {rss_after} KiB"
    );
    stop.store(true, Ordering::Relaxed);
}
