//! The viewer's handshake deadlines (docs/protocol.md, "What the viewer says about a
//! stranger"), against fake hosts that play a script: a peer that sends nothing for 2 s
//! is a stranger, but a welcome still arriving over a slow link is waited for under the
//! 10 s silence rule, the attach snapshot has the silence rule from the welcome (not the
//! 2 s deadline), what did not arrive is named, and under `--reconnect` a reconnection
//! that meets a silent or slow host is tried again.

mod live_support;

use live_support::*;
use ostm_protocol::wire::{End, EndReason, Record, ToViewer};
use std::time::Duration;

fn json(l: &str) -> serde_json::Value {
    serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))
}

fn end_frame(step: u64) -> Vec<u8> {
    frame_of(&ToViewer::End(End {
        reason: EndReason::Finished,
        host_step: step,
        text: "done".into(),
    }))
}

/// Longer than the viewer's 2 000 ms deadline for the host's first byte.
const PAST_TWO_SECONDS: Duration = Duration::from_millis(2600);

/// The welcome's first bytes come at once and the rest after more than 2 s (a slow link):
/// the host is answering, so the viewer waits for the whole welcome.
#[test]
fn a_welcome_arriving_slowly_is_waited_for() {
    let (hs, _) = handshake_to(5);
    let (head, rest) = hs.split_at(5);
    let addr = scripted_host(vec![vec![
        Act::Send(head.to_vec()),
        Act::Wait(PAST_TWO_SECONDS),
        Act::Send(rest.to_vec()),
        Act::Send(end_frame(5)),
    ]]);
    let out = viewer(&["attach", &addr, "--json"]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let end = json(stdout(&out).lines().last().unwrap());
    assert_eq!(end["stop"], "host-ended", "{end}");
    assert_eq!(end["attached_at"], 5, "{end}");
}

/// A welcome at once and the attach snapshot more than 2 s later: the snapshot has the
/// 10 s silence rule, not the 2 s deadline.
#[test]
fn the_attach_snapshot_is_not_held_to_the_welcome_deadline() {
    let (hs, _) = handshake_to(5);
    let addr = scripted_host(vec![vec![
        Act::Send(welcome_frame()),
        Act::Wait(PAST_TWO_SECONDS),
        Act::Send(hs[welcome_frame().len()..].to_vec()),
        Act::Send(end_frame(5)),
    ]]);
    let out = viewer(&["attach", &addr, "--json"]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let end = json(stdout(&out).lines().last().unwrap());
    assert_eq!(end["stop"], "host-ended", "{end}");
}

/// A welcome and then nothing: after the silence timeout the viewer names what did not
/// arrive (the attach snapshot), not a missing welcome.
#[test]
fn a_welcome_and_then_nothing_names_the_missing_snapshot() {
    let addr = scripted_host(vec![vec![
        Act::Send(welcome_frame()),
        Act::Wait(Duration::from_secs(12)),
    ]]);
    let out = viewer(&["attach", &addr]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains(&format!(
            "error: {addr} sent its welcome but no attach snapshot within 10000 ms"
        )),
        "{}",
        stderr(&out)
    );
}

/// Under `--reconnect`, a reconnection that meets a host sending nothing for more than
/// 2 s (a host still starting, a stalled link) is tried again, and the viewer joins the
/// host once it answers.
#[test]
fn a_reconnection_that_meets_a_silent_host_is_tried_again() {
    let (mut first, mut world) = handshake_to(5);
    let step = world.step;
    world.step(&[]);
    first.extend(frame_of(&ToViewer::Record(Record {
        step,
        hash: world.hash(),
        input: bytes::Bytes::new(),
    })));
    let (third, _) = handshake_to(10);
    let addr = scripted_host(vec![
        // Attached, one record, then closed without an end message.
        vec![Act::Send(first)],
        // Nothing at all, past the viewer's deadline for the first byte.
        vec![Act::Wait(PAST_TWO_SECONDS)],
        // A host that answers, then finishes.
        vec![Act::Send(third), Act::Send(end_frame(10))],
    ]);
    let out = viewer(&["attach", &addr, "--reconnect", "--json"]);
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}{}", stderr(&out));
    let end = json(text.lines().last().unwrap());
    assert_eq!(end["stop"], "host-ended", "{end}");
    assert_eq!(end["verified"], 1, "{end}");
    let gaps = end["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{end}");
    assert_eq!((&gaps[0]["from"], &gaps[0]["to"]), (&6.into(), &10.into()));
}
