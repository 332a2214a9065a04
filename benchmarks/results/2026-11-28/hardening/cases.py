"""Each case of the issue, by its command: the exit status, the one line (the last line of
stderr), and the SHA-256 of the files that must survive (and of what is left).

    python cases.py TREE WORK > cases_TREE.txt

TREE: a checkout of scratchformer (imported from there); WORK: a folder holding my.tsv,
the data set d1/ it was split into (with `data pairs`), and new.npz, a translation model
trained on it (make_inputs.sh). Each case runs in a fresh folder under WORK/cases/.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

TREE, WORK = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
PY = "/work/main/.venv/bin/python"
ENV = {**os.environ, "PYTHONPATH": str(TREE), "XDG_STATE_HOME": str(WORK / "cases-state")}


def sf(*argv, cwd, env=None, stdout=None, stdin=None, timeout=600):
    return subprocess.run(
        [PY, "-m", "scratchformer", *map(str, argv)], cwd=cwd, env={**ENV, **(env or {})},
        stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE, stdin=stdin, text=True,
        timeout=timeout,
    )  # fmt: skip


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()[:16] if p.is_file() else "(none)"


def listing(d: Path) -> str:
    """Every file under ``d`` (hidden ones too) with its SHA-256's first 16 digits."""
    if not d.exists():
        return f"{d.name}/: absent"
    files = sorted(p for p in d.rglob("*") if p.is_file())
    return ", ".join(f"{p.relative_to(d)} {sha(p)}" for p in files) or "(empty)"


def case(title: str):
    d = WORK / "cases" / title.split(":")[0].replace(" ", "_")
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    for name in ("my.tsv", "new.npz"):
        os.link(WORK / name, d / name)
    shutil.copytree(WORK / "d1", d / "d1")
    print(f"\n== {title}")
    return d


def said(r, what="") -> None:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    tb = " (with a traceback)" if "Traceback" in r.stderr else ""
    print(f"   {what}rc {r.returncode}{tb}: {lines[-1][:300] if lines else '(nothing on stderr)'}")


def run_cases() -> None:
    d = case("1 export --overwrite over a folder with a directory where a file goes")
    (d / "hf" / "model.safetensors").mkdir(parents=True)
    (d / "hf" / "config.json").write_text('{"mine": 1}\n')
    print(f"   before: {listing(d / 'hf')}")
    said(sf("export", "new.npz", "-o", "hf", "--overwrite", cwd=d))
    print(f"   after:  {listing(d / 'hf')}")

    for title, make in (
        ("2 export -o a data set's folder (data pairs)", lambda d: d / "d1"),
        ("3 export -o a language-model text set", _text_set),
        ("4 export -o a run's checkpoints folder", _run_folder),
    ):
        d = case(title)
        out = make(d)
        before = listing(out)
        said(sf("export", "new.npz", "-o", out, cwd=d))
        after = listing(out)
        print(f"   the folder's files {'unchanged' if after == before else 'CHANGED'}: {after}")

    d = case("5 data pairs --overwrite killed (kill -9) among its renames, then train")
    split = sf("data", "pairs", "my.tsv", "--out", "d2", cwd=d)
    rows = (d / "my.tsv").read_text().splitlines()
    (d / "other.tsv").write_text("\n".join(rows[: len(rows) * 3 // 4]) + "\n")
    hook = Path(__file__).resolve().parent / "hook"
    env = {"PYTHONPATH": f"{hook}:{TREE}", "ATTACK_SIGNAL": "KILL"}
    at = 11 if (TREE / "scratchformer/writer/fileset.py").exists() else 7  # the first split in
    r = sf("data", "pairs", "other.tsv", "--out", "d2", "--overwrite", cwd=d,
           env={**env, "ATTACK_AT": str(at)})  # fmt: skip
    said(r, "data pairs (killed after its first split's rename): ")
    print(f"   left: {listing(d / 'd2')}")
    n = {s: len((d / "d2" / f"{s}.tsv").read_text().splitlines()) for s in ("train", "dev", "test")}
    print(f"   pairs in the splits: {n}, {sum(n.values())} in all; other.tsv holds "
          f"{len(rows[: len(rows) * 3 // 4])}")  # fmt: skip
    r = sf("train", "--config", "pairs", "--set", "task.data_dir=d2", "--steps", "2",
           "--run-dir", "r", "--no-progress", "--no-test", cwd=d)  # fmt: skip
    said(r, "train on it: ")
    assert split.returncode == 0

    d = case("6 float16 with --lr-factor 1e6 (the default task)")
    r = sf("train", "--set", "train.precision=float16", "--lr-factor", "1e6", "--steps", "30",
           "--run-dir", "r", "--no-progress", "--no-test", cwd=d)  # fmt: skip
    said(r)
    print(f"   final.npz: {'written' if (d / 'r/checkpoints/final.npz').exists() else 'none'}")
    recs = [json.loads(x) for x in (d / "r/metrics.jsonl").read_text().splitlines()]
    train = [r for r in recs if r["kind"] == "train"]
    for rec in train[-1:]:
        keys = {k: rec.get(k, "(absent)") for k in ("loss", "skipped_steps", "loss_scale")}
        print(f"   last train record: {keys}")

    d = case("7 a window of only skipped steps (float16, lr 1e6, no floor, log every 5)")
    r = sf("train", "--set", "train.precision=float16", "--set", "train.min_loss_scale=1e-30",
           "--set", "train.max_skipped_share=1", "--lr-factor", "1e6", "--steps", "10",
           "--log-every", "5", "--run-dir", "r", "--no-progress", "--no-test", cwd=d)  # fmt: skip
    if r.returncode == 2 and "unknown key" in r.stderr:  # the earlier version: no such settings
        r = sf("train", "--set", "train.precision=float16", "--lr-factor", "1e6", "--steps",
               "10", "--log-every", "5", "--run-dir", "r", "--no-progress", "--no-test",
               cwd=d)  # fmt: skip
    said(r)
    for rec in (json.loads(x) for x in (d / "r/metrics.jsonl").read_text().splitlines()):
        if rec["kind"] == "train":
            print(f"   step {rec['step']}: skipped {rec.get('skipped_steps')}, loss "
                  f"{rec.get('loss', '(no loss)')}")  # fmt: skip

    d = case("8 an edit that keeps size and mtime (touch -r) of translate --output")
    (d / "src.txt").write_text("El rey ve á la casa.\n")
    tr = ("translate", "--checkpoint", "new.npz", "--input", "src.txt", "--greedy")
    sf(*tr, "--output", "out.txt", cwd=d)
    st = (d / "out.txt").stat()
    mine = "x" * st.st_size
    (d / "out.txt").write_text(mine)
    os.utime(d / "out.txt", ns=(st.st_atime_ns, st.st_mtime_ns))
    print(f"   the user's edit: out.txt {sha(d / 'out.txt')} (size and mtime as written)")
    said(sf(*tr, "--output", "out.txt", cwd=d))
    kept = (d / "out.txt").read_text() == mine
    print(f"   out.txt {sha(d / 'out.txt')}: the edit {'kept' if kept else 'OVERWRITTEN'}")

    _ledger_full()

    d = case("10 evaluate --output -")
    r = sf("evaluate", "--checkpoint", "new.npz", "--data-dir", "d1", "--greedy", "--output",
           "-", "--no-progress", cwd=d)  # fmt: skip
    said(r)
    print(f"   stdout: {len(r.stdout.splitlines())} lines (the hypotheses: 6 test pairs); "
          f"a file named '-': {'written' if (d / '-').exists() else 'none'}")  # fmt: skip

    d = case("11 translate --output /dev/stdout > f")
    (d / "src.txt").write_text("El rey ve á la casa.\nLa casa ve á el rey.\n")
    with open(d / "f", "w") as f:
        r = sf("translate", "--checkpoint", "new.npz", "--input", "src.txt", "--greedy",
               "--output", "/dev/stdout", cwd=d, stdout=f)  # fmt: skip
    said(r)
    print(f"   f: {len((d / 'f').read_text().splitlines())} lines")

    d = case("12 translate a tab-only, an NBSP-only and a spaces-only line")
    (d / "src.txt").write_text("\t\n\u00a0\n   \n")
    r = sf("translate", "--checkpoint", "new.npz", "--input", "src.txt", "--greedy", cwd=d)
    said(r)
    print(f"   output lines: {r.stdout.splitlines()!r}"[:300])

    d = case("13 1 MB-class lines: a 390 kB pair in each split, train --config pairs")
    _long_lines(d)
    r = sf("train", "--config", "pairs", "--set", "task.data_dir=long", "--steps", "5",
           "--run-dir", "r", "--no-progress", cwd=d)  # fmt: skip
    said(r)
    for line in r.stdout.splitlines():
        if line.startswith(("left out", "chosen from the data: model")):
            print(f"   {line[:200]}")

    _python_api()


def _text_set(d: Path) -> Path:
    t = d / "web-text"
    t.mkdir()
    for s in ("train", "dev", "test"):
        (t / f"{s}.txt").write_text("In the beginning God created the heavens and the earth.\n")
    return t


def _run_folder(d: Path) -> Path:
    r = sf("train", "--config", "pairs", "--set", "task.data_dir=d1", "--steps", "2",
           "--run-dir", "run", "--no-progress", "--no-test", cwd=d)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return d / "run" / "checkpoints"


def _ledger_full() -> None:
    d = case("9 the ledger's disk full: plot schedule -o and translate --output")
    full = d / "full"
    full.mkdir()
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(full)],
                       capture_output=True, text=True)  # fmt: skip
    if m.returncode != 0:
        print(f"   (no tmpfs could be mounted here: {m.stderr.strip()}; case skipped)")
        return
    try:
        (full / "state" / "scratchformer").mkdir(parents=True)
        try:  # fill it
            with open(full / "filler", "wb") as f:
                while True:
                    f.write(b"\0" * 1024)
                    f.flush()
        except OSError:
            pass
        env = {"XDG_STATE_HOME": str(full / "state")}
        r = sf("plot", "schedule", "-o", "s.png", "--no-progress", cwd=d, env=env)
        said(r, "plot schedule: ")
        print(f"   s.png: {sha(d / 's.png')}")
        (d / "src.txt").write_text("El rey ve á la casa.\n")
        r = sf("translate", "--checkpoint", "new.npz", "--input", "src.txt", "--greedy",
               "--output", "out.txt", cwd=d, env=env)  # fmt: skip
        said(r, "translate --output: ")
        print(f"   out.txt: {sha(d / 'out.txt')}")
    finally:
        subprocess.run(["umount", str(full)], capture_output=True)


def _long_lines(d: Path) -> None:
    import random  # noqa: PLC0415

    rows = [ln.split("\t") for ln in (d / "d1/train.tsv").read_text().splitlines()]
    random.seed(0)

    def longline(n):
        s = " ".join(random.choice(rows)[0] for _ in range(n))
        return [s, " ".join(random.choice(rows)[1] for _ in range(n))]

    (d / "long").mkdir()
    for split in ("train", "dev", "test"):
        have = [ln.split("\t") for ln in (d / "d1" / f"{split}.tsv").read_text().splitlines()]
        have.append(longline(8000))
        (d / "long" / f"{split}.tsv").write_text("".join(f"{a}\t{b}\n" for a, b, *_ in have))


API = {
    "Transformer(None)": "Transformer(None)",
    "Transformer(dict)": "Transformer({'vocab_size': 12})",
    'forward(..., rng="x")': "m.forward(src, src, rng='x')",
    'device.generator("x")': "device.generator('x')",
    "another model's cache": (
        "m.backward(np.ones((1, 3, 12), np.float32), other.forward(src, src)[1])"
    ),
}


def _python_api() -> None:
    d = case("14 the Python API")
    setup = (
        "import numpy as np\n"
        "from scratchformer import device\n"
        "from scratchformer import Transformer, TransformerConfig\n"
        "m = Transformer(TransformerConfig.preset('tiny', vocab_size=12))\n"
        "other = Transformer(TransformerConfig.preset('tiny', vocab_size=12, d_model=32))\n"
        "src = np.array([[4, 5, 6]])\n"
    )
    for what, call in API.items():
        code = setup + f"try:\n    {call}\nexcept Exception as e:\n"
        code += "    print(type(e).__name__ + ': ' + str(e))\nelse:\n    print('no error')\n"
        r = subprocess.run([PY, "-c", code], cwd=d, env=ENV, capture_output=True, text=True)
        print(f"   {what}: {(r.stdout.strip() or r.stderr.strip().splitlines()[-1])[:250]}")
    code = "from scratchformer import Transformer, TransformerConfig\n"
    code += "m = Transformer(TransformerConfig.preset('tiny', vocab_size=12))\n"
    code += "from scratchformer import backend; print('built on', backend.backend_name())\n"
    r = subprocess.run([PY, "-c", code], cwd=d, env={**ENV, "SCRATCHFORMER_BACKEND": "cupy"},
                       capture_output=True, text=True)  # fmt: skip
    out = (r.stdout.strip() or r.stderr.strip().splitlines()[-1])[:250]
    print(f"   SCRATCHFORMER_BACKEND=cupy, no usable CuPy: rc {r.returncode}: {out}")


def ctrl_c_probe(n: int = 3) -> None:
    """Ctrl-C every 4 ms over the first 80 ms of ``train`` started as its installed script
    starts it (a script importing scratchformer.__main__): what stderr says."""
    print("\n== 15 Ctrl-C in the first 80 ms of train (the installed script's start)")
    script = WORK / "sf-script"
    script.write_text(
        f"#!{PY}\nimport re\nimport sys\nfrom scratchformer.__main__ import main\n"
        "if __name__ == '__main__':\n    sys.exit(main())\n"
    )
    script.chmod(0o755)
    counts: dict = {}
    for ms in range(0, 84, 4):
        for _ in range(n):
            p = subprocess.Popen(
                [str(script), "train", "--config", "reverse", "--steps", "3", "--no-progress",
                 "--run-dir", str(WORK / "cc"), "--no-test"], env=ENV,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            time.sleep(ms / 1000)
            p.send_signal(signal.SIGINT)
            err = p.communicate(timeout=120)[1]
            if "Traceback" in err:
                where = "in Python's site start-up" if "<frozen site>" in err else "after site"
                kind = f"traceback {where}"
            elif p.returncode == 130:
                kind = "one line, rc 130"
            else:
                kind = f"rc {p.returncode}, {len(err.splitlines())} lines"
            counts.setdefault(kind, []).append(ms)
    for kind, at in sorted(counts.items()):
        print(f"   {kind}: {len(at)} of {21 * n} (at {sorted(set(at))} ms)")


if __name__ == "__main__":
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=TREE, capture_output=True,
                         text=True).stdout.strip()  # fmt: skip
    print(f"tree: {TREE} (git {git})")
    run_cases()
    ctrl_c_probe()
