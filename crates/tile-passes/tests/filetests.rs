//! Pass filetests, as in Cranelift: every `filetests/*.tir` is text IR with directives in
//! `//` comments; the runner parses the IR, runs the one pass the file names, and matches
//! the printed result (docs/architecture.md, "Filetests", describes the format):
//!
//! ```text
//! // run: insert_syncs            the pass, by its name in PIPELINE (required)
//! // target: sm_80                the target (default sm_90a)
//! // options: stmatrix_epilogue    compile options of tile_passes::Options to turn on
//! // CHECK: text                  a later line of the output holds `text`
//! // CHECK-NEXT: text             the line right after the previous match holds it
//! // CHECK-NOT: text              no line between the matches around it holds it
//! // REPORT: text                 a later line of the lowering report holds it
//! // ERROR: text                  the pass fails; its diagnostics hold `text` (after the previous ERROR's)
//! // UNCHANGED                    the pass gives back the module it was given
//! ```
//!
//! Directive lines may stand anywhere (they are blanked before parsing, so line numbers
//! hold); other comments belong before `kernel`, among the declarations or after the
//! kernel's closing brace (among statements a full-line comment is a statement). The output of every pass must also read back
//! from its text. `FILETEST=name cargo test --test filetests` runs the files whose name
//! contains `name`.

use std::path::{Path, PathBuf};
use tile_ir::print::print_module_bare;
use tile_ir::text::{parse_text, without_locations};
use tile_ir::Target;
use tile_passes::{Ctx, Options, PIPELINE};

#[derive(Debug, PartialEq)]
enum Check {
    /// `CHECK`, `CHECK-NEXT`, `CHECK-NOT`.
    Line {
        kind: &'static str,
        text: String,
        at: usize,
    },
    Report {
        text: String,
        at: usize,
    },
    Error {
        text: String,
        at: usize,
    },
}

/// A filetest: its directives and the IR with their lines blanked.
struct FileTest {
    pass: String,
    target: String,
    options: Options,
    unchanged: bool,
    checks: Vec<Check>,
    input: String,
}

const DIRECTIVES: &[&str] =
    &["run", "target", "options", "CHECK", "CHECK-NEXT", "CHECK-NOT", "REPORT", "ERROR", "UNCHANGED"];

fn read_directives(text: &str) -> Result<FileTest, String> {
    let mut t = FileTest {
        pass: String::new(),
        target: "sm_90a".into(),
        options: Options::default(),
        unchanged: false,
        checks: Vec::new(),
        input: String::new(),
    };
    for (n, line) in text.lines().enumerate() {
        let at = n + 1;
        let directive = line.trim_start().strip_prefix("//").map(str::trim_start).and_then(|rest| {
            let (name, value) = rest.split_once(':').unwrap_or((rest.trim_end(), ""));
            DIRECTIVES.contains(&name).then(|| (name, value.trim().to_string()))
        });
        let Some((name, value)) = directive else {
            // a directive spelled wrong would otherwise be a comment that checks nothing
            let word = line.trim_start().strip_prefix("//").map(str::trim_start).unwrap_or("");
            let looks_like_one = word.split(':').next().is_some_and(|w| {
                !w.is_empty() && w.len() < 16 && w.chars().all(|c| c.is_ascii_uppercase() || c == '-')
            });
            if looks_like_one && word.contains(':') {
                return Err(format!(
                    "line {at}: unknown directive '{word}' (directives: {})",
                    DIRECTIVES.join(", ")
                ));
            }
            t.input.push_str(line);
            t.input.push('\n');
            continue;
        };
        t.input.push('\n');
        let needs_text = |v: &String| {
            if v.is_empty() {
                Err(format!("line {at}: {name} needs a text"))
            } else {
                Ok(v.clone())
            }
        };
        match name {
            "run" => t.pass = needs_text(&value)?,
            "target" => t.target = needs_text(&value)?,
            "options" => {
                for option in needs_text(&value)?.split(',').map(str::trim) {
                    match option {
                        "lineinfo" => t.options.lineinfo = true,
                        "fast_math" => t.options.fast_math = true,
                        "stmatrix_epilogue" => t.options.stmatrix_epilogue = true,
                        other => return Err(format!("line {at}: unknown option '{other}'")),
                    }
                }
            }
            "UNCHANGED" => t.unchanged = true,
            "REPORT" => t.checks.push(Check::Report { text: needs_text(&value)?, at }),
            "ERROR" => t.checks.push(Check::Error { text: needs_text(&value)?, at }),
            kind => {
                let kind = DIRECTIVES.iter().find(|d| **d == kind).copied().unwrap_or("CHECK");
                t.checks.push(Check::Line { kind, text: needs_text(&value)?, at })
            }
        }
    }
    if t.pass.is_empty() {
        return Err("no '// run: <pass>' line".into());
    }
    Ok(t)
}

/// Match `CHECK` / `CHECK-NEXT` / `CHECK-NOT` lines against `output`, in order.
fn match_lines(checks: &[&Check], output: &str) -> Result<(), String> {
    let lines: Vec<&str> = output.lines().collect();
    let mut next = 0; // the first line a CHECK may match
    let mut nots: Vec<(&str, usize)> = Vec::new();
    let check_nots = |nots: &mut Vec<(&str, usize)>, from: usize, to: usize| -> Result<(), String> {
        for (text, at) in nots.drain(..) {
            if let Some(k) = (from..to).find(|k| lines[*k].contains(text)) {
                return Err(format!(
                    "CHECK-NOT at line {at} ({text:?}) is on output line {}: {}",
                    k + 1,
                    lines[k]
                ));
            }
        }
        Ok(())
    };
    for c in checks {
        let Check::Line { kind, text, at } = c else { continue };
        match *kind {
            "CHECK-NOT" => nots.push((text, *at)),
            "CHECK-NEXT" => {
                if next == 0 || next >= lines.len() || !lines[next].contains(text.as_str()) {
                    let found = lines.get(next).copied().unwrap_or("(the end)");
                    return Err(format!(
                        "CHECK-NEXT at line {at} ({text:?}) is not on the line after the previous match; that line is: {found}"
                    ));
                }
                check_nots(&mut nots, next, next)?;
                next += 1;
            }
            _ => {
                let Some(k) = (next..lines.len()).find(|k| lines[*k].contains(text.as_str())) else {
                    let after = if next == 0 { String::new() } else { format!(" after output line {next}") };
                    return Err(format!("CHECK at line {at} not found{after}: {text:?}"));
                };
                check_nots(&mut nots, next, k)?;
                next = k + 1;
            }
        }
    }
    check_nots(&mut nots, next, lines.len())
}

/// `texts`, in order, each on a later line of `lines` than the previous one.
fn match_in_order<'a>(
    what: &str,
    texts: impl Iterator<Item = (&'a str, usize)>,
    lines: &[String],
) -> Result<(), String> {
    let mut next = 0;
    for (text, at) in texts {
        match (next..lines.len()).find(|k| lines[*k].contains(text)) {
            Some(k) => next = k + 1,
            None => return Err(format!("{what} at line {at} not found: {text:?}")),
        }
    }
    Ok(())
}

/// Run one filetest; the error says which directive failed and shows what the pass gave.
fn run_filetest(text: &str) -> Result<(), String> {
    let t = read_directives(text)?;
    let Some((_, pass)) = PIPELINE.iter().find(|(name, _)| *name == t.pass) else {
        let names: Vec<&str> = PIPELINE.iter().map(|(n, _)| *n).collect();
        return Err(format!("no pass named '{}'; the pipeline has {}", t.pass, names.join(", ")));
    };
    let target = Target::parse(&t.target)?;
    let input = parse_text(&t.input).map_err(|e| format!("the input does not parse: {e}"))?;
    let mut ctx = Ctx::new(target, t.options.clone());
    let errors: Vec<&Check> = t.checks.iter().filter(|c| matches!(c, Check::Error { .. })).collect();
    let output = match pass(input.clone(), &mut ctx) {
        Err(diags) => {
            let rendered = tile_ir::diag::render_all(&diags, &input.sources);
            if errors.is_empty() {
                return Err(format!("{} failed:\n{rendered}", t.pass));
            }
            // in order through the rendered text (a message holds several facts on one line)
            let mut from = 0;
            for c in &errors {
                let Check::Error { text, at } = c else { continue };
                match rendered[from..].find(text.as_str()) {
                    Some(k) => from += k + text.len(),
                    None => {
                        return Err(format!(
                            "ERROR at line {at} not found: {text:?}\ndiagnostics:\n{rendered}"
                        ))
                    }
                }
            }
            return Ok(());
        }
        Ok(m) => m,
    };
    let printed = print_module_bare(&output);
    let show = |e: String| format!("{e}\noutput of {}:\n{printed}", t.pass);
    if !errors.is_empty() {
        return Err(show(format!("{} succeeded, but the file expects an ERROR", t.pass)));
    }
    match parse_text(&printed) {
        Ok(again) if again == without_locations(output.clone()) => {}
        Ok(_) => return Err(show("the output does not read back from its text as the same module".into())),
        Err(e) => return Err(show(format!("the output does not read back from its text: {e}"))),
    }
    if t.unchanged && output != input {
        return Err(show(format!(
            "UNCHANGED, but {} changed the module; its input:\n{}",
            t.pass,
            print_module_bare(&input)
        )));
    }
    let line_checks: Vec<&Check> = t.checks.iter().filter(|c| matches!(c, Check::Line { .. })).collect();
    match_lines(&line_checks, &printed).map_err(show)?;
    let reports = t.checks.iter().filter_map(|c| match c {
        Check::Report { text, at } => Some((text.as_str(), *at)),
        _ => None,
    });
    match_in_order("REPORT", reports, &ctx.report)
        .map_err(|e| format!("{e}\nreport:\n{}", ctx.report.join("\n")))
}

fn filetests() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("filetests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tir"))
        .collect();
    files.sort();
    files
}

#[test]
fn filetests_pass() {
    let only = std::env::var("FILETEST").unwrap_or_default();
    let mut failures = Vec::new();
    let mut ran = 0;
    for path in filetests() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.contains(&only) {
            continue;
        }
        ran += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        if let Err(e) = run_filetest(&text) {
            failures.push(format!("filetests/{name}: {e}"));
        }
    }
    assert!(ran > 0, "no filetest matches FILETEST={only:?}");
    assert!(
        failures.is_empty(),
        "{} of {ran} filetests failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Every pass of the pipeline has a filetest (`// run: <pass>`).
#[test]
fn every_pass_has_a_filetest() {
    let runs: Vec<String> = filetests()
        .iter()
        .filter_map(|p| read_directives(&std::fs::read_to_string(p).unwrap()).ok())
        .map(|t| t.pass)
        .collect();
    for (name, _) in PIPELINE {
        assert!(runs.iter().any(|r| r == name), "no filetest runs {name}");
    }
}

/// A filetest for the runner's own tests: a shared write, then a read of it.
const SYNCS: &str = "// run: insert_syncs
kernel k(A: float32[64], B: float32[64]) blocks(%bx) grid(1) threads=64 level=tile {
  shared S: float32[64]
  copy A[0:+] -> S[] by threads
  copy S[] -> B[0:+] by threads
}
";

#[test]
fn wrong_checks_fail_and_say_which() {
    assert_eq!(
        run_filetest(&format!("{SYNCS}// CHECK: copy A\n// CHECK-NEXT: sync\n// CHECK: copy S")),
        Ok(())
    );
    let missing = run_filetest(&format!("{SYNCS}// CHECK: copy A\n// CHECK: fence")).unwrap_err();
    assert!(missing.starts_with("CHECK at line 8 not found after output line 3: \"fence\""), "{missing}");
    assert!(missing.contains("output of insert_syncs:\nkernel k("), "the output is shown: {missing}");
    // order matters
    let order = run_filetest(&format!("{SYNCS}// CHECK: copy S\n// CHECK: copy A")).unwrap_err();
    assert!(order.contains("CHECK at line 8 not found"), "{order}");
    let next = run_filetest(&format!("{SYNCS}// CHECK: copy A\n// CHECK-NEXT: copy S")).unwrap_err();
    assert!(next.contains("CHECK-NEXT at line 8") && next.contains("that line is:   sync"), "{next}");
    let not =
        run_filetest(&format!("{SYNCS}// CHECK: copy A\n// CHECK-NOT: sync\n// CHECK: copy S")).unwrap_err();
    assert!(not.contains("CHECK-NOT at line 8 (\"sync\") is on output line 4"), "{not}");
    let error = run_filetest(&format!("{SYNCS}// ERROR: race")).unwrap_err();
    assert!(error.contains("succeeded, but the file expects an ERROR"), "{error}");
    let report = run_filetest(&format!("{SYNCS}// REPORT: cp.async")).unwrap_err();
    assert!(report.contains("REPORT at line 7 not found"), "{report}");
    let unchanged = run_filetest(&format!("{SYNCS}// UNCHANGED")).unwrap_err();
    assert!(unchanged.contains("UNCHANGED, but insert_syncs changed the module"), "{unchanged}");
    let typo = run_filetest(&format!("{SYNCS}// CHECK-NXT: sync")).unwrap_err();
    assert!(typo.contains("unknown directive 'CHECK-NXT: sync'"), "{typo}");
    let no_pass = run_filetest(&SYNCS.replace("insert_syncs", "insert_sync")).unwrap_err();
    assert!(no_pass.contains("no pass named 'insert_sync'"), "{no_pass}");
}
