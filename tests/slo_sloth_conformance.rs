//! Conformance with Sloth: every example and golden case in ../shared/conformance/sloth/ that
//! Sloth generated, generated again by watchfire and compared group by group and rule by rule:
//! same group names and intervals, same record/alert names, same labels and annotations, and
//! expressions equal once both are parsed by promql-parser (ASTs, then their Display forms).
//!
//! Three runs per case:
//! 1. `GenerateOptions::sloth_compatible()` with `sloth_version: dev`: must be identical.
//! 2. Default options: only the differences listed in `JUSTIFIED` may appear; they are printed.
//! 3. Exact decimals: only number literals may differ, by float rounding at most.
//!
//! Inputs watchfire refuses on purpose are listed in `REFUSED`, each with the reason; the test
//! checks that they are refused with the expected diagnostic.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use watchfire::slo::{self, GenerateOptions};
use yaml_rust2::{Yaml, YamlLoader};

fn sloth_dir() -> PathBuf {
    common::conformance_root().join("sloth")
}

/// Differences between watchfire's default output and Sloth's, each justified.
const JUSTIFIED: &[(&str, &str)] = &[
    (
        "label sloth_version",
        "sloth_slo_info names the generator's version: watchfire-<version> instead of Sloth's (`dev` in these files)",
    ),
    (
        "alert label severity added",
        "POLICY.md routes on severity page / notify; added only where the spec sets no severity (Sloth's sloth_severity stays)",
    ),
    (
        "alert annotation description added",
        "POLICY.md: every alert carries a description; it states the burn condition and the budget remaining (query template)",
    ),
    (
        "alert annotation runbook_url added",
        "POLICY.md: alerts carry runbook_url; taken from the spec's `runbook` annotation when it has one",
    ),
];

/// Inputs that watchfire refuses, the diagnostic code expected, and why.
const REFUSED: &[(&str, &str, &str)] = &[
    (
        "examples/plugin-getting-started.yml",
        "slo-sli-plugin",
        "Sloth SLI plugins are Go source loaded by Sloth's interpreter; watchfire cannot run them",
    ),
    (
        "examples/plugin-k8s-getting-started.yml",
        "slo-sli-plugin",
        "SLI plugin as above (it also uses snake_case page_alert in the CRD, which Sloth silently ignores)",
    ),
    (
        "examples/victoria-metrics.yml",
        "slo-plugin",
        "VictoriaMetrics MetricsQL (histogram_share, vector(1)[5m]) is not PromQL",
    ),
    (
        "golden/testdata/in-sli-plugin.yaml",
        "slo-sli-plugin",
        "the `integration_test` SLI plugin exists only as Go source upstream",
    ),
    (
        "golden/testdata/in-slo-plugin.yaml",
        "slo-plugin",
        "`integration-tests/plugin1` is a test-only Go SLO plugin upstream",
    ),
    (
        "golden/testdata/in-slo-plugin-k8s.yaml",
        "slo-plugin",
        "`integration-tests/plugin1` is a test-only Go SLO plugin upstream",
    ),
    (
        "golden/testdata/in-invalid-version.yaml",
        "slo-version",
        "invalid version: Sloth fails too",
    ),
];

struct Case {
    input: &'static str,
    expected: &'static str,
    opts: fn() -> GenerateOptions,
}

fn examples_opts() -> GenerateOptions {
    GenerateOptions {
        extra_labels: BTreeMap::from([("cmd".to_string(), "examplesgen.sh".to_string())]),
        ..GenerateOptions::default()
    }
}

fn golden_opts() -> GenerateOptions {
    GenerateOptions::default()
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for name in [
        "getting-started.yml",
        "home-wifi.yml",
        "kubernetes-apiserver.yml",
        "multifile.yml",
        "no-alerts.yml",
        "raw-home-wifi.yml",
        "slo-plugin-getting-started.yml",
        "contrib-slo-plugins.yml",
        "k8s-getting-started.yml",
        "k8s-home-wifi.yml",
        "k8s-multifile.yml",
        "slo-plugin-k8s-getting-started.yml",
        "contrib-denominator-corrected.yaml",
        "openslo-getting-started.yml",
        "openslo-kubernetes-apiserver.yml",
    ] {
        let input: &'static str = Box::leak(format!("examples/{name}").into_boxed_str());
        let expected: &'static str = Box::leak(format!("_gen/{name}").into_boxed_str());
        v.push(Case {
            input,
            expected,
            opts: examples_opts,
        });
    }
    let g = |input, expected, opts| Case { input, expected, opts };
    v.push(g(
        "golden/testdata/in-base.yaml",
        "golden/testdata/out-base.yaml.tpl",
        golden_opts,
    ));
    v.push(g(
        "golden/testdata/in-base-k8s.yaml",
        "golden/testdata/out-base-k8s.yaml.tpl",
        golden_opts,
    ));
    v.push(g(
        "golden/testdata/in-base.yaml",
        "golden/testdata/out-base-no-alerts.yaml.tpl",
        || GenerateOptions {
            disable_alerts: true,
            ..GenerateOptions::default()
        },
    ));
    v.push(g(
        "golden/testdata/in-base.yaml",
        "golden/testdata/out-base-no-recordings.yaml.tpl",
        || GenerateOptions {
            disable_recordings: true,
            ..GenerateOptions::default()
        },
    ));
    v.push(g(
        "golden/testdata/in-base.yaml",
        "golden/testdata/out-base-extra-labels.yaml.tpl",
        || GenerateOptions {
            extra_labels: BTreeMap::from([
                ("exk1".to_string(), "exv1".to_string()),
                ("exk2".to_string(), "exv2".to_string()),
            ]),
            ..GenerateOptions::default()
        },
    ));
    v.push(g(
        "golden/testdata/in-multifile.yaml",
        "golden/testdata/out-multifile.yaml.tpl",
        golden_opts,
    ));
    v.push(g(
        "golden/testdata/in-multifile-k8s.yaml",
        "golden/testdata/out-multifile-k8s.yaml.tpl",
        golden_opts,
    ));
    v.push(g(
        "golden/testdata/in-openslo.yaml",
        "golden/testdata/out-openslo.yaml.tpl",
        golden_opts,
    ));
    v.push(g(
        "golden/testdata/in-base.yaml",
        "golden/testdata/out-base-28d.yaml.tpl",
        || GenerateOptions {
            default_period: watchfire::duration::Duration::days(28),
            ..GenerateOptions::default()
        },
    ));
    v.push(g(
        "golden/testdata/in-base.yaml",
        "golden/testdata/out-base-custom-windows-7d.yaml.tpl",
        || {
            let w = slo::load_windows_file(sloth_dir().join("golden/windows/7d.yaml")).expect("7d windows");
            GenerateOptions {
                default_period: watchfire::duration::Duration::days(7),
                windows: vec![w],
                ..GenerateOptions::default()
            }
        },
    ));
    v
}

/// Sloth's expected output: Go templates for the golden files, several documents, plain rule
/// files or PrometheusRule objects. Returns the groups of every document in order.
fn expected_groups(path: &Path) -> Vec<Yaml> {
    let mut text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if path.extension().and_then(|e| e.to_str()) == Some("tpl") {
        text = text.replace("{{ .version }}", "dev");
        let re = regex::Regex::new(r#"\{\{"(\{\{[^"]*\}\})"\}\}"#).unwrap();
        text = re.replace_all(&text, "$1").into_owned();
    }
    let docs = YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut groups = Vec::new();
    for d in docs {
        let g = if d["kind"].as_str() == Some("PrometheusRule") {
            d["spec"]["groups"].clone()
        } else {
            d["groups"].clone()
        };
        if let Some(v) = g.as_vec() {
            groups.extend(v.iter().cloned());
        }
    }
    groups
}

fn actual_groups(input: &Path, opts: &GenerateOptions) -> Result<Vec<Yaml>, String> {
    let specs = slo::load_file(input).map_err(|e| e.to_string())?;
    let text = slo::generate(&specs, opts).map_err(|e| e.to_string())?;
    let docs = YamlLoader::load_from_str(&text).map_err(|e| format!("our YAML does not parse: {e}\n{text}"))?;
    Ok(docs[0]["groups"].as_vec().cloned().unwrap_or_default())
}

fn str_map(y: &Yaml) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    if let Some(h) = y.as_hash() {
        for (k, v) in h {
            let key = k.as_str().map(str::to_string).unwrap_or_else(|| format!("{k:?}"));
            let val = match v {
                Yaml::String(s) => s.clone(),
                Yaml::Integer(i) => i.to_string(),
                Yaml::Real(r) => r.clone(),
                Yaml::Boolean(b) => b.to_string(),
                other => format!("{other:?}"),
            };
            m.insert(key, val);
        }
    }
    m
}

/// How two expressions compare.
enum ExprCmp {
    Equal,
    /// Equal once number literals are compared as floats within a relative tolerance.
    NumbersOnly,
    Different(String),
}

fn compare_expr(ours: &str, theirs: &str) -> ExprCmp {
    let a = match watchfire::promql::parse(ours) {
        Ok(a) => a,
        Err(e) => return ExprCmp::Different(format!("ours does not parse: {e}")),
    };
    let b = match watchfire::promql::parse(theirs) {
        Ok(b) => b,
        Err(e) => return ExprCmp::Different(format!("Sloth's does not parse: {e}")),
    };
    if a == b || a.to_string() == b.to_string() {
        return ExprCmp::Equal;
    }
    let (sa, sb) = (a.to_string(), b.to_string());
    let num = regex::Regex::new(r"\d+(\.\d+)?(e[+-]?\d+)?").unwrap();
    let skel = |s: &str| num.replace_all(s, "N").into_owned();
    if skel(&sa) == skel(&sb) {
        let na: Vec<f64> = num.find_iter(&sa).filter_map(|m| m.as_str().parse().ok()).collect();
        let nb: Vec<f64> = num.find_iter(&sb).filter_map(|m| m.as_str().parse().ok()).collect();
        if na.len() == nb.len()
            && na
                .iter()
                .zip(&nb)
                .all(|(x, y)| x == y || ((x - y) / y.abs().max(1e-300)).abs() < 1e-9)
        {
            return ExprCmp::NumbersOnly;
        }
    }
    // Constant expressions (`vector(0.001)` vs `vector(1-0.9990000000000001)`): compare values.
    if let (Some(x), Some(y)) = (const_value(ours), const_value(theirs)) {
        if x == y || ((x - y) / y.abs().max(1e-300)).abs() < 1e-9 {
            return ExprCmp::NumbersOnly;
        }
    }
    ExprCmp::Different(format!("\n  ours:   {sa}\n  Sloth's: {sb}"))
}

/// The value of an expression that reads no series.
fn const_value(expr: &str) -> Option<f64> {
    let empty = watchfire::tsdb::Store::new();
    let r = watchfire::promql::Engine::default()
        .instant_query(&empty, expr, 0)
        .ok()?;
    match r.value {
        watchfire::promql::Value::Vector(v) if v.len() == 1 => Some(v[0].v),
        watchfire::promql::Value::Scalar { v, .. } => Some(v),
        _ => None,
    }
}

/// Compares two outputs; returns (differences by kind, unexplained differences).
fn compare(case: &str, ours: &[Yaml], theirs: &[Yaml], numbers_ok: bool) -> (Vec<String>, Vec<String>) {
    let mut kinds = Vec::new();
    let mut bad = Vec::new();
    let names = |g: &[Yaml]| {
        g.iter()
            .map(|g| g["name"].as_str().unwrap_or("?").to_string())
            .collect::<Vec<_>>()
    };
    if names(ours) != names(theirs) {
        bad.push(format!(
            "{case}: groups differ:\n  ours:   {:?}\n  Sloth's: {:?}",
            names(ours),
            names(theirs)
        ));
        return (kinds, bad);
    }
    for (go, gt) in ours.iter().zip(theirs) {
        let gname = gt["name"].as_str().unwrap_or("?");
        let iv = |g: &Yaml| g["interval"].as_str().map(str::to_string);
        if iv(go) != iv(gt) {
            bad.push(format!("{case}: {gname}: interval {:?} vs {:?}", iv(go), iv(gt)));
        }
        let (ro, rt) = (
            go["rules"].as_vec().cloned().unwrap_or_default(),
            gt["rules"].as_vec().cloned().unwrap_or_default(),
        );
        if ro.len() != rt.len() {
            bad.push(format!("{case}: {gname}: {} rules vs {}", ro.len(), rt.len()));
            continue;
        }
        for (a, b) in ro.iter().zip(&rt) {
            let name = |r: &Yaml| {
                r["record"]
                    .as_str()
                    .map(|s| format!("record {s}"))
                    .or_else(|| r["alert"].as_str().map(|s| format!("alert {s}")))
                    .unwrap_or_default()
            };
            let rname = name(b);
            if name(a) != rname {
                bad.push(format!("{case}: {gname}: {} vs {rname}", name(a)));
                continue;
            }
            let is_alert = b["alert"].as_str().is_some();
            match compare_expr(a["expr"].as_str().unwrap_or(""), b["expr"].as_str().unwrap_or("")) {
                ExprCmp::Equal => {}
                ExprCmp::NumbersOnly if numbers_ok => kinds.push("exact decimal literals".to_string()),
                ExprCmp::NumbersOnly => bad.push(format!("{case}: {gname}: {rname}: number literals differ")),
                ExprCmp::Different(d) => bad.push(format!("{case}: {gname}: {rname}: expr differs:{d}")),
            }
            for (what, ma, mb) in [
                ("label", str_map(&a["labels"]), str_map(&b["labels"])),
                ("annotation", str_map(&a["annotations"]), str_map(&b["annotations"])),
            ] {
                for k in ma.keys().chain(mb.keys()).collect::<std::collections::BTreeSet<_>>() {
                    match (ma.get(k), mb.get(k)) {
                        (Some(x), Some(y)) if x == y => {}
                        (Some(_), Some(_)) if what == "label" && k == "sloth_version" => {
                            kinds.push("label sloth_version".into())
                        }
                        (Some(_), None) if is_alert && what == "label" && k == "severity" => {
                            kinds.push("alert label severity added".into())
                        }
                        (Some(_), None)
                            if is_alert && what == "annotation" && (k == "description" || k == "runbook_url") =>
                        {
                            kinds.push(format!("alert annotation {k} added"))
                        }
                        (x, y) => bad.push(format!(
                            "{case}: {gname}: {rname}: {what} {k}: ours {x:?}, Sloth's {y:?}"
                        )),
                    }
                }
            }
        }
    }
    kinds.sort();
    kinds.dedup();
    (kinds, bad)
}

#[test]
fn sloth_examples_and_golden_cases() {
    let Some(dir) = common::conformance_dir("sloth") else {
        return;
    };
    let mut unexplained = Vec::new();
    let mut seen_kinds: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut matched = 0;
    for case in cases() {
        let input = dir.join(case.input);
        let expected = expected_groups(&dir.join(case.expected));
        let label = format!("{} -> {}", case.input, case.expected);

        // 1. Sloth-compatible, version "dev": identical.
        let compat = GenerateOptions {
            sloth_compatible: true,
            version: "dev".into(),
            ..(case.opts)()
        };
        match actual_groups(&input, &compat) {
            Ok(ours) => {
                let (kinds, bad) = compare(&label, &ours, &expected, false);
                assert!(kinds.is_empty(), "{label}: sloth_compatible output differs: {kinds:?}");
                unexplained.extend(bad);
            }
            Err(e) => unexplained.push(format!("{label}: {e}")),
        }

        // 2. Defaults: only justified differences.
        match actual_groups(&input, &(case.opts)()) {
            Ok(ours) => {
                let (kinds, bad) = compare(&label, &ours, &expected, false);
                for k in kinds {
                    seen_kinds.entry(k).or_default().push(case.input.to_string());
                }
                unexplained.extend(bad);
            }
            Err(e) => unexplained.push(format!("{label}: {e}")),
        }

        // 3. Exact decimals: number literals only.
        let exact = GenerateOptions {
            exact: true,
            sloth_compatible: true,
            version: "dev".into(),
            ..(case.opts)()
        };
        match actual_groups(&input, &exact) {
            Ok(ours) => {
                let (kinds, bad) = compare(&label, &ours, &expected, true);
                assert!(
                    kinds.iter().all(|k| k == "exact decimal literals"),
                    "{label}: {kinds:?}"
                );
                if !kinds.is_empty() {
                    seen_kinds
                        .entry("exact decimal literals (opt-in: exact / watchfire.exact_budget)".into())
                        .or_default()
                        .push(case.input.to_string());
                }
                unexplained.extend(bad);
            }
            Err(e) => unexplained.push(format!("{label}: {e}")),
        }
        matched += 1;
    }

    println!("Sloth conformance: {matched} cases equivalent");
    println!("Differences of the default output, all justified:");
    for (kind, why) in JUSTIFIED {
        let n = seen_kinds.get(*kind).map(Vec::len).unwrap_or(0);
        println!("  - {kind} ({n} cases): {why}");
    }
    for (kind, inputs) in &seen_kinds {
        if !JUSTIFIED.iter().any(|(k, _)| k == kind) {
            println!("  - {kind} ({} cases)", inputs.len());
        }
    }
    let unjustified: Vec<&String> = seen_kinds
        .keys()
        .filter(|k| !JUSTIFIED.iter().any(|(j, _)| j == k) && !k.starts_with("exact decimal literals"))
        .collect();
    assert!(
        unjustified.is_empty(),
        "differences without justification: {unjustified:?}"
    );
    assert!(
        unexplained.is_empty(),
        "unexplained differences:\n{}",
        unexplained.join("\n")
    );
}

#[test]
fn refused_inputs_are_refused_with_a_reason() {
    let Some(dir) = common::conformance_dir("sloth") else {
        return;
    };
    println!("Inputs watchfire refuses:");
    for (input, code, why) in REFUSED {
        let err = slo::load_file(dir.join(input)).expect_err(input);
        let codes: Vec<&str> = err.diagnostics().iter().map(|d| d.code).collect();
        assert!(codes.contains(code), "{input}: expected {code}, got {err}");
        println!("  - {input}: {code}: {why}");
    }
}

/// Every file under examples/ and golden/testdata/in-* is either compared or refused.
#[test]
fn every_sloth_input_is_covered() {
    let Some(dir) = common::conformance_dir("sloth") else {
        return;
    };
    let covered: Vec<String> = cases()
        .iter()
        .map(|c| c.input.to_string())
        .chain(REFUSED.iter().map(|r| r.0.to_string()))
        .collect();
    let mut missing = Vec::new();
    for sub in ["examples", "golden/testdata"] {
        let mut entries: Vec<_> = std::fs::read_dir(dir.join(sub))
            .unwrap()
            .filter_map(|e| e.ok())
            .collect();
        entries.sort_by_key(|e| e.path());
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let p = e.path();
            if p.is_dir() || name.ends_with(".tpl") {
                continue;
            }
            let rel = format!("{sub}/{name}");
            if !covered.contains(&rel) {
                missing.push(rel);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "Sloth inputs neither compared nor refused: {missing:?}"
    );
}

/// Sloth's `validate` fixtures: good/ must load and check without errors, bad/ must fail, and
/// the duplicate sets must be reported. Differences are justified inline.
#[test]
fn sloth_validate_fixtures() {
    let Some(dir) = common::conformance_dir("sloth") else {
        return;
    };
    let dir = dir.join("golden/testdata");
    let opts = GenerateOptions::default();
    // Sloth reads prometheus/v1 non-strictly and ignores a camelCase `pageAlert` / `ticketAlert`
    // (so the labels written there are silently dropped); watchfire reports the unknown key.
    let strict_refusals = ["good-aa.yaml", "good-ab.yaml", "good-ba.yaml"];
    // Sloth only supports 30d OpenSLO windows; watchfire supports any period.
    let accepted_bad = ["bad-openslo.yaml"];
    println!("Sloth validate fixtures:");
    let mut entries: Vec<_> = std::fs::read_dir(dir.join("validate/good"))
        .unwrap()
        .filter_map(|e| e.ok())
        .collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let d = slo::check_file(&e.path(), &opts);
        let errors: Vec<String> = d.iter().filter(|d| d.is_error()).map(|d| d.to_string()).collect();
        if strict_refusals.contains(&name.as_str()) {
            assert!(
                errors
                    .iter()
                    .all(|e| e.contains("slo-unknown-key") && e.contains("did you mean")),
                "{name}: {errors:?}"
            );
            assert!(!errors.is_empty(), "{name}: expected the camelCase keys to be refused");
            println!("  - good/{name}: refused (unknown camelCase key in prometheus/v1, which Sloth ignores)");
        } else {
            assert!(errors.is_empty(), "good/{name}: {errors:?}");
        }
    }
    let mut entries: Vec<_> = std::fs::read_dir(dir.join("validate/bad"))
        .unwrap()
        .filter_map(|e| e.ok())
        .collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let d = slo::check_file(&e.path(), &opts);
        let has_error = d.iter().any(|d| d.is_error());
        if accepted_bad.contains(&name.as_str()) {
            assert!(!has_error, "{name}: {d:?}");
            println!("  - bad/{name}: accepted (28d OpenSLO window: watchfire supports any period)");
        } else {
            assert!(has_error, "bad/{name} must fail");
        }
    }
    for sub in ["prom", "k8s", "openslo"] {
        let p = dir.join("validate_with_duplicates").join(sub);
        let mut specs = Vec::new();
        let mut files: Vec<_> = std::fs::read_dir(&p)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .collect();
        files.sort();
        for f in files {
            // Read leniently (parse_specs keeps what it could read): the prom files use
            // camelCase alert keys that watchfire refuses, as above.
            let text = std::fs::read_to_string(&f).unwrap();
            specs.extend(slo::parse_specs(&f.display().to_string(), &text).0);
        }
        let d = slo::check(&specs, &opts);
        assert!(d.iter().any(|d| d.code == "slo-duplicate"), "{sub}: {d:?}");
    }
    let multi = dir.join("validate_with_duplicates/bad-prom-multi-duplicates.yaml");
    let d = slo::check_file(&multi, &opts);
    assert!(d.iter().any(|d| d.code == "slo-duplicate"), "{d:?}");
}
