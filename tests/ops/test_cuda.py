"""The GPU kernels, checked on a machine without a GPU: each ``.cu`` file of the ops
compiles with NVRTC for sm_80 and sm_90 (a compile error fails, never skips, under
CI=true), a planted syntax error is caught with NVRTC's log, and the dropout kernel's
exact integer steps, run with NumPy, draw the masks of the counter-based generator (its
mirror) bit for bit. ptxas, where present, reports registers and spills (`pytest -s`, never
asserted). The sources ship in the package and are found by ``importlib.resources``."""

import os
import shutil
import subprocess

import numpy as np
import pytest

from scratchformer.engine import backend as B
from scratchformer.engine.device.counter import CounterGenerator
from scratchformer.engine.ops.dropout import dropout_forward


def cupy_kernels():
    """The module that compiles the kernels; skipped without CuPy, failed under CI."""
    try:
        from cupy.cuda import nvrtc

        from scratchformer.engine.device import cupy_kernels as module

        nvrtc.getVersion()
    except Exception as e:  # ImportError, or NVRTC's library missing
        if os.environ.get("CI") == "true":
            pytest.fail(f"CuPy or NVRTC cannot load in CI: {type(e).__name__}: {e}")
        pytest.skip(f"CuPy or NVRTC cannot load here ({type(e).__name__}: {e})")
    return module


#: the kernels each source must define
KERNELS = {"dropout": ("sf_dropout_f32", "sf_dropout_f64")}


def test_every_source_is_known():
    assert set(cupy_kernels().sources()) == set(KERNELS)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_kernel_compiles_with_nvrtc(name, arch):
    module = cupy_kernels()
    cubin = module.nvrtc_compile(module.source(name), arch, f"{name}.cu")
    assert cubin[:4] == b"\x7fELF"  # a CUDA binary
    for kernel in KERNELS[name]:
        assert kernel.encode() in cubin


def test_a_header_is_inlined_so_nvrtc_needs_no_include_path():
    text = cupy_kernels().source("dropout")
    assert "#include" not in text and "sf_mix" in text


def test_a_syntax_error_is_caught_with_its_line():
    module = cupy_kernels()
    from cupy.cuda import nvrtc

    broken = module.source("dropout").replace("keep[i] = k;", "keep[i] = k")  # no semicolon
    with pytest.raises(nvrtc.NVRTCError) as info:
        module.nvrtc_compile(broken, "sm_90", "dropout.cu")
    log = str(info.value.__cause__)
    assert "dropout.cu(" in log and "error" in log


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed here")
def test_ptxas_reports_registers_and_spills(tmp_path):
    """ptxas's registers and spills of the dropout kernel (shown with ``pytest -s``, not
    among the test dots)."""
    src = tmp_path / "dropout.cu"
    src.write_text(cupy_kernels().source("dropout"))
    out = subprocess.run(
        ["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "k"), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    report = [ln for ln in out.stderr.splitlines() if "registers" in ln or "spill" in ln]
    assert report
    print("\nptxas, sm_90:\n  " + "\n  ".join(report))


def kernel_steps_in_numpy(x, p, key, counter):
    """The dropout kernel's steps, entry by entry as the CUDA code writes them."""
    n = x.size
    i = np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(key) + (np.uint64(counter) + i + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    bits = 24 if x.dtype == np.float32 else 53
    u = (z >> np.uint64(64 - bits)).astype(x.dtype) * (x.dtype.type(1) / x.dtype.type(2**bits))
    keep = (u >= x.dtype.type(p)).reshape(x.shape)
    return (x * keep) * x.dtype.type(1 / (1 - p)), keep


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_kernels_steps_draw_the_counter_generators_masks(dtype):
    """The mirror: the op with the counter-based generator equals the kernel's own steps,
    for a counter already advanced (a later site of the same step)."""
    x = np.random.default_rng(0).standard_normal((3, 5, 7)).astype(dtype)
    g = CounterGenerator(17)
    g.random(11)  # an earlier site drew 11 numbers
    key, counter = g.key, g.counter
    out, cache = dropout_forward(B.asarray(x), 0.3, g)
    want_out, want_keep = kernel_steps_in_numpy(x, 0.3, key, counter)
    np.testing.assert_array_equal(B.asnumpy(cache.mask), want_keep)
    np.testing.assert_array_equal(B.asnumpy(out), want_out)
    assert g.counter == counter + x.size


@pytest.mark.slow
def test_an_installed_wheel_carries_the_kernel_sources(tmp_path):
    """Built as a wheel and installed into a folder (not editable), the package still
    finds every ``.cu`` source and the headers they include."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(root)],
        capture_output=True, text=True, timeout=600,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    target = tmp_path / "site"
    wheel = next(wheels.glob("scratchformer-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, timeout=300)
    code = (
        "from importlib import resources; import scratchformer, sys; "
        "f = [resources.files('scratchformer.engine.' + d) for d in ('ops', 'device')]; "
        "print(scratchformer.__file__); "
        "print(sorted(p.name for d in f for p in d.iterdir() if p.name.endswith(('.cu', '.cuh'))))"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    where, names = out.stdout.splitlines()
    assert where.startswith(str(target))
    assert names == "['counter.cuh', 'dropout.cu']"
