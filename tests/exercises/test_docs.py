"""The exercises and their documentation name each other: every exercise's derivation
section exists and names the exercise, and the Exercises page lists every exercise and
every catalogued mistake as ``check`` prints it, on a spoiler page of their own. (The
page rendered in a browser is tests/docs/test_site.py's.)"""

from __future__ import annotations

from pathlib import Path

from scratchformer.app.commands.exercise import derivation, slug
from scratchformer.exercises import EXERCISES

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "exercises.md").read_text(encoding="utf-8")
MISTAKES = (ROOT / "docs" / "exercise-mistakes.md").read_text(encoding="utf-8")
DERIVATIONS = (ROOT / "docs" / "derivations.md").read_text(encoding="utf-8")


def test_every_exercise_has_its_derivation_section_and_is_named_there():
    anchors = {slug(line[3:]) for line in DERIVATIONS.splitlines() if line.startswith("## ")}
    for ex in EXERCISES.values():
        assert ex.section in anchors, (ex.name, ex.section)
        text = derivation(ex.section)
        assert text.startswith("## ") and f"scratchformer exercise start {ex.name}`" in text


def test_the_page_lists_every_exercise_and_mistake_as_check_prints_it():
    for i, ex in enumerate(EXERCISES.values(), start=1):
        assert f"| {i} | `{ex.name}`: " in PAGE, ex.name
        assert f"derivations.md#{ex.section})" in PAGE
        for m in ex.mistakes:  # on a page of their own, marked as spoilers
            assert f"| `{ex.name}` | `{m.name}` | {m.says} |" in MISTAKES, (ex.name, m.name)
    assert MISTAKES.startswith("# The mistakes `check` names (spoilers)\n\n> **Spoiler.**")
    assert "(exercise-mistakes.md)" in PAGE and "| exercise | planted mistake" not in PAGE


def test_the_site_and_the_readme_link_the_page():
    nav = (ROOT / "mkdocs.yml").read_text()
    assert "  - Exercises: exercises.md" in nav and "exercise-mistakes.md" in nav
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    learn = readme[readme.index("## Learn with scratchformer") :]
    assert "(docs/exercises.md)" in learn[: learn.index("\n## ", 3)]


def test_every_link_into_the_derivations_names_a_heading():
    """The hints, the files and the commands point at sections that exist."""
    import re  # noqa: PLC0415

    anchors = {slug(line[3:]) for line in DERIVATIONS.splitlines() if line.startswith("## ")}
    texts = [m.hint for ex in EXERCISES.values() for m in ex.mistakes]
    texts += [ex.file_text() for ex in EXERCISES.values()]
    for text in texts:
        for anchor in re.findall(r"derivations\.(?:md|html)#([\w-]+)", text):
            assert anchor in anchors, (anchor, text[:80])


def test_the_readme_first_screen_says_how_to_start_the_exercises():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = readme[: readme.index("\n## ")]
    assert "`scratchformer exercise start linear`" in first and "(docs/exercises.md)" in first
