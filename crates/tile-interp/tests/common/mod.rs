//! Helpers shared by the interpreter's integration tests: fixtures, random data, bytes.
#![allow(dead_code)]

use tile_interp::{f32_to_bf16_bits, f32_to_f16_bits, Arg};
use tile_ir::{Module, Param};

pub fn program_path(name: &str) -> String {
    format!("{}/../tilers-cc/tests/programs/{name}.json", env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture_names() -> Vec<String> {
    let dir = format!("{}/../tilers-cc/tests/programs", env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".json").map(str::to_string))
        .collect();
    names.sort();
    names
}

pub fn parse_and_verify(text: &str) -> Module {
    let m = tile_ir::parse::parse_program(text).unwrap_or_else(|e| panic!("{e}"));
    if let Err(d) = tile_ir::verify::verify(&m) {
        panic!("verify: {}", tile_ir::diag::render_all(&d, &m.sources));
    }
    m
}

pub fn load(name: &str) -> Module {
    parse_and_verify(&std::fs::read_to_string(program_path(name)).unwrap())
}

/// xorshift64*: deterministic test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn f32_in(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit() as f32
    }
    pub fn f16_in(&mut self, lo: f32, hi: f32) -> u16 {
        f32_to_f16_bits(self.f32_in(lo, hi))
    }
    pub fn bf16_in(&mut self, lo: f32, hi: f32) -> u16 {
        f32_to_bf16_bits(self.f32_in(lo, hi))
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn tensor(a: &Arg) -> &[u8] {
    match a {
        Arg::Tensor(b) => b,
        other => panic!("not a tensor: {other:?}"),
    }
}

pub fn u16_bytes(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
pub fn bytes_u16(b: &[u8]) -> Vec<u16> {
    b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
}
pub fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
pub fn bytes_i32(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Arguments of the right kinds and sizes: random bytes (any bit pattern when `raw`,
/// else values in [-1, 1)), scalars small and positive unless `raw`. A module with symbolic
/// sizes gets values for them (up to 70, keeping their multiples), after the parameters.
pub fn random_args(m: &Module, rng: &mut Rng, raw: bool) -> Vec<Arg> {
    let sizes: Vec<i64> = m
        .sizes()
        .iter()
        .map(|v| {
            let q = m.dim_multiple(tile_ir::Dim::Size(*v)).max(1);
            q * (rng.below((70 / q).max(1) as u64 + 1) as i64)
        })
        .collect();
    let spec = m.with_sizes(&sizes);
    let mut args = tensor_and_scalar_args(&spec, rng, raw);
    args.extend(sizes.into_iter().map(Arg::Int));
    args
}

fn tensor_and_scalar_args(m: &Module, rng: &mut Rng, raw: bool) -> Vec<Arg> {
    m.params
        .iter()
        .map(|p| match p {
            Param::Tensor { buffer, .. } => {
                let b = m.buffer(*buffer);
                let n = b.num_elements() as usize;
                let bytes = if raw {
                    (0..n * b.dtype.bytes() as usize).map(|_| rng.next() as u8).collect()
                } else {
                    match b.dtype {
                        tile_ir::DType::F16 => {
                            u16_bytes(&(0..n).map(|_| rng.f16_in(-1.0, 1.0)).collect::<Vec<_>>())
                        }
                        tile_ir::DType::BF16 => {
                            u16_bytes(&(0..n).map(|_| rng.bf16_in(-1.0, 1.0)).collect::<Vec<_>>())
                        }
                        tile_ir::DType::F32 => {
                            f32_bytes(&(0..n).map(|_| rng.f32_in(-1.0, 1.0)).collect::<Vec<_>>())
                        }
                        dt => (0..n * dt.bytes() as usize).map(|_| rng.next() as u8).collect(),
                    }
                };
                Arg::Tensor(bytes)
            }
            Param::Scalar { var, .. } => {
                if m.var(*var).dtype.is_float() {
                    Arg::Float(if raw { f64::from_bits(rng.next()) } else { rng.unit() })
                } else if raw {
                    Arg::Int([-5, 0, 1, 3, 7][rng.below(5) as usize])
                } else {
                    Arg::Int(1 + rng.below(50) as i64)
                }
            }
        })
        .collect()
}
