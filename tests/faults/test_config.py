"""Bad configurations: every value typed, every section a table, every key known.

A setting of the wrong type or out of range, a key that does not exist (with a guess at
the one meant), a section that is not a table, a key of another task or section, a file
that is not TOML: each is refused in one line naming the key and where it came from,
in the user's words (no class names, no module paths), before anything is trained or
written. A resumed run refuses, for every task, any setting or data that would change
what it trains on, naming it.
"""

import shutil

import pytest
from task_data import TASK_NAMES, TINY_RUN, run_config

from scratchformer.app.cli import main as cli_main
from scratchformer.app.train import TrainConfig, train

INTERNALS = ("TransformerConfig", "__init__", "scratchformer.", "Settings", "None)", "kwarg")

#: (--set value, fragments of the one line)
SETTINGS = [
    ("task.max_len=abc", "task.max_len must be a whole number, got 'abc'"),
    ("train.steps=2.5", "train.steps must be a whole number, got 2.5 (from --set train.steps=2.5)"),
    ("train.steps=true", "train.steps must be a whole number, got True"),
    ("train.test=1", "train.test must be true or false, got 1"),
    ("train.time_limit='soon'", "train.time_limit must be a number, got 'soon'"),
    ("seed=1e3", "seed must be a whole number, got 1000.0"),
    ("seed=-1", "seed must be >= 0, got -1"),
    ("seed='x'", "seed must be a whole number"),
    ("model=5", "[model] must be a table of settings, got 5 (from --set model=5)"),
    ("task=5", "[task] must be a table of settings, got 5"),
    ("optim='adam'", "[optim] must be a table of settings"),
    ("train=[1]", "[train] must be a table of settings"),
    ("train.stpes=3", "unknown key 'stpes' in [train]", "(did you mean 'steps'?)"),
    ("model.d_modle=8", "unknown key 'd_modle' in [model]", "(did you mean 'd_model'?)"),
    ("optim.lr_factr=2", "unknown key 'lr_factr' in [optim]", "(did you mean 'lr_factor'?)"),
    ("task.nme=copy", "unknown key 'nme' in [task]", "(did you mean 'name'?)"),
    ("sead=1", "unknown top-level key 'sead'", "(did you mean 'seed'?)"),
    ("foo=1", "unknown top-level key 'foo' (from --set foo=1)"),
    ("optim.steps=3", "unknown key 'steps' in [optim]"),
    ("model.d_model='abc'", "model.d_model must be a whole number, got 'abc'"),
    ("model.P_drop='0.1'", "model.P_drop must be a number, got '0.1'"),
    ("model.d_k=1.5", "model.d_k must be a whole number or left out, got 1.5"),
    ("model.d_model=-8", "[model]: d_model, d_ff and h must be positive"),
    ("model.d_model=7", "[model]: d_model=7 not divisible by h=2"),
    ("model.h=0", "[model]: d_model, d_ff and h must be positive"),
    ("model.N_dec=0", "[model]: need N >= 0 and N_dec >= 1"),
    ("model.P_drop=1.5", "[model]: P_drop must be in [0, 1), got 1.5"),
    ("model.P_drop=-0.1", "[model]: P_drop must be in [0, 1)"),
    ("model.P_drop_attn=1.0", "[model]: P_drop_attn must be in [0, 1), got 1.0"),
    ("model.P_drop_ffn=-0.5", "[model]: P_drop_ffn must be in [0, 1), got -0.5"),
    ("model.eps_ls=1.0", "[model]: eps_ls must be in [0, 1)"),
    ("model.d_k=0", "[model]: d_k must be positive"),
    ("model.attention='foo'", "[model]: attention='foo'"),
    ("model.activation='tanh'", "[model]: activation='tanh'"),
    ("model.positions='rope'", "[model]: positions='rope'"),
    ("model.preset='huge'", "unknown model preset 'huge'"),
    ("model.preset=5", "unknown model preset '5'"),
    ("model.seed=-1", "[model]: seed must be >= 0, got -1"),
    ("model.vocab_size=10", "model.vocab_size", "is set by the tokenizer"),
    ("model.max_len=3", "model.max_len=3 is shorter than the longest example"),
    ("optim.beta1=1", "optim.beta1 must be in [0, 1), got 1"),
    ("optim.beta2=-0.5", "optim.beta2 must be in [0, 1)"),
    ("optim.schedule='cosine'", "optim.schedule='cosine': expected 'noam' or 'constant'"),
    ("optim.eps=0", "optim.eps must be > 0, got 0"),
    ("optim.lr=0", "optim.lr must be a positive number, got 0"),
    ("optim.lr_factor=inf", "optim.lr_factor must be a positive number, got inf"),
    ("optim.lr_factor=nan", "optim.lr_factor must be a positive number, got nan"),
    ("optim.lr_factor=-1", "optim.lr_factor must be a positive number, got -1"),
    ("optim.clip_norm=nan", "optim.clip_norm must be >= 0, got nan"),
    ("optim.weight_decay=-1", "optim.weight_decay must be >= 0, got -1"),
    ("optim.warmup=1.5", "optim.warmup must be a whole number, got 1.5"),
    ("task.symbols=0", "task.symbols must be in [1, 26], got 0"),
    ("task.symbols=27", "task.symbols must be in [1, 26], got 27"),
    ("task.train_size=0", "task.train_size must be >= 1, got 0"),
    ("task.held_out=0", "task.held_out must be in (0, 1), got 0"),
    ("task.held_out=1", "task.held_out must be in (0, 1), got 1"),
    ("task.max_len=0", "task.min_len must be in [1, max_len], got 1 and 0"),
    ("task.decode='sample'", "task.decode='sample': expected 'beam' or 'greedy'"),
    ("task.beam_size=0", "task.beam_size must be >= 1, got 0"),
    ("task.alpha=inf", "task.alpha must be >= 0, got inf"),
    ("task.alpha=-1", "task.alpha must be >= 0, got -1"),
    ("task.name=5", "unknown task '5'"),
    ("task.name='lmm'", "unknown task 'lmm'"),
    ("task.data_dir='x'", "task.data_dir (from --set task.data_dir='x') does not apply to task"),
    ("train.keep_checkpoints=-1", "train.keep_checkpoints must be >= 0, got -1"),
    ("train.keep_checkpoints=2", "train.keep_checkpoints = 2 is fewer than train.average_last"),
    ("train.average_last=-1", "train.average_last must be >= 0, got -1"),
    ("train.examples=-1", "train.examples must be >= 0, got -1"),
    ("train.max_sentences=-1", "train.max_sentences must be >= 0, got -1"),
    ("train.time_limit=inf", "train.time_limit must be finite, got inf"),
    ("train.accum_steps=0", "train.accum_steps must be >= 1, got 0"),
    ("train.max_tokens=0", "train.max_tokens must be >= 1, got 0"),
    ("x", "--set 'x': expected SECTION.KEY=VALUE"),
    ("=3", "cannot set '': expected KEY or SECTION.KEY"),
    (".x=1", "cannot set '.x': expected KEY or SECTION.KEY"),
    ("a.b.c=1", "cannot set 'a.b.c': expected KEY or SECTION.KEY"),
]


def _refused_without_a_trace(refused, argv, fragments, tmp_path):
    line = refused(argv, *fragments)
    assert not any(word in line for word in INTERNALS), line
    assert not (tmp_path / "run").exists()  # refused before the run directory is made
    return line


@pytest.mark.parametrize(
    "setting, fragments", [(s, f) for s, *f in SETTINGS], ids=[s for s, *_ in SETTINGS]
)
def test_a_bad_setting_is_named_with_where_it_came_from(refused, tmp_path, setting, fragments):
    argv = ["train", *TINY_RUN, "--run-dir", str(tmp_path / "run"), "--set", setting]
    _refused_without_a_trace(refused, argv, fragments, tmp_path)


#: (the text of a config file, fragments of the one line; {path} is its path)
FILES = [
    ("steps = \n", "{path} is not valid TOML"),
    ("[train\nsteps = 3\n", "{path} is not valid TOML"),
    ("task = 5\n", "[task] must be a table of settings, got 5 (from {path})"),
    ("[[model]]\nd_model = 8\n", "[model] must be a table of settings"),
    (
        "[modle]\nd_model = 8\n",
        "unknown top-level key 'modle' (from {path})",
        "(did you mean 'model'?)",
    ),
    ("[train]\nsteps = 'ten'\n", "train.steps must be a whole number, got 'ten' (from {path})"),
    ("[optim]\nsteps = 3\n", "unknown key 'steps' in [optim] (from {path})"),
    ("[model]\nd_ff = 0\n", "[model]: d_model, d_ff and h must be positive"),
    ("seed = -3\n", "seed must be >= 0, got -3"),
    ("name = 5\n", "name must be text, got 5 (from {path})"),
    (
        "[task]\nname = 'translate'\nsymbols = 4\n",
        "task.symbols (from {path}) does not apply to task translate",
    ),
]


@pytest.mark.parametrize(
    "text, fragments", [(t, f) for t, *f in FILES], ids=[t.split("\n")[0] for t, *_ in FILES]
)
def test_a_bad_config_file_is_named(refused, tmp_path, text, fragments):
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    argv = ["train", "--config", str(path), "--run-dir", str(tmp_path / "run"), "--no-progress"]
    _refused_without_a_trace(refused, argv, [f.format(path=path) for f in fragments], tmp_path)


@pytest.mark.parametrize(
    "config, fragments",
    [
        ("{tmp}/missing.toml", ["no config file at {tmp}/missing.toml", "shipped configs:"]),
        ("{tmp}", ["no config file at {tmp}"]),
        ("revrese", ["no config file at revrese", "shipped configs: "]),
    ],
    ids=["missing file", "a directory", "misspelt shipped name"],
)
def test_a_config_that_is_not_there(refused, tmp_path, config, fragments):
    argv = ["train", "--config", config.format(tmp=tmp_path), "--run-dir", str(tmp_path / "run")]
    refused(argv, *[f.format(tmp=tmp_path) for f in fragments])


# -- a resumed run continues the same run, for every task ----------------------------------
@pytest.fixture(scope="module", params=TASK_NAMES)
def stopped_run(request, tmp_path_factory):
    """A two-step run of each task, stopped with its checkpoint: ``(task, config dict)``."""
    if request.param == "translate":
        pytest.importorskip("sentencepiece")
    root = tmp_path_factory.mktemp(request.param)
    d = run_config(request.param, root, steps=2, checkpoint_every=2, eval_every=0, test=False)
    train(TrainConfig.from_dict(d), progress=False, echo=lambda *a: None)
    return request.param, d


CHANGES = {
    "seed": (["--seed", "9"], "with other seed"),
    "max_tokens": (["--max-tokens", "96"], "with other train.max_tokens"),
    "warmup": (["--warmup", "9"], "with other optim.warmup"),
    "accum": (["--accum-steps", "2"], "with other train.accum_steps"),
    "model": (["--set", "model.d_ff=48"], "its model differs (d_ff: 32 there, 48 here)"),
}


@pytest.mark.parametrize("change", CHANGES)
def test_resume_refuses_what_would_change_the_run(stopped_run, refused, change, tmp_path):
    task, d = stopped_run
    flags, fragment = CHANGES[change]
    ckpt = f"{d['run_dir']}/checkpoints/checkpoint_2.npz"
    argv = ["train", "--resume", ckpt, "--run-dir", str(tmp_path / "again"), "--no-progress"]
    refused([*argv, *flags], f"cannot resume from {ckpt}", fragment)


def test_resume_refuses_other_training_data(stopped_run, refused, tmp_path):
    """The same settings and vocabulary, but two training examples swapped: the batches
    would hold other examples, so the resume is refused."""
    task, d = stopped_run
    if task == "reverse":
        pytest.skip("the reverse task's data are its settings, compared above")
    data = tmp_path / "data"
    shutil.copytree(d["task"]["data_dir"], data)
    name = {"translate": "train.tsv", "lm": "train.txt", "classify": "train.tsv"}[task]
    lines = (data / name).read_text(encoding="utf-8").splitlines(keepends=True)
    i = next(i for i in range(1, len(lines)) if lines[i] != lines[0])
    lines[0], lines[i] = lines[i], lines[0]
    (data / name).write_text("".join(lines), encoding="utf-8")
    ckpt = f"{d['run_dir']}/checkpoints/checkpoint_2.npz"
    argv = ["train", "--resume", ckpt, "--run-dir", str(tmp_path / "again"), "--no-progress"]
    refused([*argv, "--data-dir", str(data)], f"cannot resume from {ckpt}", "training data differ")


def test_resume_may_change_when_it_stops_and_where_it_writes(stopped_run, tmp_path, capsys):
    task, d = stopped_run
    ckpt = f"{d['run_dir']}/checkpoints/checkpoint_2.npz"
    argv = ["train", "--resume", ckpt, "--run-dir", str(tmp_path / "again"), "--no-progress"]
    assert cli_main([*argv, "--steps", "3", "--log-every", "1", "--no-test"]) == 0
    assert "done: step 3" in capsys.readouterr().out
