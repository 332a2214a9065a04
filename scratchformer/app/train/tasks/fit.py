"""A translation model sized to its data: the ``[model]`` of ``preset = "data"``.

    [task]
    vocab_size = 0        # the vocabulary: chosen from the text (data.pairs.vocabulary_for)
    [model]
    preset = "data"       # the model: chosen from the training targets' size (model_for)

The paper's base model on a few thousand sentence pairs memorises them and learns little
else; small data wants a small, strongly regularised model (Sennrich and Zhang, 2019,
"Revisiting Low-Resource Neural Machine Translation"; Araabi and Monz, 2020, "Optimizing
Transformer for Low-Resource Neural Machine Translation": fewer and narrower layers,
dropout 0.3). The tiers below go by the number of target tokens (BPE pieces, ``<eos>``
included) of the training pairs; the last is the paper's base model. Keys the config
sets besides the preset win (``--set model.d_model=256``).
"""

from __future__ import annotations

import math

from scratchformer.engine.models import PRESETS

#: (fewer target tokens than this, the model): the smallest tier that fits
TIERS = (
    (250_000, {"N": 2, "d_model": 128, "h": 4, "d_ff": 512, "P_drop": 0.3, "eps_ls": 0.1}),
    (2_500_000, {"N": 3, "d_model": 256, "h": 4, "d_ff": 1024, "P_drop": 0.1, "eps_ls": 0.1}),
    (math.inf, {k: PRESETS["base"][k] for k in ("N", "d_model", "h", "d_ff", "P_drop", "eps_ls")}),
)
#: tokens a test-time translation may add to its source's length (``max_len_b``)
DECODE_ROOM = 50


def model_for(target_tokens: int, longest_source: int, longest: int) -> tuple[dict, str]:
    """The ``[model]`` keys for training pairs holding ``target_tokens`` target tokens,
    the longest source ``longest_source`` tokens and the longest example ``longest``
    positions; and why, in words. Positions: room for the longest example and for the
    longest source's translation (its length + ``DECODE_ROOM``), rounded up to 32."""
    bound, model = next((b, m) for b, m in TIERS if target_tokens < b)
    need = max(longest, longest_source + DECODE_ROOM + 1)
    model = {**model, "max_len": -(-need // 32) * 32}
    than = f"fewer than {bound:,}" if math.isfinite(bound) else "the paper's base model"
    return model, f"{target_tokens:,} target tokens in training: {than}"


def describe(config) -> str:
    """``N=2, d_model=128, h=4, d_ff=512, P_drop=0.3, eps_ls=0.1, model.max_len=160
    positions``: the positions named in full, apart from the task's ``task.max_len`` (the
    longest training pair kept, in tokens), which a run may print beside it."""
    keys = ("N", "d_model", "h", "d_ff", "P_drop", "eps_ls")
    sizes = ", ".join(f"{k}={getattr(config, k)}" for k in keys)
    return f"{sizes}, model.max_len={config.max_len} positions"


__all__ = ["DECODE_ROOM", "TIERS", "describe", "model_for"]
