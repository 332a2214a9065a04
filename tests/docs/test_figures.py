"""One source for every figure the README repeats: each measured number in the README's
prose and tables (outside its code blocks) appears in docs/results.md, where the run
that gave it is described, so that the two cannot disagree. A figure is a decimal
(``27.53``, ``1.2``), a percentage (``99.20%``), a count with thousands separators
(``2,100``), a time (``1 min 36 s``) or a ratio (``1.37x``); the settings and facts that
are not measurements are listed below with what they are.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FIGURE = re.compile(
    r"(?<![\w.,/-])("
    r"\d+ min \d+ s"  # a time
    r"|\d[\d,]*\.\d+(?:\.\d+)*%?x?"  # a decimal, a percentage, a ratio, a version
    r"|\d+%"
    r"|\d{1,3}(?:,\d{3})+"  # a count
    r")(?![\w.]\d|[\w])"
)

#: figures of the README that are settings or facts, not measurements
NOT_MEASURED = {
    "1706.03762": "the paper's arXiv number",
    "3.10": "the Python version needed",
    "0.9": "Adam's beta1 (the paper's)",
    "0.98": "Adam's beta2 (the paper's)",
    "2.4.6": "the NumPy version of the machine named",
    "20%": "the share of a run's steps whose checkpoints the average takes",
    "1.0": "the version until which old settings work; bible-2core's length penalty alpha",
    "0.3": "the dropout the pairs config chose (a setting printed with the run)",
    "3,000": "the default run's steps (a setting)",
    "1,500": "bible-cpu's steps (a setting)",
    "2,000": "the number of verse pairs the README's recipe takes (a setting)",
}


def figures(markdown: str) -> list[str]:
    """The figures of ``markdown`` outside its fenced code blocks, in order."""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
    return [m.group(1) for m in FIGURE.finditer(prose)]


def unsourced(readme: str, results: str) -> list[str]:
    """The README's measured figures that ``results`` does not hold."""
    return sorted({f for f in figures(readme) if f not in NOT_MEASURED and f not in results})


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def test_every_figure_of_the_readme_is_in_the_results_page():
    missing = unsourced(read("README.md"), read("docs/results.md"))
    assert not missing, f"README figures not in docs/results.md: {missing}"


def test_a_figure_changed_in_the_readme_alone_fails():
    """A planted mismatch: one measured figure of the README changed by one unit in its
    last digit, the results page unchanged."""
    readme, results = read("README.md"), read("docs/results.md")
    measured = [f for f in figures(readme) if f not in NOT_MEASURED]
    assert len(measured) >= 20, measured  # the test reads the figures it means to
    for figure in measured:
        last = re.search(r"\d(?=\D*$)", figure)
        planted = figure[: last.start()] + str((int(last[0]) + 1) % 10) + figure[last.end() :]
        if planted in results:
            continue  # the page holds that figure too, elsewhere
        changed = readme.replace(figure, planted)
        assert planted in unsourced(changed, results), figure


def test_the_figures_are_found_where_they_are_written():
    text = "took 1 min 36 s, 100.00% and 99.20%, about 2,100 passed, 1.37x faster, 27.53 / 48.08"
    assert figures(text) == ["1 min 36 s", "100.00%", "99.20%", "2,100", "1.37x", "27.53", "48.08"]
    assert figures("```\n12.5 in code\n```\nv0.2.1-x 2026-11-25 (#3)") == []
