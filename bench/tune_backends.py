"""The autotuner's process backend beside the in-process one on this machine's GPU(s)
(issue 20): for each autotune example, search with backend="local" and backend="process"
from a cold start (no records), then re-time the two chosen configs interleaved over
TUNE_ROUNDS rounds and report the median ratio (process's choice / local's choice: 1.00 when
both pick the same config; the goal is <= 1.03). Then tune bench/tune_faults.py's add, whose
configs include one kernel that spins forever and one that traps: both must be recorded as
failed, with the reason, while the search finishes with a good config.

    python bench/tune_backends.py          # needs a GPU and torch
"""

import os
import statistics
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "examples")]

import autotune_elementwise  # noqa: E402
import autotune_gemm  # noqa: E402
import torch  # noqa: E402
import tune_faults  # noqa: E402
from common import time_ms, write_results  # noqa: E402

ROUNDS = int(os.environ.get("TUNE_ROUNDS", "5"))


def search(tuned, backend, *args):
    tuned.backend, tuned.use_records = backend, False
    start = time.perf_counter()
    result = tuned.tune(*args, force=True)
    return result, time.perf_counter() - start


def compare(name, tuned, args, make_inputs):
    local, local_s = search(tuned, "local", *args)
    proc, proc_s = search(tuned, "process", *args)
    inputs = make_inputs()
    a, b = local.kernel, proc.kernel
    for k in (a, b):
        k(*inputs)
    torch.cuda.synchronize()
    ratios = []
    for _ in range(ROUNDS):  # A, B, A, B ...
        ta = time_ms(lambda: a(*inputs), 50)
        tb = time_ms(lambda: b(*inputs), 50)
        ratios.append(tb / ta)
    failed = [r for r in proc.results if r.status not in ("ok", "stopped early", "skipped")]
    return {
        "example": name,
        "shape": "x".join(map(str, args)),
        "local_config": local.config,
        "process_config": proc.config,
        "local_ms": local.ms,
        "process_ms": proc.ms,
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "local_search_s": round(local_s, 1),
        "process_search_s": round(proc_s, 1),
        "process_failed": [(r.config, r.status, r.error) for r in failed],
    }


def main():
    rows = []
    rows.append(
        compare(
            "autotune_elementwise.add",
            autotune_elementwise.add,
            (8192, 8192),
            lambda: [torch.randn(8192, 8192, device="cuda", dtype=torch.float16) for _ in range(2)],
        )
    )
    rows.append(
        compare(
            "autotune_gemm.matmul",
            autotune_gemm.matmul,
            (4096, 4096, 4096),
            lambda: [torch.randn(4096, 4096, device="cuda", dtype=torch.float16) for _ in range(2)],
        )
    )
    for r in rows:
        print(
            f"{r['example']} {r['shape']}: local {r['local_config']} {r['local_ms']:.4f} ms "
            f"({r['local_search_s']} s), process {r['process_config']} {r['process_ms']:.4f} ms "
            f"({r['process_search_s']} s); re-timed process/local median {r['ratio_median']:.3f} "
            f"[{r['ratio_min']:.3f}, {r['ratio_max']:.3f}]"
        )

    tuned = tune_faults.faulty_add
    start = time.perf_counter()
    result = tuned.tune(4096, 4096, force=True)
    seconds = time.perf_counter() - start
    faults = {}
    for r in result.results:
        print(f"  {r.config} -> {r.status} {r.error or ''}".rstrip())
        if r.config["fault"] != "none":
            faults[r.config["fault"]] = {"status": r.status, "error": r.error}
    print(f"faulty search finished in {seconds:.1f} s with {result.config}")
    ok = (
        all(f["status"] == "run error" for f in faults.values())
        and len(faults) == 2
        and result.config["fault"] == "none"
    )
    print("faults recorded as failed, search finished:", "OK" if ok else "FAILED")
    write_results(
        "tune-backends",
        rows,
        extra={
            "faults": faults,
            "faulty_best": result.config,
            "faulty_search_s": round(seconds, 1),
            "faults_ok": ok,
            "rounds": ROUNDS,
        },
    )


if __name__ == "__main__":
    main()
