//! Fuzz-ish robustness: every fixture program, with arbitrary bit patterns as inputs,
//! odd scalar values, wrong argument lists, and with its integer constants mutated, either
//! runs or returns a diagnostic — never panics (no `catch_unwind`: a panic fails the test).

mod common;

use common::*;
use serde_json::Value;
use tile_interp::{run, Arg};

/// A fixture with its constant grid dimensions cut to 1–2 blocks, its serial loops to at
/// most 2 iterations and its tensors to at most 70 elements a dimension, so each run is
/// short (and more of it runs past the edges).
fn small(name: &str, rng: &mut Rng) -> Value {
    let text = std::fs::read_to_string(program_path(name)).unwrap();
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    for b in doc["buffers"].as_array_mut().unwrap() {
        if b["scope"] == "global" {
            // fixed dimensions only: a symbolic size gets its value from the call
            for d in b["shape"].as_array_mut().unwrap() {
                if let Some(n) = d.as_i64() {
                    *d = n.min(70).into();
                }
            }
        }
    }
    for g in doc["kernel"]["grid"].as_array_mut().unwrap() {
        if g["op"] == "const" {
            g["value"] = (1 + rng.below(2) as i64).into();
        }
    }
    shorten_loops(&mut doc["kernel"]["body"]);
    doc
}

fn shorten_loops(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if o.get("op").and_then(Value::as_str) == Some("for") && o["extent"]["op"] == "const" {
                let e = o["extent"]["value"].as_i64().unwrap_or(1).min(2);
                o["extent"]["value"] = e.into();
            }
            o.values_mut().for_each(shorten_loops);
        }
        Value::Array(a) => a.iter_mut().for_each(shorten_loops),
        _ => {}
    }
}

#[test]
fn fixtures_with_arbitrary_inputs() {
    let mut rng = Rng(42);
    for name in fixture_names() {
        for _ in 0..3 {
            let m = parse_and_verify(&small(&name, &mut rng).to_string());
            let mut args = random_args(&m, &mut rng, true);
            let _ = run(&m, &mut args);
        }
    }
}

#[test]
fn fixtures_with_wrong_arguments() {
    let mut rng = Rng(43);
    for name in fixture_names() {
        let m = parse_and_verify(&small(&name, &mut rng).to_string());
        let good = random_args(&m, &mut rng, false);
        assert!(run(&m, &mut good[..good.len() - 1].to_vec()).is_err(), "{name}: missing argument");
        // a symbolic size of the wrong kind or value names the size
        for (j, v) in m.sizes().iter().enumerate() {
            for bad in [Arg::Int(-1), Arg::Float(2.0)] {
                let mut args = good.clone();
                args[m.params.len() + j] = bad;
                let d = run(&m, &mut args).unwrap_err();
                assert!(d.message.contains(&m.var(*v).name), "{name}: {}", d.message);
            }
        }
        for k in 0..m.params.len() {
            let mut args = good.clone();
            args[k] = match &args[k] {
                // one byte short (or, for an empty tensor, one too many)
                Arg::Tensor(b) if b.is_empty() => Arg::Tensor(vec![0]),
                Arg::Tensor(b) => Arg::Tensor(b[..b.len() - 1].to_vec()),
                _ => Arg::Tensor(vec![]),
            };
            let d = run(&m, &mut args).unwrap_err();
            assert!(d.message.contains(m.params[k].name()), "{name}: {}", d.message);
        }
    }
}

/// Replace the value of the `k`-th integer constant (in document order) of `v`.
fn mutate_const(v: &mut Value, k: &mut i64, value: i64) {
    match v {
        Value::Object(o) => {
            if o.get("op").and_then(Value::as_str) == Some("const")
                && o.get("dtype").and_then(Value::as_str).is_some_and(|d| d.starts_with("int"))
            {
                if *k == 0 {
                    o.insert("value".into(), value.into());
                }
                *k -= 1;
            }
            for x in o.values_mut() {
                mutate_const(x, k, value);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| mutate_const(x, k, value)),
        _ => {}
    }
}

#[test]
fn fixtures_with_mutated_constants() {
    let mut rng = Rng(44);
    let values = [-1000, -3, -1, 0, 1, 2, 3, 5, 63, 64, 1000, 1 << 40];
    for name in fixture_names() {
        for round in 0..6 {
            let mut mutated = small(&name, &mut rng);
            let mut k = rng.below(40) as i64;
            mutate_const(
                &mut mutated["kernel"]["body"],
                &mut k,
                values[rng.below(values.len() as u64) as usize],
            );
            let Ok(m) = tile_ir::parse::parse_program(&mutated.to_string()) else { continue };
            if tile_ir::verify::verify(&m).is_err() {
                continue;
            }
            let mut long_loop = false;
            tile_ir::walk_stmts(&m.kernel.body, &mut |s| {
                if let tile_ir::Stmt::For { extent, .. } = s {
                    long_loop |= extent.as_int().is_none_or(|e| e > 4);
                }
            });
            if long_loop {
                continue;
            }
            let mut args = random_args(&m, &mut rng, round % 2 == 0);
            let _ = run(&m, &mut args);
        }
    }
}
