"""The FlashAttention forward of examples/flash_attention.py on the CPU: the interpreter
against float64 numpy (ragged sequence lengths, causal or not, head dims 64 and 128, fp16 and
bf16), every pass checked on the warp model for sm_90a and sm_80, NVRTC compiling the
configurations bench/attention.py times, and what the report says of the two gemms."""

import os
import sys

import numpy as np
import pytest
import tilers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import flash_attention as fa  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")


def inputs(b, n, h, d, dtype, seed=0):
    rng = np.random.default_rng(seed)
    np_dtype = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    return [rng.standard_normal((b, n, h, d)).astype(np_dtype) for _ in range(3)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n,d", [(100, 64), (64, 128), (130, 64)])
def test_interpreter_against_numpy(n, d, causal, dtype):
    b, h = 1, 2
    k = tilers.compile(fa.flash_attention(b, h, n, d, causal, block_M=64, block_N=32, dtype=dtype),
                       out_idx=[3], target="interp")
    q, kk, v = inputs(b, n, h, d, dtype)
    out = np.asarray(k(q, kk, v)).astype(np.float64)
    want = fa.reference_numpy(q.astype(np.float32), kk.astype(np.float32), v.astype(np.float32), causal)
    tol = 2e-3 if dtype == "float16" else 2e-2
    assert np.abs(out - want).max() < tol


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("causal", [False, True])
def test_every_pass_agrees(arch, causal):
    f = fa.flash_attention(1, 1, 96, 64, causal, block_M=64, block_N=32)
    result = tilers.testing.check_passes(f, arch=arch, blocks="all")
    assert result.ok, result.failure_message()


@pytest.mark.parametrize("config", [(128, 64, 2, 128), (128, 128, 2, 256), (64, 64, 3, 128)])
@pytest.mark.parametrize("d", [64, 128])
def test_nvrtc_compiles_the_benchmarked_configs(config, d):
    bm, bn, st, th = config
    k = tilers.compile(fa.flash_attention(2, 4, 1024, d, True, bm, bn, st, th), out_idx=[3],
                       target="cuda:sm_90a")
    assert k.cubin[:4] == b"\x7fELF"
    report = k.report()
    # P stays in registers: the accumulator of the first gemm, cast, is the second's A
    assert "'acc_s_cast' placed in shared memory" not in report, report
    assert "A from registers" in report, report


@pytest.mark.parametrize("d,config", [(64, (192, 128, 2, 384)), (128, (128, 176, 2, 256)), (256, (128, 80, 2, 256))],
                         ids=["d64-192x128", "d128-128x176", "d256-128x80"])
@pytest.mark.parametrize("causal", [False, True])
def test_flashattention3s_tile_shapes_pass_every_pass(d, config, causal):
    """The tiles FlashAttention-3 uses at head dims 64, 128 (non-causal) and 256 (bench/attention.py
    tunes over them): 192 query rows over three consumer warpgroups; 176 or 80 keys a tile
    (wgmma n176, n80: neither a power of two). Ragged
    lengths (not whole tiles), every pass on the CPU model; NVRTC at a benchmark shape."""
    bm, bn, st, th = config
    f = fa.flash_attention(1, 2, 200, d, causal, bm, bn, st, th, overlap=True)
    tilers.testing.check_passes(f, arch="sm_90a", blocks="all", check=True)
    k = tilers.compile(fa.flash_attention(2, 4, 1024, d, causal, bm, bn, st, th, overlap=True), out_idx=[3],
                       target="cuda:sm_90a", fast_math=True)
    assert k.cubin[:4] == b"\x7fELF"
    assert "A from registers" in k.report()


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_the_output_staged_in_q_passes_every_pass(causal, overlap):
    # 8 tiles on the model's few persistent blocks: a block stages tile t's output in Q's
    # tile and then loads tile t + 1's Q into it (the barriers between are insert_syncs')
    f = fa.flash_attention(1, 4, 200, 64, causal, block_M=128, block_N=64, num_stages=3, threads=256,
                           overlap=overlap, o_in_q=True)
    tilers.testing.check_passes(f, arch="sm_90a", blocks="all", check=True)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_persistent_kernel_frees_q_after_its_last_reader(overlap):
    """Q, loaded once per tile by the producer warpgroup, is freed once the last S = Q K^T of
    the tile retired (a predicated arrival in the loop), not after the loop: the producer
    waits for it before the next tile's copies. Tiles whose loop runs no iteration (a
    bottom-right causal mask with far fewer keys than queries) still free it after the loop:
    every pass on the CPU model, persistent blocks walking several tiles each."""
    f = fa.flash_attention(1, 2, 200, 64, True, block_M=64, block_N=32, num_stages=2, threads=128,
                           overlap=overlap, o_direct=True, seq_len_kv=40)
    tilers.testing.check_passes(f, arch="sm_90a", blocks="all", check=True, compile_options={"persistent": True})
    k = tilers.compile(fa.flash_attention(2, 4, 1024, 128, False, 128, 128, 3, 256, overlap=overlap,
                                          o_direct=True), out_idx=[3], target="cuda:sm_90a", fast_math=True)
    report, src = k.report(), k.get_kernel_source()
    assert "'Q_shared' is freed for the next tile's copy once its last reader" in report, report
    # the arrival on Q's empty barrier sits in the loop (predicated on the last iteration)
    # and none is left unconditionally after it
    offset = next(line for line in src.splitlines() if "empty_bar_Q_shared = " in line).split("+ ")[1].split(")")[0]
    arrivals = [line for line in src.splitlines() if "mbarrier.arrive" in line and f"(unsigned int)({offset})" in line]
    assert arrivals and all("@p mbarrier.arrive" in line for line in arrivals), arrivals
    assert k.cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("d,stages", [(128, 3), (64, 4)])
def test_the_output_staged_in_q_leaves_room_for_more_stages(d, stages):
    k = tilers.compile(fa.flash_attention(2, 4, 1024, d, False, 128, 128, stages, 256, overlap=True, o_in_q=True),
                       out_idx=[3], target="cuda:sm_90a", fast_math=True)
    report = k.report()
    assert "O_shared" not in report and f"{stages} stages on full/empty mbarriers" in report, report
    assert k.cubin[:4] == b"\x7fELF"
    # without it the compiler overlays the output tile on Q's itself (plan_shared_memory
    # reuses bytes inside the tile loop, adding the barriers): three stages fit as well
    k = tilers.compile(fa.flash_attention(2, 4, 1024, d, False, 128, 128, stages, 256, overlap=True),
                       out_idx=[3], target="cuda:sm_90a")
    report = k.report()
    assert f"{stages} stages on full/empty mbarriers" in report, report
    if d == 128:
        # 224 KB of Q, K and V: the output tile fits only over Q's bytes, so Q stays with
        # the consumers (a tile the producer fills ahead shares no bytes)
        assert "shares bytes with Q_shared" in report and "stays with the consumers" in report, report
    else:
        # room for both: the producer fills Q ahead (plan_pipeline), the output has its own tile
        assert "T.copy Q -> Q_shared: TMA by the producer warpgroup" in report, report


def test_p_moves_from_the_mma_accumulator_to_the_a_operand_in_registers():
    # on mma.sync the two fragments hold the same elements per thread in another register
    # order: the copy is a permutation of each thread's registers (checked on the model)
    k = tilers.compile(fa.flash_attention(1, 1, 96, 64, False, block_M=64, block_N=32), out_idx=[3],
                       target="cuda:sm_80")
    assert "'acc_s_cast' placed in shared memory" not in k.report()
    assert "operands by A from registers" in k.report(), k.report()


def test_the_example_runs_on_the_interpreter(capsys):
    sys.argv = ["flash_attention.py", "--causal"]
    fa.main()
    assert "check: OK" in capsys.readouterr().out


# grouped-query attention, sliding windows, soft caps, the log-sum-exp output, head dim 256
VARIANTS = [
    dict(heads_kv=1),
    dict(heads_kv=2, causal=True),
    dict(window=(40, -1)),
    dict(window=(30, 10)),
    dict(window=(50, -1), causal=True),
    dict(softcap=2.0),
    dict(softcap=5.0, causal=True, heads_kv=2),
    dict(return_lse=True),
    dict(return_lse=True, causal=True, window=(64, -1), softcap=3.0),
]


def run_variant(n, d, variant, target="interp", **config):
    variant = dict(variant)
    causal = variant.pop("causal", False)
    lse = variant.get("return_lse", False)
    b, h = 1, 4
    f = fa.flash_attention(b, h, n, d, causal, dtype="float16", **config, **variant)
    k = tilers.compile(f, out_idx=[3, 4] if lse else [3], target=target)
    rng = np.random.default_rng(n + d)
    hk = variant.get("heads_kv", h)
    q = rng.standard_normal((b, n, h, d)).astype(np.float16)
    kk, v = (rng.standard_normal((b, n, hk, d)).astype(np.float16) for _ in range(2))
    got = k(q, kk, v)
    want = fa.reference_numpy(q, kk, v, causal, window=variant.get("window", (-1, -1)),
                              softcap=variant.get("softcap", 0.0), lse=lse)
    return got, want, f


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()))
@pytest.mark.parametrize("n", [100, 128])
def test_variants_on_the_interpreter(n, variant):
    got, want, _ = run_variant(n, 64, variant, block_M=64, block_N=32)
    if variant.get("return_lse"):
        (out, lse), (want, want_lse) = got, want
        assert np.abs(np.asarray(lse) - want_lse).max() < 1e-3
    else:
        out = got
    assert np.abs(np.asarray(out).astype(np.float64) - want).max() < 3e-3


@pytest.mark.parametrize("variant", [VARIANTS[1], VARIANTS[4], VARIANTS[6], VARIANTS[8]],
                         ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()))
@pytest.mark.parametrize("overlap", [False, True])
def test_variants_pass_every_pass(variant, overlap):
    variant = dict(variant)
    causal = variant.pop("causal", False)
    f = fa.flash_attention(1, 4, 200, 64, causal, block_M=128, block_N=64, num_stages=2, threads=256,
                           overlap=overlap, **variant)
    tilers.testing.check_passes(f, arch="sm_90a", blocks="all", check=True)


def test_head_dim_256():
    got, want, _ = run_variant(96, 256, {"causal": True}, block_M=64, block_N=32)
    assert np.abs(np.asarray(got).astype(np.float64) - want).max() < 3e-3
    k = tilers.compile(fa.flash_attention(2, 4, 1024, 256, True, 64, 64, 2, 128), out_idx=[3],
                       target="cuda:sm_90a")
    assert k.cubin[:4] == b"\x7fELF"


def loop_tiles(f, bx):
    """The key tiles [start, start + extent) the traced T.Pipelined loop visits at block bx."""
    import json

    from tilers._trace import program_json, trace

    ops = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "floordiv": lambda a, b: a // b, "max": max, "min": min}

    def value(e):
        if e["op"] == "const":
            return e["value"]
        if e["op"] == "var":
            assert e["id"] == 0, e  # bx, the grid's first index
            return bx
        return ops[e["op"]](value(e["a"]), value(e["b"]))

    found = []

    def walk(x):
        if isinstance(x, dict):
            if x.get("op") == "for" and x.get("kind") == "pipelined":
                found.append(x)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(json.loads(program_json(trace(f, {}))))
    (loop,) = found
    start = value(loop["start"])
    return range(start, start + value(loop["extent"]))


@pytest.mark.parametrize("window,causal", [((128, -1), True), ((100, 30), False), ((-1, -1), True)])
def test_a_window_visits_only_its_tiles(window, causal):
    # 128-row query tiles over 64-key tiles: the loop runs over the tiles holding a key some
    # row of the block keeps, and no other
    n, bm, bn = 4096, 128, 64
    f = fa.flash_attention(1, 1, n, 64, causal, bm, bn, 2, 128, window=window)
    left, right = window
    if causal:
        right = 0
    for bx in (0, 1, 7, n // bm - 1):
        rows = range(bx * bm, bx * bm + bm)
        lo = max(0, rows[0] - left) if left >= 0 else 0
        hi = min(n - 1, rows[-1] + right) if right >= 0 else n - 1
        assert loop_tiles(f, bx) == range(lo // bn, hi // bn + 1), (bx, window)


def test_heads_must_divide():
    with pytest.raises(ValueError, match="multiple of heads_kv"):
        fa.flash_attention(1, 6, 128, 64, heads_kv=4)


def varlen_inputs(lengths, h, hk, d, seed=0):
    rng = np.random.default_rng(seed)
    total = sum(lengths)
    q = rng.standard_normal((total, h, d)).astype(np.float16)
    k, v = (rng.standard_normal((total, hk, d)).astype(np.float16) for _ in range(2))
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return q, k, v, cu


def varlen_reference(q, k, v, cu, causal, lse=False, **variant):
    outs, lses = [], []
    for b in range(len(cu) - 1):
        s, e = cu[b], cu[b + 1]
        if e == s:
            continue
        r = fa.reference_numpy(q[None, s:e], k[None, s:e], v[None, s:e], causal, lse=True, **variant)
        outs.append(r[0][0])
        lses.append(r[1][0])
    out = np.concatenate(outs)
    return (out, np.concatenate(lses, axis=1)) if lse else out


@pytest.mark.parametrize("lengths", [[100, 1, 64, 65], [200], [0, 30, 129]], ids=str)
@pytest.mark.parametrize("variant", [{}, {"causal": True}, {"heads_kv": 2, "causal": True, "return_lse": True},
                                     {"window": (40, 8)}], ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) or "plain")
def test_varlen_on_the_interpreter(lengths, variant):
    variant = dict(variant)
    causal = variant.pop("causal", False)
    lse = variant.get("return_lse", False)
    h, d = 4, 64
    hk = variant.get("heads_kv", h)
    q, k, v, cu = varlen_inputs(lengths, h, hk, d)
    f = fa.flash_attention(len(lengths), h, None, d, causal, 64, 32, varlen=True, **variant)
    kern = tilers.compile(f, out_idx=[5, 6] if lse else [5], target="interp")
    got = kern(q, k, v, cu, max(lengths))
    want = varlen_reference(q, k, v, cu, causal, lse=lse, window=variant.get("window", (-1, -1)))
    if lse:
        assert np.abs(np.asarray(got[1]) - want[1]).max() < 1e-3
        got, want = got[0], want[0]
    assert np.abs(np.asarray(got).astype(np.float64) - want).max() < 3e-3


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_compiles_for_sm_90a(causal, overlap):
    # (check_passes runs on random inputs: random cu_seqlens make loops of billions of
    # tiles; the interpreter tests above run real ones, the GPU tests every pass's result)
    f = fa.flash_attention(3, 2, None, 64, causal, 128, 64, 2, 256, overlap=overlap, varlen=True)
    k = tilers.compile(f, out_idx=[5], target="cuda:sm_90a")
    assert k.cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("n,n_kv", [(37, 200), (200, 37), (64, 129), (100, 100)], ids=str)
@pytest.mark.parametrize("align", ["bottom_right", "top_left"])
@pytest.mark.parametrize("variant", [{"causal": True}, {"causal": True, "return_lse": True, "heads_kv": 2},
                                     {"window": (30, 5)}, {}],
                         ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) or "plain")
def test_query_and_key_lengths_differ_on_the_interpreter(n, n_kv, align, variant):
    # chunked prefill (fewer queries than keys, the causal diagonal at the bottom right) and
    # the reverse (rows above a bottom-right diagonal keep no key: zero output, lse +inf)
    variant = dict(variant)
    causal = variant.pop("causal", False)
    lse = variant.get("return_lse", False)
    h, d = 4, 64
    hk = variant.get("heads_kv", h)
    rng = np.random.default_rng(n * 1000 + n_kv)
    q = rng.standard_normal((1, n, h, d)).astype(np.float16)
    k, v = (rng.standard_normal((1, n_kv, hk, d)).astype(np.float16) for _ in range(2))
    f = fa.flash_attention(1, h, n, d, causal, 64, 32, seq_len_kv=n_kv, align=align, **variant)
    kern = tilers.compile(f, out_idx=[3, 4] if lse else [3], target="interp")
    got = kern(q, k, v)
    want = fa.reference_numpy(q, k, v, causal, window=variant.get("window", (-1, -1)), lse=lse, align=align)
    if lse:
        (got, got_lse), (want, want_lse) = got, want
        got_lse = np.asarray(got_lse)
        assert np.array_equal(np.isinf(got_lse), np.isinf(want_lse))
        finite = np.isfinite(want_lse)
        assert np.abs(got_lse[finite] - want_lse[finite]).max() < 1e-3
    got = np.asarray(got).astype(np.float64)
    assert np.isfinite(got).all()
    assert np.abs(got - want).max() < 3e-3


@pytest.mark.parametrize("n,n_kv", [(100, 300), (300, 100)], ids=str)
@pytest.mark.parametrize("overlap", [False, True])
def test_bottom_right_causal_passes_every_pass(n, n_kv, overlap):
    f = fa.flash_attention(1, 2, n, 64, True, block_M=128, block_N=64, num_stages=2, threads=256,
                           overlap=overlap, seq_len_kv=n_kv)
    tilers.testing.check_passes(f, arch="sm_90a", blocks="all", check=True)


def test_alignment_and_lengths_are_checked():
    with pytest.raises(ValueError, match="align"):
        fa.flash_attention(1, 2, 64, 64, True, align="bottom")
    with pytest.raises(ValueError, match="seq_len_kv"):
        fa.flash_attention(2, 2, None, 64, True, varlen=True, seq_len_kv=64)
