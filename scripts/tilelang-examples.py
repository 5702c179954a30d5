#!/usr/bin/env python3
"""How many of TileLang's public examples run on tilers with only the import renamed.

    python scripts/tilelang-examples.py [--mirror GITDIR | --examples DIR] [--timeout 120]
        [--only SUBSTR ...] [--list] [--jobs N] [--workdir DIR] [--json PATH]

TileLang's examples are not part of this repository and are never copied into it: the
script extracts them at run time, from a bare git mirror (--mirror, default
/work/.mirror/tile-ai+tilelang/repo, at --rev, default HEAD) or from a plain directory
(--examples DIR: a TileLang checkout, or its examples/ folder itself), into a temporary
directory (or --workdir DIR). There every .py file of the tree has the module name
`tilelang` replaced by `tilers` (`import tilelang`, `from tilelang.x import`, `tilelang.`;
`tilelang_utils` or `example_tilelang_gemm` are other names and stay), so each example
keeps its sibling helper modules in the same layout.

Each selected example then runs as `python FILE`, no arguments (argparse defaults), cwd at
the file's folder, PYTHONPATH as it is (the installed tilers is the one used), under
--timeout seconds, and its outcome is classified:

    pass            exit status 0
    needs GPU       stopped because no CUDA GPU is usable (torch's "Found no NVIDIA driver",
                    "Torch not compiled with CUDA", tilers' "with no GPU to run it", ...):
                    it got through tilers as far as it could without one
    missing name    an AttributeError / ImportError / ModuleNotFoundError / NameError about
                    a tilers name (`tilers.language.alloc_var`, `JITKernel.get_profiler`)
    tilers error    a tilers TileError / CompileError (first message line and the
                    example's line it points at)
    wrong result    AssertionError / torch.testing mismatch
    needs package   ModuleNotFoundError for another package (triton, einops, ...)
    timeout         still running after --timeout seconds
    other           anything else (first line of the exception)

Out of scope, listed with the reason and not run: test files (test_*.py, regression_*.py,
conftest.py), AMD-only examples (amd/rocm/hip/cdna/gfx/mfma in the path, tilelang.rocm or a
hip target in the code), Blackwell-only ones (sm100/sm120/tcgen05/blackwell in the path,
tcgen05/TMEM in the code), files that use TVM directly (`import tvm`, `from tilelang import
tvm`, also through a local helper module) or tilelang.carver, examples written to fail
(their docstring says they hold "a bug that triggers an error" or keep "the ability to
reproduce the error": AutoDD's input and its expected output), files that do not use
tilelang at all (triton or torch references, model code), Triton versions that borrow only
tilelang's benchmark helpers ("triton" in the file name) and helper modules with nothing to
run (no `__main__` block and no top-level statement besides imports and definitions).

On a machine with no GPU the examples that get past tilers' compile end in "needs GPU";
the table shows the example line where each stopped (most create CUDA tensors, some before
compiling anything). The examples also want einops, packaging and tqdm (and fla for a few)
next to torch. With --workdir DIR the renamed tree and each run's log (DIR/logs) are kept.

To run on a machine without the mirror, export the tree first and carry the folder (keep it
out of the repository):

    python scripts/tilelang-examples.py --export /tmp/tilelang-examples
    python scripts/tilelang-examples.py --examples /tmp/tilelang-examples --json survey.json
"""

from __future__ import annotations

import argparse
import ast
import collections
import concurrent.futures
import datetime
import io
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_MIRROR = "/work/.mirror/tile-ai+tilelang/repo"
WORKDIR_MARKER = ".tilelang-examples-workdir"
COMMIT_FILE = ".tilelang-commit"
OUTCOMES = [
    "pass",
    "needs GPU",
    "missing name",
    "tilers error",
    "wrong result",
    "needs package",
    "timeout",
    "other",
    "out of scope",
]
# what TileLang's examples need that the issue leaves out until the quantized work lands:
# fp8/fp6/fp4/int4/tfloat32 dtypes (tilers names them and refuses them with this message)
QUANTIZED = re.compile(
    r"is not supported by tilers yet \(float8/float6/float4, int4 and tfloat32|tilers\.language\.fp8"
)
TAIL_CHARS = 6000  # of each example's stdout and stderr kept in the JSON

# ---------------------------------------------------------------------------------------
# Getting the examples
# ---------------------------------------------------------------------------------------


def git(gitdir: str, *args: str, binary: bool = False):
    out = subprocess.run(
        ["git", f"--git-dir={gitdir}", *args], check=True, capture_output=True
    ).stdout
    return out if binary else out.decode()


def extract_from_mirror(gitdir: str, rev: str, dest: Path) -> str:
    """Writes the mirror's examples/ at rev into dest/examples; returns the commit."""
    commit = git(gitdir, "rev-parse", f"{rev}^{{commit}}").strip()
    data = git(gitdir, "archive", "--format=tar", commit, "examples", binary=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = [m for m in tar.getmembers() if m.isfile() or m.isdir()]
        for m in members:
            target = (dest / m.name).resolve()
            if not str(target).startswith(str(dest.resolve())):
                raise SystemExit(f"refusing an archive entry outside the workdir: {m.name}")
        tar.extractall(dest, members=members)
    return commit


def examples_root_of(directory: Path) -> Path:
    """A TileLang checkout (with examples/) or its examples/ folder itself."""
    if (directory / "examples").is_dir():
        return directory / "examples"
    return directory


def commit_of_directory(directory: Path) -> str | None:
    for d in (directory, directory.parent):
        f = d / COMMIT_FILE
        if f.is_file():
            return f.read_text().strip() or None
    try:
        out = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True
        )
        if out.returncode == 0:
            return out.stdout.strip()
    except OSError:
        pass
    return None


def prepare_workdir(path: str | None) -> tuple[Path, bool]:
    """(workdir, is_temporary). A given one must be empty or made by this script before."""
    if path is None:
        return Path(tempfile.mkdtemp(prefix="tilelang-examples-")), True
    work = Path(path).absolute()
    if work.exists() and any(work.iterdir()) and not (work / WORKDIR_MARKER).exists():
        raise SystemExit(f"--workdir {work} is not empty and was not made by this script")
    if work.exists():
        for sub in ("examples", "logs"):
            shutil.rmtree(work / sub, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    (work / WORKDIR_MARKER).write_text("made by scripts/tilelang-examples.py\n")
    return work, False


# ---------------------------------------------------------------------------------------
# Renaming
# ---------------------------------------------------------------------------------------

# `tilelang` as a whole name: not part of tilelang_utils, example_tilelang_x or TileLang.
RENAME = re.compile(r"(?<![\w])tilelang(?![\w])")


def rename_tree(root: Path) -> int:
    """Replaces the module name in every .py file under root; returns how many changed."""
    changed = 0
    for f in sorted(root.rglob("*.py")):
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = RENAME.sub("tilers", text)
        if new != text:
            f.write_text(new, encoding="utf-8")
            changed += 1
    return changed


# ---------------------------------------------------------------------------------------
# Selection
# ---------------------------------------------------------------------------------------

AMD_PATH = re.compile(r"^(amd|rocm|hip|cdna\d*|gfx\d*|mfma)$", re.I)
BLACKWELL_PATH = re.compile(r"^(sm1[0-2]\d[a-z]?|tcgen0?5\w*|blackwell)$", re.I)
AMD_CODE = re.compile(
    r"\btilelang\.rocm\b|target\s*=\s*['\"](hip|rocm)\b|['\"]hip\s+-mcpu|\bT\.(mfma|amd_)\w*"
)
BLACKWELL_CODE = re.compile(r"tcgen0?5|\balloc_tmem\b|\bT\.tmem_\w*")
# an example written to fail (AutoDD's input: "a bug that triggers an error"), by its docstring
WRITTEN_TO_FAIL = re.compile(
    r"\ba bug that triggers an error\b|\bability to reproduce the error\b"
    r"|\b(?:intentionally|deliberately) (?:fails|raises|broken)\b",
    re.I,
)
CARVER = re.compile(r"\btilelang\.carver\b|from\s+tilelang\s+import\s+[^\n]*\bcarver\b")


def path_tokens(rel: str) -> list[str]:
    return [t for t in re.split(r"[/_.\-]+", rel) if t]


def parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def imported_modules(tree: ast.Module) -> list[tuple[str, list[str]]]:
    """(module, names) for each import anywhere in the file (inside functions too)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                found.append((a.name, []))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found.append(("." * node.level + (node.module or ""), [a.name for a in node.names]))
    return found


def uses_tvm(tree: ast.Module | None, text: str) -> bool:
    if tree is None:
        return bool(
            re.search(r"^\s*(import|from)\s+tvm\b|from\s+tilelang\s+import\s+tvm", text, re.M)
        )
    for module, names in imported_modules(tree):
        if module == "tvm" or module.startswith("tvm."):
            return True
        if module == "tilelang" and "tvm" in names:
            return True
    return bool(re.search(r"\btilelang\.tvm\b", text))


def has_top_level_code(tree: ast.Module | None) -> bool:
    """Whether running the file does anything: a __main__ block or a top-level statement
    other than imports, definitions, assignments and docstrings."""
    if tree is None:
        return True
    quiet = (
        ast.Import,
        ast.ImportFrom,
        ast.FunctionDef,
        ast.AsyncFunctionDef,
        ast.ClassDef,
        ast.Assign,
        ast.AnnAssign,
        ast.AugAssign,
        ast.Pass,
    )
    for node in tree.body:
        if isinstance(node, quiet):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # docstring
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and re.match(
                r"(tilelang|torch)\.[\w.]*(set_|seed|disable|enable)", ast.unparse(node.value.func)
            )
        ):
            continue  # tilelang.set_log_level(...), torch.manual_seed(...)
        if isinstance(node, ast.Try):  # try: import x / except ImportError: ...
            if all(isinstance(n, quiet) for n in node.body):
                continue
        if isinstance(node, ast.If) and not is_main_guard(node):
            if all(isinstance(n, quiet) for n in node.body + node.orelse):
                continue
        return True
    return False


def is_main_guard(node: ast.If) -> bool:
    return "__main__" in ast.unparse(node.test)


@dataclass
class FileInfo:
    rel: str  # relative to the examples root
    text: str
    tree: ast.Module | None
    local_imports: list[str] = field(default_factory=list)  # rel paths of local modules


def resolve_local(root: Path, rel: str, module: str) -> str | None:
    """The examples-tree file a module name refers to, looked up from the file's folder and
    its parents up to the root (examples append those to sys.path)."""
    here = (root / rel).parent
    if module.startswith("."):
        level = len(module) - len(module.lstrip("."))
        base = here
        for _ in range(level - 1):
            base = base.parent
        parts = [p for p in module.lstrip(".").split(".") if p]
        bases = [base]
    else:
        parts = module.split(".")
        bases = []
        d = here
        while True:
            bases.append(d)
            if d == root or root not in d.parents:
                break
            d = d.parent
    for b in bases:
        cand = b.joinpath(*parts) if parts else b
        for f in (cand.with_suffix(".py") if parts else None, cand / "__init__.py"):
            if f is not None and f.is_file():
                try:
                    return f.relative_to(root).as_posix()
                except ValueError:
                    return None
    return None


def scan(root: Path) -> dict[str, FileInfo]:
    files = {}
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        text = f.read_text(encoding="utf-8", errors="replace")
        files[rel] = FileInfo(rel, text, parse(text))
    for info in files.values():
        if info.tree is None:
            continue
        for module, names in imported_modules(info.tree):
            if module.split(".")[0] in ("tilelang", "tvm", "torch"):
                continue
            hit = resolve_local(root, info.rel, module)
            if hit and hit != info.rel:
                info.local_imports.append(hit)
            for name in names:  # from pkg import submodule
                hit = resolve_local(root, info.rel, f"{module}.{name}")
                if hit and hit != info.rel:
                    info.local_imports.append(hit)
    return files


def direct_reason(info: FileInfo) -> str | None:
    """Why this file alone is out of scope, or None."""
    rel, text = info.rel, info.text
    base = rel.rsplit("/", 1)[-1]
    if base.startswith(("test_", "regression_")) or base == "conftest.py":
        return "test file"
    tokens = path_tokens(rel[:-3])
    if any(BLACKWELL_PATH.match(t) for t in tokens):
        return "Blackwell-only (path)"
    if any(AMD_PATH.match(t) for t in tokens):
        return "AMD-only (path)"
    if AMD_CODE.search(text):
        return "AMD-only (" + AMD_CODE.search(text).group(0) + ")"
    if uses_tvm(info.tree, text):
        return "uses TVM directly"
    if CARVER.search(text):
        return "uses tilelang.carver"
    doc = ast.get_docstring(info.tree) if info.tree is not None else None
    if doc and WRITTEN_TO_FAIL.search(doc):
        return "written to fail (its docstring: " + WRITTEN_TO_FAIL.search(doc).group(0) + ")"
    if BLACKWELL_CODE.search(text):
        return "Blackwell-only (" + BLACKWELL_CODE.search(text).group(0) + ")"
    return None


def transitive_reason(files: dict[str, FileInfo], rel: str) -> str | None:
    """TVM or carver use through a local helper module the file imports."""
    seen, stack = {rel}, list(files[rel].local_imports)
    while stack:
        dep = stack.pop()
        if dep in seen or dep not in files:
            continue
        seen.add(dep)
        info = files[dep]
        if uses_tvm(info.tree, info.text):
            return f"uses TVM through {dep}"
        if CARVER.search(info.text):
            return f"uses tilelang.carver through {dep}"
        stack.extend(info.local_imports)
    return None


def select(files: dict[str, FileInfo]) -> tuple[list[str], dict[str, str]]:
    """(examples to run, {file: reason} for the others)."""
    run, skipped = [], {}
    for rel, info in files.items():
        reason = direct_reason(info)
        if reason is None:
            reason = transitive_reason(files, rel)
        if reason is None or not reason.startswith(
            ("test", "AMD-only (path", "Blackwell-only (path")
        ):
            # a helper's own reason (TVM, a gfx950 branch) is not an example's
            if not imports_tilelang(info):
                reason = "does not use tilelang"
            elif "triton" in path_tokens(rel):
                reason = "Triton version (tilelang only for its benchmark helpers)"
            elif not has_top_level_code(info.tree):
                reason = "helper module (nothing runs)"
        if reason is None:
            run.append(rel)
        else:
            skipped[rel] = reason
    return run, skipped


def imports_tilelang(info: FileInfo) -> bool:
    if info.tree is None:
        return bool(re.search(r"^\s*(import|from)\s+tilelang\b", info.text, re.M))
    return any(m.split(".")[0] == "tilelang" for m, _ in imported_modules(info.tree))


def reason_group(reason: str) -> str:
    """The reason without its particulars, for the counts."""
    if " through " in reason:
        return reason.split(" through ")[0] + " through a helper"
    return re.sub(r"\s*\(.*\)$", "", reason)


# ---------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------


@dataclass
class Result:
    file: str
    outcome: str
    detail: str
    seconds: float
    returncode: int | None
    exception: str | None = None  # the final exception's type
    missing_name: str | None = None
    package: str | None = None
    at: str | None = None  # file:line in the example tree that the error points at
    at_source: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""


RUNNING: set[int] = set()  # process groups of the examples now running


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_one(
    python: str, work_root: Path, rel: str, timeout: float
) -> tuple[int | None, str, str, float]:
    path = work_root / rel
    env = dict(os.environ)
    env.setdefault("MPLBACKEND", "Agg")  # plot examples: no display
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    start = time.monotonic()
    proc = subprocess.Popen(
        [python, path.name],
        cwd=path.parent,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its own process group: a timeout ends its children too
    )
    RUNNING.add(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # a grandchild that left the group holds the pipes
            proc.kill()
            out, err = b"", b"(output lost: a process it started kept the pipes open)"
        rc = None
    finally:
        kill_group(proc.pid)  # leftovers (a worker pool's processes) of a finished example
        RUNNING.discard(proc.pid)
    return rc, out.decode(errors="replace"), err.decode(errors="replace"), time.monotonic() - start


# ---------------------------------------------------------------------------------------
# Reading the outcome
# ---------------------------------------------------------------------------------------

FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')
EXC_LINE = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning|Failed|Group)?)(: (?P<msg>.*))?$"
)
NO_GPU = re.compile(
    "|".join(
        [
            r"Found no NVIDIA driver",
            r"NVIDIA driver on your system is too old",
            r"no CUDA GPUs are available",
            r"No CUDA GPUs are available",
            r"Torch not compiled with CUDA",
            r"CUDA is (required|not available)",
            r"\brequires? (a )?(CUDA|GPU)\b",
            r"needs a GPU",
            r"CUDA driver initialization failed",
            r"CUDA driver version is insufficient",
            r"no CUDA-capable device is detected",
            r"cudaErrorNoDevice",
            r"CUDA_ERROR_NO_DEVICE",
            r"CUDA_ERROR_NOT_INITIALIZED",
            r"Unexpected error from cudaGetDeviceCount",
            r"DeferredCudaCallError",
            r"with no GPU to run it",
            r"on a GPU and none is usable",
            r"\d+ active drivers \(\[\]\)",  # triton with no GPU
            r"device >= 0 && device < num_gpus",
            r"Invalid device id",
            r"libcuda\.so[^\s]* cannot open",
            r"CUDA error: .*(no kernel image|invalid device ordinal)",
        ]
    )
)
TILE_ERROR_TYPES = ("TileError", "CompileError", "InternalCompilerError")
LOCATION = re.compile(r"(?P<file>[^\s:\"']+\.py):(?P<line>\d+)(:(?P<col>\d+))?")


@dataclass
class Failure:
    type: str  # unqualified
    qualified: str
    message: str  # the whole message (may be several lines)
    frames: list[tuple[str, int]]  # (file, line), outermost first


def last_exception(stderr: str) -> Failure | None:
    """The final exception of the last traceback in stderr, robust to chained exceptions,
    output after the traceback and multi-line messages (tilers' diagnostics)."""
    lines = stderr.splitlines()
    starts = [i for i, t in enumerate(lines) if t.startswith("Traceback (most recent call last)")]
    if not starts:
        # no traceback (a message and sys.exit, a crash): the last line that reads like one
        for t in reversed(lines):
            m = EXC_LINE.match(t.strip())
            if (
                m
                and m.group("msg") is not None
                and re.search(r"(Error|Exception)$", m.group("type"))
            ):
                q = m.group("type")
                return Failure(q.rsplit(".", 1)[-1], q, m.group("msg") or "", [])
        return None
    i = starts[-1] + 1
    frames = []
    while i < len(lines):
        t = lines[i]
        m = FRAME.match(t)
        if m:
            frames.append((m.group("file"), int(m.group("line"))))
        if t.startswith((" ", "\t")) or not t.strip():
            i += 1
            continue
        if t.startswith("[Previous line repeated"):
            i += 1
            continue
        break
    block = []
    while i < len(lines):
        t = lines[i]
        if t.startswith("Traceback (most recent call last)"):
            break
        block.append(t)
        i += 1
    while block and not block[-1].strip():
        block.pop()
    if not block:
        return None
    first = block[0]
    m = EXC_LINE.match(first.strip())
    if m:
        qualified = m.group("type")
        message = "\n".join([m.group("msg") or ""] + block[1:]).strip()
    else:
        qualified, message = "?", "\n".join(block).strip()
    return Failure(qualified.rsplit(".", 1)[-1], qualified, message, frames)


def tilers_class_names() -> set[str]:
    """Class names that tilers defines, to tell `'JITKernel' object has no attribute` (a
    tilers name missing) from the same error on a torch or Python object."""
    names = set()
    try:
        import importlib.util

        spec = importlib.util.find_spec("tilers")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return names
    for loc in spec.submodule_search_locations:
        for f in Path(loc).rglob("*.py*"):
            if f.suffix in (".py", ".pyi"):
                try:
                    names.update(
                        re.findall(r"^\s*class (\w+)", f.read_text(errors="replace"), re.M)
                    )
                except OSError:
                    pass
    return names


def missing_name_of(f: Failure, text: str, tilers_classes: set[str]) -> str | None:
    """The tilers name an Attribute/Import/NameError is about, or None."""
    msg = f.message.splitlines()[0] if f.message else ""
    if f.type == "AttributeError":
        m = re.match(r"module '(tilers[\w.]*)' has no attribute '(\w+)'", msg)
        if m:
            return f"{m.group(1)}.{m.group(2)}"
        m = re.match(r"(?:type object '(\w+)'|'(\w+)' object) has no attribute '(\w+)'", msg)
        if m:
            # asked for by the example (not by tilers' own code: that is a tilers bug)
            if (m.group(1) or m.group(2)) in tilers_classes and tilers_frame(f) is None:
                return f"{m.group(1) or m.group(2)}.{m.group(3)}"
            return None
        if "tilers" in msg:
            return msg
        return None
    if f.type in ("ImportError", "ModuleNotFoundError"):
        m = re.match(r"cannot import name '(\w+)' from '(tilers[\w.]*)'", msg)
        if m:
            return f"{m.group(2)}.{m.group(1)}"
        m = re.match(r"No module named '(tilers[\w.]*)'", msg)
        if m:
            return m.group(1)
        if "tilers" in msg:
            return msg
        return None
    if f.type == "NameError":
        m = re.match(r"name '(\w+)' is not defined", msg)
        if m and re.search(r"^\s*from\s+tilers[\w.]*\s+import\s+\*", text, re.M):
            star = re.findall(r"^\s*from\s+(tilers[\w.]*)\s+import\s+\*", text, re.M)
            return f"{star[0]}.{m.group(1)} (star import)"
        if "tilers" in msg:
            return msg
    return None


def locate(f: Failure | None, work_root: Path) -> tuple[str | None, str | None]:
    """The example-tree line an error points at: the location in a tilers diagnostic, else
    the innermost traceback frame inside the example tree."""
    if f is None:
        return None, None
    root = str(work_root.resolve())
    candidates = []
    if f.type in TILE_ERROR_TYPES:
        for m in LOCATION.finditer(f.message):
            candidates.append((m.group("file"), int(m.group("line"))))
    candidates += list(reversed(f.frames))
    for file, line in candidates:
        p = Path(file)
        if not p.is_absolute():
            continue
        try:
            rel = p.resolve().relative_to(root)
        except (ValueError, OSError):
            continue
        source = None
        try:
            source = p.read_text(errors="replace").splitlines()[line - 1].strip()
        except (OSError, IndexError):
            pass
        return f"{rel.as_posix()}:{line}", source
    return None, None


def tilers_frame(f: Failure) -> str | None:
    """`tilers/jit.py:123` when the innermost frame is inside tilers."""
    if not f.frames:
        return None
    file, line = f.frames[-1]
    m = re.search(r"(tilers/[\w/]+\.py)$", file.replace(os.sep, "/"))
    return f"{m.group(1)}:{line}" if m else None


def classify(
    rel: str, rc, out: str, err: str, seconds: float, work_root: Path, tilers_classes: set[str]
) -> Result:
    r = Result(
        rel,
        "other",
        "",
        round(seconds, 2),
        rc,
        stdout_tail=out[-TAIL_CHARS:],
        stderr_tail=err[-TAIL_CHARS:],
    )
    f = last_exception(err) if rc != 0 else None
    if f is not None:
        r.exception = f.qualified
        r.at, r.at_source = locate(f, work_root)
    if rc is None:
        r.outcome, r.detail = "timeout", f"still running after {seconds:.0f} s"
        return r
    if rc == 0:
        r.outcome = "pass"
        # an example that catches its own error and exits 0 (autodd's) still says so
        m = re.search(r"^.*\.py:\d+:\d+: error: .*$", out + "\n" + err, re.M)
        if m:
            r.detail = "exit 0, but printed: " + m.group(0).strip()[:250]
        elif "Traceback (most recent call last)" in err + out:
            r.detail = "exit 0, but printed a traceback"
        return r
    if f is None:
        tail = [t for t in (err or out).splitlines() if t.strip()]
        what = f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"
        r.detail = what + (f": {tail[-1].strip()[:200]}" if tail else "")
        if tail and NO_GPU.search("\n".join(tail[-5:])):
            r.outcome = "needs GPU"
        return r
    first = f.message.splitlines()[0].strip() if f.message else ""
    text = (work_root / rel).read_text(errors="replace")
    if QUANTIZED.search(f.message or ""):
        r.outcome, r.detail = "out of scope", f"{f.type}: {first}"[:300]
        return r
    if f.type not in TILE_ERROR_TYPES and (
        NO_GPU.search(f.message) or (f.type == "AssertionError" and "CUDA" in f.message)
    ):
        r.outcome, r.detail = "needs GPU", f"{f.type}: {first.split('. ')[0]}"[:300]
        return r
    if f.type in ("AttributeError", "ImportError", "ModuleNotFoundError", "NameError"):
        name = missing_name_of(f, text, tilers_classes)
        if name:
            r.outcome, r.missing_name, r.detail = "missing name", name, f"{f.type}: {first}"[:300]
            return r
        m = re.match(r"No module named '([\w.]+)'", first)
        if f.type == "ModuleNotFoundError" and m and m.group(1).startswith("example"):
            r.detail = f"{f.type}: {first} (a module missing from TileLang's own tree)"
            return r
        if f.type == "ModuleNotFoundError" and m:
            r.outcome, r.package = "needs package", m.group(1).split(".")[0]
            r.detail = f"{f.type}: {first}"
            return r
    if f.type in TILE_ERROR_TYPES or f.qualified.startswith("tilers."):
        r.outcome = "tilers error"
        # a diagnostic reads "file:line:col: error: message"; keep the message
        m = re.match(r".*?\.py:\d+(?::\d+)?: (?:error: )?(.*)", first)
        msg = m.group(1) if m else re.sub(r"^error: ", "", first)
        if not msg and f.message:
            msg = next((t.strip() for t in f.message.splitlines() if t.strip()), "")
        r.detail = f"{f.type}: {msg}"[:300]
        return r
    mismatch = re.search(
        r"Tensor-likes are not (close|equal)|Mismatched elements|"
        r"Not equal to tolerance|not close",
        first,
        re.I,
    )
    if f.type == "AssertionError" or (
        mismatch and f.type in ("ValueError", "RuntimeError", "Exception")
    ):
        r.outcome, r.detail = "wrong result", f"{f.type}: {first}"[:300]
        return r
    where = tilers_frame(f)
    r.detail = f"{f.type}: {first}"[:300] + (f" [in {where}]" if where else "")
    return r


# ---------------------------------------------------------------------------------------
# Environment facts for the JSON
# ---------------------------------------------------------------------------------------


def tilers_commit() -> str | None:
    # the commit the installed wheel was built from (scripts/build-wheel, scripts/gpu-check):
    # the device's copy of the checkout can carry a stale HEAD
    if os.environ.get("TILERS_COMMIT"):
        return os.environ["TILERS_COMMIT"]
    for d in (Path(__file__).resolve().parent.parent, Path.cwd()):
        try:
            out = subprocess.run(
                ["git", "-C", str(d), "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                timeout=20,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0:
            dirty = subprocess.run(
                ["git", "-C", str(d), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
            )
            return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    return None


def environment(python: str) -> dict:
    probe = r"""
import json, platform
facts = {"python": platform.python_version()}
try:
    import tilers
    facts["tilers_version"] = getattr(tilers, "__version__", None)
    facts["tilers_path"] = tilers.__file__
except Exception as e:
    facts["tilers_import_error"] = repr(e)
try:
    import torch
    facts["torch"] = torch.__version__
    facts["torch_cuda"] = torch.version.cuda
    try:
        if torch.cuda.is_available():
            facts["gpu"] = torch.cuda.get_device_name(0)
            facts["gpu_count"] = torch.cuda.device_count()
    except Exception as e:
        facts["gpu_error"] = repr(e)
except Exception as e:
    facts["torch"] = None
    facts["torch_import_error"] = repr(e)
print(json.dumps(facts))
"""
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=300)
        facts = json.loads(out.stdout.strip().splitlines()[-1])
    except Exception as e:  # noqa: BLE001
        facts = {"probe_error": repr(e)}
    if "gpu" not in facts and shutil.which("nvidia-smi"):
        try:
            smi = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if smi.returncode == 0 and smi.stdout.strip():
                facts["gpu"] = smi.stdout.strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
    facts.setdefault("gpu", None)
    facts["platform"] = platform.platform()
    facts["cpus"] = os.cpu_count()
    return facts


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------


def shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    src = ap.add_mutually_exclusive_group()
    src.add_argument(
        "--mirror", default=DEFAULT_MIRROR, help="TileLang's bare git mirror (default %(default)s)"
    )
    src.add_argument(
        "--examples",
        metavar="DIR",
        help="a TileLang checkout or its examples/ folder, instead of the mirror",
    )
    ap.add_argument("--rev", default="HEAD", help="revision of the mirror (default HEAD)")
    ap.add_argument(
        "--workdir",
        metavar="DIR",
        help="extract and run there (kept, with logs/); default: a temporary one",
    )
    ap.add_argument(
        "--export",
        metavar="DIR",
        help="only write the mirror's examples/ (unchanged) to DIR, to carry to a "
        "machine without the mirror; not into this repository",
    )
    ap.add_argument("--timeout", type=float, default=120, help="seconds per example (120)")
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="SUBSTR",
        help="only files whose path contains SUBSTR (repeatable: any of them)",
    )
    ap.add_argument("--list", action="store_true", help="list the selection; run nothing")
    ap.add_argument("--jobs", "-j", type=int, default=1, help="examples run at once (1)")
    ap.add_argument(
        "--python", default=sys.executable, help="interpreter for the examples (default: this one)"
    )
    ap.add_argument("--top", type=int, default=25, help="missing names shown (25)")
    ap.add_argument("--json", metavar="PATH", help="write selection, results and summary")
    ap.add_argument("--width", type=int, default=100, help="detail column width (100)")
    args = ap.parse_args()

    if args.export:
        dest = Path(args.export).absolute()
        if dest.exists() and any(dest.iterdir()):
            raise SystemExit(f"--export {dest} exists and is not empty")
        dest.mkdir(parents=True, exist_ok=True)
        commit = extract_from_mirror(args.mirror, args.rev, dest)
        (dest / COMMIT_FILE).write_text(commit + "\n")
        print(f"wrote TileLang {commit[:12]} examples/ to {dest} (run with --examples {dest})")
        return 0

    work, temporary = prepare_workdir(args.workdir)
    # a SIGTERM ends the run like Ctrl-C: the examples' process groups and the temp dir go
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if args.examples:
            src_root = examples_root_of(Path(args.examples).absolute())
            if not src_root.is_dir():
                raise SystemExit(f"--examples {args.examples}: no such directory")
            tl_commit = commit_of_directory(src_root)
            shutil.copytree(
                src_root,
                work / "examples",
                symlinks=True,
                ignore=shutil.ignore_patterns("__pycache__", ".git"),
            )
            source = str(src_root)
        else:
            if not Path(args.mirror).exists():
                raise SystemExit(f"no mirror at {args.mirror}: pass --mirror or --examples DIR")
            tl_commit = extract_from_mirror(args.mirror, args.rev, work)
            source = f"{args.mirror}@{args.rev}"
        root = work / "examples"

        files = scan(root)  # selection reads the original text (it says `tilelang`)
        selected, skipped = select(files)
        renamed = rename_tree(root)

        def wanted(rel):
            return not args.only or any(s in rel for s in args.only)

        selected = [r for r in selected if wanted(r)]
        skipped = {r: why for r, why in skipped.items() if wanted(r)}
        groups = collections.Counter(reason_group(w) for w in skipped.values())
        print(f"TileLang examples from {source}" + (f" ({tl_commit[:12]})" if tl_commit else ""))
        print(
            f"{len(files)} .py files ({renamed} renamed tilelang -> tilers) in {root}"
            + (f"; --only {' '.join(args.only)}" if args.only else "")
        )
        print(f"  selected: {len(selected)}")
        for why, n in groups.most_common():
            print(f"  out of scope, {why}: {n}")
        sys.stdout.flush()

        if args.list:
            for rel in selected:
                print(f"  run   {rel}")
            for rel, why in sorted(skipped.items()):
                print(f"  skip  {rel}  ({why})")
            return 0

        classes = tilers_class_names()
        results: list[Result] = []
        lock = threading.Lock()
        logs = None if temporary else work / "logs"

        def one(rel):
            rc, out, err, secs = run_one(args.python, root, rel, args.timeout)
            res = classify(rel, rc, out, err, secs, root, classes)
            if logs is not None:
                log = logs / (rel + ".log")
                log.parent.mkdir(parents=True, exist_ok=True)
                log.write_text(
                    f"$ python {Path(rel).name}   (cwd {Path(rel).parent})\n"
                    f"exit: {rc}   {secs:.1f} s\n--- stdout\n{out}\n--- stderr\n{err}"
                )
            with lock:
                results.append(res)
                print(
                    f"[{len(results)}/{len(selected)}] {rel}: {res.outcome} "
                    f"({secs:.1f} s) {shorten(res.detail, 120)}",
                    file=sys.stderr,
                    flush=True,
                )
            return res

        started = time.monotonic()
        pool = concurrent.futures.ThreadPoolExecutor(max(1, args.jobs))
        try:
            list(pool.map(one, selected))
        finally:  # on Ctrl-C or SIGTERM too: end what runs, start nothing more
            pool.shutdown(wait=False, cancel_futures=True)
            for pid in list(RUNNING):
                kill_group(pid)
            pool.shutdown(wait=True)
        elapsed = time.monotonic() - started
        results.sort(key=lambda r: r.file)

        # ---- table
        wf = max([len(r.file) for r in results] + [4])
        wo = max(len(o) for o in OUTCOMES)
        print()
        print(f"{'file':<{wf}}  {'outcome':<{wo}}  detail")
        print(f"{'-' * wf}  {'-' * wo}  {'-' * 6}")
        for r in results:
            detail = r.missing_name if r.outcome == "missing name" else r.detail
            if r.outcome in ("tilers error", "needs GPU", "other") and r.at:
                detail = f"{detail} @ {r.at}"
            print(f"{r.file:<{wf}}  {r.outcome:<{wo}}  {shorten(detail or '', args.width)}")

        # ---- summary
        counts = collections.Counter(r.outcome for r in results)
        missing = collections.Counter(r.missing_name for r in results if r.missing_name)
        packages = collections.Counter(r.package for r in results if r.package)
        others = collections.Counter(
            shorten(re.sub(r"\d+", "N", r.detail), 110) for r in results if r.outcome == "other"
        )
        print(
            f"\nsummary: {len(results)} examples run in {elapsed:.0f} s "
            f"(timeout {args.timeout:g} s, jobs {args.jobs})"
        )
        for o in OUTCOMES:
            print(f"  {o:<{wo}}  {counts.get(o, 0):4d}")
        in_scope = len(results) - counts.get("out of scope", 0)
        if in_scope:
            print(f"  pass of the {in_scope} in scope (no fp8/fp6/fp4/int4/tfloat32): "
                  f"{counts.get('pass', 0)} ({100 * counts.get('pass', 0) / in_scope:.0f}%)")
        if missing:
            print(f"\nmost common missing names (top {args.top} of {len(missing)}):")
            for name, n in missing.most_common(args.top):
                print(f"  {n:4d}  {name}")
        errors = [r for r in results if r.outcome == "tilers error"]
        if errors:
            print("\ntilers errors:")
            for r in errors:
                print(f"  {r.file}: {r.detail}")
                if r.at:
                    print(f"      at {r.at}: {r.at_source or ''}")
        if packages:
            print(
                "\npackages the examples need: "
                + ", ".join(f"{p} ({n})" for p, n in packages.most_common())
            )
        if others:
            print("\nother failures (most common first):")
            for what, n in others.most_common(15):
                print(f"  {n:4d}  {what}")
        if logs is not None:
            print(f"\nlogs of each run: {logs}")

        if args.json:
            doc = {
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "tilers_commit": tilers_commit(),
                "tilelang_source": source,
                "tilelang_commit": tl_commit,
                "command": sys.argv,
                "timeout_s": args.timeout,
                "jobs": args.jobs,
                "elapsed_s": round(elapsed, 1),
                "environment": environment(args.python),
                "selection": {
                    "files": len(files),
                    "selected": len(selected),
                    "out_of_scope": dict(groups.most_common()),
                    "skipped": dict(sorted(skipped.items())),
                },
                "summary": {
                    "outcomes": {o: counts.get(o, 0) for o in OUTCOMES},
                    "in_scope": len(results) - counts.get("out of scope", 0),
                    "missing_names": dict(missing.most_common()),
                    "packages": dict(packages.most_common()),
                    "tilers_errors": [
                        {"file": r.file, "detail": r.detail, "at": r.at, "source": r.at_source}
                        for r in errors
                    ],
                },
                "results": [asdict(r) for r in results],
            }
            Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
            print(f"\nwrote {args.json}")
        return 0
    finally:
        for pid in list(RUNNING):  # interrupted: end the examples this run started
            kill_group(pid)
        if temporary:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `| head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
