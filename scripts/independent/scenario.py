"""The scenario input generator of docs/testdata.md ("The scenario generator"), written
from that page alone, and a check that it remakes every committed replay byte for byte."""

from __future__ import annotations

import struct

from ostm import I32_MAX as MAX
from ostm import I32_MIN as MIN
from ostm import Sfc32, World, encode_op

SCN1 = 0x314E4353


class Scenario:
    def __init__(self, seed: int, link=None):
        self.rng = Sfc32(seed ^ SCN1)
        self.n = 0
        self.x = None  # the body removed at k = 270, if any
        self.link_body = link.body if link is not None and link.role in (1, 2) else None

    def next(self) -> int:
        return self.rng.next()

    def range(self, lo: int, hi: int) -> int:
        return lo + self.next() % (hi - lo + 1)

    def live_body(self, world: World) -> int:
        live = [i for i, s in enumerate(world.slots) if s[0] == 1]
        if not live:
            self.next()
            return 0
        return live[self.range(0, len(live) - 1)]

    def spawn_pos(self) -> tuple:
        x = self.range(0, 10000)
        y = 0 if self.next() % 2 == 0 else self.range(0, 10000)
        z = self.range(0, 10000)
        return (5, x, y, z)

    def target(self, world: World) -> int:
        u = self.next() % 10
        if u <= 6:
            return self.live_body(world)
        slots = len(world.slots)
        if u <= 8:
            return self.range(0, slots - 1)
        return self.range(slots, 255)

    def lively(self, m: int, world: World) -> list:
        """Call n = 10 000 + m: the lively phase."""
        ops = []
        if m % 2000 == 0:
            ops.append((4, 3))
        if m % 4 == 0:
            t = self.live_body(world)
            ops.append((1, t, self.range(-80, 80), self.range(40, 160), self.range(-80, 80)))
        return ops

    def next_input(self, world: World) -> list:
        n = self.n
        self.n += 1
        if n >= 10000:
            return self.lively(n - 10000, world)
        k = n % 2000
        if k >= 300:
            return []
        ops = []
        if k == 10:
            ops += [(5, MIN, MAX, MIN), (5, MAX, MIN, MAX)]
        elif 20 <= k <= 98 and k % 2 == 0:
            ops += [self.spawn_pos(), self.spawn_pos()]
        elif k == 100:
            ops.append((4, 0))
        elif k == 140:
            ops.append((4, -2))
        elif k == 180:
            ops.append((4, 3))
        elif k == 200:
            ops.append((2, self.live_body(world), -5000, 15000, 20000))
        elif k == 240:
            ops.append((1, self.live_body(world), MAX, MIN, MAX))
        elif k == 241:
            ops.append((1, self.live_body(world), MIN, MAX, MIN))
        elif k == 242:
            ops.append((2, self.live_body(world), MIN, MAX, MIN))
        elif k == 243:
            ops.append((2, self.live_body(world), MAX, MIN, MAX))
        elif k == 250:
            ops.append((4, MAX))
        elif k == 251:
            ops.append((4, MIN))
        elif k == 252:
            ops.append((4, 3))
        elif k == 270:
            cands = [i for i, s in enumerate(world.slots) if s[0] == 1 and i != self.link_body]
            self.x = None
            if cands:
                self.x = cands[self.range(0, len(cands) - 1)]
                ops.append((3, self.x))
        elif k == 271:
            if self.x is not None:
                ops += [(1, self.x, 100, 100, 100), (2, self.x, 5000, 5000, 5000), (3, self.x)]
        elif k == 272:
            ops += [(1, 255, MIN, MIN, MIN), (2, 64, MAX, MAX, MAX), (3, 200)]
        elif k == 299:
            ops.append((4, 3))
        if self.next() % 8 < 2:
            for _ in range(1 + self.next() % 3):
                w = self.next() % 20
                if w <= 8:
                    t = self.target(world)
                    ops.append((1, t, self.range(-200, 200), self.range(-200, 200), self.range(-200, 200)))
                elif w <= 12:
                    t = self.target(world)
                    ops.append((2, t, self.range(-2000, 12000), self.range(-2000, 12000), self.range(-2000, 12000)))
                elif w <= 16:
                    ops.append(self.spawn_pos())
                elif w <= 18:
                    ops.append((4, [-3, -1, 0, 1, 2, 3, 5, 10][self.next() % 8]))
                else:
                    t = self.target(world)
                    live = sum(1 for s in world.slots if s[0] == 1)
                    if t < len(world.slots) and world.slots[t][0] == 1 and (live <= 32 or t == self.link_body):
                        t = 255
                    ops.append((3, t))
        return ops


def regenerate(replay, unrecorded: int = 0) -> list:
    """The step inputs the scenario makes for this replay's setup, as raw bytes. With a start
    snapshot, the scenario is first run `unrecorded` steps from the setup's world."""
    world = World.from_setup(replay.dims, replay.bodies, replay.seed, replay.link)
    scen = Scenario(replay.seed, replay.link)
    for _ in range(unrecorded):
        world.step_once(scen.next_input(world))
    if replay.snapshot is not None and world.snapshot() != replay.snapshot:
        return None
    out = []
    for _ in range(replay.step_count):
        ops = scen.next_input(world)
        out.append(b"".join(encode_op(op) for op in ops))
        world.step_once(ops)
    return out


def first_input_difference(replay, unrecorded: int = 0):
    """None when the scenario remakes every step input, else a description."""
    mine = regenerate(replay, unrecorded)
    if mine is None:
        return f"the world after {unrecorded} unrecorded steps is not the start snapshot"
    for s, (a, b) in enumerate(zip(mine, replay.raw_inputs)):
        if a != b:
            return f"step input {s} (step {replay.start_step + s}): file {b.hex()} scenario {a.hex()}"
    return None


_ = struct  # (kept for callers that pack inputs)
