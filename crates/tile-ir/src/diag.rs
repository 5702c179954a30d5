//! Source locations and user-facing diagnostics, rendered with the user's source line.

use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label};
use codespan_reporting::files::SimpleFiles;
use codespan_reporting::term::{self, termcolor::NoColor, Chars, Config};
use std::collections::BTreeMap;

/// A position in the user's Python source: `source` indexes [`SourceTable::files`];
/// line and column are 1-based (column 0 = unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Loc {
    pub source: u32,
    pub line: u32,
    pub col: u32,
}

impl Loc {
    pub const UNKNOWN: Loc = Loc { source: u32::MAX, line: 0, col: 0 };
    pub fn is_known(&self) -> bool {
        self.source != u32::MAX && self.line > 0
    }
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct SourceFile {
    pub file: String,
    /// The lines locations refer to, by 1-based line number.
    pub lines: BTreeMap<u32, String>,
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct SourceTable {
    pub files: Vec<SourceFile>,
}

impl SourceTable {
    pub fn file(&self, loc: Loc) -> Option<&SourceFile> {
        if loc.is_known() {
            self.files.get(loc.source as usize)
        } else {
            None
        }
    }

    /// `name.py:42` — file name only, so generated code does not depend on where a checkout lives.
    pub fn short(&self, loc: Loc) -> Option<String> {
        let file = self.file(loc)?;
        let name = file.file.rsplit(['/', '\\']).next().unwrap_or(&file.file);
        Some(format!("{}:{}", name, loc.line))
    }

    pub fn line_text(&self, loc: Loc) -> Option<&str> {
        self.file(loc)?.lines.get(&loc.line).map(|s| s.as_str())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Error,
    /// A failure of the compiler itself, not of the user's program.
    Bug,
}

/// One message for the user: what is wrong, where, and what to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub message: String,
    /// Primary location first; each with a short label.
    pub labels: Vec<(Loc, String)>,
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn error(message: impl Into<String>, loc: Loc) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            message: message.into(),
            labels: vec![(loc, String::new())],
            help: None,
        }
    }
    pub fn bug(message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Bug, message: message.into(), labels: vec![], help: None }
    }
    pub fn with_help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }
    pub fn with_label(mut self, loc: Loc, label: impl Into<String>) -> Diagnostic {
        self.labels.push((loc, label.into()));
        self
    }
    pub fn with_primary_label(mut self, label: impl Into<String>) -> Diagnostic {
        if let Some(first) = self.labels.first_mut() {
            first.1 = label.into();
        }
        self
    }

    /// Render as text: `error: …`, then `file:line:col`, the source line and a caret per label.
    pub fn render(&self, sources: &SourceTable) -> String {
        let mut files = SimpleFiles::new();
        let mut file_ids = BTreeMap::new();
        let mut labels = Vec::new();
        let mut unplaced = Vec::new();
        for (i, (loc, text)) in self.labels.iter().enumerate() {
            let Some(file) = sources.file(*loc) else {
                continue;
            };
            let Some(line_text) = file.lines.get(&loc.line) else {
                unplaced.push(format!("{}:{}:{}", file.file, loc.line, loc.col));
                continue;
            };
            // codespan needs the whole file: rebuild it from the lines we have, blank elsewhere.
            let fid = *file_ids.entry(loc.source).or_insert_with(|| {
                let last = *file.lines.keys().last().unwrap_or(&0);
                let mut text = String::new();
                for n in 1..=last {
                    text.push_str(file.lines.get(&n).map(|s| s.as_str()).unwrap_or(""));
                    text.push('\n');
                }
                files.add(file.file.clone(), text)
            });
            let line_start: usize =
                (1..loc.line).map(|n| file.lines.get(&n).map(|s| s.len()).unwrap_or(0) + 1).sum();
            let col = (loc.col.max(1) as usize - 1).min(line_text.len());
            let end = line_text.trim_end().len().max(col + 1).min(line_text.len().max(col + 1));
            let range = line_start + col..line_start + end.min(line_text.len()).max(col);
            let range = if range.is_empty() { range.start..range.start } else { range };
            let label = if i == 0 { Label::primary(fid, range) } else { Label::secondary(fid, range) };
            labels.push(label.with_message(text.clone()));
        }
        let prefix = match self.severity {
            Severity::Error => "",
            Severity::Bug => "internal compiler error: ",
        };
        let mut d =
            CsDiagnostic::error().with_message(format!("{}{}", prefix, self.message)).with_labels(labels);
        let mut notes: Vec<String> = unplaced.iter().map(|u| format!("at {u}")).collect();
        if let Some(h) = &self.help {
            notes.push(format!("help: {h}"));
        }
        d = d.with_notes(notes);
        let config = Config { chars: Chars::ascii(), ..Config::default() };
        let mut out = NoColor::new(Vec::new());
        if term::emit(&mut out, &config, &files, &d).is_err() {
            return format!("error: {}{}", prefix, self.message);
        }
        String::from_utf8_lossy(&out.into_inner()).into_owned()
    }
}

pub type Diagnostics = Vec<Diagnostic>;

/// Render several diagnostics, separated by blank lines.
pub fn render_all(diags: &[Diagnostic], sources: &SourceTable) -> String {
    diags.iter().map(|d| d.render(sources)).collect::<Vec<_>>().join("\n")
}
