//! `ostm-host serve`: binds, prints the bound address as its first stdout line, steps the
//! world on its own thread, accepts viewers, prints a status line every interval, and
//! ends every viewer's stream with a reason when the steps are done or on Ctrl-C.

use crate::conn::{self, ConnConfig};
use crate::fan_out::FanOut;
use crate::hub::{Hub, Limits};
use crate::pending::Pending;
use crate::source::{Source, DEFAULT_SETUP};
use crate::stepper::{self, DriftAt, Plan, Stopped};
use ostm_protocol::format::recording::check_target;
use ostm_protocol::sim::world::MAX_BODIES;
use ostm_protocol::wire::{End, PeerRole, Welcome, HEARTBEAT_MS, SILENCE_TIMEOUT_MS, VERSION};
use ostm_protocol::{Dims, Setup};
use ostm_runtime::cli::{NatsAuthArgs, RecordArgs, TokenArgs};
use ostm_runtime::DEFAULT_PORT;
use std::future::Future;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// Default cap on connected viewers.
pub const DEFAULT_MAX_VIEWERS: usize = 256;
/// Default cap on connections waiting for their hello.
pub const DEFAULT_MAX_WAITING: usize = 1024;
/// Default cap on connections waiting for their hello from one address.
pub const DEFAULT_MAX_WAITING_PER_ADDRESS: usize = 256;
/// Default records a viewer may be behind before it is resynced (the length of the host's
/// one shared record ring): 65 536 / rate seconds of slack (at `--rate max` tens of
/// milliseconds, enough for a viewer on a busy machine that is descheduled for a few time
/// slices; at 60 steps/s far more than the stall timeout). Slots are allocated only as the
/// ring fills.
pub const DEFAULT_QUEUE: u32 = 65_536;
/// Default recent worlds held for drift requests.
pub const DEFAULT_RING: u32 = 512;
/// How long the host waits, once the stream has ended, for connections to deliver what
/// is queued and their end message (or the stall timeout, if shorter).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// The name of the stepping loop's thread.
pub const STEPPER_THREAD: &str = "ostm-stepper";
/// Default stall timeout in milliseconds.
pub const DEFAULT_STALL_MS: u64 = 10_000;

/// Arguments of `serve`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  # The embedded world (3D, 24 bodies, seed 10000) at 60 steps/s on 127.0.0.1:7878
  ostm-host serve
  # A free port (printed on the first line), as fast as it can, 100000 steps
  ostm-host serve --listen 127.0.0.1:0 --rate max --steps 100000
  # A generated world of your own
  ostm-host serve --dims 2 --bodies 8 --seed 42
  # Serve a replay: its inputs from its start world; the hashes streamed are its rows
  ostm-host serve --replay testdata/test-10000.ostm
  # A linked world: viewers see its role and can compute its fields
  ostm-host serve --replay testdata/test-link-left.ostm --rate 30
  # Continue a keyframe's world (with a replay: from the keyframe's step in that replay)
  ostm-host serve --from-keyframe k5000.json
  ostm-host serve --replay testdata/test-10000.ostm --from-keyframe k5000.json
  # Record the host's own session
  ostm-host serve --steps 36000 --record host.ostm
  # Hold the world at its start step until two viewers have attached
  ostm-host serve --wait-for-viewers 2 --steps 600
  # Any non-loopback address needs a token (from OSTM_TOKEN or --token-file; never
  # logged) and TLS (viewers pass --tls or --tls-ca CA.pem)
  OSTM_TOKEN=... ostm-host serve --listen 0.0.0.0:7878 --tls-cert host.pem --tls-key host.key
  ostm-host serve --listen 0.0.0.0:7878 --token-file /etc/ostm/token --allow-plaintext
  # Prometheus metrics on http://127.0.0.1:9464/metrics (docs/metrics.md)
  ostm-host serve --metrics 9464
  # Fire a drift on purpose at step 600 (to test alerts: docs/metrics.md)
  ostm-host serve --metrics 9464 --drift-at 600
  # Publish to NATS JetStream too (docs/fan-out.md); on a 3-server cluster, through any of
  # them, the stream kept on all three
  ostm-host serve --publish nats://127.0.0.1:4222 --session demo
  ostm-host serve --publish nats://127.0.0.1:4222,127.0.0.1:4223,127.0.0.1:4224 --session demo --replicas 3
  # Viewers join at any step: ostm-viewer attach ADDR, ostm-viewer check ADDR --steps N

The first line on stdout is `ostm-host listening on ADDR` (the bound address, so port 0
picks a free one). Then a status line every --status-ms, and a last `end:` line
(--json: one object per line, events listening, status, end).

Exit codes:
  0  the stream ended cleanly: --steps done, the replay's last step served, or Ctrl-C or SIGTERM
  2  bad arguments (a non-loopback address without a token or TLS, a token over 255 bytes, an unreadable replay), the
     address cannot be bound, or the host failed (e.g. its recording could not be written)")]
pub struct Args {
    /// Address to listen on, HOST:PORT (a name such as localhost is resolved; its first
    /// address is used); port 0 picks a free port. Any address other than loopback
    /// requires a token and TLS.
    #[arg(long, default_value_t = SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)), value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// Steps per second, or `max` to step as fast as the host can.
    #[arg(long, default_value = "60", value_parser = parse_rate)]
    pub rate: Rate,
    /// Stop after this many steps (the stream ends with reason `finished`).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Dimensions of a generated world (2 or 3; default 3).
    #[arg(long, value_parser = clap::value_parser!(u8).range(2..=3), conflicts_with = "replay")]
    pub dims: Option<u8>,
    /// Initial bodies of a generated world (1..=64; default 24).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=MAX_BODIES as i64), conflicts_with = "replay")]
    pub bodies: Option<u8>,
    /// Seed of a generated world and its inputs (default 10000).
    #[arg(long, conflicts_with = "replay")]
    pub seed: Option<u32>,
    /// Play this replay's inputs (from its start snapshot when it has one) instead of a
    /// generated world; the stream ends after its last step.
    #[arg(long)]
    pub replay: Option<PathBuf>,
    /// Start from this keyframe (molen/keyframe@1, docs/keyframe.md): its world, setup
    /// and link are the host's. With --replay, that file's inputs run on from the
    /// keyframe's tick; without, the scenario of the keyframe's seed does.
    #[arg(long, conflicts_with_all = ["dims", "bodies", "seed"])]
    pub from_keyframe: Option<PathBuf>,
    /// Record the host's own session (--record FILE: hash rows; the start snapshot when
    /// the world did not start at step 0).
    #[command(flatten)]
    pub recording: RecordArgs,
    /// The shared secret viewers must send (required on a non-loopback address; also from
    /// the OSTM_TOKEN environment variable). Never logged.
    #[command(flatten)]
    pub token: TokenArgs,
    /// Serve TLS with this certificate chain (PEM); needs --tls-key. SIGHUP reads both
    /// files again (renewal without a restart).
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// On a non-loopback address, serve without TLS anyway (the token and every record
    /// cross the network in the clear).
    #[arg(long)]
    pub allow_plaintext: bool,
    /// Most connections waiting for their hello at once (apart from --max-viewers); the
    /// oldest waiting one is closed to make room for a new one.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_WAITING)]
    pub max_waiting: usize,
    #[command(flatten)]
    pub nats: NatsArgs,
    /// Most connections waiting for their hello from one IP address.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_WAITING_PER_ADDRESS)]
    pub max_waiting_per_address: usize,
    /// Most viewers connected at once; more are refused with reason `full`.
    #[arg(long, default_value_t = DEFAULT_MAX_VIEWERS)]
    pub max_viewers: usize,
    /// Records a viewer may be behind the host (the host holds the last this many, shared by
    /// every viewer); a viewer further behind is resynced from a fresh snapshot.
    #[arg(long, default_value_t = DEFAULT_QUEUE, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub viewer_queue: u32,
    /// Recent worlds kept to answer drift requests.
    #[arg(long, default_value_t = DEFAULT_RING, value_parser = clap::value_parser!(u32).range(2..=100_000))]
    pub ring: u32,
    /// Drop a viewer when a write to it makes no progress for this many milliseconds.
    #[arg(long, default_value_t = DEFAULT_STALL_MS)]
    pub stall_ms: u64,
    /// Milliseconds between status lines on stdout (0: none, only the last line).
    #[arg(long, default_value_t = 1000)]
    pub status_ms: u64,
    /// Take no step until N viewers have attached (they all attach at the start step and
    /// see every step from there; for demos and tests). 0 starts stepping at once.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub wait_for_viewers: u64,
    /// Serve Prometheus metrics at http://ADDR/metrics (a port alone: 127.0.0.1:PORT; port
    /// 0 picks a free one, printed on the line after the first). docs/metrics.md lists
    /// them.
    #[arg(long, value_name = "ADDR", value_parser = ostm_runtime::metrics::parse_addr)]
    pub metrics: Option<SocketAddr>,
    /// Print the address, status and end lines as JSON objects, one per line.
    #[arg(long)]
    pub json: bool,
    /// Cause a drift on purpose, to test alerts and viewers: right after the step that
    /// brings the world to STEP, add 1 to body BODY's velocity.y with no record saying so
    /// (without BODY, or when BODY is not alive then, the first live body from BODY on);
    /// a warning in the log names the step and the body. Every viewer reports a drift at
    /// STEP (docs/metrics.md, "Testing the alerts").
    #[arg(long, value_name = "STEP[:BODY]", value_parser = parse_drift_at, alias = "perturb", help_heading = "Testing")]
    pub drift_at: Option<DriftAt>,
    /// Benchmark only: write `step unix-nanoseconds` lines for every --stamp-every'th step
    /// to FILE.
    #[arg(long, hide = true)]
    pub stamps: Option<PathBuf>,
    /// Benchmark only: steps between two lines of --stamps.
    #[arg(long, hide = true, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub stamp_every: u64,
    /// Test only, a planted fault: give the record ring no practical bound (so it grows
    /// with every step and a viewer that never reads is never resynced). The memory test
    /// shows its measurement catches this.
    #[arg(long, hide = true)]
    pub unbounded_queue_for_tests: bool,
}

/// The ring length `--unbounded-queue-for-tests` sets: far more records than any test
/// runs, so the bound never acts.
pub const UNBOUNDED_QUEUE_FOR_TESTS: usize = 1 << 40;

/// Steps per second, or as fast as possible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    PerSecond(u32),
    Max,
}

/// `HOST:PORT` with HOST an address or a name (`localhost:7878`), resolved once.
fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    use std::net::ToSocketAddrs;
    let mut addrs = s
        .to_socket_addrs()
        .map_err(|e| format!("expected HOST:PORT, found `{s}`: {e}"))?;
    addrs
        .next()
        .ok_or_else(|| format!("`{s}` resolves to no address"))
}

fn parse_rate(s: &str) -> Result<Rate, String> {
    if s == "max" {
        return Ok(Rate::Max);
    }
    match s.parse::<u32>() {
        Ok(n) if n > 0 => Ok(Rate::PerSecond(n)),
        _ => Err(format!(
            "expected a positive number of steps per second or `max`, found `{s}`"
        )),
    }
}

/// `STEP[:BODY]` of `--drift-at`.
fn parse_drift_at(s: &str) -> Result<DriftAt, String> {
    let (a, b) = match s.split_once(':') {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    };
    let step = a
        .parse()
        .map_err(|_| format!("expected STEP[:BODY] with STEP a step number, found `{s}`"))?;
    let body = b
        .map(|b| {
            b.parse().map_err(|_| {
                format!("expected STEP[:BODY] with BODY a body index 0..=255, found `{s}`")
            })
        })
        .transpose()?;
    Ok(DriftAt { step, body })
}

/// Publishing to NATS JetStream (docs/fan-out.md).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct NatsArgs {
    /// Also publish the stream to this NATS server (nats://HOST:PORT), on the subjects of
    /// --session; TCP viewers are served as before. Several servers of a cluster joined by
    /// commas (nats://HOST:PORT,HOST:PORT): the client takes one and fails over to the
    /// others.
    #[arg(long, value_name = "URL", requires = "session")]
    pub publish: Option<String>,
    /// The stream's replicas, 1 to 5 (a cluster of at least N servers). A stream of that
    /// name that exists with other replicas is used as it is.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "publish", value_parser = clap::value_parser!(u8).range(1..=5))]
    pub replicas: u8,
    /// The session's name on NATS: 1..=64 of A-Z a-z 0-9 _ -.
    #[arg(long, value_name = "NAME", requires = "publish")]
    pub session: Option<String>,
    /// A keyframe every K steps (default: one a second at the host's rate; 100000 at
    /// --rate max).
    #[arg(long, value_name = "K")]
    pub keyframe_every: Option<u64>,
    /// Keep the stream's messages this many seconds (at least 1; the stream's duplicate
    /// window is 120 s, or this when shorter).
    #[arg(long, value_name = "SECONDS", default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..))]
    pub retention_age: u64,
    /// Keep at most this many bytes of the stream (the oldest go first). The server sets
    /// this much of its JetStream storage aside for the stream [default: 64 MiB,
    /// 67108864].
    #[arg(long, value_name = "BYTES", default_value_t = crate::publish::DEFAULT_RETENTION_BYTES, hide_default_value = true, value_parser = clap::value_parser!(i64).range(1..))]
    pub retention_bytes: i64,
    #[command(flatten)]
    pub auth: NatsAuthArgs,
}

impl NatsArgs {
    /// The publisher's options, or `None` without --publish.
    ///
    /// # Errors
    /// A bad session name or keyframe interval.
    pub fn options(&self, rate: u32) -> Result<Option<crate::publish::Options>, String> {
        let (Some(url), Some(session)) = (&self.publish, &self.session) else {
            return Ok(None);
        };
        let servers = ostm_protocol::wire::nats::Servers::parse(url).ok_or_else(|| {
            format!(
                "--publish: {}",
                ostm_protocol::wire::nats::servers_expected(url)
            )
        })?;
        let session = ostm_protocol::wire::nats::Session::new(session)
            .map_err(|e| format!("--session: {e}"))?;
        let every =
            self.keyframe_every
                .unwrap_or(if rate == 0 { 100_000 } else { u64::from(rate) });
        if every == 0 {
            return Err("--keyframe-every must be at least 1".into());
        }
        Ok(Some(crate::publish::Options {
            url: servers.to_string(),
            servers,
            replicas: usize::from(self.replicas),
            session,
            keyframe_every: every,
            rate,
            max_age: Duration::from_secs(self.retention_age.max(1)),
            max_bytes: self.retention_bytes.max(1),
            auth: self.auth.clone(),
        }))
    }
}

/// Runs `serve` on a runtime of its own; Ctrl-C stops it cleanly.
pub fn main(args: Args) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    rt.block_on(async {
        let shutdown = ostm_runtime::signal::stop_signal();
        match run(args, shutdown).await {
            Ok(end) if end.reason.is_clean() => ExitCode::SUCCESS,
            Ok(_) => ExitCode::from(2),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        }
    })
}

/// Steps per second between two status lines.
struct StepMeter {
    at: std::time::Instant,
    step: u64,
}

impl StepMeter {
    fn new(step: u64) -> StepMeter {
        StepMeter {
            at: std::time::Instant::now(),
            step,
        }
    }

    fn rate(&mut self, step: u64) -> f64 {
        let secs = self.at.elapsed().as_secs_f64();
        let r = if secs > 0.0 {
            step.saturating_sub(self.step) as f64 / secs
        } else {
            0.0
        };
        *self = StepMeter::new(step);
        r
    }
}

/// A status line: on a terminal (not --json) rewritten in place, else one line each.
fn say_status(json: bool, plain: String, obj: serde_json::Value, last: bool) {
    if !json && std::io::stdout().is_terminal() {
        let mut out = std::io::stdout().lock();
        let _ = if last {
            writeln!(out, "\r\x1b[2K{plain}")
        } else {
            write!(out, "\r\x1b[2K{plain}")
        };
        let _ = out.flush();
    } else {
        say(json, plain, obj);
    }
}

fn say(json: bool, plain: String, obj: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = if json {
        writeln!(out, "{obj}")
    } else {
        writeln!(out, "{plain}")
    };
    let _ = out.flush();
}

/// Serves until the stream ends; `shutdown` completing stops the host cleanly: the
/// arguments checked, NATS prepared and the address bound before anything is announced,
/// then the hub, its fan-out, the stepping thread and the metrics started, viewers
/// accepted until the stream ends, and what is queued delivered within bounds.
///
/// # Errors
/// Bad arguments (a non-loopback address without a token, an unreadable replay) or a
/// failure to bind.
pub async fn run(args: Args, shutdown: impl Future<Output = ()>) -> Result<End, String> {
    let (token, tls) = access(&args)?;
    // With TLS, SIGHUP reloads the certificate and key (watched before the address is
    // announced, so a SIGHUP from then on never ends the host).
    let hangup = match &tls {
        Some(_) => Some(crate::tls::hangup()?),
        None => None,
    };
    let source = source(&args)?;
    let rate = match args.rate {
        Rate::PerSecond(n) => Some(n),
        Rate::Max => None,
    };
    // NATS before announcing anything: a bad session name, or a server that answers and
    // refuses the stream, stops the host here.
    let nats = match args.nats.options(rate.unwrap_or(0))? {
        Some(o) => {
            let counters = Arc::new(crate::publish::Counters::new(&o));
            let prepared = crate::publish::prepare(&o, &counters).await?;
            Some((o, counters, prepared))
        }
        None => None,
    };
    let listener =
        listen(args.listen).map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let metrics_listener = match args.metrics {
        Some(a) => Some(ostm_runtime::metrics::bind(a).await?),
        None => None,
    };
    announce(&args, &listener, metrics_listener.as_ref(), &source)?;

    let hub = Arc::new(Hub::new(source.world().clone(), limits(&args)));
    let tls_stop = CancellationToken::new();
    let _stop_tls = tls_stop.clone().drop_guard();
    if let (Some(tls), Some(hangup)) = (&tls, hangup) {
        crate::tls::spawn_upkeep(tls.identity.clone(), hangup, tls_stop);
    }
    let cfg = Arc::new(conn_config(&args, token, tls, rate));
    let cancel = CancellationToken::new();
    let nats_stop = CancellationToken::new();
    let (feed, publisher, nats) = match nats {
        Some((o, counters, prepared)) => {
            info!(url = %o.url, session = %o.session.name(), "publishing to NATS");
            let (feed, task) = crate::publish::start(
                o,
                counters.clone(),
                prepared,
                hub.clone(),
                nats_stop.clone(),
            );
            (Some(feed), Some(task), Some(counters))
        }
        None => (None, None, None),
    };
    // Write each publish to the caught-up connections (each task its share) and wake the
    // others.
    let fan_out = Arc::new(FanOut::new());
    let fan_outs: Vec<_> = (0..crate::hub::FAN_OUTS)
        .map(|part| {
            let (hub, fan_out) = (hub.clone(), fan_out.clone());
            tokio::spawn(async move { fan_out.run(&hub, part).await })
        })
        .collect();
    let labels = world_labels(source.world());
    let stepping = start_stepping(&hub, source, plan(&args, rate), feed, &cancel)?;
    let waiting = Pending::new(args.max_waiting, args.max_waiting_per_address);
    let metrics_stop = CancellationToken::new();
    if let Some(l) = metrics_listener {
        serve_metrics(l, labels, &hub, &waiting, nats.clone(), rate, &metrics_stop);
    }
    let _stop_metrics = metrics_stop.drop_guard();
    let serving = Serving {
        hub,
        fan_out,
        cfg,
        slots: Arc::new(Semaphore::new(args.max_viewers)),
        waiting,
        nats,
        json: args.json,
        status_ms: args.status_ms,
    };
    let mut conns = JoinSet::new();
    let end = serving
        .accept_until_end(listener, stepping, shutdown, cancel, &mut conns)
        .await;
    serving
        .close(end, fan_outs, conns, publisher, nats_stop)
        .await
}

/// The token viewers must send and the TLS acceptor, once the rules for a non-loopback
/// address are met; `--record`'s target is checked here too.
fn access(args: &Args) -> Result<(Option<String>, Option<crate::tls::HostTls>), String> {
    let token = args.token.resolve()?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => Some(crate::tls::acceptor(c, k)?),
        _ => None,
    };
    if !args.listen.ip().is_loopback() {
        if token.is_none() {
            return Err(format!(
                "--listen {} is not a loopback address: a token is required (--token-file, OSTM_TOKEN or --token)",
                args.listen
            ));
        }
        if tls.is_none() && !args.allow_plaintext {
            return Err(format!(
                "--listen {} is not a loopback address: TLS is required (--tls-cert and --tls-key), or --allow-plaintext to send the token and records in the clear",
                args.listen
            ));
        }
    }
    if let Some(path) = &args.recording.record {
        check_target(path, args.recording.force)?;
    }
    Ok((token, tls))
}

/// The world served: a keyframe's, a replay's, or a generated one.
fn source(args: &Args) -> Result<Source, String> {
    Ok(match (&args.from_keyframe, &args.replay) {
        (Some(k), replay) => Source::from_keyframe(k, replay.as_deref())?,
        (None, Some(path)) => Source::replay(path).map_err(|e| e.to_string())?,
        (None, None) => {
            let dims = match args.dims.unwrap_or(3) {
                2 => Dims::Two,
                _ => Dims::Three,
            };
            Source::generated(Setup {
                dims,
                bodies: args.bodies.unwrap_or(DEFAULT_SETUP.bodies),
                seed: args.seed.unwrap_or(DEFAULT_SETUP.seed),
            })
        }
    })
}

/// Prints the bound address first (and the metrics address), and logs the world served.
fn announce(
    args: &Args,
    listener: &TcpListener,
    metrics: Option<&TcpListener>,
    source: &Source,
) -> Result<(), String> {
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    say(
        args.json,
        format!("ostm-host listening on {addr}"),
        serde_json::json!({"event": "listening", "addr": addr.to_string()}),
    );
    if let Some(l) = metrics {
        let at = l.local_addr().map_err(|e| e.to_string())?;
        say(
            args.json,
            format!("ostm-host metrics on http://{at}/metrics"),
            serde_json::json!({"event": "metrics", "addr": at.to_string()}),
        );
    }
    let w = source.world();
    info!(%addr, step = w.step, dims = w.dims() as u8, bodies = w.bodies.len(), seed = w.setup().seed, "serving");
    Ok(())
}

/// The hub's record ring and drift ring.
fn limits(args: &Args) -> Limits {
    Limits {
        queue: if args.unbounded_queue_for_tests {
            warn!("the record ring is unbounded (test only)");
            UNBOUNDED_QUEUE_FOR_TESTS
        } else {
            args.viewer_queue as usize
        },
        ring: args.ring as usize,
    }
}

/// What every connection is held to, and the welcome it gets.
fn conn_config(
    args: &Args,
    token: Option<String>,
    tls: Option<crate::tls::HostTls>,
    rate: Option<u32>,
) -> ConnConfig {
    ConnConfig {
        token,
        tls,
        stall: Duration::from_millis(args.stall_ms.max(1)),
        silence: Duration::from_millis(SILENCE_TIMEOUT_MS as u64),
        heartbeat: Duration::from_millis(HEARTBEAT_MS as u64),
        welcome: Welcome {
            version: VERSION,
            role: PeerRole::Host as u8,
            rate: rate.unwrap_or(0),
            heartbeat_ms: HEARTBEAT_MS,
            ring: args.ring,
            queue: args.viewer_queue,
        },
        delivery_over: CancellationToken::new(),
    }
}

/// What the stepping loop does.
fn plan(args: &Args, rate: Option<u32>) -> Plan {
    Plan {
        rate,
        steps: args.steps,
        drift_at: args.drift_at,
        record: args.recording.record.clone(),
        durability: args.recording.durability(),
        wait_for_viewers: args.wait_for_viewers,
        stamps: args.stamps.clone(),
        stamp_every: args.stamp_every,
    }
}

/// Starts the stepping loop on a thread of its own, named so that its CPU time can be
/// told apart from the connections' (top -H, /proc/PID/task/*/comm); the receiver gets
/// how the stream ended.
fn start_stepping(
    hub: &Arc<Hub>,
    source: Source,
    plan: Plan,
    feed: Option<crate::publish::Feed>,
    cancel: &CancellationToken,
) -> Result<tokio::sync::oneshot::Receiver<End>, String> {
    let (hub, cancel) = (hub.clone(), cancel.clone());
    let (done, stepped) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(STEPPER_THREAD.into())
        .spawn(move || {
            let _ = done.send(stepper::run(hub, source, plan, feed, cancel));
        })
        .map_err(|e| format!("cannot start the stepping loop: {e}"))?;
    Ok(stepped)
}

/// The labels of the world served, on every metric.
fn world_labels(w: &ostm_protocol::World) -> Vec<(String, String)> {
    vec![
        ("dims".to_string(), (w.dims() as u8).to_string()),
        ("bodies".to_string(), w.bodies.len().to_string()),
        ("seed".to_string(), w.setup().seed.to_string()),
    ]
}

/// Serves the host's metrics on `listener` until `stop`.
fn serve_metrics(
    listener: TcpListener,
    world_labels: Vec<(String, String)>,
    hub: &Arc<Hub>,
    waiting: &Arc<Pending>,
    nats: Option<Arc<crate::publish::Counters>>,
    rate: Option<u32>,
    stop: &CancellationToken,
) {
    let metrics = Arc::new(crate::metrics::HostMetrics {
        hub: hub.clone(),
        waiting: waiting.clone(),
        nats,
        target_rate: rate.unwrap_or(0),
        rate: Default::default(),
    });
    let registry = Arc::new(metrics.registry(world_labels));
    tokio::spawn(metrics.meter(stop.clone()));
    tokio::spawn(ostm_runtime::metrics::serve(
        listener,
        registry,
        stop.clone(),
    ));
}

/// What the accept loop and the close share.
struct Serving {
    hub: Arc<Hub>,
    fan_out: Arc<FanOut>,
    cfg: Arc<ConnConfig>,
    slots: Arc<Semaphore>,
    waiting: Arc<Pending>,
    nats: Option<Arc<crate::publish::Counters>>,
    json: bool,
    status_ms: u64,
}

impl Serving {
    /// Accepts viewers and prints a status line every `status_ms` until the stepping loop
    /// ends the stream (`shutdown` cancels it first); returns how it ended.
    async fn accept_until_end(
        &self,
        listener: TcpListener,
        mut stepping: tokio::sync::oneshot::Receiver<End>,
        shutdown: impl Future<Output = ()>,
        cancel: CancellationToken,
        conns: &mut JoinSet<()>,
    ) -> End {
        let hub = &self.hub;
        let mut status = tokio::time::interval(Duration::from_millis(self.status_ms.max(1)));
        let mut meter = StepMeter::new(hub.step());
        status.tick().await;
        tokio::pin!(shutdown);
        let mut stopping = false;
        loop {
            tokio::select! {
                done = &mut stepping => {
                    break done.unwrap_or_else(|_| Stopped::Failed.end(hub.step()));
                }
                _ = &mut shutdown, if !stopping => {
                    info!("stopping");
                    stopping = true;
                    cancel.cancel();
                }
                acc = listener.accept() => match acc {
                    Ok((stream, peer)) => {
                        let (place, shed) = self.waiting.admit(peer.ip());
                        if shed > 0 {
                            hub.counters.shed.fetch_add(shed, Ordering::Relaxed);
                        }
                        conns.spawn(conn::serve(stream, peer, hub.clone(), self.fan_out.clone(), self.cfg.clone(), place, self.slots.clone()));
                    }
                    Err(e) => {
                        warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                _ = status.tick(), if self.status_ms > 0 => {
                    let rate = meter.rate(hub.step());
                    print_status(hub, self.json, None, self.waiting.len(), self.nats.as_deref(), Some(rate));
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
    }

    /// After the stream has ended: each fan-out makes its last round (the last records, a
    /// wake for every parked connection of its share), every connection gets a bounded
    /// time to deliver its queue and end message, the NATS publisher to deliver the end;
    /// then the last status line.
    async fn close(
        self,
        end: End,
        fan_outs: Vec<tokio::task::JoinHandle<()>>,
        mut conns: JoinSet<()>,
        publisher: Option<tokio::task::JoinHandle<()>>,
        nats_stop: CancellationToken,
    ) -> Result<End, String> {
        if tokio::time::timeout(SHUTDOWN_GRACE, futures::future::join_all(fan_outs))
            .await
            .is_err()
        {
            warn!("the fan-out did not finish");
        }
        // The time to deliver, then the lingering of those that have sent their end.
        let wait = self.cfg.stall.min(SHUTDOWN_GRACE);
        if tokio::time::timeout(wait, all_closed(&mut conns))
            .await
            .is_err()
        {
            self.cfg.delivery_over.cancel();
            if tokio::time::timeout(conn::LINGER_MAX, all_closed(&mut conns))
                .await
                .is_err()
            {
                warn!(left = conns.len(), "connections still open at exit");
                conns.abort_all();
            }
        }
        if let Some(mut task) = publisher {
            // The end published and not acknowledged yet is repeated until it is, for a
            // bounded time the publisher keeps itself (docs/fan-out.md, "The end").
            let finished = tokio::time::timeout(SHUTDOWN_GRACE, &mut task)
                .await
                .is_ok()
                || (self.nats.as_ref().is_some_and(|n| n.is_repeating_end())
                    && tokio::time::timeout(crate::publish::END_WAIT_MAX, &mut task)
                        .await
                        .is_ok());
            if !finished {
                warn!("the NATS publisher did not finish in time");
                nats_stop.cancel();
            }
        }
        log_end(&self.hub, &end);
        print_status(
            &self.hub,
            self.json,
            Some(&end),
            self.waiting.len(),
            self.nats.as_deref(),
            None,
        );
        Ok(end)
    }
}

/// Waits for every connection to finish.
async fn all_closed(conns: &mut JoinSet<()>) {
    while conns.join_next().await.is_some() {}
}

/// The log line of the stream's end (docs/protocol.md, the host's log): `info` when it
/// ended cleanly (`finished`, `shutdown`), `error` otherwise.
fn log_end(hub: &Hub, end: &End) {
    let (reason, text, step) = (end.reason.name(), end.text.as_str(), end.host_step);
    let steps = step.saturating_sub(hub.start_step());
    let viewers = hub.counters.viewers_total.load(Ordering::Relaxed);
    if end.reason.is_clean() {
        info!(
            reason,
            text, step, steps, viewers, "the stream ended: {reason}: {text}"
        );
    } else {
        error!(
            reason,
            text, step, steps, viewers, "the stream ended: {reason}: {text}"
        );
    }
}

/// The kernel send buffer each viewer's socket asks for, in bytes (set on the listening
/// socket, which accepted sockets inherit). Kept small so that a viewer's backlog waits in
/// its queue, where the host counts it (lag, resync), rather than in the kernel.
pub const SEND_BUFFER: u32 = 16 * 1024;

/// Binds and listens on `addr` with [`SEND_BUFFER`].
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_send_buffer_size(SEND_BUFFER)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

fn print_status(
    hub: &Hub,
    json: bool,
    end: Option<&End>,
    waiting: usize,
    nats: Option<&crate::publish::Counters>,
    rate: Option<f64>,
) {
    let c = &hub.counters;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let step = end.map_or_else(|| hub.step(), |e| e.host_step);
    let mut body = format!(
        "step {step} viewers {} waiting {waiting} total {} resyncs {} stalled {} refused {} shed {} protocol-errors {} drift-requests {} queue-max {}/{}",
        get(&c.viewers),
        get(&c.viewers_total),
        get(&c.resyncs),
        get(&c.stalled),
        get(&c.refused),
        get(&c.shed),
        get(&c.protocol_errors),
        get(&c.drift_requests),
        get(&c.queue_max),
        hub.limits.queue,
    );
    if c.recording.load(Ordering::Relaxed) {
        body.push_str(&format!(" recorded {}", get(&c.recorded)));
    }
    if let Some(r) = rate {
        body.push_str(&format!(" rate {r:.0}/s"));
    }
    let nats_state = nats.map(|n| (n.state(), n.counts()));
    if let Some((state, n)) = &nats_state {
        body.push_str(&format!(
            " nats {} published {} dropped {} failed {}",
            match state {
                crate::publish::State::Up => "up",
                crate::publish::State::Down => "down",
                crate::publish::State::Refused(_) => "refused",
            },
            n.published,
            n.dropped,
            n.failed
        ));
    }
    let mut obj = serde_json::json!({
        "event": if end.is_some() { "end" } else { "status" },
        "step": step,
        "viewers": get(&c.viewers),
        "viewers_total": get(&c.viewers_total),
        "resyncs": get(&c.resyncs),
        "stalled": get(&c.stalled),
        "refused": get(&c.refused),
        "shed": get(&c.shed),
        "waiting": waiting,
        "protocol_errors": get(&c.protocol_errors),
        "drift_requests": get(&c.drift_requests),
        "queue_max": get(&c.queue_max),
        "queue_cap": hub.limits.queue,
        "recorded": get(&c.recorded),
    });
    if let Some(r) = rate {
        obj["rate"] = ((r * 10.0).round() / 10.0).into();
    }
    if let Some((state, n)) = &nats_state {
        obj["nats_connected"] = (*state == crate::publish::State::Up).into();
        obj["nats_error"] = match state {
            crate::publish::State::Refused(why) => why.clone().into(),
            _ => serde_json::Value::Null,
        };
        obj["nats_published"] = n.published.into();
        obj["nats_dropped"] = n.dropped.into();
        obj["nats_failed"] = n.failed.into();
    }
    let plain = match end {
        Some(e) => {
            obj["reason"] = e.reason.name().into();
            obj["text"] = e.text.clone().into();
            format!("end: {} ({}): {body}", e.reason.name(), e.text)
        }
        None => body,
    };
    say_status(json, plain, obj, end.is_some());
}
