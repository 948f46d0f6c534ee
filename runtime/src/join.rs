//! Joining a session on NATS JetStream as a viewer does (docs/fan-out.md, "What a viewer
//! does"): the stream's messages from a stream sequence on, in order, through an ordered
//! consumer, and the host's rate from a keyframe's header. The viewer's NATS reader and the
//! live bench both join this way.

use async_nats::jetstream::{self, consumer::pull, consumer::DeliverPolicy};
use ostm_protocol::wire::nats::RATE_HEADER;

/// The stream's messages on `filter` from stream sequence `start` on, in order.
///
/// # Errors
/// The server's sentence when the consumer cannot be made or read.
pub async fn read_from(
    stream: &jetstream::stream::Stream,
    filter: &str,
    start: u64,
) -> Result<pull::Ordered, String> {
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: filter.to_string(),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: start,
            },
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    consumer.messages().await.map_err(|e| e.to_string())
}

/// The host's rate from a keyframe's `Ostm-Rate` header (0 when absent).
pub fn rate(headers: &async_nats::HeaderMap) -> u32 {
    headers
        .get(RATE_HEADER)
        .and_then(|v| v.as_str().parse().ok())
        .unwrap_or(0)
}
