//! Thread-level execution: runs a lowered module (the output of `lower_tile_ops`) on the
//! CPU with a model of a block's threads, so CI can check the lowering without a GPU.
//!
//! **Model.** Blocks run one after another (`bx` fastest), each with the kernel's
//! launched threads (`Module::launched_threads`: the user's and a warp-specialized
//! kernel's producer warps). In a block, each warpgroup (128 consecutive threads; the rest
//! of the block when it is smaller) runs on its own until it reaches a barrier, a wait it
//! cannot pass or a yield point (`async_wait`, `wgmma_wait`, a plain `mbarrier_arrive`), then the
//! next takes its turn, round-robin, the first of each barrier interval rotating
//! (`schedule.rs`): warpgroups interleave in a fixed order, and an ordering bug between
//! them (on global memory, where no race is tracked) shows in the results. Inside a
//! warpgroup the threads run *in lockstep, a statement at a time*: every active thread
//! finishes a statement before any starts the next. Control flow in lowered code is
//! uniform except `if`s on thread coordinates, which split the active threads (`then`
//! first, then `else`) — or, when the `if` holds a barrier, an mbarrier wait or arrive, a
//! TMA load or `setmaxnreg` and both sides have threads, make each side a unit scheduled on
//! its own (roles that share a warpgroup must be able to wait for each other). Each
//! expression is evaluated as a column, one value per active thread, with the scalar
//! semantics of the tile-level interpreter (`num.rs`), which mirror the generated CUDA.
//! `select`, `and` and `or` evaluate only the operands C would, so guarded loads are only
//! made by the threads whose guard holds.
//!
//! **Memory** is bytes, as on the GPU: global tensors are the arguments' bytes; shared
//! buffers live at their planned `shared_offset` in one array of the block's shared
//! memory, at the offsets of their layout (`SharedLayout::offset`, as the generated code),
//! the array starting at a physical address aligned to `Module::shared_base_align` (as the
//! generated code rounds its dynamic shared base); `local` buffers (register arrays,
//! fragments included) are per thread. Shared and local memory start filled with 0xFF (NaN
//! as floats) so reads of never-written bytes show in the results.
//!
//! **Warp-collective operations** (`shfl_xor`, `ldmatrix`, `stmatrix`, `mma.sync`) need all
//! 32 lanes of the warp active; they are evaluated over whole warps with the PTX fragment
//! layouts. **`wgmma`** and its fence, commit and wait need all 128 threads of the warpgroup
//! (`wgmma.rs`): the model builds each shared operand's matrix descriptor as codegen does
//! and decodes it as the hardware does (start, strides, swizzle mode → the physical address
//! of every element, the mode's XOR on that address), so a wrong field reads wrong bytes;
//! D = A · B (+ D) is computed at issue with the PTX accumulator and A-fragment layouts, and
//! lands in the registers at the `wgmma_wait` that retires its commit group.
//!
//! **Barriers and races.** A `sync` completes when every launched thread of the block has
//! reached one (not necessarily the same `sync`, as `bar.sync 0`: warpgroups in different
//! branches meet at their own); threads that finished the kernel do not arrive, so a `sync`
//! after the producers are done is a deadlock (the compiler never puts one after the role
//! split). A named barrier `bar_sync id, n` completes when `n` threads (whole warps) have
//! reached barrier `id` (two counts on one id are an error); `bar_arrive id, n` counts its
//! threads towards that barrier without waiting (a ping-pong slot handing over), arrivals
//! left when the block ends or past the count being errors. When no unit can run and no
//! barrier can complete, the run stops with a deadlock report naming what each waiting unit
//! waits for. Between barriers, a shared-memory byte written by one thread and read or
//! written by another is a race (reported), as is any access to bytes with a `cp.async` in
//! flight; a completed named barrier starts a new barrier interval like a `sync` (exact for
//! its threads; the producer role makes no ordinary shared accesses). `cp.async` data lands
//! in shared memory only when an `async_wait` (`cp.async.wait_group N`: all but the newest
//! N committed groups of *this thread*) completes its group.
//!
//! **mbarriers, TMA and registers** (`mbarrier.rs`, `tma.rs`). An mbarrier is a word of a
//! shared int64 buffer with a phase, pending arrivals and transaction bytes: `init count`,
//! `arrive` (one arrival; `expect_tx B` first adds B bytes), a TMA copy's `complete_tx`; a
//! phase completes when nothing is pending. `mbarrier_wait parity P` passes when the current
//! phase's parity is not P, else blocks its unit until some phase completes. A TMA load lands
//! at issue: the map's box of the global tensor (zero outside it) written densely from the
//! destination's shared address, each byte's physical address swizzled as the map says;
//! its bytes are tagged with the phase they complete, and whoever reads them (a thread, a
//! wgmma's warpgroup) must have waited for that phase — arrivals release and waits acquire
//! what a thread has seen, barriers share it. TMA writes are async-proxy writes (a wgmma
//! reads them with no `fence_proxy_async`) that may not land on bytes a pending wgmma reads.
//! `setmaxnreg` sets a warpgroup's register budget (`inc` waits until the 65536 registers
//! can hold it).
//!
//! **Thread-block clusters** run their blocks together in one machine: `threads` counts
//! every block's (thread `t` is thread `t % cta_threads` of block `t / cta_threads`), each
//! block's shared memory is its own range of `smem`, and `sync`, named barriers and the
//! register pool are per block; `cluster_sync` waits for every thread of the cluster. A
//! multicast TMA copy lands in every block of its mask and completes on each one's barrier
//! (a count may go below zero until that block's `expect_tx`, as PTX allows); a remote
//! `mbarrier_arrive` lands on the peer's word. A peer's barrier used before a `cluster_sync`
//! published its init, and a block finishing with remote accesses since the last
//! `cluster_sync`, are errors. One cluster's block 0 runs ahead of the others, the next
//! one's last block, the third's blocks in turn (schedule.rs).
//!
//! **Asynchronous tensor cores and proxies.** Until its group retires (`wgmma.wait_group
//! N`: all but the newest N committed groups of *this warpgroup*), a wgmma owns its
//! accumulator and A registers — any other access to them is reported — and the shared
//! bytes it reads, which nobody may write. A wgmma needs a `wgmma_fence` of its warpgroup
//! after the last access by another instruction to its accumulator or A registers (any
//! access, as PTX ISA §9.7.15.7.1 says, not only writes; chained wgmmas on one accumulator
//! need none) and before the first wgmma. The shared bytes it reads must have been written,
//! last, by their writer (an ordinary or vector store, stmatrix, a landed `cp.async`: the
//! generic proxy) before a `fence_proxy_async` of that thread that a barrier followed. A
//! wait must name every accumulator it retires (codegen fences only those registers).
//! Wgmmas still pending at the end of the block are reported.
//!
//! **Errors** (a compiler bug the differential check should catch): a global access out
//! of the tensor's bounds, any on-chip index out of range, a vector access (`VecCopy`,
//! 16-byte `cp.async`, `ldmatrix` rows) that is not aligned to its size, a wgmma operand
//! read outside its shared tile, a descriptor that is not uniform over the warpgroup, an
//! mbarrier used uninitialized, initialized twice or before a barrier published its init, a
//! transaction count below zero, bytes of a TMA copy read without a wait for its phase (or
//! before any copy wrote them), a TMA box or destination the hardware refuses (`bytes` not
//! the box's, a destination off 128 bytes or the swizzle period, a box outside it), bad
//! `setmaxnreg` counts, and the misuses above.
//!
//! **Not modelled** (yet): warps of a warpgroup run in lockstep, so ordering bugs between
//! the warps of one warpgroup on global memory stay hidden (shared memory is race-checked
//! whatever the order); the order of warpgroups is one fixed rotation (a released stage's
//! waiters run first), not a search over interleavings; races between an ordinary access
//! and a TMA write are caught through the data and the phase tags, not by ordering (a
//! stage refilled while read shows as a read of a phase not waited for, or a deadlock);
//! unswizzled (interleaved) descriptors and the
//! base-offset field, which tilers never generates (an error if met); the "same shape"
//! condition on chained wgmmas without a fence; whether the variable a warpgroup reads was
//! bound by that warpgroup (an unbound read is caught only before any warpgroup binds it).

mod insts;
mod matrix;
mod mbarrier;
mod memory;
mod schedule;
mod stmatrix;
mod tma;
mod tma_store;
mod wgmma;

use crate::num::{self, OpError, Val};
use crate::Arg;
use tile_ir::{
    inst, BinOp, BufferId, DType, Diagnostic, Expr, Inst, Loc, MmaAtom, Module, Param, Scope, SharedLayout,
    Stmt,
};
use tile_ir::{Level, UnOp, VarKind};

/// Blocks the model launches for a persistent kernel: fewer than its tiles, so that each
/// block walks several (and the ring of its pipeline wraps across tiles).
const PERSISTENT_BLOCKS: i64 = 3;

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Run only these blocks `(bx, by, bz)` (others are skipped); all blocks when `None`.
    pub blocks: Option<Vec<[i64; 3]>>,
}

/// What a run observed.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub blocks_run: usize,
    /// Shared-memory bank conflicts per instruction kind, summed over the run.
    pub bank_conflicts: Vec<BankConflicts>,
}

/// Shared-memory wavefronts of one kind of access (4-byte banks, 32 banks per cycle; a
/// warp's request needs as many wavefronts as the most distinct 4-byte words one bank
/// is asked for, counted per 128-byte phase for wide accesses).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BankConflicts {
    /// `ldmatrix A_shared`, `store acc_xwarp`, …
    pub what: String,
    /// Warp-level requests.
    pub requests: u64,
    /// Wavefronts they needed (equal to `ideal` when conflict-free).
    pub wavefronts: u64,
    /// Wavefronts they would need without conflicts.
    pub ideal: u64,
}

/// Run a thread-level module over the whole grid.
pub fn run(m: &Module, args: &mut [Arg]) -> Result<(), Diagnostic> {
    run_with(m, args, &Options::default()).map(|_| ())
}

/// Run a thread-level module over the blocks `opts` names. Tensor arguments are updated in
/// place, also when an error stops the run.
pub fn run_with(m: &Module, args: &mut [Arg], opts: &Options) -> Result<Report, Diagnostic> {
    run_machine(m, args, opts, None)
}

/// A change to a 64-bit wgmma matrix descriptor (a field off, another swizzle mode).
pub type DescriptorFault = fn(u64) -> u64;

/// For mutation tests of the wgmma model: [`run_with`], every wgmma descriptor passed
/// through `fault` after the model built it as the generated code does and before it is
/// decoded, so that a wrong field must read wrong bytes.
pub fn run_with_descriptor_fault(
    m: &Module,
    args: &mut [Arg],
    opts: &Options,
    fault: DescriptorFault,
) -> Result<Report, Diagnostic> {
    run_machine(m, args, opts, Some(fault))
}

fn run_machine(
    m: &Module,
    args: &mut [Arg],
    opts: &Options,
    fault: Option<DescriptorFault>,
) -> Result<Report, Diagnostic> {
    if m.level != Level::Thread {
        return Err(error("the thread-level interpreter runs lowered modules; this one is tile level"));
    }
    if let Some(b) = (0..m.buffers.len() as u32).map(tile_ir::BufferId).find(|&b| m.is_pointer(b)) {
        return Err(error(crate::pointer_message(&m.buffer(b).name)));
    }
    let (spec, sizes) = crate::bind_sizes(m, args)?;
    let m = &spec;
    // the sizes follow the parameters (bind_sizes counted them)
    let n = if sizes.is_empty() { args.len() } else { m.params.len() };
    let args = &mut args[..n];
    if args.len() != m.params.len() {
        return Err(error(format!("'{}' takes {} arguments, got {}", m.name, m.params.len(), args.len())));
    }
    let mut machine = Machine::new(m)?;
    machine.descriptor_fault = fault;
    for (v, x) in &sizes {
        machine.uniform[v.0 as usize] = Some(Val::I(*x));
    }
    for (p, a) in m.params.iter().zip(args.iter()) {
        match (p, a) {
            (Param::Tensor { name, buffer }, Arg::Tensor(bytes)) => {
                let want = m.buffer(*buffer).bytes() as usize;
                if bytes.len() != want {
                    return Err(error(format!(
                        "argument '{name}': expected {want} bytes, got {}",
                        bytes.len()
                    )));
                }
                machine.global[buffer.0 as usize] = bytes.clone();
            }
            (Param::Scalar { name, var }, a) => {
                let v = crate::scalar_arg(name, m.var(*var).dtype, a)?;
                machine.uniform[var.0 as usize] = Some(v);
            }
            (Param::Tensor { name, .. }, _) => {
                return Err(error(format!("argument '{name}': expected a tensor")));
            }
        }
    }
    for &id in &m.scratch {
        let b = m.buffer(id);
        machine.global[id.0 as usize] = crate::scratch_bytes(b.dtype, b.num_elements().max(0) as usize);
    }
    let result = machine.run_grid(opts);
    for (p, a) in m.params.iter().zip(args.iter_mut()) {
        if let (Param::Tensor { buffer, .. }, Arg::Tensor(bytes)) = (p, a) {
            bytes.copy_from_slice(&machine.global[buffer.0 as usize]);
        }
    }
    result?;
    let mut bank_conflicts: Vec<BankConflicts> = machine.banks.into_values().collect();
    bank_conflicts.sort_by(|a, b| a.what.cmp(&b.what));
    Ok(Report { blocks_run: machine.blocks_run, bank_conflicts })
}

fn error(msg: impl Into<String>) -> Diagnostic {
    Diagnostic::error(msg, Loc::UNKNOWN)
}

fn read_val(bytes: &[u8], dt: DType) -> Val {
    let b = |n: usize| -> [u8; 8] {
        let mut out = [0u8; 8];
        out[..n].copy_from_slice(&bytes[..n]);
        out
    };
    match dt {
        DType::Bool => Val::I((bytes[0] != 0) as i64),
        DType::I8 => Val::I(bytes[0] as i8 as i64),
        DType::U8 => Val::I(bytes[0] as i64),
        DType::I16 => Val::I(i16::from_le_bytes([bytes[0], bytes[1]]) as i64),
        DType::U16 => Val::I(u16::from_le_bytes([bytes[0], bytes[1]]) as i64),
        DType::I32 => Val::I(i32::from_le_bytes(b(4)[..4].try_into().unwrap()) as i64),
        DType::U32 => Val::I(u32::from_le_bytes(b(4)[..4].try_into().unwrap()) as i64),
        // uint64: the bit pattern (see `num`)
        DType::I64 | DType::U64 => Val::I(i64::from_le_bytes(b(8))),
        DType::F16 => Val::F(num::f16_bits_to_f32(u16::from_le_bytes([bytes[0], bytes[1]])) as f64),
        DType::BF16 => Val::F(num::bf16_bits_to_f32(u16::from_le_bytes([bytes[0], bytes[1]])) as f64),
        DType::F32 => Val::F(f32::from_le_bytes(b(4)[..4].try_into().unwrap()) as f64),
        DType::F64 => Val::F(f64::from_le_bytes(b(8))),
    }
}

/// Store a value already of `dt` (wrapped or rounded).
fn write_val(out: &mut [u8], dt: DType, v: Val) {
    match dt {
        DType::Bool => out[0] = (v.as_i64() != 0) as u8,
        DType::I8 | DType::U8 => out[0] = v.as_i64() as u8,
        DType::I16 | DType::U16 => out[..2].copy_from_slice(&(v.as_i64() as u16).to_le_bytes()),
        DType::I32 | DType::U32 => out[..4].copy_from_slice(&(v.as_i64() as u32).to_le_bytes()),
        DType::I64 | DType::U64 => out[..8].copy_from_slice(&v.as_i64().to_le_bytes()),
        DType::F16 => out[..2].copy_from_slice(&num::f32_to_f16_bits(v.as_f64() as f32).to_le_bytes()),
        DType::BF16 => out[..2].copy_from_slice(&num::f32_to_bf16_bits(v.as_f64() as f32).to_le_bytes()),
        DType::F32 => out[..4].copy_from_slice(&(v.as_f64() as f32).to_le_bytes()),
        DType::F64 => out[..8].copy_from_slice(&v.as_f64().to_le_bytes()),
    }
}

/// Thread ids as compact ranges: `0-31, 64-95`.
fn ranges(ids: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { format!("{}", ids[i]) } else { format!("{}-{}", ids[i], ids[j]) });
        i = j + 1;
    }
    parts.join(", ")
}

const NOBODY: u32 = u32::MAX;
const SEVERAL: u32 = u32::MAX - 1;

/// Per shared byte: who last wrote and read it in which barrier interval, how many
/// `cp.async` writes to it are in flight, how many pending wgmmas read it, and how many
/// `fence_proxy_async` its last writer had run when it wrote it; for the bytes a TMA copy
/// wrote last, the mbarrier (slot) it completes on and the completed phases a reader must
/// have seen; whether it belongs to a TMA destination nothing has written yet, or to an
/// initialized mbarrier (its slot).
struct RaceTracker {
    write_epoch: Vec<u32>,
    writer: Vec<u32>,
    read_epoch: Vec<u32>,
    reader: Vec<u32>,
    /// The mbarrier arrivals the last writer had made when it wrote (an access of another
    /// thread that acquired a later arrival of the writer's is ordered after the write).
    write_seq: Vec<u32>,
    /// The most mbarrier arrivals any of the interval's readers had made when it read, and
    /// the lowest and highest of those readers.
    read_seq: Vec<u32>,
    readers_lo: Vec<u32>,
    readers_hi: Vec<u32>,
    /// The cluster barrier arrivals the last writer had made when it wrote, and the most
    /// any of the interval's readers had made (`cluster_arrive`: an access of a thread
    /// past the wait of a later phase is ordered after it).
    write_carr: Vec<u32>,
    read_carr: Vec<u32>,
    in_flight: Vec<u16>,
    wgmma_reads: Vec<u16>,
    /// Bulk tensor stores (TMA) reading the byte whose group no `bulk_wait` retired yet.
    bulk_reads: Vec<u16>,
    fence_mark: Vec<u32>,
    tma_bar: Vec<u32>,
    tma_phase: Vec<u32>,
    tma_buf: Vec<u32>,
    unwritten_tma_dst: Vec<bool>,
    mbarrier: Vec<u32>,
    /// Distributed shared memory (a kernel with cluster views): per byte, the cluster epoch
    /// (`cluster_sync`s completed, plus one) of the last write and its block, and of the
    /// reads since and their blocks (a mask) — accesses from two blocks, one a write, with
    /// no `cluster_sync` between are a race.
    x_write_epoch: Vec<u32>,
    x_write_block: Vec<u8>,
    x_read_epoch: Vec<u32>,
    x_read_blocks: Vec<u16>,
}

impl RaceTracker {
    fn new(n: usize) -> RaceTracker {
        RaceTracker {
            write_epoch: vec![0; n],
            writer: vec![NOBODY; n],
            read_epoch: vec![0; n],
            reader: vec![NOBODY; n],
            write_seq: vec![0; n],
            read_seq: vec![0; n],
            readers_lo: vec![0; n],
            readers_hi: vec![0; n],
            write_carr: vec![0; n],
            read_carr: vec![0; n],
            in_flight: vec![0; n],
            wgmma_reads: vec![0; n],
            bulk_reads: vec![0; n],
            fence_mark: vec![0; n],
            tma_bar: vec![NOBODY; n],
            tma_phase: vec![0; n],
            tma_buf: vec![NOBODY; n],
            unwritten_tma_dst: vec![false; n],
            mbarrier: vec![NOBODY; n],
            x_write_epoch: vec![0; n],
            x_write_block: vec![0; n],
            x_read_epoch: vec![0; n],
            x_read_blocks: vec![0; n],
        }
    }
    fn reset(&mut self) {
        self.x_write_epoch.fill(0);
        self.x_read_epoch.fill(0);
        self.write_epoch.fill(0);
        self.writer.fill(NOBODY);
        self.read_epoch.fill(0);
        self.reader.fill(NOBODY);
        self.write_seq.fill(0);
        self.read_seq.fill(0);
        self.readers_lo.fill(0);
        self.readers_hi.fill(0);
        self.in_flight.fill(0);
        self.wgmma_reads.fill(0);
        self.bulk_reads.fill(0);
        self.fence_mark.fill(0);
        self.tma_bar.fill(NOBODY);
        self.tma_phase.fill(0);
        self.tma_buf.fill(NOBODY);
        self.unwritten_tma_dst.fill(false);
        self.mbarrier.fill(NOBODY);
    }
}

/// One thread's `cp.async` state: copies not yet committed, committed groups oldest first.
#[derive(Default, Clone)]
struct AsyncState {
    open: Vec<PendingCopy>,
    groups: std::collections::VecDeque<Vec<PendingCopy>>,
}

#[derive(Clone)]
struct PendingCopy {
    smem_offset: usize,
    data: [u8; 16],
    /// Bytes of `data` that land (the copy's size: 4, 8 or 16).
    len: usize,
}

/// Where an access lands.
#[derive(Clone, Copy, PartialEq)]
enum Space {
    Global,
    Shared,
    Local,
}

struct Machine<'m> {
    m: &'m Module,
    /// Threads run together: one block's launched threads, or those of every block of a
    /// thread-block cluster (block `t / cta_threads` of the cluster, numbered `t %
    /// cta_threads` in it).
    threads: usize,
    cta_threads: usize,
    /// Blocks per cluster (1: no cluster), and the bytes of each block's shared memory in
    /// `smem` (block `c` at `c * cta_smem`; a multiple of 1024 with clusters, so that each
    /// block's swizzles are its own).
    cluster: usize,
    cta_smem: usize,
    /// `cluster_sync`s completed in this cluster, and whether a block has arrived on or
    /// copied into another's shared memory since the last one (no block may exit then: its
    /// peers may still be using its shared memory).
    cluster_epoch: u32,
    remote_since_cluster_sync: bool,
    /// The cluster barrier split in two (`cluster_arrive` ... `cluster_wait`): per thread of
    /// the cluster, the phase it arrived in and has not waited for yet; the phases completed;
    /// the threads arrived in the current one.
    cluster_pending: Vec<Option<u32>>,
    cluster_phase: u32,
    cluster_arrived: usize,
    /// Per buffer: a tile that a cluster view reaches (its peers may touch it): none of its
    /// threads may touch it between its `cluster_arrive` and `cluster_wait`.
    view_roots: Vec<bool>,
    /// The kernel reaches other blocks' shared memory (cluster views, `T.copy_cluster`):
    /// accesses across blocks are checked (`RaceTracker`'s `x_*`).
    dsmem: bool,
    /// The block of the cluster that runs ahead of the others (schedule.rs), if any.
    lead: Option<usize>,
    /// Per thread: the shared bytes of its bulk stores not yet committed, and of each
    /// committed group (oldest first) until a `bulk_wait` retires it.
    bulk: Vec<tma_store::BulkGroups>,
    /// Blocks launched of a persistent kernel (`gridDim.x`; 0 for others).
    launched: i64,
    /// Block-uniform values: scalar parameters and block indices.
    uniform: Vec<Option<Val>>,
    /// Per-thread values of loop variables, lets and the thread index: `var * threads + t`.
    env: Vec<Val>,
    bound: Vec<bool>,
    global: Vec<Vec<u8>>,
    /// Per local buffer, `threads` copies of its bytes.
    local: Vec<Vec<u8>>,
    smem: Vec<u8>,
    races: RaceTracker,
    /// Barrier intervals so far in this block (starts at 1).
    epoch: u32,
    asyncs: Vec<AsyncState>,
    block: [i64; 3],
    /// The last comment passed: names the user's line of the tile op being run.
    context: String,
    blocks_run: usize,
    banks: std::collections::BTreeMap<String, BankConflicts>,
    /// The swizzled offset expression (`SharedLayout::offset`) of each access to a swizzled
    /// tile, by the address of its index list: built once, evaluated per access.
    swizzled: std::collections::HashMap<usize, Expr>,
    /// Variables some `let` binds, by id.
    let_bound: Vec<bool>,
    /// Where the block's shared memory starts (the generated code rounds the dynamic
    /// shared base up to `Module::shared_base_align`): wgmma descriptors hold physical
    /// addresses, and the hardware swizzles those.
    smem_base: i64,
    /// Per thread, the barrier interval of each `fence_proxy_async` it ran, in order.
    proxy_fences: Vec<Vec<u32>>,
    /// Per warpgroup, its wgmmas in flight.
    warpgroups: Vec<wgmma::WarpgroupState>,
    /// Per buffer: for the register arrays wgmmas use, their per-byte wgmma state.
    registers: Vec<Option<wgmma::RegisterTracker>>,
    descriptor_fault: Option<DescriptorFault>,
    /// The block's mbarriers, what each thread has observed of them, register budgets.
    mbar: mbarrier::MbarrierState,
    /// Threads that passed `bar.arrive id, count` towards a barrier not yet completed: per
    /// id, the count and the threads.
    named_arrivals: std::collections::BTreeMap<u32, (u32, Vec<u32>)>,
    /// Shared buffers some `tma_load` writes (their bytes read as unwritten until written).
    tma_destinations: Vec<BufferId>,
    /// The `if`s (by address) whose branches hold an instruction that waits for, or
    /// releases, other threads: when their threads diverge, each side runs on its own.
    forking_ifs: std::collections::HashSet<usize>,
}

type Col = Vec<Val>;

impl<'m> Machine<'m> {
    fn new(m: &'m Module) -> Result<Machine<'m>, Diagnostic> {
        // the user's threads and the producer warps of a warp-specialized kernel, times the
        // blocks of a cluster
        let cta_threads = m.launched_threads() as usize;
        let cluster = m.cluster_blocks() as usize;
        if cluster > 1 && !cta_threads.is_multiple_of(128) {
            return Err(error(format!(
                "a cluster of blocks of {cta_threads} threads (the model runs clusters of whole warpgroups)"
            )));
        }
        let threads = cta_threads * cluster;
        let mut smem_bytes = 0usize;
        for b in &m.buffers {
            if b.scope == Scope::Shared {
                let off = b
                    .shared_offset
                    .ok_or_else(|| error(format!("shared buffer '{}' has no planned offset", b.name)))?;
                smem_bytes = smem_bytes.max(off as usize + b.bytes() as usize);
            }
            if b.scope == Scope::Fragment {
                return Err(error(format!("fragment '{}' left after lowering", b.name)));
            }
        }
        let cta_smem = if cluster > 1 { smem_bytes.div_ceil(1024) * 1024 } else { smem_bytes };
        let smem_bytes = cta_smem * cluster;
        let local = m
            .buffers
            .iter()
            .map(|b| if b.scope == Scope::Local { vec![0xFF; b.bytes() as usize * threads] } else { vec![] })
            .collect();
        Ok(Machine {
            m,
            threads,
            cta_threads,
            cluster,
            cta_smem,
            cluster_epoch: 0,
            remote_since_cluster_sync: false,
            cluster_pending: vec![None; threads],
            cluster_phase: 0,
            cluster_arrived: 0,
            view_roots: m.peer_reached(),
            dsmem: cluster > 1 && m.buffers.iter().any(|b| b.scope == Scope::Cluster),
            lead: None,
            uniform: vec![None; m.vars.len()],
            env: vec![Val::I(0); m.vars.len() * threads],
            bound: vec![false; m.vars.len()],
            global: vec![vec![]; m.buffers.len()],
            local,
            smem: vec![0xFF; smem_bytes],
            races: RaceTracker::new(smem_bytes),
            epoch: 1,
            asyncs: vec![AsyncState::default(); threads],
            block: [0; 3],
            context: String::new(),
            blocks_run: 0,
            bulk: vec![Default::default(); threads],
            launched: 0,
            banks: Default::default(),
            swizzled: Default::default(),
            let_bound: {
                let mut bound = vec![false; m.vars.len()];
                tile_ir::walk_stmts(&m.kernel.body, &mut |s| {
                    if let Stmt::Let { var, .. } = s {
                        bound[var.0 as usize] = true;
                    }
                });
                bound
            },
            smem_base: m.shared_base_align() as i64,
            proxy_fences: vec![vec![]; threads],
            warpgroups: (0..threads.div_ceil(128)).map(|_| Default::default()).collect(),
            registers: {
                let mut used = vec![false; m.buffers.len()];
                tile_ir::walk_stmts(&m.kernel.body, &mut |s| {
                    if let Stmt::Inst(Inst::Wgmma(w)) = s {
                        used[w.c.0 as usize] = true;
                        if matches!(w.a_from, inst::WgmmaA::Registers { .. }) {
                            used[w.a.0 as usize] = true;
                        }
                    }
                });
                m.buffers
                    .iter()
                    .zip(used)
                    .map(|(b, used)| {
                        (used && b.scope == Scope::Local)
                            .then(|| wgmma::RegisterTracker::new(b.bytes() as usize * threads))
                    })
                    .collect()
            },
            descriptor_fault: None,
            mbar: mbarrier::MbarrierState::new(threads, cta_threads),
            named_arrivals: Default::default(),
            tma_destinations: {
                let mut dsts = Vec::new();
                tile_ir::walk_stmts(&m.kernel.body, &mut |s| {
                    if let Stmt::Inst(Inst::TmaLoad(t)) = s {
                        if !dsts.contains(&t.dst) {
                            dsts.push(t.dst);
                        }
                    }
                });
                dsts
            },
            forking_ifs: schedule::forking_ifs(&m.kernel.body),
        })
    }

    /// Where the shared memory of thread `t`'s block starts in `smem`.
    fn cta_base(&self, t: u32) -> usize {
        t as usize / self.cta_threads * self.cta_smem
    }

    fn err(&self, msg: impl std::fmt::Display) -> Diagnostic {
        let [x, y, z] = self.block;
        let at = if self.context.is_empty() { String::new() } else { format!(" at {}", self.context) };
        error(format!("{msg} (block ({x}, {y}, {z}){at})"))
    }

    fn run_grid(&mut self, opts: &Options) -> Result<(), Diagnostic> {
        let m = self.m;
        let mut grid = [1i64; 3];
        for (axis, g) in m.kernel.grid.iter().enumerate().take(3) {
            let v = self.eval(g, &[0])?[0].as_i64();
            if v < 0 {
                return Err(error(format!("grid dimension {axis} is {v}")));
            }
            grid[axis] = v;
        }
        let mut blocks = Vec::new();
        if let Some(tiles) = m.tiles() {
            // a persistent kernel: a few blocks (clusters), each walking several tiles; a
            // cluster's blocks run together, from the first's launch index on
            let n = self.cluster as i64;
            let walkers = (tiles / n).clamp(0, PERSISTENT_BLOCKS);
            self.launched = walkers * n;
            blocks.extend((0..walkers).map(|l| [l * n, 0, 0]));
        }
        // a kernel launched a tile per block in clusters: each cluster's blocks (consecutive
        // along bx) run together, from its first
        let n = self.cluster as i64;
        if m.tiles().is_none() && grid[0] % n != 0 {
            return Err(error(format!("a grid of {} blocks along x launched in clusters of {n}", grid[0])));
        }
        match &opts.blocks {
            _ if m.tiles().is_some() => {}
            Some(list) => {
                for b in list.iter().filter(|b| (0..3).all(|a| b[a] >= 0 && b[a] < grid[a])) {
                    let first = [b[0] - b[0] % n, b[1], b[2]];
                    if !blocks.contains(&first) {
                        blocks.push(first);
                    }
                }
            }
            None => {
                for bz in 0..grid[2] {
                    for by in 0..grid[1] {
                        for bx in (0..grid[0]).step_by(n as usize) {
                            blocks.push([bx, by, bz]);
                        }
                    }
                }
            }
        }
        for (walker, block) in blocks.into_iter().enumerate() {
            // the clusters in three orders: block 0 ahead, the last block ahead, in turn
            self.lead = match walker % 3 {
                _ if self.cluster == 1 => None,
                0 => Some(0),
                1 => Some(self.cluster - 1),
                _ => None,
            };
            self.start_block(block);
            self.run_block()?;
            self.end_block_wgmma()?;
            self.end_block_bulk()?;
            self.blocks_run += 1;
        }
        Ok(())
    }

    fn start_block(&mut self, block: [i64; 3]) {
        self.block = block;
        for (i, v) in self.m.vars.iter().enumerate() {
            match v.kind {
                // a block index a let binds (`rasterize`) is unbound until the let runs
                VarKind::BlockIdx(_) if self.let_bound[i] => {
                    self.uniform[i] = None;
                    self.bound[i] = false;
                }
                // the blocks of a cluster: consecutive launch indices along x
                VarKind::BlockIdx(axis) | VarKind::LaunchIdx(axis) if self.cluster > 1 => {
                    self.uniform[i] = None;
                    for t in 0..self.threads {
                        let c = if axis == 0 { (t / self.cta_threads) as i64 } else { 0 };
                        self.env[i * self.threads + t] = Val::I(block[axis as usize] + c);
                    }
                    self.bound[i] = true;
                }
                VarKind::BlockIdx(axis) | VarKind::LaunchIdx(axis) => {
                    self.uniform[i] = Some(Val::I(block[axis as usize]))
                }
                VarKind::LaunchDim(axis) => {
                    self.uniform[i] =
                        Some(Val::I(if axis == 0 && self.launched > 0 { self.launched } else { 1 }))
                }
                VarKind::ThreadIdx => {
                    for t in 0..self.threads {
                        self.env[i * self.threads + t] = Val::I((t % self.cta_threads) as i64);
                    }
                    self.bound[i] = true;
                }
                VarKind::Loop | VarKind::Temp => self.bound[i] = false,
                VarKind::Param | VarKind::Size { .. } => {}
            }
        }
        for l in &mut self.local {
            l.fill(0xFF);
        }
        self.smem.fill(0xFF);
        self.races.reset();
        self.epoch = 1;
        for a in &mut self.asyncs {
            *a = AsyncState::default();
        }
        for f in &mut self.proxy_fences {
            f.clear();
        }
        for b in &mut self.bulk {
            *b = Default::default();
        }
        for g in &mut self.warpgroups {
            *g = Default::default();
        }
        for r in self.registers.iter_mut().flatten() {
            r.reset();
        }
        self.mbar.reset();
        self.named_arrivals.clear();
        self.cluster_epoch = 0;
        self.remote_since_cluster_sync = false;
        self.cluster_pending.fill(None);
        self.cluster_phase = 0;
        self.cluster_arrived = 0;
        for &d in &self.tma_destinations {
            let b = self.m.buffer(d);
            if let Some(off) = b.shared_offset {
                for c in 0..self.cluster {
                    let base = c * self.cta_smem;
                    let (lo, hi) = (base + off as usize, base + off as usize + b.bytes() as usize);
                    self.races.unwritten_tma_dst[lo..hi.min(self.smem.len())].fill(true);
                }
            }
        }
        self.context.clear();
    }

    // ---------------------------------------------------------------- expressions

    fn op_error(&self, e: OpError, op: &str, dt: DType) -> Diagnostic {
        match e {
            OpError::DivisionByZero => self.err("integer division by zero"),
            OpError::Unsupported => self.err(format!("'{op}' is not defined on {dt}")),
        }
    }

    /// Evaluate `e` for each thread of `active` (ascending ids).
    fn eval(&mut self, e: &Expr, active: &[u32]) -> Result<Col, Diagnostic> {
        let n = self.threads;
        Ok(match e {
            Expr::Const { value, dtype } => vec![num::constant(*value, *dtype); active.len()],
            Expr::Var { id, .. } => {
                let i = id.0 as usize;
                if let Some(v) = self.uniform[i] {
                    vec![v; active.len()]
                } else if self.bound[i] {
                    active.iter().map(|&t| self.env[i * n + t as usize]).collect()
                } else {
                    return Err(
                        self.err(format!("variable '{}' read before it is bound", self.m.var(*id).name))
                    );
                }
            }
            Expr::Load { buf, idx, dtype, .. } => {
                let b = self.m.buffer(*buf);
                let eb = b.dtype.bytes() as usize;
                let addrs = self.addresses(*buf, idx, active, 1, "load")?;
                let space = self.space(*buf);
                let mut out = Vec::with_capacity(active.len());
                for (k, &t) in active.iter().enumerate() {
                    let a = addrs[k];
                    if space == Space::Shared {
                        self.track_read(t, a, eb)?;
                    } else if space == Space::Local {
                        self.touch_registers(*buf, t, a, eb, false)?;
                    }
                    let v = read_val(&self.bytes(*buf, t)[a..a + eb], b.dtype);
                    out.push(if b.dtype == *dtype { v } else { num::cast(v, b.dtype, *dtype) });
                }
                if space == Space::Shared {
                    self.count_banks(&format!("load {}", b.name), active, &addrs, eb);
                }
                out
            }
            Expr::Binary { op: op @ (BinOp::And | BinOp::Or), a, b, .. } => {
                let x = self.eval(a, active)?;
                let want = *op == BinOp::And;
                let rest: Vec<u32> = active
                    .iter()
                    .zip(&x)
                    .filter(|(_, v)| (v.as_i64() != 0) == want)
                    .map(|(t, _)| *t)
                    .collect();
                let y = self.eval(b, &rest)?;
                let mut yi = y.into_iter();
                x.iter()
                    .map(|v| {
                        if (v.as_i64() != 0) == want {
                            Val::I((yi.next().expect("one value per thread").as_i64() != 0) as i64)
                        } else {
                            Val::I(!want as i64)
                        }
                    })
                    .collect()
            }
            Expr::Binary { op, a, b, dtype } => {
                let x = self.eval(a, active)?;
                let y = self.eval(b, active)?;
                let dt = a.dtype();
                let mut out = Vec::with_capacity(x.len());
                for (p, q) in x.into_iter().zip(y) {
                    out.push(
                        num::binary(*op, p, q, dt, *dtype).map_err(|e| self.op_error(e, op.name(), dt))?,
                    );
                }
                out
            }
            Expr::Unary { op: UnOp::Reinterpret, a, dtype } => {
                let x = self.eval(a, active)?;
                x.into_iter().map(|v| num::reinterpret(v, a.dtype(), *dtype)).collect()
            }
            Expr::Unary { op, a, dtype } => {
                let x = self.eval(a, active)?;
                let mut out = Vec::with_capacity(x.len());
                for v in x {
                    out.push(if dtype.is_float() {
                        Val::F(num::float_unary(*op, v.as_f64(), *dtype))
                    } else if *op == UnOp::Not && a.dtype().is_float() {
                        Val::I((v.as_f64() == 0.0) as i64)
                    } else {
                        Val::I(
                            num::int_unary(*op, v.as_i64(), *dtype)
                                .map_err(|e| self.op_error(e, op.name(), *dtype))?,
                        )
                    });
                }
                out
            }
            Expr::Cast { a, dtype } => {
                let from = a.dtype();
                self.eval(a, active)?.into_iter().map(|v| num::cast(v, from, *dtype)).collect()
            }
            Expr::Select { cond, a, b, .. } => {
                let c = self.eval(cond, active)?;
                let (mut yes, mut no) = (Vec::new(), Vec::new());
                for (&t, v) in active.iter().zip(&c) {
                    if v.as_i64() != 0 {
                        yes.push(t)
                    } else {
                        no.push(t)
                    }
                }
                let x = self.eval(a, &yes)?;
                let y = self.eval(b, &no)?;
                let (mut xi, mut yi) = (x.into_iter(), y.into_iter());
                c.iter()
                    .map(|v| {
                        if v.as_i64() != 0 { xi.next() } else { yi.next() }.expect("one value per thread")
                    })
                    .collect()
            }
            Expr::ShflXor { a, mask, .. } => {
                self.full_warps(active, "shfl_xor")?;
                let x = self.eval(a, active)?;
                let mut pos = vec![usize::MAX; n];
                for (k, &t) in active.iter().enumerate() {
                    pos[t as usize] = k;
                }
                active.iter().map(|&t| x[pos[(t ^ (mask & 31)) as usize]]).collect()
            }
        })
    }

    /// Warp-collective operations need every lane of each warp they touch.
    fn full_warps(&self, active: &[u32], what: &str) -> Result<(), Diagnostic> {
        let mut count = std::collections::BTreeMap::<u32, u32>::new();
        for &t in active {
            *count.entry(t / 32).or_default() += 1;
        }
        let warp_size = |w: u32| (self.threads as u32 - w * 32).min(32);
        if let Some((w, c)) = count.iter().find(|(w, c)| **c != warp_size(**w)) {
            return Err(
                self.err(format!("{what} run by {c} of the 32 lanes of warp {w} (it needs all of them)"))
            );
        }
        Ok(())
    }

    // ---------------------------------------------------------------- shared memory races

    // ---------------------------------------------------------------- statements

    fn bind(&mut self, var: tile_ir::VarId, active: &[u32], values: &[Val]) {
        let i = var.0 as usize;
        self.bound[i] = true;
        for (&t, v) in active.iter().zip(values) {
            self.env[i * self.threads + t as usize] = *v;
        }
    }

    fn stmt(&mut self, s: &Stmt, active: &[u32]) -> Result<(), Diagnostic> {
        crate::check_stop()?;
        let m = self.m;
        match s {
            Stmt::Comment(c) => self.context = c.clone(),
            Stmt::Let { var, value } => {
                let v = self.eval(value, active)?;
                self.bind(*var, active, &v);
            }
            Stmt::Store { buf, idx, value, .. } => {
                let b = m.buffer(*buf);
                let eb = b.dtype.bytes() as usize;
                let v = self.eval(value, active)?;
                let addrs = self.addresses(*buf, idx, active, 1, "store")?;
                let shared = self.space(*buf) == Space::Shared;
                let local = self.space(*buf) == Space::Local;
                // lanes of one store to one address: the same value is one write (TileLang's
                // `valid[r // 8] = ...` by 8 lanes); different values would leave it undecided
                let mut same_instruction: std::collections::HashMap<usize, Val> = Default::default();
                for (k, &t) in active.iter().enumerate() {
                    if shared {
                        match same_instruction.get(&addrs[k]) {
                            Some(&x)
                                if x.as_i64() == v[k].as_i64()
                                    && x.as_f64().to_bits() == v[k].as_f64().to_bits() => {}
                            Some(_) => {
                                return Err(self.err(format!(
                                    "threads of one store write different values to shared byte {} of '{}'",
                                    addrs[k], b.name
                                )))
                            }
                            None => {
                                same_instruction.insert(addrs[k], v[k]);
                                self.track_write(t, addrs[k], eb)?;
                            }
                        }
                    } else if local {
                        self.touch_registers(*buf, t, addrs[k], eb, true)?;
                    }
                    let x = num::cast(v[k], value.dtype(), b.dtype);
                    write_val(&mut self.bytes_mut(*buf, t)[addrs[k]..addrs[k] + eb], b.dtype, x);
                }
                if shared {
                    self.count_banks(&format!("store {}", b.name), active, &addrs, eb);
                }
            }
            Stmt::Atomic { mode, buf, idx, value, prev, .. } => {
                let b = m.buffer(*buf);
                let eb = b.dtype.bytes() as usize;
                let v = self.eval(value, active)?;
                let what = format!("atomic {}", mode.op.name());
                if self.space(*buf) == Space::Local {
                    return Err(self.err(format!("{what} on local '{}'", b.name)));
                }
                let addrs = self.addresses(*buf, idx, active, 1, &what)?;
                // atomics from several threads in lockstep land one after another
                for (k, &t) in active.iter().enumerate() {
                    let x = num::cast(v[k], value.dtype(), b.dtype);
                    let slot = &mut self.bytes_mut(*buf, t)[addrs[k]..addrs[k] + eb];
                    let old = read_val(slot, b.dtype);
                    let new = num::atomic_combine(mode.op, old, x, b.dtype)
                        .map_err(|_| error(format!("{what} on {}", b.dtype)))?;
                    write_val(slot, b.dtype, new);
                    if let Some(p) = prev {
                        self.touch_registers(*p, t, 0, eb, true)?;
                        write_val(&mut self.bytes_mut(*p, t)[..eb], b.dtype, old);
                    }
                }
            }
            Stmt::Inst(i) => self.inst(i, active)?,
            Stmt::SourceLine(_) => {}
            // loops, ifs and barriers are the scheduler's (schedule.rs)
            Stmt::For { .. } | Stmt::If { .. } => unreachable!("run by the scheduler"),
            // copy, fill, reduce, gemm, parallel, async, print, device_assert
            _ => return Err(self.err("tile op left after lowering")),
        }
        Ok(())
    }
}
