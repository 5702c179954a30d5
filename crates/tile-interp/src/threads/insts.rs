//! The thread-level instructions (tile_ir::inst), one model each: vector copies, `cp.async`
//! groups landing at their waits, barriers (a deadlock when not all threads arrive), the
//! matrix instructions (`matrix.rs`, `stmatrix.rs`, `wgmma.rs`), mbarriers and TMA loads
//! (`mbarrier.rs`, `tma.rs`; waits, named barriers and `setmaxnreg` are run by the
//! scheduler, `schedule.rs`), `printf` and `trap`.

use super::*;

impl Machine<'_> {
    /// One thread-level instruction, executed by the active threads in lockstep.
    pub(super) fn inst(&mut self, i: &Inst, active: &[u32]) -> Result<(), Diagnostic> {
        let m = self.m;
        match i {
            Inst::LoopBreak(_) => unreachable!("run by the scheduler"),
            // the scheduler (schedule.rs) gathers the threads at barriers and runs the waits
            Inst::Sync(_)
            | Inst::ClusterSync(_)
            | Inst::ClusterArrive(_)
            | Inst::ClusterWait(_)
            | Inst::NamedBarrier(_)
            | Inst::MbarrierWait(_)
            | Inst::SetMaxNReg(_) => {
                unreachable!("run by the scheduler")
            }
            // the lanes of a warp run in lockstep here: it orders nothing more
            Inst::SyncWarp(_) => self.full_warps(active, "sync_warp")?,
            Inst::MbarrierInit(b) => self.mbarrier_init(active, b)?,
            Inst::FenceMbarrierInit(_) => self.fence_mbarrier_init(active),
            Inst::MbarrierArrive(b) => self.mbarrier_arrive(active, b)?,
            Inst::MbarrierExpectTx(b) => self.mbarrier_expect_tx(active, b)?,
            Inst::TmaLoad(t) => self.tma_load(active, t)?,
            Inst::TmaStore(t) => self.tma_store(active, t)?,
            Inst::BulkCommit(_) => self.bulk_commit(active),
            Inst::BulkWait(w) => self.bulk_wait(active, w.pending),
            Inst::VecCopy(inst::VecCopy { dst, dst_idx, src, src_idx, width }) => {
                let (db, sb) = (m.buffer(*dst), m.buffer(*src));
                let bytes = *width as usize * sb.dtype.bytes() as usize;
                if db.dtype.bytes() != sb.dtype.bytes() {
                    return Err(self.err(format!("vector copy between {} and {}", sb.dtype, db.dtype)));
                }
                let from = self.addresses(*src, src_idx, active, *width as usize, "vector load")?;
                let to = self.addresses(*dst, dst_idx, active, *width as usize, "vector store")?;
                let (ss, ds) = (self.space(*src) == Space::Shared, self.space(*dst) == Space::Shared);
                let (sl, dl) = (self.space(*src) == Space::Local, self.space(*dst) == Space::Local);
                for (k, &t) in active.iter().enumerate() {
                    if ss {
                        self.track_read(t, from[k], bytes)?;
                    } else if sl {
                        self.touch_registers(*src, t, from[k], bytes, false)?;
                    }
                    let mut data = [0u8; 16];
                    data[..bytes].copy_from_slice(&self.bytes(*src, t)[from[k]..from[k] + bytes]);
                    if ds {
                        self.track_write(t, to[k], bytes)?;
                    } else if dl {
                        self.touch_registers(*dst, t, to[k], bytes, true)?;
                    }
                    self.bytes_mut(*dst, t)[to[k]..to[k] + bytes].copy_from_slice(&data[..bytes]);
                }
                if ss {
                    self.count_banks(&format!("vector load {}", sb.name), active, &from, bytes);
                }
                if ds {
                    self.count_banks(&format!("vector store {}", db.name), active, &to, bytes);
                }
            }
            Inst::VecAtomic(inst::VecAtomic { mode, dst, dst_idx, src, src_idx, width }) => {
                let (db, sb) = (m.buffer(*dst), m.buffer(*src));
                let w = *width as usize;
                let eb = db.dtype.bytes() as usize;
                if self.space(*dst) != Space::Global
                    || self.space(*src) != Space::Local
                    || sb.dtype != db.dtype
                {
                    return Err(self.err(format!(
                        "a vector atomic goes from registers to global memory of its dtype, not {} '{}' -> {} '{}'",
                        sb.scope.name(),
                        sb.name,
                        db.scope.name(),
                        db.name
                    )));
                }
                if w < 2 || w * eb > 16 || !w.is_power_of_two() {
                    return Err(self.err(format!("a vector atomic of {w} x {}", db.dtype)));
                }
                let from = self.addresses(*src, src_idx, active, w, "vector atomic")?;
                // the vector must be aligned to its size (checked by addresses)
                let to = self.addresses(*dst, dst_idx, active, w, "vector atomic")?;
                for (k, &t) in active.iter().enumerate() {
                    self.touch_registers(*src, t, from[k], w * eb, false)?;
                    for j in 0..w {
                        let x = read_val(&self.bytes(*src, t)[from[k] + j * eb..], db.dtype);
                        let slot = &mut self.bytes_mut(*dst, t)[to[k] + j * eb..to[k] + (j + 1) * eb];
                        let old = read_val(slot, db.dtype);
                        let new = num::atomic_combine(mode.op, old, x, db.dtype)
                            .map_err(|_| self.err(format!("atomic {} on {}", mode.op.name(), db.dtype)))?;
                        write_val(
                            &mut self.bytes_mut(*dst, t)[to[k] + j * eb..to[k] + (j + 1) * eb],
                            db.dtype,
                            new,
                        );
                    }
                }
            }
            Inst::AsyncCopy(inst::AsyncCopy { dst, dst_idx, src, src_idx, src_bytes, bytes }) => {
                let (db, sb) = (m.buffer(*dst), m.buffer(*src));
                if self.space(*dst) != Space::Shared || self.space(*src) != Space::Global {
                    return Err(self.err("cp.async must copy from global to shared memory"));
                }
                let size = *bytes as usize;
                let n = self.eval(src_bytes, active)?;
                let to = self.addresses(
                    *dst,
                    dst_idx,
                    active,
                    (size / db.dtype.bytes() as usize).max(1),
                    "cp.async",
                )?;
                // the source is only read for `src_bytes` bytes; its address must be aligned
                let from = self.addresses(*src, src_idx, active, 1, "cp.async")?;
                for (k, &t) in active.iter().enumerate() {
                    let count = n[k].as_i64();
                    if !(0..=size as i64).contains(&count) {
                        return Err(self.err(format!("cp.async{size} by thread {t} of {count} source bytes")));
                    }
                    if from[k] % size != 0 {
                        return Err(self.err(format!(
                            "cp.async{size} by thread {t}: source byte {} of '{}' is not {size}-byte aligned",
                            from[k], sb.name
                        )));
                    }
                    if to[k] % size != 0 {
                        return Err(self.err(format!(
                            "cp.async{size} by thread {t}: shared byte {} of '{}' is not {size}-byte aligned",
                            to[k], db.name
                        )));
                    }
                    let count = count as usize;
                    if from[k] + count > self.global[src.0 as usize].len() {
                        return Err(self.err(format!(
                            "cp.async by thread {t}: {count} bytes from byte {} run past the end of '{}'",
                            from[k], sb.name
                        )));
                    }
                    let mut data = [0u8; 16];
                    data[..count].copy_from_slice(&self.global[src.0 as usize][from[k]..from[k] + count]);
                    // the bytes may land any time until the wait: nobody may touch them now
                    self.check_write(t, to[k], size)?;
                    for a in to[k]..to[k] + size {
                        self.races.in_flight[a] += 1;
                    }
                    self.asyncs[t as usize].open.push(PendingCopy { smem_offset: to[k], data, len: size });
                }
                self.count_banks(&format!("cp.async {}", db.name), active, &to, size);
            }
            Inst::AsyncArrive(inst::AsyncArrive { bar, idx }) => {
                // the thread's copies land (all of them, committed or not), then it arrives
                for &t in active {
                    let a = &mut self.asyncs[t as usize];
                    let mut copies = std::mem::take(&mut a.open);
                    for g in a.groups.iter_mut() {
                        copies.append(g);
                    }
                    for c in copies {
                        self.land(t, &c)?;
                    }
                }
                let arrive = inst::MbarrierArrive {
                    bar: *bar,
                    idx: idx.clone(),
                    expect_tx: None,
                    cta: None,
                    pred: None,
                };
                self.mbarrier_arrive(active, &arrive)?;
            }
            Inst::AsyncCommit(_) => {
                for &t in active {
                    let a = &mut self.asyncs[t as usize];
                    let group = std::mem::take(&mut a.open);
                    a.groups.push_back(group);
                }
            }
            Inst::AsyncWait(inst::AsyncWait { pending }) => {
                for &t in active {
                    while self.asyncs[t as usize].groups.len() > *pending as usize {
                        let group = self.asyncs[t as usize].groups.pop_front().expect("a group");
                        for c in group {
                            self.land(t, &c)?;
                        }
                    }
                }
            }
            Inst::Ldmatrix(ld) => {
                let (count, trans) = ld.form();
                self.ldmatrix(active, ld.dst, &ld.dst_offset, count, trans, ld.src, &ld.src_idx)?;
            }
            Inst::Stmatrix(st) => self.stmatrix(active, st)?,
            Inst::Mma(mma) => {
                self.mma(
                    active,
                    mma.atom,
                    (mma.a, &mma.a_offset),
                    (mma.b, &mma.b_offset),
                    (mma.c, &mma.c_offset),
                )?;
            }
            Inst::Wgmma(w) => self.wgmma(active, w)?,
            Inst::WgmmaFence(_) => self.wgmma_fence(active)?,
            Inst::WgmmaCommit(_) => self.wgmma_commit(active)?,
            Inst::WgmmaWait(w) => self.wgmma_wait(active, w)?,
            Inst::FenceProxyAsync(_) => self.fence_proxy_async(active),
            Inst::Printf(_) => {}
            // the kernels of a call run one after another here: nothing to wait for or signal
            Inst::GridDepWait(_) | Inst::GridDepLaunch(_) => {}
            Inst::BindPointer(b) => return Err(self.err(crate::pointer_message(&self.m.buffer(b.buf).name))),
            Inst::CallExtern(c) => {
                if !crate::EXTERN_NO_EFFECT.contains(&c.name.as_str()) {
                    return Err(self.err(crate::extern_message(&c.name)));
                }
            }
            Inst::Trap(_) => return Err(self.err(format!("__trap() by threads {}", ranges(active)))),
        }
        Ok(())
    }
}

impl Machine<'_> {
    /// A thread's cp.async lands: its bytes are written now (a write of the thread's).
    fn land(&mut self, t: u32, c: &PendingCopy) -> Result<(), Diagnostic> {
        for a in c.smem_offset..c.smem_offset + c.len {
            self.races.in_flight[a] -= 1;
        }
        self.track_write(t, c.smem_offset, c.len)?;
        self.smem[c.smem_offset..c.smem_offset + c.len].copy_from_slice(&c.data[..c.len]);
        Ok(())
    }
}
