"""label_smoothed_nll: fairseq's label-smoothed NLL of log-probabilities, ignoring padding
(ops/loss.py). The reference alone. Accessors: ``n_tokens`` (the targets that count,
0-d) and ``nll_sum`` (their summed NLL, 0-d), both left on the device.

Dimension key: ``N...`` the leading dims, ``V`` vocabulary.
"""

from __future__ import annotations

from scratchformer import backend
from scratchformer.backend import np
from scratchformer.kernels.cases import Case, targets
from scratchformer.kernels.table import Schema, new_table
from scratchformer.ops import loss as _op

SCHEMA = Schema(inputs=("lprobs", "target", "eps", "pad_id"), gradients=("dlprobs",),
                accessors=("n_tokens", "nll_sum"))  # fmt: skip
#: the loss caches' accessors (the cross-entropy's too)
READ = {"n_tokens": lambda c: c.n_tokens, "nll_sum": lambda c: c.nll_sum}


def cases(r, dt):
    x = r.standard_normal((3, 4, 7))
    lp = x - np.log(np.exp(x).sum(-1, keepdims=True))
    return [Case("eps 0.1, pad 0", (backend.asarray(lp, dtype=dt), targets(r), 0.1, 0))]


TABLE = new_table(
    "label_smoothed_nll", SCHEMA, _op.label_smoothed_nll_forward,
    _op.label_smoothed_nll_backward, cases, accessors=READ,
)  # fmt: skip
forward, backward = TABLE.forward, TABLE.backward
