"""The autotuner without a GPU: record keys, record reuse, the staged search and failure paths.

Timing is a fake `bench_fn` (a function of the config); checks run the kernels on the
tilers interpreter against numpy, so a config that computes the wrong thing is caught
for real.
"""

import json
import os
import sys
import threading

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers import autotuner
from tilers.__main__ import main as cli
from tilers.profiler import Timing

sys.path.insert(0, os.path.dirname(__file__))
import kernels

FAKE_GPU = {"name": "Fake H200", "arch": "sm_90a", "sms": 132}

ADD_CONFIGS = [
    {"block_M": bm, "block_N": bn, "threads": th}
    for bm in (16, 32, 64) for bn in (64, 128) for th in (128, 256)
]


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILERS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fake_time(config) -> float:
    """Bigger tiles are faster; 256 threads cost a little."""
    ms = 1000.0 / (config["block_M"] * config["block_N"])
    return ms + (0.01 if config.get("threads") == 256 else 0.0)


class FakeBench:
    """Records the configs it timed; honours the early-stop cutoff like bench_timing."""

    def __init__(self, time_of=fake_time):
        self.time_of = time_of
        self.timed = []

    def __call__(self, kernel, config, cutoff_ms):
        self.timed.append(dict(config))
        ms = self.time_of(config)
        if cutoff_ms is not None and ms > cutoff_ms:
            return Timing(ms, 5, stopped_early=True)
        return Timing(ms, 100)


def interpreter_check(reference):
    """check_fn: run the kernel on random host arrays with the interpreter, compare to numpy."""

    def check(kernel, config):
        rng = np.random.default_rng(0)
        inputs = []
        for position in kernel._input_positions:
            spec = kernel.info["params"][position]
            inputs.append(rng.standard_normal(spec["shape"]).astype(spec["dtype"]))
        got = kernel(*inputs)
        want = reference(*inputs)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-2,
                                   atol=1e-2)

    return check


def tuned(factory, configs=ADD_CONFIGS, bench=None, **options):
    """A fresh @autotune around `factory` with the test hooks (no GPU)."""
    options.setdefault("verbose", False)
    function = tilers.autotune(configs=configs, **options)(factory)
    function.bench_fn = bench or FakeBench()
    function.device_info_fn = lambda: dict(FAKE_GPU)
    return function


def add_factory():
    @tilers.jit(out_idx=[2], target="cuda:sm_90a")
    def add(M, N, block_M, block_N, threads, dtype="float16"):
        return kernels.add(M, N, dtype, block_M, block_N, threads)

    return add


# --- record keys ---------------------------------------------------------------------------


def test_the_same_problem_has_the_same_key():
    add = add_factory()
    assert tuned(add).record_key(1024, 1024) == tuned(add).record_key(1024, 1024)
    assert tuned(add).record_key(1024, 1024) == tuned(add).record_key(M=1024, N=1024)
    # a default written out is the same problem
    assert tuned(add).record_key(1024, 1024) == tuned(add).record_key(1024, 1024, dtype="float16")


def test_shape_dtype_and_config_space_change_the_key():
    add = add_factory()
    base = tuned(add).record_key(1024, 1024)
    assert tuned(add).record_key(1024, 2048) != base
    assert tuned(add).record_key(1024, 1024, dtype="float32") != base
    assert tuned(add, configs=ADD_CONFIGS[:-1]).record_key(1024, 1024) != base
    # the same configs in another order are another space too: they are hashed as listed
    assert tuned(add, configs=ADD_CONFIGS[::-1]).record_key(1024, 1024) != base


def test_the_device_and_nvrtc_change_the_key(monkeypatch):
    from tilers import cache

    add = add_factory()
    base = tuned(add).record_key(1024, 1024)
    other_gpu = tuned(add)
    other_gpu.device_info_fn = lambda: dict(FAKE_GPU, sms=114)
    assert other_gpu.record_key(1024, 1024) != base
    monkeypatch.setattr(cache, "nvrtc_version_for_key", lambda: "99.9")
    assert tuned(add).record_key(1024, 1024) != base


def make_factory(body_constant):
    """Two factories that differ only in their source text."""
    if body_constant == 1:

        @tilers.jit(out_idx=[1])
        def scale(N, block):
            @T.prim_func
            def scale(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
                with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
                    for i in T.Parallel(block):
                        B[bx * block + i] = A[bx * block + i] * 1.0

            return scale

    else:

        @tilers.jit(out_idx=[1])
        def scale(N, block):
            @T.prim_func
            def scale(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
                with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
                    for i in T.Parallel(block):
                        B[bx * block + i] = A[bx * block + i] * 2.0

            return scale

    return scale


def test_the_factory_source_changes_the_key():
    configs = [{"block": 128}, {"block": 256}]
    one = tuned(make_factory(1), configs).record_key(4096)
    two = tuned(make_factory(2), configs).record_key(4096)
    assert one != two
    assert one == tuned(make_factory(1), configs).record_key(4096)


SCALE = 2.0


def helper_body(A, B, i):
    B[i] = A[i] * SCALE


@tilers.jit(out_idx=[1])
def uses_helper(N, block):
    @T.prim_func
    def uses_helper(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                helper_body(A, B, bx * block + i)

    return uses_helper


def test_helpers_and_constants_the_factory_reads_change_the_key(monkeypatch):
    configs = [{"block": 128}, {"block": 256}]
    base = tuned(uses_helper, configs).record_key(4096)
    assert autotuner.kernel_identity(uses_helper) == autotuner.kernel_identity(uses_helper)

    monkeypatch.setitem(globals(), "SCALE", 3.0)  # a constant the helper reads
    assert tuned(uses_helper, configs).record_key(4096) != base
    monkeypatch.undo()
    assert tuned(uses_helper, configs).record_key(4096) == base

    def other_helper(A, B, i):
        B[i] = A[i] + SCALE

    monkeypatch.setitem(globals(), "helper_body", other_helper)  # a helper rewritten
    assert tuned(uses_helper, configs).record_key(4096) != base


def test_key_names_restrict_what_the_record_depends_on():
    add = add_factory()
    only_m = tuned(add, key=["M"])
    assert only_m.record_key(1024, 1024) == only_m.record_key(1024, 4096)
    assert only_m.record_key(1024, 1024) != only_m.record_key(2048, 1024)
    by_function = tuned(add, key=lambda M, N, **kw: M * N)
    assert by_function.record_key(1024, 2048) == by_function.record_key(2048, 1024)
    with pytest.raises(tilers.TileError, match="key= names K"):
        tuned(add, key=["K"]).record_key(1024, 1024)


# --- the search and its records ----------------------------------------------------------------


def test_the_search_returns_the_fastest_config_and_saves_a_record(tmp_cache):
    function = tuned(add_factory(), early_stop=None)
    result = function.tune(256, 256)
    assert result.config == {"block_M": 64, "block_N": 128, "threads": 128}
    assert result.ms == pytest.approx(fake_time(result.config))
    assert not result.from_record
    assert result.kernel.info["block"][0] == 128
    (path,) = (tmp_cache / "tuning").iterdir()
    record = json.loads(path.read_text())
    assert record["best"] == result.config
    assert record["problem"] == {"M": 256, "N": 256, "dtype": "float16"}
    assert record["device"] == "Fake H200"
    assert len(record["results"]) == len(ADD_CONFIGS)


def test_a_second_run_reuses_the_record_without_timing(tmp_cache):
    add = add_factory()
    first = tuned(add).tune(256, 256)
    bench = FakeBench()
    again = tuned(add, bench=bench)  # a new process would start with a new object like this
    kernel = again(256, 256)
    assert bench.timed == []
    assert again.last_result.from_record
    assert again.last_result.config == first.config
    assert kernel.info["block"][0] == first.config["threads"]
    assert again(256, 256) is kernel  # the in-process memo


def test_a_different_shape_searches_again(tmp_cache):
    add = add_factory()
    tuned(add).tune(256, 256)
    bench = FakeBench()
    result = tuned(add, bench=bench).tune(256, 512)
    assert bench.timed
    assert not result.from_record
    assert len(list((tmp_cache / "tuning").iterdir())) == 2


def test_force_searches_even_with_a_record():
    add = add_factory()
    tuned(add).tune(256, 256)
    bench = FakeBench()
    assert not tuned(add, bench=bench).tune(256, 256, force=True).from_record
    assert bench.timed


def test_a_corrupt_record_is_ignored(tmp_cache):
    add = add_factory()
    first = tuned(add).tune(256, 256)
    (path,) = (tmp_cache / "tuning").iterdir()
    path.write_text("{ torn")
    bench = FakeBench()
    result = tuned(add, bench=bench).tune(256, 256)
    assert bench.timed and result.config == first.config
    assert json.loads(path.read_text())["best"] == first.config  # rewritten whole


@pytest.mark.parametrize("results", [
    "not a list", [1, 2], [{"config": "x"}], [{"config": {}, "status": "fine"}],
    [{"config": {}, "ms": "fast"}], [{"config": {}, "surprise": 1}], [{"config": {}, "round": 1.5}],
])
def test_a_record_with_malformed_results_is_searched_again(tmp_cache, results):
    add = add_factory()
    first = tuned(add).tune(256, 256)
    (path,) = (tmp_cache / "tuning").iterdir()
    record = json.loads(path.read_text())
    record["results"] = results
    path.write_text(json.dumps(record))
    bench = FakeBench()
    result = tuned(add, bench=bench).tune(256, 256)
    assert bench.timed and not result.from_record and result.config == first.config


def test_a_record_in_a_folder_others_can_write_is_not_used(tmp_cache):
    add = add_factory()
    tuned(add).tune(256, 256)
    os.chmod(tmp_cache / "tuning", 0o777)
    bench = FakeBench()
    with pytest.warns(RuntimeWarning, match="not using the cache folder .*tuning"):
        result = tuned(add, bench=bench).tune(256, 256)
    assert bench.timed and not result.from_record


def test_records_can_be_turned_off(tmp_cache):
    tuned(add_factory(), records=False).tune(256, 256)
    assert not (tmp_cache / "tuning").exists()


def test_the_staged_search_times_tile_sizes_first():
    bench = FakeBench()
    function = tuned(add_factory(), bench=bench, keep=2, early_stop=None)
    result = function.tune(256, 256)
    first_round = [r for r in result.results if r.round == 1]
    second_round = [r for r in result.results if r.round == 2]
    tile_sizes = {(c["block_M"], c["block_N"]) for c in ADD_CONFIGS}
    assert len(first_round) == len(tile_sizes)  # one config per tile size
    # round 2: the other configs (threads=256) of the two fastest tile sizes; 32x128 and
    # 64x64 tie, and the first listed wins the tie
    assert [(r.config["block_M"], r.config["block_N"], r.config["threads"])
            for r in second_round] == [(32, 128, 256), (64, 128, 256)]
    assert len(bench.timed) < len(ADD_CONFIGS)
    skipped = [r for r in result.results if r.status == "skipped"]
    assert skipped and all("slower in round 1" in r.error for r in skipped)
    assert result.config == {"block_M": 64, "block_N": 128, "threads": 128}


def test_exhaustive_search_times_every_config():
    bench = FakeBench()
    tuned(add_factory(), bench=bench, search="exhaustive", early_stop=None).tune(256, 256)
    assert len(bench.timed) == len(ADD_CONFIGS)


def test_clearly_slower_configs_stop_early_and_are_never_chosen():
    bench = FakeBench()
    # the fastest configs come first, so the slow ones are measured against them
    result = tuned(add_factory(), ADD_CONFIGS[::-1], bench=bench, search="exhaustive",
                   early_stop=1.5).tune(256, 256)
    stopped = [r for r in result.results if r.status == "stopped early"]
    assert stopped
    assert all(r.ms > 1.5 * result.ms for r in stopped)
    assert result.config not in [r.config for r in stopped]


def test_configs_may_be_a_function_of_the_problem():
    def configs(M, N, **kwargs):
        return [{"block_M": bm, "block_N": 64, "threads": 128} for bm in (16, 32) if bm <= M]

    result = tuned(add_factory(), configs=configs).tune(16, 256)
    assert [r.config["block_M"] for r in result.results] == [16]


def test_a_config_naming_an_unknown_parameter_is_an_error():
    with pytest.raises(tilers.TileError, match="'block_K', which is not a parameter"):
        tuned(add_factory(), configs=[{"block_K": 32}]).tune(256, 256)


def test_passing_a_tuned_argument_compiles_without_tuning():
    bench = FakeBench()
    function = tuned(add_factory(), bench=bench)
    kernel = function(256, 256, block_M=16, block_N=64, threads=128)
    assert bench.timed == [] and function.last_result is None
    assert kernel.info["block"][0] == 128


# --- failure paths ------------------------------------------------------------------------------


@tilers.jit(out_idx=[1], target="cuda:sm_90a")
def transpose(M, N, block):
    return kernels.transpose(M, N, "float32", block, 128)


def test_a_config_that_fails_to_compile_is_reported_and_never_chosen():
    # 256 x 256 floats of shared memory do not fit in a block: the compiler refuses it
    configs = [{"block": 256}, {"block": 32}, {"block": 64}]
    bench = FakeBench(lambda config: 1.0 / config["block"])
    result = tuned(transpose, configs, bench=bench).tune(512, 512)
    failed = result.results[0]
    assert failed.status == "compile error"
    assert "shared memory" in failed.error
    assert {"block": 256} not in bench.timed
    assert result.config == {"block": 64}


def add_with_a_bug():
    @tilers.jit(out_idx=[2], target="cuda:sm_90a")
    def add(M, N, block_M, block_N, threads, wrong=False):
        if not wrong:
            return kernels.add(M, N, "float32", block_M, block_N, threads)

        @T.prim_func
        def add(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"),
                C: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (
                bx, by,
            ):
                for i, j in T.Parallel(block_M, block_N):
                    C[by * block_M + i, bx * block_N + j] = (
                        A[by * block_M + i, bx * block_N + j] - B[by * block_M + i, bx * block_N + j]
                    )

        return add

    return add


def test_a_config_that_fails_the_check_is_reported_and_never_chosen():
    configs = [
        {"block_M": 32, "block_N": 64, "threads": 128, "wrong": True},  # the fastest, and wrong
        {"block_M": 16, "block_N": 64, "threads": 128},
        {"block_M": 8, "block_N": 64, "threads": 128},
    ]
    bench = FakeBench()
    function = tuned(add_with_a_bug(), configs, bench=bench, search="exhaustive")
    function.check_fn = interpreter_check(lambda a, b: a + b)
    result = function.tune(64, 64)
    wrong = result.results[0]
    assert wrong.status == "wrong result"
    assert "Mismatched elements" in wrong.error or "Not equal" in wrong.error
    assert configs[0] not in bench.timed
    assert result.config == configs[1]


def test_a_config_that_fails_to_run_is_reported():
    def bench(kernel, config, cutoff):
        if config["block_M"] == 64:
            raise RuntimeError("cuLaunchKernel failed with CUDA_ERROR_INVALID_VALUE")
        return Timing(fake_time(config), 100)

    result = tuned(add_factory(), bench=bench, search="exhaustive").tune(256, 256)
    failed = [r for r in result.results if r.config["block_M"] == 64]
    assert all(r.status == "run error" and "INVALID_VALUE" in r.error for r in failed)
    assert result.config["block_M"] == 32


def test_when_every_config_fails_the_error_says_why_for_each(tmp_cache):
    configs = [
        {"block_M": 32, "block_N": 64, "threads": 128, "wrong": True},
        {"block_M": 16, "block_N": 64, "threads": 4096},  # over the threads limit
    ]
    function = tuned(add_with_a_bug(), configs, search="exhaustive")
    function.check_fn = interpreter_check(lambda a, b: a + b)
    with pytest.raises(tilers.TileError) as error:
        function.tune(64, 64)
    message = str(error.value)
    assert "no config compiled, ran and passed the check" in message
    assert "block_M=32 block_N=64 threads=128 wrong=True: wrong result" in message
    assert "threads=4096: compile error" in message
    assert not (tmp_cache / "tuning").exists()  # no record of a failed search


def test_configs_compile_in_parallel():
    barrier = threading.Barrier(2, timeout=20)

    @tilers.jit(out_idx=[2], target="cuda:sm_90a")
    def add(M, N, block_M, block_N, threads):
        barrier.wait()  # two configs are being compiled at once, or this times out
        return kernels.add(M, N, "float16", block_M, block_N, threads)

    configs = [{"block_M": 16, "block_N": 64, "threads": 128},
               {"block_M": 32, "block_N": 64, "threads": 128}]
    result = tuned(add, configs, max_workers=2, search="exhaustive").tune(64, 64)
    assert all(r.status == "ok" for r in result.results)


def scale_through_a_fragment():
    @tilers.jit(out_idx=[1], target="cuda:sm_90a")
    def scale(M, N, block_M, block_N, threads):
        @T.prim_func
        def scale(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (
                bx, by,
            ):
                tile = T.alloc_fragment((block_M, block_N), "float32")
                T.copy(A[by * block_M, bx * block_N], tile)
                for i, j in T.Parallel(block_M, block_N):
                    tile[i, j] = tile[i, j] * 2.0
                T.copy(tile, B[by * block_M, bx * block_N])

        return scale

    return scale


def test_a_config_whose_thread_arrays_cannot_fit_in_registers_is_passed_over():
    # 128 x 128 floats over 32 threads: 512 registers per thread, over the 255 a thread has
    configs = [{"block_M": 128, "block_N": 128, "threads": 32},
               {"block_M": 32, "block_N": 64, "threads": 128}]
    bench = FakeBench()
    result = tuned(scale_through_a_fragment(), configs, bench=bench,
                   search="exhaustive").tune(256, 256)
    spilled = result.results[0]
    assert spilled.status == "skipped"
    words = int(spilled.error.split(" need ")[1].split()[0])
    assert 512 <= words < 600 and "over the 255 a thread has" in spilled.error
    assert configs[0] not in bench.timed
    assert result.config == configs[1]
    assert 32 * 64 // 128 * 4 <= result.kernel.info["local_bytes"] < 255 * 4


def test_when_no_config_fits_in_registers_all_are_tried():
    configs = [{"block_M": 128, "block_N": 128, "threads": 32},
               {"block_M": 128, "block_N": 256, "threads": 64}]
    bench = FakeBench()
    result = tuned(scale_through_a_fragment(), configs, bench=bench,
                   search="exhaustive").tune(256, 256)
    assert [r.status for r in result.results] == ["ok", "ok"]
    assert result.config == configs[1]


# --- reporting ---------------------------------------------------------------------------------


def test_the_summary_table_lists_every_config(capsys):
    function = tuned(add_factory(), verbose=True, flops=lambda M, N, **kw: M * N)
    function.tune(256, 256)
    output = capsys.readouterr().err
    assert f"of {len(ADD_CONFIGS)} configs timed" in output
    assert "block_M=64 block_N=128 threads=128" in output
    assert "TFLOP/s" in output


def test_the_tuning_command_lists_records(tmp_cache, capsys):
    tuned(add_factory(), flops=lambda M, N, **kw: M * N).tune(256, 256)
    tuned(add_factory()).tune(512, 256)
    assert cli(["tuning"]) == 0
    output = capsys.readouterr().out
    assert "M=256 N=256 dtype=float16" in output
    assert "M=512 N=256 dtype=float16" in output
    assert "block_M=64 block_N=128 threads=128" in output
    assert "Fake H200" in output
    assert cli(["tuning", "--kernel", "nothing-like-this"]) == 0
    assert "no tuning records" in capsys.readouterr().out


def test_the_tuning_command_plots(tmp_cache, tmp_path):
    pytest.importorskip("matplotlib")
    tuned(add_factory(), flops=lambda M, N, **kw: M * N).tune(256, 256)
    tuned(add_factory()).tune(512, 256)
    plot = tmp_path / "tuning.png"
    assert cli(["tuning", "--plot", str(plot)]) == 0
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_the_tuning_command_with_no_records(tmp_cache, capsys):
    assert cli(["tuning"]) == 0
    assert "no tuning records" in capsys.readouterr().out


# --- T.dynamic sizes: one compile per config, a search per bucket -------------------------


def dynamic_add_factory(multiple_of=1):
    @tilers.jit(out_idx=[2], target="cuda:sm_90a")
    def add(N, block_M, block_N, threads):
        return kernels.add(T.dynamic("M", multiple_of=multiple_of), N, "float32", block_M,
                           block_N, threads)

    return add


class SizedBench(FakeBench):
    """Times depend on the bucket too: small M prefers small row tiles."""

    def __init__(self):
        super().__init__()
        self.sizes = []

    def __call__(self, kernel, config, cutoff_ms, sizes):
        self.sizes.append(dict(sizes))
        self.timed.append(dict(config))
        waste = -(-sizes["M"] // config["block_M"]) * config["block_M"] - sizes["M"]
        ms = 1000.0 / (config["block_M"] * config["block_N"]) + waste + 1.0
        return Timing(ms, 100)


def sized_check(reference):
    """check_fn for sized kernels: host arrays at the bucket's sizes, on the interpreter."""

    def check(kernel, config, sizes):
        rng = np.random.default_rng(0)
        inputs = []
        for position in kernel._input_positions:
            spec = kernel.info["params"][position]
            shape = [sizes[kernel.sizes[e["size"]]] if isinstance(e, dict) else e
                     for e in spec["shape"]]
            inputs.append(rng.standard_normal(shape).astype(spec["dtype"]))
        np.testing.assert_allclose(kernel(*inputs), reference(*inputs), rtol=1e-5)

    return check


def test_a_dynamic_kernel_is_tuned_per_bucket_and_compiled_once(monkeypatch):
    compiles = []
    jit_module = sys.modules["tilers.jit"]  # the module (tilers.jit is the decorator)

    real = jit_module.compile

    def counting(*args, **kwargs):
        compiles.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(jit_module, "compile", counting)
    bench = SizedBench()
    function = tuned(dynamic_add_factory(), bench=bench)
    function.check_fn = sized_check(lambda a, b: a + b)
    kernel = function(64)
    assert isinstance(kernel, autotuner.DynamicKernel) and kernel.sizes == ["M"]
    assert len(compiles) == 1  # the probe: whether the kernel has sizes
    rng = np.random.default_rng(1)
    for m in (0, 1, 7, 128, 1000, 4097):
        a = rng.standard_normal((m, 64)).astype("float32")
        b = rng.standard_normal((m, 64)).astype("float32")
        np.testing.assert_allclose(kernel(a, b), a + b, rtol=1e-6)
    # every config compiled once, whatever M was
    assert len(compiles) == len(ADD_CONFIGS)
    # buckets 1 (for 0, 1), 8, 128, 1024, 8192, each timed at its own M
    assert [r.sizes for r in kernel.results.values()] == [
        {"M": 1}, {"M": 8}, {"M": 128}, {"M": 1024}, {"M": 8192}
    ]
    assert sorted({s["M"] for s in bench.sizes}) == [1, 8, 128, 1024, 8192]
    # the bucket decides: M=1 prefers the smallest row tile, M=8192 the biggest tile
    assert kernel.results[(1,)].config["block_M"] == 16
    assert kernel.results[(8192,)].config == {"block_M": 64, "block_N": 128, "threads": 128}
    # a nearby size finds its bucket: no search, no compile
    timed = len(bench.timed)
    a = np.ones((900, 64), "float32")
    np.testing.assert_allclose(kernel(a, a), 2 * a)
    assert len(bench.timed) == timed and len(compiles) == len(ADD_CONFIGS)
    assert "tuned at: M=1, M=8" in repr(kernel)


def test_a_bucket_is_found_again_from_its_record():
    bench = SizedBench()
    first = tuned(dynamic_add_factory(), bench=bench)
    first.check_fn = sized_check(lambda a, b: a + b)
    result = first(64).tune(M=1000)
    assert not result.from_record and result.sizes == {"M": 1024}
    assert result.record["sizes"] == {"M": 1024}
    again = tuned(dynamic_add_factory(), bench=SizedBench())
    reused = again(64).tune(M=1023)
    assert reused.from_record and reused.config == result.config and reused.key == result.key
    # another bucket is another record
    assert first.record_key(64, sizes={"M": 2048}) != result.key


def test_the_record_list_shows_the_bucket(capsys):
    function = tuned(dynamic_add_factory(), bench=SizedBench())
    function(64).tune(M=5)
    assert cli(["tuning"]) == 0
    assert "N=64 M~8" in capsys.readouterr().out


def test_buckets_the_user_chooses():
    bench = SizedBench()
    exact = tuned(dynamic_add_factory(), bench=bench, bucket={"M": lambda m: m})
    kernel = exact(64)
    assert kernel.bucket_of(M=1000) == {"M": 1000}
    coarse = tuned(dynamic_add_factory(), bench=bench,
                   bucket=lambda sizes: {"M": 64 if sizes["M"] <= 64 else 4096})
    assert coarse(64).bucket_of(M=7) == {"M": 64} and coarse(64).bucket_of(M=900) == {"M": 4096}
    # the default rounds to the declared multiple too
    aligned = tuned(dynamic_add_factory(multiple_of=48), bench=bench)
    assert aligned(64).bucket_of(M=96) == {"M": 144}  # 128, up to a multiple of 48
    assert autotuner.next_power_of_two(0) == 1 and autotuner.next_power_of_two(1025) == 2048


@pytest.mark.parametrize("bucket, message", [
    ({"N": lambda n: n}, "bucket= names N, not a T.dynamic size of the kernel (its sizes: M)"),
    (lambda sizes: {}, "bucket= must return a value for each size (M)"),
    ({"M": lambda m: -1}, "bucket= maps M=5 to -1; a bucket is a size"),
    ({"M": lambda m: 100}, "maps M=5 to 100, which is not a multiple of 48"),
])
def test_bad_buckets_are_clear_errors(bucket, message):
    function = tuned(dynamic_add_factory(multiple_of=48), bench=SizedBench(), bucket=bucket)
    with pytest.raises(tilers.TileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        function(64).bucket_of(M=5)


def test_bad_dynamic_calls_and_tunes():
    function = tuned(dynamic_add_factory(), bench=SizedBench())
    with pytest.raises(ValueError, match="parameter 'bucket': expected a function"):
        tilers.autotune(configs=ADD_CONFIGS, bucket=3)(dynamic_add_factory())
    with pytest.raises(tilers.TileError, match=r"T.dynamic sizes \(M\); tune them at some values"):
        function.tune(64)
    with pytest.raises(TypeError, match="expected the sizes M, got K"):
        function(64).tune(K=3)
    kernel = function(64)
    a = np.ones((5, 64), "float32")
    with pytest.raises(ValueError, match="parameter 'B': dimension 0 is 6, but parameter 'A'"):
        kernel(a, np.ones((6, 64), "float32"))
    assert kernel.results == {}  # nothing was tuned for a call that was refused
