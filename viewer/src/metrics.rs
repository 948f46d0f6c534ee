//! The viewer's Prometheus metrics (`attach`, `watch`, `check` with `--metrics ADDR`;
//! docs/metrics.md), served by [`ostm_runtime::metrics::Endpoint`] on a thread of its own.
//!
//! They are kept from the session's events ([`Event`]), which the verifier reports
//! anyway: the status every 250 ms (host step, verified steps, lag, backlog), a resync, a
//! lost connection, a reconnection, a gap; and from its outcome (a drift, the end). The
//! verifier only stores atomics here, and a scrape only loads them: it never waits for a
//! scraper, and a scraper never waits for it. The recording's bytes are the sizes of its
//! files on disk, read at each scrape on the endpoint's thread.

use crate::live::record::numbered;
use crate::live::session::{Event, Outcome, Stop};
use ostm_protocol::format::recording::journal_path;
use ostm_runtime::metrics::{counter, gauge, Endpoint};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// What the viewer's metrics are read from: stored by the session's events, loaded by a
/// scrape.
#[derive(Debug, Default)]
pub struct ViewerMetrics {
    host_step: AtomicU64,
    step: AtomicU64,
    verified: AtomicU64,
    backlog: AtomicU64,
    resyncs: AtomicU64,
    gaps: AtomicU64,
    unverified: AtomicU64,
    reconnects: AtomicU64,
    drifts: AtomicU64,
    connected: AtomicBool,
    ended: AtomicBool,
    /// With `--record`: the files the recording has started, in order.
    files: Option<Mutex<Vec<PathBuf>>>,
}

impl ViewerMetrics {
    /// Metrics for a session recording to `record`, if it does.
    pub fn new(record: Option<&Path>) -> ViewerMetrics {
        ViewerMetrics {
            files: record.map(|_| Mutex::new(Vec::new())),
            ..ViewerMetrics::default()
        }
    }

    fn store(a: &AtomicU64, v: u64) {
        a.store(v, Ordering::Relaxed);
    }

    fn add(a: &AtomicU64, v: u64) {
        a.fetch_add(v, Ordering::Relaxed);
    }

    /// A file the recording started (the first at the attach, the next at a resync, a
    /// reconnection or a gap).
    fn started(&self, file: Option<&PathBuf>) {
        if let (Some(files), Some(f)) = (&self.files, file) {
            files
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(f.clone());
        }
    }

    /// Takes in one of the session's events.
    pub fn on(&self, ev: &Event<'_>, record: Option<&Path>) {
        match *ev {
            Event::Attached { world, .. } => {
                Self::store(&self.step, world.step);
                self.host_step.fetch_max(world.step, Ordering::Relaxed);
                self.connected.store(true, Ordering::Relaxed);
                self.started(record.map(|r| numbered(r, 0)).as_ref());
            }
            Event::Status(s) => {
                Self::store(&self.host_step, s.host_step);
                Self::store(&self.step, s.step);
                Self::store(&self.verified, s.verified);
                Self::store(&self.backlog, s.backlog);
            }
            Event::Resync { from, to, file } => {
                Self::add(&self.resyncs, 1);
                Self::add(&self.unverified, to.saturating_sub(from));
                Self::store(&self.step, to);
                self.started(file);
            }
            Event::Lost { .. } => self.connected.store(false, Ordering::Relaxed),
            Event::Reconnected { gap, file } => {
                Self::add(&self.reconnects, 1);
                Self::add(&self.gaps, 1);
                Self::add(&self.unverified, gap.steps().unwrap_or(0));
                Self::store(&self.step, gap.to);
                self.connected.store(true, Ordering::Relaxed);
                self.started(file);
            }
            Event::Gap { gap, file } => {
                Self::add(&self.gaps, 1);
                Self::add(&self.unverified, gap.steps().unwrap_or(0));
                self.started(file);
            }
            Event::Fields { .. } | Event::Frame { .. } | Event::Missing { .. } => {}
        }
    }

    /// Takes in the session's end: its final counts, and a drift.
    pub fn ended(&self, out: &Outcome) {
        Self::store(&self.step, out.step);
        Self::store(&self.host_step, out.host_step);
        Self::store(&self.verified, out.verified);
        Self::store(&self.backlog, 0);
        if matches!(out.stop, Stop::Drift(_)) {
            Self::add(&self.drifts, 1);
        }
        self.connected.store(false, Ordering::Relaxed);
        self.ended.store(true, Ordering::Relaxed);
    }

    /// The bytes of the recording's files on disk now: each file's in-progress `FILE.part`
    /// while it is being written, else the finished file.
    fn recording_bytes(files: &[PathBuf]) -> u64 {
        files
            .iter()
            .map(|f| {
                std::fs::metadata(journal_path(f))
                    .or_else(|_| std::fs::metadata(f))
                    .map_or(0, |m| m.len())
            })
            .sum()
    }
}

impl Collector for ViewerMetrics {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (host_step, step) = (get(&self.host_step), get(&self.step));
        gauge(
            &mut e,
            "ostm_viewer_host_step",
            "The latest host step the viewer has heard of",
            host_step,
        )?;
        gauge(
            &mut e,
            "ostm_viewer_step",
            "The step of the viewer's world: its last verified step, or the snapshot it continues from",
            step,
        )?;
        counter(
            &mut e,
            "ostm_viewer_verified_steps",
            "Steps whose hash the viewer reproduced and compared with the host's",
            get(&self.verified),
        )?;
        gauge(
            &mut e,
            "ostm_viewer_lag_steps",
            "Steps the viewer's world is behind the latest host step it has heard of",
            host_step.saturating_sub(step),
        )?;
        gauge(
            &mut e,
            "ostm_viewer_backlog_records",
            "Records received and waiting for the verifier, in memory and on disk",
            get(&self.backlog),
        )?;
        counter(
            &mut e,
            "ostm_viewer_resyncs",
            "Times the host resynced the viewer from a fresh snapshot, over steps it never verified",
            get(&self.resyncs),
        )?;
        counter(
            &mut e,
            "ostm_viewer_gaps",
            "Stretches of steps the viewer never saw: lost connections made again, steps that never came on NATS",
            get(&self.gaps),
        )?;
        counter(
            &mut e,
            "ostm_viewer_unverified_steps",
            "Steps never verified, over resyncs and gaps",
            get(&self.unverified),
        )?;
        counter(
            &mut e,
            "ostm_viewer_reconnects",
            "Connections made again after one was lost (--reconnect)",
            get(&self.reconnects),
        )?;
        counter(
            &mut e,
            "ostm_viewer_drifts",
            "Drifts found: a step whose hash differs from the host's (the session ends at the first)",
            get(&self.drifts),
        )?;
        gauge(
            &mut e,
            "ostm_viewer_connected",
            "1 while the viewer is connected to its host or NATS server, else 0",
            u64::from(self.connected.load(Ordering::Relaxed)),
        )?;
        gauge(
            &mut e,
            "ostm_viewer_ended",
            "1 once the session has ended (drift, the host's end, a failure, the steps asked for), else 0",
            u64::from(self.ended.load(Ordering::Relaxed)),
        )?;
        if let Some(files) = &self.files {
            let files = files.lock().unwrap_or_else(PoisonError::into_inner).clone();
            gauge(
                &mut e,
                "ostm_viewer_recording_files",
                "Files the recording (--record) has started: one, and one more per resync, reconnection or gap",
                files.len() as u64,
            )?;
            gauge(
                &mut e,
                "ostm_viewer_recording_bytes",
                "Bytes of the recording's files on disk",
                Self::recording_bytes(&files),
            )?;
        }
        Ok(())
    }
}

/// `--metrics` of a live command: the metrics and their endpoint while it is served, or
/// nothing without `--metrics`.
#[derive(Debug, Default)]
pub struct Metrics {
    served: Option<(Arc<ViewerMetrics>, Endpoint)>,
    record: Option<PathBuf>,
}

impl Metrics {
    /// Binds `addr` (when given) and serves the metrics of a session with the host `host`
    /// recording to `record` there, on a thread of its own, until dropped.
    ///
    /// # Errors
    /// The address cannot be bound (nothing has been announced yet).
    pub fn start(
        addr: Option<SocketAddr>,
        host: &str,
        record: Option<&Path>,
    ) -> Result<Metrics, String> {
        let Some(addr) = addr else {
            return Ok(Metrics::default());
        };
        let metrics = Arc::new(ViewerMetrics::new(record));
        let mut registry = Registry::default();
        registry.register(
            "ostm_viewer",
            "The viewer's version and the host it verifies (its address, or nats://HOST:PORT/NAME)",
            Info::new(vec![
                ("version".to_string(), env!("CARGO_PKG_VERSION").to_string()),
                ("addr".to_string(), host.to_string()),
            ]),
        );
        registry.register_collector(Box::new(metrics.clone()));
        let endpoint = Endpoint::start(addr, registry)?;
        Ok(Metrics {
            served: Some((metrics, endpoint)),
            record: record.map(Path::to_path_buf),
        })
    }

    /// The address served, with `--metrics`.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.served.as_ref().map(|(_, e)| e.addr())
    }

    /// Takes in one of the session's events.
    pub fn on(&self, ev: &Event<'_>) {
        if let Some((m, _)) = &self.served {
            m.on(ev, self.record.as_deref());
        }
    }

    /// Takes in the session's end.
    pub fn ended(&self, out: &Outcome) {
        if let Some((m, _)) = &self.served {
            m.ended(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ViewerMetrics;
    use crate::live::session::{Event, Gap};
    use prometheus_client::registry::Registry;
    use std::sync::Arc;

    fn exposition(m: &Arc<ViewerMetrics>) -> String {
        let mut r = Registry::default();
        r.register_collector(Box::new(m.clone()));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        out
    }

    fn value(text: &str, name: &str) -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name}: {text}"))
    }

    fn gap(from: u64, to: u64, behind: bool) -> Gap {
        Gap {
            from,
            to,
            why: "test".into(),
            behind,
            world: None,
        }
    }

    #[test]
    fn unverified_steps_count_every_resync_and_gap_whose_size_is_known() {
        let m = Arc::new(ViewerMetrics::new(None));
        m.on(
            &Event::Resync {
                from: 10,
                to: 50,
                file: None,
            },
            None,
        );
        m.on(&Event::Lost { step: 60, why: "x" }, None);
        assert_eq!(value(&exposition(&m), "ostm_viewer_connected"), 0);
        m.on(
            &Event::Reconnected {
                gap: &gap(60, 75, false),
                file: None,
            },
            None,
        );
        // A host that came back behind the viewer: how much was missed is not known.
        m.on(
            &Event::Reconnected {
                gap: &gap(90, 5, true),
                file: None,
            },
            None,
        );
        m.on(
            &Event::Gap {
                gap: &gap(100, 103, false),
                file: None,
            },
            None,
        );
        let text = exposition(&m);
        assert_eq!(
            value(&text, "ostm_viewer_unverified_steps_total"),
            40 + 15 + 3
        );
        assert_eq!(value(&text, "ostm_viewer_resyncs_total"), 1);
        assert_eq!(value(&text, "ostm_viewer_reconnects_total"), 2);
        assert_eq!(value(&text, "ostm_viewer_gaps_total"), 3);
        assert_eq!(value(&text, "ostm_viewer_connected"), 1);
        // Without --record, no recording metric.
        assert!(!text.contains("recording"), "{text}");
    }

    #[test]
    fn the_recording_s_files_are_counted_and_measured_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("s.ostm");
        let m = Arc::new(ViewerMetrics::new(Some(&base)));
        let world = ostm_protocol::World::new(
            ostm_protocol::Setup {
                dims: ostm_protocol::Dims::Two,
                bodies: 1,
                seed: 1,
            },
            None,
        );
        let welcome = ostm_protocol::wire::Welcome {
            version: 1,
            role: 2,
            rate: 0,
            heartbeat_ms: 1000,
            ring: 1,
            queue: 1,
        };
        m.on(
            &Event::Attached {
                welcome: &welcome,
                world: &world,
            },
            Some(&base),
        );
        // The first file in progress (FILE.part), the second finished.
        std::fs::write(
            ostm_protocol::format::recording::journal_path(&base),
            [0; 100],
        )
        .unwrap();
        let next = super::numbered(&base, 1);
        std::fs::write(&next, [0; 20]).unwrap();
        m.on(
            &Event::Resync {
                from: 0,
                to: 9,
                file: Some(&next),
            },
            Some(&base),
        );
        let text = exposition(&m);
        assert_eq!(value(&text, "ostm_viewer_recording_files"), 2);
        assert_eq!(value(&text, "ostm_viewer_recording_bytes"), 120);
    }
}
