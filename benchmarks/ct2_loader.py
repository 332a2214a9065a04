"""CTranslate2 for scratchformer's exports: a converter loader for the Marian folders that
``scratchformer export`` writes (benchmark-only; CTranslate2 is never a dependency).

    python benchmarks/ct2_loader.py EXPORT_FOLDER CT2_FOLDER [--quantization int8]

CTranslate2's own Marian loader (``ct2-transformers-converter``) assumes what OPUS-MT's
folders are: the decoder starts from a zero vector (``start_from_zero_embedding``), and
the vocabulary's last entry is ``<pad>``, whose row it drops. A model trained with
``zero_start`` is exported in that layout (scratchformer/app/export.py) and the stock
converter reads it as it is. A model that starts from ``<bos>``'s embedding (the default)
is exported without the extra entry; for it, this loader is CTranslate2's Marian loader
with the decoder started from ``decoder_start_token_id`` (``<bos>``) and every vocabulary
row kept (BART's behaviour for the three). ``convert`` picks by the folder's config.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ctranslate2.converters import TransformersConverter
from ctranslate2.converters import transformers as ct2_transformers


class BosStartMarianLoader(ct2_transformers.MarianMTLoader):
    """Marian as CTranslate2 reads it, but started from ``decoder_start_token_id``'s own
    embedding and with every vocabulary row kept (BART's behaviour for the three)."""

    def get_model_spec(self, model):
        model.config.normalize_before = False
        model.config.normalize_embedding = False
        return ct2_transformers.BartLoader.get_model_spec(self, model)

    def set_config(self, config, model, tokenizer):
        ct2_transformers.BartLoader.set_config(self, config, model, tokenizer)

    def set_decoder(self, spec, decoder):
        ct2_transformers.BartLoader.set_decoder(self, spec, decoder)

    def get_vocabulary(self, model, tokenizer):
        return ct2_transformers.BartLoader.get_vocabulary(self, model, tokenizer)


def zero_start(export: str) -> bool:
    """Whether the folder is a zero-start model's (its start is the extra last entry)."""
    cfg = json.loads((Path(export) / "config.json").read_text())
    return cfg["decoder_start_token_id"] == cfg["pad_token_id"] == cfg["decoder_vocab_size"] - 1


def convert(export: str, out: str, quantization: str | None = None, bos_start=None):
    """Convert an export folder into a CTranslate2 model folder ``out``; ``bos_start``: the
    model starts its decoder from ``<bos>`` (this loader), else the stock converter (None:
    as the folder says)."""
    if bos_start is None:
        bos_start = not zero_start(export)
    key = "MarianConfig"
    stock = ct2_transformers._MODEL_LOADERS[key]
    if bos_start:
        ct2_transformers._MODEL_LOADERS[key] = BosStartMarianLoader()
    try:
        return TransformersConverter(export).convert(out, quantization=quantization, force=True)
    finally:
        ct2_transformers._MODEL_LOADERS[key] = stock


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("export")
    p.add_argument("out")
    p.add_argument("--quantization", default=None, help="e.g. int8 (CTranslate2's own)")
    p.add_argument("--stock", action="store_true", help="CTranslate2's own Marian loader "
                   "(default: as the folder says; a zero-start model's takes it)")
    args = p.parse_args(argv)
    print(convert(args.export, args.out, args.quantization, False if args.stock else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
