"""The classification task: an encoder with a classification head, verse -> genre.

Verses are lower-cased and split into words and punctuation (``data.text.words``), then
prefixed with ``<bos>``, the token whose features are classified; longer verses than the
model's positions are cut. Labels are the sorted set of training labels. Accuracy is
reported beside two baselines, named as what they are: always answering the training
set's majority class (what a model that ignores the text can learn), and the share of the
judged set's own largest class (the best constant answer, known only by looking at that
set's labels: the test split is by chapter, so its mix of classes differs from train's).
"""

from __future__ import annotations

from dataclasses import dataclass

from scratchformer.app.data.text import NO_MODEL, LineLimit, load_labelled, words
from scratchformer.app.data.tokenizers import WhitespaceTokenizer
from scratchformer.app.train.tasks.base import Task, TaskBatch, check_settings, pad_rows
from scratchformer.engine import backend
from scratchformer.engine.errors import ConfigError, need

SPLIT_FILES = {"train": "train", "valid": "dev", "test": "test"}


@dataclass
class ClassifySettings:
    """[task] of classify (defaults: configs/classify.toml)."""

    name: str  # "classify"
    data_dir: str  # where {train,dev,test}.tsv are
    min_freq: int  # words seen fewer times in training are <unk>
    max_vocab: int  # the most frequent words kept

    def check(self) -> None:
        check_settings(self)
        need(self.min_freq >= 1, f"task.min_freq must be >= 1, got {self.min_freq}")
        need(self.max_vocab >= 1, f"task.max_vocab must be >= 1, got {self.max_vocab}")


class ClassifyTask(Task):
    Settings = ClassifySettings
    config = "classify"
    kinds = ("classify",)
    target_pad = False
    shown_train = ("loss",)  # exp(loss) over 6 classes is no perplexity of text
    shown_valid = ("loss", "accuracy", "majority_baseline")
    best_metrics = ("nll", "accuracy")
    shown_test = ("accuracy", "majority_baseline", "largest_class", "loss")

    def __init__(self, settings: ClassifySettings, lines: LineLimit = NO_MODEL):
        super().__init__(settings, lines)
        rows = load_labelled(settings.data_dir, lines)
        self.texts = {split: rows[f] for split, f in SPLIT_FILES.items()}
        train_words = [words(t) for _, t in self.texts["train"]]
        self.tokenizer = WhitespaceTokenizer.fit(
            train_words, min_freq=settings.min_freq, max_size=settings.max_vocab
        )
        self.labels = sorted({lab for lab, _ in self.texts["train"]})
        if len(self.labels) < 2:
            raise ConfigError(f"the training data has {len(self.labels)} label(s): need 2 or more")
        self._examples = {}

    def configure(self, model: dict, seed: int):
        """Also encodes the verses, cut at the model's ``max_len`` positions."""
        config = super().configure(model, seed)
        np = backend.np
        label_id = {lab: i for i, lab in enumerate(self.labels)}
        for split, rows in self.texts.items():
            enc = []
            for lab, t in rows:
                if lab not in label_id:
                    raise ConfigError(f"label {lab!r} of the {split} split never occurs in train")
                ids = [config.bos_id, *self.tokenizer.encode(words(t))][: config.max_len]
                enc.append((np.asarray(ids, dtype=np.int64), label_id[lab]))
            self._examples[split] = enc
        counts = np.bincount([y for _, y in self._examples["train"]], minlength=len(self.labels))
        self.majority = int(counts.argmax())
        return config

    def examples(self, split: str) -> list:
        return self._examples[split]

    def model_spec(self) -> dict:
        return {"class": "EncoderClassifier", "num_classes": len(self.labels)}

    def widths(self, split: str):
        return backend.np.asarray([len(x) for x, _ in self.examples(split)], dtype=backend.np.int64)

    def batch(self, split: str, indices) -> TaskBatch:
        np = backend.np
        rows = [self.examples(split)[i] for i in indices]
        x = pad_rows([r for r, _ in rows], self.model_config.pad_id)
        y = np.asarray([lab for _, lab in rows], dtype=np.int64)
        return TaskBatch((x,), y, int((x != self.model_config.pad_id).sum()), len(y))

    def evaluate(self, model, split, max_tokens, limit=0, predictions=False, progress=None):
        """Accuracy, the two baselines (see the module doc) and each class's recall."""
        m, pred, gold = super().evaluate(
            model, split, max_tokens, limit, predictions=True, progress=progress
        )
        m["majority_baseline"] = float((gold == self.majority).mean())
        m["majority_class"] = self.labels[self.majority]
        shares = backend.np.bincount(gold, minlength=len(self.labels)) / max(len(gold), 1)
        m["largest_class"] = float(shares.max())
        m["largest_class_name"] = self.labels[int(shares.argmax())]
        m["per_class_recall"] = {
            lab: float((pred[gold == i] == i).mean()) if (gold == i).any() else None
            for i, lab in enumerate(self.labels)
        }
        return (m, pred, gold) if predictions else m

    def test(self, model, max_tokens: int, examples: int, seed: int, progress=None, world=None):
        """Test accuracy; the first ``examples`` verses with their predicted genre."""
        m, pred, _ = self.evaluate(model, "test", max_tokens, predictions=True, progress=progress)
        texts = self.texts["test"][:examples]
        return m, [(text, lab, self.labels[int(p)]) for (lab, text), p in zip(texts, pred)]

    def format_example(self, example) -> str:
        text, lab, out = example
        verdict = "ok" if out == lab else f"WRONG, want {lab}"
        short = text if len(text) <= 60 else text[:57] + "..."
        return f"  {short!r} -> {out} {verdict}"

    def meta(self) -> dict:
        return {**super().meta(), "labels": self.labels}


__all__ = ["ClassifySettings", "ClassifyTask"]
