"""The pass-by-pass checker on the 256x256x256 fp16 GEMM tile program (128x128x32 tiles,
3 stages, every block): time to compile it and run every stage on the interpreters (tile
level and thread level). Target under 30 s on the CI machine (a measurement, not a test).
Writes bench/results/check-passes-<date>.json."""

import datetime
import json
import os
import platform
import subprocess
import sys
import time

import tilers.testing

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import kernels  # noqa: E402


def main():
    prim_func = kernels.matmul(256, 256, 256, block_M=128, block_N=128, block_K=32, num_stages=3)
    t = time.perf_counter()
    result = tilers.testing.check_passes(prim_func, blocks="all", seed=0)
    seconds = time.perf_counter() - t
    print(result)
    result.assert_ok()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit or "unknown",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "program": "matmul 256x256x256 fp16, 128x128x32 tiles, 3 stages, 4 blocks (all run)",
        "seconds_total": round(seconds, 3),
        "target_seconds": 30,
        "stages": {
            s.pass_name + (f"#{i}" if s.pass_name == "simplify" and i else ""): round(s.seconds, 3)
            for i, s in enumerate(result.stages)
        },
    }
    print(f"check_passes, all blocks: {seconds:.2f} s (target < 30 s)")
    out = os.path.join(
        os.path.dirname(__file__), "results", f"check-passes-{info['date'][:10]}.json"
    )
    with open(out, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
