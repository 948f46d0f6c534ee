#!/usr/bin/env python3
"""Differential test: random hostile replays, hashed by this implementation, verified by
`ostm-viewer verify`. Reaches corners the committed test data does not (start snapshots
with extreme values, dead slots with fields set and 2D bodies with z set, link blocks with
snapshots and link body indexes with no slot, step counters near 2^64, saturating still
counts, i32 extremes in every op field).

Each case is written with hash rows computed here; the viewer must report `match`.
Then each case is mutated (bytes changed, inserted, deleted, cut short, header fields set
to edge values): our reader and `ostm-viewer inspect --json` must agree on accepting it,
or on the offset and the whole message of the refusal.
A mismatch prints the case's seed, the first differing step and keeps the file.
Usage: differential.py VIEWER_BINARY [CASES] [SEED]
"""

from __future__ import annotations

import json
import random
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ostm import I32_MAX, I32_MIN, U32_MAX, FormatError, Link, World, encode_op, parse_replay  # noqa: E402

EXTREMES = [I32_MIN, I32_MIN + 1, -1, 0, 1, 7, 8, 9, 9999, 10000, 10001, 20000, I32_MAX - 1, I32_MAX]


def rand_i32(r: random.Random) -> int:
    k = r.random()
    if k < 0.3:
        return r.choice(EXTREMES)
    if k < 0.7:
        return r.randint(-2000, 12000)
    if k < 0.85:
        return r.randint(-50, 50)
    return r.randint(I32_MIN, I32_MAX)


def rand_body(r: random.Random, slots: int) -> int:
    k = r.random()
    if k < 0.8:
        return r.randint(0, max(0, slots + 1))
    return r.choice([63, 64, 65, 200, 255])


def rand_snapshot(r: random.Random, dims: int, link: Link | None) -> bytes:
    slots = r.randint(1, 64)
    step = r.choice([0, 1, r.randint(0, 300), 2**64 - 1, 2**64 - 3, 2**32, r.randint(0, 2**64 - 1)])
    if link is not None and r.random() < 0.5:
        step = max(0, link.transfer_step - r.randint(0, 5))
    out = bytearray(struct.pack("<Qi", step, rand_i32(r)))
    for _ in range(slots):
        if r.random() < 0.1:
            out += bytes(32)  # the empty slot
            continue
        # A dead slot may hold any other fields (docs/test-module.md, "World state").
        alive = 0 if r.random() < 0.15 else 1
        still = r.choice([0, 1, 5, U32_MAX - 1, U32_MAX, r.randint(0, U32_MAX)])
        pos = [rand_i32(r) for _ in range(3)]
        vel = [rand_i32(r) for _ in range(3)]
        if r.random() < 0.3:
            vel = [0, 0, 0]
        if dims == 2 and r.random() < 0.6:
            # Mostly z = 0 as the module writes it; else any z, which 2D never touches.
            pos[2] = vel[2] = 0
        elif dims == 2 and r.random() < 0.5:
            vel[0] = vel[1] = 0  # at rest in x and y with velocity z set
        out += struct.pack("<II3i3i", alive, still, *pos, *vel)
    return bytes(out)


def rand_op(r: random.Random, slots: int) -> tuple:
    code = r.choice([1, 1, 2, 2, 3, 4, 5, 5])
    if code in (1, 2):
        return (code, rand_body(r, slots), rand_i32(r), rand_i32(r), rand_i32(r))
    if code == 3:
        return (3, rand_body(r, slots))
    if code == 4:
        return (4, r.choice([rand_i32(r), 3, 0, -2, 10]))
    return (5, rand_i32(r), rand_i32(r), rand_i32(r))


def make_case(r: random.Random, max_steps: int = 120) -> bytes:
    dims = r.choice([2, 3])
    bodies = r.randint(1, 64)
    seed = r.randint(0, U32_MAX)
    link = None
    if r.random() < 0.5:
        role = r.choice([1, 2, 3])
        # Any u8: an index at or above the body count moves nothing until a slot exists.
        body = r.randint(0, bodies - 1) if r.random() < 0.7 else r.choice([bodies, bodies + 1, 63, 64, 255])
        link = Link(role, body, r.choice([0, 1, r.randint(0, 60), 65535]))
    snap = rand_snapshot(r, dims, link) if r.random() < 0.5 else None
    world = World.from_snapshot(dims, link, snap) if snap else World.from_setup(dims, bodies, seed, link)
    steps = r.randint(0, max_steps)
    inputs = []
    hashes = [world.hash()]
    for _ in range(steps):
        ops = [rand_op(r, len(world.slots)) for _ in range(r.choice([0, 0, 1, 2, 5]))]
        world.step_once(ops)
        hashes.append(world.hash())
        inputs.append(b"".join(encode_op(op) for op in ops))
    flags = 1 | (2 if snap else 0) | (4 if link else 0)
    out = bytearray(b"OSTM" + struct.pack("<HHI", 1, flags, 10 if link else 6))
    out += struct.pack("<BBI", dims, bodies, seed)
    if link:
        out += struct.pack("<BBH", link.role, link.body, link.transfer_step)
    out += struct.pack("<I", steps)
    if snap:
        out += struct.pack("<I", len(snap)) + snap
    out += struct.pack(f"<{len(hashes)}Q", *hashes)
    for raw in inputs:
        out += struct.pack("<H", len(raw)) + raw
    data = bytes(out)
    parse_replay(data)  # our own reader must accept what we write
    return data


def mutate(r: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    replay = parse_replay(data)
    if replay.raw_inputs and replay.raw_inputs[-1] and r.random() < 0.2:
        # cut the last step input short, keeping its length field consistent
        raw = replay.raw_inputs[-1]
        k = r.randint(1, min(13, len(raw)))
        at = len(b) - len(raw) - 2
        b[at : at + 2] = struct.pack("<H", len(raw) - k)
        return bytes(b[: len(b) - k])
    if r.random() < 0.1:
        return bytes(b[: r.randint(0, min(len(b), 40))])
    for _ in range(r.randint(1, 3)):
        k = r.random()
        if not b:
            break
        i = r.randrange(len(b))
        if k < 0.35:
            b[i] = r.randrange(256)
        elif k < 0.5:
            b[i] ^= 1 << r.randrange(8)
        elif k < 0.65:
            del b[r.randrange(len(b)) :]
        elif k < 0.75:
            b.insert(i, r.randrange(256))
        elif k < 0.85:
            del b[i]
        else:
            # a header field (flags, setup length, step count, snapshot length) set to an edge
            j = r.choice([6, 8, 12, 13, 18, 19, 22, 26])
            if j + 4 <= len(b):
                b[j : j + 4] = struct.pack("<I", r.choice([0, 1, 2, 5, 44, 76, 2060, 2092, 16777216, 16777217, U32_MAX]))
    return bytes(b)


def reader_cases(viewer: str, cases: int, base: int, keep: Path) -> int:
    """Mutated files: our reader and `ostm-viewer inspect` must give the same verdict,
    offset and message."""
    failed = 0
    for n in range(cases):
        r = random.Random(base * 2_000_003 + n)
        data = mutate(r, make_case(r, max_steps=6))
        path = keep / f"mut-{base}-{n}.ostm"
        path.write_bytes(data)
        run = subprocess.run([viewer, "inspect", str(path), "--json"], capture_output=True, text=True)
        theirs = json.loads(run.stdout)
        theirs = None if theirs.get("valid") else (theirs["error"]["offset"], theirs["error"]["message"])
        try:
            parse_replay(data)
            ours = None
        except FormatError as e:
            ours = (e.offset, e.message)
        if ours == theirs:
            path.unlink()
            continue
        failed += 1
        print(f"FAIL  mutated case {base}/{n} ({path}): viewer {theirs}, ours {ours}")
    return failed


def main() -> int:
    viewer = sys.argv[1]
    cases = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    base = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    keep = Path(tempfile.mkdtemp(prefix="ostm-diff-"))
    failed = reader_cases(viewer, cases, base, keep)
    for n in range(cases):
        r = random.Random(base * 1_000_003 + n)
        data = make_case(r)
        path = keep / f"case-{base}-{n}.ostm"
        path.write_bytes(data)
        run = subprocess.run([viewer, "verify", str(path), "--json", "--no-bundle"], capture_output=True, text=True)
        try:
            result = json.loads(run.stdout)
        except json.JSONDecodeError:
            result = {"result": "unreadable", "stderr": run.stderr}
        if result.get("result") == "match":
            path.unlink()
            continue
        failed += 1
        print(f"FAIL  case {base}/{n} ({path}): {json.dumps(result)}")
    print(f"{2 * cases - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
