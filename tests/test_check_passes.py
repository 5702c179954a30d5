"""tilers.testing.check_passes: every test kernel and a range of random programs agree with
the tile-level result after every pass (no GPU: the lowered stages run on the thread-level
interpreter). About 30 s on a 2-core machine."""

import os
import sys

import pytest
import tilers.testing
from tilers.testing import PassCheckResult

sys.path.insert(0, os.path.dirname(__file__))
import kernels
import progen

# random programs at the small size, in chunks so a failure names its seeds (~20 ms each)
PROGEN_SEEDS = range(1000)
CHUNK = 250


@pytest.mark.parametrize("case", sorted(kernels.COMPILE_CASES))
def test_every_kernel_passes_every_pass(case):
    factory, kwargs = kernels.COMPILE_CASES[case]
    result = tilers.testing.check_passes(factory(**kwargs), seed=1)
    result.assert_ok()
    passes = [s.pass_name for s in result.stages]
    assert "lower_tile_ops" in passes
    lowered = [s for s in result.stages if s.level == "thread"]
    assert lowered and all(s.status == "ok" for s in lowered)


@pytest.mark.parametrize("start", range(PROGEN_SEEDS.start, PROGEN_SEEDS.stop, CHUNK))
def test_random_programs_pass_every_pass(start):
    failures = []
    for seed in range(start, min(start + CHUNK, PROGEN_SEEDS.stop)):
        case = progen.generate(seed, "small")
        try:
            result = tilers.testing.check_passes(case.load(), seed=seed)
        except Exception as error:  # noqa: BLE001 - every failure is reported with its seed
            failures.append(f"{case.describe()}: {type(error).__name__}: {error}")
            continue
        if not result.ok:
            bad = result.first_failure
            failures.append(f"{case.describe()}: {bad.pass_name}: {bad.status}: {bad.message}")
    assert not failures, f"{len(failures)} programs fail:\n" + "\n".join(failures[:5])


def test_condition_reading_past_the_edge_is_guarded():
    # found by the checker: `if` conditions reading a global tensor past its edge were not
    # bounds-checked by lower_tile_ops (tile level reads zero there)
    for seed in (120, 142, 158, 195):
        tilers.testing.check_passes(progen.generate(seed, "small").load(), seed=seed).assert_ok()


def test_accepts_a_jit_factory_and_a_compiled_kernel():
    add = tilers.jit(kernels.add)
    a = tilers.testing.check_passes(add, M=33, N=65)
    b = tilers.testing.check_passes(add(33, 65, target="interp"))
    assert a.ok and b.ok
    assert [s.pass_name for s in a.stages] == [s.pass_name for s in b.stages]


def test_all_blocks_and_table():
    result = tilers.testing.check_passes(kernels.add(100, 300), blocks="all", seed=5)
    assert result.ok and result.blocks == "all" and result.seed == 5
    text = str(result)
    assert "ok" in text.splitlines()[0]
    for name in ("verify", "lower_tile_ops", "plan_shared_memory"):
        assert any(line.split()[0] == name for line in text.splitlines()[2:])
    with pytest.raises(tilers.TileError):
        tilers.testing.check_passes(kernels.add(100, 300), blocks="some")


SYNTHETIC = {
    "name": "matmul",
    "seed": 3,
    "blocks": "edges",
    "arch": "sm_80",
    "stages": [
        {"pass": "verify", "level": "tile", "status": "ok", "message": "", "seconds": 0.01},
        {"pass": "simplify", "level": "tile", "status": "ok", "message": "", "seconds": 0.01},
        {
            "pass": "infer_layouts",
            "level": "tile",
            "status": "skipped",
            "message": "x",
            "seconds": 0,
        },
        {
            "pass": "lower_tile_ops",
            "level": "thread",
            "status": "mismatch",
            "message": "3 of 100 elements of 'C' differ (max error 2.5); first at [0, 7]: want 1, got 3.5",
            "seconds": 0.2,
            "mismatch": {"tensor": "C", "count": 3, "total": 100, "index": [0, 7]},
        },
        {"pass": "plan_shared_memory", "level": "thread", "status": "error", "message": "race"},
    ],
    "ir_before": "kernel matmul(...) level=tile {\n  T.gemm(A_shared, B_shared, acc)\n}",
    "ir_after": "kernel matmul(...) level=thread {\n  mma.sync(...)\n}",
}


def test_a_failure_names_the_first_pass_and_shows_the_ir():
    result = PassCheckResult.from_json(SYNTHETIC)
    assert not result.ok
    assert result.first_failure.pass_name == "lower_tile_ops"
    assert result.first_failure.mismatch["index"] == [0, 7]
    assert "FAILED at lower_tile_ops" in str(result)
    with pytest.raises(AssertionError) as info:
        result.assert_ok()
    message = str(info.value)
    assert message.startswith("pass 'lower_tile_ops' changed the answer of 'matmul'")
    assert "max error 2.5" in message and "first at [0, 7]" in message
    assert "IR before 'lower_tile_ops' (after 'infer_layouts'):" in message
    assert "T.gemm(A_shared, B_shared, acc)" in message
    assert "IR after 'lower_tile_ops':" in message and "mma.sync" in message
