//! The command line of `tilers-cc`, shared by the binary and the Python package's entry point.
//!
//! `tilers-cc PROGRAM.json -o DIR [--arch sm_90a] [--dump-ir DIR] [--no-cubin] [--name NAME]`
//! compiles a serialized tile program to `NAME.cu`, `NAME.json` (KernelInfo) and, when NVRTC
//! loads, `NAME.cubin` with its C launcher `tilers_NAME.h` / `tilers_NAME.c` (docs/export.md;
//! NAME is the kernel's unless `--name` gives one). `tilers-cc link -o DIR --name NAME
//! A.json[:M=1..128,...] B.json ...` writes a C dispatcher over kernels exported before: the
//! first whose conditions hold and whose checks take a call runs it.
//!
//! Exit codes: 0 done; 1 the kernel has errors (printed); 2 bad usage, a malformed program
//! file or a kernel that cannot be exported; 3 internal compiler error.

use crate::export::{export_c, export_dispatcher, is_identifier, Condition, Member};
use crate::{compile, CompileError, CompileOptions};
use std::path::{Path, PathBuf};
use tile_codegen::KernelInfo;

const USAGE: &str =
    "usage: tilers-cc PROGRAM.json -o OUT_DIR [--arch sm_90a] [--dump-ir DIR] [--no-cubin] [--name NAME]
       tilers-cc link -o OUT_DIR --name NAME KERNEL.json[:SIZE=LOW..HIGH,...] ...";

/// Write `bytes` to `dir/file`, saying so; false (and a message) when it cannot.
fn write(dir: &Path, file: &str, bytes: &[u8]) -> bool {
    let path = dir.join(file);
    match std::fs::write(&path, bytes) {
        Ok(()) => {
            println!("wrote {}", path.display());
            true
        }
        Err(e) => {
            eprintln!("tilers-cc: cannot write {}: {e}", path.display());
            false
        }
    }
}

/// Run the command line `args` (without the program name); the exit code.
pub fn run(args: &[String]) -> u8 {
    if args.first().map(String::as_str) == Some("link") {
        return link(&args[1..]);
    }
    let mut input = None;
    let mut out_dir = None;
    let mut name = None;
    let mut opts = CompileOptions { arch: tile_ir::target::DEFAULT_ARCH.into(), ..Default::default() };
    let mut want_cubin = true;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let mut value = |flag: &str| -> Option<String> {
            i += 1;
            let v = args.get(i).cloned();
            if v.is_none() {
                eprintln!("tilers-cc: {flag} needs a value\n{USAGE}");
            }
            v
        };
        match a.as_str() {
            "-o" | "--out" => match value("-o") {
                Some(v) => out_dir = Some(PathBuf::from(v)),
                None => return 2,
            },
            "--arch" => match value("--arch") {
                Some(v) => opts.arch = v,
                None => return 2,
            },
            "--dump-ir" => match value("--dump-ir") {
                Some(v) => opts.dump_dir = Some(PathBuf::from(v)),
                None => return 2,
            },
            "--name" => match value("--name") {
                Some(v) => name = Some(v),
                None => return 2,
            },
            "--no-cubin" => want_cubin = false,
            "-h" | "--help" => {
                println!("{USAGE}");
                return 0;
            }
            s if s.starts_with('-') => {
                eprintln!("tilers-cc: unknown option {s}\n{USAGE}");
                return 2;
            }
            s => input = Some(PathBuf::from(s)),
        }
        i += 1;
    }
    let (Some(input), Some(out_dir)) = (input, out_dir) else {
        eprintln!("{USAGE}");
        return 2;
    };
    if let Some(n) = &name {
        if !is_identifier(n) {
            eprintln!("tilers-cc: --name {n:?} is not a C identifier (letters, digits and _)");
            return 2;
        }
    }
    let text = match std::fs::read_to_string(&input) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("tilers-cc: cannot read {}: {e}", input.display());
            return 2;
        }
    };
    let compiled = match compile(&text, &opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return match e {
                CompileError::Format(_) => 2,
                CompileError::User(_) => 1,
                CompileError::Internal { .. } => 3,
            };
        }
    };
    let name = name.unwrap_or_else(|| compiled.modules[0].name.clone());
    if let Err(e) = std::fs::create_dir_all(&out_dir) {
        eprintln!("tilers-cc: cannot create {}: {e}", out_dir.display());
        return 2;
    }
    if !write(&out_dir, &format!("{name}.cu"), compiled.source.as_bytes())
        || !write(&out_dir, &format!("{name}.json"), compiled.info.as_bytes())
    {
        return 2;
    }
    if !want_cubin {
        return 0;
    }
    let lib = match crate::nvrtc::load() {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!("tilers-cc: no cubin (and no C launcher, which embeds it) written: {e}");
            return 0;
        }
    };
    let mut extra = Vec::new();
    if opts.lineinfo {
        extra.push("-lineinfo".to_string());
    }
    if opts.fast_math {
        extra.push("--use_fast_math".to_string());
    }
    let cubin = match crate::nvrtc::compile_cubin(
        &lib,
        &compiled.source,
        &compiled.modules[0].name,
        &opts.arch,
        &extra,
    ) {
        Ok(cubin) => cubin,
        Err(e) => {
            eprintln!("{e}");
            return 3;
        }
    };
    if !write(&out_dir, &format!("{name}.cubin"), &cubin) {
        return 2;
    }
    let info: KernelInfo = match serde_json::from_str(&compiled.info) {
        Ok(info) => info,
        Err(e) => {
            eprintln!("tilers-cc: internal compiler error: the KernelInfo does not read back ({e})");
            return 3;
        }
    };
    match export_c(&info, &cubin, &name) {
        Ok(exported) => {
            if !write(&out_dir, &format!("tilers_{name}.h"), exported.header.as_bytes())
                || !write(&out_dir, &format!("tilers_{name}.c"), exported.source.as_bytes())
            {
                return 2;
            }
            0
        }
        Err(e) => {
            eprintln!("tilers-cc: kernel '{}' has no C launcher: {e}", info.name);
            2
        }
    }
}

/// `link -o DIR --name NAME KERNEL.json[:conditions] ...`
fn link(args: &[String]) -> u8 {
    let mut out_dir = None;
    let mut name = None;
    let mut members = Vec::new();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-o" | "--out" | "--name" => {
                let Some(v) = args.get(i + 1) else {
                    eprintln!("tilers-cc link: {} needs a value\n{USAGE}", args[i]);
                    return 2;
                };
                if args[i] == "--name" {
                    name = Some(v.clone());
                } else {
                    out_dir = Some(PathBuf::from(v));
                }
                i += 1;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return 0;
            }
            s if s.starts_with('-') => {
                eprintln!("tilers-cc link: unknown option {s}\n{USAGE}");
                return 2;
            }
            spec => match member(spec) {
                Ok(m) => members.push(m),
                Err(e) => {
                    eprintln!("tilers-cc link: {e}");
                    return 2;
                }
            },
        }
        i += 1;
    }
    let (Some(out_dir), Some(name)) = (out_dir, name) else {
        eprintln!("{USAGE}");
        return 2;
    };
    let exported = match export_dispatcher(&name, &members) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("tilers-cc link: {e}");
            return 2;
        }
    };
    if let Err(e) = std::fs::create_dir_all(&out_dir) {
        eprintln!("tilers-cc: cannot create {}: {e}", out_dir.display());
        return 2;
    }
    if !write(&out_dir, &format!("tilers_{name}.h"), exported.header.as_bytes())
        || !write(&out_dir, &format!("tilers_{name}.c"), exported.source.as_bytes())
    {
        return 2;
    }
    0
}

/// `DIR/gemm_small.json:M=1..128,N=..4096`: the KernelInfo of the export `gemm_small` and
/// its conditions.
fn member(spec: &str) -> Result<Member, String> {
    let (path, conditions) = match spec.rsplit_once(".json:") {
        Some((path, conditions)) => (format!("{path}.json"), conditions),
        None => (spec.to_string(), ""),
    };
    let path = PathBuf::from(path);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let info: KernelInfo =
        serde_json::from_str(&text).map_err(|e| format!("{} is not a KernelInfo: {e}", path.display()))?;
    let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("").to_string();
    let when = conditions
        .split(',')
        .filter(|c| !c.trim().is_empty())
        .map(Condition::parse)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Member { name, info, when })
}
