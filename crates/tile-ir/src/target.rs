//! What code is compiled for: an architecture, what it can do, its limits, and the tables of
//! instruction atoms the passes choose from.
//!
//! This is the one description of the hardware that the passes (`select_instructions`,
//! `infer_layouts`, the lowering), the back end (PTX spellings) and the thread-level
//! interpreter (fragment layouts) read, in the spirit of tinygrad's `TensorCore` table and
//! Cranelift's ISA flags. A new back end adds a [`Target`]; a new instruction adds an atom
//! here (see docs/architecture.md, "Adding an instruction").
//!
//! `sm_90` and `sm_90a` are different targets: the `a` (architecture-specific) features —
//! `wgmma`, `setmaxnreg` — exist only on `sm_90a`, whose cubins run on compute capability
//! 9.0 alone.

use crate::ir::{AtomicMode, AtomicOp, MemoryOrder};
use crate::types::DType;
use std::fmt;

/// The architecture tilers compiles for when nothing else is said: the H100 / H200.
pub const DEFAULT_ARCH: &str = "sm_90a";

/// The oldest architecture tilers emits code for (`ldmatrix`, `cp.async`, bf16 `mma.sync`).
pub const MIN_SM: u32 = 80;
/// The compute capabilities from MIN_SM on that NVRTC (CUDA 13) compiles for.
pub const KNOWN_SM: &[u32] = &[80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121];

/// The portable path's architecture: what the pass checker lowers for by default, since
/// every later GPU runs its instructions.
pub const PORTABLE_ARCH: &str = "sm_80";

/// What an architecture can do, as flags the passes ask (`target.caps.wgmma`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// `ldmatrix.sync.aligned.m8n8` (sm_75+).
    pub ldmatrix: bool,
    /// `cp.async.cg.shared.global` with zero-fill (sm_80+).
    pub cp_async: bool,
    /// `stmatrix.sync.aligned.m8n8` (sm_90+).
    pub stmatrix: bool,
    /// `red.add.noftz.bf16` on global memory (sm_90+).
    pub bf16_atomic_add: bool,
    /// Vector reductions on global memory: `red.global.add.v2/.v4.f32`,
    /// `red.global.add.noftz.v2/.v4/.v8.f16` and `.bf16` (sm_90+).
    pub vector_atomics: bool,
    /// Tensor memory access: `cp.async.bulk.tensor` with tensor maps (sm_90+).
    pub tma: bool,
    /// `mbarrier` with transaction counts (`expect_tx`, `complete_tx`; sm_90+).
    pub mbarrier_tx: bool,
    /// Thread-block clusters and distributed shared memory (sm_90+).
    pub clusters: bool,
    /// `wgmma.mma_async` (sm_90a only).
    pub wgmma: bool,
    /// `setmaxnreg` register reallocation between warpgroups (sm_90a only).
    pub setmaxnreg: bool,
}

/// Per-block and per-thread limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Shared memory one block may use, in bytes (with the opt-in above 48 KiB).
    pub shared_bytes: u64,
    pub max_threads: u32,
    pub warp_size: u32,
    /// 32-bit registers one thread may use.
    pub registers_per_thread: u32,
}

/// A compilation target: `sm_80`, `sm_90`, `sm_90a`, …
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The architecture as NVRTC spells it (`sm_90a`).
    pub arch: String,
    /// Compute capability as a number: 80, 90, …
    pub sm: u32,
    /// Architecture-specific features (`sm_90a`): code runs on exactly this capability.
    pub arch_specific: bool,
    pub caps: Caps,
    pub limits: Limits,
}

impl Target {
    /// The target `arch` names (`sm_80`, `sm_86`, `sm_90`, `sm_90a`, `sm_100a`, …); an error
    /// says what is accepted.
    pub fn parse(arch: &str) -> Result<Target, String> {
        let bad = || {
            let known: Vec<String> = KNOWN_SM.iter().map(|sm| format!("sm_{sm}")).collect();
            format!(
                "unsupported architecture '{arch}': expected one of {} (with an `a` suffix from sm_90 on), e.g. {DEFAULT_ARCH}",
                known.join(", ")
            )
        };
        let rest = arch.strip_prefix("sm_").ok_or_else(bad)?;
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        let suffix = &rest[digits.len()..];
        let sm: u32 = digits.parse().map_err(|_| bad())?;
        // an architecture NVRTC does not know (sm_99) is an error here, not a failed
        // compile blamed on tilers later
        if sm < MIN_SM || !KNOWN_SM.contains(&sm) || !matches!(suffix, "" | "a") || (suffix == "a" && sm < 90)
        {
            return Err(bad());
        }
        let arch_specific = suffix == "a";
        let hopper_or_newer = sm >= 90;
        let shared_bytes = match sm {
            80 | 87 => 163 * 1024,
            86 | 89 => 99 * 1024,
            90..=109 => 227 * 1024,
            _ => 99 * 1024,
        };
        Ok(Target {
            arch: arch.to_string(),
            sm,
            arch_specific,
            caps: Caps {
                ldmatrix: true,
                cp_async: true,
                stmatrix: hopper_or_newer,
                bf16_atomic_add: hopper_or_newer,
                vector_atomics: hopper_or_newer,
                tma: hopper_or_newer,
                mbarrier_tx: hopper_or_newer,
                clusters: hopper_or_newer,
                // the sm_90a instructions; later architectures have their own `a` sets
                wgmma: sm == 90 && arch_specific,
                setmaxnreg: sm == 90 && arch_specific,
            },
            limits: Limits { shared_bytes, max_threads: 1024, warp_size: 32, registers_per_thread: 255 },
        })
    }

    /// How many contiguous elements of `dtype` one atomic instruction with `mode` updates in
    /// global memory: a `red` with a vector type on sm_90 (16 bytes: 4 float32, 8 float16 or
    /// bfloat16), packed `red.add.noftz.f16x2` before it; 1 where only scalar atomics exist.
    /// Only adds whose order `red` can carry (relaxed, release) are vectors: max/min on
    /// floats are compare-and-swap loops (their NaN and signed-zero rules are tilers' own),
    /// and an acquiring order needs `atom` with its result.
    pub fn atomic_vector_width(&self, mode: AtomicMode, dtype: DType) -> u32 {
        if mode.op != AtomicOp::Add || !matches!(mode.order, MemoryOrder::Relaxed | MemoryOrder::Release) {
            return 1;
        }
        match dtype {
            DType::F32 if self.caps.vector_atomics => 4,
            DType::F16 | DType::BF16 if self.caps.vector_atomics => 8,
            DType::F16 => 2,
            _ => 1,
        }
    }

    /// The default target ([`DEFAULT_ARCH`]).
    pub fn default_gpu() -> Target {
        Target::parse(DEFAULT_ARCH).expect("the default architecture parses")
    }

    /// The `mma` atom for operands of `dtype` on this target (see [`MMA_ATOMS`]).
    pub fn mma_atom(&self, dtype: DType) -> Option<&'static MmaAtom> {
        MMA_ATOMS
            .iter()
            .find(|a| a.a == dtype && self.sm >= a.min_sm && (!a.arch_specific || self.arch_specific))
    }

    /// The `wgmma` atom for operands of `dtype` on this target (see [`WGMMA_ATOMS`]).
    pub fn wgmma_atom(&self, dtype: DType) -> Option<&'static MmaAtom> {
        if !self.caps.wgmma {
            return None;
        }
        WGMMA_ATOMS.iter().find(|a| a.a == dtype && self.sm >= a.min_sm)
    }

    /// Whether this target has the copy atom.
    pub fn has(&self, atom: &CopyAtom) -> bool {
        self.sm >= atom.min_sm
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.arch)
    }
}

// ------------------------------------------------------------------------------------------
// fragment layouts of atoms
// ------------------------------------------------------------------------------------------

/// Where one digit of an atom's fragment coordinate comes from: a thread of the atom's
/// scope (lane within the warp, thread within the warpgroup) or an element of that thread's
/// fragment (`(x / stride) % size`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomSource {
    Lane(i64),
    Element(i64),
}

/// One digit: `size` values from `source`, each adding `step` to the coordinate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomDigit {
    pub size: i64,
    pub step: i64,
    pub source: AtomSource,
}

/// Which lane holds which element of an atom's operand tile: per dimension (rows, columns)
/// its digits, fastest first — the same mixed-radix form as `FragmentLayout`, which builds
/// whole-tile layouts by repeating these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomLayout {
    pub rows: &'static [AtomDigit],
    pub cols: &'static [AtomDigit],
}

const fn lane(size: i64, step: i64, stride: i64) -> AtomDigit {
    AtomDigit { size, step, source: AtomSource::Lane(stride) }
}

const fn element(size: i64, step: i64, stride: i64) -> AtomDigit {
    AtomDigit { size, step, source: AtomSource::Element(stride) }
}

impl AtomLayout {
    /// (row, column) of element `e` of lane `l`'s fragment.
    pub fn coord(&self, l: i64, e: i64) -> (i64, i64) {
        let at = |digits: &[AtomDigit]| {
            digits
                .iter()
                .map(|d| {
                    let x = match d.source {
                        AtomSource::Lane(s) => l / s,
                        AtomSource::Element(s) => e / s,
                    };
                    (x % d.size) * d.step
                })
                .sum()
        };
        (at(self.rows), at(self.cols))
    }

    /// Elements per lane.
    pub fn elements(&self) -> i64 {
        self.rows
            .iter()
            .chain(self.cols)
            .filter(|d| matches!(d.source, AtomSource::Element(_)))
            .map(|d| d.size)
            .product()
    }
}

/// Who executes an instruction together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadScope {
    Thread,
    /// The 32 lanes of a warp (`mma.sync`, `ldmatrix`, `stmatrix`, shuffles).
    Warp,
    /// The 128 threads of four consecutive warps (`wgmma`).
    Warpgroup,
}

/// A tensor-core instruction: `C(m × n) += A(m × k) · B(k × n)` per scope.
#[derive(Debug, PartialEq, Eq)]
pub struct MmaAtom {
    /// The name the IR prints (`mma.m16n8k16.f32.f16.f16.f32`).
    pub name: &'static str,
    /// The PTX instruction without operands.
    pub ptx: &'static str,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub a: DType,
    pub b: DType,
    pub acc: DType,
    pub scope: ThreadScope,
    /// Per lane: the A fragment (m × k, row-major "row"), the B fragment (k × n,
    /// "col"), the accumulator (m × n).
    pub a_layout: AtomLayout,
    pub b_layout: AtomLayout,
    pub c_layout: AtomLayout,
    pub min_sm: u32,
    /// Needs the architecture-specific target (`sm_90a`).
    pub arch_specific: bool,
}

impl MmaAtom {
    /// The N of one instruction a gemm may choose: `mma.sync` has its one N; `wgmma` takes
    /// any multiple of `n` (its granule, 8) up to [`WGMMA_MAX_N`].
    pub fn allows_n(&self, n: i64) -> bool {
        match self.scope {
            ThreadScope::Warpgroup => n > 0 && n % self.n == 0 && n <= WGMMA_MAX_N,
            _ => n == self.n,
        }
    }

    /// The PTX instruction of one `wgmma` of `n` columns (`wgmma.mma_async.sync.aligned.
    /// m64n128k16.f32.f16.f16`); for `mma.sync`, its PTX.
    pub fn ptx_for(&self, n: i64) -> String {
        match self.scope {
            ThreadScope::Warpgroup => self.ptx.replacen("nN", &format!("n{n}"), 1),
            _ => self.ptx.to_string(),
        }
    }

    /// Bytes of A (or B) one lane holds per atom: 16 (A) and 8 (B) for every `mma.sync`.
    pub fn a_bytes(&self) -> i64 {
        self.a_layout.elements() * self.a.bytes() as i64
    }
    pub fn b_bytes(&self) -> i64 {
        self.b_layout.elements() * self.b.bytes() as i64
    }

    /// The atom the IR names `name` (the text IR's spelling).
    pub fn by_name(name: &str) -> Option<&'static MmaAtom> {
        MMA_ATOMS.iter().chain(WGMMA_ATOMS).find(|a| a.name == name)
    }
}

impl fmt::Display for MmaAtom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

// The mma.sync m16n8 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16" and "…k32"):
// lane l is in group g = l / 4, thread-in-group q = l % 4; a 32-bit register holds 2 (16-bit)
// or 4 (8-bit) consecutive elements along k.

/// A of m16n8k16 (16 × 16, 8 elements per lane): rows g, g + 8; columns 2q + {0, 1}, + 8.
const MMA_A_16BIT: AtomLayout = AtomLayout {
    rows: &[lane(8, 1, 4), element(2, 8, 2)],
    cols: &[element(2, 1, 1), lane(4, 2, 1), element(2, 8, 4)],
};
/// B of m16n8k16 (16 × 8, 4 elements per lane): rows 2q + {0, 1}, + 8; column g.
const MMA_B_16BIT: AtomLayout =
    AtomLayout { rows: &[element(2, 1, 1), lane(4, 2, 1), element(2, 8, 2)], cols: &[lane(8, 1, 4)] };
/// A of m16n8k32 (16 × 32, 16 elements per lane): rows g, g + 8; columns 4q + {0..3}, + 16.
const MMA_A_8BIT: AtomLayout = AtomLayout {
    rows: &[lane(8, 1, 4), element(2, 8, 4)],
    cols: &[element(4, 1, 1), lane(4, 4, 1), element(2, 16, 8)],
};
/// B of m16n8k32 (32 × 8, 8 elements per lane): rows 4q + {0..3}, + 16; column g.
const MMA_B_8BIT: AtomLayout =
    AtomLayout { rows: &[element(4, 1, 1), lane(4, 4, 1), element(2, 16, 4)], cols: &[lane(8, 1, 4)] };
/// The m16n8 accumulator (4 elements per lane): rows g, g + 8; columns 2q + {0, 1}.
const MMA_C: AtomLayout =
    AtomLayout { rows: &[lane(8, 1, 4), element(2, 8, 2)], cols: &[element(2, 1, 1), lane(4, 2, 1)] };

// The wgmma m64nNk16 fragments (PTX ISA, "Register Fragments" of wgmma): thread t of the
// warpgroup is lane l = t % 32 of warp w = t / 32; the accumulator's register i holds row
// 16 w + l / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (l % 4) + i % 2. The tables hold the
// N = 8 granule: wider instructions repeat it along N, register i + 4 j for columns + 8 j.

/// The wgmma accumulator of one 64 x 8 granule (4 elements per thread).
const WGMMA_C: AtomLayout = AtomLayout {
    rows: &[lane(8, 1, 4), element(2, 8, 2), lane(4, 16, 32)],
    cols: &[element(2, 1, 1), lane(4, 2, 1)],
};
/// A of m64nNk16 from registers (64 x 16, 8 elements per thread): the accumulator's
/// layout over 16 columns.
const WGMMA_A_16BIT: AtomLayout = AtomLayout {
    rows: &[lane(8, 1, 4), element(2, 8, 2), lane(4, 16, 32)],
    cols: &[element(2, 1, 1), lane(4, 2, 1), element(2, 8, 4)],
};
/// B of wgmma is read from shared memory through a descriptor, never from registers.
const WGMMA_B_SHARED: AtomLayout = AtomLayout { rows: &[], cols: &[] };

/// The widest wgmma: N = 256.
pub const WGMMA_MAX_N: i64 = 256;

/// The `wgmma.mma_async` atoms (sm_90a): `m64nNk16`, N any multiple of 8 up to 256 (the
/// table's `n` is that granule; `ptx` has `nN` where the chosen N goes).
pub static WGMMA_ATOMS: &[MmaAtom] = &[
    MmaAtom {
        name: "wgmma.m64nNk16.f32.f16.f16",
        ptx: "wgmma.mma_async.sync.aligned.m64nNk16.f32.f16.f16",
        m: 64,
        n: 8,
        k: 16,
        a: DType::F16,
        b: DType::F16,
        acc: DType::F32,
        scope: ThreadScope::Warpgroup,
        a_layout: WGMMA_A_16BIT,
        b_layout: WGMMA_B_SHARED,
        c_layout: WGMMA_C,
        min_sm: 90,
        arch_specific: true,
    },
    MmaAtom {
        name: "wgmma.m64nNk16.f32.bf16.bf16",
        ptx: "wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16",
        m: 64,
        n: 8,
        k: 16,
        a: DType::BF16,
        b: DType::BF16,
        acc: DType::F32,
        scope: ThreadScope::Warpgroup,
        a_layout: WGMMA_A_16BIT,
        b_layout: WGMMA_B_SHARED,
        c_layout: WGMMA_C,
        min_sm: 90,
        arch_specific: true,
    },
];

/// Every tensor-core atom tilers knows, in order of preference for a dtype.
pub static MMA_ATOMS: &[MmaAtom] = &[
    MmaAtom {
        name: "mma.m16n8k16.f32.f16.f16.f32",
        ptx: "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
        m: 16,
        n: 8,
        k: 16,
        a: DType::F16,
        b: DType::F16,
        acc: DType::F32,
        scope: ThreadScope::Warp,
        a_layout: MMA_A_16BIT,
        b_layout: MMA_B_16BIT,
        c_layout: MMA_C,
        min_sm: 80,
        arch_specific: false,
    },
    MmaAtom {
        name: "mma.m16n8k16.f32.bf16.bf16.f32",
        ptx: "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        m: 16,
        n: 8,
        k: 16,
        a: DType::BF16,
        b: DType::BF16,
        acc: DType::F32,
        scope: ThreadScope::Warp,
        a_layout: MMA_A_16BIT,
        b_layout: MMA_B_16BIT,
        c_layout: MMA_C,
        min_sm: 80,
        arch_specific: false,
    },
    MmaAtom {
        name: "mma.m16n8k32.s32.s8.s8.s32",
        ptx: "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32",
        m: 16,
        n: 8,
        k: 32,
        a: DType::I8,
        b: DType::I8,
        acc: DType::I32,
        scope: ThreadScope::Warp,
        a_layout: MMA_A_8BIT,
        b_layout: MMA_B_8BIT,
        c_layout: MMA_C,
        min_sm: 80,
        arch_specific: false,
    },
];

// ------------------------------------------------------------------------------------------
// copy atoms
// ------------------------------------------------------------------------------------------

/// How a copy atom moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyKind {
    /// One vector load or store of `bytes` per thread (global or shared).
    Vector,
    /// `cp.async` global → shared, asynchronous, zero-filling what lies past the source.
    CpAsync,
    /// `ldmatrix`: shared → registers, `count` 8 × 8 b16 matrices per warp.
    Ldmatrix { count: u32, trans: bool },
    /// `stmatrix`: registers → shared, `count` 8 × 8 b16 matrices per warp.
    Stmatrix { count: u32, trans: bool },
}

/// A data-movement instruction.
#[derive(Debug, PartialEq, Eq)]
pub struct CopyAtom {
    pub name: &'static str,
    pub ptx: &'static str,
    pub kind: CopyKind,
    /// Bytes one thread moves (a row address's 16 bytes for the matrix forms).
    pub bytes: u32,
    /// Alignment every address needs, in bytes.
    pub align: u32,
    pub asynchronous: bool,
    pub scope: ThreadScope,
    pub min_sm: u32,
}

/// The per-lane register layout of one 8 × 8 b16 matrix of `ldmatrix` / `stmatrix`
/// (not transposed): lane l holds row l / 4, columns 2 (l % 4) + {0, 1} — one 8 × 8 block
/// of the mma accumulator layout, which is why accumulators store with `stmatrix` directly.
pub const MATRIX_8X8: AtomLayout =
    AtomLayout { rows: &[lane(8, 1, 4)], cols: &[element(2, 1, 1), lane(4, 2, 1)] };

macro_rules! matrix_atom {
    ($name:expr, $ptx:expr, $kind:expr, $sm:expr) => {
        CopyAtom {
            name: $name,
            ptx: $ptx,
            kind: $kind,
            bytes: 16,
            align: 16,
            asynchronous: false,
            scope: ThreadScope::Warp,
            min_sm: $sm,
        }
    };
}

pub static VECTOR_16: CopyAtom = CopyAtom {
    name: "vector.16",
    ptx: "ld/st.v4.b32",
    kind: CopyKind::Vector,
    bytes: 16,
    align: 16,
    asynchronous: false,
    scope: ThreadScope::Thread,
    min_sm: 0,
};
pub static CP_ASYNC_16: CopyAtom = CopyAtom {
    name: "cp.async.16",
    ptx: "cp.async.cg.shared.global",
    kind: CopyKind::CpAsync,
    bytes: 16,
    align: 16,
    asynchronous: true,
    scope: ThreadScope::Thread,
    min_sm: 80,
};
pub static LDMATRIX_X2: CopyAtom = matrix_atom!(
    "ldmatrix.x2",
    "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
    CopyKind::Ldmatrix { count: 2, trans: false },
    75
);
pub static LDMATRIX_X2_TRANS: CopyAtom = matrix_atom!(
    "ldmatrix.x2.trans",
    "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
    CopyKind::Ldmatrix { count: 2, trans: true },
    75
);
pub static LDMATRIX_X4: CopyAtom = matrix_atom!(
    "ldmatrix.x4",
    "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
    CopyKind::Ldmatrix { count: 4, trans: false },
    75
);
pub static LDMATRIX_X4_TRANS: CopyAtom = matrix_atom!(
    "ldmatrix.x4.trans",
    "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
    CopyKind::Ldmatrix { count: 4, trans: true },
    75
);
pub static STMATRIX_X4: CopyAtom = matrix_atom!(
    "stmatrix.x4",
    "stmatrix.sync.aligned.m8n8.x4.shared.b16",
    CopyKind::Stmatrix { count: 4, trans: false },
    90
);
pub static STMATRIX_X2: CopyAtom = matrix_atom!(
    "stmatrix.x2",
    "stmatrix.sync.aligned.m8n8.x2.shared.b16",
    CopyKind::Stmatrix { count: 2, trans: false },
    90
);

/// Every copy atom, for lookups by name.
pub static COPY_ATOMS: &[&CopyAtom] = &[
    &VECTOR_16,
    &CP_ASYNC_16,
    &LDMATRIX_X2,
    &LDMATRIX_X2_TRANS,
    &LDMATRIX_X4,
    &LDMATRIX_X4_TRANS,
    &STMATRIX_X2,
    &STMATRIX_X4,
];

impl CopyAtom {
    pub fn by_name(name: &str) -> Option<&'static CopyAtom> {
        COPY_ATOMS.iter().copied().find(|a| a.name == name)
    }

    /// The `ldmatrix` atom of `count` matrices.
    pub fn ldmatrix(count: u32, trans: bool) -> &'static CopyAtom {
        COPY_ATOMS
            .iter()
            .copied()
            .find(|a| a.kind == CopyKind::Ldmatrix { count, trans })
            .expect("ldmatrix x2 and x4 are in the table")
    }

    /// The `stmatrix` atom of `count` matrices.
    pub fn stmatrix(count: u32) -> &'static CopyAtom {
        COPY_ATOMS
            .iter()
            .copied()
            .find(|a| a.kind == CopyKind::Stmatrix { count, trans: false })
            .expect("stmatrix x2 and x4 are in the table")
    }
}

impl fmt::Display for CopyAtom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architectures_and_their_capabilities() {
        let a = Target::parse("sm_90a").unwrap();
        let plain = Target::parse("sm_90").unwrap();
        assert!(a.caps.wgmma && a.caps.setmaxnreg && a.caps.tma && a.caps.stmatrix);
        assert!(!plain.caps.wgmma && !plain.caps.setmaxnreg && plain.caps.tma && plain.caps.stmatrix);
        assert_ne!(a, plain);
        let ampere = Target::parse("sm_80").unwrap();
        assert!(ampere.caps.cp_async && !ampere.caps.stmatrix && !ampere.caps.tma);
        assert_eq!(ampere.limits.shared_bytes, 163 * 1024);
        assert_eq!(Target::parse("sm_86").unwrap().limits.shared_bytes, 99 * 1024);
        for bad in ["sm_75", "compute_90", "sm_90b", "90", "sm_"] {
            let e = Target::parse(bad).unwrap_err();
            assert!(e.contains(bad) && e.contains("sm_80"), "{e}");
        }
        assert_eq!(Target::default_gpu().arch, DEFAULT_ARCH);
    }

    /// The atom layouts are the PTX ISA's fragment figures, written out per element.
    #[test]
    fn mma_sync_fragments_match_the_ptx_figures() {
        let f16 = Target::default_gpu().mma_atom(DType::F16).unwrap();
        for l in 0..32 {
            let (g, q) = (l / 4, l % 4);
            for e in 0..8 {
                let row = g + 8 * ((e / 2) % 2);
                let col = 2 * q + e % 2 + 8 * (e / 4);
                assert_eq!(f16.a_layout.coord(l, e), (row, col));
            }
            for e in 0..4 {
                assert_eq!(f16.b_layout.coord(l, e), (2 * q + e % 2 + 8 * (e / 2), g));
                assert_eq!(f16.c_layout.coord(l, e), (g + 8 * (e / 2), 2 * q + e % 2));
            }
        }
        let s8 = Target::default_gpu().mma_atom(DType::I8).unwrap();
        assert_eq!((s8.k, s8.a_bytes(), s8.b_bytes()), (32, 16, 8));
        for l in 0..32 {
            let (g, q) = (l / 4, l % 4);
            for e in 0..16 {
                assert_eq!(s8.a_layout.coord(l, e), (g + 8 * ((e / 4) % 2), 4 * q + e % 4 + 16 * (e / 8)));
            }
            for e in 0..8 {
                assert_eq!(s8.b_layout.coord(l, e), (4 * q + e % 4 + 16 * (e / 4), g));
            }
        }
        // each atom's fragments cover its tiles exactly once
        for atom in MMA_ATOMS {
            for (layout, rows, cols) in [
                (atom.a_layout, atom.m, atom.k),
                (atom.b_layout, atom.k, atom.n),
                (atom.c_layout, atom.m, atom.n),
            ] {
                let mut seen = std::collections::BTreeSet::new();
                for l in 0..32 {
                    for e in 0..layout.elements() {
                        let (r, c) = layout.coord(l, e);
                        assert!(r < rows && c < cols && seen.insert((r, c)), "{}", atom.name);
                    }
                }
                assert_eq!(seen.len() as i64, rows * cols);
            }
        }
    }

    /// The wgmma tables are the PTX figure's formulas, for the accumulator granule and the
    /// register A operand of one k-step.
    #[test]
    fn wgmma_fragments_match_the_ptx_figures() {
        let a = Target::parse("sm_90a").unwrap();
        assert!(Target::parse("sm_90").unwrap().wgmma_atom(DType::F16).is_none());
        assert!(a.wgmma_atom(DType::I8).is_none());
        for dtype in [DType::F16, DType::BF16] {
            let w = a.wgmma_atom(dtype).unwrap();
            assert_eq!((w.m, w.n, w.k, w.scope), (64, 8, 16, ThreadScope::Warpgroup));
            for t in 0..128 {
                let (wp, l) = (t / 32, t % 32);
                for i in 0..4 {
                    let want = (16 * wp + l / 4 + 8 * ((i >> 1) & 1), 2 * (l % 4) + (i & 1));
                    assert_eq!(w.c_layout.coord(t, i), want);
                }
                for i in 0..8 {
                    let want = (16 * wp + l / 4 + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * (l % 4) + (i & 1));
                    assert_eq!(w.a_layout.coord(t, i), want);
                }
            }
            assert!(w.allows_n(256) && w.allows_n(8) && !w.allows_n(264) && !w.allows_n(12));
            let t = if dtype == DType::F16 { "f16" } else { "bf16" };
            assert_eq!(w.ptx_for(128), format!("wgmma.mma_async.sync.aligned.m64n128k16.f32.{t}.{t}"));
        }
    }

    #[test]
    fn atoms_by_name() {
        for atom in MMA_ATOMS {
            assert!(std::ptr::eq(MmaAtom::by_name(atom.name).unwrap(), atom));
        }
        for atom in COPY_ATOMS {
            assert!(std::ptr::eq(CopyAtom::by_name(atom.name).unwrap(), *atom));
        }
        assert!(Target::parse("sm_80").unwrap().has(&LDMATRIX_X4));
        assert!(!Target::parse("sm_80").unwrap().has(&STMATRIX_X4));
        assert!(Target::parse("sm_90").unwrap().has(&STMATRIX_X4));
    }
}
