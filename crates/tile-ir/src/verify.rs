//! The tile-level verifier: every user mistake it can see becomes a diagnostic at the
//! user's line. Invariants checked:
//!
//! - the block has a multiple of 32 threads, at most 1024; 1–3 positive grid dimensions of
//!   integer type;
//! - every expression is well typed: operands of a binary operator share a dtype, comparisons
//!   and conditions are `bool`, indices are integers, math functions take floats;
//! - every load and store has one index per dimension, and constant indices are in range;
//! - variables are used inside the loop that binds them;
//! - fragments are read and written only inside `parallel` loops (or by copy/fill/reduce);
//! - `parallel` loops do not nest, and their extents agree with the fragments they index;
//! - no two iterations of a `parallel` loop write one element (a race);
//! - copies are between regions of one shape, reductions between shapes that differ by `dim`;
//! - copies move tiles, not single elements; copies and fills of fragments cover them whole;
//! - tile operations (copy, fill, reduce, gemm) are not inside `parallel` loops, nor under
//!   a statement that runs per thread ([`crate::per_thread`]); the thread index and values
//!   of each thread's own are read only by per-thread statements (and warp-role conditions).
//! - `print` shows a tile only outside `parallel` loops (fragments and local buffers whole),
//!   its `block=` names a block of the grid; `device_assert` takes a `bool` condition.
//! - a scratch buffer's (`T.alloc_global`) symbolic sizes are dimensions of tensor parameters.

use crate::diag::{Diagnostic, Loc};
use crate::inst::Instruction;
use crate::ir::*;
use crate::per_thread::PerThread;
use crate::simplify::simplify;
use crate::types::{DType, Scope};

/// A copy/fill operand with its extents resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedRegion {
    pub buf: BufferId,
    /// Start index per buffer dimension.
    pub starts: Vec<Expr>,
    /// Extent per buffer dimension (1 for indexed dimensions).
    pub extents: Vec<i64>,
    /// Whether each buffer dimension is part of the region's shape (false for `index`).
    pub kept: Vec<bool>,
}

impl ResolvedRegion {
    /// The region's shape: kept dimensions only.
    pub fn shape(&self) -> Vec<i64> {
        self.extents.iter().zip(&self.kept).filter(|(_, k)| **k).map(|(e, _)| *e).collect()
    }
    /// The shape without unit dimensions, for comparing two sides of a copy.
    pub fn squeezed(&self) -> Vec<i64> {
        self.shape().into_iter().filter(|e| *e != 1).collect()
    }
}

fn const_of(e: &Expr) -> Option<i64> {
    simplify(e.clone()).as_int()
}

/// Resolve one region operand; `other_shape` gives the extents of origin-form dimensions.
pub fn resolve_region(
    m: &Module,
    r: &Region,
    other_shape: Option<&[i64]>,
) -> Result<ResolvedRegion, Diagnostic> {
    let b = m.buffer(r.buf);
    let rank = b.shape.len();
    if r.dims.len() > rank {
        return Err(Diagnostic::error(
            format!("'{}' has {} dimensions but the region names {}", b.name, rank, r.dims.len()),
            r.loc,
        )
        .with_help(format!("give at most one index or slice per dimension of '{}'", b.name)));
    }
    let is_origin = r.dims.iter().any(|d| matches!(d, RegionDim::Origin(_)));
    let mut starts = Vec::new();
    let mut extents = Vec::new();
    let mut kept = Vec::new();
    if is_origin {
        let Some(other) = other_shape else {
            return Err(Diagnostic::error(
                format!("the extent of region '{}[...]' cannot be inferred", b.name),
                r.loc,
            )
            .with_help("give one side of the copy a shape: a whole buffer or slices such as A[i:i+64, :]"));
        };
        if other.len() > rank {
            return Err(Diagnostic::error(
                format!(
                    "copy between tiles of different ranks: '{}' has {} dimensions, the other side has shape {:?}",
                    b.name, rank, other
                ),
                r.loc,
            )
            .with_help("copy between tiles of one rank: slice the other side down, e.g. s[0, 0:8], or copy row by row"));
        }
        for (d, dim) in r.dims.iter().enumerate() {
            let (RegionDim::Origin(e) | RegionDim::Index(e) | RegionDim::Slice { start: e, .. }) = dim;
            starts.push(e.clone());
            let _ = d;
        }
        for d in r.dims.len()..rank {
            let _ = d;
            starts.push(Expr::int(0));
        }
        let lead = rank - other.len();
        for d in 0..rank {
            let ext = if d < lead { 1 } else { other[d - lead] };
            extents.push(ext);
            kept.push(d >= lead);
        }
    } else {
        for (d, dim) in r.dims.iter().enumerate() {
            match dim {
                RegionDim::Index(e) => {
                    starts.push(e.clone());
                    extents.push(1);
                    kept.push(false);
                }
                RegionDim::Slice { start, stop } => {
                    let ext = const_of(&Expr::binary(
                        BinOp::Sub,
                        Expr::cast(stop.clone(), start.dtype()),
                        start.clone(),
                    ));
                    match ext {
                        Some(x) if x > 0 => extents.push(x),
                        Some(x) => {
                            return Err(Diagnostic::error(
                                format!("slice of dimension {d} of '{}' is empty (extent {x})", b.name),
                                r.loc,
                            )
                            .with_help("a slice start:stop needs stop > start"))
                        }
                        None if matches!((stop, b.shape[d]), (Expr::Var { id, .. }, Dim::Size(v)) if *id == v) => {
                            // `A[:, ...]` over a symbolic dimension
                            return Err(symbolic_extent(m, r, d));
                        }
                        None => {
                            return Err(Diagnostic::error(
                                format!("the extent of the slice of dimension {d} of '{}' is not a compile-time constant", b.name),
                                r.loc,
                            )
                            .with_help("write slices as A[i * 64:(i + 1) * 64], whose length does not depend on run-time values"))
                        }
                    }
                    starts.push(start.clone());
                    kept.push(true);
                }
                RegionDim::Origin(_) => unreachable!("handled above"),
            }
        }
        for d in r.dims.len()..rank {
            let Some(ext) = b.extent(d) else {
                return Err(symbolic_extent(m, r, d));
            };
            starts.push(Expr::int(0));
            extents.push(ext);
            kept.push(true);
        }
    }
    // Regions of on-chip buffers must lie inside them: there is no edge to pad there.
    if b.scope != Scope::Global {
        let shape = b.extents();
        for d in 0..rank {
            if let Some(s) = const_of(&starts[d]) {
                if s < 0 || s + extents[d] > shape[d] {
                    return Err(Diagnostic::error(
                        format!(
                            "region [{}, {}) of dimension {d} is outside '{}' of shape {:?}",
                            s,
                            s + extents[d],
                            b.name,
                            shape
                        ),
                        r.loc,
                    )
                    .with_label(b.loc, format!("'{}' allocated here", b.name))
                    .with_help(format!(
                        "regions of on-chip tiles must lie inside them: dimension {d} runs from 0 to {}",
                        shape[d] - 1
                    )));
                }
            }
        }
    }
    Ok(ResolvedRegion { buf: r.buf, starts, extents, kept })
}

/// A region that would take all of a symbolic dimension: its tile has no fixed shape.
fn symbolic_extent(m: &Module, r: &Region, d: usize) -> Diagnostic {
    let b = m.buffer(r.buf);
    let size = match b.shape[d] {
        Dim::Size(v) => m.var(v).name.clone(),
        Dim::Fixed(n) => n.to_string(),
    };
    Diagnostic::error(
        format!(
            "this region takes all of dimension {d} of '{}', whose extent is the symbolic size '{size}'; a tile's shape must be fixed",
            b.name
        ),
        r.loc,
    )
    .with_label(b.loc, format!("'{}' declared here with shape {}", b.name, shape_text(m, &b.shape)))
    .with_help(format!(
        "take a tile of fixed extent from it, e.g. {}[i * 64:(i + 1) * 64, ...], and loop over T.ceildiv({size}, 64) of them",
        b.name
    ))
}

/// `[M, 64]`: a shape as a user reads it.
pub fn shape_text(m: &Module, shape: &[Dim]) -> String {
    let dims: Vec<String> = shape
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => n.to_string(),
            Dim::Size(v) => m.var(*v).name.clone(),
        })
        .collect();
    format!("[{}]", dims.join(", "))
}

/// Resolve both sides of a copy and check their shapes agree.
pub fn resolve_copy(
    m: &Module,
    src: &Region,
    dst: &Region,
    loc: Loc,
) -> Result<(ResolvedRegion, ResolvedRegion), Diagnostic> {
    let src_origin = src.dims.iter().any(|d| matches!(d, RegionDim::Origin(_)));
    let dst_origin = dst.dims.iter().any(|d| matches!(d, RegionDim::Origin(_)));
    let (s, d) = match (src_origin, dst_origin) {
        (true, true) => {
            return Err(Diagnostic::error(
                "both sides of this copy are origins, so its shape is unknown",
                loc,
            )
            .with_help("give one side a shape: a whole buffer, or slices such as A[i:i+64, :]"))
        }
        (true, false) => {
            let d = resolve_region(m, dst, None)?;
            (resolve_region(m, src, Some(&d.shape()))?, d)
        }
        (false, true) => {
            let s = resolve_region(m, src, None)?;
            let d = resolve_region(m, dst, Some(&s.shape()))?;
            (s, d)
        }
        (false, false) => (resolve_region(m, src, None)?, resolve_region(m, dst, None)?),
    };
    if s.squeezed() != d.squeezed() {
        return Err(Diagnostic::error(
            format!(
                "copy between tiles of different shapes: '{}' region has shape {:?}, '{}' region has shape {:?}",
                m.buffer(s.buf).name,
                s.shape(),
                m.buffer(d.buf).name,
                d.shape()
            ),
            loc,
        )
        .with_help("both sides of T.copy must have the same shape (dimensions of extent 1 may differ)"));
    }
    Ok((s, d))
}

struct Verifier<'a> {
    m: &'a Module,
    diags: Vec<Diagnostic>,
    /// Loop variables in scope, innermost last; the bool marks parallel-loop variables that
    /// take more than one value (the ones a write must be indexed by).
    scope: Vec<(VarId, bool)>,
    in_parallel: Option<Loc>,
    /// Which statements run on every thread (they read the thread index).
    pt: PerThread,
    /// The per-thread statement being checked (its line), if any.
    per_thread: Option<Loc>,
    /// The loops around the statement being checked, innermost last (None: `parallel`).
    loops: Vec<Option<ForKind>>,
    /// Per-thread (local) buffers the current T.Parallel iteration has stored to so far.
    local_set: Vec<BufferId>,
}

/// Check the tile-level invariants listed in this module's doc.
pub fn verify(m: &Module) -> Result<(), Vec<Diagnostic>> {
    let mut v = Verifier {
        m,
        diags: Vec::new(),
        scope: Vec::new(),
        in_parallel: None,
        pt: PerThread::of(m),
        per_thread: None,
        loops: Vec::new(),
        local_set: Vec::new(),
    };
    // a cluster barrier of the user's program (cluster_sync, cluster_arrive, cluster_wait)
    // waits for every thread of the cluster: it stands in the kernel's body (the interpreter
    // runs a cluster's blocks from one to the next), each arrive waited for before the next
    // arrival or the end (the frontend says where; this is the check behind it)
    if m.kernel.roles.is_none() {
        let (mut arrived, mut unpaired) = (false, false);
        for s in &m.kernel.body {
            if let Stmt::If { .. } | Stmt::For { .. } | Stmt::Parallel { .. } = s {
                let mut nested = false;
                walk_stmts(std::slice::from_ref(s), &mut |x| nested |= x.is_cluster_barrier());
                if nested {
                    v.diags.push(Diagnostic::error(
                        "internal: a cluster barrier inside a loop or branch (it stands in the kernel's body)",
                        s.loc(),
                    ));
                }
            }
            unpaired |= match s {
                Stmt::Inst(crate::inst::Inst::ClusterArrive(_)) => std::mem::replace(&mut arrived, true),
                Stmt::Inst(crate::inst::Inst::ClusterWait(_)) => !std::mem::replace(&mut arrived, false),
                Stmt::Inst(crate::inst::Inst::ClusterSync(_)) => arrived,
                _ => false,
            };
        }
        if unpaired || arrived {
            v.diags.push(Diagnostic::error(
                "internal: the kernel's cluster_arrive and cluster_wait do not alternate (arrive, wait, arrive, ...; a cluster_sync between pairs)",
                m.kernel.loc,
            ));
        }
    }
    // symbolic sizes are dimensions of tensor parameters only: every tile is fixed
    for b in &m.buffers {
        if b.scope != Scope::Global && b.is_symbolic() {
            v.diags.push(
                Diagnostic::error(
                    format!(
                        "{} tile '{}' has shape {}: a tile's shape must be fixed, not a symbolic size",
                        b.scope.name(),
                        b.name,
                        shape_text(m, &b.shape)
                    ),
                    b.loc,
                )
                .with_help("allocate a tile of fixed size (e.g. block_M) and loop over T.ceildiv(M, block_M) tiles; only tensor parameters may have T.dynamic sizes"),
            );
        }
    }
    // a scratch buffer's symbolic size must come from a tensor the call passes
    for &id in &m.scratch {
        let b = m.buffer(id);
        for d in &b.shape {
            let Dim::Size(size) = *d else { continue };
            let carried = m.params.iter().any(|p| match p {
                Param::Tensor { buffer, .. } => m.buffer(*buffer).shape.contains(d),
                Param::Scalar { .. } => false,
            });
            if !carried {
                let name = &m.var(size).name;
                v.diags.push(
                    Diagnostic::error(
                        format!(
                            "scratch buffer '{}' has shape {}, but the T.dynamic size '{name}' is a dimension of no tensor parameter, so a call cannot know it",
                            b.name,
                            shape_text(m, &b.shape)
                        ),
                        b.loc,
                    )
                    .with_help(format!("give '{name}' to a tensor parameter, e.g. A: T.Tensor(({name}, ...), dtype)")),
                );
            }
        }
    }
    if !v.diags.is_empty() {
        return Err(v.diags);
    }
    let t = m.kernel.threads;
    if t > 1024 {
        v.diags.push(
            Diagnostic::error(
                format!("threads={t} is above the 1024 threads a block may have"),
                m.kernel.loc,
            )
            .with_help("use at most 1024 threads (e.g. threads=256) and give each thread more elements"),
        );
    } else if t == 0 || !t.is_multiple_of(32) {
        // the JSON reader rounds the user's count up to whole warps (`Kernel::user_threads`)
        v.diags.push(
            Diagnostic::error(format!("threads={t} is not a multiple of 32"), m.kernel.loc)
                .with_help("a block is made of whole warps of 32 threads; use e.g. threads=128"),
        );
    } else if m.kernel.user_threads.is_some_and(|n| n == 0 || n > t) {
        v.diags.push(Diagnostic::error(
            "internal: user_threads past the launched threads".to_string(),
            m.kernel.loc,
        ));
    }
    for b in m.buffers.iter().filter(|b| b.swizzle.is_some() && m.level == Level::Tile) {
        // the XOR swizzle permutes 16-byte chunks inside 128-byte lines: whole lines only
        if b.scope != crate::Scope::Shared {
            v.diags.push(
                Diagnostic::error(
                    format!("'{}' is not in shared memory; only shared tiles can be swizzled", b.name),
                    b.loc,
                )
                .with_help(
                    "fragment layouts come from the instructions that use them; annotate shared tiles only",
                ),
            );
        } else if b.bytes() % 128 != 0
            || b.extents().last().copied().unwrap_or(1) * b.dtype.bytes() as i64 % 16 != 0
        {
            let row_bytes = b.extents().last().copied().unwrap_or(1) * b.dtype.bytes() as i64;
            v.diags.push(
                Diagnostic::error(
                    format!(
                        "'{}' {:?} {} cannot be swizzled: the swizzle permutes 16-byte chunks of 128-byte lines, and this tile is {} bytes with {}-byte rows",
                        b.name, b.extents(), b.dtype, b.bytes(), row_bytes
                    ),
                    b.loc,
                )
                .with_help("swizzle tiles whose rows are a multiple of 16 bytes and whose size is a multiple of 128 bytes"),
            );
        }
    }
    // CUDA's grid limits per axis (x, y, z)
    const GRID_LIMIT: [i64; 3] = [(1 << 31) - 1, 65535, 65535];
    for (axis, g) in m.kernel.grid.iter().enumerate() {
        v.expr(g, m.kernel.loc);
        if !g.dtype().is_int() {
            v.diags.push(
                Diagnostic::error("grid dimensions must be integers", m.kernel.loc)
                    .with_help("compute the grid with integer arithmetic, e.g. T.ceildiv(N, block_N)"),
            );
        }
        if let Some(x) = const_of(g) {
            if x <= 0 {
                v.diags.push(
                    Diagnostic::error(format!("grid dimension is {x}; it must be positive"), m.kernel.loc)
                        .with_help("round the number of blocks up with T.ceildiv(N, block_N)"),
                );
            } else if let Some(&limit) = GRID_LIMIT.get(axis).filter(|&&limit| x > limit) {
                v.diags.push(
                    Diagnostic::error(
                        format!(
                            "grid dimension {axis} is {x} blocks, above the {limit} CUDA launches on that axis"
                        ),
                        m.kernel.loc,
                    )
                    .with_help("put the largest count first (the x axis takes up to 2^31 - 1 blocks), or give each block more work"),
                );
            }
        }
    }
    for b in &m.buffers {
        if b.scope != Scope::Global && b.num_elements() > 1 << 22 {
            v.diags.push(
                Diagnostic::error(
                    format!("'{}' of shape {:?} is too large for on-chip memory", b.name, b.extents()),
                    b.loc,
                )
                .with_help("shared, fragment and local buffers hold one block's tile; make the tile smaller"),
            );
        }
    }
    if !v.diags.is_empty() {
        return Err(v.diags);
    }
    v.stmts(&m.kernel.body);
    if v.diags.is_empty() {
        Ok(())
    } else {
        Err(v.diags)
    }
}

impl<'a> Verifier<'a> {
    fn err(&mut self, msg: String, loc: Loc) -> &mut Diagnostic {
        self.diags.push(Diagnostic::error(msg, loc));
        self.diags.last_mut().unwrap()
    }

    fn err_help(&mut self, msg: String, loc: Loc, help: impl Into<String>) {
        self.diags.push(Diagnostic::error(msg, loc).with_help(help));
    }

    /// A tile operation met inside a `T.Parallel` loop.
    fn tile_op_in_parallel(&mut self, op: &str, loc: Loc) {
        let outer = self.in_parallel.unwrap_or(Loc::UNKNOWN);
        let d = self.err(format!("{op} inside a T.Parallel loop"), loc);
        *d = d.clone().with_label(outer, "inside this T.Parallel loop").with_help(format!(
            "{op} is a tile operation run by the whole block: call it outside the T.Parallel loop"
        ));
    }

    /// A tile operation: run by the whole block (or warp-role region), so not inside a
    /// `parallel` loop nor under a statement that runs per thread.
    fn tile_op(&mut self, op: &str, loc: Loc) {
        if self.in_parallel.is_some() {
            self.tile_op_in_parallel(op, loc);
        } else if let Some(outer) = self.per_thread {
            let d = self.err(format!("{op} under a statement that runs on each thread on its own"), loc);
            *d = d.clone().with_label(outer, "this statement depends on the thread index").with_help(format!(
                "{op} is a tile operation run by the whole block (or a warp-role region such as `if tx < 128:`): call it outside the per-thread statement"
            ));
        }
    }

    fn bound(&self, v: VarId) -> bool {
        match self.m.var(v).kind {
            VarKind::Loop => self.scope.iter().any(|(s, _)| *s == v),
            _ => true,
        }
    }

    /// Check an expression. Fragments may be read anywhere: outside `T.Parallel` every thread
    /// reads them, and `infer_layouts` gives such fragments a layout in which every thread
    /// holds every element (or names the op whose layout makes that impossible).
    fn expr(&mut self, e: &Expr, loc: Loc) {
        let m = self.m;
        let in_parallel = self.in_parallel.is_some();
        let per_thread_ok = !in_parallel && self.per_thread.is_some();
        let mut errors: Vec<(String, Loc, Option<String>)> = Vec::new();
        e.walk(&mut |x| match x {
            // the thread index (T.get_thread_binding) and values of each thread's own are
            // read by statements that run per thread (and warp-role conditions); a
            // `parallel` loop's iterations and a tile op's regions are the compiler's to
            // map onto threads
            Expr::Var { id, .. } if !per_thread_ok && Some(*id) == self.pt.tid => {
                errors.push(if in_parallel {
                    (
                        "the thread index (T.get_thread_binding) inside a T.Parallel loop: which thread runs an iteration is the compiler's choice".into(),
                        loc,
                        Some("index with the loop's own variables; per-thread code goes outside T.Parallel, where a statement that reads the thread index runs on every thread".into()),
                    )
                } else {
                    (
                        "the thread index (T.get_thread_binding) in a tile operation: a tile op runs on the whole block".into(),
                        loc,
                        Some("give the tile op indices that are the same on every thread; per-thread work is written with element stores (every thread runs a statement that reads the thread index)".into()),
                    )
                });
            }
            Expr::Var { id, .. } if !per_thread_ok && self.pt.vars.contains(id) => {
                errors.push((
                    format!("'{}' is a loop variable of a loop that runs on each thread on its own; it is read here by a T.Parallel loop or a tile op", m.var(*id).name),
                    loc,
                    Some("use it inside the per-thread statement".into()),
                ));
            }
            Expr::Load { buf, .. } if !per_thread_ok && self.pt.bufs.contains(buf) => {
                errors.push((
                    format!(
                        "'{}' holds a value of each thread's own (a statement that reads the thread index writes it); {} cannot read it",
                        m.buffer(*buf).name,
                        if in_parallel { "a T.Parallel loop, whose iterations run on threads the compiler chooses," } else { "a tile op, which runs on the whole block," }
                    ),
                    loc,
                    Some("read it in per-thread statements, or pass the value through a shared buffer".into()),
                ));
            }
            Expr::Var { id, .. }
                if !self.bound(*id) => {
                    errors.push((
                        format!("loop variable '{}' is used outside its loop", m.var(*id).name),
                        loc,
                        Some("use it inside the loop that binds it; to keep a value for later, store it in a buffer".into()),
                    ));
                }
            Expr::Load { buf, idx, loc: lloc, .. } => {
                let l = if lloc.is_known() { *lloc } else { loc };
                let b = m.buffer(*buf);
                if idx.len() != b.shape.len() {
                    errors.push((
                        format!("'{}' has {} dimensions but is indexed with {}", b.name, b.shape.len(), idx.len()),
                        l,
                        Some(format!("give one index per dimension of '{}'", b.name)),
                    ));
                }
                for (d, i) in idx.iter().enumerate() {
                    if !i.dtype().is_int() {
                        errors.push((
                            format!("index {d} of '{}' is {}, not an integer", b.name, i.dtype()),
                            l,
                            Some("convert it with T.cast(x, \"int32\")".into()),
                        ));
                    } else if let (Some(c), Some(dim)) = (const_of(i), b.shape.get(d)) {
                        // a symbolic extent is at least 0: only a negative index is known out
                        let ext = dim.fixed().unwrap_or(i64::MAX);
                        if c < 0 || c >= ext {
                            errors.push((
                                format!("index {c} is out of range for dimension {d} of '{}' (extent {ext})", b.name),
                                l,
                                Some(format!("indices of dimension {d} of '{}' run from 0 to {}", b.name, ext - 1)),
                            ));
                        }
                    }
                }
            }
            Expr::Binary { op, a, b, dtype } => {
                if a.dtype() != b.dtype() {
                    errors.push((format!("internal: operands of {} differ: {} and {}", op.name(), a.dtype(), b.dtype()), loc, None));
                }
                if op.is_comparison() && *dtype != DType::Bool {
                    errors.push((format!("internal: comparison {} must be bool", op.name()), loc, None));
                }
                if matches!(op, BinOp::And | BinOp::Or) && a.dtype() != DType::Bool {
                    errors.push((
                        "logical and/or take bool operands".into(),
                        loc,
                        Some("compare first, e.g. (i > 0) & (i < n)".into()),
                    ));
                }
                if *op == BinOp::Div && a.dtype().is_int() {
                    errors.push((
                        "'/' on integers".into(),
                        loc,
                        Some("use // for integer division, or T.cast(x, \"float32\") for a floating-point result".into()),
                    ));
                }
            }
            Expr::Unary { op: UnOp::Reinterpret, a, dtype }
                if a.dtype().bytes() != dtype.bytes() || a.dtype() == DType::Bool || *dtype == DType::Bool => {
                    errors.push((
                        format!("T.reinterpret of {} as {}: the two types must have the same width", a.dtype(), dtype),
                        loc,
                        Some("use T.cast to convert a value".into()),
                    ));
                }
            Expr::Unary { op, a, .. }
                if op.is_float_math() && !a.dtype().is_float() => {
                    errors.push((
                        format!("T.{} takes a float, got {}", op.name(), a.dtype()),
                        loc,
                        Some("cast first, e.g. T.exp(T.cast(x, \"float32\"))".into()),
                    ));
                }
            Expr::Select { cond, a, b, .. } => {
                if cond.dtype() != DType::Bool {
                    errors.push((
                        "the condition of T.if_then_else must be a comparison (bool)".into(),
                        loc,
                        Some("use a comparison, e.g. T.if_then_else(x > 0, a, b)".into()),
                    ));
                }
                if a.dtype() != b.dtype() {
                    errors.push((format!("internal: select arms differ: {} and {}", a.dtype(), b.dtype()), loc, None));
                }
            }
            _ => {}
        });
        for (msg, l, help) in errors {
            let d = self.err(msg, l);
            if let Some(h) = help {
                *d = d.clone().with_help(h);
            }
        }
    }

    fn region(&mut self, r: &Region) {
        if self.m.buffer(r.buf).scope == Scope::Cluster {
            // T.copy_cluster's stores reach other blocks' tiles element by element
            self.err(
                format!("internal: the cluster view '{}' in a tile operation (only element stores and loads reach it)", self.m.buffer(r.buf).name),
                r.loc,
            );
        }
        for d in &r.dims {
            match d {
                RegionDim::Index(e) | RegionDim::Origin(e) => self.expr(e, r.loc),
                RegionDim::Slice { start, stop } => {
                    self.expr(start, r.loc);
                    self.expr(stop, r.loc);
                }
            }
        }
    }

    fn stmts(&mut self, body: &[Stmt]) {
        for s in body {
            self.stmt(s);
        }
    }

    fn store_target(
        &mut self,
        buf: BufferId,
        idx: &[Expr],
        value: &Expr,
        loc: Loc,
        atomic: Option<AtomicMode>,
    ) {
        let b = self.m.buffer(buf);
        // the target's indices as a load's (a statement once per block may set every
        // thread's copy of a per-thread buffer: that is no read of it)
        let outside = self.in_parallel.is_none() && self.per_thread.is_none() && self.pt.bufs.contains(&buf);
        if outside {
            self.per_thread = Some(loc);
        }
        self.expr(&Expr::load(buf, idx.to_vec(), b.dtype), loc);
        if outside {
            self.per_thread = None;
        }
        self.expr(value, loc);
        if value.dtype() != b.dtype {
            self.err(format!("internal: storing {} into '{}' of {}", value.dtype(), b.name, b.dtype), loc);
        }
        if let Some(mode) = atomic {
            if b.scope == Scope::Cluster {
                self.err(format!("internal: an atomic update of the cluster view '{}'", b.name), loc);
            }
            self.atomic_target(buf, mode, loc);
            return;
        }
        // A per-thread buffer (T.alloc_var, T.alloc_local) updated from its own value in a
        // T.Parallel iteration that has not set it first carries a value from iteration to
        // iteration; the iterations run on different threads, each with its own copy, so
        // the sum (or count, or max) would be of one thread's iterations only.
        if self.in_parallel.is_some() && b.scope == Scope::Local {
            let reads_itself = {
                let mut found = false;
                value.walk(&mut |x| {
                    if matches!(x, Expr::Load { buf: lb, .. } if *lb == buf) {
                        found = true;
                    }
                });
                found
            };
            let splits = self.scope.iter().any(|(_, p)| *p);
            if reads_itself && splits && !self.local_set.contains(&buf) {
                let name = b.name.clone();
                self.err_help(
                    format!(
                        "'{name}' is each thread's own (a local buffer), and this T.Parallel loop's iterations run on threads the compiler chooses: updating it from the value an earlier iteration left accumulates one thread's iterations only"
                    ),
                    loc,
                    format!(
                        "accumulate into a fragment indexed by the loop variables and reduce it with T.reduce_sum / T.reduce_max, use T.atomic_add on a shared buffer, or loop with T.serial; setting '{name}' earlier in the same iteration makes it a temporary"
                    ),
                );
            }
            if !self.local_set.contains(&buf) {
                self.local_set.push(buf);
            }
        }
        // Races: inside a parallel loop, each iteration must write its own element.
        if self.in_parallel.is_some() && b.scope != Scope::Local {
            let par_vars: Vec<VarId> = self.scope.iter().filter(|(_, p)| *p).map(|(v, _)| *v).collect();
            let unused: Vec<VarId> =
                par_vars.into_iter().filter(|v| !idx.iter().any(|i| i.uses_var(*v))).collect();
            if !unused.is_empty() {
                let names: Vec<String> = unused.iter().map(|v| self.m.var(*v).name.clone()).collect();
                let name = b.name.clone();
                let d = self.err(
                    format!(
                        "race: iterations of this T.Parallel loop that differ only in {} all write the same element of '{}'",
                        names.join(", "),
                        name
                    ),
                    loc,
                );
                *d = d.clone().with_help(
                    "index the written element with every loop variable, or reduce with T.reduce_* instead",
                );
            }
        }
    }

    /// An atomic's destination: a global or shared buffer of a dtype the operation has.
    fn atomic_target(&mut self, buf: BufferId, mode: AtomicMode, loc: Loc) {
        let b = self.m.buffer(buf);
        let what = format!("T.atomic_{}", mode.op.name());
        if b.scope != Scope::Global && b.scope != Scope::Shared {
            self.err_help(
                format!("{what} needs a global or shared buffer; '{}' is {}", b.name, b.scope.name()),
                loc,
                format!(
                    "each element of a {} has one owner: update it in place ({}[i] = ...) instead",
                    b.scope.name(),
                    b.name
                ),
            );
        }
        if !atomic_dtype(b.dtype) {
            self.err_help(
                format!("{what} does not support {}", b.dtype),
                loc,
                "use a float32, float16, bfloat16, float64, int32, uint32, int64 or uint64 buffer",
            );
        }
    }

    /// A statement on a barrier of `T.alloc_barrier`: an int64 shared buffer, an integer
    /// index and parity; a TMA copy of a global tile into a shared one of its dtype.
    fn barrier(&mut self, op: &BarrierOp) {
        let m = self.m;
        let b = m.buffer(op.bar);
        if b.scope != Scope::Shared || b.dtype != DType::I64 || b.shape.len() != 1 {
            self.err(format!("'{}' is not a barrier of T.alloc_barrier", b.name), op.loc);
            return;
        }
        self.tile_op("a barrier operation", op.loc);
        for e in op.exprs() {
            self.expr(e, op.loc);
        }
        for (what, e) in [
            ("index", Some(&op.idx)),
            (
                "parity",
                match &op.kind {
                    BarrierKind::Wait { parity } => Some(parity),
                    _ => None,
                },
            ),
            (
                "byte count",
                match &op.kind {
                    BarrierKind::ExpectTx { bytes } => Some(bytes),
                    _ => None,
                },
            ),
        ] {
            if let Some(e) = e {
                if !e.dtype().is_int() {
                    self.err(
                        format!("the {what} of a barrier operation must be an integer, got {}", e.dtype()),
                        op.loc,
                    );
                }
            }
        }
        if let BarrierKind::TmaLoad { copy } = &op.kind {
            let (sb, db) = (m.buffer(copy.src.buf), m.buffer(copy.dst.buf));
            if sb.scope != Scope::Global || db.scope != Scope::Shared {
                let d = self.err(
                    format!(
                        "T.tma_copy loads a global tile into a shared one; '{}' is {} and '{}' is {}",
                        sb.name,
                        sb.scope.name(),
                        db.name,
                        db.scope.name()
                    ),
                    op.loc,
                );
                *d = d.clone().with_help("copy other tiles with T.copy");
                return;
            }
            if sb.dtype != db.dtype {
                self.err(
                    format!(
                        "T.tma_copy does not convert: '{}' is {} and '{}' {}",
                        sb.name, sb.dtype, db.name, db.dtype
                    ),
                    op.loc,
                );
                return;
            }
            self.region(&copy.src);
            self.region(&copy.dst);
            match resolve_copy(m, &copy.src, &copy.dst, op.loc) {
                Ok((s, d)) => self.copy_regions(&s, &d, op.loc),
                Err(d) => self.diags.push(d),
            }
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        // a statement that reads the thread index runs on every thread: itself and all
        // under it (tile ops there are errors)
        let head =
            self.in_parallel.is_none() && self.per_thread.is_none() && self.pt.head_as_written(self.m, s);
        if head {
            self.per_thread = Some(s.loc());
        }
        self.stmt_in(s);
        if head {
            self.per_thread = None;
        }
    }

    fn stmt_in(&mut self, s: &Stmt) {
        let m = self.m;
        match s {
            Stmt::Store { buf, idx, value, loc } => self.store_target(*buf, idx, value, *loc, None),
            Stmt::Atomic { mode, buf, idx, value, prev, loc } => {
                self.store_target(*buf, idx, value, *loc, Some(*mode));
                if let Some(p) = prev {
                    let (pb, b) = (m.buffer(*p), m.buffer(*buf));
                    if pb.scope != Scope::Local
                        || pb.dtype != b.dtype
                        || pb.extents().iter().product::<i64>() != 1
                    {
                        self.err(
                            format!("internal: '{}' cannot hold the old value of '{}'", pb.name, b.name),
                            *loc,
                        );
                    }
                }
            }
            Stmt::Copy(CopyOp { src, dst, pad, loc, atomic, .. }) => {
                self.region(src);
                self.region(dst);
                if let Some(mode) = atomic {
                    self.atomic_target(dst.buf, *mode, *loc);
                    if pad.is_some() {
                        self.err("internal: an atomic tile update with a pad value".into(), *loc);
                    }
                }
                if let Some(p) = pad {
                    self.expr(p, *loc);
                }
                let what = match atomic {
                    Some(mode) => format!("T.atomic_{}", mode.op.name()),
                    None => "T.copy".to_string(),
                };
                self.tile_op(&what, *loc);
                match resolve_copy(m, src, dst, *loc) {
                    Ok((s, d)) => self.copy_regions(&s, &d, *loc),
                    Err(mut d) if atomic.is_some() => {
                        // the tile atomic's words, not the copy's
                        d.message = d.message.replace("this copy", &format!("this {what}"));
                        d.message = d.message.replace("copy between", &format!("{what} between"));
                        d.help = d.help.map(|h| h.replace("T.copy", &what));
                        self.diags.push(d)
                    }
                    Err(d) => self.diags.push(d),
                }
                let (sb, db) = (m.buffer(src.buf), m.buffer(dst.buf));
                if sb.dtype != db.dtype && (sb.scope == Scope::Global) == (db.scope == Scope::Global) {
                    // conversions happen in registers; allowed between on-chip tiles
                }
            }
            Stmt::Barrier(op) => self.barrier(op),
            Stmt::Fill { dst, value, loc } => {
                self.region(dst);
                self.expr(value, *loc);
                self.tile_op("T.fill", *loc);
                match resolve_region(m, dst, None) {
                    Ok(r) => {
                        let b = m.buffer(r.buf);
                        if matches!(b.scope, Scope::Fragment | Scope::Local) && !whole(&r, b) {
                            self.err_help(
                                format!("T.fill of part of {} '{}' is not supported; fill it whole", b.scope.name(), b.name),
                                *loc,
                                format!("fill all of '{}' (T.fill({}, v)), or set part of it in a T.Parallel loop", b.name, b.name),
                            );
                        }
                    }
                    Err(d) => self.diags.push(d),
                }
            }
            Stmt::Reduce(ReduceOp { src, dst, dim, loc, .. }) => {
                let (sb, db) = (m.buffer(*src), m.buffer(*dst));
                self.tile_op("T.reduce", *loc);
                if sb.scope != Scope::Fragment || db.scope != Scope::Fragment {
                    let d = self.err(
                        format!(
                            "reductions run on fragments: '{}' is {} and '{}' is {}",
                            sb.name,
                            sb.scope.name(),
                            db.name,
                            db.scope.name()
                        ),
                        *loc,
                    );
                    *d = d.clone().with_help(
                        "reduce a fragment or a shared tile (T.copy the tensor's tile into one first)",
                    );
                    return;
                }
                if *dim >= sb.shape.len() {
                    self.err_help(
                        format!("dim={dim} is out of range for '{}' of rank {}", sb.name, sb.shape.len()),
                        *loc,
                        format!(
                            "reduce over one of the dimensions 0 to {}",
                            sb.shape.len().saturating_sub(1)
                        ),
                    );
                    return;
                }
                let mut expect = sb.extents();
                expect.remove(*dim);
                if expect.is_empty() {
                    expect.push(1);
                }
                if db.extents() != expect {
                    let d = self.err(
                        format!(
                            "reducing '{}' of shape {:?} over dim {dim} gives shape {:?}, but '{}' has shape {:?}",
                            sb.name, sb.extents(), expect, db.name, db.extents()
                        ),
                        *loc,
                    );
                    *d = d.clone().with_label(db.loc, format!("'{}' allocated here", db.name)).with_help(
                        format!(
                            "allocate the result with the shape of '{}' without dimension {dim}: {:?}",
                            sb.name, expect
                        ),
                    );
                }
                if sb.dtype != db.dtype && !(sb.dtype.is_float() && db.dtype.is_float()) {
                    self.err_help(
                        format!("reduction from {} into {} is not supported", sb.dtype, db.dtype),
                        *loc,
                        format!("give '{}' the dtype of '{}' ({})", db.name, sb.name, sb.dtype),
                    );
                }
            }
            Stmt::Gemm(op) => {
                for d in op.a_view.iter().chain(&op.b_view) {
                    match d {
                        RegionDim::Index(e) | RegionDim::Origin(e) => self.expr(e, op.loc),
                        RegionDim::Slice { start, stop } => {
                            self.expr(start, op.loc);
                            self.expr(stop, op.loc);
                        }
                    }
                }
                self.gemm(op)
            }
            Stmt::Parallel { vars, extents, body, loc, .. } => {
                if self.per_thread.is_some() {
                    self.tile_op("a T.Parallel loop", *loc);
                    return;
                }
                let iterations: i64 = extents.iter().product();
                if iterations > 1 << 22 {
                    let d = self.err(
                        format!("T.Parallel over {iterations} iterations is too large for one block"),
                        *loc,
                    );
                    *d = d.clone().with_help("tile the work over the grid: each block should handle a tile of at most a few thousand elements per thread");
                    return;
                }
                if let Some(outer) = self.in_parallel {
                    let d = self.err("T.Parallel loops cannot be nested".into(), *loc);
                    *d = d
                        .clone()
                        .with_label(outer, "inside this T.Parallel loop")
                        .with_help("use one T.Parallel with several extents: T.Parallel(M, N)");
                    return;
                }
                // extents must agree with fragments indexed directly by the loop variables
                // (under an `if i < c` the reach of i is c)
                self.check_extents_in(body, vars, extents, *loc);
                self.in_parallel = Some(*loc);
                self.local_set.clear();
                // a variable of extent 1 takes one value: no two iterations differ in it
                // (TileLang's layernorm bwd accumulates `acc[j] += ...` over T.Parallel(1, D))
                for (v, &e) in vars.iter().zip(extents) {
                    self.scope.push((*v, e != 1));
                }
                self.loops.push(None);
                self.stmts(body);
                self.loops.pop();
                for _ in vars {
                    self.scope.pop();
                }
                self.in_parallel = None;
            }
            Stmt::For { var, start, extent, body, loc, kind } => {
                self.expr(start, *loc);
                self.expr(extent, *loc);
                self.scope.push((*var, false));
                self.loops.push(Some(*kind));
                self.stmts(body);
                self.loops.pop();
                self.scope.pop();
            }
            // the tracer checks the loop at the user's line; a module from elsewhere gets this
            Stmt::Inst(crate::inst::Inst::LoopBreak(_)) => {
                if self.loops.last() != Some(&Some(ForKind::Serial)) {
                    self.err(
                        "`break` leaves only a T.serial loop; this one is in no such loop".into(),
                        Loc::UNKNOWN,
                    );
                }
            }
            Stmt::If { cond, then, otherwise, loc } => {
                if m.thread_range(cond).is_none() {
                    self.expr(cond, *loc);
                }
                if cond.dtype() != DType::Bool {
                    self.err("the condition of T.If must be a comparison (bool)".into(), *loc);
                }
                if self.in_parallel.is_none() {
                    let mut reads_fragment = false;
                    cond.walk(&mut |x| {
                        if let Expr::Load { buf, .. } = x {
                            reads_fragment |= m.buffer(*buf).scope == Scope::Fragment;
                        }
                    });
                    let _ = reads_fragment; // already reported by expr()
                }
                self.stmts(then);
                self.stmts(otherwise);
            }
            Stmt::Print { what, block, loc, .. } => self.print(what, block.as_deref(), *loc),
            Stmt::DeviceAssert { cond, loc, .. } => self.device_assert(cond, *loc),
            // T.ptx_cp_async: the tracer checked it at the user's line; a module from elsewhere
            // gets this
            Stmt::Inst(crate::inst::Inst::AsyncCopy(c)) => {
                for e in c.dst_idx.iter().chain(&c.src_idx).chain(std::iter::once(&c.src_bytes)) {
                    self.expr(e, Loc::UNKNOWN);
                }
                let (d, s) = (m.buffer(c.dst), m.buffer(c.src));
                let eb = |b: &crate::Buffer| b.dtype.bytes();
                if d.scope != Scope::Shared || s.scope != Scope::Global {
                    self.err(
                        format!(
                            "cp.async copies a global tensor into shared memory; '{}' <- '{}' is not",
                            d.name, s.name
                        ),
                        Loc::UNKNOWN,
                    );
                } else if c.dst_idx.len() != d.shape.len() || c.src_idx.len() != s.shape.len() {
                    self.err("cp.async: one index per dimension of each buffer".into(), Loc::UNKNOWN);
                } else if ![4, 8, 16].contains(&c.bytes) || c.bytes % eb(d) != 0 || c.bytes % eb(s) != 0 {
                    self.err(format!("cp.async of {} bytes", c.bytes), Loc::UNKNOWN);
                } else if self.in_parallel.is_some() {
                    self.err("cp.async inside T.Parallel".into(), Loc::UNKNOWN);
                }
            }
            // T.make_tensor: the tracer checked it at the user's line
            Stmt::Inst(crate::inst::Inst::BindPointer(b)) => {
                self.expr(&b.addr, Loc::UNKNOWN);
                if !m.is_pointer(b.buf) {
                    self.err(
                        format!(
                            "bind_pointer of '{}', which is a tensor parameter or scratch",
                            m.buffer(b.buf).name
                        ),
                        Loc::UNKNOWN,
                    );
                } else if self.in_parallel.is_some() {
                    self.err("T.make_tensor inside T.Parallel".into(), Loc::UNKNOWN);
                }
            }
            // T.call_extern: the tracer checked it at the user's line; a module from elsewhere
            // gets this
            Stmt::Inst(crate::inst::Inst::CallExtern(c)) => {
                use crate::inst::Instruction;
                for e in c.exprs() {
                    self.expr(e, Loc::UNKNOWN);
                }
                let mut addressed = Vec::new();
                for a in &c.args {
                    if let crate::inst::ExternArg::Address { buf, idx, .. } = a {
                        addressed.push((*buf, idx.len(), "an address"));
                    }
                }
                if let Some((buf, idx)) = &c.result {
                    addressed.push((*buf, idx.len(), "the result"));
                    if m.buffer(*buf).scope != Scope::Local {
                        self.err(
                            format!("T.call_extern '{}': the result goes to a local buffer", c.name),
                            Loc::UNKNOWN,
                        );
                    }
                }
                for (buf, n, what) in addressed {
                    let b = m.buffer(buf);
                    if b.scope == Scope::Fragment {
                        self.err(
                            format!(
                                "T.call_extern '{}': {what} is in fragment '{}', whose elements live on different threads; use a T.alloc_local buffer",
                                c.name, b.name
                            ),
                            Loc::UNKNOWN,
                        );
                    } else if n != b.shape.len() {
                        self.err(
                            format!(
                                "T.call_extern '{}': {what} in '{}' needs one index per dimension",
                                c.name, b.name
                            ),
                            Loc::UNKNOWN,
                        );
                    }
                }
                if self.in_parallel.is_some() {
                    self.err(
                        format!("T.call_extern '{}' inside T.Parallel: call it from code that runs on each thread", c.name),
                        Loc::UNKNOWN,
                    );
                }
            }
            // barriers and the pipeline's commits and waits are placed by insert_syncs and
            // inject_pipeline, which run on tile-level IR
            Stmt::Inst(i) if i.effects().only_orders() => {}
            // T.set_max_nreg, placed by the kernel
            Stmt::Inst(crate::inst::Inst::SetMaxNReg(_)) => {}
            Stmt::Comment(_) => {}
            Stmt::Async { body } => self.stmts(body),
            Stmt::Let { .. } | Stmt::Inst(_) | Stmt::SourceLine(_) => {
                self.err("internal: thread-level statement in tile-level IR".into(), Loc::UNKNOWN);
            }
        }
    }

    fn gemm(&mut self, op: &GemmOp) {
        let m = self.m;
        let (ta, tb, loc) = (op.transpose_a, op.transpose_b, op.loc);
        let (ab, bb, cb) = (m.buffer(op.a), m.buffer(op.b), m.buffer(op.c));
        if self.in_parallel.is_some() || self.per_thread.is_some() {
            self.tile_op("T.gemm", loc);
            return;
        }
        let mut tiles = Vec::new();
        for (which, what, buf) in [(0, "A", ab), (1, "B", bb)] {
            let (view, stage) =
                if which == 0 { (&op.a_view, &op.a_stage) } else { (&op.b_view, &op.b_stage) };
            let viewed = !view.is_empty();
            let whole_2d = buf.shape.len() == 2 + stage.is_some() as usize;
            let fits = match buf.scope {
                Scope::Shared => viewed || whole_2d,
                Scope::Fragment => !viewed && buf.shape.len() == 2,
                _ => false,
            };
            if !fits {
                let d = self.err(
                    if buf.scope == Scope::Fragment && viewed {
                        format!("operand {what} of T.gemm is part of fragment '{}': a fragment operand is used whole", buf.name)
                    } else {
                        format!("operand {what} of T.gemm ('{}') must be a 2-D shared or fragment tile, got a {}-D {} buffer", buf.name, buf.shape.len(), buf.scope.name())
                    },
                    loc,
                );
                *d = d.clone().with_label(buf.loc, format!("'{}' allocated here", buf.name)).with_help(if buf.scope == Scope::Fragment {
                    format!("allocate a fragment of the operand's shape, or copy the part into a shared tile: {what}_s = T.alloc_shared(...)")
                } else {
                    format!("copy the operand into a shared tile first: {what}_s = T.alloc_shared(...); T.copy(..., {what}_s); a shared tile of more dimensions is indexed down to a matrix: {what}_s[k % 2, :, :]")
                });
                return;
            }
            match op.operand(m, which) {
                Ok(o) => tiles.push(o.tile),
                Err(why) => {
                    let d = self.err(format!("operand {what} of T.gemm: {why}"), loc);
                    *d = d.clone().with_label(buf.loc, format!("'{}' allocated here", buf.name)).with_help(format!(
                        "give the leading dimensions one index each and the last two fixed slices: {}[k % 2, :, 0:64]",
                        buf.name
                    ));
                    return;
                }
            }
        }
        if cb.scope != Scope::Fragment || cb.shape.len() != 2 {
            let d =
                self.err(format!("the accumulator C of T.gemm ('{}') must be a 2-D fragment", cb.name), loc);
            *d = d.clone().with_help("allocate it with T.alloc_fragment((block_M, block_N), \"float32\")");
            return;
        }
        let (a, b, c) = (tiles[0], tiles[1], cb.extents());
        let (am, ak) = if ta { (a[1], a[0]) } else { (a[0], a[1]) };
        let (bk, bn) = if tb { (b[1], b[0]) } else { (b[0], b[1]) };
        let (cm, cn) = (c[0], c[1]);
        if ak != bk || am != cm || bn != cn {
            self.err_help(
                format!(
                    "T.gemm operand shapes do not agree: A{} is {:?} (M={am}, K={ak}), B{} is {:?} (K={bk}, N={bn}), C is {:?} (M={cm}, N={cn})",
                    if ta { "^T" } else { "" },
                    a,
                    if tb { "^T" } else { "" },
                    b,
                    c
                ),
                loc,
                "A must be (M, K), B (K, N) and C (M, N); pass transpose_A / transpose_B for operands stored the other way",
            );
        }
        if !GemmOp::computable(ab.dtype, bb.dtype, cb.dtype) {
            let d = self.err(
                format!("T.gemm of {} x {} into {} has no arithmetic", ab.dtype, bb.dtype, cb.dtype),
                loc,
            );
            *d = d.clone().with_help(
                "use float16 or bfloat16 inputs with a float32 accumulator (tensor cores), or numeric inputs with a float accumulator (CUDA cores), or integer inputs with an integer accumulator",
            );
        }
    }

    /// Checks of a resolved copy beyond its shapes: what lowering cannot do.
    fn copy_regions(&mut self, s: &ResolvedRegion, d: &ResolvedRegion, loc: Loc) {
        if s.shape().is_empty() || d.shape().is_empty() {
            self.err_help(
                "T.copy of a single element".into(),
                loc,
                "assign it (B[i, j] = A[i, j]); T.copy moves tiles, given by slices such as A[i, 0:64]",
            );
            return;
        }
        // a part that moves, between on-chip buffers, becomes an element loop (`lse[k, :]`
        // at a T.serial k: `infer_layouts::moving_part_copies`)
        let on_chip = [s, d].iter().all(|r| self.m.buffer(r.buf).scope != Scope::Global);
        for r in [s, d] {
            let b = self.m.buffer(r.buf);
            // a fragment part of fixed bounds is copied through the whole fragment's layout
            // (the lowering guards the other elements); a part that moves is not
            let fixed = r.starts.iter().all(|e| const_of(e).is_some());
            if b.scope == Scope::Fragment
                && !whole(r, b)
                && !((fixed || on_chip) && b.fixed_shape().is_some())
            {
                self.err_help(
                    format!(
                        "T.copy of part of fragment '{}' at a position that is not fixed is not supported",
                        b.name
                    ),
                    loc,
                    format!(
                        "give the part fixed bounds (x[0:32, :], copied through the whole fragment's layout), copy all of '{}', or stage the global side through shared memory (a moving part is copied between on-chip buffers)",
                        b.name
                    ),
                );
            }
        }
    }

    /// `check_extent_vs_buffer` over a parallel loop's statements, the extents narrowed
    /// inside `if` branches whose condition bounds a loop variable by a constant.
    fn check_extents_in(&mut self, body: &[Stmt], vars: &[VarId], extents: &[i64], loc: Loc) {
        for st in body {
            stmt_exprs(st, &mut |e| {
                e.walk(&mut |x| {
                    if let Expr::Load { buf, idx, .. } = x {
                        self.check_extent_vs_buffer(*buf, idx, vars, extents, loc);
                    }
                })
            });
            if let Stmt::Store { buf, idx, .. } = st {
                self.check_extent_vs_buffer(*buf, idx, vars, extents, st.loc());
            }
            match st {
                Stmt::If { cond, then, otherwise, .. } => {
                    let mut narrowed = extents.to_vec();
                    bound_by(cond, vars, &mut narrowed);
                    self.check_extents_in(then, vars, &narrowed, loc);
                    self.check_extents_in(otherwise, vars, extents, loc);
                }
                other => {
                    for b in other.bodies() {
                        self.check_extents_in(b, vars, extents, loc);
                    }
                }
            }
        }
    }

    fn check_extent_vs_buffer(
        &mut self,
        buf: BufferId,
        idx: &[Expr],
        vars: &[VarId],
        extents: &[i64],
        loc: Loc,
    ) {
        let b = self.m.buffer(buf);
        if b.scope == Scope::Global {
            return;
        }
        let shape = b.extents();
        for (d, i) in idx.iter().enumerate() {
            if let Expr::Var { id, .. } = i {
                if let Some(k) = vars.iter().position(|v| v == id) {
                    if let Some(ext) = shape.get(d) {
                        if extents[k] > *ext {
                            let name = b.name.clone();
                            let vname = self.m.var(*id).name.clone();
                            let dd = self.err(
                                format!(
                                    "T.Parallel extent {} of '{vname}' exceeds dimension {d} of '{name}' (extent {ext}) that it indexes",
                                    extents[k]
                                ),
                                loc,
                            );
                            *dd = dd
                                .clone()
                                .with_label(b.loc, format!("'{name}' allocated here with shape {:?}", shape))
                                .with_help(format!(
                                    "loop over the shape of '{name}': T.Parallel extents of {:?}",
                                    shape
                                ));
                        }
                    }
                }
            }
        }
    }
}

/// Narrow `extents` of the loop variables `vars` by the bounds `cond` (a conjunction) puts
/// on them: `i < c`, `i <= c`, `c > i`, `c >= i` with `c` a constant.
fn bound_by(cond: &Expr, vars: &[VarId], extents: &mut [i64]) {
    let Expr::Binary { op, a, b, .. } = cond else { return };
    let var_at = |e: &Expr| match e {
        Expr::Var { id, .. } => vars.iter().position(|v| v == id),
        _ => None,
    };
    let mut bound = |k: Option<usize>, limit: Option<i64>| {
        if let (Some(k), Some(limit)) = (k, limit) {
            extents[k] = extents[k].min(limit.max(0));
        }
    };
    match op {
        BinOp::And => {
            bound_by(a, vars, extents);
            bound_by(b, vars, extents);
        }
        BinOp::Lt => bound(var_at(a), b.as_int()),
        BinOp::Le => bound(var_at(a), b.as_int().map(|c| c + 1)),
        BinOp::Gt => bound(var_at(b), a.as_int()),
        BinOp::Ge => bound(var_at(b), a.as_int().map(|c| c + 1)),
        _ => {}
    }
}

/// Does a region cover its whole buffer?
fn whole(r: &ResolvedRegion, b: &Buffer) -> bool {
    b.fixed_shape().is_some_and(|s| r.extents == s) && r.starts.iter().all(|e| const_of(e) == Some(0))
}

/// The debugging statements: `T.print` and `T.device_assert`.
impl Verifier<'_> {
    fn print(&mut self, what: &Printed, block: Option<&[i64]>, loc: Loc) {
        let m = self.m;
        match what {
            Printed::Value(e) => self.expr(e, loc),
            Printed::Tile(r) => {
                self.region(r);
                if self.in_parallel.is_some() || self.per_thread.is_some() {
                    self.tile_op("T.print of a tile", loc);
                    return;
                }
                match resolve_region(m, r, None) {
                    Ok(rr) => {
                        let b = m.buffer(rr.buf);
                        if matches!(b.scope, Scope::Fragment | Scope::Local) && !whole(&rr, b) {
                            self.err_help(
                                format!(
                                    "T.print of part of {} '{}' is not supported",
                                    b.scope.name(),
                                    b.name
                                ),
                                loc,
                                format!("print all of '{}': T.print({}, msg)", b.name, b.name),
                            );
                        }
                    }
                    Err(d) => self.diags.push(d),
                }
            }
        }
        let Some(block) = block else { return };
        for (axis, &index) in block.iter().enumerate() {
            let extent = m.kernel.grid.get(axis).map(const_of).unwrap_or(Some(1));
            if extent.is_some_and(|n| index >= n) {
                let shown = extent.map(|n| n.to_string()).unwrap_or_default();
                self.err_help(
                    format!("block={block:?} is outside the grid: dimension {axis} has {shown} block(s)"),
                    loc,
                    "name a block of the kernel's grid, e.g. block=(0, 0), or leave block out to print from every block",
                );
                return;
            }
        }
    }

    fn device_assert(&mut self, cond: &Expr, loc: Loc) {
        self.expr(cond, loc);
        if cond.dtype() != DType::Bool {
            self.err_help(
                format!("the condition of T.device_assert must be a bool, got {}", cond.dtype()),
                loc,
                "use a comparison, e.g. T.device_assert(i < n, \"i out of range\")",
            );
        }
    }
}

/// Whether the atomics (add, max, min) exist for elements of `dtype`, in hardware or as a
/// compare-and-swap loop (tile-codegen's `cuda/atomics.rs` says which).
pub fn atomic_dtype(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::F32
            | DType::F16
            | DType::BF16
            | DType::F64
            | DType::I32
            | DType::U32
            | DType::I64
            | DType::U64
    )
}
