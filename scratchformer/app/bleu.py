"""Corpus BLEU and chrF by sacreBLEU (``pip install -e '.[bleu]'``), with its signature.

    s = corpus_scores(hypotheses, references)       # detokenized strings, one per sentence
    s["bleu"], s["chrf"], s["bleu_signature"]       # 23.4, 48.1, "nrefs:1|case:mixed|..."

Scores are sacreBLEU's defaults (BLEU: 13a tokenization, exp smoothing, mixed case;
chrF: n=6, beta=2), on detokenized text, so they compare with published numbers. The
signature says exactly what was computed; report it with every score.
"""

from __future__ import annotations

from scratchformer.engine.errors import ScratchformerError


class ScoringError(ScratchformerError):
    """sacreBLEU is missing, or hypotheses and references do not pair up."""


def _sacrebleu():
    try:
        import sacrebleu  # noqa: PLC0415  (optional: the bleu extra)
    except ImportError:
        raise ScoringError(
            "scoring needs sacreBLEU: pip install -e '.[bleu]' (or pip install 'sacrebleu>=2')"
        ) from None
    return sacrebleu


def check_installed() -> None:
    """ScoringError (one line: how to install it) when sacreBLEU is missing."""
    _sacrebleu()


def corpus_scores(hypotheses: list[str], references: list[str]) -> dict:
    """BLEU and chrF of ``hypotheses`` against one reference each, with signatures."""
    sb = _sacrebleu()
    if len(hypotheses) != len(references):
        raise ScoringError(
            f"{len(hypotheses)} hypotheses for {len(references)} references: they must pair up"
        )
    if not references:
        raise ScoringError("nothing to score: no sentences")
    bleu_metric, chrf_metric = sb.metrics.BLEU(), sb.metrics.CHRF()
    bleu = bleu_metric.corpus_score(hypotheses, [references])
    chrf = chrf_metric.corpus_score(hypotheses, [references])
    return {
        "bleu": float(bleu.score),
        "chrf": float(chrf.score),
        "bleu_detail": str(bleu),
        "bleu_signature": str(bleu_metric.get_signature()),
        "chrf_signature": str(chrf_metric.get_signature()),
        "n_sentences": len(references),
    }


__all__ = ["ScoringError", "check_installed", "corpus_scores"]
