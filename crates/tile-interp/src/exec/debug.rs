//! `T.print` and `T.device_assert` on the interpreter.
//!
//! A print writes to stdout, each line starting with the block as the GPU's `printf` does:
//! `[block (0, 1, 0)] msg: 3.5`. Outside `parallel` loops it runs once per block and a tile
//! is shown whole, numpy-style, after a line naming it; inside, each iteration prints with
//! its loop indices, in iteration order: `[block (0, 0, 0)] msg (i=3, j=4): 1.5`. Values are
//! written as C's `%g` writes them. A false assert is an error at the assert, naming the
//! block (and the first failing iteration).

use super::*;
use std::io::Write;

/// numpy's threshold: tiles with more elements show the first and last three per dimension.
const SUMMARY_THRESHOLD: usize = 1000;
const EDGE_ITEMS: usize = 3;

/// A float as C's `printf("%g")` writes it: six significant digits, trailing zeros dropped,
/// scientific notation below 1e-4 and from 1e6.
pub(crate) fn format_g(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let strip = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    // the exponent after rounding to six significant digits
    let sci = format!("{v:.5e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip(mantissa.to_string()), exp.abs())
    } else {
        strip(format!("{:.*}", (5 - exp) as usize, v))
    }
}

fn format_value(v: Val, dt: DType) -> String {
    match v {
        Val::F(x) if dt.is_float() => format_g(x),
        other => dt.int_value(other.as_i64()).to_string(),
    }
}

/// The start of every printed line: the block and the message (left out when empty).
fn prefix(block: [i64; 3], msg: &str) -> String {
    let [x, y, z] = block;
    if msg.is_empty() {
        format!("[block ({x}, {y}, {z})]")
    } else {
        format!("[block ({x}, {y}, {z})] {msg}")
    }
}

/// A tile as numpy prints it: nested brackets, elements right-aligned to one width.
fn render(values: &[String], shape: &[i64]) -> String {
    if shape.is_empty() {
        return values.first().cloned().unwrap_or_default();
    }
    let summarize = values.len() > SUMMARY_THRESHOLD;
    let width = values.iter().map(|v| v.len()).max().unwrap_or(0);
    let mut out = String::new();
    nested(values, shape, 0, summarize, width, &mut out);
    out
}

/// Indices of one dimension to show; None is the `...` of a summarized dimension.
fn shown(n: usize, summarize: bool) -> Vec<Option<usize>> {
    if summarize && n > 2 * EDGE_ITEMS {
        (0..EDGE_ITEMS).map(Some).chain([None]).chain((n - EDGE_ITEMS..n).map(Some)).collect()
    } else {
        (0..n).map(Some).collect()
    }
}

fn nested(values: &[String], shape: &[i64], depth: usize, summarize: bool, width: usize, out: &mut String) {
    let n = shape[0] as usize;
    let inner: usize = shape[1..].iter().product::<i64>() as usize;
    out.push('[');
    if shape.len() == 1 {
        let items: Vec<String> = shown(n, summarize)
            .into_iter()
            .map(|i| match i {
                Some(i) => format!("{:>width$}", values[i]),
                None => "...".into(),
            })
            .collect();
        out.push_str(&items.join(" "));
    } else {
        // rows are separated by a newline, blocks of rows by one more per level
        let separator = format!("{}{}", "\n".repeat(shape.len() - 1), " ".repeat(depth + 1));
        for (k, i) in shown(n, summarize).into_iter().enumerate() {
            if k > 0 {
                out.push_str(&separator);
            }
            match i {
                Some(i) => {
                    nested(&values[i * inner..(i + 1) * inner], &shape[1..], depth + 1, summarize, width, out)
                }
                None => out.push_str("..."),
            }
        }
    }
    out.push(']');
}

impl Interp<'_> {
    /// ` (i=3, j=4)` for iteration `lane` of the running `parallel` loop ("" outside one).
    fn iteration(&self, lane: u32) -> String {
        let Some(p) = &self.par else { return String::new() };
        let names: Vec<String> = p
            .vars
            .iter()
            .zip(&p.values)
            .map(|(v, values)| format!("{}={}", self.m.var(*v).name, values[lane as usize]))
            .collect();
        format!(" ({})", names.join(", "))
    }

    pub(super) fn print(
        &mut self,
        what: &Printed,
        msg: &str,
        block: Option<&[i64]>,
        ids: Lanes<'_>,
        loc: Loc,
    ) -> Result<(), Diagnostic> {
        if let Some(block) = block {
            if (0..3).any(|axis| self.block[axis] != block.get(axis).copied().unwrap_or(0)) {
                return Ok(());
            }
        }
        let start = prefix(self.block, msg);
        let mut text = String::new();
        match what {
            Printed::Value(e) => {
                let values = self.eval(e, ids, loc)?;
                for (k, &lane) in ids.iter().enumerate() {
                    let v = format_value(values.get(k), e.dtype());
                    text.push_str(&format!("{start}{}: {v}\n", self.iteration(lane)));
                }
            }
            Printed::Tile(r) => {
                self.tile_op_outside_parallel("T.print of a tile", loc)?;
                let rr = resolve_region(self.m, r, None)?;
                let b = self.m.buffer(rr.buf);
                let offsets = self.region_offsets(&rr, loc)?;
                let data = &self.mem[rr.buf.0 as usize];
                let values: Vec<String> = offsets
                    .iter()
                    .map(|&o| match o {
                        // past a global tensor's edge: the guarded read's zero, as on the GPU
                        usize::MAX => format_value(cast(Val::I(0), DType::I64, b.dtype), b.dtype),
                        o => format_value(data.get(o), b.dtype),
                    })
                    .collect();
                let region = if rr.extents == b.extents() {
                    String::new()
                } else {
                    format!(", region of shape {:?}", rr.shape())
                };
                text.push_str(&format!(
                    "{start}: {} {} {}{:?}{region} =\n{}\n",
                    b.name,
                    b.scope.name(),
                    b.dtype,
                    b.extents(),
                    render(&values, &rr.shape())
                ));
            }
        }
        let mut out = std::io::stdout().lock();
        // a closed stdout must not stop the kernel
        let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
        Ok(())
    }

    pub(super) fn device_assert(
        &mut self,
        cond: &Expr,
        msg: &str,
        ids: Lanes<'_>,
        loc: Loc,
    ) -> Result<(), Diagnostic> {
        let holds = truth(self.eval(cond, ids, loc)?);
        let Some(k) = holds.iter().position(|h| !h) else { return Ok(()) };
        let what = if msg.is_empty() { String::new() } else { format!(": {msg}") };
        let at = match self.iteration(ids[k]) {
            i if i.is_empty() => String::new(),
            i => format!(" at{i}"),
        };
        Err(self.error(format!("device assert failed{what}{at}"), loc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g_format_matches_c() {
        let cases = [
            (3.5, "3.5"),
            (1.0, "1"),
            (0.1f32 as f64, "0.1"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (-2.5e-300, "-2.5e-300"),
            (999999.5, "1e+06"),
            (65504.0, "65504"),
        ];
        for (v, want) in cases {
            assert_eq!(format_g(v), want, "{v}");
        }
    }

    #[test]
    fn tiles_render_like_numpy() {
        let v: Vec<String> = (1..=6).map(|x| x.to_string()).collect();
        assert_eq!(render(&v, &[2, 3]), "[[1 2 3]\n [4 5 6]]");
        assert_eq!(render(&v, &[6]), "[1 2 3 4 5 6]");
        let v: Vec<String> = (0..8).map(|x| x.to_string()).collect();
        assert_eq!(render(&v, &[2, 2, 2]), "[[[0 1]\n  [2 3]]\n\n [[4 5]\n  [6 7]]]");
        let v: Vec<String> = (0..2000).map(|x| x.to_string()).collect();
        let text = render(&v, &[2, 1000]);
        assert_eq!(text, "[[   0    1    2 ...  997  998  999]\n [1000 1001 1002 ... 1997 1998 1999]]");
    }
}
