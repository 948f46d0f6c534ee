//! A TCP viewer, end to end through the real machines: on the host, one real
//! [`Conn`] per connection, driven as `ostm-host`'s connection task drives it (its
//! requests answered from the host's real rings, its writes handed to the socket, its
//! timers on the simulated clock); a simulated network of bytes between them; on the
//! viewer, the real TCP reader [`Reader`] (handshake deadlines, silence, heartbeats,
//! reconnection schedule and budget, runs of whole records), driven as the viewer's reader
//! thread drives it, whose arrivals go through a spool into the real verifier by
//! [`Arrival::give`], as the viewer's session does.
//!
//! The network: each connection carries bytes both ways after the link's latency, in
//! order. What the host writes goes into a socket buffer of [`SOCKET`] bytes (sent, on
//! the wire and unread together): a write the buffer has no room for is taken in part,
//! and the rest waits, so a viewer that does not read makes the host's write stall (and
//! the host drop it after its stall timeout) or fall behind its queue (a resync). A
//! stalled connection holds its bytes both ways; a slow link delivers a few bytes a tick;
//! a cut resets the connection and refuses new ones for a while; a killed host's
//! connections close after what they had sent.

use crate::check;
use crate::viewer::{self, events};
use crate::{Sim, QUEUE, TICK_MS};
use bytes::{Bytes, BytesMut};
use ostm_protocol::reader::tcp::{self, Event as ReaderEvent, Reader, HOST_CLOSED};
use ostm_protocol::reader::Arrival;
use ostm_protocol::serve::conn::{Event, Millis, Request, Take};
use ostm_protocol::serve::{pair, Conn};
use ostm_protocol::session::{Transmit, REPLACED};
use ostm_protocol::sim::op::decode_input;
use ostm_protocol::wire::{DriftReply, EncodedFrame, RecordRef, ToHost, ViewerCodec};
use std::collections::VecDeque;

/// The bytes a connection's socket buffers hold toward the viewer (the host's send
/// buffer, the wire and the viewer's receive buffer together).
pub const SOCKET: usize = 4096;
/// The bytes a slow link delivers a tick.
pub const SLOW: usize = 12;
/// The host's address, as the reader's texts name it.
pub const ADDR: &str = "127.0.0.1:7878";
/// How long the host gives its connections to deliver what they owe after the end
/// (its stall timeout, as `ostm-host`'s shutdown), then how long it lets them linger.
const DELIVERY_MS: u64 = 5_000;
const LINGER_MAX_MS: u64 = ostm_protocol::serve::conn::LINGER_MAX_MS;

/// The host's connections' configuration: `ostm-host`'s defaults (heartbeat 1 s, silence
/// 10 s, stall 5 s) with the simulation's queue.
pub fn config() -> ostm_protocol::serve::Config {
    let mut c = pair::config();
    c.welcome.queue = QUEUE as u32;
    c.welcome.ring = crate::host::RING as u32;
    c
}

fn ms(tick: u64) -> Millis {
    tick * TICK_MS
}

/// A piece of what a connection carries.
enum Seg {
    Data(Bytes),
    /// The sender closed its side after what came before.
    Fin,
    /// The connection was reset.
    Reset,
}

/// A write the host's connection handed out, and how much of it the socket took.
struct Write {
    frames: Vec<EncodedFrame>,
    bytes: Bytes,
    shutdown: bool,
}

/// One TCP connection: the host's machine at one end, the viewer's reader at the other.
struct Wire {
    id: u64,
    /// The host's life that accepted it.
    life: u32,
    /// Ticks each way.
    latency: u64,
    /// The host's side, until the host closes it (or is killed).
    conn: Option<Conn>,
    write: Option<Write>,
    told_over: bool,
    /// Toward the viewer: (arrival tick, piece).
    to_viewer: VecDeque<(u64, Seg)>,
    /// Arrived at the viewer, not read yet.
    arrived: VecDeque<Bytes>,
    arrived_len: usize,
    /// How the host's side ended, once the viewer has met it.
    closed: Option<Seg>,
    /// Toward the host.
    to_host: VecDeque<(u64, Seg)>,
    /// When the host last received bytes on it.
    heard_ms: Millis,
    /// The connection holds its bytes until this tick.
    stall_until: u64,
    /// The viewer's side is open.
    viewer_open: bool,
}

impl Wire {
    /// What is in the socket buffers toward the viewer.
    fn held(&self) -> usize {
        let on_wire: usize = self
            .to_viewer
            .iter()
            .map(|(_, s)| match s {
                Seg::Data(b) => b.len(),
                _ => 0,
            })
            .sum();
        on_wire + self.arrived_len
    }

    fn done(&self) -> bool {
        self.conn.is_none() && !self.viewer_open
    }
}

/// A TCP viewer's connections and reader.
pub struct Link {
    /// The reader, from the viewer's start.
    reader: Option<Reader>,
    wires: Vec<Wire>,
    next_wire: u64,
    /// The connection the reader reads.
    current: Option<u64>,
    /// A connection attempt's outcome and the tick it is known.
    connecting: Option<(u64, Result<u64, String>)>,
    /// The reader's read buffer (one per connection).
    buf: BytesMut,
    /// What the reader delivered and the verifier has not taken yet, with the host's life
    /// it came from.
    spool: VecDeque<(u32, Arrival)>,
    /// Drift replies, or why none comes.
    replies: VecDeque<Result<DriftReply, String>>,
    /// Ticks each way.
    latency: u64,
    /// The reconnection budget (`--reconnect-for`).
    budget_ms: u64,
    /// New connections are refused until this tick (a cut).
    down_until: u64,
    /// When the latest connection's stream ended.
    stream_ended_ms: Option<Millis>,
    /// The latest connection number an attach carried.
    number: u64,
    /// The step the next record on the current connection must carry.
    next_step: Option<u64>,
    /// Connections attached.
    attached: u64,
    /// A fault met the reader before its first attach (its first connection may fail).
    faulted_early: bool,
    /// The reader stopped.
    done: bool,
    /// The reader's latest connection attached.
    streaming: bool,
}

impl Link {
    pub fn new(latency: u64, budget_ms: u64) -> Link {
        Link {
            reader: None,
            wires: Vec::new(),
            next_wire: 0,
            current: None,
            connecting: None,
            buf: BytesMut::new(),
            spool: VecDeque::new(),
            replies: VecDeque::new(),
            latency,
            budget_ms,
            down_until: 0,
            stream_ended_ms: None,
            number: 0,
            next_step: None,
            attached: 0,
            faulted_early: false,
            done: false,
            streaming: false,
        }
    }

    fn wire(&mut self, id: Option<u64>) -> Option<&mut Wire> {
        let id = id?;
        self.wires.iter_mut().find(|w| w.id == id)
    }
}

/// Takes viewer `i`'s link out to work on it beside the run (put back by [`put`]).
fn take(sim: &mut Sim, i: usize) -> Option<Link> {
    sim.links[i].take()
}

fn put(sim: &mut Sim, i: usize, link: Link) {
    sim.links[i] = Some(link);
}

/// Whether the host accepts connections now.
fn host_up(sim: &Sim) -> bool {
    sim.host_down_until.is_none() && !sim.host_gone
}

// ---------------------------------------------------------------------------------------
// The host's side.

/// The host's side of every connection, for a tick: bytes that arrived, the timers, the
/// machine's writes, requests and events; after the end, the time to deliver and the
/// exit.
pub fn host_tick(sim: &mut Sim) {
    if sim.host_gone {
        return;
    }
    let now = sim.now;
    let over = sim
        .end_tick
        .is_some_and(|t| now >= t + DELIVERY_MS / TICK_MS);
    for i in 0..sim.viewers.len() {
        let Some(mut link) = take(sim, i) else {
            continue;
        };
        for w in &mut link.wires {
            host_wire(sim, i, w, over);
        }
        link.wires.retain(|w| !w.done());
        put(sim, i, link);
        if sim.violation.is_some() {
            return;
        }
    }
    // The host exits once every connection has closed after the end, or once the
    // lingering ones have had their time.
    if let Some(t) = sim.end_tick {
        let open = sim
            .links
            .iter()
            .flatten()
            .any(|l| l.wires.iter().any(|w| w.conn.is_some()));
        if !open || now >= t + (DELIVERY_MS + LINGER_MAX_MS) / TICK_MS {
            sim.host_gone = true;
            sim.event("host exits");
            kill(sim);
        }
    }
}

/// The host's side of one connection.
fn host_wire(sim: &mut Sim, i: usize, w: &mut Wire, over: bool) {
    let now = sim.now;
    let Some(mut conn) = w.conn.take() else {
        return;
    };
    // What the viewer sent that has arrived.
    while w.to_host.front().is_some_and(|(t, _)| *t <= now) && now >= w.stall_until {
        match w.to_host.pop_front().map(|(_, s)| s) {
            Some(Seg::Data(b)) => {
                w.heard_ms = ms(now);
                conn.handle_bytes(&b, ms(now));
            }
            Some(Seg::Fin) => conn.handle_eof(ms(now)),
            Some(Seg::Reset) => conn.handle_read_failed(reset()),
            None => {}
        }
    }
    for _ in 0..4 {
        match conn.poll_timeout() {
            Some(at) if at <= ms(now) => conn.handle_timeout(ms(now)),
            _ => break,
        }
        drive(sim, i, w, &mut conn, over);
    }
    drive(sim, i, w, &mut conn, over);
    if conn.is_closed() {
        // The host drops the socket: what it holds goes out, then the close.
        w.write = None;
        w.to_viewer.push_back((now + w.latency, Seg::Fin));
        sim.event(format!("host closes viewer {i}'s connection {}", w.id));
    } else {
        w.conn = Some(conn);
    }
}

/// The connection task's loop (host/src/conn.rs), until the machine waits: its events,
/// its writes into the socket, its requests answered from the host.
fn drive(sim: &mut Sim, i: usize, w: &mut Wire, conn: &mut Conn, over: bool) {
    let now = sim.now;
    for _ in 0..1_000 {
        while let Some(e) = conn.poll_event() {
            host_event(sim, i, w, conn, e);
        }
        if conn.is_closed() {
            return;
        }
        if over && !w.told_over {
            w.told_over = true;
            conn.handle_delivery_over();
            continue;
        }
        if w.write.is_none() {
            if let Some(t) = conn.poll_transmit(ms(now), sim.host.world.step) {
                let mut bytes = BytesMut::new();
                for f in &t.frames {
                    bytes.extend_from_slice(&f.0);
                }
                w.write = Some(Write {
                    frames: t.frames,
                    bytes: bytes.freeze(),
                    shutdown: t.shutdown,
                });
            }
        }
        if w.write.is_some() {
            if !push(sim, w) {
                // The socket has no room: the write waits (its stall timer runs).
                return;
            }
            if let Some(wr) = w.write.take() {
                if wr.shutdown {
                    w.to_viewer.push_back((now + w.latency, Seg::Fin));
                }
                conn.handle_sent(wr.frames, ms(now));
            }
            continue;
        }
        match conn.poll_request() {
            Some(Request::Take { wait }) => {
                let mut position = conn.position();
                let mut out = std::mem::take(conn.take_buffer());
                let take = sim.host.take(&mut position, &mut out);
                *conn.take_buffer() = out;
                let nothing = matches!(take, Take::Nothing);
                conn.handle_take(take, position, sim.host.world.step);
                if nothing && wait {
                    return;
                }
            }
            Some(Request::Join) => {
                let j = sim.host.join(Some(conn.id()));
                conn.handle_join(j);
            }
            Some(Request::Drift(step)) => {
                sim.event(format!(
                    "host answers viewer {i}'s drift request for step {step}"
                ));
                conn.handle_drift_reply(sim.host.drift_reply(step));
            }
            Some(Request::Unacknowledged) => {
                let left = if w.viewer_open { w.held() as u64 } else { 0 };
                conn.handle_unacknowledged(left, ms(now));
            }
            None => return,
        }
    }
    sim.violate(format!(
        "viewer {i}: the host's connection {} never waited (1 000 turns)",
        w.id
    ));
}

/// Moves what the socket takes of the write in progress onto the wire; whether the write
/// was taken whole.
fn push(sim: &Sim, w: &mut Wire) -> bool {
    let room = SOCKET.saturating_sub(w.held());
    let Some(wr) = w.write.as_mut() else {
        return true;
    };
    if !w.viewer_open {
        // The viewer closed: the kernel takes the bytes and drops them.
        wr.bytes.clear();
        return true;
    }
    let n = room.min(wr.bytes.len());
    if n > 0 {
        let at = sim.now + w.latency;
        w.to_viewer.push_back((at, Seg::Data(wr.bytes.split_to(n))));
    }
    wr.bytes.is_empty()
}

/// An event of the host's connection: the admission, and the checks on how a viewer left.
fn host_event(sim: &mut Sim, i: usize, w: &Wire, conn: &mut Conn, e: Event) {
    match e {
        Event::Accepted => match sim.host.join(None) {
            Some(j) => conn.handle_join(Some(j)),
            None => conn.handle_stream_over(sim.host.ended.clone()),
        },
        Event::Attached { id, step } => sim.event(format!(
            "host attaches viewer {i} (connection {}, id {id}) at step {step}",
            w.id
        )),
        Event::Resynced { from, to, .. } => sim.event(format!(
            "host resyncs viewer {i} from step {from} at step {to}"
        )),
        Event::Stalled => sim.event(format!("host: viewer {i}'s write stalled")),
        Event::Refused { log, .. } => sim.event(format!("host refuses viewer {i}: {log}")),
        Event::ProtocolError => sim.violate(format!(
            "viewer {i}: the host read a protocol error from an honest viewer"
        )),
        Event::Left(left) => {
            sim.event(format!("host: viewer {i} {left}"));
            let behind = sim.host.records.next().saturating_sub(conn.position());
            check::host_left(sim, i, &left, w.heard_ms, behind, config().silence_ms);
        }
    }
}

/// The host is killed (or exits): its connections close after what they had sent.
pub fn kill(sim: &mut Sim) {
    let now = sim.now;
    for i in 0..sim.viewers.len() {
        let Some(mut link) = take(sim, i) else {
            continue;
        };
        link.faulted_early |= link.attached == 0;
        for w in &mut link.wires {
            if w.conn.take().is_some() {
                w.write = None;
                w.to_host.clear();
                w.to_viewer.push_back((now + w.latency, Seg::Fin));
            }
        }
        link.wires.retain(|w| !w.done());
        put(sim, i, link);
    }
}

/// Viewer `i`'s current connection is cut (reset both ways; what arrived is still read),
/// and new ones are refused for `down` ticks. Whether there was a connection.
pub fn cut(sim: &mut Sim, i: usize, down: u64) -> bool {
    let until = sim.until(down);
    let Some(mut link) = take(sim, i) else {
        return false;
    };
    let current = link.current;
    let early = link.attached == 0;
    let cut = match link.wire(current) {
        Some(w) if w.conn.is_some() => {
            // The host's connection finds out at its next read or write; its events are
            // seen to at its next turn.
            if let Some(conn) = w.conn.as_mut() {
                if w.write.take().is_some() {
                    conn.handle_write_failed(reset());
                } else {
                    conn.handle_read_failed(reset());
                }
            }
            w.to_viewer.clear();
            w.to_host.clear();
            w.to_viewer.push_back((0, Seg::Reset));
            true
        }
        _ => false,
    };
    if cut {
        link.down_until = until;
        link.faulted_early |= early;
    }
    put(sim, i, link);
    cut
}

/// Viewer `i`'s current connection holds its bytes until `until`.
pub fn stall(sim: &mut Sim, i: usize, until: u64) -> bool {
    let Some(mut link) = take(sim, i) else {
        return false;
    };
    let current = link.current;
    let early = link.attached == 0;
    let stalled = match link.wire(current) {
        Some(w) => {
            w.stall_until = until;
            true
        }
        None => false,
    };
    link.faulted_early |= stalled && early;
    put(sim, i, link);
    stalled
}

fn reset() -> std::io::Error {
    std::io::Error::from(std::io::ErrorKind::ConnectionReset)
}

// ---------------------------------------------------------------------------------------
// The viewer's side.

/// One tick of TCP viewer `i`: its reader reads what arrived, sends what it has to, keeps
/// its timers; its session takes what the reader delivered.
pub fn tick(sim: &mut Sim, i: usize) {
    let Some(mut link) = take(sim, i) else {
        return;
    };
    let now = sim.now;
    if sim.viewers[i].core.is_stopped() {
        // The viewer has exited: its connections close.
        if !link.done {
            link.done = true;
            close_current(sim, &mut link);
        }
        put(sim, i, link);
        return;
    }
    if link.reader.is_none() {
        // The viewer starts at its join tick, while the host is up.
        if now < sim.viewers[i].join_at || now < sim.viewers[i].paused_until || !host_up(sim) {
            put(sim, i, link);
            return;
        }
        let cfg = tcp::Config {
            addr: ADDR.into(),
            token: None,
            reconnect_ms: Some(link.budget_ms),
            tls: false,
            one_at_a_time: false,
        };
        let mut reader = Reader::new(cfg, ms(now));
        if let Some(p) = sim.cfg.reader_plant {
            reader.plant(p);
        }
        link.reader = Some(reader);
        sim.event(format!("viewer {i} starts its reader"));
    }
    let paused = now < sim.viewers[i].paused_until;
    // A viewer stopped before its first attach may miss the handshake's deadlines.
    link.faulted_early |= paused && link.attached == 0;
    arrive(sim, i, &mut link);
    if !paused && !link.done {
        read(sim, i, &mut link);
    }
    put(sim, i, link);
    if !paused {
        session(sim, i);
    }
}

/// Bytes reach the viewer's socket, as the link lets them.
fn arrive(sim: &mut Sim, i: usize, link: &mut Link) {
    let now = sim.now;
    let mut budget = if now < sim.viewers[i].slow_until {
        SLOW
    } else {
        usize::MAX
    };
    for w in &mut link.wires {
        if now < w.stall_until {
            continue;
        }
        while let Some((t, _)) = w.to_viewer.front() {
            if *t > now || budget == 0 {
                break;
            }
            let Some((t, seg)) = w.to_viewer.pop_front() else {
                break;
            };
            match seg {
                Seg::Data(mut b) => {
                    if !w.viewer_open {
                        continue;
                    }
                    if b.len() > budget {
                        let rest = b.split_off(budget);
                        w.to_viewer.push_front((t, Seg::Data(rest)));
                    }
                    budget -= b.len();
                    w.arrived_len += b.len();
                    w.arrived.push_back(b);
                }
                end => {
                    w.closed.get_or_insert(end);
                }
            }
        }
    }
}

/// The reader's turn: the connection attempt's outcome, what arrived (read before the
/// time is judged, as the real driver reads its socket once more before a deadline), what
/// it sends, its timers.
fn read(sim: &mut Sim, i: usize, link: &mut Link) {
    let now = sim.now;
    drain(sim, i, link);
    if link.connecting.as_ref().is_some_and(|(t, _)| *t <= now) {
        if let Some((_, outcome)) = link.connecting.take() {
            if let Some(r) = link.reader.as_mut() {
                match outcome {
                    Ok(id) => {
                        link.current = Some(id);
                        link.buf.clear();
                        r.handle_connected(ms(now));
                    }
                    Err(e) => r.handle_connect_failed(ms(now), e),
                }
            }
            drain(sim, i, link);
        }
    }
    for _ in 0..64 {
        let current = link.current;
        let Some(w) = link.wires.iter_mut().find(|w| Some(w.id) == current) else {
            break;
        };
        if w.arrived.is_empty() && w.closed.is_none() {
            break;
        }
        let mut got = false;
        // Reads of a size the seed picks, so frames are cut anywhere.
        let chunk = 1 + sim.rng.next_u32() as usize % 3000;
        let mut n = 0;
        while n < chunk {
            let Some(mut b) = w.arrived.pop_front() else {
                break;
            };
            if b.len() > chunk - n {
                let rest = b.split_off(chunk - n);
                w.arrived.push_front(rest);
            }
            n += b.len();
            w.arrived_len -= b.len();
            link.buf.extend_from_slice(&b);
            got = true;
        }
        let end = if w.arrived.is_empty() {
            w.closed.as_ref().map(|s| matches!(s, Seg::Reset))
        } else {
            None
        };
        let Some(r) = link.reader.as_mut() else {
            break;
        };
        if end == Some(true) {
            r.handle_read_failed(ms(now), "Connection reset by peer (os error 104)".into());
            drain(sim, i, link);
            break;
        }
        let eof = end == Some(false);
        let mut buf = std::mem::take(&mut link.buf);
        while link.current.is_some()
            && link
                .reader
                .as_mut()
                .is_some_and(|r| r.handle_data(ms(now), &mut buf, eof))
        {
            drain(sim, i, link);
        }
        if link.current.is_some() {
            link.buf = buf;
        }
        drain(sim, i, link);
        if !got || eof {
            break;
        }
    }
    send(sim, link);
    // Its timers.
    for _ in 0..8 {
        let Some(r) = link.reader.as_mut() else {
            break;
        };
        match r.poll_timeout() {
            Some(at) if at <= ms(now) => r.handle_timeout(ms(now)),
            _ => break,
        }
        drain(sim, i, link);
    }
    send(sim, link);
}

/// What the reader writes (its hello, heartbeats, drift requests) goes on the current
/// connection.
fn send(sim: &Sim, link: &mut Link) {
    let at = sim.now + link.latency;
    while let Some(m) = link.reader.as_mut().and_then(|r| r.poll_transmit()) {
        let current = link.current;
        if let (Some(w), Ok(f)) = (link.wire(current), ViewerCodec::encode_frame(&m)) {
            w.to_host.push_back((at, Seg::Data(f.0)));
        }
    }
}

/// The reader's events: connections opened and closed, arrivals into the spool (checked
/// on the way), drift replies, its stop.
fn drain(sim: &mut Sim, i: usize, link: &mut Link) {
    let now = sim.now;
    while let Some(e) = link.reader.as_mut().and_then(|r| r.poll_event()) {
        match e {
            ReaderEvent::Connect => connect(sim, i, link),
            ReaderEvent::Close => close_current(sim, link),
            ReaderEvent::Done => link.done = true,
            ReaderEvent::DriftReply(d) => link.replies.push_back(Ok(d)),
            ReaderEvent::StreamEnded => {
                link.stream_ended_ms = Some(ms(now));
                link.replies.push_back(Err(HOST_CLOSED.into()));
            }
            ReaderEvent::Reconnecting { wait_ms, why } => {
                sim.event(format!("viewer {i} reconnects in {wait_ms} ms: {why}"))
            }
            ReaderEvent::AwaitDrain => {
                if let Some(r) = link.reader.as_mut() {
                    r.handle_spool_drained(ms(now));
                }
            }
            ReaderEvent::Deliver(a) => deliver(sim, i, link, a),
        }
    }
}

/// An arrival the reader hands over: checked, then spooled with the host's life it came
/// from.
fn deliver(sim: &mut Sim, i: usize, link: &mut Link, a: Arrival) {
    let current = link.current;
    let life = link.wire(current).map_or(sim.host.life, |w| w.life);
    match &a {
        Arrival::Attached {
            connection, world, ..
        } => {
            check::new_number(sim, i, *connection, link.number);
            link.number = link.number.max(*connection);
            link.attached += 1;
            link.streaming = true;
            link.next_step = Some(world.step);
            sim.event(format!(
                "viewer {i}'s reader attaches (connection {connection}) at step {}",
                world.step
            ));
        }
        Arrival::Resync(world) => link.next_step = Some(world.step),
        Arrival::Record(r) => in_order(sim, i, link, r.step, 1),
        Arrival::Records(run) => in_order(sim, i, link, run.first_step(), run.count()),
        Arrival::Lost { why, last } => {
            sim.event(format!("viewer {i}'s reader: lost ({why}), last {last}"));
            link.next_step = None;
            if *last {
                final_word(sim, i, link, why);
            }
        }
        Arrival::End(e) => sim.event(format!(
            "viewer {i}'s reader: the end at host step {}",
            e.host_step
        )),
        Arrival::Gap { .. } | Arrival::Missing { .. } => {}
    }
    link.spool.push_back((life, a));
}

/// A connection never delivers a record out of order or twice.
fn in_order(sim: &mut Sim, i: usize, link: &mut Link, first: u64, count: u64) {
    check::in_order(sim, i, link.next_step, first);
    link.next_step = Some(first + count);
}

/// The reader stopped for good: is its last word explained?
fn final_word(sim: &mut Sim, i: usize, link: &Link, why: &str) {
    let explained = check::reader_stop(
        sim,
        i,
        why,
        ms(sim.now).saturating_sub(link.stream_ended_ms.unwrap_or(0)),
        link.budget_ms,
        link.attached == 0 && link.faulted_early,
        sim.ended && !link.streaming,
    );
    sim.viewers[i].lost_for_good = explained;
}

/// The reader asks for a connection: made after the link's latency when the host is up
/// and the link is not down, refused otherwise.
fn connect(sim: &mut Sim, i: usize, link: &mut Link) {
    let now = sim.now;
    let latency = sim.viewers[i].latency;
    link.current = None;
    link.streaming = false;
    let outcome = if host_up(sim) && now >= link.down_until {
        let id = link.next_wire;
        link.next_wire += 1;
        let mut conn = Conn::new(config(), pair::PEER, ms(now));
        if let Some(p) = sim.cfg.plant {
            conn.plant(p);
        }
        link.wires.push(Wire {
            id,
            life: sim.host.life,
            latency,
            conn: Some(conn),
            write: None,
            told_over: false,
            to_viewer: VecDeque::new(),
            arrived: VecDeque::new(),
            arrived_len: 0,
            closed: None,
            to_host: VecDeque::new(),
            heard_ms: ms(now),
            stall_until: 0,
            viewer_open: true,
        });
        sim.event(format!("viewer {i} connects (connection {id})"));
        Ok(id)
    } else {
        sim.event(format!("viewer {i}'s connection is refused"));
        Err("Connection refused (os error 111)".to_string())
    };
    link.connecting = Some((now + latency, outcome));
}

/// The viewer closes its side of the current connection (or gives up the attempt).
fn close_current(sim: &mut Sim, link: &mut Link) {
    let now = sim.now;
    let latency = link.latency;
    let mut ids: Vec<u64> = link.current.take().into_iter().collect();
    if let Some((_, Ok(id))) = link.connecting.take() {
        ids.push(id);
    }
    if link.done {
        ids.extend(link.wires.iter().map(|w| w.id));
    }
    for id in ids {
        if let Some(w) = link.wire(Some(id)) {
            if w.viewer_open {
                w.viewer_open = false;
                w.arrived.clear();
                w.arrived_len = 0;
                w.to_viewer.clear();
                w.to_host.push_back((now + latency, Seg::Fin));
            }
        }
    }
    link.buf.clear();
}

/// The viewer's session: the drift request's round trip, else the spool's arrivals into
/// the verifier (`speed` records a tick), as `viewer/src/live/session.rs` takes them.
fn session(sim: &mut Sim, i: usize) {
    drift(sim, i);
    if sim.viewers[i].core.poll_timeout().is_some() {
        return;
    }
    let speed = sim.viewers[i].speed as u64;
    let mut taken = 0;
    let mut ops = Vec::new();
    while taken < speed {
        let Some((life, a)) = sim.links[i].as_mut().and_then(|l| l.spool.pop_front()) else {
            break;
        };
        match a {
            Arrival::Record(r) => {
                record(sim, i, RecordRef::from(&r), None);
                taken += 1;
            }
            Arrival::Records(run) => {
                // Record by record; a drift's round trip comes before the next (the
                // session stops at it).
                let decoded = run.decode_each(&mut ops, |r, ops| {
                    record(sim, i, r, Some(ops));
                    let v = &sim.viewers[i];
                    !v.core.is_stopped()
                        && v.core.poll_timeout().is_none()
                        && sim.violation.is_none()
                });
                if let Err(e) = decoded {
                    sim.viewers[i].core.fail(format!("protocol error: {e}"));
                    events(sim, i);
                }
                taken += run.count();
            }
            a => {
                let v = &mut sim.viewers[i];
                match &a {
                    Arrival::Attached { .. } | Arrival::Resync(_) => v.life = life,
                    Arrival::End(e) => {
                        v.waiting_at_end = v.core.is_waiting();
                        v.ended_behind = v.core.world().step < e.host_step;
                    }
                    _ => {}
                }
                let _ = a.give(&mut v.core);
                events(sim, i);
            }
        }
        if sim.viewers[i].core.is_stopped() || sim.violation.is_some() {
            return;
        }
        drift(sim, i);
        if sim.viewers[i].core.poll_timeout().is_some() {
            break;
        }
    }
    let step = sim.viewers[i].core.world().step;
    if let Some(r) = sim.links[i].as_mut().and_then(|l| l.reader.as_mut()) {
        r.handle_viewer_step(step);
    }
}

/// One record into the verifier, then the recorder.
fn record(sim: &mut Sim, i: usize, r: RecordRef<'_>, ops: Option<&[ostm_protocol::Op]>) {
    let decoded;
    let ops = match ops {
        Some(ops) => ops,
        None => {
            decoded = decode_input("record", r.input, 0).unwrap_or_default();
            &decoded
        }
    };
    let at = sim.viewers[i].core.world().step;
    viewer::note_perturbed(sim, i, r.step, at);
    if let Some(hash) = sim.viewers[i].core.handle_record(r, ops) {
        viewer::verified(sim, i, r, hash);
    }
}

/// The drift request's round trip, as the viewer's session makes it: sent on the
/// connection that sent the step (else `REPLACED`), then the host's answer, or the
/// connection's end, or the deadline.
fn drift(sim: &mut Sim, i: usize) {
    let now = sim.now;
    let v = &mut sim.viewers[i];
    if let Some(Transmit::DriftRequest { step, connection }) = v.core.poll_transmit() {
        let link = sim.links[i].as_mut();
        let current = link
            .as_ref()
            .and_then(|l| l.reader.as_ref())
            .map_or(0, |r| r.connection());
        if connection != current {
            v.core.handle_drift_unanswered(REPLACED);
        } else if let Some(link) = link {
            link.replies.clear();
            if let Some(r) = link.reader.as_mut() {
                r.send(ToHost::DriftRequest { step });
            }
            sim.event(format!("viewer {i} asks the host about step {step}"));
        }
    }
    let v = &mut sim.viewers[i];
    if v.core.poll_timeout().is_some() {
        match sim.links[i].as_mut().and_then(|l| l.replies.pop_front()) {
            Some(Ok(reply)) => v.core.handle_drift_reply(reply),
            Some(Err(why)) => v.core.handle_drift_unanswered(why),
            None => {}
        }
        v.core.handle_timeout(ms(now));
        events(sim, i);
    }
}
