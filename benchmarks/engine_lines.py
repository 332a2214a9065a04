"""The engine's size against the package's: lines and code lines of the ``.py`` files.

    PYTHONPATH=<tree> python benchmarks/engine_lines.py [--json out.json]

Code lines are what is left of a file without its docstrings (module, class and
function), its comments and its blank lines (``tokenize``). ``.cu`` files are not
counted. The engine is ``scratchformer/engine/`` where the tree has one; in a tree from
before the split it is the modules that became the engine (backend, errors, memory,
device, dispatch or kernels, ops, parity, nn, models, optim, decode without
translate.py, gradcheck, train/stepper.py and the step's part of train/step.py, the
last counted whole), and also the narrower set the card's "engine" meant then (ops, nn,
models, optim). Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import sys
import tokenize
from pathlib import Path

BEFORE_ENGINE = ("backend.py", "errors.py", "memory.py", "device", "dispatch.py", "kernels",
                 "ops", "parity.py", "nn", "models", "optim", "decode", "gradcheck.py",
                 "train/stepper.py", "train/step.py")
BEFORE_NARROW = ("ops", "nn", "models", "optim")


def code_lines(text: str) -> int:
    """Lines holding code: not blank, not a comment, not inside a docstring."""
    tree = ast.parse(text)
    doc = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(
                    getattr(body[0], "value", None), ast.Constant) and isinstance(
                    body[0].value.value, str):
                doc.update(range(body[0].lineno, body[0].end_lineno + 1))
    code = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                        tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        for line in range(tok.start[0], tok.end[0] + 1):
            if line not in doc:
                code.add(line)
    return len(code)


def count(files) -> dict:
    lines = code = 0
    for f in files:
        text = f.read_text(encoding="utf-8")
        lines += len(text.splitlines())
        code += code_lines(text)
    return {"files": len(files), "lines": lines, "code_lines": code}


def measure(package: Path) -> dict:
    every = sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    out = {"package": count(every)}
    if (package / "engine").is_dir():
        out["engine"] = count([p for p in every if p.relative_to(package).parts[0] == "engine"])
    else:
        def under(p, names):
            rel = p.relative_to(package).as_posix()
            if rel == "decode/translate.py":
                return False
            return any(rel == n or rel.startswith(n + "/") for n in names)

        out["engine"] = count([p for p in every if under(p, BEFORE_ENGINE)])
        out["engine (ops, nn, models, optim)"] = count([p for p in every
                                                         if under(p, BEFORE_NARROW)])
    for key in list(out):
        if key != "package":
            out[key]["share_of_lines"] = round(out[key]["lines"] / out["package"]["lines"], 3)
            out[key]["share_of_code"] = round(out[key]["code_lines"]
                                              / out["package"]["code_lines"], 3)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="also write the result here")
    args = p.parse_args(argv)
    import scratchformer

    result = measure(Path(scratchformer.__file__).resolve().parent)
    print(f"{'part':<32} {'files':>6} {'lines':>7} {'code lines':>11} {'share':>7}")
    for name, row in result.items():
        share = f"{100 * row['share_of_lines']:.0f}%" if "share_of_lines" in row else ""
        print(f"{name:<32} {row['files']:>6} {row['lines']:>7,} {row['code_lines']:>11,} "
              f"{share:>7}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
