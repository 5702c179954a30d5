//! Lowering `T.print` and `T.device_assert` to `printf` and `__trap`.
//!
//! Every message starts with the block, `[block (0, 1, 0)] msg`, as on the interpreter.
//! Outside `parallel` loops thread 0 prints (a scalar, or a shared, global or local tile one
//! row chunk per line) and checks asserts; a fragment is printed one element per line by the
//! thread holding it. Inside `parallel` loops each iteration prints or checks for itself,
//! naming its loop indices:
//!
//! ```text
//! [block (0, 0, 0)] x (i=3, j=4): 1.5
//! [block (0, 0, 0)] tile: A_s shared float16[64, 64]
//! [block (0, 0, 0)] tile: A_s[0, 0:8] = 1 2 3 4 5 6 7 8
//! kernel.py:12: device assert failed: i < n (block (3, 0, 0), thread 17; i=5)
//! ```

use super::guards::and;
use super::threads::element_at;
use super::*;
use tile_ir::verify::{resolve_region, ResolvedRegion};

/// The printf conversions of the block index, at the start of every message.
const BLOCK: &str = "[block (%d, %d, %d)]";

/// Values per line when a tile is printed from one thread (printf takes at most 32 args).
const VALUES_PER_LINE: i64 = 8;

/// User text inside a printf format: `%` doubled.
fn literal(text: &str) -> String {
    text.replace('%', "%%")
}

/// `[block (%d, %d, %d)] msg` (the message left out when empty).
fn prefix(msg: &str) -> String {
    if msg.is_empty() {
        BLOCK.to_string()
    } else {
        format!("{BLOCK} {}", literal(msg))
    }
}

/// `blockIdx.{x,y,z}` as expressions for printed messages when the kernel prints or asserts
/// (else none): the block-index variables, made where the program has none; 0 past the
/// grid's dimensions.
pub(super) fn block_coords(m: &mut Module) -> Vec<Expr> {
    let mut debugging = false;
    walk_stmts(&m.kernel.body, &mut |s| {
        debugging |= matches!(s, Stmt::Print { .. } | Stmt::DeviceAssert { .. });
    });
    if !debugging {
        return Vec::new();
    }
    (0..3u8)
        .map(|axis| {
            if axis as usize >= m.kernel.grid.len() {
                return i32c(0);
            }
            let found = m.vars.iter().position(|v| v.kind == VarKind::BlockIdx(axis));
            let var = match found {
                Some(i) => VarId(i as u32),
                None => m.add_var(["bx", "by", "bz"][axis as usize], VarKind::BlockIdx(axis), DType::I32),
            };
            Expr::var(var, m.var(var).dtype)
        })
        .collect()
}

impl Lowerer {
    /// `blockIdx == block` (missing trailing coordinates are 0), or None for every block.
    fn block_filter(&self, block: Option<&[i64]>) -> Option<Expr> {
        let block = block?;
        let mut cond = None;
        for axis in 0..self.m.kernel.grid.len().min(3) {
            let want = block.get(axis).copied().unwrap_or(0);
            let have = self.block_coords[axis].clone();
            let dt = have.dtype();
            cond = and(cond, Expr::binary(BinOp::Eq, have, Expr::int_of(want, dt)));
        }
        cond
    }

    /// `body` where `cond` holds (always when None).
    fn only_if(cond: Option<Expr>, body: Vec<Stmt>, loc: Loc) -> Vec<Stmt> {
        match cond {
            Some(c) => vec![Stmt::If { cond: c, then: body, otherwise: vec![], loc }],
            None => body,
        }
    }

    fn is_thread0(&self) -> Expr {
        Expr::binary(BinOp::Eq, self.tid(), i32c(0))
    }

    /// ` (i=%d, j=%d)` and its arguments: a parallel iteration's loop indices.
    fn iteration(&self, vars: &[VarId], index: &[Expr]) -> (String, Vec<Expr>) {
        let names: Vec<String> =
            vars.iter().map(|v| format!("{}=%d", literal(&self.m.var(*v).name))).collect();
        (names.join(", "), index.to_vec())
    }

    /// `T.print` outside parallel loops: thread 0 prints a value or a tile; a fragment is
    /// printed by the threads holding it.
    pub(super) fn print_once(
        &mut self,
        what: Printed,
        msg: &str,
        block: Option<&[i64]>,
        loc: Loc,
    ) -> Vec<Stmt> {
        let only = self.block_filter(block);
        match what {
            Printed::Value(value) => {
                let format = format!("{}: {}\n", prefix(msg), printf_conversion(value.dtype()));
                let mut args = self.block_coords.clone();
                args.push(value);
                let body = self.guard_globals(vec![Stmt::inst(inst::Printf { format, args })]);
                let who = match only {
                    Some(c) => and(Some(self.is_thread0()), c),
                    None => Some(self.is_thread0()),
                };
                Self::only_if(who, body, loc)
            }
            Printed::Tile(r) => {
                let rr = match resolve_region(&self.m, &r, None) {
                    Ok(rr) => rr,
                    Err(d) => {
                        self.diags.push(d);
                        return vec![];
                    }
                };
                let b = self.m.buffer(rr.buf).clone();
                let region = if b.fixed_shape().is_some_and(|s| rr.extents == s) {
                    String::new()
                } else {
                    format!(", region of shape {:?}", rr.shape())
                };
                let header = Stmt::inst(inst::Printf {
                    format: format!(
                        "{}: {} {} {}{}{region}\n",
                        prefix(msg),
                        literal(&b.name),
                        b.scope.name(),
                        b.dtype,
                        tile_ir::verify::shape_text(&self.m, &b.shape)
                    ),
                    args: self.block_coords.clone(),
                });
                let body = if b.scope == Scope::Fragment {
                    let mut body = Self::only_if(Some(self.is_thread0()), vec![header], loc);
                    body.extend(self.print_fragment(rr.buf, msg, loc));
                    body
                } else {
                    let mut lines = vec![header];
                    lines.extend(self.print_rows(&rr, msg));
                    Self::only_if(Some(self.is_thread0()), lines, loc)
                };
                Self::only_if(only, body, loc)
            }
        }
    }

    /// A shared, global or local tile from one thread: loops over all but the last
    /// dimension, up to [`VALUES_PER_LINE`] elements of the last one per line.
    fn print_rows(&mut self, r: &ResolvedRegion, msg: &str) -> Vec<Stmt> {
        let b = self.m.buffer(r.buf).clone();
        let rank = r.extents.len();
        let mut index = Vec::new();
        let mut loops = Vec::new();
        for d in 0..rank - 1 {
            let start = r.starts[d].clone();
            if r.extents[d] == 1 {
                index.push(start);
                continue;
            }
            let v = self.m.add_var(&format!("r{d}"), VarKind::Loop, DType::I32);
            loops.push((v, r.extents[d]));
            index.push(simplify(add(start.clone(), Expr::cast(Expr::var(v, DType::I32), start.dtype()))));
        }
        let last = r.starts[rank - 1].clone();
        let dt = last.dtype();
        let at = |k: i64| simplify(add(last.clone(), Expr::int_of(k, dt)));
        let mut lines = Vec::new();
        let extent = r.extents[rank - 1];
        for first in (0..extent).step_by(VALUES_PER_LINE as usize) {
            let end = (first + VALUES_PER_LINE).min(extent);
            let mut coords: Vec<String> = index.iter().map(|i| printf_conversion(i.dtype()).into()).collect();
            coords.push(format!("{}:{}", printf_conversion(dt), printf_conversion(dt)));
            let values = vec![printf_conversion(b.dtype); (end - first) as usize];
            let format = format!(
                "{}: {}[{}] = {}\n",
                prefix(msg),
                literal(&b.name),
                coords.join(", "),
                values.join(" ")
            );
            let mut args = self.block_coords.clone();
            args.extend(index.iter().cloned());
            args.push(at(first));
            args.push(at(end));
            for k in first..end {
                let mut idx = index.clone();
                idx.push(at(k));
                args.push(Expr::load(r.buf, idx, b.dtype));
            }
            lines.push(Stmt::inst(inst::Printf { format, args }));
        }
        let mut body = self.guard_globals(lines);
        for (v, n) in loops.into_iter().rev() {
            body = vec![Stmt::For {
                var: v,
                start: i32c(0),
                extent: i32c(n),
                kind: ForKind::Serial,
                body,
                loc: Loc::UNKNOWN,
            }];
        }
        body
    }

    /// A fragment, one element per line, printed by the (first) thread holding it.
    fn print_fragment(&mut self, buf: BufferId, msg: &str, loc: Loc) -> Vec<Stmt> {
        let b = self.m.buffer(buf).clone();
        let Some(l) = b.layout.clone() else {
            self.diags.push(Diagnostic::bug(format!("fragment '{}' has no layout", b.name)));
            return vec![];
        };
        let n = l.dims.len();
        let width = l.vector_width();
        let format = format!(
            "{}: {}[{}] = {}\n",
            prefix(msg),
            literal(&b.name),
            vec!["%d"; n].join(", "),
            printf_conversion(b.dtype)
        );
        let coords = self.block_coords.clone();
        let code = self.for_each_chunk(&l, &mut |lw, values, base| {
            let lane_var = lw.m.add_var("e", VarKind::Loop, DType::I32);
            let el = element_at(values, base, lane_var, width);
            let slot = lw.slot(buf, &(0..n).collect::<Vec<_>>(), &el);
            let mut args = coords.clone();
            args.extend(el.index.iter().cloned());
            args.push(Expr::load(buf, vec![slot], b.dtype));
            let line = Stmt::inst(inst::Printf { format: format.clone(), args });
            if width > 1 {
                vec![Stmt::For {
                    var: lane_var,
                    start: i32c(0),
                    extent: i32c(width),
                    kind: ForKind::Unroll,
                    body: vec![line],
                    loc,
                }]
            } else {
                vec![substitute_stmt(line, lane_var, &i32c(0))]
            }
        });
        // replicated elements: the first holder prints
        let mut first = None;
        for &(threads, stride) in &l.replicated {
            let bits = Expr::binary(
                BinOp::FloorMod,
                Expr::binary(BinOp::FloorDiv, self.tid(), i32c(stride)),
                i32c(threads),
            );
            first = and(first, Expr::binary(BinOp::Eq, simplify(bits), i32c(0)));
        }
        Self::only_if(first, code, loc)
    }

    /// `T.device_assert` outside parallel loops: thread 0 checks it, once per block.
    pub(super) fn assert_once(&mut self, cond: Expr, msg: &str, loc: Loc) -> Vec<Stmt> {
        let fail = self.assert_failure(msg, "", vec![], loc);
        let failed = and(Some(self.is_thread0()), Expr::unary(UnOp::Not, cond)).expect("a condition");
        self.guard_globals(vec![Stmt::If { cond: failed, then: fail, otherwise: vec![], loc }])
    }

    /// The message and trap of a failed assert; `iteration` names the parallel indices.
    fn assert_failure(&self, msg: &str, iteration: &str, index: Vec<Expr>, loc: Loc) -> Vec<Stmt> {
        let at = self.m.sources.short(loc).unwrap_or_else(|| "<unknown>".into());
        let what = if msg.is_empty() { String::new() } else { format!(": {}", literal(msg)) };
        let iteration = if iteration.is_empty() { String::new() } else { format!("; {iteration}") };
        let format = format!(
            "{}: device assert failed{what} (block (%d, %d, %d), thread %d{iteration})\n",
            literal(&at)
        );
        let mut args = self.block_coords.clone();
        args.push(self.tid());
        args.extend(index);
        vec![Stmt::inst(inst::Printf { format, args }), Stmt::inst(inst::Trap)]
    }

    /// `T.print` of a value in one iteration of a parallel loop.
    pub(super) fn print_element(
        &self,
        value: Expr,
        msg: &str,
        block: Option<&[i64]>,
        vars: &[VarId],
        index: &[Expr],
        loc: Loc,
    ) -> Stmt {
        let (names, indices) = self.iteration(vars, index);
        let format = format!("{} ({names}): {}\n", prefix(msg), printf_conversion(value.dtype()));
        let mut args = self.block_coords.clone();
        args.extend(indices);
        args.push(value);
        let printf = Stmt::inst(inst::Printf { format, args });
        match self.block_filter(block) {
            Some(c) => Stmt::If { cond: c, then: vec![printf], otherwise: vec![], loc },
            None => printf,
        }
    }

    /// `T.device_assert` in one iteration of a parallel loop.
    pub(super) fn assert_element(
        &self,
        cond: Expr,
        msg: &str,
        vars: &[VarId],
        index: &[Expr],
        loc: Loc,
    ) -> Stmt {
        let (names, args) = self.iteration(vars, index);
        let fail = self.assert_failure(msg, &names, args, loc);
        Stmt::If { cond: Expr::unary(UnOp::Not, cond), then: fail, otherwise: vec![], loc }
    }
}
