//! The host's Prometheus metrics (`serve --metrics ADDR`, docs/metrics.md): read at each
//! scrape from the counters the stepping loop, the connections and the NATS publisher
//! already keep as atomics; nothing on those paths waits for a scrape.

use crate::hub::Hub;
use crate::pending::Pending;
use ostm_runtime::metrics::{counter, gauge};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// What the host's metrics are read from.
pub struct HostMetrics {
    pub hub: Arc<Hub>,
    pub waiting: Arc<Pending>,
    pub nats: Option<Arc<crate::publish::Counters>>,
    /// `--rate` (0 for `max`).
    pub target_rate: u32,
    /// Steps taken in the last whole second (`f64` bits), kept by [`HostMetrics::meter`].
    pub rate: AtomicU64,
}

impl std::fmt::Debug for HostMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostMetrics")
    }
}

impl HostMetrics {
    /// The registry of the host's metrics, with `labels` (the world: dims, bodies, seed)
    /// on `ostm_host_info`.
    pub fn registry(self: &Arc<Self>, labels: Vec<(String, String)>) -> Registry {
        let mut registry = Registry::default();
        let mut info = labels;
        info.insert(0, ("version".into(), env!("CARGO_PKG_VERSION").into()));
        registry.register(
            "ostm_host",
            "The host's version and world (dims, bodies at the start, seed)",
            Info::new(info),
        );
        registry.register_collector(Box::new(self.clone()));
        registry
    }

    /// Measures the steps taken each second into `ostm_host_steps_per_second`, until `stop`.
    pub async fn meter(self: Arc<Self>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        let (mut at, mut step) = (Instant::now(), self.hub.step());
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let (now, s) = (Instant::now(), self.hub.step());
            let secs = now.duration_since(at).as_secs_f64();
            if secs > 0.0 {
                let r = (s.saturating_sub(step) as f64 / secs * 10.0).round() / 10.0;
                self.rate.store(r.to_bits(), Ordering::Relaxed);
            }
            (at, step) = (now, s);
        }
    }
}

impl Collector for HostMetrics {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let c = &self.hub.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        // One reading of the step for both: their difference is exactly the start step.
        let step = self.hub.step();
        gauge(
            &mut e,
            "ostm_host_step",
            "The step of the host's world: the steps it has run from step 0 (the last step taken is numbered one less)",
            step,
        )?;
        counter(
            &mut e,
            "ostm_host_steps",
            "Steps taken since the host started: ostm_host_step minus the step it started at",
            step.saturating_sub(self.hub.start_step()),
        )?;
        gauge(
            &mut e,
            "ostm_host_steps_per_second",
            "Steps taken in the last whole second",
            f64::from_bits(get(&self.rate)),
        )?;
        gauge(
            &mut e,
            "ostm_host_target_steps_per_second",
            "The rate the host steps at (--rate; 0 for max)",
            u64::from(self.target_rate),
        )?;
        gauge(
            &mut e,
            "ostm_host_viewers",
            "Viewers attached now",
            get(&c.viewers),
        )?;
        counter(
            &mut e,
            "ostm_host_viewers_attached",
            "Viewers that have attached since the host started",
            get(&c.viewers_total),
        )?;
        gauge(
            &mut e,
            "ostm_host_connections_waiting",
            "Connections waiting for their hello",
            self.waiting.len() as u64,
        )?;
        counter(
            &mut e,
            "ostm_host_records_sent",
            "Records handed to viewers' connections to write",
            get(&c.records_sent),
        )?;
        counter(
            &mut e,
            "ostm_host_resyncs",
            "Viewers resynced from a fresh snapshot because they fell more than --viewer-queue records behind",
            get(&c.resyncs),
        )?;
        counter(
            &mut e,
            "ostm_host_stalls",
            "Viewers dropped because a write to them made no progress for --stall-ms",
            get(&c.stalled),
        )?;
        counter(
            &mut e,
            "ostm_host_refusals",
            "Connections refused (bad token, full, bad hello, TLS handshake failed)",
            get(&c.refused),
        )?;
        counter(
            &mut e,
            "ostm_host_shed_connections",
            "Connections closed before their hello to make room for newer ones (--max-waiting)",
            get(&c.shed),
        )?;
        counter(
            &mut e,
            "ostm_host_protocol_errors",
            "Viewers dropped for a malformed or unexpected message",
            get(&c.protocol_errors),
        )?;
        counter(
            &mut e,
            "ostm_host_drift_requests",
            "Drift requests answered (a viewer reported that its hash differs)",
            get(&c.drift_requests),
        )?;
        gauge(
            &mut e,
            "ostm_host_queue_high_water_records",
            "The most records any viewer has been behind the host",
            get(&c.queue_max),
        )?;
        gauge(
            &mut e,
            "ostm_host_queue_capacity_records",
            "Records a viewer may be behind before it is resynced (--viewer-queue)",
            self.hub.limits.queue as u64,
        )?;
        if c.recording.load(Ordering::Relaxed) {
            counter(
                &mut e,
                "ostm_host_recorded_steps",
                "Steps of the host's own recording (--record) flushed to its file",
                get(&c.recorded),
            )?;
        }
        if let Some(nats) = &self.nats {
            let (state, n) = (nats.state(), nats.counts());
            gauge(
                &mut e,
                "ostm_host_nats_up",
                "1 when the host is connected to NATS with its stream made, else 0",
                u64::from(state == crate::publish::State::Up),
            )?;
            gauge(
                &mut e,
                "ostm_host_nats_refused",
                "1 while the NATS server refuses the session's stream, else 0",
                u64::from(matches!(state, crate::publish::State::Refused(_))),
            )?;
            counter(
                &mut e,
                "ostm_host_nats_published",
                "Steps published to NATS and acknowledged by the stream",
                n.published,
            )?;
            counter(
                &mut e,
                "ostm_host_nats_dropped",
                "Steps dropped before NATS because the publisher's feed was full",
                n.dropped,
            )?;
            counter(
                &mut e,
                "ostm_host_nats_failed",
                "Steps in NATS publishes that failed or were not acknowledged",
                n.failed,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::HostMetrics;
    use crate::hub::tests::{run, world};
    use crate::hub::{Hub, Limits};
    use crate::pending::Pending;
    use std::sync::Arc;

    /// The steps taken count from the world the hub was made with, not from the step it
    /// had reached when the metrics were set up (the stepping starts first).
    #[test]
    fn the_steps_taken_count_from_the_start_step() {
        let hub = Arc::new(Hub::new(world(), Limits { queue: 4, ring: 8 }));
        let mut w = world();
        run(&hub, &mut w, 1);
        let metrics = Arc::new(HostMetrics {
            hub: hub.clone(),
            waiting: Pending::new(1, 1),
            nats: None,
            target_rate: 60,
            rate: Default::default(),
        });
        run(&hub, &mut w, 2);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry(Vec::new()))
            .unwrap();
        assert!(text.contains("\nostm_host_step 3\n"), "{text}");
        assert!(text.contains("\nostm_host_steps_total 3\n"), "{text}");
    }
}
