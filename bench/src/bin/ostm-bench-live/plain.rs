//! The baseline: a plain loop writing the bytes the host writes to the same number of
//! loopback sockets. It accepts `viewers` connections, sends each the host's welcome and
//! attach snapshot of the embedded world, then steps that world at the rate asked for
//! (from the same scenario, so the records are the host's bytes) and writes each record
//! frame to every socket in turn with one blocking `write` each, with the host's socket
//! options (no delay, a 16 KiB send buffer). No queues, tasks, timers or locks: what is
//! left of the host's cost per record once everything but the writes is taken away.
//!
//! Run as `ostm-bench-live plain-host --viewers N --rate R|max --stamps FILE
//! --stamp-every K`; it prints `listening on ADDR` first, then runs until killed.

use ostm_protocol::sim::scenario::Scenario;
use ostm_protocol::wire::{
    HostCodec, PeerRole, Record, SnapshotKind, ToViewer, Welcome, HEARTBEAT_MS, VERSION,
};
use ostm_protocol::{Dims, Setup, World};
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// The host's kernel send buffer per viewer (ostm-host's `SEND_BUFFER`, docs/protocol.md).
const SEND_BUFFER: libc::c_int = 16 * 1024;

fn frame(m: &ToViewer) -> bytes::Bytes {
    match HostCodec::encode_frame(m) {
        Ok(f) => f.0,
        Err(e) => panic!("cannot encode: {e}"),
    }
}

pub fn main(viewers: usize, rate: Option<u32>, stamps: &std::path::Path, every: u64) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    // SAFETY: setsockopt and listen on the listener's own descriptor with an int we own;
    // accepted sockets inherit the send buffer, as ostm-host's do, and the backlog is
    // ostm-host's (std's 128 would refuse some of 1 000 viewers connecting at once).
    unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&SEND_BUFFER as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        libc::listen(listener.as_raw_fd(), 1024);
    }
    println!("listening on {}", listener.local_addr().expect("addr"));
    let _ = std::io::stdout().flush();
    let setup = Setup {
        dims: Dims::Three,
        bodies: 24,
        seed: 10_000,
    };
    let mut world = World::new(setup, None);
    let mut scenario = Scenario::new(setup.seed);
    let welcome = frame(&ToViewer::Welcome(Welcome {
        version: VERSION,
        role: PeerRole::Host as u8,
        rate: rate.unwrap_or(0),
        heartbeat_ms: HEARTBEAT_MS,
        ring: 512,
        queue: 65_536,
    }));
    let mut socks: Vec<TcpStream> = Vec::with_capacity(viewers);
    while socks.len() < viewers {
        let (mut s, _) = listener.accept().expect("accept");
        let _ = s.set_nodelay(true);
        let snap = frame(&ToViewer::Snapshot {
            kind: SnapshotKind::Attach,
            world: world.clone(),
        });
        if s.write_all(&welcome)
            .and_then(|_| s.write_all(&snap))
            .is_ok()
        {
            socks.push(s);
        }
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(stamps).expect("stamps"));
    let started = Instant::now();
    let mut done: u64 = 0;
    let mut flushed = Instant::now();
    loop {
        if let Some(r) = rate {
            let due = started + Duration::from_secs_f64(done as f64 / f64::from(r.max(1)));
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        let ops = scenario.next_input(&world);
        let step = world.step;
        world.step(&ops);
        let rec = frame(&ToViewer::Record(Record {
            step,
            hash: world.hash(),
            input: ostm_protocol::sim::op::encode_input(&ops).into(),
        }));
        if world.step.is_multiple_of(every) {
            let _ = writeln!(out, "{} {}", world.step, crate::readers::now_ns());
            // Flushed every 100 ms: the bench reads the file after killing this process.
            if flushed.elapsed() > Duration::from_millis(100) {
                let _ = out.flush();
                flushed = Instant::now();
            }
        }
        for s in &mut socks {
            let _ = s.write_all(&rec);
        }
        done += 1;
    }
}
