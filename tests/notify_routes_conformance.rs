//! `watchfire routes test|show` print exactly what `amtool config routes test|show` 0.25 prints,
//! for every row of `../shared/conformance/alertmanager/routes_expected.tsv` and every
//! `routes_show/` file. When `amtool` 0.25 is installed, the `--tree` and
//! `--verify.receivers` renderings are compared with its live output too (without amtool 0.25 that
//! test fails, unless `WATCHFIRE_TEST_OFFLINE=1` makes it a recorded skip).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use watchfire::notify::{parse_label_args, routes_show, routes_test};

fn am_dir() -> PathBuf {
    common::conformance_root().join("alertmanager")
}

struct Row {
    config: String,
    labels: Vec<String>,
    expected: String,
}

fn rows() -> Vec<Row> {
    let tsv = std::fs::read_to_string(am_dir().join("routes_expected.tsv")).expect("routes_expected.tsv");
    let mut out = Vec::new();
    for (i, line) in tsv.lines().enumerate() {
        if i == 0 || line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        assert!(cols.len() >= 3, "bad row {i}: {line}");
        out.push(Row {
            config: cols[0].to_string(),
            labels: cols[1].split_whitespace().map(str::to_string).collect(),
            expected: cols[2].to_string(),
        });
    }
    out
}

fn amtool_025() -> bool {
    match Command::new("amtool").arg("--version").output() {
        Ok(o) => {
            let v = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
            v.contains("version 0.25.")
        }
        Err(_) => false,
    }
}

fn amtool(args: &[String]) -> (String, i32) {
    let out = Command::new("amtool").args(args).output().expect("run amtool");
    (
        String::from_utf8_lossy(&out.stdout).to_string(),
        out.status.code().unwrap_or(-1),
    )
}

#[test]
fn routes_test_matches_amtool_for_every_row() {
    if common::conformance_dir("alertmanager").is_none() {
        return;
    }
    let rows = rows();
    assert!(!rows.is_empty());
    let mut matched = 0;
    for row in &rows {
        let path = am_dir().join(&row.config);
        let labels = parse_label_args(&row.labels).expect("labels");
        let (out, code) = routes_test(&path, &labels, false, None, None).expect("routes test");
        assert_eq!(code, 0);
        assert_eq!(out, format!("{}\n", row.expected), "{} {:?}", row.config, row.labels);
        // --verify.receivers with the right answer passes, with a wrong one fails as amtool does.
        let expected: Vec<String> = vec![row.expected.clone()];
        let (_, code) = routes_test(&path, &labels, false, Some(expected), None).expect("routes test");
        assert_eq!(code, 0);
        let (out, code) = routes_test(&path, &labels, false, Some(vec!["nobody".into()]), None).expect("routes test");
        assert_eq!(code, 1);
        assert_eq!(
            out,
            format!(
                "{}\nWARNING: Expected receivers did not match resolved receivers.\n",
                row.expected
            )
        );
        matched += 1;
    }
    println!("routes_expected.tsv: {matched}/{} rows match amtool 0.25", rows.len());
}

#[test]
fn routes_show_matches_amtool_for_every_file() {
    if common::conformance_dir("alertmanager").is_none() {
        return;
    }
    let show_dir = am_dir().join("routes_show");
    let mut configs: Vec<String> = Vec::new();
    collect_yml(&am_dir(), &am_dir(), &mut configs);
    let mut n = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&show_dir).expect("routes_show").flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(stem) = name.strip_suffix(".txt") else {
            continue;
        };
        let config = configs
            .iter()
            .find(|c| c.replace('/', "_") == stem)
            .unwrap_or_else(|| panic!("no config for {name}"));
        let expected = std::fs::read_to_string(entry.path()).expect("read");
        let got = routes_show(&am_dir().join(config)).expect("routes show");
        assert_eq!(got, expected, "{config}");
        n += 1;
    }
    assert!(n >= 8, "only {n} routes_show files");
    println!("routes_show: {n}/{n} files match amtool 0.25");
}

fn collect_yml(base: &Path, dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).expect("dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_yml(base, &p, out);
        } else if p.extension().is_some_and(|x| x == "yml") {
            out.push(p.strip_prefix(base).expect("prefix").to_string_lossy().to_string());
        }
    }
}

#[test]
fn tree_and_verify_output_match_live_amtool() {
    if common::conformance_dir("alertmanager").is_none() {
        return;
    }
    if common::require(
        amtool_025().then_some(()),
        "amtool 0.25",
        "apt-get install prometheus-alertmanager",
    )
    .is_none()
    {
        return;
    }
    let mut cases: Vec<(String, Vec<String>)> = rows().into_iter().map(|r| (r.config, r.labels)).collect();
    // A few more label sets over the richer example configs.
    for (cfg, labels) in [
        (
            "upstream-v0.25.0/doc/examples/simple.yml",
            "service=database owner=team-X",
        ),
        (
            "upstream-v0.25.0/doc/examples/simple.yml",
            "service=files severity=critical",
        ),
        (
            "upstream-v0.25.0/doc/examples/simple.yml",
            "service=foo1 severity=critical",
        ),
        (
            "upstream-v0.25.0/doc/examples/simple.yml",
            "service=database owner=team-Y",
        ),
        ("upstream-v0.25.0/doc/examples/simple.yml", "nothing=here"),
        (
            "upstream-v0.25.0/config/testdata/conf.good.yml",
            "service=database owner2=team-X owner=team-Y",
        ),
        (
            "upstream-v0.25.0/config/testdata/conf.good.yml",
            "service=foo2 severity=critical",
        ),
        ("upstream-v0.25.0/config/testdata/conf.group-by-all.yml", "a=b"),
        ("upstream-v0.25.0/cli/testdata/conf.routing.yml", "test=2"),
    ] {
        cases.push((cfg.to_string(), labels.split_whitespace().map(str::to_string).collect()));
    }
    for (cfg, labels) in &cases {
        let path = am_dir().join(cfg);
        let parsed = parse_label_args(labels).expect("labels");
        for tree in [false, true] {
            let mut args = vec![
                "config".to_string(),
                "routes".into(),
                "test".into(),
                format!("--config.file={}", path.display()),
            ];
            if tree {
                args.push("--tree".into());
            }
            args.push("--verify.receivers=nobody".into());
            args.extend(labels.iter().cloned());
            let (want, want_code) = amtool(&args);
            let (got, got_code) =
                routes_test(&path, &parsed, tree, Some(vec!["nobody".into()]), None).expect("routes test");
            assert_eq!(got, want, "{cfg} {labels:?} tree={tree}");
            assert_eq!(got_code, want_code);
        }
    }
    // routes show over every config amtool loads.
    let mut configs = Vec::new();
    collect_yml(&am_dir(), &am_dir(), &mut configs);
    configs.sort();
    let mut shown = 0;
    for cfg in configs {
        let path = am_dir().join(&cfg);
        let (want, code) = amtool(&[
            "config".into(),
            "routes".into(),
            format!("--config.file={}", path.display()),
        ]);
        match routes_show(&path) {
            Ok(got) => {
                assert_eq!(code, 0, "{cfg}: watchfire shows it, amtool fails");
                assert_eq!(got, want, "{cfg}");
                shown += 1;
            }
            Err(e) => assert_ne!(code, 0, "{cfg}: amtool shows it, watchfire fails: {e}"),
        }
    }
    println!(
        "live amtool: {} routes test cases x2, {shown} routes show configs identical",
        cases.len()
    );
}
