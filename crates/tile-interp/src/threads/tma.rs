//! `cp.async.bulk.tensor` loads (TMA), one per issuing thread, landing at issue.
//!
//! The box of the tensor map (`Kernel::tensor_maps`, over the global tensor `src` with
//! the shape the call gave it) whose first element is `src[coords]` is read element by
//! element, those outside the tensor (a coordinate below 0 or past its extent) as zero, and
//! written densely, row-major (the innermost dimension contiguous), from the shared address
//! of `dst[dst_idx]` on (`SharedLayout::offset`, as every access of the model). The
//! map's swizzle acts on the *physical* address of each byte, as the hardware's does
//! (`wgmma::swizzle_address`; the model's shared array starts on
//! `Module::shared_base_align`). Then the mbarrier's transaction count drops by the box's
//! bytes (`complete_tx`), which may complete its phase. The bytes are tagged with that
//! phase (mbarrier.rs): readers must have waited for it. TMA writes are async-proxy
//! writes: a wgmma may read them with no `fence.proxy.async`, but they may not land on
//! bytes a pending wgmma reads or a `cp.async` is in flight to.
//!
//! Errors: a map that is not over `src`, a rank that is not the tensor's, a box dimension
//! off [1, 256], an inner box row that is not a multiple of 16 bytes or wider than the
//! swizzle span, a tensor row stride that is not a multiple of 16 bytes (the map could not
//! be encoded), `bytes` other than the box's, a destination that is not 128-byte aligned
//! (physically; with a swizzle, aligned to its period: 256, 512 or 1024 bytes), a box that
//! does not fit in the destination buffer.

use super::*;

impl<'m> Machine<'m> {
    /// The tensor map `map` of a bulk copy (`op`: "tma_load" or "tma_store") between the
    /// global tensor `tensor` and the shared buffer `smem`, with the instruction's name for
    /// messages: the map exists, is over `tensor`, and the two sides are in those spaces.
    pub(super) fn bulk_map(
        &self,
        op: &str,
        map: u32,
        tensor: BufferId,
        smem: BufferId,
    ) -> Result<(&'m tile_ir::TensorMapDesc, String), Diagnostic> {
        let m = self.m;
        let Some(desc) = m.kernel.tensor_maps.get(map as usize) else {
            return Err(self
                .err(format!("{op} map{map}: the kernel has {} tensor map(s)", m.kernel.tensor_maps.len())));
        };
        let (load, (to, from)) = (op == "tma_load", (m.buffer(tensor), m.buffer(smem)));
        let what = if load {
            format!("{op} map{map} {} <- {}", from.name, to.name)
        } else {
            format!("{op} map{map} {} <- {}", to.name, from.name)
        };
        if desc.tensor != tensor {
            return Err(self.err(format!("{what}: map{map} is over '{}'", m.buffer(desc.tensor).name)));
        }
        if self.space(tensor) != Space::Global || self.space(smem) != Space::Shared {
            return Err(
                self.err(format!("{what}: a bulk tensor copy is between a global tensor and shared memory"))
            );
        }
        Ok((desc, what))
    }

    pub(super) fn tma_load(&mut self, active: &[u32], i: &inst::TmaLoad) -> Result<(), Diagnostic> {
        let m = self.m;
        let (map, what) = self.bulk_map("tma_load", i.map, i.src, i.dst)?;
        let (sb, db) = (m.buffer(i.src), m.buffer(i.dst));
        let shape = sb.extents();
        let rank = shape.len();
        if i.coords.len() != rank || map.box_dims.len() != rank || !(1..=5).contains(&rank) {
            return Err(self.err(format!(
                "{what}: {} coordinates and a box of rank {} for a tensor of rank {rank} (1 to 5)",
                i.coords.len(),
                map.box_dims.len()
            )));
        }
        let eb = sb.dtype.bytes() as i64;
        if db.dtype.bytes() as i64 != eb {
            return Err(self.err(format!("{what}: copies {} elements into a {} buffer", sb.dtype, db.dtype)));
        }
        if let Some(d) = map.box_dims.iter().position(|&b| !(1..=256).contains(&b)) {
            return Err(self.err(format!("{what}: box dimension {d} is {} (1 to 256)", map.box_dims[d])));
        }
        let inner = map.box_dims[rank - 1] * eb;
        let span = map.swizzle as i64;
        let mode = match map.swizzle {
            0 => 0,
            128 => 1,
            64 => 2,
            32 => 3,
            s => return Err(self.err(format!("{what}: swizzle {s} (0, 32, 64 or 128 bytes)"))),
        };
        if inner % 16 != 0 || (span > 0 && inner > span) {
            return Err(self.err(format!(
                "{what}: the box's rows are {inner} bytes (a multiple of 16{})",
                if span > 0 { format!(", at most the {span}-byte swizzle span") } else { String::new() }
            )));
        }
        let mut stride = eb;
        for d in (1..rank).rev() {
            stride *= shape[d];
            if stride % 16 != 0 {
                return Err(self.err(format!(
                    "{what}: dimension {} of '{}' (shape {shape:?}) steps {stride} bytes, not a multiple of 16 (no tensor map can describe it)",
                    d - 1,
                    sb.name
                )));
            }
        }
        let box_bytes = map.box_bytes(eb as usize);
        if i.bytes != box_bytes {
            return Err(self.err(format!(
                "{what}: says {} bytes, the box {:?} of {} holds {box_bytes}",
                i.bytes, map.box_dims, sb.dtype
            )));
        }
        let mut coords = Vec::with_capacity(rank);
        for c in &i.coords {
            coords.push(self.eval(c, active)?.iter().map(|v| v.as_i64()).collect::<Vec<_>>());
        }
        let to = self.addresses(i.dst, &i.dst_idx, active, 1, "tma_load")?;
        let words = self.mbarrier_words(i.bar, &i.bar_idx, active, "tma_load")?;
        // the blocks the box lands in: this one, or every block of the multicast's mask
        let targets: Vec<usize> = match i.multicast {
            None => vec![],
            Some(mask) => {
                if mask == 0 || mask >> self.cluster != 0 {
                    return Err(self.err(format!(
                        "{what}: multicast mask {mask:#x} names blocks outside the cluster of {}",
                        self.cluster
                    )));
                }
                (0..self.cluster).filter(|q| mask >> q & 1 == 1).collect()
            }
        };
        let align = if mode == 0 {
            128
        } else {
            tile_ir::Swizzle::span(map.swizzle).expect("a swizzle span").period()
        };
        let strides = tile_ir::row_major_strides(&map.box_dims);
        let elements: i64 = map.box_dims.iter().product();
        for (k, &t) in active.iter().enumerate() {
            let own = self.cta_base(t);
            let blocks: Vec<usize> = if targets.is_empty() {
                vec![own]
            } else {
                targets.iter().map(|q| q * self.cta_smem).collect()
            };
            let src = &self.global[i.src.0 as usize];
            let mut data = vec![0u8; box_bytes as usize];
            for e in 0..elements {
                let mut flat = 0i64;
                let mut inside = true;
                for d in 0..rank {
                    let c = coords[d][k] + (e / strides[d]) % map.box_dims[d];
                    inside &= (0..shape[d]).contains(&c);
                    flat = flat * shape[d] + c;
                }
                if inside {
                    let (from, at) = ((flat * eb) as usize, (e * eb) as usize);
                    data[at..at + eb as usize].copy_from_slice(&src[from..from + eb as usize]);
                }
            }
            for base in blocks {
                self.remote_since_cluster_sync |= base != own;
                let dst = to[k] - own + base;
                let slot = self.live_mbarrier(i.bar, words[k] - own + base, t, "tma_load")?;
                let start = self.smem_base + dst as i64;
                if start % align != 0 {
                    return Err(self.err(format!(
                        "{what} by thread {t}: the destination's shared address {start} (byte {dst} of the block's shared memory, on a base aligned to {}) is not {align}-byte aligned",
                        self.smem_base
                    )));
                }
                let phase = self.phase_to_see(slot);
                let lo = base as i64 + db.shared_offset.expect("a placed shared buffer") as i64;
                let hi = lo + db.bytes();
                for e in 0..elements {
                    let at = wgmma::swizzle_address(mode, start + e * eb) - self.smem_base;
                    if at < lo || at + eb > hi {
                        return Err(self.err(format!(
                            "{what} by thread {t}: element {e} of the box {:?} lands at shared byte {at}, outside '{}' (bytes {lo}..{hi})",
                            map.box_dims, db.name
                        )));
                    }
                    let at = at as usize;
                    for a in at..at + eb as usize {
                        self.check_overwrite(memory::Who::Tma(t), a)?;
                    }
                    self.smem[at..at + eb as usize]
                        .copy_from_slice(&data[(e * eb) as usize..((e + 1) * eb) as usize]);
                    for a in at..at + eb as usize {
                        let r = &mut self.races;
                        (r.tma_bar[a], r.tma_phase[a], r.tma_buf[a]) = (slot as u32, phase, i.dst.0);
                        r.unwritten_tma_dst[a] = false;
                        // ordered by the mbarriers, not by barrier intervals
                        (r.write_epoch[a], r.writer[a], r.read_epoch[a], r.reader[a]) =
                            (0, NOBODY, 0, NOBODY);
                    }
                }
                self.complete_tx(slot, box_bytes, t)?;
            }
        }
        Ok(())
    }
}
