//! `T.call_extern`: a call of a device function the compiler does not know (the user's,
//! from `T.import_source`, or a CUDA builtin), its operands as C values, addresses and
//! string literals.

use super::super::expr::c_string;
use super::super::Emitter;
use tile_ir::inst::ExternArg;
use tile_ir::*;

impl Emitter<'_> {
    pub(super) fn call_extern(&mut self, c: &inst::CallExtern) -> Result<(), Diagnostic> {
        let mut args = Vec::new();
        for a in &c.args {
            args.push(match a {
                ExternArg::Value(e) => self.expr(e)?,
                ExternArg::Str(t) => c_string(t),
                ExternArg::Address { buf, idx, elements, ctype, .. } => {
                    let b = self.m.buffer(*buf);
                    if *elements > 1 && (b.swizzle.is_some() || b.panel.is_some()) {
                        return Err(Diagnostic::error(
                            format!(
                                "T.call_extern '{}': the {elements} elements from the address in '{}' are not contiguous: the compiler swizzled this shared tile for T.gemm",
                                c.name, b.name
                            ),
                            b.loc,
                        )
                        .with_help("pass the address of a tile no T.gemm reads, or one element at a time"));
                    }
                    let at = self.access(*buf, idx)?;
                    match ctype {
                        Some(t) => format!("({t})(&{at})"),
                        None => format!("&{at}"),
                    }
                }
            });
        }
        let call = format!("{}({})", c.name, args.join(", "));
        match &c.result {
            Some((buf, idx)) => {
                let dt = self.m.buffer(*buf).dtype;
                let at = self.access(*buf, idx)?;
                let value = match dt {
                    DType::F16 => format!("tl_to_half((float)({call}))"),
                    DType::BF16 => format!("tl_to_bf16((float)({call}))"),
                    other => format!("({})({call})", super::super::storage_type(other)),
                };
                self.line(&format!("{at} = {value};"));
            }
            None => self.line(&format!("{call};")),
        }
        Ok(())
    }
}
