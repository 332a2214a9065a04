"""``scratchformer data``: prepare data sets, offline: your own sentence pairs, and the
Bible's (translation, genre labels, text for the language model).

    scratchformer data pairs my.tsv  your own sentence pairs (source<TAB>target, one pair a
                                    line) split into data/my/{train,dev,test}.tsv: 5% each
                                    for dev and test (--dev, --test), chosen by a hash of
                                    the source, so the same file splits the same way

    scratchformer data genre        Bible verse -> genre (law, history, wisdom, prophets,
                                    gospels, epistles; Revelation counted as prophecy):
                                    data/genre/{train,dev,test}.tsv  (label<TAB>verse<TAB>ref)
    scratchformer data web-text     World English Bible verses, one per line, for the
                                    character-level language model:
                                    data/web-text/{train,dev,test}.txt
    scratchformer data bible        verse-aligned translation pairs, Spanish (Reina-Valera
                                    1909) -> English (WEB): data/bible/{train,dev,test}.tsv
                                    (source<TAB>target<TAB>ref); --pair kjv-web for KJV -> WEB
                                    in data/bible-kjv-web/. Chapters whose verse numbering
                                    differs between the texts are dropped (listed with -v).

Each data set is a folder of its splits, data/<name>/{train,dev,test}.<ext>. The Bible
sets read the Bibles from Debian's SWORD packages (``sword-text-web``, and for
``bible`` also ``sword-text-sparv`` or ``sword-text-kjv``) with the ``pysword`` reader,
and split by chapter (a hash of "Book.chapter"), so that no chapter has verses on both
sides of a split. Install once:

    sudo apt-get install -y sword-text-web       (or apt-get download + dpkg-deb -x, and
    pip install -e '.[data]'                      --sword-path DIR/usr/share/sword)

``data bible`` installs the SWORD packages it lacks by itself where it can: as root on a
Debian machine with ``apt-get install``, elsewhere with ``apt-get download`` + ``dpkg-deb
-x`` into ~/.cache/scratchformer/sword; otherwise it stops with the commands to run.
"""

from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path

from scratchformer.app.commands import PROBABILITY, plural
from scratchformer.app.commands.folders import refuse_owned_folder
from scratchformer.app.data.bible import (
    GENRES,
    iter_verses,
    open_bible,
    prepare_genre,
    prepare_text,
)
from scratchformer.app.data.bible_pairs import (
    PAIRS,
    align_texts,
    ensure_modules,
    split_pairs,
    write_pairs,
)
from scratchformer.engine.errors import ScratchformerError

#: each data set: its one-line help, its description, and what --dev and --test share out
DATASETS = {
    "pairs": (
        "your own sentence pairs, split into train, dev and test",
        "Split a file of your own sentence pairs (source<TAB>target, one pair a line; blank\n"
        "lines are skipped) into <data-dir>/<file name>/{train,dev,test}.tsv, by a hash of the\n"
        "source: the same file splits the same way, and pairs with one source share a split.",
        "pairs",
    ),
    "genre": (
        "Bible verse -> genre labels, for the classifier",
        "Bible verse -> genre (law, history, wisdom, prophets, gospels, epistles; Revelation\n"
        "counted as prophecy): <data-dir>/genre/{train,dev,test}.tsv (label<TAB>verse<TAB>ref),\n"
        "split by chapter.",
        "chapters",
    ),
    "web-text": (
        "World English Bible verses, for the language model",
        "World English Bible verses, one per line, for the character-level language model:\n"
        "<data-dir>/web-text/{train,dev,test}.txt, split by chapter.",
        "chapters",
    ),
    "bible": (
        "verse-aligned Spanish -> English pairs, for translation",
        "Verse-aligned translation pairs, Spanish (Reina-Valera 1909) -> English (WEB):\n"
        "<data-dir>/bible/{train,dev,test}.tsv (source<TAB>target<TAB>ref), split by chapter;\n"
        "--pair kjv-web for KJV -> WEB in <data-dir>/bible-kjv-web/. Chapters whose verse\n"
        "numbering differs between the texts are dropped (listed with -v). The SWORD\n"
        "packages it lacks are installed where it can (see `scratchformer data --help`).",
        "chapters",
    ),
}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "data",
        help="prepare the real data sets (translation pairs, genre labels, text for the LM)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kinds = p.add_subparsers(dest="dataset", metavar="{" + ",".join(DATASETS) + "}", required=True)
    for name, (short, description, unit) in DATASETS.items():
        q = kinds.add_parser(
            name,
            help=short,
            description=description,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if name == "pairs":
            q.add_argument("file", help="your TSV file: source<TAB>target, one pair a line")
        _common_options(q, name, unit)
        q.set_defaults(func=run)


def _common_options(q, name: str, unit: str) -> None:
    """The options of data set ``name``: where it goes, and its dev and test shares (of
    ``unit``); the Bible's sets also where SWORD is."""
    default = "<data-dir>/<file name>" if name == "pairs" else f"<data-dir>/{name}"
    if name == "bible":
        default += " (for --pair kjv-web, <data-dir>/bible-kjv-web)"
        q.add_argument(
            "--pair",
            choices=["sparv-web", "kjv-web"],
            default="sparv-web",
            help="source -> target texts (default sparv-web: Spanish RV1909 -> English WEB)",
        )
        q.add_argument(
            "--no-install",
            action="store_true",
            help="never run apt-get; fail with the commands to run instead",
        )
        q.add_argument("-v", "--verbose", action="store_true", help="list dropped chapters")
    q.add_argument("--out", default=None, help=f"output directory (default: {default})")
    q.add_argument(
        "--data-dir", default="data", help="where the data sets' folders go (default: data/)"
    )
    if name != "pairs":
        q.add_argument(
            "--sword-path",
            default=None,
            help="SWORD directory holding mods.d/ (default: $SWORD_PATH or /usr/share/sword)",
        )
    if name in ("genre", "web-text"):
        q.add_argument("--module", default="engWEB2015eb", help="SWORD module (default: the WEB)")
    q.add_argument(
        "--overwrite",
        action="store_true",
        help="replace files of the data set's folder that hold other content (your edits)",
    )
    for split in ("dev", "test"):
        q.add_argument(
            f"--{split}",
            type=PROBABILITY,
            default=0.05,
            help=f"share of {unit} for {split} (default 0.05)",
        )


def run(args) -> int:
    if args.dev + args.test >= 1:
        raise ScratchformerError(
            f"--dev {args.dev} and --test {args.test} leave no training data: their sum must "
            "be below 1"
        )
    t0 = time.perf_counter()
    if args.dataset == "pairs":
        return run_pairs(args, t0)
    if args.dataset == "bible":
        return run_bible(args, t0)
    out = Path(args.out or Path(args.data_dir) / args.dataset)
    check_out(out, "txt" if args.dataset == "web-text" else "tsv")
    bible = open_bible(args.module, args.sword_path)
    verses = iter_verses(bible)
    again = rebuild_command(args, out)
    if args.dataset == "genre":
        counts = prepare_genre(out, verses, args.dev, args.test, args.overwrite, again)
        width = max(len(g) for g in GENRES)
        print(f"{'genre':<{width}}  {'train':>6} {'dev':>6} {'test':>6}")
        for g in GENRES:
            print(f"{g:<{width}}  " + " ".join(f"{counts[s][g]:>6}" for s in counts))
        totals = {s: sum(c.values()) for s, c in counts.items()}
        print(f"{'total':<{width}}  " + " ".join(f"{totals[s]:>6}" for s in totals))
        files = "{train,dev,test}.tsv"
    else:
        counts = prepare_text(out, verses, args.dev, args.test, args.overwrite, again)
        for s, (lines, chars) in counts.items():
            print(f"{s:<5}  {lines:>6} verses  {chars:>9} characters")
        files = "{train,dev,test}.txt"
    print(_wrote(out, files, counts, t0))
    return 0


def check_out(out: Path, ext: str) -> None:
    """Refuse, before anything is read or written, an output folder that is a file, or
    that belongs to a run, to its checkpoints, to the exercises or to a data set of the
    other kind (splits of another extension: each kind's manifest lists its own)."""
    if out.exists() and not out.is_dir():
        raise ScratchformerError(f"--out {out} is a file: a data set is a folder of its splits")
    other = "tsv" if ext == "txt" else "txt"
    refuse_owned_folder(
        out,
        "--out",
        "a data set",
        allowed="data",
        same=lambda d: not any((d / f"{s}.{other}").is_file() for s in ("train", "dev", "test")),
    )


def rebuild_command(args, out: Path) -> str:
    """The command that makes this data set again, as its manifest records it (and a
    refusal of an incomplete set names it): this one's options, with --overwrite."""
    parts = ["scratchformer", "data", args.dataset]
    if args.dataset == "pairs":
        parts.append(str(args.file))
    if args.dataset == "bible" and args.pair != "sparv-web":
        parts += ["--pair", args.pair]
    parts += ["--out", str(out)]
    for flag, value, default in (
        ("--dev", args.dev, 0.05),
        ("--test", args.test, 0.05),
        ("--module", getattr(args, "module", "engWEB2015eb"), "engWEB2015eb"),
        ("--sword-path", getattr(args, "sword_path", None), None),
    ):
        if value != default:
            parts += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return shlex.join([*parts, "--overwrite"])


def _wrote(out: Path, files: str, counts, t0: float) -> str:
    """The closing line: written, or already there with this very content."""
    took = f"{time.perf_counter() - t0:.1f} s"
    if counts.unchanged:
        return f"{out}/{files} were already there with this very content: nothing replaced ({took})"
    return f"wrote {out}/{files} in {took}"


def run_pairs(args, t0: float) -> int:
    out = Path(args.out or Path(args.data_dir) / Path(args.file).stem)
    check_out(out, "tsv")
    again = rebuild_command(args, out)
    counts = split_pairs(args.file, out, args.dev, args.test, args.overwrite, again)
    for split, n in counts.items():
        print(f"{split:<5}  {n:>6} pairs")
    if counts.blank:
        print(f"skipped {plural(counts.blank, 'blank line')}")
    if counts.repeats:
        print(
            f"{plural(counts.repeats, 'pair')} repeat the source of another pair: each "
            "source's pairs stay in one split"
        )
    print(_wrote(out, "{train,dev,test}.tsv", counts, t0))
    return 0


def run_bible(args, t0: float) -> int:
    src_mod, tgt_mod = PAIRS[args.pair]
    out = Path(
        args.out
        or Path(args.data_dir) / ("bible" if args.pair == "sparv-web" else f"bible-{args.pair}")
    )
    check_out(out, "tsv")
    where = ensure_modules([src_mod, tgt_mod], args.sword_path, install=not args.no_install)
    print(f"reading {src_mod} and {tgt_mod} and aligning their verses...", flush=True)
    src = iter_verses(open_bible(src_mod, where))
    tgt = iter_verses(open_bible(tgt_mod, where))
    s, t, rep = align_texts(src, tgt)
    counts = write_pairs(out, s, t, args.dev, args.test, args.overwrite, rebuild_command(args, out))
    for stale in [] if counts.unchanged else out.glob("spm-bpe-*.json"):
        stale.unlink()  # a BPE learnt from the previous files
    dropped = len(rep.dropped_numbering) + len(rep.dropped_shift)
    print(
        f"{src_mod} -> {tgt_mod}: {rep.chapters} chapters in both, {rep.kept} kept, "
        f"{dropped} dropped as misaligned ({len(rep.dropped_numbering)} by verse numbering, "
        f"{len(rep.dropped_shift)} by shifted verse lengths)"
    )
    print(
        f"{plural(len(rep.dropped_verses), 'verse pair')} of kept chapters dropped (one side "
        "> 3x longer)"
    )
    if args.verbose:
        print("  numbering: " + ", ".join(rep.dropped_numbering))
        print("  shifted:   " + ", ".join(rep.dropped_shift))
        print("  verses:    " + ", ".join(rep.dropped_verses))
    for split, n in counts.items():
        print(f"{split:<5}  {n:>6} pairs")
    print(f"total  {sum(counts.values()):>6} pairs")
    print(_wrote(out, "{train,dev,test}.tsv", counts, t0))
    return 0
