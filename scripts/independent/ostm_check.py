#!/usr/bin/env python3
"""Checks the committed test data against an implementation written from docs/ alone.

For each testdata/*.ostm and testdata/accepted/*.ostm: read it with every check of
docs/replay-format.md, write it back (it must give the same bytes), rebuild the start world
(start snapshot or setup), run every step of docs/test-module.md and compare the world hash
with every hash row. For each testdata/malformed/ file in its manifest:
require a refusal at exactly the listed offset with the listed message fragment. For
testdata/golden.json (docs/testdata.md): recompute every number. For docs/testdata.md's
table: each file's header and size, and the scenario generator described there must remake
every step input byte for byte.

Prints one line per check and a final `N passed, N failed`; exits 1 on any failure.
Usage: ostm_check.py [REPO_ROOT]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ostm import FormatError, parse_replay  # noqa: E402
from scenario import first_input_difference  # noqa: E402


class Tally:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def ok(self, name: str, detail: str) -> None:
        self.passed += 1
        print(f"ok    {name}: {detail}")

    def fail(self, name: str, detail: str) -> None:
        self.failed += 1
        print(f"FAIL  {name}: {detail}")


def run_replay(replay):
    """Runs a replay from its start world. Returns (worlds' hashes per row, final world,
    first rest step per slot index)."""
    world = replay.start_world()
    # Only the steps run count: the start world's own still counts are not consulted
    # (docs/testdata.md, first_rest_step).
    first_rest = {}
    hashes = [world.hash()]
    for ops in replay.inputs:
        number = world.step
        world.step_once(ops)
        for i, s in enumerate(world.slots):
            if s[0] == 1 and s[1] >= 1 and i not in first_rest:
                first_rest[i] = number
        hashes.append(world.hash())
    return hashes, world, first_rest


def check_replay(path: Path, tally: Tally, results: dict, folder: str = "testdata") -> None:
    name = f"{folder}/{path.name}"
    data = path.read_bytes()
    try:
        replay = parse_replay(data)
    except FormatError as e:
        tally.fail(name, f"refused: {e}")
        return
    if replay.to_bytes() != data:
        tally.fail(name, "read -> write does not give back the same bytes")
        return
    hashes, world, first_rest = run_replay(replay)
    results[path.name] = (replay, hashes, world, first_rest)
    start = replay.start_step
    end = start + replay.step_count
    if replay.hashes is None:
        tally.ok(name, f"no hash rows; ran {replay.step_count} steps ({start}..{end}), final {hashes[-1]:016x}")
        return
    for r, (want, got) in enumerate(zip(replay.hashes, hashes)):
        if want != got:
            tally.fail(
                name,
                f"mismatch at step {start + r} (row {r}): file {want:016x}, computed {got:016x}"
                f" ({r} rows matched before)",
            )
            return
    tally.ok(name, f"all {len(hashes)} hash rows match (steps {start}..{end}), final {hashes[-1]:016x}")


def check_table(root: Path, tally: Tally, results: dict) -> None:
    """docs/testdata.md's table of files: header values and sizes; then the scenario of
    docs/testdata.md must remake every step input byte for byte."""
    doc = (root / "docs" / "testdata.md").read_text()
    roles = {"role 1 (sender)": 1, "role 2 (receiver)": 2, "role 3": 3}
    for line in doc.splitlines():
        if not line.startswith("| `test-") or ".ostm`" not in line:
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        fname = cells[0].strip("`")
        name = f"docs/testdata.md table: {fname}"
        if fname not in results:
            tally.fail(name, "no such replay, or it was refused")
            continue
        replay = results[fname][0]
        size = (root / "testdata" / fname).stat().st_size
        link = "none"
        if replay.link is not None:
            role = next(k for k, v in roles.items() if v == replay.link.role)
            link = f"{role}, body {replay.link.body}, step {replay.link.transfer_step}"
        got = [fname, str(replay.dims), str(replay.bodies), str(replay.seed), link,
               str(replay.start_step), f"{replay.step_count:,}".replace(",", " "), f"{size:,}".replace(",", " ")]
        if cells[1:] != got[1:]:
            tally.fail(name, f"the table says {cells[1:]}, the file has {got[1:]}")
        else:
            tally.ok(name, "dims, bodies, seed, link, start, steps and bytes as stated")
        diff = first_input_difference(replay, replay.start_step)
        if diff:
            tally.fail(f"scenario {fname}", diff)
        else:
            tally.ok(f"scenario {fname}", f"remade all {replay.step_count} step inputs byte for byte"
                     + (f" (after {replay.start_step} unrecorded steps, to the start snapshot)" if replay.start_step else ""))


def check_malformed(root: Path, tally: Tally) -> None:
    folder = root / "testdata" / "malformed"
    manifest = json.loads((folder / "manifest.json").read_text())
    listed = set()
    for case in manifest["cases"]:
        name = f"testdata/malformed/{case['file']}"
        listed.add(case["file"])
        try:
            parse_replay((folder / case["file"]).read_bytes())
        except FormatError as e:
            if e.offset != case["offset"]:
                tally.fail(name, f"refused at offset {e.offset}, manifest says {case['offset']}: {e.message}")
            elif case["message"] not in e.message:
                tally.fail(name, f"message {e.message!r} lacks {case['message']!r}")
            else:
                tally.ok(name, f"refused at offset {e.offset}: {e.message}")
            continue
        tally.fail(name, "accepted, but the manifest says it is malformed")
    for path in sorted(folder.glob("*.ostm")):
        if path.name not in listed:
            tally.fail(f"testdata/malformed/{path.name}", "not in manifest.json")


def check_golden(root: Path, tally: Tally, results: dict) -> None:
    golden = json.loads((root / "testdata" / "golden.json").read_text())
    if golden.get("format") != "ostm-golden@1":
        tally.fail("testdata/golden.json", f"format {golden.get('format')!r}")
        return
    for entry in golden["replays"]:
        name = f"golden.json {entry['file']}"
        if entry["file"] not in results:
            tally.fail(name, "replay missing or refused")
            continue
        replay, hashes, world, first_rest = results[entry["file"]]
        problems = []

        def cmp(what, want, got):
            if want != got:
                problems.append(f"{what}: expected {want}, actual {got}")

        cmp("final step", entry["final_step"], world.step)
        cmp("final hash", entry["final_hash"], f"0x{hashes[-1]:016x}")
        cmp("body count", len(entry["bodies"]), len(world.slots))
        for b, s in zip(entry["bodies"], world.slots):
            i = b["index"]
            cmp(f"body {i} alive", b["alive"], s[0] == 1)
            cmp(f"body {i} position", b["position"], s[2:5])
            cmp(f"body {i} velocity", b["velocity"], s[5:8])
            cmp(f"body {i} first rest step", b["first_rest_step"], first_rest.get(i))
        if problems:
            tally.fail(name, "; ".join(problems[:6]) + (f" (+{len(problems) - 6} more)" if len(problems) > 6 else ""))
        else:
            tally.ok(name, f"final step {world.step}, hash, {len(world.slots)} bodies' numbers")


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
    tally = Tally()
    results: dict = {}
    replays = sorted((root / "testdata").glob("*.ostm"))
    if not replays:
        tally.fail("testdata", "no *.ostm files")
    for path in replays:
        check_replay(path, tally, results)
    # Files the contract allows that our writer never makes (docs/testdata.md, "Files the
    # reader accepts"): a dead slot with fields set, a 2D z, a link index with no slot.
    accepted = sorted((root / "testdata" / "accepted").glob("*.ostm"))
    if not accepted:
        tally.fail("testdata/accepted", "no *.ostm files")
    for path in accepted:
        check_replay(path, tally, {}, "testdata/accepted")
    check_table(root, tally, results)
    check_malformed(root, tally)
    check_golden(root, tally, results)
    print(f"{tally.passed} passed, {tally.failed} failed")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
