//! NVRTC loaded at run time (no link-time dependency), to turn CUDA source into a cubin.
//!
//! Looked up, in order: `$TILERS_NVRTC` (a path to libnvrtc), the loader's search path
//! (`libnvrtc.so.13`, `.12`, `libnvrtc.so`), and the `nvidia/cu13/lib` or
//! `nvidia/cuda_nvrtc/lib` folders of Python's site-packages when `$TILERS_SITE_PACKAGES`
//! names them. The Python package compiles through cuda-bindings instead; both pass the same
//! options, so both give the same cubin for the same source.

use libloading::{Library, Symbol};
use std::ffi::{c_char, c_int, CStr, CString};
use std::path::PathBuf;

type Program = *mut std::ffi::c_void;

fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("TILERS_NVRTC") {
        out.push(PathBuf::from(p));
    }
    for name in ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"] {
        out.push(PathBuf::from(name));
    }
    let mut sites: Vec<PathBuf> =
        std::env::var_os("TILERS_SITE_PACKAGES").map(PathBuf::from).into_iter().collect();
    // an activated virtualenv: its site-packages holds the nvidia-cuda-nvrtc wheel
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        if let Ok(entries) = std::fs::read_dir(PathBuf::from(venv).join("lib")) {
            let mut dirs: Vec<PathBuf> =
                entries.filter_map(|e| e.ok()).map(|e| e.path().join("site-packages")).collect();
            dirs.sort();
            sites.extend(dirs);
        }
    }
    for site in sites {
        for sub in ["nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12"] {
            out.push(site.join(sub));
        }
    }
    out
}

/// NVRTC and the builtins library it opens by name at compile time.
pub struct Nvrtc {
    lib: Library,
    _builtins: Vec<Library>,
}

impl std::ops::Deref for Nvrtc {
    type Target = Library;
    fn deref(&self) -> &Library {
        &self.lib
    }
}

pub fn load() -> Result<Nvrtc, String> {
    let mut tried = Vec::new();
    for c in candidates() {
        // NVRTC dlopens libnvrtc-builtins by name; loaded first from the same folder, the
        // loader finds it already there when the folder is not on the search path.
        let mut builtins = Vec::new();
        if let Some(dir) = c.parent().filter(|d| !d.as_os_str().is_empty()) {
            let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
                .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
                .unwrap_or_default();
            found.retain(|p| {
                p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libnvrtc-builtins.so"))
            });
            found.sort();
            for b in found {
                // SAFETY: as below; the builtins library has no initialisers with preconditions.
                if let Ok(lib) = unsafe { Library::new(&b) } {
                    builtins.push(lib);
                }
            }
        }
        // SAFETY: loading NVRTC runs its initialisers, which have no preconditions.
        match unsafe { Library::new(&c) } {
            Ok(lib) => return Ok(Nvrtc { lib, _builtins: builtins }),
            Err(_) => tried.push(c.display().to_string()),
        }
    }
    Err(format!("NVRTC not found (tried {}); set TILERS_NVRTC to libnvrtc's path", tried.join(", ")))
}

/// Compile `source` for `arch` (e.g. `sm_90a`) to a cubin.
pub fn compile_cubin(
    lib: &Library,
    source: &str,
    name: &str,
    arch: &str,
    extra: &[String],
) -> Result<Vec<u8>, String> {
    // SAFETY: the symbols have the signatures of NVRTC's C API (nvrtc.h), every pointer
    // passed lives across the call, and the program is destroyed on every path.
    unsafe {
        let create: Symbol<
            unsafe extern "C" fn(
                *mut Program,
                *const c_char,
                *const c_char,
                c_int,
                *const *const c_char,
                *const *const c_char,
            ) -> c_int,
        > = lib.get(b"nvrtcCreateProgram").map_err(|e| e.to_string())?;
        let compile: Symbol<unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int> =
            lib.get(b"nvrtcCompileProgram").map_err(|e| e.to_string())?;
        let log_size: Symbol<unsafe extern "C" fn(Program, *mut usize) -> c_int> =
            lib.get(b"nvrtcGetProgramLogSize").map_err(|e| e.to_string())?;
        let get_log: Symbol<unsafe extern "C" fn(Program, *mut c_char) -> c_int> =
            lib.get(b"nvrtcGetProgramLog").map_err(|e| e.to_string())?;
        let cubin_size: Symbol<unsafe extern "C" fn(Program, *mut usize) -> c_int> =
            lib.get(b"nvrtcGetCUBINSize").map_err(|e| e.to_string())?;
        let get_cubin: Symbol<unsafe extern "C" fn(Program, *mut c_char) -> c_int> =
            lib.get(b"nvrtcGetCUBIN").map_err(|e| e.to_string())?;
        let destroy: Symbol<unsafe extern "C" fn(*mut Program) -> c_int> =
            lib.get(b"nvrtcDestroyProgram").map_err(|e| e.to_string())?;

        let src = CString::new(source).map_err(|e| e.to_string())?;
        let cname = CString::new(format!("{name}.cu")).map_err(|e| e.to_string())?;
        let mut prog: Program = std::ptr::null_mut();
        if create(&mut prog, src.as_ptr(), cname.as_ptr(), 0, std::ptr::null(), std::ptr::null()) != 0 {
            return Err("nvrtcCreateProgram failed".into());
        }
        let mut opts: Vec<CString> =
            vec![CString::new(format!("-arch={arch}")).unwrap(), CString::new("-std=c++17").unwrap()];
        opts.extend(extra.iter().filter_map(|o| CString::new(o.as_str()).ok()));
        let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let rc = compile(prog, ptrs.len() as c_int, ptrs.as_ptr());
        let mut result = Err(String::new());
        if rc != 0 {
            let mut n = 0usize;
            log_size(prog, &mut n);
            let mut buf = vec![0 as c_char; n.max(1)];
            get_log(prog, buf.as_mut_ptr());
            let log = CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            result = Err(format!("NVRTC failed to compile the generated CUDA (a tilers bug):\n{log}"));
        } else {
            let mut n = 0usize;
            if cubin_size(prog, &mut n) == 0 {
                let mut buf = vec![0u8; n];
                if get_cubin(prog, buf.as_mut_ptr() as *mut c_char) == 0 {
                    result = Ok(buf);
                }
            }
        }
        destroy(&mut prog);
        result
    }
}
