//! `ostm-viewer watch` over raw WebSockets (no browser): who may connect (Host, Origin,
//! token, a non-loopback `--ui`), every malformed or out-of-range request answered with an
//! error and no change, replays through the seek index beside a file and built in memory,
//! each world checked against the file's hash row, and live tabs that get a frame only
//! when they ask. docs/watch.md is the contract.

mod browser;
mod live_support;

use browser::watch;
use futures::{SinkExt, StreamExt};
use live_support::*;
use ostm_protocol::Replay;
use serde_json::Value;
use std::io::{Read, Write};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// `http://127.0.0.1:P/?token=T` → (`127.0.0.1:P`, query).
fn split(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_once('/').expect("a path");
    (host.to_string(), path.trim_start_matches('?').to_string())
}

/// Opens `/ws?QUERY` on `host` with `origin` (none when `None`).
async fn connect(host: &str, query: &str, origin: Option<&str>) -> Result<Ws, WsError> {
    let q = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    let mut req = format!("ws://{host}/ws{q}").into_client_request()?;
    if let Some(o) = origin {
        req.headers_mut()
            .insert("Origin", o.parse().expect("header value"));
    }
    tokio::time::timeout(LIMIT, tokio_tungstenite::connect_async(req))
        .await
        .expect("connect within the limit")
        .map(|(ws, _)| ws)
}

/// The page's own socket.
async fn own(url: &str) -> Ws {
    let (host, query) = split(url);
    connect(&host, &query, Some(&format!("http://{host}")))
        .await
        .expect("the page's own socket")
}

/// The HTTP status of a refused upgrade.
fn status(e: WsError) -> u16 {
    match e {
        WsError::Http(r) => r.status().as_u16(),
        other => panic!("expected an HTTP refusal, found {other}"),
    }
}

/// The next JSON message.
async fn next(ws: &mut Ws) -> Value {
    loop {
        let m = tokio::time::timeout(LIMIT, ws.next())
            .await
            .expect("a message within the limit")
            .expect("the socket is open")
            .expect("a message");
        if let Message::Text(t) = m {
            return serde_json::from_str(t.as_str()).expect("JSON");
        }
    }
}

/// The next message of `kind`, skipping status messages; panics on any other kind, or
/// when none comes within [`LIMIT`].
async fn next_of(ws: &mut Ws, kind: &str) -> Value {
    let found = tokio::time::timeout(LIMIT, async {
        loop {
            let m = next(ws).await;
            if m["type"] == kind {
                return m;
            }
            assert_eq!(m["type"], "status", "expected {kind}, found {m}");
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("no {kind} message within {LIMIT:?}"))
}

async fn send(ws: &mut Ws, text: &str) {
    ws.send(Message::Text(text.into())).await.expect("send");
}

/// A plain HTTP GET of `path` with `host` as its Host header; returns the status.
fn get(addr: &str, host: &str, path: &str) -> u16 {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"))
}

fn tdata(name: &str) -> String {
    testdata(name).to_str().expect("path").to_string()
}

#[tokio::test]
async fn only_the_own_page_with_the_token_may_connect() {
    let file = tdata("test-2d-600.ostm");
    let (p, url) = watch(&[&file, "--ui-token", "s3cret-1"]);
    assert!(url.ends_with("/?token=s3cret-1"), "{url}");
    let (host, query) = split(&url);
    let origin = format!("http://{host}");
    // The page itself: its token, and a Host of this loopback server.
    assert_eq!(get(&host, &host, "/?token=s3cret-1"), 200);
    assert_eq!(get(&host, &host, "/"), 401);
    assert_eq!(get(&host, &host, "/?token=s3cret-2"), 401);
    let port = host.rsplit(':').next().unwrap();
    assert_eq!(
        get(&host, &format!("evil.example:{port}"), "/?token=s3cret-1"),
        421
    );
    for asset in ["/page.js", "/picture.js", "/page.css"] {
        assert_eq!(get(&host, &host, asset), 200, "{asset}");
        assert_eq!(
            get(&host, &format!("evil.example:{port}"), asset),
            421,
            "{asset}"
        );
    }
    // Sockets: another site's page, no Origin, no token, a wrong token.
    let refused = [
        (query.as_str(), Some("http://evil.example"), 403),
        (query.as_str(), None, 403),
        ("", Some(origin.as_str()), 401),
        ("token=s3cret-2", Some(origin.as_str()), 401),
        ("token=s3cret-10", Some(origin.as_str()), 401),
    ];
    for (q, o, code) in refused {
        let Err(e) = connect(&host, q, o).await else {
            panic!("query {q:?}, origin {o:?}: accepted");
        };
        assert_eq!(status(e), code, "query {q:?}, origin {o:?}");
    }
    let mut ws = own(&url).await;
    let hello = next(&mut ws).await;
    assert_eq!(hello["type"], "hello");
    assert_eq!(hello["mode"], "replay");
    p.kill();
}

#[test]
fn a_ui_address_other_than_loopback_needs_a_token() {
    let file = tdata("test-2d-600.ostm");
    let out = viewer(&["watch", &file, "--ui", "0.0.0.0"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--ui 0.0.0.0:0 is not a loopback address"),
        "{}",
        stderr(&out)
    );
    let out = viewer(&["watch", &file, "--ui-token", "a b"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("expected only A-Z a-z 0-9 . _ ~ -, found ' ' at byte 1"),
        "{}",
        stderr(&out)
    );
    // A live-only option with a file, and a file that is not a replay.
    let out = viewer(&["watch", &file, "--record", "x.ostm"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("--record is for a live session"));
    let out = viewer(&["watch", &tdata("test-2d-ghost.ospc")]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    // With --json the URL comes as the first JSON line.
    let mut p = spawn_viewer(&["watch", &file, "--json"]);
    let first: Value = serde_json::from_str(&p.line().expect("a line")).expect("JSON");
    assert_eq!(first["event"], "ui");
    assert!(
        first["url"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:"),
        "{first}"
    );
    p.kill();
    // With a token, a non-loopback address serves.
    let mut p = spawn_viewer(&["watch", &file, "--ui", "0.0.0.0", "--ui-token", "t0k"]);
    let url = p.line().expect("URL");
    assert!(
        url.starts_with("http://0.0.0.0:") && url.ends_with("/?token=t0k"),
        "{url}"
    );
    p.kill();
}

#[tokio::test]
async fn a_malformed_or_out_of_range_request_gets_an_error_and_changes_nothing() {
    let file = tdata("test-2d-600.ostm");
    let (p, url) = watch(&[&file]);
    let mut ws = own(&url).await;
    let hello = next(&mut ws).await;
    assert_eq!(
        (&hello["first_step"], &hello["last_step"], &hello["ghost"]),
        (&Value::from(0), &Value::from(600), &Value::Null)
    );
    let first = next_of(&mut ws, "frame").await;
    assert_eq!(
        (&first["step"], &first["check"]),
        (&0.into(), &"matches_row".into())
    );
    send(&mut ws, r#"{"type":"show","step":250}"#).await;
    let f = next_of(&mut ws, "frame").await;
    assert_eq!(f["step"], 250);
    let bad: [(&str, &str); 11] = [
        ("not json", "expected a request"),
        ("{}", "expected a request"),
        (
            r#"{"type":"show","step":601}"#,
            "expected a step of the replay, 0..=600",
        ),
        (r#"{"type":"show","step":-3}"#, "expected a request"),
        (
            r#"{"type":"show","step":99999999999999999999}"#,
            "expected a request",
        ),
        (r#"{"type":"show","step":3,"also":1}"#, "expected a request"),
        (
            r#"{"type":"overlay","overlay":"heat"}"#,
            "expected a request",
        ),
        (r#"{"type":"ghost","on":true}"#, "started without --ghost"),
        (r#"{"type":"ready"}"#, "ready is for a live view"),
        (r#"{"type":"world","world":"host"}"#, "is for a live view"),
        (r#"[{"type":"show","step":1}]"#, "expected a request"),
    ];
    for (msg, why) in bad {
        send(&mut ws, msg).await;
        let e = next_of(&mut ws, "error").await;
        let text = e["message"].as_str().unwrap_or_default();
        assert!(text.contains(why), "{msg}: {text}");
    }
    ws.send(Message::Binary(vec![1u8, 2, 3].into()))
        .await
        .expect("send");
    let e = next_of(&mut ws, "error").await;
    assert!(e["message"]
        .as_str()
        .unwrap()
        .contains("binary message of 3 bytes"));
    // Nothing changed: the next picture is still step 250's, with the overlay asked now.
    send(&mut ws, r#"{"type":"overlay","overlay":"occupancy"}"#).await;
    let f = next_of(&mut ws, "frame").await;
    assert_eq!(
        (&f["step"], &f["overlay"]),
        (&250.into(), &"occupancy".into())
    );
    // A message over 4096 bytes closes that socket; the server serves on.
    let long = format!(r#"{{"type":"show","step":1,"pad":"{}"}}"#, "x".repeat(5000));
    let _ = ws.send(Message::Text(long.into())).await;
    let closed = tokio::time::timeout(LIMIT, async {
        loop {
            match ws.next().await {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the socket closes");
    let mut again = own(&url).await;
    assert_eq!(next(&mut again).await["type"], "hello");
    p.kill();
}

/// The frame for `step` on a fresh socket to `url`.
async fn frame_at(url: &str, step: u64) -> Value {
    let mut ws = own(url).await;
    next_of(&mut ws, "hello").await;
    next_of(&mut ws, "frame").await;
    send(&mut ws, &format!(r#"{{"type":"show","step":{step}}}"#)).await;
    next_of(&mut ws, "frame").await
}

#[tokio::test]
async fn a_replay_is_shown_through_the_index_beside_it_or_one_built_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.ostm");
    std::fs::copy(testdata("test-10000.ostm"), &file).unwrap();
    let f = file.to_str().unwrap();
    let (p, url) = watch(&[f]);
    let mut mem = Vec::new();
    for step in [7321, 7320, 12, 10_000] {
        let fr = frame_at(&url, step).await;
        assert_eq!(fr["check"], "matches_row", "{step}");
        mem.push(fr);
    }
    p.kill();
    let out = viewer(&["index", f, "--every", "1000"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (p, url) = watch(&[f]);
    let mut ws = own(&url).await;
    let hello = next(&mut ws).await;
    assert_eq!(hello["every"], 1000);
    assert!(
        hello["index"].as_str().unwrap().contains("r.ostm.seek"),
        "{hello}"
    );
    for (i, step) in [7321, 7320, 12, 10_000].into_iter().enumerate() {
        let fr = frame_at(&url, step).await;
        assert_eq!(fr["hash"], mem[i]["hash"], "step {step}");
        assert_eq!(fr["svg"], mem[i]["svg"], "step {step}");
    }
    // An index made for another replay is refused by the checks `seek` makes.
    let mut r = Replay::read_file(&file).unwrap();
    r.inputs.push(&[]).unwrap();
    r.compute_hashes();
    r.write_file(&file).unwrap();
    let mut ws = own(&url).await;
    next_of(&mut ws, "hello").await;
    send(&mut ws, r#"{"type":"show","step":5000}"#).await;
    // The first frame (step 0) may come first: skip it.
    let e = loop {
        let m = next(&mut ws).await;
        if m["type"] == "error" {
            break m;
        }
    };
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("expected an index of"),
        "{e}"
    );
    p.interrupt_expecting_exit_0();
}

#[tokio::test]
async fn a_world_that_differs_from_the_files_hash_row_is_marked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("planted.ostm");
    let mut r = Replay::read_file(&testdata("test-2d-600.ostm")).unwrap();
    r.hashes.as_mut().unwrap()[321] ^= 1;
    r.write_file(&file).unwrap();
    let (p, url) = watch(&[file.to_str().unwrap()]);
    assert_eq!(frame_at(&url, 321).await["check"], "differs_from_row");
    assert_eq!(frame_at(&url, 320).await["check"], "matches_row");
    assert_eq!(frame_at(&url, 322).await["check"], "matches_row");
    p.kill();
}

#[tokio::test]
async fn live_tabs_get_a_frame_only_when_they_ask_and_each_its_own() {
    let host = Host::start(&["--rate", "300", "--steps", "100000"]);
    let (p, url) = watch(&[&host.addr]);
    let body = tokio::time::timeout(Duration::from_secs(30), tabs_ask(&url)).await;
    if body.is_err() {
        let out = p.kill();
        panic!("stuck: {}", String::from_utf8_lossy(&out.stderr));
    }
    p.interrupt_expecting_exit_0();
}

async fn tabs_ask(url: &str) {
    let url = url.to_string();
    let mut tabs = [own(&url).await, own(&url).await];
    for ws in &mut tabs {
        let hello = next_of(ws, "hello").await;
        assert_eq!(hello["mode"], "live");
        next_of(ws, "frame").await;
    }
    // Without a ready, a tab gets status and nothing else.
    let quiet = tokio::time::timeout(Duration::from_millis(1500), async {
        loop {
            let m = next(&mut tabs[0]).await;
            if m["type"] != "status" {
                return m;
            }
        }
    })
    .await;
    assert!(quiet.is_err(), "no frame without a ready: {quiet:?}");
    let mut last = 0;
    for _ in 0..5 {
        send(&mut tabs[0], r#"{"type":"ready"}"#).await;
        let f = next_of(&mut tabs[0], "frame").await;
        let step = f["step"].as_u64().unwrap();
        assert!(step >= last, "{step} after {last}");
        last = step;
        assert_eq!(f["world"], "live");
    }
    assert!(last > 0);
    send(&mut tabs[1], r#"{"type":"ready"}"#).await;
    let f = next_of(&mut tabs[1], "frame").await;
    assert!(f["step"].as_u64().unwrap() >= last);
    send(&mut tabs[1], r#"{"type":"show","step":3}"#).await;
    let e = next_of(&mut tabs[1], "error").await;
    assert!(
        e["message"].as_str().unwrap().contains("is for a replay"),
        "{e}"
    );
    send(&mut tabs[1], r#"{"type":"world","world":"host"}"#).await;
    let e = next_of(&mut tabs[1], "error").await;
    assert!(
        e["message"].as_str().unwrap().contains("there is none"),
        "{e}"
    );
    let s = next_of(&mut tabs[1], "status").await;
    assert!(s["verified"].as_u64().unwrap() > 0, "{s}");
    // The frame gap (docs/watch.md, "Frames yield to the proof"): none, or up to 1 s.
    assert!(s["frame_gap_ms"].as_u64().is_some_and(|g| g <= 1000), "{s}");
}
