//! The thread-level interpreter on small hand-written thread-level modules: the
//! ldmatrix + mma.sync idiom of the GEMM lowering against a plain matrix product, shuffles,
//! warpgroups scheduled on their own (barriers in different branches, the rotating order),
//! and the errors it must report (misaligned vectors, partial barriers).

use tile_interp::threads::{run, run_with, Options};
use tile_interp::{f16_bits_to_f32, f32_to_f16_bits, Arg};
use tile_ir::*;

fn module(threads: u32) -> Module {
    let mut m = Module {
        name: "t".into(),
        sources: SourceTable::default(),
        params: vec![],
        scratch: vec![],
        buffers: vec![],
        vars: vec![],
        kernel: Kernel {
            grid: vec![Expr::int(1)],
            threads,
            body: vec![],
            loc: Loc::UNKNOWN,
            raster: None,
            roles: None,
            tensor_maps: vec![],
            reg_budget: None,
            extern_sources: vec![],
            user_threads: None,
            cluster: None,
        },
        level: Level::Thread,
        schedules: vec![],
    };
    m.add_var("bx", VarKind::BlockIdx(0), DType::I32);
    m
}

fn buffer(m: &mut Module, name: &str, scope: Scope, dtype: DType, shape: &[i64]) -> BufferId {
    let id = m.add_buffer(Buffer {
        name: name.into(),
        scope,
        dtype,
        shape: fixed_dims(shape),
        loc: Loc::UNKNOWN,
        layout: None,
        shared_offset: None,
        alias_of: None,
        panel: None,
        swizzle: None,
    });
    if scope == Scope::Global {
        m.params.push(Param::Tensor { name: name.into(), buffer: id });
    }
    id
}

fn int(v: i64) -> Expr {
    Expr::int(v)
}
fn add(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Add, a, b)
}
fn mul(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Mul, a, b)
}
fn div(a: Expr, b: i64) -> Expr {
    Expr::binary(BinOp::FloorDiv, a, int(b))
}
fn rem(a: Expr, b: i64) -> Expr {
    Expr::binary(BinOp::FloorMod, a, int(b))
}

/// `for i in 0..per_thread: dst[e / cols, e % cols] = src[same]` with `e = tid * per_thread + i`.
fn copy_2d(m: &mut Module, dst: BufferId, src: BufferId, cols: i64, per_thread: i64) -> Stmt {
    let tid = Expr::var(m.thread_idx(), DType::I32);
    let i = m.add_var("i", VarKind::Loop, DType::I32);
    let e = add(mul(tid, int(per_thread)), Expr::var(i, DType::I32));
    let idx = vec![div(e.clone(), cols), rem(e, cols)];
    let dtype = m.buffer(src).dtype;
    Stmt::For {
        var: i,
        start: int(0),
        extent: int(per_thread),
        kind: ForKind::Serial,
        body: vec![Stmt::Store {
            buf: dst,
            idx: idx.clone(),
            value: Expr::load(src, idx, dtype),
            loc: Loc::UNKNOWN,
        }],
        loc: Loc::UNKNOWN,
    }
}

fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|&x| f32_to_f16_bits(x).to_le_bytes()).collect()
}

/// One warp: A (16×16) and B (16×8, k-major) staged in shared memory, ldmatrix.x4 for A,
/// ldmatrix.x2.trans for B, one m16n8k16 mma, the accumulator stored with the PTX C layout.
#[test]
fn ldmatrix_and_mma_compute_a_matrix_product() {
    let mut m = module(32);
    let a = buffer(&mut m, "A", Scope::Global, DType::F16, &[16, 16]);
    let b = buffer(&mut m, "B", Scope::Global, DType::F16, &[16, 8]);
    let c = buffer(&mut m, "C", Scope::Global, DType::F32, &[16, 8]);
    let a_s = buffer(&mut m, "A_s", Scope::Shared, DType::F16, &[16, 16]);
    let b_s = buffer(&mut m, "B_s", Scope::Shared, DType::F16, &[16, 8]);
    m.buffer_mut(a_s).shared_offset = Some(0);
    m.buffer_mut(b_s).shared_offset = Some(512);
    let a_r = buffer(&mut m, "a_r", Scope::Local, DType::F16, &[8]);
    let b_r = buffer(&mut m, "b_r", Scope::Local, DType::F16, &[4]);
    let acc = buffer(&mut m, "acc", Scope::Local, DType::F32, &[4]);
    let tid = Expr::var(m.thread_idx(), DType::I32);
    let mut body = vec![copy_2d(&mut m, a_s, a, 16, 8), copy_2d(&mut m, b_s, b, 8, 4)];
    for e in 0..4 {
        body.push(Stmt::Store {
            buf: acc,
            idx: vec![int(e)],
            value: Expr::Const { value: ConstValue::Float(0.0), dtype: DType::F32 },
            loc: Loc::UNKNOWN,
        });
    }
    body.push(Stmt::inst(inst::Sync));
    body.push(Stmt::inst(inst::Ldmatrix {
        atom: CopyAtom::ldmatrix(4, false),
        dst: a_r,
        dst_offset: int(0),
        src: a_s,
        src_idx: vec![rem(tid.clone(), 16), mul(div(tid.clone(), 16), int(8))],
    }));
    body.push(Stmt::inst(inst::Ldmatrix {
        atom: CopyAtom::ldmatrix(2, true),
        dst: b_r,
        dst_offset: int(0),
        src: b_s,
        src_idx: vec![rem(tid.clone(), 16), int(0)],
    }));
    body.push(Stmt::inst(inst::Mma {
        atom: Target::default_gpu().mma_atom(DType::F16).unwrap(),
        a: a_r,
        a_offset: int(0),
        b: b_r,
        b_offset: int(0),
        c: acc,
        c_offset: int(0),
    }));
    for e in 0..4 {
        let row = add(div(tid.clone(), 4), int(8 * (e / 2)));
        let col = add(mul(rem(tid.clone(), 4), int(2)), int(e % 2));
        body.push(Stmt::Store {
            buf: c,
            idx: vec![row, col],
            value: Expr::load(acc, vec![int(e)], DType::F32),
            loc: Loc::UNKNOWN,
        });
    }
    m.kernel.body = body;

    let av: Vec<f32> = (0..256).map(|k| ((k * 7 % 23) as f32 - 11.0) / 8.0).collect();
    let bv: Vec<f32> = (0..128).map(|k| ((k * 5 % 17) as f32 - 8.0) / 4.0).collect();
    let mut args = vec![Arg::Tensor(f16_bytes(&av)), Arg::Tensor(f16_bytes(&bv)), Arg::Tensor(vec![0; 512])];
    run(&m, &mut args).unwrap();
    let Arg::Tensor(out) = &args[2] else { unreachable!() };
    for i in 0..16 {
        for j in 0..8 {
            let want: f64 = (0..16)
                .map(|k| {
                    let x = f16_bits_to_f32(f32_to_f16_bits(av[i * 16 + k])) as f64;
                    let y = f16_bits_to_f32(f32_to_f16_bits(bv[k * 8 + j])) as f64;
                    x * y
                })
                .sum();
            let got = f32::from_le_bytes(out[4 * (i * 8 + j)..4 * (i * 8 + j) + 4].try_into().unwrap());
            assert_eq!(got, want as f32, "C[{i}, {j}]");
        }
    }
}

/// A butterfly of xor shuffles gives every lane the warp's sum.
#[test]
fn shuffles_sum_a_warp() {
    let mut m = module(64);
    let out = buffer(&mut m, "out", Scope::Global, DType::I32, &[64]);
    let tid = Expr::var(m.thread_idx(), DType::I32);
    let mut v = tid.clone();
    let mut body = Vec::new();
    for mask in [1, 2, 4, 8, 16] {
        let x = m.add_var(&format!("x{mask}"), VarKind::Temp, DType::I32);
        body.push(Stmt::Let {
            var: x,
            value: add(v.clone(), Expr::ShflXor { a: Box::new(v), mask, dtype: DType::I32 }),
        });
        v = Expr::var(x, DType::I32);
    }
    body.push(Stmt::Store { buf: out, idx: vec![tid], value: v, loc: Loc::UNKNOWN });
    m.kernel.body = body;
    let mut args = vec![Arg::Tensor(vec![0; 256])];
    run(&m, &mut args).unwrap();
    let Arg::Tensor(bytes) = &args[0] else { unreachable!() };
    for t in 0..64usize {
        let got = i32::from_le_bytes(bytes[4 * t..4 * t + 4].try_into().unwrap());
        let want: i32 = if t < 32 { (0..32).sum() } else { (32..64).sum() };
        assert_eq!(got, want, "lane {t}");
    }
}

#[test]
fn a_misaligned_vector_load_is_reported() {
    let mut m = module(32);
    let src = buffer(&mut m, "X", Scope::Global, DType::F32, &[32, 8]);
    let reg = buffer(&mut m, "r", Scope::Local, DType::F32, &[4]);
    let tid = Expr::var(m.thread_idx(), DType::I32);
    m.kernel.body = vec![Stmt::inst(inst::VecCopy {
        dst: reg,
        dst_idx: vec![int(0)],
        src,
        src_idx: vec![tid, int(2)],
        width: 4,
    })];
    let mut args = vec![Arg::Tensor(vec![0; 4 * 256])];
    let e = run(&m, &mut args).unwrap_err();
    assert!(e.message.contains("not aligned"), "{}", e.message);
}

#[test]
fn a_barrier_inside_a_thread_condition_is_a_deadlock() {
    let mut m = module(64);
    let tid = Expr::var(m.thread_idx(), DType::I32);
    m.kernel.body = vec![Stmt::If {
        cond: Expr::binary(BinOp::Lt, tid, int(32)),
        then: vec![Stmt::inst(inst::Sync)],
        otherwise: vec![],
        loc: Loc::UNKNOWN,
    }];
    let e = run(&m, &mut []).unwrap_err();
    assert!(e.message.contains("deadlock: barrier reached by threads 0-31 of 64"), "{}", e.message);
}

#[test]
fn options_pick_blocks() {
    let mut m = module(32);
    m.kernel.grid = vec![int(4)];
    let out = buffer(&mut m, "out", Scope::Global, DType::I32, &[4]);
    let bx = Expr::var(VarId(0), DType::I32);
    let tid = Expr::var(m.thread_idx(), DType::I32);
    m.kernel.body = vec![Stmt::If {
        cond: Expr::binary(BinOp::Eq, tid, int(0)),
        then: vec![Stmt::Store {
            buf: out,
            idx: vec![bx.clone()],
            value: add(bx, int(1)),
            loc: Loc::UNKNOWN,
        }],
        otherwise: vec![],
        loc: Loc::UNKNOWN,
    }];
    let mut args = vec![Arg::Tensor(vec![0; 16])];
    let report = run_with(&m, &mut args, &Options { blocks: Some(vec![[1, 0, 0], [3, 0, 0]]) }).unwrap();
    assert_eq!(report.blocks_run, 2);
    let Arg::Tensor(bytes) = &args[0] else { unreachable!() };
    assert_eq!(bytes, &[0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0]);
}

/// `out[tid] = value` for the threads of `cond`.
fn store_if(cond: Expr, out: BufferId, idx: Expr, value: Expr) -> Stmt {
    Stmt::If {
        cond,
        then: vec![Stmt::Store { buf: out, idx: vec![idx], value, loc: Loc::UNKNOWN }],
        otherwise: vec![],
        loc: Loc::UNKNOWN,
    }
}

/// Warp specialization: the two warpgroups run different branches, each with its own
/// barrier; the barrier completes when all 256 threads reach one (as `bar.sync 0` does),
/// so the consumer reads what the producer wrote.
#[test]
fn warpgroups_in_different_branches_meet_at_their_own_barriers() {
    let mut m = module(256);
    let out = buffer(&mut m, "out", Scope::Global, DType::I32, &[128]);
    let s = buffer(&mut m, "S", Scope::Shared, DType::I32, &[128]);
    m.buffer_mut(s).shared_offset = Some(0);
    let tid = Expr::var(m.thread_idx(), DType::I32);
    let low = rem(tid.clone(), 128);
    let producer = vec![
        Stmt::Store { buf: s, idx: vec![low.clone()], value: mul(tid.clone(), int(3)), loc: Loc::UNKNOWN },
        Stmt::inst(inst::Sync),
    ];
    let consumer = vec![
        Stmt::inst(inst::Sync),
        Stmt::Store {
            buf: out,
            idx: vec![low.clone()],
            value: add(Expr::load(s, vec![low], DType::I32), int(1)),
            loc: Loc::UNKNOWN,
        },
    ];
    m.kernel.body = vec![Stmt::If {
        cond: Expr::binary(BinOp::Lt, tid, int(128)),
        then: producer,
        otherwise: consumer,
        loc: Loc::UNKNOWN,
    }];
    let mut args = vec![Arg::Tensor(vec![0; 512])];
    run(&m, &mut args).unwrap_or_else(|e| panic!("{}", e.message));
    let Arg::Tensor(bytes) = &args[0] else { unreachable!() };
    for t in 0..128usize {
        let got = i32::from_le_bytes(bytes[4 * t..4 * t + 4].try_into().unwrap());
        assert_eq!(got, 3 * t as i32 + 1, "out[{t}]");
    }
}

/// Warpgroups run one after another between barriers, the first rotating: after the first
/// barrier warpgroup 1 runs first, so its read of a global value warpgroup 0 writes later
/// in program order (with no barrier between) sees the old value — lockstep would hide it.
#[test]
fn warpgroups_take_turns_in_a_rotating_order() {
    let mut m = module(256);
    let g = buffer(&mut m, "G", Scope::Global, DType::I32, &[1]);
    let out = buffer(&mut m, "out", Scope::Global, DType::I32, &[2]);
    let tid = Expr::var(m.thread_idx(), DType::I32);
    let is = |t: i64| Expr::binary(BinOp::Eq, tid.clone(), int(t));
    // thread 0 (warpgroup 0) writes G, then thread 128 (warpgroup 1) reads it
    let turn = |value: i64, slot: i64| {
        [
            store_if(is(0), g, int(0), int(value)),
            store_if(is(128), out, int(slot), Expr::load(g, vec![int(0)], DType::I32)),
        ]
    };
    let mut body = turn(7, 0).to_vec();
    body.push(Stmt::inst(inst::Sync));
    body.extend(turn(9, 1));
    m.kernel.body = body;
    let mut args = vec![Arg::Tensor(vec![0; 4]), Arg::Tensor(vec![0; 8])];
    run(&m, &mut args).unwrap();
    let Arg::Tensor(bytes) = &args[1] else { unreachable!() };
    let read = |k: usize| i32::from_le_bytes(bytes[4 * k..4 * k + 4].try_into().unwrap());
    // interval 0: warpgroup 0 first, the write is seen; interval 1: warpgroup 1 first
    assert_eq!((read(0), read(1)), (7, 7));
}

#[test]
fn a_warpgroup_that_finishes_while_the_other_waits_is_a_deadlock() {
    let mut m = module(256);
    let tid = Expr::var(m.thread_idx(), DType::I32);
    m.kernel.body = vec![Stmt::If {
        cond: Expr::binary(BinOp::Ge, tid, int(128)),
        then: vec![Stmt::inst(inst::Sync)],
        otherwise: vec![],
        loc: Loc::UNKNOWN,
    }];
    let e = run(&m, &mut []).unwrap_err();
    assert!(e.message.contains("deadlock: barrier reached by threads 128-255 of 256"), "{}", e.message);
}
