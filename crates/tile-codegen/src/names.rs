//! Turning user names into unique, safe C identifiers, deterministically (by id order).

use std::collections::BTreeSet;
use tile_ir::{BufferId, Module, VarId};

const RESERVED: &[&str] = &[
    "auto",
    "bool",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "class",
    "new",
    "delete",
    "this",
    "template",
    "namespace",
    "private",
    "public",
    "true",
    "false",
    "max",
    "min",
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "asm",
    "uint4",
    "uint2",
];

pub struct Namer {
    vars: Vec<String>,
    buffers: Vec<String>,
}

fn sanitize(name: &str) -> String {
    let mut s: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, 'v');
    }
    if RESERVED.contains(&s.as_str()) || s.starts_with("tl_") || s.starts_with("__") {
        s.insert_str(0, "u_");
    }
    s
}

impl Namer {
    pub fn new(m: &Module) -> Namer {
        let mut taken = BTreeSet::new();
        let mut unique = |name: &str| {
            let base = sanitize(name);
            let mut candidate = base.clone();
            let mut k = 1;
            while !taken.insert(candidate.clone()) {
                candidate = format!("{base}_{k}");
                k += 1;
            }
            candidate
        };
        let buffers = m.buffers.iter().map(|b| unique(&b.name)).collect();
        let vars = m.vars.iter().map(|v| unique(&v.name)).collect();
        Namer { vars, buffers }
    }
    pub fn var(&self, v: VarId) -> String {
        self.vars[v.0 as usize].clone()
    }
    pub fn buffer(&self, b: BufferId) -> String {
        self.buffers[b.0 as usize].clone()
    }
    pub fn kernel_name(&self, name: &str) -> String {
        sanitize(name)
    }
}
