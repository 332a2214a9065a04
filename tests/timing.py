"""The lines a command writes about time: progress lines (``  training: 3/10 (0:00:12,
about 0:00:28 left)``, every 10 s of a stage without a bar) and notes that a stage ran
longer than estimated. A busy machine adds them to any command's standard error, so a
test that asserts on standard error compares it without them (``untimed``)."""

import re

#: a stage's progress line: ``  <what>: done[/total] (h:mm:ss[, about h:mm:ss left])``
PROGRESS = re.compile(r"  \S[^:]*: [\d,]+(/[\d,]+)? \(\d+:\d\d:\d\d(, about \d+:\d\d:\d\d left)?\)")
#: the beginnings of the notes about time
NOTES = ("note: this check has run more than twice its estimate",)


def untimed(text: str) -> str:
    """``text`` without its progress lines and notes about time."""
    lines = text.splitlines(keepends=True)
    return "".join(
        ln for ln in lines if not PROGRESS.fullmatch(ln.rstrip("\n")) and not ln.startswith(NOTES)
    )
