//! Ahead-of-time export: a C header and a C source that launch a compiled kernel from C or
//! C++ with only the CUDA driver at run time (docs/export.md).
//!
//! [`export_c`] turns a kernel's KernelInfo and cubin into `tilers_<name>.h` and
//! `tilers_<name>.c`: `tilers_<name>_launch(tensors..., scalars..., [workspace,
//! workspace_bytes,] CUstream)` checks the call against the KernelInfo (ranks, shapes,
//! symbolic sizes and their `multiple_of`, strides, NULL and misaligned pointers, the
//! workspace), evaluates the grid, loads the embedded cubin once per CUDA context, encodes
//! the tensor maps and calls `cuLaunchKernel` — the steps of the Python launcher
//! (crates/tile-py/src/launcher.rs), in C. Every failure is a CUresult with a message
//! (`tilers_<name>_last_error()`), never a crash. [`export_dispatcher`] writes one launch
//! function over several exported specializations of one signature (a config per size
//! bucket), as Triton's AOT `link` does. The C runtime all exports share is `runtime.c`,
//! copied into each source with static linkage.

use std::fmt::Write;
use tile_codegen::kernel_info::tma::{swizzle_mode, tma_data_type};
use tile_codegen::kernel_info::{Extent, GridExpr, GridOp, KernelInfo, ParamInfo, MAX_GRID};

/// The C the runtime of every export shares.
const RUNTIME: &str = include_str!("runtime.c");

/// The most kernels one exported call launches in turn (runtime.c's `TL_MAX_LAUNCHES`).
pub const MAX_LAUNCHES: usize = 16;

/// Byte alignment of each scratch buffer inside the caller's workspace.
pub const WORKSPACE_ALIGN: u64 = 256;

/// The two files of one export.
#[derive(Clone, Debug, PartialEq)]
pub struct Exported {
    /// `tilers_<name>.h`
    pub header: String,
    /// `tilers_<name>.c`
    pub source: String,
}

/// Definitions every header repeats under one guard: the status codes and the tensor type.
const COMMON_HEADER: &str = r#"#ifndef TILERS_EXPORT_COMMON
#define TILERS_EXPORT_COMMON
/* A CUresult: 0 on success, else the driver's error or one of these (cuda.h's numbers). */
typedef int tilers_status;
#define TILERS_SUCCESS 0
#define TILERS_ERROR_INVALID_VALUE 1           /* an argument the kernel cannot take */
#define TILERS_ERROR_INVALID_CONTEXT 201       /* no CUDA context to run in */
#define TILERS_ERROR_NO_BINARY_FOR_GPU 209     /* the cubin's architecture is not the GPU's */
#define TILERS_ERROR_DRIVER_SYMBOL_MISSING 302 /* libcuda lacks a function the launcher needs */
#define TILERS_ERROR_NO_DRIVER 303             /* libcuda could not be opened */
#define TILERS_ERROR_NOT_SUPPORTED 801         /* e.g. tensor maps on a driver before CUDA 12 */

/* A tensor argument: its device data, rank, shape and strides (in elements; NULL: the
 * contiguous, row-major ones), as DLPack's DLTensor has them. */
typedef struct tilers_tensor {
    void *data;
    int32_t ndim;
    const int64_t *shape;
    const int64_t *strides;
} tilers_tensor;
#endif
#if !defined(__cuda_cuda_h__) && !defined(TILERS_CUSTREAM_DECLARED)
#define TILERS_CUSTREAM_DECLARED
typedef struct CUstream_st *CUstream; /* as cuda.h declares it (cudaStream_t is the same) */
#endif
"#;

/// Words C or our own generated code reserve: a parameter spelled so gets a `_` appended.
const RESERVED: &[&str] = &[
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "bool",
    "true",
    "false",
    "class",
    "new",
    "delete",
    "this",
    "template",
    "namespace",
    "operator",
    "private",
    "public",
    "protected",
    "virtual",
    "friend",
    "try",
    "catch",
    "throw",
    "stream",
    "workspace",
    "workspace_bytes",
    "bytes",
    "call",
];

/// Whether `name` is a C identifier.
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The C name of a parameter: the user's, unless C or the launcher reserves it.
fn c_name(name: &str) -> String {
    let mut out: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if RESERVED.contains(&out.as_str()) || out.starts_with("tl_") || out.starts_with("tilers_") {
        out.push('_');
    }
    out
}

/// The C type a scalar parameter of `dtype` is passed as (the kernel's own parameter type).
fn scalar_type(dtype: &str) -> Option<&'static str> {
    Some(match dtype {
        "bool" => "bool",
        "int8" => "int8_t",
        "uint8" => "uint8_t",
        "int16" => "int16_t",
        "uint16" => "uint16_t",
        "int32" => "int32_t",
        "uint32" => "uint32_t",
        "int64" => "int64_t",
        "uint64" => "uint64_t",
        "float32" => "float",
        "float64" => "double",
        _ => return None,
    })
}

/// A C string literal of `text`.
fn c_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

/// `float16[1000, M]`: a tensor parameter as its documentation writes it.
fn tensor_text(info: &KernelInfo, dtype: &str, shape: &[Extent]) -> String {
    let dims: Vec<String> = shape.iter().map(|e| extent_text(info, e)).collect();
    format!("{dtype}[{}]", dims.join(", "))
}

fn extent_text(info: &KernelInfo, e: &Extent) -> String {
    match e {
        Extent::Fixed(n) => n.to_string(),
        Extent::Expr(GridExpr::Size { size }) => info.sizes.get(*size).map_or("?".into(), |s| s.name.clone()),
        Extent::Expr(_) => "(an expression of the sizes)".into(),
    }
}

/// The C expression of a grid or size expression; `&tl_bad` records a division by zero,
/// an overflow or a float that is not finite. Scalars are the launch function's
/// parameters, sizes `call->sizes[k]`.
fn c_expr(e: &GridExpr, info: &KernelInfo, names: &[String]) -> Result<String, String> {
    Ok(match e {
        GridExpr::Const { value } => format!("INT64_C({value})"),
        GridExpr::Size { size } if *size < info.sizes.len() => format!("call->sizes[{size}]"),
        GridExpr::Size { size } => return Err(format!("the KernelInfo reads size {size}, which is not one")),
        GridExpr::Param { param } => {
            let Some(ParamInfo::Scalar { dtype, .. }) = info.params.get(*param) else {
                return Err(format!("the grid reads parameter {param}, which is not a scalar"));
            };
            let name = &names[*param];
            match dtype.as_str() {
                "float32" | "float64" => format!("tl_trunc((double){name}, &tl_bad)"),
                "uint64" => format!("tl_unsigned({name}, &tl_bad)"),
                _ => format!("(int64_t){name}"),
            }
        }
        GridExpr::Op { op, a, b } => {
            let (a, b) = (c_expr(a, info, names)?, c_expr(b, info, names)?);
            match op {
                GridOp::Add => format!("tl_add({a}, {b}, &tl_bad)"),
                GridOp::Sub => format!("tl_sub({a}, {b}, &tl_bad)"),
                GridOp::Mul => format!("tl_mul({a}, {b}, &tl_bad)"),
                GridOp::FloorDiv => format!("tl_floordiv({a}, {b}, &tl_bad)"),
                GridOp::CeilDiv => format!("tl_ceildiv({a}, {b}, &tl_bad)"),
                GridOp::Min => format!("tl_min({a}, {b})"),
                GridOp::Max => format!("tl_max({a}, {b})"),
            }
        }
    })
}

/// What one tensor parameter is, for the generated checks.
struct TensorParam<'a> {
    index: usize,
    name: &'a str,
    c: String,
    dtype: &'a str,
    shape: &'a [Extent],
    /// The strides the kernel assumes when they are fixed; None: contiguous at the call's shape.
    strides: Option<Vec<i64>>,
    align: u64,
}

/// The launch signature's parameters (`tilers_tensor A, float alpha`) and the documentation
/// lines of each, for a kernel whose C names are `names`.
fn signature(info: &KernelInfo, names: &[String]) -> Result<(Vec<String>, Vec<String>), String> {
    let mut params = Vec::new();
    let mut docs = Vec::new();
    for (p, name) in info.params.iter().zip(names) {
        match p {
            ParamInfo::Tensor { dtype, shape, written, .. } => {
                params.push(format!("tilers_tensor {name}"));
                let role = if *written { "written" } else { "read" };
                docs.push(format!(" *   {name}: {} ({role})", tensor_text(info, dtype, shape)));
            }
            ParamInfo::Scalar { name: user, dtype } => {
                let ty = scalar_type(dtype).ok_or_else(|| {
                    format!("scalar parameter '{user}' is {dtype}, which a C launcher cannot pass by value")
                })?;
                params.push(format!("{ty} {name}"));
                docs.push(format!(" *   {name}: {dtype}"));
            }
        }
    }
    Ok((params, docs))
}

/// The kernel's C parameter names, in order.
fn param_names(info: &KernelInfo) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in &info.params {
        let mut name = c_name(p.name());
        while names.contains(&name) {
            name.push('_');
        }
        names.push(name);
    }
    names
}

/// The header and source that launch `info`'s kernel, embedding `cubin`, with functions
/// named `tilers_<name>_...`; an error says why the kernel cannot be exported.
pub fn export_c(info: &KernelInfo, cubin: &[u8], name: &str) -> Result<Exported, String> {
    if !is_identifier(name) {
        return Err(format!("the export name {name:?} is not a C identifier (letters, digits and _)"));
    }
    let launches: Vec<&KernelInfo> = info.launches().collect();
    if launches.len() > MAX_LAUNCHES {
        return Err(format!(
            "'{}' launches {} kernels in turn (several T.Kernel in one prim_func); the C launcher takes at most {MAX_LAUNCHES}",
            info.name,
            launches.len()
        ));
    }
    let mut entries = Vec::new();
    for launch in &launches {
        let Some(entry) = &launch.entry else {
            return Err(format!(
                "kernel '{}' was compiled for the interpreter: it has no GPU code",
                info.name
            ));
        };
        entries.push(entry.as_str());
        // clusters along x, compiled in (__cluster_dims__): launched like any kernel
        if let Some(why) = launch.cluster_problem() {
            return Err(format!("kernel '{}' cannot be launched: {why}", info.name));
        }
        if launch.grid.len() != 3 {
            return Err("the KernelInfo's grid must have three dimensions".into());
        }
    }
    if cubin.is_empty() {
        return Err(format!("kernel '{}': the cubin is empty", info.name));
    }
    let arch = parse_arch(&info.arch)?;
    let names = param_names(info);
    let (signature, docs) = signature(info, &names)?;
    let mut tensors = Vec::new();
    for (index, p) in info.params.iter().enumerate() {
        if let ParamInfo::Tensor { name, dtype, shape, strides, align, .. } = p {
            for e in shape {
                if let Extent::Expr(g) = e {
                    if !matches!(g, GridExpr::Size { size } if *size < info.sizes.len()) {
                        return Err(format!(
                            "parameter '{name}': a dimension is neither a number nor a size"
                        ));
                    }
                }
            }
            if *align == 0 || !align.is_power_of_two() {
                return Err(format!("parameter '{name}' has an alignment of {align}"));
            }
            let strides: Option<Vec<i64>> = if shape.iter().all(|e| e.fixed().is_some()) {
                strides.iter().map(Extent::fixed).collect()
            } else {
                None
            };
            tensors.push(TensorParam {
                index,
                name,
                c: names[index].clone(),
                dtype,
                shape,
                strides,
                align: *align,
            });
        }
    }
    for size in &info.sizes {
        if size.from.is_empty() {
            return Err(format!("size '{}' is a dimension of no tensor parameter", size.name));
        }
        if size.multiple_of < 1 {
            return Err(format!("size '{}' has a multiple of {}", size.name, size.multiple_of));
        }
        if !matches!(size.dtype.as_str(), "int32" | "int64") {
            return Err(format!("size '{}' is {}; sizes are int32 or int64", size.name, size.dtype));
        }
    }
    for map in launches.iter().flat_map(|l| &l.tensor_maps) {
        let Some(ParamInfo::Tensor { name, dtype, shape, .. }) = info.params.get(map.param) else {
            return Err(format!("a tensor map of parameter {}, which is not a tensor", map.param));
        };
        if tma_data_type(dtype).is_none() {
            return Err(format!("the tensor map of parameter '{name}': TMA cannot copy {dtype}"));
        }
        if !(1..=5).contains(&shape.len()) || map.box_shape.len() != shape.len() {
            return Err(format!(
                "the tensor map of parameter '{name}': a box {:?} for {} dimensions",
                map.box_shape,
                shape.len()
            ));
        }
        if swizzle_mode(map.swizzle).is_none() {
            return Err(format!("the tensor map of parameter '{name}': a swizzle of {} bytes", map.swizzle));
        }
    }
    let has_workspace = !info.scratch.is_empty();
    let header = header(info, name, &signature, &docs, has_workspace);
    let source = source(info, cubin, name, &entries, arch, &names, &tensors, &signature, has_workspace)?;
    Ok(Exported { header, source })
}

/// sm_90a → (9, 0, exact); sm_86 → (8, 6, not exact).
fn parse_arch(arch: &str) -> Result<(u32, u32, bool), String> {
    let bad = || format!("the architecture {arch:?} is not sm_<major><minor>[a]");
    let digits = arch.strip_prefix("sm_").ok_or_else(bad)?;
    let (digits, exact) = match digits.strip_suffix('a') {
        Some(d) => (d, true),
        None => (digits, false),
    };
    if digits.len() < 2 || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let (major, minor) = digits.split_at(digits.len() - 1);
    Ok((major.parse().map_err(|_| bad())?, minor.parse().map_err(|_| bad())?, exact))
}

fn header(info: &KernelInfo, name: &str, signature: &[String], docs: &[String], workspace: bool) -> String {
    let guard = format!("TILERS_{}_H", name.to_ascii_uppercase());
    let mut h = String::new();
    let _ = writeln!(
        h,
        "/* tilers_{name}.h: launch the tilers kernel '{}' ({}) from C or C++.",
        info.name, info.arch
    );
    let _ = writeln!(h, " * Written by tilers' export (docs/export.md); build tilers_{name}.c with it. */");
    let _ = writeln!(h, "#ifndef {guard}\n#define {guard}\n");
    h.push_str(
        "#include <stddef.h>\n#include <stdint.h>\n#ifndef __cplusplus\n#include <stdbool.h>\n#endif\n\n",
    );
    h.push_str(COMMON_HEADER);
    h.push_str("\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n");
    let args = signature.join(", ");
    let workspace_args = if workspace { ", void *workspace, size_t workspace_bytes" } else { "" };
    let _ = writeln!(
        h,
        "/* Launch '{}' on `stream` (NULL: the default stream of the current context; the",
        info.name
    );
    h.push_str(" * kernel runs in the stream's context). Checks every argument first and launches nothing\n");
    h.push_str(" * when one is wrong: returns TILERS_SUCCESS, or a status whose reason\n");
    let _ =
        writeln!(h, " * tilers_{name}_last_error() gives. Never synchronizes; capturable in a CUDA graph.");
    h.push_str(" * Parameters:\n");
    for d in docs {
        h.push_str(d);
        h.push('\n');
    }
    if workspace {
        let _ = writeln!(
            h,
            " *   workspace: device memory of at least tilers_{name}_workspace_size() bytes, 16-byte aligned,\n *     for the kernel's T.alloc_global scratch; it may be reused once the kernel has run"
        );
    }
    h.push_str(" */\n");
    let _ = writeln!(h, "tilers_status tilers_{name}_launch({args}{workspace_args}, CUstream stream);\n");
    let _ = writeln!(h, "/* The checks of tilers_{name}_launch, launching nothing. */");
    let _ = writeln!(h, "tilers_status tilers_{name}_check({args}{workspace_args});\n");
    h.push_str("/* The workspace bytes a launch with these shapes needs (0 for a kernel without scratch);\n");
    h.push_str(
        " * checks the shapes (not the data pointers), so it also tells whether the kernel takes them. */\n",
    );
    let _ = writeln!(h, "tilers_status tilers_{name}_workspace_size({args}, size_t *bytes);\n");
    h.push_str("/* Why the last call that failed on this thread failed. */\n");
    let _ = writeln!(h, "const char *tilers_{name}_last_error(void);\n");
    h.push_str("#ifdef __cplusplus\n}\n#endif\n");
    let _ = writeln!(h, "#endif /* {guard} */");
    h
}

/// The argument list of a call of one of the generated functions: the parameters' names.
fn call_args(names: &[String]) -> String {
    names.join(", ")
}

#[allow(clippy::too_many_arguments)]
fn source(
    info: &KernelInfo,
    cubin: &[u8],
    name: &str,
    entries: &[&str],
    (major, minor, exact): (u32, u32, bool),
    names: &[String],
    tensors: &[TensorParam<'_>],
    signature: &[String],
    workspace: bool,
) -> Result<String, String> {
    let kernel = format!("tilers_{name}");
    let mut c = String::new();
    let _ = writeln!(
        c,
        "/* tilers_{name}.c: the C launcher of the tilers kernel '{}' (docs/export.md).",
        info.name
    );
    let _ = writeln!(c, " * Compile as C11 (cc -c tilers_{name}.c); link with -ldl -lpthread. Needs only libcuda at run time. */");
    let _ = writeln!(c, "#include \"tilers_{name}.h\"\n");
    c.push_str(RUNTIME);
    c.push('\n');
    // the cubin
    let _ = writeln!(c, "/* the cubin ({}, {} bytes; {}) */", info.arch, cubin.len(), entries_text(entries));
    c.push_str("static _Alignas(64) const unsigned char tl_cubin[] = {\n");
    for chunk in cubin.chunks(20) {
        c.push_str("   ");
        for b in chunk {
            let _ = write!(c, " {b},");
        }
        c.push('\n');
    }
    c.push_str("};\n\n");
    let _ = writeln!(c, "static const char tl_kernel[] = {};", c_string(&kernel));
    let launches: Vec<&KernelInfo> = info.launches().collect();
    let n = launches.len();
    let quoted: Vec<String> = entries.iter().map(|e| c_string(e)).collect();
    let _ = writeln!(c, "/* the kernels a call launches, in order, their shared memory and cluster size */");
    let _ = writeln!(c, "static const char *const tl_entries[{n}] = {{{}}};", quoted.join(", "));
    let shared: Vec<String> = launches.iter().map(|l| format!("{}u", l.shared_bytes)).collect();
    let _ = writeln!(c, "static const unsigned tl_shared[{n}] = {{{}}};", shared.join(", "));
    let cluster: Vec<String> = launches.iter().map(|l| format!("{}u", l.cluster[0].max(1))).collect();
    let _ = writeln!(c, "static const unsigned tl_cluster[{n}] = {{{}}};", cluster.join(", "));
    let blocks: Vec<String> = launches
        .iter()
        .map(|l| l.block.iter().map(|b| format!("{b}u")).collect::<Vec<_>>().join(", "))
        .collect();
    let _ = writeln!(c, "static const unsigned tl_block[{}] = {{{}}};", 3 * n, blocks.join(", "));
    let _ = writeln!(c, "static const char tl_arch[] = {};", c_string(&info.arch));
    c.push_str("static tl_loaded tl_table[TL_MAX_CONTEXTS];\nstatic int tl_table_count;\n");
    c.push_str("static pthread_mutex_t tl_lock = PTHREAD_MUTEX_INITIALIZER;\n");
    let maps: usize = launches.iter().map(|l| l.tensor_maps.len()).sum();
    if maps > 0 {
        let _ = writeln!(c, "static tl_cached_map tl_map_cache[{maps}];");
    }
    c.push('\n');
    let _ = writeln!(c, "const char *{kernel}_last_error(void) {{ return tl_message; }}\n");

    // what a checked call hands to the launch
    let n_sizes = info.sizes.len();
    c.push_str("/* what the checks of a call find: the sizes, the grid, the expected strides, the scratch offsets */\n");
    c.push_str("typedef struct {\n");
    let _ = writeln!(c, "    int64_t sizes[{}];", n_sizes.max(1));
    let _ = writeln!(c, "    int64_t grid[{n}][3];");
    for t in tensors {
        let _ = writeln!(c, "    int64_t strides_{}[{}];", t.index, t.shape.len().max(1));
    }
    let _ = writeln!(c, "    size_t scratch_offset[{}];", info.scratch.len().max(1));
    c.push_str("    size_t workspace_bytes;\n} tl_call;\n\n");

    // the checks
    let args = signature.join(", ");
    let workspace_params = if workspace { ", void *workspace, size_t workspace_bytes" } else { "" };
    let _ = writeln!(c, "/* The checks of a call, in the order the Python launcher makes them; `data`: the");
    c.push_str(" * pointers too (a workspace size query has none yet). */\n");
    let _ = writeln!(c, "static tl_result tl_check(tl_call *call, int data, {args}{workspace_params}) {{");
    c.push_str("    char tl_got[256];\n    int tl_bad = 0;\n");
    c.push_str("    (void)tl_got;\n    (void)tl_bad;\n    (void)data;\n");
    if n_sizes > 0 {
        let _ = writeln!(c, "    int tl_bound[{n_sizes}] = {{0}};");
        let _ = writeln!(c, "    const char *tl_bound_by[{n_sizes}] = {{0}};");
    }
    for (p, name) in info.params.iter().zip(names) {
        if let ParamInfo::Scalar { .. } = p {
            let _ = writeln!(c, "    (void){name};");
        }
    }
    // ranks and shapes, binding the sizes
    for t in tensors {
        let rank = t.shape.len();
        let expected = tensor_text(info, t.dtype, t.shape);
        let v = &t.c;
        let _ = writeln!(c, "    if ({v}.ndim != {rank} || {v}.shape == NULL)");
        let _ = writeln!(
            c,
            "        return tl_fail(TL_INVALID_VALUE, \"%s: parameter '{}': expected a {rank}-dimensional tensor ({expected}), got %d dimensions%s\", tl_kernel, (int){v}.ndim, {v}.shape == NULL ? \" and a NULL shape\" : \"\");",
            t.name
        );
        for (d, e) in t.shape.iter().enumerate() {
            match e {
                Extent::Fixed(n) => {
                    let _ = writeln!(c, "    if ({v}.shape[{d}] != {n})");
                    let _ = writeln!(
                        c,
                        "        return tl_fail(TL_INVALID_VALUE, \"%s: parameter '{}': expected shape {}, got %s (the kernel was compiled for that shape)\", tl_kernel, tl_shape_text(tl_got, sizeof tl_got, {v}.shape, {rank}));",
                        t.name,
                        shape_tuple(info, t.shape)
                    );
                }
                Extent::Expr(GridExpr::Size { size: k }) => {
                    let size = &info.sizes[*k].name;
                    let _ = writeln!(c, "    if (!tl_bound[{k}]) {{");
                    let _ = writeln!(c, "        call->sizes[{k}] = {v}.shape[{d}];");
                    let _ = writeln!(c, "        tl_bound[{k}] = 1;");
                    let _ = writeln!(
                        c,
                        "        tl_bound_by[{k}] = \"dimension {d} of parameter '{}'\";",
                        t.name
                    );
                    let _ = writeln!(c, "    }} else if ({v}.shape[{d}] != call->sizes[{k}]) {{");
                    let _ = writeln!(
                        c,
                        "        return tl_fail(TL_INVALID_VALUE, \"%s: parameter '{}': dimension {d} is %lld, but size '{size}' is %lld (%s)\", tl_kernel, (long long){v}.shape[{d}], (long long)call->sizes[{k}], tl_bound_by[{k}]);",
                        t.name
                    );
                    c.push_str("    }\n");
                }
                Extent::Expr(_) => unreachable!("checked by export_c"),
            }
        }
    }
    // the sizes: in their type's range, multiples of what T.dynamic promised
    for (k, size) in info.sizes.iter().enumerate() {
        let max = if size.dtype == "int64" { "INT64_MAX" } else { "INT32_MAX" };
        let _ = writeln!(c, "    if (call->sizes[{k}] < 0 || call->sizes[{k}] > {max})");
        let _ = writeln!(
            c,
            "        return tl_fail(TL_INVALID_VALUE, \"%s: size '{}' (%s) is %lld: it must be 0 to %lld ({})\", tl_kernel, tl_bound_by[{k}], (long long)call->sizes[{k}], (long long){max});",
            size.name, size.dtype
        );
        if size.multiple_of > 1 {
            let m = size.multiple_of;
            let _ = writeln!(c, "    if (call->sizes[{k}] % {m} != 0)");
            let _ = writeln!(
                c,
                "        return tl_fail(TL_INVALID_VALUE, \"%s: size '{}' (%s) is %lld, but the kernel was compiled for multiples of {m} (T.dynamic(\\\"{}\\\", multiple_of={m}))\", tl_kernel, tl_bound_by[{k}], (long long)call->sizes[{k}]);",
                size.name, size.name
            );
        }
    }
    // strides, element counts, pointers
    for t in tensors {
        let rank = t.shape.len();
        let v = &t.c;
        let field = format!("call->strides_{}", t.index);
        match &t.strides {
            Some(strides) => {
                for (d, s) in strides.iter().enumerate() {
                    let _ = writeln!(c, "    {field}[{d}] = {s};");
                }
            }
            None => {
                let _ = writeln!(c, "    tl_contiguous({field}, {v}.shape, {rank});");
            }
        }
        let _ = writeln!(c, "    if (!tl_strides_match({v}.strides, {field}, {v}.shape, {rank})) {{");
        c.push_str("        char tl_want[256];\n");
        let _ = writeln!(
            c,
            "        return tl_fail(TL_INVALID_VALUE, \"%s: parameter '{}': expected strides %s (in elements), got %s\", tl_kernel, tl_shape_text(tl_want, sizeof tl_want, {field}, {rank}), tl_shape_text(tl_got, sizeof tl_got, {v}.strides, {rank}));",
            t.name
        );
        c.push_str("    }\n");
        // the element count (overflow), and NULL is fine for an empty tensor only
        c.push_str("    {\n        int64_t tl_elements = 1;\n");
        let _ = writeln!(c, "        for (int d = 0; d < {rank}; d++) tl_elements = tl_mul(tl_elements, {v}.shape[d], &tl_bad);");
        let _ = writeln!(c, "        if (tl_bad || tl_elements < 0)");
        let _ = writeln!(
            c,
            "            return tl_fail(TL_INVALID_VALUE, \"%s: parameter '{}': the shape %s has no valid element count\", tl_kernel, tl_shape_text(tl_got, sizeof tl_got, {v}.shape, {rank}));",
            t.name
        );
        let _ = writeln!(c, "        if (data && {v}.data == NULL && tl_elements > 0)");
        let _ = writeln!(
            c,
            "            return tl_fail(TL_INVALID_VALUE, \"%s: parameter '{}' is a NULL pointer (expected the device data of a {} tensor)\", tl_kernel);",
            t.name,
            tensor_text(info, t.dtype, t.shape)
        );
        c.push_str("    }\n");
        let a = t.align;
        let _ = writeln!(c, "    if (data && (uintptr_t){v}.data % {a} != 0)");
        let _ = writeln!(
            c,
            "        return tl_fail(TL_INVALID_VALUE, \"%s: parameter '{}': the kernel assumes a {a}-byte aligned data pointer, got %p (%d bytes past a multiple of {a}; a view that starts at an offset?)\", tl_kernel, {v}.data, (int)((uintptr_t){v}.data % {a}));",
            t.name
        );
    }
    // the workspace
    c.push_str("    call->workspace_bytes = 0;\n");
    for (k, s) in info.scratch.iter().enumerate() {
        let bytes = match &s.bytes {
            Extent::Fixed(n) => format!("INT64_C({n})"),
            Extent::Expr(e) => c_expr(e, info, names)?,
        };
        c.push_str("    {\n");
        let _ = writeln!(c, "        int64_t tl_bytes = {bytes};");
        let _ = writeln!(c, "        if (tl_bad || tl_bytes < 0)");
        let _ = writeln!(
            c,
            "            return tl_fail(TL_INVALID_VALUE, \"%s: the size of scratch buffer '{}' (T.alloc_global) overflows\", tl_kernel);",
            s.name
        );
        let _ = writeln!(c, "        call->scratch_offset[{k}] = call->workspace_bytes;");
        let _ = writeln!(
            c,
            "        call->workspace_bytes += ((size_t)tl_bytes + {a} - 1) / {a} * {a};",
            a = WORKSPACE_ALIGN
        );
        c.push_str("    }\n");
    }
    if workspace {
        c.push_str("    if (data && call->workspace_bytes > 0) {\n");
        c.push_str("        if (workspace == NULL)\n");
        let _ = writeln!(
            c,
            "            return tl_fail(TL_INVALID_VALUE, \"%s: workspace: this call needs %zu bytes of workspace (%s_workspace_size), got NULL\", tl_kernel, call->workspace_bytes, tl_kernel);"
        );
        c.push_str("        if (workspace_bytes < call->workspace_bytes)\n");
        let _ = writeln!(
            c,
            "            return tl_fail(TL_INVALID_VALUE, \"%s: workspace: this call needs %zu bytes of workspace (%s_workspace_size), got %zu\", tl_kernel, call->workspace_bytes, tl_kernel, workspace_bytes);"
        );
        c.push_str("        if ((uintptr_t)workspace % 16 != 0)\n");
        let _ = writeln!(
            c,
            "            return tl_fail(TL_INVALID_VALUE, \"%s: workspace: expected a 16-byte aligned pointer, got %p\", tl_kernel, workspace);"
        );
        c.push_str("    }\n");
    }
    // the grids, one per kernel
    let axes = ["x", "y", "z"];
    for (k, launch) in launches.iter().enumerate() {
        let which =
            if n > 1 { format!(" of kernel {} of {n} ({})", k + 1, entries[k]) } else { String::new() };
        for (axis, e) in launch.grid.iter().enumerate() {
            let expr = c_expr(e, info, names)?;
            let limit = MAX_GRID[axis];
            let _ = writeln!(c, "    call->grid[{k}][{axis}] = {expr};");
            let _ = writeln!(
                c,
                "    if (tl_bad || call->grid[{k}][{axis}] < 0 || call->grid[{k}][{axis}] > {limit}) {{"
            );
            // `tl_from`: " (from ...)", the parameters and sizes the dimension reads
            let (format, values) = grid_sources(e, info, names);
            let from = |c: &mut String| {
                c.push_str("        char tl_from[256];\n");
                if format.is_empty() {
                    c.push_str("        tl_from[0] = '\\0';\n");
                } else {
                    let _ = writeln!(c, "        snprintf(tl_from, sizeof tl_from, \"{format}\"{values});");
                }
            };
            from(&mut c);
            let x = axes[axis];
            let _ = writeln!(c, "        if (tl_bad == 1) return tl_fail(TL_INVALID_VALUE, \"%s: grid dimension {x}{which} divides by zero%s\", tl_kernel, tl_from);");
            let _ = writeln!(c, "        if (tl_bad == 3) return tl_fail(TL_INVALID_VALUE, \"%s: grid dimension {x}{which} reads a float that is not finite%s: it has no number of blocks\", tl_kernel, tl_from);");
            let _ = writeln!(c, "        if (tl_bad == 2) return tl_fail(TL_INVALID_VALUE, \"%s: grid dimension {x}{which} overflows%s: over the CUDA limit of {limit} blocks\", tl_kernel, tl_from);");
            let _ = writeln!(c, "        if (call->grid[{k}][{axis}] < 0) return tl_fail(TL_INVALID_VALUE, \"%s: grid dimension {x}{which} is %lld%s: a grid dimension cannot be negative\", tl_kernel, (long long)call->grid[{k}][{axis}], tl_from);");
            let _ = writeln!(c, "        return tl_fail(TL_INVALID_VALUE, \"%s: grid dimension {x}{which} is %lld%s: over the CUDA limit of {limit} blocks\", tl_kernel, (long long)call->grid[{k}][{axis}], tl_from);");
            c.push_str("    }\n");
            // a tile per block in clusters along x: whole clusters (a constant grid was
            // checked at export)
            let cluster = launch.cluster[0];
            if axis == 0 && cluster > 1 && !launch.persistent && !matches!(e, GridExpr::Const { .. }) {
                let _ = writeln!(c, "    if (call->grid[{k}][0] % {cluster} != 0) {{");
                from(&mut c);
                let _ = writeln!(c, "        return tl_fail(TL_INVALID_VALUE, \"%s: grid dimension x{which} is %lld%s: the kernel runs in thread-block clusters of {cluster} blocks along x, so it must be a multiple of {cluster}\", tl_kernel, (long long)call->grid[{k}][0], tl_from);");
                c.push_str("    }\n");
            }
        }
    }
    c.push_str("    return 0;\n}\n\n");

    let all = call_args(names);
    let workspace_call = if workspace { ", workspace, workspace_bytes" } else { "" };
    let workspace_none = if workspace { ", NULL, 0" } else { "" };
    // the public checks and the workspace query
    let _ = writeln!(c, "tilers_status {kernel}_check({args}{workspace_params}) {{");
    let _ = writeln!(c, "    tl_call call;\n    return tl_check(&call, 1, {all}{workspace_call});\n}}\n");
    let _ = writeln!(c, "tilers_status {kernel}_workspace_size({args}, size_t *bytes) {{");
    c.push_str("    tl_call call;\n");
    c.push_str("    if (bytes == NULL) return tl_fail(TL_INVALID_VALUE, \"%s_workspace_size: bytes is NULL\", tl_kernel);\n");
    c.push_str("    *bytes = 0;\n");
    let _ = writeln!(c, "    tl_result status = tl_check(&call, 0, {all}{workspace_none});");
    c.push_str("    if (status == 0) *bytes = call.workspace_bytes;\n    return status;\n}\n\n");

    // the launch: each kernel with blocks, in order, on the stream (which orders them)
    let _ = writeln!(c, "tilers_status {kernel}_launch({args}{workspace_params}, CUstream stream) {{");
    c.push_str("    tl_call call;\n");
    let _ = writeln!(c, "    tl_result status = tl_check(&call, 1, {all}{workspace_call});");
    c.push_str("    if (status != 0) return status;\n");
    c.push_str(
        "    /* kernels of no blocks (a size of 0) are not launched; none with blocks: nothing to do */\n",
    );
    let _ = writeln!(c, "    int tl_any = 0;\n    for (int k = 0; k < {n}; k++)");
    c.push_str("        tl_any |= call.grid[k][0] != 0 && call.grid[k][1] != 0 && call.grid[k][2] != 0;\n");
    c.push_str("    if (!tl_any) return 0;\n");
    c.push_str("    if ((status = tl_driver_ready(tl_kernel)) != 0) return status;\n");
    c.push_str("    tl_handle context;\n    int pushed;\n");
    c.push_str("    if ((status = tl_enter(tl_kernel, stream, &context, &pushed)) != 0) return status;\n");
    c.push_str("    const tl_loaded *loaded = NULL;\n");
    let _ = writeln!(
        c,
        "    status = tl_load(tl_kernel, tl_table, &tl_table_count, &tl_lock, context, tl_cubin, tl_entries, tl_shared, tl_cluster, tl_block, {n}, tl_arch, {major}, {minor}, {}, &loaded);",
        exact as u8
    );
    c.push_str("    if (status != 0) {\n        tl_leave(pushed);\n        return status;\n    }\n");
    // the arguments every kernel takes: the params, scratch pointers, sizes (its maps follow)
    let mut common = Vec::new();
    for (p, n) in info.params.iter().zip(names) {
        match p {
            ParamInfo::Tensor { .. } => common.push(format!("&{n}.data")),
            ParamInfo::Scalar { .. } => common.push(format!("&{n}")),
        }
    }
    for k in 0..info.scratch.len() {
        let _ = writeln!(c, "    void *tl_scratch{k} = (char *)workspace + call.scratch_offset[{k}];");
        common.push(format!("&tl_scratch{k}"));
    }
    for (k, s) in info.sizes.iter().enumerate() {
        let ty = if s.dtype == "int64" { "int64_t" } else { "int32_t" };
        let _ = writeln!(c, "    {ty} tl_size{k} = ({ty})call.sizes[{k}];");
        common.push(format!("&tl_size{k}"));
    }
    let mut cached = 0;
    // a kernel that waits for the ones before it (KernelInfo dependent_launch) starts early
    // only behind a kernel of this call, never as the call's first launch
    let dependents = launches.iter().any(|l| l.dependent_launch);
    if dependents {
        c.push_str("    int tl_launched = 0;\n");
    }
    for (k, launch) in launches.iter().enumerate() {
        if n > 1 {
            let _ = writeln!(c, "    /* kernel {} of {n}: {} */", k + 1, entries[k]);
        }
        let _ = writeln!(
            c,
            "    if (call.grid[{k}][0] != 0 && call.grid[{k}][1] != 0 && call.grid[{k}][2] != 0) {{"
        );
        let _ = writeln!(
            c,
            "        unsigned grid[3] = {{(unsigned)call.grid[{k}][0], (unsigned)call.grid[{k}][1], (unsigned)call.grid[{k}][2]}};"
        );
        if launch.persistent {
            // one block per SM (at most one per tile); in clusters of n, as many whole
            // clusters as run at once (asked of the driver when loaded; else SMs / n), at
            // most one per group of n tiles
            let n = launch.cluster[0].max(1);
            let what = if n > 1 {
                format!("the clusters of {n} blocks that run at once")
            } else {
                "one block per SM".into()
            };
            let _ =
                writeln!(c, "        /* persistent: {what} (at most one per tile) walk the grid's tiles */");
            c.push_str("        {\n            uint64_t tiles = (uint64_t)grid[0] * grid[1];\n");
            c.push_str("            tiles = tiles > UINT64_MAX / grid[2] ? UINT64_MAX : tiles * grid[2];\n");
            let _ = writeln!(
                c,
                "            uint64_t groups = tiles / {n}u, clusters = (uint64_t)loaded->clusters[{k}];"
            );
            let _ = writeln!(
                c,
                "            grid[0] = (unsigned)((groups < clusters ? groups : clusters) * {n}u);\n            grid[1] = 1;\n            grid[2] = 1;\n        }}"
            );
        }
        let mut slots = common.clone();
        let own = launch.tensor_maps.len();
        if own > 0 {
            let _ = writeln!(c, "        tl_tensor_map tl_maps[{own}];");
            for (j, map) in launch.tensor_maps.iter().enumerate() {
                let t = tensors.iter().find(|t| t.index == map.param).expect("checked: a tensor");
                let (data_type, bytes) = tma_data_type(t.dtype).expect("checked");
                let swizzle = swizzle_mode(map.swizzle).expect("checked");
                let rank = t.shape.len();
                let boxes: Vec<String> = map.box_shape.iter().map(|b| format!("{b}u")).collect();
                c.push_str("        {\n");
                let _ = writeln!(
                    c,
                    "            static const uint32_t tl_box[{rank}] = {{{}}};",
                    boxes.join(", ")
                );
                let _ = writeln!(
                    c,
                    "            status = tl_encode_map(tl_kernel, {}, &tl_map_cache[{}], &tl_lock, &tl_maps[{j}], {data_type}u, {bytes}u, {rank}, {v}.data, {v}.shape, call.strides_{}, tl_box, {swizzle}u);",
                    c_string(t.name),
                    cached + j,
                    t.index,
                    v = t.c
                );
                c.push_str("            if (status != 0) {\n                tl_leave(pushed);\n                return status;\n            }\n        }\n");
                slots.push(format!("&tl_maps[{j}]"));
            }
        }
        cached += own;
        let _ = writeln!(
            c,
            "        void *tl_args[{}] = {{{}}};",
            slots.len().max(1),
            if slots.is_empty() { "NULL".into() } else { slots.join(", ") }
        );
        let [bx, by, bz] = launch.block;
        let plain = format!(
            "tl_driver.launch_kernel(loaded->function[{k}], grid[0], grid[1], grid[2], {bx}u, {by}u, {bz}u, {}u, (tl_handle)stream, tl_args, NULL)",
            launch.shared_bytes
        );
        if launch.dependent_launch {
            let _ = writeln!(
                c,
                "        status = tl_launched ? tl_launch_dependent(loaded->function[{k}], grid, {bx}u, {by}u, {bz}u, {}u, (tl_handle)stream, tl_args) : {plain};",
                launch.shared_bytes
            );
        } else {
            let _ = writeln!(c, "        status = {plain};");
        }
        c.push_str("        if (status != 0) {\n            tl_leave(pushed);\n");
        let what = if n > 1 {
            let queued = if k > 0 { "; the kernels before it are queued" } else { "" };
            format!("cuLaunchKernel (kernel {} of {n}, {}{queued})", k + 1, entries[k])
        } else {
            "cuLaunchKernel".to_string()
        };
        let _ = writeln!(c, "            return tl_driver_error(status, tl_kernel, {});", c_string(&what));
        c.push_str("        }\n");
        if dependents {
            c.push_str("        tl_launched = 1;\n");
        }
        c.push_str("    }\n");
    }
    c.push_str("    tl_leave(pushed);\n");
    c.push_str("    return 0;\n}\n");
    Ok(c)
}

/// "entry k_kernel" or "entries a_kernel, b_kernel": the cubin's functions a call launches.
fn entries_text(entries: &[&str]) -> String {
    let plural = if entries.len() > 1 { "entries" } else { "entry" };
    format!("{plural} {}", entries.join(", "))
}

/// `(1000, M)`: a shape as the messages write it.
fn shape_tuple(info: &KernelInfo, shape: &[Extent]) -> String {
    let dims: Vec<String> = shape.iter().map(|e| extent_text(info, e)).collect();
    if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    }
}

/// The printf format and arguments of " (from scalar parameter n=5; size M=7)" for what a
/// grid expression reads.
fn grid_sources(e: &GridExpr, info: &KernelInfo, names: &[String]) -> (String, String) {
    let mut parts = Vec::new();
    let mut values = String::new();
    let params = e.params();
    if !params.is_empty() {
        let mut texts = Vec::new();
        for &p in &params {
            let dtype = info.params[p].dtype();
            let user = info.params[p].name();
            if dtype.starts_with("float") {
                texts.push(format!("{user}=%g"));
                let _ = write!(values, ", (double){}", names[p]);
            } else if dtype == "uint64" {
                texts.push(format!("{user}=%llu"));
                let _ = write!(values, ", (unsigned long long){}", names[p]);
            } else {
                texts.push(format!("{user}=%lld"));
                let _ = write!(values, ", (long long){}", names[p]);
            }
        }
        let plural = if params.len() > 1 { "s" } else { "" };
        parts.push(format!("scalar parameter{plural} {}", texts.join(", ")));
    }
    let sizes = e.sizes();
    if !sizes.is_empty() {
        let mut texts = Vec::new();
        for &k in &sizes {
            texts.push(format!("{}=%lld", info.sizes.get(k).map_or("?", |s| s.name.as_str())));
            let _ = write!(values, ", (long long)call->sizes[{k}]");
        }
        let plural = if sizes.len() > 1 { "s" } else { "" };
        parts.push(format!("size{plural} {}", texts.join(", ")));
    }
    let format = if parts.is_empty() { String::new() } else { format!(" (from {})", parts.join("; ")) };
    (format, values)
}

/// One specialization of a dispatcher: an exported kernel and when it is chosen.
#[derive(Clone, Debug)]
pub struct Member {
    /// Its export name (`tilers_<name>_launch`).
    pub name: String,
    pub info: KernelInfo,
    /// Ranges (inclusive, either end open) a size or a tensor dimension must lie in: a size
    /// name of the kernel (`M`) or `PARAM.DIM` (`A.0`).
    pub when: Vec<Condition>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    pub key: String,
    pub low: Option<i64>,
    pub high: Option<i64>,
}

impl Condition {
    /// `M=1..128`, `A.0=..64`, `M=129..`.
    pub fn parse(text: &str) -> Result<Condition, String> {
        let bad = || format!("a condition is NAME=LOW..HIGH (either end may be left out), got {text:?}");
        let (key, range) = text.split_once('=').ok_or_else(bad)?;
        let (low, high) = range.split_once("..").ok_or_else(bad)?;
        let bound = |s: &str| -> Result<Option<i64>, String> {
            if s.trim().is_empty() {
                Ok(None)
            } else {
                s.trim().parse().map(Some).map_err(|_| bad())
            }
        };
        Ok(Condition { key: key.trim().to_string(), low: bound(low)?, high: bound(high)? })
    }

    fn text(&self) -> String {
        let low = self.low.map_or(String::new(), |v| v.to_string());
        let high = self.high.map_or(String::new(), |v| v.to_string());
        format!("{}={low}..{high}", self.key)
    }
}

/// The dimension a condition reads: (parameter, dimension).
fn condition_dim(info: &KernelInfo, member: &str, key: &str) -> Result<(usize, usize), String> {
    if let Some(size) = info.sizes.iter().find(|s| s.name == key) {
        let [p, d] = size.from[0];
        return Ok((p, d));
    }
    if let Some((param, dim)) = key.split_once('.') {
        let p = info.params.iter().position(|q| q.name() == param);
        if let (Some(p), Ok(d)) = (p, dim.parse::<usize>()) {
            if let ParamInfo::Tensor { shape, .. } = &info.params[p] {
                if d < shape.len() {
                    return Ok((p, d));
                }
            }
        }
    }
    let sizes: Vec<&str> = info.sizes.iter().map(|s| s.name.as_str()).collect();
    Err(format!(
        "specialization '{member}': a condition on {key:?}, which is neither one of its sizes ({}) nor PARAM.DIM of a tensor parameter",
        if sizes.is_empty() { "it has none".to_string() } else { sizes.join(", ") }
    ))
}

/// The launch signature two members must share: per parameter its kind, dtype and rank.
fn signature_key(info: &KernelInfo) -> Vec<(String, String, usize)> {
    info.params
        .iter()
        .map(|p| match p {
            ParamInfo::Tensor { dtype, shape, .. } => ("tensor".into(), dtype.clone(), shape.len()),
            ParamInfo::Scalar { dtype, .. } => ("scalar".into(), dtype.clone(), 0),
        })
        .collect()
}

/// A dispatcher `tilers_<name>_launch` over `members` (exported with [`export_c`] under
/// their names): the first whose conditions hold and whose checks take the call's shapes
/// runs it. The members must share one signature (parameters of the same kinds, dtypes and
/// ranks, in order); the dispatcher takes a workspace when any member does.
pub fn export_dispatcher(name: &str, members: &[Member]) -> Result<Exported, String> {
    if !is_identifier(name) {
        return Err(format!("the dispatcher name {name:?} is not a C identifier"));
    }
    let Some(first) = members.first() else {
        return Err("a dispatcher needs at least one specialization".into());
    };
    let key = signature_key(&first.info);
    for m in members {
        if !is_identifier(&m.name) {
            return Err(format!("the specialization name {:?} is not a C identifier", m.name));
        }
        if m.name == name {
            return Err(format!("the dispatcher and a specialization are both named '{name}'"));
        }
        if signature_key(&m.info) != key {
            return Err(format!(
                "specialization '{}' takes other parameters than '{}': {:?} against {:?}; a dispatcher's specializations share one signature",
                m.name,
                first.name,
                signature_key(&m.info),
                key
            ));
        }
    }
    let names = param_names(&first.info);
    let (signature, docs) = signature(&first.info, &names)?;
    let workspace = members.iter().any(|m| !m.info.scratch.is_empty());
    let mut h = header(&first.info, name, &signature, &docs, workspace);
    // the header says it dispatches
    let listing: Vec<String> = members
        .iter()
        .map(|m| {
            let when: Vec<String> = m.when.iter().map(Condition::text).collect();
            format!(
                "tilers_{}{}",
                m.name,
                if when.is_empty() { String::new() } else { format!(" when {}", when.join(", ")) }
            )
        })
        .collect();
    h = h.replacen(
        " * Written by tilers' export",
        &format!(
            " * A dispatcher: the first of {} that takes the call.\n * Written by tilers' export",
            listing.join("; ")
        ),
        1,
    );
    let args = signature.join(", ");
    let all = call_args(&names);
    let workspace_params = if workspace { ", void *workspace, size_t workspace_bytes" } else { "" };
    let mut c = String::new();
    let _ = writeln!(
        c,
        "/* tilers_{name}.c: a dispatcher over {} specializations (docs/export.md). */",
        members.len()
    );
    c.push_str("#include <stdarg.h>\n#include <stdio.h>\n#include <string.h>\n");
    let _ = writeln!(c, "#include \"tilers_{name}.h\"");
    for m in members {
        let _ = writeln!(c, "#include \"tilers_{}.h\"", m.name);
    }
    c.push_str("\nstatic _Thread_local char tl_message[2048];\n\n");
    let _ = writeln!(c, "const char *tilers_{name}_last_error(void) {{ return tl_message; }}\n");
    c.push_str(
        "static void tl_note(size_t *used, const char *format, ...) __attribute__((format(printf, 2, 3)));\n",
    );
    c.push_str("static void tl_note(size_t *used, const char *format, ...) {\n");
    c.push_str(
        "    va_list args;\n    if (*used >= sizeof tl_message) return;\n    va_start(args, format);\n",
    );
    c.push_str("    int n = vsnprintf(tl_message + *used, sizeof tl_message - *used, format, args);\n");
    c.push_str("    va_end(args);\n    if (n > 0) *used += (size_t)n;\n}\n\n");
    c.push_str(
        "/* The specialization that takes the call (-1: none; the message says why each declined). */\n",
    );
    let _ = writeln!(c, "static int tl_choose({args}) {{");
    c.push_str("    size_t tl_used = 0, tl_bytes = 0;\n");
    let _ = writeln!(c, "    tl_note(&tl_used, \"tilers_{name}: no specialization takes this call:\");");
    for (i, m) in members.iter().enumerate() {
        let mut conditions = Vec::new();
        for cond in &m.when {
            let (p, d) = condition_dim(&m.info, &m.name, &cond.key)?;
            let v = &names[p];
            let value = format!("{v}.shape[{d}]");
            let mut test = format!("{v}.shape != NULL && {v}.ndim > {d}");
            if let Some(low) = cond.low {
                let _ = write!(test, " && {value} >= {low}");
            }
            if let Some(high) = cond.high {
                let _ = write!(test, " && {value} <= {high}");
            }
            conditions.push((test, cond.text(), value, v.clone(), d));
        }
        let _ = writeln!(c, "    /* {}: tilers_{} */", i, m.name);
        c.push_str("    {\n        int tl_holds = 1;\n");
        for (test, text, value, v, d) in &conditions {
            let _ = writeln!(c, "        if (tl_holds && !({test})) {{");
            let _ = writeln!(
                c,
                "            tl_note(&tl_used, \" tilers_{}: %s %lld is not in {text};\", \"{}\", {v}.shape != NULL && {v}.ndim > {d} ? (long long){value} : -1LL);",
                m.name,
                text.split('=').next().unwrap_or("")
            );
            c.push_str("            tl_holds = 0;\n        }\n");
        }
        let _ = writeln!(c, "        if (tl_holds) {{");
        let _ = writeln!(
            c,
            "            if (tilers_{}_workspace_size({all}, &tl_bytes) == 0) return {i};",
            m.name
        );
        let _ = writeln!(
            c,
            // the member's message starts with its name
            "            tl_note(&tl_used, \" %s;\", tilers_{}_last_error());",
            m.name
        );
        c.push_str("        }\n    }\n");
    }
    c.push_str("    return -1;\n}\n\n");
    // launch
    let _ = writeln!(c, "tilers_status tilers_{name}_launch({args}{workspace_params}, CUstream stream) {{");
    let _ = writeln!(c, "    tilers_status status;");
    let _ = writeln!(c, "    switch (tl_choose({all})) {{");
    for (i, m) in members.iter().enumerate() {
        let ws = if m.info.scratch.is_empty() { "" } else { ", workspace, workspace_bytes" };
        let _ = writeln!(c, "    case {i}:");
        let _ = writeln!(c, "        status = tilers_{}_launch({all}{ws}, stream);", m.name);
        let _ = writeln!(c, "        if (status != 0) snprintf(tl_message, sizeof tl_message, \"%s\", tilers_{}_last_error());", m.name);
        c.push_str("        return status;\n");
    }
    c.push_str("    default:\n        return TILERS_ERROR_INVALID_VALUE;\n    }\n}\n\n");
    // check
    let _ = writeln!(c, "tilers_status tilers_{name}_check({args}{workspace_params}) {{");
    c.push_str("    tilers_status status;\n");
    let _ = writeln!(c, "    switch (tl_choose({all})) {{");
    for (i, m) in members.iter().enumerate() {
        let ws = if m.info.scratch.is_empty() { "" } else { ", workspace, workspace_bytes" };
        let _ = writeln!(c, "    case {i}:");
        let _ = writeln!(c, "        status = tilers_{}_check({all}{ws});", m.name);
        let _ = writeln!(c, "        if (status != 0) snprintf(tl_message, sizeof tl_message, \"%s\", tilers_{}_last_error());", m.name);
        c.push_str("        return status;\n");
    }
    c.push_str("    default:\n        return TILERS_ERROR_INVALID_VALUE;\n    }\n}\n\n");
    // workspace size
    let _ = writeln!(c, "tilers_status tilers_{name}_workspace_size({args}, size_t *bytes) {{");
    c.push_str("    if (bytes == NULL) {\n");
    let _ = writeln!(
        c,
        "        snprintf(tl_message, sizeof tl_message, \"tilers_{name}_workspace_size: bytes is NULL\");"
    );
    c.push_str("        return TILERS_ERROR_INVALID_VALUE;\n    }\n    *bytes = 0;\n");
    let _ = writeln!(c, "    switch (tl_choose({all})) {{");
    for (i, m) in members.iter().enumerate() {
        let _ = writeln!(c, "    case {i}:\n        return tilers_{}_workspace_size({all}, bytes);", m.name);
    }
    c.push_str("    default:\n        return TILERS_ERROR_INVALID_VALUE;\n    }\n}\n");
    Ok(Exported { header: h, source: c })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tile_codegen::kernel_info::{SizeInfo, TensorMap};

    fn tensor(name: &str, shape: Vec<Extent>, written: bool) -> ParamInfo {
        let strides = vec![Extent::Fixed(1); shape.len()];
        ParamInfo::Tensor { name: name.into(), dtype: "float16".into(), shape, strides, align: 16, written }
    }

    fn info() -> KernelInfo {
        KernelInfo {
            name: "add".into(),
            entry: Some("add_kernel".into()),
            arch: "sm_90a".into(),
            params: vec![
                tensor("A", vec![Extent::Expr(GridExpr::Size { size: 0 }), Extent::Fixed(64)], false),
                tensor("out", vec![Extent::Expr(GridExpr::Size { size: 0 }), Extent::Fixed(64)], true),
                ParamInfo::Scalar { name: "stream".into(), dtype: "float32".into() },
            ],
            scratch: vec![],
            sizes: vec![SizeInfo {
                name: "M".into(),
                dtype: "int32".into(),
                multiple_of: 8,
                from: vec![[0, 0], [1, 0]],
            }],
            grid: vec![
                GridExpr::Op {
                    op: GridOp::CeilDiv,
                    a: Box::new(GridExpr::Size { size: 0 }),
                    b: Box::new(GridExpr::Const { value: 32 }),
                },
                GridExpr::Param { param: 2 },
                GridExpr::Const { value: 1 },
            ],
            threads: 128,
            block: [128, 1, 1],
            persistent: false,
            dependent_launch: false,
            then: vec![],
            cluster: [1, 1, 1],
            shared_bytes: 0,
            shared_opt_in: false,
            local_bytes: 0,
            tensor_maps: vec![TensorMap { param: 0, box_shape: vec![32, 64], swizzle: 128 }],
            report: vec![],
        }
    }

    #[test]
    fn names_and_conditions() {
        assert!(
            is_identifier("gemm_m128") && !is_identifier("9x") && !is_identifier("a-b") && !is_identifier("")
        );
        // a parameter named like the launch's own arguments or a C keyword is renamed
        assert_eq!(c_name("stream"), "stream_");
        assert_eq!(c_name("int"), "int_");
        assert_eq!(c_name("tl_x"), "tl_x_");
        assert_eq!(c_name("A"), "A");
        assert_eq!(
            Condition::parse("M=1..128").unwrap(),
            Condition { key: "M".into(), low: Some(1), high: Some(128) }
        );
        assert_eq!(Condition::parse("A.0=129..").unwrap().high, None);
        assert!(Condition::parse("M<128").is_err());
        assert_eq!(parse_arch("sm_90a"), Ok((9, 0, true)));
        assert_eq!(parse_arch("sm_86"), Ok((8, 6, false)));
        assert_eq!(parse_arch("sm_100a"), Ok((10, 0, true)));
        assert!(parse_arch("compute_90").is_err());
    }

    #[test]
    fn the_launch_follows_the_kernel_info() {
        let e = export_c(&info(), &[1, 2, 3], "add_m").unwrap();
        assert!(e.header.contains(
            "tilers_status tilers_add_m_launch(tilers_tensor A, tilers_tensor out, float stream_, CUstream stream);"
        ));
        assert!(e.header.contains(" *   A: float16[M, 64] (read)"));
        assert!(e.header.contains(" *   out: float16[M, 64] (written)"));
        assert!(e.source.contains("tl_ceildiv(call->sizes[0], INT64_C(32), &tl_bad)"));
        assert!(e.source.contains("tl_trunc((double)stream_, &tl_bad)"));
        assert!(e.source.contains("if (call->sizes[0] % 8 != 0)"));
        // the parameters, in the kernel's order: tensors, scalars, sizes, maps
        assert!(e
            .source
            .contains("void *tl_args[5] = {&A.data, &out.data, &stream_, &tl_size0, &tl_maps[0]};"));
        assert!(e.source.contains("    1, 2, 3,\n"));
        // clusters along x: a grid of a tile per block is checked to be a multiple, a
        // persistent one launches whole clusters; along y they are refused
        let mut clustered = info();
        clustered.cluster = [2, 1, 1];
        clustered.grid[0] = GridExpr::Const { value: 8 };
        assert!(export_c(&clustered, &[1], "x").is_ok());
        assert!(!export_c(&clustered, &[1], "x").unwrap().source.contains("thread-block clusters of 2"));
        clustered.grid[0] = GridExpr::Const { value: 7 };
        assert!(export_c(&clustered, &[1], "x").unwrap_err().contains("(7) is not a multiple of 2"));
        // a grid along x read from a size: checked per call
        clustered.grid[0] = GridExpr::Size { size: 0 };
        let e = export_c(&clustered, &[1], "x").unwrap();
        assert!(e.source.contains("if (call->grid[0][0] % 2 != 0) {"));
        assert!(e
            .source
            .contains("thread-block clusters of 2 blocks along x, so it must be a multiple of 2"));
        clustered.persistent = true;
        let e = export_c(&clustered, &[1], "x").unwrap();
        assert!(e.source.contains("grid[0] = (unsigned)((groups < clusters ? groups : clusters) * 2u);"));
        clustered.cluster = [1, 2, 1];
        assert!(export_c(&clustered, &[1], "x").unwrap_err().contains("cluster [1, 2, 1]"));
        // several T.Kernel: one launch function, each kernel with its own entry, grid,
        // block, shared memory and tensor maps (a cache slot each), in order
        let mut several = info();
        let mut second = info();
        second.entry = Some("add_m_kernel_1".into());
        second.grid[0] = GridExpr::Const { value: 7 };
        second.block = [256, 1, 1];
        second.shared_bytes = 64 * 1024;
        several.then = vec![second.clone()];
        let e = export_c(&several, &[1], "x").unwrap();
        assert!(e
            .source
            .contains("static const char *const tl_entries[2] = {\"add_kernel\", \"add_m_kernel_1\"};"));
        assert!(e.source.contains("static const unsigned tl_shared[2] = {0u, 65536u};"));
        assert!(e.source.contains("static tl_cached_map tl_map_cache[2];"));
        assert!(e.source.contains("call->grid[1][0] = INT64_C(7);"));
        assert!(e.source.contains("grid dimension y of kernel 2 of 2 (add_m_kernel_1)"));
        assert!(e.source.contains("&tl_map_cache[1]"));
        assert!(e
            .source
            .contains("launch_kernel(loaded->function[1], grid[0], grid[1], grid[2], 256u, 1u, 1u, 65536u"));
        several.then = vec![second; MAX_LAUNCHES];
        assert!(export_c(&several, &[1], "x").unwrap_err().contains("launches 17 kernels in turn"));
        assert!(export_c(&info(), &[1], "a-b").unwrap_err().contains("not a C identifier"));
        let mut half = info();
        half.params[2] = ParamInfo::Scalar { name: "s".into(), dtype: "float16".into() };
        assert!(export_c(&half, &[1], "x").unwrap_err().contains("scalar parameter 's' is float16"));
    }

    #[test]
    fn a_dispatcher_needs_one_signature() {
        let a = Member {
            name: "add_small".into(),
            info: info(),
            when: vec![Condition::parse("M=..128").unwrap()],
        };
        let b = Member { name: "add_large".into(), info: info(), when: vec![] };
        let d = export_dispatcher("add", &[a.clone(), b.clone()]).unwrap();
        assert!(d.source.contains("A.shape[0] <= 128"));
        assert!(d.source.contains("tilers_add_large_workspace_size(A, out, stream_, &tl_bytes) == 0"));
        assert!(d.header.contains("the first of tilers_add_small when M=..128; tilers_add_large"));
        let mut other = b.clone();
        other.info.params.pop();
        assert!(export_dispatcher("add", &[a.clone(), other]).unwrap_err().contains("share one signature"));
        let bad = Member { when: vec![Condition::parse("N=1..2").unwrap()], ..a };
        assert!(export_dispatcher("add", &[bad]).unwrap_err().contains("neither one of its sizes (M)"));
    }
}
