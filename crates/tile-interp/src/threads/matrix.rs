//! The warp-collective matrix instructions: `ldmatrix` and the tensor-core `mma`, over
//! whole warps with the atoms' fragment layouts (tile_ir::target).

use super::*;

impl Machine<'_> {
    /// Byte offsets into each active thread's copy of local `buf` at element `offset`,
    /// checking that `bytes` fit.
    pub(super) fn register_offsets(
        &mut self,
        buf: BufferId,
        offset: &Expr,
        active: &[u32],
        bytes: usize,
        what: &str,
    ) -> Result<Vec<usize>, Diagnostic> {
        let b = self.m.buffer(buf);
        if b.scope != Scope::Local {
            return Err(self.err(format!("{what} operand '{}' is not a register array", b.name)));
        }
        let col = self.eval(offset, active)?;
        let eb = b.dtype.bytes() as i64;
        let mut out = Vec::with_capacity(active.len());
        for (k, v) in col.iter().enumerate() {
            let at = v.as_i64() * eb;
            if at < 0 || at % 4 != 0 || at as usize + bytes > b.bytes() as usize {
                return Err(self.err(format!(
                    "{what} by thread {}: {bytes} bytes of registers from element {} of '{}' ({} elements) are out of range or unaligned",
                    active[k],
                    v.as_i64(),
                    b.name,
                    b.num_elements()
                )));
            }
            out.push(at as usize);
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn ldmatrix(
        &mut self,
        active: &[u32],
        dst: BufferId,
        dst_offset: &Expr,
        count: u32,
        trans: bool,
        src: BufferId,
        src_idx: &[Expr],
    ) -> Result<(), Diagnostic> {
        self.full_warps(active, "ldmatrix")?;
        let sb = self.m.buffer(src);
        if sb.scope != Scope::Shared {
            return Err(self.err("ldmatrix reads shared memory"));
        }
        let rows = self.addresses(src, src_idx, active, 16 / sb.dtype.bytes() as usize, "ldmatrix")?;
        let regs = self.register_offsets(dst, dst_offset, active, 4 * count as usize, "ldmatrix")?;
        let lanes_used = 8 * count as usize;
        let what = format!("ldmatrix {}", sb.name);
        for (w, warp) in active.chunks(32).enumerate() {
            let k0 = w * 32;
            // row r of matrix i comes from lane 8 i + r
            let mut data = vec![[0u8; 16]; lanes_used];
            for (l, row) in data.iter_mut().enumerate() {
                let t = warp[l];
                let at = rows[k0 + l];
                self.track_read(t, at, 16)?;
                row.copy_from_slice(&self.smem[at..at + 16]);
            }
            self.count_banks(&what, &warp[..lanes_used], &rows[k0..k0 + lanes_used], 16);
            for (l, &t) in warp.iter().enumerate() {
                let (g, q) = (l / 4, l % 4);
                for i in 0..count as usize {
                    let mut reg = [0u8; 4];
                    if trans {
                        // element (row 2q + h, column g) of matrix i, h = 0, 1
                        for h in 0..2 {
                            reg[2 * h..2 * h + 2].copy_from_slice(&data[8 * i + 2 * q + h][2 * g..2 * g + 2]);
                        }
                    } else {
                        reg.copy_from_slice(&data[8 * i + g][4 * q..4 * q + 4]);
                    }
                    let at = regs[k0 + l] + 4 * i;
                    self.touch_registers(dst, t, at, 4, true)?;
                    self.bytes_mut(dst, t)[at..at + 4].copy_from_slice(&reg);
                }
            }
        }
        Ok(())
    }

    /// One tensor-core `mma` of `atom` for each warp: each lane's fragments are read and
    /// written with the atom's fragment layouts (tile_ir::target: lane, element → row,
    /// column), the products summed exactly and rounded to the accumulator's type.
    pub(super) fn mma(
        &mut self,
        active: &[u32],
        atom: &MmaAtom,
        (a, a_offset): (BufferId, &Expr),
        (b, b_offset): (BufferId, &Expr),
        (c, c_offset): (BufferId, &Expr),
    ) -> Result<(), Diagnostic> {
        self.full_warps(active, "mma")?;
        let m = self.m;
        let (adt, bdt, cdt) = (m.buffer(a).dtype, m.buffer(b).dtype, m.buffer(c).dtype);
        if (adt, bdt, cdt) != (atom.a, atom.b, atom.acc) {
            return Err(self.err(format!("{atom} on {adt} x {bdt} -> {cdt} registers")));
        }
        let (ea, eb, ec) = (atom.a_layout.elements(), atom.b_layout.elements(), atom.c_layout.elements());
        let (sa, sb, sc) = (adt.bytes() as usize, bdt.bytes() as usize, cdt.bytes() as usize);
        let ar = self.register_offsets(a, a_offset, active, ea as usize * sa, "mma A")?;
        let br = self.register_offsets(b, b_offset, active, eb as usize * sb, "mma B")?;
        let cr = self.register_offsets(c, c_offset, active, ec as usize * sc, "mma C")?;
        let (rows, cols, k) = (atom.m as usize, atom.n as usize, atom.k as usize);
        for (w, warp) in active.chunks(32).enumerate() {
            let mut am = vec![0f64; rows * k];
            let mut bm = vec![0f64; k * cols];
            let mut cm = vec![Val::I(0); rows * cols];
            for (l, &t) in warp.iter().enumerate() {
                let j = w * 32 + l;
                self.touch_registers(a, t, ar[j], ea as usize * sa, false)?;
                self.touch_registers(b, t, br[j], eb as usize * sb, false)?;
                self.touch_registers(c, t, cr[j], ec as usize * sc, true)?;
                for e in 0..ea {
                    let (r, col) = atom.a_layout.coord(l as i64, e);
                    let at = ar[j] + e as usize * sa;
                    am[r as usize * k + col as usize] =
                        read_val(&self.bytes(a, t)[at..at + sa], adt).as_f64();
                }
                for e in 0..eb {
                    let (r, col) = atom.b_layout.coord(l as i64, e);
                    let at = br[j] + e as usize * sb;
                    bm[r as usize * cols + col as usize] =
                        read_val(&self.bytes(b, t)[at..at + sb], bdt).as_f64();
                }
                for e in 0..ec {
                    let (r, col) = atom.c_layout.coord(l as i64, e);
                    let at = cr[j] + e as usize * sc;
                    cm[r as usize * cols + col as usize] = read_val(&self.bytes(c, t)[at..at + sc], cdt);
                }
            }
            let mut d = vec![Val::I(0); rows * cols];
            for row in 0..rows {
                for col in 0..cols {
                    let sum: f64 = (0..k).map(|kk| am[row * k + kk] * bm[kk * cols + col]).sum();
                    d[row * cols + col] = match cm[row * cols + col] {
                        // fp32 accumulation: the exact sum, rounded once
                        Val::F(x) => Val::F((x + sum) as f32 as f64),
                        // int32 accumulation wraps
                        Val::I(x) => Val::I((x as i32).wrapping_add(sum as i64 as i32) as i64),
                    };
                }
            }
            for (l, &t) in warp.iter().enumerate() {
                let j = w * 32 + l;
                for e in 0..ec {
                    let (r, col) = atom.c_layout.coord(l as i64, e);
                    let at = cr[j] + e as usize * sc;
                    write_val(
                        &mut self.bytes_mut(c, t)[at..at + sc],
                        cdt,
                        d[r as usize * cols + col as usize],
                    );
                }
            }
        }
        Ok(())
    }
}
