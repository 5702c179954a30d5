"""``pass_configs=`` and ``tilers.PassConfigKey``: TileLang's compiler switches, by its names.

Every key TileLang defines is accepted. Those with a meaning in tilers act on the
compilation (see ``ACTING``); the others are documented no-ops (``IGNORED``, with the
reason) that warn once per process; a key TileLang does not define is an error naming it.
Keys may be ``PassConfigKey`` members or their strings ("tl.disable_tma_lower").
"""

from __future__ import annotations

import enum
import warnings

from .errors import TileError


class PassConfigKey(str, enum.Enum):
    """TileLang's pass-configuration keys (each member equals its string)."""

    TL_SIMPLIFY = "tl.Simplify"
    TL_DISABLE_BUFFER_INIT_CHECK = "tl.disable_buffer_init_check"
    TL_DISABLE_DATA_RACE_CHECK = "tl.disable_data_race_check"
    TL_DISABLE_PRELOWER_SEMANTIC_CHECK = "tl.disable_prelower_semantic_check"
    TL_DISABLE_WARP_SPECIALIZED = "tl.disable_warp_specialized"
    TL_ENABLE_FAST_MATH = "tl.enable_fast_math"
    TL_DISABLE_FAST_MATH = "tl.disable_fast_math"
    TL_PTXAS_REGISTER_USAGE_LEVEL = "tl.ptxas_register_usage_level"
    TL_DEVICE_COMPILE_FLAGS = "tl.device_compile_flags"
    TL_EMIT_LINE_DIRECTIVES = "tl.emit_line_directives"
    TL_CONFIG_INDEX_BITWIDTH = "tl.config_index_bitwidth"
    TL_ENABLE_REDUCER_PLAN_VERBOSE = "tl.enable_reducer_plan_verbose"
    TL_LAYOUT_COST_MODEL = "tl.layout_cost_model"
    TL_REDUCER_FORCE_BASELINE = "tl.reducer_force_baseline"
    TL_DISABLE_TMA_LOWER = "tl.disable_tma_lower"
    TL_DISABLE_SAFE_MEMORY_ACCESS = "tl.disable_safe_memory_legalize"
    TL_DISABLE_VECTORIZE_256 = "tl.disable_vectorize_256"
    TL_ENABLE_ASYNC_COPY = "tl.enable_async_copy"
    TL_ENABLE_LOWER_LDGSTG = "tl.enable_lower_ldgstg"
    TL_ENABLE_LOWER_LDGSTG_PREDICATED = "tl.enable_lower_ldgstg_predicated"
    TL_ENABLE_VECTORIZE_PLANNER_VERBOSE = "tl.enable_vectorize_planner_verbose"
    TL_DISABLE_WGMMA = "tl.disable_wgmma"
    TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS = "tl.debug_merge_shared_memory_allocations"
    TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE = "tl.enable_aggressive_shared_memory_merge"
    TL_DISABLE_SHARED_MEMORY_REUSE = "tl.disable_shared_memory_reuse"
    TL_DISABLE_SHUFFLE_ELECT = "tl.disable_shuffle_elect"
    TL_DISABLE_LOOP_UNSWITCHING = "tl.disable_loop_unswitching"
    TL_LOOP_UNSWITCHING_ALLOW_NON_TRIVIAL_ELSE = "tl.loop_unswitching_allow_non_trivial_else"
    TL_IF_STMT_BINDING_INLINE_REPLAYABLE_BINDS = "tl.if_stmt_binding_inline_replayable_binds"
    TL_DISABLE_THREAD_STORAGE_SYNC = "tl.disable_thread_storage_sync"
    TL_FORCE_LET_INLINE = "tl.force_let_inline"
    TL_AST_PRINT_ENABLE = "tl.ast_print_enable"
    TL_LAYOUT_VISUALIZATION_ENABLE = "tl.layout_visualization_enable"
    TL_LAYOUT_VISUALIZATION_FORMATS = "tl.layout_visualization_formats"
    TL_STORAGE_REWRITE_DETECT_INPLACE = "tl.storage_rewrite_detect_inplace"
    TL_DISABLE_OUT_OF_BOUND_WARNING = "tl.disable_out_of_bound_warning"
    TL_ENABLE_DUMP_IR = "tl.enable_dump_ir"
    TL_DUMP_IR_DIR = "tl.dump_ir_path"
    TL_PASS_PROFILE = "tl.pass_profile"
    TL_PASS_PROFILE_THRESHOLD_MS = "tl.pass_profile_threshold_ms"
    TL_UNROLL_LOOP = "tl.UnrollLoop"
    TIR_ENABLE_EQUIV_TERMS_IN_CSE = "tir.enable_equiv_terms_in_cse_tir"
    TIR_DISABLE_CSE = "tirx.disable_cse_tir"
    TIR_SIMPLIFY = "tirx.Simplify"
    TIR_DISABLE_STORAGE_REWRITE = "tirx.disable_storage_rewrite"
    TIR_DISABLE_VECTORIZE = "tirx.disable_vectorize"
    TIR_USE_ASYNC_COPY = "tirx.use_async_copy"
    TIR_ENABLE_DEBUG = "tirx.enable_debug"
    TIR_MERGE_STATIC_SMEM = "tirx.merge_static_smem"
    TIR_ADD_LOWER_PASS = "tirx.add_lower_pass"
    TIR_NOALIAS = "tirx.noalias"
    CUDA_KERNELS_OUTPUT_DIR = "cuda.kernels_output_dir"

    def __str__(self):
        return self.value


K = PassConfigKey

# The keys that act, with the compile option each sets from a true value (or False, for the
# keys whose false value switches the behaviour off).
ACTING = {
    K.TL_DISABLE_TMA_LOWER: "TMA loads and stores off: pipelines stay on cp.async (tma=False)",
    K.TL_DISABLE_WARP_SPECIALIZED: "no producer warpgroup: pipelines stay on cp.async issued by "
    "the kernel's threads (tma=False; tilers specializes warps only to issue TMA)",
    K.TL_DISABLE_WGMMA: "gemms on mma.sync, the sm_80 path (wgmma=False)",
    K.TL_ENABLE_FAST_MATH: "NVRTC --use_fast_math (fast_math=True)",
    K.TL_DISABLE_FAST_MATH: "no --use_fast_math (fast_math=False; the default)",
    K.TL_EMIT_LINE_DIRECTIVES: "#line directives and -lineinfo (lineinfo=True)",
    K.TL_ENABLE_ASYNC_COPY: "False keeps pipelined copies off TMA and cp.async's producer "
    "warps (tma=False); tilers' cp.async itself has no switch",
    K.TIR_USE_ASYNC_COPY: "as tl.enable_async_copy",
}

# The keys tilers accepts and ignores, with the reason (docs/porting.md lists them).
IGNORED = {
    K.TL_SIMPLIFY: "tilers' simplifier has no options",
    K.TL_DISABLE_BUFFER_INIT_CHECK: "tilers has no such warning",
    K.TL_DISABLE_DATA_RACE_CHECK: "tilers inserts the barriers a race needs",
    K.TL_DISABLE_PRELOWER_SEMANTIC_CHECK: "tilers' checks are part of compiling",
    K.TL_PTXAS_REGISTER_USAGE_LEVEL: "NVRTC picks registers; __launch_bounds__ is set by tilers",
    K.TL_DEVICE_COMPILE_FLAGS: "tilers compiles with fixed NVRTC flags (lineinfo and fast "
    "math have their own keys)",
    K.TL_CONFIG_INDEX_BITWIDTH: "tilers widens indices to 64 bits where they can overflow",
    K.TL_ENABLE_REDUCER_PLAN_VERBOSE: "kernel.report() shows the plan",
    K.TL_LAYOUT_COST_MODEL: "tilers has one layout inference",
    K.TL_REDUCER_FORCE_BASELINE: "tilers has one reduction lowering",
    K.TL_DISABLE_SAFE_MEMORY_ACCESS: "tilers keeps bounds checks it cannot prove redundant",
    K.TL_DISABLE_VECTORIZE_256: "tilers vectorizes up to 128 bits",
    K.TL_ENABLE_LOWER_LDGSTG: "tilers chooses its loads and stores",
    K.TL_ENABLE_LOWER_LDGSTG_PREDICATED: "tilers chooses its loads and stores",
    K.TL_ENABLE_VECTORIZE_PLANNER_VERBOSE: "kernel.report() shows vector widths",
    K.TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS: "kernel.report() shows shared memory",
    K.TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE: "tilers plans shared memory one way",
    K.TL_DISABLE_SHARED_MEMORY_REUSE: "tilers plans shared memory one way",
    K.TL_DISABLE_SHUFFLE_ELECT: "tilers elects the TMA thread by its index",
    K.TL_DISABLE_LOOP_UNSWITCHING: "tilers does not unswitch loops",
    K.TL_LOOP_UNSWITCHING_ALLOW_NON_TRIVIAL_ELSE: "tilers does not unswitch loops",
    K.TL_IF_STMT_BINDING_INLINE_REPLAYABLE_BINDS: "no such rewrite in tilers",
    K.TL_DISABLE_THREAD_STORAGE_SYNC: "tilers' barriers are needed for correctness",
    K.TL_FORCE_LET_INLINE: "no such rewrite in tilers",
    K.TL_AST_PRINT_ENABLE: "kernel.ir() shows the IR after every pass",
    K.TL_LAYOUT_VISUALIZATION_ENABLE: "kernel.layouts() and kernel.plot_layout() draw layouts",
    K.TL_LAYOUT_VISUALIZATION_FORMATS: "kernel.plot_layout(buffer, path) picks the format",
    K.TL_STORAGE_REWRITE_DETECT_INPLACE: "no such rewrite in tilers",
    K.TL_DISABLE_OUT_OF_BOUND_WARNING: "tilers has no such warning",
    K.TL_ENABLE_DUMP_IR: "kernel.ir() returns the IR after every pass",
    K.TL_DUMP_IR_DIR: "kernel.ir() returns the IR after every pass",
    K.TL_PASS_PROFILE: "the Rust core compiles in milliseconds; bench/compile.py times it",
    K.TL_PASS_PROFILE_THRESHOLD_MS: "as tl.pass_profile",
    K.TL_UNROLL_LOOP: "tilers unrolls T.unroll loops and the loops it makes",
    K.TIR_ENABLE_EQUIV_TERMS_IN_CSE: "TVM option; tilers has no TVM",
    K.TIR_DISABLE_CSE: "TVM option; tilers has no TVM",
    K.TIR_SIMPLIFY: "TVM option; tilers has no TVM",
    K.TIR_DISABLE_STORAGE_REWRITE: "TVM option; tilers has no TVM",
    K.TIR_DISABLE_VECTORIZE: "TVM option; tilers has no TVM",
    K.TIR_ENABLE_DEBUG: "TVM option; tilers has no TVM",
    K.TIR_MERGE_STATIC_SMEM: "TVM option; tilers has no TVM",
    K.TIR_ADD_LOWER_PASS: "TVM option; tilers has no TVM",
    K.TIR_NOALIAS: "TVM option; tilers has no TVM",
    K.CUDA_KERNELS_OUTPUT_DIR: "kernel.source and tilers-cc write the CUDA where you choose",
}

assert set(ACTING) | set(IGNORED) == set(PassConfigKey)

_BY_VALUE = {k.value: k for k in PassConfigKey}
_warned: set = set()


def _flag(key, value) -> bool:
    if isinstance(value, bool) or value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise TileError(f"pass_configs[{str(key)!r}] must be a bool, got {value!r}")


def normalize(pass_configs) -> dict:
    """``pass_configs`` as {PassConfigKey: value}; an unknown key is an error naming it."""
    if pass_configs is None:
        return {}
    if not isinstance(pass_configs, dict):
        raise TileError(
            f"pass_configs must be a dict of PassConfigKey (or its string) to a value, got "
            f"{type(pass_configs).__name__}"
        )
    result = {}
    for key, value in pass_configs.items():
        member = key if isinstance(key, PassConfigKey) else _BY_VALUE.get(str(key))
        if member is None:
            close = [k for k in _BY_VALUE if str(key).split(".")[-1] in k][:3]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise TileError(
                f"pass_configs: unknown key {key!r}{hint}; tilers.PassConfigKey lists "
                "TileLang's keys"
            )
        result[member] = value
    return result


def apply(pass_configs, options: dict) -> dict:
    """The compile options with ``pass_configs`` applied (options: tma, tma_store,
    persistent, wgmma, fast_math, lineinfo)."""
    configs = normalize(pass_configs)
    options = dict(options)
    for key, value in configs.items():
        if key in IGNORED:
            if key not in _warned:
                _warned.add(key)
                warnings.warn(
                    f"pass_configs key {key.value!r} has no effect in tilers: {IGNORED[key]}",
                    stacklevel=3,
                )
            continue
        if key in (K.TL_DISABLE_TMA_LOWER, K.TL_DISABLE_WARP_SPECIALIZED):
            if _flag(key, value):
                options["tma"] = False
                options["tma_store"] = False
        elif key in (K.TL_ENABLE_ASYNC_COPY, K.TIR_USE_ASYNC_COPY):
            if not _flag(key, value):
                options["tma"] = False
                options["tma_store"] = False
        elif key is K.TL_DISABLE_WGMMA:
            if _flag(key, value):
                options["wgmma"] = False
        elif key is K.TL_ENABLE_FAST_MATH:
            options["fast_math"] = _flag(key, value)
        elif key is K.TL_DISABLE_FAST_MATH:
            if _flag(key, value):
                options["fast_math"] = False
        elif key is K.TL_EMIT_LINE_DIRECTIVES:
            if _flag(key, value):
                options["lineinfo"] = True
    return options
