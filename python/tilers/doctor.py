"""`python -m tilers doctor`: what this machine has for tilers — the CUDA driver, the GPUs,
NVRTC, torch, the tilers-cc command and a C compiler for exports — and, for what is
missing, what to do about it."""

from __future__ import annotations

import shutil
from dataclasses import dataclass


@dataclass
class Check:
    what: str
    ok: bool
    found: str
    fix: str = ""


def check_driver() -> list[Check]:
    """The driver and each GPU it reports."""
    from tilers import _tilers, runtime

    count, reason = _tilers.driver_status()
    if count == 0:
        return [Check(
            "CUDA driver", False, reason,
            "install the NVIDIA driver (nvidia-smi must list the GPU); tilers needs no CUDA "
            "toolkit. Without a GPU, kernels still compile (NVRTC) and run on the interpreter "
            "with numpy arrays",
        )]
    version = _tilers.driver_version()
    checks = [Check("CUDA driver", True, f"CUDA {version // 1000}.{version % 1000 // 10}, "
                    f"{count} device{'s' if count != 1 else ''}")]
    for device in range(count):
        arch = runtime.device_arch(device)
        checks.append(Check(f"GPU {device}", True, f"{runtime.device_name(device)} ({arch})"))
    return checks


def check_nvrtc() -> Check:
    from tilers import runtime

    try:
        major, minor = runtime.nvrtc_version()
    except Exception as error:  # an ImportError or the loader's RuntimeError, said as is
        return Check("NVRTC", False, str(error).splitlines()[0],
                     "pip install 'nvidia-cuda-nvrtc==13.0.*' 'cuda-bindings>=13.0,<14'")
    return Check("NVRTC", True, f"{major}.{minor} (through cuda-bindings)")


def check_torch() -> Check:
    try:
        import torch
    except ImportError as error:
        return Check("torch", False, f"not importable ({error})",
                     "pip install torch (a CUDA build) to launch kernels on torch tensors; "
                     "without it kernels run on the interpreter and exports still work")
    if not torch.cuda.is_available():
        return Check("torch", False, f"{torch.__version__} without a usable CUDA device "
                     f"(torch.version.cuda={torch.version.cuda})",
                     "install a CUDA build of torch (pip install torch --index-url "
                     "https://download.pytorch.org/whl/cu130) on a machine with the driver")
    return Check("torch", True, f"{torch.__version__} (CUDA {torch.version.cuda})")


def check_tilers_cc() -> Check:
    path = shutil.which("tilers-cc")
    if path is None:
        return Check("tilers-cc", False, "not on the PATH",
                     "install tilers with pip (pip install . or the wheel) so its console "
                     "script is installed, and put that environment's bin folder on the PATH; "
                     "python -m tilers._cli runs it meanwhile")
    return Check("tilers-cc", True, path)


def check_c_compiler() -> Check:
    path = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if path is None:
        return Check("C compiler", False, "none on the PATH (cc, gcc, clang)",
                     "install gcc or clang to build exported launchers (kernel.export)")
    return Check("C compiler", True, f"{path} (builds kernel.export's C launchers)")


def checks() -> list[Check]:
    return [*check_driver(), check_nvrtc(), check_torch(), check_tilers_cc(), check_c_compiler()]


def report(found: list[Check]) -> str:
    lines = []
    for c in found:
        lines.append(f"{'ok' if c.ok else 'missing':<8} {c.what}: {c.found}")
        if not c.ok:
            lines.append(f"{'':<8} fix: {c.fix}")
    return "\n".join(lines)


def main() -> int:
    """Print the report; 0 when nothing is missing, 1 otherwise."""
    import tilers

    found = checks()
    print(f"tilers {tilers.__version__}")
    print(report(found))
    return 0 if all(c.ok for c in found) else 1
