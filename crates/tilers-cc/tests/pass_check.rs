//! Pass-by-pass differential checks without a GPU: every fixture program is lowered, and
//! the IR after each pass is run on the same random inputs — tile-level modules by the
//! reference interpreter, thread-level ones by `tile_interp::threads` (a warp model of
//! shuffles, ldmatrix, mma.sync, cp.async groups, barriers and, on sm_90a, wgmma through
//! decoded descriptors with its fences and groups) — and must agree with the reference run
//! of the input program. Mutation tests break a lowered module the way a buggy pass would
//! and require the check to notice.
//!
//! To keep the test fast, only the first and last block along each grid axis run (the
//! last one is where tiles are ragged):
//! both levels get the same `if` around their body, so other blocks leave the outputs as
//! they were.

use std::path::Path;
use std::time::Instant;
use tile_interp::threads;
use tile_ir::*;
use tilers_cc::passcheck::{self, random_args, Blocks, CheckOptions, Reference};
use tilers_cc::{compile_stages, CompileOptions};

fn program_text(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs").join(format!("{name}.json"));
    std::fs::read_to_string(p).unwrap()
}

fn fixture_names() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".json").map(str::to_string))
        .collect();
    names.sort();
    names
}

/// The module after every pass of the pipeline, in order (`input` first); the driver
/// accepts the final module too (codegen runs).
fn stages(text: &str) -> Vec<(String, Module)> {
    compile_stages(text, &CompileOptions { arch: "sm_80".into(), ..Default::default() })
        .unwrap_or_else(|e| panic!("{e}"))
}

fn reference(stages: &[(String, Module)], seed: u64) -> Reference {
    passcheck::reference(stages, seed, Blocks::Edges).unwrap_or_else(|e| panic!("reference run: {e}"))
}

/// Check a lowered (or any) module against the reference.
fn check(r: &Reference, m: &Module) -> Result<(), String> {
    passcheck::check(r, m, Blocks::Edges).map_err(|f| f.to_string())
}

fn final_module(stages: &[(String, Module)]) -> Module {
    stages.last().unwrap().1.clone()
}

#[test]
fn every_pass_agrees_with_the_reference_on_every_fixture() {
    let mut failures = Vec::new();
    let start = Instant::now();
    let opts = CheckOptions { seed: 1, ..Default::default() };
    for name in fixture_names() {
        let t = Instant::now();
        let result = passcheck::check_stages(&stages(&program_text(&name)), &opts).unwrap();
        let mut ran = Vec::new();
        for s in &result.stages {
            match &s.outcome {
                passcheck::Outcome::Ok => ran.push(format!("{} {:.3}s", s.pass, s.seconds)),
                passcheck::Outcome::Skipped(e) => ran.push(format!("{} not run ({e})", s.pass)),
                o => failures.push(format!("{name} after {}: {}", s.pass, o.message())),
            }
        }
        eprintln!("{name}: {} ({:.2?})", ran.join(", "), t.elapsed());
        assert!(
            ran.iter().any(|p| p.starts_with("lower_tile_ops"))
                || failures.iter().any(|f| f.starts_with(&name))
        );
    }
    eprintln!("all fixtures: {:.2?}", start.elapsed());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_checker_names_the_first_pass_that_changed_the_answer() {
    // drop the first barrier of the lowered GEMM in the stage of the pass that made it:
    // the check must blame that pass and show the IR before and after it
    let mut stages = stages(&program_text("matmul_nn_f16"));
    let i = stages.iter().position(|(_, m)| m.level == Level::Thread).expect("a thread-level stage");
    for (_, m) in &mut stages[i..] {
        let mut n = 0;
        assert!(mutate_nth(&mut m.kernel.body, &is_sync, &mut n, &mut |_| vec![]));
    }
    let opts = CheckOptions { seed: 3, ..Default::default() };
    let result = passcheck::check_stages(&stages, &opts).unwrap();
    let first = result.first_failure.expect("the mutation went unnoticed");
    assert_eq!(result.stages[first].pass, stages[i].0);
    assert!(result.stages[first].outcome.message().contains("race"), "{:?}", result.stages[first]);
    assert!(result.ir_before.as_deref().unwrap().contains("sync"));
    let v = result.to_json(&opts);
    assert_eq!(v["first_failure"], serde_json::json!(stages[i].0));
    assert_eq!(v["ok"], serde_json::json!(false));
}

// ------------------------------------------------------------------ mutations

/// Rebuild `stmts`, letting `f` replace the `n`-th statement (pre-order) that `pick`
/// selects; returns whether one was replaced.
fn mutate_nth(
    stmts: &mut Vec<Stmt>,
    pick: &dyn Fn(&Stmt) -> bool,
    n: &mut usize,
    f: &mut dyn FnMut(Stmt) -> Vec<Stmt>,
) -> bool {
    let mut i = 0;
    while i < stmts.len() {
        if pick(&stmts[i]) {
            if *n == 0 {
                let s = stmts.remove(i);
                for (k, r) in f(s).into_iter().enumerate() {
                    stmts.insert(i + k, r);
                }
                return true;
            }
            *n -= 1;
        }
        let done = match &mut stmts[i] {
            Stmt::For { body, .. } | Stmt::Async { body } | Stmt::Parallel { body, .. } => {
                mutate_nth(body, pick, n, f)
            }
            Stmt::If { then, otherwise, .. } => {
                mutate_nth(then, pick, n, f) || mutate_nth(otherwise, pick, n, f)
            }
            _ => false,
        };
        if done {
            return true;
        }
        i += 1;
    }
    false
}

/// The final module of `name` with the `n`-th statement `pick` selects replaced by `f`.
fn mutated(
    name: &str,
    pick: &dyn Fn(&Stmt) -> bool,
    n: usize,
    f: &mut dyn FnMut(Stmt) -> Vec<Stmt>,
) -> (Reference, Module) {
    let stages = stages(&program_text(name));
    let r = reference(&stages, 2);
    let mut m = final_module(&stages);
    check(&r, &m).unwrap_or_else(|e| panic!("{name} before the mutation: {e}"));
    let mut n = n;
    assert!(mutate_nth(&mut m.kernel.body, pick, &mut n, f), "{name}: nothing to mutate");
    (r, m)
}

fn caught(r: &Reference, m: &Module, expect: &str) {
    caught_on(r, m, Blocks::Edges, expect)
}

/// The mutated module `m`, run on `blocks`, disagrees with the reference or fails with a
/// report containing `expect`.
fn caught_on(r: &Reference, m: &Module, blocks: Blocks, expect: &str) {
    match passcheck::check(r, m, blocks) {
        Ok(()) => panic!("the mutation went unnoticed"),
        Err(e) => {
            let e = e.to_string();
            eprintln!("caught: {e}");
            assert!(e.contains(expect), "expected a report containing '{expect}', got: {e}");
        }
    }
}

fn is_sync(s: &Stmt) -> bool {
    matches!(s, Stmt::Inst(Inst::Sync(_)))
}

#[test]
fn mutation_missing_barrier_in_cross_warp_reduction() {
    // row_sum: the barrier between writing the per-warp partial sums and reading them
    let (r, m) = mutated("row_sum", &is_sync, 1, &mut |_| vec![]);
    caught(&r, &m, "race");
}

#[test]
fn mutation_missing_barrier_after_async_wait() {
    let (r, m) = mutated("matmul_nn_f16", &is_sync, 0, &mut |_| vec![]);
    caught(&r, &m, "race");
}

#[test]
fn mutation_missing_async_wait() {
    let (r, m) = mutated(
        "matmul_nn_f16",
        &|s| matches!(s, Stmt::Inst(Inst::AsyncWait(inst::AsyncWait { pending: 1 }))),
        0,
        &mut |_| vec![],
    );
    caught(&r, &m, "in flight");
}

#[test]
fn mutation_async_wait_too_lax() {
    let (r, m) = mutated(
        "matmul_nn_f16",
        &|s| matches!(s, Stmt::Inst(Inst::AsyncWait(inst::AsyncWait { pending: 1 }))),
        0,
        &mut |_| vec![Stmt::inst(inst::AsyncWait { pending: 2 })],
    );
    caught(&r, &m, "in flight");
}

#[test]
fn mutation_barrier_under_a_thread_condition_deadlocks() {
    let stages = stages(&program_text("row_sum"));
    let r = reference(&stages, 6);
    let mut m = final_module(&stages);
    let tid = m.thread_idx();
    let mut n = 0;
    mutate_nth(&mut m.kernel.body, &is_sync, &mut n, &mut |s| {
        let cond = Expr::binary(BinOp::Lt, Expr::var(tid, DType::I32), Expr::int(64));
        vec![Stmt::If { cond, then: vec![s], otherwise: vec![], loc: Loc::UNKNOWN }]
    });
    caught(&r, &m, "deadlock");
}

#[test]
fn mutation_ldmatrix_row_off_by_one() {
    let (r, m) = mutated(
        "matmul_nn_f16",
        &|s| matches!(s, Stmt::Inst(Inst::Ldmatrix(ld)) if !ld.form().1),
        0,
        &mut |s| {
            let Stmt::Inst(Inst::Ldmatrix(mut ld)) = s else { unreachable!() };
            let row = ld.src_idx.len() - 2;
            ld.src_idx[row] = Expr::binary(BinOp::Add, ld.src_idx[row].clone(), Expr::int(1));
            vec![Stmt::inst(ld)]
        },
    );
    // either a mismatch or an index out of range: both are reports
    assert!(check(&r, &m).is_err(), "the mutation went unnoticed");
}

#[test]
fn mutation_mma_accumulator_offset() {
    let (r, m) = mutated("matmul_nn_f16", &|s| matches!(s, Stmt::Inst(Inst::Mma(_))), 0, &mut |s| {
        let Stmt::Inst(Inst::Mma(mut mma)) = s else { unreachable!() };
        // the neighbouring n8 tile's registers: wrong columns accumulate
        mma.c_offset = Expr::binary(BinOp::BitXor, mma.c_offset, Expr::int(4));
        vec![Stmt::inst(mma)]
    });
    caught(&r, &m, "differ");
}

#[test]
fn mutation_int8_mma_b_operand_offset() {
    let (r, m) = mutated("matmul_nn_int8", &|s| matches!(s, Stmt::Inst(Inst::Mma(_))), 0, &mut |s| {
        let Stmt::Inst(Inst::Mma(mut mma)) = s else { unreachable!() };
        mma.b_offset = Expr::binary(BinOp::BitXor, mma.b_offset, Expr::int(8));
        vec![Stmt::inst(mma)]
    });
    // wrong registers (a mismatch) or registers past the array (an error)
    caught(&r, &m, "");
}

/// `select(in_bounds, load, pad)` on a global tensor with the guard dropped.
fn unguard(e: Expr, m: &Module) -> Expr {
    e.map(&mut |e| match e {
        Expr::Select { a, .. } if matches!(&*a, Expr::Load { buf, .. } if m.buffer(*buf).scope == Scope::Global) => *a,
        other => other,
    })
}

#[test]
fn mutation_bounds_guard_dropped_from_a_global_load() {
    let stages = stages(&program_text("row_sum"));
    let r = reference(&stages, 3);
    let mut m = final_module(&stages);
    let copy = m.clone();
    m.kernel.body =
        m.kernel.body.into_iter().map(|s| map_stmt_exprs(s, &mut |e| unguard(e, &copy))).collect();
    assert_ne!(m, copy, "no guarded load found");
    caught(&r, &m, "out of the bounds");
}

#[test]
fn mutation_cp_async_without_zero_fill() {
    // K = 1000 leaves the last 32-wide K tile ragged: whole 16-byte copies there read the
    // next row's elements (or clamped addresses) instead of zeros
    let stages = stages(&program_text("matmul_nn_f16"));
    let r = reference(&stages, 7);
    let mut m = final_module(&stages);
    let guarded = |s: &Stmt| matches!(s, Stmt::Inst(Inst::AsyncCopy(c)) if c.src_bytes.as_int() != Some(16));
    let mut count = 0;
    while mutate_nth(&mut m.kernel.body, &guarded, &mut 0, &mut |s| {
        let Stmt::Inst(Inst::AsyncCopy(mut c)) = s else { unreachable!() };
        c.src_bytes = Expr::int(16);
        vec![Stmt::inst(c)]
    }) {
        count += 1;
    }
    assert!(count > 0);
    caught(&r, &m, "");
}

#[test]
fn mutation_shuffle_mask() {
    let stages = stages(&program_text("row_sum"));
    let r = reference(&stages, 4);
    let mut m = final_module(&stages);
    let mut changed = false;
    m.kernel.body = m
        .kernel
        .body
        .into_iter()
        .map(|s| {
            map_stmt_exprs(s, &mut |e| match e {
                Expr::ShflXor { a, mask: 16, dtype } if !changed => {
                    changed = true;
                    Expr::ShflXor { a, mask: 8, dtype }
                }
                other => other,
            })
        })
        .collect();
    assert!(changed);
    caught(&r, &m, "differ");
}

#[test]
fn mutation_swizzle_dropped_on_one_side() {
    // the tile is written swizzled by cp.async and read by ldmatrix; reading it through an
    // unswizzled alias at the same offset reads the wrong chunks
    let stages = stages(&program_text("matmul_nn_f16"));
    let r = reference(&stages, 5);
    let mut m = final_module(&stages);
    let Some(Stmt::Inst(Inst::Ldmatrix(ld))) =
        find(&m.kernel.body, &|s| matches!(s, Stmt::Inst(Inst::Ldmatrix(_))))
    else {
        panic!("no ldmatrix")
    };
    let src = ld.src;
    let mut alias = m.buffer(src).clone();
    alias.swizzle = None;
    alias.name.push_str("_plain");
    let alias = m.add_buffer(alias);
    let mut n = 0;
    mutate_nth(&mut m.kernel.body, &|s| matches!(s, Stmt::Inst(Inst::Ldmatrix(_))), &mut n, &mut |s| {
        let Stmt::Inst(Inst::Ldmatrix(mut ld)) = s else { unreachable!() };
        ld.src = alias;
        vec![Stmt::inst(ld)]
    });
    caught(&r, &m, "differ");
}

fn find(stmts: &[Stmt], pick: &dyn Fn(&Stmt) -> bool) -> Option<Stmt> {
    let mut found = None;
    walk_stmts(stmts, &mut |s| {
        if found.is_none() && pick(s) {
            found = Some(s.clone());
        }
    });
    found
}

// ------------------------------------------------------------------ bank conflicts

#[test]
fn swizzled_gemm_tiles_are_read_and_written_without_bank_conflicts() {
    let stages = stages(&program_text("matmul_nn_f16"));
    let m = final_module(&stages);
    let mut args = random_args(&m, 8);
    let opts = threads::Options { blocks: Some(vec![[0, 0, 0]]) };
    let report = threads::run_with(&m, &mut args, &opts).unwrap();
    for b in &report.bank_conflicts {
        eprintln!("{}: {} requests, {} wavefronts (ideal {})", b.what, b.requests, b.wavefronts, b.ideal);
        if b.what.starts_with("ldmatrix") || b.what.starts_with("cp.async") {
            assert_eq!(b.wavefronts, b.ideal, "{}", b.what);
        }
    }
    assert!(report.bank_conflicts.iter().any(|b| b.what.starts_with("ldmatrix")));

    // the same tiles unswizzled: ldmatrix's eight rows of one column share banks
    let mut plain = m.clone();
    for b in &mut plain.buffers {
        b.swizzle = None;
    }
    let mut args = random_args(&plain, 8);
    let report = threads::run_with(&plain, &mut args, &opts).unwrap();
    let ld = report.bank_conflicts.iter().find(|b| b.what.starts_with("ldmatrix")).unwrap();
    eprintln!("unswizzled {}: {} wavefronts (ideal {})", ld.what, ld.wavefronts, ld.ideal);
    assert!(ld.wavefronts > ld.ideal);
}

// ------------------------------------------------------------------ stmatrix (sm_90)

/// Stages on `arch` with the stmatrix epilogue on (`Options::stmatrix_epilogue`), gemms on
/// mma.sync (the stmatrix epilogue stores mma.sync accumulators).
fn stages_for(text: &str, arch: &str) -> Vec<(String, Module)> {
    let opts = CompileOptions {
        arch: arch.into(),
        stmatrix_epilogue: true,
        mma_sync_only: true,
        ..Default::default()
    };
    compile_stages(text, &opts).unwrap_or_else(|e| panic!("{e}"))
}

/// On sm_90a the GEMM epilogues store their accumulators with stmatrix: every pass of every
/// fixture that does still agrees with the reference, and the stores are conflict-free.
#[test]
fn stmatrix_epilogues_agree_with_the_reference_and_hit_no_bank_conflicts() {
    let opts = CheckOptions {
        seed: 3,
        compile: CompileOptions { arch: "sm_90a".into(), mma_sync_only: true, ..Default::default() },
        ..Default::default()
    };
    let mut seen = 0;
    for name in fixture_names() {
        let stages = stages_for(&program_text(&name), "sm_90a");
        let m = final_module(&stages);
        if find(&m.kernel.body, &|s| matches!(s, Stmt::Inst(Inst::Stmatrix(_)))).is_none() {
            continue;
        }
        seen += 1;
        let result = passcheck::check_stages(&stages, &opts).unwrap();
        for s in &result.stages {
            assert!(
                !matches!(s.outcome, passcheck::Outcome::Mismatch(_) | passcheck::Outcome::Error(_)),
                "{name} after {}: {}",
                s.pass,
                s.outcome.message()
            );
        }
        let mut args = random_args(&m, 9);
        let report =
            threads::run_with(&m, &mut args, &threads::Options { blocks: Some(vec![[0, 0, 0]]) }).unwrap();
        let st =
            report.bank_conflicts.iter().find(|b| b.what.starts_with("stmatrix")).expect("stmatrix counted");
        assert_eq!(st.wavefronts, st.ideal, "{name}: {}", st.what);
    }
    assert!(seen >= 4, "only {seen} fixtures store by stmatrix");
}

#[test]
fn mutation_stmatrix_row_half_dropped() {
    // every lane addresses the top half of its piece: the bottom rows are never written
    let stages = stages_for(&program_text("matmul_nn_f16"), "sm_90a");
    let r = passcheck::reference(&stages, 4, Blocks::Edges).unwrap();
    let mut m = final_module(&stages);
    let changed =
        mutate_nth(&mut m.kernel.body, &|s| matches!(s, Stmt::Inst(Inst::Stmatrix(_))), &mut 0, &mut |s| {
            let Stmt::Inst(Inst::Stmatrix(mut st)) = s else { unreachable!() };
            let before = st.dst_idx[0].clone();
            st.dst_idx[0] = st.dst_idx[0].clone().map(&mut |e| match e {
                Expr::Binary { op: BinOp::Mul, a, b, dtype }
                    if b.as_int() == Some(8) && matches!(*a, Expr::Binary { op: BinOp::FloorMod, .. }) =>
                {
                    Expr::int_of(0, dtype)
                }
                other => other,
            });
            assert_ne!(st.dst_idx[0], before, "the row's half term was not found");
            vec![Stmt::inst(st)]
        });
    assert!(changed);
    caught(&r, &m, "");
}

// ------------------------------------------------------------------ wgmma (sm_90a)

/// The compile options of the wgmma tests: sm_90a, T.gemm free to choose wgmma, TMA
/// pipelines one tile per block (so the edge blocks alone can be checked;
/// `persistent_tma_gemms_agree_with_the_reference` runs persistent ones whole).
fn wgmma_options() -> CompileOptions {
    CompileOptions { arch: "sm_90a".into(), no_persistent: true, ..Default::default() }
}

/// sm_90a with the pipelines on cp.async (`tma=False`): the generic-proxy writes wgmma
/// reads, which need `fence.proxy.async`.
fn cp_async_options() -> CompileOptions {
    CompileOptions { no_tma: true, ..wgmma_options() }
}

fn wgmma_stages(name: &str) -> Vec<(String, Module)> {
    wgmma_stages_with(name, &wgmma_options())
}

fn wgmma_stages_with(name: &str, opts: &CompileOptions) -> Vec<(String, Module)> {
    compile_stages(&program_text(name), opts).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn has_wgmma(m: &Module) -> bool {
    find(&m.kernel.body, &|s| matches!(s, Stmt::Inst(Inst::Wgmma(_)))).is_some()
}

/// On sm_90a the GEMM fixtures lower to wgmma: every pass of every one of them agrees with
/// the reference on the warp model (descriptors decoded, results landing at the waits,
/// fences and proxy fences checked).
#[test]
fn wgmma_gemms_agree_with_the_reference_at_every_pass() {
    let start = Instant::now();
    let opts = CheckOptions { seed: 11, compile: wgmma_options(), ..Default::default() };
    let mut seen = Vec::new();
    let mut failures = Vec::new();
    for name in fixture_names() {
        let stages = wgmma_stages(&name);
        if !has_wgmma(&final_module(&stages)) {
            continue;
        }
        let t = Instant::now();
        let result = passcheck::check_stages(&stages, &opts).unwrap();
        let mut ran = 0;
        for s in &result.stages {
            match &s.outcome {
                passcheck::Outcome::Ok if s.level == Level::Thread => ran += 1,
                passcheck::Outcome::Ok | passcheck::Outcome::Skipped(_) => {}
                o => failures.push(format!("{name} after {}: {}", s.pass, o.message())),
            }
        }
        eprintln!("{name}: {ran} thread-level stages agree ({:.2?})", t.elapsed());
        seen.push(name);
    }
    eprintln!("wgmma fixtures: {} ({:.2?}): {}", seen.len(), start.elapsed(), seen.join(", "));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(seen.len() >= 5, "only {} fixtures lower to wgmma: {seen:?}", seen.len());
}

/// The reference run and the final sm_90a module of `name`, which agrees with it.
fn wgmma_final(name: &str) -> (Reference, Module) {
    wgmma_final_with(name, &wgmma_options())
}

fn wgmma_final_with(name: &str, opts: &CompileOptions) -> (Reference, Module) {
    let stages = wgmma_stages_with(name, opts);
    let r = reference(&stages, 2);
    let m = final_module(&stages);
    assert!(has_wgmma(&m), "{name} does not lower to wgmma");
    check(&r, &m).unwrap_or_else(|e| panic!("{name} before the mutation: {e}"));
    (r, m)
}

/// The final sm_90a module of `name` with the `n`-th statement `pick` selects replaced by
/// `f`.
fn wgmma_mutated(
    name: &str,
    pick: &dyn Fn(&Stmt) -> bool,
    n: usize,
    f: &mut dyn FnMut(Stmt) -> Vec<Stmt>,
) -> (Reference, Module) {
    wgmma_mutated_with(name, &wgmma_options(), pick, n, f)
}

fn wgmma_mutated_with(
    name: &str,
    opts: &CompileOptions,
    pick: &dyn Fn(&Stmt) -> bool,
    n: usize,
    f: &mut dyn FnMut(Stmt) -> Vec<Stmt>,
) -> (Reference, Module) {
    let (r, mut m) = wgmma_final_with(name, opts);
    let mut n = n;
    assert!(mutate_nth(&mut m.kernel.body, pick, &mut n, f), "{name}: nothing to mutate");
    (r, m)
}

fn is_wgmma_wait(pending: u32) -> impl Fn(&Stmt) -> bool {
    move |s| matches!(s, Stmt::Inst(Inst::WgmmaWait(w)) if w.pending == pending)
}

/// `wgmma_wait pending` with `pending` raised by one.
fn laxer(s: Stmt) -> Vec<Stmt> {
    let Stmt::Inst(Inst::WgmmaWait(mut w)) = s else { unreachable!() };
    w.pending += 1;
    vec![Stmt::inst(w)]
}

/// Each wgmma rewritten by `f`.
fn every_wgmma(m: &mut Module, f: &dyn Fn(&mut inst::Wgmma)) -> usize {
    let mut count = 0;
    let mut k = 0;
    while mutate_nth(&mut m.kernel.body, &|s| matches!(s, Stmt::Inst(Inst::Wgmma(_))), &mut k, &mut |s| {
        let Stmt::Inst(Inst::Wgmma(mut w)) = s else { unreachable!() };
        f(&mut w);
        vec![Stmt::inst(w)]
    }) {
        count += 1;
        k = count;
    }
    count
}

#[test]
fn mutation_wgmma_wait_before_the_epilogue_too_lax() {
    // the drain after the main loop waits for none but the newest group: the epilogue
    // reads accumulator registers the last wgmmas still own
    let (r, m) = wgmma_mutated("matmul_nn_f16", &is_wgmma_wait(0), 0, &mut laxer);
    caught(&r, &m, "while a wgmma that uses it is pending");
}

#[test]
fn mutation_wgmma_wait_in_the_pipelined_loop_too_lax() {
    // wait_group 2 in a 3-stage loop: the copy into the stage of k-tile i + 2 overwrites
    // the stage the wgmmas of k-tile i - 1 still read
    let (r, m) = wgmma_mutated("matmul_nn_f16", &is_wgmma_wait(1), 0, &mut laxer);
    caught(&r, &m, "while a wgmma that reads it is pending");
}

#[test]
fn mutation_wgmma_wait_too_lax_for_a_register_a_operand() {
    // A in registers, B in two stages: the next k-tile's copies overwrite the B stage (and
    // then the A fragment) that the wgmmas of the last one still read
    let (r, m) = wgmma_mutated("matmul_reg_a_f16", &is_wgmma_wait(0), 0, &mut laxer);
    caught(&r, &m, "pending");
}

#[test]
fn mutation_wgmma_fence_dropped() {
    let (r, m) =
        wgmma_mutated("matmul_nn_f16", &|s| matches!(s, Stmt::Inst(Inst::WgmmaFence(_))), 0, &mut |_| vec![]);
    caught(&r, &m, "wgmma_fence");
}

#[test]
fn mutation_wgmma_fence_before_the_accumulator_is_cleared() {
    // the fence moved above the fill that zeroes the accumulator: the wgmma then uses
    // registers an ordinary store wrote after the fence
    let (r, mut m) = wgmma_final("article_matmul");
    let is_fence = |s: &Stmt| matches!(s, Stmt::Inst(Inst::WgmmaFence(_)));
    assert!(mutate_nth(&mut m.kernel.body, &is_fence, &mut 0, &mut |_| vec![]));
    // a fence first thing in the kernel, before every register write
    m.kernel.body.insert(0, Stmt::inst(inst::WgmmaFence));
    caught(&r, &m, "since the last wgmma_fence");
}

#[test]
fn mutation_fence_proxy_async_dropped() {
    // the cp.async data that lands at the wait is written by the generic proxy: without
    // the fence the wgmma (async proxy) may not see it
    let (r, m) = wgmma_mutated_with(
        "matmul_nn_f16",
        &cp_async_options(),
        &|s| matches!(s, Stmt::Inst(Inst::FenceProxyAsync(_))),
        0,
        &mut |_| vec![],
    );
    caught(&r, &m, "no fence_proxy_async after it");
}

#[test]
fn mutation_fence_proxy_async_after_the_barrier() {
    // fence, then barrier: the other way round the fence orders nothing for the readers
    let (r, m) = wgmma_mutated_with(
        "matmul_nn_f16",
        &cp_async_options(),
        &|s| matches!(s, Stmt::Inst(Inst::FenceProxyAsync(_))),
        0,
        &mut |_| vec![],
    );
    let mut m = m;
    let mut n = 0;
    assert!(mutate_nth(&mut m.kernel.body, &is_sync, &mut n, &mut |s| vec![
        s,
        Stmt::inst(inst::FenceProxyAsync)
    ]));
    caught(&r, &m, "with no barrier since");
}

#[test]
fn mutation_wgmma_b_operand_eight_rows_off() {
    // B (K x N, N contiguous) read from k-row 8 on: half of the k-step's rows are wrong
    let (r, mut m) = wgmma_final("matmul_nn_f16");
    let count = every_wgmma(&mut m, &|w| {
        let k = w.b_idx.len() - 2;
        assert!(!w.b_k_major);
        w.b_idx[k] = Expr::binary(BinOp::Add, w.b_idx[k].clone(), Expr::int(8));
    });
    assert!(count > 0);
    caught(&r, &m, "");
}

#[test]
fn mutation_wgmma_b_major_flipped() {
    // the descriptor and the instruction say K-major for a tile stored N-major
    let (r, mut m) = wgmma_final("matmul_tn_bf16");
    assert!(every_wgmma(&mut m, &|w| w.b_k_major = !w.b_k_major) > 0);
    caught(&r, &m, "");
}

#[test]
fn mutation_wgmma_reads_b_through_another_swizzle() {
    // the tile is written (cp.async) in 128-byte-swizzled panels of 64 columns, but the
    // wgmma's descriptor describes 64-byte-swizzled panels of 32: mode and strides of a
    // valid layout that is not the one the data has (on the TMA path the bulk copy's own
    // alignment check catches a changed tile first)
    let (r, mut m) = wgmma_final_with("matmul_nn_f16", &cp_async_options());
    let b = find(&m.kernel.body, &|s| matches!(s, Stmt::Inst(Inst::Wgmma(_))))
        .map(|s| match s {
            Stmt::Inst(Inst::Wgmma(w)) => w.b,
            _ => unreachable!(),
        })
        .unwrap();
    let mut alias = m.buffer(b).clone();
    assert_eq!(alias.panel, Some(64));
    alias.panel = Some(32);
    alias.swizzle = Swizzle::span(64);
    alias.name.push_str("_64b");
    let alias = m.add_buffer(alias);
    let mut one_sided = m.clone();
    assert!(every_wgmma(&mut one_sided, &|w| w.b = alias) > 0);
    caught(&r, &one_sided, "differ");
    // changing the tile's own swizzle is not that bug: its writers (cp.async through
    // `SharedLayout::offset`) change with it, and a span swizzle that is not its panels'
    // is no wgmma layout at all, which the model refuses to build a descriptor for
    m.buffer_mut(b).swizzle = Swizzle::span(64);
    caught(&r, &m, "not a wgmma layout");
}

// ------------------------------------------------------------------ TMA pipelines (sm_90a)

/// An mbarrier instruction on the barrier buffer named `bar`.
fn on_barrier<'a>(m: &'a Module, bar: &'a str, wait: bool) -> impl Fn(&Stmt) -> bool + 'a {
    move |s| match s {
        Stmt::Inst(Inst::MbarrierWait(w)) if wait => m.buffer(w.bar).name == bar,
        Stmt::Inst(Inst::MbarrierArrive(a)) if !wait => m.buffer(a.bar).name == bar,
        _ => false,
    }
}

/// The warp-specialized final module of `name` (producer warpgroup, TMA, mbarriers).
fn tma_final(name: &str) -> (Reference, Module) {
    let (r, m) = wgmma_final(name);
    assert!(m.kernel.roles.is_some(), "{name} is not warp-specialized");
    (r, m)
}

/// Every thread-level stage of `name` agrees with the reference (at least five of them ran).
fn assert_thread_stages_agree(name: &str, stages: &[(String, Module)], opts: &CheckOptions) {
    let result = passcheck::check_stages(stages, opts).unwrap();
    let mut ran = 0;
    for s in &result.stages {
        match &s.outcome {
            passcheck::Outcome::Ok if s.level == Level::Thread => ran += 1,
            passcheck::Outcome::Ok | passcheck::Outcome::Skipped(_) => {}
            o => panic!("{name} after {}: {}", s.pass, o.message()),
        }
    }
    assert!(ran >= 5, "{name}: {ran} thread-level stages");
}

/// Persistent TMA GEMMs (every tile walked by three blocks, the ring wrapping across tiles,
/// a raster numbering them) agree with the reference at every thread-level pass.
#[test]
fn persistent_tma_gemms_agree_with_the_reference() {
    let opts = CompileOptions { arch: "sm_90a".into(), ..Default::default() };
    let check_opts = CheckOptions { seed: 5, compile: opts.clone(), ..Default::default() };
    for name in ["matmul_tt_f16", "matmul_rasterized_col"] {
        let stages = wgmma_stages_with(name, &opts);
        let m = final_module(&stages);
        assert!(m.tiles().is_some_and(|t| t > 3), "{name} is not persistent over more tiles than blocks");
        assert_thread_stages_agree(name, &stages, &check_opts);
    }
}

#[test]
fn tma_gemms_are_warp_specialized_and_checked() {
    // the pass check above ran these; here: they are the TMA form, persistent ones too
    for name in ["matmul_nn_f16", "article_matmul", "matmul_tt_f16", "matmul_dynamic_m"] {
        let (_, m) = tma_final(name);
        assert!(find(&m.kernel.body, &|s| matches!(s, Stmt::Inst(Inst::TmaLoad(_)))).is_some(), "{name}");
    }
}

fn mutated_barrier(
    name: &str,
    bar: &str,
    wait: bool,
    f: &mut dyn FnMut(Stmt) -> Vec<Stmt>,
) -> (Reference, Module) {
    let (r, mut m) = tma_final(name);
    let pick = {
        let probe = m.clone();
        move |s: &Stmt| on_barrier(&probe, bar, wait)(s)
    };
    assert!(mutate_nth(&mut m.kernel.body, &pick, &mut 0, f), "{name}: no {bar} instruction");
    (r, m)
}

#[test]
fn mutation_tma_transaction_count_too_large() {
    // the producer expects more bytes than its copies bring: the phase never completes
    let (r, m) = mutated_barrier("matmul_nn_f16", "full_bar", false, &mut |s| {
        let Stmt::Inst(Inst::MbarrierArrive(mut a)) = s else { unreachable!() };
        a.expect_tx = a.expect_tx.map(|b| b + 16);
        vec![Stmt::inst(a)]
    });
    caught(&r, &m, "deadlock");
}

#[test]
fn mutation_tma_transaction_count_too_small() {
    // fewer bytes expected than the copies complete: the count goes below zero (the phase
    // would complete before the data is there)
    let (r, m) = mutated_barrier("matmul_nn_f16", "full_bar", false, &mut |s| {
        let Stmt::Inst(Inst::MbarrierArrive(mut a)) = s else { unreachable!() };
        a.expect_tx = a.expect_tx.map(|b| b - 16);
        vec![Stmt::inst(a)]
    });
    caught(&r, &m, "transaction count");
}

#[test]
fn mutation_tma_consumer_phase_bit_flipped() {
    // the consumers wait for the other parity of their full barrier: the first wait passes
    // at once, before the stage's bytes arrived
    let (r, m) = mutated_barrier("matmul_nn_f16", "full_bar", true, &mut |s| {
        let Stmt::Inst(Inst::MbarrierWait(mut w)) = s else { unreachable!() };
        w.parity =
            Expr::binary(BinOp::FloorMod, Expr::binary(BinOp::Add, w.parity, Expr::int(1)), Expr::int(2));
        vec![Stmt::inst(w)]
    });
    caught(&r, &m, "");
}

#[test]
fn mutation_tma_consumer_releases_its_stage_early() {
    // the release of k-tile i - 1's stage (after the wait that retires its wgmmas) moved to
    // k-tile i's own stage, which its wgmmas still read: the producer refills it under them
    let (r, mut m) = tma_final("matmul_nn_f16");
    let probe = m.clone();
    let pick = |s: &Stmt| {
        on_barrier(&probe, "empty_bar", false)(s)
            && matches!(s, Stmt::Inst(Inst::MbarrierArrive(a)) if matches!(&a.idx, Expr::Binary { .. }))
    };
    assert!(mutate_nth(&mut m.kernel.body, &pick, &mut 0, &mut |s| {
        let Stmt::Inst(Inst::MbarrierArrive(mut a)) = s else { unreachable!() };
        // floormod(i - 1, s) -> floormod(i, s)
        a.idx = a.idx.map(&mut |e| match e {
            Expr::Binary { op: BinOp::Add, a, b, .. } if b.as_int() == Some(-1) => *a,
            other => other,
        });
        vec![Stmt::inst(a)]
    }));
    caught(&r, &m, "");
}

#[test]
fn mutation_tma_producer_overruns_the_ring() {
    // the producer no longer waits for a released stage: it refills stages still in use
    let (r, m) = mutated_barrier("matmul_nn_f16", "empty_bar", true, &mut |_| vec![]);
    caught(&r, &m, "");
}

#[test]
fn mutation_tma_store_without_proxy_fence() {
    // the threads' writes of the epilogue's staging tile are generic-proxy writes: without
    // fence.proxy.async the bulk store (async proxy) may read stale bytes
    let (r, mut m) = tma_final("matmul_nn_f16");
    let fence = |s: &Stmt| matches!(s, Stmt::Inst(Inst::FenceProxyAsync(_)));
    assert!(mutate_nth(&mut m.kernel.body, &fence, &mut 0, &mut |_| vec![]), "no fence to drop");
    caught(&r, &m, "no fence_proxy_async after it");
}

#[test]
fn mutation_tma_store_never_waited_for() {
    // the block exits with its bulk stores in flight
    let (r, mut m) = tma_final("matmul_nn_f16");
    let full_wait = |s: &Stmt| matches!(s, Stmt::Inst(Inst::BulkWait(w)) if !w.read);
    assert!(mutate_nth(&mut m.kernel.body, &full_wait, &mut 0, &mut |_| vec![]), "no bulk_wait to drop");
    caught(&r, &m, "TMA stores pending at the end");
}

/// Run the final sm_90a module of `name` with every wgmma descriptor changed by `fault`
/// (the model's test knob), on the edge blocks, against the reference.
fn with_descriptor_fault(name: &str, fault: threads::DescriptorFault) -> Result<(), String> {
    let stages = wgmma_stages(name);
    let r = reference(&stages, 2);
    let m = passcheck::few_blocks(final_module(&stages));
    let mut args = r.args.clone();
    threads::run_with_descriptor_fault(&m, &mut args, &threads::Options::default(), fault)
        .map_err(|d| d.message)?;
    passcheck::compare(&r.module, &r.result, &args).map_err(|mm| mm.to_string())
}

#[test]
fn mutation_wgmma_descriptor_fields() {
    // the model decodes the descriptor as the hardware does: each field one 16-byte unit
    // off, or another swizzle mode, reads other bytes
    with_descriptor_fault("matmul_nn_f16", |d| d).expect("the unchanged descriptors agree");
    let faults: [(&str, threads::DescriptorFault); 6] = [
        ("start + 16 bytes", |d| d + 1),
        ("leading byte offset + 16", |d| d + (1 << 16)),
        ("stride byte offset + 16", |d| d + (1 << 32)),
        ("stride byte offset - 16", |d| d - (1 << 32)),
        ("128-byte swizzle read as 64-byte", |d| if d >> 62 == 1 { (d & !(3 << 62)) | (2 << 62) } else { d }),
        ("64-byte swizzle read as 32-byte", |d| if d >> 62 == 2 { (d & !(3 << 62)) | (3 << 62) } else { d }),
    ];
    for (what, fault) in faults {
        match with_descriptor_fault("matmul_nn_f16", fault) {
            Ok(()) => panic!("{what}: the fault went unnoticed"),
            Err(e) => eprintln!("{what}: caught: {e}"),
        }
    }
}

// ------------------------------------------------------------------ ping-pong consumers

fn pingpong_options() -> CompileOptions {
    CompileOptions { arch: "sm_90a".into(), pingpong: true, ..Default::default() }
}

/// Ping-pong kernels (two consumer slots on alternate tiles of the persistent walk, their
/// main loops handed over by named barriers 3 and 4, slot 1 on its own copies of the
/// consumers' shared tiles) agree with the reference at every thread-level pass.
#[test]
fn pingpong_tma_gemms_agree_with_the_reference() {
    let check_opts = CheckOptions { seed: 9, compile: pingpong_options(), ..Default::default() };
    for name in ["matmul_tt_f16", "matmul_rasterized_col", "matmul_nn_f16", "matmul_deep_k"] {
        let stages = wgmma_stages_with(name, &pingpong_options());
        let m = final_module(&stages);
        assert!(m.kernel.roles.is_some_and(|r| r.pingpong), "{name} is not ping-pong");
        assert_eq!(m.launched_threads(), 2 * m.kernel.threads + 128, "{name}");
        assert_thread_stages_agree(name, &stages, &check_opts);
    }
}

/// The reference run (the whole grid: a persistent kernel runs whole) and the final
/// ping-pong module of `name`, which agrees with it.
fn pingpong_final(name: &str) -> (Reference, Module) {
    let stages = wgmma_stages_with(name, &pingpong_options());
    let r = passcheck::reference(&stages, 2, Blocks::All).unwrap();
    let m = final_module(&stages);
    assert!(m.kernel.roles.is_some_and(|r| r.pingpong), "{name} is not ping-pong");
    passcheck::check(&r, &m, Blocks::All).unwrap_or_else(|e| panic!("{name} before the mutation: {e}"));
    (r, m)
}

/// A ping-pong kernel runs whole (persistent): its mutations are checked on every block.
fn pingpong_caught(r: &Reference, m: &Module, expect: &str) {
    caught_on(r, m, Blocks::All, expect)
}

fn is_handoff(s: &Stmt) -> bool {
    matches!(s, Stmt::Inst(Inst::NamedBarrier(b)) if b.id >= 3)
}

#[test]
fn mutation_pingpong_main_loops_not_in_turn() {
    // without the hand-over the second slot starts its tile's main loop at once: its ring
    // waits are two phases ahead of the barrier and pass on the phase before, reading a
    // stage before the copies of its tile landed
    let (r, mut m) = pingpong_final("matmul_deep_k");
    let mut removed = 0;
    while mutate_nth(&mut m.kernel.body, &is_handoff, &mut 0, &mut |_| vec![]) {
        removed += 1;
    }
    assert_eq!(removed, 4, "two waits and two hand-overs");
    pingpong_caught(&r, &m, "");
}

#[test]
fn mutation_pingpong_hand_over_without_its_wait() {
    // a slot hands over but the other never waits: the arrivals pile up on the barrier
    let (r, mut m) = pingpong_final("matmul_rasterized_col");
    let waits = |s: &Stmt| matches!(s, Stmt::Inst(Inst::NamedBarrier(b)) if b.id >= 3 && !b.arrive);
    assert!(mutate_nth(&mut m.kernel.body, &waits, &mut 0, &mut |_| vec![]));
    pingpong_caught(&r, &m, "bar_arrive");
}

#[test]
fn mutation_pingpong_slots_share_a_staging_tile() {
    // each slot's epilogue stages its accumulator in a shared tile of its own; put slot 1's
    // on slot 0's bytes and the two epilogues overlap there
    let (r, mut m) = pingpong_final("matmul_rasterized_col");
    // (C_s, the user's staging tile, has a copy for slot 1: C_s_slot1)
    let copy = m.buffers.iter().position(|b| b.name == "C_s_slot1").expect("slot 1's own C_s");
    let own = m.buffers.iter().position(|b| b.name == "C_s").expect("C_s");
    assert_ne!(m.buffers[copy].shared_offset, m.buffers[own].shared_offset);
    m.buffers[copy].shared_offset = m.buffers[own].shared_offset;
    pingpong_caught(&r, &m, "");
}

#[test]
fn mutation_setmaxnreg_budgets_past_the_blocks_registers() {
    // two warpgroups per slot: 640 threads launched at 96 registers (61440 in all); consumer
    // budgets of 120 (what the SM's 65536 would allow) can never be granted: setmaxnreg.inc
    // waits for registers nobody releases (the H200 hung exactly so)
    let (r, mut m) = pingpong_final("article_matmul");
    assert_eq!(m.launched_threads(), 640);
    let inc = |s: &Stmt| matches!(s, Stmt::Inst(Inst::SetMaxNReg(x)) if x.inc);
    assert!(mutate_nth(&mut m.kernel.body, &inc, &mut 0, &mut |s| {
        let Stmt::Inst(Inst::SetMaxNReg(mut x)) = s else { unreachable!() };
        assert_eq!(x.regs, 112);
        x.regs = 120;
        vec![Stmt::inst(x)]
    }));
    pingpong_caught(&r, &m, "setmaxnreg inc 120");
}

// ------------------------------------------------------------------ thread-block clusters

fn cluster_options(cluster: [u32; 2]) -> CompileOptions {
    CompileOptions { arch: "sm_90a".into(), cluster: Some(cluster), ..Default::default() }
}

/// Clustered kernels (two blocks walking pairs of tiles, the copy they share multicast,
/// each releasing a stage to both) agree with the reference at every thread-level pass,
/// the model running each cluster's blocks together.
#[test]
fn clustered_tma_gemms_agree_with_the_reference() {
    for (name, cluster) in [
        ("matmul_rasterized_col", [2, 1]),
        ("matmul_rasterized_col", [1, 2]),
        ("matmul_deep_k", [1, 2]),
        ("matmul_tt_f16", [2, 1]),
    ] {
        let opts = cluster_options(cluster);
        let check_opts = CheckOptions { seed: 11, compile: opts.clone(), ..Default::default() };
        let stages = wgmma_stages_with(name, &opts);
        let m = final_module(&stages);
        assert_eq!(m.cluster_blocks(), 2, "{name} {cluster:?} is not clustered");
        assert!(
            find(&m.kernel.body, &|s| matches!(s, Stmt::Inst(Inst::TmaLoad(t)) if t.multicast.is_some()))
                .is_some(),
            "{name} {cluster:?}: no multicast"
        );
        assert_thread_stages_agree(name, &stages, &check_opts);
    }
}

/// The reference run and the final clustered module of `name`, which agrees with it.
fn cluster_final(name: &str, cluster: [u32; 2]) -> (Reference, Module) {
    let stages = wgmma_stages_with(name, &cluster_options(cluster));
    let r = passcheck::reference(&stages, 2, Blocks::All).unwrap();
    let m = final_module(&stages);
    assert_eq!(m.cluster_blocks(), 2, "{name} is not clustered");
    passcheck::check(&r, &m, Blocks::All).unwrap_or_else(|e| panic!("{name} before the mutation: {e}"));
    (r, m)
}

fn is_remote_arrive(s: &Stmt) -> bool {
    matches!(s, Stmt::Inst(Inst::MbarrierArrive(a)) if a.cta.is_some())
}

#[test]
fn mutation_cluster_consumers_release_only_their_own_block() {
    // every release goes to the consumer's own block (twice, so the counts still add up):
    // the peer's producer refills its half of the shared tile while this block reads it
    let (r, mut m) = cluster_final("matmul_rasterized_col", [2, 1]);
    let mut changed = 0;
    while mutate_nth(&mut m.kernel.body, &is_remote_arrive, &mut 0, &mut |s| {
        let Stmt::Inst(Inst::MbarrierArrive(mut a)) = s else { unreachable!() };
        a.cta = None;
        vec![Stmt::inst(a)]
    }) {
        changed += 1;
    }
    assert!(changed >= 2, "{changed} remote arrives");
    caught_on(&r, &m, Blocks::All, "");
}

#[test]
fn mutation_cluster_multicast_to_its_own_block_only() {
    // each block's part of the shared tile lands only in itself: the peer waits for bytes
    // that never come
    let (r, mut m) = cluster_final("matmul_rasterized_col", [2, 1]);
    let multicast = |s: &Stmt| matches!(s, Stmt::Inst(Inst::TmaLoad(t)) if t.multicast == Some(3));
    assert!(mutate_nth(&mut m.kernel.body, &multicast, &mut 0, &mut |s| {
        let Stmt::Inst(Inst::TmaLoad(mut t)) = s else { unreachable!() };
        t.multicast = Some(1);
        vec![Stmt::inst(t)]
    }));
    caught_on(&r, &m, Blocks::All, "");
}

#[test]
fn mutation_cluster_exit_without_cluster_sync() {
    // a block may exit while its peer still arrives on its barriers
    let (r, mut m) = cluster_final("matmul_deep_k", [1, 2]);
    let syncs = |s: &Stmt| matches!(s, Stmt::Inst(Inst::ClusterSync(_)));
    assert!(mutate_nth(&mut m.kernel.body, &syncs, &mut 1, &mut |_| vec![]), "no second cluster_sync");
    caught_on(&r, &m, Blocks::All, "a cluster_sync must come before a block exits");
}

#[test]
fn mutation_cluster_init_published_by_a_block_barrier_only() {
    // the barriers' init ordered by __syncthreads: the peer may multicast into, or arrive
    // on, a barrier whose init it cannot see
    let (r, mut m) = cluster_final("matmul_rasterized_col", [2, 1]);
    let first = m.kernel.body.iter().position(|s| matches!(s, Stmt::Inst(Inst::ClusterSync(_)))).unwrap();
    m.kernel.body[first] = Stmt::inst(inst::Sync);
    caught_on(&r, &m, Blocks::All, "cluster_sync");
}

#[test]
fn mutation_cluster_empty_barrier_counts_one_block() {
    // the empty barrier expects the releases of one block's warps only: the producer
    // refills a stage once either block released it
    let (r, mut m) = cluster_final("matmul_rasterized_col", [2, 1]);
    let probe = m.clone();
    let init = move |s: &Stmt| matches!(s, Stmt::Inst(Inst::MbarrierInit(i)) if probe.buffer(i.bar).name == "empty_bar");
    let mut changed = 0;
    while changed < 8
        && mutate_nth(&mut m.kernel.body, &init, &mut changed.clone(), &mut |s| {
            let Stmt::Inst(Inst::MbarrierInit(mut i)) = s else { unreachable!() };
            i.count /= 2;
            vec![Stmt::inst(i)]
        })
    {
        changed += 1;
    }
    assert!(changed >= 2, "{changed} empty barriers");
    caught_on(&r, &m, Blocks::All, "");
}

#[test]
fn mutation_cluster_release_by_every_lane() {
    // the lane predicate dropped: 32 arrivals per warp where the barrier counts one (the
    // extra ones complete later phases early: the ring runs out of step and stalls)
    let (r, mut m) = cluster_final("matmul_rasterized_col", [1, 2]);
    assert!(mutate_nth(&mut m.kernel.body, &is_remote_arrive, &mut 0, &mut |s| {
        let Stmt::Inst(Inst::MbarrierArrive(mut a)) = s else { unreachable!() };
        assert!(a.pred.is_some(), "a release by one lane");
        a.pred = None;
        vec![Stmt::inst(a)]
    }));
    caught_on(&r, &m, Blocks::All, "");
}

/// A kernel working across its own cluster (tests/test_cluster_ops.py's, serialized in
/// tests/programs_sm90), lowered for sm_90a and checked on every block.
fn own_cluster_final(name: &str) -> (Reference, Module) {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs_sm90").join(format!("{name}.json"));
    let text = std::fs::read_to_string(p).unwrap();
    let opts = CompileOptions { arch: "sm_90a".into(), ..Default::default() };
    let stages = compile_stages(&text, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
    let r = passcheck::reference(&stages, 2, Blocks::All).unwrap();
    let m = final_module(&stages);
    assert_eq!(m.cluster_blocks(), 2, "{name} is not clustered");
    passcheck::check(&r, &m, Blocks::All).unwrap_or_else(|e| panic!("{name} before the mutation: {e}"));
    (r, m)
}

/// Send every store into a cluster view (an element store or a vector copy) to block `rank`;
/// how many there were.
fn retarget_remote_stores(m: &mut Module, rank: i64) -> usize {
    let probe = m.clone();
    let remote = move |s: &Stmt| match s {
        Stmt::Store { buf, .. } => probe.buffer(*buf).scope == Scope::Cluster,
        Stmt::Inst(Inst::VecCopy(c)) => probe.buffer(c.dst).scope == Scope::Cluster,
        _ => false,
    };
    let mut changed = 0;
    while mutate_nth(&mut m.kernel.body, &remote, &mut changed.clone(), &mut |s| match s {
        Stmt::Store { buf, mut idx, value, loc } => {
            idx[0] = Expr::int(rank);
            vec![Stmt::Store { buf, idx, value, loc }]
        }
        Stmt::Inst(Inst::VecCopy(mut c)) => {
            c.dst_idx[0] = Expr::int(rank);
            vec![Stmt::inst(c)]
        }
        _ => unreachable!(),
    }) {
        changed += 1;
    }
    changed
}

fn is_cluster_sync(s: &Stmt) -> bool {
    matches!(s, Stmt::Inst(Inst::ClusterSync(_)))
}

#[test]
fn mutation_own_cluster_read_before_the_peers_wrote() {
    // the user's last cluster_sync, between the copy into a block and that block reading
    // it, dropped (the first of the body is tilers' own, at the start; tilers adds none at
    // the end, since no block reaches another past the user's last)
    for name in ["cluster_gather", "cluster_ring"] {
        let (r, mut m) = own_cluster_final(name);
        assert!(!m.kernel.body.last().is_some_and(is_cluster_sync));
        let last_user = m.kernel.body.iter().filter(|s| is_cluster_sync(s)).count() - 1;
        assert!(mutate_nth(&mut m.kernel.body, &is_cluster_sync, &mut last_user.clone(), &mut |_| vec![]));
        // a race across the cluster, or a block exiting while peers may still reach it
        caught_on(&r, &m, Blocks::All, "cluster");
    }
}

fn is_cluster_wait(s: &Stmt) -> bool {
    matches!(s, Stmt::Inst(Inst::ClusterWait(_)))
}

#[test]
fn own_cluster_barrier_is_split_around_what_touches_no_peer() {
    // tilers' arrive is the body's first statement; its wait comes right before the first
    // statement that reaches a peer or a tile peers reach (or a cluster_sync)
    for name in ["cluster_gather", "cluster_ring"] {
        let (_, m) = own_cluster_final(name);
        let body = &m.kernel.body;
        assert!(matches!(body[0], Stmt::Inst(Inst::ClusterArrive(_))), "{name}");
        let wait = body.iter().position(is_cluster_wait).unwrap();
        assert!(wait > 1, "{name}: nothing between the arrive and the wait");
        assert_eq!(body.iter().filter(|s| is_cluster_wait(s)).count(), 1, "{name}");
    }
}

#[test]
fn mutation_own_cluster_wait_dropped() {
    // the arrive never waited for: the next cluster_sync (or a reach) comes first
    for name in ["cluster_gather", "cluster_ring"] {
        let (r, mut m) = own_cluster_final(name);
        assert!(mutate_nth(&mut m.kernel.body, &is_cluster_wait, &mut 0, &mut |_| vec![]));
        caught_on(&r, &m, Blocks::All, "cluster_arrive");
    }
}

#[test]
fn mutation_own_cluster_arrive_dropped() {
    for name in ["cluster_gather", "cluster_ring"] {
        let (r, mut m) = own_cluster_final(name);
        let arrive = |s: &Stmt| matches!(s, Stmt::Inst(Inst::ClusterArrive(_)));
        assert!(mutate_nth(&mut m.kernel.body, &arrive, &mut 0, &mut |_| vec![]));
        caught_on(&r, &m, Blocks::All, "cluster_wait without a cluster_arrive");
    }
}

#[test]
fn mutation_own_cluster_wait_after_the_first_reach() {
    // the wait moved one statement later: past the stores into a peer that may not have
    // started (gather), past the user's cluster_sync (ring: a second arrive)
    for (name, expect) in [
        ("cluster_gather", "between its cluster_arrive and cluster_wait"),
        ("cluster_ring", "reaches cluster_sync after a cluster_arrive it has not waited for"),
    ] {
        let (r, mut m) = own_cluster_final(name);
        let body = &mut m.kernel.body;
        let wait = body.iter().position(is_cluster_wait).unwrap();
        body.swap(wait, wait + 1);
        caught_on(&r, &m, Blocks::All, expect);
    }
}

#[test]
fn mutation_own_cluster_copy_into_the_wrong_block() {
    // every block's row lands in block 1 instead of block 0, which reads what nobody wrote
    let (r, mut m) = own_cluster_final("cluster_gather");
    assert!(retarget_remote_stores(&mut m, 1) > 0);
    caught_on(&r, &m, Blocks::All, "");
}

#[test]
fn mutation_own_cluster_view_out_of_the_cluster() {
    // a rank past the cluster's blocks
    let (r, mut m) = own_cluster_final("cluster_ring");
    assert!(retarget_remote_stores(&mut m, 2) > 0);
    caught_on(&r, &m, Blocks::All, "");
}

#[test]
fn user_split_cluster_barrier_orders_what_came_before_the_arrive() {
    // tests/test_cluster_ops.py's split_barrier_gather: the user's cluster_arrive after the
    // stores into block 0, work on a tile no peer reaches, cluster_wait, block 0 reads;
    // tilers' own pair opens the body and no cluster_sync closes it
    let (_, m) = own_cluster_final("cluster_split");
    let body = &m.kernel.body;
    let arrive = |s: &Stmt| matches!(s, Stmt::Inst(Inst::ClusterArrive(_)));
    assert_eq!(body.iter().filter(|s| arrive(s)).count(), 2);
    assert_eq!(body.iter().filter(|s| is_cluster_wait(s)).count(), 2);
    assert!(!body.iter().any(is_cluster_sync));
}

#[test]
fn mutation_user_split_cluster_barrier_block_sync_dropped() {
    // the block's last __syncthreads, between the writes of a tile made after the user's
    // cluster_arrive and its reads by other threads after the cluster_wait, dropped: the
    // cluster barrier's phase does not order writes made after arriving at it
    let (r, mut m) = own_cluster_final("cluster_split");
    let last = m.kernel.body.iter().filter(|s| is_sync(s)).count() - 1;
    assert!(mutate_nth(&mut m.kernel.body, &is_sync, &mut last.clone(), &mut |_| vec![]));
    caught_on(&r, &m, Blocks::All, "race");
}

#[test]
fn mutation_user_split_cluster_arrive_before_the_reach() {
    // the user's cluster_arrive moved before the stores into block 0 (a reach between
    // arriving and waiting)
    let (r, mut m) = own_cluster_final("cluster_split");
    let body = &mut m.kernel.body;
    let arrive = |s: &Stmt| matches!(s, Stmt::Inst(Inst::ClusterArrive(_)));
    let second = body.iter().enumerate().filter(|(_, s)| arrive(s)).nth(1).unwrap().0;
    body.swap(second - 1, second);
    caught_on(&r, &m, Blocks::All, "between its cluster_arrive and cluster_wait");
}
