//! No input makes the SLO front panic: mutations of every Sloth example (deleted, duplicated
//! and replaced bytes, truncations) go through load, check, generate and report.

mod common;

use std::path::Path;

use watchfire::slo::{self, GenerateOptions, ReportOptions};

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const ALPHABET: &[u8] = b" \n\t:-{}[]\"'#&*!|>%@`,.0123456789eE+abcdefgwhms_{{.window}}~\\";

#[test]
fn mutated_specs_never_panic() {
    let Some(dir) = common::conformance_dir("sloth/examples") else {
        return;
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("sloth examples")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let opts = GenerateOptions::default();
    let store = watchfire::tsdb::Store::new();
    let mut runs = 0;
    for f in &files {
        let base = std::fs::read(f).unwrap();
        for _ in 0..150 {
            let mut b = base.clone();
            for _ in 0..1 + rng.below(4) {
                if b.is_empty() {
                    break;
                }
                let i = rng.below(b.len());
                match rng.below(4) {
                    0 => {
                        b.remove(i);
                    }
                    1 => b[i] = ALPHABET[rng.below(ALPHABET.len())],
                    2 => b.insert(i, ALPHABET[rng.below(ALPHABET.len())]),
                    _ => b.truncate(i),
                }
            }
            let text = String::from_utf8_lossy(&b).into_owned();
            let (specs, _) = slo::parse_specs("m.yaml", &text);
            let _ = slo::check(&specs, &opts);
            let _ = slo::generate(&specs, &opts);
            let _ = slo::generate(
                &specs,
                &GenerateOptions {
                    exact: true,
                    ..GenerateOptions::default()
                },
            );
            if runs % 25 == 0 {
                let _ = slo::report(&specs, &store, 0, &ReportOptions::default());
            }
            runs += 1;
        }
    }
    assert!(runs > 1000);
}

/// `check_paths` over a directory: load errors of each file and duplicates across files.
#[test]
fn check_paths_over_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let spec = "version: prometheus/v1\nservice: s\nslos:\n  - name: a\n    objective: 99\n    sli:\n      events:\n        error_query: sum(rate(e[{{.window}}]))\n        total_query: sum(rate(t[{{.window}}]))\n    alerting:\n      page_alert: {disable: true}\n      ticket_alert: {disable: true}\n";
    std::fs::write(dir.path().join("a.yaml"), spec).unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/b.yml"), spec).unwrap();
    std::fs::write(
        dir.path().join("sub/c.yaml"),
        "version: prometheus/v1\nservice: s\nslos: []\nbogus: 1\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a spec").unwrap();
    let d = slo::check_paths(&[dir.path().to_path_buf()], &GenerateOptions::default());
    let codes: Vec<(&str, String)> = d
        .iter()
        .map(|d| {
            (
                d.code,
                Path::new(&d.file).file_name().unwrap().to_string_lossy().into_owned(),
            )
        })
        .collect();
    assert!(codes.contains(&("slo-duplicate", "b.yml".into())), "{codes:?}");
    assert!(codes.contains(&("slo-unknown-key", "c.yaml".into())), "{codes:?}");
    assert!(codes.contains(&("slo-required", "c.yaml".into())), "{codes:?}");
    assert!(!codes.iter().any(|(_, f)| f == "notes.txt"), "{codes:?}");
    let loaded = slo::load_paths(&[dir.path().join("a.yaml"), dir.path().join("sub/b.yml")]).unwrap();
    assert_eq!(loaded.len(), 2);
    assert!(slo::load_paths(&[dir.path().to_path_buf()]).is_err());
}
