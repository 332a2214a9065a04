"""The Table 3 report: one Markdown table and one plot from the rows ``run.py train``
left in runs/t3-*/, each row tested against the baseline with sacreBLEU's paired
bootstrap (1,000 resamples of the test verses, sacreBLEU's fixed seed 12345)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from scratchformer.app.data.bible_pairs import read_pairs

RESAMPLES = 1000


def report(rows, baseline: str, runs: Path, plot: Path, data_dir: Path) -> None:
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    done = [r for r in rows if (runs / r[0] / "table3.json").is_file()]
    if not any(r[0] == baseline for r in done):
        raise SystemExit(f"no baseline yet: train it first ({runs / baseline})")
    # the baseline first (the paired tests' reference), then its second seed, then A to E
    done.sort(key=lambda r: (r[0] != baseline, r[1] != "base", r[1]))
    results = {r[0]: json.loads((runs / r[0] / "table3.json").read_text()) for r in done}
    refs = [tgt for _, tgt in read_pairs(data_dir / "test.tsv")]
    systems = []
    for name, *_ in done:
        hyps = (runs / name / "test.hyp").read_text(encoding="utf-8").split("\n")[: len(refs)]
        systems.append((name, hyps))
    metrics = {"BLEU": BLEU(), "chrF": CHRF()}
    test = PairedTest(systems, metrics, [refs], test_type="bs", n_samples=RESAMPLES)
    _, scores = test()
    table = []
    for i, (name, label, change, seed, _) in enumerate(done):
        res, bleu, chrf = results[name], scores["BLEU"][i], scores["chrF2"][i]
        table.append(
            {
                "run": name,
                "row": label,
                "change": change,
                "seed": seed,
                "params": _parameters(runs / f"{name}.log"),
                "dev_ppl": res["dev"]["ppl"],
                "bleu": bleu.score,
                "bleu_ci": bleu.ci,
                "bleu_p": bleu.p_value,
                "chrf": chrf.score,
                "chrf_p": chrf.p_value,
                "train_min": res["train_s"] / 60,
                "decode_s": res["decode_s"],
            }
        )
    print(markdown(table))
    (runs / "table3.json").write_text(json.dumps(table, indent=1))
    draw(table, plot)
    print(f"\nplot: {plot}; numbers: {runs / 'table3.json'}")


def _parameters(log: Path) -> int:
    m = re.search(r"model: \w+, ([\d,]+) parameters", log.read_text())
    return int(m.group(1).replace(",", "")) if m else 0


def markdown(table) -> str:
    base = table[0]
    head = (
        "| row | change from the baseline | seed | parameters | dev ppl | test BLEU (95% CI) "
        "| vs baseline | p | chrF | training | decoding |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    for t in table:
        delta = "" if t is base else f"{t['bleu'] - base['bleu']:+.2f}"
        p = "" if t["bleu_p"] is None else f"{t['bleu_p']:.3f}"
        lines.append(
            f"| {t['row']} | {t['change']} | {t['seed']} | {t['params'] / 1e6:.2f} M "
            f"| {t['dev_ppl']:.2f} | {t['bleu']:.2f} (± {t['bleu_ci']:.2f}) | {delta} | {p} "
            f"| {t['chrf']:.2f} | {t['train_min']:.1f} min | {t['decode_s']:.0f} s |"
        )
    return "\n".join(lines)


def draw(table, path: Path) -> None:
    """Test BLEU with its bootstrap 95% interval, and dev perplexity, per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{t['row']}: {t['change']}" for t in table]
    y = range(len(table))[::-1]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 0.45 * len(table) + 1.5), sharey=True)
    colors = ["black" if t is table[0] else "tab:blue" for t in table]
    for t, yy, c in zip(table, y, colors):
        a.errorbar(t["bleu"], yy, xerr=t["bleu_ci"], fmt="none", ecolor=c, capsize=3)
    a.scatter([t["bleu"] for t in table], y, c=colors, zorder=3)
    a.axvline(table[0]["bleu"], color="grey", lw=0.8, ls="--")
    a.set_yticks(list(y), labels)
    a.set_xlabel("test BLEU (greedy), bootstrap 95% interval")
    b.scatter([t["dev_ppl"] for t in table], y, c=colors, zorder=3)
    b.axvline(table[0]["dev_ppl"], color="grey", lw=0.8, ls="--")
    b.set_xlabel("dev perplexity (per BPE token)")
    fig.suptitle(f"Table 3 in the small: Bible es->en, d_model 256, 3+3 layers, {_steps()} steps")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _steps() -> int:
    from run import STEPS

    return STEPS
