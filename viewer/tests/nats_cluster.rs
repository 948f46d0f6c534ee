//! A session on a 3-node JetStream cluster (testkit's [`Cluster`], real `nats-server`s on
//! 127.0.0.1) with `--replicas 3`, a host at 600 steps/s publishing through a server list,
//! and two recording viewers attached through different nodes, under a fault:
//!
//! - the stream's leader SIGKILLed, then started again on its configuration and store;
//! - the stream's leader SIGSTOPped for 15 s of the host's steps, then SIGCONTed;
//! - a follower's stream files truncated, and in another run one byte flipped, while it
//!   is down, then started again;
//! - every node SIGKILLed at once, then all started again;
//! - the node a viewer is attached to SIGKILLed for good: the viewer moves to another.
//!
//! Each time: the host keeps stepping; each viewer ends with every step from its attach
//! to the end either verified or named in a gap (never `ok` over a step it did not
//! verify); every recording file verifies offline (`ostm-viewer verify`) and holds the
//! reference hashes of the default world (so the two viewers agree on every step both
//! verified); and the stream, read whole after the session, is checked for acknowledged
//! steps it lost (fewer steps stored than the host had acknowledged). Each fault's cost
//! is printed: steps the host dropped or failed, steps each viewer left unverified.
//!
//! Every wait is on a condition: the host's status lines, the viewers' lines, the
//! cluster's monitoring endpoints.

mod live_support;

use futures::StreamExt;
use live_support::*;
use ostm_protocol::wire::{ToViewer, ViewerCodec};
use ostm_testkit::{monitor, Cluster};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const RATE: u64 = 600;

fn json(l: &str) -> Value {
    serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))
}

fn counter(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

/// A recording viewer: `attach ADDR --record DIR/NAME.ostm --json`.
struct Viewer {
    proc: Proc,
    record: PathBuf,
    attached_at: u64,
}

fn attach(addr: &str, dir: &Path, name: &str) -> Viewer {
    let record = dir.join(format!("{name}.ostm"));
    let mut proc = spawn_viewer(&[
        "attach",
        addr,
        "--record",
        record.to_str().unwrap(),
        "--json",
        "--no-bundle",
    ]);
    let l = proc.wait_line(|l| l.contains("\"event\":\"attached\""));
    let attached_at = counter(&json(&l), "step");
    Viewer {
        proc,
        record,
        attached_at,
    }
}

/// What a viewer's session came to.
struct Verdict {
    attached_at: u64,
    step: u64,
    verified: u64,
    gaps: Vec<(u64, u64)>,
    files: usize,
}

impl Verdict {
    fn unverified(&self) -> u64 {
        self.gaps.iter().map(|(f, t)| t - f).sum()
    }
}

/// Waits for the viewer's end (the host ended the stream), checks its verdict tells the
/// whole truth and its recording verifies offline and holds the reference hashes.
fn end(v: Viewer, who: &str, rows: &[u64]) -> Verdict {
    let out = v.proc.finish();
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{who}:\n{text}\n{}", stderr(&out));
    let last = json(text.lines().last().expect("the end object"));
    assert_eq!(last["event"], "end", "{who}: {last}");
    assert_eq!(last["verdict"], "ok", "{who}: {last}");
    let gaps: Vec<(u64, u64)> = last["gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (counter(g, "from"), counter(g, "to")))
        .collect();
    let verdict = Verdict {
        attached_at: counter(&last, "attached_at"),
        step: counter(&last, "step"),
        verified: counter(&last, "verified"),
        gaps,
        files: 0,
    };
    assert_eq!(verdict.attached_at, v.attached_at, "{who}: {last}");
    // Every step from the attach to the end: verified, or named in a gap.
    assert_eq!(
        verdict.verified + verdict.unverified(),
        verdict.step - verdict.attached_at,
        "{who}: every step is verified or named in a gap: {last}"
    );
    // Every gap is reported as a line (or JSON event) too, never silently.
    let gap_events = text
        .lines()
        .filter(|l| l.contains("\"event\":\"gap\""))
        .count();
    assert_eq!(gap_events, verdict.gaps.len(), "{who}: {text}");
    // The recording: one file per stretch between gaps, each verifying offline and
    // holding the reference rows; together the verified steps.
    let mut steps = 0u64;
    let mut files = 0;
    for n in 0.. {
        let f = numbered(&v.record, n);
        if !f.exists() {
            break;
        }
        let out = viewer(&["verify", f.to_str().unwrap()]);
        assert_eq!(
            code(&out),
            0,
            "{who}: {}: {}{}",
            f.display(),
            stdout(&out),
            stderr(&out)
        );
        let (_, count) = check_recording(&f, rows);
        steps += count as u64;
        files += 1;
    }
    assert!(files >= 1, "{who}: no recording at {}", v.record.display());
    assert_eq!(
        steps, verdict.verified,
        "{who}: the recording holds the verified steps"
    );
    Verdict { files, ..verdict }
}

/// The distinct record steps the stream `OSTM_NAME` holds, read whole through `urls`.
fn stored_steps(urls: &str, name: &str) -> BTreeSet<u64> {
    let urls: Vec<String> = urls.split(',').map(str::to_string).collect();
    let name = name.to_string();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async move {
            use async_nats::jetstream::consumer::{pull, DeliverPolicy};
            let js = async_nats::jetstream::new(async_nats::connect(urls).await.unwrap());
            let stream = js.get_stream(format!("OSTM_{name}")).await.unwrap();
            let deadline = std::time::Instant::now() + LIMIT;
            // A consumer may be placed on a node the cluster has not yet seen go (its
            // creation then times out): asked again, as the viewer's reader does.
            let consumer = loop {
                match stream
                    .create_consumer(pull::OrderedConfig {
                        filter_subject: format!("ostm.{name}.rec"),
                        deliver_policy: DeliverPolicy::All,
                        ..Default::default()
                    })
                    .await
                {
                    Ok(c) => break c,
                    Err(e) if std::time::Instant::now() < deadline => {
                        eprintln!("creating a consumer: {e}; asking again");
                        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    }
                    Err(e) => panic!("creating a consumer: {e}"),
                }
            };
            let mut msgs = consumer.messages().await.unwrap();
            let mut steps = BTreeSet::new();
            loop {
                // Bounded: a consumer that stops delivering ends the test, not hangs it.
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let Ok(next) = tokio::time::timeout(left, msgs.next()).await else {
                    panic!(
                        "reading the stream whole: nothing more within the limit, {} record steps read",
                        steps.len()
                    );
                };
                let Some(m) = next else { break };
                // The ordered consumer says so when a heartbeat is missed (a node still
                // settling after the fault) and goes on: bounded by LIMIT.
                let m = match m {
                    Ok(m) => m,
                    Err(e) if std::time::Instant::now() < deadline => {
                        eprintln!("reading the stream: {e}; reading on");
                        continue;
                    }
                    Err(e) => panic!("reading the stream: {e}"),
                };
                let pending = m.info().unwrap().pending;
                let mut src = bytes::BytesMut::from(&m.payload[..]);
                let mut codec = ViewerCodec::new("test");
                while let Some(f) = codec.decode_eof(&mut src).unwrap() {
                    if let ToViewer::Record(r) = f {
                        steps.insert(r.step);
                    }
                }
                if pending == 0 {
                    break;
                }
            }
            steps
        })
}

/// The node `port`'s clients connected now (`/connz`).
fn clients(c: &Cluster, i: usize) -> u64 {
    monitor(c.nodes[i].http_port, "/connz")
        .and_then(|v| v["num_connections"].as_u64())
        .unwrap_or(0)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// The stream leader SIGKILLed, then started again on its configuration and store.
    LeaderRestarted,
    /// The stream leader SIGSTOPped for 15 s of the host's steps, then SIGCONTed.
    LeaderPaused,
    /// A follower SIGKILLed, its stream files cut to half their length while it is down,
    /// then started again.
    FollowerTruncated,
    /// A follower SIGKILLed, one byte in the middle of each of its stream files flipped
    /// while it is down, then started again.
    FollowerFlipped,
    /// Every node SIGKILLed at once, then all started again.
    AllKilled,
    /// The node viewer A is attached to (not the stream's leader) SIGKILLed for good.
    ViewersNodeGone,
}

fn session(fault: Fault, name: &str) {
    let mut cluster = Cluster::start(3);
    let stream = format!("OSTM_{name}");
    let dir = tempfile::tempdir().unwrap();
    // The host publishes through node 0 (failing over to the others it hears of); the
    // viewers attach through nodes 1 and 2.
    let mut host = Host::start(&[
        "--rate",
        &RATE.to_string(),
        "--publish",
        &cluster.urls_of(&[0]),
        "--session",
        name,
        "--replicas",
        "3",
        "--json",
        "--status-ms",
        "200",
    ]);
    host.wait_status(|v| counter(v, "nats_published") >= RATE);
    let leader = cluster.wait_stream_leader(&stream);
    let (_, replicas) = cluster.stream_cluster(&stream).unwrap();
    assert_eq!(
        replicas.len(),
        2,
        "--replicas 3: the leader and two replicas"
    );

    // The viewers attach through the two nodes that do not lead the stream (F1, F2):
    // viewer A through F1 or F2 (its client picks one of its servers), viewer B through F2.
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let (f1, f2) = (followers[0], followers[1]);
    let a_addr = format!("{}/{name}", cluster.urls_of(&[f1, f2]));
    let b_addr = format!("{}/{name}", cluster.urls_of(&[f2]));
    let a = attach(&a_addr, dir.path(), "a");
    let b = attach(&b_addr, dir.path(), "b");
    let attached = a.attached_at.max(b.attached_at);
    host.wait_status(|v| counter(v, "nats_published") >= attached + RATE);

    let victim = match fault {
        Fault::LeaderRestarted | Fault::LeaderPaused | Fault::AllKilled => leader,
        Fault::FollowerTruncated | Fault::FollowerFlipped => f1,
        // The node viewer A is on: F1 when F1 has a client besides the host (which is on
        // node 0), else F2 (viewer B's too, then both move).
        Fault::ViewersNodeGone => {
            if clients(&cluster, f1) > u64::from(f1 == 0) {
                f1
            } else {
                f2
            }
        }
    };
    let restart = fault == Fault::LeaderRestarted;
    let before = host.wait_status(|_| true);
    // Down (or paused) while the host takes two seconds of steps (fifteen when paused).
    let away = match fault {
        Fault::LeaderPaused => {
            cluster.pause(victim);
            15 * RATE
        }
        Fault::AllKilled => {
            cluster.stop();
            2 * RATE
        }
        _ => {
            cluster.kill(victim);
            2 * RATE
        }
    };
    // The host keeps stepping while the node is away.
    let down = host.wait_status(|v| counter(v, "step") >= counter(&before, "step") + away);
    if fault == Fault::LeaderPaused {
        // The stream's leader then (the resumed node catches up while the host goes on;
        // the host's lines below wait for publishing past the fault).
        cluster.resume(victim);
        cluster.wait_stream_leader(&stream);
    }
    match fault {
        Fault::FollowerTruncated => {
            cluster.truncate_stream(victim, &stream, 0.5);
            cluster.start_again(victim);
        }
        Fault::FollowerFlipped => {
            cluster.flip_byte(victim, &stream, None);
            cluster.start_again(victim);
        }
        Fault::AllKilled => {
            cluster.restart_all();
            cluster.wait_stream_leader(&stream);
        }
        _ => {}
    }
    if restart {
        cluster.restart(victim);
        cluster.wait_stream_leader(&stream);
    }
    // Publishing again past the fault: two seconds of steps acknowledged after it.
    let published = counter(&down, "nats_published");
    host.wait_status(|v| {
        v["nats_connected"] == true && counter(v, "nats_published") >= published + 2 * RATE
    });
    host.interrupt();
    let (status, last, err) = host.wait();
    assert!(status.success(), "{last}\n{err}");
    let host_end = json(&last);
    let host_step = counter(&host_end, "step");
    let dropped = counter(&host_end, "nats_dropped");
    let failed = counter(&host_end, "nats_failed");
    let acknowledged = counter(&host_end, "nats_published");

    let rows = default_rows(host_step + 1);
    let va = end(a, "viewer A", &rows);
    let vb = end(b, "viewer B", &rows);
    for (who, v) in [("A", &va), ("B", &vb)] {
        assert_eq!(
            v.step, host_step,
            "viewer {who} follows the host to its end"
        );
    }
    // What the stream holds: an acknowledged step is stored. Fewer steps stored than
    // acknowledged means the cluster lost acknowledged messages. (A publish counted as
    // failed may still have been stored, so this finds losses, never invents them.)
    let running: Vec<usize> = (0..3).filter(|&i| cluster.nodes[i].running()).collect();
    let stored = stored_steps(&cluster.urls_of(&running), name);
    let lost = acknowledged.saturating_sub(stored.len() as u64);
    eprintln!(
        "{fault:?} (node n{victim}; stream leader was n{leader}): host step {host_step}, \
         acknowledged {acknowledged}, dropped {dropped}, failed {failed}; stream holds {} \
         record steps, acknowledged steps lost: {lost}; viewer A: attached {}, unverified \
         {} {:?}, {} files; viewer B: attached {}, unverified {} {:?}, {} files",
        stored.len(),
        va.attached_at,
        va.unverified(),
        va.gaps,
        va.files,
        vb.attached_at,
        vb.unverified(),
        vb.gaps,
        vb.files,
    );
    assert_eq!(lost, 0, "the cluster lost acknowledged steps");
    // With three replicas and one node down, a quorum stays: nothing the host
    // acknowledged is missing, so a viewer leaves unverified only what the host dropped
    // or failed to publish, and the records after a failure up to the next keyframe.
    for (who, v) in [("A", &va), ("B", &vb)] {
        assert!(
            v.unverified() <= dropped + failed + RATE,
            "viewer {who}: gaps {:?}, the host dropped {dropped} and failed {failed}",
            v.gaps
        );
    }
}

#[test]
fn the_stream_leader_killed_and_restarted_under_a_replicated_session() {
    session(Fault::LeaderRestarted, "leader");
}

#[test]
fn the_stream_leader_paused_for_15_s_under_a_replicated_session() {
    session(Fault::LeaderPaused, "paused");
}

#[test]
fn a_follower_s_stream_files_truncated_while_it_is_down() {
    session(Fault::FollowerTruncated, "truncated");
}

#[test]
#[ignore = "in two runs of three, after the session's checks passed, an ordered consumer reading the stream whole delivered nothing more: not yet understood"]
fn a_byte_of_a_follower_s_stream_files_flipped_while_it_is_down() {
    session(Fault::FollowerFlipped, "flipped");
}

#[test]
fn every_node_killed_at_once_and_started_again() {
    session(Fault::AllKilled, "all");
}

#[test]
fn the_node_a_viewer_is_on_killed_for_good_the_viewer_moves_to_another() {
    session(Fault::ViewersNodeGone, "gone");
}

/// A stream that exists with other replicas is used as it is, and the host says so; a
/// `--replicas` outside 1..=5 and an address that is no server list are refused with one
/// sentence before anything is announced (exit 2); `sessions` lists through a list.
#[test]
fn replicas_of_an_existing_stream_are_kept_and_bad_lists_are_refused() {
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    let mut first = Host::start(&[
        "--publish",
        &urls,
        "--session",
        "kept",
        "--replicas",
        "3",
        "--json",
        "--status-ms",
        "200",
    ]);
    first.wait_status(|v| counter(v, "nats_published") >= 1);
    let (_, replicas) = cluster.stream_cluster("OSTM_kept").unwrap();
    assert_eq!(
        replicas.len(),
        2,
        "--replicas 3: the leader and two replicas"
    );
    first.interrupt();
    let (status, last, err) = first.wait();
    assert!(status.success(), "{last}\n{err}");

    let mut again = Host::start(&[
        "--publish",
        &urls,
        "--session",
        "kept",
        "--log-format",
        "json",
        "--json",
        "--status-ms",
        "200",
    ]);
    let said = again.wait_log(|v| {
        v["level"] == "WARN"
            && v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("exists with"))
    });
    assert_eq!(
        said["fields"]["message"],
        "the NATS stream OSTM_kept exists with 3 replicas; using it as it is (--replicas 1 applies to a stream the host creates)"
    );
    again.wait_status(|v| counter(v, "nats_published") >= 1);
    let (_, replicas) = cluster.stream_cluster("OSTM_kept").unwrap();
    assert_eq!(replicas.len(), 2, "the stream keeps its three replicas");

    let out = viewer(&["sessions", &cluster.urls_of(&[2, 1]), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let listed = json(stdout(&out).trim());
    assert_eq!(listed["server"], cluster.urls_of(&[2, 1]));
    assert_eq!(listed["sessions"][0]["session"], "kept", "{listed}");
    again.interrupt();
    let (status, last, err) = again.wait();
    assert!(status.success(), "{last}\n{err}");

    let host = |args: &[&str]| {
        run(std::process::Command::new(host_bin())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args))
    };
    for n in ["0", "6"] {
        let out = host(&["--publish", &urls, "--session", "x", "--replicas", n]);
        assert_eq!(code(&out), 2);
        assert!(
            stdout(&out).is_empty(),
            "nothing announced: {}",
            stdout(&out)
        );
        assert!(
            stderr(&out).starts_with(&format!(
                "error: invalid value '{n}' for '--replicas <N>': {n} is not in 1..=5"
            )),
            "{}",
            stderr(&out)
        );
    }
    let bad = format!("{},", cluster.urls_of(&[0]));
    let out = host(&["--publish", &bad, "--session", "x"]);
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).is_empty(),
        "nothing announced: {}",
        stdout(&out)
    );
    assert_eq!(
        stderr(&out).trim_end(),
        format!("error: --publish: {bad}: expected nats://HOST:PORT, or several joined by commas (nats://HOST:PORT,HOST:PORT)")
    );
    let addr = format!("{}/kept", bad);
    let out = viewer(&["check", &addr, "--steps", "1"]);
    assert_eq!(code(&out), 2);
    // check prints its one line on stdout.
    assert_eq!(
        format!("{}{}", stdout(&out), stderr(&out)).trim_end(),
        format!("error: {addr}: expected nats://HOST:PORT/NAME")
    );
}
