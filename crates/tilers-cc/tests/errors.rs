//! The driver never panics on bad input: malformed programs are format errors naming the
//! JSON path, user mistakes are rendered diagnostics, and the CLI exits with 2 / 1.

use std::path::Path;
use std::process::Command;
use tilers_cc::{compile, CompileError, CompileOptions};

fn fixture(name: &str) -> serde_json::Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs").join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn opts() -> CompileOptions {
    CompileOptions { arch: "sm_90a".into(), ..Default::default() }
}

fn format_error(text: &str) -> String {
    match compile(text, &opts()) {
        Err(CompileError::Format(m)) => m,
        Err(e) => panic!("expected a format error, got {e}"),
        Ok(_) => panic!("expected a format error, got a kernel"),
    }
}

fn user_error(program: &serde_json::Value) -> String {
    match compile(&program.to_string(), &opts()) {
        Err(CompileError::User(m)) => m,
        Err(e) => panic!("expected a user error, got {e}"),
        Ok(_) => panic!("expected a user error, got a kernel"),
    }
}

#[test]
fn malformed_programs_are_format_errors() {
    assert!(format_error("{").contains("not valid JSON"));
    assert!(format_error("[]").contains("expected an object"));
    let mut p = fixture("add_f16");
    p["version"] = 7.into();
    assert!(format_error(&p.to_string()).contains("format version 1"));
    let mut p = fixture("add_f16");
    p["kernel"]["threadz"] = 3.into();
    assert!(format_error(&p.to_string()).contains("unknown field 'threadz'"));
    let mut p = fixture("add_f16");
    p["buffers"][0]["dtype"] = "float17".into();
    assert!(format_error(&p.to_string()).contains("$.buffers[0].dtype"));
    let mut p = fixture("add_f16");
    p["kernel"]["body"][0]["op"] = "teleport".into();
    assert!(format_error(&p.to_string()).contains("unknown statement op 'teleport'"));
    let mut p = fixture("add_f16");
    p["params"][0]["buffer"] = 99.into();
    assert!(format_error(&p.to_string()).contains("expected a buffer id below"));
}

#[test]
fn truncated_and_garbled_programs_never_panic() {
    let text = fixture("softmax_rows").to_string();
    for cut in (0..text.len()).step_by(97) {
        let _ = compile(&text[..cut], &opts());
    }
    // flip characters: each variant is either compiled or rejected, never a panic
    let bytes = text.as_bytes();
    for i in (0..bytes.len()).step_by(131) {
        let mut b = bytes.to_vec();
        b[i] = if b[i].is_ascii_digit() { b'7' } else { b'x' };
        if let Ok(s) = String::from_utf8(b) {
            if let Err(CompileError::Internal { message, .. }) = compile(&s, &opts()) {
                panic!("internal error on garbled input at byte {i}: {message}");
            }
        }
    }
}

#[test]
fn bad_thread_count_is_a_user_error_at_the_kernel_line() {
    let mut p = fixture("add_f16");
    p["kernel"]["threads"] = 2000.into();
    let msg = user_error(&p);
    assert!(msg.contains("threads=2000 is above the 1024 threads a block may have"), "{msg}");
    assert!(msg.contains("kernels.py:"), "{msg}");
    assert!(msg.contains("T.Kernel("), "{msg}");
}

#[test]
fn unsupported_architecture_is_reported() {
    let text = fixture("add_f16").to_string();
    let e = compile(&text, &CompileOptions { arch: "sm_61".into(), ..Default::default() }).err().unwrap();
    assert!(e.to_string().contains("unsupported architecture 'sm_61'"));
}

#[test]
fn cli_writes_cuda_and_info_and_exits_2_on_malformed_input() {
    let dir = std::env::temp_dir().join(format!("tilers-cc-test-{}", std::process::id()));
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/add_f16.json");
    let out = Command::new(env!("CARGO_BIN_EXE_tilers-cc"))
        .arg(&program)
        .arg("-o")
        .arg(&dir)
        .arg("--no-cubin")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_to_string(dir.join("add.cu")).unwrap().contains("__global__"));
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("add.json")).unwrap()).unwrap();
    assert_eq!(info["entry"], "add_kernel");

    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"version\": 1, \"name\": ").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tilers-cc")).arg(&bad).arg("-o").arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("malformed tile program"));
    let out = Command::new(env!("CARGO_BIN_EXE_tilers-cc")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}
