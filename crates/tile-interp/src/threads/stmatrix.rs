//! `stmatrix.sync.aligned.m8n8.x{count}.shared.b16`: row r of matrix i is the register i of
//! lanes 4r … 4r + 3 (4 bytes each: columns 2q, 2q + 1 of lane 4r + q), written 16 bytes at
//! the address lane 8i + r gives (PTX ISA, "stmatrix").

use super::*;

impl Machine<'_> {
    pub(super) fn stmatrix(&mut self, active: &[u32], st: &inst::Stmatrix) -> Result<(), Diagnostic> {
        self.full_warps(active, "stmatrix")?;
        let db = self.m.buffer(st.dst);
        if db.scope != Scope::Shared || db.dtype.bytes() != 2 {
            return Err(self.err(format!("stmatrix writes 16-bit shared tiles, not '{}'", db.name)));
        }
        let count = st.count() as usize;
        let what = format!("stmatrix {}", db.name);
        let rows = self.addresses(st.dst, &st.dst_idx, active, 8, "stmatrix")?;
        let regs = self.register_offsets(st.src, &st.src_offset, active, 4 * count, "stmatrix")?;
        for (w, warp) in active.chunks(32).enumerate() {
            let k0 = w * 32;
            let lanes_used = 8 * count;
            for i in 0..count {
                for r in 0..8 {
                    let mut data = [0u8; 16];
                    for q in 0..4 {
                        let lane = 4 * r + q;
                        let at = regs[k0 + lane] + 4 * i;
                        self.touch_registers(st.src, warp[lane], at, 4, false)?;
                        data[4 * q..4 * q + 4].copy_from_slice(&self.bytes(st.src, warp[lane])[at..at + 4]);
                    }
                    let writer = warp[8 * i + r];
                    let to = rows[k0 + 8 * i + r];
                    self.track_write(writer, to, 16)?;
                    self.smem[to..to + 16].copy_from_slice(&data);
                }
            }
            self.count_banks(&what, &warp[..lanes_used], &rows[k0..k0 + lanes_used], 16);
        }
        Ok(())
    }
}
