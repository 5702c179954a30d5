"""Command line: `python -m tilers dump FILE.py::FUNC [--param name=value ...] -o out.json`
writes a traced program; `python -m tilers tuning [--kernel NAME] [--plot PATH]` lists (and
draws) the autotuner's records; `python -m tilers tune FILE.py::NAME [--args ...] [--backend
process|ray]` tunes an autotuned factory (one worker per GPU, or a Ray cluster); `python -m
tilers doctor` says what the machine has for tilers (driver, GPUs, NVRTC, torch, tilers-cc)
and how to fix what is missing."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys

from ._trace import PrimFunc, program_json, trace
from .errors import TileError
from .jit import JitFunction


def parse_value(text: str):
    """A Python literal (1024, 0.5, True) where the text is one, else the text (a dtype name)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def load_object(target: str):
    """The object FILE.py::NAME names; a one-line error (SystemExit) when there is none."""
    path, _, name = target.partition("::")
    if not name:
        raise SystemExit(f"tilers dump: expected FILE.py::FUNC, got {target!r}")
    if not os.path.isfile(path):
        raise SystemExit(f"tilers dump: no such file: {path}")
    spec = importlib.util.spec_from_file_location("__tilers_dump__", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"tilers dump: cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)  # the user's code: its own errors keep their traceback
    try:
        return getattr(module, name)
    except AttributeError:
        kernels = sorted(
            n for n, v in vars(module).items() if isinstance(v, (PrimFunc, JitFunction))
        )
        found = f"kernels there: {', '.join(kernels)}" if kernels else "it defines no kernel"
        raise SystemExit(f"tilers dump: {path} has no {name!r} ({found})") from None


def dump(args) -> None:
    obj = load_object(args.target)
    params = {}
    for item in args.param:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--param expects name=value, got {item!r}")
        params[name] = parse_value(value)
    if isinstance(obj, JitFunction):
        factory_args = [parse_value(v) for v in args.args.split(",")] if args.args else []
        obj = obj.prim_func(*factory_args)
    if not isinstance(obj, PrimFunc):
        raise SystemExit(f"{args.target} is neither a @T.prim_func nor a @tilers.jit factory")
    text = program_json(trace(obj, params))
    try:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text + "\n")
    except OSError as error:
        raise SystemExit(f"tilers dump: cannot write {args.output}: {error.strerror}") from None


def problem_text(problem: dict, sizes: dict | None = None) -> str:
    """The problem's arguments, then the T.dynamic bucket a record was tuned at (M~1024)."""
    parts = [f"{k}={v}" for k, v in problem.items()]
    parts += [f"{k}~{v}" for k, v in (sizes or {}).items()]
    return " ".join(parts) or "-"


def tune(args) -> int:
    """Tune an autotuned factory of a file for the given arguments (its record is written
    where the search runs: this process)."""
    from .autotuner import AutotunedFunction, config_text

    path, _, name = args.target.partition("::")
    if not name or not os.path.isfile(path):
        raise SystemExit(f"tilers tune: expected FILE.py::NAME of an existing file, got {args.target!r}")
    # imported under its own name, from its folder: the benchmark workers import it again
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module = importlib.import_module(os.path.splitext(os.path.basename(path))[0])
    tuned = getattr(module, name, None)
    if not isinstance(tuned, AutotunedFunction):
        raise SystemExit(f"tilers tune: {args.target} is not an @tilers.autotune factory")
    if args.backend:
        tuned.backend = args.backend
    if args.devices:
        tuned.devices = args.devices
    if args.timeout:
        tuned.timeout = args.timeout
    factory_args = [parse_value(v) for v in args.args.split(",")] if args.args else []
    result = tuned.tune(*factory_args, force=args.force)
    how = "reused the record" if result.from_record else f"searched {len(result.results)} configs"
    print(f"{name}{tuple(factory_args)}: {how} in {result.seconds:.1f} s; best "
          f"{config_text(result.config)}, {result.ms:.4f} ms (record {result.key})")
    return 0


def tuning(args) -> int:
    """List the tuning records (problem -> best config -> time, TFLOP/s); --plot draws them."""
    from .autotuner import TuningRecords, config_text

    records = TuningRecords(args.dir).all()
    if args.kernel:
        records = [r for r in records if args.kernel in r.get("kernel", "")]
    if not records:
        print(f"no tuning records in {TuningRecords(args.dir).directory}")
        return 0
    header = ["kernel", "problem", "device", "best config", "ms", "TFLOP/s", "GB/s",
              "configs", "tuned in", "created"]
    rows = []
    for record in records:
        rows.append([
            record.get("kernel", "?").rsplit(".", 1)[-1],
            problem_text(record.get("problem", {}), record.get("sizes")),
            record.get("device", "?"),
            config_text(record["best"]),
            f"{record['ms']:.4f}",
            f"{record['tflops']:.1f}" if record.get("tflops") else "-",
            f"{record['gbps']:.0f}" if record.get("gbps") else "-",
            str(record.get("configs", "?")),
            f"{record['seconds']:.1f} s" if record.get("seconds") is not None else "-",
            record.get("created", "?"),
        ])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    if args.plot:
        plot_records(records, args.plot)
        print(f"wrote {args.plot}")
    return 0


def plot_records(records: list, path: str) -> None:
    """One panel per record (kernel and problem): every timed config's throughput, the
    best in a darker color. TFLOP/s where the record knows the flops, else GB/s, else 1/ms."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise SystemExit(f"--plot needs matplotlib (pip install matplotlib): {error}") from None
    from .autotuner import config_text

    count = len(records)
    columns = min(count, 2)
    rows = (count + columns - 1) // columns
    figure, axes = plt.subplots(
        rows, columns, figsize=(8 * columns, 0.5 + 3.5 * rows), squeeze=False
    )
    for axis, record in zip(axes.flat, records):
        timed = [r for r in record.get("results", []) if r.get("status") == "ok"]
        timed.sort(key=lambda r: r["ms"])
        if record.get("flops"):
            unit, values = "TFLOP/s", [record["flops"] / r["ms"] / 1e9 for r in timed]
        elif record.get("bytes"):
            unit, values = "GB/s", [record["bytes"] / r["ms"] / 1e6 for r in timed]
        else:
            unit, values = "runs per ms", [1 / r["ms"] for r in timed]
        labels = [config_text(r["config"]) for r in timed]
        colors = ["tab:blue" if r["config"] == record["best"] else "tab:gray" for r in timed]
        positions = range(len(timed))
        axis.barh(list(positions), values, color=colors)
        axis.set_yticks(list(positions), labels, fontsize=6)
        axis.invert_yaxis()
        axis.set_xlabel(unit)
        name = record.get("kernel", "?").rsplit(".", 1)[-1]
        axis.set_title(
            f"{name} {problem_text(record.get('problem', {}), record.get('sizes'))} on {record.get('device', '?')}",
            fontsize=8,
        )
    for axis in list(axes.flat)[count:]:
        axis.set_visible(False)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    progress = [r for r in records if any(x.get("finished") is not None for x in r.get("results", []))]
    if progress:
        stem, ext = os.path.splitext(path)
        plot_progress(progress, f"{stem}-progress{ext or '.png'}")


def plot_progress(records: list, path: str) -> None:
    """Per record: the configs each device finished over the search's time (a line per GPU:
    their slopes are the devices' throughput) and the best time found so far."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(records), 1, figsize=(8, 0.5 + 3 * len(records)), squeeze=False)
    for axis, record in zip(axes.flat, records):
        done = sorted((r for r in record["results"] if r.get("finished") is not None),
                      key=lambda r: r["finished"])
        devices = sorted({str(r.get("device")) for r in done})
        for device in devices:
            times = [r["finished"] for r in done if str(r.get("device")) == device]
            axis.step(times, range(1, len(times) + 1), where="post", label=f"device {device}")
        axis.set_xlabel("seconds into the search")
        axis.set_ylabel("configs finished")
        best, curve = None, []
        for r in done:
            if r.get("status") == "ok" and (best is None or r["ms"] < best):
                best = r["ms"]
            curve.append(best)
        twin = axis.twinx()
        twin.step([r["finished"] for r in done], curve, where="post", color="black", linestyle=":",
                  label="best so far")
        twin.set_ylabel("best ms so far")
        name = record.get("kernel", "?").rsplit(".", 1)[-1]
        axis.set_title(f"{name} {problem_text(record.get('problem', {}), record.get('sizes'))}", fontsize=8)
        axis.legend(fontsize=6, loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    print(f"wrote {path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilers")
    commands = parser.add_subparsers(dest="command", required=True)
    dump_parser = commands.add_parser("dump", help="write the traced program (docs/format.md)")
    dump_parser.add_argument("target", help="FILE.py::FUNC (a prim_func or a @tilers.jit factory)")
    dump_parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="rebind a free name of the prim_func (repeatable)",
    )
    dump_parser.add_argument("--args", default="", help="factory arguments, e.g. 1024,1024")
    dump_parser.add_argument("-o", "--output", required=True, help="where to write the JSON")
    tuning_parser = commands.add_parser(
        "tuning", help="list the autotuner's records (problem, best config, time, TFLOP/s)"
    )
    tuning_parser.add_argument("--kernel", default="", help="only kernels whose name has this")
    tuning_parser.add_argument(
        "--dir", default=None, help="the records' folder (default: $TILERS_CACHE_DIR/tuning)"
    )
    tuning_parser.add_argument("--plot", metavar="PATH", help="draw every config's throughput (PNG)")
    tune_parser = commands.add_parser(
        "tune", help="tune an @tilers.autotune factory (FILE.py::NAME) for some arguments"
    )
    tune_parser.add_argument("target", help="FILE.py::NAME of an @tilers.autotune factory")
    tune_parser.add_argument("--args", default="", help="the factory's arguments, e.g. 4096,4096,4096")
    tune_parser.add_argument("--backend", choices=["local", "process", "ray"], default=None,
                             help="where configs are timed (default: the factory's own)")
    tune_parser.add_argument("--devices", default=None, help="GPU indices for --backend process, e.g. 0,1")
    tune_parser.add_argument("--timeout", type=float, default=None, help="seconds a config may take")
    tune_parser.add_argument("--force", action="store_true", help="search even if a record exists")
    commands.add_parser(
        "doctor", help="what this machine has for tilers (driver, NVRTC, GPU, torch) and fixes"
    )
    args = parser.parse_args(argv)
    if args.command == "doctor":
        from .doctor import main as doctor

        return doctor()
    if args.command == "tuning":
        return tuning(args)
    if args.command == "tune":
        return tune(args)
    try:
        dump(args)
    except TileError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
