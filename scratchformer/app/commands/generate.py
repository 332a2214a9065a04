r"""``scratchformer generate``: sample text from a trained language model.

    scratchformer generate --checkpoint runs/lm/checkpoints/final.npz
    scratchformer generate --checkpoint runs/lm/checkpoints/final.npz --num 3 --seed 1 \
        --prompt "In the beginning" --temperature 0.8 --top-k 20

Each sample starts with ``<bos>`` followed by the prompt, and continues until ``<eos>``
(the end of a verse) or ``--max-new`` tokens. ``--temperature 0`` is greedy decoding;
``--top-k 0`` samples from the whole vocabulary.
"""

from __future__ import annotations

import argparse

from scratchformer.app.checkpoint import load_with_tokenizer
from scratchformer.app.commands import COUNT, NONNEGATIVE, number
from scratchformer.engine.decode.sample import generate
from scratchformer.engine.models import LanguageModel


def add_parser(sub) -> None:
    p = sub.add_parser(
        "generate",
        help="sample from a language-model checkpoint (temperature, top-k)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--checkpoint", required=True, help="a checkpoint of a language model (`train --config lm`)"
    )
    p.add_argument("--prompt", default="", help="text the samples continue (default: none)")
    p.add_argument("--max-new", type=COUNT, default=300, help="most new tokens per sample")
    p.add_argument(
        "--temperature", type=number(lo=0), default=0.8, help="softmax temperature (0.8)"
    )
    p.add_argument(
        "--top-k", type=NONNEGATIVE, default=0, help="sample among the k most likely (0: all)"
    )
    p.add_argument("--num", type=COUNT, default=1, help="number of samples")
    p.add_argument("--seed", type=NONNEGATIVE, default=0, help="sampling seed")
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
        num_samples=args.num,
    )
    for ids in samples:
        print(args.prompt + tokenizer.decode(ids))
    return 0
