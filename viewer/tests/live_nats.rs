//! The live stream through NATS JetStream, with a real `nats-server` on 127.0.0.1: a late
//! join through NATS gives the same hash rows as over TCP, `--from-step` rewinds, hostile
//! messages published with a plain NATS client are refused with the subject, the stream
//! sequence and the offset (a duplicate is skipped), what the viewer cannot start from is
//! said in the doc's words, a restarted NATS server gives no wrong verdict, and a stopped
//! one leaves the host's TCP viewers untouched.

mod live_support;

use bytes::Bytes;
use live_support::*;
use ostm_protocol::wire::{HostCodec, Record, SnapshotKind, ToViewer};
use ostm_protocol::World;

fn json(l: &str) -> serde_json::Value {
    serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))
}

/// A host on the embedded world publishing to `nats` as session `name` (and serving TCP).
fn publishing_host(nats: &Nats, name: &str, rate: &str, extra: &[&str]) -> Host {
    let url = nats.url();
    let mut args = vec![
        "--rate",
        rate,
        "--publish",
        &url,
        "--session",
        name,
        "--keyframe-every",
        "100",
        "--json",
        "--status-ms",
        "100",
    ];
    args.extend_from_slice(extra);
    Host::start(&args)
}

#[test]
fn a_late_join_through_nats_gives_the_same_rows_as_over_tcp_and_from_step_rewinds() {
    let nats = Nats::start();
    let mut host = publishing_host(&nats, "late", "500", &[]);
    host.wait_status(|v| v["nats_published"].as_u64().unwrap_or(0) >= 300);
    let dir = tempfile::tempdir().unwrap();
    let (t, n) = (dir.path().join("tcp.ostm"), dir.path().join("nats.ostm"));
    let tcp = spawn_viewer(&[
        "attach",
        &host.addr,
        "--record",
        t.to_str().unwrap(),
        "--steps",
        "1500",
    ]);
    let addr = format!("{}/late", nats.url());
    let out = viewer(&[
        "attach",
        &addr,
        "--record",
        n.to_str().unwrap(),
        "--steps",
        "1500",
    ]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let out_tcp = finish(tcp);
    assert_eq!(code(&out_tcp), 0, "{}", stdout(&out_tcp));
    let rows = default_rows(recording_end(&t).max(recording_end(&n)));
    let (st, _) = check_recording(&t, &rows);
    let (sn, nn) = check_recording(&n, &rows);
    assert!(
        sn > 0 && sn.is_multiple_of(100),
        "joined at a keyframe: {sn}"
    );
    assert!(st > 0, "late join over TCP too: {st}");
    assert_eq!(nn, 1500);
    // Rewind: from step 150, the keyframe at or before it is step 100.
    let out = viewer(&[
        "attach",
        &addr,
        "--from-step",
        "150",
        "--steps",
        "300",
        "--json",
    ]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let first = json(stdout(&out).lines().next().unwrap());
    assert_eq!(first["step"], 100, "{first}");
    // --from-step on a TCP host is refused.
    let out = viewer(&["attach", &host.addr, "--from-step", "5"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("--from-step needs a session on NATS"),
        "{}",
        stderr(&out)
    );
}

/// Publishes `msgs` (subject, payload) in order to a stream made here as the host would
/// make it (its three subjects), with a plain NATS client.
fn publish(nats: &Nats, name: &str, msgs: Vec<(String, Vec<u8>)>) {
    let url = nats.url();
    let name = name.to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let client = async_nats::connect(url).await.unwrap();
        let js = async_nats::jetstream::new(client);
        let session = ostm_protocol::wire::nats::Session::new(&name).unwrap();
        js.get_or_create_stream(async_nats::jetstream::stream::Config {
            name: session.stream(),
            subjects: session.stored(),
            allow_direct: true,
            ..Default::default()
        })
        .await
        .unwrap();
        for (subject, payload) in msgs {
            js.publish(subject, payload.into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    });
}

fn frame(m: &ToViewer) -> Vec<u8> {
    HostCodec::encode_frame(m).unwrap().0.to_vec()
}

/// The embedded world's keyframe at step 0 and its first `n` records, as frames.
fn honest(n: u64) -> (Vec<u8>, Vec<Vec<u8>>) {
    let setup = ostm_protocol::Setup {
        dims: ostm_protocol::Dims::Three,
        bodies: 24,
        seed: 10_000,
    };
    let mut world = World::new(setup, None);
    let key = frame(&ToViewer::Snapshot {
        kind: SnapshotKind::Attach,
        world: world.clone(),
    });
    let mut scenario = ostm_protocol::sim::scenario::Scenario::new(setup.seed);
    let mut recs = Vec::new();
    for _ in 0..n {
        let ops = scenario.next_input(&world);
        let step = world.step;
        world.step(&ops);
        recs.push(frame(&ToViewer::Record(Record {
            step,
            hash: world.hash(),
            input: Bytes::from(ostm_protocol::sim::op::encode_input(&ops)),
        })));
    }
    (key, recs)
}

#[test]
fn hostile_messages_on_the_stream_are_refused_with_subject_sequence_and_offset() {
    let nats = Nats::start();
    let (key, recs) = honest(40);
    let subj = |n: &str, leaf: &str| format!("ostm.{n}.{leaf}");
    // A duplicate delivery (record 10 again, and a batch of 5..=12) is skipped; the rest
    // verifies.
    let mut msgs = vec![(subj("dup", "key"), key.clone())];
    for (i, r) in recs.iter().enumerate() {
        msgs.push((subj("dup", "rec"), r.clone()));
        if i == 10 {
            msgs.push((subj("dup", "rec"), r.clone()));
            msgs.push((subj("dup", "rec"), recs[5..=8].concat()));
        }
    }
    publish(&nats, "dup", msgs);
    let out = viewer(&["check", &format!("{}/dup", nats.url()), "--steps", "40"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(
        stdout(&out).starts_with("ok: verified 40 of the 40 steps from 0 to 40"),
        "{}",
        stdout(&out)
    );

    // A malformed record payload: sequence 1 is the keyframe, 2..=4 records, 5 the bad one.
    let mut bad = recs[3].clone();
    bad[4] = 0x7e;
    let mut msgs = vec![(subj("bad", "key"), key.clone())];
    msgs.extend(recs[..3].iter().map(|r| (subj("bad", "rec"), r.clone())));
    msgs.push((subj("bad", "rec"), bad));
    publish(&nats, "bad", msgs);
    let out = viewer(&["check", &format!("{}/bad", nats.url()), "--steps", "40"]);
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).contains(&format!(
            "{}/bad: subject ostm.bad.rec, stream sequence 5: at offset 4: expected a host message type",
            nats.url()
        )),
        "{}",
        stdout(&out)
    );

    // A keyframe of another world.
    let other = frame(&ToViewer::Snapshot {
        kind: SnapshotKind::Attach,
        world: World::new(
            ostm_protocol::Setup {
                dims: ostm_protocol::Dims::Two,
                bodies: 3,
                seed: 1,
            },
            None,
        ),
    });
    let mut msgs = vec![(subj("odd", "key"), key.clone())];
    msgs.extend(recs[..3].iter().map(|r| (subj("odd", "rec"), r.clone())));
    msgs.push((subj("odd", "key"), other));
    publish(&nats, "odd", msgs);
    // Joined at the latest keyframe (the foreign one) it would be another world: from
    // step 0, the foreign keyframe arrives mid-stream.
    let out = viewer(&[
        "check",
        &format!("{}/odd", nats.url()),
        "--from-step",
        "0",
        "--steps",
        "40",
    ]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    assert!(
        stdout(&out).contains("subject ostm.odd.key, stream sequence 5: at offset 0: expected a keyframe of the session's world, found one of another world"),
        "{}",
        stdout(&out)
    );

    // An oversized message.
    let mut msgs = vec![(subj("big", "key"), key)];
    msgs.push((subj("big", "rec"), vec![0u8; 200_000]));
    publish(&nats, "big", msgs);
    let out = viewer(&["check", &format!("{}/big", nats.url()), "--steps", "40"]);
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).contains("stream sequence 2: at offset 0: expected a payload of at most"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_restarted_nats_server_gives_no_wrong_verdict() {
    let mut nats = Nats::start();
    let mut host = publishing_host(&nats, "restart", "300", &[]);
    host.wait_status(|v| v["nats_published"].as_u64().unwrap_or(0) >= 200);
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.ostm");
    let addr = format!("{}/restart", nats.url());
    let mut v = spawn_viewer(&["attach", &addr, "--record", rec.to_str().unwrap(), "--json"]);
    v.wait_line(|l| json(l)["event"] == "status");
    nats.restart();
    // The viewer carries on after the restart: its verified step passes well beyond.
    let at = json(&v.wait_line(|l| json(l)["event"] == "status"))["step"]
        .as_u64()
        .unwrap();
    v.wait_line(|l| {
        let e = json(l);
        e["event"] == "status" && e["step"].as_u64().unwrap() > at + 600
    });
    v.signal("INT");
    let out = v.finish();
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let end = json(stdout(&out).lines().last().unwrap());
    assert_eq!(end["verdict"], "ok", "{end}");
    for f in end["files"].as_array().unwrap() {
        let p = std::path::PathBuf::from(f["path"].as_str().unwrap());
        check_recording(&p, &default_rows(recording_end(&p)));
    }
}

#[test]
fn a_stopped_nats_server_leaves_the_hosts_tcp_viewers_untouched() {
    let mut nats = Nats::start();
    let mut host = publishing_host(&nats, "stop", "500", &[]);
    host.wait_status(|v| v["nats_published"].as_u64().unwrap_or(0) >= 100);
    nats.stop();
    // The host's step now (a status line read earlier is older).
    let before = host.status_now()["step"].as_u64().unwrap();
    let out = viewer(&["check", &host.addr, "--steps", "1000"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let v = host.wait_status(|v| v["step"].as_u64().unwrap() > before + 1000);
    assert_eq!(v["resyncs"], 0, "{v}");
}

/// Three nodes of one cluster on loopback (routes between them): the host publishes to
/// node A, a viewer attached to node C verifies the same rows.
#[test]
fn a_viewer_on_another_node_of_a_cluster_verifies() {
    let cluster: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let routes = cluster
        .iter()
        .map(|p| format!("nats://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let nodes: Vec<Nats> = (0..3)
        .map(|i| {
            let name = format!("n{i}");
            let listen = format!("nats://127.0.0.1:{}", cluster[i]);
            Nats::start_with(&[
                "--server_name",
                &name,
                "--cluster_name",
                "ostm-test",
                "--cluster",
                &listen,
                "--routes",
                &routes,
            ])
        })
        .collect();
    let mut host = publishing_host(&nodes[0], "clu", "300", &[]);
    host.wait_status(|v| v["nats_published"].as_u64().unwrap_or(0) >= 300);
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("c.ostm");
    let addr = format!("{}/clu", nodes[2].url());
    let out = viewer(&[
        "attach",
        &addr,
        "--steps",
        "600",
        "--record",
        rec.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let (start, n) = check_recording(&rec, &default_rows(recording_end(&rec)));
    assert!(start > 0 && n == 600, "{start} {n}");
}

/// The step the drift tests plant a change at (the host's hidden `--perturb STEP:BODY`).
const DRIFT_STEP: u64 = 3000;

/// The host's hash at `DRIFT_STEP` when body `body`'s velocity.y there gained 1, and the
/// viewer's (the unchanged world's), computed here, as the report prints them.
fn drift_hashes(body: usize) -> (String, String) {
    let clean = default_world_at(DRIFT_STEP);
    let mut changed = clean.clone();
    changed.bodies[body].vel[1] += 1;
    (
        format!("{:016x}", changed.hash()),
        format!("{:016x}", clean.hash()),
    )
}

/// A NATS viewer that reads the session from its first keyframe (`--from-step 0`) and
/// checks 5 000 steps: it must find the drift planted on body `body` at `DRIFT_STEP` and
/// report both hashes. Returns the report's drift object and the two hashes.
fn drift_from_start(
    nats: &Nats,
    session: &str,
    body: usize,
) -> (serde_json::Value, String, String) {
    let addr = format!("{}/{session}", nats.url());
    let out = viewer(&[
        "check",
        &addr,
        "--from-step",
        "0",
        "--steps",
        "5000",
        "--json",
        "--no-bundle",
    ]);
    let text = stdout(&out);
    assert_eq!(code(&out), 1, "drift exits 1: {text}{}", stderr(&out));
    let v = json(text.lines().last().unwrap_or("null"));
    assert_eq!(v["verdict"], "drift", "{v}");
    let d = v["drift"].clone();
    let (host_hash, viewer_hash) = drift_hashes(body);
    assert_eq!(d["step"], DRIFT_STEP, "{d}");
    assert_eq!(
        (d["host_hash"].as_str(), d["viewer_hash"].as_str()),
        (Some(host_hash.as_str()), Some(viewer_hash.as_str())),
        "{d}"
    );
    (d, host_hash, viewer_hash)
}

/// While the host runs, a NATS viewer's drift request reaches it by request/reply: the
/// report names the planted step, body and field, and the host's recomputed stage hashes
/// say every stage agrees (the world was changed outside the step). The host counts the
/// one request once.
#[test]
fn drift_through_nats_asks_the_running_host_and_reports_the_stages() {
    let nats = Nats::start();
    let (body, vy) = planted(DRIFT_STEP);
    let perturb = format!("{DRIFT_STEP}:{body}");
    // 40 000 steps at 1000/s, every world of the first 30 000 held: the request finds the
    // host running and its snapshots at the drifting step however slow the machine is.
    let mut host = publishing_host(
        &nats,
        "drift",
        "1000",
        &["--steps", "40000", "--ring", "30000", "--perturb", &perturb],
    );
    host.wait_status(|v| v["nats_published"].as_u64().unwrap_or(0) >= 100);
    let (d, _, _) = drift_from_start(&nats, "drift", body);
    assert_eq!(d["body"], body, "{d}");
    assert_eq!(d["field"], "velocity.y", "{d}");
    assert_eq!(
        (&d["host"], &d["viewer"]),
        (&(vy as i64 + 1).into(), &(vy as i64).into()),
        "{d}"
    );
    assert_eq!(d["every_stage_agrees"], true, "{d}");
    assert_eq!(
        d["stages"], "every stage agrees: the host's world was changed outside the step",
        "{d}"
    );
    host.interrupt();
    let (_, last, _) = host.wait();
    let end = json(&last);
    assert_eq!(end["drift_requests"], 1, "one request, counted once: {end}");
}

/// Once the host has gone, the stream still holds its steps: a viewer reading them later
/// finds the drift, gets no answer to its request, and the report says so and gives both
/// hashes (no field, no stages).
#[test]
fn drift_through_nats_after_the_host_has_gone_says_so_and_gives_both_hashes() {
    let nats = Nats::start();
    let (body, _) = planted(DRIFT_STEP);
    let perturb = format!("{DRIFT_STEP}:{body}");
    let host = publishing_host(
        &nats,
        "gone",
        "max",
        &["--steps", "6000", "--perturb", &perturb],
    );
    let (status, last, _) = host.wait();
    assert!(status.success(), "the host ran its steps: {last}");
    let end = json(&last);
    assert_eq!(
        end["nats_published"], 6000,
        "every step is on the stream: {end}"
    );
    let (d, host_hash, viewer_hash) = drift_from_start(&nats, "gone", body);
    assert_eq!(
        d["summary"],
        format!("drift at step {DRIFT_STEP}: host hash {host_hash}, viewer hash {viewer_hash}"),
        "{d}"
    );
    assert_eq!(d["field"], serde_json::Value::Null, "{d}");
    assert_eq!(d["every_stage_agrees"], false, "{d}");
    // The server knows no responder on the subject: it says so at once.
    assert_eq!(
        d["note"], "no host answers drift requests on ostm.gone.drift any more; the host has gone",
        "{d}"
    );
    assert_eq!(
        d["stages"], "stages unknown: no reply came from the host, so its stage hashes are unknown",
        "{d}"
    );
}

/// The embedded world's records as frames, record `bad`'s hash changed (none: all honest).
fn records_with_bad_hash(n: u64, bad: Option<usize>) -> (Vec<u8>, Vec<Vec<u8>>) {
    let (key, mut recs) = honest(n);
    if let Some(i) = bad {
        // The hash is the 8 bytes after the length, the type and the step.
        recs[i][13] ^= 1;
    }
    (key, recs)
}

fn end_frame(host_step: u64) -> Vec<u8> {
    frame(&ToViewer::End(ostm_protocol::wire::End {
        reason: ostm_protocol::wire::EndReason::Finished,
        text: "done".into(),
        host_step,
    }))
}

/// A `rec` message whose first records are whole and good and whose last frame is bad:
/// the good ones are verified, then the message is refused at the bad frame's offset.
#[test]
fn the_good_records_before_a_bad_frame_are_verified() {
    let nats = Nats::start();
    let (key, recs) = honest(8);
    let subj = |leaf: &str| format!("ostm.part.{leaf}");
    let mut msgs = vec![(subj("key"), key)];
    msgs.extend(recs[..3].iter().map(|r| (subj("rec"), r.clone())));
    let mut mixed = recs[3..6].concat();
    let at = mixed.len();
    mixed.extend_from_slice(&[2, 0, 0, 0, 0x7e, 0]);
    msgs.push((subj("rec"), mixed));
    publish(&nats, "part", msgs);
    let out = viewer(&["check", &format!("{}/part", nats.url()), "--steps", "40"]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    let text = stdout(&out) + &stderr(&out);
    assert!(
        text.contains(&format!(
            "subject ostm.part.rec, stream sequence 5: at offset {}: expected a host message type",
            at + 4
        )) && text.contains("verified 6 of the 6 steps from 0 to 6"),
        "{text}"
    );
}

/// Each refusal of docs/fan-out.md's table, with its offset, once.
#[test]
fn every_refusal_names_its_offset() {
    let nats = Nats::start();
    let (key, recs) = honest(4);
    let resync_key = {
        let mut k = key.clone();
        k[5] = 1; // the kind byte: a resync snapshot
        k
    };
    // (session, messages after its keyframe as (subject leaf, payload), the error).
    type Case = (&'static str, Vec<(&'static str, Vec<u8>)>, String);
    let cases: Vec<Case> = vec![
        (
            "notrec",
            vec![("rec", [recs[0].clone(), key.clone()].concat())],
            format!(
                "stream sequence 2: at offset {}: expected record frames (0x83) only, found a frame of type 0x82",
                recs[0].len()
            ),
        ),
        (
            "twoends",
            vec![("end", [end_frame(1), end_frame(1)].concat())],
            format!(
                "stream sequence 2: at offset {}: expected one end frame (0x85), found a second frame",
                end_frame(1).len()
            ),
        ),
        (
            "notend",
            vec![("end", recs[0].clone())],
            "stream sequence 2: at offset 0: expected one end frame (0x85), found a frame of type 0x83".into(),
        ),
        (
            "kind1",
            vec![("key", resync_key)],
            "stream sequence 2: at offset 5: expected a snapshot of kind 0 (attach), found kind 1".into(),
        ),
        (
            "cut",
            vec![("rec", recs[0][..recs[0].len() - 2].to_vec())],
            format!(
                "stream sequence 2: at offset 0: the payload ends inside a frame: expected {} frame bytes, found {}",
                recs[0].len() - 4,
                recs[0].len() - 6
            ),
        ),
        (
            "empty",
            vec![("rec", Vec::new())],
            "stream sequence 2: at offset 0: expected at least one frame, found an empty payload".into(),
        ),
    ];
    for (name, tail, want) in cases {
        let mut msgs = vec![(format!("ostm.{name}.key"), key.clone())];
        msgs.extend(
            tail.into_iter()
                .map(|(leaf, p)| (format!("ostm.{name}.{leaf}"), p)),
        );
        publish(&nats, name, msgs);
        let out = viewer(&[
            "check",
            &format!("{}/{name}", nats.url()),
            "--from-step",
            "0",
            "--steps",
            "40",
        ]);
        let text = stdout(&out) + &stderr(&out);
        assert_eq!(code(&out), 2, "{name}: {text}");
        assert!(
            text.contains(&format!("{}/{name}: subject ostm.{name}.", nats.url()))
                && text.contains(&want),
            "{name}: expected `{want}` in {text}"
        );
    }
}

/// The attach's JSON end object.
fn end_object(out: &std::process::Output) -> serde_json::Value {
    json(stdout(out).lines().last().unwrap_or("null"))
}

/// Steps the host dropped (5..10) are followed by its keyframe of step 10, before the
/// record of step 10: the viewer continues there at once, and the verdict names the gap.
#[test]
fn the_keyframe_after_dropped_steps_closes_the_gap_and_the_verdict_names_it() {
    let nats = Nats::start();
    let (key0, recs) = honest(21);
    let key10 = frame(&ToViewer::Snapshot {
        kind: SnapshotKind::Attach,
        world: default_world_at(10),
    });
    let s = |leaf: &str| format!("ostm.drop.{leaf}");
    let mut msgs = vec![(s("key"), key0)];
    msgs.extend(recs[..5].iter().map(|r| (s("rec"), r.clone())));
    msgs.push((s("key"), key10));
    msgs.push((s("rec"), recs[10..15].concat()));
    msgs.push((s("rec"), recs[15..21].concat()));
    msgs.push((s("end"), end_frame(21)));
    publish(&nats, "drop", msgs);
    let out = viewer(&[
        "attach",
        &format!("{}/drop", nats.url()),
        "--from-step",
        "0",
        "--json",
    ]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let end = end_object(&out);
    assert_eq!(end["verdict"], "ok", "{end}");
    assert_eq!(end["verified"], 16, "steps 0..5 and 10..21: {end}");
    assert_eq!(end["step"], 21, "{end}");
    assert_eq!(end["resyncs"], 0, "{end}");
    let gaps = end["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{end}");
    assert_eq!(
        (&gaps[0]["from"], &gaps[0]["to"], &gaps[0]["steps"]),
        (&5.into(), &10.into(), &5.into()),
        "{end}"
    );
    assert!(
        stdout(&out)
            .lines()
            .any(|l| json(l)["event"] == "gap" && json(l)["from"] == 5),
        "a gap event as it happens: {}",
        stdout(&out)
    );
    // Nothing was lost in flight and nothing reconnects: no `lost`, no wait to say.
    assert!(
        !stdout(&out)
            .lines()
            .any(|l| json(l)["event"] == "lost" || json(l)["event"] == "missing"),
        "{}",
        stdout(&out)
    );
}

/// A message lost in flight (records 5 and 6): the next record (7) says at once that the
/// viewer waits for the next keyframe (not that it connects again: nothing reconnects),
/// and the keyframe of 10 closes the gap 5..10.
#[test]
fn a_message_lost_in_flight_says_the_viewer_waits_for_the_next_keyframe() {
    let nats = Nats::start();
    let (key0, recs) = honest(14);
    let key10 = frame(&ToViewer::Snapshot {
        kind: SnapshotKind::Attach,
        world: default_world_at(10),
    });
    let s = |leaf: &str| format!("ostm.hole.{leaf}");
    let mut msgs = vec![(s("key"), key0)];
    msgs.extend(recs[..5].iter().map(|r| (s("rec"), r.clone())));
    msgs.push((s("rec"), recs[7..10].concat()));
    msgs.push((s("key"), key10));
    msgs.push((s("rec"), recs[10..14].concat()));
    msgs.push((s("end"), end_frame(14)));
    publish(&nats, "hole", msgs);
    let addr = format!("{}/hole", nats.url());
    let waiting = "steps from 5 are not on the stream OSTM_hole (its next record is of step 7); waiting for its next keyframe";
    let out = viewer(&["attach", &addr, "--from-step", "0", "--json"]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let events: Vec<serde_json::Value> = stdout(&out).lines().map(json).collect();
    let missing: Vec<_> = events.iter().filter(|e| e["event"] == "missing").collect();
    assert_eq!(
        missing,
        [&serde_json::json!({"event": "missing", "step": 5, "why": waiting})],
        "{}",
        stdout(&out)
    );
    assert!(
        !events.iter().any(|e| e["event"] == "lost"),
        "no lost connection: {}",
        stdout(&out)
    );
    let gap = events.iter().find(|e| e["event"] == "gap").expect("a gap");
    assert_eq!(
        (&gap["from"], &gap["to"], &gap["why"]),
        (
            &5.into(),
            &10.into(),
            &"steps 5..10 are not on the stream OSTM_hole; continuing from its keyframe at step 10"
                .into()
        ),
        "{gap}"
    );
    assert_eq!(end_object(&out)["verified"], 9, "0..5 and 10..14");
    // And in words, and in the log (docs/protocol.md, "The viewer's log").
    let out = viewer(&["attach", &addr, "--from-step", "0", "--log-format", "json"]);
    let text = stdout(&out);
    assert!(text.contains(&format!("missing: {waiting}\n")), "{text}");
    assert!(!text.contains("connecting again"), "{text}");
    let logged: Vec<serde_json::Value> = stderr(&out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let events: Vec<&str> = logged
        .iter()
        .filter_map(|l| l["fields"]["event"].as_str())
        .collect();
    assert!(
        events.contains(&"missing") && events.contains(&"gap") && !events.contains(&"lost"),
        "{}",
        stderr(&out)
    );
}

/// A gap no keyframe closed before the end: the verdict names the steps never verified.
#[test]
fn a_gap_still_open_at_the_end_is_in_the_verdict() {
    let nats = Nats::start();
    let (key0, recs) = honest(13);
    let s = |leaf: &str| format!("ostm.open.{leaf}");
    let mut msgs = vec![(s("key"), key0)];
    msgs.extend(recs[..5].iter().map(|r| (s("rec"), r.clone())));
    msgs.push((s("rec"), recs[8..13].concat()));
    msgs.push((s("end"), end_frame(13)));
    publish(&nats, "open", msgs);
    let addr = format!("{}/open", nats.url());
    let out = viewer(&["attach", &addr, "--json"]);
    // Steps the viewer never reached before the end: incomplete, exit 1.
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    let end = end_object(&out);
    assert_eq!(end["verdict"], "incomplete", "{end}");
    assert_eq!(end["verified"], 5, "{end}");
    assert_eq!(
        (&end["total"], &end["not_verified"], &end["open_gap"]),
        (&13.into(), &8.into(), &true.into()),
        "{end}"
    );
    let gaps = end["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{end}");
    assert_eq!(
        (&gaps[0]["from"], &gaps[0]["to"]),
        (&5.into(), &13.into()),
        "{end}"
    );
    assert_eq!(
        gaps[0]["why"], "steps 5..13 are not on the stream OSTM_open before its end",
        "{end}"
    );
    // And in words.
    let out = viewer(&["attach", &addr]);
    assert!(
        stdout(&out).contains("gap: steps 5..13 are not on the stream OSTM_open before its end"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).lines().last().is_some_and(|l| l
            .starts_with("incomplete: the host ended the stream (")
            && l.ends_with("; verified 5 of the 13 steps from 0 to 13; 8 in 1 gap not verified")),
        "{}",
        stdout(&out)
    );
}

/// A responder on the drift subject that never answers: after 5 s the note says that no
/// host answered on the subject (not the TCP wording).
#[test]
fn a_drift_request_nobody_answers_gets_the_nats_note() {
    let nats = Nats::start();
    let (key, recs) = records_with_bad_hash(6, Some(3));
    let s = |leaf: &str| format!("ostm.mute.{leaf}");
    let mut msgs = vec![(s("key"), key)];
    msgs.extend(recs.iter().map(|r| (s("rec"), r.clone())));
    publish(&nats, "mute", msgs);
    // A subscriber that takes the requests and says nothing.
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let url = nats.url();
    let mute = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let client = async_nats::connect(url).await.unwrap();
            let _sub = client.subscribe("ostm.mute.drift").await.unwrap();
            client.flush().await.unwrap();
            ready_tx.send(()).unwrap();
            tokio::task::spawn_blocking(move || stop_rx.recv())
                .await
                .ok();
        });
    });
    ready_rx.recv().unwrap();
    let out = viewer(&[
        "check",
        &format!("{}/mute", nats.url()),
        "--steps",
        "6",
        "--json",
        "--no-bundle",
    ]);
    let _ = stop_tx.send(());
    mute.join().unwrap();
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    let d = end_object(&out)["drift"].clone();
    assert_eq!(d["step"], 4, "{d}");
    assert_eq!(
        d["note"],
        "no host answered the drift request on ostm.mute.drift within 5 s; the host has gone",
        "{d}"
    );
}

/// What the viewer cannot start from, in docs/fan-out.md's words ("What a viewer does"),
/// each exit 2: no stream of the session's name, a stream with no
/// keyframe yet, and `--from-step` before the oldest keyframe the stream holds.
#[test]
fn no_session_no_keyframe_and_none_at_or_before_the_step_are_said_as_the_doc_says() {
    let nats = Nats::start();
    let url = nats.url();
    let (_, recs) = honest(12);
    // Records but no keyframe yet.
    publish(
        &nats,
        "nokey",
        vec![("ostm.nokey.rec".into(), recs[0].clone())],
    );
    // The oldest keyframe held is the one of step 10.
    let key10 = frame(&ToViewer::Snapshot {
        kind: SnapshotKind::Attach,
        world: default_world_at(10),
    });
    publish(
        &nats,
        "late",
        vec![
            ("ostm.late.key".into(), key10),
            ("ostm.late.rec".into(), recs[10..12].concat()),
        ],
    );
    let cases: [(&str, Vec<&str>, String); 4] = [
        (
            "absent",
            vec!["--steps", "1"],
            format!("no session absent on {url} (stream OSTM_absent): "),
        ),
        (
            "nokey",
            vec!["--steps", "1"],
            format!("{url}/nokey: no keyframe yet on ostm.nokey.key: "),
        ),
        (
            "late",
            vec!["--from-step", "9", "--steps", "1"],
            format!("{url}/late: the stream holds no keyframe at or before step 9 (its oldest has gone, or the session started later)"),
        ),
        // The control: from step 10 the same session is read and verified.
        ("late", vec!["--from-step", "10", "--steps", "2"], String::new()),
    ];
    for (name, extra, want) in cases {
        let addr = format!("{url}/{name}");
        let mut args = vec!["check", addr.as_str()];
        args.extend(extra.iter().copied());
        let out = viewer(&args);
        let text = stdout(&out) + &stderr(&out);
        if want.is_empty() {
            assert_eq!(code(&out), 0, "{args:?}: {text}");
            assert!(
                text.starts_with("ok: verified 2 of the 2 steps from 10 to 12"),
                "{text}"
            );
            continue;
        }
        assert_eq!(code(&out), 2, "{args:?}: {text}");
        assert!(
            text.contains(&want),
            "{args:?}: expected `{want}` in {text}"
        );
    }
}

/// A viewer on NATS whose verifier trails a fast host (a test throttle) with a small spool
/// bound: when a record would take the spool's file past `--spool-max`, the viewer drops
/// records until the verifier has taken what the file holds and the stream's next
/// keyframe comes, which closes a gap named by the bound: no failure (exit 0), as over
/// TCP. Before, reaching the bound on NATS ended the session with an error (exit 2).
#[test]
fn a_spool_bound_reached_on_nats_is_a_named_gap_not_a_failure() {
    let nats = Nats::start();
    let mut host = publishing_host(&nats, "bound", "20000", &[]);
    host.wait_status(|v| v["nats_published"].as_u64().unwrap_or(0) >= 100);
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("{}/bound", nats.url());
    let out = viewer(&[
        "attach",
        &addr,
        "--json",
        "--spool-dir",
        dir.path().to_str().unwrap(),
        "--throttle",
        "4000",
        "--spool-memory",
        "16K",
        "--spool-max",
        "64K",
        "--steps",
        "8000",
    ]);
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}{}", stderr(&out));
    let end = json(text.lines().last().unwrap());
    assert_eq!(end["verdict"], "ok", "{end}");
    let gaps = end["gaps"].as_array().unwrap();
    let bound = gaps
        .iter()
        .find(|g| {
            g["why"].as_str().unwrap_or("").contains(
                "spool of records not yet verified reached --spool-max 64.0 KiB (65536 bytes)",
            )
        })
        .unwrap_or_else(|| panic!("a gap named by the spool's bound: {end}"));
    let why = bound["why"].as_str().unwrap();
    assert!(
        why.contains(&dir.path().display().to_string())
            && why.contains("continuing from the stream OSTM_bound's keyframe at step"),
        "{why}"
    );
    assert!(
        bound["to"].as_u64().unwrap() > bound["from"].as_u64().unwrap(),
        "{bound}"
    );
    assert!(end["backlog_peak_on_disk"].as_u64().unwrap() > 0, "{end}");
}
