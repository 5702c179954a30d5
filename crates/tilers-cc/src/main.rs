//! The `tilers-cc` command (the arguments and exit codes are `tilers_cc::cli`'s, which the
//! Python package's `tilers-cc` entry point runs too).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // a deeply nested program must not overflow the main thread's stack
    ExitCode::from(tilers_cc::on_deep_stack(move || tilers_cc::cli::run(&args)))
}
