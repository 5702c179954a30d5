//! A short, fixed-seed run of the structure-aware fuzzer (examples/fuzz_driver.rs) in every
//! test run: mutated programs must never make the compiler fail internally. The long runs
//! are recorded in docs/fuzzing.md.

#[path = "../examples/fuzz_driver.rs"]
#[allow(dead_code)]
mod driver;

#[test]
fn mutated_programs_never_fail_internally() {
    for seed in [1, 2, 3] {
        let out = driver::fuzz(std::time::Duration::from_secs(60), 1500, seed);
        assert_eq!(out.runs, 1500);
        assert!(out.internal.is_empty(), "seed {seed}: {:?}", out.internal.first().map(|(m, _)| m));
        assert!(out.compiled > 0 && out.format_errors > 0, "{out:?}");
    }
}
