//! Structure-aware fuzzing of the compiler driver: mutated serialized programs must give a
//! kernel, a format error or a user error, never a panic (an internal compiler error).
//!
//! `cargo run --release -p tilers-cc --example fuzz_driver -- SECONDS [SEED]` runs for
//! SECONDS, prints executions and outcomes, and saves each input that caused an internal
//! error under `target/fuzz-crashes/`. Mutations: replace a random JSON node by a number,
//! string, boolean, null, empty list/object or another node of the same program; drop an
//! object field; duplicate or drop a list element; set integers to boundary values; flip
//! raw bytes of the text.

use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};
use tilers_cc::{compile, CompileError, CompileOptions};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn count(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(count).sum(),
        Value::Object(o) => o.values().map(count).sum(),
        _ => 0,
    }
}

fn nth(v: &mut Value, n: &mut usize) -> Option<*mut Value> {
    if *n == 0 {
        return Some(v as *mut Value);
    }
    *n -= 1;
    match v {
        Value::Array(a) => a.iter_mut().find_map(|x| nth(x, n)),
        Value::Object(o) => o.values_mut().find_map(|x| nth(x, n)),
        _ => None,
    }
}

fn mutate(v: &mut Value, donor: &Value, rng: &mut Rng) {
    let total = count(v);
    let mut k = rng.below(total);
    let Some(node) = nth(v, &mut k) else { return };
    // SAFETY: `node` points into `v`, which outlives this function body and is not touched
    // otherwise while the pointer is used.
    let node = unsafe { &mut *node };
    let donor_total = count(donor);
    let mut dk = rng.below(donor_total);
    let mut donor_copy = donor.clone();
    let replacement = nth(&mut donor_copy, &mut dk).map(|p| unsafe { (*p).clone() });
    const BOUNDARY: [i64; 8] = [0, -1, 1, 2, i32::MAX as i64, i32::MIN as i64, i64::MAX, 1 << 40];
    match rng.below(9) {
        0 => *node = Value::from(BOUNDARY[rng.below(BOUNDARY.len())]),
        1 => *node = Value::from(["float16", "int8", "bogus", "", "inf", "add", "store"][rng.below(7)]),
        2 => *node = Value::Bool(rng.below(2) == 0),
        3 => *node = Value::Null,
        4 => *node = Value::Array(vec![]),
        5 => *node = Value::Object(Default::default()),
        6 => {
            if let Some(r) = replacement {
                *node = r;
            }
        }
        7 => match node {
            Value::Object(o) if !o.is_empty() => {
                let key = o.keys().nth(rng.below(o.len())).cloned().unwrap();
                o.remove(&key);
            }
            Value::Array(a) if !a.is_empty() => {
                let i = rng.below(a.len());
                if rng.below(2) == 0 {
                    a.remove(i);
                } else {
                    let x = a[i].clone();
                    a.insert(i, x);
                }
            }
            _ => {}
        },
        _ => {
            if let Some(n) = node.as_i64() {
                *node = Value::from(n.wrapping_add(rng.below(5) as i64 - 2));
            }
        }
    }
}

/// Outcomes of a fuzzing run.
#[derive(Debug, Default)]
pub struct Outcome {
    pub runs: u64,
    pub compiled: u64,
    pub format_errors: u64,
    pub user_errors: u64,
    /// Inputs that made the compiler fail internally (a panic caught by the driver).
    pub internal: Vec<(String, String)>,
}

/// Mutate the fixture programs for `limit` (or `max_runs` executions) from `seed`.
pub fn fuzz(limit: Duration, max_runs: u64, seed: u64) -> Outcome {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs");
    let mut programs: Vec<Value> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect();
    programs.sort_by_key(|p| p["name"].to_string());
    let mut rng = Rng(seed | 1);
    let opts = CompileOptions { arch: tile_ir::target::DEFAULT_ARCH.into(), ..Default::default() };
    let mut out = Outcome::default();
    let start = Instant::now();
    while start.elapsed() < limit && out.runs < max_runs {
        let base = &programs[rng.below(programs.len())];
        let donor = &programs[rng.below(programs.len())];
        let mut p = base.clone();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut p, donor, &mut rng);
        }
        let mut text = p.to_string();
        if rng.below(8) == 0 && !text.is_empty() {
            // raw byte damage, kept valid UTF-8 by using ASCII
            let mut bytes = text.into_bytes();
            let i = rng.below(bytes.len());
            bytes[i] = b"{}[],:\"0a-"[rng.below(10)];
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        out.runs += 1;
        match compile(&text, &opts) {
            Ok(_) => out.compiled += 1,
            Err(CompileError::Format(_)) => out.format_errors += 1,
            Err(CompileError::User(_)) => out.user_errors += 1,
            Err(CompileError::Internal { message, .. }) => out.internal.push((message, text)),
        }
    }
    out
}

#[allow(dead_code)] // the smoke test includes this file and calls `fuzz` only
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(60);
    let seed: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0x9e3779b97f4a7c15);
    std::panic::set_hook(Box::new(|_| {}));
    let start = Instant::now();
    let out = fuzz(Duration::from_secs(seconds), u64::MAX, seed);
    let crash_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-crashes");
    for (i, (message, text)) in out.internal.iter().enumerate() {
        let _ = std::fs::create_dir_all(&crash_dir);
        let path = crash_dir.join(format!("crash-{seed}-{i}.json"));
        let _ = std::fs::write(&path, text);
        eprintln!("internal error ({}): {message}", path.display());
    }
    println!(
        "fuzz_driver: {} executions in {:.0} s (seed {seed}): {} compiled, {} format errors, {} user errors, {} internal errors",
        out.runs,
        start.elapsed().as_secs_f64(),
        out.compiled,
        out.format_errors,
        out.user_errors,
        out.internal.len()
    );
    if !out.internal.is_empty() {
        std::process::exit(1);
    }
}
