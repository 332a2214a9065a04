"""Our greedy and beam-4 outputs on a test set, saved, so that two trees can be compared:
token ids (greedy must be identical) and each beam hypothesis's score.

    python same_outputs.py CKPT TEST.tsv OUT.json                      # this tree
    PYTHONPATH=/path/to/old python same_outputs.py CKPT TEST.tsv OLD.json
    python same_outputs.py --compare OLD.json NEW.json

Batches of 32 sentences in file order (right-padded), our token rules (min_len 1), beam
search with alpha 0 as in benchmarks/hf_decode_speed.py. The comparison counts identical
outputs; for a beam output that differs it prints the two scores of the first hypothesis
and says whether they are within 1e-6 (a near-tie, which float rounding may order either
way).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/
import layout  # noqa: E402  (the package as it is, or a tree of before: PYTHONPATH)
from hf_decode_speed import padded, read_sources  # noqa: E402


def decode(ckpt: str, tsv: str, out: str) -> None:
    ck, tok = layout.app("checkpoint").load_with_tokenizer(ckpt)
    model = ck.model
    dec = layout.engine("decode")
    writes = layout.engine("decode.common").writing_tokens(tok, model.config.vocab_size)
    ids = [tok.encode(s) for s in read_sources(Path(tsv), None)]
    greedy, beam = [], []
    for lo in range(0, len(ids), 32):
        src = padded(ids[lo : lo + 32], model.config.pad_id)
        greedy += [list(map(int, g)) for g in dec.greedy_decode(model, src, writes=writes,
                                                                 min_len=1)]
        found = dec.beam_search(model, src, writes=writes, beam_size=4, alpha=0.0, min_len=1)
        beam += [{"tokens": list(map(int, h[0].tokens)), "score": float(h[0].score)}
                 for h in found]
    package = str(Path(sys.modules["scratchformer"].__file__).parent)
    Path(out).write_text(json.dumps({"package": package, "greedy": greedy, "beam": beam})
                         + "\n", encoding="utf-8")
    print(f"{len(ids)} sentences decoded by {package}")


def compare(old: str, new: str) -> None:
    a = json.loads(Path(old).read_text(encoding="utf-8"))
    b = json.loads(Path(new).read_text(encoding="utf-8"))
    n = len(a["greedy"])
    same_g = sum(x == y for x, y in zip(a["greedy"], b["greedy"]))
    print(f"greedy: {same_g}/{n} identical")
    same_b, ties, other, worst = 0, 0, 0, 0.0
    for i, (x, y) in enumerate(zip(a["beam"], b["beam"])):
        worst = max(worst, abs(x["score"] - y["score"]) / max(abs(x["score"]), 1e-30))
        if x["tokens"] == y["tokens"]:
            same_b += 1
            continue
        close = abs(x["score"] - y["score"]) <= 1e-6 * max(1.0, abs(x["score"]))
        ties += close
        other += not close
        print(f"  beam sentence {i}: scores {x['score']:.9f} (old) {y['score']:.9f} (new)"
              f"{' near-tie' if close else ''}")
    print(f"beam 4: {same_b}/{n} identical, {ties} differ within 1e-6 of score, {other} other;"
          f" largest relative score difference {worst:.2e}")


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        compare(sys.argv[2], sys.argv[3])
    else:
        decode(*sys.argv[1:4])
