//! `device_assert` and `print` on the interpreter: a false assert is an error at the user's
//! line naming the block (and the iteration inside a `parallel` loop); a true one, and
//! printing, leave the results alone.

mod common;

use common::*;
use serde_json::{json, Value};
use tile_interp::{run, Arg};
use tile_ir::{Loc, Module};

fn c(v: i64) -> Value {
    json!({"op": "const", "dtype": "int32", "value": v})
}
fn var(id: u32) -> Value {
    json!({"op": "var", "dtype": "int32", "id": id})
}
fn load_a(idx: Value) -> Value {
    json!({"op": "load", "dtype": "int32", "buf": 0, "idx": [idx], "loc": [0, 4, 20]})
}
fn lt(a: Value, b: Value) -> Value {
    json!({"op": "lt", "dtype": "bool", "a": a, "b": b})
}

/// A kernel over a grid of 2 blocks: A: int32[8] (global), variables 0 = bx, 1 = i.
fn program(body: Vec<Value>) -> Module {
    let lines: serde_json::Map<String, Value> =
        (1..=9).map(|n| (n.to_string(), Value::String(format!("    line {n}")))).collect();
    let doc = json!({
        "version": 1,
        "name": "k",
        "sources": [{"file": "t.py", "lines": lines}],
        "params": [{"kind": "tensor", "name": "A", "buffer": 0}],
        "buffers": [{"id": 0, "name": "A", "scope": "global", "dtype": "int32", "shape": [8]}],
        "vars": [
            {"id": 0, "name": "bx", "kind": "block_idx", "axis": 0, "dtype": "int32"},
            {"id": 1, "name": "i", "kind": "loop", "dtype": "int32"},
        ],
        "kernel": {"grid": [c(2)], "threads": 128, "body": body, "loc": [0, 1, 1]},
    });
    parse_and_verify(&doc.to_string())
}

fn assert_per_element(limit: i64) -> Module {
    program(vec![json!({"op": "parallel", "vars": [1], "extents": [8], "loc": [0, 3, 5], "body": [
        json!({"op": "device_assert", "cond": lt(load_a(var(1)), c(limit)), "msg": "A[i] small", "loc": [0, 4, 9]}),
    ]})])
}

fn a() -> Vec<Arg> {
    vec![Arg::Tensor(i32_bytes(&[0, 1, 2, 3, 4, 5, 6, 7]))]
}

#[test]
fn a_false_assert_names_the_line_the_block_and_the_iteration() {
    let m = assert_per_element(5);
    let d = run(&m, &mut a()).expect_err("A[5] is not below 5");
    assert_eq!(d.labels[0].0, Loc { source: 0, line: 4, col: 9 });
    assert_eq!(d.message, "device assert failed: A[i] small at (i=5) (in block (0, 0, 0))");
    assert!(d.render(&m.sources).contains("t.py:4:9"));
    run(&assert_per_element(8), &mut a()).expect("every A[i] is below 8");
}

#[test]
fn an_assert_outside_parallel_runs_once_per_block() {
    let m =
        program(vec![json!({"op": "device_assert", "cond": lt(var(0), c(1)), "msg": "", "loc": [0, 2, 5]})]);
    let d = run(&m, &mut a()).expect_err("block 1 fails");
    assert_eq!(d.message, "device assert failed (in block (1, 0, 0))");
}

#[test]
fn printing_changes_nothing() {
    let m = program(vec![
        json!({"op": "print", "value": load_a(var(0)), "msg": "A[bx]", "loc": [0, 2, 5]}),
        json!({"op": "print", "tile": {"buf": 0, "dims": [{"start": c(2), "stop": c(6)}]}, "msg": "", "block": [1], "loc": [0, 3, 5]}),
        json!({"op": "parallel", "vars": [1], "extents": [8], "loc": [0, 4, 5], "body": [
            json!({"op": "print", "value": var(1), "msg": "i", "block": [0], "loc": [0, 5, 9]}),
        ]}),
    ]);
    let mut args = a();
    run(&m, &mut args).unwrap();
    assert_eq!(args, a());
}
