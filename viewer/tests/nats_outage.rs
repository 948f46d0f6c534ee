//! A NATS server stopped under a host at 20 000 steps/s until the host drops steps (its
//! feed full), then started again: a viewer reading the session afterwards names every
//! step it did not verify in its verdict's gaps, and its gaps are exactly the ones
//! docs/fan-out.md's gap rule gives for what the stream holds (checked here by a reading
//! of the stream written from the doc). The keyframe the host publishes after its dropped
//! steps closes their gap, so the steps left unverified are the steps the host dropped.

mod live_support;

use futures::StreamExt;
use live_support::*;
use ostm_protocol::wire::{ToViewer, ViewerCodec};

fn json(l: &str) -> serde_json::Value {
    serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))
}

const STEPS: u64 = 240_000;
const RATE: u64 = 20_000;

/// The gaps docs/fan-out.md ("Gaps") gives for the messages of the stream `OSTM_NAME`,
/// read in order from the keyframe of step 0: `(from, to)` each.
fn gaps_by_the_doc(nats: &Nats, name: &str) -> Vec<(u64, u64)> {
    let url = nats.url();
    let name = name.to_string();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async move {
            use async_nats::jetstream::consumer::{pull, DeliverPolicy};
            let js = async_nats::jetstream::new(async_nats::connect(url).await.unwrap());
            let stream = js.get_stream(format!("OSTM_{name}")).await.unwrap();
            let consumer = stream
                .create_consumer(pull::OrderedConfig {
                    filter_subject: format!("ostm.{name}.*"),
                    deliver_policy: DeliverPolicy::All,
                    ..Default::default()
                })
                .await
                .unwrap();
            let mut msgs = consumer.messages().await.unwrap();
            let frames = |payload: &[u8]| {
                let mut src = bytes::BytesMut::from(payload);
                let mut codec = ViewerCodec::new("test");
                let mut out = Vec::new();
                while let Some(m) = codec.decode_eof(&mut src).unwrap() {
                    out.push(m);
                }
                out
            };
            // `next`: the step the viewer needs; `heard`: past the highest record seen.
            let (mut next, mut heard, mut gaps) = (None::<u64>, 0u64, Vec::new());
            while let Some(m) = msgs.next().await {
                let m = m.unwrap();
                let pending = m.info().unwrap().pending;
                for f in frames(&m.payload) {
                    match f {
                        ToViewer::Snapshot { world, .. } => match next {
                            None => next = Some(world.step),
                            Some(n) if world.step > n => {
                                gaps.push((n, world.step));
                                next = Some(world.step);
                            }
                            Some(_) => {}
                        },
                        ToViewer::Record(r) => {
                            heard = heard.max(r.step + 1);
                            if Some(r.step) == next {
                                next = Some(r.step + 1);
                            }
                        }
                        ToViewer::End(e) => {
                            let n = next.unwrap();
                            let to = heard.max(e.host_step);
                            if to > n {
                                gaps.push((n, to));
                            }
                            return gaps;
                        }
                        other => panic!("{other:?} on the stream"),
                    }
                }
                assert!(pending > 0, "the stream holds no end");
            }
            panic!("the stream's messages ended")
        })
}

#[test]
fn after_a_server_outage_only_the_steps_the_host_dropped_go_unverified() {
    let mut nats = Nats::start();
    let url = nats.url();
    let (rate, steps) = (RATE.to_string(), STEPS.to_string());
    let mut host = Host::start(&[
        "--rate",
        &rate,
        "--steps",
        &steps,
        "--publish",
        &url,
        "--session",
        "out",
        "--json",
        "--status-ms",
        "100",
    ]);
    host.wait_status(|v| v["nats_published"].as_u64().unwrap_or(0) >= 2 * RATE);
    // Down until the host's feed is full and it drops steps (a few seconds at this rate,
    // however fast the machine), then up again.
    nats.stop();
    host.wait_status(|v| v["nats_dropped"].as_u64().unwrap_or(0) >= 1000);
    nats.restart();
    let (status, last, err) = host.wait();
    assert!(status.success(), "{last}\n{err}");
    let end = json(&last);
    let dropped = end["nats_dropped"].as_u64().unwrap();
    let failed = end["nats_failed"].as_u64().unwrap();

    eprintln!("host: {last}\n{err}");
    let addr = format!("{url}/out");
    let out = viewer(&["attach", &addr, "--from-step", "0", "--json"]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let v = json(stdout(&out).lines().last().unwrap());
    assert_eq!(v["verdict"], "ok", "{v}");
    assert_eq!(v["step"], STEPS, "{v}");
    assert_eq!(v["resyncs"], 0, "gaps on NATS are not resyncs: {v}");
    let gaps: Vec<(u64, u64)> = v["gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["from"].as_u64().unwrap(), g["to"].as_u64().unwrap()))
        .collect();
    let unverified: u64 = gaps.iter().map(|(f, t)| t - f).sum();
    let verified = v["verified"].as_u64().unwrap();
    assert_eq!(
        verified + unverified,
        STEPS,
        "every step is verified or named in a gap: {v}"
    );
    assert_eq!(gaps, gaps_by_the_doc(&nats, "out"), "{v}");
    eprintln!(
        "outage at {RATE} steps/s: host dropped {dropped}, failed {failed}; viewer verified {verified}, unverified {unverified} in {} gaps",
        gaps.len()
    );
    assert!(
        unverified >= dropped,
        "a dropped step is never verified: {v}"
    );
    // Beyond the dropped steps, only what was lost in flight when the server died (its
    // publish failed) and the records after it up to the next keyframe, one at most
    // every RATE steps.
    assert!(
        unverified <= dropped + failed + RATE,
        "dropped {dropped}, failed {failed}: {v}"
    );
}
