//! TMA producers: which global → shared copies one thread can carry out with bulk tensor
//! copies (`fit`, asked by `plan_pipeline`), and the copies that fill one stage of such a
//! tile (`loads`, placed by `inject_pipeline`'s warp-specialized form).
//!
//! A tile in wgmma's panel layout (`[C / P][R][P]`, each panel row one swizzle span,
//! `SharedLayout::wgmma`) is written one panel per copy: a box of the global region's extents
//! with the last one cut to the panel's `P` columns, swizzled by the tensor map with the
//! panel's span — the same function of the physical address that wgmma reads through its
//! descriptor, so the tile's layout holds without a thread touching it. Elements past the
//! tensor's edge arrive as zeros (the map's out-of-bounds fill), as `T.copy` promises.

use tile_ir::simplify::simplify;
use tile_ir::verify::{resolve_copy, resolve_region};
use tile_ir::*;

/// How a producer copy runs on TMA.
#[derive(Clone, Debug, PartialEq)]
pub struct TmaCopy {
    /// The box of one copy (the global region's extents, the last cut to one panel) and the
    /// swizzle in bytes.
    pub box_dims: Vec<i64>,
    pub swizzle: u32,
    /// Copies per tile (panels along the last dimension), each `inner` elements wide.
    pub boxes: i64,
    pub inner: i64,
    /// Bytes of the whole tile (what the stage's barrier waits for).
    pub bytes: i64,
}

/// Whether `e` loads from memory (a position or bound a bulk copy's issuer cannot know).
pub(crate) fn reads_memory(e: &Expr) -> bool {
    let mut found = false;
    e.walk(&mut |x| found |= matches!(x, Expr::Load { .. }));
    found
}

/// Whether TMA can carry out `op` (a copy from a global tensor into a whole shared tile), or
/// why not, in words for the lowering report.
pub fn fit(m: &Module, op: &CopyOp, target: &Target) -> Result<TmaCopy, String> {
    fit_issued_by(m, op, target, false)
}

/// `fit` for a kernel's own `T.tma_copy`, which its issuing thread runs where the kernel
/// wrote it: its position may read memory that thread can read (a tensor, shared memory,
/// its own registers: TileLang's block-sparse offsets `k = block_offset[bi]`), but not a
/// fragment (held by other threads).
pub fn fit_in_place(m: &Module, op: &CopyOp, target: &Target) -> Result<TmaCopy, String> {
    fit_issued_by(m, op, target, true)
}

fn fit_issued_by(m: &Module, op: &CopyOp, target: &Target, in_place: bool) -> Result<TmaCopy, String> {
    let reads_memory = |e: &Expr| {
        let mut found = false;
        e.walk(&mut |x| {
            if let Expr::Load { buf, .. } = x {
                found |= !in_place || m.buffer(*buf).scope == Scope::Fragment;
            }
        });
        found
    };
    if !target.caps.tma || !target.caps.mbarrier_tx {
        return Err(format!("{} has no bulk tensor copies", target.arch));
    }
    let (s, d) = resolve_copy(m, &op.src, &op.dst, op.loc).map_err(|e| e.message)?;
    let (sb, db) = (m.buffer(s.buf), m.buffer(d.buf));
    if sb.scope != Scope::Global || db.scope != Scope::Shared {
        return Err("it is not a copy from a global tensor into a shared tile".into());
    }
    if m.is_scratch(s.buf) {
        return Err(format!(
            "'{}' is T.alloc_global scratch (tensor maps describe parameters only)",
            sb.name
        ));
    }
    if m.is_pointer(s.buf) {
        return Err(format!(
            "'{}' is a T.make_tensor over an address the kernel reads (tensor maps describe parameters only)",
            sb.name
        ));
    }
    if sb.dtype != db.dtype {
        return Err(format!("it converts {} to {}", sb.dtype, db.dtype));
    }
    let zero_pad = |p: &Expr| match simplify(p.clone()) {
        Expr::Const { value: ConstValue::Int(0), .. } => true,
        Expr::Const { value: ConstValue::Float(f), .. } => f == 0.0 && f.is_sign_positive(),
        _ => false,
    };
    if op.pad.as_ref().is_some_and(|p| !zero_pad(p)) {
        return Err("its pad value is not 0 (TMA fills with zeros)".into());
    }
    // a whole tile, or one stage of a multi-buffered one (`A_s[k % 2, :, :]`: leading
    // indices, then whole dimensions)
    let lead = leading_indices(&d);
    let tile = db.extents()[lead..].to_vec();
    let whole = d.starts[lead..].iter().all(|e| simplify(e.clone()).as_int() == Some(0))
        && d.extents[lead..] == tile[..]
        && d.kept[lead..].iter().all(|k| *k);
    if !whole {
        return Err(format!(
            "it writes part of '{}' (a bulk copy fills whole tiles or stages of one)",
            db.name
        ));
    }
    let n = sb.rank();
    if !(1..=5).contains(&n) || tile.len() < 2 {
        return Err(format!("'{}' has {n} dimensions (TMA: 1 to 5, into a 2-D tile or more)", sb.name));
    }
    let c = *tile.last().expect("rank checked");
    if !s.kept[n - 1] || s.extents[n - 1] != c {
        return Err(format!("the rows of '{}' are not along the rows of '{}'", db.name, sb.name));
    }
    if s.starts.iter().any(reads_memory) {
        return Err("its position in the tensor is read from memory".into());
    }
    let eb = sb.dtype.bytes() as i64;
    let strides = m.stride_multiples(s.buf);
    if strides[..n - 1].iter().any(|st| st * eb % 16 != 0) {
        let width = 16 / eb.max(1);
        return Err(m.size_alignment_hint(s.buf, width).unwrap_or_else(|| {
            format!("the rows of '{}' are not a multiple of 16 bytes long (a TMA stride must be)", sb.name)
        }));
    }
    for (k, dim) in sb.shape.iter().enumerate() {
        let wide = match dim {
            Dim::Fixed(e) => *e > i32::MAX as i64,
            Dim::Size(v) => m.var(*v).dtype != DType::I32,
        };
        if wide {
            return Err(format!("dimension {k} of '{}' can pass 2^31 (TMA coordinates are 32-bit)", sb.name));
        }
    }
    let (inner, swizzle) = match (db.panel, db.swizzle) {
        (Some(p), Some(_)) if matches!(p * eb, 32 | 64 | 128) => (p, (p * eb) as u32),
        _ => {
            return Err(format!(
                "'{}' is not in a swizzled panel layout (TMA fills the wgmma operand tiles)",
                db.name
            ))
        }
    };
    let mut box_dims = s.extents.clone();
    box_dims[n - 1] = inner;
    if let Some(b) = box_dims.iter().find(|b| !(1..=256).contains(*b)) {
        return Err(format!("a box of {b} elements along one dimension (TMA boxes hold 1 to 256)"));
    }
    let bytes = tile.iter().product::<i64>() * eb;
    Ok(TmaCopy { box_dims, swizzle, boxes: c / inner, inner, bytes })
}

/// How the blocks of a cluster share one producer copy they all make (`multicast`): each
/// issues its part with `.multicast::cluster` to all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// Block `r` of `n` issues panels `r * boxes / n ..` (`boxes / n` of them).
    Panels { n: u32 },
    /// Block `r` of `n` issues rows `r * rows / n ..` of every panel (a box of `rows / n`
    /// rows, a multiple of 8: the swizzle's period, so each part lands in the layout).
    Rows { n: u32, rows: i64 },
}

impl Share {
    pub fn blocks(&self) -> u32 {
        match self {
            Share::Panels { n } | Share::Rows { n, .. } => *n,
        }
    }
}

/// How `n` blocks can split producer `op` (planned as `plan`) into parts of a multicast,
/// or why not.
pub fn share(m: &Module, op: &CopyOp, plan: &TmaCopy, n: u32) -> Result<Share, String> {
    let n64 = n as i64;
    if plan.boxes % n64 == 0 {
        return Ok(Share::Panels { n });
    }
    let (_, d) = resolve_copy(m, &op.src, &op.dst, op.loc).map_err(|e| e.message)?;
    let db = m.buffer(d.buf);
    let tile = db.extents()[leading_indices(&d)..].to_vec();
    let rows = tile[tile.len() - 2];
    if rows % (8 * n64) == 0 {
        return Ok(Share::Rows { n, rows });
    }
    Err(format!(
        "'{}' ({} panels of {rows} rows) splits neither into {n} sets of panels nor into {n} parts of 8-row multiples",
        db.name, plan.boxes
    ))
}

/// The leading dimensions of a shared destination that are indexed (a stage of a
/// multi-buffered tile) rather than sliced.
fn leading_indices(d: &tile_ir::verify::ResolvedRegion) -> usize {
    d.kept.iter().take_while(|k| !**k).count()
}

/// The bulk copies of producer `op` into stage `stage` of its (multi-buffered) tile,
/// completing on `bar[bar_idx]`; the tensor map is added to the kernel's if new.
///
/// With `share` (the copy's split and this block's rank in the cluster), only this block's
/// part is issued, multicast to every block of the cluster.
pub fn loads(
    m: &mut Module,
    op: &CopyOp,
    plan: &TmaCopy,
    stage: Option<&Expr>,
    bar: BufferId,
    bar_idx: &Expr,
    share: Option<(Share, &Expr)>,
) -> Result<Vec<Stmt>, Diagnostic> {
    let db = m.buffer(op.dst.buf);
    // a multi-buffered tile's stage dimension comes first (`stage`: the pipeline's; or the
    // destination's own leading indices)
    let mut prefix: Vec<Expr> = stage.into_iter().cloned().collect();
    if stage.is_none() {
        let (_, d) = resolve_copy(m, &op.src, &op.dst, op.loc)?;
        prefix.extend(d.starts[..leading_indices(&d)].iter().cloned());
    }
    let tile = db.extents()[prefix.len()..].to_vec();
    let s = resolve_region(m, &op.src, Some(&tile))?;
    let n = s.starts.len();
    // the tensor dimension along the tile's rows: the second-to-last kept one
    let kept: Vec<usize> = (0..n).filter(|&k| s.kept[k]).collect();
    let row_dim = kept.len().checked_sub(2).map(|k| kept[k]);
    let mut box_dims = plan.box_dims.clone();
    if let Some((Share::Rows { n: parts, rows }, _)) = share {
        let r = row_dim.ok_or_else(|| Diagnostic::bug("a multicast split by rows of a copy without rows"))?;
        box_dims[r] = rows / parts as i64;
    }
    let desc = TensorMapDesc { tensor: s.buf, box_dims: box_dims.clone(), swizzle: plan.swizzle };
    let map = match m.kernel.tensor_maps.iter().position(|t| *t == desc) {
        Some(k) => k,
        None => {
            m.kernel.tensor_maps.push(desc);
            m.kernel.tensor_maps.len() - 1
        }
    };
    let eb = m.buffer(s.buf).dtype.bytes() as i64;
    let box_bytes = box_dims.iter().product::<i64>() * eb;
    let bin = Expr::binary;
    let rank = |r: &Expr| Expr::cast(r.clone(), DType::I32);
    // this block's panels (a first one and a count) and the first of its rows
    let (first, count, row) = match share {
        None => (Expr::int(0), plan.boxes, None),
        Some((Share::Panels { n: parts }, r)) => {
            let count = plan.boxes / parts as i64;
            (bin(BinOp::Mul, rank(r), Expr::int(count)), count, None)
        }
        Some((Share::Rows { n: parts, rows }, r)) => {
            (Expr::int(0), plan.boxes, Some(bin(BinOp::Mul, rank(r), Expr::int(rows / parts as i64))))
        }
    };
    let multicast = share.map(|(sh, _)| (1u32 << sh.blocks()) - 1);
    let mut out = Vec::new();
    for j in 0..count {
        let p = simplify(bin(BinOp::Add, first.clone(), Expr::int(j)));
        let col = simplify(bin(BinOp::Mul, p, Expr::int(plan.inner)));
        let mut coords: Vec<Expr> =
            s.starts.iter().map(|e| simplify(Expr::cast(e.clone(), DType::I32))).collect();
        coords[n - 1] = simplify(bin(BinOp::Add, coords[n - 1].clone(), col.clone()));
        let mut dst_idx: Vec<Expr> = prefix.clone();
        dst_idx.extend(std::iter::repeat_n(Expr::int(0), tile.len() - 1));
        dst_idx.push(col);
        if let (Some(row), Some(r)) = (&row, row_dim) {
            coords[r] = simplify(bin(BinOp::Add, coords[r].clone(), row.clone()));
            let at = dst_idx.len() - 2;
            dst_idx[at] = row.clone();
        }
        out.push(Stmt::inst(inst::TmaLoad {
            map: map as u32,
            src: s.buf,
            coords,
            dst: op.dst.buf,
            dst_idx,
            bar,
            bar_idx: bar_idx.clone(),
            bytes: box_bytes,
            multicast,
        }));
    }
    Ok(out)
}

/// Whether a staged accumulator store `op` (fragment → global) can leave its staging tile
/// by bulk tensor stores, or why not: the epilogue of a warp-specialized kernel.
pub fn store_fit(m: &Module, op: &CopyOp) -> Result<(), String> {
    let (s, d) = resolve_copy(m, &op.src, &op.dst, op.loc).map_err(|e| e.message)?;
    let (sb, db) = (m.buffer(s.buf), m.buffer(d.buf));
    if sb.scope != Scope::Fragment || db.scope != Scope::Global || sb.rank() != 2 {
        return Err("it is not a 2-D fragment stored to a global tensor".into());
    }
    if m.is_scratch(d.buf) || m.is_pointer(d.buf) {
        return Err(format!(
            "'{}' is T.alloc_global scratch or a T.make_tensor (tensor maps describe parameters only)",
            db.name
        ));
    }
    if op.pad.is_some() {
        return Err("it has a pad value".into());
    }
    let tile = sb.extents();
    let n = db.rank();
    if !(2..=5).contains(&n) || !d.kept[n - 1] || d.extents[n - 1] != tile[1] {
        return Err(format!("the rows of '{}' are not along the rows of '{}'", sb.name, db.name));
    }
    if d.starts.iter().any(reads_memory) {
        return Err("its position in the tensor is read from memory".into());
    }
    let eb = db.dtype.bytes() as i64;
    if m.stride_multiples(d.buf)[..n - 1].iter().any(|st| st * eb % 16 != 0) {
        return Err(format!("the rows of '{}' are not a multiple of 16 bytes long", db.name));
    }
    let layout = SharedLayout::wgmma(&tile, db.dtype).ok_or_else(|| {
        format!("a {}x{} tile of {} has no swizzled panel layout", tile[0], tile[1], db.dtype)
    })?;
    let panel = layout.panel.expect("a wgmma layout has panels");
    if d.extents.iter().enumerate().any(|(k, &e)| !(1..=256).contains(&if k == n - 1 { panel } else { e })) {
        return Err("a box dimension above 256 elements".into());
    }
    Ok(())
}

impl super::Lowerer {
    /// `op` (a `CopyInst::StagedTma`): the threads write the fragment into a staging tile in
    /// the panel layout, fence it for the async proxy, and one thread stores it with one
    /// bulk tensor store per panel, after its previous stores finished reading the tile.
    pub(super) fn staged_tma_store(&mut self, op: &CopyOp) -> Vec<Stmt> {
        let (sb, db) = (self.m.buffer(op.src.buf).clone(), self.m.buffer(op.dst.buf).clone());
        let (_, d) = match resolve_copy(&self.m, &op.src, &op.dst, op.loc) {
            Ok(x) => x,
            Err(e) => {
                self.diags.push(e);
                return vec![];
            }
        };
        let tile = sb.extents();
        let Some(layout) = SharedLayout::wgmma(&tile, db.dtype) else {
            self.diags.push(Diagnostic::bug("a TMA-store epilogue tile without a panel layout"));
            return vec![];
        };
        let panel = layout.panel.expect("a wgmma layout has panels");
        let stage = self.m.add_buffer(Buffer {
            name: format!("{}_stage", sb.name),
            scope: Scope::Shared,
            dtype: db.dtype,
            shape: sb.shape.clone(),
            loc: op.loc,
            layout: None,
            shared_offset: None,
            alias_of: None,
            panel: Some(panel),
            swizzle: layout.swizzle,
        });
        let eb = db.dtype.bytes() as i64;
        let n = db.rank();
        let mut box_dims = d.extents.clone();
        box_dims[n - 1] = panel;
        let desc = TensorMapDesc { tensor: d.buf, box_dims: box_dims.clone(), swizzle: (panel * eb) as u32 };
        let map = match self.m.kernel.tensor_maps.iter().position(|t| *t == desc) {
            Some(k) => k,
            None => {
                self.m.kernel.tensor_maps.push(desc);
                self.m.kernel.tensor_maps.len() - 1
            }
        };
        let box_bytes = box_dims.iter().product::<i64>() * eb;
        let one = Expr::binary(BinOp::Eq, self.tid(), Expr::int(0));
        let whole = Region { buf: stage, dims: vec![], loc: op.loc };
        let threads = CopyOp {
            src: op.src.clone(),
            dst: whole,
            pad: None,
            loc: op.loc,
            inst: Some(CopyInst::Threads),
            atomic: None,
        };
        let mut code = vec![
            // the tile is free once the previous stores from it have been read
            Stmt::If {
                cond: one.clone(),
                then: vec![Stmt::inst(inst::BulkWait { read: true, pending: 0 })],
                otherwise: vec![],
                loc: op.loc,
            },
            Stmt::inst(inst::Sync),
        ];
        code.extend(self.copy(&threads));
        code.push(Stmt::inst(inst::FenceProxyAsync));
        code.push(Stmt::inst(inst::Sync));
        let mut stores = Vec::new();
        for p in 0..tile[1] / panel {
            let mut coords: Vec<Expr> =
                d.starts.iter().map(|e| simplify(Expr::cast(e.clone(), DType::I32))).collect();
            coords[n - 1] = simplify(Expr::binary(BinOp::Add, coords[n - 1].clone(), Expr::int(p * panel)));
            stores.push(Stmt::inst(inst::TmaStore {
                map: map as u32,
                src: stage,
                src_idx: vec![Expr::int(0), Expr::int(p * panel)],
                dst: d.buf,
                coords,
                bytes: box_bytes,
            }));
        }
        stores.push(Stmt::inst(inst::BulkCommit));
        code.push(Stmt::If { cond: one, then: stores, otherwise: vec![], loc: op.loc });
        code
    }
}
