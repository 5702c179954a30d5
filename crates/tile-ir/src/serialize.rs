//! Writing a tile-level [`Module`] back to the serialized program format (docs/format.md):
//! the inverse of [`crate::parse::parse_program`], so a module read from a file, or built by
//! a test, can be saved and read again unchanged.

use crate::ir::*;
use serde_json::{json, Map, Value};

fn loc(l: crate::Loc) -> Value {
    if l.is_known() {
        json!([l.source, l.line, l.col])
    } else {
        Value::Null
    }
}

fn with_loc(mut v: Value, l: crate::Loc) -> Value {
    if l.is_known() {
        v["loc"] = loc(l);
    }
    v
}

pub fn expr(e: &Expr) -> Value {
    match e {
        Expr::Const { value, dtype } => {
            let v = match value {
                ConstValue::Int(i) if *dtype == crate::DType::U64 => json!(*i as u64),
                ConstValue::Int(i) => json!(i),
                ConstValue::Float(f) if f.is_nan() => json!("nan"),
                ConstValue::Float(f) if f.is_infinite() => json!(if *f > 0.0 { "inf" } else { "-inf" }),
                ConstValue::Float(f) => json!(f),
            };
            json!({"op": "const", "value": v, "dtype": dtype.name()})
        }
        Expr::Var { id, dtype } => json!({"op": "var", "id": id.0, "dtype": dtype.name()}),
        Expr::Load { buf, idx, dtype, loc: l, .. } => with_loc(
            json!({"op": "load", "buf": buf.0, "idx": idx.iter().map(expr).collect::<Vec<_>>(), "dtype": dtype.name()}),
            *l,
        ),
        Expr::Binary { op, a, b, dtype } => {
            json!({"op": op.name(), "a": expr(a), "b": expr(b), "dtype": dtype.name()})
        }
        Expr::Unary { op, a, dtype } => json!({"op": op.name(), "a": expr(a), "dtype": dtype.name()}),
        Expr::Cast { a, dtype } => json!({"op": "cast", "a": expr(a), "dtype": dtype.name()}),
        Expr::Select { cond, a, b, dtype } => {
            json!({"op": "select", "cond": expr(cond), "a": expr(a), "b": expr(b), "dtype": dtype.name()})
        }
        // thread level only; not part of the serialized format
        Expr::ShflXor { .. } => json!({"op": "shfl_xor"}),
    }
}

fn region(r: &Region) -> Value {
    let dims: Vec<Value> = r
        .dims
        .iter()
        .map(|d| match d {
            RegionDim::Index(e) => json!({"index": expr(e)}),
            RegionDim::Slice { start, stop } => json!({"start": expr(start), "stop": expr(stop)}),
            RegionDim::Origin(e) => json!({"start": expr(e)}),
        })
        .collect();
    with_loc(json!({"buf": r.buf.0, "dims": dims}), r.loc)
}

fn stmts(body: &[Stmt], sc: &[Schedule]) -> Vec<Value> {
    body.iter().filter_map(|s| stmt(s, sc)).collect()
}

fn stmt(s: &Stmt, sc: &[Schedule]) -> Option<Value> {
    let v = match s {
        Stmt::Store { buf, idx, value, .. } => {
            json!({"op": "store", "buf": buf.0, "idx": idx.iter().map(expr).collect::<Vec<_>>(), "value": expr(value)})
        }
        Stmt::Atomic { mode, buf, idx, value, prev, .. } => {
            let mut v = json!({
                "op": format!("atomic_{}", mode.op.name()),
                "buf": buf.0,
                "idx": idx.iter().map(expr).collect::<Vec<_>>(),
                "value": expr(value),
            });
            if mode.order != MemoryOrder::Relaxed {
                v["memory_order"] = json!(mode.order.name());
            }
            if let Some(p) = prev {
                v["prev"] = json!(p.0);
            }
            v
        }
        Stmt::Copy(op) => {
            let mut v = json!({"op": "copy", "src": region(&op.src), "dst": region(&op.dst), "pad": op.pad.as_ref().map(expr)});
            if let Some(mode) = op.atomic {
                v["atomic"] = json!(mode.op.name());
                if mode.order != MemoryOrder::Relaxed {
                    v["memory_order"] = json!(mode.order.name());
                }
            }
            v
        }
        Stmt::Fill { dst, value, .. } => json!({"op": "fill", "dst": region(dst), "value": expr(value)}),
        Stmt::Barrier(op) => {
            let mut v = json!({"bar": op.bar.0, "idx": expr(&op.idx)});
            match &op.kind {
                BarrierKind::Init { count } => {
                    v["op"] = json!("barrier_init");
                    v["count"] = json!(count);
                }
                BarrierKind::Arrive => v["op"] = json!("barrier_arrive"),
                BarrierKind::ExpectTx { bytes } => {
                    v["op"] = json!("barrier_expect_tx");
                    v["bytes"] = expr(bytes);
                }
                BarrierKind::Wait { parity } => {
                    v["op"] = json!("barrier_wait");
                    v["parity"] = expr(parity);
                }
                BarrierKind::TmaLoad { copy } => {
                    v["op"] = json!("tma_copy");
                    v["src"] = region(&copy.src);
                    v["dst"] = region(&copy.dst);
                }
            }
            v
        }
        Stmt::Inst(crate::inst::Inst::SetMaxNReg(i)) => {
            json!({"op": "set_max_nreg", "regs": i.regs, "inc": i.inc})
        }
        Stmt::Inst(crate::inst::Inst::Sync(_)) => json!({"op": "sync"}),
        Stmt::Inst(crate::inst::Inst::NamedBarrier(b)) => {
            let mut v = json!({"op": "sync", "id": b.id, "threads": b.threads});
            if b.arrive {
                v["arrive"] = json!(true);
            }
            v
        }
        Stmt::Inst(crate::inst::Inst::LoopBreak(_)) => json!({"op": "break"}),
        Stmt::Inst(crate::inst::Inst::BindPointer(b)) => {
            json!({"op": "bind_pointer", "buf": b.buf.0, "addr": expr(&b.addr)})
        }
        Stmt::Inst(crate::inst::Inst::CallExtern(c)) => {
            use crate::inst::ExternArg;
            let args: Vec<Value> = c
                .args
                .iter()
                .map(|a| match a {
                    ExternArg::Value(e) => json!({"kind": "value", "value": expr(e)}),
                    ExternArg::Str(t) => json!({"kind": "str", "value": t}),
                    ExternArg::Address { buf, idx, elements, read, write, ctype } => {
                        let mut v = json!({
                            "kind": "ptr", "buf": buf.0, "idx": idx.iter().map(expr).collect::<Vec<_>>(),
                            "elements": elements,
                            "mode": match (read, write) { (true, true) => "rw", (false, true) => "w", _ => "r" },
                        });
                        if let Some(c) = ctype {
                            v["ctype"] = json!(c);
                        }
                        v
                    }
                })
                .collect();
            let mut v = json!({"op": "call_extern", "name": c.name, "args": args});
            if let Some((b, idx)) = &c.result {
                v["result"] = json!({"buf": b.0, "idx": idx.iter().map(expr).collect::<Vec<_>>()});
            }
            v
        }
        Stmt::Inst(crate::inst::Inst::AsyncCopy(c)) => json!({
            "op": "cp_async", "dst": c.dst.0, "dst_idx": c.dst_idx.iter().map(expr).collect::<Vec<_>>(),
            "src": c.src.0, "src_idx": c.src_idx.iter().map(expr).collect::<Vec<_>>(),
            "bytes": c.bytes, "src_bytes": expr(&c.src_bytes)
        }),
        Stmt::Inst(crate::inst::Inst::AsyncCommit(_)) => json!({"op": "async_commit"}),
        Stmt::Inst(crate::inst::Inst::AsyncWait(w)) => json!({"op": "async_wait", "pending": w.pending}),
        Stmt::Inst(crate::inst::Inst::AsyncArrive(a)) => {
            json!({"op": "cp_async_arrive", "bar": a.bar.0, "idx": expr(&a.idx)})
        }
        Stmt::Reduce(op) => json!({
            "op": "reduce", "kind": op.kind.name(), "src": op.src.0, "dst": op.dst.0, "dim": op.dim, "clear": op.clear
        }),
        Stmt::Gemm(op) => {
            // a viewed operand is a region (its buffer and dimensions), a whole one its id
            let operand = |buf: BufferId, view: &[RegionDim]| {
                if view.is_empty() {
                    json!(buf.0)
                } else {
                    let r = region(&Region { buf, dims: view.to_vec(), loc: crate::Loc::UNKNOWN });
                    json!({"buf": r["buf"], "dims": r["dims"]})
                }
            };
            json!({
                "op": "gemm", "a": operand(op.a, &op.a_view), "b": operand(op.b, &op.b_view), "c": op.c.0,
                "transpose_a": op.transpose_a, "transpose_b": op.transpose_b, "policy": op.policy.name(),
                "clear_accum": op.clear_accum
            })
        }
        Stmt::Parallel { vars, extents, body, .. } => json!({
            "op": "parallel", "vars": vars.iter().map(|v| v.0).collect::<Vec<_>>(), "extents": extents, "body": stmts(body, sc)
        }),
        Stmt::For { var, start, extent, kind, body, .. } => {
            let mut v = json!({"op": "for", "var": var.0, "start": expr(start), "extent": expr(extent), "body": stmts(body, sc)});
            match kind {
                ForKind::Serial => v["kind"] = json!("serial"),
                ForKind::Unroll => v["kind"] = json!("unroll"),
                ForKind::Pipelined { stages, schedule } => {
                    v["kind"] = json!("pipelined");
                    v["stages"] = json!(stages);
                    if let Some(sc) = schedule.and_then(|k| sc.get(k as usize)) {
                        v["schedule"] = json!({"stage": sc.stage, "order": sc.order});
                    }
                }
            }
            v
        }
        Stmt::If { cond, then, otherwise, .. } => {
            json!({"op": "if", "cond": expr(cond), "then": stmts(then, sc), "else": stmts(otherwise, sc)})
        }
        Stmt::Print { what, msg, block, .. } => {
            let mut v = json!({"op": "print", "msg": msg});
            match what {
                Printed::Value(e) => v["value"] = expr(e),
                Printed::Tile(r) => v["tile"] = region(r),
            }
            if let Some(b) = block {
                v["block"] = json!(b);
            }
            v
        }
        Stmt::DeviceAssert { cond, msg, .. } => {
            json!({"op": "device_assert", "cond": expr(cond), "msg": msg})
        }
        // thread-level statements are not part of the serialized format
        Stmt::Let { .. } | Stmt::Async { .. } | Stmt::Inst(_) | Stmt::Comment(_) | Stmt::SourceLine(_) => {
            return None
        }
    };
    Some(with_loc(v, s.loc()))
}

/// The serialized program of a tile-level module.
pub fn program_json(m: &Module) -> Value {
    let sources: Vec<Value> = m
        .sources
        .files
        .iter()
        .map(|f| {
            let lines: Map<String, Value> = f.lines.iter().map(|(n, t)| (n.to_string(), json!(t))).collect();
            json!({"file": f.file, "lines": lines})
        })
        .collect();
    let params: Vec<Value> = m
        .params
        .iter()
        .map(|p| match p {
            Param::Tensor { name, buffer } => json!({"kind": "tensor", "name": name, "buffer": buffer.0}),
            Param::Scalar { name, var } => json!({"kind": "scalar", "name": name, "var": var.0}),
        })
        .collect();
    let buffers: Vec<Value> = m
        .buffers
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let shape: Vec<Value> = b
                .shape
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => json!(n),
                    Dim::Size(v) => expr(&Expr::Var { id: *v, dtype: m.var(*v).dtype }),
                })
                .collect();
            let mut o =
                json!({"id": i, "name": b.name, "scope": b.scope.name(), "dtype": b.dtype.name(), "shape": shape});
            if let Some(s) = b.swizzle {
                let row_bytes = b.extents().last().copied().unwrap_or(1) * b.dtype.bytes() as i64;
                o["swizzle"] = if s == crate::Swizzle::chunks_of_rows(row_bytes) {
                    json!(true)
                } else {
                    json!({"bits": s.bits, "base": s.base, "shift": s.shift})
                };
            }
            if let Some(p) = b.panel {
                o["panel"] = json!(p);
            }
            if let Some(r) = b.alias_of {
                o["alias_of"] = json!(r.0);
            }
            with_loc(o, b.loc)
        })
        .collect();
    let vars: Vec<Value> = m
        .vars
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut o = json!({"id": i, "name": v.name, "dtype": v.dtype.name()});
            match v.kind {
                VarKind::BlockIdx(axis) => {
                    o["kind"] = json!("block_idx");
                    o["axis"] = json!(axis);
                }
                VarKind::Param => o["kind"] = json!("param"),
                VarKind::ThreadIdx => o["kind"] = json!("thread_idx"),
                VarKind::Size { multiple_of } => {
                    o["kind"] = json!("size");
                    if multiple_of != 1 {
                        o["multiple_of"] = json!(multiple_of);
                    }
                }
                _ => o["kind"] = json!("loop"),
            }
            o
        })
        .collect();
    let mut kernel = json!({
        "grid": m.kernel.grid.iter().map(expr).collect::<Vec<_>>(),
        "threads": m.kernel.user_threads.unwrap_or(m.kernel.threads),
        "body": stmts(&m.kernel.body, &m.schedules),
    });
    if !m.kernel.extern_sources.is_empty() {
        kernel["extern_sources"] = json!(m.kernel.extern_sources);
    }
    if let Some(b) = m.kernel.reg_budget {
        let mut v = json!({});
        if b.producer > 0 {
            v["producer"] = json!(b.producer);
        }
        if b.consumer > 0 {
            v["consumer"] = json!(b.consumer);
        }
        if b.none {
            v["none"] = json!(true);
        }
        kernel["reg_budget"] = v;
    }
    if let Some(c) = m.kernel.cluster {
        kernel["cluster"] = json!(c);
    }
    if let Some(r) = m.kernel.raster {
        kernel["raster"] = json!({"panel": r.panel, "order": if r.by_rows { "row" } else { "col" }});
    }
    let mut program = json!({
        "version": crate::parse::FORMAT_VERSION,
        "name": m.name,
        "sources": sources,
        "params": params,
        "buffers": buffers,
        "vars": vars,
        "kernel": with_loc(kernel, m.kernel.loc),
    });
    if !m.scratch.is_empty() {
        program["scratch"] = json!(m.scratch.iter().map(|b| b.0).collect::<Vec<_>>());
    }
    program
}
