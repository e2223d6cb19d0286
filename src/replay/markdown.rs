//! Markdown for pull-request comments: escaping, fitting GitHub's comment limit, and
//! `watchfire replay --format markdown` without `--compare` (a summary table and the page
//! incidents). The `--compare` diff in markdown is in `diff_output.rs`.

use std::fmt::Write as _;

use crate::notify::links::Link;

use super::output::{fmt_dur, fmt_time, new_pages, owner_rows};
use super::{Delivery, Outcome};

/// GitHub refuses comments over 65,536 characters; this leaves room for what a workflow adds.
pub(crate) const COMMENT_LIMIT: usize = 60_000;

/// `s` as inline code, safe inside a table cell: pipes escaped (GitHub unescapes them inside
/// code in tables), line breaks flattened, a fence longer than any backtick run inside.
pub(crate) fn code(s: &str) -> String {
    let flat = s.replace(['\n', '\r'], " ").replace('|', "\\|");
    let longest = flat.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if flat.starts_with('`') || flat.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{flat}{pad}{fence}")
}

/// A diagnostic link: a markdown link for http(s) URLs, inline code for the rest (a kubectl
/// command).
pub(crate) fn link(l: &Link) -> String {
    if l.url.starts_with("https://") || l.url.starts_with("http://") {
        let mut url = String::with_capacity(l.url.len());
        for c in l.url.chars() {
            match c {
                ' ' => url.push_str("%20"),
                '(' => url.push_str("%28"),
                ')' => url.push_str("%29"),
                '<' => url.push_str("%3C"),
                '>' => url.push_str("%3E"),
                '|' => url.push_str("%7C"),
                '`' => url.push_str("%60"),
                '\n' | '\r' => {}
                c => url.push(c),
            }
        }
        format!("[{}]({url})", l.kind)
    } else {
        format!("{} {}", l.kind, code(&l.url))
    }
}

/// What a notification is about, where it went and what to open: one line of a list.
pub(crate) fn incident_line(d: &Delivery) -> String {
    let mut s = format!(
        "{} → {} · owner {} · cluster {} · namespace {}",
        d.alert_names().iter().map(|n| code(n)).collect::<Vec<_>>().join(", "),
        code(&d.receiver),
        code(d.owner.as_deref().unwrap_or("-")),
        code(d.cluster.as_deref().unwrap_or("-")),
        code(d.namespace.as_deref().unwrap_or("-")),
    );
    if d.status == "firing" {
        if let Some(line) = d.cause_line() {
            s.push_str(" · cause: ");
            s.push_str(&code(line));
        }
        for l in &d.links {
            s.push_str(" · ");
            s.push_str(&link(l));
        }
    }
    s
}

/// One piece of a comment.
#[derive(Clone, Debug)]
pub(crate) enum Part {
    /// Always shown (header, summary, caveat).
    Fixed(String),
    /// Shown with the first item after it that fits.
    Heading(String),
    /// One change or row: shown while it fits, counted in the "more not shown" line otherwise.
    Item(String),
    /// Closes the items above it (a blank line after a list or table); shown when any was.
    Close(String),
}

/// Joins `parts`, within `limit` bytes (so within as many characters): once an item does not
/// fit, it and every item after it are left out, and "… and N more changes not shown" takes
/// the place of the first.
pub(crate) fn fit(parts: &[Part], limit: usize) -> String {
    const NOTE_ROOM: usize = 64;
    let fixed: usize = parts
        .iter()
        .map(|p| match p {
            Part::Fixed(s) | Part::Close(s) => s.len(),
            _ => 0,
        })
        .sum();
    let mut budget = limit.saturating_sub(fixed + NOTE_ROOM);
    let mut out: Vec<&str> = Vec::new();
    let mut heading: Option<&str> = None;
    let mut shown_since_heading = false;
    let mut dropped = 0usize;
    let mut note_at: Option<usize> = None;
    for p in parts {
        match p {
            Part::Fixed(s) => out.push(s),
            Part::Heading(h) => {
                heading = Some(h);
                shown_since_heading = false;
            }
            Part::Item(s) => {
                let need = s.len() + heading.map_or(0, str::len);
                if dropped == 0 && need <= budget {
                    budget -= need;
                    if let Some(h) = heading.take() {
                        out.push(h);
                    }
                    out.push(s);
                    shown_since_heading = true;
                } else {
                    if dropped == 0 {
                        note_at = Some(out.len());
                    }
                    dropped += 1;
                }
            }
            Part::Close(s) => {
                if shown_since_heading {
                    out.push(s);
                }
                heading = None;
                shown_since_heading = false;
            }
        }
    }
    let note = format!("\n… and {dropped} more changes not shown\n");
    if let Some(at) = note_at {
        out.insert(at, &note);
    }
    let mut s: String = out.concat();
    if s.len() > limit {
        // The fixed parts alone are too long (thousands of receivers): cut at a line.
        let mut cut = limit.saturating_sub(NOTE_ROOM);
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        let cut = s[..cut].rfind('\n').map_or(0, |i| i + 1);
        s.truncate(cut);
        s.push_str("\n… truncated to fit a comment\n");
    }
    s
}

/// `watchfire replay --format markdown`: a summary table per owner and the page incidents.
pub fn replay(o: &Outcome, rules: usize, groups: usize) -> String {
    let pages = new_pages(o);
    let mut parts = Vec::new();
    let mut head = String::new();
    let _ = writeln!(
        head,
        "### watchfire replay: {} {}, {} notifications\n",
        pages.len(),
        if pages.len() == 1 { "page" } else { "pages" },
        o.deliveries.len()
    );
    let _ = writeln!(
        head,
        "{} to {} ({}), {groups} rule groups, {rules} rules.\n",
        fmt_time(o.from_ms),
        fmt_time(o.to_ms),
        fmt_dur(o.to_ms - o.from_ms)
    );
    let (rows, info) = owner_rows(o);
    head.push_str("| owner | pages | page notifications | other notifications | resolved |\n|---|--:|--:|--:|--:|\n");
    for (owner, r) in &rows {
        let _ = writeln!(
            head,
            "| {} | {} | {} | {} | {} |",
            code(owner),
            r.pages,
            r.page_notes,
            r.notes,
            r.resolved
        );
    }
    if info > 0 {
        let _ = writeln!(head, "\nPlus {info} info-only notifications (heartbeat, digest).");
    }
    parts.push(Part::Fixed(head));
    parts.push(Part::Heading("\n#### Page incidents\n\n".into()));
    for d in pages {
        parts.push(Part::Item(format!("- {} {}\n", fmt_time(d.at_ms), incident_line(d))));
    }
    parts.push(Part::Close(String::new()));
    let causes = super::output::cause_rows(o);
    if !causes.is_empty() {
        parts.push(Part::Heading(
            "\n#### Causes\n\n| cause | alerts | owner | since | incidents per team | explains |\n|---|---|---|---|---|---|\n".into(),
        ));
        for r in causes {
            let c = &r.cause;
            let inc: Vec<String> = r
                .incidents
                .iter()
                .map(|(t, (p, n))| format!("{} {}", code(t), p + n))
                .collect();
            let explains: Vec<String> = c
                .impact
                .iter()
                .map(|i| format!("{} {} ({})", code(&i.team), code(&i.alertname), code(&i.object)))
                .collect();
            parts.push(Part::Item(format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                code(&c.id),
                code(&c.alerts.join(", ")),
                code(c.owner.as_deref().unwrap_or("-")),
                fmt_time(c.since_ms),
                inc.join(", "),
                explains.join("<br>")
            )));
        }
        parts.push(Part::Close(String::new()));
    }
    if !o.rule_errors.is_empty() {
        parts.push(Part::Heading("\n#### Rule evaluation failures\n\n".into()));
        for (rule, n, first) in &o.rule_errors {
            parts.push(Part::Item(format!(
                "- {}: {n} failed evaluations, first {}\n",
                code(rule),
                code(first)
            )));
        }
        parts.push(Part::Close(String::new()));
    }
    fit(&parts, COMMENT_LIMIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_keeps_fixed_parts_and_counts_what_it_leaves_out() {
        let mut parts = vec![
            Part::Fixed("### header\n".into()),
            Part::Heading("#### Pages\n\n".into()),
        ];
        for i in 0..1000 {
            parts.push(Part::Item(format!("- change {i:04} {}\n", "x".repeat(90))));
        }
        parts.push(Part::Close("\n".into()));
        parts.push(Part::Heading("#### Other\n\n".into()));
        parts.push(Part::Item("- another\n".into()));
        parts.push(Part::Close("\n".into()));
        parts.push(Part::Fixed("> caveat\n".into()));
        let s = fit(&parts, COMMENT_LIMIT);
        assert!(s.len() <= COMMENT_LIMIT, "{}", s.len());
        assert!(s.starts_with("### header\n#### Pages\n\n- change 0000 "));
        assert!(s.ends_with("> caveat\n"), "{}", &s[s.len() - 200..]);
        let shown = s.matches("- change ").count();
        assert!(shown > 500 && shown < 1000, "{shown}");
        assert!(
            s.contains(&format!("\n… and {} more changes not shown\n", 1000 - shown + 1)),
            "{}",
            &s[s.len() - 300..]
        );
        // Items after the cut stay out, even where they would fit.
        assert!(!s.contains("- another"));
        assert!(!s.contains("#### Other"));
        // Without a cut, no note.
        let small = fit(&parts[..5], COMMENT_LIMIT);
        assert!(!small.contains("more changes not shown"));
    }

    #[test]
    fn fit_cuts_fixed_parts_that_alone_are_too_long() {
        let parts = vec![Part::Fixed("| row |\n".repeat(20_000))];
        let s = fit(&parts, COMMENT_LIMIT);
        assert!(s.len() <= COMMENT_LIMIT);
        assert!(s.ends_with("… truncated to fit a comment\n"));
    }

    #[test]
    fn code_and_links_survive_tables() {
        assert_eq!(code("a|b"), "`a\\|b`");
        assert_eq!(code("x `y` z"), "``x `y` z``");
        assert_eq!(code("`y`"), "`` `y` ``");
        let l = Link {
            kind: "grafana",
            url: "https://g/x (1)".into(),
        };
        assert_eq!(link(&l), "[grafana](https://g/x%20%281%29)");
        let k = Link {
            kind: "kubectl",
            url: "kubectl describe pod p".into(),
        };
        assert_eq!(link(&k), "kubectl `kubectl describe pod p`");
    }
}
