//! `tilers-cc program.json -o DIR [--arch sm_90a] [--dump-ir DIR]`: compile a serialized
//! tile program to `NAME.cu`, `NAME.json` (KernelInfo) and, when NVRTC loads, `NAME.cubin`.
//!
//! Exit codes: 0 compiled; 1 the kernel has errors (printed); 2 bad usage or a malformed
//! program file; 3 internal compiler error.

use std::path::PathBuf;
use std::process::ExitCode;
use tilers_cc::{compile, CompileError, CompileOptions};

const USAGE: &str = "usage: tilers-cc PROGRAM.json -o OUT_DIR [--arch sm_90a] [--dump-ir DIR] [--no-cubin]";

fn main() -> ExitCode {
    // a deeply nested program must not overflow the main thread's stack
    tilers_cc::on_deep_stack(run)
}

fn run() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut input = None;
    let mut out_dir = None;
    let mut opts = CompileOptions { arch: tile_ir::target::DEFAULT_ARCH.into(), ..Default::default() };
    let mut want_cubin = true;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let mut value = |name: &str| -> Option<String> {
            i += 1;
            let v = args.get(i).cloned();
            if v.is_none() {
                eprintln!("tilers-cc: {name} needs a value\n{USAGE}");
            }
            v
        };
        match a.as_str() {
            "-o" | "--out" => match value("-o") {
                Some(v) => out_dir = Some(PathBuf::from(v)),
                None => return ExitCode::from(2),
            },
            "--arch" => match value("--arch") {
                Some(v) => opts.arch = v,
                None => return ExitCode::from(2),
            },
            "--dump-ir" => match value("--dump-ir") {
                Some(v) => opts.dump_dir = Some(PathBuf::from(v)),
                None => return ExitCode::from(2),
            },
            "--no-cubin" => want_cubin = false,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            s if s.starts_with('-') => {
                eprintln!("tilers-cc: unknown option {s}\n{USAGE}");
                return ExitCode::from(2);
            }
            s => input = Some(PathBuf::from(s)),
        }
        i += 1;
    }
    let (Some(input), Some(out_dir)) = (input, out_dir) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(&input) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("tilers-cc: cannot read {}: {e}", input.display());
            return ExitCode::from(2);
        }
    };
    let compiled = match compile(&text, &opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(match e {
                CompileError::Format(_) => 2,
                CompileError::User(_) => 1,
                CompileError::Internal { .. } => 3,
            });
        }
    };
    let name = compiled.modules[0].name.clone();
    if let Err(e) = std::fs::create_dir_all(&out_dir) {
        eprintln!("tilers-cc: cannot create {}: {e}", out_dir.display());
        return ExitCode::from(2);
    }
    let write = |ext: &str, bytes: &[u8]| -> bool {
        let p = out_dir.join(format!("{name}.{ext}"));
        match std::fs::write(&p, bytes) {
            Ok(()) => {
                println!("wrote {}", p.display());
                true
            }
            Err(e) => {
                eprintln!("tilers-cc: cannot write {}: {e}", p.display());
                false
            }
        }
    };
    if !write("cu", compiled.source.as_bytes()) || !write("json", compiled.info.as_bytes()) {
        return ExitCode::from(2);
    }
    if want_cubin {
        match tilers_cc::nvrtc::load() {
            Ok(lib) => {
                let mut extra = Vec::new();
                if opts.lineinfo {
                    extra.push("-lineinfo".to_string());
                }
                if opts.fast_math {
                    extra.push("--use_fast_math".to_string());
                }
                match tilers_cc::nvrtc::compile_cubin(&lib, &compiled.source, &name, &opts.arch, &extra) {
                    Ok(cubin) => {
                        if !write("cubin", &cubin) {
                            return ExitCode::from(2);
                        }
                    }
                    Err(e) => {
                        eprintln!("{e}");
                        return ExitCode::from(3);
                    }
                }
            }
            Err(e) => eprintln!("tilers-cc: no cubin written: {e}"),
        }
    }
    ExitCode::SUCCESS
}
