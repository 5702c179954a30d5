//! Programs of several `T.Kernel`s: one module per kernel, holding the call's parameters,
//! scratch and sizes and the buffers and variables its kernel declares (renumbered), and the
//! mistakes in the document that say which kernel owns what.

use serde_json::{json, Value};
use tile_ir::parse::{parse_kernels, parse_program};
use tile_ir::{BufferId, Dim, Param, Scope, VarKind};

fn c(value: i64) -> Value {
    json!({"op": "const", "dtype": "int32", "value": value})
}

fn whole(buf: u32) -> Value {
    json!({"buf": buf, "dims": []})
}

/// A: float32[N] (a parameter of symbolic size N) → S (scratch) by kernel 0 through its
/// fragment F0; S → A by kernel 1 through its fragment F1. `edit` changes the document.
fn program(edit: impl FnOnce(&mut Value)) -> String {
    let mut p = json!({
        "version": 1,
        "name": "two",
        "sources": [],
        "params": [{"kind": "tensor", "name": "A", "buffer": 0}],
        "buffers": [
            {"id": 0, "name": "A", "scope": "global", "dtype": "float32", "shape": [{"op": "var", "dtype": "int32", "id": 0}]},
            {"id": 1, "name": "S", "scope": "global", "dtype": "float32", "shape": [{"op": "var", "dtype": "int32", "id": 0}]},
            {"id": 2, "name": "F0", "scope": "fragment", "dtype": "float32", "shape": [128], "kernel": 0},
            {"id": 3, "name": "F1", "scope": "fragment", "dtype": "float32", "shape": [64], "kernel": 1},
        ],
        "scratch": [1],
        "vars": [
            {"id": 0, "name": "N", "kind": "size", "dtype": "int32"},
            {"id": 1, "name": "bx", "kind": "block_idx", "axis": 0, "dtype": "int32", "kernel": 0},
            {"id": 2, "name": "by", "kind": "block_idx", "axis": 0, "dtype": "int32", "kernel": 1},
        ],
        "kernels": [
            {"grid": [c(1)], "threads": 128, "body": [
                {"op": "copy", "src": {"buf": 0, "dims": [{"start": c(0), "stop": c(128)}]}, "dst": whole(2), "pad": null},
                {"op": "copy", "src": whole(2), "dst": {"buf": 1, "dims": [{"start": c(0), "stop": c(128)}]}, "pad": null},
            ]},
            {"grid": [c(2)], "threads": 64, "body": [
                {"op": "copy", "src": {"buf": 1, "dims": [{"start": c(0), "stop": c(64)}]}, "dst": whole(3), "pad": null},
                {"op": "copy", "src": whole(3), "dst": {"buf": 0, "dims": [{"start": c(0), "stop": c(64)}]}, "pad": null},
            ]},
        ],
    });
    edit(&mut p);
    p.to_string()
}

#[test]
fn each_kernel_is_a_module_of_the_calls_tables_and_its_own() {
    let modules = parse_kernels(&program(|_| {})).unwrap();
    assert_eq!(modules.len(), 2);
    let names = |m: &tile_ir::Module| m.buffers.iter().map(|b| b.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&modules[0]), ["A", "S", "F0"]);
    assert_eq!(names(&modules[1]), ["A", "S", "F1"]);
    for (m, (threads, block_var)) in modules.iter().zip([(128, "bx"), (64, "by")]) {
        tile_ir::verify::verify(m).unwrap_or_else(|d| panic!("{d:?}"));
        assert_eq!(m.kernel.threads, threads);
        assert_eq!(m.scratch, vec![BufferId(1)]);
        assert!(matches!(m.params[..], [Param::Tensor { buffer: BufferId(0), .. }]));
        // the size keeps its place; the kernel's block index is its only other variable
        assert_eq!(m.vars.len(), 2);
        assert!(matches!(m.vars[0].kind, VarKind::Size { .. }));
        assert_eq!(m.vars[1].name, block_var);
        assert_eq!(m.buffers[1].shape, vec![Dim::Size(tile_ir::VarId(0))]);
        assert_eq!(m.buffers[2].scope, Scope::Fragment);
    }
    // the second kernel's fragment is buffer 2 of its module, where the document says 3
    let copies = format!("{:?}", modules[1].kernel.body);
    assert!(copies.contains("BufferId(2)") && !copies.contains("BufferId(3)"), "{copies}");
}

#[test]
fn one_kernel_programs_read_as_before_and_parse_program_refuses_several() {
    let error = parse_program(&program(|_| {})).unwrap_err().to_string();
    assert!(error.contains("holds 2 kernels"), "{error}");
}

#[test]
fn ownership_mistakes_are_refused_with_their_path() {
    type Edit = Box<dyn FnOnce(&mut Value)>;
    let cases: Vec<(Edit, &str)> = vec![
        // kernel 1 copies from kernel 0's fragment
        (Box::new(|p| p["kernels"][1]["body"][0]["src"] = whole(2)), "buffer 2 is declared by kernel 0"),
        // kernel 1 reads kernel 0's block index
        (
            Box::new(|p| p["kernels"][1]["grid"][0] = json!({"op": "var", "dtype": "int32", "id": 1})),
            "variable 1 is declared by kernel 0",
        ),
        (
            Box::new(|p| p["buffers"][2].as_object_mut().unwrap().remove("kernel").map(|_| ()).unwrap()),
            "$.buffers[2].kernel",
        ),
        (Box::new(|p| p["buffers"][0]["kernel"] = json!(0)), "belong to the call"),
        (Box::new(|p| p["vars"][0]["kernel"] = json!(1)), "belong to the call"),
        (Box::new(|p| p["vars"][1]["kernel"] = json!(2)), "below 2"),
        (Box::new(|p| p["kernels"] = json!([p["kernels"][0].clone()])), "two or more kernels"),
        (Box::new(|p| p["kernel"] = p["kernels"][0].clone()), "not both"),
    ];
    for (edit, want) in cases {
        let error = parse_kernels(&program(edit)).unwrap_err().to_string();
        assert!(error.contains(want), "want {want:?} in: {error}");
    }
    // a single kernel's document says no owners
    let single = program(|p| {
        p["kernel"] = p["kernels"][0].clone();
        p.as_object_mut().unwrap().remove("kernels");
        p["buffers"] = json!([p["buffers"][0].clone(), p["buffers"][1].clone(), p["buffers"][2].clone()]);
        p["vars"] = json!([p["vars"][0].clone(), p["vars"][1].clone()]);
    });
    let error = parse_program(&single).unwrap_err().to_string();
    assert!(error.contains("only a program of several kernels"), "{error}");
}
