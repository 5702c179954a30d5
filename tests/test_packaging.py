"""Packaging: the tilers-cc command installed with the package (a console script running the
compiler driver through the extension), and `python -m tilers doctor`."""

import json
import os
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import kernels
import tilers
from tilers import _tilers, doctor


def scripts_dir() -> Path:
    return Path(sysconfig.get_path("scripts"))


def test_tilers_cc_is_a_console_script_of_the_package():
    scripts = {e.name: e.value for e in metadata.entry_points(group="console_scripts")}
    assert scripts.get("tilers-cc") == "tilers._cli:tilers_cc"
    assert (scripts_dir() / "tilers-cc").is_file()


def test_installed_tilers_cc_compiles_and_exports(tmp_path):
    factory, kwargs = kernels.COMPILE_CASES["softmax_rows"]
    program = tmp_path / "softmax.json"
    tilers.compile(factory(**kwargs), target="cuda:sm_90a").save_program(program)
    # not the activated virtualenv's variables: the command finds NVRTC through this Python
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "TILERS_SITE_PACKAGES")}
    env["PATH"] = f"{scripts_dir()}{os.pathsep}{env.get('PATH', '')}"
    out = subprocess.run(["tilers-cc", str(program), "-o", str(tmp_path / "out")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["softmax.cu", "softmax.cubin", "softmax.json", "tilers_softmax.c",
                     "tilers_softmax.h"]
    assert (tmp_path / "out" / "softmax.cubin").read_bytes()[:4] == b"\x7fELF"
    usage = subprocess.run(["tilers-cc"], env=env, capture_output=True, text=True)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: tilers-cc PROGRAM.json")
    assert _tilers.cc_main(["--bogus"]) == 2


def test_doctor_reports_every_item_with_a_fix_for_what_is_missing():
    out = subprocess.run([sys.executable, "-m", "tilers", "doctor"], capture_output=True,
                         text=True, timeout=120)
    lines = out.stdout.splitlines()
    assert lines[0] == f"tilers {tilers.__version__}"
    items = [line for line in lines[1:] if not line.lstrip().startswith("fix:")]
    whats = [line.split(":")[0].split(maxsplit=1)[1] for line in items]
    assert whats[0] == "CUDA driver"
    assert whats[-4:] == ["NVRTC", "torch", "tilers-cc", "C compiler"]
    missing = [line for line in items if line.startswith("missing")]
    assert all(line.startswith(("ok ", "missing ")) for line in items)
    assert sum(line.lstrip().startswith("fix:") for line in lines) == len(missing)
    assert out.returncode == (1 if missing else 0)


def test_doctor_says_how_to_fix_a_missing_driver_torch_and_command(monkeypatch):
    monkeypatch.setattr(_tilers, "driver_status", lambda: (0, "libcuda.so.1 could not be loaded"))
    [driver] = doctor.check_driver()
    assert (driver.ok, driver.found) == (False, "libcuda.so.1 could not be loaded")
    assert "install the NVIDIA driver" in driver.fix and "no CUDA toolkit" in driver.fix
    monkeypatch.setitem(sys.modules, "torch", None)
    torch_check = doctor.check_torch()
    assert not torch_check.ok and torch_check.fix.startswith("pip install torch")
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    command = doctor.check_tilers_cc()
    assert not command.ok and "console script" in command.fix
    text = doctor.report([driver, command])
    assert text.splitlines()[0] == "missing  CUDA driver: libcuda.so.1 could not be loaded"
    assert text.splitlines()[1].startswith("         fix: install the NVIDIA driver")
    assert json.dumps(doctor.check_c_compiler().__dict__)
