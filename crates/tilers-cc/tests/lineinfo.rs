//! `lineinfo`: the generated CUDA carries `#line N "file.py"` before every line of a tile
//! op's code, and is otherwise the code compiled without it.

use std::path::Path;
use tilers_cc::{compile, CompileOptions};

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs").join(format!("{name}.json"));
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn lineinfo_only_adds_line_directives_naming_the_users_lines() {
    for name in ["softmax_rows", "matmul_nn_f16", "add_f16"] {
        let text = fixture(name);
        let plain = compile(&text, &CompileOptions { arch: "sm_90a".into(), ..Default::default() }).unwrap();
        let with =
            compile(&text, &CompileOptions { arch: "sm_90a".into(), lineinfo: true, ..Default::default() })
                .unwrap();
        assert!(!plain.source.contains("#line"), "{name}");
        let directives: Vec<&str> = with.source.lines().filter(|l| l.starts_with("#line ")).collect();
        assert!(directives.len() > 10, "{name}: {}", with.source);
        // every directive names a line the program's source table has, in kernels.py
        let program: serde_json::Value = serde_json::from_str(&text).unwrap();
        let lines = &program["sources"][0]["lines"];
        for d in &directives {
            let (n, file) = d["#line ".len()..].split_once(' ').unwrap();
            assert_eq!(file, "\"kernels.py\"", "{name}: {d}");
            assert!(lines.get(n).is_some(), "{name}: {d} is not a line of the kernel");
        }
        let stripped: String =
            with.source.lines().filter(|l| !l.starts_with("#line ")).map(|l| format!("{l}\n")).collect();
        assert_eq!(stripped, plain.source, "{name}: lineinfo changed the code");
    }
}
