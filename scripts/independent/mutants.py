#!/usr/bin/env python3
"""Planted faults: shows that ostm_check.py fails when a rule of the docs is changed.

Each mutant is one textual change to ostm.py (or ostm_check.py). The check is run on a
mutated copy; a mutant is "caught" when the check exits non-zero. A mutant that survives
names a documented rule the committed test data does not pin down (listed as expected
survivors below, each with the reason) or a hole in the check.

Prints one line per mutant and a final `N passed, N failed`; exits 1 when a mutant that
should be caught survives, or an expected survivor is caught (the list is then stale).
Usage: mutants.py [REPO_ROOT]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (name, file, old text, new text, expected to be caught)
MUTANTS = [
    ("sfc32 rotation 21 -> 20", "ostm.py", "(c << 21) | (c >> 11)", "(c << 20) | (c >> 12)", True),
    ("sfc32 discards 11 outputs", "ostm.py", "for _ in range(12):", "for _ in range(11):", True),
    ("range without +1", "ostm.py", "% (hi - lo + 1)", "% (hi - lo)", True),
    ("2D draws z too", "ostm.py", "pz = rng.range(500, 9500) if dims == 3 else 0", "pz = rng.range(500, 9500) * 0", True),
    ("default gravity 2", "ostm.py", "gravity: int = 3", "gravity: int = 2", True),
    ("impulse not saturating", "ostm.py", "s[5 + a] = sat_i32(s[5 + a] + op[2 + a])", "s[5 + a] = (s[5 + a] + op[2 + a] + 2**31) % 2**32 - 2**31", True),
    ("impulse reaches a removed body", "ostm.py", "s = self._live(op[1])\n                if s is not None:\n                    for a in axes:\n                        s[5 + a]", "s = self.slots[op[1]] if op[1] < len(self.slots) else None\n                if s is not None:\n                    for a in axes:\n                        s[5 + a]", True),
    ("teleport resets still", "ostm.py", "s[2 + a] = op[2 + a]", "s[2 + a] = op[2 + a]; s[1] = 0", True),
    ("2D teleport sets z", "ostm.py", "for a in axes:\n                        s[2 + a] = op[2 + a]", "for a in (0, 1, 2):\n                        s[2 + a] = op[2 + a]", True),
    ("sender keeps the body", "ostm.py", "if link.role == 1:\n                    self.slots[link.body] = empty_slot()", "if link.role == 1:\n                    pass", True),
    ("2D impulse moves z", "ostm.py", "for a in axes:\n                        s[5 + a] = sat_i32", "for a in (0, 1, 2):\n                        s[5 + a] = sat_i32", True),
    ("2D spawn keeps z", "ostm.py", "z = op[3] if self.dims == 3 else 0\n                    self.slots.append", "z = op[3]\n                    self.slots.append", True),
    ("spawn cap 63", "ostm.py", "if len(self.slots) < MAX_SLOTS:", "if len(self.slots) < MAX_SLOTS - 1:", True),
    ("gravity not saturating", "ostm.py", "s[6] = sat_i32(s[6] - self.gravity)", "s[6] = (s[6] - self.gravity + 2**31) % 2**32 - 2**31", True),
    ("gravity before input", "ostm.py", "STAGES = (stage_input, stage_gravity,", "STAGES = (stage_gravity, stage_input,", True),
    ("bounce damping floors", "ostm.py", "v = tdiv(-v * 3, 4)", "v = (-v * 3) // 4", True),
    ("bounce damping 2/3", "ostm.py", "v = tdiv(-v * 3, 4)", "v = tdiv(-v * 2, 3)", True),
    ("settle below 7", "ostm.py", "if abs(v) < 8:", "if abs(v) < 7:", True),
    ("settle at 8 too", "ostm.py", "if abs(v) < 8:", "if abs(v) <= 8:", True),
    ("no clamp after one reflection", "ostm.py", "p = min(max(p, 0), BOX)", "pass", True),
    ("high wall reflects to L - p", "ostm.py", "p, wall = 2 * BOX - p, BOX", "p, wall = BOX - (p - BOX) - 1, BOX", True),
    ("friction floors", "ostm.py", "s[5 + a] = tdiv(s[5 + a] * 7, 8)", "s[5 + a] = (s[5 + a] * 7) // 8", True),
    ("friction on x only", "ostm.py", "if a != 1:\n                        s[5 + a] = tdiv", "if a == 0:\n                        s[5 + a] = tdiv", True),
    ("no friction", "ostm.py", "if s[3] == 0:", "if False:", True),
    ("still does not reset", "ostm.py", "else:\n                    s[1] = 0", "else:\n                    pass", True),
    ("still counts y only", "ostm.py", "if all(s[5 + a] == 0 for a in axes):", "if s[6] == 0:", True),
    ("2D still reads velocity z", "ostm.py", "if all(s[5 + a] == 0 for a in axes):", "if s[5] == 0 and s[6] == 0 and s[7] == 0:", True),
    ("a dead slot gets gravity", "ostm.py", "for s in self.slots:\n            if s[0] == 1:\n                s[6] = sat_i32", "for s in self.slots:\n            if True:\n                s[6] = sat_i32", True),
    ("a snapshot's dead slot read as the empty slot", "ostm.py", "            w.slots.append(list(struct.unpack_from(\"<II3i3i\", snap, 12 + 32 * i)))", "            w.slots.append(list(struct.unpack_from(\"<II3i3i\", snap, 12 + 32 * i)))\n            if w.slots[-1][0] == 0:\n                w.slots[-1] = empty_slot()", True),
    ("a 2D snapshot's z read as 0", "ostm.py", "            w.slots.append(list(struct.unpack_from(\"<II3i3i\", snap, 12 + 32 * i)))", "            w.slots.append(list(struct.unpack_from(\"<II3i3i\", snap, 12 + 32 * i)))\n            if dims == 2:\n                w.slots[-1][4] = w.slots[-1][7] = 0", True),
    ("a transfer skips the newest slot (one spawned after the start)", "ostm.py", "            if link.body < len(self.slots):\n                if link.role == 1:", "            if link.body < len(self.slots) - 1:\n                if link.role == 1:", True),
    ("the reader refuses a dead slot with fields set", "ostm.py", "            raise FormatError(base + off, f\"body {i}: expected alive 0 or 1, found {alive}\")", "            raise FormatError(base + off, f\"body {i}: expected alive 0 or 1, found {alive}\")\n        if alive == 0 and any(snap[off : off + 32]):\n            raise FormatError(base + off, \"a removed body must be all zeros\")", True),
    ("the reader refuses a link body at the body count", "ostm.py", "        link = Link(role, body, tstep)", "        if role in (1, 2) and body >= bodies:\n            raise FormatError(19, \"link body out of range\")\n        link = Link(role, body, tstep)", True),
    ("transfer one step late", "ostm.py", "self.step == link.transfer_step", "self.step == link.transfer_step + 1", True),
    ("receiver arrives at z 0", "ostm.py", "z = 5000 if self.dims == 3 else 0\n                    self.slots[link.body]", "z = 0\n                    self.slots[link.body]", True),
    ("receiver arrives at rest", "ostm.py", "[1, 0, 5000, 5000, z, 40, 0, 0]", "[1, 0, 5000, 5000, z, 0, 0, 0]", True),
    ("receiver body present from the start", "ostm.py", "if link is not None and link.role == 2 and link.body < len(w.slots):", "if False:", True),
    ("remove keeps position", "ostm.py", "if self._live(op[1]) is not None:\n                    self.slots[op[1]] = empty_slot()", "if self._live(op[1]) is not None:\n                    self.slots[op[1]][0] = 0", True),
    ("hash with seed 1", "ostm.py", "seed=0)", "seed=1)", True),
    ("first rest step one later", "ostm_check.py", "first_rest[i] = number", "first_rest[i] = number + 1", True),
    ("scenario seed constant SCN2", "scenario.py", "SCN1 = 0x314E4353", "SCN1 = 0x324E4353", True),
    ("scenario random ops when next % 8 < 3", "scenario.py", "if self.next() % 8 < 2:", "if self.next() % 8 < 3:", True),
    ("scenario remove guard at 31", "scenario.py", "(live <= 32 or", "(live <= 31 or", True),
    ("scenario lively phase from call 10 001", "scenario.py", "if n >= 10000:", "if n >= 10001:", True),
    ("scenario lively kick up from 41", "scenario.py", "self.range(40, 160)", "self.range(41, 160)", True),
    ("first rest from the start world's still counts", "ostm_check.py", "    first_rest = {}\n", "    first_rest = {i: world.step for i, s in enumerate(world.slots) if s[0] == 1 and s[1] >= 1}\n", False),
    ("still saturates at 2^31", "ostm.py", "s[1] = min(s[1] + 1, U32_MAX)", "s[1] = min(s[1] + 1, 2**31)", False),
]

WHY_SURVIVES = {
    "first rest from the start world's still counts": "test-start-snapshot.ostm's first step is quiet, so no body at rest in its snapshot is set moving by it",
    "still saturates at 2^31": "no replay is long enough for a still count to reach 2^31",
}


def main() -> int:
    root = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else HERE.parents[1]
    passed = failed = 0
    for name, fname, old, new, expect_caught in MUTANTS:
        with tempfile.TemporaryDirectory() as tmp:
            for f in ("ostm.py", "ostm_check.py", "scenario.py"):
                shutil.copy(HERE / f, Path(tmp) / f)
            target = Path(tmp) / fname
            src = target.read_text()
            if src.count(old) != 1:
                failed += 1
                print(f"FAIL  {name}: the text to change occurs {src.count(old)} times in {fname}")
                continue
            target.write_text(src.replace(old, new))
            run = subprocess.run(
                [sys.executable, str(Path(tmp) / "ostm_check.py"), str(root)],
                capture_output=True,
                text=True,
            )
            caught = run.returncode != 0
        if caught == expect_caught:
            passed += 1
            verdict = "caught" if caught else f"survives as expected ({WHY_SURVIVES.get(name, '')})"
            print(f"ok    {name}: {verdict}")
        else:
            failed += 1
            verdict = "survived: the test data does not pin this rule" if not caught else "caught, but listed as a survivor"
            print(f"FAIL  {name}: {verdict}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
