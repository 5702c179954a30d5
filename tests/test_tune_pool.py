"""The autotuner's benchmark workers (backend="process") without a GPU: configs checked (on
the interpreter) and timed (a fake timing hook) in worker processes, one per device; a
config that hangs, crashes its worker or hits a CUDA error is recorded as failed with the
reason while the search finishes; the finalists are timed again on one device; the same best
as the in-process search; misuse (a function no worker can import)."""

import os
import sys

import pytest
import tilers
from tilers import TileError

sys.path.insert(0, os.path.dirname(__file__))
import tune_targets  # noqa: E402


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILERS_CACHE_DIR", str(tmp_path / "cache"))


def run(devices, **bench):
    add = tune_targets.add
    add.devices = devices
    add.bench_fn = tune_targets.Bench(**bench)
    return add.tune(100, 200, force=True)


def by_config(result):
    return {(r.config["block_M"], r.config["block_N"]): r for r in result.results}


@pytest.mark.parametrize("devices", [["cpu"], ["cpu", "cpu"]])
def test_the_workers_find_the_same_best_as_the_local_search(devices):
    result = run(devices)
    assert result.config == {"block_M": 64, "block_N": 128, "threads": 128}
    assert all(r.status in ("ok", "stopped early", "skipped") for r in result.results)
    assert all(r.device == "cpu" for r in result.results if r.status == "ok")
    local = tune_targets.add
    local.backend = "local"
    try:
        assert local.tune(100, 200, force=True).config == result.config
    finally:
        local.backend = "process"


def test_a_hanging_and_a_crashing_config_are_recorded_and_the_search_finishes():
    result = run(["cpu", "cpu"], hang={"block_M": 32, "block_N": 64, "threads": 128},
                 crash={"block_M": 16, "block_N": 128, "threads": 128})
    results = by_config(result)
    assert results[(32, 64)].status == "run error"
    assert "still running after 8 s" in results[(32, 64)].error
    assert results[(16, 128)].status == "run error"
    assert "died (exit code 3)" in results[(16, 128)].error
    assert result.config == {"block_M": 64, "block_N": 128, "threads": 128}


def test_a_cuda_error_loses_only_its_config():
    result = run(["cpu"], cuda_error={"block_M": 64, "block_N": 64, "threads": 128})
    results = by_config(result)
    assert results[(64, 64)].status == "run error" and "ILLEGAL_ADDRESS" in results[(64, 64)].error
    assert result.config == {"block_M": 64, "block_N": 128, "threads": 128}


def test_the_record_says_where_each_config_ran(tmp_path):
    add = tune_targets.add
    add.use_records, add.records = True, tilers.autotuner.TuningRecords(str(tmp_path / "records"))
    try:
        result = run(["cpu"])
        saved = add.records.load(result.key)
        assert {r.get("device") for r in saved["results"] if r["status"] == "ok"} == {"cpu"}
        assert all(isinstance(r.get("finished"), float) for r in saved["results"] if r["status"] == "ok")
    finally:
        add.use_records, add.records = False, None


def test_a_function_the_workers_cannot_import_is_an_error():
    @tilers.autotune(configs=tune_targets.CONFIGS, backend="process", verbose=False, records=False)
    @tilers.jit(out_idx=[2], target="cuda:sm_90a")
    def local_add(M, N, block_M, block_N, threads):
        import kernels

        return kernels.add(M, N, "float16", block_M, block_N, threads)

    local_add.bench_fn = tune_targets.Bench()
    local_add.device_info_fn = tune_targets.fake_gpu
    with pytest.raises(TileError, match="define it at the top level of a module"):
        local_add.tune(100, 200, force=True)


def test_bad_backend_options():
    with pytest.raises(ValueError, match="parameter 'backend'"):
        tilers.autotune(configs=tune_targets.CONFIGS, backend="cluster")(tune_targets.add.jit_function)
    with pytest.raises(ValueError, match="parameter 'timeout'"):
        tilers.autotune(configs=tune_targets.CONFIGS, timeout=-1)(tune_targets.add.jit_function)


def test_the_command_line_tunes_a_factory_of_a_file(tmp_path):
    import subprocess

    env = dict(os.environ, TILERS_CACHE_DIR=str(tmp_path / "cache"))
    target = os.path.join(os.path.dirname(__file__), "tune_targets.py") + "::add"
    out = subprocess.run(
        [sys.executable, "-m", "tilers", "tune", target, "--args", "100,200", "--devices", "cpu,cpu",
         "--force"],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    assert "best block_M=64 block_N=128 threads=128" in out.stdout


def test_the_progress_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from tilers.__main__ import plot_records

    add = tune_targets.add
    add.use_records, add.records = True, tilers.autotuner.TuningRecords(str(tmp_path / "records"))
    try:
        run(["cpu", "cpu"])
        plot_records(add.records.all(), str(tmp_path / "tuning.png"))
    finally:
        add.use_records, add.records = False, None
    assert (tmp_path / "tuning.png").stat().st_size > 0
    assert (tmp_path / "tuning-progress.png").stat().st_size > 0
