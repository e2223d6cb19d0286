//! `watchfire routes show|test`: the same output as `amtool config routes show|test` 0.25,
//! byte for byte, plus `--at` to see which receivers time intervals mute at a given time.

use std::path::Path;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::labels::Labels;

use super::config::{load_file, Config, ConfigError};
use super::matchers::{matchers_string, parse_matcher};
use super::mute::route_muted_at;
use super::route::Route;

/// Why `routes show|test` could not run (amtool prints these as `amtool: error: ...`, exit 1).
#[derive(Debug, thiserror::Error)]
pub enum RoutesError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("Failed to parse labels: {0}")]
    Labels(String),
}

/// Parses `name=value` arguments as amtool does (each one a matcher that must use `=`).
pub fn parse_label_args(args: &[String]) -> Result<Vec<(String, String)>, RoutesError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for a in args {
        let m = parse_matcher(a).map_err(RoutesError::Labels)?;
        if m.op_str() != "=" {
            return Err(RoutesError::Labels(
                "labels must be specified as key=value pairs".into(),
            ));
        }
        out.retain(|(n, _)| *n != m.name);
        out.push((m.name, m.value));
    }
    Ok(out)
}

/// A treeprint (xlab/treeprint) tree, rendered as amtool renders it.
struct Tree {
    value: String,
    children: Vec<Tree>,
}

impl Tree {
    fn new(value: String) -> Tree {
        Tree {
            value,
            children: Vec::new(),
        }
    }

    /// `treeprint.New()` root `.` and its nodes; ends with a newline.
    fn render_root(children: &[Tree]) -> String {
        let mut out = String::from(".\n");
        let mut ended = Vec::new();
        render_nodes(&mut out, 0, &mut ended, children);
        out
    }
}

fn render_nodes(out: &mut String, level: usize, ended: &mut Vec<usize>, nodes: &[Tree]) {
    for (i, node) in nodes.iter().enumerate() {
        let last = i + 1 == nodes.len();
        if last {
            ended.push(level);
        }
        for l in 0..level {
            // treeprint writes the link as "│" + two no-break spaces + a space.
            out.push_str(if ended.contains(&l) { "    " } else { "│\u{a0}\u{a0} " });
        }
        out.push_str(if last { "└── " } else { "├── " });
        out.push_str(&node.value);
        out.push('\n');
        if !node.children.is_empty() {
            let mark = ended.len();
            render_nodes(out, level + 1, ended, &node.children);
            ended.truncate(mark);
        }
    }
}

/// `getRouteTreeSlug`.
fn slug(route: &Route, show_continue: bool, show_receiver: bool) -> String {
    let mut s = if route.matchers.is_empty() {
        "default-route".to_string()
    } else {
        matchers_string(&route.matchers)
    };
    if route.continue_ && show_continue {
        s.push_str("  continue: true");
    }
    if show_receiver {
        s.push_str("  receiver: ");
        s.push_str(&route.opts.receiver);
    }
    s
}

fn show_tree(route: &Route) -> Tree {
    let mut t = Tree::new(slug(route, true, true));
    t.children = route.routes.iter().map(show_tree).collect();
    t
}

/// `getMatchingTree`.
fn matching_tree(route: &Route, labels: &Labels) -> Tree {
    let mut t = Tree::new(slug(route, false, false));
    let mut is_final = true;
    for child in &route.routes {
        if child.matches_own(labels) {
            t.children.push(matching_tree(child, labels));
            is_final = false;
            if !child.continue_ {
                break;
            }
        }
    }
    if is_final {
        t.value = slug(route, false, true);
    }
    t
}

/// The text of `amtool config routes show` for a loaded configuration.
pub(crate) fn render_routes_show(cfg: &Config) -> String {
    let root = Route::new(&cfg.route);
    let tree = show_tree(&root);
    format!("Routing tree:\n{}\n", Tree::render_root(std::slice::from_ref(&tree)))
}

/// `amtool config routes show --config.file=PATH`: the routing tree with each node's
/// matchers, `continue` and receiver.
pub fn routes_show(config_path: &Path) -> Result<String, RoutesError> {
    let cfg = load_file(config_path)?;
    Ok(render_routes_show(&cfg))
}

/// `amtool config routes test --config.file=PATH [--tree] [--verify.receivers=a,b] labels...`:
/// returns what amtool prints on stdout and its exit code (1 when the receivers differ from
/// `verify_receivers`).
///
/// With `at`, time intervals (`mute_time_intervals`, `active_time_intervals`) and watchfire
/// maintenance windows are evaluated at that instant: the receivers line lists only the
/// receivers that would be notified, and a `# muted at ...` line names the others. Without it
/// the output is amtool's.
pub fn routes_test(
    config_path: &Path,
    labels: &[(String, String)],
    tree: bool,
    verify_receivers: Option<Vec<String>>,
    at: Option<DateTime<Utc>>,
) -> Result<(String, i32), RoutesError> {
    let cfg = load_file(config_path)?;
    Ok(render_routes_test(&cfg, labels, tree, verify_receivers, at))
}

/// What `routes test` prints, its exit code, and the owner stamped (team label and team).
pub(crate) type RoutesTestOutcome = (String, i32, Option<(String, String)>);

/// [`routes_test`] with the owners file applied first, exactly as `watchfire run` applies it
/// before routing: the resolved team is stamped into the team label. Returns the output, the
/// exit code and the stamped owner (team label and team) when stamping changed the labels.
pub fn routes_test_owned(
    config_path: &Path,
    owners: Option<&super::Owners>,
    labels: &[(String, String)],
    tree: bool,
    verify_receivers: Option<Vec<String>>,
    at: Option<DateTime<Utc>>,
) -> Result<RoutesTestOutcome, RoutesError> {
    let cfg = load_file(config_path)?;
    let ls = Labels::from_pairs(labels.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    let (stamped, owner) = match owners {
        Some(o) => {
            let s = o.stamp(&ls);
            let owner = (s != ls)
                .then(|| s.get(&o.team_label).map(|t| (o.team_label.clone(), t.to_string())))
                .flatten();
            (s, owner)
        }
        None => (ls, None),
    };
    let pairs: Vec<(String, String)> = stamped
        .iter()
        .map(|l| (l.name.to_string(), l.value.to_string()))
        .collect();
    let (out, code) = render_routes_test(&cfg, &pairs, tree, verify_receivers, at);
    Ok((out, code, owner))
}

/// [`routes_test`] on an already loaded configuration.
pub(crate) fn render_routes_test(
    cfg: &Config,
    labels: &[(String, String)],
    tree: bool,
    verify_receivers: Option<Vec<String>>,
    at: Option<DateTime<Utc>>,
) -> (String, i32) {
    let root = Route::new(&cfg.route);
    let ls = Labels::from_pairs(labels.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    let mut out = String::new();
    if tree {
        let t = matching_tree(&root, &ls);
        out.push_str("Matching routes:\n");
        out.push_str(&Tree::render_root(std::slice::from_ref(&t)));
        out.push_str("\n\n");
    }
    let matched = root.match_labels(&ls);
    let mut receivers: Vec<String> = Vec::new();
    let mut muted: Vec<String> = Vec::new();
    for r in &matched {
        match at.and_then(|t| route_muted_at(cfg, &r.opts, t)) {
            Some(why) => muted.push(format!("{} ({why})", r.opts.receiver)),
            None => receivers.push(r.opts.receiver.clone()),
        }
    }
    let slug = receivers.join(",");
    out.push_str(&slug);
    out.push('\n');
    if let (Some(t), false) = (at, muted.is_empty()) {
        out.push_str(&format!(
            "# muted at {}: {}\n",
            t.to_rfc3339_opts(SecondsFormat::Secs, true),
            muted.join(", ")
        ));
    }
    let expected = verify_receivers.map(|v| v.join(",")).unwrap_or_default();
    if !expected.is_empty() && expected != slug {
        out.push_str("WARNING: Expected receivers did not match resolved receivers.\n");
        return (out, 1);
    }
    (out, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::config::load_str;

    const SIMPLE: &str = r#"
receivers: [{name: mails}, {name: x-pager}, {name: db-pager}, {name: y-pager}]
time_intervals:
- name: weekend
  time_intervals: [{weekdays: ['saturday', 'sunday']}]
route:
  receiver: mails
  routes:
  - match: {service: database}
    receiver: db-pager
    routes:
    - match: {owner: team-X}
      receiver: x-pager
      continue: true
      mute_time_intervals: [weekend]
    - match: {owner: team-Y}
      receiver: y-pager
"#;

    #[test]
    fn show_renders_treeprint() {
        let cfg = load_str(SIMPLE, "t.yml").unwrap();
        assert_eq!(
            render_routes_show(&cfg),
            "Routing tree:\n.\n└── default-route  receiver: mails\n    └── {service=\"database\"}  receiver: db-pager\n        ├── {owner=\"team-X\"}  continue: true  receiver: x-pager\n        └── {owner=\"team-Y\"}  receiver: y-pager\n\n"
        );
    }

    #[test]
    fn test_renders_tree_and_receivers() {
        let cfg = load_str(SIMPLE, "t.yml").unwrap();
        let labels = vec![
            ("service".to_string(), "database".to_string()),
            ("owner".to_string(), "team-X".to_string()),
        ];
        let (out, code) = render_routes_test(&cfg, &labels, true, None, None);
        assert_eq!(code, 0);
        assert_eq!(
            out,
            "Matching routes:\n.\n└── default-route\n    └── {service=\"database\"}\n        └── {owner=\"team-X\"}  receiver: x-pager\n\n\nx-pager\n"
        );
        let (out, code) = render_routes_test(&cfg, &labels, false, Some(vec!["db-pager".into()]), None);
        assert_eq!(code, 1);
        assert_eq!(
            out,
            "x-pager\nWARNING: Expected receivers did not match resolved receivers.\n"
        );
        let (_, code) = render_routes_test(&cfg, &labels, false, Some(vec!["x-pager".into()]), None);
        assert_eq!(code, 0);
    }

    #[test]
    fn at_evaluates_time_intervals() {
        let cfg = load_str(SIMPLE, "t.yml").unwrap();
        let labels = vec![
            ("service".to_string(), "database".to_string()),
            ("owner".to_string(), "team-X".to_string()),
        ];
        let sat: DateTime<Utc> = "2024-06-01T10:00:00Z".parse().unwrap();
        let (out, _) = render_routes_test(&cfg, &labels, false, None, Some(sat));
        assert_eq!(
            out,
            "\n# muted at 2024-06-01T10:00:00Z: x-pager (mute_time_intervals: weekend)\n"
        );
        let mon: DateTime<Utc> = "2024-06-03T10:00:00Z".parse().unwrap();
        let (out, _) = render_routes_test(&cfg, &labels, false, None, Some(mon));
        assert_eq!(out, "x-pager\n");
    }

    #[test]
    fn label_args_like_amtool() {
        assert_eq!(
            parse_label_args(&["a=b".into(), "c=\"d e\"".into()]).unwrap(),
            vec![("a".into(), "b".into()), ("c".into(), "d e".into())]
        );
        assert_eq!(
            parse_label_args(&["a=~b".into()]).unwrap_err().to_string(),
            "Failed to parse labels: labels must be specified as key=value pairs"
        );
        assert_eq!(
            parse_label_args(&["{foo=bar}".into()]).unwrap_err().to_string(),
            "Failed to parse labels: bad matcher format: {foo=bar}"
        );
    }
}
