"""The documentation site's build hooks (mkdocs.yml names this file).

- **index.md is the README.** Its links into ``docs/`` are made relative to the site;
  links to files the site does not carry (``examples/...``) become the file's name.
- **Each derivation shows the code it derives.** A section of docs/derivations.md opens
  with a ``Code:`` line naming functions as ``path::function`` or ``path::Class.method``.
  Under that line the site shows each one's source, read from the file with ``ast`` at
  build time, with the file's own line numbers: the page cannot drift from the code, and
  a name that is no longer there stops the build.
- **MathJax ships with the site.** MathJax 3's combined TeX component and its fonts are
  copied from the django-static-mathjax wheel (MathJax's own files; Django is not needed)
  into ``site/mathjax/``, so the math renders offline, from ``file://``, with no CDN.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import textwrap
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
_PACKAGE = "scratchformer"  # base classes imported from it are followed
CODE_REF = re.compile(r"`([\w/.-]+\.py)::([\w.]+)`")
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def on_files(files, config):
    """Add index.md, made from the README."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    files.append(File.generated(config, "index.md", content=readme_for_site(readme)))
    return files


def readme_for_site(text: str) -> str:
    """The README with links that work on the site: ``docs/x.md`` -> ``x.md``; links to
    other files of the repository become their text and path in code."""

    def fix(m):
        bang, label, target = m.groups()
        if target.startswith(("http://", "https://", "#", "mailto:")):
            return m.group(0)
        if target.startswith("docs/"):
            return f"{bang}[{label}]({target[len('docs/') :]})"
        return f"{label} (`{target}`)" if label.strip("`") != target else f"`{target}`"

    return LINK.sub(fix, text)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "derivations.md":
        return with_derived_code(markdown)
    return markdown


def with_derived_code(markdown: str) -> str:
    """After every ``Code:`` paragraph, an open block per named function with its
    source."""
    out, lines, i = [], markdown.splitlines(), 0
    while i < len(lines):
        if not lines[i].startswith("Code:"):
            out.append(lines[i])
            i += 1
            continue
        paragraph = []
        while i < len(lines) and lines[i].strip():
            paragraph.append(lines[i])
            i += 1
        out += paragraph
        refs = CODE_REF.findall(" ".join(paragraph))
        if not refs:
            raise PluginError(f"derivations.md: a Code: line names no function: {paragraph[0]}")
        for path, name in refs:
            out += ["", *code_block(path, name)]
    return "\n".join(out) + "\n"


def code_block(path: str, qualname: str) -> list[str]:
    """A details block (open) with the source of ``qualname`` in ``path``."""
    where, name, start, end, source = source_of(path, qualname)
    title = f"{name} ({where}, lines {start}-{end})"
    # four backticks: a docstring may hold a three-backtick example
    fence = [f'````python linenums="{start}"', *source.splitlines(), "````"]
    return [f'???+ example "{title}"', "", *("    " + s if s else "" for s in fence)]


def source_of(path: str, qualname: str) -> tuple[str, str, int, int, str]:
    """``(file, name, first line, last line, dedented source)`` of a function, class or
    method, decorators included, found by walking the module's syntax tree. A method a
    class inherits is taken from the base class that defines it (same file, or imported
    from ``scratchformer``), and named there."""
    text, tree = _module(path)
    outer, _, method = qualname.rpartition(".")
    node = _child(tree, outer or method)
    if node is not None and outer:
        found = _method(path, tree, node, method)
        if found is not None:
            path, text, node = found[0], found[1] or text, found[2]
            qualname = f"{found[3].name}.{method}"
        else:
            node = None
    if node is None or (outer and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))):
        raise PluginError(f"derivations.md names {path}::{qualname}, which is not there")
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    body = text.splitlines()[start - 1 : node.end_lineno]
    return path, qualname, start, node.end_lineno, textwrap.dedent("\n".join(body))


def _module(path: str):
    file = ROOT / path
    if not file.is_file():
        raise PluginError(f"derivations.md names {path}, which does not exist")
    text = file.read_text(encoding="utf-8")
    return text, ast.parse(text, filename=str(file))


def _child(node, name: str):
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    found = [n for n in node.body if isinstance(n, kinds) and n.name == name]
    return found[0] if found else None


def _method(path: str, tree, cls: ast.ClassDef, method: str):
    """``(path, text, method node, class node)`` where ``cls`` or a base defines it."""
    own = _child(cls, method)
    if own is not None:
        return path, None, own, cls
    imports = {
        a.asname or a.name: n.module
        for n in tree.body
        if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == _PACKAGE
        for a in n.names
    }
    for base in (b.id for b in cls.bases if isinstance(b, ast.Name)):
        where = path if base not in imports else imports[base].replace(".", "/") + ".py"
        text, base_tree = _module(where)
        base_cls = _child(base_tree, base)
        if isinstance(base_cls, ast.ClassDef):
            found = _method(where, base_tree, base_cls, method)
            if found is not None:
                return found[0], found[1] or text, found[2], found[3]
    return None


#: what the site needs of MathJax 3 (its ``es5`` build): the combined component (TeX
#: input with every extension, CommonHTML output) and the fonts that output loads
MATHJAX_FILES = ("tex-chtml-full.js", "output/chtml/fonts/woff-v2")


def mathjax_dir() -> Path:
    """MathJax 3's ``es5`` folder in the django-static-mathjax wheel (module ``mathjax``)."""
    spec = importlib.util.find_spec("mathjax")
    es5 = Path(spec.origin).parent / "static" / "mathjax" / "es5" if spec and spec.origin else None
    if es5 is None or not (es5 / MATHJAX_FILES[0]).is_file():
        raise PluginError("MathJax comes from django-static-mathjax: pip install -e '.[docs]'")
    return es5


def on_post_build(config):
    """Copy MathJax 3 (``MATHJAX_FILES``) into the site, as ``site/mathjax/``."""
    es5, out = mathjax_dir(), Path(config["site_dir"]) / "mathjax"
    for name in MATHJAX_FILES:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        if (es5 / name).is_dir():
            shutil.copytree(es5 / name, out / name, dirs_exist_ok=True)
        else:
            shutil.copy2(es5 / name, out / name)
