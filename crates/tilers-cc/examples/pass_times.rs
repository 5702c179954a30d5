//! Time each pass (and code generation) of a serialized program: `cargo run --release
//! --example pass_times PROGRAM.json [ARCH]`, the median of 200 compiles.
use std::time::Instant;
use tile_passes::{Ctx, Options, Target};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let text = std::fs::read_to_string(&args[1]).expect("a program file");
    let arch = args.get(2).map(String::as_str).unwrap_or(tile_ir::target::DEFAULT_ARCH);
    let target = Target::parse(arch).expect("an architecture");
    let mut times: Vec<Vec<f64>> = Vec::new();
    let mut names = vec!["parse".to_string()];
    for round in 0..200 {
        let t = Instant::now();
        let m = tile_ir::parse::parse_program(&text).expect("a program");
        let mut row = vec![t.elapsed().as_secs_f64()];
        let mut ctx = Ctx::new(target.clone(), Options::default());
        let mut last = Instant::now();
        let mut dump = |name: &str, _: &tile_ir::Module| {
            if name != "input" {
                row.push(last.elapsed().as_secs_f64());
                if round == 0 {
                    names.push(name.to_string());
                }
            }
            last = Instant::now();
        };
        let lowered = tile_passes::run(m, &mut ctx, Some(&mut dump)).expect("compiles");
        let t = Instant::now();
        tile_codegen::emit_cuda(&lowered, &target, &Default::default(), &ctx.report).expect("codegen");
        row.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let _ =
            tile_codegen::kernel_info::kernel_info(&lowered, &target.arch, "k", &ctx.report).expect("info");
        row.push(t.elapsed().as_secs_f64());
        if round == 0 {
            names.push("codegen".into());
            names.push("  of which kernel_info".into());
        }
        times.push(row);
    }
    for (k, name) in names.iter().enumerate() {
        let mut v: Vec<f64> = times.iter().map(|r| r[k]).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("{name:20} {:8.1} us", v[v.len() / 2] * 1e6);
    }
}
