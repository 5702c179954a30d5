//! The warp model's wgmma on small hand-written kernels: products against a plain matrix
//! product (A and B from shared tiles in wgmma's layouts through descriptors, K-major and
//! MN-major B, A from registers, two warpgroups, scale-d 0), and the misuses it reports
//! (a partial warpgroup, no fence, no proxy fence, registers or shared bytes touched while
//! a wgmma is pending, pending wgmmas at the end, a wait that does not name the accumulator).

use tile_interp::threads::run;
use tile_interp::{f32_to_f16_bits, Arg};
use tile_ir::*;

fn int(v: i64) -> Expr {
    Expr::int(v)
}
fn add(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Add, a, b)
}
fn mul(a: Expr, b: i64) -> Expr {
    Expr::binary(BinOp::Mul, a, int(b))
}
fn div(a: Expr, b: i64) -> Expr {
    Expr::binary(BinOp::FloorDiv, a, int(b))
}
fn rem(a: Expr, b: i64) -> Expr {
    Expr::binary(BinOp::FloorMod, a, int(b))
}

/// The shape of a test GEMM: `C (64 groups × n) = A (64 groups × k) · B (k × n)`, one 64-row
/// atom per warpgroup.
#[derive(Clone, Copy)]
struct Gemm {
    groups: i64,
    n: i64,
    k: i64,
    /// B stored (n, k); else (k, n).
    b_k_major: bool,
    a_in_registers: bool,
    /// The first k-step ignores the accumulator (which holds NaN).
    scale_d_zero: bool,
}

const GEMM: Gemm =
    Gemm { groups: 1, n: 64, k: 32, b_k_major: false, a_in_registers: false, scale_d_zero: false };

fn buffer(m: &mut Module, name: &str, scope: Scope, dtype: DType, shape: &[i64]) -> BufferId {
    let mut b = Buffer {
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
    };
    if scope == Scope::Shared {
        let l = SharedLayout::wgmma(shape, dtype).expect("a wgmma layout");
        (b.panel, b.swizzle) = (l.panel, l.swizzle);
    }
    let id = m.add_buffer(b);
    if scope == Scope::Global {
        m.params.push(Param::Tensor { name: name.into(), buffer: id });
    }
    id
}

/// `dst[e / cols, e % cols] = src[same]` for every element `e` of a `rows × cols` tile,
/// spread over the block's threads.
fn copy_tile(m: &mut Module, dst: BufferId, src: BufferId, rows: i64, cols: i64) -> Stmt {
    let threads = m.kernel.threads as i64;
    let tid = Expr::var(m.thread_idx(), DType::I32);
    let i = m.add_var("i", VarKind::Loop, DType::I32);
    let e = add(tid, mul(Expr::var(i, DType::I32), threads));
    let idx = vec![div(e.clone(), cols), rem(e, cols)];
    Stmt::For {
        var: i,
        start: int(0),
        extent: int(rows * cols / threads),
        kind: ForKind::Serial,
        body: vec![Stmt::Store {
            buf: dst,
            idx: idx.clone(),
            value: Expr::load(src, idx, m.buffer(src).dtype),
            loc: Loc::UNKNOWN,
        }],
        loc: Loc::UNKNOWN,
    }
}

/// Row and column of accumulator (or register-A) element `i` of the thread `tid` in its
/// warpgroup's 64-row atom (PTX ISA, wgmma "Register Fragments").
fn fragment(tid: &Expr, i: i64) -> (Expr, Expr) {
    let (w, l) = (div(rem(tid.clone(), 128), 32), rem(tid.clone(), 32));
    let row = add(add(mul(w, 16), div(l.clone(), 4)), int(8 * ((i >> 1) & 1)));
    let col = add(mul(rem(l, 4), 2), int(8 * (i >> 2) + (i & 1)));
    (row, col)
}

/// The kernel: A and B copied into shared tiles in wgmma's layouts (A into registers with
/// the A-fragment layout instead, when asked), `fence_proxy_async`, barrier, one wgmma per
/// k-step into `acc`, commit, wait, `acc` stored to C by the accumulator layout.
fn gemm_module(g: Gemm) -> Module {
    let threads = 128 * g.groups as u32;
    let mut m = Module {
        name: "wgmma".into(),
        sources: SourceTable::default(),
        params: vec![],
        scratch: vec![],
        buffers: vec![],
        vars: vec![],
        kernel: Kernel {
            grid: vec![int(1)],
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
    let rows = 64 * g.groups;
    let b_shape = if g.b_k_major { [g.n, g.k] } else { [g.k, g.n] };
    let a = buffer(&mut m, "A", Scope::Global, DType::F16, &[rows, g.k]);
    let b = buffer(&mut m, "B", Scope::Global, DType::F16, &b_shape);
    let c = buffer(&mut m, "C", Scope::Global, DType::F32, &[rows, g.n]);
    let b_s = buffer(&mut m, "B_s", Scope::Shared, DType::F16, &b_shape);
    m.buffer_mut(b_s).shared_offset = Some(0);
    let acc = buffer(&mut m, "acc", Scope::Local, DType::F32, &[g.n / 2]);
    let tid = Expr::var(m.thread_idx(), DType::I32);
    let row0 = mul(div(tid.clone(), 128), 64);
    let mut body = vec![copy_tile(&mut m, b_s, b, b_shape[0], b_shape[1])];
    let a_operand = if g.a_in_registers {
        let a_r = buffer(&mut m, "a_r", Scope::Local, DType::F16, &[8 * g.k / 16]);
        for kk in 0..g.k / 16 {
            for i in 0..8 {
                let (r, col) = fragment(&tid, i);
                body.push(Stmt::Store {
                    buf: a_r,
                    idx: vec![int(8 * kk + i)],
                    value: Expr::load(a, vec![add(row0.clone(), r), add(col, int(16 * kk))], DType::F16),
                    loc: Loc::UNKNOWN,
                });
            }
        }
        a_r
    } else {
        let a_s = buffer(&mut m, "A_s", Scope::Shared, DType::F16, &[rows, g.k]);
        let after_b = (m.buffer(b_s).bytes() as u64).next_multiple_of(1024);
        m.buffer_mut(a_s).shared_offset = Some(after_b);
        body.push(copy_tile(&mut m, a_s, a, rows, g.k));
        a_s
    };
    let start = if g.scale_d_zero { f64::NAN } else { 0.0 };
    for i in 0..g.n / 2 {
        let value = Expr::Const { value: ConstValue::Float(start), dtype: DType::F32 };
        body.push(Stmt::Store { buf: acc, idx: vec![int(i)], value, loc: Loc::UNKNOWN });
    }
    body.extend([Stmt::inst(inst::FenceProxyAsync), Stmt::inst(inst::Sync), Stmt::inst(inst::WgmmaFence)]);
    let atom = &target::WGMMA_ATOMS[0];
    for kk in 0..g.k / 16 {
        let a_from = if g.a_in_registers {
            inst::WgmmaA::Registers { offset: int(8 * kk) }
        } else {
            inst::WgmmaA::Shared { idx: vec![row0.clone(), int(16 * kk)], k_major: true }
        };
        let b_idx = if g.b_k_major { vec![int(0), int(16 * kk)] } else { vec![int(16 * kk), int(0)] };
        body.push(Stmt::inst(inst::Wgmma {
            atom,
            n: g.n,
            a: a_operand,
            a_from,
            b: b_s,
            b_idx,
            b_k_major: g.b_k_major,
            c: acc,
            c_offset: int(0),
            scale_d: int(if g.scale_d_zero && kk == 0 { 0 } else { 1 }),
        }));
    }
    body.push(Stmt::inst(inst::WgmmaCommit));
    body.push(Stmt::inst(inst::WgmmaWait { pending: 0, acc: vec![acc], boundary: false }));
    for i in 0..g.n / 2 {
        let (r, col) = fragment(&tid, i);
        body.push(Stmt::Store {
            buf: c,
            idx: vec![add(row0.clone(), r), col],
            value: Expr::load(acc, vec![int(i)], DType::F32),
            loc: Loc::UNKNOWN,
        });
    }
    m.kernel.body = body;
    m
}

/// Small multiples of 1/4: every product and sum is exact in fp32.
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 7 + seed) % 9) as f32 - 4.0) / 4.0).collect()
}

fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|&x| f32_to_f16_bits(x).to_le_bytes()).collect()
}

fn arguments(g: Gemm) -> (Vec<Arg>, Vec<f32>, Vec<f32>) {
    let rows = (64 * g.groups) as usize;
    let (n, k) = (g.n as usize, g.k as usize);
    let (av, bv) = (values(rows * k, 1), values(k * n, 5));
    let args =
        vec![Arg::Tensor(f16_bytes(&av)), Arg::Tensor(f16_bytes(&bv)), Arg::Tensor(vec![0; rows * n * 4])];
    (args, av, bv)
}

/// Run the kernel of `g` and compare C with the product, element by element.
fn check_product(g: Gemm) {
    let m = gemm_module(g);
    let (mut args, av, bv) = arguments(g);
    run(&m, &mut args).unwrap_or_else(|e| panic!("{}", e.message));
    let Arg::Tensor(out) = &args[2] else { unreachable!() };
    let (n, k) = (g.n as usize, g.k as usize);
    for i in 0..(64 * g.groups) as usize {
        for j in 0..n {
            let b_at = |kk: usize| if g.b_k_major { j * k + kk } else { kk * n + j };
            let want: f32 = (0..k).map(|kk| av[i * k + kk] * bv[b_at(kk)]).sum();
            let got = f32::from_le_bytes(out[4 * (i * n + j)..4 * (i * n + j) + 4].try_into().unwrap());
            assert_eq!(got, want, "C[{i}, {j}]");
        }
    }
}

#[test]
fn wgmma_with_an_mn_major_b_computes_the_product() {
    // B (32 x 64) in one 128-byte-swizzled panel, A (64 x 32) in 64-byte spans
    check_product(GEMM);
}

#[test]
fn wgmma_with_a_k_major_b_computes_the_product() {
    check_product(Gemm { b_k_major: true, n: 128, ..GEMM });
}

#[test]
fn wgmma_with_b_across_panels_computes_the_product() {
    // N = 256 columns of B: four 64-column panels, the leading byte offset steps them
    check_product(Gemm { n: 256, k: 16, ..GEMM });
}

#[test]
fn wgmma_with_a_from_registers_computes_the_product() {
    check_product(Gemm { a_in_registers: true, k: 48, ..GEMM });
}

#[test]
fn wgmma_of_two_warpgroups_computes_the_product() {
    check_product(Gemm { groups: 2, n: 32, k: 64, ..GEMM });
}

#[test]
fn wgmma_with_scale_d_zero_ignores_the_accumulator() {
    check_product(Gemm { scale_d_zero: true, ..GEMM });
}

/// The error message of running `m` on `g`'s arguments.
fn error_of(m: &Module, g: Gemm) -> String {
    let (mut args, _, _) = arguments(g);
    let e = run(m, &mut args).expect_err("the misuse went unreported");
    e.message
}

fn position(m: &Module, pick: &dyn Fn(&Stmt) -> bool) -> usize {
    m.kernel.body.iter().position(pick).expect("the statement")
}

fn is_inst(s: &Stmt, f: &dyn Fn(&Inst) -> bool) -> bool {
    matches!(s, Stmt::Inst(i) if f(i))
}

#[test]
fn a_wgmma_under_a_thread_condition_is_reported() {
    let mut m = gemm_module(GEMM);
    let at = position(&m, &|s| is_inst(s, &|i| matches!(i, Inst::Wgmma(_))));
    let wgmma = m.kernel.body.remove(at);
    let tid = Expr::var(m.thread_idx(), DType::I32);
    m.kernel.body.insert(
        at,
        Stmt::If {
            cond: Expr::binary(BinOp::Lt, tid, int(64)),
            then: vec![wgmma],
            otherwise: vec![],
            loc: Loc::UNKNOWN,
        },
    );
    let e = error_of(&m, GEMM);
    assert!(e.contains("wgmma run by 64 threads of warpgroup 0"), "{e}");
}

#[test]
fn a_wgmma_without_a_fence_is_reported() {
    let mut m = gemm_module(GEMM);
    m.kernel.body.remove(position(&m, &|s| is_inst(s, &|i| matches!(i, Inst::WgmmaFence(_)))));
    let e = error_of(&m, GEMM);
    assert!(e.contains("no wgmma_fence before it"), "{e}");
}

#[test]
fn registers_written_after_the_fence_are_reported() {
    // the fence before the accumulator is zeroed: the wgmma uses registers a store wrote
    let mut m = gemm_module(GEMM);
    let at = position(&m, &|s| is_inst(s, &|i| matches!(i, Inst::WgmmaFence(_))));
    let fence = m.kernel.body.remove(at);
    m.kernel.body.insert(0, fence);
    let e = error_of(&m, GEMM);
    assert!(
        e.contains(
            "element 0 of 'acc' of thread 0, accessed by another instruction since the last wgmma_fence"
        ),
        "{e}"
    );
    // the A fragment too (checked before the accumulator): the fence before its stores
    let g = Gemm { a_in_registers: true, ..GEMM };
    let mut m = gemm_module(g);
    let at = position(&m, &|s| is_inst(s, &|i| matches!(i, Inst::WgmmaFence(_))));
    let fence = m.kernel.body.remove(at);
    m.kernel.body.insert(1, fence);
    let e = error_of(&m, g);
    assert!(e.contains("element 0 of 'a_r' of thread 0, accessed by another instruction"), "{e}");
}

#[test]
fn shared_writes_without_a_proxy_fence_are_reported() {
    let mut m = gemm_module(GEMM);
    m.kernel.body.remove(position(&m, &|s| is_inst(s, &|i| matches!(i, Inst::FenceProxyAsync(_)))));
    let e = error_of(&m, GEMM);
    assert!(e.contains("with no fence_proxy_async after it"), "{e}");
    // fenced, but no barrier between the fence and the wgmma
    let mut m = gemm_module(GEMM);
    m.kernel.body.remove(position(&m, &|s| is_inst(s, &|i| matches!(i, Inst::Sync(_)))));
    let e = error_of(&m, GEMM);
    assert!(e.contains("with no barrier since"), "{e}");
}

#[test]
fn the_accumulator_read_before_the_wait_is_reported() {
    // the wait after the epilogue's first store: that store reads a pending register
    let mut m = gemm_module(GEMM);
    let at = position(&m, &|s| is_inst(s, &|i| matches!(i, Inst::WgmmaWait(_))));
    let wait = m.kernel.body.remove(at);
    m.kernel.body.insert(at + 1, wait);
    let e = error_of(&m, GEMM);
    assert!(e.contains("thread 0 reads element 0 of 'acc' while a wgmma that uses it is pending"), "{e}");
}

#[test]
fn a_wait_that_leaves_the_group_in_flight_is_reported() {
    let mut m = gemm_module(GEMM);
    let at = position(&m, &|s| is_inst(s, &|i| matches!(i, Inst::WgmmaWait(_))));
    let acc = BufferId(m.buffers.iter().position(|b| b.name == "acc").unwrap() as u32);
    m.kernel.body[at] = Stmt::inst(inst::WgmmaWait { pending: 1, acc: vec![acc], boundary: false });
    let e = error_of(&m, GEMM);
    assert!(e.contains("while a wgmma that uses it is pending"), "{e}");
    // no wait, and no reads of the accumulator: still pending at the end
    let mut m = gemm_module(GEMM);
    m.kernel.body.truncate(at);
    let e = error_of(&m, GEMM);
    assert!(e.contains("2 wgmma(s) of warpgroup 0 still pending at the end of the kernel"), "{e}");
}

#[test]
fn a_wait_must_name_the_accumulators_it_retires() {
    let mut m = gemm_module(GEMM);
    let at = position(&m, &|s| is_inst(s, &|i| matches!(i, Inst::WgmmaWait(_))));
    m.kernel.body[at] = Stmt::inst(inst::WgmmaWait { pending: 0, acc: vec![], boundary: false });
    let e = error_of(&m, GEMM);
    assert!(e.contains("retires a wgmma writing 'acc', which its accumulator list does not name"), "{e}");
}

#[test]
fn shared_writes_while_a_wgmma_reads_them_are_reported() {
    // B copied again between the commit and the wait
    let mut m = gemm_module(GEMM);
    let at = position(&m, &|s| is_inst(s, &|i| matches!(i, Inst::WgmmaWait(_))));
    let copy_b = m.kernel.body[0].clone();
    m.kernel.body.insert(at, copy_b);
    let e = error_of(&m, GEMM);
    assert!(e.contains("writes shared byte 0 while a wgmma that reads it is pending"), "{e}");
}
