//! Rendering a `--compare` diff: a text section after the summary, JSON lines, or a
//! pull-request comment in markdown.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::compare::Selection;
use super::diff::{Change, Diff, FirstDifference};
use super::markdown::{code, fit, incident_line, Part, COMMENT_LIMIT};
use super::output::{fmt_dur, fmt_time, json_value, labels_json, labels_str};
use super::{Delivery, Transition};

/// What was compared, for the report.
#[derive(Clone, Debug)]
pub struct Context<'a> {
    /// BASE as given (`origin/main`, a directory).
    pub base: &'a str,
    /// BASE was a directory of rule files only (the head's routes and owners).
    pub rules_only: bool,
    pub selection: &'a Selection,
    /// Rule groups replayed (head) and the head's total.
    pub groups: (usize, usize),
}

impl Context<'_> {
    fn caveat(&self) -> Option<String> {
        let skipped = self.selection.skipped.0.max(self.selection.skipped.1);
        if skipped == 0 || self.nothing_differs() {
            return None;
        }
        Some(format!(
            "{skipped} of {} rule groups not replayed (the same on both sides, and no changed group reads them): \
             notifications that would group a changed alert with an unchanged one may differ; --all-groups replays everything.",
            self.groups.1
        ))
    }

    /// No rule group, route, owner or external label differs: nothing was replayed.
    fn nothing_differs(&self) -> bool {
        self.selection.groups.as_ref().is_some_and(|g| g.is_empty())
    }

    fn all_because(&self) -> Option<String> {
        self.selection
            .all_because
            .as_ref()
            .map(|r| format!("{r}: every rule group was replayed"))
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn transition_text(t: &Transition) -> String {
    let labels = t.labels.iter().filter(|l| &*l.name != "alertname");
    let labels: Vec<String> = labels.map(|l| format!("{}={:?}", l.name, &*l.value)).collect();
    format!("{{{}}} {} → {}", labels.join(", "), t.from, t.to)
}

fn side_text(ts: &[Transition]) -> String {
    if ts.is_empty() {
        "no change".into()
    } else {
        ts.iter().map(transition_text).collect::<Vec<_>>().join("; ")
    }
}

/// What changed in a pair, in words: `receiver a → b, owner x → y, time +2m`.
fn changed_text(base: &Delivery, head: &Delivery, quote: &dyn Fn(&str) -> String) -> String {
    let mut parts = Vec::new();
    if base.at_ms != head.at_ms {
        parts.push(format!(
            "time {} → {} ({})",
            fmt_time(base.at_ms),
            fmt_time(head.at_ms),
            signed_dur(head.at_ms - base.at_ms)
        ));
    }
    if base.receiver != head.receiver {
        parts.push(format!(
            "receiver {} → {}",
            quote(&base.receiver),
            quote(&head.receiver)
        ));
    }
    if base.group_key != head.group_key {
        parts.push(format!(
            "group {} → {}",
            quote(&labels_str(&base.group_labels)),
            quote(&labels_str(&head.group_labels))
        ));
    }
    if base.owner != head.owner {
        parts.push(format!(
            "owner {} → {}",
            quote(base.owner.as_deref().unwrap_or("-")),
            quote(head.owner.as_deref().unwrap_or("-"))
        ));
    }
    if parts.is_empty() {
        parts.push("the alerts' owner label".into());
    }
    parts.join(", ")
}

fn signed_dur(ms: i64) -> String {
    if ms >= 0 {
        format!("+{}", fmt_dur(ms))
    } else {
        fmt_dur(ms)
    }
}

fn headline(diff: &Diff<'_>) -> String {
    let (pb, ph) = diff.pages();
    let (pa, pr, pc) = diff.page_changes();
    format!("{pb} pages before, {ph} after; {pa} added, {pr} removed, {pc} changed")
}

fn notifications_line(diff: &Diff<'_>) -> String {
    let before: usize = diff.receivers.values().map(|r| r.notifications.0).sum();
    let after: usize = diff.receivers.values().map(|r| r.notifications.1).sum();
    let (na, nr, nc) = diff.notification_changes();
    format!("{before} notifications before, {after} after; other than pages {na} added, {nr} removed, {nc} changed")
}

/// The text section printed after the summary.
pub fn text(diff: &Diff<'_>, ctx: &Context<'_>) -> String {
    let mut s = String::new();
    let what = if ctx.rules_only { "rule files" } else { "policy" };
    let _ = writeln!(
        s,
        "\nCompare with {what} {} (base → head): {}",
        ctx.base,
        headline(diff)
    );
    let _ = writeln!(s, "  {}", notifications_line(diff));
    if let Some(r) = ctx.all_because() {
        let _ = writeln!(s, "  {r}");
    }
    if let Some(c) = ctx.caveat() {
        let _ = writeln!(s, "  Note: {c}");
    }
    if ctx.nothing_differs() {
        let _ = writeln!(
            s,
            "  No rule group, route, owner or external label differs: nothing to replay."
        );
        return s;
    }
    if diff.changes.is_empty() && diff.first_differences.is_empty() {
        let _ = writeln!(s, "  No difference in pages, notifications or alert states.");
        return s;
    }
    let _ = writeln!(
        s,
        "\n  {:<28} {:>12} {:>6} {:>20} {:>6}",
        "receiver", "pages before", "after", "notifications before", "after"
    );
    for (r, c) in diff
        .receivers
        .iter()
        .filter(|(_, c)| c.pages.0 != c.pages.1 || c.notifications.0 != c.notifications.1)
    {
        let _ = writeln!(
            s,
            "  {:<28} {:>12} {:>6} {:>20} {:>6}",
            r, c.pages.0, c.pages.1, c.notifications.0, c.notifications.1
        );
    }
    if !diff.changes.is_empty() {
        let _ = writeln!(s);
    }
    let plain = |x: &str| x.to_string();
    for c in &diff.changes {
        let d = c.delivery();
        let sign = match c {
            Change::Added(_) => '+',
            Change::Removed(_) => '-',
            Change::Changed { .. } => '~',
        };
        let _ = writeln!(
            s,
            "  {sign} {}  {:<24} {:<8} {:<4} {}  owner={} cluster={} namespace={} group={}",
            fmt_time(d.at_ms),
            d.receiver,
            d.status.to_uppercase(),
            if c.is_page() { "page" } else { "" },
            d.alert_names().join(", "),
            d.owner.as_deref().unwrap_or("-"),
            d.cluster.as_deref().unwrap_or("-"),
            d.namespace.as_deref().unwrap_or("-"),
            labels_str(&d.group_labels),
        );
        if let Change::Changed { base, head, .. } = c {
            let _ = writeln!(s, "      changed: {}", changed_text(base, head, &plain));
        }
    }
    if !diff.first_differences.is_empty() {
        let _ = writeln!(s, "\n  First differing evaluation:");
        for f in &diff.first_differences {
            let _ = writeln!(
                s,
                "    {} at {}: base {}; head {}",
                f.alertname,
                fmt_time(f.at_ms),
                side_text(&f.base),
                side_text(&f.head)
            );
        }
    }
    s
}

/// JSON lines: one object per change (`"diff": "added" | "removed" | "changed"`), one per
/// alert whose evaluation differs (`"diff": "first_difference"`), then `"diff": "summary"`.
pub fn json_lines(diff: &Diff<'_>, ctx: &Context<'_>) -> String {
    let mut s = String::new();
    for c in &diff.changes {
        let what: Vec<&str> = match c {
            Change::Changed { what, .. } => what.iter().map(|f| f.as_str()).collect(),
            _ => Vec::new(),
        };
        let line = json!({
            "diff": c.kind(),
            "page": c.is_page(),
            "alertnames": c.delivery().alert_names(),
            "changed": what,
            "base": c.base().map(json_value),
            "head": c.head().map(json_value),
        });
        s.push_str(&line.to_string());
        s.push('\n');
    }
    let transitions = |ts: &[Transition]| -> Vec<Value> {
        ts.iter()
            .map(|t| json!({"labels": labels_json(&t.labels), "from": t.from.as_str(), "to": t.to.as_str()}))
            .collect()
    };
    for f in &diff.first_differences {
        let line = json!({
            "diff": "first_difference",
            "alertname": f.alertname,
            "time": fmt_time(f.at_ms),
            "base": transitions(&f.base),
            "head": transitions(&f.head),
        });
        s.push_str(&line.to_string());
        s.push('\n');
    }
    let (pb, ph) = diff.pages();
    let (pa, pr, pc) = diff.page_changes();
    let (na, nr, nc) = diff.notification_changes();
    let receivers: serde_json::Map<String, Value> = diff
        .receivers
        .iter()
        .map(|(r, c)| {
            (
                r.clone(),
                json!({"pages": [c.pages.0, c.pages.1], "notifications": [c.notifications.0, c.notifications.1]}),
            )
        })
        .collect();
    let line = json!({
        "diff": "summary",
        "base": ctx.base,
        "rules_only": ctx.rules_only,
        "pages": {"before": pb, "after": ph, "added": pa, "removed": pr, "changed": pc},
        "notifications": {"added": na, "removed": nr, "changed": nc},
        "receivers": receivers,
        "rule_groups": {"replayed": ctx.groups.0, "total": ctx.groups.1},
        "all_groups_because": ctx.selection.all_because,
        "caveat": ctx.caveat(),
    });
    s.push_str(&line.to_string());
    s.push('\n');
    s
}

/// One table row per cause of either side (by id and start): incidents per team before and after.
fn cause_changes(diff: &Diff<'_>) -> Vec<String> {
    use super::output::{cause_rows, CauseRow};
    let fmt = |r: Option<&CauseRow>| {
        r.map(|r| {
            let v: Vec<String> = r
                .incidents
                .iter()
                .map(|(t, (p, n))| format!("{} {}", code(t), p + n))
                .collect();
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        })
        .unwrap_or_else(|| "—".into())
    };
    let (base, head) = (cause_rows(diff.base), cause_rows(diff.head));
    let mut keys: Vec<(String, i64)> = base
        .iter()
        .chain(&head)
        .map(|r| (r.cause.id.clone(), r.cause.since_ms))
        .collect();
    keys.sort_by_key(|k| (k.1, k.0.clone()));
    keys.dedup();
    keys.iter()
        .map(|(id, since)| {
            let find = |rows: &[CauseRow]| {
                rows.iter()
                    .find(|r| &r.cause.id == id && r.cause.since_ms == *since)
                    .cloned()
            };
            let (b, h) = (find(&base), find(&head));
            let any = h.as_ref().or(b.as_ref()).map(|r| r.cause.clone());
            let explains: Vec<String> = h
                .as_ref()
                .map(|r| {
                    r.cause
                        .impact
                        .iter()
                        .map(|i| format!("{} {} ({})", code(&i.team), code(&i.alertname), code(&i.object)))
                        .collect()
                })
                .unwrap_or_default();
            format!(
                "| {} | {} | {} | {} | {} |\n",
                code(id),
                code(&any.map(|c| c.alerts.join(", ")).unwrap_or_default()),
                fmt(b.as_ref()),
                fmt(h.as_ref()),
                explains.join("<br>")
            )
        })
        .collect()
}

/// A pull-request comment: header, per-receiver table, the page changes, the causes (incidents per team before and after) with owner, scope,
/// receiver and links, a per-alert table with the first differing evaluation, the other
/// notification changes, and the caveat; within GitHub's comment limit.
pub fn markdown(diff: &Diff<'_>, ctx: &Context<'_>) -> String {
    let (pa, pr, pc) = diff.page_changes();
    let (na, nr, nc) = diff.notification_changes();
    let mut head = String::new();
    if ctx.nothing_differs() {
        head.push_str("### watchfire replay: no change in pages or notifications\n\n");
        let _ = writeln!(
            head,
            "No rule group, route, owner or external label differs between {} and this change.",
            code(ctx.base)
        );
        return head;
    }
    if diff.changes.is_empty() && diff.first_differences.is_empty() {
        head.push_str("### watchfire replay: no change in pages or notifications\n\n");
    } else {
        let _ = writeln!(
            head,
            "### watchfire replay: {} added, {pr} removed, {pc} changed; {} added, {nr} removed, {nc} changed\n",
            plural(pa, "page", "pages"),
            plural(na, "other notification", "other notifications"),
        );
    }
    let o = diff.head;
    let _ = writeln!(
        head,
        "Base {} → this change, replayed {} to {} ({}){}{}.\n",
        code(ctx.base),
        fmt_time(o.from_ms),
        fmt_time(o.to_ms),
        fmt_dur(o.to_ms - o.from_ms),
        if ctx.rules_only {
            " with the base's rule files only"
        } else {
            ""
        },
        if ctx.selection.skipped_any() {
            format!(
                ", {} of {} rule groups (the counts cover those)",
                ctx.groups.0, ctx.groups.1
            )
        } else {
            String::new()
        }
    );
    let mut parts = vec![Part::Fixed(head)];
    parts.push(Part::Heading(
        "| receiver | pages before | pages after | notifications before | notifications after |\n|---|--:|--:|--:|--:|\n"
            .into(),
    ));
    for (r, c) in &diff.receivers {
        let bold = |b: usize, a: usize| if a == b { a.to_string() } else { format!("**{a}**") };
        parts.push(Part::Item(format!(
            "| {} | {} | {} | {} | {} |\n",
            code(r),
            c.pages.0,
            bold(c.pages.0, c.pages.1),
            c.notifications.0,
            bold(c.notifications.0, c.notifications.1)
        )));
    }
    parts.push(Part::Close(String::new()));

    parts.push(Part::Heading("\n#### Pages\n\n".into()));
    for c in diff.changes.iter().filter(|c| c.is_page()) {
        parts.push(Part::Item(change_item(c)));
    }
    parts.push(Part::Close(String::new()));

    // Causes (the cause stage): incidents per team for each cause, before and after.
    let rows = cause_changes(diff);
    if !rows.is_empty() {
        parts.push(Part::Heading(
            "\n#### Causes\n\n| cause | alerts | incidents per team before | after | explains (after) |\n|---|---|---|---|---|\n".into(),
        ));
        for r in rows {
            parts.push(Part::Item(r));
        }
        parts.push(Part::Close(String::new()));
    }

    let mut names: Vec<&str> = diff.alerts.keys().map(String::as_str).collect();
    for f in &diff.first_differences {
        if !names.contains(&f.alertname.as_str()) {
            names.push(&f.alertname);
        }
    }
    names.sort_unstable();
    parts.push(Part::Heading(
        "\n#### Per alert\n\n| alert | pages +/−/~ | other notifications +/−/~ | first differing evaluation |\n|---|--:|--:|---|\n"
            .into(),
    ));
    for n in names {
        let c = diff.alerts.get(n).cloned().unwrap_or_default();
        let first = diff.first_difference(n).map_or_else(
            || "evaluations identical (routing or grouping differs)".to_string(),
            first_cell,
        );
        parts.push(Part::Item(format!(
            "| {} | {}/{}/{} | {}/{}/{} | {first} |\n",
            code(n),
            c.pages.0,
            c.pages.1,
            c.pages.2,
            c.notifications.0,
            c.notifications.1,
            c.notifications.2
        )));
    }
    parts.push(Part::Close(String::new()));

    parts.push(Part::Heading("\n#### Other notifications\n\n".into()));
    for c in diff.changes.iter().filter(|c| !c.is_page()) {
        parts.push(Part::Item(change_item(c)));
    }
    parts.push(Part::Close(String::new()));

    let mut tail = String::new();
    if let Some(r) = ctx.all_because() {
        let _ = writeln!(tail, "\n{}", r[..1].to_uppercase() + &r[1..] + ".");
    }
    if let Some(c) = ctx.caveat() {
        let _ = writeln!(tail, "\n> [!NOTE]\n> {}", c.replace("--all-groups", "`--all-groups`"));
    }
    if !tail.is_empty() {
        parts.push(Part::Fixed(tail));
    }
    fit(&parts, COMMENT_LIMIT)
}

fn first_cell(f: &FirstDifference) -> String {
    let side = |ts: &[Transition]| {
        if ts.is_empty() {
            "no change".to_string()
        } else {
            ts.iter()
                .map(|t| code(&transition_text(t)))
                .collect::<Vec<_>>()
                .join("; ")
        }
    };
    format!("{}: base {}; head {}", fmt_time(f.at_ms), side(&f.base), side(&f.head))
}

fn change_item(c: &Change<'_>) -> String {
    let d = c.delivery();
    let status = if d.status == "resolved" { " (resolved)" } else { "" };
    match c {
        Change::Added(_) | Change::Removed(_) => format!(
            "- **{}**{status} {} {}\n",
            c.kind(),
            fmt_time(d.at_ms),
            incident_line(d)
        ),
        Change::Changed { base, head, .. } => format!(
            "- **changed**{status} {} {}\n  - {}\n",
            fmt_time(head.at_ms),
            incident_line(head),
            changed_text(base, head, &|x: &str| code(x))
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Labels;
    use crate::replay::diff::diff;
    use crate::replay::{DeliveredAlert, Outcome};

    fn page(at_ms: i64, n: usize) -> Delivery {
        Delivery {
            at_ms,
            receiver: format!("team-{}-pd", n % 5),
            integrations: vec!["pagerduty".into()],
            status: "firing",
            group_key: format!("{{}}:{{n=\"{n}\"}}"),
            group_labels: Labels::from_pairs([("n", n.to_string())]),
            owner: Some(format!("team-{n}")),
            cluster: Some("c1".into()),
            namespace: None,
            links: vec![],
            alerts: vec![DeliveredAlert {
                labels: Labels::from_pairs([("alertname", format!("Alert{n}")), ("severity", "page".into())]),
                annotations: Default::default(),
                starts_at_ms: 0,
                ends_at_ms: None,
            }],
            page: true,
            new_incident: true,
            first_active_ms: None,
        }
    }

    #[test]
    fn a_large_diff_fits_a_comment_and_says_how_much_it_left_out() {
        let head = Outcome {
            deliveries: (0..3000).map(|n| page(1_000 * n as i64, n)).collect(),
            ..Outcome::default()
        };
        let base = Outcome::default();
        let d = diff(&base, &head, &["owner"]);
        let sel = Selection::all(None);
        let ctx = Context {
            base: "origin/main",
            rules_only: false,
            selection: &sel,
            groups: (1, 1),
        };
        let md = markdown(&d, &ctx);
        assert!(md.len() <= COMMENT_LIMIT, "{}", md.len());
        assert!(md.contains("| `team-4-pd` | 0 | **600** | 0 | **600** |"), "{md}");
        assert!(md.starts_with("### watchfire replay: 3000 pages added, 0 removed, 0 changed"));
        let shown = md.matches("- **added** ").count();
        assert!(shown > 0 && shown < 3000, "{shown}");
        // Per-alert rows come after the pages, so the cut takes them and they are counted too.
        let note = format!("… and {} more changes not shown", 6000 - shown);
        assert!(md.contains(&note), "{note}");
    }
}
