//! Cause rules: which alerts are causes, what object each names, and which alerts they can
//! explain through which relation. A watchfire file of its own (promtool never reads it),
//! read strictly with `file:line:col` errors.
//!
//! ```yaml
//! causes:
//!   - name: gpu-node-failure
//!     description: A GPU node failed; what ran on it suffers.
//!     when: ['alertname=~"GPUHardwareFailure|NodeNotReady"']   # the cause alerts (Alertmanager matchers)
//!     object: node            # node | cluster
//!     kind: node              # the first word of the cause's id (default: the object)
//!     lead: 5m                # a consequence may have started this long before the cause (default 5m)
//!     linger: 1h              # after its last alert ends, it still explains new consequences
//!                             #   this long (a spot node is gone in 2 minutes; its stranded pods
//!                             #   page later) (default 0s)
//!     hold: 3m                # a new alert this rule could explain waits up to this long for
//!                             #   its cause before it is sent on its own (default 0s: never)
//!     explains:
//!       - when: ['alertname=~"ServingAvailabilitySLOBurn|PriorityWorkloadStarved"']
//!         via: workload       # node | workload | cluster
//!         within: 2h          # workload: its pods ran on the node within this (default 1h)
//!         equal: [bucket]     # labels both alerts must share (besides cluster)
//! ```

use std::path::Path;

use crate::labels::Matcher;
use crate::notify::matchers::parse_matchers;
use crate::yaml::v2::{Node, Pos};
use crate::yaml::{FileError, Reader};

/// What a cause alert names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Object {
    /// A Kubernetes node: named by the alert's node label (or an alias: `hostname`, `Hostname`,
    /// `kubernetes_node`, `exported_node`), its `instance` address, or its exporter pod.
    Node,
    /// The whole cluster (a registry, a quota, a regional service).
    Cluster,
}

impl Object {
    pub fn as_str(self) -> &'static str {
        match self {
            Object::Node => "node",
            Object::Cluster => "cluster",
        }
    }
}

/// How a consequence is tied to a cause's object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The consequence names the same node (directly, by address, or by an exporter pod on it).
    Node,
    /// The consequence's workload (or, where it names none, its namespace) had a pod on the
    /// cause's node within `within`; an alert naming a GPU narrows that to the pods on the GPU.
    Workload,
    /// The same cluster.
    Cluster,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Node => "node",
            Via::Workload => "workload",
            Via::Cluster => "cluster",
        }
    }
}

/// One `explains` entry.
#[derive(Clone, Debug)]
pub struct Explains {
    pub when: Vec<Matcher>,
    pub via: Via,
    pub within_ms: i64,
    pub equal: Vec<String>,
    pub pos: Pos,
}

/// One cause rule.
#[derive(Clone, Debug)]
pub struct CauseRule {
    pub name: String,
    pub description: String,
    pub when: Vec<Matcher>,
    pub object: Object,
    /// The first word of the cause's id (`node/ip-10-0-1-5...`, `registry/eks-prod`).
    pub kind: String,
    pub lead_ms: i64,
    pub linger_ms: i64,
    /// How long a new alert this rule's `explains` select waits for its cause before it goes
    /// on alone (0: not at all).
    pub hold_ms: i64,
    pub explains: Vec<Explains>,
    pub file: String,
    pub pos: Pos,
}

/// Every cause rule of a policy, in file order.
#[derive(Clone, Debug, Default)]
pub struct CauseRules {
    pub rules: Vec<CauseRule>,
}

pub(crate) const DEFAULT_WITHIN_MS: i64 = 3_600_000;
pub(crate) const DEFAULT_LEAD_MS: i64 = 300_000;
/// The most `explains` entries one rule may have.
pub(crate) const MAX_EXPLAINS: usize = 64;
/// The longest `hold`: past it a page waiting for a cause is a page lost to the on-call.
pub(crate) const MAX_HOLD_MS: i64 = 900_000;

impl CauseRules {
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Reads cause rule files, in order; a rule name defined twice is an error at the second.
    pub fn load_files(paths: &[impl AsRef<Path>]) -> Result<CauseRules, FileError> {
        let mut out = CauseRules::default();
        for p in paths {
            let (text, shown) = crate::yaml::read_file(p.as_ref())?;
            out.add_str(&text, &shown)?;
        }
        Ok(out)
    }

    /// Parses one file's text (`file` names it in errors) and adds its rules.
    pub fn add_str(&mut self, text: &str, file: &str) -> Result<(), FileError> {
        let r = Reader { file };
        let Some(root) = r.parse(text)? else { return Ok(()) };
        for (_, _, v) in r.map(&root, "a cause rule file", &["causes"])? {
            for node in r.seq(v, "causes")? {
                let rule = decode_rule(&r, node)?;
                if let Some(first) = self.rules.iter().find(|x| x.name == rule.name) {
                    return Err(r.err(
                        rule.pos,
                        format!(
                            "cause rule {:?} is defined twice (first at {}:{})",
                            rule.name, first.file, first.pos
                        ),
                    ));
                }
                self.rules.push(rule);
            }
        }
        Ok(())
    }

    /// Parses one file's text on its own.
    pub fn load_str(text: &str, file: &str) -> Result<CauseRules, FileError> {
        let mut out = CauseRules::default();
        out.add_str(text, file)?;
        Ok(out)
    }
}

fn matchers(r: &Reader<'_>, node: &Node, what: &str) -> Result<Vec<Matcher>, FileError> {
    let mut out = Vec::new();
    let items = match node {
        Node::Seq(items, _) => items.iter().collect(),
        n => vec![n],
    };
    for item in items {
        let s = r.string(item, what)?;
        let ms = parse_matchers(&s).map_err(|e| r.err(item.pos(), format!("{what}: {e}")))?;
        out.extend(ms);
    }
    if out.is_empty() {
        return Err(r.err(node.pos(), format!("{what}: at least one matcher is needed")));
    }
    if out.iter().all(|m| m.matches_empty()) {
        return Err(r.err(
            node.pos(),
            format!("{what}: every matcher also matches an empty value, so this would select every alert"),
        ));
    }
    Ok(out)
}

fn decode_rule(r: &Reader<'_>, node: &Node) -> Result<CauseRule, FileError> {
    let keys = [
        "name",
        "description",
        "when",
        "object",
        "kind",
        "lead",
        "linger",
        "hold",
        "explains",
    ];
    let mut rule = CauseRule {
        name: String::new(),
        description: String::new(),
        when: Vec::new(),
        object: Object::Node,
        kind: String::new(),
        lead_ms: DEFAULT_LEAD_MS,
        linger_ms: 0,
        hold_ms: 0,
        explains: Vec::new(),
        file: r.file.to_string(),
        pos: node.pos(),
    };
    let (mut has_when, mut has_object) = (false, false);
    for (key, _, v) in r.map(node, "a cause rule", &keys)? {
        match key.as_str() {
            "name" => {
                rule.name = r.string(v, "name")?;
                if rule.name.is_empty()
                    || !rule
                        .name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    return Err(r.err(v.pos(), format!("name {:?}: letters, digits, - and _ only", rule.name)));
                }
            }
            "description" => rule.description = r.string(v, "description")?,
            "when" => {
                rule.when = matchers(r, v, "when")?;
                has_when = true;
            }
            "object" => {
                rule.object = match r.string(v, "object")?.as_str() {
                    "node" => Object::Node,
                    "cluster" => Object::Cluster,
                    other => return Err(r.err(v.pos(), format!("object {other:?}: expected node or cluster"))),
                };
                has_object = true;
            }
            "kind" => {
                rule.kind = r.string(v, "kind")?;
                if rule.kind.is_empty() || !rule.kind.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                    return Err(r.err(v.pos(), format!("kind {:?}: letters, digits and - only", rule.kind)));
                }
            }
            "lead" => rule.lead_ms = r.duration_ms(v, "lead", "5m")?,
            "linger" => rule.linger_ms = r.duration_ms(v, "linger", "1h")?,
            "hold" => {
                rule.hold_ms = r.duration_ms(v, "hold", "3m")?;
                if rule.hold_ms > MAX_HOLD_MS {
                    return Err(r.err(v.pos(), "hold: at most 15m (it delays pages that have no cause)"));
                }
            }
            _ => {
                for e in r.seq(v, "explains")? {
                    if rule.explains.len() == MAX_EXPLAINS {
                        // The stage keeps which entries select an alert in one 64-bit word.
                        return Err(r.err(
                            e.pos(),
                            format!("at most {MAX_EXPLAINS} explains entries a rule; split the rule"),
                        ));
                    }
                    rule.explains.push(decode_explains(r, e)?);
                }
            }
        }
    }
    if rule.name.is_empty() {
        return Err(r.err(rule.pos, "a cause rule needs a name"));
    }
    if !has_when {
        return Err(r.err(
            rule.pos,
            format!("cause rule {:?} needs `when` (the cause alerts)", rule.name),
        ));
    }
    if !has_object {
        return Err(r.err(
            rule.pos,
            format!("cause rule {:?} needs `object` (node or cluster)", rule.name),
        ));
    }
    if rule.explains.is_empty() {
        return Err(r.err(
            rule.pos,
            format!("cause rule {:?} explains nothing (`explains` is empty)", rule.name),
        ));
    }
    if let Some(e) = rule
        .explains
        .iter()
        .find(|e| e.via == Via::Node || e.via == Via::Workload)
    {
        if rule.object == Object::Cluster {
            return Err(r.err(
                e.pos,
                format!(
                    "via {}: needs a node cause (this rule's object is cluster)",
                    e.via.as_str()
                ),
            ));
        }
    }
    if rule.kind.is_empty() {
        rule.kind = rule.object.as_str().to_string();
    }
    Ok(rule)
}

fn decode_explains(r: &Reader<'_>, node: &Node) -> Result<Explains, FileError> {
    let mut e = Explains {
        when: Vec::new(),
        via: Via::Cluster,
        within_ms: DEFAULT_WITHIN_MS,
        equal: Vec::new(),
        pos: node.pos(),
    };
    let (mut has_when, mut has_via) = (false, false);
    for (key, _, v) in r.map(node, "an explains entry", &["when", "via", "within", "equal"])? {
        match key.as_str() {
            "when" => {
                e.when = matchers(r, v, "when")?;
                has_when = true;
            }
            "via" => {
                e.via = match r.string(v, "via")?.as_str() {
                    "node" => Via::Node,
                    "workload" => Via::Workload,
                    "cluster" => Via::Cluster,
                    other => return Err(r.err(v.pos(), format!("via {other:?}: expected node, workload or cluster"))),
                };
                has_via = true;
            }
            "within" => {
                e.within_ms = r.duration_ms(v, "within", "1h")?;
                if e.within_ms <= 0 {
                    return Err(r.err(v.pos(), "within must be positive"));
                }
            }
            _ => {
                e.equal = r.strings(v, "equal")?;
                if let Some(bad) = e.equal.iter().find(|n| !crate::labels::is_valid_label_name(n)) {
                    return Err(r.err(v.pos(), format!("equal: {bad:?} is not a valid label name")));
                }
            }
        }
    }
    if !has_when {
        return Err(r.err(e.pos, "an explains entry needs `when` (the consequence alerts)"));
    }
    if !has_via {
        return Err(r.err(e.pos, "an explains entry needs `via` (node, workload or cluster)"));
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "causes:
  - name: gpu-node-failure
    when: ['alertname=~\"GPUHardwareFailure|NodeNotReady\"']
    object: node
    explains:
      - when: ['alertname=\"ServingAvailabilitySLOBurn\"']
        via: workload
        within: 2h
      - when: ['alertname=\"TelemetryPathDown\"']
        via: node
  - name: registry-outage
    when: ['alertname=\"ImageRegistryUnreachable\"']
    object: cluster
    kind: registry
    explains:
      - when: ['alertname=\"ArtifactAccessBlocked\"']
        via: cluster
";

    fn err(text: &str) -> String {
        CauseRules::load_str(text, "c.yaml").unwrap_err().to_string()
    }

    #[test]
    fn reads_rules_with_defaults() {
        let c = CauseRules::load_str(GOOD, "c.yaml").unwrap();
        assert_eq!(c.rules.len(), 2);
        assert_eq!(c.rules[0].kind, "node");
        assert_eq!(c.rules[0].explains[0].within_ms, 7_200_000);
        assert_eq!(c.rules[0].explains[1].within_ms, DEFAULT_WITHIN_MS);
        assert_eq!(c.rules[1].kind, "registry");
        assert_eq!(c.rules[1].object, Object::Cluster);
        assert_eq!(c.rules[0].lead_ms, DEFAULT_LEAD_MS);
    }

    #[test]
    fn bad_input_is_an_error_at_its_position() {
        let many = (0..65)
            .map(|k| format!("      - {{when: ['alertname=\"A{k}\"'], via: node}}\n"))
            .collect::<String>();
        let text = format!("causes:\n  - name: x\n    when: ['a=\"b\"']\n    object: node\n    explains:\n{many}");
        assert_eq!(
            err(&text),
            "c.yaml:70:9: at most 64 explains entries a rule; split the rule"
        );
        assert_eq!(
            err(&GOOD.replace("via: node", "via: pod")),
            "c.yaml:10:14: via \"pod\": expected node, workload or cluster"
        );
        assert_eq!(
            err(&GOOD.replace("within: 2h", "within: soon")),
            "c.yaml:8:17: within: not a valid duration string: \"soon\" (expected a duration such as 1h)"
        );
        assert!(err(&GOOD.replace("object: node", "object: pod")).starts_with("c.yaml:4:13: object \"pod\""));
        assert!(err(&GOOD.replace("    kind: registry", "    kinds: registry"))
            .starts_with("c.yaml:14:5: unknown key \"kinds\""));
        let e = err(&GOOD.replace("alertname=\"ServingAvailabilitySLOBurn\"", "alertname=~\"(\""));
        assert!(
            e.starts_with("c.yaml:6:16: when: error parsing regexp: unclosed group"),
            "{e}"
        );
        assert!(
            err(&GOOD.replace("registry-outage", "gpu-node-failure")).contains("defined twice (first at c.yaml:2:5)")
        );
        assert!(err(&GOOD.replace("via: cluster", "via: node")).contains("needs a node cause"));
        assert!(err("causes:\n  - name: x\n    when: ['alertname=~\".*\"']\n    object: node\n    explains: [{when: 'a=\"b\"', via: node}]\n")
            .contains("select every alert"));
        assert!(err("causes:\n  - name: x\n    when: 'a=\"b\"'\n    object: node\n").contains("explains nothing"));
    }
}
