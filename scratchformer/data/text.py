"""Monolingual corpora: verses one per line (language model), labelled verses (classifier).

    load_lines("data", "web")     {split: [verse]}           from web.{train,dev,test}.txt
    load_labelled("data", "genre")  {split: [(label, verse)]}  from genre.{train,dev,test}.tsv

``scratchformer data web-text`` and ``scratchformer data genre`` write these files; a
missing one is an error naming the command that makes it. ``words`` is the
classifier's pre-tokenisation.
"""

from __future__ import annotations

import re
from pathlib import Path

from scratchformer.errors import ScratchformerError

SPLITS = ("train", "dev", "test")


class CorpusError(ScratchformerError):
    """A corpus file is missing or holds nothing usable."""


def _need_file(path: Path, command: str) -> Path:
    if not path.is_file():
        raise CorpusError(f"{path} not found: prepare it first with `scratchformer {command}`")
    return path


def load_lines(data_dir, stem: str = "web") -> dict:
    """``{split: [line]}`` from ``{stem}.{train,dev,test}.txt`` (blank lines skipped)."""
    d = Path(data_dir)
    out = {}
    for s in SPLITS:
        p = _need_file(d / f"{stem}.{s}.txt", f"data web-text --data-dir {d}")
        with open(p, encoding="utf-8") as f:
            out[s] = [line.rstrip("\r\n") for line in f if line.strip()]
        if not out[s]:
            raise CorpusError(f"{p} holds no lines")
    return out


def load_labelled(data_dir, stem: str = "genre") -> dict:
    """``{split: [(label, text)]}`` from ``{stem}.{train,dev,test}.tsv``
    (``label<TAB>text[<TAB>ref]``; lines without a text are skipped)."""
    d = Path(data_dir)
    out = {}
    for s in SPLITS:
        p = _need_file(d / f"{stem}.{s}.tsv", f"data genre --data-dir {d}")
        rows = []
        with open(p, encoding="utf-8") as f:
            for line in f:
                parts = line.rstrip("\r\n").split("\t")
                if len(parts) >= 2 and parts[1]:
                    rows.append((parts[0], parts[1]))
        if not rows:
            raise CorpusError(f"{p} holds no label<TAB>text lines")
        out[s] = rows
    return out


def words(text: str) -> str:
    """The classifier's pre-tokenisation: lower case, words and punctuation apart."""
    return " ".join(re.findall(r"\w+|[^\w\s]", text.lower()))


__all__ = ["CorpusError", "load_labelled", "load_lines", "words"]
