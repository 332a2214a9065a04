"""The scale-out rows of ``train_speed.py``: N ranks x 1 BLAS thread, ours over MPI and
PyTorch DDP over gloo, timed in the same processes, steps interleaved.

Launched by ``train_speed.py`` (not meant to be run by hand):

    mpiexec -n N python benchmarks/train_speed.py --child --scale-out-child --threads 1 ...

Every rank builds the whole model and the whole batch (the same seeds as the
single-process rows), keeps the sentences ``rank, rank + N, ...`` of it
(``scratchformer.app.distributed.share``) and times, alternately:

    ours   what the trainer's step does (``train/loop.py``): a dropout generator from
           ``dropout_seed``, ``accumulate_gradients(model, [share], rngs, world)`` (zero
           the flat gradient, forward, backward of the summed loss, one Allreduce of
           ``flat.grads`` and one of the 4 counts, divide by the global target count),
           then Adam on the flat buffers. No clipping, as the single-process rows.
    ddp    ``torch_reference``'s model in ``DistributedDataParallel`` over gloo (each rank
           its share, DDP averages the gradients during backward), then ``torch.optim.Adam``.

Before each timed step the ranks meet at a barrier; a step's time is the slowest rank's,
its CPU time the sum over the ranks. Throughput counts the whole batch's target tokens.
Under mpiexec the torch process group is set up over tcp://127.0.0.1:<port> with the
MPI ranks; without MPI the harness starts N plain processes and only ``ddp`` runs.
"""

from __future__ import annotations

import hashlib
import json
import socket
import statistics
import subprocess
import sys
import time
import types
from datetime import timedelta

# -- parent side ----------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port nobody listens on now (for the gloo rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mpi_missing() -> str | None:
    """Why ours cannot run as several processes here, or None."""
    from scratchformer.app import distributed

    if distributed.find_mpiexec() is None:
        return "mpiexec not found (pip install 'scratchformer[mpi]')"
    if distributed.missing_mpi4py():
        return "mpi4py not installed (pip install 'scratchformer[mpi]')"
    return None


def launch(child_cmd: list[str], env: dict, ranks: int, use_mpi: bool):
    """Run the child as ``ranks`` processes: under mpiexec, or (no MPI: torch alone) as
    plain processes told their rank. Returns (rank 0's JSON lines, error text or None)."""
    from scratchformer.app import distributed

    if use_mpi:
        cmd = [distributed.find_mpiexec(), "-n", str(ranks), *child_cmd]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        out, err, rc = res.stdout, res.stderr, res.returncode
    else:
        procs = [
            subprocess.Popen(
                child_cmd + ["--rank", str(r), "--world-size", str(ranks)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for r in range(ranks)
        ]
        results = [p.communicate() for p in procs]
        out = results[0][0]
        err = "".join(e for _, e in results)
        rc = max(abs(p.returncode) for p in procs)
        cmd = child_cmd
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if rc:
        return rows, f"{' '.join(map(str, cmd))} exited with {rc}:\n{err[-3000:]}"
    return rows, None


def print_rows(rows: list[dict], speed: list[dict], ranks: int) -> None:
    """The (a)-(d) table of each config: tokens/s and the ratio of (a) to each other row
    (also left in the row, for the JSON: ``a_over = {"b": {"median", "best"}, ...}``)."""
    for r in rows:
        one = next((s for s in speed if s["config"] == r["config"] and s["threads"] == ranks), {})
        entries = [
            (
                "(a)",
                f"ours, mpiexec -n {ranks}, 1 thread/rank",
                r.get("ours"),
                r.get("ours_skipped"),
            ),
            ("(b)", f"ours, 1 process, {ranks} threads", one.get("ours"), None),
            ("(c)", f"torch eager, 1 process, {ranks} threads", one.get("torch"), None),
            (
                "(d)",
                f"torch DDP gloo, {ranks} ranks, 1 thread/rank",
                r.get("ddp"),
                r.get("ddp_skipped"),
            ),
        ]
        print(
            f"scale-out, {r['config']}, {ranks} cores: batch {r['batch']} split "
            f"{'+'.join(map(str, r['rows_per_rank']))} over {ranks} ranks"
        )
        print(
            f"  {'':<3} {'':<40} {'ms':>7} {'min':>7} {'max':>7} {'(cpu)':>7} {'tok/s':>7} "
            f"{'%ceil':>5} {'(a)/row':>7} {'best':>6}"
        )
        a = r.get("ours")
        for tag, what, t, skipped in entries:
            if t is None:
                why = skipped or f"not measured (add {ranks} to --threads)"
                if tag == "(c)" and one:
                    why = "not measured (--no-torch or torch not installed)"
                print(f"  {tag:<3} {what:<40} skipped: {why}")
                continue
            ratio = best = ""
            if a is not None and tag != "(a)":
                q = a["tokens_per_s"] / t["tokens_per_s"]
                q_best = a["best_tokens_per_s"] / t["best_tokens_per_s"]
                r.setdefault("a_over", {})[tag.strip("()")] = dict(median=q, best=q_best)
                ratio, best = f"{q:.2f}x", f"{q_best:.2f}x"
            print(
                f"  {tag:<3} {what:<40} {t['median_ms']:>7.0f} {t['best_ms']:>7.0f} "
                f"{t['max_ms']:>7.0f} {t['cpu_ms']:>7.0f} "
                f"{t['tokens_per_s']:>7.0f} {t['of_ceiling']:>5.0%} {ratio:>7} {best:>6}"
            )
    print(
        "  ms: median step; min, max: the fastest and slowest (of (a) and (d): the slowest\n"
        "  rank's time of each step); (cpu): median CPU time of a step, all threads of all\n"
        "  ranks (MPI polls while it waits); (a)/row: (a)'s tokens/s over the row's\n"
        "  (medians); best: the same from each side's fastest step; %ceil: the step's\n"
        "  matrix-product GFLOP/s over the GEMM ceiling at this many cores. (a) and (d) ran\n"
        "  interleaved in the same processes, (b) and (c) in one process; the launches\n"
        "  alternate round by round, so load on the machine falls on all four alike"
    )


# -- child side (every rank) ----------------------------------------------------------------


def _ddp_missing(want_torch: bool) -> str | None:
    if not want_torch:
        return "--no-torch (or torch not installed)"
    try:
        import torch.distributed as dist
    except ImportError as e:
        return f"torch.distributed cannot be imported ({e})"
    if not dist.is_available():
        return "this torch build has no torch.distributed"
    if not dist.is_gloo_available():
        return "this torch build has no gloo backend"
    return None


def stats(times, cpu, tokens):
    med = statistics.median(times)
    return dict(
        median_ms=med * 1e3,
        best_ms=min(times) * 1e3,
        max_ms=max(times) * 1e3,
        cpu_ms=statistics.median(cpu) * 1e3,
        tokens_per_s=tokens / med,
        best_tokens_per_s=tokens / min(times),
    )


def child(args, config, global_batch, build_ours, torch_module):
    """One rank of the scale-out run; rank 0 prints one JSON line per config.

    ``config(name, args)`` -> TransformerConfig; ``global_batch(args)`` -> the whole batch
    (src, tgt_in, tgt_out) as in the single-process rows; ``build_ours(cfg)`` -> (model,
    flat Adam); ``torch_module()`` -> the ``torch_reference`` module.
    """
    from scratchformer.app import distributed
    from scratchformer.app.train.records import dropout_seed
    from scratchformer.app.train.tasks.base import TaskBatch
    from scratchformer.engine import backend, device
    from scratchformer.engine.step import accumulate_gradients

    np = backend.np
    mpi = distributed.launched_size() > 1
    if mpi:
        w = distributed.world()
        rank, size = w.rank, w.size
    else:
        w = None
        rank, size = args.rank, args.world_size
    ddp_skipped = _ddp_missing(args.torch)
    dist = None
    if ddp_skipped is None:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{args.port}",
            rank=rank,
            world_size=size,
            timeout=timedelta(minutes=5),
        )
    if w is None and dist is None:
        raise SystemExit("scale-out child: neither MPI nor torch.distributed to run")

    def barrier():
        if w is not None:
            w.comm.Barrier()
        else:
            dist.barrier()

    def reduce_(a, op):  # in place over the ranks, op "max" or "sum"; a float64 array
        if w is not None:
            w.comm.Allreduce(w.MPI.IN_PLACE, a, op=w.MPI.MAX if op == "max" else w.MPI.SUM)
        else:
            t = torch.from_numpy(a)
            dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return a

    me = types.SimpleNamespace(rank=rank, size=size)  # what distributed.share reads
    for name in args.configs:
        cfg = config(name, args)
        src, tgt_in, tgt_out = global_batch(args)
        idx = distributed.share(np.arange(args.batch), me)
        share = (src[idx], tgt_in[idx], tgt_out[idx])
        counts = np.zeros(size)
        counts[rank] = len(idx)
        info = dict(
            config=name,
            ranks=size,
            threads_per_rank=1,
            batch=args.batch,
            rows_per_rank=[int(c) for c in reduce_(counts, "sum")],
        )
        steps = {}
        if w is not None:
            model, opt = build_ours(cfg)
            info["params"] = model.num_parameters()
            n = int(share[2].size)
            tb = TaskBatch(inputs=share[:2], targets=share[2], n_tokens=n, n_targets=n)
            counter = [0]

            def ours(model=model, opt=opt, tb=tb, counter=counter):
                counter[0] += 1
                rngs = [device.generator(dropout_seed(0, counter[0], 0, rank))]
                loss, _, n, _ = accumulate_gradients(model, [tb], rngs, w)
                opt.step(1e-4)
                return loss, n

            steps["ours"] = ours
        else:
            info["ours_skipped"] = args.ours_skipped or "no MPI"
        if dist is not None:
            import torch

            ref = torch_module()
            torch.manual_seed(0)
            tmodel, topt = ref.build(cfg)
            steps["ddp"] = ref.make_ddp_step(tmodel, topt, *share, cfg.eps_ls)
            info["torch_version"] = torch.__version__
        else:
            info["ddp_skipped"] = ddp_skipped
        for k, f in steps.items():  # warm-up: allocations, BLAS and gloo threads, DDP buckets
            for _ in range(2):
                res = f()
            if k == "ours" and res[1] != args.batch * args.length:  # every target once
                raise SystemExit(f"the ranks counted {res[1]} targets, not the whole batch")
        order = list(steps)
        times = {k: [] for k in steps}
        cpu = {k: [] for k in steps}
        for r in range(args.repeats):
            for k in order if r % 2 == 0 else order[::-1]:
                barrier()
                c0, t0 = time.process_time(), time.perf_counter()
                steps[k]()
                times[k].append(time.perf_counter() - t0)
                cpu[k].append(time.process_time() - c0)
        for k in steps:
            ts = reduce_(np.array(times[k], dtype=np.float64), "max")
            cs = reduce_(np.array(cpu[k], dtype=np.float64), "sum")
            info[k] = dict(times=list(ts), cpu=list(cs))  # raw: the parent pools the rounds
        # sanity, untimed: the ranks still hold one model (the gradients were summed)
        if w is not None:
            w.check_equal(model.flatten().params, "parameters")
        if dist is not None:
            digest = hashlib.sha256()
            for t in tmodel.parameters():
                digest.update(t.detach().numpy().tobytes())
            digests = [None] * size
            dist.all_gather_object(digests, digest.hexdigest())
            if len(set(digests)) != 1:
                raise SystemExit("DDP: the ranks' parameters differ (gradients not reduced?)")
        if rank == 0:
            print(json.dumps(info), flush=True)
        barrier()
    if dist is not None:
        dist.destroy_process_group()
    sys.stdout.flush()
