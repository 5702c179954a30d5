"""Random tile programs (tests/progen.py): they compile, their CUDA builds with NVRTC, and the
interpreter's results match the numpy reference. No GPU needed; about 30 s in all."""

import json
import os
import sys

import numpy as np
import pytest
import tilers
import tilers._tilers

sys.path.insert(0, os.path.dirname(__file__))
import progen

# Every program of these seeds compiles (trace + Rust pipeline + CUDA emission);
# NVRTC (about 0.2 s a program) builds every 15th for both architectures.
COMPILE_SEEDS = range(300)
NVRTC_SEEDS = range(0, 300, 15)
# The interpreter runs these (about 12 ms a program), in chunks so a failure names its seeds.
INTERP_SEEDS = range(2000)
CHUNK = 100

needs_interpreter = pytest.mark.skipif(
    not hasattr(tilers._tilers, "interpret"), reason="the interpreter is not built in"
)


def test_generator_is_deterministic():
    for seed in (0, 1, 17, 123, 999):
        a, b = progen.generate(seed), progen.generate(seed)
        assert a.source == b.source
        assert a.describe() == b.describe()
        assert [p.shape for p in a.params] == [p.shape for p in b.params]
        x, y = a.make_inputs(), b.make_inputs()
        assert all(np.array_equal(u, v) for u, v in zip(x, y))
    sources = {progen.generate(seed).source.split("\n", 1)[1] for seed in range(50)}
    assert len(sources) == 50


def test_every_family_appears():
    families = {progen.generate(seed).family for seed in range(40)}
    assert families == set(progen.FAMILIES)


def test_generated_programs_compile():
    failures = []
    for seed in COMPILE_SEEDS:
        case = progen.generate(seed)
        try:
            kernel = case.compile(target="cuda:sm_90a")
        except Exception as error:  # noqa: BLE001 - every failure is reported with its seed
            failures.append(f"{case.describe()}: {error}")
            continue
        assert kernel.out_idx == case.out_idx
    assert not failures, "\n\n".join(failures[:5])


def test_locations_point_at_the_generated_file():
    case = progen.generate(3)
    kernel = case.compile(target="cuda:sm_90a")
    sources = json.loads(kernel.program_json)["sources"]
    assert sources[0]["file"] == case.path()
    for line, text in sources[0]["lines"].items():
        assert case.source.splitlines()[int(line) - 1] == text


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("seed", NVRTC_SEEDS)
def test_generated_cuda_builds_with_nvrtc(seed, arch):
    case = progen.generate(seed)
    kernel = case.compile(target=f"cuda:{arch}")
    assert kernel.cubin[:4] == b"\x7fELF", case.describe()


@needs_interpreter
@pytest.mark.parametrize("start", range(INTERP_SEEDS.start, INTERP_SEEDS.stop, CHUNK))
def test_interpreter_matches_reference(start):
    failures = []
    checked = skipped = 0
    for seed in range(start, min(start + CHUNK, INTERP_SEEDS.stop)):
        case = progen.generate(seed)
        try:
            kernel = case.compile(target="interp")
            inputs = case.make_inputs()
            outputs = case.run(kernel, inputs)
            ok, message, n_checked, n_skipped = case.check(inputs, outputs)
        except Exception as error:  # noqa: BLE001
            ok, message, n_checked, n_skipped = False, f"{type(error).__name__}: {error}", 0, 0
        checked += n_checked
        skipped += n_skipped
        if not ok:
            failures.append(f"{case.describe()}\n  {message}")
    assert not failures, f"{len(failures)} programs differ:\n" + "\n".join(failures[:5])
    # the bounds are tight: almost every element is compared
    assert skipped <= 0.01 * (checked + skipped)


def test_reference_catches_a_one_ulp_error():
    """The check is sharp: one element off by one step of its dtype is caught."""
    caught = 0
    for seed in range(20):
        case = progen.generate(seed)
        inputs = case.make_inputs()
        expected = case.reference(inputs)
        bounds = case.reference_bounds(inputs)
        assert case.check(inputs, expected)[0], case.describe()
        out = expected[0].copy()
        flat = out.reshape(-1)
        exact = np.flatnonzero(bounds[0][1].reshape(-1) == 0)
        if not exact.size:
            continue
        i = exact[seed % exact.size]
        if out.dtype.kind in "iu":
            flat[i] = flat[i] + np.array(1, out.dtype)
        else:
            bits = flat[i : i + 1].view(np.uint16 if out.dtype.itemsize == 2 else np.uint32)
            bits += 1
        ok, message, _, _ = case.check(inputs, [out] + expected[1:])
        assert not ok
        caught += 1
    assert caught >= 15
