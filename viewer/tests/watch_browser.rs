//! The page of `ostm-viewer watch` in a real browser: Debian's headless Chromium driven
//! over WebDriver (fantoccini, chromedriver started by the test on 127.0.0.1 and a port of
//! its own). The page loads and its step advances, the live body count it shows is the
//! world's, an overlay toggle changes the picture, a perturbed host makes it show the drift
//! report, and a replay scrubbed to step N shows the SVG `render FILE --step N` writes.
//! Screenshots are kept in `target/tmp/watch-screenshots/`.

mod browser;
mod live_support;

use browser::{watch, Browser, STATE};
use live_support::*;
use serde_json::Value;
use std::collections::BTreeMap;

/// One browser at a time: each test starts its own, and two at once on a small machine
/// only slow each other down.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An element of a parsed SVG as plain data: its name, attributes, non-blank text and
/// children, for comparing two pictures however each was written out.
#[derive(Debug, PartialEq)]
struct Element {
    name: String,
    attrs: BTreeMap<String, String>,
    text: Vec<String>,
    children: Vec<Element>,
}

fn element(n: roxmltree::Node<'_, '_>) -> Element {
    let mut attrs = BTreeMap::new();
    for a in n.attributes() {
        attrs.insert(a.name().to_string(), a.value().to_string());
    }
    let mut text = Vec::new();
    let mut children = Vec::new();
    for c in n.children() {
        if c.is_element() {
            children.push(element(c));
        } else if let Some(t) = c.text().map(str::trim).filter(|t| !t.is_empty()) {
            text.push(t.to_string());
        }
    }
    Element {
        name: n.tag_name().name().to_string(),
        attrs,
        text,
        children,
    }
}

fn picture(svg: &str) -> Element {
    let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("{e}: {svg:.200}"));
    element(doc.root_element())
}

/// The picture the page shows now, as the browser's DOM holds it.
async fn shown_svg(b: &Browser) -> String {
    b.js("return new XMLSerializer().serializeToString(document.querySelector('#picture svg'));")
        .await
        .as_str()
        .expect("an SVG in the page")
        .to_string()
}

/// `ostm-viewer render FILE --step N [--overlay O] -o DIR/N.svg`, read back.
fn rendered(file: &str, step: u64, overlay: &str, dir: &std::path::Path) -> String {
    let out_path = dir.join(format!("{step}-{overlay}.svg"));
    let out = viewer(&[
        "render",
        file,
        "--step",
        &step.to_string(),
        "--overlay",
        overlay,
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    std::fs::read_to_string(out_path).expect("the rendered SVG")
}

/// Waits until the page shows a frame for which `pred` holds.
async fn state_until(b: &Browser, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    b.until(what, STATE, |v| !v.is_null() && pred(v)).await
}

/// Types `step` into the step box, as a person does.
async fn go_to(b: &Browser, step: u64) {
    b.js(&format!(
        "const i = document.getElementById('step-input'); i.value = '{step}'; \
         i.dispatchEvent(new Event('change')); return true;"
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrubbed_replay_shows_the_svg_render_writes_and_an_overlay_toggle_changes_it() {
    let _one = ONE_BROWSER.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let file = testdata("test-10000.ostm").display().to_string();
    let (p, url) = watch(&[&file]);
    let b = Browser::start(1500, 1150).await;
    b.client.goto(&url).await.expect("open the page");
    let s = state_until(&b, "the first frame", |v| v["step"] == 0).await;
    assert_eq!(s["mode"], "replay");
    assert_eq!(s["check"], "matches_row");
    for step in [4321u64, 4320, 9999, 10_000, 17] {
        go_to(&b, step).await;
        let s = state_until(&b, &format!("step {step}"), |v| v["step"] == step).await;
        assert_eq!(s["check"], "matches_row", "step {step}");
        assert_eq!(s["svg_step"], step.to_string());
        assert_eq!(
            picture(&shown_svg(&b).await),
            picture(&rendered(&file, step, "density", dir.path())),
            "step {step}: the page shows the picture render writes"
        );
    }
    // After the first frame the page patched each new picture into the one shown
    // (picture.js) rather than putting it in whole, and it still equals render's.
    let counts = b
        .js("const p = window.ostm.picture; return [p.patched, p.replaced];")
        .await;
    assert!(counts[0].as_u64() >= Some(3), "patched, replaced: {counts}");
    // The buttons: one step forward and back.
    b.click("#forward").await;
    state_until(&b, "step 18", |v| v["step"] == 18).await;
    b.click("#back").await;
    b.click("#back").await;
    state_until(&b, "step 16", |v| v["step"] == 16).await;
    // The overlay toggle changes the picture into render's with that overlay.
    let before = shown_svg(&b).await;
    b.click(r#"input[name="overlay"][value="occupancy"]"#).await;
    state_until(&b, "the occupancy overlay", |v| v["overlay"] == "occupancy").await;
    let after = shown_svg(&b).await;
    assert_ne!(picture(&before), picture(&after));
    assert_eq!(
        picture(&after),
        picture(&rendered(&file, 16, "occupancy", dir.path()))
    );
    let triangles = b
        .js("return document.querySelectorAll('#picture #overlay polygon.triangle').length;")
        .await;
    assert_eq!(triangles, 128);
    b.screenshot("replay-occupancy").await;
    b.click(r#"input[name="overlay"][value="none"]"#).await;
    state_until(&b, "no overlay", |v| v["overlay"] == "none").await;
    assert_eq!(
        b.js("return document.querySelectorAll('#picture #overlay').length;")
            .await,
        0
    );
    // Play runs the steps on; pause stops them.
    b.click("#play").await;
    let s = state_until(&b, "playing on", |v| v["step"].as_u64() > Some(30)).await;
    b.click("#play").await;
    assert_eq!(s["check"], "matches_row");
    assert_eq!(s["errors"], serde_json::json!([]));
    b.close().await;
    p.interrupt_expecting_exit_0();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_page_advances_and_shows_the_worlds_live_bodies() {
    let _one = ONE_BROWSER.lock().await;
    let host = Host::start(&["--rate", "200", "--steps", "100000"]);
    let (p, url) = watch(&[&host.addr]);
    let b = Browser::start(1500, 1150).await;
    b.client.goto(&url).await.expect("open the page");
    let first = state_until(&b, "a verified frame", |v| v["check"] == "verified").await;
    assert_eq!(first["mode"], "live");
    let mut step = first["step"].as_u64().unwrap();
    // Three later verified frames: each shows the live bodies of the embedded world at its
    // step, in the count and as circles.
    for _ in 0..3 {
        let s = state_until(&b, "a later frame", |v| {
            v["check"] == "verified" && v["step"].as_u64() > Some(step + 50)
        })
        .await;
        step = s["step"].as_u64().unwrap();
        let alive = default_world_at(step).alive_count();
        assert_eq!(s["alive"], alive, "step {step}");
        assert_eq!(s["shown_live"], alive.to_string(), "step {step}");
        assert_eq!(s["svg_bodies"], alive, "step {step}");
    }
    let verified = b
        .until(
            "the status bar",
            "return document.getElementById('verified').textContent;",
            |v| v.as_str().is_some_and(|t| t != "–" && t != "0"),
        )
        .await;
    assert!(verified.as_str().is_some(), "{verified}");
    let fps = state_until(&b, "a frame rate", |v| v["fps"].as_u64() > Some(1)).await;
    assert!(fps["drawn"].as_u64() > Some(3), "{fps}");
    // The badge says the session's verdict; the frame's label what proves the frame.
    assert_eq!(b.text("#verdict-state").await, "verifying");
    assert_eq!(b.text("#check").await, "verified frame");
    // The strip's legend and its range are two elements, side by side, not one text.
    let range = b
        .until(
            "the strip's range",
            "return document.getElementById('strip-range').textContent;",
            |v| v.as_str().is_some_and(|t| t.starts_with("steps ")),
        )
        .await;
    assert!(
        range.as_str().unwrap().contains(" to "),
        "strip range: {range}"
    );
    let legend = b.text("#strip-legend").await;
    assert!(
        legend.ends_with("drift") && !legend.contains("steps"),
        "the legend holds no range: {legend}"
    );
    let apart = b
        .js("const r = document.getElementById('strip-range'); \
             const l = document.getElementById('strip-legend'); \
             return r.closest('.legend') === null && \
               l.getBoundingClientRect().right < r.getBoundingClientRect().left;")
        .await;
    assert_eq!(
        apart, true,
        "the range is apart from the legend, to its right"
    );
    b.screenshot("live").await;
    // The host stops: the session has ended, and the badge says so and why; the frame
    // shown is the last verified one.
    host.interrupt();
    let ended = b
        .until(
            "the ended verdict",
            "return document.getElementById('verdict').dataset.verdict;",
            |v| v == "ended",
        )
        .await;
    assert_eq!(ended, "ended");
    assert_eq!(b.text("#verdict-state").await, "ended");
    let why = b.text("#verdict-why").await;
    assert!(why.contains("the host ended the stream"), "{why}");
    assert_eq!(b.text("#check").await, "last verified frame");
    // Nothing moves once it ended: no rates on the page, but that it ended and the totals
    // (also after later status messages, which still carry the last rate).
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let bar = b.text("#bar").await;
    assert!(
        !bar.contains("steps/s") && !bar.contains("frames/s"),
        "no rate once ended: {bar}"
    );
    let verified = b.js("return window.ostm.ended.verified;").await;
    assert_eq!(
        b.text("#rate-item").await.replace(',', ""),
        format!("ended · {verified} steps verified")
    );
    assert!(
        b.text("#fps-item").await.ends_with("frames drawn"),
        "{}",
        b.text("#fps-item").await
    );
    b.screenshot("live-ended").await;
    b.close().await;
    p.interrupt_expecting_exit_0();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_perturbed_host_makes_the_page_show_the_drift_report() {
    let _one = ONE_BROWSER.lock().await;
    const STEP: u64 = 1500;
    let w = default_world_at(STEP);
    let body = (5..w.bodies.len())
        .find(|&i| w.bodies[i].alive)
        .expect("a live body");
    let planted = format!("{STEP}:{body}");
    let host = Host::start(&[
        "--rate",
        "500",
        "--steps",
        "4000",
        "--ring",
        "4001",
        "--perturb",
        &planted,
        "--wait-for-viewers",
        "1",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("d.ostmb");
    let (p, url) = watch(&[&host.addr, "--bundle", bundle.to_str().unwrap()]);
    let b = Browser::start(1500, 1150).await;
    b.client.goto(&url).await.expect("open the page");
    let s = state_until(&b, "the drift report", |v| {
        !v["drift"].is_null() && v["world"] == "last_verified"
    })
    .await;
    let r = &s["drift"]["report"];
    assert_eq!(r["step"], STEP);
    assert_eq!(r["body"], body);
    assert_eq!(r["field"], "velocity.y");
    assert_eq!(r["every_stage_agrees"], true);
    assert_eq!(b.text("#drift-step").await, STEP.to_string());
    assert_eq!(b.text("#drift-body").await, body.to_string());
    assert_eq!(b.text("#drift-field").await, "velocity.y");
    assert!(b.text("#drift-stages").await.contains("every stage agrees"));
    // The picture stops at the last verified world, with the body marked, labelled as the
    // last verified frame; the badge says the session's verdict: drift, where.
    assert_eq!(s["step"], STEP - 1);
    assert_eq!(s["check"], "verified");
    b.until(
        "the drift verdict",
        "return document.getElementById('verdict').dataset.verdict;",
        |v| v == "drift",
    )
    .await;
    assert_eq!(b.text("#verdict-state").await, "drift");
    let why = b.text("#verdict-why").await;
    assert!(
        why.contains(&format!("drift at step {STEP}: body {body} velocity.y")),
        "{why}"
    );
    assert_eq!(b.text("#check").await, "last verified frame");
    // The drift on the strip (the last of its 4096 steps, a fraction of a pixel at this
    // width): a marker a person sees, at least 6 CSS pixels wide, inside the strip.
    let mark = b
        .until(
            "the drift's mark on the strip",
            "const m = document.querySelector('#strip-marks span.drift'); if (!m) return null; \
             const r = m.getBoundingClientRect(); \
             const s = document.getElementById('strip').getBoundingClientRect(); \
             return [r.width, r.left - s.left, s.right - r.right, s.width, Number(m.dataset.to)];",
            |v| !v.is_null(),
        )
        .await;
    let f = |k: usize| mark[k].as_f64().unwrap();
    assert!(f(3) > 1000.0, "a wide strip: {mark}");
    assert!(
        f(0) >= 6.0,
        "the drift's mark is at least 6 px wide: {mark}"
    );
    assert!(f(1) >= 0.0 && f(2) >= -0.5, "inside the strip: {mark}");
    assert_eq!(mark[4], STEP, "{mark}");
    let marked = b
        .js("return Array.from(document.querySelectorAll('#picture g.body.marked')).map(g => g.dataset.index);")
        .await;
    assert_eq!(marked, serde_json::json!([body.to_string()]));
    b.screenshot("drift").await;
    // Flip to the host's world and the viewer's at the drifting step.
    for world in ["host", "viewer"] {
        b.click(&format!(r#"#drift-worlds button[data-world="{world}"]"#))
            .await;
        let s = state_until(&b, world, |v| v["world"] == world).await;
        assert_eq!((&s["step"], &s["check"]), (&STEP.into(), &"drift".into()));
        let label = b.text("#check").await;
        assert!(
            label.contains(&format!(
                "{world}'s world at the drifting step: not verified"
            )),
            "{label}"
        );
    }
    assert_eq!(b.text("#verdict-state").await, "drift");
    b.screenshot("drift-host").await;
    let end = b.text("#end-message").await;
    assert!(
        end.contains(&format!("drift at step {STEP}: body {body} velocity.y")),
        "{end}"
    );
    b.close().await;
    p.signal("INT");
    let out = p.finish();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "drift exits 1 as attach: {text}"
    );
    assert!(
        text.contains(&format!("drift at step {STEP}: body {body} velocity.y")),
        "{text}"
    );
    assert!(bundle.exists(), "the bundle attach writes");
}

/// A replay whose start world has its 64 bodies in a tight cluster (2D, 3D): the index
/// labels the page shows, measured in the browser as it rendered them (an outside label's
/// box, an inside label's text), never overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_of_clustered_bodies_do_not_overlap_in_the_browser() {
    use ostm_protocol::{Dims, Replay, Setup};
    let _one = ONE_BROWSER.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let b = Browser::start(1500, 1150).await;
    for dims in [Dims::Two, Dims::Three] {
        let setup = Setup {
            dims,
            bodies: 64,
            seed: 5,
        };
        let mut start = ostm_protocol::World::new(setup, None);
        for (i, body) in start.bodies.iter_mut().enumerate() {
            // An 8 x 8 grid 120 mm apart around the middle of the box: circles that touch.
            body.pos[0] = 4600 + 120 * (i % 8) as i32;
            body.pos[1] = 4600 + 120 * (i / 8) as i32;
            if dims == Dims::Three {
                body.pos[2] = 5000 + 40 * (i % 5) as i32;
            }
            body.vel = [0; 3];
        }
        let mut r = Replay::new(setup, None);
        r.start = Some(start);
        r.inputs.push_ops(&[]);
        r.compute_hashes();
        let file = dir.path().join(format!("cluster-{}d.ostm", dims as u8));
        r.write_file(&file).expect("write the replay");
        let (p, url) = watch(&[file.to_str().unwrap()]);
        b.client.goto(&url).await.expect("open the page");
        state_until(&b, "the first frame", |v| v["step"] == 0).await;
        let boxes = b
            .js("return Array.from(document.querySelectorAll('#picture g.label')).map(g => { \
                   const r = (g.querySelector('rect') || g.querySelector('text')).getBoundingClientRect(); \
                   return [g.dataset.index, r.left, r.top, r.right, r.bottom]; });")
            .await;
        let boxes = boxes.as_array().expect("label boxes").clone();
        assert!(boxes.len() >= 8, "{}D: labels shown: {boxes:?}", dims as u8);
        let f = |v: &Value, k: usize| v[k].as_f64().unwrap();
        for (i, a) in boxes.iter().enumerate() {
            for c in &boxes[i + 1..] {
                let apart = f(a, 3) <= f(c, 1)
                    || f(c, 3) <= f(a, 1)
                    || f(a, 4) <= f(c, 2)
                    || f(c, 4) <= f(a, 2);
                assert!(
                    apart,
                    "{}D: the labels of bodies {} and {} overlap: {a} {c}",
                    dims as u8, a[0], c[0]
                );
            }
        }
        b.screenshot(&format!("cluster-{}d", dims as u8)).await;
        p.interrupt_expecting_exit_0();
    }
    b.close().await;
}
