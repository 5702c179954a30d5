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

/// One CUDA source and KernelInfo for the kernels of a prim_func of several `T.Kernel`s,
/// launched in this order by one call: each lowered module (with its lowering report)
/// becomes a `__global__` function, `{name}_kernel`, then `{name}_kernel_1`, … (one kernel:
/// [`emit_cuda`]'s output); the first kernel's KernelInfo lists the others in `then`.
pub fn emit_cuda_kernels(
    kernels: &[(Module, Vec<String>)],
    target: &Target,
    opts: &CodegenOptions,
) -> Result<CudaKernel, Diagnostic> {
    let Some((first, _)) = kernels.first() else {
        return Err(Diagnostic::bug("a program without kernels"));
    };
    if kernels.len() == 1 {
        return emit_cuda(first, target, opts, &kernels[0].1);
    }
    let base = format!("{}_kernel", names::Namer::new(first).kernel_name(&first.name));
    let mut entries = Vec::new();
    let mut infos = Vec::new();
    for (k, (m, report)) in kernels.iter().enumerate() {
        if m.level != Level::Thread {
            return Err(Diagnostic::bug("the CUDA writer needs thread-level IR"));
        }
        let entry = if k == 0 { base.clone() } else { format!("{base}_{k}") };
        infos.push(kernel_info::kernel_info(m, &target.arch, &entry, report)?);
        entries.push(entry);
    }
    let list: Vec<(&Module, &str)> =
        kernels.iter().zip(&entries).map(|((m, _), e)| (m, e.as_str())).collect();
    let source = cuda::write_kernels(&list, target, opts)?;
    let mut info = infos.remove(0);
    // a tensor written by any kernel is an output of the call
    for later in &infos {
        for (p, q) in info.params.iter_mut().zip(&later.params) {
            if let (
                kernel_info::ParamInfo::Tensor { written, .. },
                kernel_info::ParamInfo::Tensor { written: also, .. },
            ) = (p, q)
            {
                *written |= *also;
            }
        }
    }
    for later in &mut infos {
        later.params = info.params.clone();
    }
    info.then = infos;
    Ok(CudaKernel { source, info })
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
