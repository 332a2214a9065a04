"""GPT-2 124M's shape (random weights at its real size, built here): one training step and
greedy generation, scratchformer against PyTorch eager on the same model and threads.

    python benchmarks/gpt2_vs_torch.py --batch 4 --length 64 --new 32 --threads 1

The parent builds a random GPT-2 124M with transformers (GPT2Config(): 12 layers, d_model
768, 12 heads, vocabulary 50,257, 1,024 positions), saves it, and imports it with
``scratchformer import`` (the same weights). Each side then runs in a process of its own,
on the same number of threads, so that its peak memory is its own:

    step       forward, backward and one Adam step on a batch of ``--batch`` x ``--length``
               random token ids, dropout on (GPT-2's 0.1), float32; the best of
               ``--repeats`` after one warm-up step. scratchformer: the engine's Stepper
               (flat buffers, Adam); PyTorch: GPT2LMHeadModel in train mode, its loss,
               torch.optim.Adam.
    generate   ``--new`` tokens greedy from a ``--prompt``-token prompt, one sequence,
               with the key/value cache (ours: decode/sample.generate at temperature 0;
               PyTorch: model.generate(do_sample=False)).
    memory     the process's peak resident memory (Linux's VmHWM) after the model is
               loaded, and after the steps and the generation (each with its libraries:
               torch's alone is a few hundred MiB).

``--small`` builds a GPT-2 of 2 layers, d_model 64 and 2 heads instead (the same
vocabulary): a quick check that the script runs, no figure to report.

Run by hand, not in CI (it needs torch and transformers: the hf and gpt2 extras); it
writes the model to a temporary folder (about 1 GB) and removes it. Ratios are within one
run; a machine shared with other work stretches both sides, not always alike: say so with
the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace


def _rss_mib() -> float:
    """This process's peak resident memory in MiB: Linux's VmHWM, the high-water mark of
    its own address space. Not getrusage's ru_maxrss: Linux carries that across exec, so
    a side would report at least the parent's peak (the parent builds the model in torch)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    import resource  # noqa: PLC0415

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _batch(args, V: int):
    import numpy as np  # noqa: PLC0415

    r = np.random.default_rng(0)
    ids = r.integers(0, V - 1, (args.batch, args.length + 1))
    prompt = [int(i) for i in r.integers(0, V - 1, args.prompt)]
    return ids[:, :-1], ids[:, 1:], prompt


def run_ours(args) -> dict:
    """scratchformer's side: load the imported checkpoint, time the steps and generation."""
    sys.path.insert(0, os.getcwd())
    from scratchformer.app.checkpoint import load_checkpoint  # noqa: PLC0415
    from scratchformer.app.train.config import TrainConfig  # noqa: PLC0415
    from scratchformer.engine import backend, device  # noqa: PLC0415
    from scratchformer.engine.decode.sample import generate  # noqa: PLC0415
    from scratchformer.engine.step import Stepper  # noqa: PLC0415

    with backend.blas_threads(args.threads):
        model = load_checkpoint(args.checkpoint).model
        loaded = _rss_mib()
        cfg = TrainConfig.default()
        stepper = Stepper(model, cfg.optim, cfg.train, model.config.d_model)
        ids, targets, prompt = _batch(args, model.config.vocab_size)
        batch = SimpleNamespace(inputs=(ids,), targets=targets, n_targets=ids.size,
                                n_tokens=ids.size)  # what a task's TaskBatch holds
        times = []
        for s in range(args.repeats + 1):
            t0 = time.perf_counter()
            out = stepper.step(s + 1, [batch], [device.generator(s)])
            loss = float(out["loss"])  # read back: the step is done
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        new = generate(model, prompt, max_new_tokens=args.new, temperature=0)[0]
        gen = time.perf_counter() - t0
    return {"step": min(times[1:]), "generate": gen, "new": len(new), "loaded_mib": loaded,
            "peak_mib": _rss_mib(), "loss": loss, "parameters": model.num_parameters(),
            "dtype": str(next(iter(model.parameters().values())).dtype)}


def run_torch(args) -> dict:
    """PyTorch eager's side: the saved GPT-2, train mode, Adam; generate with its cache."""
    import torch  # noqa: PLC0415
    from transformers import GPT2LMHeadModel  # noqa: PLC0415

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT2LMHeadModel.from_pretrained(args.folder).float()
    loaded = _rss_mib()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    ids, targets, prompt = _batch(args, model.config.vocab_size)
    x, y = torch.tensor(ids), torch.tensor(targets)
    model.train()
    times = []
    for _ in range(args.repeats + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        logits = model(x).logits
        V = logits.shape[-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    model.eval()
    t0 = time.perf_counter()
    with torch.no_grad():
        mask = torch.ones(1, len(prompt), dtype=torch.long)
        out = model.generate(torch.tensor([prompt]), attention_mask=mask, max_new_tokens=args.new,
                             do_sample=False, eos_token_id=None, pad_token_id=0)
    gen = time.perf_counter() - t0
    return {"step": min(times[1:]), "generate": gen, "new": out.shape[1] - len(prompt),
            "loaded_mib": loaded, "peak_mib": _rss_mib(), "loss": float(loss),
            "parameters": sum(p.numel() for p in model.parameters())}


def build(folder: Path, small: bool = False) -> None:
    """A random GPT-2 124M (transformers' GPT2Config defaults; ``small``: 2 layers,
    d_model 64, 2 heads) and GPT-2's tokenizer files' stand-in: a byte-level BPE trained
    on a little text, padded to 50,257 ids."""
    import torch  # noqa: PLC0415
    from tokenizers import ByteLevelBPETokenizer  # noqa: PLC0415
    from transformers import GPT2Config, GPT2LMHeadModel  # noqa: PLC0415

    torch.manual_seed(0)
    sizes = {"n_layer": 2, "n_embd": 64, "n_head": 2} if small else {}
    GPT2LMHeadModel(GPT2Config(**sizes)).save_pretrained(str(folder))
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["a small text to train a tokenizer"] * 10, vocab_size=300,
                            special_tokens=["<|endoftext|>"], show_progress=False)
    vocab = json.loads(bpe.to_str())["model"]["vocab"]
    merges = json.loads(bpe.to_str())["model"]["merges"]
    # real GPT-2 ids: 50,257, <|endoftext|> the last; filler tokens that no merge makes
    vocab = {t: i for i, t in enumerate(t for t in vocab if t != "<|endoftext|>")}
    for i in range(len(vocab), 50256):
        vocab[f"<filler{i}>"] = i
    vocab["<|endoftext|>"] = 50256
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    lines = [m if isinstance(m, str) else " ".join(m) for m in merges]
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(lines) + "\n")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["bos_token_id"] = cfg["eos_token_id"] = 50256
    (folder / "config.json").write_text(json.dumps(cfg))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--length", type=int, default=64)
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens of the generation")
    p.add_argument("--new", type=int, default=32, help="tokens generated")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--small", action="store_true",
                   help="2 layers, d_model 64: check that the script runs (no figure)")
    p.add_argument("--side", choices=["ours", "torch"], help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.side:
        print(json.dumps(run_ours(args) if args.side == "ours" else run_torch(args)))
        return 0
    env = {**os.environ, **{k: str(args.threads) for k in
                            ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}
    with tempfile.TemporaryDirectory() as tmp:
        folder, ckpt = Path(tmp) / "gpt2-124m", Path(tmp) / "gpt2-124m.npz"
        t0 = time.perf_counter()
        build(folder, args.small)
        built = time.perf_counter() - t0
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "scratchformer", "import", str(folder), "-o",
                        str(ckpt)], check=True, env=env, stdout=subprocess.DEVNULL)
        imported = time.perf_counter() - t0
        rows = {}
        for side in ("ours", "torch"):
            cmd = [sys.executable, __file__, "--side", side, "--checkpoint", str(ckpt),
                   "--folder", str(folder)] + [a for a in (argv or sys.argv[1:])]
            out = subprocess.run(cmd, check=True, env=env, capture_output=True, text=True)
            rows[side] = json.loads(out.stdout.strip().splitlines()[-1])
    o, t = rows["ours"], rows["torch"]
    shape = "a small GPT-2 (2 layers, d_model 64)" if args.small else "GPT-2 124M's shape"
    print(f"{shape}, random weights ({o['parameters']:,} parameters; torch counts "
          f"{t['parameters']:,}, its lm_head tied), float32, {args.threads} thread(s)")
    print(f"built in {built:.0f} s, imported by scratchformer import in {imported:.0f} s")
    print(f"training step: batch {args.batch} x length {args.length}, dropout 0.1, Adam "
          f"(best of {args.repeats} after a warm-up)")
    print(f"{'':22}{'scratchformer':>15}{'PyTorch eager':>15}{'ratio':>8}")
    for key, what, unit in (("step", "step time", "s"), ("generate", f"greedy {args.new} "
                            f"tokens", "s"), ("loaded_mib", "RSS after load", "MiB"),
                            ("peak_mib", "peak RSS", "MiB")):
        print(f"{what:<22}{o[key]:>13.2f} {unit:<1}{t[key]:>13.2f} {unit:<1}"
              f"{o[key] / t[key]:>8.2f}")
    print(f"generated {o['new']} and {t['new']} tokens; prompt {args.prompt} tokens; "
          f"scratchformer's parameters in {o['dtype']}; the last step's loss {o['loss']:.3f} "
          f"and {t['loss']:.3f} (the same work, not the same numbers: our default schedule "
          f"and label smoothing, torch's plain cross-entropy at lr 1e-4)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
