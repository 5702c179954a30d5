//! Fragment layouts: which thread and which register slot hold each element of a tile.
//!
//! Each dimension of a fragment is split as `index = (outer * threads + thread) * inner + e`:
//! `inner` consecutive elements sit in one thread's registers (a vector), `threads` threads
//! (at `thread_stride` in `threadIdx.x`) hold consecutive vectors, and the pattern repeats
//! `outer` times. A reduced layout keeps the thread bits of the dimension it removed as
//! *replicated*: every thread along them holds the same value.
//!
//! This covers the blocked layouts of element-wise and reduction kernels; the general
//! shape:stride algebra with swizzles (mma/wgmma operand and accumulator layouts) comes with
//! the tensor-core work and will subsume it.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DimSplit {
    pub extent: i64,
    pub inner: i64,
    pub threads: i64,
    pub thread_stride: i64,
    pub outer: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FragmentLayout {
    pub dims: Vec<DimSplit>,
    /// (threads, thread_stride) of dimensions reduced away: holders of a value along them agree.
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

impl FragmentLayout {
    /// The blocked layout: `16 / elem_bytes` contiguous elements per thread along the last
    /// dimension, neighbouring threads on neighbouring vectors (coalesced global accesses),
    /// leftover threads spread over the leading dimensions.
    pub fn blocked(shape: &[i64], threads: u32, elem_bytes: u32) -> FragmentLayout {
        let n = shape.len();
        let mut remaining = pow2_floor(threads as i64);
        let mut dims = vec![DimSplit { extent: 1, inner: 1, threads: 1, thread_stride: 1, outer: 1 }; n];
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
            dims[d] = DimSplit { extent, inner, threads: t, thread_stride: stride, outer };
            stride *= t;
        }
        FragmentLayout { dims, replicated: vec![], active_threads: stride }
    }

    /// The layout of `reduce(src, dim)`'s result: `dim` removed, its threads replicated.
    pub fn reduced(&self, dim: usize) -> FragmentLayout {
        let mut dims = self.dims.clone();
        let removed = dims.remove(dim);
        let mut replicated = self.replicated.clone();
        if removed.threads > 1 {
            replicated.push((removed.threads, removed.thread_stride));
        }
        FragmentLayout { dims, replicated, active_threads: self.active_threads }
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
        self.dims.iter().map(|d| d.extent).collect()
    }

    /// Register slots per thread.
    pub fn slots(&self) -> i64 {
        self.dims.iter().map(|d| d.outer * d.inner).product()
    }

    /// Slot strides for (outer, inner) of each dimension: outers major, inners minor.
    pub fn slot_strides(&self) -> Vec<(i64, i64)> {
        let n = self.dims.len();
        let mut strides = vec![(0, 0); n];
        let mut s = 1;
        for d in (0..n).rev() {
            strides[d].1 = s;
            s *= self.dims[d].inner;
        }
        for d in (0..n).rev() {
            strides[d].0 = s;
            s *= self.dims[d].outer;
        }
        strides
    }

    /// (lowest thread holding it, slot) of a coordinate; replicas differ in replicated bits.
    pub fn locate(&self, coord: &[i64]) -> (i64, i64) {
        let strides = self.slot_strides();
        let mut thread = 0;
        let mut slot = 0;
        for (d, split) in self.dims.iter().enumerate() {
            let i = coord[d];
            let e = i % split.inner;
            let th = (i / split.inner) % split.threads;
            let o = i / (split.inner * split.threads);
            thread += th * split.thread_stride;
            slot += o * strides[d].0 + e * strides[d].1;
        }
        (thread, slot)
    }

    /// Every thread holding `coord`.
    pub fn holders(&self, coord: &[i64]) -> Vec<i64> {
        let (base, _) = self.locate(coord);
        let mut out = vec![base];
        for &(t, stride) in &self.replicated {
            let mut next = Vec::new();
            for &h in &out {
                for k in 0..t {
                    next.push(h + k * stride);
                }
            }
            out = next;
        }
        out.sort();
        out
    }

    /// Two layouts place a dimension identically.
    pub fn same_split(a: &DimSplit, b: &DimSplit) -> bool {
        a == b
    }
}

impl fmt::Display for FragmentLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fragment{:?} over {} threads: ", self.shape(), self.active_threads)?;
        for (d, s) in self.dims.iter().enumerate() {
            if d > 0 {
                write!(f, ", ")?;
            }
            write!(f, "dim{d} = {} outer x {} threads", s.outer, s.threads)?;
            if s.threads > 1 {
                write!(f, " (stride {})", s.thread_stride)?;
            }
            if s.inner > 1 {
                write!(f, " x {} contiguous", s.inner)?;
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
            assert!(seen.insert((t, s)), "{coord:?} shares ({t}, {s})");
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
    fn reduced_layout_holders_cover_the_row() {
        let l = FragmentLayout::blocked(&[8, 256], 128, 4);
        let r = l.reduced(1);
        for i in 0..8 {
            // every thread holding any element of row i holds the row's result
            let mut row_holders: Vec<i64> = (0..256).map(|j| l.locate(&[i, j]).0).collect();
            row_holders.sort();
            row_holders.dedup();
            assert_eq!(r.holders(&[i]), row_holders);
        }
    }
}
