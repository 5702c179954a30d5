//! Reading the serialized tile program (docs/format.md) into tile-level [`Module`]s: one
//! per `T.Kernel` (a prim_func may hold several, launched in order by one call; each
//! becomes a module of its own with the call's parameters and scratch, see
//! [`parse_kernels`]).
//!
//! Every malformed input is an error naming the JSON path of the offending value; unknown
//! fields are rejected so that a misspelt field is never silently ignored.

use crate::diag::{Loc, SourceFile, SourceTable};
use crate::ir::*;
use crate::shared_layout::Swizzle;
use crate::types::{DType, Scope};
use serde_json::{Map, Value};

pub const FORMAT_VERSION: i64 = 1;

/// How deeply a program may nest (JSON levels: an operation inside an operation, a block
/// inside a block). Far beyond what a person writes — an unrolled sum of 5,000 terms is
/// about 5,000 levels, 500 nested `T.If`s about 1,500 — and within what the passes' recursion
/// takes on the stack `tilers_cc::on_deep_stack` gives them.
pub const MAX_NESTING: usize = 20_000;

/// A malformed program: what is wrong and where in the document.
#[derive(Clone, Debug, PartialEq)]
pub struct FormatError {
    pub path: String,
    pub message: String,
    /// A well-formed program past one of tilers' limits ([`MAX_NESTING`]): the message,
    /// rendered at the user's line, to show instead.
    pub limit: Option<String>,
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.limit {
            Some(text) => f.write_str(text),
            None => write!(f, "malformed tile program at {}: {}", self.path, self.message),
        }
    }
}

type R<T> = Result<T, FormatError>;

fn err<T>(path: &str, message: impl Into<String>) -> R<T> {
    Err(FormatError { path: path.to_string(), message: message.into(), limit: None })
}

struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

/// An atomic's operation `op` ("add", "max", "min") and the object's `memory_order`
/// (relaxed when absent).
fn atomic_mode(op: &str, o: &Obj) -> R<AtomicMode> {
    let Some(op) = AtomicOp::from_name(op) else {
        return err(&o.p("atomic"), "expected an atomic operation: add, max or min");
    };
    let order = match o.opt("memory_order") {
        None => MemoryOrder::Relaxed,
        Some(_) => match MemoryOrder::from_name(o.str("memory_order")?) {
            Some(order) => order,
            None => {
                return err(&o.p("memory_order"), "expected relaxed, acquire, release, acq_rel or seq_cst")
            }
        },
    };
    Ok(AtomicMode { op, order })
}

impl<'a> Obj<'a> {
    fn new(v: &'a Value, path: &str, allowed: &[&str]) -> R<Obj<'a>> {
        let Some(map) = v.as_object() else {
            return err(path, "expected an object");
        };
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                return err(path, format!("unknown field '{key}' (allowed: {})", allowed.join(", ")));
            }
        }
        Ok(Obj { map, path: path.to_string() })
    }
    fn p(&self, key: &str) -> String {
        format!("{}.{}", self.path, key)
    }
    fn get(&self, key: &str) -> R<&'a Value> {
        match self.map.get(key) {
            Some(v) => Ok(v),
            None => err(&self.path, format!("missing field '{key}'")),
        }
    }
    fn opt(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }
    fn int(&self, key: &str) -> R<i64> {
        match self.get(key)?.as_i64() {
            Some(i) => Ok(i),
            None => err(&self.p(key), "expected an integer"),
        }
    }
    fn str(&self, key: &str) -> R<&'a str> {
        match self.get(key)?.as_str() {
            Some(s) => Ok(s),
            None => err(&self.p(key), "expected a string"),
        }
    }
    fn bool(&self, key: &str) -> R<bool> {
        match self.get(key)?.as_bool() {
            Some(b) => Ok(b),
            None => err(&self.p(key), "expected true or false"),
        }
    }
    fn arr(&self, key: &str) -> R<&'a Vec<Value>> {
        match self.get(key)?.as_array() {
            Some(a) => Ok(a),
            None => err(&self.p(key), "expected a list"),
        }
    }
}

/// Reads one kernel's statements. Ids in the document are the program's; the module of a
/// kernel holds the call's buffers and variables (parameters, scratch, sizes) and its own,
/// renumbered in order: `buffer_map` / `var_map` give each document id its id in the module,
/// None for one that belongs to another kernel (`buffer_owner` / `var_owner` say which).
struct Parser {
    buffer_map: Vec<Option<u32>>,
    buffer_owner: Vec<Option<usize>>,
    var_map: Vec<Option<u32>>,
    var_owner: Vec<Option<usize>>,
    /// The module's variables (in its own numbering).
    vars: Vec<Var>,
    /// The manual schedules of its pipelined loops (`Module::schedules`).
    schedules: std::cell::RefCell<Vec<Schedule>>,
}

fn dtype(v: &Value, path: &str) -> R<DType> {
    match v.as_str().and_then(DType::parse) {
        Some(d) => Ok(d),
        None => err(path, format!("unknown dtype {v}")),
    }
}

fn loc(v: Option<&Value>, path: &str, n_sources: usize) -> R<Loc> {
    let Some(v) = v else {
        return Ok(Loc::UNKNOWN);
    };
    let parts: Option<Vec<i64>> = v.as_array().map(|a| a.iter().filter_map(|x| x.as_i64()).collect());
    match parts {
        Some(p) if p.len() == 3 && p.iter().all(|x| *x >= 0) && (p[0] as usize) < n_sources => {
            Ok(Loc { source: p[0] as u32, line: p[1] as u32, col: p[2] as u32 })
        }
        _ => err(path, "expected [source_index, line, column] with a valid source index"),
    }
}

/// The depth of the first value found past [`MAX_NESTING`], with the innermost statement
/// location ("loc") on its path. Walks with an explicit stack: the point is not to recurse.
fn too_deep(root: &Value, n_sources: usize) -> Option<(usize, Loc)> {
    let mut stack: Vec<(&Value, usize, Loc)> = vec![(root, 1, Loc::UNKNOWN)];
    while let Some((v, depth, at)) = stack.pop() {
        if depth > MAX_NESTING {
            return Some((depth, at));
        }
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|x| (x, depth + 1, at))),
            Value::Object(map) => {
                let here = loc(map.get("loc"), "", n_sources).ok().filter(|l| l.is_known()).unwrap_or(at);
                stack.extend(map.values().map(|x| (x, depth + 1, here)));
            }
            _ => {}
        }
    }
    None
}

/// Parse a serialized program of one kernel (JSON text) into a tile-level module.
pub fn parse_program(text: &str) -> R<Module> {
    let mut kernels = parse_kernels(text)?;
    if kernels.len() != 1 {
        return err(
            "$.kernels",
            format!("this program holds {} kernels; read it with parse_kernels", kernels.len()),
        );
    }
    Ok(kernels.remove(0))
}

/// Parse a serialized program into one tile-level module per kernel, in launch order
/// (`"kernel"`: one; `"kernels"`: several). Each module holds the program's parameters,
/// scratch buffers and sizes, and the buffers and variables its kernel declares (their
/// `"kernel"` field), renumbered in document order; a kernel that names another kernel's
/// buffer or variable is an error.
pub fn parse_kernels(text: &str) -> R<Vec<Module>> {
    // serde_json's own limit (128 levels) is far below what legal programs reach; the
    // nesting is bounded by MAX_NESTING below instead
    let mut reader = serde_json::Deserializer::from_str(text);
    reader.disable_recursion_limit();
    let root = match serde::Deserialize::deserialize(&mut reader).and_then(|v: Value| reader.end().map(|_| v))
    {
        Ok(v) => v,
        Err(e) => return err("$", format!("not valid JSON: {e}")),
    };
    let top = Obj::new(
        &root,
        "$",
        &["version", "name", "sources", "params", "buffers", "scratch", "vars", "kernel", "kernels"],
    )?;
    let version = top.int("version")?;
    if version != FORMAT_VERSION {
        return err("$.version", format!("this tilers reads format version {FORMAT_VERSION}, got {version}"));
    }
    let name = top.str("name")?.to_string();
    // a Python identifier (letters of any script): codegen makes the C name from it
    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return err("$.name", format!("kernel name must be a non-empty identifier, got {name:?}"));
    }

    let mut sources = SourceTable::default();
    for (i, s) in top.arr("sources")?.iter().enumerate() {
        let path = format!("$.sources[{i}]");
        let o = Obj::new(s, &path, &["file", "lines"])?;
        let mut file = SourceFile { file: o.str("file")?.to_string(), ..Default::default() };
        let Some(lines) = o.get("lines")?.as_object() else {
            return err(&o.p("lines"), "expected an object of line number -> text");
        };
        for (k, v) in lines {
            let (Ok(n), Some(t)) = (k.parse::<u32>(), v.as_str()) else {
                return err(&o.p("lines"), format!("bad entry {k:?}"));
            };
            file.lines.insert(n, t.to_string());
        }
        sources.files.push(file);
    }
    let n_sources = sources.files.len();
    if let Some((depth, at)) = too_deep(&root, n_sources) {
        let diag = crate::diag::Diagnostic::error(
            format!("this kernel nests {depth} levels deep (operations inside operations, blocks inside blocks); tilers accepts up to {MAX_NESTING}"),
            at,
        )
        .with_help("split a long expression into steps (`s = s + x` in a T.serial loop, or partial sums) or flatten nested conditions with &");
        return Err(FormatError {
            path: "$".into(),
            message: format!("nested more than {MAX_NESTING} levels deep"),
            limit: Some(diag.render(&sources)),
        });
    }

    let kernel_objects: Vec<(&Value, String)> = match (top.opt("kernel"), top.opt("kernels")) {
        (Some(k), None) => vec![(k, "$.kernel".to_string())],
        (None, Some(Value::Array(list))) if list.len() >= 2 => {
            list.iter().enumerate().map(|(i, k)| (k, format!("$.kernels[{i}]"))).collect()
        }
        (None, Some(_)) => {
            return err("$.kernels", "expected a list of two or more kernels (a single one is \"kernel\")")
        }
        (Some(_), Some(_)) => return err("$", "a program has \"kernel\" or \"kernels\", not both"),
        (None, None) => return err("$", "missing field \"kernel\""),
    };
    let several = kernel_objects.len() > 1;
    // the kernel that declares a buffer or variable (None: the call's, shared by all)
    let owner = |o: &Obj, shared: bool| -> R<Option<usize>> {
        match (o.opt("kernel"), several, shared) {
            (None, false, _) | (None, true, true) => Ok(None),
            (None, true, false) => err(
                &o.p("kernel"),
                "missing: a program of several kernels says which declares each buffer and variable",
            ),
            (Some(_), false, _) => err(
                &o.p("kernel"),
                "only a program of several kernels says which declares a buffer or variable",
            ),
            (Some(_), true, true) => err(
                &o.p("kernel"),
                "parameters, scratch buffers and sizes belong to the call, not to one kernel",
            ),
            (Some(_), true, false) => match o.int("kernel")? {
                k if (0..kernel_objects.len() as i64).contains(&k) => Ok(Some(k as usize)),
                k => err(
                    &o.p("kernel"),
                    format!("expected a kernel number below {}, got {k}", kernel_objects.len()),
                ),
            },
        }
    };

    let mut vars = Vec::new();
    let mut var_owner = Vec::new();
    for (i, v) in top.arr("vars")?.iter().enumerate() {
        let path = format!("$.vars[{i}]");
        let o = Obj::new(v, &path, &["id", "name", "kind", "axis", "dtype", "multiple_of", "kernel"])?;
        if o.int("id")? != i as i64 {
            return err(&o.p("id"), format!("variable ids must be 0, 1, 2, … in order; expected {i}"));
        }
        let kind = match o.str("kind")? {
            "block_idx" => {
                let axis = o.int("axis")?;
                if !(0..3).contains(&axis) {
                    return err(&o.p("axis"), "expected 0, 1 or 2");
                }
                VarKind::BlockIdx(axis as u8)
            }
            "loop" => VarKind::Loop,
            "param" => VarKind::Param,
            "thread_idx" => VarKind::ThreadIdx,
            "size" => {
                let multiple_of = match o.opt("multiple_of") {
                    None => 1,
                    Some(_) => o.int("multiple_of")?,
                };
                if !(1..=1 << 30).contains(&multiple_of) {
                    return err(
                        &o.p("multiple_of"),
                        format!("expected a positive multiple, got {multiple_of}"),
                    );
                }
                VarKind::Size { multiple_of }
            }
            k => return err(&o.p("kind"), format!("unknown variable kind '{k}'")),
        };
        let dt = dtype(o.get("dtype")?, &o.p("dtype"))?;
        if matches!(kind, VarKind::Size { .. }) && !matches!(dt, DType::I32 | DType::I64) {
            return err(&o.p("dtype"), format!("a symbolic size is int32 or int64, got {dt}"));
        }
        var_owner.push(owner(&o, matches!(kind, VarKind::Param | VarKind::Size { .. }))?);
        vars.push(Var { name: o.str("name")?.to_string(), kind, dtype: dt });
    }

    let mut buffers: Vec<Buffer> = Vec::new();
    let mut buffer_owner = Vec::new();
    for (i, b) in top.arr("buffers")?.iter().enumerate() {
        let path = format!("$.buffers[{i}]");
        let o = Obj::new(
            b,
            &path,
            &["id", "name", "scope", "dtype", "shape", "loc", "swizzle", "panel", "kernel", "alias_of"],
        )?;
        if o.int("id")? != i as i64 {
            return err(&o.p("id"), format!("buffer ids must be 0, 1, 2, … in order; expected {i}"));
        }
        let scope = match Scope::parse(o.str("scope")?) {
            Some(s) => s,
            None => return err(&o.p("scope"), "expected global, shared, fragment, local or cluster"),
        };
        let mut shape = Vec::new();
        for (d, x) in o.arr("shape")?.iter().enumerate() {
            let dp = format!("{path}.shape[{d}]");
            if let Some(v) = x.as_i64() {
                if v <= 0 {
                    return err(&dp, format!("expected a positive integer, got {x}"));
                }
                shape.push(Dim::Fixed(v));
                continue;
            }
            // a symbolic size: {"op": "var", "id": N, ...} naming a variable of kind size
            let id = x.as_object().filter(|o| o.get("op").and_then(|v| v.as_str()) == Some("var"));
            let Some(id) = id.and_then(|o| o.get("id")).and_then(|v| v.as_u64()) else {
                return err(&dp, format!("expected a positive integer or a symbolic size, got {x}"));
            };
            match vars.get(id as usize) {
                Some(Var { kind: VarKind::Size { .. }, .. }) => shape.push(Dim::Size(VarId(id as u32))),
                _ => return err(&dp, format!("variable {id} is not a symbolic size (T.dynamic)")),
            }
        }
        if shape.is_empty() {
            return err(&o.p("shape"), "a buffer needs at least one dimension");
        }
        // sizes are multiplied by element sizes and strides: keep them far from overflow
        let fixed = shape.iter().filter_map(|d| d.fixed());
        if fixed.clone().try_fold(1i64, |acc, d| acc.checked_mul(d)).is_none_or(|n| n > 1 << 50) {
            return err(
                &o.p("shape"),
                format!("{:?} has more than 2^50 elements", fixed.collect::<Vec<_>>()),
            );
        }
        let dt = dtype(o.get("dtype")?, &o.p("dtype"))?;
        buffer_owner.push(owner(&o, scope == Scope::Global)?);
        let swizzle = match o.opt("swizzle") {
            None => None,
            Some(Value::Bool(false)) => None,
            // tilers' swizzle for the tile's rows (T.make_swizzled_layout)
            Some(Value::Bool(true)) => {
                let Some(last) = shape.last().and_then(|d| d.fixed()) else {
                    return err(&o.p("swizzle"), "a tile with a symbolic shape cannot be swizzled");
                };
                Some(Swizzle::chunks_of_rows(last * dt.bytes() as i64))
            }
            Some(s) => {
                let so = Obj::new(s, &o.p("swizzle"), &["bits", "base", "shift"])?;
                let field = |k: &str| -> R<u32> {
                    match so.int(k)? {
                        v @ 0..=16 => Ok(v as u32),
                        v => err(&so.p(k), format!("expected 0 to 16, got {v}")),
                    }
                };
                Some(Swizzle::new(field("bits")?, field("base")?, field("shift")?))
            }
        };
        let panel = match o.opt("panel") {
            None => None,
            Some(_) => match o.int("panel")? {
                v @ 1..=4096 => Some(v),
                v => return err(&o.p("panel"), format!("expected 1 to 4096 elements, got {v}")),
            },
        };
        // T.view of another dtype: a shared tile over an earlier shared tile's bytes, as many
        let alias_of = match o.opt("alias_of") {
            None | Some(Value::Null) => None,
            Some(_) => {
                let root = o.int("alias_of")?;
                let Some(r) = usize::try_from(root).ok().and_then(|r| buffers.get(r)) else {
                    return err(
                        &o.p("alias_of"),
                        format!("expected the id of an earlier buffer, got {root}"),
                    );
                };
                let bytes = |b: &[Dim], d: DType| -> Option<i64> {
                    b.iter().map(|x| x.fixed()).product::<Option<i64>>().map(|n| n * d.bytes() as i64)
                };
                if scope == Scope::Cluster {
                    // T.copy_cluster's view of a shared tile in every block of the cluster
                    let ok = r.scope == Scope::Shared
                        && r.alias_of.is_none()
                        && dt == r.dtype
                        && shape.len() == r.shape.len() + 1
                        && matches!(shape[0], Dim::Fixed(1..=16))
                        && shape[1..] == r.shape[..];
                    if !ok {
                        return err(
                            &o.p("alias_of"),
                            "a cluster view is [blocks, *shape] of a shared tile's elements in each block of the cluster",
                        );
                    }
                    Some(BufferId(root as u32))
                } else if scope != Scope::Shared || r.scope != Scope::Shared || r.alias_of.is_some() {
                    return err(
                        &o.p("alias_of"),
                        "a view of another dtype is a shared tile over a shared tile",
                    );
                } else if bytes(&shape, dt) != bytes(&r.shape, r.dtype) {
                    return err(&o.p("alias_of"), "a view of another dtype covers its tile's bytes exactly");
                } else {
                    Some(BufferId(root as u32))
                }
            }
        };
        if scope == Scope::Cluster && alias_of.is_none() {
            return err(&o.p("alias_of"), "a cluster view names the shared tile it views (alias_of)");
        }
        buffers.push(Buffer {
            name: o.str("name")?.to_string(),
            scope,
            dtype: dt,
            shape,
            loc: loc(o.opt("loc"), &o.p("loc"), n_sources)?,
            layout: None,
            shared_offset: None,
            alias_of,
            panel,
            swizzle,
        });
    }

    // the call's tables, read with the program's own ids
    let p = Parser {
        buffer_map: (0..buffers.len() as u32).map(Some).collect(),
        buffer_owner: vec![None; buffers.len()],
        var_map: (0..vars.len() as u32).map(Some).collect(),
        var_owner: vec![None; vars.len()],
        vars,
        schedules: Default::default(),
    };
    let mut params = Vec::new();
    for (i, v) in top.arr("params")?.iter().enumerate() {
        let path = format!("$.params[{i}]");
        let o = Obj::new(v, &path, &["kind", "name", "buffer", "var"])?;
        let name = o.str("name")?.to_string();
        match o.str("kind")? {
            "tensor" => {
                let b = p.buffer_id(o.get("buffer")?, &o.p("buffer"))?;
                if buffers[b.0 as usize].scope != Scope::Global {
                    return err(&o.p("buffer"), "a tensor parameter must name a global buffer");
                }
                params.push(Param::Tensor { name, buffer: b });
            }
            "scalar" => {
                let v = p.var_id(o.get("var")?, &o.p("var"))?;
                if p.vars[v.0 as usize].kind != VarKind::Param {
                    return err(&o.p("var"), "a scalar parameter must name a variable of kind param");
                }
                params.push(Param::Scalar { name, var: v });
            }
            k => return err(&o.p("kind"), format!("unknown parameter kind '{k}'")),
        }
    }
    // `T.alloc_global`: global buffers the runtime allocates per call
    let mut scratch = Vec::new();
    if let Some(list) = top.opt("scratch") {
        let Some(list) = list.as_array() else { return err("$.scratch", "expected a list of buffer ids") };
        for (i, v) in list.iter().enumerate() {
            let path = format!("$.scratch[{i}]");
            let b = p.buffer_id(v, &path)?;
            let is_param = params.iter().any(|q| matches!(q, Param::Tensor { buffer, .. } if *buffer == b));
            if buffers[b.0 as usize].scope != Scope::Global || is_param || scratch.contains(&b) {
                return err(&path, "a scratch buffer must name a global buffer that is no parameter, once");
            }
            scratch.push(b);
        }
    }

    let mut modules = Vec::with_capacity(kernel_objects.len());
    for (k, (value, path)) in kernel_objects.iter().enumerate() {
        // this kernel's module: the call's entries and its own, in document order
        let mine = |o: &Option<usize>| o.is_none_or(|o| o == k);
        let renumber = |owners: &[Option<usize>]| -> Vec<Option<u32>> {
            let mut next = 0;
            owners
                .iter()
                .map(|o| {
                    mine(o).then(|| {
                        next += 1;
                        next - 1
                    })
                })
                .collect()
        };
        let buffer_map = renumber(&buffer_owner);
        let var_map = renumber(&var_owner);
        let var = |v: VarId| VarId(var_map[v.0 as usize].expect("sizes and parameters belong to the call"));
        let buffer =
            |b: BufferId| BufferId(buffer_map[b.0 as usize].expect("global buffers belong to the call"));
        let kernel_vars: Vec<Var> =
            p.vars.iter().zip(&var_owner).filter(|(_, o)| mine(o)).map(|(v, _)| v.clone()).collect();
        let kernel_buffers: Vec<Buffer> = buffers
            .iter()
            .zip(&buffer_owner)
            .filter(|(_, o)| mine(o))
            .map(|(b, _)| {
                let mut b = b.clone();
                for d in &mut b.shape {
                    if let Dim::Size(v) = d {
                        *v = var(*v);
                    }
                }
                b.alias_of = b.alias_of.map(buffer);
                b
            })
            .collect();
        let kernel_params = params
            .iter()
            .map(|q| match q {
                Param::Tensor { name, buffer: b } => Param::Tensor { name: name.clone(), buffer: buffer(*b) },
                Param::Scalar { name, var: v } => Param::Scalar { name: name.clone(), var: var(*v) },
            })
            .collect();
        let kernel_scratch = scratch.iter().map(|b| buffer(*b)).collect();
        let kp = Parser {
            buffer_map,
            buffer_owner: buffer_owner.clone(),
            var_map,
            var_owner: var_owner.clone(),
            vars: kernel_vars,
            schedules: Default::default(),
        };
        let kernel = kp.kernel(value, path, n_sources)?;
        let mut module = Module {
            name: name.clone(),
            sources: sources.clone(),
            params: kernel_params,
            buffers: kernel_buffers,
            scratch: kernel_scratch,
            vars: kp.vars,
            kernel,
            level: Level::Tile,
            schedules: kp.schedules.into_inner(),
        };
        module.split_role_elses();
        modules.push(module);
    }
    Ok(modules)
}

impl Parser {
    /// `{"stage": [...], "order": [...]}` (one entry per statement of the loop body, groups
    /// expanded by the frontend): its index in the module's schedules.
    fn schedule(&self, v: &Value, path: &str) -> R<u32> {
        let o = Obj::new(v, path, &["stage", "order"])?;
        let ints = |key: &str| -> R<Vec<i32>> {
            o.arr(key)?
                .iter()
                .enumerate()
                .map(|(k, x)| match x.as_i64() {
                    Some(i) if (-1..=64).contains(&i) => Ok(i as i32),
                    _ => err(&format!("{}[{k}]", o.p(key)), "expected an integer from -1 to 64"),
                })
                .collect()
        };
        let (stage, order) = (ints("stage")?, ints("order")?);
        if stage.len() != order.len() {
            return err(path, "stage and order need one entry per statement each");
        }
        let mut all = self.schedules.borrow_mut();
        all.push(Schedule { stage, order });
        Ok(all.len() as u32 - 1)
    }

    /// One `T.Kernel` object: its grid, threads, statements and launch options.
    fn kernel(&self, value: &Value, path: &str, n_sources: usize) -> R<Kernel> {
        let p = self;
        let ko = Obj::new(
            value,
            path,
            &["grid", "threads", "body", "loc", "raster", "reg_budget", "extern_sources", "cluster"],
        )?;
        let mut grid = Vec::new();
        for (i, g) in ko.arr("grid")?.iter().enumerate() {
            grid.push(p.expr(g, &format!("{path}.grid[{i}]"), n_sources)?);
        }
        if grid.is_empty() || grid.len() > 3 {
            return err(&ko.p("grid"), "expected 1 to 3 grid dimensions");
        }
        let mut threads = ko.int("threads")?;
        if threads <= 0 || threads > u32::MAX as i64 {
            return err(&ko.p("threads"), format!("expected a positive thread count, got {threads}"));
        }
        // threads=n of part of a warp: whole warps launch, the user's code sees n threads
        let user_threads = if threads % 32 != 0 && threads < 1024 {
            let n = threads as u32;
            threads = (threads + 31) / 32 * 32;
            Some(n)
        } else {
            None
        };
        let raster = match ko.opt("raster") {
            None | Some(Value::Null) => None,
            Some(r) => {
                let o = Obj::new(r, &ko.p("raster"), &["panel", "order"])?;
                let panel = o.int("panel")?;
                if !(1..=65535).contains(&panel) {
                    return err(&o.p("panel"), format!("expected a panel size from 1 to 65535, got {panel}"));
                }
                let by_rows = match o.str("order")? {
                    "row" => true,
                    "col" => false,
                    other => {
                        return err(&o.p("order"), format!("expected \"row\" or \"col\", got \"{other}\""))
                    }
                };
                if grid.len() < 2 {
                    return err(&ko.p("raster"), "block rasterization needs a grid of 2 or 3 dimensions");
                }
                Some(Raster { panel: panel as u32, by_rows })
            }
        };
        let reg_budget = match ko.opt("reg_budget") {
            None | Some(Value::Null) => None,
            Some(r) => {
                let o = Obj::new(r, &ko.p("reg_budget"), &["producer", "consumer", "none"])?;
                let regs = |key: &str| -> R<u32> {
                    match o.opt(key) {
                        None => Ok(0),
                        Some(_) => {
                            let n = o.int(key)?;
                            if !(24..=256).contains(&n) || n % 8 != 0 {
                                return err(
                                    &o.p(key),
                                    format!("expected a multiple of 8 from 24 to 256, got {n}"),
                                );
                            }
                            Ok(n as u32)
                        }
                    }
                };
                let none = match o.opt("none") {
                    None => false,
                    Some(_) => o.bool("none")?,
                };
                Some(RegBudget { producer: regs("producer")?, consumer: regs("consumer")?, none })
            }
        };
        // T.ClusterKernel(cluster_dims=(x, y, 1)): blocks along bx and by, 16 in all at most
        let cluster = match ko.opt("cluster") {
            None | Some(Value::Null) => None,
            Some(_) => {
                let dims = ko.arr("cluster")?;
                let want: Vec<i64> = dims.iter().filter_map(|d| d.as_i64()).collect();
                match want[..] {
                    [x, y] if dims.len() == 2 && x >= 1 && y >= 1 && x * y <= 16 => {
                        Some([x as u32, y as u32])
                    }
                    _ => return err(
                        &ko.p("cluster"),
                        "expected [x, y]: blocks of a cluster along bx and by (positive, 16 in all at most)",
                    ),
                }
            }
        };
        let mut extern_sources = Vec::new();
        if ko.opt("extern_sources").is_some() {
            for (i, v) in ko.arr("extern_sources")?.iter().enumerate() {
                let Some(text) = v.as_str() else {
                    return err(&format!("{path}.extern_sources[{i}]"), "expected a string of CUDA source");
                };
                extern_sources.push(text.to_string());
            }
        }
        let body = p.stmts(ko.arr("body")?, &ko.p("body"), n_sources)?;
        let kloc = loc(ko.opt("loc"), &ko.p("loc"), n_sources)?;
        Ok(Kernel {
            grid,
            threads: threads as u32,
            body,
            loc: kloc,
            raster,
            roles: None,
            tensor_maps: vec![],
            reg_budget,
            extern_sources,
            user_threads,
            cluster,
        })
    }
}

impl Parser {
    fn buffer_id(&self, v: &Value, path: &str) -> R<BufferId> {
        let n = self.buffer_map.len();
        match v.as_i64() {
            Some(i) if i >= 0 && (i as usize) < n => match self.buffer_map[i as usize] {
                Some(local) => Ok(BufferId(local)),
                None => err(
                    path,
                    format!(
                        "buffer {i} is declared by kernel {}",
                        self.buffer_owner[i as usize].unwrap_or(0)
                    ),
                ),
            },
            _ => err(path, format!("expected a buffer id below {n}, got {v}")),
        }
    }
    fn var_id(&self, v: &Value, path: &str) -> R<VarId> {
        let n = self.var_map.len();
        match v.as_i64() {
            Some(i) if i >= 0 && (i as usize) < n => match self.var_map[i as usize] {
                Some(local) => Ok(VarId(local)),
                None => err(
                    path,
                    format!("variable {i} is declared by kernel {}", self.var_owner[i as usize].unwrap_or(0)),
                ),
            },
            _ => err(path, format!("expected a variable id below {n}, got {v}")),
        }
    }

    fn exprs(&self, v: &Value, path: &str, ns: usize) -> R<Vec<Expr>> {
        let Some(a) = v.as_array() else {
            return err(path, "expected a list of expressions");
        };
        a.iter().enumerate().map(|(i, e)| self.expr(e, &format!("{path}[{i}]"), ns)).collect()
    }

    fn expr(&self, v: &Value, path: &str, ns: usize) -> R<Expr> {
        let Some(op) = v.get("op").and_then(|o| o.as_str()) else {
            return err(path, "expected an expression object with an \"op\"");
        };
        let sub =
            |key: &str, o: &Obj| -> R<Box<Expr>> { Ok(Box::new(self.expr(o.get(key)?, &o.p(key), ns)?)) };
        if let Some(bop) = BinOp::ALL.iter().find(|b| b.name() == op) {
            let o = Obj::new(v, path, &["op", "a", "b", "dtype"])?;
            let dt = dtype(o.get("dtype")?, &o.p("dtype"))?;
            return Ok(Expr::Binary { op: *bop, a: sub("a", &o)?, b: sub("b", &o)?, dtype: dt });
        }
        if let Some(uop) = UnOp::ALL.iter().find(|u| u.name() == op) {
            let o = Obj::new(v, path, &["op", "a", "dtype"])?;
            let dt = dtype(o.get("dtype")?, &o.p("dtype"))?;
            return Ok(Expr::Unary { op: *uop, a: sub("a", &o)?, dtype: dt });
        }
        match op {
            "const" => {
                let o = Obj::new(v, path, &["op", "value", "dtype"])?;
                let dt = dtype(o.get("dtype")?, &o.p("dtype"))?;
                let val = o.get("value")?;
                let value = match val {
                    Value::String(s) => match s.as_str() {
                        "inf" => ConstValue::Float(f64::INFINITY),
                        "-inf" => ConstValue::Float(f64::NEG_INFINITY),
                        "nan" => ConstValue::Float(f64::NAN),
                        _ => return err(&o.p("value"), "expected a number, \"inf\", \"-inf\" or \"nan\""),
                    },
                    Value::Bool(b) => ConstValue::Int(*b as i64),
                    Value::Number(n) => {
                        if dt.is_float() {
                            ConstValue::Float(n.as_f64().unwrap_or(0.0))
                        } else if let Some(i) = n.as_i64() {
                            ConstValue::Int(i)
                        } else if let Some(u) = n.as_u64() {
                            ConstValue::Int(u as i64)
                        } else {
                            return err(&o.p("value"), format!("an integer constant of {dt} cannot be {n}"));
                        }
                    }
                    _ => return err(&o.p("value"), "expected a number"),
                };
                let value = match (value, dt.is_float()) {
                    (ConstValue::Float(f), false) if dt == DType::U64 => ConstValue::Int(f as u64 as i64),
                    (ConstValue::Float(f), false) => ConstValue::Int(f as i64),
                    (ConstValue::Int(i), true) => ConstValue::Float(i as f64),
                    (v, _) => v,
                };
                Ok(Expr::Const { value, dtype: dt })
            }
            "var" => {
                let o = Obj::new(v, path, &["op", "id", "dtype"])?;
                let id = self.var_id(o.get("id")?, &o.p("id"))?;
                let dt = self.vars[id.0 as usize].dtype;
                if let Some(d) = o.opt("dtype") {
                    if dtype(d, &o.p("dtype"))? != dt {
                        return err(&o.p("dtype"), format!("variable is {dt}"));
                    }
                }
                Ok(Expr::Var { id, dtype: dt })
            }
            "load" => {
                let o = Obj::new(v, path, &["op", "buf", "idx", "dtype", "loc"])?;
                let buf = self.buffer_id(o.get("buf")?, &o.p("buf"))?;
                Ok(Expr::Load {
                    buf,
                    idx: self.exprs(o.get("idx")?, &o.p("idx"), ns)?,
                    dtype: dtype(o.get("dtype")?, &o.p("dtype"))?,
                    loc: loc(o.opt("loc"), &o.p("loc"), ns)?,
                    oob: None,
                })
            }
            "cast" => {
                let o = Obj::new(v, path, &["op", "a", "dtype"])?;
                Ok(Expr::Cast { a: sub("a", &o)?, dtype: dtype(o.get("dtype")?, &o.p("dtype"))? })
            }
            "select" => {
                let o = Obj::new(v, path, &["op", "cond", "a", "b", "dtype"])?;
                Ok(Expr::Select {
                    cond: sub("cond", &o)?,
                    a: sub("a", &o)?,
                    b: sub("b", &o)?,
                    dtype: dtype(o.get("dtype")?, &o.p("dtype"))?,
                })
            }
            _ => err(&format!("{path}.op"), format!("unknown expression op '{op}'")),
        }
    }

    fn region(&self, v: &Value, path: &str, ns: usize) -> R<Region> {
        let o = Obj::new(v, path, &["buf", "dims", "loc"])?;
        let buf = self.buffer_id(o.get("buf")?, &o.p("buf"))?;
        let mut dims = Vec::new();
        for (i, d) in o.arr("dims")?.iter().enumerate() {
            let dp = format!("{path}.dims[{i}]");
            let dobj = Obj::new(d, &dp, &["index", "start", "stop"])?;
            let dim = if let Some(e) = dobj.opt("index") {
                if dobj.opt("start").is_some() || dobj.opt("stop").is_some() {
                    return err(&dp, "a dimension is either an index or a start[/stop]");
                }
                RegionDim::Index(self.expr(e, &dobj.p("index"), ns)?)
            } else {
                let start = self.expr(dobj.get("start")?, &dobj.p("start"), ns)?;
                match dobj.opt("stop") {
                    Some(s) => RegionDim::Slice { start, stop: self.expr(s, &dobj.p("stop"), ns)? },
                    None => RegionDim::Origin(start),
                }
            };
            dims.push(dim);
        }
        Ok(Region { buf, dims, loc: loc(o.opt("loc"), &o.p("loc"), ns)? })
    }

    fn stmts(&self, v: &[Value], path: &str, ns: usize) -> R<Vec<Stmt>> {
        v.iter().enumerate().map(|(i, s)| self.stmt(s, &format!("{path}[{i}]"), ns)).collect()
    }

    fn body(&self, o: &Obj, key: &str, ns: usize) -> R<Vec<Stmt>> {
        self.stmts(o.arr(key)?, &o.p(key), ns)
    }

    fn stmt(&self, v: &Value, path: &str, ns: usize) -> R<Stmt> {
        let Some(op) = v.get("op").and_then(|o| o.as_str()) else {
            return err(path, "expected a statement object with an \"op\"");
        };
        let l = |o: &Obj| loc(o.opt("loc"), &o.p("loc"), ns);
        Ok(match op {
            "store" => {
                let o = Obj::new(v, path, &["op", "buf", "idx", "value", "loc"])?;
                let buf = self.buffer_id(o.get("buf")?, &o.p("buf"))?;
                let idx = self.exprs(o.get("idx")?, &o.p("idx"), ns)?;
                let value = self.expr(o.get("value")?, &o.p("value"), ns)?;
                Stmt::Store { buf, idx, value, loc: l(&o)? }
            }
            "atomic_add" | "atomic_max" | "atomic_min" => {
                let o = Obj::new(v, path, &["op", "buf", "idx", "value", "memory_order", "prev", "loc"])?;
                let buf = self.buffer_id(o.get("buf")?, &o.p("buf"))?;
                let idx = self.exprs(o.get("idx")?, &o.p("idx"), ns)?;
                let value = self.expr(o.get("value")?, &o.p("value"), ns)?;
                let prev = match o.opt("prev") {
                    Some(p) => Some(self.buffer_id(p, &o.p("prev"))?),
                    None => None,
                };
                let mode = atomic_mode(&op["atomic_".len()..], &o)?;
                Stmt::Atomic { mode, buf, idx, value, prev, loc: l(&o)? }
            }
            "copy" => {
                let o = Obj::new(v, path, &["op", "src", "dst", "pad", "atomic", "memory_order", "loc"])?;
                let pad = match o.opt("pad") {
                    Some(p) => Some(self.expr(p, &o.p("pad"), ns)?),
                    None => None,
                };
                let atomic = match o.opt("atomic") {
                    Some(_) => Some(atomic_mode(o.str("atomic")?, &o)?),
                    None => None,
                };
                Stmt::Copy(CopyOp {
                    src: self.region(o.get("src")?, &o.p("src"), ns)?,
                    dst: self.region(o.get("dst")?, &o.p("dst"), ns)?,
                    pad,
                    loc: l(&o)?,
                    inst: None,
                    atomic,
                })
            }
            "barrier_init" | "barrier_arrive" | "barrier_expect_tx" | "barrier_wait" | "tma_copy" => {
                let o = Obj::new(
                    v,
                    path,
                    &["op", "bar", "idx", "count", "bytes", "parity", "src", "dst", "loc"],
                )?;
                let bar = self.buffer_id(o.get("bar")?, &o.p("bar"))?;
                let idx = self.expr(o.get("idx")?, &o.p("idx"), ns)?;
                let kind = match op {
                    "barrier_init" => {
                        let count = o.int("count")?;
                        if !(1..1 << 20).contains(&count) {
                            return err(&o.p("count"), "expected an arrive count from 1 to 2^20 - 1");
                        }
                        BarrierKind::Init { count: count as u32 }
                    }
                    "barrier_arrive" => BarrierKind::Arrive,
                    "barrier_expect_tx" => {
                        BarrierKind::ExpectTx { bytes: self.expr(o.get("bytes")?, &o.p("bytes"), ns)? }
                    }
                    "barrier_wait" => {
                        BarrierKind::Wait { parity: self.expr(o.get("parity")?, &o.p("parity"), ns)? }
                    }
                    _ => BarrierKind::TmaLoad {
                        copy: Box::new(CopyOp {
                            src: self.region(o.get("src")?, &o.p("src"), ns)?,
                            dst: self.region(o.get("dst")?, &o.p("dst"), ns)?,
                            pad: None,
                            loc: l(&o)?,
                            inst: Some(CopyInst::Tma),
                            atomic: None,
                        }),
                    },
                };
                Stmt::Barrier(BarrierOp { kind, bar, idx, loc: l(&o)? })
            }
            "sync" => {
                // T.sync_threads(): the block's barrier; T.sync_threads(id, n): named barrier id over n threads
                let o = Obj::new(v, path, &["op", "id", "threads", "arrive", "loc"])?;
                match o.opt("id") {
                    None => Stmt::inst(crate::inst::Sync),
                    Some(_) => {
                        let id = o.int("id")?;
                        let threads = o.int("threads")?;
                        if !(0..16).contains(&id) || threads <= 0 || threads % 32 != 0 {
                            return err(
                                path,
                                "a named barrier is id 0 to 15 over a positive multiple of 32 threads",
                            );
                        }
                        let arrive = o.opt("arrive").and_then(|a| a.as_bool()).unwrap_or(false);
                        Stmt::inst(crate::inst::NamedBarrier {
                            id: id as u32,
                            threads: threads as u32,
                            arrive,
                        })
                    }
                }
            }
            "cluster_sync" => {
                // T.cluster_sync(): every thread of every block of the thread-block cluster
                Obj::new(v, path, &["op", "loc"])?;
                Stmt::inst(crate::inst::ClusterSync)
            }
            "cluster_arrive" => {
                // T.cluster_arrive(): the first half of a cluster_sync, without waiting
                Obj::new(v, path, &["op", "loc"])?;
                Stmt::inst(crate::inst::ClusterArrive)
            }
            "cluster_wait" => {
                // T.cluster_wait(): the second half, after the block's cluster_arrive
                Obj::new(v, path, &["op", "loc"])?;
                Stmt::inst(crate::inst::ClusterWait)
            }
            "cp_async" => {
                // T.ptx_cp_async(T.access_ptr(S[..], "w"), T.access_ptr(G[..], "r"), n): one
                // thread's asynchronous copy of `bytes` bytes (`src_bytes` read, the rest zeros)
                let o = Obj::new(
                    v,
                    path,
                    &["op", "dst", "dst_idx", "src", "src_idx", "bytes", "src_bytes", "loc"],
                )?;
                let dst = self.buffer_id(o.get("dst")?, &o.p("dst"))?;
                let dst_idx = self.exprs(o.get("dst_idx")?, &o.p("dst_idx"), ns)?;
                let src = self.buffer_id(o.get("src")?, &o.p("src"))?;
                let src_idx = self.exprs(o.get("src_idx")?, &o.p("src_idx"), ns)?;
                let bytes = o.int("bytes")?;
                if ![4, 8, 16].contains(&bytes) {
                    return err(&o.p("bytes"), "a cp.async copies 4, 8 or 16 bytes");
                }
                let src_bytes = self.expr(o.get("src_bytes")?, &o.p("src_bytes"), ns)?;
                Stmt::inst(crate::inst::AsyncCopy {
                    dst,
                    dst_idx,
                    src,
                    src_idx,
                    src_bytes,
                    bytes: bytes as u32,
                })
            }
            "async_commit" => {
                Obj::new(v, path, &["op", "loc"])?;
                Stmt::inst(crate::inst::AsyncCommit)
            }
            "async_wait" => {
                let o = Obj::new(v, path, &["op", "pending", "loc"])?;
                let n = o.int("pending")?;
                if !(0..=7).contains(&n) {
                    return err(&o.p("pending"), "cp.async.wait_group takes 0 to 7 groups in flight");
                }
                Stmt::inst(crate::inst::AsyncWait { pending: n as u32 })
            }
            "cp_async_arrive" => {
                let o = Obj::new(v, path, &["op", "bar", "idx", "loc"])?;
                let bar = self.buffer_id(o.get("bar")?, &o.p("bar"))?;
                let idx = self.expr(o.get("idx")?, &o.p("idx"), ns)?;
                Stmt::inst(crate::inst::AsyncArrive { bar, idx })
            }
            "call_extern" => {
                // T.call_extern(dtype, "name", *args): a device function the compiler does not
                // know (the user's, from T.import_source, or a CUDA builtin), called by each
                // thread that runs it; a value result goes to `result` (a register element)
                let o = Obj::new(v, path, &["op", "name", "args", "result", "loc"])?;
                let name = o.str("name")?.to_string();
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                {
                    return err(&o.p("name"), format!("expected a C function name, got {name:?}"));
                }
                let mut args = Vec::new();
                for (i, a) in o.arr("args")?.iter().enumerate() {
                    let ap = format!("{}[{i}]", o.p("args"));
                    let kind = a.get("kind").and_then(|k| k.as_str()).unwrap_or("");
                    args.push(match kind {
                        "value" => {
                            let ao = Obj::new(a, &ap, &["kind", "value"])?;
                            crate::inst::ExternArg::Value(self.expr(ao.get("value")?, &ao.p("value"), ns)?)
                        }
                        "str" => {
                            let ao = Obj::new(a, &ap, &["kind", "value"])?;
                            crate::inst::ExternArg::Str(ao.str("value")?.to_string())
                        }
                        "ptr" => {
                            let ao = Obj::new(a, &ap, &["kind", "buf", "idx", "elements", "mode", "ctype"])?;
                            let buf = self.buffer_id(ao.get("buf")?, &ao.p("buf"))?;
                            let idx = self.exprs(ao.get("idx")?, &ao.p("idx"), ns)?;
                            let elements = ao.int("elements")?;
                            if elements < 1 {
                                return err(&ao.p("elements"), "an address covers at least one element");
                            }
                            let (read, write) = match ao.str("mode")? {
                                "r" => (true, false),
                                "w" => (false, true),
                                "rw" => (true, true),
                                m => {
                                    return err(
                                        &ao.p("mode"),
                                        format!("expected \"r\", \"w\" or \"rw\", got {m:?}"),
                                    )
                                }
                            };
                            let ctype = match ao.opt("ctype") {
                                None | Some(Value::Null) => None,
                                Some(_) => Some(ao.str("ctype")?.to_string()),
                            };
                            crate::inst::ExternArg::Address { buf, idx, elements, read, write, ctype }
                        }
                        k => {
                            return err(
                                &ap,
                                format!("expected an argument of kind value, ptr or str, got {k:?}"),
                            )
                        }
                    });
                }
                let result = match o.opt("result") {
                    None | Some(Value::Null) => None,
                    Some(r) => {
                        let rp = o.p("result");
                        let ro = Obj::new(r, &rp, &["buf", "idx"])?;
                        let buf = self.buffer_id(ro.get("buf")?, &ro.p("buf"))?;
                        Some((buf, self.exprs(ro.get("idx")?, &ro.p("idx"), ns)?))
                    }
                };
                Stmt::inst(crate::inst::CallExtern { name, args, result })
            }
            "bind_pointer" => {
                // T.make_tensor(address, shape, dtype): the global buffer `buf` is the memory at
                // `addr` from here on
                let o = Obj::new(v, path, &["op", "buf", "addr", "loc"])?;
                let buf = self.buffer_id(o.get("buf")?, &o.p("buf"))?;
                let addr = self.expr(o.get("addr")?, &o.p("addr"), ns)?;
                if !matches!(addr.dtype(), crate::types::DType::I64 | crate::types::DType::U64) {
                    return err(&o.p("addr"), "an address is a 64-bit integer (int64 or uint64)");
                }
                Stmt::inst(crate::inst::BindPointer { buf, addr })
            }
            "break" => {
                // T.loop_break() (a Python `break` under a traced condition): leave the loop
                Obj::new(v, path, &["op", "loc"])?;
                Stmt::inst(crate::inst::LoopBreak)
            }
            "fence_proxy_async" => {
                // T.fence_proxy_async(): orders this thread's generic-proxy shared accesses
                // before the async proxy's (TMA, wgmma) that a barrier then releases
                Obj::new(v, path, &["op", "loc"])?;
                Stmt::inst(crate::inst::FenceProxyAsync)
            }
            "set_max_nreg" => {
                let o = Obj::new(v, path, &["op", "regs", "inc", "loc"])?;
                let regs = o.int("regs")?;
                if !(24..=256).contains(&regs) || regs % 8 != 0 {
                    return err(&o.p("regs"), "expected a multiple of 8 from 24 to 256");
                }
                Stmt::inst(crate::inst::SetMaxNReg { inc: o.bool("inc")?, regs: regs as u32 })
            }
            "fill" => {
                let o = Obj::new(v, path, &["op", "dst", "value", "loc"])?;
                Stmt::Fill {
                    dst: self.region(o.get("dst")?, &o.p("dst"), ns)?,
                    value: self.expr(o.get("value")?, &o.p("value"), ns)?,
                    loc: l(&o)?,
                }
            }
            "reduce" => {
                let o = Obj::new(v, path, &["op", "kind", "src", "dst", "dim", "clear", "loc"])?;
                let kind = match o.str("kind")? {
                    "sum" => ReduceKind::Sum,
                    "max" => ReduceKind::Max,
                    "min" => ReduceKind::Min,
                    "absmax" => ReduceKind::AbsMax,
                    k => return err(&o.p("kind"), format!("unknown reduction '{k}'")),
                };
                let dim = o.int("dim")?;
                if dim < 0 {
                    return err(&o.p("dim"), "expected a non-negative dimension");
                }
                Stmt::Reduce(ReduceOp {
                    kind,
                    src: self.buffer_id(o.get("src")?, &o.p("src"))?,
                    dst: self.buffer_id(o.get("dst")?, &o.p("dst"))?,
                    dim: dim as usize,
                    clear: o.bool("clear")?,
                    loc: l(&o)?,
                })
            }
            "gemm" => {
                let o = Obj::new(
                    v,
                    path,
                    &["op", "a", "b", "c", "transpose_a", "transpose_b", "policy", "clear_accum", "loc"],
                )?;
                let policy = match o.str("policy")? {
                    "square" => WarpPolicy::Square,
                    "full_row" => WarpPolicy::FullRow,
                    "full_col" => WarpPolicy::FullCol,
                    p => return err(&o.p("policy"), format!("unknown warp policy '{p}'")),
                };
                // an operand is a buffer id, or a region of one (`A_s[k % 2, :, :]`)
                let operand = |key: &str| -> R<(BufferId, Vec<RegionDim>)> {
                    let v = o.get(key)?;
                    if v.is_object() {
                        let r = self.region(v, &o.p(key), ns)?;
                        Ok((r.buf, r.dims))
                    } else {
                        Ok((self.buffer_id(v, &o.p(key))?, vec![]))
                    }
                };
                let ((a, a_view), (b, b_view)) = (operand("a")?, operand("b")?);
                Stmt::Gemm(GemmOp {
                    a,
                    b,
                    a_view,
                    b_view,
                    c: self.buffer_id(o.get("c")?, &o.p("c"))?,
                    transpose_a: o.bool("transpose_a")?,
                    transpose_b: o.bool("transpose_b")?,
                    policy,
                    clear_accum: o.bool("clear_accum")?,
                    loc: l(&o)?,
                    a_stage: None,
                    b_stage: None,
                    inst: None,
                })
            }
            "parallel" => {
                let o = Obj::new(v, path, &["op", "vars", "extents", "body", "loc"])?;
                let vars = o
                    .arr("vars")?
                    .iter()
                    .enumerate()
                    .map(|(i, x)| self.var_id(x, &format!("{}[{i}]", o.p("vars"))))
                    .collect::<R<Vec<_>>>()?;
                let mut extents = Vec::new();
                for (i, x) in o.arr("extents")?.iter().enumerate() {
                    match x.as_i64() {
                        Some(e) if e > 0 && e <= 1 << 24 => extents.push(e),
                        _ => {
                            return err(
                                &format!("{}[{i}]", o.p("extents")),
                                "expected an integer from 1 to 2^24",
                            )
                        }
                    }
                }
                if vars.len() != extents.len() || vars.is_empty() {
                    return err(path, "vars and extents must be non-empty and of equal length");
                }
                Stmt::Parallel { vars, extents, body: self.body(&o, "body", ns)?, loc: l(&o)?, layout: None }
            }
            "for" => {
                let o = Obj::new(
                    v,
                    path,
                    &["op", "var", "start", "extent", "kind", "stages", "schedule", "body", "loc"],
                )?;
                let kind = match o.str("kind")? {
                    "serial" => ForKind::Serial,
                    "unroll" => ForKind::Unroll,
                    "pipelined" => {
                        let s = o.int("stages")?;
                        // TileLang's default num_stages=0, like 1, means no software pipelining
                        if !(0..=16).contains(&s) {
                            return err(&o.p("stages"), "expected 0 to 16 stages");
                        }
                        let schedule = match o.opt("schedule") {
                            Some(x) => Some(self.schedule(x, &o.p("schedule"))?),
                            None => None,
                        };
                        ForKind::Pipelined { stages: s as u32, schedule }
                    }
                    k => return err(&o.p("kind"), format!("unknown loop kind '{k}'")),
                };
                Stmt::For {
                    var: self.var_id(o.get("var")?, &o.p("var"))?,
                    start: self.expr(o.get("start")?, &o.p("start"), ns)?,
                    extent: self.expr(o.get("extent")?, &o.p("extent"), ns)?,
                    kind,
                    body: self.body(&o, "body", ns)?,
                    loc: l(&o)?,
                }
            }
            "if" => {
                let o = Obj::new(v, path, &["op", "cond", "then", "else", "loc"])?;
                Stmt::If {
                    cond: self.expr(o.get("cond")?, &o.p("cond"), ns)?,
                    then: self.body(&o, "then", ns)?,
                    otherwise: match o.opt("else") {
                        Some(_) => self.body(&o, "else", ns)?,
                        None => vec![],
                    },
                    loc: l(&o)?,
                }
            }
            "print" => {
                let o = Obj::new(v, path, &["op", "value", "tile", "msg", "block", "loc"])?;
                let what = match (o.opt("value"), o.opt("tile")) {
                    (Some(e), None) => Printed::Value(self.expr(e, &o.p("value"), ns)?),
                    (None, Some(r)) => Printed::Tile(self.region(r, &o.p("tile"), ns)?),
                    _ => return err(path, "a print has either a \"value\" or a \"tile\""),
                };
                let block = match o.opt("block") {
                    None => None,
                    Some(b) => {
                        let coords: Option<Vec<i64>> =
                            b.as_array().map(|a| a.iter().filter_map(|x| x.as_i64()).collect());
                        match coords {
                            Some(c)
                                if (1..=3).contains(&c.len())
                                    && c.len() == b.as_array().map_or(0, |a| a.len())
                                    && c.iter().all(|x| (0..=i32::MAX as i64).contains(x)) =>
                            {
                                Some(c)
                            }
                            _ => return err(&o.p("block"), "expected 1 to 3 non-negative block indices"),
                        }
                    }
                };
                Stmt::Print { what, msg: o.str("msg")?.to_string(), block, loc: l(&o)? }
            }
            "device_assert" => {
                let o = Obj::new(v, path, &["op", "cond", "msg", "loc"])?;
                Stmt::DeviceAssert {
                    cond: self.expr(o.get("cond")?, &o.p("cond"), ns)?,
                    msg: o.str("msg")?.to_string(),
                    loc: l(&o)?,
                }
            }
            _ => return err(&format!("{path}.op"), format!("unknown statement op '{op}'")),
        })
    }
}
