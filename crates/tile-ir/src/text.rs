//! Reading the text form of the IR (what [`crate::print`] writes) back into a [`Module`],
//! at both levels, so that tests and filetests can state IR directly.
//!
//! The contract: `parse_text(&print_module_bare(m)) == without_locations(m)` for every
//! module the pipeline makes — every field a pass reads comes back: buffers with their
//! scope, shape, shared offset, swizzle and fragment layout; variables with their kinds,
//! dtypes and ids; copies' and gemms' chosen instructions, gemm stages, pipelined loops,
//! `async` blocks, `let`s, shuffles, comments and every thread-level instruction. **Source
//! locations are outside the contract**: the bare form has none, and what `print_module`
//! writes (`// kernels.py:42` after a statement) is a comment to this parser, so a parsed
//! module's locations are all unknown and its source table is empty. (A location in the
//! text would have to carry the source table — file, line text — to be of use to a
//! diagnostic; a pass's output does not depend on it beyond the comments lowering writes,
//! which are kept as text.)
//!
//! ```text
//! kernel matmul(A: float16[1000, 1000], %n: int32) blocks(%bx, %by) grid(8, 8) threads=128 level=tile {
//!   vars %bx: block_idx.x, %by: block_idx.y, %tid: thread_idx, %t0: temp int64, …   (only when needed, see below)
//!   shared A_s: float16[3, 128, 32] at smem+0 swizzle<3,4,3>
//!   fragment acc: float32[128, 128] layout(128 threads: (8,2,4,2):(t4,r2,r32,t64), (2,4,8,2):(r1,t1,r4,t32))
//!   local acc_v: float32[128] layout([128, 128], 128 threads: …)
//!   // a full-line comment inside the body is a `Stmt::Comment`
//!   fill acc[], 0.0:float32
//!   pipelined(stages=3) %ko in 0..+32 { … }
//!   copy A[mul(%by, 128):+, mul(%ko, 32):+] -> A_s[] pad=0.0:float16 by cp.async
//!   gemm A_s[floormod(%ko, 3)] x B_s^T -> acc policy=square clear_accum=false by mma.m16n8k16.f32.f16.f16.f32 warps=2x2 a=ldmatrix b=ldmatrix
//!   parallel (%i, %j) in [128, 128] layout(…) { C[%i, %j] = cast<float16>(acc[%i, %j]) }
//!   let %lane = floormod(%tid, 32)
//!   ldmatrix.x4 A_frag[mul(%mi, 8)..] <- A_s[0, %lane, 0]     (an instruction: its `text`)
//!   line                                                       (a `SourceLine`)
//! }
//! ```
//!
//! - Names: `%name` variables, bare names buffers; a name printed as `x.1` because `x` was
//!   taken is read back as `x` (the printer's suffix, undone; user and compiler names never
//!   hold a dot).
//! - Variables are numbered in the order the text defines them — scalar parameters, block
//!   indices (axis by position), then loop and `let` variables where the body first binds
//!   them (loops `int32`, a `let` the dtype of its value) — unless a `vars` table comes
//!   first: its entries (`%name: kind [dtype]`, kinds `block_idx.{x,y,z}`, `thread_idx`,
//!   `loop`, `param`, `temp`; `int32` unless said) are numbered first, in order. The
//!   printer writes the table exactly when definitions alone would not give the ids, kinds
//!   and dtypes (thread-level IR, with `%tid` and variables a lowering left unused).
//! - Buffers: tensor parameters in parameter order, then the declarations in order; a
//!   `global` declaration is a scratch buffer (`T.alloc_global`, [`Module::scratch`]), of
//!   fixed shape in the text.
//! - Expressions: `3` is an `int32`, `3:int64` and `1.5:float32` are typed (a literal with
//!   `.`, an exponent, `inf` or `NaN` is a float constant); operators by name (`add(a, b)`,
//!   `exp(a)`, `cast<float16>(a)`, `select(c, a, b)`, `shfl_xor(a, 16)`); a load is
//!   `buf[i, j]`, with `buf[i, j else v]` for the value read past a global tensor's edge.
//! - Thread-level instructions are read by their own `parse` in [`crate::inst`], chosen by
//!   the statement's first word (its mnemonic).
//! - `//` after a statement on its line is a comment and ignored, as are full-line comments
//!   before `kernel`, among the declarations and after the kernel's closing brace.

use crate::diag::{Loc, SourceTable};
use crate::inst::{Inst, Instruction, TextReader};
use crate::ir::*;
use crate::layout::{Digit, FragmentLayout, Source};
use crate::target::{CopyAtom, MmaAtom};
use crate::types::{DType, Scope};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Var(String),
    Num(String),
    /// A string literal as the printer writes it (Rust's escapes), unescaped.
    Str(String),
    Punct(&'static str),
    /// A line that is a `//` comment, without the `// `.
    Comment(String),
}

/// Longest first where one is a prefix of another.
const PUNCTS: &[&str] = &[
    "->", "<-", "..+", "..", ":+", "+=", "+", "^T", "(", ")", "[", "]", "{", "}", ",", ":", ";", "=", "<",
    ">", "*", "@",
];

fn lex(text: &str) -> Result<Vec<(Tok, usize)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        if let Some(comment) = line.trim_start().strip_prefix("//") {
            let comment = comment.strip_prefix(' ').unwrap_or(comment);
            out.push((Tok::Comment(comment.to_string()), line_no));
            continue;
        }
        lex_line(line, line_no, &mut out)?;
    }
    Ok(out)
}

fn lex_line(line: &str, line_no: usize, out: &mut Vec<(Tok, usize)>) -> Result<(), String> {
    // a dot continues a name or number unless it starts `..` (`%t0..`, `0..+32`)
    let continues =
        |rest: &str, c: char| c.is_alphanumeric() || c == '_' || c == '.' && !rest.starts_with("..");
    let mut i = 0;
    while let Some(c) = line[i..].chars().next() {
        let rest = &line[i..];
        if c.is_whitespace() {
            i += c.len_utf8();
            continue;
        }
        if rest.starts_with("//") {
            break; // a comment after a statement (strings are lexed whole, so outside one)
        }
        let word_end = |from: usize| {
            let mut j = from;
            while let Some(d) = line[j..].chars().next() {
                if !continues(&line[j..], d) {
                    break;
                }
                j += d.len_utf8();
            }
            j
        };
        if c == '"' {
            let (text, end) = string_literal(line, i).map_err(|e| format!("line {line_no}: {e}"))?;
            out.push((Tok::Str(text), line_no));
            i = end;
        } else if c == '%' {
            let end = word_end(i + 1);
            out.push((Tok::Var(line[i + 1..end].to_string()), line_no));
            i = end;
        } else if c.is_ascii_digit()
            || c == '-'
                && (rest[1..].starts_with(|d: char| d.is_ascii_digit()) || rest[1..].starts_with("inf"))
        {
            // numbers, with exponents (`1e-5`) and `2x2` (a warp grid)
            let mut j = i + 1;
            while let Some(d) = line[j..].chars().next() {
                let exp_sign = (d == '-' || d == '+') && line[..j].ends_with(['e', 'E']);
                if continues(&line[j..], d) || exp_sign {
                    j += d.len_utf8();
                } else {
                    break;
                }
            }
            out.push((Tok::Num(line[i..j].to_string()), line_no));
            i = j;
        } else if c.is_alphabetic() || c == '_' {
            let end = word_end(i);
            let word = &line[i..end];
            // `inf`/`NaN` constants are numbers
            let tok =
                if matches!(word, "inf" | "NaN") { Tok::Num(word.into()) } else { Tok::Ident(word.into()) };
            out.push((tok, line_no));
            i = end;
        } else if let Some(p) = PUNCTS.iter().find(|p| rest.starts_with(**p)) {
            out.push((Tok::Punct(p), line_no));
            i += p.len();
        } else {
            return Err(format!("line {line_no}: unexpected character {c:?}"));
        }
    }
    Ok(())
}

/// The string literal starting at the quote `line[start]`, unescaping what Rust's `{:?}`
/// writes; returns the text and the index after the closing quote.
fn string_literal(line: &str, start: usize) -> Result<(String, usize), String> {
    let mut out = String::new();
    let mut chars = line[start + 1..].char_indices();
    while let Some((k, c)) = chars.next() {
        match c {
            '"' => return Ok((out, start + 1 + k + 1)),
            '\\' => match chars.next().map(|(_, e)| e) {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some('0') => out.push('\0'),
                Some(e @ ('\\' | '"' | '\'')) => out.push(e),
                Some('u') => {
                    let rest = &line[start + 1 + k + 2..];
                    let close = rest.find('}').ok_or("unterminated \\u{...} escape")?;
                    let code = rest
                        .strip_prefix('{')
                        .and_then(|h| u32::from_str_radix(&h[..close - 1], 16).ok())
                        .and_then(char::from_u32)
                        .ok_or("bad \\u{...} escape")?;
                    out.push(code);
                    for _ in 0..=close {
                        chars.next();
                    }
                }
                other => return Err(format!("unknown escape \\{}", other.unwrap_or(' '))),
            },
            c => out.push(c),
        }
    }
    Err("unterminated string".into())
}

/// The name the printer made `display` from, given the names printed before it: `x.2` is
/// `x` when `x` and `x.1` came earlier (the printer's suffixes for repeated names).
fn stored_name(display: &str, earlier: &BTreeSet<String>) -> String {
    if let Some((base, suffix)) = display.rsplit_once('.') {
        if let Ok(k) = suffix.parse::<u32>() {
            let printed_so = k >= 1 && k.to_string() == suffix;
            if printed_so
                && earlier.contains(base)
                && (1..k).all(|j| earlier.contains(&format!("{base}.{j}")))
            {
                return base.to_string();
            }
        }
    }
    display.to_string()
}

/// A header tensor's dimensions, and its symbolic ones by name: (dimension, name).
type HeaderShape = (Vec<Dim>, Vec<(usize, String)>);

/// A kernel parameter as the header writes it, before its variable exists.
enum HeaderParam {
    /// The buffer, and its symbolic dimensions: (dimension, variable name).
    Tensor(BufferId, Vec<(usize, String)>),
    Scalar(String, DType),
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    m: Module,
    vars: BTreeMap<String, VarId>,
    buffers: BTreeMap<String, BufferId>,
}

type R<T> = Result<T, String>;

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(t, _)| t)
    }
    fn peek_at(&self, k: usize) -> Option<&Tok> {
        self.toks.get(self.pos + k).map(|(t, _)| t)
    }
    fn line(&self) -> usize {
        self.toks.get(self.pos).or(self.toks.last()).map(|(_, l)| *l).unwrap_or(0)
    }
    fn err<T>(&self, what: &str) -> R<T> {
        let found = match self.peek() {
            None => "the end".to_string(),
            Some(Tok::Comment(_)) => "a comment line".to_string(),
            Some(Tok::Ident(s) | Tok::Num(s)) => format!("'{s}'"),
            Some(Tok::Var(s)) => format!("'%{s}'"),
            Some(Tok::Str(s)) => format!("{s:?}"),
            Some(Tok::Punct(p)) => format!("'{p}'"),
        };
        Err(format!("line {}: expected {what}, found {found}", self.line()))
    }
    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).map(|(t, _)| t.clone());
        self.pos += 1;
        t
    }
    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Some(Tok::Ident(s)) if s == w)
    }
    fn ident(&mut self) -> R<String> {
        match self.peek() {
            Some(Tok::Ident(s)) => {
                let s = s.clone();
                self.pos += 1;
                Ok(s)
            }
            _ => self.err("a name"),
        }
    }
    fn var_name(&mut self) -> R<String> {
        match self.peek() {
            Some(Tok::Var(s)) => {
                let s = s.clone();
                self.pos += 1;
                Ok(s)
            }
            _ => self.err("a %variable"),
        }
    }
    fn dtype(&mut self) -> R<DType> {
        let name = self.ident()?;
        DType::parse(&name).ok_or_else(|| format!("line {}: unknown dtype {name}", self.line()))
    }
    /// `[%M, 64]`: numbers, and symbolic sizes by name (resolved by the caller).
    fn tensor_shape(&mut self) -> R<HeaderShape> {
        self.punct("[")?;
        let (mut dims, mut sizes) = (Vec::new(), Vec::new());
        while !self.is_punct("]") {
            if matches!(self.peek(), Some(Tok::Var(_))) {
                sizes.push((dims.len(), self.var_name()?));
                dims.push(Dim::Fixed(1)); // until its variable exists
            } else {
                dims.push(Dim::Fixed(self.int()?));
            }
            if !self.is_punct("]") {
                self.punct(",")?;
            }
        }
        self.punct("]")?;
        Ok((dims, sizes))
    }
    /// `[0, -1, 2]`: a manual schedule's entries.
    fn signed_list(&mut self) -> R<Vec<i32>> {
        self.punct("[")?;
        let mut v = Vec::new();
        while !self.is_punct("]") {
            let negative = self.is_punct("-");
            if negative {
                self.punct("-")?;
            }
            let x = self.int()? as i32;
            v.push(if negative { -x } else { x });
            if !self.is_punct("]") {
                self.punct(",")?;
            }
        }
        self.punct("]")?;
        Ok(v)
    }
    fn shape(&mut self) -> R<Vec<i64>> {
        self.punct("[")?;
        let mut v = Vec::new();
        while !self.is_punct("]") {
            v.push(self.int()?);
            if !self.is_punct("]") {
                self.punct(",")?;
            }
        }
        self.punct("]")?;
        Ok(v)
    }
    /// `key=value`, the value a word or a number.
    fn kv(&mut self, key: &str) -> R<String> {
        self.keyword(key)?;
        self.punct("=")?;
        match self.peek() {
            Some(Tok::Ident(s) | Tok::Num(s)) => {
                let s = s.clone();
                self.pos += 1;
                Ok(s)
            }
            _ => self.err(&format!("a value for {key}")),
        }
    }
    fn kv_parsed<T: std::str::FromStr>(&mut self, key: &str) -> R<T> {
        let v = self.kv(key)?;
        v.parse().map_err(|_| format!("line {}: bad {key} {v}", self.line()))
    }

    /// The variable the text names `display`, made on its first definition.
    fn define_var(&mut self, display: String, kind: VarKind, dtype: DType) -> VarId {
        if let Some(v) = self.vars.get(&display) {
            return *v;
        }
        let earlier: BTreeSet<String> = self.vars.keys().cloned().collect();
        let id = self.m.add_var(&stored_name(&display, &earlier), kind, dtype);
        self.vars.insert(display, id);
        id
    }
    fn add_buffer(&mut self, display: String, scope: Scope, dtype: DType, shape: Vec<Dim>) -> BufferId {
        let earlier: BTreeSet<String> = self.buffers.keys().cloned().collect();
        let id = self.m.add_buffer(Buffer {
            name: stored_name(&display, &earlier),
            scope,
            dtype,
            shape,
            loc: Loc::UNKNOWN,
            layout: None,
            shared_offset: None,
            alias_of: None,
            panel: None,
            swizzle: None,
        });
        self.buffers.insert(display, id);
        id
    }

    fn expr_leaf_number(&mut self, s: String) -> R<Expr> {
        // `3:int64` is a typed constant; `0:64` is a slice
        let typed = matches!(self.peek_at(1), Some(Tok::Ident(t)) if DType::parse(t).is_some());
        let dtype = if self.is_punct(":") && typed {
            self.punct(":")?;
            self.dtype()?
        } else {
            DType::I32
        };
        let float_literal = s.contains(['.', 'e', 'E']) || s.contains("inf") || s == "NaN";
        let value = if float_literal {
            ConstValue::Float(s.parse().map_err(|_| format!("line {}: bad number {s}", self.line()))?)
        } else {
            // a uint64 from 2^63 up is held as its bit pattern
            let value = s.parse::<i64>().or_else(|_| s.parse::<u64>().map(|u| u as i64));
            ConstValue::Int(value.map_err(|_| format!("line {}: bad integer {s}", self.line()))?)
        };
        Ok(Expr::Const { value, dtype })
    }

    fn operands<const N: usize>(&mut self, name: &str) -> R<[Expr; N]> {
        self.punct("(")?;
        let args = self.exprs_until(")")?;
        args.try_into().map_err(|_| format!("line {}: {name} takes {N} operand(s)", self.line()))
    }

    fn expr_named(&mut self, name: String, line: usize) -> R<Expr> {
        match name.as_str() {
            "cast" => {
                self.punct("<")?;
                let dtype = self.dtype()?;
                self.punct(">")?;
                let [a] = self.operands::<1>("cast")?;
                return Ok(Expr::Cast { a: Box::new(a), dtype });
            }
            "select" => {
                let [c, a, b] = self.operands("select")?;
                return Ok(Expr::select(c, a, b));
            }
            "shfl_xor" => {
                let [a, mask] = self.operands("shfl_xor")?;
                let mask = mask
                    .as_int()
                    .and_then(|m| u32::try_from(m).ok())
                    .ok_or_else(|| format!("line {}: shfl_xor takes a constant lane mask", self.line()))?;
                let dtype = a.dtype();
                return Ok(Expr::ShflXor { a: Box::new(a), mask, dtype });
            }
            _ => {}
        }
        if let Some(op) = BinOp::ALL.iter().find(|o| o.name() == name) {
            let [a, b] = self.operands(&name)?;
            return Ok(Expr::binary(*op, a, b));
        }
        if let Some(op) = UnOp::ALL.iter().find(|o| o.name() == name) {
            let [a] = self.operands(&name)?;
            return Ok(Expr::unary(*op, a));
        }
        let buf = *self
            .buffers
            .get(&name)
            .ok_or_else(|| format!("line {line}: unknown buffer or operator {name}"))?;
        self.punct("[")?;
        let mut idx = Vec::new();
        let mut oob = None;
        while !self.is_punct("]") {
            if self.is_word("else") {
                self.pos += 1;
                oob = Some(Box::new(self.expr()?));
                break;
            }
            idx.push(self.expr()?);
            if !self.is_punct("]") && !self.is_word("else") {
                self.punct(",")?;
            }
        }
        self.punct("]")?;
        Ok(Expr::Load { buf, idx, dtype: self.m.buffer(buf).dtype, loc: Loc::UNKNOWN, oob })
    }

    fn region(&mut self) -> R<Region> {
        let buf = self.buffer()?;
        let dims = self.region_dims()?;
        Ok(Region { buf, dims, loc: Loc::UNKNOWN })
    }

    /// `[i, a:b, s:+]`: the dimensions of a region.
    fn region_dims(&mut self) -> R<Vec<RegionDim>> {
        self.punct("[")?;
        let mut dims = Vec::new();
        while !self.is_punct("]") {
            let e = self.expr()?;
            if self.is_punct(":+") {
                self.punct(":+")?;
                dims.push(RegionDim::Origin(e));
            } else if self.is_punct(":") {
                self.punct(":")?;
                let stop = self.expr()?;
                dims.push(RegionDim::Slice { start: e, stop });
            } else {
                dims.push(RegionDim::Index(e));
            }
            if !self.is_punct("]") {
                self.punct(",")?;
            }
        }
        self.punct("]")?;
        Ok(dims)
    }

    /// `(a,b,c)` of integers or of words.
    fn tuple<T>(&mut self, mut item: impl FnMut(&mut Parser) -> R<T>) -> R<Vec<T>> {
        self.punct("(")?;
        let mut v = Vec::new();
        while !self.is_punct(")") {
            v.push(item(self)?);
            if !self.is_punct(")") {
                self.punct(",")?;
            }
        }
        self.punct(")")?;
        Ok(v)
    }

    /// `tS` / `rS` (see [`crate::print::layout_text`]).
    fn digit_source(&mut self) -> R<Source> {
        let word = self.ident()?;
        let stride = |s: &str| s.parse::<i64>().ok();
        let source = if let Some(s) = word.strip_prefix('t') {
            stride(s).map(Source::Thread)
        } else {
            word.strip_prefix('r').and_then(stride).map(Source::Slot)
        };
        source.ok_or_else(|| {
            format!("line {}: a digit comes from tN (threads) or rN (registers), not {word}", self.line())
        })
    }

    /// `layout([extents,] N threads: dims[; replicated sizes:sources])`; the extents are
    /// `shape` when not written.
    fn layout(&mut self, shape: &[i64]) -> R<FragmentLayout> {
        self.keyword("layout")?;
        self.punct("(")?;
        let extents = if self.is_punct("[") {
            let e = self.shape()?;
            self.punct(",")?;
            e
        } else {
            shape.to_vec()
        };
        let active_threads = self.int()?;
        self.keyword("threads")?;
        self.punct(":")?;
        let mut dims = Vec::new();
        loop {
            let sizes = self.tuple(Parser::int)?;
            self.punct(":")?;
            let sources = self.tuple(Parser::digit_source)?;
            if sizes.len() != sources.len() {
                return Err(format!(
                    "line {}: {} digit sizes but {} sources",
                    self.line(),
                    sizes.len(),
                    sources.len()
                ));
            }
            let mut step = 1;
            let mut digits = Vec::new();
            for (size, source) in sizes.into_iter().zip(sources) {
                digits.push(Digit { size, step, source });
                step *= size;
            }
            dims.push(digits);
            if !self.is_punct(",") {
                break;
            }
            self.punct(",")?;
        }
        let mut replicated = Vec::new();
        if self.is_punct(";") {
            self.punct(";")?;
            self.keyword("replicated")?;
            let sizes = self.tuple(Parser::int)?;
            self.punct(":")?;
            let sources = self.tuple(Parser::digit_source)?;
            for (size, source) in sizes.into_iter().zip(sources) {
                match source {
                    Source::Thread(stride) => replicated.push((size, stride)),
                    Source::Slot(_) => {
                        return Err(format!("line {}: replicas are threads (tN)", self.line()))
                    }
                }
            }
        }
        self.punct(")")?;
        if dims.len() != extents.len() {
            return Err(format!(
                "line {}: {} layout dimensions for extents {extents:?}",
                self.line(),
                dims.len()
            ));
        }
        Ok(FragmentLayout { extents, dims, replicated, active_threads })
    }

    fn block(&mut self) -> R<Vec<Stmt>> {
        self.punct("{")?;
        let mut out = Vec::new();
        while !self.is_punct("}") {
            out.push(self.stmt()?);
        }
        self.punct("}")?;
        Ok(out)
    }

    fn loop_var(&mut self) -> R<String> {
        self.var_name().or_else(|_| self.err("a loop variable"))
    }

    fn stmt(&mut self) -> R<Stmt> {
        let loc = Loc::UNKNOWN;
        let word = match self.peek() {
            Some(Tok::Ident(w)) => w.clone(),
            Some(Tok::Comment(c)) => {
                let c = c.clone();
                self.pos += 1;
                return Ok(Stmt::Comment(c));
            }
            _ => return self.err("a statement"),
        };
        if matches!(self.peek_at(1), Some(Tok::Punct("["))) {
            // `buf[i] = value` (any name, `sync` and `copy` included, followed by `[`)
            let buf = self.buffer()?;
            self.punct("[")?;
            let idx = self.exprs_until("]")?;
            self.punct("=")?;
            return Ok(Stmt::Store { buf, idx, value: self.expr()?, loc });
        }
        self.pos += 1;
        match word.as_str() {
            "copy" => {
                let src = self.region()?;
                self.punct("->")?;
                let dst = self.region()?;
                let pad = if self.is_word("pad") {
                    self.keyword("pad")?;
                    self.punct("=")?;
                    Some(self.expr()?)
                } else {
                    None
                };
                let atomic = match self.peek().and_then(|t| match t {
                    Tok::Ident(w) => AtomicMode::from_text(w),
                    _ => None,
                }) {
                    Some(mode) => {
                        self.pos += 1;
                        Some(mode)
                    }
                    None => None,
                };
                let inst = if self.is_word("by") {
                    self.pos += 1;
                    let how = self.ident()?;
                    Some(match how.as_str() {
                        "threads" => CopyInst::Threads,
                        "cp.async" => CopyInst::CpAsync,
                        "tma" => CopyInst::Tma,
                        "staged_tma" => CopyInst::StagedTma,
                        "staged" => CopyInst::Staged { stmatrix: None },
                        s if s.starts_with("staged.") => {
                            let atom = CopyAtom::by_name(&s["staged.".len()..])
                                .filter(|a| matches!(a.kind, crate::target::CopyKind::Stmatrix { .. }));
                            match atom {
                                Some(a) => CopyInst::Staged { stmatrix: Some(a) },
                                None => {
                                    return Err(format!("line {}: no stmatrix atom named {s}", self.line()))
                                }
                            }
                        }
                        _ => {
                            return Err(format!(
                                "line {}: a copy is by threads, cp.async or staged, not {how}",
                                self.line()
                            ))
                        }
                    })
                } else {
                    None
                };
                Ok(Stmt::Copy(CopyOp { src, dst, pad, loc, inst, atomic }))
            }
            "fill" => {
                let dst = self.region()?;
                self.punct(",")?;
                Ok(Stmt::Fill { dst, value: self.expr()?, loc })
            }
            "barrier_init" | "barrier_arrive" | "barrier_expect_tx" | "barrier_wait" | "tma_copy" => {
                let copy = if word == "tma_copy" {
                    let src = self.region()?;
                    self.punct("->")?;
                    let dst = self.region()?;
                    self.keyword("on")?;
                    Some(CopyOp { src, dst, pad: None, loc, inst: Some(CopyInst::Tma), atomic: None })
                } else {
                    None
                };
                let bar = self.buffer()?;
                self.punct("[")?;
                let idx = self.expr()?;
                self.punct("]")?;
                let named = |p: &mut Self, key: &str| -> Result<Expr, String> {
                    p.keyword(key)?;
                    p.punct("=")?;
                    p.expr()
                };
                let kind = match word.as_str() {
                    "barrier_init" => {
                        let count =
                            named(self, "count")?.as_int().filter(|c| (1..1 << 20).contains(c)).ok_or_else(
                                || format!("line {}: an arrive count is a positive integer", self.line()),
                            )?;
                        BarrierKind::Init { count: count as u32 }
                    }
                    "barrier_arrive" => BarrierKind::Arrive,
                    "barrier_expect_tx" => BarrierKind::ExpectTx { bytes: named(self, "bytes")? },
                    "barrier_wait" => BarrierKind::Wait { parity: named(self, "parity")? },
                    _ => BarrierKind::TmaLoad { copy: Box::new(copy.expect("parsed above")) },
                };
                Ok(Stmt::Barrier(BarrierOp { kind, bar, idx, loc }))
            }
            w if AtomicMode::from_text(w).is_some() => {
                let mode = AtomicMode::from_text(w).expect("checked");
                let (buf, idx) = self.element()?;
                self.punct(",")?;
                let value = self.expr()?;
                let prev = if self.is_punct("->") {
                    self.punct("->")?;
                    Some(self.buffer()?)
                } else {
                    None
                };
                Ok(Stmt::Atomic { mode, buf, idx, value, prev, loc })
            }
            w if w.starts_with("reduce_") => {
                let kind = match &w[7..] {
                    "sum" => ReduceKind::Sum,
                    "max" => ReduceKind::Max,
                    "min" => ReduceKind::Min,
                    "absmax" => ReduceKind::AbsMax,
                    k => return Err(format!("line {}: unknown reduction {k}", self.line())),
                };
                let src = self.buffer()?;
                self.punct("->")?;
                let dst = self.buffer()?;
                let dim = self.kv_parsed("dim")?;
                let clear = self.kv("clear")? == "true";
                Ok(Stmt::Reduce(ReduceOp { kind, src, dst, dim, clear, loc }))
            }
            "gemm" => self.gemm(),
            "parallel" => {
                let names = self.tuple(Parser::loop_var)?;
                self.keyword("in")?;
                let extents = self.shape()?;
                let layout = if self.is_word("layout") { Some(self.layout(&extents)?) } else { None };
                let vars = names.into_iter().map(|n| self.define_var(n, VarKind::Loop, DType::I32)).collect();
                let body = self.block()?;
                Ok(Stmt::Parallel { vars, extents, body, loc, layout })
            }
            "for" | "unroll" | "pipelined" => {
                let kind = match word.as_str() {
                    "for" => ForKind::Serial,
                    "unroll" => ForKind::Unroll,
                    _ => {
                        self.punct("(")?;
                        let stages = self.kv_parsed("stages")?;
                        let schedule = if self.is_punct(",") {
                            self.punct(",")?;
                            self.keyword("stage")?;
                            self.punct("=")?;
                            let stage = self.signed_list()?;
                            self.punct(",")?;
                            self.keyword("order")?;
                            self.punct("=")?;
                            let order = self.signed_list()?;
                            self.m.schedules.push(Schedule { stage, order });
                            Some(self.m.schedules.len() as u32 - 1)
                        } else {
                            None
                        };
                        self.punct(")")?;
                        ForKind::Pipelined { stages, schedule }
                    }
                };
                let name = self.loop_var()?;
                self.keyword("in")?;
                let start = self.expr()?;
                self.punct("..+")?;
                let extent = self.expr()?;
                let var = self.define_var(name, VarKind::Loop, DType::I32);
                let body = self.block()?;
                Ok(Stmt::For { var, start, extent, kind, body, loc })
            }
            "if" => {
                let cond = self.expr()?;
                let then = self.block()?;
                let otherwise = if self.is_word("else") {
                    self.pos += 1;
                    self.block()?
                } else {
                    vec![]
                };
                Ok(Stmt::If { cond, then, otherwise, loc })
            }
            "print" => {
                let tile = self.is_word("tile") && matches!(self.peek_at(1), Some(Tok::Ident(_)));
                let what = if tile {
                    self.pos += 1;
                    Printed::Tile(self.region()?)
                } else {
                    Printed::Value(self.expr()?)
                };
                self.punct(",")?;
                let msg = self.string()?;
                // `block=(...)`: a store to a buffer named `block` would read `block[`
                let block = if self.is_word("block") && matches!(self.peek_at(1), Some(Tok::Punct("="))) {
                    self.pos += 2;
                    Some(self.tuple(Parser::int)?)
                } else {
                    None
                };
                Ok(Stmt::Print { what, msg, block, loc })
            }
            "assert" => {
                let cond = self.expr()?;
                self.punct(",")?;
                Ok(Stmt::DeviceAssert { cond, msg: self.string()?, loc })
            }
            "async" => Ok(Stmt::Async { body: self.block()? }),
            "let" => {
                let name = self.var_name()?;
                self.punct("=")?;
                let value = self.expr()?;
                let var = self.define_var(name, VarKind::Temp, value.dtype());
                Ok(Stmt::Let { var, value })
            }
            "line" => Ok(Stmt::SourceLine(Loc::UNKNOWN)),
            op => match Inst::parse(op, self) {
                Some(i) => Ok(Stmt::Inst(i?)),
                None => {
                    self.pos -= 1;
                    self.err("a statement or an instruction")
                }
            },
        }
    }

    /// `gemm A[stage]^T x B -> C policy=… clear_accum=… [by ATOM warps=MxN a=SRC b=SRC]`.
    fn gemm(&mut self) -> R<Stmt> {
        type Operand = (BufferId, Option<Expr>, Vec<RegionDim>, bool);
        let operand = |p: &mut Parser| -> R<Operand> {
            let b = p.buffer()?;
            let stage = if p.is_punct("[") {
                p.punct("[")?;
                let e = p.expr()?;
                p.punct("]")?;
                Some(e)
            } else {
                None
            };
            let view = if p.is_punct("@") {
                p.punct("@")?;
                p.region_dims()?
            } else {
                vec![]
            };
            let t = p.is_punct("^T");
            if t {
                p.punct("^T")?;
            }
            Ok((b, stage, view, t))
        };
        let (a, a_stage, a_view, transpose_a) = operand(self)?;
        self.keyword("x")?;
        let (b, b_stage, b_view, transpose_b) = operand(self)?;
        self.punct("->")?;
        let c = self.buffer()?;
        let policy = match self.kv("policy")?.as_str() {
            "square" => WarpPolicy::Square,
            "full_row" => WarpPolicy::FullRow,
            "full_col" => WarpPolicy::FullCol,
            p => return Err(format!("line {}: unknown policy {p}", self.line())),
        };
        let clear_accum = self.kv("clear_accum")? == "true";
        let inst = if self.is_word("by") {
            self.pos += 1;
            let name = self.ident()?;
            let atom = MmaAtom::by_name(&name)
                .ok_or_else(|| format!("line {}: no mma atom named {name}", self.line()))?;
            let warps = self.kv("warps")?;
            let (warps_m, warps_n) = warps
                .split_once('x')
                .and_then(|(m, n)| Some((m.parse().ok()?, n.parse().ok()?)))
                .ok_or_else(|| format!("line {}: warps=MxN, not {warps}", self.line()))?;
            let source = |p: &mut Parser, key: &str| -> R<OperandSource> {
                let s = p.kv(key)?;
                [
                    OperandSource::Registers,
                    OperandSource::Ldmatrix,
                    OperandSource::Gather,
                    OperandSource::Descriptor,
                ]
                .into_iter()
                .find(|o| o.name() == s)
                .ok_or_else(|| format!("line {}: unknown operand source {s}", p.line()))
            };
            let a = source(self, "a")?;
            let b = source(self, "b")?;
            let (n, in_flight, deferred) = if atom.scope == crate::target::ThreadScope::Warpgroup {
                let n = self.kv("n")?;
                let n: i64 = n.parse().map_err(|_| format!("line {}: n=N, not {n}", self.line()))?;
                let mut word = |w: &str| {
                    let there = self.is_word(w);
                    if there {
                        self.pos += 1;
                    }
                    there
                };
                let in_flight = word("in_flight");
                let deferred = word("deferred");
                (n, in_flight, deferred)
            } else {
                (atom.n, false, false)
            };
            Some(GemmInst { atom, warps_m, warps_n, a, b, n, in_flight, deferred })
        } else {
            None
        };
        Ok(Stmt::Gemm(GemmOp {
            a,
            b,
            c,
            transpose_a,
            transpose_b,
            policy,
            clear_accum,
            loc: Loc::UNKNOWN,
            a_stage,
            b_stage,
            a_view,
            b_view,
            inst,
        }))
    }

    /// `vars %a: kind [dtype], …` (one line of the table).
    fn var_table_line(&mut self) -> R<()> {
        self.keyword("vars")?;
        loop {
            let name = self.var_name()?;
            self.punct(":")?;
            let kind_line = self.line();
            let kind = match self.ident()?.as_str() {
                "block_idx.x" => VarKind::BlockIdx(0),
                "block_idx.y" => VarKind::BlockIdx(1),
                "block_idx.z" => VarKind::BlockIdx(2),
                "launch_idx.x" => VarKind::LaunchIdx(0),
                "launch_idx.y" => VarKind::LaunchIdx(1),
                "launch_idx.z" => VarKind::LaunchIdx(2),
                "launch_dim.x" => VarKind::LaunchDim(0),
                "launch_dim.y" => VarKind::LaunchDim(1),
                "launch_dim.z" => VarKind::LaunchDim(2),
                "thread_idx" => VarKind::ThreadIdx,
                "loop" => VarKind::Loop,
                "param" => VarKind::Param,
                "temp" => VarKind::Temp,
                "size" => VarKind::Size { multiple_of: 1 },
                k => match k.strip_prefix("size.multiple_of.").and_then(|n| n.parse().ok()) {
                    Some(multiple_of) => VarKind::Size { multiple_of },
                    None => return Err(format!("line {kind_line}: unknown variable kind {k}")),
                },
            };
            let dtype_follows = self.line() == kind_line
                && matches!(self.peek(), Some(Tok::Ident(d)) if DType::parse(d).is_some());
            let dtype = if dtype_follows { self.dtype()? } else { DType::I32 };
            if self.vars.contains_key(&name) {
                return Err(format!("line {kind_line}: %{name} is in the table twice"));
            }
            self.define_var(name, kind, dtype);
            if !self.is_punct(",") {
                return Ok(());
            }
            self.punct(",")?;
        }
    }

    /// `scope name: dtype[shape] [at smem+N] [swizzle<b,m,s>] [layout(…)]`.
    /// `tensor_map A box [128, 64] swizzle 128`
    fn tensor_map_declaration(&mut self) -> R<()> {
        let tensor = TextReader::buffer(self)?;
        self.keyword("box")?;
        let box_dims = self.shape()?;
        self.keyword("swizzle")?;
        let swizzle = self.int()?;
        let swizzle = u32::try_from(swizzle).map_err(|_| format!("line {}: bad swizzle", self.line()))?;
        self.m.kernel.tensor_maps.push(TensorMapDesc { tensor, box_dims, swizzle });
        Ok(())
    }

    fn buffer_declaration(&mut self, scope: Scope) -> R<()> {
        let name = self.ident()?;
        self.punct(":")?;
        let dtype = self.dtype()?;
        let shape = self.shape()?;
        let id = self.add_buffer(name, scope, dtype, fixed_dims(&shape));
        if scope == Scope::Global {
            // a global buffer declared in the body is a `T.alloc_global` scratch buffer
            self.m.scratch.push(id);
        }
        if self.is_word("alias_of") {
            self.pos += 1;
            let root = TextReader::buffer(self)?;
            self.m.buffer_mut(id).alias_of = Some(root);
        }
        if self.is_word("at") {
            self.pos += 1;
            let at = self.ident()?;
            if at != "smem" {
                return Err(format!("line {}: expected at smem+N", self.line()));
            }
            self.punct("+")?;
            let offset = self.int()?;
            self.m.buffer_mut(id).shared_offset =
                Some(u64::try_from(offset).map_err(|_| format!("line {}: bad offset", self.line()))?);
        }
        if self.is_word("panels") {
            self.pos += 1;
            self.punct("<")?;
            let p = self.int()?;
            self.punct(">")?;
            self.m.buffer_mut(id).panel = Some(p);
        }
        if self.is_word("swizzle") {
            self.pos += 1;
            self.punct("<")?;
            let bits = self.int()? as u32;
            self.punct(",")?;
            let base = self.int()? as u32;
            self.punct(",")?;
            let shift = self.int()? as u32;
            self.punct(">")?;
            self.m.buffer_mut(id).swizzle = Some(crate::Swizzle::new(bits, base, shift));
        }
        if self.is_word("layout") {
            let layout = self.layout(&shape)?;
            self.m.buffer_mut(id).layout = Some(layout);
        }
        Ok(())
    }

    fn module(&mut self) -> R<()> {
        while matches!(self.peek(), Some(Tok::Comment(_))) {
            self.pos += 1;
        }
        self.keyword("kernel")?;
        self.m.name = self.ident()?;
        // the header's variables are made once the `vars` table (if any) is read
        let mut params = Vec::new();
        self.punct("(")?;
        while !self.is_punct(")") {
            match self.next() {
                Some(Tok::Ident(name)) => {
                    self.punct(":")?;
                    let dtype = self.dtype()?;
                    let (shape, sizes) = self.tensor_shape()?;
                    let buffer = self.add_buffer(name, Scope::Global, dtype, shape);
                    params.push(HeaderParam::Tensor(buffer, sizes));
                }
                Some(Tok::Var(name)) => {
                    self.punct(":")?;
                    params.push(HeaderParam::Scalar(name, self.dtype()?));
                }
                _ => {
                    self.pos -= 1;
                    return self.err("a parameter");
                }
            }
            if !self.is_punct(")") {
                self.punct(",")?;
            }
        }
        self.punct(")")?;
        self.keyword("blocks")?;
        let blocks = self.tuple(Parser::var_name)?;
        self.keyword("grid")?;
        let grid_at = self.pos;
        self.skip_parenthesized()?;
        self.m.kernel.threads = self.kv_parsed("threads")?;
        if self.is_word("user_threads") {
            self.m.kernel.user_threads = Some(self.kv_parsed("user_threads")?);
        }
        if self.is_word("raster_panel") {
            let panel = self.kv_parsed("raster_panel")?;
            let by_rows = self.kv("raster_order")? == "row";
            self.m.kernel.raster = Some(Raster { panel, by_rows });
        }
        if self.is_word("reg_budget") {
            let text = self.kv("reg_budget")?;
            let parts: Vec<&str> = text.split('/').collect();
            let num = |s: &str| {
                s.parse::<u32>().map_err(|_| format!("line {}: reg_budget is P/C[/none]", self.line()))
            };
            if parts.len() < 2 || parts.len() > 3 || (parts.len() == 3 && parts[2] != "none") {
                return Err(format!("line {}: reg_budget is P/C[/none]", self.line()));
            }
            self.m.kernel.reg_budget = Some(RegBudget {
                producer: num(parts[0])?,
                consumer: num(parts[1])?,
                none: parts.len() == 3,
            });
        }
        if self.is_word("cluster_dims") {
            let text = self.kv("cluster_dims")?;
            let dims: Vec<Option<u32>> = text.split('x').map(|d| d.parse::<u32>().ok()).collect();
            match dims[..] {
                [Some(x), Some(y)] => self.m.kernel.cluster = Some([x, y]),
                _ => return Err(format!("line {}: cluster_dims is XxY", self.line())),
            }
        }
        if self.is_word("producers") {
            let producers = self.kv_parsed("producers")?;
            let producer_regs = self.kv_parsed("producer_regs")?;
            let consumer_regs = self.kv_parsed("consumer_regs")?;
            let persistent =
                if self.is_word("persistent") { self.kv_parsed::<u32>("persistent")? == 1 } else { false };
            let pingpong =
                if self.is_word("pingpong") { self.kv_parsed::<u32>("pingpong")? == 1 } else { false };
            let fold = if self.is_word("fold") { self.kv_parsed::<u32>("fold")? == 1 } else { false };
            let cluster = if self.is_word("cluster") {
                let text = self.kv("cluster")?;
                let dims: Vec<u32> = text.split('x').filter_map(|d| d.parse().ok()).collect();
                match dims[..] {
                    [x, y] if x >= 1 && y >= 1 => [x, y],
                    _ => return Err(format!("line {}: cluster is XxY, not {text}", self.line())),
                }
            } else {
                [1, 1]
            };
            self.m.kernel.roles = Some(WarpRoles {
                producers,
                producer_regs,
                consumer_regs,
                persistent,
                pingpong,
                cluster,
                fold,
            });
        }
        self.m.level = match self.kv("level")?.as_str() {
            "tile" => Level::Tile,
            "thread" => Level::Thread,
            l => return Err(format!("line {}: level is tile or thread, not {l}", self.line())),
        };
        self.punct("{")?;
        // declarations: the variable table, then buffers (comment lines among them are
        // notes, not statements: no statement comes before a declaration)
        loop {
            let comments =
                self.toks[self.pos..].iter().take_while(|(t, _)| matches!(t, Tok::Comment(_))).count();
            let at = self.pos + comments;
            let word = |k: usize| self.toks.get(at + k).map(|(t, _)| t);
            let table =
                matches!(word(0), Some(Tok::Ident(w)) if w == "vars") && matches!(word(1), Some(Tok::Var(_)));
            if matches!(word(0), Some(Tok::Ident(w)) if w == "extern_source")
                && matches!(word(1), Some(Tok::Str(_)))
            {
                self.pos = at + 1;
                let text = self.string()?;
                self.m.kernel.extern_sources.push(text);
                continue;
            }
            if matches!(word(0), Some(Tok::Ident(w)) if w == "tensor_map")
                && matches!(word(1), Some(Tok::Ident(_)))
            {
                self.pos = at + 1;
                self.tensor_map_declaration()?;
                continue;
            }
            let scope = match word(0) {
                Some(Tok::Ident(w)) => Scope::parse(w),
                _ => None,
            };
            let buffer = scope.is_some()
                && matches!(word(1), Some(Tok::Ident(_)))
                && matches!(word(2), Some(Tok::Punct(":")));
            if !table && !buffer {
                break;
            }
            self.pos = at;
            match scope {
                Some(scope) if buffer => {
                    self.pos += 1;
                    self.buffer_declaration(scope)?;
                }
                _ => self.var_table_line()?,
            }
        }
        for p in params {
            let param = match p {
                HeaderParam::Tensor(buffer, sizes) => {
                    for (d, name) in sizes {
                        let v = self.define_var(name, VarKind::Size { multiple_of: 1 }, DType::I32);
                        if !matches!(self.m.var(v).kind, VarKind::Size { .. }) {
                            return Err(format!("%{} is a dimension but not a size", self.m.var(v).name));
                        }
                        self.m.buffer_mut(buffer).shape[d] = Dim::Size(v);
                    }
                    Param::Tensor { name: self.m.buffer(buffer).name.clone(), buffer }
                }
                HeaderParam::Scalar(name, dtype) => {
                    let var = self.define_var(name, VarKind::Param, dtype);
                    Param::Scalar { name: self.m.var(var).name.clone(), var }
                }
            };
            self.m.params.push(param);
        }
        for (axis, name) in blocks.into_iter().enumerate() {
            self.define_var(name, VarKind::BlockIdx(axis as u8), DType::I32);
        }
        let body_at = self.pos;
        self.pos = grid_at;
        self.punct("(")?;
        self.m.kernel.grid = self.exprs_until(")")?;
        self.pos = body_at;
        let mut body = Vec::new();
        while !self.is_punct("}") {
            body.push(self.stmt()?);
        }
        self.punct("}")?;
        self.m.kernel.body = body;
        while matches!(self.peek(), Some(Tok::Comment(_))) {
            self.pos += 1;
        }
        if self.peek().is_some() {
            return self.err("the end of the text after the kernel");
        }
        Ok(())
    }

    /// Step over `( … )`, nested parentheses included.
    fn skip_parenthesized(&mut self) -> R<()> {
        self.punct("(")?;
        let mut depth = 1;
        while depth > 0 {
            match self.next() {
                Some(Tok::Punct("(")) => depth += 1,
                Some(Tok::Punct(")")) => depth -= 1,
                Some(_) => {}
                None => return Err("unclosed '(' in the kernel header".into()),
            }
        }
        Ok(())
    }
}

impl TextReader for Parser {
    fn buffer(&mut self) -> R<BufferId> {
        let line = self.line();
        let name = self.ident()?;
        self.buffers.get(&name).copied().ok_or_else(|| format!("line {line}: unknown buffer {name}"))
    }
    fn expr(&mut self) -> R<Expr> {
        let line = self.line();
        match self.next() {
            Some(Tok::Num(s)) => self.expr_leaf_number(s),
            Some(Tok::Var(name)) => {
                let id =
                    *self.vars.get(&name).ok_or_else(|| format!("line {line}: unknown variable %{name}"))?;
                Ok(Expr::Var { id, dtype: self.m.var(id).dtype })
            }
            Some(Tok::Ident(name)) => self.expr_named(name, line),
            _ => {
                self.pos -= 1;
                self.err("an expression")
            }
        }
    }
    fn exprs_until(&mut self, close: &str) -> R<Vec<Expr>> {
        let mut v = Vec::new();
        while !self.is_punct(close) {
            v.push(self.expr()?);
            if !self.is_punct(close) {
                self.punct(",")?;
            }
        }
        self.punct(close)?;
        Ok(v)
    }
    fn punct(&mut self, p: &str) -> R<()> {
        if self.is_punct(p) {
            self.pos += 1;
            Ok(())
        } else {
            self.err(&format!("'{p}'"))
        }
    }
    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }
    fn keyword(&mut self, k: &str) -> R<()> {
        if self.is_word(k) {
            self.pos += 1;
            Ok(())
        } else {
            self.err(&format!("'{k}'"))
        }
    }
    fn int(&mut self) -> R<i64> {
        match self.peek() {
            Some(Tok::Num(s)) => {
                let v = s.parse().map_err(|_| format!("line {}: bad integer {s}", self.line()))?;
                self.pos += 1;
                Ok(v)
            }
            _ => self.err("an integer"),
        }
    }
    fn string(&mut self) -> R<String> {
        match self.peek() {
            Some(Tok::Str(s)) => {
                let s = s.clone();
                self.pos += 1;
                Ok(s)
            }
            _ => self.err("a string"),
        }
    }
    fn error(&self, message: &str) -> String {
        format!("line {}: {message}", self.line())
    }
    fn is_keyword(&self, k: &str) -> bool {
        self.is_word(k)
    }
}

/// Parse the text form of a module (either level); the error names the line.
pub fn parse_text(text: &str) -> Result<Module, String> {
    let toks = lex(text)?;
    let mut p = Parser {
        toks,
        pos: 0,
        m: Module {
            name: String::new(),
            sources: SourceTable::default(),
            params: vec![],
            scratch: vec![],
            buffers: vec![],
            vars: vec![],
            kernel: Kernel {
                grid: vec![],
                threads: 0,
                body: vec![],
                loc: Loc::UNKNOWN,
                raster: None,
                roles: None,
                tensor_maps: vec![],
                reg_budget: None,
                extern_sources: vec![],
                user_threads: None,
                cluster: None,
            },
            schedules: vec![],
            level: Level::Tile,
        },
        vars: BTreeMap::new(),
        buffers: BTreeMap::new(),
    };
    p.module()?;
    Ok(p.m)
}

/// `m` as the text form keeps it: every source location unknown and no source table (see
/// the module doc); `parse_text(&print_module_bare(m))` is this.
pub fn without_locations(mut m: Module) -> Module {
    m.sources = SourceTable::default();
    m.kernel.loc = Loc::UNKNOWN;
    for b in &mut m.buffers {
        b.loc = Loc::UNKNOWN;
    }
    let body = std::mem::take(&mut m.kernel.body);
    m.kernel.body = body
        .into_iter()
        .map(|s| {
            let mut s = map_stmt_exprs(s, &mut |e| match e {
                Expr::Load { buf, idx, dtype, oob, .. } => {
                    Expr::Load { buf, idx, dtype, loc: Loc::UNKNOWN, oob }
                }
                other => other,
            });
            forget_stmt_locations(&mut s);
            s
        })
        .collect();
    m
}

fn forget_stmt_locations(s: &mut Stmt) {
    const UNKNOWN: Loc = Loc::UNKNOWN;
    let all = |body: &mut Vec<Stmt>| body.iter_mut().for_each(forget_stmt_locations);
    match s {
        Stmt::Store { loc, .. } | Stmt::Atomic { loc, .. } | Stmt::DeviceAssert { loc, .. } => *loc = UNKNOWN,
        Stmt::SourceLine(loc) => *loc = UNKNOWN,
        Stmt::Copy(op) => {
            op.loc = UNKNOWN;
            op.src.loc = UNKNOWN;
            op.dst.loc = UNKNOWN;
        }
        Stmt::Fill { dst, loc, .. } => {
            dst.loc = UNKNOWN;
            *loc = UNKNOWN;
        }
        Stmt::Reduce(op) => op.loc = UNKNOWN,
        Stmt::Gemm(op) => op.loc = UNKNOWN,
        Stmt::Barrier(op) => {
            op.loc = UNKNOWN;
            if let BarrierKind::TmaLoad { copy } = &mut op.kind {
                copy.loc = UNKNOWN;
                copy.src.loc = UNKNOWN;
                copy.dst.loc = UNKNOWN;
            }
        }
        Stmt::Print { what, loc, .. } => {
            *loc = UNKNOWN;
            if let Printed::Tile(r) = what {
                r.loc = UNKNOWN;
            }
        }
        Stmt::Parallel { body, loc, .. } | Stmt::For { body, loc, .. } => {
            *loc = UNKNOWN;
            all(body);
        }
        Stmt::If { then, otherwise, loc, .. } => {
            *loc = UNKNOWN;
            all(then);
            all(otherwise);
        }
        Stmt::Async { body } => all(body),
        Stmt::Let { .. } | Stmt::Inst(_) | Stmt::Comment(_) => {}
    }
}
