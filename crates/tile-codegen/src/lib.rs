//! Back ends: a verified thread-level module in, source text plus the KernelInfo launch
//! recipe out. `Cuda` writes CUDA C++ (`cuda/`); a direct-PTX writer would implement
//! [`Backend`] beside it, sharing the PTX spellings of the target's atom tables.

mod cuda;
pub mod kernel_info;
mod names;

pub use kernel_info::{param_info, KernelInfo};
use tile_ir::*;

pub struct CudaKernel {
    pub source: String,
    /// The launch recipe (docs/format.md).
    pub info: KernelInfo,
}

#[derive(Clone, Debug, Default)]
pub struct CodegenOptions {
    /// Attribute the code to the user's Python lines with `#line` directives.
    pub lineinfo: bool,
}

/// Something that turns a lowered module into a program for a target.
pub trait Backend {
    /// Source text and launch recipe of a thread-level module; `report` is the lowering
    /// report KernelInfo carries.
    fn emit(
        &self,
        m: &Module,
        target: &Target,
        opts: &CodegenOptions,
        report: &[String],
    ) -> Result<CudaKernel, Diagnostic>;
}

/// The CUDA C++ back end (compiled with NVRTC).
pub struct Cuda;

impl Backend for Cuda {
    fn emit(
        &self,
        m: &Module,
        target: &Target,
        opts: &CodegenOptions,
        report: &[String],
    ) -> Result<CudaKernel, Diagnostic> {
        if m.level != Level::Thread {
            return Err(Diagnostic::bug("the CUDA writer needs thread-level IR"));
        }
        let entry = format!("{}_kernel", names::Namer::new(m).kernel_name(&m.name));
        let source = cuda::write_kernel(m, target, opts, &entry)?;
        let info = kernel_info::kernel_info(m, &target.arch, &entry, report)?;
        Ok(CudaKernel { source, info })
    }
}

/// [`Cuda`]'s output for `m` on `target`.
pub fn emit_cuda(
    m: &Module,
    target: &Target,
    opts: &CodegenOptions,
    report: &[String],
) -> Result<CudaKernel, Diagnostic> {
    Cuda.emit(m, target, opts, report)
}
