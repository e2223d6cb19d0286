//! Template execution (a port of Go's `text/template/exec.go`), with Prometheus' option
//! `missingkey=zero`.
//!
//! The executor mirrors Go's order of evaluation, including which node is "current" when an
//! error happens, so error messages name the same `line:col` and `<context>` as Go's.

use std::collections::HashMap;
use std::rc::Rc;

use super::funcs::{self, Callee, Ctx, Ty};
use super::gofmt::print_top;
use super::parse::{Arg, Branch, Command, List, Node, Number, Pipe, Tree};
use super::value::{truth, IntKind, Value};
use crate::gofmt::quote;

/// Go's `maxExecDepth`, as it appears in the error message.
const GO_MAX_EXEC_DEPTH: usize = 100_000;
/// Our real limit on nested template invocations.
const MAX_TEMPLATE_DEPTH: usize = 100;
/// Limit on nested walks and pipelines (guards the native stack).
const MAX_RECURSION: usize = 400;

#[derive(Debug, Clone)]
pub(crate) struct ExecError {
    /// Go's message, e.g. `template: name:1:5: executing "name" at <.x>: ...`.
    pub message: String,
    /// Byte offset of the node being executed, if any.
    pub pos: Option<usize>,
}

type EResult<T> = Result<T, ExecError>;

#[derive(Clone, Copy)]
enum NodeRef<'t> {
    Node(&'t Node),
    List(&'t List),
    Pipe(&'t Pipe),
    Cmd(&'t Command),
    Arg(&'t Arg),
    Number(&'t Number),
}

impl NodeRef<'_> {
    fn pos(&self) -> usize {
        match self {
            NodeRef::Node(n) => n.pos(),
            NodeRef::List(l) => l.pos,
            NodeRef::Pipe(p) => p.pos,
            NodeRef::Cmd(c) => c.pos,
            NodeRef::Arg(a) => a.pos(),
            NodeRef::Number(n) => n.pos,
        }
    }

    fn go_string(&self) -> String {
        let mut s = String::new();
        match self {
            NodeRef::Node(n) => n.write_to(&mut s),
            NodeRef::List(l) => l.write_to(&mut s),
            NodeRef::Pipe(p) => p.write_to(&mut s),
            NodeRef::Cmd(c) => c.write_to(&mut s),
            NodeRef::Arg(a) => a.write_to(&mut s),
            NodeRef::Number(n) => s.push_str(&n.text),
        }
        s
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flow {
    Normal,
    Break,
    Continue,
}

struct State<'t, 'c> {
    trees: &'t HashMap<String, Tree>,
    text: &'t str,
    parse_name: &'t str,
    /// Name of the template being executed (for `executing "name"`).
    tmpl_name: &'t str,
    ctx: &'c Ctx<'c>,
    out: &'c mut String,
    node: Option<NodeRef<'t>>,
    vars: Vec<(String, Value)>,
    depth: usize,
    recursion: usize,
}

/// Executes the named template of a parsed set with `data` as dot.
pub(crate) fn execute(
    trees: &HashMap<String, Tree>,
    name: &str,
    text: &str,
    data: Value,
    ctx: &Ctx<'_>,
) -> Result<String, ExecError> {
    let mut out = String::new();
    let Some(tree) = trees.get(name) else {
        return Err(ExecError {
            message: format!("template: {name}: {} is an incomplete or empty template", quote(name)),
            pos: None,
        });
    };
    let mut s = State {
        trees,
        text,
        parse_name: name,
        tmpl_name: &tree.name,
        ctx,
        out: &mut out,
        node: None,
        vars: vec![("$".to_string(), data.clone())],
        depth: 0,
        recursion: 0,
    };
    s.walk_list(&data, &tree.root)?;
    Ok(out)
}

impl<'t, 'c> State<'t, 'c> {
    fn at(&mut self, n: NodeRef<'t>) {
        self.node = Some(n);
    }

    fn errorf(&self, msg: impl std::fmt::Display) -> ExecError {
        match self.node {
            None => ExecError {
                message: format!("template: {}: {}", self.tmpl_name, msg),
                pos: None,
            },
            Some(n) => {
                // A node of a template parsed from another text (a notification's default
                // templates) may point past this one or inside a character.
                let mut pos = n.pos().min(self.text.len());
                while !self.text.is_char_boundary(pos) {
                    pos -= 1;
                }
                let before = &self.text[..pos];
                let line = 1 + before.matches('\n').count();
                let col = match before.rfind('\n') {
                    Some(i) => pos - (i + 1),
                    None => pos,
                };
                ExecError {
                    message: format!(
                        "template: {}:{}:{}: executing {} at <{}>: {}",
                        self.parse_name,
                        line,
                        col,
                        quote(self.tmpl_name),
                        n.go_string(),
                        msg
                    ),
                    pos: Some(pos),
                }
            }
        }
    }

    fn enter(&mut self) -> EResult<()> {
        self.recursion += 1;
        if self.recursion > MAX_RECURSION {
            return Err(self.errorf(format!("exceeded maximum template depth ({GO_MAX_EXEC_DEPTH})")));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.recursion -= 1;
    }

    // ---- variables --------------------------------------------------------------------------

    fn mark(&self) -> usize {
        self.vars.len()
    }

    fn pop(&mut self, mark: usize) {
        self.vars.truncate(mark);
    }

    fn set_var(&mut self, name: &str, value: Value) -> EResult<()> {
        for v in self.vars.iter_mut().rev() {
            if v.0 == name {
                v.1 = value;
                return Ok(());
            }
        }
        Err(self.errorf(format!("undefined variable: {name}")))
    }

    fn set_top_var(&mut self, n: usize, value: Value) {
        let len = self.vars.len();
        if n <= len {
            self.vars[len - n].1 = value;
        }
    }

    fn var_value(&self, name: &str) -> EResult<Value> {
        for v in self.vars.iter().rev() {
            if v.0 == name {
                return Ok(v.1.clone());
            }
        }
        Err(self.errorf(format!("undefined variable: {name}")))
    }

    // ---- walking ----------------------------------------------------------------------------

    fn walk_list(&mut self, dot: &Value, list: &'t List) -> EResult<Flow> {
        self.at(NodeRef::List(list));
        for n in &list.nodes {
            let flow = self.walk(dot, n)?;
            if flow != Flow::Normal {
                return Ok(flow);
            }
        }
        Ok(Flow::Normal)
    }

    fn walk(&mut self, dot: &Value, node: &'t Node) -> EResult<Flow> {
        self.enter()?;
        let r = self.walk_inner(dot, node);
        self.leave();
        r
    }

    fn walk_inner(&mut self, dot: &Value, node: &'t Node) -> EResult<Flow> {
        self.at(NodeRef::Node(node));
        match node {
            Node::Action { pipe, .. } => {
                let val = self.eval_pipeline(dot, pipe)?;
                if pipe.decl.is_empty() {
                    self.at(NodeRef::Node(node));
                    self.out.push_str(&print_top(&val));
                }
                Ok(Flow::Normal)
            }
            Node::Break { .. } => Ok(Flow::Break),
            Node::Continue { .. } => Ok(Flow::Continue),
            Node::If(b) => self.walk_if_or_with(false, dot, b),
            Node::With(b) => self.walk_if_or_with(true, dot, b),
            Node::Range(b) => self.walk_range(dot, node, b),
            Node::Template { name, pipe, .. } => self.walk_template(dot, node, name, pipe.as_ref()),
            Node::Text { text, .. } => {
                self.out.push_str(text);
                Ok(Flow::Normal)
            }
        }
    }

    fn walk_if_or_with(&mut self, with: bool, dot: &Value, b: &'t Branch) -> EResult<Flow> {
        let mark = self.mark();
        let val = self.eval_pipeline(dot, &b.pipe)?;
        let (truth, ok) = val.clone().indirect_interface().is_true();
        if !ok {
            return Err(self.errorf(format!("if/with can't use {}", print_top(&val))));
        }
        let flow = if truth {
            if with {
                self.walk_list(&val, &b.list)?
            } else {
                self.walk_list(dot, &b.list)?
            }
        } else if let Some(e) = &b.else_list {
            self.walk_list(dot, e)?
        } else {
            Flow::Normal
        };
        self.pop(mark);
        Ok(flow)
    }

    fn walk_range(&mut self, dot: &Value, node: &'t Node, r: &'t Branch) -> EResult<Flow> {
        self.at(NodeRef::Node(node));
        let mark0 = self.mark();
        let val = self.eval_pipeline(dot, &r.pipe)?.indirect_interface();
        let mark = self.mark();
        let mut ran = false;
        match &val {
            Value::List(items, _) => {
                for (i, e) in items.iter().enumerate() {
                    ran = true;
                    if self.one_iteration(r, mark, Value::int(i as i64), e.clone())? == Flow::Break {
                        break;
                    }
                }
            }
            Value::QueryResult(q) => {
                for (i, e) in q.iter().enumerate() {
                    ran = true;
                    if self.one_iteration(r, mark, Value::int(i as i64), Value::Sample(e.clone()))? == Flow::Break {
                        break;
                    }
                }
            }
            Value::StrMap(m) => {
                for (k, v) in m.iter() {
                    ran = true;
                    if self.one_iteration(r, mark, Value::str(k), Value::str(v))? == Flow::Break {
                        break;
                    }
                }
            }
            Value::AnyMap(m) => {
                for (k, v) in m.iter() {
                    ran = true;
                    if self.one_iteration(r, mark, Value::str(k), Value::iface(v.clone()))? == Flow::Break {
                        break;
                    }
                }
            }
            Value::Int(n, _) => {
                if r.pipe.decl.len() > 1 {
                    return Err(self.errorf(format!("can't use {} to iterate over more than one variable", n)));
                }
                for i in 0..*n {
                    ran = true;
                    if self.one_iteration(r, mark, Value::Invalid, Value::Int(i, IntKind::Int))? == Flow::Break {
                        break;
                    }
                }
            }
            Value::Uint(n, k) => {
                if r.pipe.decl.len() > 1 {
                    return Err(self.errorf(format!("can't use {} to iterate over more than one variable", n)));
                }
                for i in 0..*n {
                    ran = true;
                    if self.one_iteration(r, mark, Value::Invalid, Value::Uint(i, *k))? == Flow::Break {
                        break;
                    }
                }
            }
            Value::Invalid => {}
            other => {
                return Err(self.errorf(format!("range can't iterate over {}", print_top(other))));
            }
        }
        if !ran {
            if let Some(e) = &r.else_list {
                self.walk_list(dot, e)?;
            }
        }
        self.pop(mark0);
        Ok(Flow::Normal)
    }

    fn one_iteration(&mut self, r: &'t Branch, mark: usize, index: Value, elem: Value) -> EResult<Flow> {
        let decl = &r.pipe.decl;
        if !decl.is_empty() {
            if r.pipe.is_assign {
                if decl.len() > 1 {
                    self.set_var(&decl[0].1, index.clone())?;
                } else {
                    self.set_var(&decl[0].1, elem.clone())?;
                }
            } else {
                self.set_top_var(1, elem.clone());
            }
        }
        if decl.len() > 1 {
            if r.pipe.is_assign {
                self.set_var(&decl[1].1, elem.clone())?;
            } else {
                self.set_top_var(2, index);
            }
        }
        let flow = self.walk_list(&elem, &r.list)?;
        self.pop(mark);
        Ok(flow)
    }

    fn walk_template(&mut self, dot: &Value, node: &'t Node, name: &str, pipe: Option<&'t Pipe>) -> EResult<Flow> {
        self.at(NodeRef::Node(node));
        let Some(tree) = self.trees.get(name) else {
            return Err(self.errorf(format!("template {} not defined", quote(name))));
        };
        if self.depth >= MAX_TEMPLATE_DEPTH {
            return Err(self.errorf(format!("exceeded maximum template depth ({GO_MAX_EXEC_DEPTH})")));
        }
        let new_dot = match pipe {
            Some(p) => self.eval_pipeline(dot, p)?,
            None => Value::Invalid,
        };
        let saved_vars = std::mem::replace(&mut self.vars, vec![("$".to_string(), new_dot.clone())]);
        let saved_name = std::mem::replace(&mut self.tmpl_name, &tree.name);
        self.depth += 1;
        let r = self.walk_list(&new_dot, &tree.root);
        self.depth -= 1;
        self.tmpl_name = saved_name;
        self.vars = saved_vars;
        r?;
        Ok(Flow::Normal)
    }

    // ---- evaluation -------------------------------------------------------------------------

    fn eval_pipeline(&mut self, dot: &Value, pipe: &'t Pipe) -> EResult<Value> {
        self.enter()?;
        let r = self.eval_pipeline_inner(dot, pipe);
        self.leave();
        r
    }

    fn eval_pipeline_inner(&mut self, dot: &Value, pipe: &'t Pipe) -> EResult<Value> {
        self.at(NodeRef::Pipe(pipe));
        let mut value: Option<Value> = None;
        for cmd in &pipe.cmds {
            let v = self.eval_command(dot, cmd, value.take())?;
            // An empty interface is unwrapped: a nil one becomes "no value".
            value = Some(v.indirect_interface());
        }
        let value = value.unwrap_or(Value::Invalid);
        for (_, name) in &pipe.decl {
            if pipe.is_assign {
                self.set_var(name, value.clone())?;
            } else {
                self.vars.push((name.clone(), value.clone()));
            }
        }
        Ok(value)
    }

    fn not_a_function(&self, args: &[Arg], final_: &Option<Value>) -> EResult<()> {
        if args.len() > 1 || final_.is_some() {
            return Err(self.errorf(format!(
                "can't give argument to non-function {}",
                args[0].to_go_string()
            )));
        }
        Ok(())
    }

    fn eval_command(&mut self, dot: &Value, cmd: &'t Command, final_: Option<Value>) -> EResult<Value> {
        let first = &cmd.args[0];
        match first {
            Arg::Field { ident, .. } => return self.eval_field_node(dot, first, ident, &cmd.args, final_),
            Arg::Chain { node, fields, .. } => {
                return self.eval_chain_node(dot, first, node, fields, &cmd.args, final_)
            }
            Arg::Identifier { name, .. } => {
                return self.eval_function(dot, first, name, NodeRef::Cmd(cmd), &cmd.args, final_);
            }
            Arg::Pipe(p) => {
                self.not_a_function(&cmd.args, &final_)?;
                return self.eval_pipeline(dot, p);
            }
            Arg::Variable { ident, .. } => return self.eval_variable_node(dot, first, ident, &cmd.args, final_),
            _ => {}
        }
        self.at(NodeRef::Arg(first));
        self.not_a_function(&cmd.args, &final_)?;
        match first {
            Arg::Bool { val, .. } => Ok(Value::Bool(*val)),
            Arg::Dot { .. } => Ok(dot.clone()),
            Arg::Nil { .. } => Err(self.errorf("nil is not a command")),
            Arg::Number(n) => self.ideal_constant(n),
            Arg::Str { text, .. } => Ok(Value::str(text)),
            _ => Err(self.errorf(format!("can't evaluate command {}", quote(&first.to_go_string())))),
        }
    }

    /// An untyped numeric constant: float if it looks like one, else int.
    fn ideal_constant(&mut self, n: &'t Number) -> EResult<Value> {
        self.at(NodeRef::Number(n));
        if n.is_complex {
            return Err(self.errorf(format!("complex constant {} is not supported", n.text)));
        }
        let is_hex_int = n.text.len() > 2
            && n.text.starts_with('0')
            && matches!(n.text.as_bytes()[1], b'x' | b'X')
            && !n.text.contains(['p', 'P']);
        let is_rune = n.text.starts_with('\'');
        if n.is_float && !is_hex_int && !is_rune && n.text.contains(['.', 'e', 'E', 'p', 'P']) {
            return Ok(Value::Float(n.float64));
        }
        if n.is_int {
            return Ok(Value::int(n.int64));
        }
        if n.is_uint {
            return Err(self.errorf(format!("{} overflows int", n.text)));
        }
        Ok(Value::Invalid)
    }

    fn eval_field_node(
        &mut self,
        dot: &Value,
        node: &'t Arg,
        ident: &'t [String],
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> EResult<Value> {
        self.at(NodeRef::Arg(node));
        self.eval_field_chain(dot, dot.clone(), node, ident, args, final_)
    }

    fn eval_chain_node(
        &mut self,
        dot: &Value,
        chain: &'t Arg,
        inner: &'t Arg,
        fields: &'t [String],
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> EResult<Value> {
        self.at(NodeRef::Arg(chain));
        if fields.is_empty() {
            return Err(self.errorf("internal error: no fields in evalChainNode"));
        }
        if let Arg::Nil { .. } = inner {
            return Err(self.errorf(format!("indirection through explicit nil in {}", chain.to_go_string())));
        }
        let pipe = self.eval_arg(dot, None, inner)?;
        self.eval_field_chain(dot, pipe, chain, fields, args, final_)
    }

    fn eval_variable_node(
        &mut self,
        dot: &Value,
        node: &'t Arg,
        ident: &'t [String],
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> EResult<Value> {
        self.at(NodeRef::Arg(node));
        let value = self.var_value(&ident[0])?;
        if ident.len() == 1 {
            if !args.is_empty() {
                self.not_a_function(args, &final_)?;
            } else if final_.is_some() {
                return Err(self.errorf(format!("can't give argument to non-function {}", node.to_go_string())));
            }
            return Ok(value);
        }
        self.eval_field_chain(dot, value, node, &ident[1..], args, final_)
    }

    fn eval_field_chain(
        &mut self,
        dot: &Value,
        mut receiver: Value,
        node: &'t Arg,
        ident: &'t [String],
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> EResult<Value> {
        let n = ident.len();
        for id in &ident[..n - 1] {
            receiver = self.eval_field(dot, id, node, &[], None, receiver)?;
        }
        self.eval_field(dot, &ident[n - 1], node, args, final_, receiver)
    }

    fn eval_function(
        &mut self,
        dot: &Value,
        node: &'t Arg,
        name: &str,
        cmd: NodeRef<'t>,
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> EResult<Value> {
        self.at(NodeRef::Arg(node));
        let Some(def) = funcs::lookup(name) else {
            return Err(self.errorf(format!("{} is not a defined function", quote(name))));
        };
        self.eval_call(dot, Callee::Func(def), def.builtin, cmd, name, args, final_)
    }

    /// Evaluates `.Field` (or calls a method) on a receiver.
    fn eval_field(
        &mut self,
        dot: &Value,
        field: &str,
        node: &'t Arg,
        args: &'t [Arg],
        final_: Option<Value>,
        receiver: Value,
    ) -> EResult<Value> {
        if matches!(receiver, Value::Invalid) {
            // missingkey=zero: a missing value's field is missing too.
            return Ok(Value::Invalid);
        }
        let typ = receiver.type_name();
        if matches!(receiver, Value::Nil) {
            return Err(self.errorf(format!("nil pointer evaluating {typ}.{field}")));
        }
        let receiver = receiver.indirect_interface();
        if let Some(m) = funcs::method(&receiver, field, self.ctx.notify) {
            return self.eval_call(
                dot,
                Callee::Method(receiver, m),
                false,
                NodeRef::Arg(node),
                field,
                args,
                final_,
            );
        }
        let has_args = args.len() > 1 || final_.is_some();
        let struct_field = match &receiver {
            Value::Alert(a) => match field {
                "Labels" => Some(Value::StrMap(a.labels.clone())),
                "ExternalLabels" => Some(Value::StrMap(a.external_labels.clone())),
                "ExternalURL" => Some(Value::Str(a.external_url.clone())),
                "Value" => Some(Value::iface(Value::Float(a.value))),
                _ => None,
            },
            Value::Sample(s) => match field {
                "Labels" => Some(Value::StrMap(s.labels.clone())),
                "Value" => Some(Value::iface(Value::Float(s.value))),
                _ => None,
            },
            _ => None,
        };
        if let Some(v) = struct_field {
            if has_args {
                return Err(self.errorf(format!("{field} has arguments but cannot be invoked as function")));
            }
            return Ok(v);
        }
        match &receiver {
            Value::StrMap(m) => {
                if has_args {
                    return Err(self.errorf(format!("{field} is not a method but has arguments")));
                }
                Ok(Value::str(m.get(field).map(String::as_str).unwrap_or("")))
            }
            Value::AnyMap(m) => {
                if has_args {
                    return Err(self.errorf(format!("{field} is not a method but has arguments")));
                }
                Ok(m.get(field).cloned().map(Value::iface).unwrap_or(Value::Nil))
            }
            _ => Err(self.errorf(format!("can't evaluate field {field} in type {typ}"))),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn eval_call(
        &mut self,
        dot: &Value,
        callee: Callee,
        is_builtin: bool,
        node: NodeRef<'t>,
        name: &str,
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> EResult<Value> {
        let args: &'t [Arg] = if args.is_empty() { args } else { &args[1..] };
        let (params, variadic) = callee.signature();
        let num_in = args.len() + usize::from(final_.is_some());
        let num_fixed = if variadic { params.len() - 1 } else { args.len() };
        if variadic {
            if num_in < num_fixed {
                return Err(self.errorf(format!(
                    "wrong number of args for {name}: want at least {} got {}",
                    params.len() - 1,
                    args.len()
                )));
            }
        } else if num_in != params.len() {
            return Err(self.errorf(format!(
                "wrong number of args for {name}: want {} got {}",
                params.len(),
                num_in
            )));
        }

        // and/or short-circuit.
        if is_builtin && (name == "and" || name == "or") {
            let mut v = Value::Invalid;
            for arg in args {
                v = self.eval_arg(dot, Some(Ty::RValue), arg)?;
                if truth(&v) == (name == "or") {
                    return Ok(v);
                }
            }
            if let Some(f) = final_ {
                v = self.validate_type(f, Some(Ty::RValue))?;
            }
            return Ok(v);
        }

        let mut argv: Vec<Value> = Vec::with_capacity(num_in + 1);
        let mut i = 0;
        while i < num_fixed && i < args.len() {
            let v = self.eval_arg(dot, Some(params[i]), &args[i])?;
            argv.push(v);
            i += 1;
        }
        if variadic {
            let elem = params[params.len() - 1];
            while i < args.len() {
                let v = self.eval_arg(dot, Some(elem), &args[i])?;
                argv.push(v);
                i += 1;
            }
        }
        if let Some(f) = final_ {
            let t = if variadic {
                if num_in - 1 < num_fixed {
                    params[num_in - 1]
                } else {
                    params[params.len() - 1]
                }
            } else {
                params[params.len() - 1]
            };
            let v = self.validate_type(f, Some(t))?;
            argv.push(v);
        }
        if is_builtin && name == "call" {
            let callee_name = args.first().map(|a| a.to_go_string()).unwrap_or_default();
            argv.insert(0, Value::str(&callee_name));
        }
        match callee.call(self.ctx, argv) {
            Ok(v) => Ok(v),
            Err(e) => {
                self.at(node);
                Err(self.errorf(format!("error calling {name}: {e}")))
            }
        }
    }

    /// Go's `validateType` for our parameter types.
    fn validate_type(&self, value: Value, typ: Option<Ty>) -> EResult<Value> {
        let Some(typ) = typ else { return Ok(value) };
        // A non-nil interface is assignable through its dynamic value.
        let value = match value {
            Value::Iface(v) => Rc::unwrap_or_clone(v),
            v => v,
        };
        if matches!(value, Value::Invalid) {
            return match typ {
                Ty::Any => Ok(Value::Nil),
                Ty::RValue => Ok(Value::Invalid),
                Ty::SamplePtr => Ok(Value::Nil),
                Ty::QueryResult => Ok(Value::QueryResult(Rc::new(Vec::new()))),
                _ => Err(self.errorf(format!("invalid value; expected {}", typ.name()))),
            };
        }
        if typ.accepts(&value) {
            return Ok(value);
        }
        Err(self.errorf(format!(
            "wrong type for value; expected {}; got {}",
            typ.name(),
            value.type_name()
        )))
    }

    fn eval_arg(&mut self, dot: &Value, typ: Option<Ty>, n: &'t Arg) -> EResult<Value> {
        self.at(NodeRef::Arg(n));
        match n {
            Arg::Dot { .. } => return self.validate_type(dot.clone(), typ),
            Arg::Nil { .. } => {
                return match typ {
                    Some(Ty::Any) => Ok(Value::Nil),
                    Some(Ty::RValue) => Ok(Value::Invalid),
                    Some(Ty::SamplePtr) => Ok(Value::Nil),
                    Some(Ty::QueryResult) => Ok(Value::QueryResult(Rc::new(Vec::new()))),
                    Some(t) => Err(self.errorf(format!("cannot assign nil to {}", t.name()))),
                    None => Err(self.errorf("cannot assign nil to <nil>")),
                };
            }
            Arg::Field { ident, .. } => {
                let v = self.eval_field_node(dot, n, ident, std::slice::from_ref(n), None)?;
                return self.validate_type(v, typ);
            }
            Arg::Variable { ident, .. } => {
                let v = self.eval_variable_node(dot, n, ident, &[], None)?;
                return self.validate_type(v, typ);
            }
            Arg::Pipe(p) => {
                let v = self.eval_pipeline(dot, p)?;
                return self.validate_type(v, typ);
            }
            Arg::Identifier { name, .. } => {
                let v = self.eval_function(dot, n, name, NodeRef::Arg(n), &[], None)?;
                return self.validate_type(v, typ);
            }
            Arg::Chain { node, fields, .. } => {
                let v = self.eval_chain_node(dot, n, node, fields, &[], None)?;
                return self.validate_type(v, typ);
            }
            _ => {}
        }
        let go = n.to_go_string();
        match typ {
            Some(Ty::String) => match n {
                Arg::Str { text, .. } => Ok(Value::str(text)),
                _ => Err(self.errorf(format!("expected string; found {go}"))),
            },
            Some(Ty::Any) | Some(Ty::RValue) => self.eval_empty_interface(dot, n),
            Some(t) => Err(self.errorf(format!("can't handle {go} for arg of type {}", t.name()))),
            None => Err(self.errorf(format!("can't handle {go} for arg of type <nil>"))),
        }
    }

    fn eval_empty_interface(&mut self, dot: &Value, n: &'t Arg) -> EResult<Value> {
        self.at(NodeRef::Arg(n));
        match n {
            Arg::Bool { val, .. } => Ok(Value::Bool(*val)),
            Arg::Dot { .. } => Ok(dot.clone()),
            Arg::Number(num) => self.ideal_constant(num),
            Arg::Str { text, .. } => Ok(Value::str(text)),
            _ => Err(self.errorf(format!(
                "can't handle assignment of {} to empty interface argument",
                n.to_go_string()
            ))),
        }
    }
}

impl Ty {
    /// Whether a (non-invalid) value is assignable to a parameter of this type.
    fn accepts(self, v: &Value) -> bool {
        match self {
            Ty::Any | Ty::RValue => true,
            Ty::String => matches!(v, Value::Str(_)),
            Ty::SamplePtr => matches!(v, Value::Sample(_)),
            Ty::QueryResult => matches!(v, Value::QueryResult(_)),
            Ty::Strings => matches!(v, Value::List(_, "string")),
        }
    }
}
