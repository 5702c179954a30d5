//! Debugging instructions: `printf` (CUDA's device printf; the format holds the C
//! conversions of the arguments' types).

use super::super::expr::c_string;
use super::super::Emitter;
use tile_ir::*;

impl Emitter<'_> {
    pub(super) fn printf(&mut self, p: &inst::Printf) -> Result<(), Diagnostic> {
        let mut call = format!("printf({}", c_string(&p.format));
        for a in &p.args {
            call.push_str(", ");
            call.push_str(&self.expr(a)?);
        }
        self.line(&format!("{call});"));
        Ok(())
    }
}
