//! Reading the text form of tile-level IR (what [`crate::print::print_module_bare`] writes)
//! back into a [`Module`], so that printing and parsing round-trip and tests can state IR
//! directly. Thread-level statements are not read; locations are not kept.

use crate::diag::{Loc, SourceTable};
use crate::inst;
use crate::ir::*;
use crate::types::{DType, Scope};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Var(String),
    Num(String),
    /// A string literal as the printer writes it (Rust's escapes), unescaped.
    Str(String),
    Punct(&'static str),
}

const PUNCTS: &[&str] = &["->", "..+", ":+", "^T", "(", ")", "[", "]", "{", "}", ",", ":", "=", "<", ">"];

fn lex(text: &str) -> Result<Vec<(Tok, usize)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let c = b[i] as char;
            if c.is_whitespace() {
                i += 1;
                continue;
            }
            if line[i..].starts_with("//") {
                break; // a comment (strings are lexed whole, so this is outside one)
            }
            if c == '"' {
                let (text, end) = string_literal(line, i).map_err(|e| format!("line {line_no}: {e}"))?;
                out.push((Tok::Str(text), line_no));
                i = end;
                continue;
            }
            let ident_char = |c: u8| (c as char).is_ascii_alphanumeric() || c == b'_' || c == b'.';
            if c == '%' {
                let s = i + 1;
                i += 1;
                while i < b.len() && ident_char(b[i]) {
                    i += 1;
                }
                out.push((Tok::Var(line[s..i].to_string()), line_no));
            } else if c.is_ascii_digit()
                || (c == '-'
                    && i + 1 < b.len()
                    && ((b[i + 1] as char).is_ascii_digit() || line[i + 1..].starts_with("inf")))
            {
                let s = i;
                i += 1;
                while i < b.len() {
                    let d = b[i] as char;
                    let exp_sign = (d == '-' || d == '+') && matches!(b[i - 1], b'e' | b'E');
                    if d.is_ascii_alphanumeric() || d == '.' && !line[i..].starts_with("..+") || exp_sign {
                        i += 1;
                    } else {
                        break;
                    }
                }
                out.push((Tok::Num(line[s..i].to_string()), line_no));
            } else if c.is_ascii_alphabetic() || c == '_' {
                let s = i;
                while i < b.len() && ident_char(b[i]) {
                    i += 1;
                }
                let word = &line[s..i];
                // `inf`/`NaN` constants are numbers
                if matches!(word, "inf" | "NaN") {
                    out.push((Tok::Num(word.to_string()), line_no));
                } else {
                    out.push((Tok::Ident(word.to_string()), line_no));
                }
            } else if let Some(p) = PUNCTS.iter().find(|p| line[i..].starts_with(**p)) {
                out.push((Tok::Punct(p), line_no));
                i += p.len();
            } else {
                return Err(format!("line {line_no}: unexpected character {c:?}"));
            }
        }
    }
    Ok(out)
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
    fn line(&self) -> usize {
        self.toks.get(self.pos).or(self.toks.last()).map(|(_, l)| *l).unwrap_or(0)
    }
    fn err<T>(&self, what: &str) -> R<T> {
        Err(format!("line {}: expected {what}, found {:?}", self.line(), self.peek()))
    }
    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).map(|(t, _)| t.clone());
        self.pos += 1;
        t
    }
    fn punct(&mut self, p: &str) -> R<()> {
        match self.peek() {
            Some(Tok::Punct(q)) if *q == p => {
                self.pos += 1;
                Ok(())
            }
            _ => self.err(&format!("'{p}'")),
        }
    }
    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }
    fn ident(&mut self) -> R<String> {
        match self.next() {
            Some(Tok::Ident(s)) => Ok(s),
            _ => {
                self.pos -= 1;
                self.err("a name")
            }
        }
    }
    fn string(&mut self) -> R<String> {
        match self.next() {
            Some(Tok::Str(s)) => Ok(s),
            _ => {
                self.pos -= 1;
                self.err("a string")
            }
        }
    }
    fn keyword(&mut self, k: &str) -> R<()> {
        match self.peek() {
            Some(Tok::Ident(s)) if s == k => {
                self.pos += 1;
                Ok(())
            }
            _ => self.err(&format!("'{k}'")),
        }
    }
    fn int(&mut self) -> R<i64> {
        match self.next() {
            Some(Tok::Num(s)) => s.parse().map_err(|_| format!("line {}: bad integer {s}", self.line())),
            _ => {
                self.pos -= 1;
                self.err("an integer")
            }
        }
    }
    fn dtype(&mut self) -> R<DType> {
        let name = self.ident()?;
        DType::parse(&name).ok_or_else(|| format!("line {}: unknown dtype {name}", self.line()))
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
    fn new_var(&mut self, name: String, kind: VarKind, dtype: DType) -> VarId {
        let id = self.m.add_var(&name, kind, dtype);
        self.vars.insert(name, id);
        id
    }
    fn buffer(&mut self) -> R<BufferId> {
        let name = self.ident()?;
        self.buffers.get(&name).copied().ok_or_else(|| format!("line {}: unknown buffer {name}", self.line()))
    }
    fn add_buffer(&mut self, name: String, scope: Scope, dtype: DType, shape: Vec<i64>) -> BufferId {
        let id = self.m.add_buffer(Buffer {
            name: name.clone(),
            scope,
            dtype,
            shape,
            loc: Loc::UNKNOWN,
            layout: None,
            shared_offset: None,
            swizzle: None,
        });
        self.buffers.insert(name, id);
        id
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

    fn expr(&mut self) -> R<Expr> {
        match self.next() {
            Some(Tok::Num(s)) => {
                // `3:int64` is a typed constant; `0:64` is a slice
                let typed = matches!(self.toks.get(self.pos + 1), Some((Tok::Ident(t), _)) if DType::parse(t).is_some());
                let dtype = if self.is_punct(":") && typed {
                    self.punct(":")?;
                    self.dtype()?
                } else {
                    DType::I32
                };
                let value = if dtype.is_float() {
                    ConstValue::Float(s.parse().map_err(|_| format!("line {}: bad number {s}", self.line()))?)
                } else {
                    ConstValue::Int(s.parse().map_err(|_| format!("line {}: bad integer {s}", self.line()))?)
                };
                Ok(Expr::Const { value, dtype })
            }
            Some(Tok::Var(name)) => {
                let id = *self
                    .vars
                    .get(&name)
                    .ok_or_else(|| format!("line {}: unknown variable %{name}", self.line()))?;
                Ok(Expr::Var { id, dtype: self.m.var(id).dtype })
            }
            Some(Tok::Ident(name)) => {
                if name == "cast" {
                    self.punct("<")?;
                    let dtype = self.dtype()?;
                    self.punct(">")?;
                    self.punct("(")?;
                    let a = self.expr()?;
                    self.punct(")")?;
                    return Ok(Expr::Cast { a: Box::new(a), dtype });
                }
                if name == "select" {
                    self.punct("(")?;
                    let args = self.exprs_until(")")?;
                    let [c, a, b]: [Expr; 3] = args
                        .try_into()
                        .map_err(|_| format!("line {}: select takes 3 operands", self.line()))?;
                    return Ok(Expr::select(c, a, b));
                }
                if let Some(op) = BinOp::ALL.iter().find(|o| o.name() == name) {
                    self.punct("(")?;
                    let args = self.exprs_until(")")?;
                    let [a, b]: [Expr; 2] = args
                        .try_into()
                        .map_err(|_| format!("line {}: {name} takes 2 operands", self.line()))?;
                    return Ok(Expr::binary(*op, a, b));
                }
                if let Some(op) = UnOp::ALL.iter().find(|o| o.name() == name) {
                    self.punct("(")?;
                    let args = self.exprs_until(")")?;
                    let [a]: [Expr; 1] = args
                        .try_into()
                        .map_err(|_| format!("line {}: {name} takes 1 operand", self.line()))?;
                    return Ok(Expr::unary(*op, a));
                }
                let buf = *self
                    .buffers
                    .get(&name)
                    .ok_or_else(|| format!("line {}: unknown buffer or operator {name}", self.line()))?;
                self.punct("[")?;
                let idx = self.exprs_until("]")?;
                Ok(Expr::load(buf, idx, self.m.buffer(buf).dtype))
            }
            _ => {
                self.pos -= 1;
                self.err("an expression")
            }
        }
    }

    fn region(&mut self) -> R<Region> {
        let buf = self.buffer()?;
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
        Ok(Region { buf, dims, loc: Loc::UNKNOWN })
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

    fn kv(&mut self, key: &str) -> R<String> {
        self.keyword(key)?;
        self.punct("=")?;
        match self.next() {
            Some(Tok::Ident(s)) | Some(Tok::Num(s)) => Ok(s),
            _ => self.err(&format!("a value for {key}")),
        }
    }

    fn stmt(&mut self) -> R<Stmt> {
        let loc = Loc::UNKNOWN;
        let word = match self.peek() {
            Some(Tok::Ident(w)) => w.clone(),
            _ => return self.err("a statement"),
        };
        match word.as_str() {
            "copy" => {
                self.pos += 1;
                let src = self.region()?;
                self.punct("->")?;
                let dst = self.region()?;
                let pad = if matches!(self.peek(), Some(Tok::Ident(p)) if p == "pad") {
                    self.keyword("pad")?;
                    self.punct("=")?;
                    Some(self.expr()?)
                } else {
                    None
                };
                Ok(Stmt::Copy(CopyOp { src, dst, pad, loc, inst: None }))
            }
            "fill" => {
                self.pos += 1;
                let dst = self.region()?;
                self.punct(",")?;
                Ok(Stmt::Fill { dst, value: self.expr()?, loc })
            }
            "atomic_add" => {
                self.pos += 1;
                let buf = self.buffer()?;
                self.punct("[")?;
                let idx = self.exprs_until("]")?;
                self.punct(",")?;
                Ok(Stmt::AtomicAdd { buf, idx, value: self.expr()?, loc })
            }
            w if w.starts_with("reduce_") => {
                self.pos += 1;
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
                let dim = self.kv("dim")?.parse().map_err(|_| format!("line {}: bad dim", self.line()))?;
                let clear = self.kv("clear")? == "true";
                Ok(Stmt::Reduce(ReduceOp { kind, src, dst, dim, clear, loc }))
            }
            "gemm" => {
                self.pos += 1;
                let operand = |p: &mut Parser| -> R<(BufferId, Option<Expr>, bool)> {
                    let b = p.buffer()?;
                    let stage = if p.is_punct("[") {
                        p.punct("[")?;
                        let e = p.expr()?;
                        p.punct("]")?;
                        Some(e)
                    } else {
                        None
                    };
                    let t = p.is_punct("^T");
                    if t {
                        p.punct("^T")?;
                    }
                    Ok((b, stage, t))
                };
                let (a, a_stage, transpose_a) = operand(self)?;
                self.keyword("x")?;
                let (b, b_stage, transpose_b) = operand(self)?;
                self.punct("->")?;
                let c = self.buffer()?;
                let policy = match self.kv("policy")?.as_str() {
                    "square" => WarpPolicy::Square,
                    "full_row" => WarpPolicy::FullRow,
                    "full_col" => WarpPolicy::FullCol,
                    p => return Err(format!("line {}: unknown policy {p}", self.line())),
                };
                let clear_accum = self.kv("clear_accum")? == "true";
                Ok(Stmt::Gemm(GemmOp {
                    a,
                    b,
                    c,
                    transpose_a,
                    transpose_b,
                    policy,
                    clear_accum,
                    loc,
                    a_stage,
                    b_stage,
                    inst: None,
                }))
            }
            "parallel" => {
                self.pos += 1;
                self.punct("(")?;
                let mut names = Vec::new();
                while !self.is_punct(")") {
                    match self.next() {
                        Some(Tok::Var(n)) => names.push(n),
                        _ => return self.err("a loop variable"),
                    }
                    if !self.is_punct(")") {
                        self.punct(",")?;
                    }
                }
                self.punct(")")?;
                self.keyword("in")?;
                let extents = self.shape()?;
                let vars = names.into_iter().map(|n| self.new_var(n, VarKind::Loop, DType::I32)).collect();
                let body = self.block()?;
                Ok(Stmt::Parallel { vars, extents, body, loc, layout: None })
            }
            "for" | "unroll" | "pipelined" => {
                self.pos += 1;
                let kind = match word.as_str() {
                    "for" => ForKind::Serial,
                    "unroll" => ForKind::Unroll,
                    _ => {
                        self.punct("(")?;
                        let stages = self
                            .kv("stages")?
                            .parse()
                            .map_err(|_| format!("line {}: bad stages", self.line()))?;
                        self.punct(")")?;
                        ForKind::Pipelined { stages }
                    }
                };
                let name = match self.next() {
                    Some(Tok::Var(n)) => n,
                    _ => return self.err("a loop variable"),
                };
                self.keyword("in")?;
                let start = self.expr()?;
                self.punct("..+")?;
                let extent = self.expr()?;
                let var = self.new_var(name, VarKind::Loop, DType::I32);
                let body = self.block()?;
                Ok(Stmt::For { var, start, extent, kind, body, loc })
            }
            "if" => {
                self.pos += 1;
                let cond = self.expr()?;
                let then = self.block()?;
                let otherwise = if matches!(self.peek(), Some(Tok::Ident(e)) if e == "else") {
                    self.pos += 1;
                    self.block()?
                } else {
                    vec![]
                };
                Ok(Stmt::If { cond, then, otherwise, loc })
            }
            "print" => {
                self.pos += 1;
                let tile = matches!(self.peek(), Some(Tok::Ident(t)) if t == "tile")
                    && matches!(self.toks.get(self.pos + 1), Some((Tok::Ident(_), _)));
                let what = if tile {
                    self.pos += 1;
                    Printed::Tile(self.region()?)
                } else {
                    Printed::Value(self.expr()?)
                };
                self.punct(",")?;
                let msg = self.string()?;
                // `block=(...)`: a store to a buffer named `block` would read `block[`
                let block = if matches!(self.peek(), Some(Tok::Ident(b)) if b == "block")
                    && matches!(self.toks.get(self.pos + 1), Some((Tok::Punct("="), _)))
                {
                    self.pos += 2;
                    self.punct("(")?;
                    let mut coords = Vec::new();
                    while !self.is_punct(")") {
                        coords.push(self.int()?);
                        if !self.is_punct(")") {
                            self.punct(",")?;
                        }
                    }
                    self.punct(")")?;
                    Some(coords)
                } else {
                    None
                };
                Ok(Stmt::Print { what, msg, block, loc })
            }
            "assert" => {
                self.pos += 1;
                let cond = self.expr()?;
                self.punct(",")?;
                Ok(Stmt::DeviceAssert { cond, msg: self.string()?, loc })
            }
            "sync" => {
                self.pos += 1;
                Ok(Stmt::inst(inst::Sync))
            }
            "async" => {
                self.pos += 1;
                Ok(Stmt::Async { body: self.block()? })
            }
            "async_commit" => {
                self.pos += 1;
                Ok(Stmt::inst(inst::AsyncCommit))
            }
            "async_wait" => {
                self.pos += 1;
                Ok(Stmt::inst(inst::AsyncWait { pending: self.int()? as u32 }))
            }
            _ => {
                let buf = self.buffer()?;
                self.punct("[")?;
                let idx = self.exprs_until("]")?;
                self.punct("=")?;
                Ok(Stmt::Store { buf, idx, value: self.expr()?, loc })
            }
        }
    }

    fn module(&mut self) -> R<()> {
        self.keyword("kernel")?;
        self.m.name = self.ident()?;
        self.punct("(")?;
        while !self.is_punct(")") {
            match self.next() {
                Some(Tok::Ident(name)) => {
                    self.punct(":")?;
                    let dtype = self.dtype()?;
                    let shape = self.shape()?;
                    let b = self.add_buffer(name.clone(), Scope::Global, dtype, shape);
                    self.m.params.push(Param::Tensor { name, buffer: b });
                }
                Some(Tok::Var(name)) => {
                    self.punct(":")?;
                    let dtype = self.dtype()?;
                    let v = self.new_var(name.clone(), VarKind::Param, dtype);
                    self.m.params.push(Param::Scalar { name, var: v });
                }
                _ => return self.err("a parameter"),
            }
            if !self.is_punct(")") {
                self.punct(",")?;
            }
        }
        self.punct(")")?;
        self.keyword("blocks")?;
        self.punct("(")?;
        let mut axis = 0;
        while !self.is_punct(")") {
            match self.next() {
                Some(Tok::Var(name)) => {
                    self.new_var(name, VarKind::BlockIdx(axis), DType::I32);
                    axis += 1;
                }
                _ => return self.err("a block index variable"),
            }
            if !self.is_punct(")") {
                self.punct(",")?;
            }
        }
        self.punct(")")?;
        self.keyword("grid")?;
        self.punct("(")?;
        self.m.kernel.grid = self.exprs_until(")")?;
        let threads = self.kv("threads")?;
        self.m.kernel.threads = threads.parse().map_err(|_| format!("bad thread count {threads}"))?;
        if matches!(self.peek(), Some(Tok::Ident(w)) if w == "raster_panel") {
            let panel = self.kv("raster_panel")?;
            let panel = panel.parse().map_err(|_| format!("bad raster panel {panel}"))?;
            let by_rows = self.kv("raster_order")? == "row";
            self.m.kernel.raster = Some(Raster { panel, by_rows });
        }
        if self.kv("level")? != "tile" {
            return Err("only tile-level IR can be read back".into());
        }
        self.punct("{")?;
        // buffer declarations, then statements
        while let Some(Tok::Ident(w)) = self.peek() {
            let Some(scope) = Scope::parse(w).filter(|s| *s != Scope::Global) else { break };
            self.pos += 1;
            let name = self.ident()?;
            self.punct(":")?;
            let dtype = self.dtype()?;
            let shape = self.shape()?;
            let id = self.add_buffer(name, scope, dtype, shape);
            if matches!(self.peek(), Some(Tok::Ident(w)) if w == "swizzle") {
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
        }
        let mut body = Vec::new();
        while !self.is_punct("}") {
            body.push(self.stmt()?);
        }
        self.punct("}")?;
        self.m.kernel.body = body;
        Ok(())
    }
}

/// Parse the text form of a tile-level module.
pub fn parse_text(text: &str) -> Result<Module, String> {
    let toks = lex(text)?;
    let mut p = Parser {
        toks,
        pos: 0,
        m: Module {
            name: String::new(),
            sources: SourceTable::default(),
            params: vec![],
            buffers: vec![],
            vars: vec![],
            kernel: Kernel { grid: vec![], threads: 0, body: vec![], loc: Loc::UNKNOWN, raster: None },
            level: Level::Tile,
        },
        vars: BTreeMap::new(),
        buffers: BTreeMap::new(),
    };
    p.module()?;
    Ok(p.m)
}
