//! The interpreter on the fixture programs of `tilers-cc` (made from `tests/kernels.py`),
//! checked against plain Rust computations of the same results.
//!
//! Benchmark (`cargo test --release -p tile-interp --test programs -- --include-ignored
//! --nocapture --test-threads 1 add_`, one core of the development machine): the fp16 add
//! over 2048 × 2048 elements (512 blocks of 32 × 128) took 0.39 s; the 1000 × 1000
//! `add_f16` fixture 0.08–0.09 s.

mod common;

use common::*;
use tile_interp::{f16_bits_to_f32, f32_to_f16_bits, run, Arg};

/// One million fp16 elements (ragged 32 × 128 tiles) through the whole-tile evaluator.
#[test]
fn add_f16_ragged() {
    let m = load("add_f16");
    let n = 1000 * 1000;
    let mut rng = Rng(1);
    let a: Vec<u16> = (0..n).map(|_| rng.f16_in(-100.0, 100.0)).collect();
    let b: Vec<u16> = (0..n).map(|_| rng.f16_in(-100.0, 100.0)).collect();
    let mut args =
        vec![Arg::Tensor(u16_bytes(&a)), Arg::Tensor(u16_bytes(&b)), Arg::Tensor(vec![0xAA; 2 * n])];
    let start = std::time::Instant::now();
    run(&m, &mut args).unwrap();
    eprintln!("add_f16 1000x1000: {:?}", start.elapsed());
    let c = bytes_u16(tensor(&args[2]));
    for k in 0..n {
        let want = f32_to_f16_bits(f16_bits_to_f32(a[k]) + f16_bits_to_f32(b[k]));
        assert_eq!(c[k], want, "element {k}");
    }
}

#[test]
fn add_int8_wraps() {
    let m = load("add_int8");
    let n = 65 * 100;
    let mut rng = Rng(2);
    let a: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
    let b: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
    let mut args = vec![Arg::Tensor(a.clone()), Arg::Tensor(b.clone()), Arg::Tensor(vec![0; n])];
    run(&m, &mut args).unwrap();
    let c = tensor(&args[2]);
    for k in 0..n {
        assert_eq!(c[k] as i8, (a[k] as i8).wrapping_add(b[k] as i8), "element {k}");
    }
    assert!(a.iter().zip(&b).any(|(x, y)| (*x as i8).checked_add(*y as i8).is_none()), "some sums overflow");
}

#[test]
fn softmax_padded_rows() {
    let m = load("softmax_padded");
    let (rows, cols) = (64, 1000);
    let mut rng = Rng(3);
    let a: Vec<f32> = (0..rows * cols).map(|_| rng.f32_in(-5.0, 5.0)).collect();
    let mut args = vec![Arg::Tensor(f32_bytes(&a)), Arg::Tensor(vec![0; 4 * rows * cols])];
    run(&m, &mut args).unwrap();
    let out = bytes_f32(tensor(&args[1]));
    for r in 0..rows {
        let row = &a[r * cols..(r + 1) * cols];
        // the tile is 1024 wide: 24 padding elements of -inf, which exp() turns into 0
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        let e: Vec<f32> = row.iter().map(|&x| ((x - max) as f64).exp() as f32).collect();
        let sum = e.iter().fold(0.0f32, |s, &x| s + x);
        let inv = 1.0 / sum;
        for c in 0..cols {
            assert_eq!(out[r * cols + c], e[c] * inv, "row {r} col {c}");
        }
        let total: f32 = out[r * cols..(r + 1) * cols].iter().sum();
        assert!((total - 1.0).abs() < 1e-4);
    }
}

#[test]
fn row_sum_tiles() {
    let m = load("row_sum");
    let (rows, cols) = (1001, 1000);
    let mut rng = Rng(4);
    let a: Vec<f32> = (0..rows * cols).map(|_| rng.f32_in(-1.0, 1.0)).collect();
    let mut args = vec![Arg::Tensor(f32_bytes(&a)), Arg::Tensor(vec![0; 4 * rows])];
    run(&m, &mut args).unwrap();
    let s = bytes_f32(tensor(&args[1]));
    for r in 0..rows {
        // four tiles of 256 columns, each reduced in order, then added to the accumulator
        let mut acc = 0.0f32;
        for tile in a[r * cols..(r + 1) * cols].chunks(256) {
            acc += tile.iter().fold(0.0f32, |t, &x| t + x);
        }
        assert_eq!(s[r], acc, "row {r}");
    }
}

#[test]
fn col_absmax_f16() {
    let m = load("col_absmax");
    let (rows, cols) = (1000, 999);
    let mut rng = Rng(5);
    let a: Vec<u16> = (0..rows * cols).map(|_| rng.f16_in(-300.0, 300.0)).collect();
    let mut args = vec![Arg::Tensor(u16_bytes(&a)), Arg::Tensor(vec![0xFF; 4 * cols])];
    run(&m, &mut args).unwrap();
    let c = bytes_f32(tensor(&args[1]));
    for j in 0..cols {
        let want = (0..rows).map(|i| f16_bits_to_f32(a[i * cols + j]).abs()).fold(0.0f32, f32::max);
        assert_eq!(c[j], want, "column {j}");
    }
}

#[test]
fn transpose_f32_through_shared() {
    let m = load("transpose_f32");
    let (rows, cols) = (1000, 700);
    let mut rng = Rng(6);
    let a: Vec<f32> = (0..rows * cols).map(|_| rng.f32_in(-1.0, 1.0)).collect();
    let mut args = vec![Arg::Tensor(f32_bytes(&a)), Arg::Tensor(vec![0; 4 * rows * cols])];
    run(&m, &mut args).unwrap();
    let b = bytes_f32(tensor(&args[1]));
    for i in 0..rows {
        for j in 0..cols {
            assert_eq!(b[j * rows + i], a[i * cols + j]);
        }
    }
}

#[test]
fn scale_shift_scalar_params() {
    let m = load("scale_shift");
    let (rows, cols) = (100, 1000);
    let mut rng = Rng(7);
    let x: Vec<f32> = (0..rows * cols).map(|_| rng.f32_in(-10.0, 10.0)).collect();
    let sentinel = f32_bytes(&vec![-7.25; rows * cols]);
    for alpha in [Arg::Float(0.1), Arg::Int(3)] {
        let a = match alpha {
            Arg::Float(v) => v as f32,
            Arg::Int(v) => v as f32,
            _ => unreachable!(),
        };
        let mut args =
            vec![Arg::Tensor(f32_bytes(&x)), Arg::Tensor(sentinel.clone()), alpha.clone(), Arg::Int(37)];
        run(&m, &mut args).unwrap();
        let y = bytes_f32(tensor(&args[1]));
        for r in 0..rows {
            for c in 0..cols {
                let want = if r < 37 { a * x[r * cols + c] + 1.0 } else { -7.25 };
                assert_eq!(y[r * cols + c], want, "row {r} col {c}");
            }
        }
    }
}

#[test]
fn histogram_atomics() {
    let m = load("histogram");
    let n = 10000;
    let mut rng = Rng(8);
    let x: Vec<i32> = (0..n).map(|_| rng.next() as i32 % 1000).collect();
    let base: Vec<i32> = (0..64).collect();
    let mut args = vec![Arg::Tensor(i32_bytes(&x)), Arg::Tensor(i32_bytes(&base))];
    run(&m, &mut args).unwrap();
    let h = bytes_i32(tensor(&args[1]));
    let mut want = base.clone();
    for v in &x {
        want[v.rem_euclid(64) as usize] += 1; // Python's %: never negative
    }
    assert!(x.iter().any(|v| *v < 0));
    assert_eq!(h, want);
}

#[test]
fn clamp_int8_saturates() {
    let m = load("clamp_int8");
    let (rows, cols) = (100, 1000);
    let mut rng = Rng(9);
    let specials =
        [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30, 1.0, -1.0, 0.0, -0.0, 0.5 / 127.0];
    let x: Vec<f32> = (0..rows * cols)
        .map(|k| if k % 7 == 0 { specials[(k / 7) % specials.len()] } else { rng.f32_in(-2.0, 2.0) })
        .collect();
    let mut args = vec![
        Arg::Tensor(f32_bytes(&x)),
        Arg::Tensor(vec![0x55; rows * cols]),
        Arg::Tensor(vec![0x55; rows * cols]),
    ];
    run(&m, &mut args).unwrap();
    let (q, p) = (tensor(&args[1]), tensor(&args[2]));
    for k in 0..rows * cols {
        let v = x[k];
        let want_q = (v * 127.0 + 0.5).floor() as i8; // Rust's `as` saturates, NaN -> 0
        assert_eq!(q[k] as i8, want_q, "Q at {k} for {v}");
        assert_eq!(p[k], (v > 0.0) as u8, "P at {k} for {v}");
    }
    assert_eq!(q[0] as i8, 0, "NaN -> 0");
    assert_eq!(q[7] as i8, 127, "inf saturates");
    assert_eq!(q[14] as i8, -128, "-inf saturates");
}

#[test]
fn bias_gelu_bf16_matches_erf() {
    let m = load("bias_gelu_bf16");
    let (rows, cols) = (1000, 1000);
    let mut rng = Rng(10);
    let x: Vec<u16> = (0..rows * cols).map(|_| rng.bf16_in(-4.0, 4.0)).collect();
    let bias: Vec<u16> = (0..cols).map(|_| rng.bf16_in(-1.0, 1.0)).collect();
    let mut args = vec![
        Arg::Tensor(u16_bytes(&x)),
        Arg::Tensor(u16_bytes(&bias)),
        Arg::Tensor(vec![0; 2 * rows * cols]),
    ];
    run(&m, &mut args).unwrap();
    let y = bytes_u16(tensor(&args[2]));
    let mut worst = 0.0f64;
    for r in 0..rows {
        for c in 0..cols {
            let v = (tile_interp::bf16_bits_to_f32(x[r * cols + c]) + tile_interp::bf16_bits_to_f32(bias[c]))
                as f64;
            let want = 0.5 * v * (1.0 + libm_erf(v / 2f64.sqrt()));
            let got = tile_interp::bf16_bits_to_f32(y[r * cols + c]) as f64;
            worst = worst.max((got - want).abs() / want.abs().max(1e-2));
        }
    }
    assert!(worst < 1e-2, "worst relative error {worst}");
}

/// erf by its Taylor series (enough terms for |x| < 3), independent of the interpreter's.
fn libm_erf(x: f64) -> f64 {
    let mut term = x;
    let mut sum = x;
    for n in 1..200 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

#[test]
fn transpose_f16_and_small_programs_run() {
    for name in ["transpose_f16", "add_f32_small", "add_bf16_tiles", "softmax_rows", "softmax_wide"] {
        let m = load(name);
        let mut args = random_args(&m, &mut Rng(11), false);
        run(&m, &mut args).unwrap_or_else(|d| panic!("{name}: {}", d.message));
    }
}

/// The 4M-element timing of the module doc; run with `--release --ignored --nocapture`.
#[test]
#[ignore]
fn add_4m() {
    let text = std::fs::read_to_string(program_path("add_f16")).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    for b in doc["buffers"].as_array_mut().unwrap() {
        b["shape"] = serde_json::json!([2048, 2048]);
    }
    doc["kernel"]["grid"][0]["value"] = serde_json::json!(16);
    doc["kernel"]["grid"][1]["value"] = serde_json::json!(64);
    let m = parse_and_verify(&doc.to_string());
    let n = 2048 * 2048;
    let mut rng = Rng(12);
    let a: Vec<u16> = (0..n).map(|_| rng.f16_in(-1.0, 1.0)).collect();
    let mut args = vec![Arg::Tensor(u16_bytes(&a)), Arg::Tensor(u16_bytes(&a)), Arg::Tensor(vec![0; 2 * n])];
    let start = std::time::Instant::now();
    run(&m, &mut args).unwrap();
    eprintln!("add_f16 2048x2048: {:?}", start.elapsed());
    let c = bytes_u16(tensor(&args[2]));
    assert!((0..n).all(|k| c[k] == f32_to_f16_bits(2.0 * f16_bits_to_f32(a[k]))));
}

/// `C = op(A) @ op(B)` through shared tiles and `T.gemm`, against sequential sums over K
/// (float32 accumulation for fp16/bf16, exact for int8 → int32).
fn check_matmul(name: &str, (m, n, k): (usize, usize, usize), trans_a: bool, trans_b: bool, dtype: &str) {
    let prog = load(name);
    let mut rng = Rng(13);
    let (a_len, b_len) = (m * k, k * n);
    let a_at = |i: usize, kk: usize| if trans_a { kk * m + i } else { i * k + kk };
    let b_at = |kk: usize, j: usize| if trans_b { j * k + kk } else { kk * n + j };
    match dtype {
        "int8" => {
            let a: Vec<u8> = (0..a_len).map(|_| rng.next() as u8).collect();
            let b: Vec<u8> = (0..b_len).map(|_| rng.next() as u8).collect();
            let mut args =
                vec![Arg::Tensor(a.clone()), Arg::Tensor(b.clone()), Arg::Tensor(vec![0; 4 * m * n])];
            run(&prog, &mut args).unwrap();
            let c = bytes_i32(tensor(&args[2]));
            for i in 0..m {
                for j in 0..n {
                    let want: i32 =
                        (0..k).map(|kk| a[a_at(i, kk)] as i8 as i32 * b[b_at(kk, j)] as i8 as i32).sum();
                    assert_eq!(c[i * n + j], want, "{name} C[{i}, {j}]");
                }
            }
        }
        _ => {
            let fp16 = dtype == "float16";
            let to_bits = |x: f32| if fp16 { f32_to_f16_bits(x) } else { tile_interp::f32_to_bf16_bits(x) };
            let from_bits = |h: u16| if fp16 { f16_bits_to_f32(h) } else { tile_interp::bf16_bits_to_f32(h) };
            let a: Vec<u16> = (0..a_len).map(|_| to_bits(rng.f32_in(-1.0, 1.0))).collect();
            let b: Vec<u16> = (0..b_len).map(|_| to_bits(rng.f32_in(-1.0, 1.0))).collect();
            let mut args =
                vec![Arg::Tensor(u16_bytes(&a)), Arg::Tensor(u16_bytes(&b)), Arg::Tensor(vec![0; 2 * m * n])];
            run(&prog, &mut args).unwrap();
            let c = bytes_u16(tensor(&args[2]));
            for i in 0..m {
                for j in 0..n {
                    let sum = (0..k)
                        .fold(0.0f32, |s, kk| s + from_bits(a[a_at(i, kk)]) * from_bits(b[b_at(kk, j)]));
                    assert_eq!(c[i * n + j], to_bits(sum), "{name} C[{i}, {j}]");
                }
            }
        }
    }
}

#[test]
fn gemm_through_shared_tiles() {
    check_matmul("matmul_nn_int8", (64, 64, 64), true, false, "int8");
    check_matmul("matmul_nt_int8", (100, 100, 128), false, true, "int8");
    check_matmul("matmul_tn_bf16", (33, 200, 100), false, true, "bfloat16");
    check_matmul("matmul_tt_f16", (256, 256, 256), true, true, "float16");
}
