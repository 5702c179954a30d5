"""Command line: `python -m tilers dump FILE.py::FUNC [--param name=value ...] -o out.json`."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import sys

from ._trace import PrimFunc, trace
from .errors import TileError
from .jit import JitFunction


def parse_value(text: str):
    """A Python literal (1024, 0.5, True) where the text is one, else the text (a dtype name)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def load_object(target: str):
    path, _, name = target.partition("::")
    if not name:
        raise SystemExit(f"expected FILE.py::FUNC, got {target!r}")
    spec = importlib.util.spec_from_file_location("__tilers_dump__", path)
    if spec is None:
        raise SystemExit(f"cannot load {path!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


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
    program = trace(obj, params)
    with open(args.output, "w") as out:
        json.dump(program, out, indent=1)
        out.write("\n")


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
    args = parser.parse_args(argv)
    try:
        dump(args)
    except TileError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
