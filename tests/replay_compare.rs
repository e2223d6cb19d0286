//! `watchfire replay --compare BASE --format markdown`: the page diff a pull-request reviewer
//! reads. Each test builds a small repository (watchfire.yaml, rules/, routes.yaml,
//! owners.yaml, an hour of OpenMetrics data), makes one kind of change, and checks that the
//! comment shows the right pages added, removed or changed. The base comes from a git ref
//! (`git archive`) or from another checkout (a directory).

mod common;

use std::path::Path;
use std::process::{Command, Output};

/// A recording group, the alert that reads it, and an unrelated alert that also pages.
const RECORD: &str = "groups:\n  - name: queue-record\n    interval: 1m\n    rules:\n      - record: queue:depth:max\n        expr: max by (cluster, queue) (queue_depth)\n";
const ALERT: &str = "groups:\n  - name: queue\n    interval: 1m\n    rules:\n      - alert: QueueBacklog\n        expr: queue:depth:max > 10\n        for: 2m\n        labels: {severity: page}\n        annotations: {summary: backlog, runbook_url: 'https://rb.example/queue'}\n";
const DISK: &str = "groups:\n  - name: disk\n    interval: 1m\n    rules:\n      - alert: DiskFull\n        expr: disk_used_percent > 90\n        labels: {severity: page}\n";

const ROUTES: &str = "route:\n  receiver: default\n  group_by: [owner, cluster, alertname]\n  group_wait: 30s\n  routes:\n    - matchers: [severity=\"page\", owner=\"team-a\"]\n      receiver: team-a-pd\n    - matchers: [severity=\"page\", owner=\"team-b\"]\n      receiver: team-b-pd\nreceivers:\n  - name: default\n  - name: team-a-pd\n    pagerduty_configs: [{routing_key: a}]\n  - name: team-a-oncall\n    pagerduty_configs: [{routing_key: a2}]\n  - name: team-b-pd\n    pagerduty_configs: [{routing_key: b}]\n";

const OWNERS: &str = "team_label: owner\ndefault: team-a\nteams:\n  - name: team-a\n    receivers: {page: team-a-pd}\n  - name: team-b\n    receivers: {page: team-b-pd}\n";

fn write_repo(dir: &Path) {
    std::fs::create_dir_all(dir.join("rules")).unwrap();
    std::fs::write(dir.join("rules/queue-record.yaml"), RECORD).unwrap();
    std::fs::write(dir.join("rules/queue.yaml"), ALERT).unwrap();
    std::fs::write(dir.join("rules/disk.yaml"), DISK).unwrap();
    std::fs::write(dir.join("routes.yaml"), ROUTES).unwrap();
    std::fs::write(dir.join("owners.yaml"), OWNERS).unwrap();
    std::fs::write(
        dir.join("watchfire.yaml"),
        "sources: [{name: local, type: embedded}]\nrule_files: [rules/*.yaml]\nroutes_file: routes.yaml\nowners_file: owners.yaml\n",
    )
    .unwrap();
}

/// An hour, a sample a minute: the queue backs up (50) from minute 10 to 30, the disk is full
/// from minute 40 to 50.
fn write_data(path: &Path) {
    let mut om = String::new();
    for m in 0..60 {
        let q = if (10..30).contains(&m) { 50 } else { 1 };
        let d = if (40..50).contains(&m) { 95 } else { 40 };
        let t = 1_700_000_000 + m * 60;
        om.push_str(&format!("queue_depth{{cluster=\"c1\",queue=\"q\"}} {q} {t}\n"));
        om.push_str(&format!("disk_used_percent{{cluster=\"c1\",node=\"n1\"}} {d} {t}\n"));
    }
    om.push_str("# EOF\n");
    std::fs::write(path, om).unwrap();
}

/// `watchfire replay` in `repo` over `data`, with `args`.
fn replay(repo: &Path, data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_watchfire"))
        .current_dir(repo)
        .args(["replay", "--config", "watchfire.yaml", "--data"])
        .arg(data)
        .args(args)
        .output()
        .unwrap()
}

/// The markdown diff of the working tree in `repo` against `base`; must succeed.
fn markdown(repo: &Path, data: &Path, base: &str) -> String {
    let out = replay(repo, data, &["--compare", base, "--format", "markdown"]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

use common::git;

/// A repository with the fixture committed; the data lives outside it.
fn git_repo() -> (tempfile::TempDir, tempfile::TempDir) {
    let repo = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    write_repo(repo.path());
    write_data(&data.path().join("data.om"));
    git(repo.path(), &["init", "-q"]);
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-q", "-m", "base"]);
    (repo, data)
}

/// Two checkouts: `base` as committed, `head` to change.
fn checkouts() -> (tempfile::TempDir, tempfile::TempDir, std::path::PathBuf) {
    let base = tempfile::tempdir().unwrap();
    let head = tempfile::tempdir().unwrap();
    write_repo(base.path());
    write_repo(head.path());
    let data = base.path().join("data.om");
    write_data(&data);
    (base, head, data)
}

#[test]
fn a_threshold_change_from_a_git_ref_removes_the_page_and_skips_unrelated_groups() {
    let (repo, data) = git_repo();
    let data = data.path().join("data.om");
    // The working tree raises the threshold above anything the data reaches.
    std::fs::write(repo.path().join("rules/queue.yaml"), ALERT.replace("> 10", "> 100")).unwrap();
    let md = markdown(repo.path(), &data, "HEAD");
    assert!(
        md.starts_with("### watchfire replay: 0 pages added, 1 removed, 0 changed;"),
        "{md}"
    );
    assert!(md.contains("Base `HEAD` → this change"), "{md}");
    // The removed page: when, what, where it went, whose it was, and its runbook.
    assert!(
        md.contains("- **removed** 2023-11-14T22:2")
            && md.contains("`QueueBacklog` → `team-a-pd` · owner `team-a` · cluster `c1`"),
        "{md}"
    );
    assert!(md.contains("[runbook](https://rb.example/queue)"), "{md}");
    // Counts cover the replayed groups: DiskFull's page is not among them.
    assert!(md.contains("| `team-a-pd` | 1 | **0** | 2 | **0** |"), "{md}");
    // Where the evaluations part: the base's alert went pending, the head's did nothing.
    assert!(md.contains("inactive → pending`; head no change |"), "{md}");
    // The recording group the alert reads is replayed with it; the disk group is not.
    assert!(md.contains("2 of 3 rule groups"), "{md}");
    assert!(md.contains("1 of 3 rule groups not replayed"), "{md}");
    assert!(md.contains("`--all-groups` replays everything"), "{md}");
    assert!(!md.contains("DiskFull"), "{md}");

    // Committed, the same change against the commit before it (`--base` is the same flag).
    git(repo.path(), &["commit", "-q", "-am", "raise the threshold"]);
    let again = markdown(repo.path(), &data, "HEAD~1");
    assert!(again.contains("0 pages added, 1 removed, 0 changed"), "{again}");
    let out = replay(
        repo.path(),
        &data,
        &["--base", "HEAD~1", "--format", "markdown", "--all-groups"],
    );
    let all = String::from_utf8_lossy(&out.stdout);
    assert!(all.contains("0 pages added, 1 removed, 0 changed"), "{all}");
    assert!(!all.contains("not replayed"), "{all}");
    assert!(all.contains("| `team-a-pd` | 2 | **1** | 4 | **2** |"), "{all}");

    // An unknown ref: a clear error naming it, exit 1, no panic.
    let out = replay(
        repo.path(),
        &data,
        &["--compare", "no-such-branch", "--format", "markdown"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--compare no-such-branch: no such directory, and not a commit of the git repository"),
        "{stderr}"
    );
}

#[test]
fn a_for_change_from_another_checkout_changes_the_page_time() {
    let (base, head, data) = checkouts();
    std::fs::write(
        head.path().join("rules/queue.yaml"),
        ALERT.replace("for: 2m", "for: 5m"),
    )
    .unwrap();
    let md = markdown(head.path(), &data, base.path().to_str().unwrap());
    assert!(
        md.starts_with("### watchfire replay: 0 pages added, 0 removed, 1 changed;"),
        "{md}"
    );
    assert!(md.contains("- **changed** 2023-11-14T22:"), "{md}");
    assert!(md.contains("(+3m)"), "{md}");
    // Both pending at the same time; the base fires three evaluations earlier.
    assert!(md.contains("pending → firing`; head no change |"), "{md}");
    assert!(!md.contains("DiskFull"), "{md}");
}

#[test]
fn a_route_change_moves_the_page_to_another_receiver_and_replays_every_group() {
    let (base, head, data) = checkouts();
    std::fs::write(
        head.path().join("routes.yaml"),
        ROUTES.replace(
            "owner=\"team-a\"]\n      receiver: team-a-pd",
            "owner=\"team-a\"]\n      receiver: team-a-oncall",
        ),
    )
    .unwrap();
    let md = markdown(head.path(), &data, base.path().to_str().unwrap());
    assert!(
        md.starts_with("### watchfire replay: 0 pages added, 0 removed, 2 changed;"),
        "{md}"
    );
    assert!(md.contains("receiver `team-a-pd` → `team-a-oncall`"), "{md}");
    assert!(md.contains("| `team-a-oncall` | 0 | **2** |"), "{md}");
    assert!(md.contains("| `team-a-pd` | 2 | **0** |"), "{md}");
    // Routing moved; evaluations did not.
    assert!(
        md.contains("evaluations identical (routing or grouping differs)"),
        "{md}"
    );
    assert!(md.contains("Routes differ: every rule group was replayed."), "{md}");
    assert!(md.contains("DiskFull"), "{md}");
}

#[test]
fn an_owners_change_from_a_git_ref_shows_the_new_owner_and_receiver() {
    let (repo, data) = git_repo();
    let data = data.path().join("data.om");
    std::fs::write(
        repo.path().join("owners.yaml"),
        OWNERS.replace(
            "receivers: {page: team-b-pd}\n",
            "receivers: {page: team-b-pd}\n    owns:\n      - matchers: ['queue=\"q\"']\n",
        ),
    )
    .unwrap();
    let md = markdown(repo.path(), &data, "HEAD");
    assert!(
        md.starts_with("### watchfire replay: 0 pages added, 0 removed, 1 changed;"),
        "{md}"
    );
    assert!(md.contains("receiver `team-a-pd` → `team-b-pd`"), "{md}");
    assert!(md.contains("owner `team-a` → `team-b`"), "{md}");
    assert!(md.contains("`QueueBacklog` → `team-b-pd` · owner `team-b`"), "{md}");
    assert!(md.contains("Owners differ: every rule group was replayed."), "{md}");
    // DiskFull stays with team-a: replayed, unchanged, not listed as a change.
    assert!(!md.contains("- **changed** 2023-11-14T22:4"), "{md}");

    // The JSON lines carry the same change, with only the diff on stdout.
    let out = replay(repo.path(), &data, &["--compare", "HEAD", "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.iter().all(|l| l.get("diff").is_some()), "{lines:?}");
    let changed: Vec<&serde_json::Value> = lines.iter().filter(|l| l["diff"] == "changed").collect();
    assert!(!changed.is_empty(), "{lines:?}");
    assert_eq!(changed[0]["base"]["owner"], "team-a");
    assert_eq!(changed[0]["head"]["owner"], "team-b");
    assert_eq!(lines.last().unwrap()["diff"], "summary");
}

#[test]
fn markdown_without_compare_is_the_ordinary_replay() {
    let (_base, head, data) = checkouts();
    let out = replay(head.path(), &data, &["--format", "markdown"]);
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{md}");
    assert!(md.starts_with("### watchfire replay: 2 pages, 4 notifications"), "{md}");
    assert!(md.contains("| `team-a` | 2 | 2 | 0 | 2 |"), "{md}");
    assert!(md.contains("#### Page incidents"), "{md}");
    assert!(md.contains("`DiskFull` → `team-a-pd`"), "{md}");
}

/// The library face: a replay records each alert state change once, in evaluation order.
#[test]
fn a_replay_records_each_alert_state_change_once() {
    use watchfire::replay::{self, FileConfig, Options};
    use watchfire::rules::AlertState::{Firing, Inactive, Pending};
    let (_base, head, data) = checkouts();
    let setup = FileConfig::load(&head.path().join("watchfire.yaml"))
        .unwrap()
        .build(None)
        .unwrap();
    let mut store = watchfire::tsdb::Store::new();
    watchfire::tsdb::load_file(&mut store, &data).unwrap();
    let opts = Options {
        from_ms: 1_700_000_000_000,
        to_ms: 1_700_000_000_000 + 59 * 60_000,
        lookback_ms: None,
        step_by_step: false,
    };
    let o = replay::run(&setup, &store, &opts, &mut |_| {});
    let queue: Vec<_> = o
        .transitions
        .iter()
        .filter(|t| t.alertname == "QueueBacklog")
        .map(|t| (t.from, t.to))
        .collect();
    assert_eq!(queue, [(Inactive, Pending), (Pending, Firing), (Firing, Inactive)]);
    // Without `for`, DiskFull fires at once.
    let disk: Vec<_> = o
        .transitions
        .iter()
        .filter(|t| t.alertname == "DiskFull")
        .map(|t| (t.from, t.to))
        .collect();
    assert_eq!(disk, [(Inactive, Firing), (Firing, Inactive)]);
    assert!(o.transitions.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    let firing = o.transitions.iter().find(|t| t.to == Firing).unwrap();
    assert_eq!(firing.labels.get("queue"), Some("q"));
    assert_eq!(firing.labels.get("owner"), None, "rule labels, no owner stamped");
}

/// `--compare --format html`: the page a pull request links, base and head side by side over one
/// time axis, in headless Chromium; the changed alert first, its badge's colour in the
/// screenshot.
#[test]
fn html_shows_base_and_head_side_by_side() {
    if common::require_tool("chromium", "apt-get install chromium").is_none() {
        return;
    }
    let (repo, data) = git_repo();
    let data = data.path().join("data.om");
    // The head pages later: the backlog must last 5 minutes, not 2.
    std::fs::write(
        repo.path().join("rules/queue.yaml"),
        ALERT.replace("for: 2m", "for: 5m"),
    )
    .unwrap();
    let out = replay(repo.path(), &data, &["--compare", "HEAD", "--format", "html"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = String::from_utf8(out.stdout).unwrap();
    assert!(!html.contains("<script") && !html.contains("src="), "self-contained");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("compare.html");
    std::fs::write(&file, &html).unwrap();
    let url = format!("file://{}", file.display());
    let profile = dir.path().join("chromium-profile");
    let dom = common::browser::dump_dom(&url, &profile, (1280, 900));
    assert!(
        dom.contains("<title>watchfire replay: HEAD → head (this working tree)</title>"),
        "{dom}"
    );
    // The diff's report, then the incident with both sides.
    assert!(dom.contains("<h2 id=\"diff-h\">Diff</h2>"), "{dom}");
    let first = &dom[dom.find("<article class=\"incident\"").expect("an incident")..];
    let first = &first[..first.find("</article>").unwrap()];
    assert!(
        first.contains("<span class=\"alertname\">QueueBacklog</span>"),
        "{first}"
    );
    assert!(
        first.contains("<span class=\"badge changed\">changed</span>"),
        "{first}"
    );
    let (base, head) = (
        first.find("<h4>HEAD</h4>"),
        first.find("<h4>head (this working tree)</h4>"),
    );
    assert!(base.is_some() && base < head, "base, then head: {first}");
    // Both sides pended at 22:23 (minute 10 and the 1m group); the base fired 2 minutes later,
    // the head 5.
    let (b, h) = (&first[base.unwrap()..head.unwrap()], &first[head.unwrap()..]);
    assert!(b.contains("firing after 2m pending"), "{b}");
    assert!(h.contains("firing after 5m pending"), "{h}");
    assert_eq!(b.matches("<svg").count(), 1, "{b}");
    assert_eq!(h.matches("<svg").count(), 1, "{h}");
    assert!(
        h.contains("<code>queue:depth:max &gt; 10</code>"),
        "the expression: {h}"
    );
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let shot = common::browser::screenshot(&url, &profile, (1280, 1600), &shots.join("replay-compare-1280.png"));
    assert_eq!((shot.width, shot.height), (1280, 1600));
    let changed = shot.count([0x66, 0x39, 0xba], 6);
    assert!(changed > 20, "the changed badge: {changed} pixels");
    assert!(shot.count([0xc6, 0x28, 0x28], 6) > 40, "firing badges");
}
