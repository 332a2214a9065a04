"""Beam search with the GNMT length penalty, batched over sentences and beams, over a
key/value cache.

The algorithm (tensor2tensor's, with fairseq's rule for when <eos> ends a hypothesis),
for every sentence at once, with K = beam_size:

    live      K hypotheses per sentence: tokens so far and log P; at the start one
              live <bos> hypothesis and K - 1 dead ones (log P = -inf), so the first
              step does not fill the beam with K copies of the same hypothesis
    finished  up to K hypotheses that emitted <eos>, with score = log P / lp(|Y|)

    step t (t tokens produced so far):
      1. log p(y | prefix) for every live row: one ``decode_step`` (R = B*K rows, one new
         position each), normalized in float64 over the whole vocabulary, with the
         token rules (no <pad>/<bos>, no <eos> before min_len, <eos> forced at the
         maximum length, optional n-gram blocking); each row's best 2K tokens
      2. candidates: log P(prefix) + log p(y) of those, (B, K*2K); keep the top 2K per
         sentence (fewer when K*V < 2K: a beam >= V is fine), best first: the same as
         the top 2K of all K*V, log P(prefix) being one number per row
      3. an <eos> candidate ranked within the top K finishes: it enters ``finished``
         with score logP / lp(t + 1) (|Y| counts <eos>); ``finished`` keeps its best K
      4. the best K non-<eos> candidates become the live hypotheses (at most one <eos>
         per live row, so 2K candidates always leave K); missing ones stay dead (-inf)
      5. the kv is reordered: new row k of a sentence continues the row of its parent
         (``kv.reorder``), and sentences that are done are dropped from the batch
    a sentence is done when
      - it reached its maximum length L (every live hypothesis got a forced <eos>), or
      - no live hypothesis is left, or
      - it has K finished and no live one can beat the worst of them: log P only falls
        as a hypothesis grows and lp only rises up to lp(L + 1), so
        best live log P / lp(L + 1) is an upper bound on any score still to come
        (t2t's bound; alpha >= 0 is required for it, and enforced).

Why <eos> must rank within the top K (fairseq) rather than anywhere in the top 2K
(tensor2tensor): an <eos> below rank K would not have fitted in a beam of K. With it,
beam 1 is exactly greedy when alpha = 0: greedy's <eos> is the top candidate, it
finishes, and the bound (the runner-up's log P) cannot beat it. With alpha > 0 the
bound may let beam 1 continue past greedy's <eos> (a longer hypothesis can score
higher after the penalty), so beam 1 then returns greedy's hypothesis or one with a
strictly better score.

Cross-attention keys/values are computed once per sentence (``model.init_kv``) and
shared by its K beams (see ``LayerKV``): never per beam, never per step.

Results do not depend on the other sentences in the batch: every row is computed on
its own, padding keys get exactly zero attention, and finished sentences leave.

Dimension key: ``B`` sentences (still searching), ``S`` source length, ``V``
vocabulary, ``K`` beam size, ``R = B * K`` decoding rows.
"""

from __future__ import annotations

from scratchformer.engine import backend
from scratchformer.engine.backend import xp
from scratchformer.engine.decode.common import (
    DecodeError,
    Hypothesis,
    check_decode_memory,
    check_vocabulary,
    constrain,
    length_penalty,
    log_normalizer,
    max_output_lengths,
    nan_scores,
    next_scores,
    silent_rows,
    source_lengths,
    start_column,
)
from scratchformer.engine.decode.options import BEAM, DecodeOptions, options_of


def _rows_pick(a, cols):
    """``a[i, cols[i, j]]`` for every row i: (R, n) from (R, V) and (R, n) indices (NumPy's
    ``take_along_axis`` without its checks, a few microseconds a call at every step)."""
    rows = (backend.np if isinstance(a, backend.np.ndarray) else xp).arange(a.shape[0])
    return a[rows[:, None], cols]


def _row_candidates(scores, lse, k: int):
    """Each row's ``k`` best tokens by score and their log-probabilities: host arrays
    ``tok`` (R, k) int and ``lp`` (R, k) float64, ``lp = scores[tok] - lse`` (unordered).

    Within a row log P(prefix) is the same for every token, so the sentence's best 2K
    continuations of its K rows are among the rows' best 2K each: the selection runs on
    the (R, V) scores in their own dtype and only 2K entries per row become float64 and
    cross to the host."""
    V = scores.shape[1]
    if k < V:
        tok = xp.argpartition(-scores, k - 1, axis=1)[:, :k]
    else:
        tok = xp.broadcast_to(xp.arange(V), scores.shape)
    lp = _rows_pick(scores, tok).astype(xp.float64) - lse[:, None]
    both = backend.asnumpy(xp.stack([lp, tok.astype(xp.float64)]))  # one transfer
    return both[1].astype(backend.np.int64), both[0]


def _best_of_sentence(cum, tok, lp, V: int, k: int):
    """Step 2: the ``k`` best continuations of each sentence, best first.

    cum (B, K) log P of the live rows; tok, lp (B*K, k2) each row's candidates (host).
    Returns host ``idx`` (B, k) = beam * V + token and ``val`` (B, k) float64 log P; ties
    broken by the lower index (lower beam, then lower token id)."""
    np = backend.np
    B, K = cum.shape
    val = (cum[:, :, None] + lp.reshape(B, K, -1)).reshape(B, -1)  # (B, K*k2)
    idx = (np.arange(K)[None, :, None] * V + tok.reshape(B, K, -1)).reshape(B, -1)
    val = np.where(np.isnan(val).any(axis=1, keepdims=True), np.nan, val)  # NaN throughout
    order = np.lexsort((idx, -val), axis=-1)[:, :k]  # by value desc, then index asc
    return _rows_pick(idx, order), _rows_pick(val, order)


def _ngram_bans(history, n: int):
    """Tokens that would repeat an n-gram of the row's own output.

    history (R, t) host int: tokens produced so far (no <bos>). For each row, every
    earlier occurrence of its last n-1 tokens bans the token that followed it
    (n = 1 bans every token already produced). Returns (rows, tokens) host int arrays.
    """
    np = backend.np
    R, t = history.shape
    rows, toks = [], []
    if t < n - 1 or t == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    for r in range(R):
        h = history[r].tolist()
        tail = h[t - (n - 1) :] if n > 1 else []
        for j in range(t - n + 1):
            if h[j : j + n - 1] == tail:
                rows.append(r)
                toks.append(h[j + n - 1])
    return np.asarray(rows, np.int64), np.asarray(toks, np.int64)


def _start(B: int, K: int, cfg, options):
    """The search state before step 0: ``finished`` (per sentence, at most K
    ``Hypothesis``, best first), ``active`` (B,) the original index of each sentence
    still searching, ``history`` (R, 0) the tokens of each live row, ``cum`` (B, K) log P
    of each live hypothesis (one live per sentence, K - 1 dead ones at -inf) and
    ``tokens`` (R, 1) the next decoder input of every row (the start); R = B * K."""
    np = backend.np
    cum = np.full((B, K), -np.inf)
    cum[:, 0] = 0.0
    history = np.zeros((B * K, 0), dtype=np.int64)
    return [[] for _ in range(B)], np.arange(B), history, cum, start_column(B * K, cfg, options)


def _next_candidates(model, tokens, kv, step, max_lens, min_len, history, ngram, k, writes=None):
    """Step 1: one ``decode_step`` of every live row, the token rules of ``constrain``
    (``max_lens`` (R,) host: each row's L) and, for ``ngram`` > 0, -inf on every token
    that would repeat an n-gram of the row; then each row's ``k`` best tokens and their
    log p(y | prefix) (``_row_candidates``; normalized over the whole vocabulary, the
    rules applied after, as the softmax gives them)."""
    scores = next_scores(model, tokens, kv)  # (R, V) logits
    lse = log_normalizer(scores)  # (R,) float64, before the rules
    silent = silent_rows(history, writes)
    scores = constrain(scores, step, max_lens, min_len, model.config, silent, writes)
    if ngram:
        rows, toks = _ngram_bans(history, ngram)
        if rows.size:
            scores[backend.asarray(rows), backend.asarray(toks)] = -xp.inf
    return _row_candidates(scores, lse, k)


def _finish_eos(finished, active, history, candidates, K: int, eos: int, lp_now: float):
    """Step 3: every finite <eos> candidate within the top K ranks enters
    ``finished[active[i]]`` as ``Hypothesis(history of its parent row, log P / lp_now,
    log P)``.

    candidates: ``(parent, tok, val)``, each (Ba, 2K) host, best first; history (Ba*K, t)."""
    np = backend.np
    parent, tok, val = candidates
    top = np.isfinite(val[:, :K]) & (tok[:, :K] == eos)
    for i, j in zip(*np.nonzero(top)):
        row = i * K + parent[i, j]
        hyp = Hypothesis(history[row].tolist(), float(val[i, j] / lp_now), float(val[i, j]))
        finished[active[i]].append(hyp)


def _survivors(val, parent, tok, eos: int, K: int):
    """Step 4: the best K finite non-<eos> candidates of each sentence, rank order kept.

    val, parent, tok (Ba, 2K) host  ->  ``alive`` (Ba, K) bool and the new live
    hypotheses' ``cum`` log P (-inf where dead), ``parent`` beam (0 where dead) and
    ``tok`` (<eos> where dead), each (Ba, K)."""
    np = backend.np
    live = np.isfinite(val) & (tok != eos)  # (Ba, 2K)
    pick = np.argsort(~live, axis=1, kind="stable")[:, :K]  # ranks of the K chosen
    alive = _rows_pick(live, pick)  # (Ba, K)
    new_cum = np.where(alive, _rows_pick(val, pick), -np.inf)
    new_parent = np.where(alive, _rows_pick(parent, pick), 0)
    new_tok = np.where(alive, _rows_pick(tok, pick), eos)
    return alive, new_cum, new_parent, new_tok


def _reorder(kv, history, keep, new_parent, new_tok, Ba: int):
    """Step 5: new row k of kept sentence i continues old row ``i*K + new_parent[i, k]``,
    in the kv and in ``history``; sentences not in ``keep`` (sorted indices into the
    ``Ba`` active ones) leave the batch.

    Returns the new ``history`` (R', t + 1) and the next decoder input (R', 1), R' =
    len(keep) * K."""
    np = backend.np
    K = new_parent.shape[1]
    rows = (keep[:, None] * K + new_parent[keep]).reshape(-1)  # (R',)
    kv.reorder(rows, sentences=None if keep.size == Ba else keep)
    chosen = new_tok[keep].reshape(-1, 1)  # (R', 1)
    history = np.concatenate([history[rows], chosen], axis=1)
    return history, chosen.astype(np.int64)  # host: decode_step moves it


def _done_sentences(finished, active, max_lens, alive, new_cum, step: int, alpha):
    """Which of the ``Ba`` active sentences stop (the rules in the module docstring);
    trims each one's ``finished`` to its best K (stable: earlier, shorter, first on ties).

    Returns (Ba,) bool."""
    np = backend.np
    Ba, K = alive.shape
    done = np.zeros(Ba, dtype=bool)
    for i in range(Ba):
        fin = finished[active[i]]
        fin.sort(key=lambda h: -h.score)
        del fin[K:]
        L = max_lens[active[i]]
        if step >= L or not alive[i].any():
            done[i] = True
        elif len(fin) == K:
            best_possible = new_cum[i].max() / length_penalty(L + 1, alpha)
            done[i] = best_possible <= fin[-1].score
    return done


def _best_of_each(finished, nbest: int, min_len: int, ngram: int) -> list[list[Hypothesis]]:
    """The first ``nbest`` finished hypotheses of every sentence; DecodeError for a
    sentence whose hypotheses could never end."""
    for b, fin in enumerate(finished):
        if not fin:
            raise DecodeError(
                f"sentence {b}: no hypothesis could end (min_len={min_len} with "
                f"no_repeat_ngram_size={ngram} left no token to emit)"
            )
    return [fin[:nbest] for fin in finished]


def beam_search(
    model, src, options: DecodeOptions | None = None, writes=None, **settings
) -> list[list[Hypothesis]]:
    """Beam search for a batch of sentences (the algorithm is in the module docstring).

    model: a ``Transformer``; src (B, S) int ids, right-padded with pad_id (host or
    backend array). From ``options``: beam_size K >= 1 (any size, also >= V); alpha >= 0
    the GNMT length-penalty exponent; the lengths as in decode/common.py; nbest <= K
    hypotheses returned per sentence; no_repeat_ngram_size n > 0 forbids any n-gram of
    output tokens to occur twice in a hypothesis; the decoder's start (``settings``: these
    fields by name). ``writes`` (host bool (V,), the tokens that write text): with
    ``min_len`` >= 1, no hypothesis ends as blank text.

    Returns, per sentence, up to ``nbest`` ``Hypothesis(tokens, score, logprob)``, best
    score first (fewer only when fewer than nbest distinct outputs exist, e.g. a tiny
    vocabulary and a short maximum length).
    """
    options = options_of(options, BEAM, settings)
    cfg = model.config
    alpha, min_len, ngram = options.alpha, options.min_len, options.no_repeat_ngram_size
    check_vocabulary(cfg, min_len)
    np = backend.np
    K, V, eos = options.beam_size, cfg.vocab_size, cfg.eos_id
    src = src if backend.is_array(src) else np.asarray(src)  # host ids stay on the host
    lengths = source_lengths(model, src)  # (B,) host; max_lens: L_i
    max_lens = max_output_lengths(lengths, options.max_len_a, options.max_len_b, cfg.max_len)
    check_decode_memory(
        cfg,
        src.shape[0] * K,
        int(max_lens.max()) + 1,
        src.shape[1],
        f"a beam of {K} for {src.shape[0]} sentences",
        "lower the beam or the batch size",
    )
    memory, src_mask = model.encode_infer(src)  # (B, S, D), (B, 1, 1, S)
    padded = bool(lengths.min() < src.shape[1])  # the host lengths: no read
    kv = model.init_kv(memory, src_mask, K, int(max_lens.max()) + 1, padded)
    finished, active, history, cum, tokens = _start(src.shape[0], K, cfg, options)

    for step in range(int(max_lens.max()) + 1):
        # 1. each row's best 2K next tokens and their log-probabilities, the rules applied
        row_lens = np.repeat(max_lens[active], K)  # (R,) host
        tok_r, lp_r = _next_candidates(
            model, tokens, kv, step, row_lens, min_len, history, ngram, min(2 * K, V), writes
        )
        # 2. the best 2K continuations of each sentence's K live hypotheses
        idx, val = _best_of_sentence(cum, tok_r, lp_r, V, min(2 * K, K * V))  # (B, 2K) host
        if np.isnan(val).any():  # a row of NaN scores (log_normalizer)
            raise nan_scores(model)
        parent, tok = idx // V, idx % V  # beam within the sentence, token id
        # 3. <eos> within the top K ranks finishes a hypothesis (|Y| = step tokens + <eos>)
        lp_eos = length_penalty(step + 1, alpha)
        _finish_eos(finished, active, history, (parent, tok, val), K, eos, lp_eos)
        # 4. the best K non-<eos> candidates live on; then which sentences are done
        alive, new_cum, new_parent, new_tok = _survivors(val, parent, tok, eos, K)
        done = _done_sentences(finished, active, max_lens, alive, new_cum, step, alpha)
        if done.all():
            break
        # 5. reorder the rows for the sentences still searching
        keep = np.flatnonzero(~done)
        history, tokens = _reorder(kv, history, keep, new_parent, new_tok, done.size)
        cum, active = new_cum[keep], active[keep]

    return _best_of_each(finished, options.nbest, min_len, ngram)


__all__ = ["beam_search"]
