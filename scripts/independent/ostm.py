"""An independent implementation of the test module and its .ostm reader.

Written from docs/test-module.md and docs/replay-format.md alone (no project source
was read). Python 3.11, stdlib plus the `xxhash` package.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import xxhash

I32_MIN = -(2**31)
I32_MAX = 2**31 - 1
U32_MAX = 2**32 - 1
U64_MASK = 2**64 - 1
BOX = 10000
MAX_SLOTS = 64
MAX_STEPS = 16_777_216


def sat_i32(v: int) -> int:
    return I32_MIN if v < I32_MIN else I32_MAX if v > I32_MAX else v


def tdiv(a: int, b: int) -> int:
    """Integer division truncated toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


# ---------------------------------------------------------------------------
# sfc32 (docs/test-module.md, "The generator: sfc32")


class Sfc32:
    def __init__(self, seed: int):
        self.a, self.b, self.c, self.d = 0x9E3779B9, 0x243F6A88, 0xB7E15162, seed & U32_MAX
        for _ in range(12):
            self.next()

    def next(self) -> int:
        a, b, c, d = self.a, self.b, self.c, self.d
        t = (a + b + d) & U32_MAX
        self.d = (d + 1) & U32_MAX
        self.a = b ^ (b >> 9)
        self.b = (c + (c << 3)) & U32_MAX
        self.c = ((((c << 21) | (c >> 11)) & U32_MAX) + t) & U32_MAX
        return t

    def range(self, lo: int, hi: int) -> int:
        return lo + self.next() % (hi - lo + 1)


# ---------------------------------------------------------------------------
# Ops (docs/replay-format.md, "Step inputs")

# opcode -> (name, fields); each field is (name used in errors, size, struct code)
OP_FIELDS = {
    1: ("impulse", [("body index", 1, "<B"), ("i32 x", 4, "<i"), ("i32 y", 4, "<i"), ("i32 z", 4, "<i")]),
    2: ("teleport", [("body index", 1, "<B"), ("i32 x", 4, "<i"), ("i32 y", 4, "<i"), ("i32 z", 4, "<i")]),
    3: ("remove", [("body index", 1, "<B")]),
    4: ("gravity", [("gravity", 4, "<i")]),
    5: ("spawn", [("i32 x", 4, "<i"), ("i32 y", 4, "<i"), ("i32 z", 4, "<i")]),
}


def encode_op(op: tuple) -> bytes:
    code = op[0]
    out = bytes([code])
    for (_, _, fmt), val in zip(OP_FIELDS[code][1], op[1:]):
        out += struct.pack(fmt, val)
    return out


# ---------------------------------------------------------------------------
# The world (docs/test-module.md)


@dataclass
class Link:
    role: int
    body: int
    transfer_step: int


def empty_slot() -> list:
    # [alive, still, px, py, pz, vx, vy, vz]
    return [0, 0, 0, 0, 0, 0, 0, 0]


@dataclass
class World:
    dims: int
    link: Link | None
    step: int = 0
    gravity: int = 3
    slots: list = field(default_factory=list)

    @classmethod
    def from_setup(cls, dims: int, bodies: int, seed: int, link: Link | None) -> "World":
        w = cls(dims=dims, link=link)
        rng = Sfc32(seed)
        for _ in range(bodies):
            px = rng.range(500, 9500)
            py = rng.range(500, 9500)
            pz = rng.range(500, 9500) if dims == 3 else 0
            vx = rng.range(-40, 40)
            vy = rng.range(-40, 40)
            vz = rng.range(-40, 40) if dims == 3 else 0
            w.slots.append([1, 0, px, py, pz, vx, vy, vz])
        if link is not None and link.role == 2 and link.body < len(w.slots):
            w.slots[link.body] = empty_slot()
        return w

    @classmethod
    def from_snapshot(cls, dims: int, link: Link | None, snap: bytes) -> "World":
        step, gravity = struct.unpack_from("<Qi", snap, 0)
        w = cls(dims=dims, link=link, step=step, gravity=gravity)
        for i in range((len(snap) - 12) // 32):
            w.slots.append(list(struct.unpack_from("<II3i3i", snap, 12 + 32 * i)))
        return w

    def snapshot(self) -> bytes:
        out = bytearray(struct.pack("<Qi", self.step & U64_MASK, self.gravity))
        for s in self.slots:
            out += struct.pack("<II3i3i", *s)
        return bytes(out)

    def hash(self) -> int:
        return xxhash.xxh3_64_intdigest(self.snapshot(), seed=0)

    def _live(self, body: int) -> list | None:
        if body < len(self.slots) and self.slots[body][0] == 1:
            return self.slots[body]
        return None

    def step_once(self, ops: list) -> None:
        for stage in self.STAGES:
            stage(self, ops)

    def stage_hashes(self, ops: list) -> list:
        """Runs one step stage by stage; returns the world hash after each of the four."""
        out = []
        for stage in self.STAGES:
            stage(self, ops)
            out.append(self.hash())
        return out

    def _axes(self) -> tuple:
        return (0, 1) if self.dims == 2 else (0, 1, 2)

    def stage_input(self, ops: list) -> None:
        axes = self._axes()
        for op in ops:
            code = op[0]
            if code == 1:
                s = self._live(op[1])
                if s is not None:
                    for a in axes:
                        s[5 + a] = sat_i32(s[5 + a] + op[2 + a])
            elif code == 2:
                s = self._live(op[1])
                if s is not None:
                    for a in axes:
                        s[2 + a] = op[2 + a]
            elif code == 3:
                if self._live(op[1]) is not None:
                    self.slots[op[1]] = empty_slot()
            elif code == 4:
                self.gravity = op[1]
            elif code == 5:
                if len(self.slots) < MAX_SLOTS:
                    z = op[3] if self.dims == 3 else 0
                    self.slots.append([1, 0, op[1], op[2], z, 0, 0, 0])
    def stage_gravity(self, ops: list) -> None:
        for s in self.slots:
            if s[0] == 1:
                s[6] = sat_i32(s[6] - self.gravity)
    def stage_move(self, ops: list) -> None:
        axes = self._axes()
        for s in self.slots:
            if s[0] != 1:
                continue
            for a in axes:
                p = s[2 + a] + s[5 + a]
                v = s[5 + a]
                wall = None
                if p < 0:
                    p, wall = -p, 0
                elif p > BOX:
                    p, wall = 2 * BOX - p, BOX
                if wall is not None:
                    v = tdiv(-v * 3, 4)
                    if abs(v) < 8:
                        p, v = wall, 0
                p = min(max(p, 0), BOX)
                s[2 + a] = p
                s[5 + a] = v
            if s[3] == 0:
                for a in axes:
                    if a != 1:
                        s[5 + a] = tdiv(s[5 + a] * 7, 8)
    def stage_bookkeeping(self, ops: list) -> None:
        axes = self._axes()
        for s in self.slots:
            if s[0] == 1:
                # At rest: velocity 0 on every used axis (2D never reads velocity z).
                if all(s[5 + a] == 0 for a in axes):
                    s[1] = min(s[1] + 1, U32_MAX)
                else:
                    s[1] = 0
        link = self.link
        if link is not None and link.role in (1, 2) and self.step == link.transfer_step:
            if link.body < len(self.slots):
                if link.role == 1:
                    self.slots[link.body] = empty_slot()
                else:
                    z = 5000 if self.dims == 3 else 0
                    self.slots[link.body] = [1, 0, 5000, 5000, z, 40, 0, 0]
        self.step = (self.step + 1) & U64_MASK

    STAGES = (stage_input, stage_gravity, stage_move, stage_bookkeeping)
    STAGE_NAMES = ("apply input", "gravity", "move", "bookkeeping")


# ---------------------------------------------------------------------------
# The .ostm reader (docs/replay-format.md, "What the reader checks, in order")


class FormatError(Exception):
    def __init__(self, offset: int, message: str):
        super().__init__(f"at offset {offset}: {message}")
        self.offset = offset
        self.message = message


@dataclass
class Replay:
    flags: int
    dims: int
    bodies: int
    seed: int
    link: Link | None
    step_count: int
    snapshot: bytes | None
    hashes: list | None
    inputs: list  # list of list of op tuples
    raw_inputs: list  # list of bytes

    @property
    def start_step(self) -> int:
        return struct.unpack_from("<Q", self.snapshot, 0)[0] if self.snapshot else 0

    def start_world(self) -> World:
        if self.snapshot is not None:
            return World.from_snapshot(self.dims, self.link, self.snapshot)
        return World.from_setup(self.dims, self.bodies, self.seed, self.link)

    def to_bytes(self) -> bytes:
        """The file as docs/replay-format.md lays it out (every field as read)."""
        link = self.link
        out = bytearray(b"OSTM" + struct.pack("<HHI", 1, self.flags, 10 if link else 6))
        out += struct.pack("<BBI", self.dims, self.bodies, self.seed)
        if link:
            out += struct.pack("<BBH", link.role, link.body, link.transfer_step)
        out += struct.pack("<I", self.step_count)
        if self.snapshot is not None:
            out += struct.pack("<I", len(self.snapshot)) + self.snapshot
        if self.hashes is not None:
            out += struct.pack(f"<{len(self.hashes)}Q", *self.hashes)
        for raw in self.raw_inputs:
            out += struct.pack("<H", len(raw)) + raw
        return bytes(out)


class Cursor:
    """Bounds-checked little-endian reading. Offsets are `base` + the position read to; a
    read past the end raises `error` (FormatError for files, the live client's
    ProtocolError for messages)."""

    def __init__(self, data: bytes, base: int = 0, error: type = FormatError):
        self.data = data
        self.pos = 0
        self.base = base
        self.error = error

    def at(self) -> int:
        return self.base + self.pos

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def take(self, size: int, what: str) -> bytes:
        if self.remaining() < size:
            raise self.error(self.at(), f"expected {size}-byte {what}, found {self.remaining()} bytes")
        out = self.data[self.pos : self.pos + size]
        self.pos += size
        return out

    def u8(self, what: str) -> int:
        return self.take(1, what)[0]

    def u16(self, what: str) -> int:
        return struct.unpack("<H", self.take(2, what))[0]

    def u32(self, what: str) -> int:
        return struct.unpack("<I", self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return struct.unpack("<Q", self.take(8, what))[0]


def parse_ops(data: bytes, base: int, step: int) -> list:
    """Decode one step input; `base` is the file offset of its first byte."""
    ops = []
    i = 0
    while i < len(data):
        code = data[i]
        if code not in OP_FIELDS:
            raise FormatError(base + i, f"expected opcode 1..=5, found {code}")
        op = [code]
        j = i + 1
        for name, size, fmt in OP_FIELDS[code][1]:
            left = len(data) - j
            if left < size:
                raise FormatError(
                    base + i,
                    f"op {code} cut off inside its step input: expected {size}-byte {name}, found {left} bytes",
                )
            op.append(struct.unpack_from(fmt, data, j)[0])
            j += size
        ops.append(tuple(op))
        i = j
    return ops


def check_snapshot(snap: bytes, base: int, dims: int) -> None:
    """Check 21: every body's alive is 0 or 1 (every other field, also a dead slot's and a
    2D body's z, is kept as read); `base` is the snapshot's file offset."""
    for i in range((len(snap) - 12) // 32):
        off = 12 + 32 * i
        alive = struct.unpack_from("<I", snap, off)[0]
        if alive not in (0, 1):
            raise FormatError(base + off, f"body {i}: expected alive 0 or 1, found {alive}")


def parse_replay(data: bytes) -> Replay:
    c = Cursor(data)
    magic = c.take(4, "magic")
    if magic != b"OSTM":
        raise FormatError(0, 'expected magic "OSTM", found [' + ', '.join(f'{x:02x}' for x in magic) + ']')
    version = c.u16("version")
    if version != 1:
        raise FormatError(4, f"expected version 1, found {version}")
    flags = c.u16("flags")
    if flags & ~0x7:
        raise FormatError(6, f"expected flag bits 3..15 to be 0, found flags 0x{flags:04x}")
    has_rows, has_snap, has_link = bool(flags & 1), bool(flags & 2), bool(flags & 4)
    setup_len = c.u32("setup length")
    want = 10 if has_link else 6
    if setup_len != want:
        raise FormatError(8, f"expected setup length {want} (flags 0x{flags:04x}), found {setup_len}")
    setup = c.take(6, "setup")
    dims, bodies = setup[0], setup[1]
    seed = struct.unpack_from("<I", setup, 2)[0]
    if dims not in (2, 3):
        raise FormatError(12, f"expected dimensions 2 or 3, found {dims}")
    if not 1 <= bodies <= 64:
        raise FormatError(13, f"expected body count 1..=64, found {bodies}")
    link = None
    if has_link:
        role = c.u8("link role")
        if role not in (1, 2, 3):
            raise FormatError(18, f"expected link role 1, 2 or 3, found {role}")
        body = c.u8("link body index")
        tstep = c.u16("link transfer step")
        link = Link(role, body, tstep)
    p = c.pos
    n = c.u32("step count")
    if n > MAX_STEPS:
        raise FormatError(p, f"expected step count at most {MAX_STEPS}, found {n}")
    snap = None
    if has_snap:
        lo = c.pos
        length = c.u32("start snapshot length")
        if length < 44 or length > 2060 or (length - 12) % 32:
            raise FormatError(
                lo, f"expected start snapshot length 12 + 32 x (1..=64) (44..=2060), found {length}"
            )
        base = c.pos
        snap = c.take(length, "start snapshot")
        check_snapshot(snap, base, dims)
    hashes = None
    if has_rows:
        rows = n + 1
        raw = c.take(8 * rows, f"hash rows ({rows} x u64)")
        hashes = list(struct.unpack(f"<{rows}Q", raw))
    if c.remaining() < 2 * n:
        raise FormatError(c.pos, f"expected {n} step inputs (at least {2 * n} bytes), found {c.remaining()} bytes")
    inputs, raw_inputs = [], []
    for s in range(n):
        ln = c.u16(f"input length of step {s}")
        base = c.pos
        raw = c.take(ln, f"input of step {s}")
        inputs.append(parse_ops(raw, base, s))
        raw_inputs.append(raw)
    if c.remaining():
        raise FormatError(c.pos, f"expected end of replay, found {c.remaining()} trailing bytes")
    return Replay(flags, dims, bodies, seed, link, n, snap, hashes, inputs, raw_inputs)
