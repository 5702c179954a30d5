//! Bulk tensor stores (TMA): `cp.async.bulk.tensor` from shared memory to a global tensor,
//! and the bulk groups that say when their shared bytes may be written again.
//!
//! A store issued by a thread reads its box from shared memory at issue — densely from the
//! shared address of `src[src_idx]`, each byte at its *physical* address swizzled by the
//! map's mode, as `tma.rs` writes loads — and writes the elements inside the tensor to
//! global memory (those past its edge are dropped). The store reads in the async proxy:
//! every byte's last ordinary write must have been followed by its writer's
//! `fence_proxy_async` and then a barrier (the rule wgmma reads follow). Until the thread's
//! `bulk_wait` retires the group the next `bulk_commit` closes, the bytes are still being
//! read: a write to them is reported. Groups pending at the end of the block are reported
//! (the kernel could exit with the store unfinished).

use super::*;

/// One thread's bulk stores: the byte ranges of those not committed yet, then of each
/// committed group, oldest first.
#[derive(Clone, Debug, Default)]
pub(super) struct BulkGroups {
    open: Vec<(usize, usize)>,
    committed: std::collections::VecDeque<Vec<(usize, usize)>>,
}

impl Machine<'_> {
    pub(super) fn tma_store(&mut self, active: &[u32], i: &inst::TmaStore) -> Result<(), Diagnostic> {
        let m = self.m;
        let (map, what) = self.bulk_map("tma_store", i.map, i.dst, i.src)?;
        let (sb, db) = (m.buffer(i.src), m.buffer(i.dst));
        let shape = db.extents();
        let rank = shape.len();
        if i.coords.len() != rank || map.box_dims.len() != rank {
            return Err(self.err(format!(
                "{what}: {} coordinates and a box of rank {} for a tensor of rank {rank}",
                i.coords.len(),
                map.box_dims.len()
            )));
        }
        let eb = db.dtype.bytes() as i64;
        if sb.dtype.bytes() as i64 != eb {
            return Err(self.err(format!("{what}: stores {} elements into a {} tensor", sb.dtype, db.dtype)));
        }
        let mode = match map.swizzle {
            0 => 0,
            128 => 1,
            64 => 2,
            32 => 3,
            s => return Err(self.err(format!("{what}: swizzle {s} (0, 32, 64 or 128 bytes)"))),
        };
        let box_bytes = map.box_bytes(eb as usize);
        if i.bytes != box_bytes {
            return Err(self.err(format!(
                "{what}: says {} bytes, the box {:?} holds {box_bytes}",
                i.bytes, map.box_dims
            )));
        }
        let mut coords = Vec::with_capacity(rank);
        for c in &i.coords {
            coords.push(self.eval(c, active)?.iter().map(|v| v.as_i64()).collect::<Vec<_>>());
        }
        let from = self.addresses(i.src, &i.src_idx, active, 1, "tma_store")?;
        let align =
            if mode == 0 { 128 } else { tile_ir::Swizzle::span(map.swizzle).expect("a span").period() };
        let lo = sb.shared_offset.expect("a placed shared buffer") as i64;
        let hi = lo + sb.bytes();
        let (lo, hi) = match active.first() {
            Some(&t) => (lo + self.cta_base(t) as i64, hi + self.cta_base(t) as i64),
            None => (lo, hi),
        };
        let strides = tile_ir::row_major_strides(&map.box_dims);
        let elements: i64 = map.box_dims.iter().product();
        for (k, &t) in active.iter().enumerate() {
            let start = self.smem_base + from[k] as i64;
            if start % align != 0 {
                return Err(self.err(format!(
                    "{what} by thread {t}: the source's shared address {start} is not {align}-byte aligned"
                )));
            }
            for e in 0..elements {
                let at = wgmma::swizzle_address(mode, start + e * eb) - self.smem_base;
                if at < lo || at + eb > hi {
                    return Err(self.err(format!("{what} by thread {t}: element {e} of the box {:?} is read from shared byte {at}, outside '{}' (bytes {lo}..{hi})", map.box_dims, sb.name)));
                }
                let at = at as usize;
                for a in at..at + eb as usize {
                    self.check_async_proxy_read(&what, a)?;
                    self.races.bulk_reads[a] += 1;
                }
                self.bulk[t as usize].open.push((at, at + eb as usize));
                let mut flat = 0i64;
                let mut inside = true;
                for d in 0..rank {
                    let c = coords[d][k] + (e / strides[d]) % map.box_dims[d];
                    inside &= (0..shape[d]).contains(&c);
                    flat = flat * shape[d].max(1) + c;
                }
                if inside {
                    let data = self.smem[at..at + eb as usize].to_vec();
                    let to = (flat * eb) as usize;
                    self.global[i.dst.0 as usize][to..to + eb as usize].copy_from_slice(&data);
                }
            }
        }
        Ok(())
    }

    /// A read of shared byte `a` in the async proxy: no `cp.async` in flight into it, and
    /// its last ordinary write fenced (`fence_proxy_async`) by its writer before a barrier.
    fn check_async_proxy_read(&self, what: &str, a: usize) -> Result<(), Diagnostic> {
        if self.races.in_flight[a] > 0 {
            return Err(
                self.err(format!("{what} reads shared byte {a} while a cp.async into it is in flight"))
            );
        }
        let writer = self.races.writer[a];
        if writer != NOBODY {
            match self.proxy_fences[writer as usize].get(self.races.fence_mark[a] as usize) {
                None => {
                    return Err(self.err(format!(
                        "{what} reads shared byte {a}, which thread {writer} wrote with no fence_proxy_async after it (the async proxy may not see the write)"
                    )))
                }
                Some(&e) if e >= self.epoch => {
                    return Err(self.err(format!(
                        "{what} reads shared byte {a}, which thread {writer} wrote and fenced (fence_proxy_async) with no barrier since"
                    )))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    pub(super) fn bulk_commit(&mut self, active: &[u32]) {
        for &t in active {
            let b = &mut self.bulk[t as usize];
            let open = std::mem::take(&mut b.open);
            b.committed.push_back(open);
        }
    }

    pub(super) fn bulk_wait(&mut self, active: &[u32], pending: u32) {
        for &t in active {
            while self.bulk[t as usize].committed.len() > pending as usize {
                let group = self.bulk[t as usize].committed.pop_front().expect("a group");
                for (lo, hi) in group {
                    for a in lo..hi {
                        self.races.bulk_reads[a] -= 1;
                    }
                }
            }
        }
    }

    /// Bulk stores a thread issued and never waited for, at the end of the block.
    pub(super) fn end_block_bulk(&self) -> Result<(), Diagnostic> {
        for (t, b) in self.bulk.iter().enumerate() {
            if !b.open.is_empty() || !b.committed.is_empty() {
                return Err(self.err(format!(
                    "thread {t} has TMA stores pending at the end of the kernel (no bulk_commit and bulk_wait 0 after them)"
                )));
            }
        }
        Ok(())
    }
}
