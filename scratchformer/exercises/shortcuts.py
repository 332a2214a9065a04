"""Shortcuts that make a check prove nothing, found in the learner's file before it runs:

- the engine's own code for the exercise, imported or reached (``from scratchformer.engine.ops
  .linear import linear_backward``, the op's table ``linear.backward``, ``dispatch.table
  ("linear")``, ``MultiHeadAttention.backward`` read from the class);
- an autograd package (torch, jax, autograd, tensorflow, ...);
- finite differences of its own: the gradient checker imported, or the forward called
  inside the function to write.

A file with one of these passes nothing: ``check`` says what it found, and where.
"""

from __future__ import annotations

import ast

from scratchformer.exercises.spec import shown

#: packages that differentiate for you
AUTOGRAD = ("torch", "jax", "autograd", "tensorflow", "mxnet", "chainer", "paddle", "mlx")
#: the engine's finite differences
CHECKER = ("numeric_gradient", "check_gradients", "check_op", "check_module", "central_values")


def _engine_names(ex) -> tuple[set, set, set]:
    """``(function names, op tables, (class, method) pairs)`` of the engine's code
    for the exercise: what a learner's file must not call for its answer."""
    names, tables, methods = set(), set(), set()
    if ex.kind != "layer":  # a layer's engine methods are named by their class below
        names = {getattr(fn, "__name__", "") for fn in ex.engine().values()}
    for attr in ("table",):
        if isinstance(getattr(ex, attr, None), str):
            tables.add(ex.table)
    if ex.name == "attention":
        tables |= {"attention_core", "dot_product_logits"}
    if ex.kind == "optimizer":
        names |= {"Adam", "blocked_update"}
    for m in getattr(ex, "methods", ()):
        methods.add((m.cls.__name__, m.attr))
    return names - {""}, tables, methods


def _forward_names(ex) -> set:
    found = set()
    fwd = getattr(ex, "forward", None)
    if fwd is not None and ex.kind == "op":
        found.add(fwd.__name__)
    if ex.name == "attention":
        found |= {"attention_core_forward", "dot_product_logits_forward"}
    return found


def _attribute_chain(node) -> list[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return parts[::-1]


def find(ex, text: str, path: str) -> str:
    """One line naming the first shortcut in the file ``text``, or ""."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return ""  # loading it says so, in its own words
    names, tables, methods = _engine_names(ex)
    writes = set(ex.functions)
    where = shown(path)

    def said(what: str, node) -> str:
        return (
            f"{where}, line {node.lineno}: {what}: a check of that proves nothing about "
            "your backward pass, so nothing passes while it is there"
        )

    aliases = {  # "F" of "import ... PositionwiseFeedForward as F"
        a.asname: a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for a in node.names
        if a.asname
    }
    for node in _learners(tree, writes):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            modules += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for module in modules:
                if module.split(".")[0] in AUTOGRAD:
                    return said(f"it imports {module}, which differentiates for you", node)
                if module == "scratchformer.engine.gradcheck":
                    return said("it imports the gradient checker (finite differences)", node)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("scratchformer"):
                for a in node.names:
                    if a.name in names:
                        return said(f"it imports the engine's own {a.name}", node)
                    if a.name in CHECKER or a.name == "gradcheck":
                        return said("it imports the gradient checker (finite differences)", node)
        elif isinstance(node, ast.Attribute):
            chain = _attribute_chain(node)
            chain = [aliases.get(chain[0], chain[0]), *chain[1:]] if chain else chain
            if len(chain) >= 2 and chain[-1] in names:
                return said(f"it reads the engine's own {'.'.join(chain)}", node)
            if len(chain) >= 2 and chain[-2] in tables and chain[-1] in ("forward", "backward"):
                return said(f"it calls the engine's {'.'.join(chain)} for this exercise", node)
            if len(chain) >= 2 and (chain[-2], chain[-1]) in methods:
                return said(f"it reads the engine's own {chain[-2]}.{chain[-1]}", node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            chain = _attribute_chain(node.func)
            if chain[-2:] == ["dispatch", "table"] and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and arg.value in tables:
                    return said(f"it calls the engine's dispatch.table({arg.value!r})", node)
    return _differences(ex, tree, writes, said)


def _learners(tree, writes: set):
    """Every node of the file but those inside the functions and classes it was given
    (the forward as the engine has it may call what the learner must not)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            given = isinstance(child, (ast.FunctionDef, ast.ClassDef)) and child.name not in writes
            if not given:
                stack.append(child)


def _differences(ex, tree, writes: set, said) -> str:
    """The forward called inside a function to write: finite differences of its own."""
    forwards = _forward_names(ex)
    for fn in ast.walk(tree):
        if not (isinstance(fn, ast.FunctionDef) and fn.name in writes):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else None
            chain = _attribute_chain(node.func) if isinstance(node.func, ast.Attribute) else []
            if name in forwards or (ex.kind == "layer" and chain[-2:] == ["self", "forward"]):
                called = name or "self.forward"
                return said(
                    f"{fn.name} calls the forward ({called}): finite differences of your own",
                    node,
                )
    return ""


__all__ = ["AUTOGRAD", "find"]
