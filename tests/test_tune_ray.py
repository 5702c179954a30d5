"""The autotuner on a Ray cluster (backend="ray"), on a local cluster of this machine's CPUs
(compile-only work in the tasks: the checks run on the interpreter, timing is a fake hook):
the same best as the in-process search, a hanging and a crashing config recorded as failed
while the search finishes, the asking process the only writer of the record."""

import os
import sys

import pytest
import tilers

ray = pytest.importorskip("ray")  # tilers[ray]; scripts/setup installs it for CI

sys.path.insert(0, os.path.dirname(__file__))
import tune_targets  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def local_cluster():
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(sys.path)}})
    yield
    ray.shutdown()


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILERS_CACHE_DIR", str(tmp_path / "cache"))


def run(**bench):
    add = tune_targets.add_ray
    add.bench_fn = tune_targets.Bench(**bench)
    return add.tune(100, 200, force=True)


def test_the_cluster_finds_the_same_best():
    result = run()
    assert result.config == {"block_M": 64, "block_N": 128, "threads": 128}
    ran = [r for r in result.results if r.status == "ok"]
    assert ran and all(str(r.device).endswith(":cpu") for r in ran)


def test_a_hanging_and_a_crashing_config_are_recorded(tmp_path):
    add = tune_targets.add_ray
    add.use_records, add.records = True, tilers.autotuner.TuningRecords(str(tmp_path / "records"))
    try:
        result = run(hang={"block_M": 32, "block_N": 64, "threads": 128},
                     crash={"block_M": 16, "block_N": 128, "threads": 128})
    finally:
        add.use_records, records, add.records = False, add.records, None
    results = {(r.config["block_M"], r.config["block_N"]): r for r in result.results}
    assert results[(32, 64)].status == "run error" and "still running after 15 s" in results[(32, 64)].error
    assert results[(16, 128)].status == "run error" and "failed" in results[(16, 128)].error
    assert result.config == {"block_M": 64, "block_N": 128, "threads": 128}
    # one record, written by this process
    assert [r["key"] for r in records.all()] == [result.key]
