use super::script::{
    parse, parse_duration, parse_number, split_series_line, unquote, Command, EvalCmd, Matcher, Script,
};
use super::*;

fn evals(s: &Script) -> Vec<&EvalCmd> {
    s.commands
        .iter()
        .filter_map(|c| match c {
            Command::Eval(e) => Some(&**e),
            _ => None,
        })
        .collect()
}

#[test]
fn durations() {
    assert_eq!(parse_duration("0"), Ok(0));
    assert_eq!(parse_duration("0s"), Ok(0));
    assert_eq!(parse_duration("10m"), Ok(600_000));
    assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
    assert_eq!(parse_duration("20s500ms"), Ok(20_500));
    assert_eq!(parse_duration("1d"), Ok(86_400_000));
    assert_eq!(parse_duration("1w"), Ok(7 * 86_400_000));
    assert_eq!(parse_duration("1y"), Ok(365 * 86_400_000));
    assert_eq!(parse_duration("10s53ms"), Ok(10_053));
    // Plain numbers are seconds.
    assert_eq!(parse_duration("90"), Ok(90_000));
    assert_eq!(parse_duration("1.5"), Ok(1_500));
    // Units out of order, repeated, unknown, or missing numbers.
    assert!(parse_duration("30m1h").is_err());
    assert!(parse_duration("1m1m").is_err());
    assert!(parse_duration("5x").is_err());
    assert!(parse_duration("m").is_err());
    assert!(parse_duration("").is_err());
    assert!(parse_duration("-1m").is_err());
    assert!(parse_duration("99999999999999999999y").is_err());
}

#[test]
fn numbers() {
    assert_eq!(parse_number("12340000"), Some(12_340_000.0));
    assert_eq!(parse_number("-0.2e-6"), Some(-0.0000002));
    assert_eq!(parse_number("+Inf"), Some(f64::INFINITY));
    assert_eq!(parse_number("-Inf"), Some(f64::NEG_INFINITY));
    assert!(parse_number("NaN").unwrap().is_nan());
    assert_eq!(parse_number("0x10"), Some(16.0));
    assert_eq!(parse_number("2."), Some(2.0));
    assert_eq!(parse_number(".2"), Some(0.2));
    assert_eq!(parse_number("{} 3"), None);
    assert_eq!(parse_number("foo"), None);
    assert_eq!(parse_number("metric 1"), None);
    assert_eq!(parse_number(""), None);
}

#[test]
fn quoting() {
    assert_eq!(unquote("\"Foo\""), Ok("Foo".into()));
    assert_eq!(unquote("`Foo`"), Ok("Foo".into()));
    assert_eq!(unquote("\" Foo \""), Ok(" Foo ".into()));
    assert_eq!(unquote("\"\""), Ok(String::new()));
    assert_eq!(unquote("\"a\\nb\\x41\\u00e9\""), Ok("a\nbA\u{e9}".into()));
    assert!(unquote("Foo").is_err());
    assert!(unquote("\"Foo").is_err());
    assert!(unquote("\"a\"b\"").is_err());
}

#[test]
fn series_line_split() {
    assert_eq!(split_series_line("foo 1 2"), ("foo", "1 2"));
    assert_eq!(split_series_line("foo{a=\"x y}\"} 1+1x2"), ("foo{a=\"x y}\"}", "1+1x2"));
    assert_eq!(split_series_line("{} 3"), ("{}", "3"));
    assert_eq!(split_series_line("foo{a=\"b\"}@st _ 1m"), ("foo{a=\"b\"}", "@st _ 1m"));
    assert_eq!(split_series_line("foo"), ("foo", ""));
}

#[test]
fn commands_and_expectations() {
    let s = parse(
        "# comment\n\
         load 5m\n\
         \x20 foo{a=\"1\"} 1+1x3\n\
         \x20 bar 1 _ stale\n\
         \n\
         eval instant at 10m foo\n\
         \x20 expect no_warn\n\
         \x20 expect info msg: PromQL info: x (1:1)\n\
         \x20 foo{a=\"1\"} 3\n\
         \n\
         eval range from 0 to 1h30m step 30m sum(foo)\n\
         \x20 expect warn regex: some.*thing\n\
         \x20 {} 1 _ 3 4\n\
         \n\
         eval instant at 1m 1 + 1\n\
         \x20 2\n\
         \n\
         eval instant at 0 \"a\"\n\
         \x20 expect string `a`\n\
         \n\
         eval instant at 1m foo[1m]\n\
         \x20 expect range vector from 10s to 1m step 10s\n\
         \x20 foo{a=\"1\"} 1 2 3\n\
         \n\
         eval instant at 1m sort(foo)\n\
         \x20 expect ordered\n\
         \x20 expect fail regex: bad (thing)\n\
         \x20 foo{a=\"2\"} 1\n\
         \x20 foo{a=\"1\"} 2\n\
         clear\n",
    );
    assert!(
        matches!(s.commands[0], Command::Load(ref l) if l.interval_ms == 300_000 && l.series.len() == 2 && l.line == 2)
    );
    let e = evals(&s);
    assert_eq!(e.len(), 6);

    assert_eq!(e[0].line, 6);
    assert_eq!(e[0].expr, "foo");
    assert_eq!(e[0].at, 600_000);
    assert!(e[0].range.is_none());
    assert!(e[0].expects.no_warn);
    assert!(matches!(&e[0].expects.info[..], [Matcher::Msg(m)] if m == "PromQL info: x (1:1)"));
    assert_eq!(e[0].expected_series.len(), 1);

    let r = e[1].range.unwrap();
    assert_eq!((r.start, r.end, r.step), (0, 5_400_000, 1_800_000));
    assert_eq!(e[1].expr, "sum(foo)");
    assert!(matches!(&e[1].expects.warn[..], [Matcher::Regex(re)] if re.is_match("something")));
    assert_eq!(e[1].expected_series[0].values.len(), 4);
    assert!(e[1].expected_series[0].values[1].is_none());

    assert_eq!(e[2].expected_scalar, Some(2.0));
    assert_eq!(e[3].expected_string, "a");
    assert!(e[3].exclude_from_range_query);

    let rv = e[4].range_vector.unwrap();
    assert_eq!((rv.start, rv.end, rv.step), (10_000, 60_000, 10_000));
    assert!(e[4].exclude_from_range_query);
    assert!(e[4].problem.is_none());

    assert!(e[5].is_ordered() && e[5].is_fail());
    assert_eq!(e[5].expected_series[0].pos, 1);
    assert_eq!(e[5].expected_series[1].pos, 2);
    assert!(matches!(s.commands.last(), Some(Command::Clear { line: 30 })));
}

#[test]
fn deprecated_forms() {
    let s = parse(
        "eval_fail instant at 0 foo\n\
         \x20 expected_fail_message something broke\n\
         \n\
         eval_fail range from 0 to 1m step 1m foo\n\
         \x20 expected_fail_regexp broke.*\n\
         \n\
         eval_warn instant at 1m foo\n\
         eval_info range from 0 to 1m step 30s foo\n\
         eval_ordered instant at 1m foo\n\
         \x20 foo 1\n",
    );
    let e = evals(&s);
    assert_eq!(e.len(), 5);
    assert!(e[0].legacy_fail && e[0].is_fail());
    assert_eq!(e[0].expected_fail_message.as_deref(), Some("something broke"));
    assert!(e[1].legacy_fail && e[1].range.is_some());
    assert_eq!(e[1].expected_fail_regexp.as_ref().map(|r| r.as_str()), Some("broke.*"));
    // A missing blank line before the next command still ends the block.
    assert!(e[2].legacy_warn);
    assert!(e[3].legacy_info && e[3].range.is_some());
    assert!(e[4].legacy_ordered && e[4].is_ordered());
}

#[test]
fn malformed_lines_never_panic() {
    let s = parse(
        "bogus command\n\
         \n\
         load\n\
         load xyz\n\
         \x20 foo 1\n\
         \n\
         eval instant at nope foo\n\
         \n\
         eval range from 1m to 0 step 1m foo\n\
         \n\
         eval instant at 1m foo\n\
         \x20 expect sometimes\n\
         \n\
         eval instant at 1m foo\n\
         \x20 expect warn\n\
         \x20 expect no_warn\n\
         \n\
         eval instant at 1m foo\n\
         \x20 foo 1 2 3\n\
         \n\
         eval instant at 1m foo\n\
         \x20 expect string Foo\n\
         \n\
         eval instant at 1m foo\n\
         \x20 expect fail\n\
         \x20 expect fail msg: x\n\
         \n\
         eval instant at 1m foo\n\
         \x20 expect range vector from 1m to 0 step 1m\n\
         \n\
         \u{1F600} {{{ \"\n\
         \n\
         eval",
    );
    let invalid = s
        .commands
        .iter()
        .filter(|c| matches!(c, Command::Invalid { .. }))
        .count();
    assert_eq!(invalid, 6, "{:#?}", s.commands);
    let problems = evals(&s).iter().filter(|e| e.problem.is_some()).count();
    assert_eq!(problems, 6);
    // Lines are reported 1-based.
    assert!(matches!(s.commands[0], Command::Invalid { line: 1, .. }));
}

#[test]
fn native_histograms_and_start_timestamps() {
    let s = parse(
        "load 1m\n\
         \x20 h{a=\"1\"} {{schema:0 sum:1 count:1}}\n\
         \x20 f 1 2\n\
         \x20 st@st _ -1m\n\
         \x20 st 1 2\n\
         \n\
         load_with_nhcb 1m\n\
         \x20 c_bucket{le=\"1\"} 1\n\
         \x20 c_bucket{le=\"+Inf\"} 2\n\
         \x20 c_count 2\n\
         \n\
         eval instant at 1m h\n\
         \x20 h{a=\"1\"} {{schema:0 sum:1 count:1}}\n",
    );
    let Command::Load(l) = &s.commands[0] else {
        panic!("load expected")
    };
    assert_eq!(l.errors, vec![]);
    // Native histograms and start timestamps load; nothing limits the data.
    assert!(l.limited.is_empty());
    assert_eq!(l.series.len(), 3); // h, f and st
    assert_eq!(l.series[2].starts, Some(vec![None, Some(-60_000)]));
    let Command::Load(n) = &s.commands[1] else {
        panic!("load expected")
    };
    assert!(n.with_nhcb);
    // The classic series and the NHCB series `c` derived from them, nothing limited.
    assert_eq!(n.series.len(), 4);
    assert!(n.limited.is_empty());
    let c = &n.series[3];
    assert_eq!(c.labels.to_string(), "c");
    let h = c.values[0]
        .as_ref()
        .and_then(|v| v.as_histogram())
        .expect("a histogram");
    assert_eq!(
        h.test_expression(),
        "{{schema:-53 count:2 custom_values:[1] buckets:[1 1]}}"
    );
    assert!(!evals(&s)[0].expects_histograms);
}

#[test]
fn start_timestamp_lines_must_fit_their_sample_line() {
    let errors = |text: &str| {
        let s = parse(text);
        let Command::Load(l) = &s.commands[0] else {
            panic!("load expected")
        };
        l.errors
            .iter()
            .map(|(line, m)| format!("{line}: {m}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        errors("load 1m\n  a{x=\"1\"}@st _ -1m\n  a{x=\"1\"} 1 2\n"),
        Vec::<String>::new()
    );
    assert_eq!(
        errors("load 1m\n  a@st _ -1m\n  b 1 2\n"),
        vec!["2: @st metric does not match the following sample line metric"]
    );
    assert_eq!(
        errors("load 1m\n  a@st _\n  a 1 2\n"),
        vec!["2: @st line has 1 values but sample line has 2"]
    );
    assert_eq!(
        errors("load 1m\n  a@st _\n  b@st _\n  b 1\n"),
        vec!["2: @st line has no following sample line"]
    );
    assert_eq!(
        errors("load 1m\n  a@st _\n"),
        vec!["2: @st line has no following sample line"]
    );
    assert_eq!(errors("load 1m\n  a@st 1q\n  a 1\n").len(), 1);
}

fn run(text: &str) -> FileReport {
    run_script("t.test", text, &Engine::default(), &RunOptions::default())
}

#[test]
fn skips_by_reason() {
    let r = run("load 1m\n\
         \x20 h{a=\"1\"} {{schema:0 sum:1 count:1}}\n\
         \x20 f {{schema:0 sum:1 count:1}} {{schema:-53 sum:1 count:1 custom_values:[1] buckets:[1]}}\n\
         \n\
         eval instant at 1m label_replace(f, \"b\", \"c\", \"a\", \".*\")\n\
         \x20 f{b=\"c\"} {{schema:-53 sum:1 count:1 custom_values:[1] buckets:[1]}}\n\
         \n\
         eval instant at 1m h\n\
         \x20 h{a=\"1\"} {{schema:0 sum:1 count:1}}\n\
         \n\
         eval instant at 1m foo +* bar\n\
         \n\
         clear\n\
         \n\
         eval instant at 1m sum(h)\n");
    let reasons: Vec<String> = r
        .cases
        .iter()
        .map(|c| match &c.outcome {
            Outcome::Skip { reason } => reason.clone(),
            o => format!("{o:?}"),
        })
        .collect();
    // Histograms pass through label_replace; a histogram result compares (and passes); an
    // unparseable query skips; the last case runs (the histogram data was cleared).
    assert_eq!(reasons[0], "Pass");
    assert_eq!(reasons[1], "Pass");
    assert_eq!(reasons[2], SKIP_UNPARSEABLE);
    assert_eq!(r.cases[0].line, 5);
    assert!(!reasons[3].contains("native histogram"));
    let mut sum = Summary::default();
    sum.add(&r);
    assert_eq!(sum.passed + sum.failed + sum.skipped, 4);
}

#[test]
fn malformed_lines_are_failures_with_lines() {
    let r = run("load 1m\n\
         \x20 foo{a=} 1\n\
         \n\
         what is this\n\
         \n\
         eval instant at 1m foo\n\
         \x20 expect bogus\n");
    let fails: Vec<usize> = r
        .cases
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Fail { .. }))
        .map(|c| c.line)
        .collect();
    assert_eq!(fails, vec![2, 4, 6]);
}

#[test]
fn filter_selects_cases() {
    let opts = RunOptions {
        filter: Some(Regex::new("t.test:5:").unwrap()),
        ..Default::default()
    };
    let r = run_script(
        "dir/t.test",
        "load 1m\n  foo 1\n\neval instant at 0 foo\n\neval instant at 1m foo\n",
        &Engine::default(),
        &opts,
    );
    assert_eq!(r.cases.len(), 0);
    let opts = RunOptions {
        filter: Some(Regex::new("t.test:6:").unwrap()),
        ..Default::default()
    };
    let r = run_script(
        "dir/t.test",
        "load 1m\n  foo 1\n\neval instant at 0 foo\n\neval instant at 1m foo\n",
        &Engine::default(),
        &opts,
    );
    assert_eq!(r.cases.len(), 1);
    assert_eq!(r.cases[0].line, 6);
}

#[test]
fn native_histogram_evaluation() {
    let r = run("load 1m\n\
         \x20 h {{schema:0 count:4 sum:10 buckets:[1 2 1]}}+{{schema:0 count:4 sum:10 buckets:[1 2 1]}}x4\n\
         \x20 g {{schema:0 count:4 sum:10 counter_reset_hint:gauge buckets:[1 2 1]}}x4\n\
         \x20 f 1 2 3\n\
         \n\
         eval instant at 2m h\n\
         \x20 h {{count:12 sum:30 counter_reset_hint:not_reset buckets:[3 6 3]}}\n\
         \n\
         eval instant at 2m histogram_count(h)\n\
         \x20 {} 12\n\
         \n\
         eval instant at 4m increase(h[2m])\n\
         \x20 {} {{count:8 sum:20 counter_reset_hint:gauge buckets:[2 4 2]}}\n\
         \n\
         eval instant at 4m rate(g[2m])\n\
         \x20 expect warn msg: PromQL warning: this native histogram metric is not a counter: \"g\" (1:6)\n\
         \x20 {} {{}}\n\
         \n\
         eval instant at 2m h - h\n\
         \x20 {} {{counter_reset_hint:gauge}}\n\
         \n\
         eval instant at 2m h * 2 + h\n\
         \x20 {} {{count:36 sum:90 buckets:[9 18 9]}}\n\
         \n\
         eval instant at 2m histogram_quantile(0.5, h)\n\
         \x20 {} 1.4142135623730951\n\
         \n\
         eval instant at 2m count_over_time(h[2m])\n\
         \x20 {} 2\n\
         \n\
         eval range from 0 to 2m step 1m histogram_sum(h)\n\
         \x20 {} 10 20 30\n\
         \n\
         eval instant at 2m sum(h) + on() count(h)\n\
         \x20 expect info msg: PromQL info: incompatible sample types encountered for binary operator \"+\": histogram + float (1:1)\n\
         \n\
         eval instant at 2m avg(h)\n\
         \x20 {} {{count:12 sum:30 counter_reset_hint:not_reset buckets:[3 6 3]}}\n\
         \n\
         eval instant at 2m h > 1\n\
         \x20 expect info msg: PromQL info: incompatible sample types encountered for binary operator \">\": histogram > float (1:1)\n\
         \n\
         eval instant at 2m max(h)\n\
         \x20 expect info msg: PromQL info: ignored histogram in max aggregation (1:1)\n\
         \n\
         eval instant at 2m h == h\n\
         \x20 expect no_info\n\
         \x20 h {{count:12 sum:30 counter_reset_hint:not_reset buckets:[3 6 3]}}\n\
         \n\
         eval instant at 0m count_values(\"v\", g)\n\
         \x20 {v=\"{count:4, sum:10, (0.5,1]:1, (1,2]:2, (2,4]:1}\"} 1\n");
    let outcomes: Vec<String> = r
        .cases
        .iter()
        .map(|c| match &c.outcome {
            Outcome::Pass => "pass".to_string(),
            Outcome::Skip { reason } => reason.clone(),
            o => format!("line {}: {o:?}", c.line),
        })
        .collect();
    // Pairs Prometheus cannot combine are dropped with its info; min/max/topk/... ignore
    // histograms; == keeps the left histogram; count_values names a histogram by its string.
    assert_eq!(outcomes.len(), 15, "{outcomes:#?}");
    assert!(outcomes.iter().all(|o| o == "pass"), "{outcomes:#?}");
}
