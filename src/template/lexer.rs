//! Lexer for Go `text/template` (a port of `text/template/parse/lex.go`).
//!
//! Items carry their byte position in the input and the line they start on, which the parser and
//! the executor use for Go-compatible error messages.

use crate::gofmt::{is_print, quote};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ItemType {
    Error,
    Bool,
    Char,
    CharConstant,
    Complex,
    Assign,
    Declare,
    Eof,
    Field,
    Identifier,
    LeftDelim,
    LeftParen,
    Number,
    Pipe,
    RawString,
    RightDelim,
    RightParen,
    Space,
    String,
    Text,
    Variable,
    // Keywords.
    Block,
    Break,
    Continue,
    Dot,
    Define,
    Else,
    End,
    If,
    Nil,
    Range,
    Template,
    With,
}

impl ItemType {
    fn is_keyword(self) -> bool {
        matches!(
            self,
            ItemType::Block
                | ItemType::Break
                | ItemType::Continue
                | ItemType::Dot
                | ItemType::Define
                | ItemType::Else
                | ItemType::End
                | ItemType::If
                | ItemType::Nil
                | ItemType::Range
                | ItemType::Template
                | ItemType::With
        )
    }
}

fn keyword(word: &str) -> Option<ItemType> {
    Some(match word {
        "." => ItemType::Dot,
        "block" => ItemType::Block,
        "break" => ItemType::Break,
        "continue" => ItemType::Continue,
        "define" => ItemType::Define,
        "else" => ItemType::Else,
        "end" => ItemType::End,
        "if" => ItemType::If,
        "range" => ItemType::Range,
        "nil" => ItemType::Nil,
        "template" => ItemType::Template,
        "with" => ItemType::With,
        _ => return None,
    })
}

/// A token or text string returned from the scanner.
#[derive(Clone, Debug)]
pub(crate) struct Item {
    pub typ: ItemType,
    /// Byte offset of the item in the input.
    pub pos: usize,
    pub val: String,
    /// Line (1-based) at the start of the item.
    pub line: usize,
}

impl Item {
    /// Go's `item.String()`, used in "unexpected ..." parse errors.
    pub(crate) fn describe(&self) -> String {
        match self.typ {
            ItemType::Eof => "EOF".to_string(),
            ItemType::Error => self.val.clone(),
            t if t.is_keyword() => format!("<{}>", self.val),
            _ => {
                if self.val.chars().count() > 10 {
                    let short: String = self.val.chars().take(10).collect();
                    format!("{}...", quote(&short))
                } else {
                    quote(&self.val)
                }
            }
        }
    }
}

const LEFT_DELIM: &str = "{{";
const RIGHT_DELIM: &str = "}}";
const LEFT_COMMENT: &str = "/*";
const RIGHT_COMMENT: &str = "*/";
const TRIM_MARKER_LEN: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Text,
    LeftDelim,
    Comment,
    RightDelim,
    InsideAction,
    Space,
    Identifier,
    Field,
    Variable,
    Char,
    Number,
    Quote,
    RawQuote,
    Done,
}

pub(crate) struct Lexer<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
    width: usize,
    paren_depth: i32,
    line: usize,
    start_line: usize,
    state: State,
}

fn is_space(c: Option<char>) -> bool {
    matches!(c, Some(' ' | '\t' | '\r' | '\n'))
}

pub(crate) fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

fn has_left_trim_marker(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && b[0] == b'-' && matches!(b[1], b' ' | b'\t' | b'\r' | b'\n')
}

fn has_right_trim_marker(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && matches!(b[0], b' ' | b'\t' | b'\r' | b'\n') && b[1] == b'-'
}

fn right_trim_length(s: &str) -> usize {
    s.len() - s.trim_end_matches([' ', '\t', '\r', '\n']).len()
}

fn left_trim_length(s: &str) -> usize {
    s.len() - s.trim_start_matches([' ', '\t', '\r', '\n']).len()
}

/// Go's `%#U`: `U+0041 'A'`, or just `U+00A0` for a non-printable rune.
pub(crate) fn sharp_u(c: char) -> String {
    if is_print(c) {
        format!("U+{:04X} '{}'", c as u32, c)
    } else {
        format!("U+{:04X}", c as u32)
    }
}

impl<'a> Lexer<'a> {
    pub(crate) fn new(input: &'a str) -> Self {
        Lexer {
            input,
            pos: 0,
            start: 0,
            width: 0,
            paren_depth: 0,
            line: 1,
            start_line: 1,
            state: State::Text,
        }
    }

    fn rest(&self) -> &'a str {
        self.input.get(self.pos..).unwrap_or("")
    }

    fn next(&mut self) -> Option<char> {
        match self.rest().chars().next() {
            None => {
                self.width = 0;
                None
            }
            Some(c) => {
                self.width = c.len_utf8();
                self.pos += self.width;
                if c == '\n' {
                    self.line += 1;
                }
                Some(c)
            }
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.rest().chars().next()
    }

    fn backup(&mut self) {
        self.pos -= self.width;
        if self.width == 1 && self.input.as_bytes()[self.pos] == b'\n' {
            self.line -= 1;
        }
    }

    fn emit(&mut self, typ: ItemType) -> Item {
        let item = Item {
            typ,
            pos: self.start,
            val: self.input[self.start..self.pos].to_string(),
            line: self.start_line,
        };
        self.start = self.pos;
        self.start_line = self.line;
        item
    }

    fn ignore(&mut self) {
        self.line += self.input[self.start..self.pos].matches('\n').count();
        self.start = self.pos;
        self.start_line = self.line;
    }

    fn accept(&mut self, valid: &str) -> bool {
        match self.next() {
            Some(c) if valid.contains(c) => true,
            Some(_) => {
                self.backup();
                false
            }
            None => false,
        }
    }

    fn accept_run(&mut self, valid: &str) {
        while self.accept(valid) {}
    }

    fn errorf(&mut self, msg: String) -> Item {
        self.state = State::Done;
        Item {
            typ: ItemType::Error,
            pos: self.start,
            val: msg,
            line: self.start_line,
        }
    }

    /// Returns the next item; after an error or EOF it keeps returning EOF.
    pub(crate) fn next_item(&mut self) -> Item {
        loop {
            if self.state == State::Done {
                return Item {
                    typ: ItemType::Eof,
                    pos: self.input.len(),
                    val: String::new(),
                    line: self.line,
                };
            }
            if let Some(item) = self.step() {
                if item.typ == ItemType::Eof {
                    self.state = State::Done;
                }
                return item;
            }
        }
    }

    fn step(&mut self) -> Option<Item> {
        match self.state {
            State::Text => self.lex_text(),
            State::LeftDelim => self.lex_left_delim(),
            State::Comment => self.lex_comment(),
            State::RightDelim => self.lex_right_delim(),
            State::InsideAction => self.lex_inside_action(),
            State::Space => self.lex_space(),
            State::Identifier => self.lex_identifier(),
            State::Field => self.lex_field_or_variable(ItemType::Field),
            State::Variable => self.lex_variable(),
            State::Char => self.lex_char(),
            State::Number => self.lex_number(),
            State::Quote => self.lex_quote(),
            State::RawQuote => self.lex_raw_quote(),
            State::Done => None,
        }
    }

    fn lex_text(&mut self) -> Option<Item> {
        self.width = 0;
        if let Some(x) = self.rest().find(LEFT_DELIM) {
            let ldn = LEFT_DELIM.len();
            self.pos += x;
            let mut trim_length = 0;
            if has_left_trim_marker(&self.input[self.pos + ldn..]) {
                trim_length = right_trim_length(&self.input[self.start..self.pos]);
            }
            self.pos -= trim_length;
            let mut ret = None;
            if self.pos > self.start {
                self.line += self.input[self.start..self.pos].matches('\n').count();
                ret = Some(self.emit(ItemType::Text));
            }
            self.pos += trim_length;
            self.ignore();
            self.state = State::LeftDelim;
            return ret;
        }
        self.pos = self.input.len();
        if self.pos > self.start {
            self.line += self.input[self.start..self.pos].matches('\n').count();
            return Some(self.emit(ItemType::Text));
        }
        Some(self.emit(ItemType::Eof))
    }

    fn at_right_delim(&self) -> (bool, bool) {
        let rest = self.rest();
        if has_right_trim_marker(rest) && rest[TRIM_MARKER_LEN..].starts_with(RIGHT_DELIM) {
            return (true, true);
        }
        if rest.starts_with(RIGHT_DELIM) {
            return (true, false);
        }
        (false, false)
    }

    fn lex_left_delim(&mut self) -> Option<Item> {
        self.pos += LEFT_DELIM.len();
        let trim_space = has_left_trim_marker(self.rest());
        let after_marker = if trim_space { TRIM_MARKER_LEN } else { 0 };
        if self.input[self.pos + after_marker..].starts_with(LEFT_COMMENT) {
            self.pos += after_marker;
            self.ignore();
            self.state = State::Comment;
            return None;
        }
        let item = self.emit(ItemType::LeftDelim);
        self.pos += after_marker;
        self.ignore();
        self.paren_depth = 0;
        self.state = State::InsideAction;
        Some(item)
    }

    fn lex_comment(&mut self) -> Option<Item> {
        self.pos += LEFT_COMMENT.len();
        let Some(i) = self.rest().find(RIGHT_COMMENT) else {
            return Some(self.errorf("unclosed comment".into()));
        };
        self.pos += i + RIGHT_COMMENT.len();
        let (delim, trim_space) = self.at_right_delim();
        if !delim {
            return Some(self.errorf("comment ends before closing delimiter".into()));
        }
        if trim_space {
            self.pos += TRIM_MARKER_LEN;
        }
        self.pos += RIGHT_DELIM.len();
        if trim_space {
            self.pos += left_trim_length(self.rest());
        }
        self.ignore();
        self.state = State::Text;
        None
    }

    fn lex_right_delim(&mut self) -> Option<Item> {
        let trim_space = has_right_trim_marker(self.rest());
        if trim_space {
            self.pos += TRIM_MARKER_LEN;
            self.ignore();
        }
        self.pos += RIGHT_DELIM.len();
        let item = self.emit(ItemType::RightDelim);
        if trim_space {
            self.pos += left_trim_length(self.rest());
            self.ignore();
        }
        self.state = State::Text;
        Some(item)
    }

    fn lex_inside_action(&mut self) -> Option<Item> {
        let (delim, _) = self.at_right_delim();
        if delim {
            if self.paren_depth == 0 {
                self.state = State::RightDelim;
                return None;
            }
            return Some(self.errorf("unclosed left paren".into()));
        }
        let r = self.next();
        let Some(c) = r else {
            return Some(self.errorf("unclosed action".into()));
        };
        let item = match c {
            ' ' | '\t' | '\r' | '\n' => {
                self.backup();
                self.state = State::Space;
                return None;
            }
            '=' => self.emit(ItemType::Assign),
            ':' => {
                if self.next() != Some('=') {
                    return Some(self.errorf("expected :=".into()));
                }
                self.emit(ItemType::Declare)
            }
            '|' => self.emit(ItemType::Pipe),
            '"' => {
                self.state = State::Quote;
                return None;
            }
            '`' => {
                self.state = State::RawQuote;
                return None;
            }
            '$' => {
                self.state = State::Variable;
                return None;
            }
            '\'' => {
                self.state = State::Char;
                return None;
            }
            '.' if !matches!(self.input.as_bytes().get(self.pos), Some(b'0'..=b'9') | None) => {
                self.state = State::Field;
                return None;
            }
            '.' | '+' | '-' | '0'..='9' => {
                self.backup();
                self.state = State::Number;
                return None;
            }
            c if is_alphanumeric(c) => {
                self.backup();
                self.state = State::Identifier;
                return None;
            }
            '(' => {
                self.paren_depth += 1;
                self.emit(ItemType::LeftParen)
            }
            ')' => {
                let item = self.emit(ItemType::RightParen);
                self.paren_depth -= 1;
                if self.paren_depth < 0 {
                    return Some(self.errorf(format!("unexpected right paren {}", sharp_u(c))));
                }
                item
            }
            c if (c as u32) < 0x80 && is_print(c) => self.emit(ItemType::Char),
            c => return Some(self.errorf(format!("unrecognized character in action: {}", sharp_u(c)))),
        };
        self.state = State::InsideAction;
        Some(item)
    }

    fn lex_space(&mut self) -> Option<Item> {
        let mut num_spaces = 0;
        while is_space(self.peek()) {
            self.next();
            num_spaces += 1;
        }
        // Careful about a trim-marked closing delimiter, which starts with a space.
        let tail = &self.input[self.pos - 1..];
        if has_right_trim_marker(tail) && tail[TRIM_MARKER_LEN..].starts_with(RIGHT_DELIM) {
            self.backup();
            if num_spaces == 1 {
                self.state = State::RightDelim;
                return None;
            }
        }
        self.state = State::InsideAction;
        Some(self.emit(ItemType::Space))
    }

    fn at_terminator(&mut self) -> bool {
        match self.peek() {
            None => true,
            Some(c) => {
                matches!(c, ' ' | '\t' | '\r' | '\n' | '.' | ',' | '|' | ':' | ')' | '(') || RIGHT_DELIM.starts_with(c)
            }
        }
    }

    fn lex_identifier(&mut self) -> Option<Item> {
        loop {
            match self.next() {
                Some(c) if is_alphanumeric(c) => {}
                r => {
                    if r.is_some() {
                        self.backup();
                    }
                    if !self.at_terminator() {
                        let c = r.unwrap_or('\u{FFFD}');
                        return Some(self.errorf(format!("bad character {}", sharp_u(c))));
                    }
                    let word = &self.input[self.start..self.pos];
                    let typ = match keyword(word) {
                        Some(k) => k,
                        None if word.starts_with('.') => ItemType::Field,
                        None if word == "true" || word == "false" => ItemType::Bool,
                        None => ItemType::Identifier,
                    };
                    self.state = State::InsideAction;
                    return Some(self.emit(typ));
                }
            }
        }
    }

    fn lex_variable(&mut self) -> Option<Item> {
        if self.at_terminator() {
            self.state = State::InsideAction;
            return Some(self.emit(ItemType::Variable));
        }
        self.lex_field_or_variable(ItemType::Variable)
    }

    fn lex_field_or_variable(&mut self, typ: ItemType) -> Option<Item> {
        if self.at_terminator() {
            self.state = State::InsideAction;
            let t = if typ == ItemType::Variable {
                ItemType::Variable
            } else {
                ItemType::Dot
            };
            return Some(self.emit(t));
        }
        let mut last;
        loop {
            last = self.next();
            match last {
                Some(c) if is_alphanumeric(c) => {}
                Some(_) => {
                    self.backup();
                    break;
                }
                None => break,
            }
        }
        if !self.at_terminator() {
            let c = last.unwrap_or('\u{FFFD}');
            return Some(self.errorf(format!("bad character {}", sharp_u(c))));
        }
        self.state = State::InsideAction;
        Some(self.emit(typ))
    }

    fn lex_char(&mut self) -> Option<Item> {
        loop {
            match self.next() {
                Some('\\') => match self.next() {
                    Some('\n') | None => return Some(self.errorf("unterminated character constant".into())),
                    _ => {}
                },
                Some('\n') | None => return Some(self.errorf("unterminated character constant".into())),
                Some('\'') => break,
                _ => {}
            }
        }
        self.state = State::InsideAction;
        Some(self.emit(ItemType::CharConstant))
    }

    fn lex_number(&mut self) -> Option<Item> {
        if !self.scan_number() {
            let text = self.input[self.start..self.pos].to_string();
            return Some(self.errorf(format!("bad number syntax: {}", quote(&text))));
        }
        if matches!(self.peek(), Some('+' | '-')) {
            // Complex: 1+2i. No spaces, must end in 'i'.
            if !self.scan_number() || !self.input[..self.pos].ends_with('i') {
                let text = self.input[self.start..self.pos].to_string();
                return Some(self.errorf(format!("bad number syntax: {}", quote(&text))));
            }
            self.state = State::InsideAction;
            return Some(self.emit(ItemType::Complex));
        }
        self.state = State::InsideAction;
        Some(self.emit(ItemType::Number))
    }

    fn scan_number(&mut self) -> bool {
        self.accept("+-");
        let mut digits = "0123456789_";
        if self.accept("0") {
            if self.accept("xX") {
                digits = "0123456789abcdefABCDEF_";
            } else if self.accept("oO") {
                digits = "01234567_";
            } else if self.accept("bB") {
                digits = "01_";
            }
        }
        self.accept_run(digits);
        if self.accept(".") {
            self.accept_run(digits);
        }
        if digits.len() == 11 && self.accept("eE") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        if digits.len() == 23 && self.accept("pP") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        self.accept("i");
        if let Some(c) = self.peek() {
            if is_alphanumeric(c) {
                self.next();
                return false;
            }
        }
        true
    }

    fn lex_quote(&mut self) -> Option<Item> {
        loop {
            match self.next() {
                Some('\\') => match self.next() {
                    Some('\n') | None => return Some(self.errorf("unterminated quoted string".into())),
                    _ => {}
                },
                Some('\n') | None => return Some(self.errorf("unterminated quoted string".into())),
                Some('"') => break,
                _ => {}
            }
        }
        self.state = State::InsideAction;
        Some(self.emit(ItemType::String))
    }

    fn lex_raw_quote(&mut self) -> Option<Item> {
        loop {
            match self.next() {
                None => return Some(self.errorf("unterminated raw quoted string".into())),
                Some('`') => break,
                _ => {}
            }
        }
        self.state = State::InsideAction;
        Some(self.emit(ItemType::RawString))
    }
}
