"""The learner's folders of the verdict's evidence, written from a tree's exercises:

    PYTHONPATH=TREE python cases.py OUT

OUT/<case>/exercises/ holds, for the ``train_*`` cases, every exercise's solution with
the layer norm's changed (wrong only through gamma; NaN only in float32; right, but slow
at the model's sizes), and for the ``check_*`` cases one file: an embedding pass looping
over ``B, T, D = dout.shape``, a right GELU with NumPy's ``np.sqrt(2 / np.pi)``, an
encoder layer that adds dx_kv past the norm's enter_backward.
"""

from __future__ import annotations

import sys
from pathlib import Path

from scratchformer.exercises import EXERCISES

STUB = '    raise NotImplementedError("{}: not written yet")\n'
LN = "    dxhat = dout * gamma  # (..., D)"
#: (exercise, old, new) of a solution, or (exercise, None, body) of the stub
CHANGES = {
    "train_gamma": ("layernorm", LN, "    dxhat = dout  # (..., D)"),
    "train_nan32": ("layernorm", LN,
                    "    tiny = xp.asarray(1e-46, dtype=dout.dtype)  # 0 in float32\n"
                    "    dxhat = dout * gamma * (tiny / tiny)"),
    "train_slow": ("layernorm", None, """\
    xhat, rstd, gamma = cache
    D = xhat.shape[-1]
    xh, r = xhat.reshape(-1, D), rstd.reshape(-1)
    g = (dout * gamma).reshape(-1, D)
    dx = xp.zeros_like(xh)
    for n in range(xh.shape[0]):  # each row's Jacobian, entry by entry
        for i in range(D):
            s = 0.0
            for j in range(D):
                s += g[n, j] * r[n] * ((i == j) - 1.0 / D - xh[n, i] * xh[n, j] / D)
            dx[n, i] = s
    return (dx.reshape(dout.shape), (dout * xhat).reshape(-1, D).sum(0),
            dout.reshape(-1, D).sum(0))
"""),
    "check_embedding_loop": ("embedding", None, """\
    ids, V, pad_id = cache
    B, T, D = dout.shape
    dE = xp.zeros((V, D), dtype=dout.dtype)
    for b in range(B):
        for t in range(T):
            if ids[b, t] != pad_id:
                dE[ids[b, t]] += dout[b, t]
    return dE
"""),
    "check_gelu_constant": ("gelu", "    du_dx = _GELU_C * (1.0 + 3.0 * _GELU_A * x * x)",
                            "    du_dx = np.sqrt(2 / np.pi) * (1.0 + 3.0 * _GELU_A * x * x)"),
    "check_encoder_kv": ("encoder_layer", "enter_backward(da_q + da_kv, c.enter)",
                         "enter_backward(da_q, c.enter) + da_kv"),
}


def text(name: str, old, new) -> str:
    ex = EXERCISES[name]
    if old is None:
        stub = STUB.format(ex.functions[0])
        body = ex.file_text()
        assert stub in body
        return body.replace(stub, new)
    body = ex.solution_text()
    assert old in body, (name, old)
    body = body.replace(old, new)
    if "np." in new:
        body = body.replace("from __future__ import annotations\n",
                            "from __future__ import annotations\n\nimport numpy as np\n", 1)
    return body


def main(out: Path) -> None:
    for case, (name, old, new) in CHANGES.items():
        folder = out / case / "exercises"
        folder.mkdir(parents=True, exist_ok=True)
        if case.startswith("train_"):
            for ex in EXERCISES.values():
                (folder / f"{ex.name}.py").write_text(ex.solution_text())
        (folder / f"{name}.py").write_text(text(name, old, new))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
