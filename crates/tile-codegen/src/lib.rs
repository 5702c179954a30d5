//! CUDA C++ emission: a thread-level module in, self-contained CUDA source plus the
//! KernelInfo launch recipe out.
//!
//! The source needs no toolkit headers: fp16/bf16 are storage structs converted with
//! inline PTX, vector accesses are `uint4`/`uint2` reinterpretations. Names come from the
//! user's buffers and loop variables; every tile op is preceded by a comment naming the
//! user's line (`softmax.py:42`). Output is deterministic: nothing iterates a hash map.
//! With `lineinfo`, every line of a tile op's code is preceded by `#line N "file.py"`, so
//! that the debug line table (compute-sanitizer, ncu, cuda-gdb) points at the user's line.

pub mod kernel_info;
mod names;

pub use kernel_info::{param_info, KernelInfo};
use names::Namer;
use std::fmt::Write;
use tile_ir::*;

pub struct CudaKernel {
    pub source: String,
    /// The launch recipe (docs/format.md).
    pub info: KernelInfo,
}

#[derive(Clone, Debug, Default)]
pub struct CodegenOptions {
    pub arch: String,
    pub sm: u32,
    /// Attribute the code to the user's Python lines with `#line` directives.
    pub lineinfo: bool,
}

pub fn emit_cuda(m: &Module, opts: &CodegenOptions, report: &[String]) -> Result<CudaKernel, Diagnostic> {
    if m.level != Level::Thread {
        return Err(Diagnostic::bug("emit_cuda needs thread-level IR"));
    }
    let mut e = Emitter {
        m,
        opts,
        non_negative: Default::default(),
        names: Namer::new(m),
        out: String::new(),
        depth: 1,
        at: Loc::UNKNOWN,
    };
    let entry = format!("{}_kernel", e.names.kernel_name(&m.name));
    let source = e.kernel(&entry)?;
    let info = kernel_info::kernel_info(m, &opts.arch, &entry, report)?;
    Ok(CudaKernel { source, info })
}

const PRELUDE: &str = r#"// fp16 / bf16 storage types; arithmetic on them runs in float and rounds after every op.
struct __align__(2) tl_half { unsigned short bits; };
struct __align__(2) tl_bf16 { unsigned short bits; };
static __device__ __forceinline__ float tl_float(tl_half h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits)); return f; }
static __device__ __forceinline__ float tl_float(tl_bf16 h) { return __uint_as_float(((unsigned int)h.bits) << 16); }
static __device__ __forceinline__ tl_half tl_to_half(float f) { tl_half h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f)); return h; }
static __device__ __forceinline__ tl_bf16 tl_to_bf16(float f) { tl_bf16 h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(f)); return h; }
static __device__ __forceinline__ float tl_round_half(float f) { return tl_float(tl_to_half(f)); }
static __device__ __forceinline__ float tl_round_bf16(float f) { return tl_float(tl_to_bf16(f)); }
// Python's floor division and modulo (round toward negative infinity).
static __device__ __forceinline__ int tl_floordiv(int a, int b) { int q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
static __device__ __forceinline__ long long tl_floordiv(long long a, long long b) { long long q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
static __device__ __forceinline__ int tl_floormod(int a, int b) { return a - tl_floordiv(a, b) * b; }
static __device__ __forceinline__ long long tl_floormod(long long a, long long b) { return a - tl_floordiv(a, b) * b; }
static __device__ __forceinline__ int tl_max(int a, int b) { return a > b ? a : b; }
static __device__ __forceinline__ int tl_min(int a, int b) { return a < b ? a : b; }
static __device__ __forceinline__ unsigned int tl_max(unsigned int a, unsigned int b) { return a > b ? a : b; }
static __device__ __forceinline__ unsigned int tl_min(unsigned int a, unsigned int b) { return a < b ? a : b; }
static __device__ __forceinline__ long long tl_max(long long a, long long b) { return a > b ? a : b; }
static __device__ __forceinline__ long long tl_min(long long a, long long b) { return a < b ? a : b; }
// float -> integer conversions saturate (NaN -> 0), as PTX cvt.rzi.sat does.
static __device__ __forceinline__ int tl_f2i(float f) { int r; asm("cvt.rzi.s32.f32 %0, %1;" : "=r"(r) : "f"(f)); return r; }
static __device__ __forceinline__ long long tl_f2ll(float f) { long long r; asm("cvt.rzi.s64.f32 %0, %1;" : "=l"(r) : "f"(f)); return r; }
static __device__ __forceinline__ unsigned int tl_f2u(float f) { unsigned int r; asm("cvt.rzi.u32.f32 %0, %1;" : "=r"(r) : "f"(f)); return r; }
static __device__ __forceinline__ int tl_f2i_sat(float f, int lo, int hi) { return tl_max(lo, tl_min(hi, tl_f2i(f))); }
static __device__ __forceinline__ int tl_d2i(double f) { int r; asm("cvt.rzi.s32.f64 %0, %1;" : "=r"(r) : "d"(f)); return r; }
static __device__ __forceinline__ long long tl_d2ll(double f) { long long r; asm("cvt.rzi.s64.f64 %0, %1;" : "=l"(r) : "d"(f)); return r; }
static __device__ __forceinline__ unsigned int tl_d2u(double f) { unsigned int r; asm("cvt.rzi.u32.f64 %0, %1;" : "=r"(r) : "d"(f)); return r; }
static __device__ __forceinline__ int tl_d2i_sat(double f, int lo, int hi) { return tl_max(lo, tl_min(hi, tl_d2i(f))); }
static __device__ __forceinline__ void tl_atomic_add(float* p, float v) { atomicAdd(p, v); }
static __device__ __forceinline__ void tl_atomic_add(double* p, double v) { atomicAdd(p, v); }
static __device__ __forceinline__ void tl_atomic_add(int* p, int v) { atomicAdd(p, v); }
static __device__ __forceinline__ void tl_atomic_add(unsigned int* p, unsigned int v) { atomicAdd(p, v); }
static __device__ __forceinline__ void tl_atomic_add(long long* p, long long v) { atomicAdd((unsigned long long*)p, (unsigned long long)v); }
static __device__ __forceinline__ void tl_atomic_add(tl_half* p, float v) { tl_half h = tl_to_half(v); asm volatile("red.add.noftz.f16 [%0], %1;" :: "l"(p), "h"(h.bits) : "memory"); }
// sigmoid without overflow: exp of -|x| only, so large negative x gives e / (1 + e), not 1 / inf
static __device__ __forceinline__ float tl_sigmoidf(float x) { float e = expf(-fabsf(x)); float s = 1.0f / (1.0f + e); return x >= 0.0f ? s : e * s; }
static __device__ __forceinline__ double tl_sigmoid(double x) { double e = exp(-fabs(x)); double s = 1.0 / (1.0 + e); return x >= 0.0 ? s : e * s; }
// Swizzled shared tiles store the 16-byte chunk c of a row at c ^ (row % 8) (rows of 128 bytes or
// more; shorter rows count 128-byte lines instead of rows); their indices are written out that way.
"#;

const BF16_ATOMIC_SM90: &str = r#"static __device__ __forceinline__ void tl_atomic_add(tl_bf16* p, float v) { tl_bf16 h = tl_to_bf16(v); asm volatile("red.add.noftz.bf16 [%0], %1;" :: "l"(p), "h"(h.bits) : "memory"); }
"#;

const BF16_ATOMIC_CAS: &str = r#"static __device__ __forceinline__ void tl_atomic_add(tl_bf16* p, float v) {
  unsigned int* word = (unsigned int*)((unsigned long long)p & ~3ull);
  unsigned int shift = ((unsigned long long)p & 2) ? 16 : 0;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    tl_bf16 cur; cur.bits = (unsigned short)(assumed >> shift);
    unsigned int next = (unsigned int)tl_to_bf16(tl_float(cur) + v).bits;
    old = atomicCAS(word, assumed, (assumed & ~(0xffffu << shift)) | (next << shift));
  } while (old != assumed);
}
"#;

/// The C type that stores one element.
fn storage_type(dt: DType) -> &'static str {
    match dt {
        DType::Bool => "bool",
        DType::I8 => "signed char",
        DType::U8 => "unsigned char",
        DType::I16 => "short",
        DType::I32 => "int",
        DType::U32 => "unsigned int",
        DType::I64 => "long long",
        DType::F16 => "tl_half",
        DType::BF16 => "tl_bf16",
        DType::F32 => "float",
        DType::F64 => "double",
    }
}

/// The C type an expression of `dt` is computed in.
fn value_type(dt: DType) -> &'static str {
    match dt {
        DType::F16 | DType::BF16 => "float",
        other => storage_type(other),
    }
}

/// Round a value to the precision of `dt` (f16/bf16 constants are emitted already rounded).
fn round_to(v: f64, dt: DType) -> f64 {
    match dt {
        DType::F32 | DType::F16 | DType::BF16 => {
            let f = v as f32;
            match dt {
                DType::BF16 => tile_ir::arith::round_bf16(f) as f64,
                DType::F16 => tile_ir::arith::round_f16(f) as f64,
                _ => f as f64,
            }
        }
        _ => v,
    }
}

fn float_literal(v: f64, dt: DType) -> String {
    let v = round_to(v, dt);
    let is_double = dt == DType::F64;
    if v.is_nan() {
        return if is_double {
            "__longlong_as_double(0x7ff8000000000000ll)".into()
        } else {
            "__int_as_float(0x7fc00000)".into()
        };
    }
    if v.is_infinite() {
        return match (is_double, v > 0.0) {
            (true, true) => "__longlong_as_double(0x7ff0000000000000ll)".into(),
            (true, false) => "__longlong_as_double(0xfff0000000000000ll)".into(),
            (false, true) => "__int_as_float(0x7f800000)".into(),
            (false, false) => "__int_as_float(0xff800000)".into(),
        };
    }
    if is_double {
        format!("{v:?}")
    } else {
        format!("{:?}f", v as f32)
    }
}

/// Is the expression non-negative whatever its variables' values (indices, thread ids)?
fn non_negative(m: &Module, known: &std::collections::BTreeSet<VarId>, e: &Expr) -> bool {
    tile_ir::simplify::non_negative(e, &|id| {
        known.contains(&id)
            || matches!(m.var(id).kind, VarKind::BlockIdx(_) | VarKind::LaunchIdx(_) | VarKind::ThreadIdx)
    })
}

struct Emitter<'a> {
    m: &'a Module,
    /// Variables known to be non-negative: loop counters from a non-negative start, lets
    /// of non-negative values (plain `/` and `%` are then Python's floor division).
    non_negative: std::collections::BTreeSet<VarId>,
    opts: &'a CodegenOptions,
    names: Namer,
    out: String,
    depth: usize,
    /// The user's statement the code being emitted implements (for `#line`, with lineinfo).
    at: Loc,
}

impl<'a> Emitter<'a> {
    fn line(&mut self, s: &str) {
        if self.opts.lineinfo {
            // before every line: the line number would otherwise count on from the directive
            if let Some(file) = self.m.sources.file(self.at) {
                let _ = writeln!(self.out, "#line {} {}", self.at.line, c_string(&file.file));
            }
        }
        for _ in 0..self.depth {
            self.out.push_str("  ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn kernel(&mut self, entry: &str) -> Result<String, Diagnostic> {
        let m = self.m;
        let mut written = std::collections::BTreeSet::new();
        walk_stmts(&m.kernel.body, &mut |s| match s {
            Stmt::Store { buf, .. } | Stmt::AtomicAdd { buf, .. } => {
                written.insert(*buf);
            }
            Stmt::Inst(i) => {
                written
                    .extend(i.accesses().iter().filter(|a| a.kind == inst::AccessKind::Write).map(|a| a.buf));
            }
            _ => {}
        });
        let mut head = String::new();
        let _ = writeln!(
            head,
            "// Generated by tilers {} for {}: kernel '{}'. Do not edit.",
            env!("CARGO_PKG_VERSION"),
            self.opts.arch,
            m.name
        );
        head.push_str(PRELUDE);
        head.push_str(if self.opts.sm >= 90 { BF16_ATOMIC_SM90 } else { BF16_ATOMIC_CAS });
        head.push('\n');
        let mut params = Vec::new();
        for p in &m.params {
            match p {
                Param::Tensor { buffer, .. } => {
                    let b = m.buffer(*buffer);
                    let konst = if written.contains(buffer) { "" } else { "const " };
                    params.push(format!(
                        "{konst}{}* __restrict__ {}",
                        storage_type(b.dtype),
                        self.names.buffer(*buffer)
                    ));
                }
                Param::Scalar { var, .. } => {
                    params.push(format!("{} {}", storage_type(m.var(*var).dtype), self.names.var(*var)));
                }
            }
        }
        let _ = writeln!(
            head,
            "extern \"C\" __global__ void __launch_bounds__({}) {}({}) {{",
            m.kernel.threads,
            entry,
            params.join(", ")
        );
        // block indices (but those a let binds: `rasterize`), thread index, shared memory,
        // per-thread arrays
        let bound_by_let: std::collections::BTreeSet<VarId> = m
            .kernel
            .body
            .iter()
            .filter_map(|s| match s {
                Stmt::Let { var, .. } => Some(*var),
                _ => None,
            })
            .collect();
        for (i, v) in m.vars.iter().enumerate() {
            let id = VarId(i as u32);
            match v.kind {
                VarKind::BlockIdx(axis) | VarKind::LaunchIdx(axis) if !bound_by_let.contains(&id) => {
                    let n = self.names.var(id);
                    let dim = ["x", "y", "z"][axis as usize];
                    self.line(&format!("const int {n} = blockIdx.{dim};"));
                }
                VarKind::ThreadIdx => {
                    let n = self.names.var(id);
                    self.line(&format!("const int {n} = threadIdx.x;"));
                }
                _ => {}
            }
        }
        let shared: Vec<BufferId> = (0..m.buffers.len() as u32)
            .map(BufferId)
            .filter(|b| m.buffer(*b).scope == Scope::Shared)
            .collect();
        if !shared.is_empty() {
            self.line("extern __shared__ __align__(16) unsigned char tl_smem[];");
            // shared-space address of the block's shared memory, for ldmatrix and cp.async:
            // their addresses are this plus a byte offset the C compiler can hoist and fold
            self.line("[[maybe_unused]] const unsigned int tl_smem_u32 = (unsigned int)__cvta_generic_to_shared(tl_smem);");
            for b in shared {
                let buf = m.buffer(b);
                let off = buf
                    .shared_offset
                    .ok_or_else(|| Diagnostic::bug(format!("shared buffer '{}' was not placed", buf.name)))?;
                let ty = storage_type(buf.dtype);
                let n = self.names.buffer(b);
                self.line(&format!("{ty}* {n} = ({ty}*)(tl_smem + {off});  // {:?}", buf.shape));
            }
        }
        for (i, buf) in m.buffers.iter().enumerate() {
            if buf.scope == Scope::Local {
                let n = self.names.buffer(BufferId(i as u32));
                let note = buf.layout.as_ref().map(|l| format!("  // {l}")).unwrap_or_default();
                self.line(&format!(
                    "__align__(16) {} {n}[{}];{note}",
                    storage_type(buf.dtype),
                    buf.num_elements()
                ));
            }
        }
        let body = &m.kernel.body;
        self.stmts(body)?;
        let mut src = head;
        src.push_str(&self.out);
        src.push_str("}\n");
        Ok(src)
    }

    fn stmts(&mut self, body: &[Stmt]) -> Result<(), Diagnostic> {
        for s in body {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn access(&mut self, buf: BufferId, idx: &[Expr]) -> Result<String, Diagnostic> {
        let b = self.m.buffer(buf);
        if idx.len() != b.shape.len() {
            return Err(Diagnostic::bug(format!("'{}' indexed with {} indices", b.name, idx.len())));
        }
        let wide = b.num_elements() > i32::MAX as i64;
        let strides = b.strides();
        let mut terms = Vec::new();
        for (d, i) in idx.iter().enumerate() {
            let mut t = self.expr(i)?;
            if wide && i.dtype() != DType::I64 {
                t = format!("(long long)({t})");
            }
            if strides[d] != 1 {
                t = format!("({t}) * {}", strides[d]);
                if wide {
                    t = format!("{t}ll");
                }
            }
            terms.push(t);
        }
        let flat = if terms.is_empty() { "0".to_string() } else { terms.join(" + ") };
        if b.swizzle.is_some() {
            let offset = self.expr(&SharedLayout::of(b).offset(idx))?;
            return Ok(format!("{}[{offset}]", self.names.buffer(buf)));
        }
        Ok(format!("{}[{}]", self.names.buffer(buf), flat))
    }

    /// The shared-space address (a 32-bit `.shared` address) of `buf[idx]`, for the
    /// instructions that take one (`ldmatrix`, `cp.async`).
    fn shared_address(&mut self, buf: BufferId, idx: &[Expr]) -> Result<String, Diagnostic> {
        let b = self.m.buffer(buf);
        let (Some(base), Scope::Shared) = (b.shared_offset, b.scope) else {
            return Err(Diagnostic::bug(format!("'{}' is not a placed shared buffer", b.name)));
        };
        let eb = b.dtype.bytes() as i64;
        let offset = SharedLayout::of(b).offset(idx);
        let bytes = tile_ir::simplify::simplify(Expr::binary(
            BinOp::Add,
            Expr::binary(BinOp::Mul, offset, Expr::int_of(eb, DType::I32)),
            Expr::int_of(base as i64, DType::I32),
        ));
        let bytes = self.expr(&bytes)?;
        Ok(format!("tl_smem_u32 + (unsigned int)({bytes})"))
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), Diagnostic> {
        if let Stmt::SourceLine(loc) = s {
            self.at = *loc;
            return Ok(());
        }
        let outer = self.at;
        if s.loc().is_known() {
            self.at = s.loc();
        }
        self.stmt_code(s)?;
        self.at = outer;
        Ok(())
    }

    fn stmt_code(&mut self, s: &Stmt) -> Result<(), Diagnostic> {
        let m = self.m;
        match s {
            Stmt::Store { buf, idx, value, .. } => {
                let target = self.access(*buf, idx)?;
                let v = self.store_value(m.buffer(*buf).dtype, value)?;
                self.line(&format!("{target} = {v};"));
            }
            Stmt::AtomicAdd { buf, idx, value, .. } => {
                let target = self.access(*buf, idx)?;
                let v = self.expr(value)?;
                self.line(&format!("tl_atomic_add(&{target}, {v});"));
            }
            Stmt::For { var, start, extent, kind, body, .. } => {
                let n = self.names.var(*var);
                let ty = value_type(m.var(*var).dtype);
                let s0 = self.expr(start)?;
                let ext = self.expr(extent)?;
                if matches!(kind, ForKind::Unroll) {
                    self.line("#pragma unroll");
                }
                let bound = if start.as_int() == Some(0) { ext } else { format!("({s0}) + ({ext})") };
                if start.as_int().is_some_and(|v| v >= 0) {
                    self.non_negative.insert(*var);
                }
                self.line(&format!("for ({ty} {n} = {s0}; {n} < {bound}; ++{n}) {{"));
                self.depth += 1;
                self.stmts(body)?;
                self.depth -= 1;
                self.line("}");
            }
            Stmt::If { cond, then, otherwise, .. } if cond.as_int().is_some() => {
                // decided at compile time (simplify proved it): only the branch that runs,
                // in a block of its own for the scope of its declarations
                let taken = if cond.as_int() != Some(0) { then } else { otherwise };
                if !taken.is_empty() {
                    self.line("{");
                    self.depth += 1;
                    self.stmts(taken)?;
                    self.depth -= 1;
                    self.line("}");
                }
            }
            Stmt::If { cond, then, otherwise, .. } => {
                let c = self.expr(cond)?;
                self.line(&format!("if ({c}) {{"));
                self.depth += 1;
                self.stmts(then)?;
                self.depth -= 1;
                if otherwise.is_empty() {
                    self.line("}");
                } else {
                    self.line("} else {");
                    self.depth += 1;
                    self.stmts(otherwise)?;
                    self.depth -= 1;
                    self.line("}");
                }
            }
            Stmt::Let { var, value } => {
                if non_negative(m, &self.non_negative, value) {
                    self.non_negative.insert(*var);
                }
                let n = self.names.var(*var);
                let v = self.expr(value)?;
                self.line(&format!("const {} {n} = {v};", value_type(value.dtype())));
            }
            Stmt::Inst(i) => self.inst(i)?,
            Stmt::Comment(c) => self.line(&format!("// {c}")),
            Stmt::SourceLine(_) => {}
            Stmt::Copy(_)
            | Stmt::Fill { .. }
            | Stmt::Reduce(_)
            | Stmt::Gemm(_)
            | Stmt::Async { .. }
            | Stmt::Parallel { .. }
            | Stmt::Print { .. }
            | Stmt::DeviceAssert { .. } => {
                return Err(Diagnostic::bug("tile op left after lowering"));
            }
        }
        Ok(())
    }

    /// One thread-level instruction (tile_ir::inst).
    fn inst(&mut self, i: &Inst) -> Result<(), Diagnostic> {
        let m = self.m;
        match i {
            Inst::VecCopy(inst::VecCopy { dst, dst_idx, src, src_idx, width }) => {
                let bytes = *width * m.buffer(*src).dtype.bytes();
                let ty = match bytes {
                    16 => "uint4",
                    8 => "uint2",
                    4 => "unsigned int",
                    2 => "unsigned short",
                    _ => return Err(Diagnostic::bug(format!("vector access of {bytes} bytes"))),
                };
                let d = self.access(*dst, dst_idx)?;
                let s = self.access(*src, src_idx)?;
                self.line(&format!("*({ty}*)(&{d}) = *(const {ty}*)(&{s});"));
            }
            Inst::Ldmatrix(ld @ inst::Ldmatrix { dst, dst_offset, src, src_idx, .. }) => {
                let (count, trans) = ld.form();
                let (count, trans) = (&count, &trans);
                let d = self.names.buffer(*dst);
                let dst_offset = self.expr(dst_offset)?;
                let a = self.shared_address(*src, src_idx)?;
                let regs: Vec<String> = (0..*count).map(|i| format!("%{i}")).collect();
                let outs: Vec<String> = (0..*count).map(|i| format!("\"=r\"(r[{i}])")).collect();
                self.line(&format!(
                    "{{ unsigned int* r = (unsigned int*)(&{d}[{dst_offset}]); asm volatile(\"ldmatrix.sync.aligned.m8n8.x{count}{}.shared.b16 {{{}}}, [%{count}];\" : {} : \"r\"({a})); }}",
                    if *trans { ".trans" } else { "" },
                    regs.join(","),
                    outs.join(", ")
                ));
            }
            Inst::Mma(inst::Mma { atom, a, a_offset, b, b_offset, c, c_offset }) => {
                let (an, bn, cn) = (self.names.buffer(*a), self.names.buffer(*b), self.names.buffer(*c));
                let (a_offset, b_offset, c_offset) =
                    (self.expr(a_offset)?, self.expr(b_offset)?, self.expr(c_offset)?);
                let kind = atom.ptx;
                let acc = if atom.acc.is_float() { "f" } else { "r" };
                self.line(&format!(
                    "{{ const unsigned int* a = (const unsigned int*)(&{an}[{a_offset}]); const unsigned int* b = (const unsigned int*)(&{bn}[{b_offset}]); {} (&{cn}[{c_offset}]);",
                    if acc == "f" { "float* c =" } else { "int* c =" }
                ));
                self.line(&format!(
                    "  asm volatile(\"{kind} {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};\" : \"+{acc}\"(c[0]), \"+{acc}\"(c[1]), \"+{acc}\"(c[2]), \"+{acc}\"(c[3]) : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1])); }}"
                ));
            }
            Inst::AsyncCopy(inst::AsyncCopy { dst, dst_idx, src, src_idx, src_bytes }) => {
                let d = self.shared_address(*dst, dst_idx)?;
                let s = self.access(*src, src_idx)?;
                if src_bytes.as_int() == Some(16) {
                    // proven inside the tensor: no source size, no zero-fill
                    self.line(&format!(
                        "asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" :: \"r\"({d}), \"l\"(&{s}) : \"memory\");"
                    ));
                } else {
                    let n = self.expr(src_bytes)?;
                    self.line(&format!(
                        "asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\" :: \"r\"({d}), \"l\"(&{s}), \"r\"({n}) : \"memory\");"
                    ));
                }
            }
            Inst::AsyncCommit(_) => self.line("asm volatile(\"cp.async.commit_group;\" ::: \"memory\");"),
            Inst::AsyncWait(inst::AsyncWait { pending }) => {
                self.line(&format!("asm volatile(\"cp.async.wait_group {pending};\" ::: \"memory\");"))
            }
            Inst::Sync(_) => self.line("__syncthreads();"),
            Inst::Trap(_) => self.line("__trap();"),
            Inst::Printf(inst::Printf { format, args }) => {
                let mut call = format!("printf({}", c_string(format));
                for a in args {
                    call.push_str(", ");
                    call.push_str(&self.expr(a)?);
                }
                self.line(&format!("{call});"));
            }
        }
        Ok(())
    }

    /// The value to store into an element of `dt`: converted to the storage type.
    fn store_value(&mut self, dt: DType, value: &Expr) -> Result<String, Diagnostic> {
        if let Expr::Load { buf, idx, dtype, .. } = value {
            if *dtype == dt && matches!(dt, DType::F16 | DType::BF16) {
                return self.access(*buf, idx); // the same storage type: copy the bits
            }
        }
        let mut v = self.expr(value)?;
        // converting to the storage type rounds already: drop an outer rounding to the same type
        let outer = match dt {
            DType::F16 => "tl_round_half(",
            DType::BF16 => "tl_round_bf16(",
            _ => "",
        };
        if !outer.is_empty() && value.dtype() == dt && v.starts_with(outer) && encloses(&v[outer.len() - 1..])
        {
            v = v[outer.len()..v.len() - 1].to_string();
        }
        Ok(match dt {
            DType::F16 => format!("tl_to_half({v})"),
            DType::BF16 => format!("tl_to_bf16({v})"),
            _ => v,
        })
    }

    fn expr(&mut self, e: &Expr) -> Result<String, Diagnostic> {
        let m = self.m;
        Ok(match e {
            Expr::Const { value, dtype } => match (value, dtype) {
                (ConstValue::Int(v), DType::Bool) => {
                    if *v != 0 {
                        "true".into()
                    } else {
                        "false".into()
                    }
                }
                (ConstValue::Int(v), DType::I64) => format!("{v}ll"),
                (ConstValue::Int(v), DType::U32) => format!("{v}u"),
                (ConstValue::Int(v), DType::I32) if *v == i32::MIN as i64 => "(-2147483647 - 1)".into(),
                (ConstValue::Int(v), d) if d.is_int() => {
                    if *v < 0 {
                        format!("({v})")
                    } else {
                        format!("{v}")
                    }
                }
                (ConstValue::Int(v), d) => float_literal(*v as f64, *d),
                (ConstValue::Float(f), d) if d.is_float() => {
                    let s = float_literal(*f, *d);
                    if s.starts_with('-') {
                        format!("({s})")
                    } else {
                        s
                    }
                }
                (ConstValue::Float(f), _) => format!("{}", *f as i64),
            },
            Expr::Var { id, .. } => self.names.var(*id),
            Expr::Load { buf, idx, dtype, .. } => {
                let a = self.access(*buf, idx)?;
                match dtype {
                    DType::F16 | DType::BF16 => format!("tl_float({a})"),
                    _ => a,
                }
            }
            Expr::Binary { op, a, b, dtype } => {
                let (x, y) = (self.expr(a)?, self.expr(b)?);
                let operand = a.dtype();
                let infix = |o: &str| format!("({x} {o} {y})");
                let raw = match op {
                    BinOp::Add => infix("+"),
                    BinOp::Sub => infix("-"),
                    BinOp::Mul => infix("*"),
                    BinOp::Div => infix("/"),
                    BinOp::FloorDiv | BinOp::FloorMod if operand.is_int() => {
                        // C's / and % are Python's on non-negative operands
                        let plain = non_negative(m, &self.non_negative, a)
                            && (b.as_int().is_some_and(|c| c > 0) || non_negative(m, &self.non_negative, b))
                            || !operand.is_signed();
                        match (op, plain) {
                            (BinOp::FloorDiv, true) => infix("/"),
                            (_, true) => infix("%"),
                            (BinOp::FloorDiv, false) => format!("tl_floordiv({x}, {y})"),
                            (_, false) => format!("tl_floormod({x}, {y})"),
                        }
                    }
                    BinOp::FloorDiv => {
                        let f = if operand == DType::F64 { "floor" } else { "floorf" };
                        format!("{f}({x} / {y})")
                    }
                    BinOp::FloorMod => {
                        let f = if operand == DType::F64 { "floor" } else { "floorf" };
                        format!("({x} - {f}({x} / {y}) * {y})")
                    }
                    BinOp::Max | BinOp::Min => {
                        let name = if *op == BinOp::Max { "max" } else { "min" };
                        if operand.is_float() {
                            let f =
                                if operand == DType::F64 { format!("f{name}") } else { format!("f{name}f") };
                            format!("{f}({x}, {y})")
                        } else {
                            let cty = value_type(operand);
                            let cast = |s: &str| {
                                if matches!(operand, DType::I32 | DType::U32 | DType::I64) {
                                    s.to_string()
                                } else {
                                    format!("(int)({s})")
                                }
                            };
                            let _ = cty;
                            format!("tl_{name}({}, {})", cast(&x), cast(&y))
                        }
                    }
                    BinOp::Eq => infix("=="),
                    BinOp::Ne => infix("!="),
                    BinOp::Lt => infix("<"),
                    BinOp::Le => infix("<="),
                    BinOp::Gt => infix(">"),
                    BinOp::Ge => infix(">="),
                    BinOp::And => infix("&&"),
                    BinOp::Or => infix("||"),
                    BinOp::BitAnd => infix("&"),
                    BinOp::BitOr => infix("|"),
                    BinOp::BitXor => infix("^"),
                    BinOp::Shl => infix("<<"),
                    BinOp::Shr => infix(">>"),
                };
                self.round(raw, *dtype)
            }
            Expr::Unary { op, a, dtype } => {
                let x = self.expr(a)?;
                let dbl = *dtype == DType::F64;
                let f = |name: &str| {
                    if dbl {
                        format!("{name}({x})")
                    } else {
                        format!("{name}f({x})")
                    }
                };
                let raw = match op {
                    UnOp::Neg => format!("(-{x})"),
                    UnOp::Not => format!("(!{x})"),
                    UnOp::Abs if dtype.is_float() => f("fabs"),
                    UnOp::Abs => format!("({x} < 0 ? -{x} : {x})"),
                    UnOp::Exp => f("exp"),
                    UnOp::Exp2 => f("exp2"),
                    UnOp::Log => f("log"),
                    UnOp::Log2 => f("log2"),
                    UnOp::Sqrt => f("sqrt"),
                    UnOp::Rsqrt => f("rsqrt"),
                    UnOp::Tanh => f("tanh"),
                    UnOp::Erf => f("erf"),
                    UnOp::Sin => f("sin"),
                    UnOp::Cos => f("cos"),
                    UnOp::Floor => f("floor"),
                    UnOp::Ceil => f("ceil"),
                    UnOp::Sigmoid => {
                        if dbl {
                            format!("tl_sigmoid({x})")
                        } else {
                            format!("tl_sigmoidf({x})")
                        }
                    }
                };
                self.round(raw, *dtype)
            }
            Expr::Cast { a, dtype } => {
                let x = self.expr(a)?;
                self.cast(x, a.dtype(), *dtype)
            }
            Expr::Select { cond, a, b, .. } => {
                let (c, x, y) = (self.expr(cond)?, self.expr(a)?, self.expr(b)?);
                format!("({c} ? {x} : {y})")
            }
            Expr::ShflXor { a, mask, .. } => {
                let x = self.expr(a)?;
                format!("__shfl_xor_sync(0xffffffffu, {x}, {mask})")
            }
        })
    }

    /// Narrow types: round floats to f16/bf16, wrap small integers.
    fn round(&self, raw: String, dt: DType) -> String {
        match dt {
            DType::F16 => format!("tl_round_half({raw})"),
            DType::BF16 => format!("tl_round_bf16({raw})"),
            DType::I8 | DType::U8 | DType::I16 => format!("(({}){raw})", storage_type(dt)),
            _ => raw,
        }
    }

    fn cast(&self, x: String, from: DType, to: DType) -> String {
        if from == to {
            return x;
        }
        if to == DType::Bool {
            return format!("({x} != 0)");
        }
        if from.is_float() && to.is_int() {
            // truncating, saturating, NaN -> 0 (PTX cvt.rzi), in the source's precision
            let p = if from == DType::F64 { "tl_d" } else { "tl_f" };
            return match to {
                DType::I64 => format!("{p}2ll({x})"),
                DType::U32 => format!("{p}2u({x})"),
                DType::I32 => format!("{p}2i({x})"),
                DType::I8 => format!("((signed char){p}2i_sat({x}, -128, 127))"),
                DType::U8 => format!("((unsigned char){p}2i_sat({x}, 0, 255))"),
                DType::I16 => format!("((short){p}2i_sat({x}, -32768, 32767))"),
                _ => unreachable!(),
            };
        }
        match to {
            DType::F16 => format!("tl_round_half((float)({x}))"),
            DType::BF16 => format!("tl_round_bf16((float)({x}))"),
            _ => format!("(({}){x})", storage_type(to)),
        }
    }
}

/// `text` as a C string literal: quotes, backslashes and non-printable or non-ASCII bytes
/// escaped (octal, so a following digit cannot extend the escape).
fn c_string(text: &str) -> String {
    let mut out = String::from("\"");
    for b in text.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b' '..=b'~' => out.push(b as char),
            other => out.push_str(&format!("\\{other:03o}")),
        }
    }
    out.push('"');
    out
}

/// Is `s` one parenthesized group, `(...)`, with nothing after its closing parenthesis?
fn encloses(s: &str) -> bool {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return i == s.len() - 1;
                }
            }
            _ => {}
        }
    }
    false
}
