"""The documentation site: built with ``mkdocs build --strict`` (the ``docs`` extra), its
derivations page opened in headless Chromium, and the code under every derivation
compared with the source files.

The build and the browser are slow (marked ``slow``; ``.ci/run`` installs the extra and
Debian's chromium). The hook's own logic is checked fast, without a build.
"""

from __future__ import annotations

import ast
import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE_REF = re.compile(r"`([\w/.-]+\.py)::([\w.]+)`")
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
RAW_TEX = re.compile(r"\$|\\(frac|top|sum|partial|mathrm|odot|\(|\[)")


def _hooks():
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "docs" / "hooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def derivation_refs() -> list[tuple[str, str]]:
    """Every ``path::name`` of the ``Code:`` lines of docs/derivations.md."""
    refs, text = [], (ROOT / "docs" / "derivations.md").read_text(encoding="utf-8")
    for para in re.findall(r"^Code:.*?(?=\n\s*\n)", text, flags=re.M | re.S):
        refs += CODE_REF.findall(para)
    return refs


# --- the hook, without a build -------------------------------------------------------


def test_hook_reads_the_source_it_names(tmp_path, monkeypatch):
    """The block under a Code: line is the function as it is in the file now: change the
    file and the page changes with it; name something that is not there and the build
    stops."""
    hooks = _hooks()
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "base.py").write_text("class Base:\n    def backward(self, d):\n        return 2 * d\n")
    (pkg / "ops.py").write_text(
        "from pkg.base import Base\n\n\ndef f_backward(dout, cache):\n    return dout * cache\n\n\n"
        "class Layer(Base):\n    pass\n"
    )
    monkeypatch.setattr(hooks, "ROOT", tmp_path)
    monkeypatch.setattr(hooks, "_PACKAGE", "pkg")
    page = hooks.with_derived_code("## F\n\nCode: `pkg/ops.py::f_backward`\n\ntext\n")
    assert 'linenums="4"' in page and "        return dout * cache" in page
    (pkg / "ops.py").write_text("def f_backward(dout, cache):\n    return dout / cache\n")
    page = hooks.with_derived_code("Code: `pkg/ops.py::f_backward`\n")
    assert "return dout / cache" in page and "dout * cache" not in page

    (pkg / "ops.py").write_text("from pkg.base import Base\n\n\nclass Layer(Base):\n    pass\n")
    page = hooks.with_derived_code("Code: `pkg/ops.py::Layer.backward`\n")
    assert "Base.backward (pkg/base.py, lines 2-3)" in page  # inherited: shown where defined

    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match="f_forward, which is not there"):
        hooks.with_derived_code("Code: `pkg/ops.py::f_forward`\n")


def test_readme_links_work_on_the_site():
    hooks = _hooks()
    text = "[d](docs/derivations.md#x) ![p](docs/images/a.png) [e](examples/01.py) [w](https://a.b)"
    assert hooks.readme_for_site(text) == (
        "[d](derivations.md#x) ![p](images/a.png) e (`examples/01.py`) [w](https://a.b)"
    )


# --- the built site ------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """``mkdocs build --strict`` of this checkout into a temporary directory."""
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python", "mathjax"):
        pytest.importorskip(module, reason="the docs extra: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


class _Page(HTMLParser):
    """The text of a page, sorted by where it sits: in rendered math, in code, or plain;
    and the counts of the math elements: the formulas marked (``arithmatex``), those
    MathJax 3 typeset (``mjx-container``, one per formula, inside its mark) and those it
    could not (``mjx-merror``)."""

    def __init__(self):
        super().__init__()
        self.stack, self.plain, self.code = [], [], []
        self.arithmatex = self.frames = self.inside = self.errors = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        self.arithmatex += "arithmatex" in classes
        if tag == "mjx-container":
            self.frames += 1
            self.inside += any("arithmatex" in (c or "") for c, _ in self._marks())
        self.errors += tag == "mjx-merror" or "data-mjx-error" in a
        if tag in VOID:
            return
        kind = None
        if tag in ("script", "style", "svg") or tag.startswith("mjx-"):
            kind = "hidden"
        elif tag in ("pre", "code"):
            kind = "code"
        self.stack.append((tag, kind, a.get("class")))

    def _marks(self):
        return [(cls, tag) for tag, _, cls in self.stack]

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data):
        kinds = {k for _, k, _ in self.stack}
        if "hidden" in kinds:
            return
        (self.code if "code" in kinds else self.plain).append(data)


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    pytest.skip("no Chromium (Debian: apt-get install chromium)")


def browse(page: Path, *args: str) -> str:
    """Run headless Chromium on ``page`` until its scripts are idle (virtual time)."""
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    cmd += ["--virtual-time-budget=60000", *args, page.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
def test_derivations_render_in_chromium(site):
    """The math is typeset by the MathJax shipped in the site (no network): every
    formula has its rendered element, none is an error, and no TeX is left in the text
    a reader sees outside the math and the code. The code blocks are there. A screenshot
    is saved (to $SCRATCHFORMER_SCREENSHOT when set)."""
    page = _Page()
    page.feed(browse(site / "derivations.html", "--dump-dom"))
    assert page.arithmatex > 500, f"only {page.arithmatex} formulas on the page"
    assert page.frames == page.arithmatex, f"{page.frames} of {page.arithmatex} typeset"
    assert page.inside == page.frames, "a typeset formula outside the marks of arithmatex"
    assert page.errors == 0, f"{page.errors} formulas did not typeset"
    plain = html.unescape(" ".join(page.plain))
    raw = sorted({m.group(0) for m in RAW_TEX.finditer(plain)})
    shown = [plain[max(m.start() - 40, 0) : m.end() + 40] for m in RAW_TEX.finditer(plain)][:3]
    assert not raw, f"raw TeX in the page's text: {raw}, e.g. {shown}"
    code = "".join(page.code)
    for _, name in derivation_refs():
        assert f"def {name.rpartition('.')[2]}(" in code, f"no code for {name}"

    shot = Path(os.environ.get("SCRATCHFORMER_SCREENSHOT") or site / "derivations.png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    browse(site / "derivations.html", "--window-size=1280,2400", f"--screenshot={shot}")
    assert shot.stat().st_size > 50_000, "the screenshot is blank"


@pytest.mark.slow
def test_exercises_page_renders_and_its_links_resolve(site):
    """The Exercises page: its math typeset by the MathJax shipped in the site, none an
    error, no TeX left in the text; every link on it leads to a page of the site, and
    every anchor to an element of that page (a renamed heading in the derivations breaks
    it). A screenshot is saved (to $SCRATCHFORMER_EXERCISES_SCREENSHOT when set)."""
    page = _Page()
    page.feed(browse(site / "exercises.html", "--dump-dom"))
    assert page.arithmatex >= 10, f"only {page.arithmatex} formulas on the page"
    assert page.frames == page.arithmatex, f"{page.frames} of {page.arithmatex} typeset"
    assert page.inside == page.frames and page.errors == 0
    plain = html.unescape(" ".join(page.plain))
    assert not RAW_TEX.search(plain), RAW_TEX.findall(plain)[:5]
    assert "recognised: layer norm without its variance term" in "".join(page.code)

    text = (site / "exercises.html").read_text(encoding="utf-8")
    links = set(re.findall(r'<a [^>]*href="([^"]+)"', text))
    dead = []
    for href in sorted(links):
        if href.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = html.unescape(href).partition("#")
        target = site / "exercises.html" if not path else site / path
        if not target.is_file():
            dead.append(href)
        elif anchor and f'id="{anchor}"' not in target.read_text(encoding="utf-8"):
            dead.append(href)
    assert any(h.startswith("derivations.html#") for h in links)
    assert not dead, f"dead links on the Exercises page: {dead}"

    shot = Path(os.environ.get("SCRATCHFORMER_EXERCISES_SCREENSHOT") or site / "exercises.png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    browse(site / "exercises.html", "--window-size=1280,2400", f"--screenshot={shot}")
    assert shot.stat().st_size > 50_000, "the screenshot is blank"


@pytest.mark.slow
def test_every_derivation_shows_the_exact_code(site):
    """Under every Code: line the built page holds each named function's source as
    ``ast`` finds it in the file today, line for line, with the file's line numbers."""
    text = (site / "derivations.html").read_text(encoding="utf-8")
    blocks = {}
    for m in re.finditer(r'<details class="example" open="open">\s*<summary>(.*?)</summary>'
                         r"(.*?)</details>", text, flags=re.S):
        code = re.sub(r"<[^>]+>", "", re.search(r"<code>(.*?)</code>", m.group(2), re.S).group(1))
        blocks[html.unescape(m.group(1))] = html.unescape(code)
    expected = dict(_expected(path, name) for path, name in derivation_refs())
    assert len(expected) > 40 and len(blocks) == len(expected), (len(blocks), len(expected))
    for title, source in expected.items():
        assert title in blocks, f"no block {title!r}"
        assert blocks[title].rstrip("\n") == source, f"{title}: the page differs from the file"


def _expected(path: str, qualname: str) -> tuple[str, str]:
    """The block title and source of ``path::qualname``, found independently of the hook
    (a method missing from the class is looked up in its bases by importing them)."""
    import importlib
    import inspect

    module = importlib.import_module(path[:-3].replace("/", "."))
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    lines, start = inspect.getsourcelines(obj)
    owner = obj.__qualname__
    where = Path(inspect.getsourcefile(obj)).resolve().relative_to(ROOT).as_posix()
    end = start + len(lines) - 1
    ast.parse(textwrap.dedent("".join(lines)))  # a whole definition
    return f"{owner} ({where}, lines {start}-{end})", textwrap.dedent("".join(lines)).rstrip("\n")


@pytest.mark.slow
def test_api_pages_come_from_the_docstrings(site):
    """The API reference is generated from the docstrings (mkdocstrings)."""
    from scratchformer.engine.ops import attention

    page = (site / "api" / "ops.html").read_text(encoding="utf-8")
    assert 'id="scratchformer.engine.ops.attention.attention_backward"' in page
    first = attention.attention_backward.__doc__.strip().splitlines()[0]
    words = re.findall(r"[A-Za-z]{5,}", first)[:4]
    assert all(w in page for w in words), words
