//! Slack Block Kit blocks, a watchfire extension of `slack_configs` (Alertmanager 0.25 has no
//! `blocks`): `watchfire: {blocks: [...]}` holds the blocks as YAML, every string value a Go
//! template. This file keeps them as written with each string's position (so a broken template is
//! a load error at its line and column), checks Slack's static limits at load (50 blocks, a
//! `type` on each, the list sizes of sections, contexts and actions) and, at send time, turns the
//! rendered tree into JSON with each text cut to Slack's length limit.

use crate::yaml::v2::{DResult, Decoder, Fail, Node, Pos, Resolved};

/// Slack's limits (api.slack.com/reference/block-kit/blocks).
pub(crate) const MAX_BLOCKS: usize = 50;
/// A text object, and a section's `text`.
pub(crate) const MAX_TEXT: usize = 3000;
pub(crate) const MAX_HEADER_TEXT: usize = 150;
pub(crate) const MAX_SECTION_FIELD_TEXT: usize = 2000;
pub(crate) const MAX_BUTTON_TEXT: usize = 75;
const MAX_SECTION_FIELDS: usize = 10;
const MAX_CONTEXT_ELEMENTS: usize = 10;
const MAX_ACTIONS_ELEMENTS: usize = 25;

/// A YAML value as the user wrote it, strings with their position.
#[derive(Clone, Debug, PartialEq)]
pub enum Tree {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String, Pos),
    List(Vec<Tree>),
    Map(Vec<(String, Tree)>),
}

impl Tree {
    fn get(&self, key: &str) -> Option<&Tree> {
        match self {
            Tree::Map(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn str(&self, key: &str) -> Option<&str> {
        match self.get(key) {
            Some(Tree::Str(s, _)) => Some(s),
            _ => None,
        }
    }

    /// Every string value (the templates), with its position.
    pub fn strings<'a>(&'a self, out: &mut Vec<(&'a str, Pos)>) {
        match self {
            Tree::Str(s, p) => out.push((s, *p)),
            Tree::List(items) => items.iter().for_each(|i| i.strings(out)),
            Tree::Map(m) => m.iter().for_each(|(_, v)| v.strings(out)),
            _ => {}
        }
    }

    /// The JSON value, each string passed through `render`.
    pub fn render(&self, render: &mut dyn FnMut(&str) -> String) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Tree::Null => Value::Null,
            Tree::Bool(b) => Value::Bool(*b),
            Tree::Int(i) => match i64::try_from(*i) {
                Ok(i) => Value::from(i),
                // yaml.v2 reads integers up to u64; JSON has room for them.
                Err(_) => u64::try_from(*i).map(Value::from).unwrap_or(Value::Null),
            },
            // Non-finite numbers are refused at load.
            Tree::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Tree::Str(s, _) => Value::String(render(s)),
            Tree::List(items) => Value::Array(items.iter().map(|i| i.render(render)).collect()),
            Tree::Map(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), v.render(render))).collect()),
        }
    }
}

/// Decodes any YAML value into a [`Tree`] (keys as strings, merge keys applied, repeated keys
/// reported as yaml.v2 does).
pub(crate) fn decode_tree(d: &mut Decoder, v: &Node) -> DResult<Tree> {
    if v.is_null() {
        return Ok(Tree::Null);
    }
    Ok(match v {
        Node::Seq(items, _) => Tree::List(items.iter().map(|i| decode_tree(d, i)).collect::<DResult<_>>()?),
        Node::Map(..) => {
            let mut out = Vec::new();
            for (k, _, val) in d.map_entries(v, "map[string]interface {}")? {
                out.push((k, decode_tree(d, val)?));
            }
            Tree::Map(out)
        }
        Node::Scalar(s) => match v.resolve() {
            Some(Resolved::Bool(b)) => Tree::Bool(b),
            Some(Resolved::Int(i)) => Tree::Int(i),
            Some(Resolved::Float(f)) if f.is_finite() => Tree::Float(f),
            Some(Resolved::Float(_)) => {
                return Err(Fail::new(
                    v.pos(),
                    format!("{} is not a JSON number; quote it", s.value),
                ))
            }
            _ => Tree::Str(s.value.clone(), v.pos()),
        },
    })
}

/// Decodes `watchfire: {blocks: [...]}` of a `slack_configs` entry: the blocks and the position
/// of the `blocks` key, `None` when there are none.
pub(crate) fn decode_extensions(d: &mut Decoder, node: &Node) -> DResult<Option<(Vec<Tree>, Pos)>> {
    let mut out = None;
    d.fields(node, "watchfire.SlackExtensions", &["blocks"], &mut |d, _, kpos, v| {
        let mark = d.mark();
        let items = d.seq(v, "[]watchfire.SlackBlock");
        if d.failed_since(mark) {
            return Ok(());
        }
        if items.is_empty() {
            return Err(Fail::new(v.pos(), "watchfire.blocks must list at least one block"));
        }
        if items.len() > MAX_BLOCKS {
            return Err(Fail::new(
                items[MAX_BLOCKS].pos(),
                format!(
                    "watchfire.blocks has {} blocks; Slack accepts at most {MAX_BLOCKS}",
                    items.len()
                ),
            ));
        }
        let mut blocks = Vec::new();
        for item in items {
            let block = decode_tree(d, item)?;
            check_block(&block, item)?;
            blocks.push(block);
        }
        out = Some((blocks, kpos));
        Ok(())
    })?;
    Ok(out)
}

/// Slack's static rules for one block: a mapping with a `type`, and its lists within their sizes.
fn check_block(block: &Tree, node: &Node) -> DResult<()> {
    let pos = node.pos();
    if !matches!(block, Tree::Map(_)) {
        return Err(Fail::new(pos, "a Slack block must be a mapping with a type"));
    }
    let ty = block.str("type").unwrap_or("");
    if ty.is_empty() {
        return Err(Fail::new(pos, "missing type in Slack block"));
    }
    let limits: &[(&str, &str, usize)] = &[
        ("section", "fields", MAX_SECTION_FIELDS),
        ("context", "elements", MAX_CONTEXT_ELEMENTS),
        ("actions", "elements", MAX_ACTIONS_ELEMENTS),
    ];
    for (t, key, max) in limits {
        if ty != *t {
            continue;
        }
        if let Some(Tree::List(items)) = block.get(key) {
            if items.len() > *max {
                return Err(Fail::new(
                    pos,
                    format!(
                        "a Slack {ty} block has {} {key}; Slack accepts at most {max}",
                        items.len()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Cuts every text of rendered blocks to Slack's limit for its place, with an ellipsis, and logs
/// each cut (Slack would refuse the whole message with `invalid_blocks`).
pub(crate) fn limit_texts(blocks: &mut [serde_json::Value]) {
    for (i, b) in blocks.iter_mut().enumerate() {
        limit(b, &format!("blocks[{i}]"), None);
    }
}

fn limit(v: &mut serde_json::Value, path: &str, max: Option<usize>) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let ty = m.get("type").and_then(Value::as_str).unwrap_or("").to_string();
            if ty == "plain_text" || ty == "mrkdwn" {
                if let Some(Value::String(text)) = m.get_mut("text") {
                    let max = max.unwrap_or(MAX_TEXT);
                    let count = text.chars().count();
                    if count > max {
                        tracing::warn!(path = %format!("{path}.text"), chars = count, limit = max, "Slack block text cut to Slack's limit");
                        *text = truncate_runes(text, max);
                    }
                }
            }
            for (k, child) in m.iter_mut() {
                let child_max = match (ty.as_str(), k.as_str()) {
                    ("header", "text") => Some(MAX_HEADER_TEXT),
                    ("section", "fields") => Some(MAX_SECTION_FIELD_TEXT),
                    ("button", "text") => Some(MAX_BUTTON_TEXT),
                    _ => None,
                };
                limit(child, &format!("{path}.{k}"), child_max);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                limit(item, &format!("{path}[{i}]"), max);
            }
        }
        _ => {}
    }
}

/// The first `n` characters, the last one an ellipsis when cut (as the receivers cut texts).
fn truncate_runes(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut out: String = s.chars().take(n - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::v2::parse;

    fn dec(y: &str) -> Result<Vec<Tree>, String> {
        let n = parse(y).unwrap().unwrap();
        let mut d = Decoder::new();
        let r = decode_extensions(&mut d, &n).map_err(|f| format!("{}: {}", f.pos, f.message))?;
        if let Some(i) = d.issues.first() {
            return Err(format!("{}: {}", i.pos, i.message));
        }
        Ok(r.map(|(b, _)| b).unwrap_or_default())
    }

    #[test]
    fn decodes_scalars_and_positions() {
        let b = dec("blocks:\n- type: header\n  text: {type: plain_text, text: '{{ .Status }}', emoji: true}\n  n: 3\n  f: 1.5\n  z: ~\n").unwrap();
        let mut s = Vec::new();
        b[0].strings(&mut s);
        assert_eq!(s[2], ("{{ .Status }}", Pos::new(3, 34)));
        let v = b[0].render(&mut |t| t.replace("{{ .Status }}", "firing"));
        assert_eq!(
            v,
            serde_json::json!({"type": "header", "text": {"type": "plain_text", "text": "firing", "emoji": true}, "n": 3, "f": 1.5, "z": null})
        );
    }

    #[test]
    fn static_limits_are_load_errors() {
        let many = format!("blocks: [{}]", ["{type: divider}"; 51].join(", "));
        let e = dec(&many).unwrap_err();
        assert!(e.contains("51 blocks; Slack accepts at most 50"), "{e}");
        assert!(dec(&format!("blocks: [{}]", ["{type: divider}"; 50].join(", "))).is_ok());
        assert_eq!(
            dec("blocks: [{text: x}]").unwrap_err(),
            "1:10: missing type in Slack block"
        );
        assert_eq!(
            dec("blocks: [x]").unwrap_err(),
            "1:10: a Slack block must be a mapping with a type"
        );
        assert_eq!(
            dec("blocks: []").unwrap_err(),
            "1:9: watchfire.blocks must list at least one block"
        );
        let fields = format!(
            "blocks: [{{type: section, fields: [{}]}}]",
            ["{type: mrkdwn, text: a}"; 11].join(", ")
        );
        assert!(dec(&fields)
            .unwrap_err()
            .contains("11 fields; Slack accepts at most 10"));
        assert_eq!(
            dec("blocks: [{type: divider}]\ncolor: red").unwrap_err(),
            "2:1: field color not found in type watchfire.SlackExtensions"
        );
        assert_eq!(
            dec("blocks: [{type: x, n: .inf}]").unwrap_err(),
            "1:23: .inf is not a JSON number; quote it"
        );
    }

    #[test]
    fn texts_cut_to_their_place_limit() {
        let long = "x".repeat(4000);
        let mut blocks = vec![
            serde_json::json!({"type": "header", "text": {"type": "plain_text", "text": long}}),
            serde_json::json!({"type": "section", "text": {"type": "mrkdwn", "text": long},
                "fields": [{"type": "mrkdwn", "text": long}],
                "accessory": {"type": "button", "text": {"type": "plain_text", "text": long}, "value": long}}),
            serde_json::json!({"type": "context", "elements": [{"type": "mrkdwn", "text": "short"}]}),
        ];
        limit_texts(&mut blocks);
        let n = |v: &serde_json::Value| v.as_str().unwrap().chars().count();
        assert_eq!(n(&blocks[0]["text"]["text"]), MAX_HEADER_TEXT);
        assert!(blocks[0]["text"]["text"].as_str().unwrap().ends_with('…'));
        assert_eq!(n(&blocks[1]["text"]["text"]), MAX_TEXT);
        assert_eq!(n(&blocks[1]["fields"][0]["text"]), MAX_SECTION_FIELD_TEXT);
        assert_eq!(n(&blocks[1]["accessory"]["text"]["text"]), MAX_BUTTON_TEXT);
        // Not a text object: left to Slack.
        assert_eq!(n(&blocks[1]["accessory"]["value"]), 4000);
        assert_eq!(blocks[2]["elements"][0]["text"], "short");
    }
}
