"""Verse-aligned translation pairs from two Bible texts (``scratchformer data bible``).

    pairs, report = align_texts(iter_verses(open_bible("spaRV1909eb")),
                                iter_verses(open_bible("engWEB2015eb")))
    counts = write_pairs("data/bible", pairs)      # train.tsv dev.tsv test.tsv

Both texts are read and cleaned by ``scratchformer.app.data.bible`` (OSIS markup, spacing,
chapter-initial capitals). Alignment is by reference (book, chapter, verse), and only
whole chapters whose numbering agrees are kept. A chapter is dropped as misaligned when

- its verses (non-empty after cleaning) are not the same set of numbers in both texts
  (e.g. Jonah 1: 16 verses in the RV1909, 17 in the WEB: the RV1909 puts 1:17 at 2:1), or
- the verse lengths do not follow each other: with the same numbers, a text shifted by one
  verse (Num 13 of the RV1909 starts at the WEB's 13:2) pairs each verse with its
  neighbour's translation. A verse and its translation have nearly proportional lengths,
  so the log length ratios of an aligned chapter hardly vary; a chapter is dropped when
  they vary much less with one side moved by a verse, or when the lengths are
  anti-correlated or both weakly correlated and widely spread (``chapter_aligned``).
  Chapters of fewer than ``min_verses`` verses are judged on the first rule only.

Within kept chapters, a verse pair is dropped when one side is more than three times as
long as the other (plus 40 characters): a psalm title counted as verse 1 on one side only
(Ps 18:1), a subscription (2Tim 4:22), a doxology placed elsewhere (Rom 14:23).

Splits are by chapter (``chapter_split``), never by verse. The TSV files hold
``source<TAB>target<TAB>ref`` per line (``ref`` such as ``Gen 1:1``), UTF-8.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import subprocess
import tempfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from scratchformer.app.data.bible import (
    PACKAGES,
    BibleDataError,
    Verse,
    Written,
    _import_pysword,
    _one_line,
    chapter_split,
    split_files,
    sword_path,
)
from scratchformer.app.data.text import NO_MODEL, LineLimit, iter_text_lines, not_a_file
from scratchformer.engine.errors import ScratchformerError

#: ``--pair`` choices: (source module, target module).
PAIRS = {
    "sparv-web": ("spaRV1909eb", "engWEB2015eb"),  # Spanish RV1909 -> English WEB
    "kjv-web": ("engKJV2006eb", "engWEB2015eb"),  # Early Modern English -> modern English
}
SPLITS = ("train", "dev", "test")
#: Where ``ensure_modules`` unpacks packages when it cannot install them (no root).
USER_SWORD = Path.home() / ".cache" / "scratchformer" / "sword"


class ParallelDataError(ScratchformerError):
    """A translation TSV file is missing, malformed or empty."""


@dataclass
class AlignReport:
    chapters: int = 0  # chapters present in both texts
    kept: int = 0
    dropped_numbering: list = field(default_factory=list)  # ["Jonah 1", ...]
    dropped_shift: list = field(default_factory=list)  # ["Num 13", ...]
    only_one_side: int = 0  # chapters present in one text only
    dropped_verses: list = field(default_factory=list)  # ["Ps 18:1", ...]: lengths differ 3x


def _has_module(where: Path, module: str) -> bool:
    return (where / "mods.d" / f"{module.lower()}.conf").is_file() or (
        where / "mods.d" / f"{module}.conf"
    ).is_file()


def ensure_modules(modules: list[str], path=None, install: bool = True, run=subprocess.run):
    """The SWORD directory holding every module of ``modules``, installing what is missing
    where it can: ``apt-get install -y`` as root on Debian, else ``apt-get download`` +
    ``dpkg-deb -x`` into ``USER_SWORD``. Raises ``BibleDataError`` with the exact commands
    to run when neither works (or ``install`` is False)."""
    _import_pysword()  # fail early, with the pip command, if the reader is missing
    where = sword_path(path)
    for cand in (where, USER_SWORD / "usr" / "share" / "sword"):
        if all(_has_module(cand, m) for m in modules):
            return cand
    missing = [m for m in modules if not _has_module(where, m)]
    pkgs = [PACKAGES.get(m, f"sword-text-<{m}>") for m in missing]
    how = (
        f"install them with `sudo apt-get install -y {' '.join(pkgs)}` (Debian/Ubuntu), or "
        f"without root `apt-get download {' '.join(pkgs)}` then `dpkg-deb -x <file>.deb "
        f"{USER_SWORD}` for each file, and pass --sword-path {USER_SWORD}/usr/share/sword"
    )
    apt = shutil.which("apt-get")
    if install and apt and path is None:
        root = hasattr(os, "geteuid") and os.geteuid() == 0
        if root:
            print(f"installing {' '.join(pkgs)} with apt-get ...", flush=True)
            r = run([apt, "install", "-y", "-qq", *pkgs], capture_output=True, text=True)
            if r.returncode != 0:  # stale package lists on a fresh machine
                run([apt, "update", "-qq"], capture_output=True, text=True)
                r = run([apt, "install", "-y", "-qq", *pkgs], capture_output=True, text=True)
            if r.returncode == 0 and all(_has_module(where, m) for m in modules):
                return where
        elif shutil.which("dpkg-deb"):
            print(f"unpacking {' '.join(pkgs)} into {USER_SWORD} ...", flush=True)
            with tempfile.TemporaryDirectory() as tmp:
                r = run([apt, "download", *pkgs], cwd=tmp, capture_output=True, text=True)
                debs = sorted(Path(tmp).glob("*.deb")) if r.returncode == 0 else []
                for deb in debs:
                    run(["dpkg-deb", "-x", str(deb), str(USER_SWORD)], capture_output=True)
            cand = USER_SWORD / "usr" / "share" / "sword"
            if all(_has_module(cand, m) for m in modules):
                return cand
    raise BibleDataError(f"SWORD module(s) {', '.join(missing)} not found under {where}: {how}")


def _chapters(verses: Iterable[Verse]) -> dict:
    out: dict = {}
    for v in verses:
        out.setdefault((v.book, v.chapter), {})[v.verse] = v.text
    return out


def _corr(a: list, b: list) -> float:
    if len(a) < 2:
        return 1.0
    try:
        return statistics.correlation(a, b)
    except statistics.StatisticsError:  # constant lengths: no evidence either way
        return 1.0


def _spread(a: list, b: list) -> float:
    """Mean absolute deviation of the per-verse log length ratios from their median:
    small when each verse's translation is about as long, relative to it, as the others'."""
    lr = [math.log((x + 1) / (y + 1)) for x, y in zip(a, b)]
    m = statistics.median(lr)
    return statistics.fmean(abs(x - m) for x in lr)


def chapter_aligned(
    src: dict, tgt: dict, min_verses=4, shift_gain=0.6, max_spread=0.3, min_corr=0.5
) -> str:
    """ "ok", "numbering" or "shift" for one chapter (``{verse: text}`` of each side).

    "shift" (see the module docstring) when the length ratios agree clearly better with
    one side moved by a verse (spread below ``shift_gain`` times the unshifted one), when
    the verse lengths are anti-correlated, or when they are both weakly correlated
    (< ``min_corr``) and widely spread (> ``max_spread``). Chapters of verses of nearly
    equal length (Ps 136, Lam 5) give no evidence either way and are kept.
    """
    if set(src) != set(tgt):
        return "numbering"
    nums = sorted(src)
    if len(nums) < min_verses:
        return "ok"
    a = [len(src[n]) for n in nums]
    b = [len(tgt[n]) for n in nums]
    r0, c0 = _corr(a, b), _spread(a, b)
    c_shift = min(_spread(a[1:], b[:-1]), _spread(a[:-1], b[1:]))
    if c_shift < shift_gain * c0 or r0 < 0 or (c0 > max_spread and r0 < min_corr):
        return "shift"
    return "ok"


def align_texts(
    src_verses: Iterable[Verse], tgt_verses: Iterable[Verse], **rules
) -> tuple[list[Verse], list[Verse], AlignReport]:
    """Pairs of verses (as two parallel lists, in the source's order) from the chapters
    whose numbering agrees (see the module docstring), and a report of what was dropped."""
    src, tgt = _chapters(src_verses), _chapters(tgt_verses)
    rep = AlignReport()
    rep.only_one_side = len(set(src) ^ set(tgt))
    out_s, out_t = [], []
    for key, s_ch in src.items():
        if key not in tgt:
            continue
        rep.chapters += 1
        verdict = chapter_aligned(s_ch, tgt[key], **rules)
        name = f"{key[0]} {key[1]}"
        if verdict == "numbering":
            rep.dropped_numbering.append(name)
            continue
        if verdict == "shift":
            rep.dropped_shift.append(name)
            continue
        rep.kept += 1
        for n in sorted(s_ch):
            ls, lt = len(s_ch[n]), len(tgt[key][n])
            if ls > 3 * lt + 40 or lt > 3 * ls + 40:  # one side holds more than its verse
                rep.dropped_verses.append(f"{name}:{n}")
                continue
            out_s.append(Verse(key[0], key[1], n, s_ch[n]))
            out_t.append(Verse(key[0], key[1], n, tgt[key][n]))
    return out_s, out_t, rep


def write_pairs(
    out_dir, src: list[Verse], tgt: list[Verse], dev=0.05, test=0.05, overwrite=False, command=""
) -> dict:
    """Write ``{train,dev,test}.tsv`` (``source<TAB>target<TAB>ref``) under ``out_dir``,
    split by chapter; returns ``{split: pairs}`` (a ``Written``). ``command``: the one that
    rebuilds the set, for its manifest."""
    counts = Written({s: 0 for s in SPLITS})
    fs = split_files(out_dir, {s: f"{s}.tsv" for s in SPLITS}, overwrite, command=command)
    with fs as files:
        for vs, vt in zip(src, tgt):
            s = chapter_split(vs.book, vs.chapter, dev, test)
            files[s].write(f"{_one_line(vs.text)}\t{_one_line(vt.text)}\t{vs.ref}\n")
            counts[s] += 1
    counts.unchanged = fs.unchanged
    return counts


def split_pairs(path, out_dir, dev=0.05, test=0.05, overwrite=False, command="") -> dict:
    """Split the sentence pairs of one TSV file (``source<TAB>target``, read by
    ``read_pairs``) into ``{train,dev,test}.tsv`` under ``out_dir``; returns ``{split:
    pairs}`` (a ``Written``; ``repeats``: the pairs whose source another pair has too;
    ``blank``: the blank lines skipped).

    A split is a function of the source: the distinct sources go in the order of a CRC-32
    hash of their text, the first ones to test until it holds ``round(test * n)`` pairs
    (at least 1), the next to dev likewise, the rest to train; every pair follows its
    source, so identical sources always share a split (a copy of a training pair is never
    a test pair), and each split keeps the file's order. The same file always splits the
    same way. Refused in one line where the distinct sources are too few to leave pairs
    in all three splits. ``command``: the one that rebuilds the set, for its manifest."""
    if not_a_file(Path(path)) == "not found":
        raise ParallelDataError(f"{path} not found: data pairs splits a file of yours, one "
                                "source<TAB>target pair a line")
    rows = read_pairs(path, skip_blank=True)
    n = len(rows)
    n_test, n_dev = max(1, round(test * n)), max(1, round(dev * n))
    groups: dict = {}
    for i, (s, _) in enumerate(rows):
        groups.setdefault(s, []).append(i)
    order = sorted(groups, key=lambda s: (zlib.crc32(s.encode("utf-8")), groups[s][0]))
    split_of, taken = {}, {"test": 0, "dev": 0}
    for source in order:
        where = next((w for w in ("test", "dev") if taken[w] < (n_test, n_dev)[w == "dev"]),
                     "train")
        if where != "train":
            taken[where] += len(groups[source])
        for i in groups[source]:
            split_of[i] = where
    counts = Written({s: 0 for s in SPLITS})
    for where in split_of.values():
        counts[where] += 1
    if min(counts.values()) < 1:
        repeats = (
            f" ({n - len(groups)} of them repeat another pair's source)" if n > len(groups) else ""
        )
        raise ParallelDataError(
            f"{path} holds {n} pairs with {len(groups)} distinct "
            f"source{'s' if len(groups) != 1 else ''}{repeats}: too few to "
            f"keep pairs for test, dev and training (pairs with one source share a split)"
        )
    files = {s: f"{s}.tsv" for s in SPLITS}
    fs = split_files(out_dir, files, overwrite, [("pairs", path)], command=command)
    with fs as files:
        for i, (s, t) in enumerate(rows):
            files[split_of[i]].write(f"{s}\t{t}\n")
    counts.unchanged = fs.unchanged
    counts.repeats, counts.blank = n - len(groups), rows.blank
    return counts


#: the problems of a pairs file listed in its error; the rest are counted
SHOWN_PROBLEMS = 10


class Pairs(list):
    """``[(source, target)]`` as read from a file; ``blank``: the blank lines skipped."""

    blank = 0


def read_pairs(path, limit: LineLimit = NO_MODEL, *, skip_blank: bool = False) -> Pairs:
    """``[(source, target)]`` from a TSV file written by ``write_pairs`` (a third column,
    the reference, is optional), read by ``iter_text_lines`` (UTF-8, lines end at
    ``\n``). Raises ``ParallelDataError`` for a missing file, a file with no pairs, or
    lines that are not pairs (a blank line unless ``skip_blank``, a line without a tab,
    an empty side): all of them at once, each with its line, the first
    ``SHOWN_PROBLEMS`` listed (``TextEncodingError`` for bytes that are not UTF-8)."""
    p = Path(path)
    why = not_a_file(p)
    if why == "not found":
        raise ParallelDataError(
            f"{p} not found: make the splits of your own pairs with `scratchformer data pairs "
            f"FILE --out {p.parent}`, or the Bible's with `scratchformer data bible --out "
            f"{p.parent}` (or point --data-dir at a folder holding {p.name})"
        )
    if why:
        raise ParallelDataError(f"{p} {why}: a split must be a file of source<TAB>target lines")
    rows, problems = Pairs(), []
    for i, line in iter_text_lines(p, limit=limit):
        if not line.strip():
            if skip_blank:
                rows.blank += 1
            else:
                problems.append(f"{p}:{i}: empty line (expected source<TAB>target)")
            continue
        parts = line.split("\t")
        if len(parts) not in (2, 3):
            problems.append(
                f"{p}:{i}: expected source<TAB>target[<TAB>ref], found {len(parts)} "
                f"tab-separated field{'s' if len(parts) != 1 else ''}: {line[:60]!r}"
            )
            continue
        s, t = parts[0].strip(), parts[1].strip()
        if not s or not t:
            problems.append(f"{p}:{i}: empty {'source' if not s else 'target'}")
            continue
        rows.append((s, t))
    if problems:
        raise ParallelDataError(_listed(p, problems))
    if not rows:
        raise ParallelDataError(f"{p} holds no sentence pairs (empty split)")
    return rows


def _listed(p: Path, problems: list[str]) -> str:
    """One problem as its own line; several as a count and the first ``SHOWN_PROBLEMS``."""
    if len(problems) == 1:
        return problems[0]
    shown = f" (the first {SHOWN_PROBLEMS} below)" if len(problems) > SHOWN_PROBLEMS else ""
    return f"{p}: {len(problems)} lines are not source<TAB>target pairs{shown}:\n" + "\n".join(
        f"  {line}" for line in problems[:SHOWN_PROBLEMS]
    )


__all__ = [
    "PAIRS",
    "SPLITS",
    "AlignReport",
    "ParallelDataError",
    "align_texts",
    "chapter_aligned",
    "read_pairs",
    "split_pairs",
    "write_pairs",
]
