//! Argument types several commands share: the live session's (`attach`, `watch`, the
//! terminal view), how the viewer reaches a host (`attach`, `check`), and where a failure
//! bundle goes (`verify`, `attach`, `check`).

use crate::live::bundle::BundleTo;
use crate::live::network::Dial;
use crate::live::session::{self, NatsOptions, Options, RecordTo, SpoolOptions, VerifierOptions};
use crate::live::spool as spooling;
use crate::live::tls::TlsArgs;
use crate::metrics::Metrics;
use ostm_protocol::session::Goal;
use ostm_protocol::Dims;
use ostm_runtime::cli::{NatsAuthArgs, RecordArgs, TokenArgs};
use ostm_runtime::DEFAULT_PORT;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Arguments of `attach`, which `watch` takes too and the terminal view (`--tui`) runs.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  # Join a running host at whatever step it is at (late join) and follow it until Ctrl-C
  ostm-viewer attach 127.0.0.1:7878
  # Verify 6000 steps from now, recording them; then check the file offline
  ostm-viewer attach 127.0.0.1:7878 --steps 6000 --record session.ostm
  ostm-viewer verify session.ostm
  # Stop when the host's world reaches step 20000; JSON lines for a script
  ostm-viewer attach 127.0.0.1:7878 --until 20000 --json
  # A host on a non-loopback address requires its token, and serves TLS
  OSTM_TOKEN=... ostm-viewer attach sim.example.org:7878 --tls
  ostm-viewer attach 10.0.0.5:7878 --token-file ~/.ostm-token --tls-ca ca.pem --tls-name sim
  # A session on a NATS cluster: through any of its servers, failing over to the others
  ostm-viewer attach nats://127.0.0.1:4222,127.0.0.1:4223,127.0.0.1:4224/demo --record demo.ostm
  # A linked world: the link line names the role; print both fields at steps 300 and 450
  ostm-viewer attach 127.0.0.1:7878 --fields-at 300,450 --until 450
  # Watch the session in the terminal (also over SSH); q or Ctrl-C stops, on drift the
  # report stays with the body marked until q; the lines and verdict follow
  ostm-viewer attach 127.0.0.1:7878 --tui --record session.ostm
  # Keep verifying across restarts, with Prometheus metrics on http://127.0.0.1:9465/metrics
  ostm-viewer attach 127.0.0.1:7878 --reconnect --metrics 9465

Output: with --metrics, first `ostm-viewer metrics on http://ADDR/metrics`; then
`attached to ADDR at step S (...)`, a `link: ...` line when the world has a link
block, then a status line `host step H | verified N | lag L | R steps/s` (rewritten in
place on a terminal, once a second otherwise; lag = the host step last heard of minus the
viewer's verified step; `| resyncs R` once there was one), `resync: ...` lines (at most
one a second, counting the others; --json prints every resync), a `resyncs: R (...)`
summary, `recorded FILE (...)` per file (and `recorded steps A to B only: ...` when the
recording stopped before the viewer did), and a last
`ok: ...`, `stopped: ...`, drift report, or `error: ...` (on stderr).
With --tui the session is drawn on the terminal (stderr) instead: the world, the status,
a strip of recent steps (█ verified, ░ not seen, ▓ drift), the event lines, and on drift
the report; once the terminal is restored the lines above follow (no status lines), with
the same exit code.
A recording continues in SESSION.1.ostm, SESSION.2.ostm, ... after each resync.
On drift a failure bundle is written (docs/bundle-format.md): --bundle PATH, else beside
the recording (SESSION.drift-STEP.ostmb), else drift-STEP.ostmb in the current directory,
never over an existing file (then drift-STEP-2.ostmb, ...: the line names the file);
`ostm-viewer replay BUNDLE` reproduces it.

Exit codes:
  0  stopped as asked (--steps, --until, Ctrl-C or SIGTERM), or the host ended the stream cleanly
  1  drift: the report names the step, body, field and stage where host and viewer part
  2  a connection or protocol failure, a refusal (token, version, host full), the host
     ending with an error, or a recording that could not be written")]
pub struct AttachArgs {
    /// The host's address, HOST[:PORT] (port 7878 when none is given), or
    /// nats://HOST:PORT/NAME for a session on NATS JetStream (several servers of a cluster
    /// joined by commas before /NAME: nats://HOST:PORT,HOST:PORT/NAME).
    pub addr: String,
    /// Stop after verifying this many steps.
    #[arg(long)]
    pub steps: Option<u64>,
    /// Stop once the viewer's world reaches this step.
    #[arg(long)]
    pub until: Option<u64>,
    #[command(flatten)]
    pub recording: RecordArgs,
    /// Keep going across a lost connection or a restarted host: reconnect (waits 0.25 s,
    /// doubling to at most 5 s between attempts), join at the host's step, continue in
    /// the next numbered file; each gap is reported.
    #[arg(long)]
    pub reconnect: bool,
    /// With --reconnect: give up after this many seconds without a connection.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 300,
        requires = "reconnect"
    )]
    pub reconnect_for: u64,
    #[command(flatten)]
    pub host: HostArgs,
    /// Print events and the result as JSON objects, one per line, for scripts.
    #[arg(long)]
    pub json: bool,
    /// Compute both fields (density, occupancy; docs/test-module.md) of every step's world;
    /// the status line shows the largest value of each.
    #[arg(long)]
    pub fields: bool,
    /// Print both fields when the viewer's world reaches STEP, as `ostm-viewer fields FILE
    /// --step STEP` prints them (the address in place of the file). Repeat or separate by
    /// commas; implies --fields.
    #[arg(long, value_name = "STEP", value_delimiter = ',')]
    pub fields_at: Vec<u64>,
    #[command(flatten)]
    pub bundle: BundleArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// Run verification this many nice steps below reading the socket (0: the same), so
    /// that reading comes first and records wait on disk rather than the host resyncing
    /// the viewer; on a machine busy with other work, a lower value verifies sooner.
    #[arg(long, value_name = "N", default_value_t = session::VERIFIER_NICENESS, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub verifier_nice: i32,
    /// Where records received and not yet verified spill beyond the 8 MiB held in memory:
    /// an unlinked file (no `ls` or `du` shows it) in DIR. Default: the recording's
    /// directory, else the system's temporary directory ($TMPDIR, else /tmp).
    #[arg(long, value_name = "DIR")]
    pub spool_dir: Option<PathBuf>,
    /// The most that file may take (K, M, G, T: powers of 1024, e.g. 512M). When a record
    /// would pass it, the viewer drops the connection, verifies what it holds, and joins
    /// the host again at its step, as after a lost connection: the steps between are a
    /// gap, reported and counted, and a recording continues in the next numbered file.
    /// On NATS it drops records until it has verified what it holds and the stream's next
    /// keyframe comes: the same gap.
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = spooling::parse_size)]
    pub spool_max: u64,
    /// Test only: hold at most this many bytes of records in memory (8M by default).
    #[arg(long, hide = true, value_name = "SIZE", value_parser = spooling::parse_size)]
    pub spool_memory: Option<u64>,
    /// Draw the session in the terminal instead of printing lines: the world (2D from the
    /// side, 3D from above), the status, a strip of recent steps (verified, not seen,
    /// drift) and, on drift, the report with the body marked until q. q or Ctrl-C stops;
    /// the lines, the verdict and the exit code follow once the terminal is restored.
    #[arg(long, conflicts_with = "json")]
    pub tui: bool,
    /// Test only: with --tui, panic once the first picture is drawn.
    #[arg(long, hide = true, requires = "tui")]
    pub tui_panic: bool,
    /// Test only: verify at most this many steps per second.
    #[arg(long, hide = true)]
    pub throttle: Option<u32>,
    /// Test only: read at most this many records per second, with a small receive buffer.
    #[arg(long, hide = true)]
    pub throttle_read: Option<u32>,
}

impl AttachArgs {
    /// The session `attach` asks for (`watch` and `--tui` run the same one).
    ///
    /// # Errors
    /// The token or TLS options cannot be used with the address.
    pub fn session_options(&mut self) -> Result<Options, String> {
        let mut host = self.host.connect(&mut self.addr)?;
        host.dial.reconnect = self
            .reconnect
            .then(|| Duration::from_secs(self.reconnect_for));
        host.dial.throttle_read = self.throttle_read;
        if let Some(path) = &self.recording.record {
            ostm_protocol::format::recording::check_target(path, self.recording.force)?;
        }
        if let Some(dir) = self.spool_dir.as_ref().filter(|d| !d.is_dir()) {
            return Err(format!(
                "--spool-dir {}: expected a directory that exists",
                dir.display()
            ));
        }
        Ok(Options {
            goal: Goal {
                steps: self.steps,
                until: self.until,
            },
            record: self.recording.record.clone().map(|path| RecordTo {
                path,
                force: self.recording.force,
                durability: self.recording.durability(),
            }),
            verifier: VerifierOptions {
                nice: self.verifier_nice,
                throttle: self.throttle,
                fields: self.fields,
                fields_at: self.fields_at.iter().copied().collect(),
            },
            spool: SpoolOptions {
                dir: self.spool_dir.clone(),
                limits: spooling::Limits {
                    memory: self.spool_memory.map_or(spooling::MEMORY_BYTES, |m| {
                        usize::try_from(m).unwrap_or(usize::MAX)
                    }),
                    disk: self.spool_max,
                },
            },
            ..host
        })
    }
}

/// `--metrics ADDR` of the live commands (`attach`, `watch`, `check`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at http://ADDR/metrics while the session runs (a port
    /// alone: 127.0.0.1:PORT; port 0 picks a free one, printed as `ostm-viewer metrics on
    /// http://ADDR/metrics`). docs/metrics.md lists them.
    #[arg(long, value_name = "ADDR", value_parser = ostm_runtime::metrics::parse_addr)]
    pub metrics: Option<SocketAddr>,
}

impl MetricsArgs {
    /// Binds the endpoint, when asked for, for a session with `host` recording to
    /// `record`.
    ///
    /// # Errors
    /// The address cannot be bound.
    pub fn start(&self, host: &str, record: Option<&Path>) -> Result<Metrics, String> {
        Metrics::start(self.metrics, host, record)
    }
}

/// How the viewer reaches a host: its token and TLS (shared by `attach` and `check`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct HostArgs {
    /// The host's shared secret, if it requires one (also from OSTM_TOKEN).
    #[command(flatten)]
    pub token: TokenArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub nats: NatsAuthArgs,
    /// On NATS (ADDR nats://HOST:PORT/NAME): start from the keyframe at or before this
    /// step, not the latest (rewind a live session, as far as the stream still holds).
    #[arg(long, value_name = "STEP")]
    pub from_step: Option<u64>,
}

/// `ADDR` with the default port when it names none (`localhost` gives `localhost:7878`,
/// `[::1]` gives `[::1]:7878`); a `nats://` address as it is.
pub fn with_default_port(addr: &str) -> String {
    if addr.starts_with("nats://") {
        return addr.to_string();
    }
    let bare_v6 = addr.starts_with('[') && addr.ends_with(']');
    if bare_v6 || !addr.contains(':') {
        format!("{addr}:{DEFAULT_PORT}")
    } else {
        addr.to_string()
    }
}

impl HostArgs {
    /// The session options that say which host and how to reach it, shared by `attach`
    /// and `check`: `addr` given its default port, the token and TLS (checked before
    /// connecting), NATS's authentication and start step; the rest as by default.
    ///
    /// # Errors
    /// A token too long or unreadable, or a TLS set-up that cannot be built.
    pub fn connect(&self, addr: &mut String) -> Result<Options, String> {
        *addr = with_default_port(addr);
        crate::live::nats::check_address(addr, self.from_step)?;
        Ok(Options {
            dial: Dial {
                addr: addr.clone(),
                token: self.token.resolve()?,
                tls: self.tls.build(addr)?,
                reconnect: None,
                throttle_read: None,
            },
            nats: NatsOptions {
                auth: self.nats.clone(),
                from_step: self.from_step,
            },
            verifier: VerifierOptions {
                nice: session::VERIFIER_NICENESS,
                ..VerifierOptions::default()
            },
            ..Options::default()
        })
    }
}

/// Where a failure bundle goes: `--bundle PATH` or `--no-bundle`. Shared by every command
/// that writes one (`verify`, `attach`, `check`); each states its default in its help.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BundleArgs {
    /// Where to write the failure bundle (default: see below).
    #[arg(long, conflicts_with = "no_bundle")]
    pub bundle: Option<PathBuf>,
    /// Write no failure bundle.
    #[arg(long)]
    pub no_bundle: bool,
}

impl BundleArgs {
    /// Where to write: `--bundle` (named), else `default()` (a name the viewer picks, which
    /// replaces nothing); `None` with `--no-bundle`.
    pub fn target(&self, default: impl FnOnce() -> PathBuf) -> Option<BundleTo> {
        if self.no_bundle {
            return None;
        }
        Some(match &self.bundle {
            Some(p) => BundleTo::Named(p.clone()),
            None => BundleTo::Picked(default()),
        })
    }
}

/// Parses an offset `X,Y` or `X,Y,Z` (millimetres); a 2D world allows no Z but 0.
pub fn parse_offset(text: &str, dims: Dims) -> Result<[i32; 3], String> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    if parts.len() < 2 || parts.len() > 3 {
        return Err(format!(
            "expected an offset X,Y or X,Y,Z in millimetres, found {text:?}"
        ));
    }
    let mut out = [0i32; 3];
    for (o, p) in out.iter_mut().zip(&parts) {
        *o = p.parse().map_err(|_| {
            format!("expected an offset X,Y or X,Y,Z of 32-bit integers, found {text:?}")
        })?;
    }
    if dims == Dims::Two && out[2] != 0 {
        return Err(format!(
            "a 2D world takes an offset X,Y (or X,Y,0), found {text:?}"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{parse_offset, with_default_port};
    use ostm_protocol::Dims;

    #[test]
    fn an_address_without_a_port_gets_7878() {
        assert_eq!(with_default_port("localhost"), "localhost:7878");
        assert_eq!(with_default_port("127.0.0.1"), "127.0.0.1:7878");
        assert_eq!(with_default_port("[::1]"), "[::1]:7878");
        assert_eq!(with_default_port("[::1]:9"), "[::1]:9");
        assert_eq!(with_default_port("h:1"), "h:1");
        assert_eq!(with_default_port("nats://h:4222/x"), "nats://h:4222/x");
    }

    #[test]
    fn offsets_parse_in_two_and_three_dimensions() {
        assert_eq!(parse_offset("400,0", Dims::Two), Ok([400, 0, 0]));
        assert_eq!(parse_offset("400, -3,0", Dims::Two), Ok([400, -3, 0]));
        assert_eq!(parse_offset("1,2,3", Dims::Three), Ok([1, 2, 3]));
        assert_eq!(parse_offset("1,2", Dims::Three), Ok([1, 2, 0]));
        assert!(parse_offset("1,2,3", Dims::Two).is_err());
        assert!(parse_offset("1", Dims::Two).is_err());
        assert!(parse_offset("1,2,3,4", Dims::Three).is_err());
        assert!(parse_offset("1,x", Dims::Two).is_err());
        assert!(parse_offset("3000000000,0", Dims::Two).is_err());
    }
}
