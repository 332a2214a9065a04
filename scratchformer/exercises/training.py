"""``exercise train``: the default run (reverse strings) trained by the one training loop
with every backward pass the learner has passed put in place of the engine's, then the
same run with the engine's own, and the two compared.

What is put in place, for each exercise that passes now (re-checked first):

- an op: its kernel table's implementation (``OpExercise.plug``); the seam runs a
  composite op (the attention core, Add & Norm's exit) through its parts' tables while
  one of them holds a learner's pass, so a learner's softmax or dropout reaches every
  attention, unless their attention core passes too;
- a layer: the module class's method (``LayerExercise.plug``);
- Adam: ``optim.adam.use_update`` (``AdamExercise.plug``).

Both runs write into the learner's folder (``runs/yours``, ``runs/engine``). With the
engine's code in every file (the solutions: the plain formulas of ops/), the two runs
agree to rounding: the engine's own run uses the ops' faster forms of the same
math (BLAS row sums, in-place buffers), which sum in another order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from scratchformer.app import writer
from scratchformer.app.progress import clock
from scratchformer.app.train.config import build
from scratchformer.app.train.loop import Trainer
from scratchformer.engine import backend, dispatch
from scratchformer.engine.errors import ScratchformerError
from scratchformer.engine.parity import relative_error
from scratchformer.exercises import EXERCISES, files, isolate, verdict
from scratchformer.exercises.grade import FAILING
from scratchformer.exercises.spec import LearnerError, file_of, learner_code, new_seed, shown


class NothingToTrain(ScratchformerError):
    """No exercise of the folder passes: the run would be the engine's alone."""


@dataclass
class Run:
    """What a finished run gives the comparison (picklable: the learner's run is trained
    in a child process)."""

    curve: list  # the "train" records of the run's metrics.jsonl
    accuracy: float | None  # held-out accuracy of the final model, in percent
    params: object  # the final parameters, one host array
    losses: list  # [(step, loss)]
    seconds: float = 0.0

    @classmethod
    def plain(cls, data: dict) -> Run:
        """The record the learner's process sent (wire.py: plain data), checked."""
        curve = [dict(r) for r in data["curve"] if isinstance(r, dict)]
        for r in curve:
            r["step"] = int(r["step"])
        accuracy = None if data["accuracy"] is None else float(data["accuracy"])
        params = data["params"]
        if not backend.is_array(params) or params.dtype.kind != "f":
            raise ValueError("params")
        losses = [(int(k), float(x)) for k, x in data["losses"]]
        return cls(curve, accuracy, params, losses, float(data["seconds"]))

    @classmethod
    def of(cls, trainer: Trainer, result) -> Run:
        records = [json.loads(x) for x in trainer.metrics_path.read_text().splitlines() if x]
        test = result.test or {}
        value = test.get("seq_acc_decoded", test.get("accuracy"))
        return cls(
            [r for r in records if r.get("kind") == "train"],
            None if value is None else 100.0 * value,
            backend.asnumpy(trainer.flat.params).copy(),
            list(result.losses),
        )


def graded(where: Path, seed=None, limit=None, echo=print) -> tuple[dict, dict]:
    """``({name: path} of the exercises that pass, {name: path} of those that run but
    fail)``, each graded in a child process; the others are said and left out."""
    passing, failing = {}, {}
    for ex, path in files.started(where):
        g = isolate.graded(ex, path, seed, limit or isolate.DEFAULT_LIMIT)
        if g.passed:
            passing[ex.name] = path
        elif g.status == FAILING:
            failing[ex.name] = path
            echo(f"  {ex.name}: {g.short()}: in the verdict, not in your run")
        else:
            echo(f"  {ex.name}: {g.short()}: the engine's is used")
    return passing, failing


def configs(where: Path, steps: int | None, sets: list) -> tuple:
    """The two runs' configurations: the default run, with ``sets`` (``[(dict, label)]``)
    and ``steps`` over it, and its name and directory in the learner's folder."""
    layers = list(sets)
    if steps is not None:
        layers.append(({"train": {"steps": steps}}, "--steps"))
    out = []
    for name in ("yours", "engine"):
        place = {"name": name, "run_dir": str(where / "runs" / name)}
        out.append(build([*layers, (place, "exercise train")]))
    return tuple(out)


def train_both(where: Path, steps=None, sets=(), progress=True, echo=print, limit=None) -> tuple:
    """Train with the learner's code, then with the engine's; ``(yours, engine, names)``.
    ``limit``: the seconds each exercise's check may run (default ``isolate.DEFAULT_LIMIT``)."""
    if dispatch.reference_forced():
        raise ScratchformerError(
            "SCRATCHFORMER_KERNELS=reference forces the engine's ops everywhere: unset it "
            "to train with yours"
        )
    cfg_yours, cfg_engine = configs(where, steps, sets)
    for cfg in (cfg_yours, cfg_engine):  # each run's folder is replaced: only ever ours
        if not writer.inside(cfg.out_dir, where):
            raise ScratchformerError(
                f"{cfg.out_dir} leads out of {where} (a link to "
                f"{os.path.realpath(cfg.out_dir)}): the exercise runs would replace what is "
                "there; remove the link"
            )
    echo(f"checking the exercises in {where}:")
    found, failing = graded(where, new_seed(), limit, echo=echo)  # drawn shapes, as check
    echo(f"  passing: {', '.join(found) or 'none'}")
    if not found and not failing:
        raise NothingToTrain(
            f"no exercise in {where} passes yet: 'scratchformer exercise check' says why"
        )
    # the verdict: the whole model's gradients with every pass of yours that runs, judged
    # here; only your functions run in your code's process
    texts = {}
    for name, path in {**found, **failing}.items():
        with contextlib.suppress(LearnerError, OSError):
            texts[name] = (path, files.read(path))
    b, model, model_config = verdict.batch_and_model(cfg_yours)
    v = judged(where, texts, b, model, failing, limit or isolate.DEFAULT_LIMIT)
    echo("")
    for line in v.pop("printed", []):
        echo(line)
    for line in verdict.lines(v):
        echo(line)
    found = {n: p for n, p in found.items() if n in texts and n != v.get("stopped")}
    if v.get("stopped") in texts:
        echo(f"{v['stopped']} stopped the verdict: your run uses the engine's in its place")
    if not found:
        return v, None, None, []
    echo(f"\n== a demonstration, your run: {cfg_yours.out_dir} ==")
    # what the run's folder holds is judged here (a refusal is one line, as for train);
    # the run itself is made again, and trained, in the learner's process
    Trainer(cfg_yours, overwrite=True, progress=False, echo=lambda *a: None).lock.release()
    _say_whose(found, model_config, echo)
    yours = demonstration(cfg_yours, where, {n: texts[n] for n in found}, progress, echo,
                          limit or isolate.DEFAULT_LIMIT)
    if isinstance(yours, str):  # your code stopped the run: that fails too
        v["agree"], v["run_stopped"] = False, yours
        return v, None, None, list(found)
    echo(f"\n== the engine's run of the same config, for comparison: {cfg_engine.out_dir} ==")
    t0 = time.perf_counter()
    trainer = Trainer(cfg_engine, overwrite=True, progress=progress, echo=lambda *a: None)
    engine = Run.of(trainer, trainer.run())
    engine.seconds = time.perf_counter() - t0
    echo(f"trained and judged in {clock(engine.seconds)}")
    return v, yours, engine, list(found)


def judged(where: Path, texts: dict, b, model, failing: dict, limit=None) -> dict:
    """The verdict (verdict.py) of the learner's files ``texts`` (``{name: (path,
    text)}``), computed here with their functions run in a process of their own, each
    exercise's code for ``limit`` seconds in all of each whole-model gradient (as in its
    check; None: no limit)."""
    v, s = None, None
    try:
        with isolate.session(texts, where, limit=limit, check=False, each=True) as s:
            if s.dead is not None:
                raise s.dead
            v = verdict.verdict(b, model, s, list(texts), failing)
    except LearnerError as e:
        v = {"agree": False, "error": str(e), "blamed": [], "worst": [], "count": 0, "total": 0,
             "stopped": getattr(s, "stopped", None)}
    v["failing"] = list(failing)
    if s is not None and hasattr(s, "anew"):  # the most seconds of each exercise's code
        s.anew()
        v["spent"] = dict(s.most)
    if s is not None:
        if s.notes:
            v["agree"], v["notes"] = False, s.notes
        v["printed"] = s.printed_block("")
    return v


def demonstration(cfg, where: Path, texts: dict, progress: bool, echo,
                  limit: float | None = None) -> Run | str | None:
    """The run ``cfg`` trained in the learner's code's process, with every exercise of
    ``texts`` in place, each call of the learner's code stopped after ``limit`` seconds:
    the curves decide nothing, and what it prints is shown as that process's. The run's
    record; or the line that says why the run stopped in the learner's process (an error
    of their code, a NaN or inf it returned, the time limit: said, and it fails); None
    when that process gave back no record (said)."""

    # the learner's process works in a scratch folder: the run's folder by its full path
    cfg = dataclasses.replace(cfg, run_dir=str(cfg.out_dir.resolve()))
    # in mixed precision an overflow is the loss scaler's to skip, not an error
    nan = cfg.train.precision == "float32"

    def job(code: dict) -> dict:  # runs in the learner's process
        t0 = time.perf_counter()
        trainer = Trainer(cfg, overwrite=True, progress=progress, echo=print)
        with contextlib.ExitStack() as stack:
            for name, fns in code.items():
                watched = {f: _watched(fn, limit, lambda: trainer.step + 1, nan)
                           if callable(fn) else fn for f, fn in fns.items()}
                stack.enter_context(EXERCISES[name].plug(watched))
            run = Run.of(trainer, trainer.run())
        return {"curve": run.curve, "accuracy": run.accuracy, "params": run.params,
                "losses": [[int(k), float(x)] for k, x in run.losses],
                "seconds": time.perf_counter() - t0}

    echo("it trains in your code's process (a demonstration: it decides nothing); "
         "what that process printed:")
    keep = (os.path.relpath(cfg.out_dir, where.resolve()),)
    try:
        with isolate.session(texts, where, limit=None, check=False, keep=keep,
                             jobs={"demo": job}, stream=lambda line: echo(f"  | {line}")) as s:
            data = s.run("demo")
    except LearnerError as e:
        echo(f"your run stopped: {e}")
        return str(e)
    for note in s.notes:
        echo(note)
    try:
        return Run.plain(data)
    except (TypeError, ValueError, KeyError, AttributeError):
        echo("your run's process gave back no record of the run it trained")
        return None


class _Late(BaseException):  # noqa: N818 - a signal's, never the learner's to catch
    """A call of the learner's code ran past its limit (raised by SIGALRM)."""


_DEPTH = [0]  # learner's calls in progress: only the outermost is timed


def _watched(fn, limit, step, nan=True):
    """``fn``, a learner's function, as the demonstration run calls it in the learner's
    process: an error said in one line with the file's line (``learner_code``), a call
    stopped after ``limit`` seconds, and (``nan``) NaN or inf returned on finite inputs
    an error naming the file and the step (``step()``)."""
    path = file_of(fn)
    name = getattr(fn, "__name__", "your function")

    def late(signum, frame):
        raise _Late

    def call(*args, **kwargs):
        outer = _DEPTH[0] == 0 and limit is not None
        finite = nan and _finite(args)
        if outer:
            before = signal.signal(signal.SIGALRM, late)
            signal.setitimer(signal.ITIMER_REAL, limit)
        _DEPTH[0] += 1
        try:
            with learner_code(path, name):
                result = fn(*args, **kwargs)
        except _Late:
            raise LearnerError(
                f"{shown(path)}: {name} ran past the time limit of {limit:g} s in one call, at "
                f"step {step()} of your run, and was stopped: slow at the model's sizes? "
                "--time-limit gives it more") from None
        finally:
            _DEPTH[0] -= 1
            if outer:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, before)
        if finite and not (_finite(result) and _finite(args)):
            raise LearnerError(
                f"{shown(path)}: {name} returned NaN or inf at step {step()} of your run, on "
                "finite inputs (float32: a constant that underflows or overflows there?)")
        return result

    call.__name__ = call.__qualname__ = name
    call.learner_file = path
    return call


def _finite(x) -> bool:
    """Every array in ``x`` (an array, or a tuple or list of them) is finite."""
    if isinstance(x, (tuple, list)):
        return all(_finite(v) for v in x)
    if backend.is_array(x) and x.dtype.kind == "f":
        return bool(backend.xp.isfinite(x).all())
    return True


def _say_whose(found: dict, model, echo) -> None:
    """Which of the learner's exercises the model of config ``model`` runs, and where."""
    used = [(n, EXERCISES[n].used_by(model)) for n in found]
    if "attention" in found:  # their attention has its own softmax and dropout
        used = [(n, "" if n == "softmax" else w) for n, w in used]
    else:
        used = [(n, w + ", and attention's" if n == "dropout" else w) for n, w in used]
    echo("your backward passes in this run (the engine's everywhere else):")
    for name, where in used:
        if where:
            echo(f"  {name:<22} {where}")
    idle = [n for n, where in used if not where]
    if idle:
        echo(f"passing, but not used by this model: {', '.join(idle)}")


#: steps under which two runs' accuracies differ by several points by chance
SHORT = 3000


def compare(yours: Run, engine: Run, steps: int) -> list[str]:
    """The lines comparing the two runs: a demonstration, never the verdict."""
    lines = ["", "training loss (label-smoothed; each row the mean since the row before):"]
    lines.append(f"  {'step':>6}  {'yours':>9}  {'engine':>9}")
    mine, theirs = yours.curve, {r["step"]: r for r in engine.curve}
    every = max(1, len(mine) // 10)
    for i, r in enumerate(mine):
        if i % every == 0 or i == len(mine) - 1:
            other = theirs.get(r["step"], {}).get("loss", float("nan"))
            mine_loss = r.get("loss", float("nan"))  # none when every step was skipped
            lines.append(f"  {r['step']:>6}  {mine_loss:>9.4f}  {other:>9.4f}")
    a, b = yours.accuracy, engine.accuracy
    if a is not None and b is not None:
        lines.append(
            f"held-out exact match (the test set, the final model): yours {a:.2f}%, "
            f"engine {b:.2f}% ({abs(a - b):.2f} points apart)"
        )
    lines.append(_parameters_line(yours, engine))
    if steps < SHORT:
        lines.append(
            f"A run of {steps} steps shows nothing either way: two runs this short differ "
            "by several points by chance. The verdict above is the one batch's gradients."
        )
    else:
        lines.append("A demonstration: the verdict above (one batch's gradients) is what decides.")
    return lines


#: the largest relative difference of the final parameters taken for rounding alone
ROUNDING = 1e-4


def _parameters_line(yours: Run, engine: Run) -> str:
    """How the final parameters of the two runs compare: bitwise, within rounding, or not."""
    np = backend.np
    a, b = yours.params, engine.params
    same_losses = [x for _, x in yours.losses] == [x for _, x in engine.losses]
    if same_losses and a.shape == b.shape and np.array_equal(a, b):
        return "final parameters and every step's loss: bitwise equal to the engine's run"
    err = relative_error(a, b)
    if err <= ROUNDING:
        return (
            f"final parameters: equal to the engine's run within rounding (largest relative "
            f"difference {err:.1e}: the same math summed in another order)"
        )
    return (
        f"final parameters: apart from the engine's run's (largest relative difference "
        f"{err:.1e}): rounding in another order grows with the steps, and so does any error; "
        "the verdict above tells them apart"
    )


__all__ = ["SHORT", "NothingToTrain", "Run", "compare", "configs", "graded", "train_both"]
