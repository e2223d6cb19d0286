//! Dynamic values seen by the template executor, modelled on the Go types Prometheus passes to
//! `text/template` (`map[string]string`, `float64`, `*template.sample`, `template.queryResult`,
//! `*time.Time`, ...). Type names follow Go's `%T` so error messages match Prometheus.

use std::collections::BTreeMap;
use std::rc::Rc;

use super::gotime::{duration_string, GoTime};

/// Go type of a signed integer value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IntKind {
    Int,
    Int64,
    /// `time.Month` (a Stringer).
    Month,
    /// `time.Weekday` (a Stringer).
    Weekday,
}

/// Go type of an unsigned integer value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum UintKind {
    Uint,
    Uint8,
    Uint64,
}

/// Prometheus' `template.sample`: one element of a query result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub labels: Rc<BTreeMap<String, String>>,
    pub value: f64,
}

/// The data Prometheus passes to alert templates (`AlertTemplateData`).
#[derive(Debug, Clone)]
pub(crate) struct AlertData {
    pub labels: Rc<BTreeMap<String, String>>,
    pub external_labels: Rc<BTreeMap<String, String>>,
    pub external_url: Rc<str>,
    pub value: f64,
}

pub(crate) const ALERT_DATA_TYPE: &str =
    "struct { Labels map[string]string; ExternalLabels map[string]string; ExternalURL string; Value interface {} }";

#[derive(Clone, Debug)]
pub(crate) enum Value {
    /// Go's zero `reflect.Value` (no value at all); prints as `<no value>`.
    Invalid,
    /// A nil `interface{}`.
    Nil,
    /// A non-nil `interface{}` slot (an element of `map[string]interface{}`, the `Value` fields):
    /// Go names its type `interface {}` in field errors until a pipeline unwraps it.
    Iface(Rc<Value>),
    Bool(bool),
    Int(i64, IntKind),
    Uint(u64, UintKind),
    Float(f64),
    Str(Rc<str>),
    /// `html/template.HTML`, returned by `safeHtml`.
    Html(Rc<str>),
    /// `map[string]string`.
    StrMap(Rc<BTreeMap<String, String>>),
    /// `map[string]interface {}`.
    AnyMap(Rc<BTreeMap<String, Value>>),
    /// A slice; the string is the Go element type name. (Prometheus' alert data has none; tests
    /// use them as template data.)
    #[cfg_attr(not(test), allow(dead_code))]
    List(Rc<Vec<Value>>, &'static str),
    /// `*template.sample`.
    Sample(Rc<Sample>),
    /// `template.queryResult`.
    QueryResult(Rc<Vec<Rc<Sample>>>),
    /// `*time.Time` (always UTC).
    Time(GoTime),
    /// `*time.Duration`, in nanoseconds.
    Duration(i64),
    /// The alert template data struct.
    Alert(Rc<AlertData>),
}

/// Go kinds, as far as the executor needs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Invalid,
    Interface,
    Bool,
    Int,
    Uint,
    Float,
    String,
    Map,
    Slice,
    Pointer,
    Struct,
}

impl Value {
    pub(crate) fn str(s: &str) -> Value {
        Value::Str(Rc::from(s))
    }

    pub(crate) fn int(i: i64) -> Value {
        Value::Int(i, IntKind::Int)
    }

    /// Go's `%T` / `reflect.Type.String()`.
    pub(crate) fn type_name(&self) -> String {
        match self {
            Value::Invalid => "<nil>".into(),
            Value::Nil | Value::Iface(_) => "interface {}".into(),
            Value::Bool(_) => "bool".into(),
            Value::Int(_, k) => match k {
                IntKind::Int => "int",
                IntKind::Int64 => "int64",
                IntKind::Month => "time.Month",
                IntKind::Weekday => "time.Weekday",
            }
            .into(),
            Value::Uint(_, k) => match k {
                UintKind::Uint => "uint",
                UintKind::Uint8 => "uint8",
                UintKind::Uint64 => "uint64",
            }
            .into(),
            Value::Float(_) => "float64".into(),
            Value::Str(_) => "string".into(),
            Value::Html(_) => "template.HTML".into(),
            Value::StrMap(_) => "map[string]string".into(),
            Value::AnyMap(_) => "map[string]interface {}".into(),
            Value::List(_, elem) => format!("[]{elem}"),
            Value::Sample(_) => "*template.sample".into(),
            Value::QueryResult(_) => "template.queryResult".into(),
            Value::Time(_) => "*time.Time".into(),
            Value::Duration(_) => "*time.Duration".into(),
            Value::Alert(_) => ALERT_DATA_TYPE.into(),
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        match self {
            Value::Invalid => Kind::Invalid,
            Value::Nil | Value::Iface(_) => Kind::Interface,
            Value::Bool(_) => Kind::Bool,
            Value::Int(..) => Kind::Int,
            Value::Uint(..) => Kind::Uint,
            Value::Float(_) => Kind::Float,
            Value::Str(_) | Value::Html(_) => Kind::String,
            Value::StrMap(_) | Value::AnyMap(_) => Kind::Map,
            Value::List(..) | Value::QueryResult(_) => Kind::Slice,
            Value::Sample(_) | Value::Time(_) | Value::Duration(_) => Kind::Pointer,
            Value::Alert(_) => Kind::Struct,
        }
    }

    /// `indirectInterface`: a nil interface becomes the invalid value.
    pub(crate) fn indirect_interface(self) -> Value {
        match self {
            Value::Nil => Value::Invalid,
            Value::Iface(v) => Rc::unwrap_or_clone(v),
            v => v,
        }
    }

    /// Wraps a value stored in an `interface{}` slot.
    pub(crate) fn iface(v: Value) -> Value {
        match v {
            Value::Nil | Value::Invalid => Value::Nil,
            Value::Iface(_) => v,
            v => Value::Iface(Rc::new(v)),
        }
    }

    /// Length for kinds that have one (string, map, slice).
    pub(crate) fn len(&self) -> Option<usize> {
        match self {
            Value::Iface(v) => v.len(),
            Value::Str(s) | Value::Html(s) => Some(s.len()),
            Value::StrMap(m) => Some(m.len()),
            Value::AnyMap(m) => Some(m.len()),
            Value::List(l, _) => Some(l.len()),
            Value::QueryResult(q) => Some(q.len()),
            _ => None,
        }
    }

    /// Go's `isTrue`: (truth, ok).
    pub(crate) fn is_true(&self) -> (bool, bool) {
        match self {
            Value::Iface(v) => v.is_true(),
            Value::Invalid | Value::Nil => (false, true),
            Value::Bool(b) => (*b, true),
            Value::Int(i, _) => (*i != 0, true),
            Value::Uint(u, _) => (*u != 0, true),
            Value::Float(f) => (*f != 0.0, true),
            Value::Str(_) | Value::Html(_) | Value::StrMap(_) | Value::AnyMap(_) | Value::List(..) => {
                (self.len().unwrap_or(0) > 0, true)
            }
            Value::QueryResult(q) => (!q.is_empty(), true),
            Value::Sample(_) | Value::Time(_) | Value::Duration(_) => (true, true),
            Value::Alert(_) => (true, true),
        }
    }

    /// The `String()` method, for values whose Go type is a `fmt.Stringer`.
    pub(crate) fn stringer(&self) -> Option<String> {
        match self {
            Value::Iface(v) => v.stringer(),
            Value::Time(t) => Some(t.string()),
            Value::Duration(d) => Some(duration_string(*d)),
            Value::Int(i, IntKind::Month) => Some(super::gotime::month_name(*i)),
            Value::Int(i, IntKind::Weekday) => Some(super::gotime::weekday_name(*i)),
            _ => None,
        }
    }
}

/// Go's `truth` (`isTrue` of the indirected interface).
pub(crate) fn truth(v: &Value) -> bool {
    v.clone().indirect_interface().is_true().0
}

/// Converts a query sample for templates (`v.Metric.Map()` keeps `__name__`).
pub(crate) fn sample_from(labels: &crate::labels::Labels, value: f64) -> Sample {
    Sample {
        labels: Rc::new(
            labels
                .iter()
                .map(|l| (l.name.to_string(), l.value.to_string()))
                .collect(),
        ),
        value,
    }
}
