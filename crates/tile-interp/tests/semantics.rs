//! Small hand-written programs pinning down the interpreter's semantics and errors:
//! Python floor division, division by zero, on-chip range errors at the user's line,
//! per-iteration `local` temporaries, short-circuit `select`, argument checking, uint64
//! values past 2^63.

mod common;

use common::*;
use serde_json::{json, Value};
use tile_interp::{run, Arg};
use tile_ir::{Diagnostic, Loc, Module};

fn c(v: i64) -> Value {
    json!({"op": "const", "dtype": "int32", "value": v})
}
fn cf(v: f64) -> Value {
    json!({"op": "const", "dtype": "float32", "value": v})
}
fn var(id: u32) -> Value {
    json!({"op": "var", "dtype": "int32", "id": id})
}
fn load(buf: u32, idx: Vec<Value>, dtype: &str, line: u32) -> Value {
    json!({"op": "load", "dtype": dtype, "buf": buf, "idx": idx, "loc": [0, line, 5]})
}
fn bin(op: &str, a: Value, b: Value, dtype: &str) -> Value {
    json!({"op": op, "dtype": dtype, "a": a, "b": b})
}
fn store(buf: u32, idx: Vec<Value>, value: Value, line: u32) -> Value {
    json!({"op": "store", "buf": buf, "idx": idx, "value": value, "loc": [0, line, 9]})
}
fn parallel(vars: Vec<u32>, extents: Vec<i64>, body: Vec<Value>) -> Value {
    json!({"op": "parallel", "vars": vars, "extents": extents, "body": body, "loc": [0, 2, 5]})
}
fn buffer(id: u32, name: &str, scope: &str, dtype: &str, shape: Vec<i64>) -> Value {
    json!({"id": id, "name": name, "scope": scope, "dtype": dtype, "shape": shape, "loc": [0, 1, 1]})
}

/// A one-block kernel named `k` with variables 0 = bx, 1 = i (loop), 2 = n (int32 param),
/// 3 = t (loop); tensor parameters are the global buffers, in order, then `n`.
fn program(buffers: Vec<Value>, body: Vec<Value>) -> Module {
    let lines: serde_json::Map<String, Value> =
        (1..=20).map(|n| (n.to_string(), Value::String(format!("    line {n} of the kernel")))).collect();
    let mut params: Vec<Value> = buffers
        .iter()
        .filter(|b| b["scope"] == "global")
        .map(|b| json!({"kind": "tensor", "name": b["name"], "buffer": b["id"]}))
        .collect();
    params.push(json!({"kind": "scalar", "name": "n", "var": 2}));
    let doc = json!({
        "version": 1,
        "name": "k",
        "sources": [{"file": "t.py", "lines": lines}],
        "params": params,
        "buffers": buffers,
        "vars": [
            {"id": 0, "name": "bx", "kind": "block_idx", "axis": 0, "dtype": "int32"},
            {"id": 1, "name": "i", "kind": "loop", "dtype": "int32"},
            {"id": 2, "name": "n", "kind": "param", "dtype": "int32"},
            {"id": 3, "name": "t", "kind": "loop", "dtype": "int32"},
        ],
        "kernel": {"grid": [c(1)], "threads": 128, "body": body, "loc": [0, 1, 1]},
    });
    parse_and_verify(&doc.to_string())
}

fn ints(v: &[i32]) -> Arg {
    Arg::Tensor(i32_bytes(v))
}

fn at_line(d: &Diagnostic, line: u32) {
    assert_eq!(d.labels[0].0, Loc { source: 0, line, col: 9 }, "{}", d.message);
}

/// Q[i] = A[i] // n, R[i] = A[i] % n over 8 elements.
fn divide() -> Module {
    let a_i = || load(0, vec![var(1)], "int32", 3);
    program(
        vec![
            buffer(0, "A", "global", "int32", vec![8]),
            buffer(1, "Q", "global", "int32", vec![8]),
            buffer(2, "R", "global", "int32", vec![8]),
        ],
        vec![parallel(
            vec![1],
            vec![8],
            vec![
                store(1, vec![var(1)], bin("floordiv", a_i(), var(2), "int32"), 3),
                store(2, vec![var(1)], bin("floormod", a_i(), var(2), "int32"), 4),
            ],
        )],
    )
}

#[test]
fn floor_division_by_negative_numbers() {
    let m = divide();
    let a = [7, -7, 6, -6, 0, 1, -1, i32::MIN];
    for n in [-3i64, 3, -1] {
        let mut args = vec![ints(&a), ints(&[0; 8]), ints(&[0; 8]), Arg::Int(n)];
        run(&m, &mut args).unwrap();
        let (q, r) = (bytes_i32(tensor(&args[1])), bytes_i32(tensor(&args[2])));
        for k in 0..8 {
            let (x, n) = (a[k] as i64, n);
            let want_q = (x as f64 / n as f64).floor() as i64;
            assert_eq!(q[k] as i64, want_q as i32 as i64, "{x} // {n}");
            assert_eq!(r[k] as i64, x - want_q * n, "{x} % {n}");
        }
    }
}

#[test]
fn integer_division_by_zero_is_an_error_at_the_line() {
    let m = divide();
    let mut args = vec![ints(&[1; 8]), ints(&[0; 8]), ints(&[0; 8]), Arg::Int(0)];
    let d = run(&m, &mut args).unwrap_err();
    assert!(d.message.contains("division by zero"), "{}", d.message);
    at_line(&d, 3);
    let text = d.render(&m.sources);
    assert!(text.contains("t.py:3") && text.contains("line 3 of the kernel"), "{text}");
}

#[test]
fn on_chip_index_out_of_range_names_the_line() {
    // S[i + 2] = 1.0 for i in 0..4 on a shared buffer of 4 elements
    let m = program(
        vec![buffer(0, "A", "global", "float32", vec![4]), buffer(1, "S", "shared", "float32", vec![4])],
        vec![parallel(vec![1], vec![4], vec![store(1, vec![bin("add", var(1), c(2), "int32")], cf(1.0), 6)])],
    );
    let d = run(&m, &mut [Arg::Tensor(vec![0; 16]), Arg::Int(0)]).unwrap_err();
    assert!(d.message.contains("'S'") && d.message.contains("[4]"), "{}", d.message);
    at_line(&d, 6);

    // a fragment read past its end: the load's own line
    let m = program(
        vec![buffer(0, "A", "global", "float32", vec![4]), buffer(1, "F", "fragment", "float32", vec![4])],
        vec![parallel(
            vec![1],
            vec![4],
            vec![store(0, vec![var(1)], load(1, vec![bin("add", var(1), c(1), "int32")], "float32", 8), 7)],
        )],
    );
    let d = run(&m, &mut [Arg::Tensor(vec![0; 16]), Arg::Int(0)]).unwrap_err();
    assert!(d.message.contains("'F'"), "{}", d.message);
    assert_eq!(d.labels[0].0, Loc { source: 0, line: 8, col: 5 });
}

#[test]
fn global_edges_read_zero_and_drop_writes() {
    // B[i + n] = A[i + n] + 1 for i in 0..8, on tensors of 6: reads past the edge give 0
    let idx = || bin("add", var(1), var(2), "int32");
    let m = program(
        vec![buffer(0, "A", "global", "int32", vec![6]), buffer(1, "B", "global", "int32", vec![6])],
        vec![parallel(
            vec![1],
            vec![8],
            vec![
                store(0, vec![idx()], c(0), 3),
                store(1, vec![idx()], bin("add", load(0, vec![idx()], "int32", 4), c(1), "int32"), 4),
            ],
        )],
    );
    let mut args = vec![ints(&[5; 6]), ints(&[9; 6]), Arg::Int(-2)];
    run(&m, &mut args).unwrap();
    assert_eq!(bytes_i32(tensor(&args[0])), [0; 6]);
    assert_eq!(bytes_i32(tensor(&args[1])), [1; 6]);
}

#[test]
fn local_temporaries_are_per_iteration() {
    // tmp[0] = A[i] * 2; B[i] = tmp[0] + 1
    let m = program(
        vec![
            buffer(0, "A", "global", "int32", vec![8]),
            buffer(1, "B", "global", "int32", vec![8]),
            buffer(2, "tmp", "local", "int32", vec![1]),
        ],
        vec![parallel(
            vec![1],
            vec![8],
            vec![
                store(2, vec![c(0)], bin("mul", load(0, vec![var(1)], "int32", 3), c(2), "int32"), 3),
                store(1, vec![var(1)], bin("add", load(2, vec![c(0)], "int32", 4), c(1), "int32"), 4),
            ],
        )],
    );
    let a: Vec<i32> = (0..8).map(|k| k * 10).collect();
    let mut args = vec![ints(&a), ints(&[0; 8]), Arg::Int(0)];
    run(&m, &mut args).unwrap();
    assert_eq!(bytes_i32(tensor(&args[1])), a.iter().map(|x| 2 * x + 1).collect::<Vec<_>>());
}

#[test]
fn serial_loop_bounds_may_depend_on_the_parallel_variable() {
    // for t in range(i): B[i] = B[i] + n
    let b_i = || load(1, vec![var(1)], "int32", 4);
    let m = program(
        vec![buffer(0, "A", "global", "int32", vec![1]), buffer(1, "B", "global", "int32", vec![5])],
        vec![parallel(
            vec![1],
            vec![5],
            vec![json!({
                "op": "for", "var": 3, "start": c(0), "extent": var(1), "kind": "serial",
                "body": [store(1, vec![var(1)], bin("add", b_i(), var(2), "int32"), 4)],
                "loc": [0, 3, 5],
            })],
        )],
    );
    let mut args = vec![ints(&[0]), ints(&[100; 5]), Arg::Int(3)];
    run(&m, &mut args).unwrap();
    assert_eq!(bytes_i32(tensor(&args[1])), [100, 103, 106, 109, 112]);
}

#[test]
fn select_evaluates_only_the_chosen_arm() {
    // B[i] = A[i] != 0 ? 100 // A[i] : -1
    let a_i = || load(0, vec![var(1)], "int32", 3);
    let cond = bin("ne", a_i(), c(0), "bool");
    let pick = json!({"op": "select", "dtype": "int32", "cond": cond, "a": bin("floordiv", c(100), a_i(), "int32"), "b": c(-1)});
    let m = program(
        vec![buffer(0, "A", "global", "int32", vec![4]), buffer(1, "B", "global", "int32", vec![4])],
        vec![parallel(vec![1], vec![4], vec![store(1, vec![var(1)], pick, 3)])],
    );
    let mut args = vec![ints(&[0, 3, 0, -7]), ints(&[0; 4]), Arg::Int(0)];
    run(&m, &mut args).unwrap();
    assert_eq!(bytes_i32(tensor(&args[1])), [-1, 33, -1, -15]);
}

#[test]
fn wrong_arguments_are_errors_naming_the_parameter() {
    let m = divide();
    let d = run(&m, &mut [ints(&[0; 8])]).unwrap_err();
    assert!(d.message.contains("takes 4 arguments (A, Q, R, n), got 1"), "{}", d.message);
    assert_eq!(d.labels[0].0, Loc::UNKNOWN);

    let d = run(&m, &mut [ints(&[0; 8]), ints(&[0; 7]), ints(&[0; 8]), Arg::Int(1)]).unwrap_err();
    assert!(
        d.message.contains("'Q'") && d.message.contains("32 bytes") && d.message.contains("28 bytes"),
        "{}",
        d.message
    );

    let d = run(&m, &mut [ints(&[0; 8]), ints(&[0; 8]), Arg::Int(3), Arg::Int(1)]).unwrap_err();
    assert!(d.message.contains("'R'") && d.message.contains("the integer 3"), "{}", d.message);

    let d = run(&m, &mut [ints(&[0; 8]), ints(&[0; 8]), ints(&[0; 8]), Arg::Float(1.5)]).unwrap_err();
    assert!(d.message.contains("'n'") && d.message.contains("int32"), "{}", d.message);

    let d = run(&m, &mut [ints(&[0; 8]), ints(&[0; 8]), ints(&[0; 8]), Arg::Int(1 << 40)]).unwrap_err();
    assert!(d.message.contains("'n'") && d.message.contains("does not fit"), "{}", d.message);
}

#[test]
fn grid_from_a_parameter_must_not_be_negative() {
    let m = common::load("scale_shift");
    let mut args = random_args(&m, &mut Rng(1), false);
    // a grid of no blocks runs nothing (as the launcher launches nothing)
    args[3] = Arg::Int(0);
    let before = args.clone();
    run(&m, &mut args).unwrap();
    assert_eq!(args, before);
    args[3] = Arg::Int(-1);
    let d = run(&m, &mut args).unwrap_err();
    assert!(d.message.contains("grid dimension 1 is -1"), "{}", d.message);
}

/// Y[i] = A[i] // n + n and Z[i] = A[i] > n over 4 uint64 elements, n a uint64 parameter.
fn uint64_program() -> Module {
    let a_i = || load(0, vec![var(1)], "uint64", 3);
    let n = || json!({"op": "var", "dtype": "uint64", "id": 2});
    let doc = json!({
        "version": 1,
        "name": "k",
        "sources": [{"file": "t.py", "lines": {"3": "    line 3"}}],
        "params": [
            {"kind": "tensor", "name": "A", "buffer": 0},
            {"kind": "tensor", "name": "Y", "buffer": 1},
            {"kind": "tensor", "name": "Z", "buffer": 2},
            {"kind": "scalar", "name": "n", "var": 2},
        ],
        "buffers": [
            buffer(0, "A", "global", "uint64", vec![4]),
            buffer(1, "Y", "global", "uint64", vec![4]),
            buffer(2, "Z", "global", "uint64", vec![4]),
        ],
        "vars": [
            {"id": 0, "name": "bx", "kind": "block_idx", "axis": 0, "dtype": "int32"},
            {"id": 1, "name": "i", "kind": "loop", "dtype": "int32"},
            {"id": 2, "name": "n", "kind": "param", "dtype": "uint64"},
        ],
        "kernel": {"grid": [c(1)], "threads": 128, "loc": [0, 1, 1], "body": [parallel(vec![1], vec![4], vec![
            store(1, vec![var(1)], bin("add", bin("floordiv", a_i(), n(), "uint64"), n(), "uint64"), 3),
            store(2, vec![var(1)], json!({"op": "cast", "dtype": "uint64", "a": bin("gt", a_i(), n(), "bool")}), 3),
        ])]},
    });
    parse_and_verify(&doc.to_string())
}

fn u64s(v: &[u64]) -> Arg {
    Arg::Tensor(v.iter().flat_map(|x| x.to_le_bytes()).collect())
}

fn to_u64s(a: &Arg) -> Vec<u64> {
    let Arg::Tensor(b) = a else { panic!("a tensor") };
    b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn uint64_parameters_and_values_past_2_63() {
    let m = uint64_program();
    let a = [0, 7, u64::MAX, 1 << 63];
    for nv in [u64::MAX - 1, 3, 1 << 63] {
        // as the Python binding passes them: past i64::MAX as UInt
        let n = if nv > i64::MAX as u64 { Arg::UInt(nv) } else { Arg::Int(nv as i64) };
        let mut args = [u64s(&a), u64s(&[0; 4]), u64s(&[0; 4]), n];
        run(&m, &mut args).unwrap();
        let want_y: Vec<u64> = a.iter().map(|x| (x / nv).wrapping_add(nv)).collect();
        let want_z: Vec<u64> = a.iter().map(|x| (*x > nv) as u64).collect();
        assert_eq!((to_u64s(&args[1]), to_u64s(&args[2])), (want_y, want_z), "n = {nv}");
    }
    // a negative integer does not fit a uint64 parameter
    let mut args = [u64s(&a), u64s(&[0; 4]), u64s(&[0; 4]), Arg::Int(-1)];
    let d = run(&m, &mut args).unwrap_err();
    assert!(d.message.contains("'n'") && d.message.contains("does not fit"), "{}", d.message);
    // nor does a uint64 past 2^63 fit an int32 one
    let d =
        run(&divide(), &mut [ints(&[0; 8]), ints(&[0; 8]), ints(&[0; 8]), Arg::UInt(1 << 63)]).unwrap_err();
    assert!(d.message.contains("'n'") && d.message.contains("does not fit"), "{}", d.message);
}
