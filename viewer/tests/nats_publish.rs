//! The host's side of the fan-out through NATS JetStream (docs/fan-out.md), against a real
//! `nats-server` on 127.0.0.1: every message carries its `Nats-Msg-Id` (a repeated publish
//! is stored once), a short `--retention-age` still makes the stream, the status line
//! follows the connection, arguments are checked before anything is announced, default
//! sessions share one server's storage, and a server that refuses the stream stops the
//! host at its start with a sentence.

mod live_support;

use async_nats::jetstream::{self, message::PublishMessage};
use live_support::*;
use std::process::Command;
use std::time::Duration;

/// Runs `f` on a runtime of its own.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// A JetStream context on `nats`.
async fn js(nats: &Nats) -> jetstream::Context {
    jetstream::new(async_nats::connect(nats.url()).await.unwrap())
}

/// A host on the embedded world publishing to `nats` as session `name`, JSON status
/// every 100 ms.
fn publishing_host(nats: &Nats, name: &str, rate: &str, extra: &[&str]) -> Host {
    let url = nats.url();
    let mut args = vec![
        "--rate",
        rate,
        "--publish",
        &url,
        "--session",
        name,
        "--json",
        "--status-ms",
        "100",
    ];
    args.extend_from_slice(extra);
    Host::start(&args)
}

#[test]
fn every_message_has_an_id_and_a_repeated_publish_is_stored_once() {
    let nats = Nats::start();
    let mut host = publishing_host(&nats, "ids", "200", &["--keyframe-every", "10"]);
    host.wait_status(|v| v["nats_published"].as_u64().unwrap_or(0) >= 40);
    block_on(async {
        let js = js(&nats).await;
        let stream = js.get_stream("OSTM_ids").await.unwrap();
        let mut ids = std::collections::BTreeSet::new();
        let mut first_rec = None;
        for seq in 1..=20 {
            let m = stream.get_raw_message(seq).await.unwrap();
            let id = m
                .headers
                .get("Nats-Msg-Id")
                .unwrap_or_else(|| panic!("message {seq} on {} has no Nats-Msg-Id", m.subject))
                .to_string();
            let step = m.headers.get("Ostm-Step").unwrap().to_string();
            let leaf = m.subject.rsplit('.').next().unwrap().to_string();
            assert!(
                id.ends_with(&format!("-{leaf}-{step}")),
                "message {seq}: id {id}, subject {}, step {step}",
                m.subject
            );
            assert!(ids.insert(id), "each id once");
            if leaf == "rec" && first_rec.is_none() {
                first_rec = Some(m);
            }
        }
        // The first record message published again, id and all: stored once.
        let m = first_rec.expect("a record message among the first 20");
        let again = PublishMessage::build()
            .payload(m.payload.clone())
            .headers(m.headers.clone());
        let ack = js
            .send_publish(m.subject.to_string(), again)
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(ack.duplicate, "{ack:?}");
        assert_eq!(ack.sequence, m.sequence, "the stored message is the first");
    });
}

#[test]
fn a_retention_age_under_the_duplicate_window_still_makes_the_stream() {
    let nats = Nats::start();
    let mut host = publishing_host(&nats, "short", "200", &["--retention-age", "30"]);
    let v = host.wait_status(|v| v["nats_published"].as_u64().unwrap_or(0) >= 20);
    assert_eq!(v["nats_connected"], true, "{v}");
    block_on(async {
        let mut stream = js(&nats).await.get_stream("OSTM_short").await.unwrap();
        let cfg = &stream.info().await.unwrap().config;
        assert_eq!(cfg.max_age, Duration::from_secs(30));
        assert_eq!(cfg.duplicate_window, Duration::from_secs(30));
    });
    // Zero is refused before anything is announced.
    let out = run(Command::new(host_bin()).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--publish",
        &nats.url(),
        "--session",
        "zero",
        "--retention-age",
        "0",
    ]));
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert_eq!(stdout(&out), "", "nothing announced");
}

#[test]
fn the_status_line_follows_the_connection_to_the_server() {
    let mut nats = Nats::start();
    let mut host = publishing_host(&nats, "state", "200", &[]);
    host.wait_status(|v| v["nats_connected"] == true && v["nats_published"].as_u64() > Some(0));
    nats.stop();
    let down = host.wait_status(|v| v["nats_connected"] == false);
    assert!(
        down["nats_error"].is_null(),
        "a server away is not a refusal: {down}"
    );
    nats.restart();
    let published = down["nats_published"].as_u64().unwrap();
    host.wait_status(|v| {
        v["nats_connected"] == true && v["nats_published"].as_u64().unwrap() > published + 100
    });
}

#[test]
fn arguments_are_checked_before_anything_is_announced() {
    let nats = Nats::start();
    let out = run(Command::new(host_bin()).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--publish",
        &nats.url(),
        "--session",
        "a.b",
    ]));
    assert_eq!(code(&out), 2);
    assert_eq!(stdout(&out), "", "no `listening on` before the refusal");
    assert!(
        stderr(&out).contains("--session: session name `a.b`: expected 1..=64 characters"),
        "{}",
        stderr(&out)
    );
    // The viewer's page prints its URL first: not before the address is checked.
    let bad_session = format!("{}/a.b", nats.url());
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("r.ostm");
    for args in [
        vec!["watch", bad_session.as_str(), "--ui", "127.0.0.1:0"],
        vec![
            "watch",
            "127.0.0.1:1",
            "--from-step",
            "3",
            "--ui",
            "127.0.0.1:0",
        ],
        vec![
            "watch",
            "127.0.0.1:1",
            "--record",
            missing.to_str().unwrap(),
            "--ui",
            "127.0.0.1:0",
        ],
    ] {
        let out = viewer(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stdout(&out));
        assert_eq!(stdout(&out), "", "{args:?}: nothing announced");
        assert!(stderr(&out).starts_with("error: "), "{}", stderr(&out));
    }
}

/// One rule for a session name, one sentence for its refusal (docs/fan-out.md, "Subjects
/// and stream"): the host's `--session` and the viewer's address given the same bad name
/// print the same sentence, each after the input that gave it, exit 2.
#[test]
fn both_binaries_refuse_a_bad_session_name_with_one_sentence() {
    let url = format!("nats://127.0.0.1:{}", free_port());
    let sentence = "session name `a.b`: expected 1..=64 characters of A-Z, a-z, 0-9, _ and -\n";
    let out = run(Command::new(host_bin()).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--publish",
        &url,
        "--session",
        "a.b",
    ]));
    assert_eq!(code(&out), 2);
    assert_eq!(stderr(&out), format!("error: --session: {sentence}"));
    let addr = format!("{url}/a.b");
    for args in [vec!["attach", &addr], vec!["check", &addr, "--steps", "10"]] {
        let cmd = args[0];
        let out = viewer(&args);
        assert_eq!(code(&out), 2, "{cmd}");
        // check's verdict goes to stdout, attach's error to stderr.
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(said, format!("error: {addr}: {sentence}"), "{cmd}");
    }
    // An empty name is a bad name; an address without `/NAME` is not of the form.
    let out = viewer(&["attach", &format!("{url}/")]);
    assert_eq!(code(&out), 2);
    assert_eq!(
        stderr(&out),
        format!("error: {url}/: session name ``: expected 1..=64 characters of A-Z, a-z, 0-9, _ and -\n")
    );
    let out = viewer(&["attach", &url]);
    assert_eq!(code(&out), 2);
    assert_eq!(
        stderr(&out),
        format!("error: {url}: expected nats://HOST:PORT/NAME\n")
    );
}

/// A server whose JetStream may store 256 MiB on disk.
fn small_server() -> (Nats, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("nats.conf");
    std::fs::write(&conf, "jetstream {\n  max_file_store: 268435456\n}\n").unwrap();
    let nats = Nats::start_with(&["-c", conf.to_str().unwrap()]);
    (nats, dir)
}

#[test]
fn default_sessions_share_a_server_and_a_refused_stream_stops_the_host_at_its_start() {
    let (nats, _conf) = small_server();
    // Three sessions with the default --retention-bytes fit in 256 MiB.
    let mut hosts: Vec<Host> = ["s1", "s2", "s3"]
        .iter()
        .map(|name| publishing_host(&nats, name, "100", &[]))
        .collect();
    for h in &mut hosts {
        h.wait_status(|v| v["nats_connected"] == true && v["nats_published"].as_u64() > Some(0));
    }
    // One asking for more than is left is refused at its start, before it announces
    // anything, with what to do.
    let out = run(Command::new(host_bin()).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--publish",
        &nats.url(),
        "--session",
        "big",
        "--retention-bytes",
        "200000000",
    ]));
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    assert_eq!(stdout(&out), "", "nothing announced");
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "error: the NATS server at {} refused the stream OSTM_big: ",
            nats.url()
        )) && err.contains("give a smaller --retention-bytes"),
        "{err}"
    );
}

/// A server that accepts the host at its start and refuses the stream later (it had
/// none to give when the host came back): the status line says so.
#[test]
fn a_refusal_after_the_start_is_on_the_status_line() {
    let (mut nats, _conf) = small_server();
    // The server is not there yet: the host starts and waits for it.
    nats.stop();
    let mut host = publishing_host(&nats, "late", "100", &["--retention-bytes", "300000000"]);
    host.wait_status(|v| v["nats_connected"] == false);
    nats.restart();
    let v = host.wait_status(|v| v["nats_error"].is_string());
    assert_eq!(v["nats_connected"], false, "{v}");
    let why = v["nats_error"].as_str().unwrap();
    assert!(
        why.contains("refused the stream OSTM_late") && why.contains("--retention-bytes"),
        "{v}"
    );
}
