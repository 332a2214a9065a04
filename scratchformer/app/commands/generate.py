r"""``scratchformer generate``: sample text from a trained language model.

    scratchformer generate --checkpoint runs/lm/checkpoints/final.npz
    scratchformer generate --checkpoint runs/lm/checkpoints/final.npz --samples 3 --seed 1 \
        --prompt "In the beginning" --temperature 0.8 --top-k 20 --top-p 0.95

Each sample starts with ``<bos>`` followed by the prompt, and continues until ``<eos>``
(the end of a verse) or ``--max-new`` tokens; ``<eos>`` is not drawn before
``--min-new`` tokens. The sampling flags are translate's (``translate --sample``):
``--temperature 0`` is greedy decoding; ``--top-k 0`` and ``--top-p 1`` sample from the
whole vocabulary; sample j is fixed by ``--seed`` and j alone (``--num`` is the former
name of ``--samples``).
"""

from __future__ import annotations

import argparse

from scratchformer.app.checkpoint import load_with_tokenizer
from scratchformer.app.commands import COUNT, NONNEGATIVE, add_sampling_flags
from scratchformer.engine.decode.sample import generate
from scratchformer.engine.models import LanguageModel


def add_parser(sub) -> None:
    p = sub.add_parser(
        "generate",
        help="sample from a language-model checkpoint (temperature, top-k, top-p)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--checkpoint", required=True, help="a checkpoint of a language model (`train --config lm`)"
    )
    p.add_argument("--prompt", default="", help="text the samples continue (default: none)")
    p.add_argument("--max-new", type=COUNT, default=300, help="most new tokens per sample")
    p.add_argument("--min-new", type=NONNEGATIVE, default=0,
                   help="fewest new tokens before <eos> may be drawn (default 0)")
    defaults = {"temperature": 0.8, "top_k": 0, "top_p": 1.0, "seed": 0, "samples": 1}
    add_sampling_flags(p, defaults, samples_aliases=("--num",))
    p.set_defaults(func=run)


def run(args) -> int:
    ckpt, tokenizer = load_with_tokenizer(args.checkpoint, expect=LanguageModel)
    model = ckpt.model
    prompt = [model.config.bos_id, *tokenizer.encode(args.prompt)]
    samples = generate(
        model,
        prompt,
        max_new_tokens=args.max_new,
        temperature=args.temperature,
        top_k=args.top_k,
        seed=args.seed,
        num_samples=args.samples,
        top_p=args.top_p,
        min_new_tokens=args.min_new,
    )
    for ids in samples:
        print(args.prompt + tokenizer.decode(ids))
    return 0
