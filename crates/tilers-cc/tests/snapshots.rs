//! Snapshot tests: each program in tests/programs compiles to exactly the CUDA stored beside
//! it for both targets (tests/snapshots/NAME.sm_90a.cu, NAME.sm_80.cu) and to the same
//! KernelInfo (NAME.sm_90a.json). `TILERS_BLESS=1` rewrites the snapshots; a refactor that
//! changes no snapshot changed no kernel.

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
        for arch in ["sm_90a", "sm_80"] {
            let opts = CompileOptions { arch: arch.into(), ..Default::default() };
            let compiled = compile(&text, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            let info: serde_json::Value = serde_json::from_str(&compiled.info).unwrap();
            let info = serde_json::to_string_pretty(&info).unwrap() + "\n";
            let mut outputs = vec![(format!("{name}.{arch}.cu"), compiled.source.clone())];
            if arch == "sm_90a" {
                outputs.push((format!("{name}.{arch}.json"), info));
            }
            for (file, got) in outputs {
                let snap = snap_dir.join(&file);
                if bless {
                    std::fs::write(&snap, &got).unwrap();
                } else if std::fs::read_to_string(&snap).unwrap_or_default() != got {
                    mismatches.push(file);
                }
            }
            // same input, same output, within one process too
            assert_eq!(compile(&text, &opts).unwrap().source, compiled.source, "{name}: not deterministic");
        }
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

/// `check` (the interpreter's verification, tile-level IR) gives the same KernelInfo type
/// as `compile`, with the same parameters: which tensors a kernel writes is found alike in
/// the tile-level program and in the lowered one.
#[test]
fn check_describes_the_parameters_as_compile_does() {
    use tile_codegen::KernelInfo;
    for p in programs() {
        let text = std::fs::read_to_string(&p).unwrap();
        let checked: KernelInfo = serde_json::from_str(&tilers_cc::check(&text).unwrap()).unwrap();
        let opts = CompileOptions { arch: "sm_90a".into(), ..Default::default() };
        let compiled: KernelInfo = serde_json::from_str(&compile(&text, &opts).unwrap().info).unwrap();
        assert_eq!(checked.params, compiled.params, "{}", p.display());
        assert_eq!(
            (checked.entry, checked.arch.as_str(), checked.threads),
            (None, "interp", compiled.threads)
        );
    }
}
