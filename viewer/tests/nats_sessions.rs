//! `ostm-viewer sessions nats://HOST:PORT` against a real `nats-server` on 127.0.0.1: one
//! session running, one ended, each with its world, host step, rate, oldest step and
//! keyframes; JSON and the table; a bad or unreachable address is exit 2.

mod live_support;

use live_support::*;

fn json(l: &str) -> serde_json::Value {
    serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))
}

#[test]
fn sessions_lists_what_the_server_holds() {
    let nats = Nats::start();
    let url = nats.url();
    let out = viewer(&["sessions", &url]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("no sessions on {url}\n"));
    // One that ran its 500 steps to the end, one that runs on.
    let done = Host::start(&[
        "--rate",
        "max",
        "--steps",
        "500",
        "--publish",
        &url,
        "--session",
        "done",
        "--json",
        "--status-ms",
        "0",
    ]);
    let (status, last, _) = done.wait();
    assert!(status.success(), "{last}");
    let mut run = Host::start(&[
        "--rate",
        "200",
        "--publish",
        &url,
        "--session",
        "run",
        "--keyframe-every",
        "100",
        "--json",
        "--status-ms",
        "100",
    ]);
    run.wait_status(|v| v["nats_published"].as_u64().unwrap_or(0) >= 300);

    let out = viewer(&["sessions", &url, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(stdout(&out).trim());
    assert_eq!(v["server"], url.as_str(), "{v}");
    let s = v["sessions"].as_array().unwrap();
    assert_eq!(s.len(), 2, "{v}");
    let (d, r) = (&s[0], &s[1]);
    assert_eq!(d["session"], "done", "by name: {v}");
    for (key, want) in [
        ("stream", serde_json::json!("OSTM_done")),
        ("dims", 3.into()),
        ("seed", 10_000.into()),
        ("host_step", 500.into()),
        ("rate", 0.into()),
        ("oldest_step", 0.into()),
        ("oldest_keyframe", 0.into()),
        ("last_keyframe_step", 0.into()),
        ("ended", true.into()),
        ("end_reason", "finished".into()),
        ("problem", serde_json::Value::Null),
    ] {
        assert_eq!(d[key], want, "{key}: {d}");
    }
    assert_eq!(r["session"], "run", "{v}");
    assert_eq!(r["ended"], false, "{r}");
    assert_eq!(r["rate"], 200, "{r}");
    assert_eq!(r["oldest_keyframe"], 0, "{r}");
    let host_step = r["host_step"].as_u64().unwrap();
    let key = r["last_keyframe_step"].as_u64().unwrap();
    assert!(
        host_step >= 300 && key % 100 == 0 && key <= host_step && key + 200 > host_step,
        "{r}"
    );
    assert!(r["last_keyframe_age_ms"].is_u64(), "{r}");
    assert!(
        r["messages"].as_u64().unwrap() > 0 && r["bytes"].as_u64().unwrap() > 0,
        "{r}"
    );

    let out = viewer(&["sessions", &url]);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("SESSION  WORLD"), "{text}");
    assert!(
        lines[1].starts_with("done")
            && lines[1].contains("3D")
            && lines[1].ends_with("yes (finished)"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("run") && lines[2].contains("200/s") && lines[2].ends_with("no"),
        "{text}"
    );
}

#[test]
fn a_bad_or_unreachable_server_is_exit_2_and_help_has_examples() {
    let out = viewer(&["sessions", "nats://127.0.0.1:1/demo"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("expected nats://HOST:PORT"),
        "{}",
        stderr(&out)
    );
    let out = viewer(&["sessions", &format!("nats://127.0.0.1:{}", free_port())]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).starts_with("error: cannot connect to NATS at"),
        "{}",
        stderr(&out)
    );
    let out = viewer(&["sessions", "--help"]);
    assert_eq!(code(&out), 0);
    assert!(
        stdout(&out).contains("Examples:") && stdout(&out).contains("--json"),
        "{}",
        stdout(&out)
    );
}

/// A server started without `-js` answers, but no JetStream API does: the listing says so
/// and what to do, as docs/fan-out.md gives it.
#[test]
fn a_server_without_jetstream_is_said_with_what_to_do() {
    let nats = Nats::start_without_jetstream();
    let url = nats.url();
    let out = viewer(&["sessions", &url]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    assert_eq!(
        stderr(&out),
        format!("error: the NATS server at {url} has no JetStream: start it with -js (or enable JetStream for this account)\n")
    );
}

/// A stream that holds a keyframe and then a record without `Ostm-Step` (published by
/// hand): the keyframe still gives the world, the rate and its step; only the host step,
/// which that record would say, is unknown, and the problem names the record.
#[test]
fn a_record_without_its_step_leaves_unknown_only_what_it_would_say() {
    use ostm_protocol::wire::{HostCodec, Record, SnapshotKind, ToViewer};
    let nats = Nats::start();
    let url = nats.url();
    let world = default_world_at(0);
    let frame = |m: &ToViewer| HostCodec::encode_frame(m).unwrap().0.to_vec();
    let key = frame(&ToViewer::Snapshot {
        kind: SnapshotKind::Attach,
        world: world.clone(),
    });
    let rec = frame(&ToViewer::Record(Record {
        step: 0,
        hash: 1,
        input: bytes::Bytes::new(),
    }));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let js = async_nats::jetstream::new(async_nats::connect(&url).await.unwrap());
            let session = ostm_protocol::wire::nats::Session::new("bare").unwrap();
            js.get_or_create_stream(async_nats::jetstream::stream::Config {
                name: session.stream(),
                subjects: session.stored(),
                allow_direct: true,
                ..Default::default()
            })
            .await
            .unwrap();
            let mut h = async_nats::HeaderMap::new();
            h.insert("Ostm-Step", "0");
            h.insert("Ostm-Rate", "60");
            js.publish_with_headers("ostm.bare.key", h, key.into())
                .await
                .unwrap()
                .await
                .unwrap();
            let mut h = async_nats::HeaderMap::new();
            h.insert("Ostm-Count", "1");
            js.publish_with_headers("ostm.bare.rec", h, rec.into())
                .await
                .unwrap()
                .await
                .unwrap();
        });
    let out = viewer(&["sessions", &url, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(stdout(&out).trim());
    let s = &v["sessions"][0];
    for (key, want) in [
        ("session", serde_json::json!("bare")),
        ("dims", 3.into()),
        ("bodies", world.bodies.len().into()),
        ("seed", 10_000.into()),
        ("rate", 60.into()),
        ("last_keyframe_step", 0.into()),
        ("oldest_step", 0.into()),
        ("oldest_keyframe", 0.into()),
        ("host_step", serde_json::Value::Null),
        ("ended", false.into()),
        ("messages", 2.into()),
    ] {
        assert_eq!(s[key], want, "{key}: {s}");
    }
    assert_eq!(
        s["problem"], "OSTM_bare: subject ostm.bare.rec, stream sequence 2: expected a header Ostm-Step, found none",
        "{s}"
    );
    let out = viewer(&["sessions", &url]);
    let text = stdout(&out);
    assert!(
        text.contains("3D") && text.contains("60/s"),
        "the world and the rate in the table: {text}"
    );
    assert!(
        text.contains("  note: OSTM_bare: subject ostm.bare.rec, stream sequence 2: expected a header Ostm-Step, found none"),
        "{text}"
    );
}
