"""scratchformer exercise: learn backprop by writing it, graded by the gradient checker.

scratchformer exercise list                  the exercises, in teaching order, and where
                                             you stand on each (re-checked from your files)
scratchformer exercise start layernorm       writes exercises/layernorm.py: the forward,
                                             the backward's signature and docstring to fill
scratchformer exercise check layernorm       grades it: float64 central differences on
                                             inputs where backward passes go wrong, the
                                             wrong entries, a known mistake named
scratchformer exercise check                 grades every exercise file of the folder
scratchformer exercise hint layernorm        the next hint (kept in exercises/layernorm.hints.md)
scratchformer exercise solution layernorm    the engine's code and its derivation
scratchformer exercise train                 your passes in the whole model: one batch's gradients
                                             against the engine's (the verdict), then the default
                                             run trained with them, the engine's beside it

Your files live in exercises/ (--dir to choose): nothing is written anywhere else, a file
of yours is never overwritten, and your progress is what checking them says.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scratchformer.app.commands import COUNT, plural
from scratchformer.app.commands.folders import refuse_owned_folder
from scratchformer.app.train.config import override_value, set_dotted
from scratchformer.engine.errors import ConfigError
from scratchformer.exercises import EXERCISES, exercise, files, isolate, training
from scratchformer.exercises.grade import PASSING, report
from scratchformer.exercises.spec import DERIVATIONS, new_seed


def add_parser(sub) -> None:
    p = sub.add_parser(
        "exercise",
        help="write the backward passes yourself: exercises graded by the gradient checker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    steps = p.add_subparsers(dest="action", metavar="ACTION")
    steps.required = True

    def with_dir(q):
        q.add_argument(
            "--dir", default=files.DEFAULT_DIR, help="your exercises' folder (default: exercises)"
        )
        return q

    def graded(q):
        q.add_argument(
            "--seed",
            type=int,
            help="the seed of the drawn input shapes (default: a new one each run, printed)",
        )
        q.add_argument(
            "--time-limit",
            type=float,
            default=isolate.DEFAULT_LIMIT,
            metavar="SECONDS",
            help="stop your code of one exercise after this long "
            f"(default {isolate.DEFAULT_LIMIT:g})",
        )
        return q

    q = graded(with_dir(steps.add_parser("list", help="the exercises and where you stand on each")))
    q.set_defaults(func=run_list)
    q = with_dir(steps.add_parser("start", help="write an exercise's file into your folder"))
    q.add_argument("name", help="the exercise (see: scratchformer exercise list)")
    q.set_defaults(func=run_start)
    q = graded(
        with_dir(steps.add_parser("check", help="grade exercises (default: every file started)"))
    )
    q.add_argument("targets", nargs="*", metavar="NAME|FILE", help="exercise names or files")
    q.set_defaults(func=run_check)
    q = with_dir(steps.add_parser("hint", help="the next hint of an exercise"))
    q.add_argument("name")
    q.add_argument(
        "--spoil",
        action="store_true",
        help="show the last hint, which gives the formula away (asked for, never by default)",
    )
    q.set_defaults(func=run_hint)
    q = steps.add_parser("solution", help="the engine's code of an exercise and its derivation")
    q.add_argument("name")
    q.add_argument(
        "--yes", action="store_true", help="print the answer without asking (for scripts)"
    )
    q.set_defaults(func=run_solution)
    q = with_dir(
        steps.add_parser(
            "train",
            help="train the default run with your backward passes, the engine's run beside it",
            description="The verdict first: the default model's gradients of every parameter "
            "on one batch, every parameter drawn away from its initial value, and Adam's "
            "update, with your backward passes in place of the engine's, against the "
            "engine's in float64 and against that truth in float32; the exit status is 0 "
            "when they agree, and the exercise that makes them differ is named. Then, as a "
            "demonstration whose curves decide nothing, the default run (reverse strings) "
            "trained with every pass of yours that passes its check, and the engine's run "
            "beside it: loss curves, held-out accuracy, final parameters (in runs/yours and "
            "runs/engine); a run your code stops (an error, a NaN, the time limit) fails.",
        )
    )
    q.add_argument("--steps", type=COUNT, help="optimizer steps of both runs (default 3000)")
    q.add_argument(
        "--time-limit",
        type=float,
        default=isolate.DEFAULT_LIMIT,
        metavar="SECONDS",
        help="stop your code of one exercise after this long in all in its check and "
        "in each of the verdict's gradients, and one call of it in the run "
        f"(default {isolate.DEFAULT_LIMIT:g}; a busy machine may need more)",
    )
    q.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="change a setting of both runs, as scratchformer train --set does",
    )
    q.set_defaults(func=run_train)


def _folder(args) -> Path:
    """The learner's folder; run from inside it (no exercises/ here, and this folder is
    called exercises), the folder itself."""
    where = Path(args.dir)
    if args.dir == files.DEFAULT_DIR and not where.exists() and Path.cwd().name == args.dir:
        where = Path(".")
    refuse_owned_folder(where, "--dir", "your exercises", allowed="exercises")
    return files.folder(where)


def run_list(args) -> int:
    where = _folder(args)
    args.seed = _seed(args)
    print(f"the exercises, in teaching order (your files: {where}/):")
    w = max(len(name) for name in EXERCISES)
    done, first_new, first_open = 0, None, None
    for i, ex in enumerate(EXERCISES.values(), start=1):
        path = files.exercise_file(where, ex)
        status, why = "not started", ""
        if path.is_file():
            status, _, why = _status(ex, path, args).partition(": ")
            done += status == PASSING
            if status != PASSING:
                first_open = first_open or ex.name
        else:
            first_new = first_new or ex.name
        print(f"  {i:>2}  {ex.name:<{w}}  {status:<11}  {ex.summary}")
        if why:  # the first clause: check says the rest
            why = why.split("; ")[0].split(": the ")[0]
            print(f"      {'':<{w}}  {why}")
    print(f"{done} of {plural(len(EXERCISES), 'exercise')} passing.", end="")
    if first_open:  # unfinished work comes before a new exercise
        print(f" Next: scratchformer exercise check {first_open}{_dir_flag(where)}")
    elif first_new:
        print(f" Next: scratchformer exercise start {first_new}{_dir_flag(where)}")
    else:
        print()
    return 0


def _seed(args) -> int:
    return args.seed if args.seed is not None else new_seed()


def _status(ex, path: Path, args) -> str:
    return isolate.graded(ex, path, args.seed, args.time_limit).short()


def _dir_flag(where: Path) -> str:
    return "" if str(where) == files.DEFAULT_DIR else f" --dir {where}"


def run_start(args) -> int:
    ex = exercise(args.name)
    path = files.start(_folder(args), ex)
    names = " and ".join(ex.functions)
    print(f"wrote {path}: fill in {names}, then")
    print(f"    scratchformer exercise check {ex.name}{_dir_flag(_folder(args))}")
    print(f"The derivation: {ex.link()}")
    return 0


def run_check(args) -> int:
    where = _folder(args)
    if args.targets:
        chosen = [files.resolve(where, t) for t in args.targets]
    else:
        chosen = files.started(where)
        if not chosen:
            print(f"no exercise started in {where}/: scratchformer exercise start NAME")
            return 1
    seed, grades = _seed(args), []
    for n, (ex, path) in enumerate(chosen):
        g = isolate.graded(ex, path, seed, args.time_limit)
        print(("\n" if n else "") + "\n".join(report(g)))
        grades.append(g)
    print(f"\nshapes drawn with seed {seed}: --seed {seed} draws the same again")
    failed = [f"{g.exercise.name} ({g.status})" for g in grades if not g.passed]
    # the checker's last line, and its status: never anything the learner's code printed
    if failed:
        print(f"verdict: FAILED: {', '.join(failed)}")
        return 1
    print(f"verdict: PASSED: {', '.join(g.exercise.name for g in grades)}")
    return 0


def run_hint(args) -> int:
    ex = exercise(args.name)
    if files.shown_hints(_folder(args), ex) == len(ex.hints) - 1 and not args.spoil:
        print(
            f"the last hint of {ex.name} ({len(ex.hints)} of {len(ex.hints)}) gives the formula "
            f"away: 'scratchformer exercise hint {ex.name} --spoil' shows it. Before that: "
            f"the derivation, {ex.link()}"
        )
        return 0
    shown = files.next_hint(_folder(args), ex)
    if shown is None:
        print(
            f"all {len(ex.hints)} hints of {ex.name} are shown (in "
            f"{files.hints_file(_folder(args), ex)}); the derivation: {ex.link()}; "
            f"the engine's code: scratchformer exercise solution {ex.name}"
        )
        return 0
    n, text, path = shown
    print(f"hint {n} of {len(ex.hints)} for {ex.name} (all shown so far: {path}):")
    print(f"  {text}")
    return 0


def run_solution(args) -> int:
    ex = exercise(args.name)
    if not args.yes and not _asked(f"print the engine's code for {ex.name}, the answer?"):
        print(
            f"not printed: 'scratchformer exercise solution {ex.name} --yes' prints it "
            "without asking"
        )
        return 1
    print(f"# The engine's code for the exercise {ex.name}: a file of yours with this code")
    print("# in place of the body to fill in passes the check.\n")
    print(ex.solution_text())
    for text in getattr(ex, "helper_sources", lambda: [])():
        print(f"# the engine's method it calls on self:\n{text}")
    print(f"# The derivation ({ex.link()}):\n")
    print(derivation(ex.section))
    return 0


def _asked(question: str) -> bool:
    """Yes from the learner at a terminal; no when nobody can answer (a script)."""
    if not sys.stdin.isatty():
        return False
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def derivation(anchor: str) -> str:
    """The section of docs/derivations.md with that anchor (in a clone), or where it is."""
    root = Path(__file__).resolve().parents[3]  # the clone: scratchformer/app/commands/..
    path = root / DERIVATIONS
    if not path.is_file():
        return f"(not in this installation: read {DERIVATIONS}#{anchor} in the repository)"
    text = path.read_text(encoding="utf-8")
    out, keep = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            keep = slug(line[3:]) == anchor
        elif keep and line.strip() == "---":
            break
        if keep:
            out.append(line)
    return "\n".join(out).strip() or f"(no section #{anchor} in {path})"


def slug(title: str) -> str:
    """GitHub's anchor of a heading, as the docs site makes it too: lower case,
    punctuation dropped, each space a hyphen ("Add & Norm" -> "add--norm")."""
    kept = "".join(c for c in title.strip().lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def run_train(args) -> int:
    sets = []
    for item in args.set:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected SECTION.KEY=VALUE")
        key, text = (x.strip() for x in item.split("=", 1))
        d: dict = {}
        set_dotted(d, key, override_value(key, text))
        sets.append((d, f"--set {item}"))
    v, yours, engine, _ = training.train_both(
        _folder(args), args.steps, sets, progress=not args.no_progress, limit=args.time_limit
    )
    if yours is not None and engine is not None:  # a demonstration: it decides nothing
        steps = yours.losses[-1][0] if yours.losses else 0
        print("\n".join(training.compare(yours, engine, steps)))
    # the checker's last line, and its status: the verdict on one batch's gradients
    if v["agree"]:
        print("verdict: PASSED: your backward passes give the engine's gradients in the "
              "whole model")
        return 0
    if v.get("error"):  # an error, the time limit: said in the verdict's line above
        print("verdict: FAILED: your code stopped the check of the whole model (see the "
              "verdict above)")
        return 1
    if v.get("run_stopped"):  # right on the one batch, and yet your code stopped the run
        print(f"verdict: FAILED: your code stopped your run: {v['run_stopped']}")
        return 1
    print("verdict: FAILED: your backward passes do not give the engine's gradients in the "
          "whole model (see the verdict above)")
    return 1
