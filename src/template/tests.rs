//! Table-driven tests. Expected outputs are what Prometheus (Go `text/template` plus Prometheus'
//! function map) produces; many cases come from Prometheus' `template/template_test.go` and Go's
//! `text/template` tests.

use std::collections::BTreeMap;
use std::rc::Rc;

use super::value::{IntKind, UintKind, Value};
use super::*;
use crate::labels::Labels;

/// The integration tests' policy for missing tools (a failure, or with WATCHFIRE_TEST_OFFLINE=1 a
/// recorded skip).
// Shared with the integration tests, where its items are public.
#[allow(unreachable_pub)]
#[path = "../../tests/common/require.rs"]
mod require;

const EXT_URL: &str = "http://testhost:9090/path/prefix";

struct MockQuerier(Vec<QuerySample>);

impl Querier for MockQuerier {
    fn query(&self, expr: &str) -> Result<Vec<QuerySample>, String> {
        if expr == "fail" {
            return Err("query failed".into());
        }
        Ok(self.0.clone())
    }
}

fn sample(pairs: &[(&str, &str)], value: f64) -> QuerySample {
    QuerySample {
        labels: Labels::from_pairs(pairs.iter().copied()),
        value,
    }
}

fn floats(v: &[f64]) -> Value {
    Value::List(Rc::new(v.iter().map(|f| Value::Float(*f)).collect()), "float64")
}

fn strs(v: &[&str]) -> Value {
    Value::List(Rc::new(v.iter().map(|s| Value::str(s)).collect()), "string")
}

fn int64s(v: &[i64]) -> Value {
    Value::List(
        Rc::new(v.iter().map(|i| Value::Int(*i, IntKind::Int64)).collect()),
        "int64",
    )
}

fn ints(v: &[i64]) -> Value {
    Value::List(Rc::new(v.iter().map(|i| Value::int(*i)).collect()), "int")
}

fn uint64s(v: &[u64]) -> Value {
    Value::List(
        Rc::new(v.iter().map(|u| Value::Uint(*u, UintKind::Uint64)).collect()),
        "uint64",
    )
}

fn uints(v: &[u64]) -> Value {
    Value::List(
        Rc::new(v.iter().map(|u| Value::Uint(*u, UintKind::Uint)).collect()),
        "uint",
    )
}

trait Both {
    fn both(&self) -> Result<&str, &str>;
}

impl Both for Result<String, String> {
    fn both(&self) -> Result<&str, &str> {
        self.as_ref().map(String::as_str).map_err(String::as_str)
    }
}

fn run(text: &str, data: Value, querier: Option<&dyn Querier>) -> Result<String, TemplateError> {
    render("test", "", text, data, querier, 0, EXT_URL)
}

/// Runs with no data and a querier returning `samples`.
fn expand_q(text: &str, samples: Vec<QuerySample>) -> Result<String, String> {
    let q = MockQuerier(samples);
    run(text, Value::Invalid, Some(&q)).map_err(|e| e.to_string())
}

fn expand(text: &str) -> Result<String, String> {
    expand_q(text, vec![])
}

fn expand_data(text: &str, data: Value) -> Result<String, String> {
    run(text, data, None).map_err(|e| e.to_string())
}

#[track_caller]
fn check_ok(cases: &[(&str, &str)]) {
    for (text, want) in cases {
        assert_eq!(expand(text).both(), Ok(*want), "template: {text}");
    }
}

#[track_caller]
fn check_err(cases: &[(&str, &str)]) {
    for (text, want) in cases {
        assert_eq!(expand(text).both(), Err(*want), "template: {text}");
    }
}

fn alert_data() -> TemplateData {
    TemplateData {
        labels: [
            ("alertname", "HighLatency"),
            ("instance", "node-1:9100"),
            ("job", "api"),
            ("namespace", "ml"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        external_labels: [("cluster", "eks-prod")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        external_url: "http://prom.example.com:9090/prom".into(),
        value: 0.1234,
    }
}

fn expand_alert(text: &str) -> Result<String, TemplateError> {
    let data = alert_data();
    let q = MockQuerier(vec![sample(&[("__name__", "up"), ("instance", "a")], 1.0)]);
    Expander::new("__alert_HighLatency", text, &data, Some(&q), 1_435_065_584_128).expand()
}

// ---------------------------------------------------------------------------------------------
// Prometheus' template_test.go.

#[test]
fn prometheus_basics() {
    check_ok(&[
        ("plain text", "plain text"),
        ("{{ 1 }}", "1"),
        ("{{ \"<b>\" }}", "<b>"),
        (
            "{{define \"x\"}}{{.arg0}} {{.arg1}}{{end}}{{template \"x\" (args 1 \"2\")}}",
            "1 2",
        ),
        ("{{ reReplaceAll \"(a)b\" \"x$1\" \"ab\" }}", "xa"),
        ("{{ \"aa bb CC\" | title }}", "Aa Bb CC"),
        ("{{ \"aa bb CC\" | toUpper }}", "AA BB CC"),
        ("{{ \"aA bB CC\" | toLower }}", "aa bb cc"),
        ("{{ match \"a+\" \"aa\" }} {{ match \"a+\" \"b\" }}", "true false"),
        ("{{ graphLink \"up\" }}", "/graph?g0.expr=up&g0.tab=0"),
        ("{{ tableLink \"up\" }}", "/graph?g0.expr=up&g0.tab=1"),
        ("{{ pathPrefix }}", "/path/prefix"),
        ("{{ externalURL }}", "http://testhost:9090/path/prefix"),
        ("{{ printf \"%0.2f\" (parseDuration \"1h2m10ms\") }}", "3720.01"),
        ("{{ .Foo }}", "<no value>"),
    ]);
    check_err(&[
        (
            "{{ \u{a0}}}",
            "error parsing template test: template: test:1: unrecognized character in action: U+00A0",
        ),
        ("{{", "error parsing template test: template: test:1: unclosed action"),
    ]);
}

#[test]
fn prometheus_queries() {
    let a = || vec![sample(&[("__name__", "metric"), ("instance", "a")], 11.0)];
    let cases: &[(&str, Vec<QuerySample>, &str)] = &[
        ("{{ query \"1.5\" | first | value }}", vec![sample(&[], 1.5)], "1.5"),
        ("{{ query \"metric{instance='a'}\" | first | value }}", a(), "11"),
        (
            "{{ query \"metric{instance='a'}\" | first | label \"instance\" }}",
            a(),
            "a",
        ),
        (
            "{{ query \"metric{__value__='a'}\" | first | strvalue }}",
            vec![sample(&[("__name__", "metric"), ("__value__", "a")], 11.0)],
            "a",
        ),
        ("{{ query \"metric{instance='a'}\" | first | label \"foo\" }}", a(), ""),
        ("{{ $x := query \"metric\" | first }}{{ $x.Labels.foo }}", a(), ""),
        (
            "{{ range query \"metric\" | sortByLabel \"instance\" }}{{.Labels.instance}}:{{.Value}}: {{end}}",
            vec![
                sample(&[("__name__", "metric"), ("instance", "b")], 21.0),
                sample(&[("__name__", "metric"), ("instance", "a")], 11.0),
            ],
            "a:11: b:21: ",
        ),
        (
            "{{ with query \"x\" }}{{ . | first | value | humanize }}{{ end }}",
            vec![sample(&[], 1234567.0)],
            "1.235M",
        ),
        ("{{ with query \"x\" }}yes{{ else }}none{{ end }}", vec![], "none"),
        ("{{ query \"x\" | len }}", a(), "1"),
        ("{{ (query \"x\" | first).Labels.instance }}", a(), "a"),
        ("{{ index (query \"x\") 0 | value }}", a(), "11"),
        (
            "{{ range $i, $s := query \"x\" }}{{ $i }}={{ $s.Value }}{{ end }}",
            a(),
            "0=11",
        ),
        ("{{ query \"x\" | first }}", a(), "{map[__name__:metric instance:a] 11}"),
        (
            "{{ print (query \"x\" | first) }}",
            a(),
            "&{map[__name__:metric instance:a] 11}",
        ),
        (
            "{{ printf \"%+v\" (query \"x\" | first) }}",
            a(),
            "&{Labels:map[__name__:metric instance:a] Value:11}",
        ),
    ];
    for (text, samples, want) in cases {
        assert_eq!(expand_q(text, samples.clone()).both(), Ok(*want), "template: {text}");
    }
    let errs: &[(&str, &str)] = &[
        (
            "{{ query \"missing\" | first }}",
            "error executing template test: template: test:1:21: executing \"test\" at <first>: error calling first: first() called on vector with no elements",
        ),
        (
            "{{ (query \"missing\").banana }}",
            "error executing template test: template: test:1:10: executing \"test\" at <\"missing\">: can't evaluate field banana in type template.queryResult",
        ),
        (
            "{{ query \"fail\" }}",
            "error executing template test: template: test:1:3: executing \"test\" at <query \"fail\">: error calling query: query failed",
        ),
        (
            "{{ query \"x\" | value }}",
            "error executing template test: template: test:1:15: executing \"test\" at <value>: wrong type for value; expected *template.sample; got template.queryResult",
        ),
    ];
    for (text, want) in errs {
        assert_eq!(expand(text).both(), Err(*want), "template: {text}");
    }
}

#[test]
fn prometheus_strip_port_and_domain() {
    check_ok(&[
        ("{{ \"foo.example.com\" | stripPort }}", "foo.example.com"),
        ("{{ \"foo.example.com:12345\" | stripPort }}", "foo.example.com"),
        ("{{ \"192.0.2.1\" | stripPort }}", "192.0.2.1"),
        ("{{ \"192.0.2.1:12345\" | stripPort }}", "192.0.2.1"),
        ("{{ \"2001:0DB8::1\" | stripPort }}", "2001:0DB8::1"),
        ("{{ \"[2001:0DB8::1]:12345\" | stripPort }}", "2001:0DB8::1"),
        ("{{ \"[2001:0DB8::1]::12345\" | stripPort }}", "[2001:0DB8::1]::12345"),
        ("{{ \"foo.example.com\" | stripDomain }}", "foo"),
        ("{{ \"foo.example.com:12345\" | stripDomain }}", "foo:12345"),
        ("{{ \"192.0.2.1\" | stripDomain }}", "192.0.2.1"),
        ("{{ \"192.0.2.1:12345\" | stripDomain }}", "192.0.2.1:12345"),
        ("{{ \"2001:0DB8::1\" | stripDomain }}", "2001:0DB8::1"),
        ("{{ \"[2001:0DB8::1]:12345\" | stripDomain }}", "[2001:0DB8::1]:12345"),
        ("{{ \"[2001:0DB8::1]::12345\" | stripDomain }}", "[2001:0DB8::1]::12345"),
    ]);
}

#[test]
fn prometheus_humanize_family() {
    let range = |f: &str| format!("{{{{ range . }}}}{{{{ {f} . }}}}:{{{{ end }}}}");
    let cases: Vec<(String, Value, &str)> = vec![
        (range("humanize"), floats(&[0.0, 1.0, 1234567.0, 0.12]), "0:1:1.235M:120m:"),
        (range("humanize"), strs(&["0.0", "1.0", "1234567.0", ".12"]), "0:1:1.235M:120m:"),
        (range("humanize"), int64s(&[0, -1, 1, 1234567, i64::MAX]), "0:-1:1:1.235M:9.223E:"),
        (range("humanize"), uint64s(&[0, 1, 1234567, u64::MAX]), "0:1:1.235M:18.45E:"),
        (range("humanize1024"), floats(&[0.0, 1.0, 1048576.0, 0.12]), "0:1:1Mi:0.12:"),
        (range("humanize1024"), strs(&["0.0", "1.0", "1048576.0", ".12"]), "0:1:1Mi:0.12:"),
        (range("humanize1024"), int64s(&[0, -1, 1, 1234567, i64::MAX]), "0:-1:1:1.177Mi:8Ei:"),
        (range("humanize1024"), uint64s(&[0, 1, 1234567, u64::MAX]), "0:1:1.177Mi:16Ei:"),
        (
            range("humanizeDuration"),
            floats(&[0.0, 1.0, 60.0, 3600.0, 86400.0, 86400.0 + 3600.0, -(86400.0 * 2.0 + 3600.0 * 3.0 + 60.0 * 4.0 + 5.0), 899.99]),
            "0s:1s:1m 0s:1h 0m 0s:1d 0h 0m 0s:1d 1h 0m 0s:-2d 3h 4m 5s:14m 59s:",
        ),
        (range("humanizeDuration"), strs(&["0", "1", "60", "3600", "86400"]), "0s:1s:1m 0s:1h 0m 0s:1d 0h 0m 0s:"),
        (
            range("humanizeDuration"),
            floats(&[0.1, 0.0001, 0.12345, 60.1, 60.5, 1.2345, 12.345]),
            "100ms:100us:123.5ms:1m 0s:1m 0s:1.234s:12.35s:",
        ),
        (
            range("humanizeDuration"),
            strs(&[".1", ".0001", ".12345", "60.1", "60.5", "1.2345", "12.345"]),
            "100ms:100us:123.5ms:1m 0s:1m 0s:1.234s:12.35s:",
        ),
        (range("humanizeDuration"), ints(&[0, -1, 1, 1234567]), "0s:-1s:1s:14d 6h 56m 7s:"),
        (range("humanizeDuration"), uints(&[0, 1, 1234567]), "0s:1s:14d 6h 56m 7s:"),
        (
            "{{ range . }}{{ humanize . }}:{{ humanize1024 . }}:{{ humanizeDuration . }}:{{humanizeTimestamp .}}:{{ end }}"
                .to_string(),
            floats(&[f64::INFINITY, f64::NEG_INFINITY, f64::NAN]),
            "+Inf:+Inf:+Inf:+Inf:-Inf:-Inf:-Inf:-Inf:NaN:NaN:NaN:NaN:",
        ),
        (
            "{{ range . }}{{ humanize . }}:{{ humanize1024 . }}:{{ humanizeDuration . }}:{{humanizeTimestamp .}}:{{ end }}"
                .to_string(),
            strs(&["+Inf", "-Inf", "NaN"]),
            "+Inf:+Inf:+Inf:+Inf:-Inf:-Inf:-Inf:-Inf:NaN:NaN:NaN:NaN:",
        ),
        (range("humanizePercentage"), int64s(&[0, -1, 1, 1234567, i64::MAX]), "0%:-100%:100%:1.235e+08%:9.223e+20%:"),
        (range("humanizePercentage"), uint64s(&[0, 1, 1234567, u64::MAX]), "0%:100%:1.235e+08%:1.845e+21%:"),
        (
            range("humanizeTimestamp"),
            int64s(&[0, -1, 1, 1234567, 9223372036]),
            "1970-01-01 00:00:00 +0000 UTC:1969-12-31 23:59:59 +0000 UTC:1970-01-01 00:00:01 +0000 UTC:1970-01-15 06:56:07 +0000 UTC:2262-04-11 23:47:16 +0000 UTC:",
        ),
        (
            range("humanizeTimestamp"),
            uint64s(&[0, 1, 1234567, 9223372036]),
            "1970-01-01 00:00:00 +0000 UTC:1970-01-01 00:00:01 +0000 UTC:1970-01-15 06:56:07 +0000 UTC:2262-04-11 23:47:16 +0000 UTC:",
        ),
    ];
    for (text, data, want) in cases {
        assert_eq!(expand_data(&text, data).both(), Ok(want), "template: {text}");
    }
    check_ok(&[
        (
            "{{ -0.22222 | humanizePercentage }}:{{ 0.0 | humanizePercentage }}:{{ 0.1234567 | humanizePercentage }}:{{ 1.23456 | humanizePercentage }}",
            "-22.22%:0%:12.35%:123.5%",
        ),
        (
            "{{ \"-0.22222\" | humanizePercentage }}:{{ \"0.0\" | humanizePercentage }}:{{ \"0.1234567\" | humanizePercentage }}:{{ \"1.23456\" | humanizePercentage }}",
            "-22.22%:0%:12.35%:123.5%",
        ),
        ("{{ 1435065584.128 | humanizeTimestamp }}", "2015-06-23 13:19:44.128 +0000 UTC"),
        ("{{ \"1435065584.128\" | humanizeTimestamp }}", "2015-06-23 13:19:44.128 +0000 UTC"),
        ("{{ (1435065584.128 | toTime).Format \"2006\" }}", "2015"),
        ("{{ (\"1435065584.128\" | toTime).Format \"2006\" }}", "2015"),
    ]);
    check_err(&[
        (
            "{{ humanize \"one\" }}",
            "error executing template test: template: test:1:3: executing \"test\" at <humanize \"one\">: error calling humanize: strconv.ParseFloat: parsing \"one\": invalid syntax",
        ),
        (
            "{{ humanize1024 \"one\" }}",
            "error executing template test: template: test:1:3: executing \"test\" at <humanize1024 \"one\">: error calling humanize1024: strconv.ParseFloat: parsing \"one\": invalid syntax",
        ),
        (
            "{{ humanizeDuration \"one\" }}",
            "error executing template test: template: test:1:3: executing \"test\" at <humanizeDuration \"one\">: error calling humanizeDuration: strconv.ParseFloat: parsing \"one\": invalid syntax",
        ),
        (
            "{{ \"one\" | humanizePercentage }}",
            "error executing template test: template: test:1:11: executing \"test\" at <humanizePercentage>: error calling humanizePercentage: strconv.ParseFloat: parsing \"one\": invalid syntax",
        ),
    ]);
    let errs: Vec<(Value, &str)> = vec![
        (
            int64s(&[i64::MIN, i64::MAX]),
            "error executing template test: template: test:1:16: executing \"test\" at <humanizeTimestamp .>: error calling humanizeTimestamp: -9.223372036854776e+18 cannot be represented as a nanoseconds timestamp since it overflows int64",
        ),
        (
            uint64s(&[u64::MAX]),
            "error executing template test: template: test:1:16: executing \"test\" at <humanizeTimestamp .>: error calling humanizeTimestamp: 1.8446744073709552e+19 cannot be represented as a nanoseconds timestamp since it overflows int64",
        ),
    ];
    for (data, want) in errs {
        assert_eq!(
            expand_data("{{ range . }}{{ humanizeTimestamp . }}:{{ end }}", data).both(),
            Err(want)
        );
    }
}

#[test]
fn brief_examples() {
    check_ok(&[
        ("{{ humanize 1234567 }}", "1.235M"),
        ("{{ humanize 0.00012 }}", "120u"),
        ("{{ humanizeDuration 90061 }}", "1d 1h 1m 1s"),
        ("{{ humanizeDuration 0.1234 }}", "123.4ms"),
        ("{{ humanizePercentage 0.1234 }}", "12.34%"),
        (
            "{{ humanizeTimestamp 1435065584.128 }}",
            "2015-06-23 13:19:44.128 +0000 UTC",
        ),
        ("{{ humanize \"1234567\" }}", "1.235M"),
        ("{{ humanize1024 1073741824 }}", "1Gi"),
        ("{{ humanize -1234.5 }}", "-1.234k"),
        ("{{ humanize 999.99 }}", "1000"),
        ("{{ humanize 1e30 }}", "1e+06Y"),
        ("{{ humanize 1e-30 }}", "1e-06y"),
        ("{{ humanizeDuration -0.5 }}", "-500ms"),
        ("{{ humanizeDuration 3.1e-7 }}", "310ns"),
        ("{{ humanizeDuration 59.999 }}", "60s"),
    ]);
}

// ---------------------------------------------------------------------------------------------
// Go formatting of numbers.

#[test]
fn float_printing_matches_go() {
    check_ok(&[
        ("{{ 1e6 }}", "1e+06"),
        ("{{ 100000.0 }}", "100000"),
        ("{{ 0.0001 }}", "0.0001"),
        ("{{ 1e-05 }}", "1e-05"),
        ("{{ 1234567.0 }}", "1.234567e+06"),
        ("{{ 123456.7 }}", "123456.7"),
        ("{{ 0.1 }}", "0.1"),
        ("{{ 3.0 }}", "3"),
        ("{{ -0.5 }}", "-0.5"),
        ("{{ 1e21 }}", "1e+21"),
        ("{{ 0x10 }}", "16"),
        ("{{ 1_000 }}", "1000"),
        ("{{ 'a' }}", "97"),
        ("{{ 0o17 }}", "15"),
        ("{{ 017 }}", "15"),
        ("{{ 0b101 }}", "5"),
        ("{{ -7 }}", "-7"),
        ("{{ +7 }}", "7"),
        ("{{ 1.5e3 }}", "1500"),
    ]);
}

#[test]
fn printf_formats() {
    check_ok(&[
        ("{{ printf \"%.2f\" 3.14159 }}", "3.14"),
        ("{{ printf \"%d\" 42 }}", "42"),
        ("{{ printf \"%s\" \"x\" }}", "x"),
        ("{{ printf \"%v\" 1.5 }}", "1.5"),
        ("{{ printf \"%q\" \"a\\\"b\" }}", "\"a\\\"b\""),
        ("{{ printf \"%x\" 255 }}", "ff"),
        ("{{ printf \"%X\" 255 }}", "FF"),
        ("{{ printf \"%x\" \"hi\" }}", "6869"),
        ("{{ printf \"%5.1f\" 3.14159 }}", "  3.1"),
        ("{{ printf \"%-6.1f|\" 3.14159 }}", "3.1   |"),
        ("{{ printf \"%06.2f\" -3.14159 }}", "-03.14"),
        ("{{ printf \"%+.1f\" 2.0 }}", "+2.0"),
        ("{{ printf \"%g\" 1e6 }}", "1e+06"),
        ("{{ printf \"%g\" 123456.0 }}", "123456"),
        ("{{ printf \"%.3g\" 1234.5678 }}", "1.23e+03"),
        ("{{ printf \"%e\" 1234.5678 }}", "1.234568e+03"),
        ("{{ printf \"%E\" 0.0 }}", "0.000000E+00"),
        ("{{ printf \"%f\" 1e6 }}", "1000000.000000"),
        ("{{ printf \"%.0f\" 0.5 }}", "0"),
        ("{{ printf \"%.0f\" 1.5 }}", "2"),
        ("{{ printf \"%.0f\" 2.5 }}", "2"),
        ("{{ printf \"%.1f\" 0.25 }}", "0.2"),
        ("{{ printf \"%.1f\" 0.35 }}", "0.3"),
        ("{{ printf \"%.2f\" 1.005 }}", "1.00"),
        ("{{ printf \"%.2f\" 0.125 }}", "0.12"),
        ("{{ printf \"%.3f\" 0.0005 }}", "0.001"),
        ("{{ printf \"%5d|%-5d|%05d\" 42 42 42 }}", "   42|42   |00042"),
        ("{{ printf \"%+d % d\" 5 5 }}", "+5  5"),
        ("{{ printf \"%o %#o %#x %b\" 8 8 255 5 }}", "10 010 0xff 101"),
        ("{{ printf \"%c%c\" 72 105 }}", "Hi"),
        ("{{ printf \"%q\" 65 }}", "'A'"),
        ("{{ printf \"%U\" 65 }}", "U+0041"),
        ("{{ printf \"%t\" true }}", "true"),
        ("{{ printf \"%8s|%-8s|\" \"ab\" \"cd\" }}", "      ab|cd      |"),
        ("{{ printf \"%.2s\" \"abcdef\" }}", "ab"),
        (
            "{{ printf \"%T %T %T %T\" 1 1.5 \"s\" true }}",
            "int float64 string bool",
        ),
        ("{{ printf \"100%%\" }}", "100%"),
        ("{{ printf \"%d%%\" 50 }}", "50%"),
        ("{{ printf \"%v %v\" nil true }}", "<nil> true"),
        ("{{ printf \"%[2]d %[1]d\" 1 2 }}", "2 1"),
        ("{{ printf \"%*d|\" 5 42 }}", "   42|"),
        ("{{ printf \"%.*f\" 2 3.14159 }}", "3.14"),
        ("{{ printf \"%x\" 1.0 }}", "0x1p+00"),
        ("{{ printf \"%.1e\" 9.96 }}", "1.0e+01"),
        ("{{ printf \"%G\" 1e-10 }}", "1E-10"),
        ("{{ printf \"%v\" 1e-7 }}", "1e-07"),
        ("{{ printf \"%8.3f|\" -1.0 }}", "  -1.000|"),
        ("{{ printf \"% .2f\" 1.0 }}", " 1.00"),
        ("{{ printf \"%#g\" 1.0 }}", "1.00000"),
        ("{{ printf \"%#.3x\" \"abc\" }}", "0x616263"),
        ("{{ printf \"% x\" \"abc\" }}", "61 62 63"),
        ("{{ printf \"%+q\" \"é\" }}", "\"\\u00e9\""),
        ("{{ printf \"%q\" \"é\\n\" }}", "\"é\\n\""),
        ("{{ printf \"%#q\" \"abc\" }}", "`abc`"),
    ]);
}

#[test]
fn printf_bad_verbs_and_args() {
    check_ok(&[
        ("{{ printf \"%d\" 1.5 }}", "%!d(float64=1.5)"),
        ("{{ printf \"%s\" 1.5 }}", "%!s(float64=1.5)"),
        ("{{ printf \"%s\" 3 }}", "%!s(int=3)"),
        ("{{ printf \"%.2f\" 3 }}", "%!f(int=03)"),
        ("{{ printf \"%d\" \"x\" }}", "%!d(string=x)"),
        ("{{ printf \"%d\" }}", "%!d(MISSING)"),
        ("{{ printf \"%d %d\" 1 }}", "1 %!d(MISSING)"),
        ("{{ printf \"x\" 1 \"a\" }}", "x%!(EXTRA int=1, string=a)"),
        ("{{ printf \"%d\" nil }}", "%!d(<nil>)"),
        ("{{ printf \"%\" }}", "%!(NOVERB)"),
        ("{{ printf \"%z\" 1 }}", "%!z(int=1)"),
        ("{{ printf \"%!\" 1 }}", "%!!(int=1)"),
        ("{{ printf \"%5d\" \"abc\" }}", "%!d(string=  abc)"),
        ("{{ printf \"%t\" 1 }}", "%!t(int=1)"),
    ]);
}

#[test]
fn print_and_println() {
    check_ok(&[
        ("{{ print 1 2 }}", "1 2"),
        ("{{ print \"a\" 1 2 \"b\" }}", "a1 2b"),
        ("{{ print \"a\" \"b\" }}", "ab"),
        ("{{ println 1 \"a\" }}", "1 a\n"),
        ("{{ print nil }}", "<nil>"),
        ("{{ print 1.0 true }}", "1 true"),
        ("{{ print }}", ""),
    ]);
}

// ---------------------------------------------------------------------------------------------
// Go text/template: syntax and control flow.

#[test]
fn trim_markers_and_comments() {
    check_ok(&[
        ("a  {{- \"b\" -}}  c", "abc"),
        ("a \n\t {{- 3 }} \n c", "a3 \n c"),
        ("a {{ 3 -}} \n\t c", "a 3c"),
        ("{{- 3 -}}", "3"),
        ("x {{- /* comment */ -}} y", "xy"),
        ("x {{/* comment */}} y", "x  y"),
        ("{{/* multi\nline */}}z", "z"),
        ("{{ -3 }}", "-3"),
        ("{{-3}}", "-3"),
        ("a\n{{- if true }}\nb\n{{- end }}\n", "a\nb\n"),
        ("{{ if true -}}\n  yes\n{{- end }}", "yes"),
        ("{{- \"x\"\n-}}\n\ny", "xy"),
    ]);
}

#[test]
fn variables() {
    check_ok(&[
        ("{{ $x := 1 }}{{ $x }}", "1"),
        ("{{ $x := 1 }}{{ $x = 2 }}{{ $x }}", "2"),
        ("{{ $x := \"a\" }}{{ if true }}{{ $x = \"b\" }}{{ end }}{{ $x }}", "b"),
        ("{{ $x := 1 }}{{ if true }}{{ $x := 2 }}{{ $x }}{{ end }}{{ $x }}", "21"),
        ("{{ with $x := 5 }}{{ $x }}{{ . }}{{ end }}", "55"),
        ("{{ $ }}", "<no value>"),
        ("{{ $x := (print \"a\" \"b\") }}{{ $x | printf \"%s!\" }}", "ab!"),
    ]);
    check_err(&[
        (
            "{{ $y }}",
            "error parsing template test: template: test:1: undefined variable \"$y\"",
        ),
        (
            "{{ if true }}{{ $x := 1 }}{{ end }}{{ $x }}",
            "error parsing template test: template: test:1: undefined variable \"$x\"",
        ),
    ]);
}

#[test]
fn if_else_with() {
    check_ok(&[
        ("{{ if true }}a{{ else }}b{{ end }}", "a"),
        ("{{ if false }}a{{ else }}b{{ end }}", "b"),
        (
            "{{ if 0 }}a{{ else if \"\" }}b{{ else if 0.0 }}c{{ else }}d{{ end }}",
            "d",
        ),
        ("{{ if 1 }}a{{ else if true }}b{{ end }}", "a"),
        ("{{ if .x }}a{{ else }}b{{ end }}", "b"),
        ("{{ with \"x\" }}{{ . }}{{ end }}", "x"),
        ("{{ with \"\" }}{{ . }}{{ else }}empty{{ end }}", "empty"),
        ("{{ with 0 }}a{{ else with 2 }}{{ . }}{{ else }}c{{ end }}", "2"),
        ("{{ with 0 }}a{{ else with 0 }}b{{ else }}c{{ end }}", "c"),
        ("{{ if and 1 0 }}a{{ else }}b{{ end }}", "b"),
        ("{{ if or 0 \"x\" }}a{{ end }}", "a"),
        ("{{ if not 0 }}yes{{ end }}", "yes"),
    ]);
    check_err(&[
        (
            "{{ if true }}a",
            "error parsing template test: template: test:1: unexpected EOF",
        ),
        (
            "{{ end }}",
            "error parsing template test: template: test:1: unexpected {{end}}",
        ),
        (
            "{{ else }}",
            "error parsing template test: template: test:1: unexpected {{else}}",
        ),
        (
            "{{ if }}{{ end }}",
            "error parsing template test: template: test:1: missing value for if",
        ),
        (
            "{{ if true }}a{{ else }}b{{ else }}c{{ end }}",
            "error parsing template test: template: test:1: expected end; found {{else}}",
        ),
    ]);
}

#[test]
fn and_or_return_values() {
    check_ok(&[
        ("{{ and 1 2 }}", "2"),
        ("{{ and 1 0 2 }}", "0"),
        ("{{ or 0 \"\" 3 }}", "3"),
        ("{{ or 0 \"\" }}", ""),
        ("{{ or .missing \"default\" }}", "default"),
        ("{{ and 1 .missing }}", "<no value>"),
        ("{{ 0 | or 1 }}", "1"),
        ("{{ 5 | and 1 }}", "5"),
        // Short-circuit: the erroring call is never evaluated.
        ("{{ or 1 (humanize \"x\") }}", "1"),
        ("{{ and 0 (humanize \"x\") }}", "0"),
    ]);
}

#[test]
fn range_loops() {
    let m: BTreeMap<String, String> = [("b", "2"), ("a", "1"), ("c", "3")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let map = Value::StrMap(Rc::new(m));
    let cases: Vec<(&str, Value, &str)> = vec![
        ("{{ range . }}{{ . }},{{ end }}", map.clone(), "1,2,3,"),
        (
            "{{ range $k, $v := . }}{{ $k }}={{ $v }};{{ end }}",
            map.clone(),
            "a=1;b=2;c=3;",
        ),
        ("{{ range $v := . }}{{ $v }}{{ end }}", map.clone(), "123"),
        (
            "{{ range $i, $e := . }}{{ $i }}:{{ $e }} {{ end }}",
            strs(&["x", "y"]),
            "0:x 1:y ",
        ),
        ("{{ range . }}{{ . }}{{ else }}empty{{ end }}", strs(&[]), "empty"),
        (
            "{{ range . }}{{ if eq . \"b\" }}{{ break }}{{ end }}{{ . }}{{ end }}",
            strs(&["a", "b", "c"]),
            "a",
        ),
        (
            "{{ range . }}{{ if eq . \"b\" }}{{ continue }}{{ end }}{{ . }}{{ end }}",
            strs(&["a", "b", "c"]),
            "ac",
        ),
        (
            "{{ range $i, $e := . }}{{ range $e }}{{ end }}{{ $i }}{{ end }}",
            Value::Invalid,
            "",
        ),
        (
            "{{ $n := 0 }}{{ range . }}{{ $n = . }}{{ end }}{{ $n }}",
            strs(&["p", "q"]),
            "q",
        ),
        ("{{ range . }}{{ $ }}{{ end }}", strs(&["a"]), "[a]"),
    ];
    for (text, data, want) in cases {
        assert_eq!(expand_data(text, data).both(), Ok(want), "template: {text}");
    }
    check_ok(&[
        ("{{ range 3 }}{{ . }}{{ end }}", "012"),
        ("{{ range $i := 2 }}[{{ $i }}]{{ end }}", "[0][1]"),
        ("{{ range 0 }}x{{ else }}none{{ end }}", "none"),
        ("{{ range .missing }}x{{ else }}none{{ end }}", "none"),
        (
            "{{ range $i, $e := args \"a\" \"b\" }}{{ $i }}={{ $e }} {{ end }}",
            "arg0=a arg1=b ",
        ),
    ]);
    check_err(&[
        (
            "{{ range 1.5 }}{{ end }}",
            "error executing template test: template: test:1:9: executing \"test\" at <1.5>: range can't iterate over 1.5",
        ),
        ("{{ break }}", "error parsing template test: template: test:1: {{break}} outside {{range}}"),
        ("{{ if true }}{{ continue }}{{ end }}", "error parsing template test: template: test:1: {{continue}} outside {{range}}"),
        (
            "{{ range $a, $b, $c := . }}{{ end }}",
            "error parsing template test: template: test:1: too many declarations in range",
        ),
    ]);
}

#[test]
fn define_template_block() {
    check_ok(&[
        ("{{ define \"t\" }}[{{ . }}]{{ end }}{{ template \"t\" 5 }}", "[5]"),
        (
            "{{ define \"t\" }}[{{ . }}]{{ end }}{{ template \"t\" }}",
            "[<no value>]",
        ),
        ("{{ block \"b\" \"x\" }}<{{ . }}>{{ end }}", "<x>"),
        (
            "{{ define \"t\" }}{{ $ }}{{ end }}{{ $x := 1 }}{{ template \"t\" \"y\" }}",
            "y",
        ),
        ("{{ template \"t\" 1 }}{{ define \"t\" }}T{{ . }}{{ end }}", "T1"),
    ]);
    check_err(&[
        (
            "{{ template \"nope\" }}",
            "error executing template test: template: test:1:12: executing \"test\" at <{{template \"nope\"}}>: template \"nope\" not defined",
        ),
        (
            "{{ define \"t\" }}a{{ end }}{{ define \"t\" }}b{{ end }}",
            "error parsing template test: template: test:1: template: multiple definition of template \"t\"",
        ),
        (
            "{{ define \"r\" }}{{ template \"r\" . }}{{ end }}{{ template \"r\" 1 }}",
            "error executing template test: template: test:1:28: executing \"r\" at <{{template \"r\" .}}>: exceeded maximum template depth (100000)",
        ),
        (
            "{{ define \"t\" }}{{ .x.y }}{{ end }}{{ template \"t\" 1 }}",
            "error executing template test: template: test:1:21: executing \"t\" at <.x.y>: can't evaluate field x in type int",
        ),
    ]);
}

#[test]
fn builtin_functions() {
    check_ok(&[
        ("{{ len \"abc\" }}", "3"),
        ("{{ len \"é\" }}", "2"),
        ("{{ index \"abc\" 1 }}", "98"),
        ("{{ slice \"abcdef\" 1 3 }}", "bc"),
        ("{{ slice \"abcdef\" 2 }}", "cdef"),
        ("{{ slice \"abc\" }}", "abc"),
        (
            "{{ html \"<a href='x'>&\\\"</a>\" }}",
            "&lt;a href=&#39;x&#39;&gt;&amp;&#34;&lt;/a&gt;",
        ),
        (
            "{{ js \"it's <b>\\\"=\\\\\" }}",
            "it\\'s \\u003Cb\\u003E\\\"\\u003D\\\\",
        ),
        ("{{ urlquery \"a b&c/d?é\" }}", "a+b%26c%2Fd%3F%C3%A9"),
        ("{{ urlquery 1 2 }}", "1+2"),
        ("{{ html .missing }}", "&lt;no value&gt;"),
        ("{{ \"a<b\" | html }}", "a&lt;b"),
        ("{{ not true }}", "false"),
        ("{{ not \"\" }}", "true"),
        ("{{ eq 1 1 }}", "true"),
        ("{{ eq 1 2 3 1 }}", "true"),
        ("{{ eq \"a\" \"b\" \"c\" }}", "false"),
        ("{{ eq 1.5 1.5 }}", "true"),
        ("{{ ne 1 2 }}", "true"),
        ("{{ lt 1 2 }}", "true"),
        ("{{ le 2 2 }}", "true"),
        ("{{ gt 2.5 1.5 }}", "true"),
        ("{{ ge \"b\" \"a\" }}", "true"),
        ("{{ lt \"a\" \"b\" }}", "true"),
        ("{{ eq .missing .other }}", "true"),
        ("{{ eq .missing \"x\" }}", "false"),
        ("{{ eq true true }}", "true"),
        ("{{ index (args 1 2) \"arg1\" }}", "2"),
        ("{{ index (args 1) \"nope\" }}", "<no value>"),
        ("{{ (args \"v\").arg0 }}", "v"),
        ("{{ (args).nope }}", "<no value>"),
        ("{{ args 1 \"a\" }}", "map[arg0:1 arg1:a]"),
    ]);
    check_err(&[
        (
            "{{ eq 1 1.0 }}",
            "error executing template test: template: test:1:3: executing \"test\" at <eq 1 1.0>: error calling eq: incompatible types for comparison: int and float64",
        ),
        (
            "{{ lt true false }}",
            "error executing template test: template: test:1:3: executing \"test\" at <lt true false>: error calling lt: invalid type for comparison",
        ),
        (
            "{{ eq 1 }}",
            "error executing template test: template: test:1:3: executing \"test\" at <eq 1>: error calling eq: missing argument for comparison",
        ),
        (
            "{{ len 3 }}",
            "error executing template test: template: test:1:3: executing \"test\" at <len 3>: error calling len: len of type int",
        ),
        (
            "{{ index \"abc\" 5 }}",
            "error executing template test: template: test:1:3: executing \"test\" at <index \"abc\" 5>: error calling index: index out of range: 5",
        ),
        (
            "{{ index 1 0 }}",
            "error executing template test: template: test:1:3: executing \"test\" at <index 1 0>: error calling index: can't index item of type int",
        ),
        (
            "{{ index .missing 0 }}",
            "error executing template test: template: test:1:3: executing \"test\" at <index .missing 0>: error calling index: index of untyped nil",
        ),
        (
            "{{ slice \"abc\" 2 1 }}",
            "error executing template test: template: test:1:3: executing \"test\" at <slice \"abc\" 2 1>: error calling slice: invalid slice index: 2 > 1",
        ),
        (
            "{{ call .missing }}",
            "error executing template test: template: test:1:3: executing \"test\" at <call .missing>: error calling call: call of nil",
        ),
        (
            "{{ call 1 }}",
            "error executing template test: template: test:1:3: executing \"test\" at <call 1>: error calling call: non-function 1 of type int",
        ),
        (
            "{{ and }}",
            "error executing template test: template: test:1:3: executing \"test\" at <and>: wrong number of args for and: want at least 1 got 0",
        ),
        (
            "{{ not 1 2 }}",
            "error executing template test: template: test:1:3: executing \"test\" at <not>: wrong number of args for not: want 1 got 2",
        ),
        (
            "{{ 1 | printf }}",
            "error executing template test: template: test:1:7: executing \"test\" at <printf>: wrong type for value; expected string; got int",
        ),
    ]);
}

#[test]
fn prometheus_functions_misc() {
    check_ok(&[
        (
            "{{ \"hello-world foo_bar don't x.y k8s:pod\" | title }}",
            "Hello-World Foo_bar Don't X.y K8s:pod",
        ),
        ("{{ title \"élan vital\" }}", "Élan Vital"),
        ("{{ toUpper \"straße\" }}", "STRAßE"),
        ("{{ reReplaceAll \"^(.*):[0-9]+$\" \"$1\" \"node-1:9100\" }}", "node-1"),
        ("{{ reReplaceAll \"a\" \"$$\" \"banana\" }}", "b$n$n$"),
        ("{{ reReplaceAll \"(?P<x>o)\" \"<${x}>\" \"foo\" }}", "f<o><o>"),
        ("{{ reReplaceAll \"(a)\" \"$1x\" \"a\" }}", ""),
        ("{{ reReplaceAll \"\\\\d+\" \"N\" \"a1b22\" }}", "aNbN"),
        ("{{ match \"^[a-z]+$\" \"abc\" }}", "true"),
        ("{{ match \"\\\\d\" \"٣\" }}", "false"),
        ("{{ safeHtml \"<b>\" }}", "<b>"),
        (
            "{{ graphLink \"rate(x{a=\\\"b\\\"}[5m])\" }}",
            "/graph?g0.expr=rate%28x%7Ba%3D%22b%22%7D%5B5m%5D%29&g0.tab=0",
        ),
        ("{{ parseDuration \"1m\" }}", "60"),
        ("{{ parseDuration \"1d2h\" }}", "93600"),
        ("{{ parseDuration \"0\" }}", "0"),
        ("{{ parseDuration \"250ms\" }}", "0.25"),
        ("{{ parseDuration \"-1h30m\" }}", "-5400"),
        ("{{ toTime 1435065584 }}", "2015-06-23 13:19:44 +0000 UTC"),
        ("{{ (toTime 1435065584.5).Unix }}", "1435065584"),
        (
            "{{ (toTime 0).Format \"Mon Jan 2 15:04:05 MST 2006\" }}",
            "Thu Jan 1 00:00:00 UTC 1970",
        ),
        (
            "{{ (toTime 1435065584.128).Format \"2006-01-02T15:04:05.000Z07:00\" }}",
            "2015-06-23T13:19:44.128Z",
        ),
        (
            "{{ (toTime 1435065584.128).Format \"02/01/06 03:04PM .999 -0700\" }}",
            "23/06/15 01:19PM .128 +0000",
        ),
        ("{{ (toTime 1435065584).Month }}", "June"),
        ("{{ (toTime 1435065584).Weekday }}", "Tuesday"),
        ("{{ (toTime 1435065584).YearDay }}", "174"),
        ("{{ toDuration 3723.5 }}", "1h2m3.5s"),
        ("{{ toDuration 0.0015 }}", "1.5ms"),
        ("{{ toDuration 0 }}", "0s"),
        ("{{ (toDuration 90).Minutes }}", "1.5"),
        ("{{ now }}", "0"),
        ("{{ urlQueryEscape \"a b\" }}", "a+b"),
        ("{{ \"5\" | humanize }}", "5"),
    ]);
    check_err(&[
        (
            "{{ humanize true }}",
            "error executing template test: template: test:1:3: executing \"test\" at <humanize true>: error calling humanize: can't convert bool to float",
        ),
        (
            "{{ humanize .missing }}",
            "error executing template test: template: test:1:3: executing \"test\" at <humanize .missing>: error calling humanize: can't convert <nil> to float",
        ),
        (
            "{{ parseDuration \"1x\" }}",
            "error executing template test: template: test:1:3: executing \"test\" at <parseDuration \"1x\">: error calling parseDuration: unknown unit \"x\" in duration \"1x\"",
        ),
        (
            "{{ parseDuration \"5m1h\" }}",
            "error executing template test: template: test:1:3: executing \"test\" at <parseDuration \"5m1h\">: error calling parseDuration: not a valid duration string: \"5m1h\"",
        ),
        (
            "{{ toTime \"NaN\" }}",
            "error executing template test: template: test:1:3: executing \"test\" at <toTime \"NaN\">: error calling toTime: value is NaN or Inf",
        ),
        (
            "{{ title 1 }}",
            "error executing template test: template: test:1:9: executing \"test\" at <1>: expected string; found 1",
        ),
        (
            "{{ 1.5 | title }}",
            "error executing template test: template: test:1:9: executing \"test\" at <title>: wrong type for value; expected string; got float64",
        ),
        (
            "{{ safeHtml \"x\" | toUpper }}",
            "error executing template test: template: test:1:18: executing \"test\" at <toUpper>: wrong type for value; expected string; got template.HTML",
        ),
        (
            "{{ match \"(\" \"x\" }}",
            "error executing template test: template: test:1:3: executing \"test\" at <match \"(\" \"x\">: error calling match: error parsing regexp: missing closing ): `(`",
        ),
    ]);
}

#[test]
fn field_access_and_missing_values() {
    let mut inner = BTreeMap::new();
    inner.insert("k".to_string(), Value::str("v"));
    let mut m = BTreeMap::new();
    m.insert("a".to_string(), Value::AnyMap(Rc::new(inner)));
    m.insert("n".to_string(), Value::Float(2.5));
    let data = Value::AnyMap(Rc::new(m));
    let cases: &[(&str, &str)] = &[
        ("{{ .a.k }}", "v"),
        ("{{ .n }}", "2.5"),
        ("{{ .missing }}", "<no value>"),
        ("{{ .a.missing }}", "<no value>"),
        ("{{ index . \"a\" \"k\" }}", "v"),
        ("{{ with .a }}{{ .k }}{{ end }}", "v"),
        ("{{ $.a.k }}", "v"),
        ("{{ print .missing }}", "<nil>"),
        ("{{ . }}", "map[a:map[k:v] n:2.5]"),
        ("{{ len . }}", "2"),
    ];
    for (text, want) in cases {
        assert_eq!(expand_data(text, data.clone()).both(), Ok(*want), "template: {text}");
    }
    assert_eq!(
        expand_data("{{ .missing.x }}", data.clone()).both(),
        Err("error executing template test: template: test:1:11: executing \"test\" at <.missing.x>: nil pointer evaluating interface {}.x")
    );
    assert_eq!(
        expand_data("{{ .n 1 }}", data.clone()).both(),
        Err("error executing template test: template: test:1:3: executing \"test\" at <.n>: n is not a method but has arguments")
    );
    assert_eq!(
        expand_data("{{ .n.x }}", data).both(),
        Err("error executing template test: template: test:1:5: executing \"test\" at <.n.x>: can't evaluate field x in type interface {}")
    );
}

#[test]
fn parse_errors_have_positions() {
    let cases: &[(&str, &str, usize)] = &[
        (
            "{{ nosuchfunc }}",
            "error parsing template __alert: template: __alert:1: function \"nosuchfunc\" not defined",
            3,
        ),
        (
            "ok {{ .x ",
            "error parsing template __alert: template: __alert:1: unclosed action",
            9,
        ),
        (
            "line1\nline2 {{ \"abc }}",
            "error parsing template __alert: template: __alert:2: unterminated quoted string",
            15,
        ),
        (
            "{{ (1 }}",
            "error parsing template __alert: template: __alert:1: unclosed left paren",
            6,
        ),
        (
            "{{ 1) }}",
            "error parsing template __alert: template: __alert:1: unexpected right paren U+0029 ')'",
            5,
        ),
        (
            "{{ if .x }}\n\n{{ end",
            "error parsing template __alert: template: __alert:3: unclosed action",
            19,
        ),
        (
            "{{/* x",
            "error parsing template __alert: template: __alert:1: unclosed comment",
            2,
        ),
        (
            "{{ 3x }}",
            "error parsing template __alert: template: __alert:1: bad number syntax: \"3x\"",
            3,
        ),
        (
            "{{ \"a\" | 3 }}",
            "error parsing template __alert: template: __alert:1: non executable command in pipeline stage 2",
            11,
        ),
        (
            "{{ $x := 1 := 2 }}",
            "error parsing template __alert: template: __alert:1: unexpected \":=\" in operand",
            11,
        ),
        (
            "{{ .a.b.c.d.e.f.g.h.i.j.k.l := 1 }}",
            "error parsing template __alert: template: __alert:1: unexpected \":=\" in operand",
            28,
        ),
        (
            "{{ 1.x }}",
            "error parsing template __alert: template: __alert:1: bad number syntax: \"1.x\"",
            3,
        ),
        (
            "{{ \"x\".y }}",
            "error parsing template __alert: template: __alert:1: unexpected . after term \"\\\"x\\\"\"",
            8,
        ),
    ];
    for (text, want, offset) in cases {
        let Err(err) = check(text) else {
            panic!("expected error: {text}")
        };
        assert_eq!(err.to_string(), *want, "template: {text}");
        assert_eq!(err.kind, TemplateErrorKind::Parse);
        assert_eq!(err.offset, Some(*offset), "template: {text}");
    }
    let err = check("line1\nline2 {{ \"abc }}").unwrap_err();
    assert_eq!((err.line, err.column), (2, 10));
    assert!(check("{{ $labels.instance }} is {{ $value | humanizePercentage }}").is_ok());
    assert!(check("{{ with query \"up\" }}{{ . | first | value }}{{ end }}").is_ok());
}

#[test]
fn never_panics_on_odd_input() {
    let inputs = [
        "{{",
        "}}",
        "{{{{",
        "{{}}",
        "{{ }}",
        "{{-",
        "{{- }}",
        "{{ -}}",
        "{{/*",
        "{{/**/",
        "{{/* */ x}}",
        "{{ ( }}",
        "{{ ) }}",
        "{{ \"",
        "{{ `",
        "{{ '",
        "{{ 'ab' }}",
        "{{ '\\x' }}",
        "{{ \"\\q\" }}",
        "{{ 0x }}",
        "{{ 1e }}",
        "{{ 99999999999999999999 }}",
        "{{ -99999999999999999999 }}",
        "{{ 1e400 }}",
        "{{ 1i }}",
        "{{ 1+2i }}",
        "{{ $ := 1 }}",
        "{{ $x, $y := 1 }}",
        "{{ range $x, $y := . }}",
        "{{ define }}",
        "{{ define 1 }}",
        "{{ template }}",
        "{{ template 1 }}",
        "{{ block \"x\" }}",
        "{{ . . }}",
        "{{ nil }}",
        "{{ nil.x }}",
        "{{ .x | nil }}",
        "{{ (nil).x }}",
        "{{ $.x.y.z }}",
        "{{ index }}",
        "{{ slice }}",
        "{{ len }}",
        "{{ printf }}",
        "{{ printf 1 }}",
        "{{ call }}",
        "{{ 1 | call }}",
        "{{ html }}",
        "{{ printf \"%[0]d %[9]d %[x]d\" 1 }}",
        "{{ printf \"%*d\" \"a\" 1 }}",
        "{{ printf \"%.*d\" -1 1 }}",
        "{{ printf \"%9999999999d\" 1 }}",
        "{{ slice \"héllo\" 1 2 }}",
        "{{ index \"abc\" 3 }}",
        "{{ range 1 2 }}",
        "{{ else if }}",
        "{{ if 1 }}{{ else with 1 }}{{ end }}",
        "{{ with 1 }}{{ else if 1 }}{{ end }}",
        "é{{ é }}",
        "{{ .é }}",
        "{{ $é := 1 }}{{ $é }}",
        "\u{0}{{ \"\u{0}\" }}",
        "{{ humanizeTimestamp 1e300 }}",
        "{{ toDuration 1e300 }}",
        "{{ toTime -1e18 }}",
        "{{ (toTime 1e10).Format \"2006 __2 002 Z0700 .000000000000\" }}",
        "{{ reReplaceAll \"(\" \"\" \"\" }}",
        "{{ printf \"%U %c %q\" -1 -1 -1 }}",
        "{{ printf \"%x\" -1.5e-310 }}",
        "{{ printf \"%.3x\" 1.99999 }}",
    ];
    for input in inputs {
        let _ = expand(input);
        let _ = check(input);
        let _ = expand_alert(input);
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let deep_parens = format!("{{{{ {}1{} }}}}", "(".repeat(5000), ")".repeat(5000));
    assert!(expand(&deep_parens)
        .unwrap_err()
        .contains("max expression depth exceeded"));
    let deep_ifs = format!("{}x{}", "{{ if true }}".repeat(5000), "{{ end }}".repeat(5000));
    assert!(expand(&deep_ifs).unwrap_err().contains("max expression depth exceeded"));
    let ok_ifs = format!("{}x{}", "{{ if true }}".repeat(50), "{{ end }}".repeat(50));
    assert_eq!(expand(&ok_ifs).both(), Ok("x"));
    // Recursion through templates, each level nesting deeply: stopped, not a stack overflow.
    let body = format!(
        "{}{{{{ template \"r\" . }}}}{}",
        "{{ with 1 }}".repeat(90),
        "{{ end }}".repeat(90)
    );
    let recursive = format!("{{{{ define \"r\" }}}}{body}{{{{ end }}}}{{{{ template \"r\" 1 }}}}");
    assert!(expand(&recursive)
        .unwrap_err()
        .contains("exceeded maximum template depth"));
    let parens = format!("{{{{ {}1{} }}}}", "(print ".repeat(95), ")".repeat(95));
    assert_eq!(expand(&parens).both(), Ok("1"));
}

// ---------------------------------------------------------------------------------------------
// The alert expander: prepended definitions, data, positions.

#[test]
fn alert_expander() {
    let cases: &[(&str, &str)] = &[
        ("{{ $labels.namespace }}/{{ $labels.instance }}", "ml/node-1:9100"),
        ("{{ .Labels.job }} {{ .Value }}", "api 0.1234"),
        ("{{ $value | humanizePercentage }}", "12.34%"),
        ("{{ $value }}", "0.1234"),
        ("{{ printf \"%.2f\" $value }}", "0.12"),
        ("{{ $externalLabels.cluster }}", "eks-prod"),
        ("{{ .ExternalLabels.cluster }}", "eks-prod"),
        ("{{ $externalURL }}", "http://prom.example.com:9090/prom"),
        ("{{ externalURL }}/alerts", "http://prom.example.com:9090/prom/alerts"),
        ("{{ pathPrefix }}", "/prom"),
        ("{{ $labels.nosuch }}", ""),
        ("{{ index $labels \"nosuch\" }}", ""),
        ("{{ $labels.instance | stripPort }}", "node-1"),
        ("{{ range $k, $v := $labels }}{{ $k }}={{ $v }} {{ end }}", "alertname=HighLatency instance=node-1:9100 job=api namespace=ml "),
        ("{{ $labels }}", "map[alertname:HighLatency instance:node-1:9100 job:api namespace:ml]"),
        ("{{ with query \"up\" }}{{ . | first | value | humanize }}{{ end }}", "1"),
        ("{{ range query \"up\" }}{{ .Labels.instance }}{{ end }}", "a"),
        ("{{ now | humanizeTimestamp }}", "2015-06-23 13:19:44.128 +0000 UTC"),
        ("{{ if gt $value 0.1 }}high{{ else }}low{{ end }}", "high"),
        ("{{ len $labels }}", "4"),
        (
            "{{ $labels.namespace }}/{{ $labels.job }} is using {{ $value | humanizePercentage }} of {{ with query \"sum(x)\" }}{{ . | first | value | humanize }}{{ end }}",
            "ml/api is using 12.34% of 1",
        ),
        ("{{ .Value | printf \"%.1f%%\" }}", "0.1%"),
        ("{{ . }}", "{map[alertname:HighLatency instance:node-1:9100 job:api namespace:ml] map[cluster:eks-prod] http://prom.example.com:9090/prom 0.1234}"),
    ];
    for (text, want) in cases {
        assert_eq!(
            expand_alert(text).map_err(|e| e.to_string()).both(),
            Ok(*want),
            "template: {text}"
        );
    }
}

#[test]
fn alert_expander_errors() {
    // Positions in the message count the prepended definitions (as Prometheus' do); offsets are
    // relative to the template text.
    let e = expand_alert("{{ if gt $value 80 }}hot{{ end }}").unwrap_err();
    assert_eq!(
        e.to_string(),
        "error executing template __alert_HighLatency: template: __alert_HighLatency:1:118: executing \"__alert_HighLatency\" at <gt $value 80>: error calling gt: incompatible types for comparison: float64 and int"
    );
    assert_eq!(
        (e.kind, e.offset, e.line, e.column),
        (TemplateErrorKind::Exec, Some(6), 1, 7)
    );
    assert_eq!(
        e.placeholder(),
        "<error expanding template: error executing template __alert_HighLatency: template: __alert_HighLatency:1:118: executing \"__alert_HighLatency\" at <gt $value 80>: error calling gt: incompatible types for comparison: float64 and int>"
    );

    let e = expand_alert("x\n{{ .Labels.job.x }}").unwrap_err();
    assert_eq!(
        e.message,
        "template: __alert_HighLatency:2:10: executing \"__alert_HighLatency\" at <.Labels.job.x>: can't evaluate field x in type string"
    );
    assert_eq!((e.offset, e.line, e.column), (Some(12), 2, 11));

    let e = expand_alert("{{ .Nope }}").unwrap_err();
    assert_eq!(
        e.message,
        "template: __alert_HighLatency:1:115: executing \"__alert_HighLatency\" at <.Nope>: can't evaluate field Nope in type struct { Labels map[string]string; ExternalLabels map[string]string; ExternalURL string; Value interface {} }"
    );

    let e = expand_alert("{{ $value | humanize | humanize }}").unwrap_err();
    assert!(
        e.message
            .ends_with("error calling humanize: strconv.ParseFloat: parsing \"123.4m\": invalid syntax"),
        "{}",
        e.message
    );

    let e = expand_alert("{{ nosuch }}").unwrap_err();
    assert_eq!(
        e.to_string(),
        "error parsing template __alert_HighLatency: template: __alert_HighLatency:1: function \"nosuch\" not defined"
    );
    assert_eq!(e.offset, Some(3));

    let e = expand_alert("{{ printf \"%s\" $value }}").unwrap();
    assert_eq!(e, "%!s(float64=0.1234)");
}

#[test]
fn expander_without_querier() {
    let data = TemplateData::default();
    let e = Expander::new("__alert_x", "{{ query \"up\" }}", &data, None, 0)
        .expand()
        .unwrap_err();
    assert!(e.message.contains("error calling query:"), "{}", e.message);
    let out = Expander::new(
        "__alert_x",
        "{{ $labels.a }}|{{ $value }}|{{ $externalURL }}",
        &data,
        None,
        0,
    )
    .expand();
    assert_eq!(out.map_err(|e| e.to_string()).both(), Ok("|0|"));
}

/// Templates whose Prometheus output is the same in every version since 2.42, compared with
/// `promtool test rules` by [`conformance_with_promtool`].
const CONFORMANCE: &[&str] = &[
    r#"{{ $labels }}"#,
    r#"{{ $value }} {{ .Value }} {{ $labels.job }} {{ .Labels.instance }} {{ $labels.nosuch }}|{{ index $labels "nosuch" }}|"#,
    r#"{{ $externalLabels }} {{ $externalURL }} {{ .ExternalURL }} {{ .ExternalLabels.cluster }}"#,
    r#"{{ $value | humanize }} {{ $value | humanize1024 }} {{ $value | humanizeDuration }} {{ $value | humanizePercentage }} {{ $value | humanizeTimestamp }}"#,
    r#"{{ query "m" | sortByLabel "instance" | first }}|{{ print (query "m" | sortByLabel "instance" | first) }}|{{ printf "%+v" (query "m" | sortByLabel "instance" | first) }}"#,
    r#"{{ range query "m" | sortByLabel "instance" }}{{ .Labels.instance }}={{ .Value }};{{ end }}"#,
    r#"{{ range $i, $s := query "m" | sortByLabel "instance" }}{{ $i }}:{{ $s.Value }} {{ end }}"#,
    r#"{{ with query "m" | sortByLabel "instance" }}{{ range . }}{{ .Labels.instance }}: {{ .Value | humanize }}{{ "\n" }}{{ end }}{{ end }}"#,
    r#"{{ query "m" | len }} {{ (query "m" | sortByLabel "instance" | first).Labels | len }} {{ $v := query "m" | sortByLabel "instance" }}{{ (index $v 1).Value }}"#,
    r#"{{ query "m" | sortByLabel "instance" | first | label "instance" }} {{ query "m" | sortByLabel "instance" | first | value }} {{ query "m" | sortByLabel "instance" | first | strvalue }}|"#,
    r#"{{ 1e6 }} {{ 100000.0 }} {{ 0.0001 }} {{ 1e-05 }} {{ 1234567.0 }} {{ 123456.7 }} {{ 1e21 }} {{ 1e20 }} {{ 0.000012345 }}"#,
    r#"{{ 0.1 }} {{ 0.30000000000000004 }} {{ 9.999999e-5 }} {{ 999999.0 }} {{ -1e-7 }} {{ 2.5e-310 }} {{ 5e-324 }} {{ 123456789.0 }}"#,
    r#"{{ 'a' }} {{ 0x10 }} {{ 1_000 }} {{ 0o17 }} {{ 017 }} {{ 0b101 }} {{ +7 }} {{ 1.5e3 }} {{ 0x1p-2 }} {{ '\n' }} {{ -0.0 }} {{ .5 }}"#,
    r#"{{ printf "%.2f" 3 }}|{{ printf "%d" 1.5 }}|{{ printf "%s" 3 }}|{{ printf "%5d" "abc" }}|{{ printf "%s" $value }}"#,
    r#"{{ printf "%x" 1.0 }} {{ printf "%x" 255.5 }} {{ printf "%X" -0.1 }} {{ printf "%.3x" 1.99999 }} {{ printf "%b" 1.0 }}"#,
    r#"{{ printf "%#g" 1.0 }} {{ printf "%#v" 1.5 }} {{ printf "%#.3g" 100.0 }} {{ printf "%#e" 1.0 }}"#,
    r#"{{ printf "%05s|%-05d|%+05d|% 05d" "ab" 3 3 3 }}"#,
    r#"{{ printf "%T %T %T %T %T" $labels $value (query "m") (query "m" | sortByLabel "instance" | first) (args 1) }}"#,
    r#"{{ printf "%q %v %s" $labels $labels $labels }}"#,
    r#"{{ printf "%06.2f|%-8.3e|%+.0e|%8.3G" -3.14159 1234.5 5.5 0.000012345 }}"#,
    r#"{{ printf "%c %q %U %#U %x %X %o %O %b" 233 233 233 233 233 233 233 233 233 }}"#,
    r#"{{ printf "%.0f %.0f %.0f %.0f %.1f %.2f %.2f %.3f" 0.5 1.5 2.5 3.5 0.25 1.005 0.125 0.0005 }}"#,
    r#"{{ printf "%[2]d %[1]d %[3]d" 1 2 }}|{{ printf "%*d|%-*d|" 5 42 5 42 }}|{{ printf "%.*f" 2 3.14159 }}"#,
    r#"{{ printf "%" }}|{{ printf "%!" }}|{{ printf "x" 1 "a" nil }}|{{ printf "%d %d" 1 }}"#,
    r#"{{ print 1 2 "a" 3 "b" "c" 4.5 nil true }}|{{ println 1 "a" }}|"#,
    r#"{{ printf "%.10g" 0.1 }} {{ printf "%.20f" 0.1 }} {{ printf "%.17g" 0.1 }} {{ printf "%.30e" 1e-300 }} {{ printf "%.0e" 15.0 }} {{ printf "%.0e" 25.0 }}"#,
    r#"{{ printf "%g" 5e-324 }} {{ printf "%g" 1.7976931348623157e308 }} {{ printf "%.3f" 1e22 }}"#,
    r#"{{ printf "%q" "é\n\x00\u200b" }} {{ printf "%+q" "é" }} {{ printf "%#q" "abc" }} {{ printf "%#q" "a`b" }} {{ printf "%x" "hi" }} {{ printf "% X" "hi" }} {{ printf "%#x" "hi" }}"#,
    r#"{{ printf "%8s|%-8s|%.2s|%8.2s|" "ab" "cd" "abcdef" "abcdef" }}{{ printf "%.3s|%5.2s" "héllo" "héllo" }}"#,
    r#"{{ printf "%08.3f|%-08.3f|%+08.3f|% 08.3f" 3.14159 3.14159 3.14159 3.14159 }} {{ printf "%08v" -1.5 }}"#,
    r#"{{ printf "%5.1e|%.0g|%.1g|%g|%g" 123456.0 0.0 0.05 0.00001 100000000.0 }} {{ printf "%6.2g|%-10g|" 12345.0 1.5 }}"#,
    r#"{{ printf "%.3d|%6.3d|%-6.3d|%06d|%.0d|" 7 7 7 -7 0 }}{{ printf "%x %X %o %b" -255 -255 -8 -5 }}"#,
    r#"{{ printf "%v" (args 1.5 "x" nil true) }} {{ printf "%v|%d" (args 1) (args 1) }}"#,
    r#"{{ printf "%v" (toTime 0) }} {{ printf "%q" (toTime 0) }} {{ printf "%10.4v|" (toTime 0) }} {{ print (toTime 0) 1 }}"#,
    r#"{{ html "<a href='x'>&\"</a>" }} {{ js "it's <b>\"=\\ é" }} {{ urlquery "a b&c/d?é~" }} {{ urlquery 1 "x" 2 }}"#,
    r#"{{ len "é" }} {{ index "abc" 1 }} {{ slice "abcdef" 1 3 }} {{ slice "abcdef" 2 }} {{ printf "%s|%q" (slice "héllo" 1 3) (slice "abc" 1) }}"#,
    r#"{{ eq 1 1 }} {{ eq 1 2 3 1 }} {{ ne "a" "b" }} {{ lt 1.5 2.5 }} {{ le 2 2 }} {{ gt "b" "a" }} {{ ge 1 2 }} {{ eq $labels.job "api" }} {{ eq (safeHtml "x") "x" }}"#,
    r#"{{ and 1 2 }} {{ and 1 0 2 }} {{ or 0 "" 3 }} {{ or 0 "" }}| {{ not 0 }} {{ or $labels.nosuch "default" }}"#,
    r#"{{ toUpper "straße" }} {{ toLower "ABC" }} {{ title "hello world" }}"#,
    r#"{{ reReplaceAll "^(.*):[0-9]+$" "$1" "node-1:9100" }} {{ reReplaceAll "a" "$$" "banana" }} {{ reReplaceAll "(?P<x>o)" "<${x}>" "foo" }} {{ reReplaceAll "(a)" "$1x" "a" }} {{ reReplaceAll "\\d+" "N" "a1b22" }}"#,
    r#"{{ reReplaceAll "\\s+" " " "a   b\t\nc" }}|{{ reReplaceAll "[^a-z]" "" "a1-b_c" }}|{{ reReplaceAll "^" ">" "ab" }}|{{ reReplaceAll "" "-" "ab" }}"#,
    r#"{{ match "^[a-z]+$" "abc" }} {{ match "\\d" "٣" }} {{ match "\\w+" "é" }} {{ match "(?i)ABC" "xabcx" }} {{ match "" "" }}"#,
    r#"{{ match "(" "x" }}"#,
    r#"{{ match "[a" "x" }}"#,
    r#"{{ match "a**" "x" }}"#,
    r#"{{ match "a{1001}" "x" }}"#,
    r#"{{ match "a\\q" "x" }}"#,
    r#"{{ graphLink "rate(x{a=\"b\"}[5m])" }} {{ tableLink "up" }}"#,
    r#"{{ parseDuration "1m" }} {{ parseDuration "1d2h" }} {{ parseDuration "0" }} {{ parseDuration "250ms" }} {{ parseDuration "1y2w3d4h5m6s7ms" }}"#,
    r#"{{ toTime 1435065584 }}|{{ (toTime 1435065584.5).Unix }}|{{ (toTime 0).Format "Mon Jan 2 15:04:05 MST 2006" }}"#,
    r#"{{ (toTime 1435065584.128).Format "2006-01-02T15:04:05.000Z07:00" }}|{{ (toTime 1435065584.128).Format "02/01/06 03:04PM .999 -0700 _2 __2 002 Monday January pm" }}"#,
    r#"{{ (toTime 1435065584).Format "Jan _2 06 3:4:5 pm Z07 -07 -07:00:00 Z07:00:00 -070000 .000000 ,999" }}|{{ (toTime 1435065584).Format "Janx Monx Januaryy 2006x Jan. Mon." }}"#,
    r#"{{ (toTime 1435065584).Month }} {{ (toTime 1435065584).Weekday }} {{ (toTime 1435065584).YearDay }} {{ (toTime 1435065584.128).Nanosecond }} {{ (toTime 951782400).Format "2006-01-02 Mon" }}"#,
    r#"{{ toTime 1435065584.1 }}|{{ toTime -0.5 }}|{{ toTime 1e10 }}|{{ toTime -1e10 }}"#,
    r#"{{ humanize 1234567 }} {{ humanize 0.00012 }} {{ humanizeDuration 90061 }} {{ humanizeDuration 0.1234 }} {{ humanizePercentage 0.1234 }}"#,
    r#"{{ humanize -1234.5 }} {{ humanize 999.99 }} {{ humanize 1e30 }} {{ humanize 1e-30 }} {{ humanizeDuration -0.5 }} {{ humanizeDuration 3.1e-7 }} {{ humanizeDuration 59.999 }}"#,
    r#"{{ humanize1024 1024 }} {{ humanize1024 1536 }} {{ humanize1024 1e18 }} {{ humanize1024 -1 }} {{ humanize1024 1.1 }} {{ humanize1024 0.5 }}"#,
    r#"{{ humanizeDuration 86399.9 }} {{ humanizeDuration 1e12 }} {{ humanizeDuration 0.000999 }} {{ humanizeDuration 1e-20 }}"#,
    r#"{{ humanizePercentage 1 }} {{ humanizePercentage 0.00001 }} {{ humanizePercentage "NaN" }} {{ humanizePercentage 1e30 }}"#,
    r#"{{ humanizeTimestamp 0 }} {{ humanizeTimestamp 1.5 }} {{ humanizeTimestamp 1700000000.999 }} {{ humanizeTimestamp -1.5 }} {{ humanizeTimestamp 253402300800 }}"#,
    r#"{{ humanize "one" }}"#,
    r#"{{ "one" | humanizePercentage }}"#,
    r#"{{ humanizeTimestamp 1e300 }}"#,
    r#"{{ args 1 "a" }} {{ (args "v").arg0 }} {{ (args).nope }} {{ index (args 1) "nope" }}"#,
    r#"{{ define "t" }}[{{ . }}]{{ end }}{{ template "t" 5 }}{{ template "t" }}{{ block "b" "x" }}<{{ . }}>{{ end }}"#,
    r#"a  {{- "b" -}}  c|{{ -3 }}|{{-3}}|x {{- /* c */ -}} y|x {{/* c */}} y"#,
    r#"{{ $x := 1 }}{{ $x = 2 }}{{ $x }}{{ if true }}{{ $x := 3 }}{{ $x }}{{ end }}{{ $x }}"#,
    r#"{{ with $x := 5 }}{{ $x }}{{ . }}{{ end }}{{ with 0 }}a{{ else }}b{{ end }}"#,
    r#"{{ range $k, $v := $labels }}{{ $k }}={{ $v }};{{ end }}{{ range $labels }}{{ . }},{{ end }}"#,
    r#"{{ range query "m" | sortByLabel "instance" }}{{ if lt .Value 0.0 }}{{ continue }}{{ end }}{{ .Value }}{{ end }}|{{ range query "m" | sortByLabel "instance" }}{{ .Value }}{{ break }}{{ end }}"#,
    r#"{{ if gt $value 0.1 }}high{{ else if gt $value 0.01 }}mid{{ else }}low{{ end }}"#,
    r#"{{ $value | humanize | printf "%s!" }} {{ "x" | printf "%s%s" "a" | printf "[%s]" }} {{ (printf "%s" "x") }}{{ ((1)) }}"#,
    r#"{{ (query "missing") .banana }}"#,
    r#"{{ (query "m").banana }}"#,
    r#"{{ query "m" | value }}"#,
    r#"{{ .Labels.job.x }}"#,
    r#"{{ $labels.job 1 }}"#,
    r#"{{ 1 2 }}"#,
    r#"{{ nil }}"#,
    r#"{{ template "nope" }}"#,
    r#"{{ define "t" }}{{ .x.y }}{{ end }}{{ template "t" 1 }}"#,
    r#"{{ len 3 }}"#,
    r#"{{ index "abc" 5 }}"#,
    r#"{{ index $labels 1 }}"#,
    r#"{{ slice "abc" 2 1 }}"#,
    r#"{{ lt true false }}"#,
    r#"{{ eq 1 }}"#,
    r#"{{ 1 | printf }}"#,
    r#"{{ title 1 }}"#,
    r#"{{ safeHtml "x" | toUpper }}"#,
    r#"{{ range 1.5 }}{{ end }}"#,
    r#"{{ (toTime 0).Format }}"#,
    r#"{{ (toTime 0).Nope }}"#,
    "line 1\n{{ $labels.job.x }}",
    r#"{{ "}}" }}|{{ print "{{" }}|{{ 1 }}}}|a}}b|{{"a"}}{{"b"}}|{{ `{{x}}` }}"#,
    "{{ if\r\n true }}\r\nyes\r\n{{- end }}|{{\n$labels.job\n}}",
    r#"{{ $labels.job | len }} {{ $labels.job | toUpper | printf "%q" }} {{ "é" | toUpper }} {{ "ÀÉ" | toLower }}"#,
    r#"{{ with $x := "v" }}{{ $x }}{{ $.Labels | printf "%T" }}{{ end }}"#,
];

/// Compares [`CONFORMANCE`] expansions with Prometheus' own through `promtool test rules`
/// (promtool is required: see `tests/common/require.rs` for `WATCHFIRE_TEST_OFFLINE=1`).
#[test]
fn conformance_with_promtool() {
    use serde_json::json;
    if require::require_tool("promtool", "apt-get install prometheus").is_none() {
        return;
    }
    let version = std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .expect("run promtool --version");
    if !version.status.success() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let annotations: serde_json::Map<String, serde_json::Value> = CONFORMANCE
        .iter()
        .enumerate()
        .map(|(i, t)| (format!("t{i}"), json!(t)))
        .collect();
    let rules =
        json!({"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "m > 0", "annotations": annotations}]}]});
    let test = json!({
        "rule_files": ["rules.json"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "external_labels": {"cluster": "c1"},
            "external_url": "http://prom.example.com:9090/prom",
            "input_series": [
                {"series": "m{job=\"api\",instance=\"node-1:9100\"}", "values": "0.1234"},
                {"series": "m{job=\"api\",instance=\"node-2:9100\"}", "values": "-1"}
            ],
            "alert_rule_test": [{"eval_time": "0m", "alertname": "A", "exp_alerts": []}]
        }]
    });
    std::fs::write(dir.path().join("rules.json"), rules.to_string()).unwrap();
    std::fs::write(dir.path().join("test.json"), test.to_string()).unwrap();
    let out = std::process::Command::new("promtool")
        .args(["test", "rules", "test.json"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    // promtool reports the alert it got (we expected none) with its annotations, Go-quoted.
    let Some(start) = text
        .find("got:[")
        .and_then(|g| text[g..].find("Annotations:{").map(|a| g + a + 13))
    else {
        eprintln!("unexpected promtool output; skipping:\n{text}");
        return;
    };
    let mut got = BTreeMap::new();
    let mut rest = &text[start..];
    while let Some(eq) = rest.find("=\"") {
        let name = rest[..eq].trim_start_matches([',', ' ']).to_string();
        let body = &rest[eq + 1..];
        let mut end = 1;
        let bytes = body.as_bytes();
        while end < bytes.len() && bytes[end] != b'"' {
            end += if bytes[end] == b'\\' { 2 } else { 1 };
        }
        got.insert(name, super::parse::unquote(&body[..=end]).unwrap());
        rest = &body[end + 1..];
        if !rest.starts_with(", ") {
            break;
        }
    }

    let data = TemplateData {
        labels: [("__name__", "m"), ("instance", "node-1:9100"), ("job", "api")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        external_labels: [("cluster", "c1")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        external_url: "http://prom.example.com:9090/prom".into(),
        value: 0.1234,
    };
    let q = MockQuerier(vec![
        sample(
            &[("__name__", "m"), ("instance", "node-1:9100"), ("job", "api")],
            0.1234,
        ),
        sample(&[("__name__", "m"), ("instance", "node-2:9100"), ("job", "api")], -1.0),
    ]);
    let mut failures = Vec::new();
    for (i, t) in CONFORMANCE.iter().enumerate() {
        let mine = match Expander::new("__alert_A", t, &data, Some(&q), 0).expand() {
            Ok(s) => s,
            Err(e) => e.placeholder(),
        };
        let theirs = got.get(&format!("t{i}")).cloned().unwrap_or_default();
        if mine != theirs {
            failures.push(format!(
                "template {t:?}\n  prometheus: {theirs:?}\n  watchfire:  {mine:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} differ:\n{}",
        failures.len(),
        CONFORMANCE.len(),
        failures.join("\n")
    );
}

/// Token soup, half of it shaped into actions: errors are fine, panics are not.
#[test]
fn randomized_inputs_never_panic() {
    let toks = [
        "{{",
        "}}",
        "{{- ",
        " -}}",
        " ",
        "\n",
        "(",
        ")",
        "|",
        ".",
        "$",
        "$x",
        ":=",
        "=",
        ",",
        "\"",
        "`",
        "'",
        "a",
        "1",
        "-1",
        "1.5e3",
        "0x",
        "if",
        "else",
        "end",
        "range",
        "with",
        "define",
        "template",
        "block",
        "break",
        "continue",
        "nil",
        "true",
        "printf",
        "\"%d %s %v %.2f %x %q %[2]d %*d\"",
        "index",
        "slice",
        "len",
        "eq",
        "lt",
        "and",
        "or",
        "not",
        "query",
        "first",
        "value",
        "humanize",
        "toTime",
        "args",
        "$labels",
        ".Labels",
        ".Value",
        "$value",
        "\"x\"",
        "/*",
        "*/",
        "é",
        "\u{a0}",
        "\\",
        "{",
        "}",
        "reReplaceAll",
        "\"(a\"",
        "\"[\"",
        "match",
        "title",
        "html",
        "js",
        "call",
        "(print",
        "toDuration",
        "humanizeTimestamp",
        ".Format",
        "\"2006 .000\"",
        "parseDuration",
        "\"-1h\"",
        "stripPort",
        "\"[::1]:80\"",
        "$.x",
        ".a.b",
        "0",
        "1e400",
        "'\\n'",
    ];
    let mut state: u64 = 0x9E3779B97F4A7C15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..3_000 {
        let n = (next() % 24) as usize;
        let mut t = String::new();
        let structured = next() % 2 == 0;
        for _ in 0..n {
            if structured {
                t.push_str("{{ ");
                for _ in 0..(next() % 5) {
                    t.push_str(toks[(next() % toks.len() as u64) as usize]);
                    t.push(' ');
                }
                t.push_str("}}");
            } else {
                t.push_str(toks[(next() % toks.len() as u64) as usize]);
            }
        }
        let _ = expand(&t);
        let _ = check(&t);
        let _ = expand_alert(&t);
    }
}
