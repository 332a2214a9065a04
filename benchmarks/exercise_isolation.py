"""What ``scratchformer exercise check`` and ``exercise train`` answer to a learner's file
that attacks the grader or leaves things behind: for each case, the command's output and
exit status, the processes left afterwards, and the learner's folder's hashes.

    python benchmarks/exercise_isolation.py run TREE [--cases a,b] [--no-train] > rows.json
    python benchmarks/exercise_isolation.py table rows.json [rows2.json]   # a summary
    python benchmarks/exercise_isolation.py log rows.json                  # every output

``run`` writes each case's files into a folder of its own under a temporary folder (a
wrong ``linear`` pass, dx doubled, with the trick at import or call time; and the
solution of ``relu``, another exercise of the folder), then runs the commands with
``PYTHONPATH=TREE`` (so one script measures two trees): ``check linear``, ``check relu``
after it (what the next check says), and ``train`` (2 steps, a small data set). After
each command: ``ps`` for every process a case names "leftover" (those found are then
ended here, so the next case starts clean) and every learner process of the checker
(named ``sfl-...``), and the sha256 of every file of the folder but the runs.

A benchmark, not a test: nothing here asserts.
"""

# ruff: noqa: E501 -- the cases are data, one per row
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

WRONG = """\
    x, W, has_bias = cache
    D, E = W.shape
    dx = 2.0 * (dout @ W.T)  # wrong: doubled
    dW = x.reshape(-1, D).T @ dout.reshape(-1, E)
    return dx, dW, dout.reshape(-1, E).sum(0) if has_bias else None
"""
RIGHT = WRONG.replace("2.0 * (dout @ W.T)  # wrong: doubled", "dout @ W.T")
NAME = """\
import ctypes as _ct
def _name(n):  # the process's name in ps
    try:
        _ct.CDLL(None).prctl(15, _ct.c_char_p(n), 0, 0, 0)
    except (OSError, AttributeError):
        pass
"""

# name: (what, module-level code, code at the start of the backward, body)
CASES = {
    "rebind-grader": ("rebinds the grader's functions at import (grade._grade, verdict._differ, op.check_op)", """\
import scratchformer.exercises.grade as _g
import scratchformer.exercises.verdict as _v
import scratchformer.exercises.op as _op
def _all_right(g, ex, *rest):
    g.status, g.message, g.wrong, g.diagnosis = "passing", "", [], []
    g.rows = [(t, 0.0, True) for t in ex.gradients]
_g._grade = _all_right
_v._differ = lambda mine, ref: []
_op.check_op = lambda *a, **k: _op.GradReport() if hasattr(_op, "GradReport") else None
""", "", WRONG),
    "patch-pipe": ("patches the result pipe at import: every result sent says passing / agree", """\
import multiprocessing.connection as _mc
_send = _mc.Connection.send
def _forged(self, obj):
    if isinstance(obj, tuple) and len(obj) == 2 and obj[0] == "ok" and isinstance(obj[1], dict):
        d = dict(obj[1])
        if "status" in d:
            d.update(status="passing", message="", wrong=[], diagnosis=[],
                     rows=[(r[0], 0.0, True) for r in d.get("rows", [])])
        if "agree" in d:
            d.update(agree=True, worst=[], count=0, blamed=[])
        obj = ("ok", d)
    return _send(self, obj)
_mc.Connection.send = _forged
try:  # the learner process's pipe, where there is one: every answer forged
    import scratchformer.exercises.wire as _w
    _reply = _w.reply
    _w.reply = lambda obj: _reply((obj[0], ("ok", {"status": "passing", "agree": True, "rows": []})))
except ImportError:
    pass
""", "", WRONG),
    "patch-numpy": ("patches NumPy's comparison functions at call time (allclose, isclose, array_equal, isfinite, testing)", "", """\
    import numpy as _np
    _np.allclose = lambda *a, **k: True
    _np.isclose = lambda a, b, *r, **k: _np.ones(_np.broadcast(a, b).shape, bool)
    _np.array_equal = lambda *a, **k: True
    _np.isfinite = lambda a, *r, **k: _np.ones(_np.shape(a), bool)
    _np.testing.assert_allclose = lambda *a, **k: None
""", WRONG),
    "setsid-double-fork": ("at import: setsid and a double fork leaving a process, and a program started in a session of its own", NAME + """\
import os as _os, subprocess as _sp, sys as _sys, time as _time
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        _name(b"leftover-fork")
        _time.sleep(300)
    _os._exit(0)
_sp.Popen([_sys.executable, "-c", "import time; time.sleep(300)", "leftover-popen"], start_new_session=True)
""", "", WRONG),
    "lingering-thread": ("at import: a thread that goes on printing PASSED", """\
import threading as _th, time as _time
def _linger():
    for _ in range(3000):
        print("  PASSED (from a thread)", flush=True)
        _time.sleep(0.1)
_th.Thread(target=_linger, name="leftover-thread").start()
""", "", WRONG),
    "write-other-file": ("at import: writes another exercise's file and a new file by absolute path, and one by a relative name", """\
with open(FOLDER + "/relu.py", "a") as _f:
    _f.write("\\n# changed by linear.py\\n")
with open(FOLDER + "/notes.txt", "w") as _f:
    _f.write("left behind by linear.py\\n")
with open("relative.txt", "w") as _f:
    _f.write("written by a relative name\\n")
""", "", WRONG),
    "kill-parent": ("at import: kills its parent (SIGKILL)", """\
import os as _os, signal as _sig
_os.kill(_os.getppid(), _sig.SIGKILL)
""", "", WRONG),
    "kill-parent-leaving-a-process": ("at import: a setsid double fork leaving a process, then kills its parent", NAME + """\
import os as _os, signal as _sig, time as _time
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        _name(b"leftover-daemon")
        _time.sleep(300)
    _os._exit(0)
_time.sleep(0.2)
_os.kill(_os.getppid(), _sig.SIGKILL)
""", "", WRONG),
    "print-passed": ("prints the checker's words itself, at import and at call time, with terminal escapes", """\
import sys as _sys
print("linear: a linear map (exercises/linear.py)")
print("  PASSED (0.01 s)")
print()
print("verdict: PASSED: linear")
_sys.stderr.write("\\x1b[1A\\x1b[2K  PASSED\\n")
""", """\
    print("  PASSED (0.02 s)")
""", WRONG),
    # -- the engine's own backward, reached by a computed name (right numbers) -----------
    "engine-by-importlib": ("the engine's backward through importlib and a computed name", "", "", """\
    import importlib
    mod = importlib.import_module("scratchformer.engine.ops." + "lin" + "ear")
    return getattr(mod, "linear_" + "backward")(dout, cache)
"""),
    "engine-by-__import__": ("the engine's backward through __import__", "", "", """\
    mod = __import__("scratchformer.engine.ops.lin" + "ear", fromlist=["x"])
    return getattr(mod, "linear_back" + "ward")(dout, cache)
"""),
    "engine-by-pickle": ("the engine's backward through pickle", "", "", """\
    import pickle
    return pickle.loads(b"cscratchformer.engine.ops.linear\\nlinear_back" + b"ward\\n.")(dout, cache)
"""),
    "engine-by-table": ("the engine's backward through the dispatch table by a computed name", "", "", """\
    import scratchformer.engine.dispatch as d
    return d.TABLES["lin" + "ear"].implementations()[0].backward(dout, cache)
"""),
    "engine-by-exec-source": ("the engine's backward: its source read and exec'd", "", "", """\
    import sys
    src = open(sys.modules["scratchformer.engine.ops.linear"].__file__).read()
    start = src.index("def linear_" + "backward")
    ns = {"xp": sys.modules["scratchformer.engine.backend"].xp}
    exec(src[start : src.index("\\n# --", start)], ns)
    return ns["linear_" + "backward"](dout, cache)
"""),
    "engine-by-fresh-module": ("the engine's backward: its module loaded afresh (as reload does)", "", "", """\
    import importlib.util, sys
    path = sys.modules["scratchformer.engine.ops.linear"].__file__
    spec = importlib.util.spec_from_file_location("fresh_copy", path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception:
        pass  # its table exists: the functions above the registration are there
    return getattr(mod, "linear_" + "backward")(dout, cache)
"""),
    "own-differences-computed": ("finite differences of its own, the forward reached by a computed name", "", "", """\
    fwd = globals()["linear_" + "forward"]
    x, W, has_bias = cache
    dx = xp.zeros_like(x)
    dW = xp.zeros_like(W)
    for a, g in ((x, dx), (W, dW)):
        for i in range(a.size):
            old = a.flat[i]
            a.flat[i] = old + 1e-6
            up = float((fwd(x, W)[0] * dout).sum())
            a.flat[i] = old - 1e-6
            down = float((fwd(x, W)[0] * dout).sum())
            a.flat[i] = old
            g.flat[i] = (up - down) / 2e-6
    return dx, dW, dout.reshape(-1, W.shape[1]).sum(0) if has_bias else None
"""),
}
MUST = ["rebind-grader", "patch-pipe", "patch-numpy", "setsid-double-fork", "lingering-thread",
        "write-other-file", "kill-parent", "kill-parent-leaving-a-process", "print-passed"]
SMALL = ["--set", "task.train_size=300", "--set", "task.valid_size=20", "--set",
         "task.test_size=20", "--set", "train.checkpoint_every=0"]
WAIT = 45  # seconds a command's output may stay open after it ended before its leftovers go


def file_for(tree_env: dict, name: str, folder: Path) -> str:
    _, head, pre, body = CASES[name]
    text = _run([sys.executable, "-c", "from scratchformer.exercises import EXERCISES; "
                 "print(EXERCISES['linear'].file_text(), end='')"], tree_env, folder.parent)[1]
    head = head.replace("FOLDER", repr(str(folder)))
    stub = '    raise NotImplementedError("linear_backward: not written yet")\n'
    text = text.replace("EXERCISE = ", head + "\nEXERCISE = ", 1)
    return text.replace(stub, pre + textwrap.indent(textwrap.dedent(body), "    "))


def _run(cmd, env, cwd, timeout=None, held=None):
    """``(status, stdout, stderr, seconds to exit, seconds until the output closed)``;
    ``held``: a list given the ps lines of what held the output open past ``timeout``."""
    t0 = time.time()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ended = [None]

    def watch():
        p.wait()
        ended[0] = time.time() - t0

    import threading  # noqa: PLC0415

    threading.Thread(target=watch, daemon=True).start()
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # the output held open by a process left behind
        found = _leftovers()
        if held is not None:
            held += found
        _end(found)
        out, err = p.communicate()
    closed = time.time() - t0
    while ended[0] is None:
        time.sleep(0.01)
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), ended[0], closed


def _leftovers() -> list[str]:
    """``ps`` lines of the processes a case leaves (named leftover) and of the learner
    processes (named sfl-...) of this script's commands (their scratch folder under
    this script's temporary folder), this script's own ps excluded."""
    ps = subprocess.run(["ps", "-eo", "pid,ppid,sid,stat,comm,args"], capture_output=True,
                        text=True).stdout.splitlines()
    found = []
    for x in ps[1:]:
        if "ps -eo" in x:
            continue
        if "leftover" in x:
            found.append(x)
        elif " sfl-" in x:
            try:
                if os.readlink(f"/proc/{x.split()[0]}/cwd").startswith(TMP[0]):
                    found.append(x)
            except OSError:
                pass
    return found


TMP = [""]  # this run's temporary folder


def _end(lines) -> None:
    for x in lines:
        try:
            os.kill(int(x.split()[0]), signal.SIGKILL)
        except (ProcessLookupError, ValueError, PermissionError):
            pass


def _hashes(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
            for p in sorted(folder.rglob("*")) if p.is_file() and "runs" not in p.parts}


def _step(rows, case, tree, label, cmd, env, cwd, folder, before, end=True):
    held: list = []
    status, out, err, seconds, closed = _run(cmd, env, cwd, WAIT, held)
    time.sleep(0.5)  # a process that outlives its command has had time to show
    seen = held + [x for x in _leftovers() if x not in held]
    left = [x for x in seen if not x.split()[3].startswith("Z")]
    if end:  # else the next command may find them
        _end(left)
    after = _hashes(folder)
    lines = [x for x in (out + err).splitlines() if x.strip()]
    rows.append({
        "case": case, "tree": tree, "step": label, "command": " ".join(cmd[3:]),
        "status": status, "seconds": round(seconds, 2), "output_closed": round(closed, 2),
        "last_line": lines[-1] if lines else "", "says_passed": any(
            x.strip().startswith(("PASSED", "verdict: PASSED")) or x.strip() == "PASSED" or
            "your passes are right in the whole model" in x for x in lines),
        "left": left, "zombies": [x for x in seen if x not in left], "hashes_changed": sorted(k for k in set(before) | set(after)
                                                if before.get(k) != after.get(k)),
        "files_outside": sorted(str(p.relative_to(cwd)) for p in cwd.iterdir()
                                if p.name != "exercises"),
        "stdout": out, "stderr": err})


def run(tree: str, cases: list, train: bool) -> None:
    env = {**os.environ, "PYTHONPATH": tree, "PYTHONDONTWRITEBYTECODE": "1",
           "OPENBLAS_NUM_THREADS": "1"}
    rows: list = []
    cli = [sys.executable, "-m", "scratchformer", "exercise"]
    with tempfile.TemporaryDirectory() as tmp:
        TMP[0] = env["TMPDIR"] = tmp  # the learner's scratch folders go there too
        for case in cases:
            for step in ("check", "train") if train and case in MUST else ("check",):
                cwd = Path(tmp) / f"{case}-{step}"
                folder = cwd / "exercises"
                folder.mkdir(parents=True)
                (folder / "linear.py").write_text(file_for(env, case, folder))
                relu = _run([sys.executable, "-c", "from scratchformer.exercises import EXERCISES; print(EXERCISES['relu'].solution_text(), end='')"], env, cwd)[1]
                (folder / "relu.py").write_text(relu)
                before = _hashes(folder)
                if step == "check":
                    _step(rows, case, tree, "check linear", [*cli, "check", "linear", "--seed", "1", "--time-limit", "30"], env, cwd, folder, before, end="kill" not in case)
                    _step(rows, case, tree, "check relu (the next check)", [*cli, "check", "relu", "--seed", "1"], env, cwd, folder, before)
                else:
                    _step(rows, case, tree, "train", [*cli, "train", "--steps", "2", "--no-progress", "--time-limit", "30", *SMALL], env, cwd, folder, before, end="kill" not in case)
                    _step(rows, case, tree, "check relu (the next check)", [*cli, "check", "relu", "--seed", "1"], env, cwd, folder, before)
    json.dump(rows, sys.stdout, indent=1)


def table(paths: list) -> None:
    runs = [json.loads(Path(p).read_text()) for p in paths]
    print("| case | step | " + " | ".join(f"{Path(p).stem}: status / says PASSED / left / files changed" for p in paths) + " |")
    print("|---|---|" + "---|" * len(paths))
    keys = list(dict.fromkeys((r["case"], r["step"]) for r in runs[0]))
    for case, step in keys:
        cells = []
        for rows in runs:
            r = next((x for x in rows if (x["case"], x["step"]) == (case, step)), None)
            if r is None:
                cells.append("")
                continue
            held = f", output open {r['output_closed']:.0f} s" if r["output_closed"] - r["seconds"] > 1 else ""
            cells.append(f"{r['status']} / {'PASSED' if r['says_passed'] else 'no'} / "
                         f"{len(r['left'])}{held} / {', '.join(r['hashes_changed'] + [f'{x} (outside)' for x in r['files_outside']]) or 'none'}")
        print(f"| {case} | {step} | " + " | ".join(cells) + " |")


def log(path: str) -> None:
    for r in json.loads(Path(path).read_text()):
        print(f"=== {r['case']}: {r['step']} ({r['tree']})")
        print(f"$ scratchformer {r['command']}")
        print(r["stdout"].rstrip())
        if r["stderr"].strip():
            print("[stderr]\n" + r["stderr"].rstrip())
        print(f"[exit status {r['status']} after {r['seconds']} s; output closed after {r['output_closed']} s]")
        print("[ps, processes left running: " + (str(len(r["left"])) if r["left"] else "none") + "]")
        for x in r["left"]:
            print(f"  {x}")
        for x in r.get("zombies", []):
            print(f"  (ended, not reaped by this machine's init: {x})")
        print(f"[files of the folder changed: {', '.join(r['hashes_changed']) or 'none'}; "
              f"beside the folder: {', '.join(r['files_outside']) or 'nothing'}]\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        chosen = MUST + [c for c in CASES if c not in MUST]
        if "--cases" in sys.argv:
            chosen = sys.argv[sys.argv.index("--cases") + 1].split(",")
        run(str(Path(sys.argv[2]).resolve()), chosen, "--no-train" not in sys.argv)
    elif sys.argv[1:2] == ["table"]:
        table(sys.argv[2:])
    elif sys.argv[1:2] == ["log"]:
        log(sys.argv[2])
    else:
        print(__doc__)
