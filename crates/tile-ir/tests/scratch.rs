//! Scratch buffers (`T.alloc_global`): read from the serialized program, written back
//! unchanged, printed as text and read back; misnamed ones are refused.

use serde_json::{json, Value};
use tile_ir::parse::parse_program;
use tile_ir::print::print_module_bare;
use tile_ir::serialize::program_json;
use tile_ir::BufferId;

/// A: float32[128] (parameter) copied into P: float32[2, 128] (scratch, unless `scratch`
/// says otherwise) and back.
fn program(scratch: Value) -> String {
    let region = |buf: u32, row: Option<i64>| match row {
        Some(r) => json!({"buf": buf, "dims": [{"index": {"op": "const", "dtype": "int32", "value": r}}]}),
        None => json!({"buf": buf, "dims": []}),
    };
    json!({
        "version": 1,
        "name": "k",
        "sources": [],
        "params": [{"kind": "tensor", "name": "A", "buffer": 0}],
        "buffers": [
            {"id": 0, "name": "A", "scope": "global", "dtype": "float32", "shape": [128]},
            {"id": 1, "name": "P", "scope": "global", "dtype": "float32", "shape": [2, 128]},
        ],
        "scratch": scratch,
        "vars": [{"id": 0, "name": "bx", "kind": "block_idx", "axis": 0, "dtype": "int32"}],
        "kernel": {"grid": [{"op": "const", "dtype": "int32", "value": 1}], "threads": 128, "body": [
            {"op": "copy", "src": region(0, None), "dst": region(1, Some(1)), "pad": null},
            {"op": "copy", "src": region(1, Some(1)), "dst": region(0, None), "pad": null},
        ]},
    })
    .to_string()
}

#[test]
fn scratch_round_trips_through_json_and_text() {
    let m = parse_program(&program(json!([1]))).unwrap();
    assert_eq!(m.scratch, vec![BufferId(1)]);
    assert!(m.is_scratch(BufferId(1)) && !m.is_scratch(BufferId(0)));
    tile_ir::verify::verify(&m).unwrap();
    let json = program_json(&m);
    assert_eq!(json["scratch"], json!([1]));
    assert_eq!(parse_program(&json.to_string()).unwrap(), m);
    let text = print_module_bare(&m);
    assert!(text.contains("  global P: float32[2, 128]"), "{text}");
    let parsed = tile_ir::text::parse_text(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(parsed.scratch, m.scratch);
    assert_eq!(print_module_bare(&parsed), text);
}

#[test]
fn scratch_must_name_a_global_buffer_that_is_no_parameter() {
    for bad in [json!([0]), json!([1, 1]), json!([5]), json!(1)] {
        let error = parse_program(&program(bad.clone())).unwrap_err().to_string();
        assert!(error.contains("$.scratch"), "{bad}: {error}");
    }
}
