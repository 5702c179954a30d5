//! Snapshot tests: each program in tests/programs compiles to exactly the CUDA stored beside
//! it (tests/snapshots/NAME.sm_90a.cu). `TILERS_BLESS=1` rewrites the snapshots; a refactor
//! that changes no snapshot changed no kernel.

use std::path::{Path, PathBuf};
use tilers_cc::{compile, CompileOptions};

fn programs() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    v.sort();
    v
}

#[test]
fn generated_cuda_matches_snapshots() {
    let bless = std::env::var_os("TILERS_BLESS").is_some();
    let snap_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    std::fs::create_dir_all(&snap_dir).unwrap();
    let programs = programs();
    assert!(programs.len() >= 10, "fixtures missing: run scripts/update-snapshots");
    let mut mismatches = Vec::new();
    for p in &programs {
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(p).unwrap();
        let opts = CompileOptions { arch: "sm_90a".into(), ..Default::default() };
        let compiled = compile(&text, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
        let snap = snap_dir.join(format!("{name}.sm_90a.cu"));
        if bless {
            std::fs::write(&snap, &compiled.source).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&snap).unwrap_or_default();
        if want != compiled.source {
            mismatches.push(name.clone());
        }
        // same input, same output, within one process too
        assert_eq!(compile(&text, &opts).unwrap().source, compiled.source, "{name}: not deterministic");
    }
    assert!(
        mismatches.is_empty(),
        "generated CUDA changed for {mismatches:?}; review and run scripts/update-snapshots"
    );
}

#[test]
fn every_program_compiles_for_sm_80_too() {
    for p in programs() {
        let text = std::fs::read_to_string(&p).unwrap();
        let opts = CompileOptions { arch: "sm_80".into(), ..Default::default() };
        let c = compile(&text, &opts).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(c.source.contains("__global__"));
        let info: serde_json::Value = serde_json::from_str(&c.info).unwrap();
        assert_eq!(info["arch"], "sm_80");
    }
}
