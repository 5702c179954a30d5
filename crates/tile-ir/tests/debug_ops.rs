//! `print` and `device_assert`: read from the serialized program, written back unchanged,
//! printed as text and read back, and checked by the verifier.

use serde_json::{json, Value};
use tile_ir::parse::parse_program;
use tile_ir::print::print_module_bare;
use tile_ir::serialize::program_json;
use tile_ir::{Printed, Stmt};

fn c(v: i64) -> Value {
    json!({"op": "const", "dtype": "int32", "value": v})
}

fn var(id: u32) -> Value {
    json!({"op": "var", "dtype": "int32", "id": id})
}

/// A kernel over a (2,) grid with A: float16[64, 64] (global), A_s (shared), acc
/// (fragment); variables 0 = bx, 1 = i, 2 = j.
fn program(body: Vec<Value>) -> String {
    let lines: serde_json::Map<String, Value> =
        (1..=20).map(|n| (n.to_string(), Value::String(format!("    line {n}")))).collect();
    json!({
        "version": 1,
        "name": "k",
        "sources": [{"file": "/home/u/debug.py", "lines": lines}],
        "params": [{"kind": "tensor", "name": "A", "buffer": 0}],
        "buffers": [
            {"id": 0, "name": "A", "scope": "global", "dtype": "float16", "shape": [64, 64]},
            {"id": 1, "name": "A_s", "scope": "shared", "dtype": "float16", "shape": [16, 64]},
            {"id": 2, "name": "acc", "scope": "fragment", "dtype": "float32", "shape": [16, 64]},
        ],
        "vars": [
            {"id": 0, "name": "bx", "kind": "block_idx", "axis": 0, "dtype": "int32"},
            {"id": 1, "name": "i", "kind": "loop", "dtype": "int32"},
            {"id": 2, "name": "j", "kind": "loop", "dtype": "int32"},
        ],
        "kernel": {"grid": [c(2)], "threads": 128, "body": body, "loc": [0, 1, 1]},
    })
    .to_string()
}

fn debugging_body() -> Vec<Value> {
    let acc_ij =
        json!({"op": "load", "dtype": "float32", "buf": 2, "idx": [var(1), var(2)], "loc": [0, 6, 20]});
    vec![
        json!({"op": "print", "value": var(0), "msg": "bx = // not a comment, \"quoted\", 100%\n", "loc": [0, 3, 5]}),
        json!({"op": "print", "tile": {"buf": 1, "dims": [{"start": c(0), "stop": c(4)}]}, "msg": "A_s",
               "block": [1], "loc": [0, 4, 5]}),
        json!({"op": "print", "tile": {"buf": 2, "dims": []}, "msg": "", "loc": [0, 5, 5]}),
        json!({"op": "parallel", "vars": [1, 2], "extents": [16, 64], "loc": [0, 6, 5], "body": [
            json!({"op": "device_assert", "msg": "finite ✓",
                   "cond": {"op": "lt", "dtype": "bool", "a": acc_ij, "b": {"op": "const", "dtype": "float32", "value": 1e30}},
                   "loc": [0, 7, 9]}),
            json!({"op": "print", "value": var(1), "msg": "i", "block": [0], "loc": [0, 8, 9]}),
        ]}),
        json!({"op": "device_assert", "cond": {"op": "lt", "dtype": "bool", "a": var(0), "b": c(2)}, "msg": "", "loc": [0, 9, 5]}),
    ]
}

#[test]
fn serialize_and_text_round_trips_keep_prints_and_asserts() {
    let m = parse_program(&program(debugging_body())).unwrap();
    tile_ir::verify::verify(&m).unwrap_or_else(|d| panic!("{}", tile_ir::diag::render_all(&d, &m.sources)));
    let again = parse_program(&program_json(&m).to_string()).unwrap();
    assert_eq!(m, again);

    let text = print_module_bare(&m);
    assert!(text.contains("print tile A_s[0:4], \"A_s\" block=(1)"), "{text}");
    assert!(text.contains("assert lt(%bx, 2), \"\""), "{text}");
    let parsed = tile_ir::text::parse_text(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(print_module_bare(&parsed), text);
    let Stmt::Print { what: Printed::Value(_), msg, .. } = &parsed.kernel.body[0] else { panic!("{text}") };
    assert_eq!(msg, "bx = // not a comment, \"quoted\", 100%\n");
    // the printer with locations keeps them as comments after the string
    assert!(tile_ir::print::print_module(&m).contains("100%\\n\"  // debug.py:3"));
}

fn errors(body: Vec<Value>) -> String {
    let m = parse_program(&program(body)).unwrap();
    let d = tile_ir::verify::verify(&m).expect_err("should not verify");
    tile_ir::diag::render_all(&d, &m.sources)
}

#[test]
fn verifier_rejects_misplaced_prints_and_non_bool_asserts() {
    let tile_in_parallel =
        errors(vec![json!({"op": "parallel", "vars": [1], "extents": [4], "loc": [0, 2, 5], "body": [
            json!({"op": "print", "tile": {"buf": 1, "dims": []}, "msg": "", "loc": [0, 3, 9]}),
        ]})]);
    assert!(tile_in_parallel.contains("T.print of a tile inside a T.Parallel loop"), "{tile_in_parallel}");

    let outside_grid =
        errors(vec![json!({"op": "print", "value": c(1), "msg": "", "block": [2], "loc": [0, 3, 5]})]);
    assert!(outside_grid.contains("block=[2] is outside the grid"), "{outside_grid}");
    let second_axis =
        errors(vec![json!({"op": "print", "value": c(1), "msg": "", "block": [0, 1], "loc": [0, 3, 5]})]);
    assert!(second_axis.contains("dimension 1 has 1 block(s)"), "{second_axis}");

    let part_of_fragment = errors(vec![json!({"op": "print", "msg": "",
        "tile": {"buf": 2, "dims": [{"start": c(0), "stop": c(8)}]}, "loc": [0, 3, 5]})]);
    assert!(part_of_fragment.contains("T.print of part of fragment 'acc'"), "{part_of_fragment}");

    let int_cond = errors(vec![json!({"op": "device_assert", "cond": var(0), "msg": "", "loc": [0, 4, 5]})]);
    assert!(int_cond.contains("must be a bool, got int32"), "{int_cond}");
    assert!(int_cond.contains("debug.py:4:5"), "{int_cond}");
}

#[test]
fn malformed_prints_are_format_errors() {
    let both =
        program(vec![json!({"op": "print", "value": c(1), "tile": {"buf": 1, "dims": []}, "msg": ""})]);
    assert!(parse_program(&both).unwrap_err().message.contains("either a \"value\" or a \"tile\""));
    let bad_block = program(vec![json!({"op": "print", "value": c(1), "msg": "", "block": [0, 0, 0, 0]})]);
    assert!(parse_program(&bad_block).unwrap_err().message.contains("1 to 3 non-negative"));
}
