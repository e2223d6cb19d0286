//! `watchfire replay --format html` in headless Chromium: the bundled demo through the shipped
//! policy as one self-contained page (no script, nothing fetched), per incident a timeline of
//! pending, firing and resolved with the notifications sent and an SVG chart of the
//! expression's values; screenshots decoded and checked for the event colours; no horizontal
//! scroll on a phone. `--compare` in HTML (base and head side by side) is in
//! tests/replay_compare.rs.

mod common;

use std::path::Path;
use std::process::Command;

use common::browser;
use watchfire::replay::demo::{self, Expect};

/// The event badge colours of the page's CSS.
const FIRING: [u8; 3] = [0xc6, 0x28, 0x28];
const RESOLVED: [u8; 3] = [0x1a, 0x7f, 0x37];
const PENDING: [u8; 3] = [0x9a, 0x67, 0x00];

#[test]
fn demo_replay_as_one_html_page() {
    if common::require_tool("chromium", "apt-get install chromium").is_none() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The demo's first 8 hours (two page incidents, opened and resolved; the whole 48 hours take
    // minutes in a debug build).
    let hours = 8;
    let out = Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .current_dir(root)
        .args(["replay", "--format", "html", "--to", &format!("+{hours}h")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = String::from_utf8(out.stdout).expect("utf-8");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("replay.html");
    std::fs::write(&file, &html).unwrap();

    // Self-contained: no script, no stylesheet or image fetched.
    assert!(html.starts_with("<!doctype html>"), "{}", &html[..200.min(html.len())]);
    for needle in ["<script", "<link", "src=", "@import", "url("] {
        assert!(!html.contains(needle), "{needle} in the page");
    }

    let profile = dir.path().join("chromium-profile");
    let url = format!("file://{}", file.display());
    let dom = browser::dump_dom(&url, &profile, (1280, 900));
    assert!(
        dom.contains("<title>watchfire replay</title>"),
        "{}",
        &dom[..500.min(dom.len())]
    );
    assert!(dom.contains("<h2 id=\"incidents-h\">Incidents ("), "incidents section");
    let owner = demo::incidents()[0].owner;
    assert!(
        dom.contains(&format!("<th scope=\"row\" data-label=\"Owner\">{owner}</th>")),
        "the owners' table"
    );
    // Every demo incident of the window that pages appears with its timeline: fired, a page sent to its owner,
    // resolved, and a chart of its expression.
    let articles: Vec<&str> = dom
        .split("<article class=\"incident\"")
        .skip(1)
        .map(|a| &a[..a.find("</article>").unwrap_or(a.len())])
        .collect();
    assert!(articles.len() >= 5, "{} incidents", articles.len());
    // Pages first: a reviewer reads those before heartbeats and digests.
    assert!(articles[0].contains("page to <strong>"), "{}", articles[0]);
    let end = demo::START_MS + hours * 3_600_000;
    let paged: Vec<demo::Incident> = demo::incidents()
        .into_iter()
        .filter(|i| i.expect == Expect::Page && i.end_ms + 30 * 60_000 <= end)
        .collect();
    assert!(paged.len() >= 2, "{} page incidents in the window", paged.len());
    for inc in &paged {
        let a = articles
            .iter()
            .find(|a| {
                a.contains(&format!("<span class=\"alertname\">{}</span>", inc.alertname))
                    && a.contains(&format!("to <strong>{}-pagerduty</strong>", inc.owner))
            })
            .unwrap_or_else(|| panic!("{}: no incident of {} paging {}", inc.id, inc.alertname, inc.owner));
        assert!(
            a.contains("<svg") && a.contains("class=\"span-firing\""),
            "{}: chart",
            inc.id
        );
        assert!(a.contains("<g class=\"marker-firing\">"), "{}: the page marked", inc.id);
        assert!(
            a.contains("fill=\"none\" stroke=\"#0072b2\"") && !a.contains(">no data<"),
            "{}: the expression's values drawn: {a}",
            inc.id
        );
        assert!(a.contains("ev-firing\">firing<"), "{}: fired", inc.id);
        assert!(a.contains("ev-firing\">sent firing<"), "{}: notified", inc.id);
        assert!(a.contains("ev-resolved\">resolved<"), "{}: resolved", inc.id);
        assert!(
            a.contains("<th scope=\"col\">Event</th>"),
            "{}: a table with headers",
            inc.id
        );
    }
    assert!(dom.contains("ev-pending\">pending<"), "some alert went through pending");

    // Screenshots: the event colours show; the phone layout does not scroll sideways.
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let desk = browser::screenshot(&url, &profile, (1280, 2400), &shots.join("replay-1280.png"));
    assert_eq!((desk.width, desk.height), (1280, 2400));
    assert!(desk.colours() > 50, "a rendered page");
    for (what, rgb) in [("firing", FIRING), ("resolved", RESOLVED), ("pending", PENDING)] {
        let n = desk.count(rgb, 6);
        assert!(n > 40, "{what} {rgb:?}: {n} pixels in replay-1280.png");
    }
    let phone = browser::screenshot(&url, &profile, (390, 844), &shots.join("replay-390.png"));
    assert_eq!((phone.width, phone.height), (390, 844));
    assert!(phone.colours() > 20, "a rendered page on a phone");
    assert!(
        browser::layout_width(&html, &url, &profile, 390) <= 390,
        "horizontal scroll at 390 px"
    );
}
