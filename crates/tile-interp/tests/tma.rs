//! The warp model's mbarriers, TMA loads, named barriers, `setmaxnreg` and warp roles, on
//! warp-specialized producer/consumer rings written by hand in text IR: a producer thread
//! waits for a stage to be empty, arrives on its full barrier with the bytes to come and
//! issues the TMA copies; the consumers wait for it to be full, read it (ordinary loads, or
//! wgmma) and arrive on its empty barrier. Checked: the results for 0, 1, 2 and S + 1 trips
//! (boxes past the tensor's edges read as zero, before it too), a 128-byte-swizzled
//! destination in wgmma's panel layout read back through `SharedLayout::offset`, a wgmma
//! consumer, consumers and producer sharing a warpgroup; and each misuse the model must
//! report: wrong transaction bytes, a flipped parity, a stage released before it is read,
//! a producer that does not wait for the ring, a wait nobody ends, bad register budgets,
//! barriers used wrong, TMA boxes and destinations the hardware refuses.

use tile_interp::threads::run;
use tile_interp::{f16_bits_to_f32, f32_to_f16_bits, Arg};
use tile_ir::{DType, SharedLayout};

fn parse(text: &str) -> tile_ir::Module {
    tile_ir::text::parse_text(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// `text` with `from` (which occurs exactly once) replaced by `to`.
fn mutate(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "'{from}' in\n{text}");
    text.replacen(from, to, 1)
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|&x| f32_to_f16_bits(x).to_le_bytes()).collect()
}
fn bytes_f16(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2).map(|c| f16_bits_to_f32(u16::from_le_bytes([c[0], c[1]]))).collect()
}
fn tensor(a: &Arg) -> &[u8] {
    match a {
        Arg::Tensor(b) => b,
        other => panic!("not a tensor: {other:?}"),
    }
}

/// Distinct values, exact in float16: `(i % 1999) / 4 - 250`, never 0.
fn value(i: usize) -> f32 {
    let v = (i % 1999) as f32 / 4.0 - 249.75;
    if v == 0.0 {
        1000.0
    } else {
        v
    }
}

// ------------------------------------------------------------------------ the plain ring

/// The ring of `ring_text`: `stages` stages of an 8 × 32 float32 box; trip `k` copies rows
/// `8 k - back ..+ 8` of X (`rows` rows) to rows `8 k ..+ 8` of O; `consumers` threads
/// (256: two warpgroups, with `setmaxnreg`; 32: one warp sharing warpgroup 0 with the
/// producers), then a producer warpgroup whose first thread issues the copies.
#[derive(Clone, Copy)]
struct Ring {
    stages: i64,
    trips: i64,
    rows: i64,
    back: i64,
    consumers: i64,
}

const RING: Ring = Ring { stages: 2, trips: 3, rows: 21, back: 3, consumers: 256 };

fn ring_text(r: Ring) -> String {
    let Ring { stages: s, trips: n, back, consumers: t, .. } = r;
    let out_rows = 8 * n.max(1);
    let full = s * 1024;
    let empty = full + 8 * s;
    let pad = (empty + 8 * s + 1023) / 1024 * 1024;
    let per_thread = 256 / t;
    let (inc, dec) =
        if t % 128 == 0 { ("    setmaxnreg inc 232\n", "    setmaxnreg dec 40\n") } else { ("", "") };
    format!(
        r#"kernel ring(X: float32[%M, 32], O: float32[{out_rows}, 32]) blocks(%bx) grid(1) threads={t} producers=128 producer_regs=40 consumer_regs=232 level=thread {{
  vars %tid: thread_idx
  tensor_map X box [8, 32] swizzle 0
  shared A_s: float32[{s}, 8, 32] at smem+0
  shared full: int64[{s}] at smem+{full}
  shared empty: int64[{s}] at smem+{empty}
  // a tile in wgmma's layout, as a GEMM has: the shared base is aligned to 1024 bytes
  shared W_s: float16[8, 64] at smem+{pad} panels<64> swizzle<3,4,3>
  if eq(%tid, 0) {{
    for %s in 0..+{s} {{
      mbarrier_init full[%s], 1
      mbarrier_init empty[%s], {t}
    }}
    fence_mbarrier_init
  }}
  sync
  if lt(%tid, {t}) {{
{inc}    for %k in 0..+{n} {{
      mbarrier_wait full[floormod(%k, {s})] parity floormod(floordiv(%k, {s}), 2)
      for %j in 0..+{per_thread} {{
        let %e = add(%tid, mul(%j, {t}))
        O[add(mul(%k, 8), floordiv(%e, 32)), floormod(%e, 32)] = A_s[floormod(%k, {s}), floordiv(%e, 32), floormod(%e, 32)]
      }}
      mbarrier_arrive empty[floormod(%k, {s})]
    }}
  }} else {{
{dec}    if eq(%tid, {t}) {{
      for %k in 0..+{n} {{
        mbarrier_wait empty[floormod(%k, {s})] parity bitxor(floormod(floordiv(%k, {s}), 2), 1)
        mbarrier_arrive full[floormod(%k, {s})] expect_tx 1024
        tma_load map0 A_s[floormod(%k, {s}), 0, 0] <- X[sub(mul(%k, 8), {back}), 0] on full[floormod(%k, {s})] (1024 bytes)
      }}
    }}
  }}
}}
"#
    )
}

/// X (`rows` × 32), O (filled with -1), the size M.
fn ring_args(r: Ring) -> Vec<Arg> {
    let x: Vec<f32> = (0..(r.rows * 32) as usize).map(value).collect();
    let o = vec![-1.0f32; (8 * r.trips.max(1) * 32) as usize];
    vec![Arg::Tensor(f32_bytes(&x)), Arg::Tensor(f32_bytes(&o)), Arg::Int(r.rows)]
}

fn run_text(text: &str, args: &mut [Arg]) -> Result<(), String> {
    run(&parse(text), args).map_err(|e| e.message)
}

fn error_of(text: &str, r: Ring) -> String {
    let mut args = ring_args(r);
    run_text(text, &mut args).map(|_| panic!("the misuse went unreported:\n{text}")).unwrap_err()
}

fn check_ring(r: Ring) {
    let text = ring_text(r);
    let mut args = ring_args(r);
    run_text(&text, &mut args).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let o = bytes_f32(tensor(&args[1]));
    for (i, &got) in o.iter().enumerate() {
        let (row, col) = ((i / 32) as i64, i % 32);
        let src = row - r.back;
        let want = if row >= 8 * r.trips {
            -1.0
        } else if (0..r.rows).contains(&src) {
            value(src as usize * 32 + col)
        } else {
            0.0
        };
        assert_eq!(got, want, "O[{row}, {col}] with {} trips", r.trips);
    }
}

#[test]
fn a_ring_copies_every_trip_count() {
    for trips in [0, 1, 2, 3] {
        // the first box starts 3 rows before X, the last runs past its end
        check_ring(Ring { trips, rows: (8 * trips - 5).max(1), ..RING });
    }
    check_ring(Ring { stages: 3, trips: 7, rows: 50, back: 0, ..RING });
}

#[test]
fn consumers_and_producers_can_share_a_warpgroup() {
    // one consumer warp: warpgroup 0 holds it and 96 producer threads, whose roles must
    // run on their own (the consumer waits for the producer thread 32)
    for trips in [1, 3] {
        check_ring(Ring { consumers: 32, trips, ..RING });
    }
}

#[test]
fn too_many_transaction_bytes_are_a_deadlock_naming_the_barrier() {
    let text = mutate(&ring_text(RING), "expect_tx 1024", "expect_tx 2048");
    let e = error_of(&text, RING);
    assert!(e.contains("deadlock: no thread can go on"), "{e}");
    assert!(
        e.contains("threads 0..127 (warpgroup 0) wait on full[0] for parity 0 (it is in phase 0, parity 0: 0 of 1 arrivals and 1024 transaction bytes pending)"),
        "{e}"
    );
    assert!(e.contains("threads 128..255 (warpgroup 1) wait on full[0]"), "{e}");
}

#[test]
fn too_few_transaction_bytes_are_a_transaction_count_error() {
    let text = mutate(&ring_text(RING), "expect_tx 1024", "expect_tx 512");
    let e = error_of(&text, RING);
    assert!(e.contains("transaction count of full[0] below zero"), "{e}");
}

#[test]
fn a_flipped_parity_on_the_full_wait_is_reported() {
    let flip = |r: Ring| {
        let wait = format!("parity floormod(floordiv(%k, 2), 2)\n      for %j in 0..+{}", 256 / r.consumers);
        let flipped = format!(
            "parity bitxor(floormod(floordiv(%k, 2), 2), 1)\n      for %j in 0..+{}",
            256 / r.consumers
        );
        error_of(&mutate(&ring_text(r), &wait, &flipped), r)
    };
    // the producer filled the ring first: the consumers wait for a phase that needs them
    let e = flip(RING);
    assert!(e.contains("deadlock: no thread can go on"), "{e}");
    assert!(
        e.contains("threads 0..127 (warpgroup 0) wait on full[0] for parity 1 (it is in phase 1, parity 1"),
        "{e}"
    );
    assert!(e.contains("thread 256 (warpgroup 2) wait on empty[0] for parity 0"), "{e}");
    // the consumer warp runs first: its wait returns at once, before the copy is issued
    let e = flip(Ring { consumers: 32, ..RING });
    assert!(e.contains("thread 0 reads bytes of A_s (shared byte 0) before any TMA copy wrote them"), "{e}");
}

#[test]
fn a_stage_released_before_it_is_read_is_reported() {
    // the arrive on `empty` moved before the copy out of the stage
    let ring = ring_text(RING);
    let arrive = "      mbarrier_arrive empty[floormod(%k, 2)]\n";
    let text = mutate(&mutate(&ring, arrive, ""), "      for %j", &format!("{arrive}      for %j"));
    let e = error_of(&text, RING);
    assert!(
        e.contains("reads bytes of A_s that a TMA copy on full[0] wrote, without waiting for that phase"),
        "{e}"
    );
}

#[test]
fn a_producer_that_skips_its_empty_wait_is_reported() {
    let ring = ring_text(RING);
    let text = mutate(
        &ring,
        "        mbarrier_wait empty[floormod(%k, 2)] parity bitxor(floormod(floordiv(%k, 2), 2), 1)\n",
        "",
    );
    // it refills stage 0 before the consumers read it: the phase they wait for is gone
    let e = error_of(&text, RING);
    assert!(e.contains("deadlock"), "{e}");
    assert!(e.contains("wait on full[0] for parity 0 (it is in phase 2"), "{e}");
}

#[test]
fn a_wait_nobody_ends_is_a_deadlock_naming_the_waiting_threads() {
    let ring = ring_text(RING);
    let text = mutate(&ring, "  shared W_s", "  shared never: int64[1] at smem+2080\n  shared W_s");
    let text =
        mutate(&text, "    fence_mbarrier_init", "    mbarrier_init never[0], 1\n    fence_mbarrier_init");
    let text = mutate(
        &text,
        "    for %k in 0..+3 {\n      mbarrier_wait full",
        "    mbarrier_wait never[0] parity 0\n    for %k in 0..+3 {\n      mbarrier_wait full",
    );
    let e = error_of(&text, RING);
    assert!(e.contains("deadlock: no thread can go on"), "{e}");
    for who in ["threads 0..127 (warpgroup 0)", "threads 128..255 (warpgroup 1)"] {
        assert!(
            e.contains(&format!("{who} wait on never[0] for parity 0 (it is in phase 0, parity 0: 1 of 1 arrivals and 0 transaction bytes pending)")),
            "{e}"
        );
    }
    // the producer filled the ring and waits for a stage
    assert!(e.contains("thread 256 (warpgroup 2) wait on empty[0] for parity 0"), "{e}");
}

#[test]
fn bad_register_budgets_are_reported() {
    let ring = ring_text(RING);
    let cases = [
        ("setmaxnreg inc 232", "setmaxnreg inc 236", "setmaxnreg inc 236: the count must be a multiple of 8 in [24, 256]"),
        ("setmaxnreg dec 40", "setmaxnreg dec 16", "setmaxnreg dec 16: the count must be a multiple of 8"),
        // 384 threads start at 168 registers each
        ("setmaxnreg inc 232", "setmaxnreg inc 160", "whose budget is 168 registers per thread (inc may not lower it)"),
        ("setmaxnreg dec 40", "setmaxnreg dec 200", "by warpgroup 2, whose budget is 168 registers per thread (dec may not raise it)"),
        // 2 x 128 x 240 + 128 x 40 > 384 x 168 = 64512 (what the block was launched with:
        // setmaxnreg only moves those): the second consumer warpgroup never gets its registers
        (
            "setmaxnreg inc 232",
            "setmaxnreg inc 240",
            "wait in setmaxnreg inc 240: it needs 30720 registers and the other warpgroups hold 35840 of the 64512 the block was launched with",
        ),
    ];
    for (from, to, want) in cases {
        let e = error_of(&mutate(&ring, from, to), RING);
        assert!(e.contains(want), "{to}: {e}");
    }
    // only the producer thread runs it: not the whole warpgroup
    let text = mutate(&ring, "    setmaxnreg dec 40\n", "");
    let text = mutate(
        &text,
        "      for %k in 0..+3 {\n        mbarrier_wait empty",
        "      setmaxnreg dec 40\n      for %k in 0..+3 {\n        mbarrier_wait empty",
    );
    let e = error_of(&text, RING);
    assert!(
        e.contains("setmaxnreg dec 40 run by 1 threads of warpgroup 2 (it needs all 128 of its threads)"),
        "{e}"
    );
}

#[test]
fn mbarriers_used_wrong_are_reported() {
    let ring = ring_text(RING);
    let cases = [
        (
            "      mbarrier_init empty[%s], 256\n",
            "",
            "mbarrier_wait by thread 256 on empty[0], which no mbarrier_init initialized",
        ),
        (
            "      mbarrier_init empty[%s], 256\n",
            "      mbarrier_init empty[%s], 256\n      mbarrier_init empty[0], 256\n",
            "mbarrier_init by thread 0 on empty[0], which thread 0 already initialized",
        ),
        (
            "    fence_mbarrier_init\n",
            "",
            "whose mbarrier_init (by thread 0) no fence_mbarrier_init followed",
        ),
        ("  sync\n", "", "on empty[0], which thread 0 initialized with no barrier since"),
        // 256 consumers arrive on a barrier expecting 128: the phase completes halfway
        (
            "mbarrier_init full[%s], 1",
            "mbarrier_init full[%s], 2",
            "wait on full[0] for parity 0 (it is in phase 0, parity 0: 1 of 2 arrivals",
        ),
        (
            "O[add(mul(%k, 8)",
            "full[0] = 0\n        O[add(mul(%k, 8)",
            "writes shared byte 2048, part of the mbarrier full[0]",
        ),
    ];
    for (from, to, want) in cases {
        let e = error_of(&mutate(&ring, from, to), RING);
        assert!(e.contains(want), "{to}: {e}");
    }
}

#[test]
fn tma_boxes_and_destinations_the_hardware_refuses_are_reported() {
    let ring = ring_text(RING);
    let cases = [
        ("(1024 bytes)", "(1000 bytes)", "says 1000 bytes, the box [8, 32] of float32 holds 1024"),
        // no tile in wgmma's layout: the shared base is only 16-byte aligned
        ("  shared W_s: float16[8, 64] at smem+3072 panels<64> swizzle<3,4,3>\n", "", "the destination's shared address 16 (byte 0 of the block's shared memory, on a base aligned to 16) is not 128-byte aligned"),
        // half a stage further: the second stage's box runs past A_s
        ("A_s[floormod(%k, 2), 0, 0] <-", "A_s[floormod(%k, 2), 4, 0] <-", "lands at shared byte 2048, outside 'A_s' (bytes 0..2048)"),
        ("tensor_map X box [8, 32] swizzle 0", "tensor_map X box [8, 32] swizzle 64", "the box's rows are 128 bytes (a multiple of 16, at most the 64-byte swizzle span)"),
        ("on full[floormod(%k, 2)] (1024", "on empty[floormod(%k, 2)] (1024", "transaction count of empty[0] below zero"),
    ];
    for (from, to, want) in cases {
        let e = error_of(&mutate(&ring, from, to), RING);
        assert!(e.contains(want), "{to}: {e}");
    }
}

// ------------------------------------------------------------------------ named barriers

/// Consumers write their thread index to a shared word, meet at `bar_sync 1, 256` (the
/// producers do not take part) and read their neighbour's.
fn exchange_text(barrier: &str) -> String {
    format!(
        r#"kernel exchange(O: int32[256]) blocks(%bx) grid(1) threads=256 producers=128 producer_regs=40 consumer_regs=232 level=thread {{
  vars %tid: thread_idx
  shared S: int32[256] at smem+0
  if lt(%tid, 256) {{
    S[%tid] = %tid
{barrier}    O[%tid] = S[floormod(add(%tid, 1), 256)]
  }} else {{
    if eq(%tid, 256) {{
      S[0] = 7
    }}
  }}
}}
"#
    )
}

#[test]
fn named_barriers_order_the_threads_that_meet_at_them() {
    let text = mutate(&exchange_text("    bar_sync 1, 256\n"), "      S[0] = 7\n", "");
    let mut args = vec![Arg::Tensor(vec![0; 1024])];
    run_text(&text, &mut args).unwrap();
    let o: Vec<i32> =
        tensor(&args[0]).chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(o, (0..256).map(|t| (t + 1) % 256).collect::<Vec<_>>());
    // without it: a race
    let text = mutate(&exchange_text(""), "      S[0] = 7\n", "");
    let e = run_text(&text, &mut [Arg::Tensor(vec![0; 1024])]).unwrap_err();
    assert!(e.contains("shared-memory race (read after write)"), "{e}");
    // a producer's write the barrier does not order: its race with consumer 0's is seen
    let e = run_text(&exchange_text("    bar_sync 1, 256\n"), &mut [Arg::Tensor(vec![0; 1024])]).unwrap_err();
    assert!(e.contains("shared-memory race"), "{e}");
}

#[test]
fn named_barriers_used_wrong_are_reported() {
    let run_err = |barrier: &str| {
        let text = mutate(&exchange_text(barrier), "      S[0] = 7\n", "");
        run_text(&text, &mut [Arg::Tensor(vec![0; 1024])]).unwrap_err()
    };
    let e = run_err("    bar_sync 1, 128\n");
    assert!(
        e.contains("threads 0..255 (warpgroups 0, 1) reach bar_sync 1, 128: more threads than its count"),
        "{e}"
    );
    let e = run_err(
        "    if lt(%tid, 128) {\n      bar_sync 1, 256\n    } else {\n      bar_sync 1, 384\n    }\n",
    );
    assert!(e.contains("reach bar_sync 1, 384 while other threads wait at bar_sync 1, 256"), "{e}");
    let e = run_err("    bar_sync 1, 100\n");
    assert!(e.contains("bar_sync 1, 100: the count must be a non-zero multiple of 32"), "{e}");
    let e = run_err("    bar_sync 1, 384\n");
    assert!(e.contains("deadlock: no thread can go on"), "{e}");
    assert!(
        e.contains("threads 0..127 (warpgroup 0) wait at bar_sync 1, 384 (256 of 384 threads arrived)"),
        "{e}"
    );
    assert!(e.contains("threads 256..383 (warpgroup 2) finished the kernel"), "{e}");
    // `sync` after the role split: the producers finished, they never arrive
    let e = run_err("    sync\n");
    assert!(e.contains("deadlock: barrier reached by threads 0-255 of 384 (the others never arrive)"), "{e}");
    assert!(e.contains("threads 256..383 (warpgroup 2) finished the kernel"), "{e}");
}

// ------------------------------------------------------------------------ a swizzled destination

/// Two 16 × 64 float16 boxes, 128-byte swizzled, fill a 16 × 128 stage of wgmma's panel
/// layout (two panels of 64 columns); X has 120 columns, so the second box runs past its
/// right edge. Consumers read the stage back through the layout's offsets.
fn swizzled_text(stages: i64, trips: i64) -> String {
    let out_rows = 16 * trips.max(1);
    let full = stages * 4096;
    let empty = full + 8 * stages;
    format!(
        r#"kernel swizzled(X: float16[%M, 120], O: float16[{out_rows}, 128]) blocks(%bx) grid(1) threads=256 producers=128 producer_regs=40 consumer_regs=232 level=thread {{
  vars %tid: thread_idx
  tensor_map X box [16, 64] swizzle 128
  shared A_s: float16[{stages}, 16, 128] at smem+0 panels<64> swizzle<3,4,3>
  shared full: int64[{stages}] at smem+{full}
  shared empty: int64[{stages}] at smem+{empty}
  if eq(%tid, 0) {{
    for %s in 0..+{stages} {{
      mbarrier_init full[%s], 1
      mbarrier_init empty[%s], 256
    }}
    fence_mbarrier_init
  }}
  sync
  if lt(%tid, 256) {{
    setmaxnreg inc 232
    for %k in 0..+{trips} {{
      mbarrier_wait full[floormod(%k, {stages})] parity floormod(floordiv(%k, {stages}), 2)
      for %j in 0..+8 {{
        let %e = add(%tid, mul(%j, 256))
        O[add(mul(%k, 16), floordiv(%e, 128)), floormod(%e, 128)] = A_s[floormod(%k, {stages}), floordiv(%e, 128), floormod(%e, 128)]
      }}
      mbarrier_arrive empty[floormod(%k, {stages})]
    }}
  }} else {{
    setmaxnreg dec 40
    if eq(%tid, 256) {{
      for %k in 0..+{trips} {{
        mbarrier_wait empty[floormod(%k, {stages})] parity bitxor(floormod(floordiv(%k, {stages}), 2), 1)
        mbarrier_arrive full[floormod(%k, {stages})] expect_tx 4096
        tma_load map0 A_s[floormod(%k, {stages}), 0, 0] <- X[mul(%k, 16), 0] on full[floormod(%k, {stages})] (2048 bytes)
        tma_load map0 A_s[floormod(%k, {stages}), 0, 64] <- X[mul(%k, 16), 64] on full[floormod(%k, {stages})] (2048 bytes)
      }}
    }}
  }}
}}
"#
    )
}

fn swizzled_args(rows: i64, trips: i64) -> Vec<Arg> {
    let x: Vec<f32> = (0..(rows * 120) as usize).map(value).collect();
    let o = vec![-1.0f32; (16 * trips.max(1) * 128) as usize];
    vec![Arg::Tensor(f16_bytes(&x)), Arg::Tensor(f16_bytes(&o)), Arg::Int(rows)]
}

#[test]
fn a_swizzled_destination_reads_back_through_the_panel_layout() {
    // the stage is laid out as wgmma's canonical layout would lay it out
    let text = swizzled_text(2, 1);
    let m = parse(&text);
    let a_s = m.buffers.iter().find(|b| b.name == "A_s").unwrap();
    let l = SharedLayout::wgmma(&[2, 16, 128], DType::F16).unwrap();
    assert_eq!((a_s.panel, a_s.swizzle), (l.panel, l.swizzle));
    for (stages, trips) in [(2, 0), (2, 1), (2, 2), (2, 3), (3, 5)] {
        let rows = (16 * trips - 5).max(1);
        let text = swizzled_text(stages, trips);
        let mut args = swizzled_args(rows, trips);
        run_text(&text, &mut args).unwrap_or_else(|e| panic!("{e}"));
        let o = bytes_f16(tensor(&args[1]));
        for (i, &got) in o.iter().enumerate() {
            let (row, col) = ((i / 128) as i64, i % 128);
            let want = if row >= 16 * trips {
                -1.0
            } else if row < rows && col < 120 {
                value(row as usize * 120 + col)
            } else {
                0.0
            };
            assert_eq!(got, want, "O[{row}, {col}], {stages} stages, {trips} trips");
        }
    }
    // the same boxes unswizzled land elsewhere: the layout's reads see other values
    let text = swizzled_text(2, 1).replace("swizzle 128", "swizzle 0");
    let mut args = swizzled_args(11, 1);
    run_text(&text, &mut args).unwrap();
    let o = bytes_f16(tensor(&args[1]));
    assert_ne!(o[128 + 8], value(120 + 8), "row 1, column 8 read back unswizzled");
    // a destination off the swizzle period
    let text = mutate(&swizzled_text(2, 1), "A_s[floormod(%k, 2), 0, 64]", "A_s[floormod(%k, 2), 1, 64]");
    let e = run_text(&text, &mut swizzled_args(11, 1)).unwrap_err();
    assert!(e.contains("is not 1024-byte aligned"), "{e}");
}

// ------------------------------------------------------------------------ a wgmma consumer

/// `C (64 × 64) = A (64 × K) · Bᵀ` (B stored 64 × K, K-major), K in 64-wide stages that a
/// producer loads by TMA (A and B boxes of 64 × 64, 128-byte swizzled, one full barrier);
/// one consumer warpgroup runs 4 wgmmas per stage, keeps one group in flight
/// (`wgmma_wait 1`) and releases the stage before it.
fn gemm_text(stages: i64, trips: i64) -> String {
    let b_at = stages * 8192;
    let full = 2 * stages * 8192;
    let empty = full + 8 * stages;
    format!(
        r#"kernel gemm(A: float16[64, %K], B: float16[64, %K], C: float32[64, 64]) blocks(%bx) grid(1) threads=128 producers=128 producer_regs=40 consumer_regs=232 level=thread {{
  vars %tid: thread_idx
  tensor_map A box [64, 64] swizzle 128
  tensor_map B box [64, 64] swizzle 128
  shared A_s: float16[{stages}, 64, 64] at smem+0 panels<64> swizzle<3,4,3>
  shared B_s: float16[{stages}, 64, 64] at smem+{b_at} panels<64> swizzle<3,4,3>
  shared full: int64[{stages}] at smem+{full}
  shared empty: int64[{stages}] at smem+{empty}
  local acc: float32[32]
  if eq(%tid, 0) {{
    for %s in 0..+{stages} {{
      mbarrier_init full[%s], 1
      mbarrier_init empty[%s], 128
    }}
    fence_mbarrier_init
  }}
  sync
  if lt(%tid, 128) {{
    setmaxnreg inc 256
    for %i in 0..+32 {{
      acc[%i] = 0.0:float32
    }}
    for %k in 0..+{trips} {{
      mbarrier_wait full[floormod(%k, {stages})] parity floormod(floordiv(%k, {stages}), 2)
      wgmma_fence
      for %kk in 0..+4 {{
        wgmma.m64nNk16.f32.f16.f16 n=64 acc[0..] += A_s[floormod(%k, {stages}), 0, mul(%kk, 16)] k_major * B_s[floormod(%k, {stages}), 0, mul(%kk, 16)] k_major scale_d=1
      }}
      wgmma_commit
      wgmma_wait 1 [acc]
      if gt(%k, 0) {{
        mbarrier_arrive empty[floormod(sub(%k, 1), {stages})]
      }}
    }}
    wgmma_wait 0 [acc]
    for %i in 0..+32 {{
      C[add(add(mul(floordiv(%tid, 32), 16), floordiv(floormod(%tid, 32), 4)), mul(bitand(shr(%i, 1), 1), 8)), add(add(mul(shr(%i, 2), 8), mul(floormod(%tid, 4), 2)), bitand(%i, 1))] = acc[%i]
    }}
  }} else {{
    setmaxnreg dec 40
    if eq(%tid, 128) {{
      for %k in 0..+{trips} {{
        mbarrier_wait empty[floormod(%k, {stages})] parity bitxor(floormod(floordiv(%k, {stages}), 2), 1)
        mbarrier_arrive full[floormod(%k, {stages})] expect_tx 16384
        tma_load map0 A_s[floormod(%k, {stages}), 0, 0] <- A[0, mul(%k, 64)] on full[floormod(%k, {stages})] (8192 bytes)
        tma_load map1 B_s[floormod(%k, {stages}), 0, 0] <- B[0, mul(%k, 64)] on full[floormod(%k, {stages})] (8192 bytes)
      }}
    }}
  }}
}}
"#
    )
}

/// Small multiples of 1/4: every product and sum is exact in fp32.
fn quarters(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 7 + seed) % 9) as f32 - 4.0) / 4.0).collect()
}

fn gemm_args(k: i64) -> (Vec<Arg>, Vec<f32>, Vec<f32>) {
    let (a, b) = (quarters(64 * k as usize, 1), quarters(64 * k as usize, 5));
    let args = vec![
        Arg::Tensor(f16_bytes(&a)),
        Arg::Tensor(f16_bytes(&b)),
        Arg::Tensor(vec![0xFF; 64 * 64 * 4]),
        Arg::Int(k),
    ];
    (args, a, b)
}

#[test]
fn a_wgmma_consumer_computes_the_product() {
    for (stages, trips) in [(2, 0), (2, 1), (2, 2), (2, 3), (3, 4)] {
        // the last stage runs 8 columns past K: zeros on both sides
        let k = (64 * trips - 8).max(0);
        let (mut args, a, b) = gemm_args(k);
        run_text(&gemm_text(stages, trips), &mut args)
            .unwrap_or_else(|e| panic!("{stages} stages, {trips} trips: {e}"));
        let c = bytes_f32(tensor(&args[2]));
        let k = k as usize;
        for i in 0..64 {
            for j in 0..64 {
                let want: f32 = (0..k).map(|kk| a[i * k + kk] * b[j * k + kk]).sum();
                assert_eq!(c[i * 64 + j], want, "C[{i}, {j}], {stages} stages, {trips} trips");
            }
        }
    }
}

#[test]
fn a_wgmma_consumer_that_releases_a_stage_too_early_is_reported() {
    // the stage released right after the commit, while its wgmmas may still read it
    let text = mutate(
        &gemm_text(2, 3),
        "      wgmma_commit\n",
        "      wgmma_commit\n      mbarrier_arrive empty[floormod(%k, 2)]\n",
    );
    let text = mutate(
        &text,
        "      if gt(%k, 0) {\n        mbarrier_arrive empty[floormod(sub(%k, 1), 2)]\n      }\n",
        "",
    );
    let (mut args, _, _) = gemm_args(184);
    let e = run_text(&text, &mut args).unwrap_err();
    assert!(e.contains("a TMA copy by thread 128 writes shared byte"), "{e}");
    assert!(e.contains("while a wgmma that reads it is pending"), "{e}");
    // no wait at all: the producer went first, the wgmma reads a phase it did not wait for
    let text = mutate(
        &gemm_text(2, 3),
        "      mbarrier_wait full[floormod(%k, 2)] parity floormod(floordiv(%k, 2), 2)\n",
        "",
    );
    let (mut args, _, _) = gemm_args(184);
    let e = run_text(&text, &mut args).unwrap_err();
    assert!(e.contains("a wgmma of warpgroup 0 reads bytes of B_s that a TMA copy on full[0] wrote, without waiting for that phase"), "{e}");
}
