//! The tilers IR: one structured IR used at two levels.
//!
//! A [`Module`] holds one kernel: its parameters, the buffers it touches, the scalar
//! variables it binds and a body of statements. Everything is referred to by typed ids
//! into arenas ([`BufferId`], [`VarId`]); source locations live beside the nodes.
//!
//! **Tile level** (what the user wrote, read from the serialized program by [`parse`]):
//! - buffers have a scope: `global` (a tensor parameter), `shared` (one copy per block),
//!   `fragment` (a tile spread over the block's threads' registers) or `local` (per thread);
//!   shapes are compile-time constants, row-major;
//! - statements: `copy` between regions, `fill`, `reduce`, element `store`/`atomic_add`,
//!   `parallel` loops (every iteration independent, mapped onto threads by the compiler),
//!   `for` loops (serial, unrolled or pipelined) and `if`; for debugging, `print` (a value
//!   or a tile) and `device_assert`;
//! - statements outside a `parallel` loop run once per block: stores to global or shared
//!   memory there are made by one thread; reads are made by all — except statements that
//!   depend on the thread index ([`per_thread`]), which every thread runs, as in CUDA.
//!
//! **Thread level** (after `tile_passes::lower_tile_ops`): the body is what one thread
//! executes. Fragments have become per-thread register arrays (scope `local`), parallel
//! loops have become per-thread loops over register slots, copies have become vector loads
//! and stores, reductions have become register folds and warp shuffles, and `sync`
//! statements order shared memory; prints and asserts have become [`Stmt::Printf`] and
//! [`Stmt::Trap`]. Only thread-level statements ([`Stmt::Let`], [`Stmt::VecCopy`],
//! [`Stmt::Sync`], [`Stmt::Comment`], [`Stmt::Printf`], [`Stmt::Trap`],
//! [`Stmt::SourceLine`], …) and
//! expressions ([`Expr::ShflXor`], the `thread_idx` variable) appear there.
//!
//! Evaluation order is program order; expressions have no side effects.

pub mod arith;
pub mod diag;
pub mod inst;
pub mod ir;
pub mod layout;
pub mod parse;
pub mod per_thread;
pub mod print;
pub mod serialize;
pub mod shared_layout;
pub mod simplify;
pub mod target;
pub mod text;
pub mod types;
pub mod verify;

pub use diag::{Diagnostic, Diagnostics, Loc, SourceTable};
pub use inst::{Inst, Instruction};
pub use ir::*;
pub use layout::{Digit, FragmentLayout, Source};
pub use per_thread::PerThread;
pub use shared_layout::{MatrixDescriptor, SharedLayout, Swizzle};
pub use target::{CopyAtom, MmaAtom, Target};
pub use types::{DType, Scope};
