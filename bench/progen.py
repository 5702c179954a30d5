"""Random tile programs on the CPU: the interpreter against the numpy reference.

    python bench/progen.py [--start 0] [--count 10000] [--minutes 15] [--size small]
                           [--cuda]   # also compile every program's CUDA (no NVRTC)

Runs `--count` programs of tests/progen.py (seeds start, start+1, ...) or as many as fit in
`--minutes`, and writes a summary — counts, seed range, failures with their seeds and
messages, time, commit — to bench/results/progen-cpu-<date>.json (or $OUT).
"""

import argparse
import collections
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import progen  # noqa: E402
import tilers  # noqa: E402
import tilers._tilers  # noqa: E402


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            cwd=HERE,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=False,
            cwd=HERE,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return (out or "unknown") + ("+dirty" if dirty else "")


def run_one(seed, size, cuda):
    """(status, case, message, checked, skipped): status is ok | mismatch | error | compile."""
    case = progen.generate(seed, size)
    stage = "compile"
    try:
        if cuda:
            case.compile(target="cuda:sm_90a")
        kernel = case.compile(target="interp")
        stage = "run"
        inputs = case.make_inputs()
        outputs = case.run(kernel, inputs)
        stage = "check"
        ok, message, checked, skipped = case.check(inputs, outputs)
    except Exception as error:  # noqa: BLE001 - every failure is recorded with its seed
        text = "".join(traceback.format_exception_only(type(error), error)).strip()
        return ("compile" if stage == "compile" else "error"), case, text[-2000:], 0, 0
    return ("ok" if ok else "mismatch"), case, message, checked, skipped


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--size", default="small", choices=sorted(progen.SIZES))
    parser.add_argument("--cuda", action="store_true", help="also compile CUDA for sm_90a")
    parser.add_argument("--name", default=None, help="result file name (default progen-cpu-DATE)")
    args = parser.parse_args()

    if not hasattr(tilers._tilers, "interpret"):
        sys.exit("this tilers build has no interpreter (tilers._tilers.interpret)")
    started = time.time()
    deadline = started + 60 * args.minutes
    counts = collections.Counter()
    families = collections.Counter()
    failures = []
    checked = skipped = 0
    seed = args.start
    for seed in range(args.start, args.start + args.count):
        if time.time() > deadline:
            seed -= 1
            break
        status, case, message, n_checked, n_skipped = run_one(seed, args.size, args.cuda)
        counts[status] += 1
        families[case.family] += 1
        checked += n_checked
        skipped += n_skipped
        if status != "ok":
            failures.append(
                {"seed": seed, "status": status, "case": case.describe(), "message": message}
            )
            print(f"FAIL {status} {case.describe()}\n     {message[:300]}", flush=True)
        done = seed - args.start + 1
        if done % 1000 == 0:
            print(
                f"{done} programs, {len(failures)} failures, {time.time() - started:.0f} s",
                flush=True,
            )
    elapsed = time.time() - started
    programs = sum(counts.values())
    date = datetime.date.today().isoformat()
    summary = {
        "what": "tests/progen.py programs: tilers interpreter vs float64 numpy reference",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "size": args.size,
        "cuda_compiled": args.cuda,
        "seeds": [args.start, args.start + programs - 1],
        "programs": programs,
        "stopped_by_time_limit": programs < args.count,
        "minutes_limit": args.minutes,
        "passed": counts["ok"],
        "mismatches": counts["mismatch"],
        "errors": counts["error"],
        "compile_errors": counts["compile"],
        "families": dict(families),
        "elements_checked": checked,
        "elements_skipped": skipped,
        "seconds": round(elapsed, 1),
        "programs_per_second": round(programs / elapsed, 2) if elapsed else None,
        "failures": failures,
    }
    out_dir = os.environ.get("OUT") or os.path.join(HERE, "results")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{args.name or f'progen-cpu-{date}'}.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
    print(
        f"{programs} programs (seeds {summary['seeds'][0]}..{summary['seeds'][1]}) in "
        f"{elapsed:.0f} s: {counts['ok']} passed, {counts['mismatch']} mismatches, "
        f"{counts['error']} errors, {counts['compile']} compile errors; "
        f"{checked} elements checked, {skipped} skipped; commit {summary['commit']}"
    )
    print(f"wrote {path}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
