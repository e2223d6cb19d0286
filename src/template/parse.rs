//! Parser for Go `text/template` (a port of `text/template/parse/parse.go` and `node.go`).
//!
//! Nodes keep the byte position Go would give them, so that execution errors can name the same
//! `line:col` and `<context>` as Go does.

use std::collections::HashMap;

use super::lexer::{Item, ItemType, Lexer};
use crate::gofmt::quote;

/// Nesting limit for parenthesised pipelines and control structures. Go allows 10000 parens;
/// we stop earlier so that deeply nested input cannot overflow the stack.
const MAX_NESTING: usize = 100;

#[derive(Debug, Clone)]
pub(crate) struct ParseError {
    /// Go's message, e.g. `template: name:1: unexpected "}" in operand`.
    pub message: String,
    /// Byte offset of the token the parser stopped at.
    pub pos: usize,
}

#[derive(Debug)]
pub(crate) struct Tree {
    pub name: String,
    pub root: List,
}

#[derive(Debug, Clone)]
pub(crate) struct List {
    pub pos: usize,
    pub nodes: Vec<Node>,
}

#[derive(Debug, Clone)]
pub(crate) struct Branch {
    pub pos: usize,
    pub pipe: Pipe,
    pub list: List,
    pub else_list: Option<List>,
}

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Text {
        pos: usize,
        text: String,
    },
    Action {
        pos: usize,
        pipe: Pipe,
    },
    If(Branch),
    Range(Branch),
    With(Branch),
    Template {
        pos: usize,
        name: String,
        pipe: Option<Pipe>,
    },
    Break {
        pos: usize,
    },
    Continue {
        pos: usize,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct Pipe {
    pub pos: usize,
    pub is_assign: bool,
    /// Declared or assigned variables, each a single name like `$x`.
    pub decl: Vec<(usize, String)>,
    pub cmds: Vec<Command>,
}

#[derive(Debug, Clone)]
pub(crate) struct Command {
    pub pos: usize,
    pub args: Vec<Arg>,
}

#[derive(Debug, Clone)]
pub(crate) struct Number {
    pub pos: usize,
    pub text: String,
    pub is_int: bool,
    pub is_uint: bool,
    pub is_float: bool,
    pub is_complex: bool,
    pub int64: i64,
    pub uint64: u64,
    pub float64: f64,
}

/// Operands of a command.
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    /// `.A.B`: identifiers without the dots.
    Field {
        pos: usize,
        ident: Vec<String>,
    },
    /// `(pipe).A.B` or `fn.A`.
    Chain {
        pos: usize,
        node: Box<Arg>,
        fields: Vec<String>,
    },
    Identifier {
        pos: usize,
        name: String,
    },
    /// `$x.A.B`: the first element includes the `$`.
    Variable {
        pos: usize,
        ident: Vec<String>,
    },
    Dot {
        pos: usize,
    },
    Nil {
        pos: usize,
    },
    Bool {
        pos: usize,
        val: bool,
    },
    Number(Box<Number>),
    Str {
        pos: usize,
        quoted: String,
        text: String,
    },
    Pipe(Box<Pipe>),
}

// ---------------------------------------------------------------------------------------------
// String forms (Go's `Node.String()`), used as the `<context>` of execution errors.

impl Arg {
    pub(crate) fn pos(&self) -> usize {
        match self {
            Arg::Field { pos, .. }
            | Arg::Chain { pos, .. }
            | Arg::Identifier { pos, .. }
            | Arg::Variable { pos, .. }
            | Arg::Dot { pos }
            | Arg::Nil { pos }
            | Arg::Bool { pos, .. }
            | Arg::Str { pos, .. } => *pos,
            Arg::Number(n) => n.pos,
            Arg::Pipe(p) => p.pos,
        }
    }

    pub(crate) fn write_to(&self, sb: &mut String) {
        match self {
            Arg::Field { ident, .. } => {
                for id in ident {
                    sb.push('.');
                    sb.push_str(id);
                }
            }
            Arg::Chain { node, fields, .. } => {
                if let Arg::Pipe(p) = node.as_ref() {
                    sb.push('(');
                    p.write_to(sb);
                    sb.push(')');
                } else {
                    node.write_to(sb);
                }
                for f in fields {
                    sb.push('.');
                    sb.push_str(f);
                }
            }
            Arg::Identifier { name, .. } => sb.push_str(name),
            Arg::Variable { ident, .. } => sb.push_str(&ident.join(".")),
            Arg::Dot { .. } => sb.push('.'),
            Arg::Nil { .. } => sb.push_str("nil"),
            Arg::Bool { val, .. } => sb.push_str(if *val { "true" } else { "false" }),
            Arg::Number(n) => sb.push_str(&n.text),
            Arg::Str { quoted, .. } => sb.push_str(quoted),
            Arg::Pipe(p) => p.write_to(sb),
        }
    }

    pub(crate) fn to_go_string(&self) -> String {
        let mut s = String::new();
        self.write_to(&mut s);
        s
    }
}

impl Command {
    pub(crate) fn write_to(&self, sb: &mut String) {
        for (i, arg) in self.args.iter().enumerate() {
            if i > 0 {
                sb.push(' ');
            }
            if let Arg::Pipe(p) = arg {
                sb.push('(');
                p.write_to(sb);
                sb.push(')');
                continue;
            }
            arg.write_to(sb);
        }
    }
}

impl Pipe {
    pub(crate) fn write_to(&self, sb: &mut String) {
        if !self.decl.is_empty() {
            for (i, (_, v)) in self.decl.iter().enumerate() {
                if i > 0 {
                    sb.push_str(", ");
                }
                sb.push_str(v);
            }
            sb.push_str(" := ");
        }
        for (i, c) in self.cmds.iter().enumerate() {
            if i > 0 {
                sb.push_str(" | ");
            }
            c.write_to(sb);
        }
    }
}

impl List {
    pub(crate) fn write_to(&self, sb: &mut String) {
        for n in &self.nodes {
            n.write_to(sb);
        }
    }
}

impl Node {
    pub(crate) fn pos(&self) -> usize {
        match self {
            Node::Text { pos, .. }
            | Node::Action { pos, .. }
            | Node::Template { pos, .. }
            | Node::Break { pos }
            | Node::Continue { pos } => *pos,
            Node::If(b) | Node::Range(b) | Node::With(b) => b.pos,
        }
    }

    pub(crate) fn write_to(&self, sb: &mut String) {
        match self {
            Node::Text { text, .. } => sb.push_str(text),
            Node::Action { pipe, .. } => {
                sb.push_str("{{");
                pipe.write_to(sb);
                sb.push_str("}}");
            }
            Node::If(b) => b.write_to("if", sb),
            Node::Range(b) => b.write_to("range", sb),
            Node::With(b) => b.write_to("with", sb),
            Node::Template { name, pipe, .. } => {
                sb.push_str("{{template ");
                sb.push_str(&quote(name));
                if let Some(p) = pipe {
                    sb.push(' ');
                    p.write_to(sb);
                }
                sb.push_str("}}");
            }
            Node::Break { .. } => sb.push_str("{{break}}"),
            Node::Continue { .. } => sb.push_str("{{continue}}"),
        }
    }
}

impl Branch {
    fn write_to(&self, name: &str, sb: &mut String) {
        sb.push_str("{{");
        sb.push_str(name);
        sb.push(' ');
        self.pipe.write_to(sb);
        sb.push_str("}}");
        self.list.write_to(sb);
        if let Some(e) = &self.else_list {
            sb.push_str("{{else}}");
            e.write_to(sb);
        }
        sb.push_str("{{end}}");
    }
}

// ---------------------------------------------------------------------------------------------
// Parser.

/// Result of parsing an `{{end}}`/`{{else}}`-terminated item list.
enum ListEnd {
    End,
    /// `{{else}}`; `pos` is the position Go gives the else node.
    Else(usize),
}

/// Per-tree parse state (Go keeps these on each `Tree`).
#[derive(Default)]
struct TreeState {
    vars: Vec<String>,
    range_depth: usize,
    action_line: usize,
}

pub(crate) struct Parser<'a> {
    lex: Lexer<'a>,
    token: [Item; 3],
    peek_count: usize,
    parse_name: String,
    has_function: &'a dyn Fn(&str) -> bool,
    trees: HashMap<String, Tree>,
    st: TreeState,
    depth: usize,
}

type PResult<T> = Result<T, ParseError>;

fn empty_item() -> Item {
    Item {
        typ: ItemType::Eof,
        pos: 0,
        val: String::new(),
        line: 1,
    }
}

/// Go's `IsEmptyTree`.
pub(crate) fn is_empty_list(l: &List) -> bool {
    l.nodes.iter().all(|n| match n {
        Node::Text { text, .. } => text.trim_matches(|c: char| c.is_whitespace()).is_empty(),
        _ => false,
    })
}

/// Parses `text` into the named top-level template plus any `{{define}}`d ones.
pub(crate) fn parse(name: &str, text: &str, has_function: &dyn Fn(&str) -> bool) -> PResult<HashMap<String, Tree>> {
    let mut p = Parser {
        lex: Lexer::new(text),
        token: [empty_item(), empty_item(), empty_item()],
        peek_count: 0,
        parse_name: name.to_string(),
        has_function,
        trees: HashMap::new(),
        st: TreeState {
            vars: vec!["$".into()],
            ..TreeState::default()
        },
        depth: 0,
    };
    let root = p.parse_top()?;
    p.add(name.to_string(), root)?;
    Ok(p.trees)
}

impl<'a> Parser<'a> {
    fn next(&mut self) -> Item {
        if self.peek_count > 0 {
            self.peek_count -= 1;
        } else {
            self.token[0] = self.lex.next_item();
        }
        self.token[self.peek_count].clone()
    }

    fn backup(&mut self) {
        self.peek_count += 1;
    }

    fn backup2(&mut self, t1: Item) {
        self.token[1] = t1;
        self.peek_count = 2;
    }

    fn backup3(&mut self, t2: Item, t1: Item) {
        self.token[1] = t1;
        self.token[2] = t2;
        self.peek_count = 3;
    }

    fn peek(&mut self) -> Item {
        if self.peek_count > 0 {
            return self.token[self.peek_count - 1].clone();
        }
        self.peek_count = 1;
        self.token[0] = self.lex.next_item();
        self.token[0].clone()
    }

    fn next_non_space(&mut self) -> Item {
        loop {
            let t = self.next();
            if t.typ != ItemType::Space {
                return t;
            }
        }
    }

    fn peek_non_space(&mut self) -> Item {
        let t = self.next_non_space();
        self.backup();
        t
    }

    fn errorf(&self, msg: impl std::fmt::Display) -> ParseError {
        ParseError {
            message: format!("template: {}:{}: {}", self.parse_name, self.token[0].line, msg),
            pos: self.token[0].pos,
        }
    }

    fn unexpected(&self, token: &Item, context: &str) -> ParseError {
        if token.typ == ItemType::Error {
            let mut extra = String::new();
            if self.st.action_line != 0 && self.st.action_line != token.line {
                extra = format!(" in action started at {}:{}", self.parse_name, self.st.action_line);
                if token.val.ends_with(" action") {
                    extra = extra[" in action".len()..].to_string();
                }
            }
            let mut e = self.errorf(format!("{}{}", token.describe(), extra));
            e.pos = token.pos;
            return e;
        }
        let mut e = self.errorf(format!("unexpected {} in {}", token.describe(), context));
        e.pos = token.pos;
        e
    }

    fn expect(&mut self, expected: ItemType, context: &str) -> PResult<Item> {
        let t = self.next_non_space();
        if t.typ != expected {
            return Err(self.unexpected(&t, context));
        }
        Ok(t)
    }

    fn add(&mut self, name: String, root: List) -> PResult<()> {
        match self.trees.get(&name) {
            Some(existing) if !is_empty_list(&existing.root) => {
                if !is_empty_list(&root) {
                    return Err(self.errorf(format!("template: multiple definition of template {}", quote(&name))));
                }
            }
            _ => {
                self.trees.insert(name.clone(), Tree { name, root });
            }
        }
        Ok(())
    }

    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.errorf("max expression depth exceeded"));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn parse_top(&mut self) -> PResult<List> {
        let pos = self.peek().pos;
        let mut root = List { pos, nodes: Vec::new() };
        while self.peek().typ != ItemType::Eof {
            if self.peek().typ == ItemType::LeftDelim {
                let delim = self.next();
                if self.next_non_space().typ == ItemType::Define {
                    self.parse_definition()?;
                    continue;
                }
                self.backup2(delim);
            }
            match self.text_or_action()? {
                Parsed::Node(n) => root.nodes.push(n),
                Parsed::End => return Err(self.errorf("unexpected {{end}}")),
                Parsed::Else(_) => return Err(self.errorf("unexpected {{else}}")),
            }
        }
        Ok(root)
    }

    fn parse_definition(&mut self) -> PResult<()> {
        const CONTEXT: &str = "define clause";
        let saved = std::mem::replace(
            &mut self.st,
            TreeState {
                vars: vec!["$".into()],
                ..TreeState::default()
            },
        );
        let name_tok = self.next_non_space();
        if name_tok.typ != ItemType::String && name_tok.typ != ItemType::RawString {
            return Err(self.unexpected(&name_tok, CONTEXT));
        }
        let name = unquote(&name_tok.val).map_err(|e| self.errorf(e))?;
        self.expect(ItemType::RightDelim, CONTEXT)?;
        let (list, end) = self.item_list()?;
        if let ListEnd::Else(_) = end {
            return Err(self.errorf(format!("unexpected {{{{else}}}} in {CONTEXT}")));
        }
        self.add(name, list)?;
        self.st = saved;
        Ok(())
    }

    /// textOrAction* up to `{{end}}` or `{{else}}`.
    fn item_list(&mut self) -> PResult<(List, ListEnd)> {
        let pos = self.peek_non_space().pos;
        let mut list = List { pos, nodes: Vec::new() };
        while self.peek_non_space().typ != ItemType::Eof {
            match self.text_or_action()? {
                Parsed::Node(n) => list.nodes.push(n),
                Parsed::End => return Ok((list, ListEnd::End)),
                Parsed::Else(p) => return Ok((list, ListEnd::Else(p))),
            }
        }
        Err(self.errorf("unexpected EOF"))
    }

    fn text_or_action(&mut self) -> PResult<Parsed> {
        let token = self.next_non_space();
        match token.typ {
            ItemType::Text => Ok(Parsed::Node(Node::Text {
                pos: token.pos,
                text: token.val,
            })),
            ItemType::LeftDelim => {
                self.st.action_line = token.line;
                let r = self.action();
                self.st.action_line = 0;
                r
            }
            _ => Err(self.unexpected(&token, "input")),
        }
    }

    fn action(&mut self) -> PResult<Parsed> {
        let token = self.next_non_space();
        match token.typ {
            ItemType::Block => return self.block_control().map(Parsed::Node),
            ItemType::Break => return self.break_control(token.pos, "{{break}}", true).map(Parsed::Node),
            ItemType::Continue => return self.break_control(token.pos, "{{continue}}", false).map(Parsed::Node),
            ItemType::Else => return self.else_control(),
            ItemType::End => {
                self.expect(ItemType::RightDelim, "end")?;
                return Ok(Parsed::End);
            }
            ItemType::If => return self.branch_control("if").map(Parsed::Node),
            ItemType::Range => return self.branch_control("range").map(Parsed::Node),
            ItemType::Template => return self.template_control().map(Parsed::Node),
            ItemType::With => return self.branch_control("with").map(Parsed::Node),
            _ => {}
        }
        self.backup();
        let token = self.peek();
        let pipe = self.pipeline("command", ItemType::RightDelim)?;
        Ok(Parsed::Node(Node::Action { pos: token.pos, pipe }))
    }

    fn break_control(&mut self, pos: usize, context: &str, is_break: bool) -> PResult<Node> {
        let token = self.next_non_space();
        if token.typ != ItemType::RightDelim {
            return Err(self.unexpected(&token, context));
        }
        if self.st.range_depth == 0 {
            return Err(self.errorf(format!("{context} outside {{{{range}}}}")));
        }
        Ok(if is_break {
            Node::Break { pos }
        } else {
            Node::Continue { pos }
        })
    }

    fn pipeline(&mut self, context: &str, end: ItemType) -> PResult<Pipe> {
        let token = self.peek_non_space();
        let mut pipe = Pipe {
            pos: token.pos,
            is_assign: false,
            decl: Vec::new(),
            cmds: Vec::new(),
        };
        // Declarations or assignments.
        loop {
            let v = self.peek_non_space();
            if v.typ != ItemType::Variable {
                break;
            }
            self.next();
            let token_after_variable = self.peek();
            let next = self.peek_non_space();
            if next.typ == ItemType::Assign || next.typ == ItemType::Declare {
                pipe.is_assign = next.typ == ItemType::Assign;
                self.next_non_space();
                pipe.decl.push((v.pos, v.val.clone()));
                self.st.vars.push(v.val.clone());
            } else if next.typ == ItemType::Char && next.val == "," {
                self.next_non_space();
                pipe.decl.push((v.pos, v.val.clone()));
                self.st.vars.push(v.val.clone());
                if context == "range" && pipe.decl.len() < 2 {
                    match self.peek_non_space().typ {
                        ItemType::Variable | ItemType::RightDelim | ItemType::RightParen => continue,
                        _ => return Err(self.errorf("range can only initialize variables")),
                    }
                }
                return Err(self.errorf(format!("too many declarations in {context}")));
            } else if token_after_variable.typ == ItemType::Space {
                self.backup3(v, token_after_variable);
            } else {
                self.backup2(v);
            }
            break;
        }
        loop {
            let token = self.next_non_space();
            if token.typ == end {
                self.check_pipeline(&pipe, context)?;
                return Ok(pipe);
            }
            match token.typ {
                ItemType::Bool
                | ItemType::CharConstant
                | ItemType::Complex
                | ItemType::Dot
                | ItemType::Field
                | ItemType::Identifier
                | ItemType::Number
                | ItemType::Nil
                | ItemType::RawString
                | ItemType::String
                | ItemType::Variable
                | ItemType::LeftParen => {
                    self.backup();
                    let cmd = self.command()?;
                    pipe.cmds.push(cmd);
                }
                _ => return Err(self.unexpected(&token, context)),
            }
        }
    }

    fn check_pipeline(&self, pipe: &Pipe, context: &str) -> PResult<()> {
        if pipe.cmds.is_empty() {
            return Err(self.errorf(format!("missing value for {context}")));
        }
        for (i, c) in pipe.cmds.iter().enumerate().skip(1) {
            if matches!(
                c.args[0],
                Arg::Bool { .. } | Arg::Dot { .. } | Arg::Nil { .. } | Arg::Number(_) | Arg::Str { .. }
            ) {
                return Err(self.errorf(format!("non executable command in pipeline stage {}", i + 1)));
            }
        }
        Ok(())
    }

    fn branch_control(&mut self, context: &str) -> PResult<Node> {
        self.enter()?;
        let vars_len = self.st.vars.len();
        let r = self.parse_control(context);
        self.st.vars.truncate(vars_len);
        self.leave();
        let branch = r?;
        Ok(match context {
            "if" => Node::If(branch),
            "range" => Node::Range(branch),
            _ => Node::With(branch),
        })
    }

    fn parse_control(&mut self, context: &str) -> PResult<Branch> {
        let pipe = self.pipeline(context, ItemType::RightDelim)?;
        if context == "range" {
            self.st.range_depth += 1;
        }
        let r = self.item_list();
        if context == "range" {
            self.st.range_depth -= 1;
        }
        let (list, end) = r?;
        let mut else_list = None;
        if let ListEnd::Else(else_pos) = end {
            // "{{else if ...}}" and "{{else with ...}}" nest a new if/with whose {{end}} also
            // ends this one.
            if context == "if" && self.peek().typ == ItemType::If {
                self.next();
                let inner = self.branch_control("if")?;
                else_list = Some(List {
                    pos: else_pos,
                    nodes: vec![inner],
                });
            } else if context == "with" && self.peek().typ == ItemType::With {
                self.next();
                let inner = self.branch_control("with")?;
                else_list = Some(List {
                    pos: else_pos,
                    nodes: vec![inner],
                });
            } else {
                let (l, end) = self.item_list()?;
                if let ListEnd::Else(_) = end {
                    return Err(self.errorf("expected end; found {{else}}"));
                }
                else_list = Some(l);
            }
        }
        Ok(Branch {
            pos: pipe.pos,
            pipe,
            list,
            else_list,
        })
    }

    fn else_control(&mut self) -> PResult<Parsed> {
        let peek = self.peek_non_space();
        if peek.typ == ItemType::If || peek.typ == ItemType::With {
            return Ok(Parsed::Else(peek.pos));
        }
        let token = self.expect(ItemType::RightDelim, "else")?;
        Ok(Parsed::Else(token.pos))
    }

    fn parse_template_name(&mut self, token: &Item, context: &str) -> PResult<String> {
        match token.typ {
            ItemType::String | ItemType::RawString => unquote(&token.val).map_err(|e| self.errorf(e)),
            _ => Err(self.unexpected(token, context)),
        }
    }

    fn block_control(&mut self) -> PResult<Node> {
        const CONTEXT: &str = "block clause";
        let token = self.next_non_space();
        let name = self.parse_template_name(&token, CONTEXT)?;
        let pipe = self.pipeline(CONTEXT, ItemType::RightDelim)?;
        let saved = std::mem::replace(
            &mut self.st,
            TreeState {
                vars: vec!["$".into()],
                ..TreeState::default()
            },
        );
        self.enter()?;
        let r = self.item_list();
        self.leave();
        let (list, end) = r?;
        if let ListEnd::Else(_) = end {
            return Err(self.errorf(format!("unexpected {{{{else}}}} in {CONTEXT}")));
        }
        self.add(name.clone(), list)?;
        self.st = saved;
        Ok(Node::Template {
            pos: token.pos,
            name,
            pipe: Some(pipe),
        })
    }

    fn template_control(&mut self) -> PResult<Node> {
        const CONTEXT: &str = "template clause";
        let token = self.next_non_space();
        let name = self.parse_template_name(&token, CONTEXT)?;
        let mut pipe = None;
        if self.next_non_space().typ != ItemType::RightDelim {
            self.backup();
            pipe = Some(self.pipeline(CONTEXT, ItemType::RightDelim)?);
        }
        Ok(Node::Template {
            pos: token.pos,
            name,
            pipe,
        })
    }

    fn command(&mut self) -> PResult<Command> {
        let pos = self.peek_non_space().pos;
        let mut cmd = Command { pos, args: Vec::new() };
        loop {
            self.peek_non_space();
            if let Some(operand) = self.operand()? {
                cmd.args.push(operand);
            }
            let token = self.next();
            match token.typ {
                ItemType::Space => continue,
                ItemType::RightDelim | ItemType::RightParen => self.backup(),
                ItemType::Pipe => {}
                _ => return Err(self.unexpected(&token, "operand")),
            }
            break;
        }
        if cmd.args.is_empty() {
            return Err(self.errorf("empty command"));
        }
        Ok(cmd)
    }

    fn operand(&mut self) -> PResult<Option<Arg>> {
        let Some(node) = self.term()? else { return Ok(None) };
        if self.peek().typ != ItemType::Field {
            return Ok(Some(node));
        }
        let chain_pos = self.peek().pos;
        let mut fields = Vec::new();
        while self.peek().typ == ItemType::Field {
            let f = self.next().val;
            fields.push(f[1..].to_string());
        }
        Ok(Some(match node {
            Arg::Field { mut ident, .. } => {
                ident.extend(fields);
                Arg::Field { pos: chain_pos, ident }
            }
            Arg::Variable { mut ident, .. } => {
                ident.extend(fields);
                Arg::Variable { pos: chain_pos, ident }
            }
            Arg::Bool { .. } | Arg::Str { .. } | Arg::Number(_) | Arg::Nil { .. } | Arg::Dot { .. } => {
                return Err(self.errorf(format!("unexpected . after term {}", quote(&node.to_go_string()))));
            }
            other => Arg::Chain {
                pos: chain_pos,
                node: Box::new(other),
                fields,
            },
        }))
    }

    fn term(&mut self) -> PResult<Option<Arg>> {
        let token = self.next_non_space();
        let arg = match token.typ {
            ItemType::Identifier => {
                if !(self.has_function)(&token.val) {
                    return Err(self.errorf(format!("function {} not defined", quote(&token.val))));
                }
                Arg::Identifier {
                    pos: token.pos,
                    name: token.val,
                }
            }
            ItemType::Dot => Arg::Dot { pos: token.pos },
            ItemType::Nil => Arg::Nil { pos: token.pos },
            ItemType::Variable => {
                let ident: Vec<String> = token.val.split('.').map(str::to_string).collect();
                if !self.st.vars.iter().any(|v| *v == ident[0]) {
                    return Err(self.errorf(format!("undefined variable {}", quote(&ident[0]))));
                }
                Arg::Variable { pos: token.pos, ident }
            }
            ItemType::Field => Arg::Field {
                pos: token.pos,
                ident: vec![token.val[1..].to_string()],
            },
            ItemType::Bool => Arg::Bool {
                pos: token.pos,
                val: token.val == "true",
            },
            ItemType::CharConstant | ItemType::Complex | ItemType::Number => {
                let n = new_number(token.pos, &token.val, token.typ).map_err(|e| self.errorf(e))?;
                Arg::Number(Box::new(n))
            }
            ItemType::LeftParen => {
                self.enter()?;
                let r = self.pipeline("parenthesized pipeline", ItemType::RightParen);
                self.leave();
                Arg::Pipe(Box::new(r?))
            }
            ItemType::String | ItemType::RawString => {
                let s = unquote(&token.val).map_err(|e| self.errorf(e))?;
                Arg::Str {
                    pos: token.pos,
                    quoted: token.val,
                    text: s,
                }
            }
            _ => {
                self.backup();
                return Ok(None);
            }
        };
        Ok(Some(arg))
    }
}

enum Parsed {
    Node(Node),
    End,
    Else(usize),
}

// ---------------------------------------------------------------------------------------------
// Literals (strconv.Unquote, strconv.UnquoteChar and Go number syntax).

const SYNTAX: &str = "invalid syntax";

/// Decodes one possibly-escaped character at the start of `s`: (char, rest).
fn unquote_char(s: &str, quote: char) -> Result<(char, &str), &'static str> {
    let mut chars = s.chars();
    let c = chars.next().ok_or(SYNTAX)?;
    if c == quote && (quote == '\'' || quote == '"') {
        return Err(SYNTAX);
    }
    if c != '\\' {
        return Ok((c, chars.as_str()));
    }
    let e = chars.next().ok_or(SYNTAX)?;
    let rest = chars.as_str();
    let simple = match e {
        'a' => Some('\x07'),
        'b' => Some('\x08'),
        'f' => Some('\x0c'),
        'n' => Some('\n'),
        'r' => Some('\r'),
        't' => Some('\t'),
        'v' => Some('\x0b'),
        '\\' => Some('\\'),
        '\'' | '"' => {
            if e != quote {
                return Err(SYNTAX);
            }
            Some(e)
        }
        _ => None,
    };
    if let Some(c) = simple {
        return Ok((c, rest));
    }
    let (n, base) = match e {
        'x' => (2, 16),
        'u' => (4, 16),
        'U' => (8, 16),
        '0'..='7' => (3, 8),
        _ => return Err(SYNTAX),
    };
    let digits = if base == 8 {
        s.get(1..4).ok_or(SYNTAX)?
    } else {
        rest.get(..n).ok_or(SYNTAX)?
    };
    let v = u32::from_str_radix(digits, base).map_err(|_| SYNTAX)?;
    let rest = if base == 8 { &s[4..] } else { &rest[n..] };
    if e == 'x' || base == 8 {
        if v > 255 {
            return Err(SYNTAX);
        }
        // A byte value; Go strings may hold arbitrary bytes, we keep it as the code point.
        return Ok((char::from_u32(v).ok_or(SYNTAX)?, rest));
    }
    Ok((char::from_u32(v).ok_or(SYNTAX)?, rest))
}

/// Go's `strconv.Unquote` for `"..."` and `` `...` `` literals.
pub(crate) fn unquote(s: &str) -> Result<String, &'static str> {
    if s.len() < 2 {
        return Err(SYNTAX);
    }
    let quote = s.as_bytes()[0];
    if quote != s.as_bytes()[s.len() - 1] {
        return Err(SYNTAX);
    }
    let body = &s[1..s.len() - 1];
    match quote {
        b'`' => {
            if body.contains('`') {
                return Err(SYNTAX);
            }
            Ok(body.replace('\r', ""))
        }
        b'"' => {
            let mut out = String::with_capacity(body.len());
            let mut rest = body;
            while !rest.is_empty() {
                if rest.starts_with('\n') {
                    return Err(SYNTAX);
                }
                let (c, r) = unquote_char(rest, '"')?;
                out.push(c);
                rest = r;
            }
            Ok(out)
        }
        _ => Err(SYNTAX),
    }
}

/// Go's `strconv.ParseUint(text, 0, 64)` / `ParseInt`: digits with optional base prefix and
/// underscores between digits.
fn parse_go_uint(text: &str) -> Option<u64> {
    let (base, digits) = if let Some(r) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        (16, r)
    } else if let Some(r) = text.strip_prefix("0o").or_else(|| text.strip_prefix("0O")) {
        (8, r)
    } else if let Some(r) = text.strip_prefix("0b").or_else(|| text.strip_prefix("0B")) {
        (2, r)
    } else if text.len() > 1 && text.starts_with('0') {
        (8, &text[1..])
    } else {
        (10, text)
    };
    // Underscores: only between digits (or after a base prefix).
    let prefixed = base != 10;
    let b = digits.as_bytes();
    if b.is_empty() && !(base == 8 && text == "0") {
        return None;
    }
    let mut clean = String::new();
    for (i, &c) in b.iter().enumerate() {
        if c == b'_' {
            let prev_ok = if i == 0 { prefixed } else { b[i - 1] != b'_' };
            if !prev_ok || i + 1 == b.len() {
                return None;
            }
            continue;
        }
        clean.push(c as char);
    }
    if clean.is_empty() {
        return if text == "0" { Some(0) } else { None };
    }
    u64::from_str_radix(&clean, base).ok()
}

fn parse_go_int(text: &str) -> Option<i64> {
    let (neg, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let u = parse_go_uint(body)?;
    if neg {
        if u <= i64::MAX as u64 + 1 {
            Some((u as i64).wrapping_neg())
        } else {
            None
        }
    } else if u <= i64::MAX as u64 {
        Some(u as i64)
    } else {
        None
    }
}

/// Go's `underscoreOK`: underscores only between digits (or after a base prefix).
fn underscore_ok(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let b = s.as_bytes();
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if b.len() >= 2 && b[0] == b'0' && matches!(b[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = b[1].eq_ignore_ascii_case(&b'x');
    }
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
        i += 1;
    }
    saw != b'_'
}

/// A hexadecimal float (`0x1.8p3`), without sign or underscores.
fn parse_hex_float(body: &str) -> Result<f64, &'static str> {
    let lower = body.to_ascii_lowercase();
    let rest = lower.strip_prefix("0x").ok_or("invalid syntax")?;
    let (mant, exp) = rest.split_once('p').ok_or("invalid syntax")?;
    let exp: i32 = exp.parse().map_err(|_| "invalid syntax")?;
    let (int_part, frac_part) = mant.split_once('.').unwrap_or((mant, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return Err("invalid syntax");
    }
    let mut v = 0f64;
    for c in int_part.chars().chain(frac_part.chars()) {
        v = v * 16.0 + c.to_digit(16).ok_or("invalid syntax")? as f64;
    }
    let e = exp.saturating_sub(4 * frac_part.len() as i32);
    let v = v * 2f64.powi(e.clamp(-1100, 1100));
    if v.is_infinite() {
        return Err("value out of range");
    }
    Ok(v)
}

/// Go's `strconv.ParseFloat(s, 64)`; the error is the text after `parsing "s": `.
pub(crate) fn parse_go_float(s: &str) -> Result<f64, &'static str> {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" || lower == "nan" {
        let v = if lower == "nan" { f64::NAN } else { f64::INFINITY };
        return Ok(if s.starts_with('-') { -v } else { v });
    }
    if body.contains('_') {
        if !underscore_ok(s) {
            return Err("invalid syntax");
        }
        return parse_go_float(&s.replace('_', ""));
    }
    if lower.starts_with("0x") {
        let v = parse_hex_float(body)?;
        return Ok(if s.starts_with('-') { -v } else { v });
    }
    let bytes = body.as_bytes();
    let valid = !bytes.is_empty()
        && bytes
            .iter()
            .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'))
        && bytes.iter().any(|c| c.is_ascii_digit())
        && bytes[0] != b'e'
        && bytes[0] != b'E';
    if !valid {
        return Err("invalid syntax");
    }
    match s.parse::<f64>() {
        Ok(v) if v.is_infinite() => Err("value out of range"),
        Ok(v) => Ok(v),
        Err(_) => Err("invalid syntax"),
    }
}

/// Go's `parse.newNumber`.
fn new_number(pos: usize, text: &str, typ: ItemType) -> Result<Number, String> {
    let mut n = Number {
        pos,
        text: text.to_string(),
        is_int: false,
        is_uint: false,
        is_float: false,
        is_complex: false,
        int64: 0,
        uint64: 0,
        float64: 0.0,
    };
    match typ {
        ItemType::CharConstant => {
            let body = &text[1..];
            let (c, tail) = unquote_char(body, '\'').map_err(str::to_string)?;
            if tail != "'" {
                return Err(format!("malformed character constant: {text}"));
            }
            n.int64 = c as i64;
            n.is_int = true;
            n.uint64 = c as u64;
            n.is_uint = true;
            n.float64 = c as u32 as f64;
            n.is_float = true;
            return Ok(n);
        }
        ItemType::Complex => {
            n.is_complex = true;
            return Ok(n);
        }
        _ => {}
    }
    if let Some(imag) = text.strip_suffix('i') {
        if let Ok(f) = parse_go_float(imag) {
            n.is_complex = true;
            if f == 0.0 {
                n.is_float = true;
                n.is_int = true;
                n.is_uint = true;
            }
            return Ok(n);
        }
    }
    let u = parse_go_uint(text);
    if let Some(u) = u {
        n.is_uint = true;
        n.uint64 = u;
    }
    if let Some(i) = parse_go_int(text) {
        n.is_int = true;
        n.int64 = i;
        if i == 0 {
            n.is_uint = true;
            n.uint64 = 0;
        }
    }
    if n.is_int {
        n.is_float = true;
        n.float64 = n.int64 as f64;
    } else if n.is_uint {
        n.is_float = true;
        n.float64 = n.uint64 as f64;
    } else {
        if let Ok(f) = parse_go_float(text) {
            if !text.contains(['.', 'e', 'E', 'p', 'P']) {
                return Err(format!("integer overflow: {}", quote(text)));
            }
            n.is_float = true;
            n.float64 = f;
            if !n.is_int && (f as i64) as f64 == f {
                n.is_int = true;
                n.int64 = f as i64;
            }
            if !n.is_uint && (f as u64) as f64 == f {
                n.is_uint = true;
                n.uint64 = f as u64;
            }
        }
    }
    if !n.is_int && !n.is_uint && !n.is_float {
        return Err(format!("illegal number syntax: {}", quote(text)));
    }
    Ok(n)
}
