//! Serialized program → module → serialized program → module gives the same module, for
//! every fixture program; the text printer shows every buffer and statement, and the text
//! parser reads it back (every pass's output: tile-passes/tests/text_round_trip.rs), one
//! of every thread-level instruction included.

use std::path::Path;
use tile_ir::parse::parse_program;
use tile_ir::print::print_module;
use tile_ir::serialize::program_json;

fn fixtures() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tilers-cc/tests/programs");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().to_string(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    v.sort();
    assert!(v.len() >= 10);
    v
}

#[test]
fn serialize_parse_round_trip() {
    for (name, text) in fixtures() {
        let m = parse_program(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let again = parse_program(&program_json(&m).to_string()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(m, again, "{name}: round trip changed the module");
        assert_eq!(print_module(&m), print_module(&again));
    }
}

#[test]
fn printed_ir_names_every_buffer_and_source_line() {
    for (name, text) in fixtures() {
        let m = parse_program(&text).unwrap();
        let printed = print_module(&m);
        for b in &m.buffers {
            assert!(printed.contains(&b.name), "{name}: {} missing from\n{printed}", b.name);
        }
        assert!(printed.contains("// kernels.py:"), "{name}: no source locations in\n{printed}");
    }
}

#[test]
fn verifier_accepts_every_fixture() {
    for (name, text) in fixtures() {
        let m = parse_program(&text).unwrap();
        if let Err(d) = tile_ir::verify::verify(&m) {
            panic!("{name}: {}", tile_ir::diag::render_all(&d, &m.sources));
        }
    }
}

#[test]
fn text_print_parse_round_trip() {
    for (name, text) in fixtures() {
        let m = parse_program(&text).unwrap();
        let printed = tile_ir::print::print_module_bare(&m);
        let again = tile_ir::text::parse_text(&printed).unwrap_or_else(|e| panic!("{name}: {e}\n{printed}"));
        assert_eq!(again, tile_ir::text::without_locations(m), "{name}");
        tile_ir::verify::verify(&again).unwrap_or_else(|_| panic!("{name}: parsed text does not verify"));
    }
}

/// One of every instruction, written by hand (a partial `vars` table: `%tid` first, the
/// rest where they are defined; a note among the declarations), parsed, printed and parsed
/// again.
const EVERY_INSTRUCTION: &str = r#"
kernel k(A: float16[64, 64], O: float32[64]) blocks(%bx) grid(1) threads=32 producers=128 producer_regs=40 consumer_regs=232 level=thread {
  vars %tid: thread_idx
  tensor_map A box [64, 64] swizzle 128
  extern_source "__device__ float f(const float* x, float s) { return x[0] * s; }\n"
  shared A_s: float16[64, 64] at smem+0 swizzle<3,4,4>
  // registers: the mma fragments, then a vector
  local a: float16[8]
  local b: float16[4]
  local c: float32[4]
  local v: float16[8]
  shared B_s: float16[64, 64] at smem+8192 panels<64> swizzle<3,4,3>
  local d: float32[32]
  global P: float16[16]
  shared bars: int64[2] at smem+16384
  let %lane = floormod(%tid, 32)
  cp.async16 A_s[%lane, 0] <- A[%lane, 0] (select(lt(%lane, 64), 16, 0) bytes)
  async_commit
  async_wait 0
  sync
  vec8 v[0] <- A_s[%lane, 8]
  vatomic2.add.release O[mul(%lane, 2)] <- c[0]
  ldmatrix.x4 a[0..] <- A_s[floormod(%lane, 16), mul(floordiv(%lane, 16), 8)]
  ldmatrix.x2.trans b[0..] <- A_s[floormod(%lane, 16), 16]
  mma.m16n8k16.f32.f16.f16.f32 c[0..] += a[0..] * b[0..]
  stmatrix.x2 A_s[floormod(%lane, 16), 32] <- b[0..]
  griddep_launch
  griddep_wait
  fence_proxy_async
  wgmma_fence
  wgmma.m64nNk16.f32.f16.f16 n=64 d[0..] += B_s[0, 0] k_major * B_s[0, 16] mn_major scale_d=0
  wgmma.m64nNk16.f32.f16.f16 n=64 d[0..] += a[0..] * B_s[16, 0] k_major scale_d=1
  wgmma_commit
  wgmma_wait 1 [d]
  mbarrier_init bars[0], 1
  fence_mbarrier_init
  mbarrier_arrive bars[0] expect_tx 8192
  tma_load map0 B_s[0, 0] <- A[0, mul(%lane, 0)] on bars[0] (8192 bytes)
  mbarrier_wait bars[0] parity floormod(%lane, 2)
  mbarrier_arrive bars[1]
  mbarrier_arrive bars[1] cta add(%lane, 1) where eq(%lane, 0)
  cp.async8 A_s[%lane, 4] <- A[%lane, 4] (8 bytes)
  cp.async.mbarrier_arrive bars[1]
  tma_load map0 B_s[0, 0] <- A[0, 0] on bars[0] (8192 bytes) multicast 3
  cluster_sync
  cluster_arrive
  cluster_wait
  sync_warp
  mbarrier_expect_tx bars[1] 4096
  setmaxnreg dec 40
  bar_sync 1, 32
  tma_store map0 A[0, mul(%lane, 0)] <- B_s[0, 0] (8192 bytes)
  bulk_commit
  bulk_wait read 0
  bulk_wait 0
  printf("lane %d: %g\n", %lane, c[0])
  call_extern "f"(ptr r 2 c[0] as "const float*", value c[1], str "x\"y") -> c[2]
  call_extern "__nanosleep"(value 100)
  bind_pointer P <- cast<int64>(mul(%lane, 64))
  if lt(c[0], 0.0:float32) {
    trap
  }
}
"#;

#[test]
fn every_instruction_reads_back_from_its_text() {
    use tile_ir::{Inst, Stmt};
    let m = tile_ir::text::parse_text(EVERY_INSTRUCTION).unwrap_or_else(|e| panic!("{e}"));
    let printed = tile_ir::print::print_module_bare(&m);
    assert!(printed.contains("vars %tid: thread_idx, %bx: block_idx.x, %lane: temp"), "{printed}");
    assert_eq!(tile_ir::text::parse_text(&printed).as_ref(), Ok(&m), "{printed}");
    let mut seen = std::collections::BTreeSet::new();
    tile_ir::walk_stmts(&m.kernel.body, &mut |s| {
        if let Stmt::Inst(i) = s {
            // no `_` arm: a new instruction does not compile here until it has a line above
            let name = match i {
                Inst::VecCopy(_) => "vec",
                Inst::VecAtomic(_) => "vatomic",
                Inst::Ldmatrix(_) => "ldmatrix",
                Inst::Mma(_) => "mma",
                Inst::Wgmma(_) => "wgmma",
                Inst::WgmmaFence(_) => "wgmma_fence",
                Inst::WgmmaCommit(_) => "wgmma_commit",
                Inst::WgmmaWait(_) => "wgmma_wait",
                Inst::FenceProxyAsync(_) => "fence_proxy_async",
                Inst::Stmatrix(_) => "stmatrix",
                Inst::AsyncCopy(_) => "cp.async",
                Inst::AsyncArrive(_) => "cp.async.mbarrier_arrive",
                Inst::AsyncCommit(_) => "async_commit",
                Inst::AsyncWait(_) => "async_wait",
                Inst::Sync(_) => "sync",
                Inst::ClusterSync(_) => "cluster_sync",
                Inst::ClusterArrive(_) => "cluster_arrive",
                Inst::ClusterWait(_) => "cluster_wait",
                Inst::SyncWarp(_) => "sync_warp",
                Inst::Printf(_) => "printf",
                Inst::CallExtern(_) => "call_extern",
                Inst::BindPointer(_) => "bind_pointer",
                Inst::Trap(_) => "trap",
                Inst::LoopBreak(_) => "break",
                Inst::GridDepWait(_) => "griddep_wait",
                Inst::GridDepLaunch(_) => "griddep_launch",
                Inst::FenceMbarrierInit(_) => "fence_mbarrier_init",
                Inst::MbarrierInit(_) => "mbarrier_init",
                Inst::MbarrierArrive(_) => "mbarrier_arrive",
                Inst::MbarrierExpectTx(_) => "mbarrier_expect_tx",
                Inst::MbarrierWait(_) => "mbarrier_wait",
                Inst::TmaLoad(_) => "tma_load",
                Inst::SetMaxNReg(_) => "setmaxnreg",
                Inst::NamedBarrier(_) => "bar_sync",
                Inst::TmaStore(_) => "tma_store",
                Inst::BulkCommit(_) => "bulk_commit",
                Inst::BulkWait(_) => "bulk_wait",
            };
            seen.insert(name);
        }
    });
    assert_eq!(seen.len(), 36, "every instruction appears in EVERY_INSTRUCTION: {seen:?}");
}

#[test]
fn text_errors_name_the_line() {
    let bad = EVERY_INSTRUCTION.replace("vec8 v[0] <- A_s", "vec8 v[0] <- nowhere");
    let e = tile_ir::text::parse_text(&bad).unwrap_err();
    assert!(e.starts_with("line 21:") && e.contains("unknown buffer nowhere"), "{e}");
    let e =
        tile_ir::text::parse_text(&EVERY_INSTRUCTION.replace("sync\n", "stmatrix.x9 v[0..]\n")).unwrap_err();
    assert!(e.contains("line 20: expected a statement or an instruction, found 'stmatrix.x9'"), "{e}");
}

/// uint16 and uint64 buffers and constants: a uint64 from 2^63 up prints as its value and
/// reads back as the same bits, through the JSON form and the text form.
#[test]
fn unsigned_constants_round_trip() {
    let text = r#"
kernel k(A: uint64[4], B: uint16[4]) blocks(%bx) grid(1) threads=32 level=tile {
  parallel (%i) in [4] {
    A[%i] = bitxor(A[%i], 18446744073709551615:uint64)
    B[%i] = add(B[%i], 65535:uint16)
  }
}
"#;
    let m = tile_ir::text::parse_text(text).unwrap_or_else(|e| panic!("{e}"));
    let printed = tile_ir::print::print_module_bare(&m);
    assert!(printed.contains("18446744073709551615:uint64"), "{printed}");
    assert_eq!(tile_ir::text::parse_text(&printed).unwrap(), m);
    let json = program_json(&m).to_string();
    assert!(json.contains("18446744073709551615"), "{json}");
    let again = parse_program(&json).unwrap();
    assert_eq!(print_module(&again), print_module(&m));
    let mut held = Vec::new();
    tile_ir::walk_stmts(&again.kernel.body, &mut |s| {
        if let tile_ir::Stmt::Store { value, .. } = s {
            value.walk(&mut |e| held.extend(e.as_int().filter(|_| e.dtype().is_int())));
        }
    });
    assert!(held.contains(&-1) && held.contains(&65535), "{held:?}");
}
