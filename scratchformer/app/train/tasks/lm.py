"""The language-model task: a decoder-only character-level model on verses, one per line.

Each line is a sequence ``<bos> c_1 .. c_n`` predicting ``c_1 .. c_n <eos>``; the
``<eos>`` counts as the line's newline character, so **bits per character** = mean NLL
per predicted token / ln 2 over the validation (or test) lines, as for enwik8 / text8
with newlines. Lines longer than the model's positions are cut (a cut line loses its
``<eos>``). The test set reports bits per character and prints a sample.

Started from a checkpoint (``model.init_from``: an imported GPT-2, say), the lines are
read with its tokenizer, a token is then a subword (GPT-2's <bos> and <eos> are both
``<|endoftext|>``), and "bits per character" is bits per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scratchformer.app.data.text import NO_MODEL, LineLimit, load_lines
from scratchformer.app.data.tokenizers import CharTokenizer
from scratchformer.app.train.tasks.base import Task, TaskBatch, check_settings, pad_rows
from scratchformer.engine import backend
from scratchformer.engine.decode.sample import generate
from scratchformer.engine.errors import need

SPLIT_FILES = {"train": "train", "valid": "dev", "test": "test"}


@dataclass
class LMSettings:
    """[task] of lm (defaults: configs/lm.toml)."""

    name: str  # "lm"
    data_dir: str  # where {train,dev,test}.txt are
    temperature: float  # of the sample printed at the end (0 = greedy)
    top_k: int  # the sample draws among the k most likely characters (0 = all)
    sample_len: int  # characters of that sample at most (0 = no sample)

    def check(self) -> None:
        check_settings(self)
        t = self.temperature
        need(math.isfinite(t) and t >= 0, f"task.temperature must be >= 0, got {t}")
        need(self.top_k >= 0, f"task.top_k must be >= 0 (0 = all), got {self.top_k}")
        need(self.sample_len >= 0, f"task.sample_len must be >= 0, got {self.sample_len}")


class LMTask(Task):
    Settings = LMSettings
    config = "lm"
    kinds = ("lm",)
    shown_valid = ("loss", "bpc", "ppl", "token_acc")
    shown_test = ("bpc", "ppl", "token_acc")

    def __init__(self, settings: LMSettings, lines: LineLimit = NO_MODEL, init=None):
        super().__init__(settings, lines, init)
        texts = load_lines(settings.data_dir, lines)
        self.texts = {split: texts[f] for split, f in SPLIT_FILES.items()}
        if self.tokenizer is None:  # a new model: characters; else the checkpoint's
            self.tokenizer = CharTokenizer.fit(self.texts["train"])
        self._examples = {}

    def configure(self, model: dict, seed: int):
        """Also encodes the lines, cut at the model's ``max_len`` positions."""
        config = super().configure(model, seed)
        np, L = backend.np, config.max_len
        bos, eos = config.bos_id, config.eos_id
        encode_many = getattr(self.tokenizer, "encode_many", None)
        for split, texts in self.texts.items():
            rows = []
            encoded = encode_many(texts) if encode_many else map(self.tokenizer.encode, texts)
            for ids in encoded:
                x = np.asarray([bos, *ids], dtype=np.int64)[:L]
                y = np.asarray([*ids, eos], dtype=np.int64)[:L]
                rows.append((x, y))
            self._examples[split] = rows
        return config

    def examples(self, split: str) -> list:
        return self._examples[split]

    def model_spec(self) -> dict:
        return {"class": "LanguageModel"}

    def widths(self, split: str):
        return backend.np.asarray([len(x) for x, _ in self.examples(split)], dtype=backend.np.int64)

    def batch(self, split: str, indices) -> TaskBatch:
        rows = [self.examples(split)[i] for i in indices]
        pad = self.model_config.pad_id
        y = pad_rows([y for _, y in rows], pad)
        n = int((y != pad).sum())
        return TaskBatch((pad_rows([x for x, _ in rows], pad),), y, n, n)

    def evaluate(self, model, split, max_tokens, limit=0, predictions=False, progress=None):
        """Also bits per character: the NLL per predicted character / ln 2."""
        m = super().evaluate(model, split, max_tokens, limit, progress=progress)
        m["bpc"] = m["nll"] / math.log(2)
        return m

    def test(self, model, max_tokens: int, examples: int, seed: int, progress=None, world=None):
        """Bits per character on the test lines, and a sample from ``<bos>``."""
        m = self.evaluate(model, "test", max_tokens, progress=progress)
        s = self.settings
        shown = []
        if s.sample_len and examples:
            ids = generate(
                model, [model.config.bos_id], s.sample_len, s.temperature, s.top_k, seed=seed
            )[0]
            m["sample"] = self.tokenizer.decode(ids)
            shown.append(m["sample"])
        return m, shown

    def format_example(self, example) -> str:
        return f"  sample (temperature {self.settings.temperature}): {example}"


__all__ = ["LMSettings", "LMTask"]
