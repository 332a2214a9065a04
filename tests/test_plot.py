"""``scratchformer plot`` and scratchformer.app.viz: PNGs written without a display, of the
expected size, and clear errors for bad arguments."""

import json
import sys

import numpy as np
import pytest

from scratchformer import Transformer, TransformerConfig
from scratchformer.app import viz
from scratchformer.app.checkpoint import save_checkpoint
from scratchformer.app.cli import main
from scratchformer.app.data import CharTokenizer, Vocab

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path, size=None):
    """A valid PNG: the signature, an IHDR size that matplotlib's reader agrees with."""
    image = pytest.importorskip("matplotlib.image")
    assert path.is_file(), f"{path} was not written"
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    w, h = viz.png_size(path)
    assert image.imread(path).shape[:2] == (h, w)
    if size is not None:
        assert (w, h) == size
    return w, h


@pytest.fixture
def mpl():
    pytest.importorskip("matplotlib")


@pytest.fixture
def checkpoint(tmp_path):
    """A tiny untrained model over the letters a-f with its tokenizer, saved."""
    tok = CharTokenizer(Vocab("abcdef"))
    cfg = TransformerConfig.preset("tiny", vocab_size=len(tok), P_drop=0.0, positions="learned")
    path = save_checkpoint(
        tmp_path / "run" / "checkpoints" / "checkpoint_7.npz",
        Transformer(cfg),
        step=7,
        meta={"tokenizer": tok.to_dict()},
    )
    return path


def metrics_log(path, n=6):
    with open(path, "w") as f:
        for s in range(1, n + 1):
            f.write(json.dumps({"kind": "train", "step": 10 * s, "loss": 3 / s, "lr": 1e-4 * s}))
            f.write("\n")
            if s % 2 == 0:
                rec = {"kind": "valid", "step": 10 * s, "loss": 3.2 / s, "nll": 3 / s}
                rec.update(ppl=float(np.exp(3 / s)), bleu=5.0 * s, token_acc=s / 6, seq_acc=s / 8)
                f.write(json.dumps(rec) + "\n")
    return path


# -- each plot writes its PNG -------------------------------------------------------------
def test_positional_sinusoid_png(mpl, tmp_path, capsys):
    out = tmp_path / "pos.png"
    assert main(["plot", "positional", "--d-model", "64", "--positions", "50", "-o", str(out)]) == 0
    assert_png(out, (1000, 850))
    assert "wrote" in capsys.readouterr().out


def test_positional_learned_table_from_a_checkpoint(mpl, tmp_path, checkpoint, capsys):
    out = tmp_path / "learned.png"
    code = main(["plot", "positional", "--checkpoint", str(checkpoint), "-o", str(out)])
    assert code == 0
    assert_png(out)


def test_schedule_png_several_curves(mpl, tmp_path, capsys):
    out = tmp_path / "sched.png"
    args = ["plot", "schedule", "--d-model", "512", "256", "--warmup", "4000", "8000"]
    assert main([*args, "--steps", "10000", "-o", str(out)]) == 0
    assert_png(out, (900, 550))
    assert "4 curves" in capsys.readouterr().out


def test_plots_of_no_run_go_beside_the_runs_not_into_the_current_folder(
    mpl, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert main(["plot", "schedule", "--steps", "100"]) == 0
    assert main(["plot", "positional", "--d-model", "16", "--positions", "8"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
    for name in ("schedule.png", "positional.png"):
        assert_png(tmp_path / "runs" / "plots" / name)
    assert "wrote runs/plots/positional.png" in capsys.readouterr().out


def test_curves_png_from_a_run_directory(mpl, tmp_path, capsys):
    metrics_log(tmp_path / "metrics.jsonl")
    out = tmp_path / "curves.png"
    assert main(["plot", "curves", str(tmp_path), "-o", str(out)]) == 0
    # loss, perplexity, learning rate, BLEU, accuracy: 5 panels on a 2 x 3 grid
    assert_png(out, (1200, int(round((3.6 * 3 + 0.5) * 100))))


def test_attention_pngs_one_per_kind(mpl, tmp_path, checkpoint, capsys):
    out = tmp_path / "att"
    code = main(["plot", "attention", str(checkpoint), "abcde", "--target", "fab", "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    for kind in ("encoder", "decoder", "cross"):
        assert_png(out / f"attention_{kind}.png")
    # panels grow with the sentence so that every token keeps a legible tick label
    long = tmp_path / "long"
    args = ["plot", "attention", str(checkpoint), "abcdef" * 5, "--target", "fab"]
    assert main([*args, "--kind", "encoder", "-o", str(long)]) == 0
    w, h = viz.png_size(out / "attention_encoder.png")
    w_long, h_long = viz.png_size(long / "attention_encoder.png")
    assert w_long > 2 * w and h_long > 2 * h


def test_attention_from_a_run_directory_and_one_head(mpl, tmp_path, checkpoint, capsys):
    run_dir = checkpoint.parent.parent
    out = tmp_path / "one"
    args = ["plot", "attention", str(run_dir), "abc", "--target", "ab", "--kind", "cross"]
    assert main([*args, "--layer", "1", "--head", "0", "-o", str(out)]) == 0
    assert_png(out / "attention_cross.png")
    assert not (out / "attention_encoder.png").exists()
    assert "checkpoint_7.npz" in capsys.readouterr().out


def test_a_run_directory_means_its_final_model_as_for_every_command(
    mpl, tmp_path, checkpoint, capsys
):
    """A finished run's directory names its final.npz (as translate, evaluate and export
    take it), not its newest checkpoint; a run with no final model yet, its newest."""
    from scratchformer.app.checkpoint import load_checkpoint

    final = checkpoint.parent / "final.npz"
    save_checkpoint(
        final, load_checkpoint(checkpoint).model, step=7, meta=checkpoint_meta(checkpoint)
    )
    later = checkpoint.parent / "checkpoint_9.npz"
    save_checkpoint(
        later, load_checkpoint(checkpoint).model, step=9, meta=checkpoint_meta(checkpoint)
    )
    args = ["plot", "attention", "abc", "--target", "ab", "--kind", "cross", "-o", str(tmp_path)]
    for where in (checkpoint.parent.parent, checkpoint.parent):
        assert main([*args[:2], str(where), *args[2:], "--overwrite"]) == 0
        first = capsys.readouterr().out.splitlines()[0]
        assert first.startswith(f"checkpoint {final} ("), first
    final.unlink()
    assert main([*args[:2], str(checkpoint.parent.parent), *args[2:], "--overwrite"]) == 0
    assert capsys.readouterr().out.startswith(f"checkpoint {later} (step 9")


def checkpoint_meta(path):
    from scratchformer.app.checkpoint import load_checkpoint

    return {"tokenizer": load_checkpoint(path).meta["tokenizer"]}


def test_attention_decodes_when_no_target_is_given(mpl, tmp_path, checkpoint, capsys):
    pytest.importorskip("scratchformer.engine.decode")
    out = tmp_path / "greedy"
    assert main(["plot", "attention", str(checkpoint), "abc", "-o", str(out)]) == 0
    assert "greedy output" in capsys.readouterr().out
    assert_png(out / "attention_cross.png")


def test_attention_maps_are_the_softmax_weights(checkpoint):
    from scratchformer.app.checkpoint import load_checkpoint

    model = load_checkpoint(checkpoint).model
    maps = viz.attention_maps(model, [4, 5, 6, 7, 8], [1, 9, 4])
    assert [a.shape for a in maps.encoder] == [(2, 5, 5)] * 2
    assert [a.shape for a in maps.decoder] == [(2, 3, 3)] * 2
    assert [a.shape for a in maps.cross] == [(2, 3, 5)] * 2
    for a in maps.encoder + maps.decoder + maps.cross:
        np.testing.assert_allclose(a.sum(-1), 1.0, rtol=1e-5)
    assert np.all(np.triu(maps.decoder[0][0], k=1) == 0)  # causal: no weight on the future


# -- clear errors ----------------------------------------------------------------------------
def run_error(capsys, *argv):
    code = main(["plot", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    return err


def test_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    err = run_error(capsys, "attention", str(tmp_path / "nope.npz"), "abc", "--target", "a")
    assert "no checkpoint file or run directory at" in err and "nope.npz" in err
    err = run_error(capsys, "attention", str(tmp_path), "abc")
    assert "no final.npz or checkpoint_<step>.npz" in err


def test_unknown_head_and_layer_are_clear_errors(mpl, tmp_path, checkpoint, capsys):
    base = ["attention", str(checkpoint), "abc", "--target", "ab", "-o", str(tmp_path)]
    err = run_error(capsys, *base, "--head", "5")
    assert "unknown head 5" in err and "2 heads (0 to 1)" in err
    err = run_error(capsys, *base, "--layer", "2")
    assert "unknown layer 2" in err and "2 layers" in err


def test_a_huge_attention_figure_is_refused(checkpoint):
    from scratchformer.app.checkpoint import load_checkpoint

    model = load_checkpoint(checkpoint).model
    ids = [4] * 60
    maps = viz.attention_maps(model, ids, [1, *ids])
    maps.encoder = maps.encoder * 8  # pretend: 16 layers
    toks = ["a"] * 60
    with pytest.raises(viz.PlotError, match="pick some with --layer/--head"):
        viz.plot_attention(
            maps, "x.png", kind="encoder", src_tokens=toks, tgt_in_tokens=toks, tgt_out_tokens=toks
        )


def test_empty_or_useless_metrics_log_is_a_clear_error(tmp_path, capsys):
    log = tmp_path / "metrics.jsonl"
    log.write_text("\n\n")
    assert "is empty: nothing to plot" in run_error(capsys, "curves", str(log))
    log.write_text('{"kind": "train", "step": 1, "tokens": 5}\n')
    pytest.importorskip("matplotlib")
    assert "no plottable metrics" in run_error(capsys, "curves", str(log))
    log.write_text("not json\n")
    assert "line 1 is not JSON" in run_error(capsys, "curves", str(log))
    assert "no metrics log at" in run_error(capsys, "curves", str(tmp_path / "missing"))


def test_bad_schedule_and_positional_arguments(tmp_path, capsys):
    for argv, message in (
        (["schedule", "--warmup", "0"], "argument --warmup: must be a whole number >= 1"),
        (["positional", "--positions", "0"], "argument --positions: must be a whole number >= 1"),
        (["positional", "--d-model", "1"], "argument --d-model: must be a whole number >= 2"),
    ):
        with pytest.raises(SystemExit) as e:
            main(["plot", *argv])
        assert e.value.code == 2
        assert message in capsys.readouterr().err
    err = run_error(capsys, "schedule", "-o", str(tmp_path / "x.jpg"))
    assert "should end in .png" in err


def test_missing_matplotlib_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(viz.PlotError, match=r"pip install 'scratchformer\[plot\]'"):
        viz.plot_schedule([(512, 4000, 1.0)], tmp_path / "s.png")


def test_png_size_rejects_a_non_png(tmp_path):
    p = tmp_path / "x.png"
    p.write_bytes(b"GIF89a" + b"\0" * 30)
    with pytest.raises(viz.PlotError, match="not a PNG"):
        viz.png_size(p)


def test_plots_of_a_run_go_into_its_directory(mpl, tmp_path, checkpoint, monkeypatch, capsys):
    """Without -o, a plot of a run is written into the run directory, not where the
    command happens to be run."""
    monkeypatch.chdir(tmp_path)
    run = checkpoint.parent.parent  # tmp_path/run
    metrics_log(run / "metrics.jsonl")
    assert main(["plot", "curves", str(run)]) == 0
    assert_png(run / "curves.png")
    assert main(["plot", "attention", str(checkpoint), "abc", "--target", "fa"]) == 0
    assert_png(run / "attention_cross.png")
    assert main(["plot", "positional", "--checkpoint", str(run)]) == 0
    assert_png(run / "positional.png")
    assert sorted(p.name for p in tmp_path.glob("*.png")) == []
