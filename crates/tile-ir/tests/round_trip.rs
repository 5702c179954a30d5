//! Serialized program → module → serialized program → module gives the same module, for
//! every fixture program; and the text printer shows every buffer and statement.

use std::path::Path;
use tile_ir::parse::parse_program;
use tile_ir::print::print_module;
use tile_ir::serialize::program_json;

fn fixtures() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tilers-cc/tests/programs");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().to_string(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    v.sort();
    assert!(v.len() >= 10);
    v
}

#[test]
fn serialize_parse_round_trip() {
    for (name, text) in fixtures() {
        let m = parse_program(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let again = parse_program(&program_json(&m).to_string()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(m, again, "{name}: round trip changed the module");
        assert_eq!(print_module(&m), print_module(&again));
    }
}

#[test]
fn printed_ir_names_every_buffer_and_source_line() {
    for (name, text) in fixtures() {
        let m = parse_program(&text).unwrap();
        let printed = print_module(&m);
        for b in &m.buffers {
            assert!(printed.contains(&b.name), "{name}: {} missing from\n{printed}", b.name);
        }
        assert!(printed.contains("// kernels.py:"), "{name}: no source locations in\n{printed}");
    }
}

#[test]
fn verifier_accepts_every_fixture() {
    for (name, text) in fixtures() {
        let m = parse_program(&text).unwrap();
        if let Err(d) = tile_ir::verify::verify(&m) {
            panic!("{name}: {}", tile_ir::diag::render_all(&d, &m.sources));
        }
    }
}

#[test]
fn text_print_parse_round_trip() {
    for (name, text) in fixtures() {
        let m = parse_program(&text).unwrap();
        let printed = tile_ir::print::print_module_bare(&m);
        let again = tile_ir::text::parse_text(&printed).unwrap_or_else(|e| panic!("{name}: {e}\n{printed}"));
        assert_eq!(tile_ir::print::print_module_bare(&again), printed, "{name}");
        // the same program, as far as the serialized form goes (locations aside)
        tile_ir::verify::verify(&again).unwrap_or_else(|_| panic!("{name}: parsed text does not verify"));
    }
}
