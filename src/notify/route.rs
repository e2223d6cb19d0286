//! The routing tree, matching alerts exactly as Alertmanager's `dispatch/route.go`:
//! depth-first, siblings in order, the first matching child wins unless it has `continue`, a
//! node matched by no child handles the alert itself; options (receiver, group_by, timers)
//! inherited from the parent; route keys `{}/{owner="team-A"}`.

use std::collections::BTreeSet;

use crate::labels::{Labels, Matcher};

use super::config::RouteConfig;
use super::maintenance::MaintenanceWindow;
use super::matchers::{all_match, matchers_string, new_matcher, sort as sort_matchers};
use crate::duration::Duration;

/// A route's effective options (`dispatch.RouteOpts`).
#[derive(Clone, Debug)]
pub struct RouteOpts {
    pub receiver: String,
    /// Labels to group by (ignored when `group_by_all`).
    pub group_by: BTreeSet<String>,
    pub group_by_all: bool,
    pub group_wait: Duration,
    pub group_interval: Duration,
    pub repeat_interval: Duration,
    /// Not inherited in Alertmanager; inherited with `watchfire: {inherit_time_intervals: true}`.
    pub mute_time_intervals: Vec<String>,
    pub active_time_intervals: Vec<String>,
    /// watchfire's maintenance windows (mute while inside one).
    pub maintenance_windows: Vec<MaintenanceWindow>,
    /// Whether a receiver told an alert fires is told its resolve while the alert is muted
    /// (`watchfire: {resolve_through_mutes: false}` is Alertmanager's behaviour). Inherited.
    pub resolve_through_mutes: bool,
}

impl Default for RouteOpts {
    /// `dispatch.DefaultRouteOpts`.
    fn default() -> Self {
        RouteOpts {
            receiver: String::new(),
            group_by: BTreeSet::new(),
            group_by_all: false,
            group_wait: Duration::from_secs(30),
            group_interval: Duration::from_secs(5 * 60),
            repeat_interval: Duration::from_secs(4 * 60 * 60),
            mute_time_intervals: Vec::new(),
            active_time_intervals: Vec::new(),
            maintenance_windows: Vec::new(),
            resolve_through_mutes: true,
        }
    }
}

/// A node of the routing tree.
#[derive(Clone, Debug)]
pub struct Route {
    pub opts: RouteOpts,
    /// Legacy `match`/`match_re` and `matchers`, AND-ed and sorted.
    pub matchers: Vec<Matcher>,
    pub continue_: bool,
    pub routes: Vec<Route>,
    key: String,
    id: String,
    /// This node's position among all the tree's ids sorted as strings: a dense number that
    /// orders like the id, for keying groups without hashing or comparing the id.
    rank: u32,
}

impl Route {
    /// Builds the tree from the configuration's root route (`dispatch.NewRoute(cfg.Route, nil)`).
    pub fn new(root: &RouteConfig) -> Route {
        let mut route = Route::build(root, None, None);
        let mut ids = Vec::new();
        route.walk(&mut |r| ids.push(r.id.clone()));
        ids.sort();
        route.set_ranks(&ids);
        route
    }

    fn set_ranks(&mut self, sorted_ids: &[String]) {
        self.rank = sorted_ids.partition_point(|id| *id < self.id) as u32;
        for r in &mut self.routes {
            r.set_ranks(sorted_ids);
        }
    }

    fn build(cr: &RouteConfig, parent: Option<(&RouteOpts, &str, &str)>, index: Option<usize>) -> Route {
        let mut opts = parent.map(|p| p.0.clone()).unwrap_or_default();
        if !cr.receiver.is_empty() {
            opts.receiver = cr.receiver.clone();
        }
        if let Some(gb) = &cr.group_by {
            opts.group_by = gb.iter().cloned().collect();
            opts.group_by_all = false;
        } else if cr.group_by_all {
            opts.group_by_all = true;
        }
        if let Some(d) = cr.group_wait {
            opts.group_wait = d;
        }
        if let Some(d) = cr.group_interval {
            opts.group_interval = d;
        }
        if let Some(d) = cr.repeat_interval {
            opts.repeat_interval = d;
        }
        if let Some(b) = cr.watchfire.resolve_through_mutes {
            opts.resolve_through_mutes = b;
        }
        let own_mute: Vec<String> = cr.mute_time_intervals.iter().map(|n| n.name.clone()).collect();
        let own_active: Vec<String> = cr.active_time_intervals.iter().map(|n| n.name.clone()).collect();
        if cr.watchfire.inherit_time_intervals && parent.is_some() {
            for n in own_mute {
                if !opts.mute_time_intervals.contains(&n) {
                    opts.mute_time_intervals.push(n);
                }
            }
            for n in own_active {
                if !opts.active_time_intervals.contains(&n) {
                    opts.active_time_intervals.push(n);
                }
            }
            opts.maintenance_windows
                .extend(cr.watchfire.maintenance_windows.iter().cloned());
        } else {
            opts.mute_time_intervals = own_mute;
            opts.active_time_intervals = own_active;
            opts.maintenance_windows = cr.watchfire.maintenance_windows.clone();
        }

        let mut matchers = Vec::new();
        for (n, v) in &cr.match_eq {
            if let Ok(m) = new_matcher("=", n, v) {
                matchers.push(m);
            }
        }
        for (n, re) in &cr.match_re {
            // Alertmanager keeps the compiled regexp's text, `^(?:re)$`, as the value.
            if let Ok(m) = new_matcher("=~", n, &format!("^(?:{re})$")) {
                matchers.push(m);
            }
        }
        matchers.extend(cr.matchers.iter().cloned());
        sort_matchers(&mut matchers);

        let ms = matchers_string(&matchers);
        let (key, id) = match parent {
            None => (ms.clone(), ms),
            Some((_, pkey, pid)) => (format!("{pkey}/{ms}"), format!("{pid}/{ms}/{}", index.unwrap_or(0))),
        };
        let mut route = Route {
            opts,
            matchers,
            continue_: cr.continue_,
            routes: Vec::new(),
            key,
            id,
            rank: 0,
        };
        route.routes = cr
            .routes
            .iter()
            .enumerate()
            .map(|(i, c)| Route::build(c, Some((&route.opts, &route.key, &route.id)), Some(i)))
            .collect();
        route
    }

    /// Whether this node's own matchers accept the labels (absent labels read as "").
    pub fn matches_own(&self, labels: &Labels) -> bool {
        all_match(&self.matchers, |n| labels.get(n))
    }

    /// `Route.Match`: the routes that handle an alert with these labels, in tree order.
    pub fn match_labels(&self, labels: &Labels) -> Vec<&Route> {
        let mut all = Vec::new();
        self.visit_matches(labels, &mut |r| all.push(r));
        all
    }

    /// [`Route::match_labels`] without collecting: calls `found` for each route in tree order.
    /// Returns whether this node matched (and so handled the alert, itself or below).
    pub fn visit_matches<'a>(&'a self, labels: &Labels, found: &mut dyn FnMut(&'a Route)) -> bool {
        if !self.matches_own(labels) {
            return false;
        }
        let mut any = false;
        for child in &self.routes {
            if child.visit_matches(labels, found) {
                any = true;
                if !child.continue_ {
                    break;
                }
            }
        }
        if !any {
            found(self);
        }
        true
    }

    /// `Route.Key()`: the parent's key, `/`, this node's matchers (`{}` for the root).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// `Route.ID()` (newer Alertmanagers): the key with each node's index among its siblings,
    /// unique even when siblings have the same matchers.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// See the field: routes compare by rank as by id.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Visits every node, depth-first.
    pub fn walk<'a>(&'a self, visit: &mut dyn FnMut(&'a Route)) {
        visit(self);
        for r in &self.routes {
            r.walk(visit);
        }
    }

    /// The group labels of an alert on this route: its labels restricted to `group_by`
    /// (all of them with `...`).
    pub fn group_labels(&self, labels: &Labels) -> Labels {
        if self.opts.group_by_all {
            return labels.clone();
        }
        Labels::from_pairs(
            labels
                .iter()
                .filter(|l| self.opts.group_by.contains(&*l.name))
                .map(|l| (l.name.to_string(), l.value.to_string())),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::config::load_str;

    const TREE: &str = r#"
receivers: [{name: def}, {name: a}, {name: t}, {name: pa}, {name: pb}, {name: bc}]
route:
  receiver: def
  group_by: [alertname]
  routes:
  - match: {owner: team-A}
    receiver: a
    routes:
    - match: {env: testing}
      receiver: t
      group_by: ['...']
    - match: {env: production}
      receiver: pa
      group_wait: 1m
      continue: true
    - match_re: {env: "produ.*", job: ".*"}
      receiver: pb
  - matchers: ['owner=~"team-(B|C)"']
    receiver: bc
    group_interval: 10m
"#;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(pairs.iter().copied())
    }

    #[test]
    fn matches_like_route_go() {
        let cfg = load_str(TREE, "t.yml").unwrap();
        let root = Route::new(&cfg.route);
        let recv = |ls: &[(&str, &str)]| {
            root.match_labels(&labels(ls))
                .iter()
                .map(|r| r.opts.receiver.clone())
                .collect::<Vec<_>>()
                .join(",")
        };
        assert_eq!(recv(&[("owner", "team-A")]), "a");
        assert_eq!(recv(&[("owner", "team-A"), ("env", "testing")]), "t");
        assert_eq!(recv(&[("owner", "team-A"), ("env", "production")]), "pa,pb");
        assert_eq!(recv(&[("owner", "team-C")]), "bc");
        assert_eq!(recv(&[("owner", "nobody")]), "def");

        let m = root.match_labels(&labels(&[("owner", "team-A"), ("env", "production")]));
        assert_eq!(m[0].key(), r#"{}/{owner="team-A"}/{env="production"}"#);
        assert_eq!(
            m[1].key(),
            r#"{}/{owner="team-A"}/{env=~"^(?:produ.*)$",job=~"^(?:.*)$"}"#
        );
        assert_eq!(
            m[1].id(),
            r#"{}/{owner="team-A"}/0/{env=~"^(?:produ.*)$",job=~"^(?:.*)$"}/2"#
        );
        // Inheritance.
        assert_eq!(m[0].opts.group_wait, Duration::from_secs(60));
        assert_eq!(m[1].opts.group_wait, Duration::from_secs(30));
        assert!(m[0].opts.group_by.contains("alertname"));
        let t = root.match_labels(&labels(&[("owner", "team-A"), ("env", "testing")]));
        assert!(t[0].opts.group_by_all);
        let bc = root.match_labels(&labels(&[("owner", "team-B")]));
        assert_eq!(bc[0].opts.group_interval, Duration::from_secs(600));
        assert_eq!(bc[0].key(), r#"{}/{owner=~"team-(B|C)"}"#);
    }

    #[test]
    fn group_labels_follow_group_by() {
        let cfg = load_str(TREE, "t.yml").unwrap();
        let root = Route::new(&cfg.route);
        let ls = labels(&[
            ("alertname", "X"),
            ("owner", "team-A"),
            ("env", "testing"),
            ("pod", "p"),
        ]);
        let m = root.match_labels(&ls);
        assert_eq!(m[0].group_labels(&ls), ls);
        let ls2 = labels(&[("alertname", "X"), ("owner", "nobody")]);
        assert_eq!(
            root.match_labels(&ls2)[0].group_labels(&ls2),
            labels(&[("alertname", "X")])
        );
    }

    #[test]
    fn resolve_through_mutes_is_inherited_and_strict() {
        let cfg = load_str(
            r#"
receivers: [{name: a}]
route:
  receiver: a
  watchfire: {resolve_through_mutes: false}
  routes:
  - matchers: [x="1"]
  - matchers: [x="2"]
    watchfire: {resolve_through_mutes: true}
"#,
            "t.yml",
        )
        .unwrap();
        let root = Route::new(&cfg.route);
        assert!(!root.opts.resolve_through_mutes);
        assert!(!root.match_labels(&labels(&[("x", "1")]))[0].opts.resolve_through_mutes);
        assert!(root.match_labels(&labels(&[("x", "2")]))[0].opts.resolve_through_mutes);
        let plain = load_str("receivers: [{name: a}]\nroute: {receiver: a}\n", "t.yml").unwrap();
        assert!(Route::new(&plain.route).opts.resolve_through_mutes, "the default");
        let err = load_str(
            "receivers: [{name: a}]\nroute:\n  receiver: a\n  watchfire: {resolve_through_mutes: maybe}\n",
            "t.yml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("t.yml:4:"), "{err}");
        let err = load_str(
            "receivers: [{name: a}]\nroute:\n  receiver: a\n  watchfire: {resolve_through_mute: false}\n",
            "t.yml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("t.yml:4:") && err.contains("resolve_through_mute"),
            "{err}"
        );
    }

    #[test]
    fn time_intervals_are_not_inherited_unless_asked() {
        let cfg = load_str(
            r#"
receivers: [{name: a}]
time_intervals: [{name: night, time_intervals: [{times: [{start_time: '00:00', end_time: '06:00'}]}]}]
route:
  receiver: a
  routes:
  - matchers: [x="1"]
    mute_time_intervals: [night]
    routes:
    - matchers: [y="1"]
    - matchers: [y="2"]
      watchfire: {inherit_time_intervals: true}
"#,
            "t.yml",
        )
        .unwrap();
        let root = Route::new(&cfg.route);
        let r1 = root.match_labels(&labels(&[("x", "1"), ("y", "1")]));
        assert!(r1[0].opts.mute_time_intervals.is_empty());
        let r2 = root.match_labels(&labels(&[("x", "1"), ("y", "2")]));
        assert_eq!(r2[0].opts.mute_time_intervals, vec!["night".to_string()]);
    }
}
