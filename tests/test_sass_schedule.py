"""What ptxas makes of the overlap schedule, read from the SASS (nvdisasm, installed by
scripts/setup; no GPU needed): in the causal attention steady state, where the two consumer
warpgroups take turns, the softmax's exponentials run between the wait that retires S = Q K^T
and the wait that retires O += P V — beside the tensor cores. Without the basic-block boundary
before the second wait (`WgmmaWait::boundary`), ptxas hoisted that wait above the softmax."""

import os
import re
import subprocess
import sys

import tilers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import flash_attention as fa  # noqa: E402


def nvdisasm() -> str:
    import nvidia

    for root in nvidia.__path__:
        path = os.path.join(root, "cu13", "bin", "nvdisasm")
        if os.path.exists(path):
            return path
    raise AssertionError("nvdisasm not found: run ./scripts/setup (it installs nvidia-cuda-nvdisasm)")


def sass(kernel) -> list[str]:
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tilers-sass-{os.getpid()}.cubin")
    with open(path, "wb") as f:
        f.write(kernel.cubin)
    try:
        out = subprocess.run([nvdisasm(), "-c", path], capture_output=True, text=True, check=True).stdout
    finally:
        os.remove(path)
    return [m.group(1) for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+([^;]*);", out)]


def exponentials_between_the_waits(lines) -> list[int]:
    """Per `wgmma.wait_group 1` (DEPBAR.LE 1), the MUFU.EX2 before the next DEPBAR.LE 0."""
    counts = []
    for i, line in enumerate(lines):
        if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in line:
            n = 0
            for later in lines[i + 1:]:
                if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in later:
                    break
                n += "MUFU.EX2" in later
            counts.append(n)
    return counts


def test_the_causal_softmax_runs_between_the_two_waits():
    k = tilers.compile(fa.flash_attention(8, 32, 4096, 128, True, 128, 128, 3, 256, overlap=True, o_in_q=True),
                       out_idx=[3], target="cuda:sm_90a", fast_math=True)
    assert "a block boundary before the wait" in k.get_kernel_source()
    counts = exponentials_between_the_waits(sass(k))
    # the steady state's one wait_group 1: the 64 exponentials of a 64x128 S per thread's rows
    # (plus the scale's) sit before the wait that retires P V
    assert counts and max(counts) >= 64, counts
