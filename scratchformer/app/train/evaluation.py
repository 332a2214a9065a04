"""Evaluation of a model on a task's examples: teacher-forced metrics, and decoding.

Teacher-forced metrics of any of the models (encoder-decoder, language model, classifier)
over batches of ``(inputs, targets)``, dropout off:

    loss       the training objective (label-smoothed cross-entropy) per target
    nll, ppl   plain cross-entropy per target and exp of it (perplexity)
    token_acc  share of the targets (pad excluded) whose argmax is right
    seq_acc    share of the rows whose targets are all right (targets of shape (B, T));
               for an encoder-decoder this equals the exact-match accuracy of greedy
               decoding: if every argmax is right given the true prefix, greedy decoding
               follows the true prefix, and conversely
    accuracy   for targets of shape (B,) (one label per row) in place of the two above

``decode_outputs`` decodes the sources of an encoder-decoder for real (beam search or
greedy), which is what the test set is judged by at the end of a run.
"""

from __future__ import annotations

import math

from scratchformer.app import distributed
from scratchformer.app.data.batching import collate
from scratchformer.engine import backend
from scratchformer.engine.decode import DecodeOptions, beam_search, greedy_decode, sample_decode
from scratchformer.engine.ops.loss import cross_entropy


def teacher_forced(model, batches, eps_ls: float, pad_id: int | None, predictions=False):
    """Metrics of ``model`` over ``batches`` (each with ``inputs``, a tuple of host arrays
    the model's ``forward`` takes, and ``targets``: (B, T) next tokens padded with
    ``pad_id``, or (B,) labels with ``pad_id`` None); see the module doc.

    With ``predictions`` also returns ``(argmax ids, targets)`` as host arrays
    concatenated over the batches (for per-class figures). Loss and NLL are summed in
    float64 over the batches, so batch sizes do not change them.
    """
    np = backend.np
    loss_sum = nll_sum = 0.0
    n_tok = n_right = n_rows = n_rows_right = 0
    preds, golds = [], []
    per_row = None
    for b in batches:
        logits, _ = model.forward(*(backend.asarray(a) for a in b.inputs))
        targets = backend.asarray(b.targets)
        loss, lc = cross_entropy.forward(logits, targets, eps_ls, pad_id)
        n = int(cross_entropy.read(lc, "n_tokens"))
        loss_sum += float(loss) * n
        nll_sum += float(cross_entropy.read(lc, "nll_sum"))
        n_tok += n
        pred = backend.asnumpy(logits.argmax(axis=-1))
        gold = np.asarray(b.targets)
        keep = np.ones(gold.shape, dtype=bool) if pad_id is None else gold != pad_id
        right = (pred == gold) & keep
        n_right += int(right.sum())
        per_row = gold.ndim == 2
        if per_row:
            n_rows += gold.shape[0]
            n_rows_right += int((right == keep).all(axis=1).sum())
        if predictions:
            preds.append(pred)
            golds.append(gold)
    nll = nll_sum / max(n_tok, 1)
    m = {
        "loss": loss_sum / max(n_tok, 1),
        "nll": nll,
        "ppl": math.exp(nll) if nll <= 709.0 else None,  # beyond a float: none written
    }
    if per_row:
        m.update(token_acc=n_right / max(n_tok, 1), seq_acc=n_rows_right / max(n_rows, 1))
    else:
        m["accuracy"] = n_right / max(n_tok, 1)
    m["n_tokens"] = n_tok
    if predictions:
        both = (np.concatenate(preds), np.concatenate(golds)) if preds else (None, None)
        return m, both
    return m


def decode_outputs(
    model, sources, options: DecodeOptions, batch_size: int = 64, progress=None, world=None
) -> list[list[int]]:
    """Decode ``sources`` (lists of ids) as ``options`` say: beam search (its best
    hypothesis), greedy, or a sample (the first, seeded by the source's index); returns
    the output ids of each, in order. ``progress``: called with the number of sources
    decoded as batches finish.
    Sources are batched by length (the searches do not depend on the batch).

    ``world``: the ranks that decode together (``distributed.World``; one process when
    None). Each rank decodes every ``size``-th source of the length order, so the shares
    cost about the same, and every rank returns all the outputs, the same as one process
    would. Rank 0's progress stands for all: its count times ``size``.
    """
    w = world or distributed.World()
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))  # less padding
    mine = distributed.share(order, w)
    found: dict = {}
    shown = 0
    for start in range(0, len(mine), batch_size):
        idx = mine[start : start + batch_size]
        src = backend.asarray(collate([(sources[i], []) for i in idx]).src)
        if options.search == "beam":
            outs = [list(h[0].tokens) for h in beam_search(model, src, options)]
        elif options.search == "sample":  # each source's first sample, seeded by its index
            found_n = sample_decode(model, src, options.replace(samples=1), positions=idx)
            outs = [list(h[0].tokens) for h in found_n]
        else:
            outs = [list(y) for y in greedy_decode(model, src, options)]
        found.update(zip(idx, outs))
        if progress is not None:
            step = min(len(idx) * w.size, len(sources) - shown)
            shown += step
            progress(step)
    outputs: list = [None] * len(sources)
    for share in w.allgather(found):  # {index: output} of each rank
        for i, out in share.items():
            outputs[i] = out
    return outputs


__all__ = ["decode_outputs", "teacher_forced"]
