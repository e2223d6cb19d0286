//! Go's `fmt` as templates see it: `fmt.Sprint`/`Sprintln`/`Sprintf` over template values,
//! including Go's error forms (`%!d(string=x)`, `%!v(MISSING)`, `%!(EXTRA ...)`). The `strconv`
//! pieces it builds on (floats, quoting) are the crate's, in `crate::gofmt`.

use super::value::Value;
use crate::gofmt::{
    can_backquote, format_float, format_g, is_print, quote, quote_rune, quote_rune_to_ascii, quote_to_ascii,
};

// ---------------------------------------------------------------------------------------------
// fmt.

#[derive(Clone, Default)]
struct Flags {
    wid: usize,
    wid_present: bool,
    prec: usize,
    prec_present: bool,
    minus: bool,
    plus: bool,
    sharp: bool,
    space: bool,
    zero: bool,
    plus_v: bool,
    sharp_v: bool,
}

#[derive(Default)]
struct Printer {
    buf: String,
    f: Flags,
    /// `printableValue` applied to the top-level argument: print `*T` as `T`.
    deref_top: bool,
}

const LOWER: &[u8] = b"0123456789abcdefx";
const UPPER: &[u8] = b"0123456789ABCDEFX";

impl Printer {
    fn write_padding(&mut self, n: usize) {
        let c = if self.f.zero { '0' } else { ' ' };
        for _ in 0..n {
            self.buf.push(c);
        }
    }

    fn pad(&mut self, s: &str) {
        if !self.f.wid_present || self.f.wid == 0 {
            self.buf.push_str(s);
            return;
        }
        let width = s.chars().count();
        let n = self.f.wid.saturating_sub(width);
        if self.f.minus {
            self.buf.push_str(s);
            let z = self.f.zero;
            self.f.zero = false;
            self.write_padding(n);
            self.f.zero = z;
        } else {
            self.write_padding(n);
            self.buf.push_str(s);
        }
    }

    fn fmt_integer(&mut self, u: u64, base: u64, signed: bool, verb: char, digits: &[u8]) {
        let negative = signed && (u as i64) < 0;
        let mut u = if negative { (u as i64).unsigned_abs() } else { u };
        let mut prec = 0usize;
        if self.f.prec_present {
            prec = self.f.prec;
            if prec == 0 && u == 0 {
                let z = self.f.zero;
                self.f.zero = false;
                let w = self.f.wid;
                self.write_padding(w);
                self.f.zero = z;
                return;
            }
        } else if self.f.zero && !self.f.minus && self.f.wid_present {
            prec = self.f.wid;
            if negative || self.f.plus || self.f.space {
                prec = prec.saturating_sub(1);
            }
        }
        let mut rev: Vec<u8> = Vec::new();
        if u == 0 {
            rev.push(b'0');
        }
        while u > 0 {
            rev.push(digits[(u % base) as usize]);
            u /= base;
        }
        while rev.len() < prec {
            rev.push(b'0');
        }
        if self.f.sharp {
            match base {
                2 => {
                    rev.push(b'b');
                    rev.push(b'0');
                }
                8 if rev.last() != Some(&b'0') => rev.push(b'0'),
                16 => {
                    rev.push(digits[16]);
                    rev.push(b'0');
                }
                _ => {}
            }
        }
        if verb == 'O' {
            rev.push(b'o');
            rev.push(b'0');
        }
        if negative {
            rev.push(b'-');
        } else if self.f.plus {
            rev.push(b'+');
        } else if self.f.space {
            rev.push(b' ');
        }
        rev.reverse();
        let s = String::from_utf8(rev).unwrap_or_default();
        let z = self.f.zero;
        self.f.zero = false;
        self.pad(&s);
        self.f.zero = z;
    }

    fn fmt_unicode(&mut self, u: u64) {
        let mut s = format!("U+{u:04X}");
        if self.f.prec_present && self.f.prec > 4 {
            s = format!("U+{:0width$X}", u, width = self.f.prec);
        }
        if self.f.sharp {
            if let Some(c) = char::from_u32(u as u32).filter(|_| u <= 0x10FFFF) {
                if is_print(c) {
                    s.push_str(&format!(" '{c}'"));
                }
            }
        }
        let z = self.f.zero;
        self.f.zero = false;
        self.pad(&s);
        self.f.zero = z;
    }

    fn rune_of(u: u64) -> char {
        if u > 0x10FFFF {
            '\u{FFFD}'
        } else {
            char::from_u32(u as u32).unwrap_or('\u{FFFD}')
        }
    }

    fn fmt_int_verb(&mut self, arg: &Value, u: u64, signed: bool, verb: char) {
        match verb {
            'v' | 'd' => self.fmt_integer(u, 10, signed, verb, LOWER),
            'b' => self.fmt_integer(u, 2, signed, verb, LOWER),
            'o' | 'O' => self.fmt_integer(u, 8, signed, verb, LOWER),
            'x' => self.fmt_integer(u, 16, signed, verb, LOWER),
            'X' => self.fmt_integer(u, 16, signed, verb, UPPER),
            'c' => {
                let c = Self::rune_of(if signed && (u as i64) < 0 { u64::MAX } else { u });
                self.pad(c.encode_utf8(&mut [0; 4]));
            }
            'q' => {
                let c = Self::rune_of(if signed && (u as i64) < 0 { u64::MAX } else { u });
                let s = if self.f.sharp && c != '`' && can_backquote(c.encode_utf8(&mut [0; 4])) {
                    format!("`{c}`")
                } else if self.f.plus {
                    quote_rune_to_ascii(c)
                } else {
                    quote_rune(c)
                };
                self.pad(&s);
            }
            'U' => self.fmt_unicode(u),
            _ => self.bad_verb(arg, verb),
        }
    }

    fn fmt_float(&mut self, v: f64, verb: char, prec: i32) {
        let prec = if self.f.prec_present { self.f.prec as i32 } else { prec };
        let conv = if verb == 'F' { 'f' } else { verb };
        let s = format_float(v, conv, prec);
        let mut num: Vec<char> = Vec::new();
        if !(s.starts_with('-') || s.starts_with('+')) {
            num.push('+');
        }
        num.extend(s.chars());
        if self.f.space && num[0] == '+' && !self.f.plus {
            num[0] = ' ';
        }
        if num[1] == 'I' || num[1] == 'N' {
            let z = self.f.zero;
            self.f.zero = false;
            if num[1] == 'N' && !self.f.space && !self.f.plus {
                num.remove(0);
            }
            let s: String = num.iter().collect();
            self.pad(&s);
            self.f.zero = z;
            return;
        }
        if self.f.sharp && verb != 'b' {
            let mut digits: i32 = match verb {
                'v' | 'g' | 'G' | 'x' => {
                    if prec == -1 {
                        6
                    } else {
                        prec
                    }
                }
                _ => 0,
            };
            let mut tail: Vec<char> = Vec::new();
            let mut has_point = false;
            let mut saw_nonzero = false;
            let mut i = 1;
            while i < num.len() {
                match num[i] {
                    '.' => has_point = true,
                    'p' | 'P' => {
                        tail = num.split_off(i);
                        break;
                    }
                    'e' | 'E' if verb != 'x' && verb != 'X' => {
                        tail = num.split_off(i);
                        break;
                    }
                    c => {
                        if c != '0' {
                            saw_nonzero = true;
                        }
                        if saw_nonzero {
                            digits -= 1;
                        }
                    }
                }
                i += 1;
            }
            if !has_point {
                if num.len() == 2 && num[1] == '0' {
                    digits -= 1;
                }
                num.push('.');
            }
            while digits > 0 {
                num.push('0');
                digits -= 1;
            }
            num.extend(tail);
        }
        if self.f.plus || num[0] != '+' {
            if self.f.zero && !self.f.minus && self.f.wid_present && self.f.wid > num.len() {
                self.buf.push(num[0]);
                let n = self.f.wid - num.len();
                self.write_padding(n);
                self.buf.extend(num[1..].iter());
                return;
            }
            let s: String = num.iter().collect();
            self.pad(&s);
            return;
        }
        let s: String = num[1..].iter().collect();
        self.pad(&s);
    }

    fn fmt_float_verb(&mut self, arg: &Value, v: f64, verb: char) {
        match verb {
            'v' => self.fmt_float(v, 'g', -1),
            'b' | 'g' | 'G' | 'x' | 'X' => self.fmt_float(v, verb, -1),
            'f' | 'e' | 'E' | 'F' => self.fmt_float(v, verb, 6),
            _ => self.bad_verb(arg, verb),
        }
    }

    fn truncate<'s>(&self, s: &'s str) -> &'s str {
        if self.f.prec_present {
            if let Some((i, _)) = s.char_indices().nth(self.f.prec) {
                return &s[..i];
            }
        }
        s
    }

    fn fmt_sx(&mut self, s: &str, digits: &[u8]) {
        let b = s.as_bytes();
        let mut length = b.len();
        if self.f.prec_present && self.f.prec < length {
            length = self.f.prec;
        }
        let mut width = 2 * length;
        if width > 0 {
            if self.f.space {
                if self.f.sharp {
                    width *= 2;
                }
                width += length - 1;
            } else if self.f.sharp {
                width += 2;
            }
        } else {
            if self.f.wid_present {
                let w = self.f.wid;
                self.write_padding(w);
            }
            return;
        }
        if self.f.wid_present && self.f.wid > width && !self.f.minus {
            let n = self.f.wid - width;
            self.write_padding(n);
        }
        if self.f.sharp {
            self.buf.push('0');
            self.buf.push(digits[16] as char);
        }
        for (i, &c) in b[..length].iter().enumerate() {
            if self.f.space && i > 0 {
                self.buf.push(' ');
                if self.f.sharp {
                    self.buf.push('0');
                    self.buf.push(digits[16] as char);
                }
            }
            self.buf.push(digits[(c >> 4) as usize] as char);
            self.buf.push(digits[(c & 0xF) as usize] as char);
        }
        if self.f.wid_present && self.f.wid > width && self.f.minus {
            let n = self.f.wid - width;
            self.write_padding(n);
        }
    }

    fn fmt_q(&mut self, s: &str) {
        let s = self.truncate(s).to_string();
        let q = if self.f.sharp && can_backquote(&s) {
            format!("`{s}`")
        } else if self.f.plus {
            quote_to_ascii(&s)
        } else {
            quote(&s)
        };
        self.pad(&q);
    }

    fn fmt_string(&mut self, arg: &Value, s: &str, verb: char) {
        match verb {
            'v' if self.f.sharp_v => self.fmt_q(s),
            'v' | 's' => {
                let t = self.truncate(s).to_string();
                self.pad(&t);
            }
            'x' => self.fmt_sx(s, LOWER),
            'X' => self.fmt_sx(s, UPPER),
            'q' => self.fmt_q(s),
            _ => self.bad_verb(arg, verb),
        }
    }

    fn bad_verb(&mut self, arg: &Value, verb: char) {
        self.buf.push_str("%!");
        self.buf.push(verb);
        self.buf.push('(');
        match arg {
            Value::Nil | Value::Invalid => self.buf.push_str("<nil>"),
            _ => {
                self.buf.push_str(&arg.type_name());
                self.buf.push('=');
                self.print_arg(arg, 'v');
            }
        }
        self.buf.push(')');
    }

    fn handle_methods(&mut self, arg: &Value, verb: char) -> bool {
        if !matches!(verb, 'v' | 's' | 'x' | 'X' | 'q') {
            return false;
        }
        match arg.stringer() {
            Some(s) => {
                self.fmt_string(&Value::str(&s), &s, verb);
                true
            }
            None => false,
        }
    }

    fn print_arg(&mut self, arg: &Value, verb: char) {
        if matches!(arg, Value::Nil | Value::Invalid) {
            match verb {
                'T' | 'v' => self.pad("<nil>"),
                _ => self.bad_verb(arg, verb),
            }
            return;
        }
        match verb {
            'T' => {
                let t = arg.type_name();
                self.fmt_string(arg, &t, 's');
                return;
            }
            'p' => {
                self.bad_verb(arg, verb);
                return;
            }
            _ => {}
        }
        self.print_value(arg, verb, 0);
    }

    fn print_value(&mut self, v: &Value, verb: char, depth: usize) {
        if self.handle_methods(v, verb) {
            return;
        }
        match v {
            Value::Invalid => {
                if depth == 0 {
                    self.buf.push_str("<invalid reflect.Value>");
                } else if verb == 'v' {
                    self.buf.push_str("<nil>");
                } else {
                    self.bad_verb(v, verb);
                }
            }
            Value::Nil => self.pad("<nil>"),
            Value::Iface(inner) => self.print_value(inner, verb, depth + 1),
            Value::Bool(b) => match verb {
                't' | 'v' => self.pad(if *b { "true" } else { "false" }),
                _ => self.bad_verb(v, verb),
            },
            Value::Int(i, _) => self.fmt_int_verb(v, *i as u64, true, verb),
            Value::Uint(u, _) => self.fmt_int_verb(v, *u, false, verb),
            Value::Float(f) => self.fmt_float_verb(v, *f, verb),
            Value::Str(s) | Value::Html(s) => self.fmt_string(v, s, verb),
            Value::StrMap(m) => {
                self.buf.push_str("map[");
                for (i, (k, val)) in m.iter().enumerate() {
                    if i > 0 {
                        self.buf.push(' ');
                    }
                    self.fmt_string(&Value::str(k), k, verb);
                    self.buf.push(':');
                    self.fmt_string(&Value::str(val), val, verb);
                }
                self.buf.push(']');
            }
            Value::AnyMap(m) => {
                self.buf.push_str("map[");
                for (i, (k, val)) in m.iter().enumerate() {
                    if i > 0 {
                        self.buf.push(' ');
                    }
                    self.fmt_string(&Value::str(k), k, verb);
                    self.buf.push(':');
                    self.print_value(val, verb, depth + 1);
                }
                self.buf.push(']');
            }
            Value::List(l, _) => {
                self.buf.push('[');
                for (i, e) in l.iter().enumerate() {
                    if i > 0 {
                        self.buf.push(' ');
                    }
                    self.print_value(e, verb, depth + 1);
                }
                self.buf.push(']');
            }
            Value::QueryResult(q) => {
                self.buf.push('[');
                for (i, s) in q.iter().enumerate() {
                    if i > 0 {
                        self.buf.push(' ');
                    }
                    self.print_value(&Value::Sample(s.clone()), verb, depth + 1);
                }
                self.buf.push(']');
            }
            Value::Sample(s) => {
                if !(depth == 0 && self.deref_top) {
                    self.buf.push('&');
                }
                self.buf.push('{');
                if self.f.plus_v {
                    self.buf.push_str("Labels:");
                }
                self.print_value(&Value::StrMap(s.labels.clone()), verb, depth + 1);
                self.buf.push(' ');
                if self.f.plus_v {
                    self.buf.push_str("Value:");
                }
                self.print_value(&Value::Float(s.value), verb, depth + 1);
                self.buf.push('}');
            }
            Value::Alert(a) => {
                self.buf.push('{');
                let fields = [
                    ("Labels", Value::StrMap(a.labels.clone())),
                    ("ExternalLabels", Value::StrMap(a.external_labels.clone())),
                    ("ExternalURL", Value::Str(a.external_url.clone())),
                    ("Value", Value::Float(a.value)),
                ];
                for (i, (name, val)) in fields.iter().enumerate() {
                    if i > 0 {
                        self.buf.push(' ');
                    }
                    if self.f.plus_v {
                        self.buf.push_str(name);
                        self.buf.push(':');
                    }
                    self.print_value(val, verb, depth + 1);
                }
                self.buf.push('}');
            }
            Value::Time(_) | Value::Duration(_) => {
                // Stringers with a non-string verb: Go prints the struct internals; show the
                // string form instead.
                let s = v.stringer().unwrap_or_default();
                self.bad_verb(&Value::str(&s), verb);
            }
        }
    }

    fn do_print(&mut self, args: &[Value]) {
        let mut prev_string = false;
        for (i, arg) in args.iter().enumerate() {
            let is_string = matches!(arg, Value::Str(_) | Value::Html(_));
            if i > 0 && !is_string && !prev_string {
                self.buf.push(' ');
            }
            self.print_arg(arg, 'v');
            prev_string = is_string;
        }
    }

    fn do_println(&mut self, args: &[Value]) {
        for (i, arg) in args.iter().enumerate() {
            if i > 0 {
                self.buf.push(' ');
            }
            self.print_arg(arg, 'v');
        }
        self.buf.push('\n');
    }

    fn do_printf(&mut self, format: &str, args: &[Value]) {
        let b = format.as_bytes();
        let end = b.len();
        let mut arg_num = 0usize;
        let mut after_index;
        let mut reordered = false;
        let mut i = 0usize;
        // Parses "[n]" at i: (new arg_num, new i, found).
        let arg_number = |arg_num: usize, i: usize, reordered: &mut bool, good: &mut bool| -> (usize, usize, bool) {
            if i >= end || b[i] != b'[' {
                return (arg_num, i, false);
            }
            *reordered = true;
            let mut j = i + 1;
            while j < end && b[j] != b']' {
                j += 1;
            }
            if j >= end {
                *good = false;
                return (arg_num, end, false);
            }
            match format[i + 1..j].parse::<usize>() {
                Ok(n) if n >= 1 && n <= args.len() => (n - 1, j + 1, true),
                _ => {
                    *good = false;
                    (arg_num, j + 1, true)
                }
            }
        };
        let parse_num = |i: usize| -> (usize, bool, usize) {
            let mut j = i;
            let mut n = 0usize;
            while j < end && b[j].is_ascii_digit() {
                if n > 1_000_000 {
                    return (0, false, end);
                }
                n = n * 10 + (b[j] - b'0') as usize;
                j += 1;
            }
            (n, j > i, j)
        };
        'format: while i < end {
            let mut good_arg_num = true;
            let lasti = i;
            while i < end && b[i] != b'%' {
                i += 1;
            }
            if i > lasti {
                self.buf.push_str(&format[lasti..i]);
            }
            if i >= end {
                break;
            }
            i += 1;
            self.f = Flags::default();
            while i < end {
                match b[i] {
                    b'#' => self.f.sharp = true,
                    b'0' => self.f.zero = !self.f.minus,
                    b'+' => self.f.plus = true,
                    b'-' => {
                        self.f.minus = true;
                        self.f.zero = false;
                    }
                    b' ' => self.f.space = true,
                    c => {
                        if c.is_ascii_lowercase() && arg_num < args.len() {
                            if c == b'v' {
                                self.f.sharp_v = self.f.sharp;
                                self.f.sharp = false;
                                self.f.plus_v = self.f.plus;
                                self.f.plus = false;
                            }
                            let arg = args[arg_num].clone();
                            self.print_arg(&arg, c as char);
                            arg_num += 1;
                            i += 1;
                            continue 'format;
                        }
                        break;
                    }
                }
                i += 1;
            }
            let (n, ni, ai) = arg_number(arg_num, i, &mut reordered, &mut good_arg_num);
            arg_num = n;
            i = ni;
            after_index = ai;
            if i < end && b[i] == b'*' {
                i += 1;
                match args.get(arg_num) {
                    Some(Value::Int(w, _)) if w.unsigned_abs() <= 1_000_000 => {
                        let w = *w;
                        if w < 0 {
                            self.f.wid = w.unsigned_abs() as usize;
                            self.f.minus = true;
                            self.f.zero = false;
                        } else {
                            self.f.wid = w as usize;
                        }
                        self.f.wid_present = true;
                    }
                    _ => self.buf.push_str("%!(BADWIDTH)"),
                }
                arg_num += 1;
                after_index = false;
            } else {
                let (w, present, ni) = parse_num(i);
                self.f.wid = w;
                self.f.wid_present = present;
                i = ni;
                if after_index && present {
                    good_arg_num = false;
                }
            }
            if i + 1 < end && b[i] == b'.' {
                i += 1;
                if after_index {
                    good_arg_num = false;
                }
                let (n, ni, ai) = arg_number(arg_num, i, &mut reordered, &mut good_arg_num);
                arg_num = n;
                i = ni;
                after_index = ai;
                if i < end && b[i] == b'*' {
                    i += 1;
                    match args.get(arg_num) {
                        Some(Value::Int(p, _)) if *p >= 0 && *p <= 1_000_000 => {
                            self.f.prec = *p as usize;
                            self.f.prec_present = true;
                        }
                        Some(Value::Int(p, _)) if *p < 0 => {
                            self.f.prec = 0;
                            self.f.prec_present = false;
                            self.buf.push_str("%!(BADPREC)");
                        }
                        _ => self.buf.push_str("%!(BADPREC)"),
                    }
                    arg_num += 1;
                    after_index = false;
                } else {
                    let (p, present, ni) = parse_num(i);
                    i = ni;
                    self.f.prec = if present { p } else { 0 };
                    self.f.prec_present = true;
                }
            }
            if !after_index {
                let (n, ni, _) = arg_number(arg_num, i, &mut reordered, &mut good_arg_num);
                arg_num = n;
                i = ni;
            }
            if i >= end {
                self.buf.push_str("%!(NOVERB)");
                break;
            }
            let verb = format[i..].chars().next().unwrap_or('?');
            i += verb.len_utf8();
            if verb == '%' {
                self.buf.push('%');
            } else if !good_arg_num {
                self.buf.push_str("%!");
                self.buf.push(verb);
                self.buf.push_str("(BADINDEX)");
            } else if arg_num >= args.len() {
                self.buf.push_str("%!");
                self.buf.push(verb);
                self.buf.push_str("(MISSING)");
            } else {
                if verb == 'v' {
                    self.f.sharp_v = self.f.sharp;
                    self.f.sharp = false;
                    self.f.plus_v = self.f.plus;
                    self.f.plus = false;
                }
                let arg = args[arg_num].clone();
                self.print_arg(&arg, verb);
                arg_num += 1;
            }
        }
        if !reordered && arg_num < args.len() {
            self.f = Flags::default();
            self.buf.push_str("%!(EXTRA ");
            for (i, arg) in args[arg_num..].iter().enumerate() {
                if i > 0 {
                    self.buf.push_str(", ");
                }
                if matches!(arg, Value::Nil | Value::Invalid) {
                    self.buf.push_str("<nil>");
                } else {
                    self.buf.push_str(&arg.type_name());
                    self.buf.push('=');
                    self.print_arg(arg, 'v');
                }
            }
            self.buf.push(')');
        }
    }
}

/// `fmt.Sprint`.
pub(crate) fn sprint(args: &[Value]) -> String {
    let mut p = Printer::default();
    p.do_print(args);
    p.buf
}

/// `fmt.Sprintln`.
pub(crate) fn sprintln(args: &[Value]) -> String {
    let mut p = Printer::default();
    p.do_println(args);
    p.buf
}

/// `fmt.Sprintf`.
pub(crate) fn sprintf(format: &str, args: &[Value]) -> String {
    let mut p = Printer::default();
    p.do_printf(format, args);
    p.buf
}

/// `fmt.Sprint(printableValue(v))`: how an action prints its value (`<no value>` for nothing,
/// pointers dereferenced).
pub(crate) fn print_top(v: &Value) -> String {
    match v {
        Value::Invalid | Value::Nil => "<no value>".into(),
        Value::Str(s) | Value::Html(s) => s.to_string(),
        Value::Float(f) => format_g(*f),
        _ => {
            let mut p = Printer {
                deref_top: true,
                ..Printer::default()
            };
            p.print_arg(v, 'v');
            p.buf
        }
    }
}

/// The `evalArgs` of Go's `html`, `js` and `urlquery`: a single string as is, otherwise
/// `fmt.Sprint` of the printable values.
pub(crate) fn eval_args(args: &[Value]) -> String {
    if let [Value::Str(s)] = args {
        return s.to_string();
    }
    let mut p = Printer {
        deref_top: true,
        ..Printer::default()
    };
    let printable: Vec<Value> = args
        .iter()
        .map(|a| {
            if matches!(a, Value::Invalid | Value::Nil) {
                Value::str("<no value>")
            } else {
                a.clone()
            }
        })
        .collect();
    p.do_print(&printable);
    p.buf
}
