//! The text IR reads back what every pass writes: for every fixture program, on sm_80 and
//! sm_90a, with and without `lineinfo`, `parse_text(print_module_bare(m))` is `m` (source
//! locations aside, see `tile_ir::text`) after every pass of the pipeline, at both levels.

use std::path::Path;
use tile_ir::print::{print_module, print_module_bare};
use tile_ir::text::{parse_text, without_locations};
use tile_ir::{Module, Target};
use tile_passes::{Ctx, Options};

fn fixtures() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tilers-cc/tests/programs");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().to_string(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    v.sort();
    assert!(v.len() >= 10);
    v
}

/// The first difference between two modules' Debug forms, with some context.
fn first_difference(want: &Module, got: &Module) -> String {
    let (a, b) = (format!("{want:#?}"), format!("{got:#?}"));
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let at = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
    let from = at.saturating_sub(8);
    format!(
        "want:\n{}\ngot:\n{}",
        a[from..(at + 4).min(a.len())].join("\n"),
        b[from..(at + 4).min(b.len())].join("\n")
    )
}

#[test]
fn every_pass_output_reads_back_from_its_text() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for (name, json) in fixtures() {
        let input = tile_ir::parse::parse_program(&json).unwrap_or_else(|e| panic!("{name}: {e}"));
        for arch in ["sm_80", "sm_90a"] {
            for lineinfo in [false, true] {
                let options = Options { lineinfo, ..Options::default() };
                let mut ctx = Ctx::new(Target::parse(arch).unwrap(), options);
                let mut check = |pass: &str, m: &Module| {
                    checked += 1;
                    let text = print_module_bare(m);
                    let what = format!("{name} ({arch}, lineinfo={lineinfo}) after {pass}");
                    match parse_text(&text) {
                        Err(e) => failures.push(format!("{what}: {e}\n{text}")),
                        Ok(parsed) => {
                            let want = without_locations(m.clone());
                            if parsed != want {
                                failures
                                    .push(format!("{what}: differs\n{}", first_difference(&want, &parsed)));
                            }
                        }
                    }
                    // the dump form (with locations in comments) reads back too
                    if let Err(e) = parse_text(&print_module(m)) {
                        failures.push(format!("{what}, with locations: {e}"));
                    }
                };
                tile_passes::run(input.clone(), &mut ctx, Some(&mut check))
                    .unwrap_or_else(|_| panic!("{name} does not compile for {arch}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} modules do not round-trip:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
