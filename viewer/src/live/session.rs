//! One live session: connect, hello, welcome, snapshot, then verify every record by step
//! number until asked to stop, the host ends the stream, drift, or a failure.

use super::drift::{on_drift, DriftReport, Evidence};
use super::record::{Recording, Written};
use futures::{SinkExt, StreamExt};
use ostm_protocol::fields::{self, Fields};
use ostm_protocol::op::for_each_op;
use ostm_protocol::wire::{
    End, Hello, PeerRole, Record, SnapshotKind, ToHost, ToViewer, ViewerCodec, Welcome, WireError,
    HEARTBEAT_MS, SILENCE_TIMEOUT_MS, VERSION,
};
use ostm_protocol::{Op, World};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_util::codec::Framed;
use tracing::debug;

/// How long to wait for the TCP connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for the host's answer to a drift request.
pub const DRIFT_REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// What the session is asked to do.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `HOST:PORT`.
    pub addr: String,
    pub token: Option<String>,
    /// Stop after verifying this many steps.
    pub steps: Option<u64>,
    /// Stop once the viewer's world reaches this step.
    pub until: Option<u64>,
    /// Record to this file.
    pub record: Option<PathBuf>,
    /// Test only: verify at most this many steps per second, with a small receive buffer,
    /// so that the viewer falls behind a fast host.
    pub throttle: Option<u32>,
    /// Compute both fields ([`fields::compute`]) of every world the viewer reaches.
    pub fields: bool,
    /// Report the fields ([`Event::Fields`]) when the viewer's world is at these steps.
    /// Implies `fields`.
    pub fields_at: BTreeSet<u64>,
}

impl Options {
    fn computes_fields(&self) -> bool {
        self.fields || !self.fields_at.is_empty()
    }
}

/// Why the session stopped.
#[derive(Debug)]
pub enum Stop {
    /// `--steps` or `--until` was reached.
    Asked,
    /// Ctrl-C.
    Interrupted,
    /// The host sent an end message.
    HostEnded(End),
    /// The first mismatch, explained.
    Drift(Box<DriftReport>),
    /// A connection or protocol failure.
    Failed(String),
}

/// What the session did.
#[derive(Debug)]
pub struct Outcome {
    pub stop: Stop,
    /// The step the viewer attached at (the first snapshot's), if it got that far.
    pub attached_at: Option<u64>,
    /// The step of the viewer's world at the end.
    pub step: u64,
    /// Steps verified.
    pub verified: u64,
    pub resyncs: u64,
    /// Recording files written, in order.
    pub files: Vec<Written>,
    /// A recording failure, if finishing the files failed.
    pub record_error: Option<String>,
    /// The latest host step the viewer heard of (see [`Status::host_step`]).
    pub host_step: u64,
    /// Steps of `fields_at` whose fields were not reported, with why.
    pub fields_missed: Vec<(u64, String)>,
}

/// Progress, for the status line.
#[derive(Debug, Clone, Copy)]
pub struct Status {
    /// The latest host step the viewer has heard of: from the heartbeat the host sends
    /// ahead of records when it is past them (its step at the moment it wrote them), from
    /// heartbeats, records and snapshots.
    pub host_step: u64,
    pub step: u64,
    pub verified: u64,
    /// Resyncs so far.
    pub resyncs: u64,
    /// Verified steps per second since attaching.
    pub rate: f64,
    /// With `fields`: the largest density (units of 1 / [`fields::DENSITY_ONE`] body) and
    /// the largest occupancy of the viewer's world now.
    pub fields: Option<(u32, u32)>,
}

impl Status {
    /// Steps the viewer is behind the host: the latest host step it has heard of minus
    /// the step of its own (verified) world.
    pub fn lag(&self) -> u64 {
        self.host_step.saturating_sub(self.step)
    }
}

/// What the session tells its caller as it goes.
pub enum Event<'a> {
    Attached {
        welcome: &'a Welcome,
        world: &'a World,
    },
    Resync {
        from: u64,
        to: u64,
        file: Option<&'a PathBuf>,
    },
    Status(Status),
    /// The fields of the viewer's world at a step asked for with `fields_at` (a world
    /// whose hash verified, or the attach or resync snapshot's world).
    Fields {
        world: &'a World,
        fields: &'a Fields,
    },
}

type Conn = Framed<TcpStream, ViewerCodec>;

struct State {
    world: World,
    verified: u64,
    host_step: u64,
    resyncs: u64,
    recording: Option<Recording>,
    started: Instant,
    /// The fields of `world`, when asked to compute them.
    fields: Option<Fields>,
    /// Steps of `fields_at` not reported yet.
    fields_due: BTreeSet<u64>,
    fields_missed: Vec<(u64, String)>,
}

impl State {
    /// The world changed (a verified step, or a snapshot): computes its fields when asked,
    /// reports them at a step asked for, and counts asked-for steps now behind the world
    /// as missed (`why`: what went past them; a verified step never does).
    fn reached(&mut self, opts: &Options, why: &str, events: &mut impl FnMut(Event<'_>)) {
        if !opts.computes_fields() {
            return;
        }
        let f = fields::compute(&self.world);
        let step = self.world.step;
        while let Some(&due) = self.fields_due.first().filter(|&&d| d < step) {
            self.fields_due.remove(&due);
            self.fields_missed.push((due, why.to_string()));
        }
        if self.fields_due.remove(&step) {
            events(Event::Fields {
                world: &self.world,
                fields: &f,
            });
        }
        self.fields = Some(f);
    }
}

/// Runs a session; `events` sees progress; `interrupt` completing stops it (Ctrl-C).
pub async fn run(
    opts: &Options,
    mut events: impl FnMut(Event<'_>),
    interrupt: impl std::future::Future<Output = ()>,
) -> Outcome {
    let mut out = Outcome {
        stop: Stop::Asked,
        attached_at: None,
        step: 0,
        verified: 0,
        resyncs: 0,
        files: Vec::new(),
        record_error: None,
        host_step: 0,
        fields_missed: Vec::new(),
    };
    let (mut conn, welcome, world) = match connect(opts).await {
        Ok(c) => c,
        Err(stop) => {
            out.stop = stop;
            return out;
        }
    };
    out.attached_at = Some(world.step);
    events(Event::Attached {
        welcome: &welcome,
        world: &world,
    });
    let recording = match &opts.record {
        Some(path) => match Recording::start(path, &world) {
            Ok(r) => Some(r),
            Err(e) => {
                out.stop = Stop::Failed(format!("cannot record to {}: {e}", path.display()));
                return out;
            }
        },
        None => None,
    };
    let mut st = State {
        host_step: world.step,
        world,
        verified: 0,
        resyncs: 0,
        recording,
        started: Instant::now(),
        fields: None,
        fields_due: opts.fields_at.clone(),
        fields_missed: Vec::new(),
    };
    let why = format!("the viewer attached at step {}, after it", st.world.step);
    st.reached(opts, &why, &mut events);
    let stop = if opts.steps == Some(0) || opts.until.is_some_and(|u| st.world.step >= u) {
        Stop::Asked
    } else {
        verify_loop(&mut conn, opts, &mut st, &mut events, interrupt).await
    };
    out.stop = stop;
    out.step = st.world.step;
    out.verified = st.verified;
    out.resyncs = st.resyncs;
    out.host_step = st.host_step;
    out.fields_missed = std::mem::take(&mut st.fields_missed);
    let end = st.world.step;
    out.fields_missed.extend(
        st.fields_due
            .iter()
            .map(|&s| (s, format!("not reached: the viewer stopped at step {end}"))),
    );
    if let Some(r) = st.recording {
        match r.finish() {
            Ok(files) => out.files = files,
            Err(e) => out.record_error = Some(format!("cannot finish the recording: {e}")),
        }
    }
    // Close our side; the host's end message (if any) has been read.
    let _ = SinkExt::<ToHost>::close(&mut conn).await;
    out
}

async fn connect(opts: &Options) -> Result<(Conn, Welcome, World), Stop> {
    let fail = |s: String| Stop::Failed(s);
    let stream = match timeout(CONNECT_TIMEOUT, open(&opts.addr, opts.throttle.is_some())).await {
        Err(_) => return Err(fail(format!("cannot connect to {}: timed out", opts.addr))),
        Ok(Err(e)) => return Err(fail(format!("cannot connect to {}: {e}", opts.addr))),
        Ok(Ok(s)) => s,
    };
    let _ = stream.set_nodelay(true);
    let mut conn = Framed::new(stream, ViewerCodec::new(opts.addr.clone()));
    let hello = Hello {
        version: VERSION,
        role: PeerRole::Viewer as u8,
        token: opts.token.clone().unwrap_or_default().into_bytes(),
    };
    if let Err(e) = conn.send(ToHost::Hello(hello)).await {
        return Err(fail(format!("cannot send the hello to {}: {e}", opts.addr)));
    }
    let welcome = match next(&mut conn).await? {
        ToViewer::Welcome(w) => w,
        ToViewer::End(e) => {
            return Err(fail(format!(
                "the host refused the viewer ({}): {}",
                e.reason.name(),
                e.text
            )))
        }
        other => {
            return Err(fail(format!(
                "expected the host's welcome, found {}",
                name(&other)
            )))
        }
    };
    if welcome.version != VERSION {
        return Err(fail(format!(
            "the host speaks protocol version {}, this viewer speaks {VERSION}",
            welcome.version
        )));
    }
    match next(&mut conn).await? {
        ToViewer::Snapshot {
            kind: SnapshotKind::Attach,
            world,
        } => Ok((conn, welcome, world)),
        ToViewer::End(e) => Err(fail(format!(
            "the host ended the stream before its snapshot ({}): {}",
            e.reason.name(),
            e.text
        ))),
        other => Err(fail(format!(
            "expected the host's snapshot, found {}",
            name(&other)
        ))),
    }
}

/// Connects; `small_buffer` asks for a 4 KiB receive buffer (test throttling only).
async fn open(addr: &str, small_buffer: bool) -> std::io::Result<TcpStream> {
    if !small_buffer {
        return TcpStream::connect(addr).await;
    }
    let mut last = std::io::Error::other(format!("{addr} resolves to no address"));
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_recv_buffer_size(4096)?;
        match socket.connect(a).await {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// How long the viewer waits for anything from the host.
const SILENCE: Duration = Duration::from_millis(SILENCE_TIMEOUT_MS as u64);

/// The next message, with the silence timeout; a closed connection or a bad frame is a failure.
async fn next(conn: &mut Conn) -> Result<ToViewer, Stop> {
    next_by(conn, tokio::time::Instant::now() + SILENCE).await
}

/// The next message, failing if none has come by `deadline`.
async fn next_by(conn: &mut Conn, deadline: tokio::time::Instant) -> Result<ToViewer, Stop> {
    match tokio::time::timeout_at(deadline, conn.next()).await {
        Err(_) => Err(Stop::Failed(format!(
            "the host sent nothing for {SILENCE_TIMEOUT_MS} ms"
        ))),
        Ok(None) => Err(Stop::Failed(
            "the host closed the connection without an end message".into(),
        )),
        Ok(Some(Err(WireError::Format(e)))) => Err(Stop::Failed(format!("protocol error: {e}"))),
        Ok(Some(Err(WireError::Io(e)))) => Err(Stop::Failed(format!("connection lost: {e}"))),
        Ok(Some(Ok(m))) => Ok(m),
    }
}

fn name(m: &ToViewer) -> &'static str {
    match m {
        ToViewer::Welcome(_) => "a welcome",
        ToViewer::Snapshot { .. } => "a snapshot",
        ToViewer::Record(_) => "a record",
        ToViewer::Heartbeat { .. } => "a heartbeat",
        ToViewer::End(_) => "an end message",
        ToViewer::DriftReply(_) => "a drift reply",
    }
}

/// How often the status is reported.
const STATUS_EVERY: Duration = Duration::from_millis(250);

async fn verify_loop(
    conn: &mut Conn,
    opts: &Options,
    st: &mut State,
    events: &mut impl FnMut(Event<'_>),
    interrupt: impl std::future::Future<Output = ()>,
) -> Stop {
    tokio::pin!(interrupt);
    // The viewer's own heartbeat interval is fixed; the welcome's is only for information.
    let heartbeat = Duration::from_millis(HEARTBEAT_MS as u64);
    let mut next_heartbeat = tokio::time::Instant::now() + heartbeat;
    let mut next_status = Instant::now() + STATUS_EVERY;
    let mut ops: Vec<Op> = Vec::new();
    // Heartbeats we send do not count: only what the host sends keeps the session alive.
    let mut silent_at = tokio::time::Instant::now() + SILENCE;
    loop {
        let msg = tokio::select! {
            biased;
            _ = &mut interrupt => return Stop::Interrupted,
            _ = tokio::time::sleep_until(next_heartbeat) => {
                next_heartbeat = tokio::time::Instant::now() + heartbeat;
                if let Err(e) = conn.send(ToHost::Heartbeat { viewer_step: st.world.step }).await {
                    return Stop::Failed(format!("connection lost: {e}"));
                }
                continue;
            }
            m = next_by(conn, silent_at) => match m {
                Ok(m) => m,
                Err(stop) => return stop,
            },
        };
        silent_at = tokio::time::Instant::now() + SILENCE;
        match msg {
            ToViewer::Record(r) => {
                if r.step != st.world.step {
                    return Stop::Failed(format!(
                        "protocol error: a record for step {}, expected step {}",
                        r.step, st.world.step
                    ));
                }
                // A hostile host may send step u64::MAX: no overflow.
                st.host_step = st.host_step.max(r.step.saturating_add(1));
                ops.clear();
                // The codec checked the input when it decoded the record.
                let _ = for_each_op("record", &r.input, 0, |op| ops.push(op));
                let before = st.world.clone();
                st.world.step(&ops);
                let hash = st.world.hash();
                if hash != r.hash {
                    return Stop::Drift(Box::new(drift(conn, st, before, &r, hash).await));
                }
                st.verified += 1;
                st.reached(opts, "", events);
                if let Some(per_second) = opts.throttle {
                    let due = st.started
                        + Duration::from_secs_f64(st.verified as f64 / per_second.max(1) as f64);
                    tokio::time::sleep_until(due.into()).await;
                }
                if let Some(rec) = st.recording.as_mut() {
                    if let Err(e) = rec.push(&r.input, hash) {
                        return Stop::Failed(format!("cannot write the recording: {e}"));
                    }
                }
                if opts.steps.is_some_and(|n| st.verified >= n)
                    || opts.until.is_some_and(|u| st.world.step >= u)
                {
                    return Stop::Asked;
                }
            }
            ToViewer::Snapshot {
                kind: SnapshotKind::Resync,
                world,
            } => {
                let from = st.world.step;
                debug!(from, to = world.step, "resync");
                if world.setup() != st.world.setup() || world.link() != st.world.link() {
                    return Stop::Failed(
                        "protocol error: a resync snapshot of another world".into(),
                    );
                }
                st.resyncs += 1;
                st.host_step = st.host_step.max(world.step);
                st.world = world;
                let file = match st.recording.as_mut().map(|r| r.resync(&st.world)) {
                    Some(Err(e)) => {
                        return Stop::Failed(format!(
                            "cannot continue the recording after a resync: {e}"
                        ))
                    }
                    Some(Ok(p)) => Some(p),
                    None => None,
                };
                events(Event::Resync {
                    from,
                    to: st.world.step,
                    file: file.as_ref(),
                });
                let why = format!(
                    "a resync took the viewer from step {from} to step {} over it",
                    st.world.step
                );
                st.reached(opts, &why, events);
                if opts.until.is_some_and(|u| st.world.step >= u) {
                    return Stop::Asked;
                }
            }
            ToViewer::Heartbeat { host_step } => st.host_step = st.host_step.max(host_step),
            ToViewer::End(e) => return Stop::HostEnded(e),
            ToViewer::DriftReply(_) => debug!("a drift reply nobody asked for; ignored"),
            other => {
                return Stop::Failed(format!(
                    "protocol error: {} in the middle of the stream",
                    name(&other)
                ))
            }
        }
        if Instant::now() >= next_status {
            next_status = Instant::now() + STATUS_EVERY;
            events(Event::Status(status(st)));
        }
    }
}

/// The current progress.
fn status(st: &State) -> Status {
    let secs = st.started.elapsed().as_secs_f64();
    Status {
        host_step: st.host_step,
        step: st.world.step,
        verified: st.verified,
        resyncs: st.resyncs,
        rate: if secs > 0.0 {
            st.verified as f64 / secs
        } else {
            0.0
        },
        fields: st
            .fields
            .as_ref()
            .map(|f| (f.max_density(), f.max_occupancy())),
    }
}

/// Asks the host for its snapshot at the drifting step, then hands the evidence to
/// [`on_drift`].
async fn drift(conn: &mut Conn, st: &State, before: World, r: &Record, hash: u64) -> DriftReport {
    let step = st.world.step;
    let mut reply = None;
    if conn.send(ToHost::DriftRequest { step }).await.is_ok() {
        let wait = async {
            loop {
                match next(conn).await {
                    Ok(ToViewer::DriftReply(d)) if d.step == step => return Some(d),
                    Ok(ToViewer::End(_)) | Err(_) => return None,
                    Ok(_) => continue,
                }
            }
        };
        reply = timeout(DRIFT_REPLY_TIMEOUT, wait).await.ok().flatten();
    }
    on_drift(&Evidence {
        step,
        host_hash: r.hash,
        viewer_hash: hash,
        viewer_before: before,
        viewer_after: st.world.clone(),
        input: r.input.to_vec(),
        reply,
    })
}
