//! How a block's threads take turns: each warpgroup (128 consecutive threads, or the whole
//! block when it is smaller) runs on its own, its place in the kernel a stack of frames,
//! until it reaches a barrier or a wait (`wgmma_wait`, `async_wait`); then the next one
//! runs. Warpgroups take turns round-robin, the first of each barrier interval rotating
//! (warpgroup `p % n` first in interval `p`), so each ordering of two warpgroups occurs.
//! A barrier completes when every thread of the block has reached one — not necessarily
//! the same statement, as `bar.sync 0` on the GPU (warp-specialized branches each have
//! their own) — and is a deadlock when every warpgroup waits or has finished before that.
//! Inside a warpgroup the threads still run in lockstep, a statement at a time, and an
//! `if` on thread coordinates runs its `then` threads before its `else` threads.

use super::*;
use std::rc::Rc;

/// One level of a warpgroup's place in the body.
enum Frame<'m> {
    /// Statements run by `active`, `next` the one to run.
    Block { stmts: &'m [Stmt], next: usize, active: Rc<Vec<u32>> },
    /// A loop: iteration `j` of `longest`, each thread `k` of `active` running iterations
    /// `start[k] ..+ extent[k]`.
    Loop {
        var: tile_ir::VarId,
        body: &'m [Stmt],
        start: Vec<i64>,
        extent: Vec<i64>,
        j: i64,
        active: Rc<Vec<u32>>,
    },
    /// The `else` of an `if`, for its threads once the `then` is done.
    Else { stmts: &'m [Stmt], active: Rc<Vec<u32>> },
}

/// Why a warpgroup stopped running.
enum Stop {
    Done,
    /// At a barrier, reached by these threads.
    Barrier(Rc<Vec<u32>>),
    /// Past a wait: others may run first.
    Yield,
}

/// A warpgroup's run: where it is, the last comment it passed (error messages name it),
/// and the threads it has at a barrier, if it waits at one.
struct Unit<'m> {
    frames: Vec<Frame<'m>>,
    context: String,
    at_barrier: Option<Rc<Vec<u32>>>,
    done: bool,
}

impl<'m> Machine<'m> {
    /// Run the kernel body once for the current block.
    pub(super) fn run_block(&mut self) -> Result<(), Diagnostic> {
        let body: &'m [Stmt] = &self.m.kernel.body;
        let threads = self.threads as u32;
        let mut units: Vec<Unit<'m>> = (0..threads.div_ceil(128))
            .map(|g| Unit {
                frames: vec![Frame::Block {
                    stmts: body,
                    next: 0,
                    active: Rc::new((128 * g..(128 * g + 128).min(threads)).collect()),
                }],
                context: String::new(),
                at_barrier: None,
                done: false,
            })
            .collect();
        let n = units.len();
        let mut interval = 0;
        loop {
            // turns until every warpgroup waits at a barrier or is done
            let mut ran = true;
            while ran {
                ran = false;
                for i in 0..n {
                    let u = &mut units[(i + interval) % n];
                    if u.done || u.at_barrier.is_some() {
                        continue;
                    }
                    ran = true;
                    std::mem::swap(&mut self.context, &mut u.context);
                    let stop = self.run_unit(&mut u.frames);
                    std::mem::swap(&mut self.context, &mut u.context);
                    // (an error was written with the warpgroup's context)
                    match stop? {
                        Stop::Done => u.done = true,
                        Stop::Barrier(arrived) => u.at_barrier = Some(arrived),
                        Stop::Yield => {}
                    }
                }
            }
            if units.iter().all(|u| u.done) {
                return Ok(());
            }
            let mut arrived: Vec<u32> =
                units.iter().filter_map(|u| u.at_barrier.as_ref()).flat_map(|a| a.iter().copied()).collect();
            arrived.sort_unstable();
            if arrived.len() != self.threads {
                self.context = units
                    .iter()
                    .find(|u| u.at_barrier.is_some())
                    .map(|u| u.context.clone())
                    .unwrap_or_default();
                return Err(self.err(format!(
                    "deadlock: barrier reached by threads {} of {} (the others never arrive)",
                    ranges(&arrived),
                    self.threads
                )));
            }
            self.epoch += 1;
            interval += 1;
            for u in &mut units {
                u.at_barrier = None;
            }
        }
    }

    /// Run one warpgroup from where it is to its next barrier, wait or end.
    fn run_unit(&mut self, frames: &mut Vec<Frame<'m>>) -> Result<Stop, Diagnostic> {
        loop {
            let (s, active) = match frames.last_mut() {
                None => return Ok(Stop::Done),
                Some(Frame::Block { stmts, next, active }) if *next < stmts.len() && !active.is_empty() => {
                    *next += 1;
                    (&stmts[*next - 1], active.clone())
                }
                Some(_) => {
                    self.end_frame(frames);
                    continue;
                }
            };
            match s {
                Stmt::For { var, start, extent, body, .. } => {
                    let start = self.eval(start, &active)?.iter().map(|v| v.as_i64()).collect();
                    let extent = self.eval(extent, &active)?.iter().map(|v| v.as_i64()).collect();
                    frames.push(Frame::Loop { var: *var, body, start, extent, j: -1, active });
                    self.next_iteration(frames);
                }
                Stmt::If { cond, then, otherwise, .. } => {
                    let c = self.eval(cond, &active)?;
                    let (mut yes, mut no) = (Vec::new(), Vec::new());
                    for (&t, v) in active.iter().zip(&c) {
                        if v.as_i64() != 0 {
                            yes.push(t)
                        } else {
                            no.push(t)
                        }
                    }
                    frames.push(Frame::Else { stmts: otherwise, active: Rc::new(no) });
                    frames.push(Frame::Block { stmts: then, next: 0, active: Rc::new(yes) });
                }
                Stmt::Inst(Inst::Sync(_)) => return Ok(Stop::Barrier(active)),
                Stmt::Inst(Inst::WgmmaWait(_) | Inst::AsyncWait(_)) => {
                    self.stmt(s, &active)?;
                    return Ok(Stop::Yield);
                }
                _ => self.stmt(s, &active)?,
            }
        }
    }

    /// The top frame is done: a block returns to its loop (next iteration) or `if` (its
    /// `else`); a loop past its last iteration and an `else` are done too.
    fn end_frame(&mut self, frames: &mut Vec<Frame<'m>>) {
        match frames.pop() {
            Some(Frame::Block { .. }) => match frames.last_mut() {
                Some(Frame::Loop { .. }) => self.next_iteration(frames),
                Some(Frame::Else { stmts, active }) => {
                    let (stmts, active) = (*stmts, active.clone());
                    *frames.last_mut().expect("the else") = Frame::Block { stmts, next: 0, active };
                }
                _ => {}
            },
            Some(Frame::Else { .. } | Frame::Loop { .. }) | None => {}
        }
    }

    /// Start the next iteration of the loop on top: bind its variable for the threads that
    /// run it and push its body, or pop the loop when no thread has more.
    fn next_iteration(&mut self, frames: &mut Vec<Frame<'m>>) {
        let Some(Frame::Loop { var, body, start, extent, j, active }) = frames.last_mut() else {
            unreachable!("a loop on top")
        };
        *j += 1;
        let (var, body, j) = (*var, *body, *j);
        let now: Rc<Vec<u32>> = if extent.iter().all(|&e| j < e) {
            active.clone()
        } else {
            Rc::new(active.iter().zip(extent.iter()).filter(|(_, &e)| j < e).map(|(&t, _)| t).collect())
        };
        if now.is_empty() {
            // past the last iteration: the block holding the loop goes on
            frames.pop();
            return;
        }
        let values: Vec<Val> = active
            .iter()
            .zip(extent.iter().zip(start.iter()))
            .filter(|(_, (&e, _))| j < e)
            .map(|(_, (_, &s))| Val::I(s + j))
            .collect();
        self.bind(var, &now, &values);
        frames.push(Frame::Block { stmts: body, next: 0, active: now });
    }
}
