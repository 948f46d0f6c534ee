#!/usr/bin/env python3
"""An independent live viewer, written from docs/protocol.md (and the simulation of
docs/test-module.md) alone.

Starts `ostm-host serve --listen 127.0.0.1:0 --rate max --steps 300`, attaches, does the
handshake, rebuilds the world from the probe snapshot, runs every record's input with the
Python simulation of ostm.py and compares each world hash with the record's by step number.
The embedded world is that of testdata/test-10000.ostm, so each hash is also compared with
that file's row for the same step.

A second session plants a fault: the host runs with `--perturb STEP:BODY`; the client must
see drift at STEP, ask for the host's world there, get the four stage hashes, find that every
stage agrees, and name body BODY's velocity.y as the first differing field (host = viewer + 1).

Prints one line per check and a final `N passed, N failed`; exits 1 on any failure.
Usage: live_client.py HOST_BINARY [REPO_ROOT]
Only 127.0.0.1 is ever used.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ostm import Cursor, FormatError, Link, World, check_snapshot, parse_ops, parse_replay  # noqa: E402

MAX_FRAME_LEN = 65_554
MAX_PROBE = 2_070
MAX_END_TEXT = 1_024
HEARTBEAT_S = 1.0
SILENCE_S = 10.0
DRIFT_WAIT_S = 5.0
END_REASONS = {
    1: "finished",
    2: "shutdown",
    3: "version-mismatch",
    4: "bad-token",
    5: "full",
    6: "not-a-viewer",
    7: "protocol-error",
    8: "stalled",
    9: "silent",
    10: "host-error",
}


class ProtocolError(Exception):
    def __init__(self, offset: int, message: str):
        super().__init__(f"at offset {offset}: {message}")
        self.offset = offset


# ---------------------------------------------------------------------------
# Framing (docs/protocol.md, "Connection and framing")


class Connection:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = bytearray()
        self.received = 0  # bytes consumed from the connection so far (frame offsets)
        self.last_heard = time.monotonic()
        self.last_sent = time.monotonic()

    def send(self, msg_type: int, body: bytes) -> None:
        payload = bytes([msg_type]) + body
        self.sock.sendall(struct.pack("<I", len(payload)) + payload)
        self.last_sent = time.monotonic()

    def _fill(self, need: int, frame_offset: int, what: str) -> None:
        while len(self.buf) < need:
            if time.monotonic() - self.last_heard > SILENCE_S:
                raise ProtocolError(frame_offset, f"the host sent nothing for {int(SILENCE_S * 1000)} ms")
            if time.monotonic() - self.last_sent >= HEARTBEAT_S and self.heartbeat_step is not None:
                self.send(0x03, struct.pack("<Q", self.heartbeat_step))
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                raise ProtocolError(
                    frame_offset,
                    f"connection closed inside a frame: expected {need} {what} bytes, found {len(self.buf)} bytes",
                )
            self.last_heard = time.monotonic()
            self.buf += chunk

    heartbeat_step: int | None = None

    def read_frame(self) -> tuple[int, int, bytes]:
        """Returns (offset of the frame's first byte, type, body)."""
        start = self.received
        self._fill(4, start, "frame length")
        length = struct.unpack_from("<I", self.buf, 0)[0]
        if not 1 <= length <= MAX_FRAME_LEN:
            raise ProtocolError(start, f"expected frame length 1..={MAX_FRAME_LEN}, found {length}")
        self._fill(4 + length, start, "frame")
        payload = bytes(self.buf[4 : 4 + length])
        del self.buf[: 4 + length]
        self.received += 4 + length
        return start, payload[0], payload[1:]


class Body(Cursor):
    """A cursor over one message body; offsets are connection offsets."""

    def __init__(self, data: bytes, offset: int):
        # The body follows the 4-byte length and the type byte.
        super().__init__(data, offset + 5, ProtocolError)

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolError(self.at(), f"expected end of message, found {len(self.data) - self.pos} trailing bytes")


# ---------------------------------------------------------------------------
# Messages


@dataclass
class Probe:
    dims: int
    bodies: int
    seed: int
    link: Link | None
    snapshot: bytes

    def world(self) -> World:
        return World.from_snapshot(self.dims, self.link, self.snapshot)

    def header(self) -> tuple:
        link = None if self.link is None else (self.link.role, self.link.body, self.link.transfer_step)
        return (self.dims, self.bodies, self.seed, link)


def read_probe(b: Body) -> Probe:
    flags = b.u8("probe flags")
    if flags & ~1:
        raise ProtocolError(b.at() - 1, f"expected probe flag bits 1..7 to be 0, found flags 0x{flags:02x}")
    has_link = bool(flags & 1)
    length_at = b.at()
    p = b.u32("probe length")
    extra = 6 + (4 if has_link else 0)
    n32 = p - extra - 12
    if p > MAX_PROBE or n32 < 32 or n32 % 32:
        raise ProtocolError(length_at, f"expected probe length 6 + 12 + 32 x (1..=64) (+ 4 with a link), found {p}")
    probe_at = b.at()
    data = b.take(p, "probe snapshot")
    dims, bodies = data[0], data[1]
    seed = struct.unpack_from("<I", data, 2)[0]
    if dims not in (2, 3):
        raise ProtocolError(probe_at, f"expected dimensions 2 or 3, found {dims}")
    if not 1 <= bodies <= 64:
        raise ProtocolError(probe_at + 1, f"expected body count 1..=64, found {bodies}")
    snap = data[6 : p - (4 if has_link else 0)]
    try:
        check_snapshot(snap, probe_at + 6, dims)
    except FormatError as e:
        raise ProtocolError(e.offset, e.message) from None
    link = None
    if has_link:
        at = probe_at + p - 4
        role, body, tstep = struct.unpack_from("<BBH", data, p - 4)
        if role not in (1, 2, 3):
            raise ProtocolError(at, f"expected link role 1, 2 or 3, found {role}")
        link = Link(role, body, tstep)
    return Probe(dims, bodies, seed, link, snap)


def read_welcome(b: Body) -> dict:
    magic = b.take(8, "magic")
    if magic != b"OSTMLIVE":
        raise ProtocolError(b.base, f'expected magic "OSTMLIVE", found {magic!r}')
    version = b.u16("version")
    if version != 1:
        raise ProtocolError(b.base + 8, f"the host speaks protocol version {version}")
    role = b.u8("role")
    if role != 2:
        raise ProtocolError(b.base + 10, f"expected role 2 (host), found {role}")
    out = {"rate": b.u32("rate"), "heartbeat_ms": b.u32("heartbeat ms"), "ring": b.u32("ring"), "queue": b.u32("queue")}
    b.end()
    return out


def read_end(b: Body) -> tuple[int, int, str]:
    at = b.at()
    reason = b.u8("end reason")
    if reason not in END_REASONS:
        raise ProtocolError(at, f"expected end reason 1..=10, found {reason}")
    step = b.u64("host step")
    m_at = b.at()
    m = b.u16("text length")
    if m > MAX_END_TEXT:
        raise ProtocolError(m_at, f"expected end text length at most {MAX_END_TEXT}, found {m}")
    text = b.take(m, "end text").decode("utf-8", errors="replace")
    b.end()
    return reason, step, text


def hello(token: bytes = b"") -> bytes:
    return b"OSTMLIVE" + struct.pack("<HBB", 1, 1, len(token)) + token


# ---------------------------------------------------------------------------
# A session


FIELDS = ["alive", "still", "position.x", "position.y", "position.z", "velocity.x", "velocity.y", "velocity.z"]


def first_difference(host: World, viewer: World) -> str | None:
    if host.step != viewer.step:
        return f"step host={host.step} viewer={viewer.step}"
    if host.gravity != viewer.gravity:
        return f"gravity host={host.gravity} viewer={viewer.gravity}"
    for i, (h, v) in enumerate(zip(host.slots, viewer.slots)):
        for name, a, b in zip(FIELDS, h, v):
            if a != b:
                return f"body {i} {name} host={a} viewer={b}"
    if len(host.slots) != len(viewer.slots):
        return f"body count host={len(host.slots)} viewer={len(viewer.slots)}"
    return None


@dataclass
class Session:
    attached_at: int = -1
    verified: int = 0
    file_rows_checked: int = 0
    resyncs: int = 0
    end_reason: int | None = None
    end_step: int | None = None
    drift_step: int | None = None
    drift_status: int | None = None
    stages_agree: bool | None = None
    drift_field: str | None = None
    error: str | None = None
    late: bool = False  # the host had finished before we connected: try again


def start_host(binary: str, extra: list) -> tuple[subprocess.Popen, int]:
    cmd = [binary, "serve", "--listen", "127.0.0.1:0", "--status-ms", "0", *extra]
    if "--rate" not in extra:
        cmd += ["--rate", "max"]
    if "--steps" not in extra:
        cmd += ["--steps", "300"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline().strip()
    prefix = "ostm-host listening on "
    if not line.startswith(prefix):
        proc.kill()
        raise RuntimeError(f"unexpected first line from the host: {line!r}")
    host, port = line[len(prefix) :].rsplit(":", 1)
    if host != "127.0.0.1":
        proc.kill()
        raise RuntimeError(f"host bound {host}, not 127.0.0.1")
    return proc, int(port)


def run_session(port: int, rows: list | None, embedded: tuple) -> Session:
    out = Session()
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=SILENCE_S)
    except OSError as e:
        out.error = f"cannot connect to 127.0.0.1:{port}: {e}"
        out.late = True
        return out
    sock.settimeout(0.2)
    conn = Connection(sock)
    try:
        conn.send(0x01, hello())
        offset, t, body = conn.read_frame()
        if t == 0x85:
            reason, step, text = read_end(Body(body, offset))
            out.end_reason, out.end_step = reason, step
            out.error = f"refused: {END_REASONS[reason]} ({text})"
            return out
        if t != 0x81:
            raise ProtocolError(offset, f"expected welcome (0x81), found type 0x{t:02x}")
        read_welcome(Body(body, offset))
        offset, t, body = conn.read_frame()
        if t != 0x82:
            raise ProtocolError(offset, f"expected snapshot (0x82), found type 0x{t:02x}")
        b = Body(body, offset)
        kind = b.u8("snapshot kind")
        if kind != 0:
            raise ProtocolError(offset + 5, f"expected snapshot kind 0 (attach), found {kind}")
        probe = read_probe(b)
        b.end()
        world = probe.world()
        out.attached_at = world.step
        use_rows = rows is not None and probe.header() == embedded
        if use_rows and world.step < len(rows):
            if world.hash() != rows[world.step]:
                out.error = f"the attach snapshot's hash {world.hash():016x} is not test-10000.ostm's row {world.step}"
                return out
            out.file_rows_checked += 1
        prev = None  # (world at s, ops of step s) for stage hashes on drift
        while True:
            conn.heartbeat_step = world.step
            offset, t, body = conn.read_frame()
            b = Body(body, offset)
            if t == 0x83:
                s = b.u64("step")
                h = b.u64("hash")
                n = b.u16("input length")
                in_at = b.at()
                raw = b.take(n, "input")
                b.end()
                if s != world.step:
                    raise ProtocolError(offset + 5, f"expected a record for step {world.step}, found step {s}")
                try:
                    ops = parse_ops(raw, in_at, s)
                except FormatError as e:
                    raise ProtocolError(e.offset, e.message) from None
                before = World(world.dims, world.link, world.step, world.gravity, [list(x) for x in world.slots])
                world.step_once(ops)
                mine = world.hash()
                if mine != h:
                    prev = (before, ops)
                    out.drift_step = world.step
                    drift(conn, out, prev, world, h)
                    return out
                out.verified += 1
                if use_rows and world.step < len(rows):
                    if rows[world.step] != h:
                        out.error = f"record of step {s} has hash {h:016x}, test-10000.ostm row {world.step} has {rows[world.step]:016x}"
                        return out
                    out.file_rows_checked += 1
            elif t == 0x84:
                b.u64("host step")
                b.end()
            elif t == 0x82:
                kind = b.u8("snapshot kind")
                if kind != 1:
                    raise ProtocolError(offset + 5, f"expected snapshot kind 1 (resync), found {kind}")
                again = read_probe(b)
                b.end()
                if again.header() != probe.header():
                    raise ProtocolError(offset, "resync snapshot with another setup or link")
                world = again.world()
                out.resyncs += 1
            elif t == 0x85:
                out.end_reason, out.end_step, text = read_end(b)
                if out.end_reason not in (1, 2):
                    out.error = f"host ended: {END_REASONS[out.end_reason]} ({text})"
                return out
            else:
                raise ProtocolError(offset + 4, f"unexpected message type 0x{t:02x}")
    except ProtocolError as e:
        out.error = f"127.0.0.1:{port}: {e}"
        return out
    finally:
        sock.close()


def drift(conn: Connection, out: Session, prev: tuple, viewer: World, host_hash: int) -> None:
    """Drift at step S = viewer.step: ask for the host's world at S and compare."""
    S = viewer.step
    conn.send(0x02, struct.pack("<Q", S))
    deadline = time.monotonic() + DRIFT_WAIT_S
    while time.monotonic() < deadline:
        offset, t, body = conn.read_frame()
        b = Body(body, offset)
        if t == 0x85:
            # The host ended before it read the request: no reply will come.
            out.end_reason, out.end_step, _ = read_end(b)
            out.drift_field = f"drift at step {S}: host hash {host_hash:016x}, viewer hash {viewer.hash():016x}"
            return
        if t != 0x86:
            continue  # records and heartbeats are ignored while waiting
        step = b.u64("step")
        status = b.u8("status")
        if step != S:
            continue
        out.drift_status = status
        if status != 0:
            b.end()
            out.drift_field = f"drift at step {S}: host hash {host_hash:016x}, viewer hash {viewer.hash():016x}"
            return
        probe = read_probe(b)
        present = b.u8("stages present")
        host_stages = None
        if present == 1:
            host_stages = [b.u64("stage hash") for _ in range(4)]
        elif present != 0:
            raise ProtocolError(b.at() - 1, f"expected stages present 0 or 1, found {present}")
        b.end()
        out.drift_field = first_difference(probe.world(), viewer)
        if host_stages is not None:
            before, ops = prev
            mine = before.stage_hashes(ops)
            out.stages_agree = mine == host_stages
        return
    out.error = f"no drift reply for step {S} within {DRIFT_WAIT_S} s"


def refusal(port: int, first: bytes, after_handshake: bool = False) -> tuple:
    """Sends `first` (raw bytes) as the first frame, or after a proper handshake; returns
    (end reason, end text) of the host's answer, or (None, what happened)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=SILENCE_S)
    sock.settimeout(0.2)
    conn = Connection(sock)
    try:
        if after_handshake:
            conn.send(0x01, hello())
            conn.read_frame()  # welcome
            conn.read_frame()  # snapshot
        sock.sendall(first)
        while True:
            offset, t, body = conn.read_frame()
            if t == 0x85:
                reason, _, text = read_end(Body(body, offset))
                return reason, text
            if t == 0x81 and not after_handshake:
                return None, "welcome"
    except ProtocolError as e:
        return None, str(e)
    finally:
        sock.close()


def frame(t: int, body: bytes) -> bytes:
    return struct.pack("<I", len(body) + 1) + bytes([t]) + body


REFUSALS = [
    # (what, bytes, after the handshake, expected reason)
    ("hello of version 2", frame(0x01, b"OSTMLIVE" + struct.pack("<HBB", 2, 1, 0)), False, 3),
    ("hello with a wrong magic", frame(0x01, b"OSTMLIFE" + struct.pack("<HBB", 1, 1, 0)), False, 6),
    ("hello with role 2", frame(0x01, b"OSTMLIVE" + struct.pack("<HBB", 1, 2, 0)), False, 6),
    ("a heartbeat before the hello", frame(0x03, struct.pack("<Q", 0)), False, 6),
    ("frame length 0", struct.pack("<I", 0), False, 6),
    ("frame length 65 555", struct.pack("<I", 65_555), False, 6),
    ("hello with a trailing byte", frame(0x01, hello() + b"\x00"), False, 6),
    ("a token to a host without one", frame(0x01, hello(b"secret")), False, None),
    ("a second hello", frame(0x01, hello()), True, 7),
    ("message type 0x04", frame(0x04, b""), True, 7),
    ("a heartbeat cut short", frame(0x03, b"\x00" * 7), True, 7),
]


# ---------------------------------------------------------------------------


def main() -> int:
    binary = sys.argv[1]
    root = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parents[2]
    rows = parse_replay((root / "testdata" / "test-10000.ostm").read_bytes()).hashes
    embedded = (3, 24, 10000, None)  # docs/protocol.md: the embedded world is test-10000's
    passed = failed = 0

    def report(ok: bool, line: str) -> None:
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
        print(("ok    " if ok else "FAIL  ") + line)

    # The host steps from the moment it listens and does not wait for a viewer, so a
    # session that attaches after its 300 steps verifies nothing: try again.
    for attempt in range(5):
        proc, port = start_host(binary, [])
        s = run_session(port, rows, embedded)
        proc.wait(timeout=30)
        if (s.error and not s.late) or s.verified:
            break
    report(
        s.error is None and s.verified > 0 and s.end_reason == 1 and s.attached_at + s.verified == 300,
        f"live session: attached at step {s.attached_at}, verified {s.verified} records to step 300, "
        f"{s.file_rows_checked} hashes equal to test-10000.ostm's rows, resyncs {s.resyncs}, "
        f"end {END_REASONS.get(s.end_reason, s.end_reason)} at {s.end_step}"
        + (f"; error: {s.error}" if s.error else ""),
    )
    report(proc.returncode == 0, f"host exit code {proc.returncode}")

    # Planted fault: the host perturbs body 5's velocity.y at step 200. At --rate max the
    # host would end its 300 steps before the drift request reaches it (a host that has
    # sent its end answers nothing), so this host steps at 300 per second.
    step, body = 200, 5
    for attempt in range(5):
        proc, port = start_host(binary, ["--perturb", f"{step}:{body}", "--rate", "300"])
        p = run_session(port, rows, embedded)
        proc.kill()
        proc.wait(timeout=30)
        if (p.error and not p.late) or p.drift_step is not None or p.verified:
            break
    want = f"body {body} velocity.y host="
    good = (
        p.error is None
        and p.drift_step == step
        and p.drift_status == 0
        and p.stages_agree is True
        and p.drift_field is not None
        and p.drift_field.startswith(want)
    )
    if good:
        host_v, viewer_v = (int(x.split("=")[1]) for x in p.drift_field.split()[-2:])
        good = host_v == viewer_v + 1
    report(
        good,
        f"planted --perturb {step}:{body}: drift at step {p.drift_step}, reply status {p.drift_status}, "
        f"every stage agrees: {p.stages_agree}, first difference: {p.drift_field}"
        + (f"; error: {p.error}" if p.error else ""),
    )
    # Refusals (docs/protocol.md, Handshake, Messages from the viewer, End reasons).
    proc, port = start_host(binary, ["--rate", "60", "--steps", "100000"])
    try:
        for what, data, after, want in REFUSALS:
            reason, text = refusal(port, data, after)
            if want is None:
                ok = reason is None and text == "welcome"
                report(ok, f"{what}: {'accepted (welcome)' if ok else f'end {reason} ({text})'}")
                continue
            report(reason == want, f"{what}: end {END_REASONS.get(reason, reason)} ({text})"
                   + ("" if reason == want else f", expected {END_REASONS[want]}"))
    finally:
        proc.kill()
        proc.wait(timeout=30)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
