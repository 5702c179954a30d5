#!/usr/bin/env python3
"""Random tile programs on the GPU, against the interpreter and the numpy reference.

    python3 scripts/progen-gpu.py [--start 0] [--count 500] [--size small] [--max-failures 20]

For every seed: generate the program (tests/progen.py), compile it for this GPU
(target="auto"), run it on torch CUDA tensors, run the interpreter on the same inputs, and
compare both ways:

* GPU vs numpy reference, within the reference's per-element bound widened for float32
  multiply-add contraction (exact wherever the reference is exact: integer programs,
  copies, + - * / sqrt in fp16/bf16, casts);
* GPU vs interpreter: equal for integers; for floats within the sum of both sides' bounds
  (GPU math functions may differ from the interpreter's by a few ulps).

All programs run in this one process; an exception is recorded with its seed and the run
goes on, up to --max-failures failures. The summary (counts, failures with seeds, messages
and sources) is written to $OUT/progen-gpu-<date>.json (bench/results/ without $OUT).
"""

import argparse
import collections
import datetime
import json
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import numpy as np  # noqa: E402
import progen  # noqa: E402


def to_torch(torch, array):
    if not isinstance(array, np.ndarray):
        return array  # a scalar parameter
    if array.dtype == progen.BF16:
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16).cuda()
    return torch.from_numpy(array.copy()).cuda()


def to_numpy(torch, tensor):
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(progen.BF16)
    return tensor.numpy()


def compare_to_interpreter(case, inputs, gpu_outs, cpu_outs):
    """Messages for elements where GPU and interpreter differ by more than both bounds."""
    messages = []
    gpu_bounds = case.reference_bounds(inputs, gpu=True)
    cpu_bounds = case.reference_bounds(inputs, gpu=False)
    worst = 0.0
    for p, g, c, (_, eg), (_, ec) in zip(case.outputs, gpu_outs, cpu_outs, gpu_bounds, cpu_bounds):
        kind = np.float64 if progen.is_float(p.dtype) else np.int64
        g, c = np.asarray(g).astype(kind), np.asarray(c).astype(kind)
        slack = eg + ec
        known = np.isfinite(slack)
        with np.errstate(invalid="ignore"):
            diff = np.abs(g - c)
            same = (g == c) | (np.isnan(g) & np.isnan(c)) | (diff <= slack)
        if diff.size:
            finite = diff[np.isfinite(diff)]
            worst = max(worst, float(finite.max()) if finite.size else 0.0)
        bad = known & ~same
        if bad.any():
            first = tuple(int(x) for x in np.argwhere(bad)[0])
            messages.append(
                f"{p.name}: {int(bad.sum())} elements differ from the interpreter; first at "
                f"{first}: gpu {g[first]!r}, interpreter {c[first]!r}"
            )
    return messages, worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--size", default="small", choices=sorted(progen.SIZES))
    parser.add_argument("--max-failures", type=int, default=20)
    parser.add_argument(
        "--no-interpreter", action="store_true", help="compare with the numpy reference only"
    )
    args = parser.parse_args()

    import tilers
    import tilers._tilers
    import torch

    use_interp = not args.no_interpreter and hasattr(tilers._tilers, "interpret")
    started = time.time()
    counts = collections.Counter()
    families = collections.Counter()
    failures = []
    checked = skipped = 0
    worst_vs_interp = 0.0
    last = args.start - 1
    for seed in range(args.start, args.start + args.count):
        if len(failures) >= args.max_failures:
            break
        last = seed
        case = progen.generate(seed, args.size)
        families[case.family] += 1
        stage = "compile"
        try:
            kernel = case.compile(target="auto")
            inputs = case.make_inputs()
            stage = "gpu run"
            tensors = [to_torch(torch, a) for a in inputs]
            gpu_outs = case.collect(tensors, kernel(*tensors))
            torch.cuda.synchronize()
            gpu_outs = [to_numpy(torch, t) for t in gpu_outs]
            stage = "check"
            ok, message, n_checked, n_skipped = case.check(inputs, gpu_outs, gpu=True)
            checked += n_checked
            skipped += n_skipped
            messages = [] if ok else [f"vs reference: {message}"]
            if use_interp:
                stage = "interpreter"
                interp = case.compile(target="interp")
                cpu_outs = case.run(interp, inputs)
                more, worst = compare_to_interpreter(case, inputs, gpu_outs, cpu_outs)
                worst_vs_interp = max(worst_vs_interp, worst)
                messages += [f"vs interpreter: {m}" for m in more]
            status = "ok" if not messages else "mismatch"
        except Exception as error:  # noqa: BLE001 - recorded with its seed
            status = "error"
            text = "".join(traceback.format_exception_only(type(error), error)).strip()
            messages = [f"{stage}: {text[-2000:]}"]
        counts[status] += 1
        if status != "ok":
            failures.append(
                {
                    "seed": seed,
                    "status": status,
                    "case": case.describe(),
                    "message": "; ".join(messages),
                    "source": case.source,
                }
            )
            print(f"FAIL {case.describe()}\n     {'; '.join(messages)[:400]}", flush=True)
        if (seed - args.start + 1) % 100 == 0:
            print(
                f"{seed - args.start + 1} programs, {len(failures)} failures, "
                f"{time.time() - started:.0f} s",
                flush=True,
            )

    elapsed = time.time() - started
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            cwd=HERE,
        ).stdout.strip()
    except OSError:
        commit = ""
    programs = sum(counts.values())
    summary = {
        "what": "tests/progen.py programs: GPU vs numpy reference and vs the interpreter",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": os.environ.get("TILERS_COMMIT", commit) or "unknown",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "size": args.size,
        "seeds": [args.start, last],
        "programs": programs,
        "passed": counts["ok"],
        "mismatches": counts["mismatch"],
        "errors": counts["error"],
        "stopped_early": len(failures) >= args.max_failures,
        "compared_with_interpreter": use_interp,
        "max_abs_diff_vs_interpreter": worst_vs_interp,
        "families": dict(families),
        "elements_checked": checked,
        "elements_skipped": skipped,
        "seconds": round(elapsed, 1),
        "failures": failures,
    }
    out_dir = os.environ.get("OUT") or os.path.join(HERE, "..", "bench", "results")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"progen-gpu-{datetime.date.today().isoformat()}.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
    print(
        f"{programs} programs (seeds {args.start}..{last}) in {elapsed:.0f} s: "
        f"{counts['ok']} passed, {counts['mismatch']} mismatches, {counts['error']} errors"
    )
    print(f"wrote {path}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
