//! A replay computing each rule's answers a block of evaluations at a time (range queries) gives
//! what the step-by-step replay gives: the same alert transitions, notifications, rule errors,
//! causes, and outputs down to each staleness marker. Over the demo, cause scenarios shaped as
//! the exporters write, and rules built to take every way around the blocks.

use std::path::Path;

use watchfire::replay::{self, demo, scenario, FileConfig, Options, Outcome, Setup};
use watchfire::tsdb::Store;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One output series: its labels, its float samples as bits, its count of histograms.
type Dumped = (String, Vec<(i64, u64)>, usize);

/// Every series the rules wrote, its samples as bits (staleness markers included), sorted.
fn dump(s: &Store) -> Vec<Dumped> {
    let mut out: Vec<_> = (0..s.num_series() as u32)
        .map(|id| {
            let mut samples = Vec::new();
            s.samples(id, i64::MIN, i64::MAX, &mut samples);
            let mut hists = Vec::new();
            s.histogram_samples(id, i64::MIN, i64::MAX, &mut hists);
            (
                s.labels(id).to_string(),
                samples.into_iter().map(|(t, v)| (t, v.to_bits())).collect(),
                hists.len(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Replays both ways; asserts they agree and returns the block replay.
fn both(setup: &Setup, store: &Store, opts: &Options) -> Outcome {
    let blocks = replay::run(setup, store, opts, &mut |_| {});
    let steps = replay::run(
        setup,
        store,
        &Options {
            step_by_step: true,
            ..opts.clone()
        },
        &mut |_| {},
    );
    assert_eq!(steps.answered_ahead, 0, "--step-by-step computes nothing ahead");
    assert_eq!(blocks.rule_evaluations, steps.rule_evaluations);
    assert_eq!(blocks.rule_errors, steps.rule_errors, "rule errors");
    if let Some(i) = (0..blocks.transitions.len().max(steps.transitions.len()))
        .find(|&i| blocks.transitions.get(i) != steps.transitions.get(i))
    {
        panic!(
            "alert transitions differ first at {i}: blocks {:?}, step by step {:?}",
            blocks.transitions.get(i),
            steps.transitions.get(i)
        );
    }
    assert_eq!(
        format!("{:#?}", blocks.deliveries),
        format!("{:#?}", steps.deliveries),
        "notifications"
    );
    assert_eq!(format!("{:?}", blocks.causes), format!("{:?}", steps.causes), "causes");
    let (a, b) = (dump(&blocks.outputs), dump(&steps.outputs));
    assert_eq!(a.len(), b.len(), "output series");
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y, "outputs of {}", x.0);
    }
    blocks
}

#[test]
fn the_demo_replays_the_same_in_blocks() {
    let setup = FileConfig::load(&root().join("deploy/watchfire.yaml"))
        .unwrap()
        .build(None)
        .unwrap();
    let store = demo::generate();
    // The first day: the XID, the starvation and the registry incidents.
    let opts = Options {
        from_ms: demo::START_MS,
        to_ms: demo::START_MS + 24 * 3_600_000,
        lookback_ms: None,
        step_by_step: false,
    };
    let o = both(&setup, &store, &opts);
    assert!(!o.deliveries.is_empty(), "the day notifies");
    assert!(
        o.answered_ahead * 10 >= o.rule_evaluations * 9,
        "most of the shipped policy is answered ahead: {} of {}",
        o.answered_ahead,
        o.rule_evaluations
    );
}

#[test]
fn cause_scenarios_replay_the_same_in_blocks() {
    let setup = FileConfig::load(&root().join("deploy/watchfire.yaml"))
        .unwrap()
        .build(None)
        .unwrap();
    for name in ["gpu-node-cascade", "two-causes"] {
        let s = scenario::Scenario::load_file(&root().join(format!("scenarios/{name}.yaml"))).unwrap();
        let data = scenario::generate(&s).unwrap();
        eprintln!("scenario {name}");
        let o = both(&setup, &data.store, &scenario::options(&s));
        assert!(!o.deliveries.is_empty(), "{name} notifies");
        assert!(o.answered_ahead > 0, "{name}");
    }
}

const RULES: &str = r#"groups:
  - name: a
    interval: 1m
    limit: 3
    rules:
      - record: x:sum
        expr: sum by (job) (x)
      # Over the group's limit of 3 series in minutes 20-29: refused there, nothing written.
      - record: x:each
        expr: x
      # Reads an earlier rule of its group, and a later group's output (whose slots differ).
      - record: x:sum:plus
        expr: x:sum + on (job) group_left () (y:max or on (job) x:sum * 0)
      # Reads itself: step by step.
      - record: x:sum:latched
        expr: x:sum or last_over_time(x:sum:latched[10m])
      # Step by step too, its aggregations over the source and over x:sum computed ahead.
      - record: x:max:latched
        expr: max by (job) (x) or on (job) (last_over_time(x:max:latched[10m]) unless on (job) sum by (job) (x:sum))
      # Many-to-many at the minutes y has two series per job: this step fails, the others not.
      - alert: Joined
        expr: x * on (job) group_left () y > 0
      - alert: Reads_ALERTS
        expr: count(ALERTS{alertname="Joined"}) > 0
      - alert: Future
        expr: x offset -1m > 3
      - alert: AtEnd
        expr: x @ end() > 0
      - alert: Each
        expr: x:each > 3
        for: 2m
        labels:
          severity: page
  - name: b
    interval: 30s
    rules:
      - record: y:max
        expr: max by (job) (y)
      - alert: Gone
        expr: absent(x:each{job="j2"}) and on () count_over_time(x:sum[10m]) > 0
        for: 1m
        labels:
          severity: page
      - alert: Stale
        expr: count_over_time(x:each[3m]) < 3
"#;

/// Rules that take every way around the blocks: a later group's output, a rule reading
/// itself or `ALERTS`, future reads, a step that fails, a group's series limit, series that go
/// stale, several intervals.
#[test]
fn rules_around_the_blocks_replay_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("rules.yaml"), RULES).unwrap();
    std::fs::write(
        d.join("routes.yaml"),
        "route:\n  receiver: r\n  group_by: [alertname]\n  group_wait: 0s\nreceivers:\n  - name: r\n",
    )
    .unwrap();
    std::fs::write(
        d.join("watchfire.yaml"),
        "sources: [{name: local, type: embedded}]\nrule_files: [rules.yaml]\nroutes_file: routes.yaml\n",
    )
    .unwrap();
    let setup = FileConfig::load(&d.join("watchfire.yaml"))
        .unwrap()
        .build(None)
        .unwrap();
    let base = 1_700_000_000_000i64;
    let mut store = Store::new();
    let lab = |name: &str, pairs: &[(&str, &str)]| {
        let mut v = vec![("__name__", name)];
        v.extend_from_slice(pairs);
        watchfire::labels::Labels::from_pairs(v)
    };
    // 3 hours at 15s: blocks end and begin inside every incident.
    for k in 0..(3 * 240) {
        let t = base + k * 15_000;
        let m = k / 4 % 60;
        for (job, inst) in [("j1", "a"), ("j1", "b"), ("j2", "a")] {
            // j2 goes away in minutes 40-49 of each hour: its series go stale.
            if job == "j2" && (40..50).contains(&m) {
                continue;
            }
            store.append(&lab("x", &[("job", job), ("instance", inst)]), t, (k % 7) as f64);
        }
        if (20..30).contains(&m) {
            store.append(&lab("x", &[("job", "j3"), ("instance", "a")]), t, 5.0);
        }
        store.append(&lab("y", &[("job", "j1"), ("le", "1")]), t, 1.0);
        if (5..8).contains(&m) {
            store.append(&lab("y", &[("job", "j1"), ("le", "2")]), t, 2.0);
        }
    }
    let opts = Options {
        from_ms: base,
        to_ms: base + 3 * 3_600_000 - 15_000,
        lookback_ms: None,
        step_by_step: false,
    };
    let o = both(&setup, &store, &opts);
    let errors: Vec<&str> = o.rule_errors.iter().map(|e| e.0.as_str()).collect();
    assert!(errors.contains(&"Joined"), "the many-to-many steps fail: {errors:?}");
    assert!(errors.contains(&"x:each"), "the limit refuses: {errors:?}");
    assert!(o.transitions.iter().any(|t| t.alertname == "Gone"), "j2 went");
    assert!(o.transitions.iter().any(|t| t.alertname == "Each"));
    assert!(o.answered_ahead > 0 && o.answered_ahead < o.rule_evaluations);
}
