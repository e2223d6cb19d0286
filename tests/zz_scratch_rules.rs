#[test]
fn scratch() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance/promtool");
    let out = std::process::Command::new("bash").arg("-c").arg(format!("cd {} && grep -rlE '^groups:' --include=*.yaml --include=*.yml .", root.display())).output().unwrap();
    let list = String::from_utf8(out.stdout).unwrap();
    let mut n = 0;
    for f in list.lines() {
        let p = root.join(f);
        match watchfire::rules::file::load_file(&p, Default::default()) {
            Ok(rf) => n += rf.groups.iter().map(|g| g.rules.len()).sum::<usize>(),
            Err(es) => for e in es { println!("{e}"); }
        }
    }
    println!("rules: {n}");
}
