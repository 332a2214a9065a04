"""The several-files commit under attack: kill -9 and SIGINT at moments spread over
``export`` and over ``data pairs``, each into a fresh target and over an earlier output.

    python attack.py TREE WORK > attack_TREE.txt

TREE: a checkout of scratchformer (its package is imported from there); WORK: a folder
holding my.tsv, my2.tsv and the checkpoints new.npz and old.npz (make_inputs.sh).

For each case the command is first run whole (no attack) to learn the old set and the
new set (SHA-256 of every file) and its writer steps (hook/sitecustomize.py). Then, for
every moment, a fresh copy of the start state: the command runs with the hook, which
sends the signal right after that step, or after a delay (the first moments: the
command still loading); the state left is classified:

    old / new      the target holds exactly the old or the new set
    absent         (export) no target folder, the old or the new set whole beside it
    refused        (data) a mix on disk, which every reader refuses (the manifest)
    MIX            anything else: a set that is neither, or a mix a reader accepts

then the same command runs again, unattacked: what it says (its notes), and that it
leaves the new set and no temporary file or folder.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TREE, WORK = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
PY = "/work/main/.venv/bin/python" if len(sys.argv) < 4 else sys.argv[3]
sys.path.insert(0, str(TREE))
from scratchformer import writer  # noqa: E402

MANIFEST = getattr(writer, "MANIFEST_NAME", "manifest.json")

CASES = {
    "export, fresh target": (
        ["export", "new.npz", "-o", "T"],
        None,
    ),
    "export, over an earlier export": (
        ["export", "new.npz", "-o", "T", "--overwrite"],
        ["export", "old.npz", "-o", "T"],
    ),
    "data pairs, fresh target": (
        ["data", "pairs", "my.tsv", "--out", "T"],
        None,
    ),
    "data pairs --overwrite, over an earlier output": (
        ["data", "pairs", "my.tsv", "--out", "T", "--overwrite"],
        ["data", "pairs", "my2.tsv", "--out", "T"],
    ),
}
#: the first moments: a delay (seconds) after the start, before any writer step
DELAYS = (0.3, 0.6)
MOMENTS = 20


def run(argv, cwd, **env):
    e = {**os.environ, "PYTHONPATH": f"{HERE / 'hook'}:{TREE}", **env}
    return subprocess.run(
        [PY, "-m", "scratchformer", *argv], cwd=cwd, env=e, capture_output=True, text=True
    )


def hashes(d: Path) -> dict:
    if not d.is_dir():
        return {}
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:12]
        for p in sorted(d.iterdir())
        if p.is_file() and not writer.TEMPORARY_RE.match(p.name)
    }


def leftovers(cwd: Path) -> list[str]:
    """Temporary files and folders of ours in the work folder and in T."""
    found = [p.name for p in cwd.iterdir() if p.name.startswith(".T.")]
    t = cwd / "T"
    if t.is_dir():
        found += [f"T/{p.name}" for p in t.iterdir() if writer.TEMPORARY_RE.match(p.name)]
    return sorted(found)


def setup(case_dir: Path, before) -> None:
    if case_dir.exists():
        shutil.rmtree(case_dir)
    case_dir.mkdir(parents=True)
    for name in ("my.tsv", "my2.tsv", "new.npz", "old.npz"):
        os.link(WORK / name, case_dir / name)
    if before:
        r = run(before, case_dir)
        assert r.returncode == 0, r.stderr


def classify(cwd: Path, old: dict, new: dict, export: bool) -> str:
    got = hashes(cwd / "T")
    data = {k: v for k, v in got.items() if k != MANIFEST}
    if export:
        if not (cwd / "T").exists():
            beside = [p.name.rsplit(".", 1)[-1] for p in cwd.iterdir() if p.name.startswith(".T.")]
            return f"absent (beside it: {', '.join(sorted(beside)) or 'nothing'})"
        if got == new:
            return "new"
        if got == old:
            return "old" if old else "empty folder"
        if not got:
            return "empty folder" if not old else "MIX (empty)"
        return f"MIX ({len(got)} files)"
    check = (
        writer.check_manifest(cwd / "T", ["train.tsv", "dev.tsv", "test.tsv"])
        if hasattr(writer, "check_manifest")
        else None
    )
    reads = check is None or not check.problem
    if not (cwd / "T").exists() or not data:
        return "nothing (no data set)"
    if data == {k: v for k, v in new.items() if k != MANIFEST} and reads:
        return "new"
    if data == {k: v for k, v in old.items() if k != MANIFEST} and reads:
        return "old"
    if not reads:
        n_new = sum(data.get(k) == v for k, v in new.items() if k != MANIFEST)
        return f"refused by readers ({n_new} of 3 splits new): {check.problem}"
    return f"MIX accepted by readers ({sorted(data)})"


def main() -> int:
    git = ["git", "rev-parse", "--short", "HEAD"]
    commit = subprocess.run(git, cwd=TREE, capture_output=True, text=True).stdout.strip()
    print(f"tree: {TREE} (git {commit})")
    bad = 0
    for name, (argv, before) in CASES.items():
        export = argv[0] == "export"
        ref = WORK / "ref"
        setup(ref, before)
        old = hashes(ref / "T")
        count = ref / "steps.txt"
        r = run(argv, ref, ATTACK_COUNT=str(count))
        assert r.returncode == 0, r.stderr
        new = hashes(ref / "T")
        steps = count.read_text().split("\n")[:-1]
        n = len(steps)
        picks = sorted(
            {
                round(1 + i * (n - 1) / (MOMENTS - len(DELAYS) - 1))
                for i in range(MOMENTS - len(DELAYS))
            }
        )
        moments = [("delay", d) for d in DELAYS] + [("step", k) for k in picks]
        print(f"\n== {name}: scratchformer {' '.join(argv)} ({n} writer steps)")
        print(f"   old set: {old or 'none'}\n   new set: {new}")
        for sig in ("KILL", "INT"):
            for kind, at in moments:
                cwd = WORK / "case"
                setup(cwd, before)
                if kind == "step":
                    r = run(argv, cwd, ATTACK_AT=str(at), ATTACK_SIGNAL=sig)
                    where = f"after step {at:>2}/{n} ({steps[at - 1]})"
                    rc, tail = r.returncode, (r.stderr.strip().splitlines() or [""])[-1]
                else:
                    e = {**os.environ, "PYTHONPATH": f"{HERE / 'hook'}:{TREE}"}
                    p = subprocess.Popen(
                        [PY, "-m", "scratchformer", *argv], cwd=cwd, env=e,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                    )  # fmt: skip
                    time.sleep(at)
                    p.send_signal(signal.SIGKILL if sig == "KILL" else signal.SIGINT)
                    out, err = p.communicate()
                    rc, tail = p.returncode, (err.strip().splitlines() or [""])[-1]
                    where = f"{at:.1f} s after the start"
                state = classify(cwd, old, new, export)
                left = leftovers(cwd)
                again = run(argv, cwd)
                notes = [ln for ln in again.stderr.splitlines() if ln.startswith("note:")]
                final = classify(cwd, old, new, export)
                after_left = leftovers(cwd)
                ok = not state.startswith("MIX") and final == "new" and not after_left
                ok = ok and again.returncode == 0
                bad += not ok
                print(f"{'ok ' if ok else 'BAD'} {sig:<4} {where}: rc {rc}, left {state}"
                      f"{'; temporaries ' + ', '.join(left) if left else ''}")  # fmt: skip
                if tail and rc != 0:
                    print(f"      its last line: {tail[:160]}")
                gone = ", temporaries left: " + ", ".join(after_left) if after_left else ""
                print(f"      next run: rc {again.returncode}, {final}{gone or ', no temporaries'}")
                for note in notes:
                    print(f"      {note[:200]}")
    print(f"\n{bad} bad case(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
