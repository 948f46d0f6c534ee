//! The NATS reader's driver (docs/fan-out.md, "What a viewer does", "Gaps"): the one loop
//! that hands a session's stream messages and the time to the machine
//! ([`nats::Reader`]: sequences, repeats, gaps, keyframes, silence), reads on with a new
//! consumer when the machine says the stream has been quiet, passes the verifier's requests
//! on, and gives what the machine delivers to the caller's [`Hand`]: `ostm-viewer` spools
//! it, the live bench verifies it at once.

use crate::join::read_from;
use async_nats::jetstream::{consumer::pull, stream::Stream};
use futures::StreamExt;
use ostm_protocol::reader::{nats, Arrival};
use ostm_protocol::session::Millis;
use ostm_protocol::wire::{End, ToHost};
use ostm_protocol::FormatError;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tracing::debug;

/// Where what the machine delivers goes, and where the verifier's requests come from.
pub trait Hand {
    /// Why the caller stops the loop.
    type Stop;

    /// What the machine delivered, in order (`batch`, to be emptied). The machine is
    /// there for what the caller tells it back (its spool's bound reached or drained).
    ///
    /// # Errors
    /// The caller stops the loop.
    fn deliver(&mut self, m: &mut nats::Reader, batch: &mut Vec<Arrival>)
        -> Result<(), Self::Stop>;

    /// The verifier's next message to the host; `None` when none will come.
    fn request(&mut self) -> impl Future<Output = Option<ToHost>> + Send;

    /// Passes the verifier's message on (a drift request, by request/reply).
    fn pass_on(&mut self, r: ToHost) -> impl Future<Output = ()> + Send;

    /// After each message: the bench lets its other viewers run here.
    fn after_message(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// How the loop ended.
#[derive(Debug)]
pub enum Followed<S> {
    /// The host's end message (delivered first).
    End(End),
    /// Nothing came for [`nats::SILENCE_MS`] (an open gap, if any, delivered first).
    Silent,
    /// The consumer's messages ended.
    StreamEnded,
    /// A message refused, with its place (what was whole before it delivered first).
    Refused(FormatError),
    /// The caller's [`Hand::deliver`] stopped it.
    Stopped(S),
}

/// Reads `messages` (the stream on `filter`, from the message after the one `m` joined
/// at) through the machine `m` into `hand` until the end, a refusal, the silence, or the
/// caller stops it.
pub async fn follow<H: Hand>(
    stream: &Stream,
    filter: &str,
    m: &mut nats::Reader,
    mut messages: pull::Ordered,
    hand: &mut H,
) -> Followed<H::Stop> {
    let started = Instant::now();
    let now = || started.elapsed().as_millis() as Millis;
    let mut batch: Vec<Arrival> = Vec::new();
    let mut requests = true;
    loop {
        let at = started + Duration::from_millis(m.poll_timeout().unwrap_or(u64::MAX / 2));
        let msg = tokio::select! {
            biased;
            msg = messages.next() => msg,
            _ = tokio::time::sleep_until(at) => {
                m.handle_timeout(now());
                let mut silent = false;
                while let Some(e) = m.poll_event() {
                    match e {
                        nats::Event::Deliver(a) => batch.push(a),
                        nats::Event::Silent => silent = true,
                        nats::Event::Resume { from_seq } => {
                            debug!(last_seq = m.last_seq(), "no message for a while: reading on with a new consumer");
                            // From the stream's last message when its sequence is at or below
                            // the reader's (a cluster that lost its tail numbers again from there);
                            // a stream without a leader does not answer: 0.5 s at most.
                            let info = tokio::time::timeout(Duration::from_millis(500), stream.get_info());
                            let from = match info.await {
                                Ok(Ok(info)) => m.handle_stream_last(info.state.last_sequence),
                                _ => from_seq,
                            };
                            // Each attempt is given as long as the quiet wait: a consumer
                            // the cluster places on a server that has gone never answers,
                            // and the next attempt may land on one that runs.
                            let attempt = Duration::from_millis(nats::RESUME_AFTER_MS);
                            match tokio::time::timeout(attempt, read_from(stream, filter, from)).await {
                                Ok(Ok(again)) => messages = again,
                                Ok(Err(e)) => debug!(error = %e, "cannot create a new consumer yet"),
                                Err(_) => debug!(?attempt, "no new consumer within the attempt's time"),
                            }
                            m.handle_wake(now());
                        }
                    }
                }
                if silent {
                    // The silence is the reason given, whatever the hand says.
                    let _ = hand.deliver(m, &mut batch);
                    return Followed::Silent;
                }
                continue;
            }
            r = hand.request(), if requests => {
                match r {
                    Some(r) => hand.pass_on(r).await,
                    None => requests = false,
                }
                m.handle_wake(now());
                continue;
            }
        };
        let msg = match msg {
            None => return Followed::StreamEnded,
            Some(Err(e)) => {
                // The ordered consumer recreates itself after a server restart; a gap
                // this leaves is found by step number.
                debug!("stream read error: {e}");
                m.handle_wake(now());
                continue;
            }
            Some(Ok(msg)) => msg,
        };
        let seq = msg.info().map(|i| i.stream_sequence).unwrap_or(0);
        let taken = m.handle_message(now(), msg.subject.as_str(), seq, &msg.payload);
        while let Some(e) = m.poll_event() {
            if let nats::Event::Deliver(a) = e {
                batch.push(a);
            }
        }
        // What was whole and valid goes to the verifier, also before a refusal.
        if let Err(s) = hand.deliver(m, &mut batch) {
            return Followed::Stopped(s);
        }
        match taken {
            Ok(None) => {}
            Ok(Some(end)) => return Followed::End(end),
            Err(e) => return Followed::Refused(e),
        }
        hand.after_message().await;
    }
}
