//! Fragment layouts: which thread and which register slot hold each element of a tile.
//!
//! Each dimension's index is written in a mixed radix of *digits*, fastest first:
//! `index = Σ value_k · step_k` with `value_k ∈ [0, size_k)` and `step_{k+1} = step_k ·
//! size_k`. A digit comes either from the thread (`(threadIdx.x / stride) % size`) or from
//! the register slot (`value · slot_stride` is added to the slot index). One description
//! covers the blocked layouts of element-wise code (a vector of contiguous elements per
//! thread, neighbouring threads on neighbouring vectors) and the tensor-core layouts
//! (`mma.sync` accumulators: lanes in groups of four along columns, eight along rows,
//! register pairs and halves, warps tiling the block).
//!
//! A reduced layout keeps the thread digits of the dimension it removed as *replicated*:
//! every thread along them holds the same value.
//!
//! Shared-memory layouts (swizzles) are not described here yet; they come with the
//! tensor-core GEMM and should join this description rather than grow a second one.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// `(threadIdx.x / stride) % size`.
    Thread(i64),
    /// Adds `value * stride` to the register slot.
    Slot(i64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Digit {
    pub size: i64,
    /// What one unit of this digit adds to the dimension's index.
    pub step: i64,
    pub source: Source,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FragmentLayout {
    pub extents: Vec<i64>,
    /// Per dimension, its digits from the fastest (step 1) to the slowest.
    pub dims: Vec<Vec<Digit>>,
    /// (size, thread stride) of thread digits whose holders all hold the same value.
    pub replicated: Vec<(i64, i64)>,
    /// Threads of the block that take part (`threadIdx.x < active_threads`).
    pub active_threads: i64,
}

fn pow2_floor(x: i64) -> i64 {
    if x <= 1 {
        1
    } else {
        1 << (63 - x.leading_zeros())
    }
}

fn pow2_ceil(x: i64) -> i64 {
    let f = pow2_floor(x);
    if f == x {
        f
    } else {
        f * 2
    }
}

/// Build one dimension's digits from (size, source) pairs, fastest first, skipping size 1.
fn digits(parts: &[(i64, Source)]) -> Vec<Digit> {
    let mut out = Vec::new();
    let mut step = 1;
    for &(size, source) in parts {
        if size > 1 {
            out.push(Digit { size, step, source });
        }
        step *= size;
    }
    out
}

impl FragmentLayout {
    /// The blocked layout: `16 / elem_bytes` contiguous elements per thread along the last
    /// dimension, neighbouring threads on neighbouring vectors (coalesced global accesses),
    /// leftover threads spread over the leading dimensions.
    pub fn blocked(shape: &[i64], threads: u32, elem_bytes: u32) -> FragmentLayout {
        let n = shape.len();
        let mut remaining = pow2_floor(threads as i64);
        let mut parts: Vec<Vec<(i64, Source)>> = vec![vec![]; n];
        let mut stride = 1;
        for d in (0..n).rev() {
            let extent = shape[d];
            let mut inner = 1;
            if d == n - 1 {
                inner = (16 / elem_bytes.max(1)) as i64;
                while inner > 1 && extent % inner != 0 {
                    inner /= 2;
                }
            }
            let chunks = (extent + inner - 1) / inner;
            let t = remaining.min(pow2_ceil(chunks));
            remaining /= t;
            let outer = (chunks + t - 1) / t;
            parts[d] = vec![(inner, Source::Slot(0)), (t, Source::Thread(stride)), (outer, Source::Slot(0))];
            stride *= t;
        }
        let mut l = FragmentLayout {
            extents: shape.to_vec(),
            dims: parts.iter().map(|p| digits(p)).collect(),
            replicated: vec![],
            active_threads: stride,
        };
        l.compact_slots_in_order(true);
        l
    }

    /// The accumulator layout of `mma.sync.m16n8k*` tiles over an (m, n) tile, with the
    /// block's warps in a `warps_m × warps_n` grid (row-major): per warp an (m / warps_m) ×
    /// (n / warps_n) tile of 16×8 pieces; in each piece lane `l` holds rows `l / 4` and
    /// `l / 4 + 8`, columns `2 (l % 4)` and `2 (l % 4) + 1`. Registers are ordered
    /// `[mi][ni][row half][column pair]`.
    pub fn mma_accumulator(m: i64, n: i64, warps_m: i64, warps_n: i64) -> FragmentLayout {
        let (wm, wn) = (m / warps_m, n / warps_n);
        let (mi, ni) = (wm / 16, wn / 8);
        let rows = digits(&[
            (8, Source::Thread(4)),
            (2, Source::Slot(2)),
            (mi, Source::Slot(4 * ni)),
            (warps_m, Source::Thread(32 * warps_n)),
        ]);
        let cols = digits(&[
            (2, Source::Slot(1)),
            (4, Source::Thread(1)),
            (ni, Source::Slot(4)),
            (warps_n, Source::Thread(32)),
        ]);
        FragmentLayout {
            extents: vec![m, n],
            dims: vec![rows, cols],
            replicated: vec![],
            active_threads: 32 * warps_m * warps_n,
        }
    }

    /// The accumulator layout of `wgmma.mma_async.m64nNk*` over an (m, n) tile with the
    /// block's warpgroups in a `groups_m × groups_n` grid (row-major), each warpgroup owning
    /// an (m / groups_m) × (n / groups_n) tile of 64-row atoms: thread t of a warpgroup (warp
    /// w = t / 32, lane l) holds, in register i, row `16 w + l / 4 + 8 ((i / 2) % 2)` and
    /// column `8 (i / 4) + 2 (l % 4) + i % 2` of its atom (PTX ISA, "WGMMA .m64nNk16 register
    /// fragment layout for accumulator matrix D"). Registers are ordered `[mi][column pairs
    /// across N]`, N / 2 per atom. The same mixed-radix form as `mma_accumulator`: the
    /// decision recorded in docs/architecture.md, "Layouts".
    pub fn wgmma_accumulator(m: i64, n: i64, groups_m: i64, groups_n: i64) -> FragmentLayout {
        let (gm, gn) = (m / groups_m, n / groups_n);
        let mi = gm / 64;
        let per_atom = gn / 2; // registers of one 64 x gn atom
        let rows = digits(&[
            (8, Source::Thread(4)),
            (2, Source::Slot(2)),
            (4, Source::Thread(32)),
            (mi, Source::Slot(per_atom)),
            (groups_m, Source::Thread(128 * groups_n)),
        ]);
        let cols = digits(&[
            (2, Source::Slot(1)),
            (4, Source::Thread(1)),
            (gn / 8, Source::Slot(4)),
            (groups_n, Source::Thread(128)),
        ]);
        FragmentLayout {
            extents: vec![m, n],
            dims: vec![rows, cols],
            replicated: vec![],
            active_threads: 128 * groups_m * groups_n,
        }
    }

    /// The register A operand of `wgmma.mma_async.m64nNk16` for an (m, k) tile over a
    /// `groups_m × groups_n` grid of warpgroups (replicated over the warpgroups of a row):
    /// per 64-row atom and k-step of 16, thread t holds element i at row `16 w + l / 4 + 8 ((i
    /// / 2) % 2)`, column `8 (i / 4) + 2 (l % 4) + i % 2` (PTX ISA, "Register Fragments").
    /// That is the accumulator layout of an (m, k) tile, so a 16-bit copy of an accumulator
    /// is an A operand as it stands (FlashAttention-3's P).
    pub fn wgmma_operand_a(m: i64, k: i64, groups_m: i64, groups_n: i64) -> FragmentLayout {
        let mut l = FragmentLayout::wgmma_accumulator(m, k, groups_m, 1);
        if groups_n > 1 {
            // the warpgroup index is row-major: group = gm * groups_n + gn
            for digit in &mut l.dims[0] {
                if digit.source == Source::Thread(128) {
                    digit.source = Source::Thread(128 * groups_n);
                }
            }
            l.replicated = vec![(groups_n, 128)];
            l.active_threads = 128 * groups_m * groups_n;
        }
        l
    }

    /// The A-operand layout of `mma.sync` for an (m, k) tile in registers, per warp row of a
    /// `warps_m × warps_n` grid (replicated over the warps of a row). For 16-bit types
    /// (m16n8k16) lane `l` of a 16×16 piece holds rows `l / 4` and `l / 4 + 8`, columns
    /// `2 (l % 4) + {0, 1}` and the same plus 8; for 8-bit types (m16n8k32) columns
    /// `4 (l % 4) + {0..3}` and the same plus 16. Registers are ordered `[mi][kk][k half][row
    /// half][pair or quad]`, so one k-step of one 16-row piece is 4 consecutive 32-bit registers.
    pub fn mma_operand_a(m: i64, k: i64, warps_m: i64, warps_n: i64, elem_bytes: u32) -> FragmentLayout {
        let per_reg = 4 / elem_bytes as i64; // elements in one 32-bit register: 2 or 4
        let kstep = 8 * per_reg; // 16 or 32
        let (mi, ki) = (m / warps_m / 16, k / kstep);
        let rows = digits(&[
            (8, Source::Thread(4)),
            (2, Source::Slot(per_reg)),
            (mi, Source::Slot(ki * 4 * per_reg)),
            (warps_m, Source::Thread(32 * warps_n)),
        ]);
        let cols = digits(&[
            (per_reg, Source::Slot(1)),
            (4, Source::Thread(1)),
            (2, Source::Slot(2 * per_reg)),
            (ki, Source::Slot(4 * per_reg)),
        ]);
        FragmentLayout {
            extents: vec![m, k],
            dims: vec![rows, cols],
            replicated: if warps_n > 1 { vec![(warps_n, 32)] } else { vec![] },
            active_threads: 32 * warps_m * warps_n,
        }
    }

    /// The B-operand layout of `mma.sync` for a (k, n) tile in registers, per warp column of
    /// a `warps_m × warps_n` grid (replicated over the warps of a column). Lane `l` of a 16×8
    /// (fp16/bf16) or 32×8 (int8) piece holds column `l / 4`, rows `r (l % 4) + {0..r-1}` and
    /// the same plus 8 (16 for int8), `r` elements per 32-bit register. Registers are ordered
    /// `[ni][kk][k half][pair or quad]`: one k-step of one 8-column piece is 2 consecutive
    /// 32-bit registers.
    pub fn mma_operand_b(k: i64, n: i64, warps_m: i64, warps_n: i64, elem_bytes: u32) -> FragmentLayout {
        let per_reg = 4 / elem_bytes as i64;
        let kstep = 8 * per_reg;
        let (ki, ni) = (k / kstep, n / warps_n / 8);
        let rows = digits(&[
            (per_reg, Source::Slot(1)),
            (4, Source::Thread(1)),
            (2, Source::Slot(per_reg)),
            (ki, Source::Slot(2 * per_reg)),
        ]);
        let cols = digits(&[
            (8, Source::Thread(4)),
            (ni, Source::Slot(ki * 2 * per_reg)),
            (warps_n, Source::Thread(32)),
        ]);
        FragmentLayout {
            extents: vec![k, n],
            dims: vec![rows, cols],
            replicated: if warps_m > 1 { vec![(warps_m, 32 * warps_n)] } else { vec![] },
            active_threads: 32 * warps_m * warps_n,
        }
    }

    /// Renumber slot digits densely: outer dimensions' slowest digits most significant
    /// (`by_dim`), or keeping the current order of strides.
    fn compact_slots_in_order(&mut self, by_dim: bool) {
        let mut slots: Vec<(usize, usize, i64)> = Vec::new();
        for (d, ds) in self.dims.iter().enumerate() {
            for (k, g) in ds.iter().enumerate() {
                if let Source::Slot(s) = g.source {
                    slots.push((d, k, s));
                }
            }
        }
        if by_dim {
            // row-major over the elements a thread holds: the last dimension's fastest digit
            // least significant, the first dimension's slowest most significant
            slots.sort_by_key(|&(d, k, _)| (usize::MAX - d, k));
        } else {
            slots.sort_by_key(|&(_, _, s)| s);
        }
        let mut stride = 1;
        for (d, k, _) in slots {
            let g = &mut self.dims[d][k];
            g.source = Source::Slot(stride);
            stride *= g.size;
        }
    }

    /// Every one of `threads` threads holds every element, row-major in its registers: the
    /// layout of a fragment that scalar code (outside `T.Parallel`, which every thread
    /// runs) reads or writes, as TileLang lays out such "floating" fragments.
    pub fn whole(shape: &[i64], threads: u32) -> FragmentLayout {
        let mut l = FragmentLayout {
            extents: shape.to_vec(),
            dims: shape.iter().map(|&e| digits(&[(e, Source::Slot(0))])).collect(),
            replicated: if threads > 1 { vec![(threads as i64, 1)] } else { vec![] },
            active_threads: threads as i64,
        };
        l.compact_slots_in_order(true);
        l
    }

    /// Whether each thread that takes part holds every element ([`FragmentLayout::whole`]):
    /// no digit comes from the thread index and the replicas cover the active threads, so
    /// any of them can read any index.
    pub fn is_whole(&self) -> bool {
        self.dims.iter().flatten().all(|g| matches!(g.source, Source::Slot(_)))
            && self.replicated.iter().map(|(size, _)| size).product::<i64>() == self.active_threads
            && self.active_threads > 1
    }

    /// The register slot of element `idx` (expressions of any value) in a layout whose
    /// digits are all slots ([`FragmentLayout::is_whole`]).
    pub fn slot_of(&self, idx: &[crate::ir::Expr]) -> crate::ir::Expr {
        use crate::ir::{BinOp, Expr};
        let mut slot = Expr::int(0);
        for (dim, i) in idx.iter().enumerate() {
            slot = Expr::binary(BinOp::Add, slot, self.dim_slot(dim, i));
        }
        crate::simplify::simplify(slot)
    }

    /// What index `i` (an expression of any value) of dimension `dim` adds to the register
    /// slot, when that dimension's digits are all slots ([`FragmentLayout::in_registers`]):
    /// a constant index gives a constant, a loop variable a runtime slot.
    pub fn dim_slot(&self, dim: usize, i: &crate::ir::Expr) -> crate::ir::Expr {
        use crate::ir::{BinOp, Expr};
        let i = if i.dtype() == crate::types::DType::I32 {
            i.clone()
        } else {
            Expr::cast(i.clone(), crate::types::DType::I32)
        };
        let mut slot = Expr::int(0);
        for g in &self.dims[dim] {
            if let Source::Slot(stride) = g.source {
                let digit = Expr::binary(
                    BinOp::FloorMod,
                    Expr::binary(BinOp::FloorDiv, i.clone(), Expr::int(g.step)),
                    Expr::int(g.size),
                );
                slot = Expr::binary(BinOp::Add, slot, Expr::binary(BinOp::Mul, digit, Expr::int(stride)));
            }
        }
        crate::simplify::simplify(slot)
    }

    /// Whether every thread that holds an element holds all of dimension `dim` with it (no
    /// digit of that dimension comes from the thread index): then any index into that
    /// dimension is a register slot of the same thread.
    pub fn in_registers(&self, dim: usize) -> bool {
        self.dims[dim].iter().all(|g| matches!(g.source, Source::Slot(_)))
    }

    /// A layout of a tile of `extents` whose dimensions `placed` (in order) are this layout's
    /// dimensions and whose other dimensions are held whole in each thread's registers: the
    /// layout of `lse[k, j]` (`k` the same on every thread) in a loop over `j` laid out as
    /// this. With no dimension placed, this layout's threads each hold the whole tile.
    pub fn with_register_dims(&self, extents: &[i64], placed: &[usize]) -> FragmentLayout {
        let mut l = FragmentLayout {
            extents: extents.to_vec(),
            dims: Vec::new(),
            replicated: self.replicated.clone(),
            active_threads: self.active_threads,
        };
        for (d, &extent) in extents.iter().enumerate() {
            match placed.iter().position(|&p| p == d) {
                Some(k) => l.dims.push(self.dims[k].clone()),
                None => l.dims.push(digits(&[(extent, Source::Slot(0))])),
            }
        }
        if placed.is_empty() {
            // a tile of no placed dimension: every digit of this layout's threads replicates it
            for ds in &self.dims {
                for g in ds {
                    if let Source::Thread(stride) = g.source {
                        l.replicated.push((g.size, stride));
                    }
                }
            }
        }
        l.compact_slots_in_order(true);
        l
    }

    /// Number the register digits densely, row-major over the elements a thread holds.
    pub fn renumber_slots(&mut self) {
        self.compact_slots_in_order(true);
    }

    /// The layout of `reduce(src, dim)`'s result: `dim` removed, its threads replicated.
    pub fn reduced(&self, dim: usize) -> FragmentLayout {
        let mut out = self.clone();
        let removed = out.dims.remove(dim);
        out.extents.remove(dim);
        for g in removed {
            if let Source::Thread(stride) = g.source {
                out.replicated.push((g.size, stride));
            }
        }
        if out.dims.is_empty() {
            out.dims.push(vec![]);
            out.extents.push(1);
        }
        out.compact_slots_in_order(false);
        out
    }

    /// The layout of a tile indexed by a subset `keep` of this layout's dimensions (in order).
    pub fn projected(&self, keep: &[usize]) -> FragmentLayout {
        let mut out = self.clone();
        for d in (0..self.dims.len()).rev() {
            if !keep.contains(&d) {
                out = out.reduced(d);
            }
        }
        out
    }

    pub fn shape(&self) -> Vec<i64> {
        self.extents.clone()
    }

    /// Register slots per thread.
    pub fn slots(&self) -> i64 {
        self.dims.iter().flatten().filter(|g| matches!(g.source, Source::Slot(_))).map(|g| g.size).product()
    }

    /// Size of the fastest digit of the last dimension when it is a register digit: that
    /// many consecutive elements sit in one thread's consecutive slots (a vector).
    pub fn vector_width(&self) -> i64 {
        match self.dims.last().and_then(|d| d.first()) {
            Some(g) if g.step == 1 && matches!(g.source, Source::Slot(_)) => g.size,
            _ => 1,
        }
    }

    /// Thread digits (size, stride) of one dimension.
    pub fn thread_digits(&self, dim: usize) -> Vec<(i64, i64)> {
        self.dims[dim]
            .iter()
            .filter_map(|g| match g.source {
                Source::Thread(s) => Some((g.size, s)),
                Source::Slot(_) => None,
            })
            .collect()
    }

    /// How many indices a dimension's digits span (≥ its extent).
    pub fn span(&self, dim: usize) -> i64 {
        self.dims[dim].iter().map(|g| g.size).product()
    }

    /// (lowest thread holding it, slot) of a coordinate; replicas differ in replicated bits.
    pub fn locate(&self, coord: &[i64]) -> (i64, i64) {
        let mut thread = 0;
        let mut slot = 0;
        for (d, ds) in self.dims.iter().enumerate() {
            for g in ds {
                let v = (coord[d] / g.step) % g.size;
                match g.source {
                    Source::Thread(s) => thread += v * s,
                    Source::Slot(s) => slot += v * s,
                }
            }
        }
        (thread, slot)
    }

    /// Every thread holding `coord`.
    pub fn holders(&self, coord: &[i64]) -> Vec<i64> {
        let (base, _) = self.locate(coord);
        let mut out = vec![base];
        for &(t, stride) in &self.replicated {
            out = out.iter().flat_map(|h| (0..t).map(move |k| h + k * stride)).collect();
        }
        out.sort();
        out
    }

    /// Does every element of `self` sit on the same threads in `other` (its slot may
    /// differ: a move between the two is a register permutation in each thread)? Checked
    /// element by element for fragments of up to 2^16 elements; larger ones compare equal
    /// only when their layouts are.
    pub fn same_holders(&self, other: &FragmentLayout) -> bool {
        if self == other {
            return true;
        }
        let total: i64 = self.extents.iter().product();
        if self.extents != other.extents || self.active_threads != other.active_threads || total > 1 << 16 {
            return false;
        }
        let mut coord = vec![0i64; self.extents.len()];
        for mut flat in 0..total {
            for d in (0..coord.len()).rev() {
                coord[d] = flat % self.extents[d];
                flat /= self.extents[d];
            }
            if self.holders(&coord) != other.holders(&coord) {
                return false;
            }
        }
        true
    }

    /// A layout with the same holders as `self` whose digits split at every digit boundary
    /// of `self` and `other` (so each digit of either is a run of consecutive digits of the
    /// result): the loop that moves elements between two fragments laid out with the same
    /// holders but different digits (an mma accumulator and an A operand). None when the
    /// digits do not nest (a boundary that does not divide the next).
    pub fn refined(&self, other: &FragmentLayout) -> Option<FragmentLayout> {
        if self.extents != other.extents || self.dims.len() != other.dims.len() {
            return None;
        }
        let mut out = self.clone();
        for (d, (mine, theirs)) in self.dims.iter().zip(&other.dims).enumerate() {
            let mut cuts: Vec<i64> =
                mine.iter().chain(theirs).flat_map(|g| [g.step, g.step * g.size]).collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut digits = Vec::new();
            for w in cuts.windows(2) {
                let (lo, hi) = (w[0], w[1]);
                if hi % lo != 0 {
                    return None;
                }
                // the digit of self holding positions lo..hi (none: outside self's span)
                let Some(g) = mine.iter().find(|g| g.step <= lo && hi <= g.step * g.size) else {
                    continue;
                };
                if lo % g.step != 0 {
                    return None;
                }
                let source = match g.source {
                    Source::Thread(t) => Source::Thread(t * (lo / g.step)),
                    Source::Slot(_) => Source::Slot(0),
                };
                digits.push(Digit { size: hi / lo, step: lo, source });
            }
            out.dims[d] = digits;
        }
        out.renumber_slots();
        (out.same_holders(self) && out.same_holders(other)).then_some(out)
    }

    /// Do two layouts place these dimensions' elements on the same threads and in the same
    /// pattern of slots (slot numbering may differ)?
    pub fn same_placement(a: &[Digit], b: &[Digit]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                x.size == y.size
                    && x.step == y.step
                    && match (x.source, y.source) {
                        (Source::Thread(s), Source::Thread(t)) => s == t,
                        (Source::Slot(_), Source::Slot(_)) => true,
                        _ => false,
                    }
            })
    }
}

impl fmt::Display for FragmentLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fragment{:?} over {} threads: ", self.extents, self.active_threads)?;
        for (d, ds) in self.dims.iter().enumerate() {
            if d > 0 {
                write!(f, ", ")?;
            }
            write!(f, "dim{d} = ")?;
            if ds.is_empty() {
                write!(f, "1")?;
            }
            for (k, g) in ds.iter().enumerate() {
                if k > 0 {
                    write!(f, " . ")?;
                }
                match g.source {
                    Source::Thread(s) => write!(f, "{} threads (stride {s})", g.size)?,
                    Source::Slot(_) => write!(f, "{} registers", g.size)?,
                }
            }
        }
        for (t, s) in &self.replicated {
            write!(f, "; replicated over {t} threads (stride {s})")?;
        }
        write!(f, "; {} registers per thread", self.slots())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refinement splits digits where the other layout does and keeps every element on
    /// its threads; layouts that place elements on other threads have none.
    #[test]
    fn refined_layouts_keep_the_holders() {
        let digit = |size, step, source| Digit { size, step, source };
        let base = |last: Vec<Digit>| FragmentLayout {
            extents: vec![8, 16],
            dims: vec![vec![digit(8, 1, Source::Thread(4))], last],
            replicated: vec![],
            active_threads: 32,
        };
        let mut a = base(vec![
            digit(2, 1, Source::Slot(0)),
            digit(4, 2, Source::Thread(1)),
            digit(2, 8, Source::Slot(0)),
        ]);
        let mut b = base(vec![
            digit(2, 1, Source::Slot(0)),
            digit(4, 2, Source::Thread(1)),
            digit(2, 8, Source::Slot(0)),
        ]);
        a.renumber_slots();
        b.renumber_slots();
        assert_eq!(a.refined(&b).as_ref(), Some(&a), "{:?} vs {:?}", a.refined(&b), a);
        // the same holders, the column digits split differently
        let mut c = base(vec![
            digit(2, 1, Source::Slot(0)),
            digit(4, 2, Source::Thread(1)),
            digit(2, 8, Source::Slot(0)),
        ]);
        c.dims[1][2] = digit(2, 8, Source::Slot(0));
        c.renumber_slots();
        let r = a.refined(&c).expect("a refinement");
        assert!(r.same_holders(&a) && r.same_holders(&c));
        // columns on other threads: no refinement
        let mut d = base(vec![
            digit(4, 1, Source::Thread(1)),
            digit(2, 4, Source::Slot(0)),
            digit(2, 8, Source::Slot(0)),
        ]);
        d.renumber_slots();
        assert!(!a.same_holders(&d));
        assert!(a.refined(&d).is_none());
    }

    /// The wgmma accumulator is expressible in the digit form: it is the PTX ISA's figure,
    /// element by element, for one and for two warpgroups, N = 64 and 256.
    #[test]
    fn wgmma_accumulator_matches_the_ptx_figure() {
        for (m, n, gm, gn) in [(64, 64, 1, 1), (64, 256, 1, 1), (128, 128, 2, 1), (128, 256, 1, 2)] {
            let l = FragmentLayout::wgmma_accumulator(m, n, gm, gn);
            check_bijective(&l);
            let (tile_m, tile_n) = (m / gm, n / gn);
            for row in 0..m {
                for col in 0..n {
                    let (thread, slot) = l.locate(&[row, col]);
                    let (group, t) = (thread / 128, thread % 128);
                    let (group_m, group_n) = (group / gn, group % gn);
                    let (w, lane) = (t / 32, t % 32);
                    let (mi, i) = (slot / (tile_n / 2), slot % (tile_n / 2));
                    let want_row = group_m * tile_m + mi * 64 + 16 * w + lane / 4 + 8 * ((i >> 1) & 1);
                    let want_col = group_n * tile_n + 8 * (i >> 2) + 2 * (lane % 4) + (i & 1);
                    assert_eq!((row, col), (want_row, want_col), "{m}x{n} over {gm}x{gn}");
                }
            }
        }
    }

    /// Every element is held by exactly one (thread, slot) pair, all within bounds.
    fn check_bijective(l: &FragmentLayout) {
        let shape = l.shape();
        let total: i64 = shape.iter().product();
        let mut seen = std::collections::HashSet::new();
        for flat in 0..total {
            let mut coord = vec![0; shape.len()];
            let mut rest = flat;
            for d in (0..shape.len()).rev() {
                coord[d] = rest % shape[d];
                rest /= shape[d];
            }
            let (t, s) = l.locate(&coord);
            assert!(t < l.active_threads && s < l.slots(), "{coord:?} -> ({t}, {s}) in {l}");
            assert!(seen.insert((t, s)), "{coord:?} shares ({t}, {s}) in {l}");
        }
    }

    #[test]
    fn blocked_layouts_are_bijective() {
        for shape in [vec![128, 128], vec![4, 1024], vec![1000], vec![7, 33], vec![3, 5, 96], vec![1, 1]] {
            for threads in [32, 128, 256, 96] {
                for bytes in [1, 2, 4, 8] {
                    check_bijective(&FragmentLayout::blocked(&shape, threads, bytes));
                }
            }
        }
    }

    #[test]
    fn mma_accumulator_layouts_are_bijective_and_match_the_ptx_fragment() {
        for (m, n, wm, wn) in [(16, 8, 1, 1), (128, 128, 2, 2), (64, 256, 1, 4), (128, 64, 4, 1)] {
            let l = FragmentLayout::mma_accumulator(m, n, wm, wn);
            check_bijective(&l);
            assert_eq!(l.slots(), m * n / (32 * wm * wn));
        }
        // PTX ISA, m16n8 float accumulator: c0,c1 at (lane/4, 2*(lane%4) + {0,1}),
        // c2,c3 at (lane/4 + 8, same columns)
        let l = FragmentLayout::mma_accumulator(16, 8, 1, 1);
        for lane in 0..32 {
            for (reg, (dr, dc)) in [(0, 0), (0, 1), (8, 0), (8, 1)].iter().enumerate() {
                let coord = [lane / 4 + dr, 2 * (lane % 4) + dc];
                assert_eq!(l.locate(&coord), (lane, reg as i64));
            }
        }
    }

    #[test]
    fn mma_operand_a_matches_the_ptx_fragment() {
        // m16n8k16, fp16: a0,a1 (l/4, 2(l%4)+{0,1}); a2,a3 row+8; a4,a5 col+8; a6,a7 both
        let l = FragmentLayout::mma_operand_a(16, 16, 1, 1, 2);
        for lane in 0..32 {
            let (r, c) = (lane / 4, 2 * (lane % 4));
            let want = [
                (r, c),
                (r, c + 1),
                (r + 8, c),
                (r + 8, c + 1),
                (r, c + 8),
                (r, c + 9),
                (r + 8, c + 8),
                (r + 8, c + 9),
            ];
            for (slot, (i, j)) in want.iter().enumerate() {
                assert_eq!(l.locate(&[*i, *j]), (lane, slot as i64));
            }
        }
        // m16n8k32, int8: reg r holds 4 bytes; rows +8 for r odd, columns +16 for r >= 2
        let l = FragmentLayout::mma_operand_a(16, 32, 1, 1, 1);
        for lane in 0..32 {
            for reg in 0..4 {
                for q in 0..4 {
                    let coord = [lane / 4 + (reg % 2) * 8, 4 * (lane % 4) + q + (reg / 2) * 16];
                    assert_eq!(l.locate(&coord), (lane, reg * 4 + q));
                }
            }
        }
        // several pieces and warps: still one holder (per warp row) per element
        let l = FragmentLayout::mma_operand_a(64, 64, 2, 2, 2);
        assert_eq!(l.slots(), 2 * 4 * 8);
        assert_eq!(l.holders(&[0, 0]), vec![0, 32]);
    }

    #[test]
    fn mma_operand_b_matches_the_ptx_fragment() {
        // m16n8k16, fp16: b0,b1 (2(l%4)+{0,1}, l/4); b2,b3 rows + 8
        let l = FragmentLayout::mma_operand_b(16, 8, 1, 1, 2);
        for lane in 0..32 {
            let (r, c) = (2 * (lane % 4), lane / 4);
            for (slot, (i, j)) in [(r, c), (r + 1, c), (r + 8, c), (r + 9, c)].iter().enumerate() {
                assert_eq!(l.locate(&[*i, *j]), (lane, slot as i64));
            }
        }
        // m16n8k32, int8: b0 rows 4(l%4)+{0..3}, b1 rows + 16
        let l = FragmentLayout::mma_operand_b(32, 8, 1, 1, 1);
        for lane in 0..32 {
            for reg in 0..2 {
                for q in 0..4 {
                    assert_eq!(l.locate(&[4 * (lane % 4) + q + reg * 16, lane / 4]), (lane, reg * 4 + q));
                }
            }
        }
        let l = FragmentLayout::mma_operand_b(64, 64, 2, 2, 2);
        assert_eq!(l.holders(&[0, 0]), vec![0, 64]);
    }

    /// `lse[k, j]` in a loop over `j`: the placed dimension keeps the loop's threads, the
    /// other is in every such thread's registers, one (thread, slot) per element.
    #[test]
    fn register_dims_hold_the_unplaced_dimensions_in_each_thread() {
        let over_j = FragmentLayout::blocked(&[128], 128, 4);
        let l = over_j.with_register_dims(&[6, 128], &[1]);
        check_bijective(&l);
        assert!(l.in_registers(0) && !l.in_registers(1));
        for k in 0..6 {
            for j in 0..128 {
                assert_eq!(l.holders(&[k, j]), over_j.holders(&[j]));
            }
        }
        // nothing placed: each of the loop's threads holds the whole tile
        let whole = over_j.projected(&[]).with_register_dims(&[3], &[]);
        assert!(whole.is_whole() && whole.active_threads == over_j.active_threads);
        assert_eq!(whole.holders(&[2]).len() as i64, over_j.active_threads);
    }

    #[test]
    fn reduced_layout_holders_cover_the_row() {
        for l in [FragmentLayout::blocked(&[8, 256], 128, 4), FragmentLayout::mma_accumulator(64, 64, 2, 2)] {
            let r = l.reduced(1);
            for i in 0..l.extents[0] {
                let mut row_holders: Vec<i64> = (0..l.extents[1]).map(|j| l.locate(&[i, j]).0).collect();
                row_holders.sort();
                row_holders.dedup();
                assert_eq!(r.holders(&[i]), row_holders, "{l}");
            }
        }
    }
}
