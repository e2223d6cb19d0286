//! Go-compatible formatting, for output that must match what a Go peer prints byte for byte
//! (Prometheus, promtool, Alertmanager, Sloth): `strconv.FormatFloat`, `strconv.Quote` and
//! their relatives. Ground floor: depends on no stage. Go's `fmt` verbs over template values
//! stay in `template::gofmt`.

// ---------------------------------------------------------------------------------------------
// Floats, by the Go call each peer makes.

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)`, also `fmt`'s `%v` and `%g` of a float64: the
/// shortest digits that round-trip, in exponent form below 1e-4 and from 1e6 (`1e+06`).
/// Sloth writes objectives and factors this way; so do Prometheus' histogram strings.
pub fn format_g(f: f64) -> String {
    format_float(f, 'g', -1)
}

/// Go's `strconv.FormatFloat(f, 'f', -1, 64)`: the shortest digits that round-trip, never an
/// exponent (`1e21` is `1000000000000000000000`). Prometheus uses it for label values it makes
/// (`quantile`, `count_values`) and in the API's JSON.
pub fn format_f(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f == f64::INFINITY {
        "+Inf".into()
    } else if f == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        // Rust's `Display` prints the same shortest digits without an exponent, much faster than
        // the general path (`count_values` formats every sample); tests check they agree.
        format!("{f}")
    }
}

/// Go's `strconv.FormatFloat(f, 'E', -1, 64)`: `1E+00`, `2.5E-01`, `NaN`, `+Inf`; promtool
/// prints expected and actual sample values this way.
pub fn format_e_upper(f: f64) -> String {
    format_float(f, 'E', -1)
}

// ---------------------------------------------------------------------------------------------
// Quoting.

/// Approximation of Go's `unicode.IsPrint` / `strconv.IsPrint`: letters, marks, numbers,
/// punctuation, symbols and the ASCII space.
pub fn is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(c as u32,
        0x00AD | 0x0600..=0x0605 | 0x061C | 0x06DD | 0x070F | 0x08E2 | 0x180E | 0x200B..=0x200F
        | 0x202A..=0x202E | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB | 0xFFFE | 0xFFFF
        | 0xE000..=0xF8FF | 0xE0000..=0xE007F | 0xF0000..=0x10FFFF)
}

/// The narrower printable set of [`quote_common_invisibles`]: like [`is_print`], but only the
/// common invisible format characters are excluded (private use, tags, noncharacters and the
/// rarer format characters print as themselves).
fn is_print_common(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(c as u32, 0x00AD | 0x200B..=0x200F | 0x2028..=0x202E | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB)
}

fn push_escaped_rune(out: &mut String, r: char, quote: char, printable: fn(char) -> bool, ascii_only: bool) {
    if r == quote || r == '\\' {
        out.push('\\');
        out.push(r);
        return;
    }
    if ascii_only {
        if (r as u32) < 0x80 && printable(r) {
            out.push(r);
            return;
        }
    } else if printable(r) {
        out.push(r);
        return;
    }
    match r {
        '\x07' => out.push_str("\\a"),
        '\x08' => out.push_str("\\b"),
        '\x0c' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\x0b' => out.push_str("\\v"),
        _ => {
            let u = r as u32;
            if u < 0x20 || u == 0x7f {
                out.push_str(&format!("\\x{u:02x}"));
            } else if u < 0x10000 {
                out.push_str(&format!("\\u{u:04x}"));
            } else {
                out.push_str(&format!("\\U{u:08x}"));
            }
        }
    }
}

/// Go's `strconv.appendQuotedWith`: `s` between `quote`s, characters that are not `printable`
/// (or, with `ascii_only`, not ASCII) escaped.
fn quote_with(s: &str, quote: char, printable: fn(char) -> bool, ascii_only: bool) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        push_escaped_rune(&mut out, c, quote, printable, ascii_only);
    }
    out.push(quote);
    out
}

/// Go's `strconv.Quote`.
pub fn quote(s: &str) -> String {
    quote_with(s, '"', is_print, false)
}

/// Go's `strconv.QuoteToASCII` (`%+q`).
pub fn quote_to_ascii(s: &str) -> String {
    quote_with(s, '"', is_print, true)
}

/// Go's `strconv.QuoteRune`.
pub fn quote_rune(c: char) -> String {
    quote_with(c.encode_utf8(&mut [0; 4]), '\'', is_print, false)
}

/// Go's `strconv.QuoteRuneToASCII` (`%+q` of a rune).
pub fn quote_rune_to_ascii(c: char) -> String {
    quote_with(c.encode_utf8(&mut [0; 4]), '\'', is_print, true)
}

/// `strconv.Quote` as watchfire's Alertmanager configuration messages have always printed it:
/// escapes controls and the common invisible format characters (soft hyphen, zero-width and
/// bidi marks, BOM), but prints private-use characters, tags, noncharacters and the rarer
/// format characters as themselves, where [`quote`] escapes them. Kept apart so those messages
/// do not change; it differs from Go only for such characters.
pub fn quote_common_invisibles(s: &str) -> String {
    quote_with(s, '"', is_print_common, false)
}

/// `strconv.Quote` as watchfire's promtool-style test output has always printed it: escapes
/// only control characters (C0, DEL, C1) and prints every other character as itself, where
/// [`quote`] also escapes format characters, non-ASCII spaces and private use. Kept apart so
/// that output does not change; it differs from Go only for such characters.
pub fn quote_controls_only(s: &str) -> String {
    quote_with(s, '"', |c| !c.is_control(), false)
}

/// Go's `strconv.CanBackquote`: whether `s` can be written as a raw string literal.
pub fn can_backquote(s: &str) -> bool {
    s.chars()
        .all(|c| c != '`' && c != '\u{FEFF}' && (c == '\t' || !(c < ' ' || c == '\x7f')))
}

// ---------------------------------------------------------------------------------------------
// strconv.FormatFloat.

/// Decimal digits of a non-negative float: value = 0.d₀d₁… × 10^dp, without trailing zeros;
/// no digits means zero.
struct Digits {
    d: Vec<u8>,
    dp: i32,
}

/// A little big-number in base 1e9, least significant limb first.
struct Big(Vec<u64>);

impl Big {
    const BASE: u64 = 1_000_000_000;

    fn mul_small(&mut self, m: u64) {
        let mut carry = 0u64;
        for limb in self.0.iter_mut() {
            let v = *limb * m + carry;
            *limb = v % Self::BASE;
            carry = v / Self::BASE;
        }
        while carry > 0 {
            self.0.push(carry % Self::BASE);
            carry /= Self::BASE;
        }
    }

    fn from_u64(mut v: u64) -> Big {
        let mut limbs = Vec::new();
        while v > 0 {
            limbs.push(v % Self::BASE);
            v /= Self::BASE;
        }
        Big(limbs)
    }

    fn digits(&self) -> Vec<u8> {
        let mut s = String::new();
        for (i, limb) in self.0.iter().rev().enumerate() {
            if i == 0 {
                s.push_str(&limb.to_string());
            } else {
                s.push_str(&format!("{limb:09}"));
            }
        }
        s.into_bytes()
    }
}

fn decompose(f: f64) -> (u64, i32) {
    let bits = f.to_bits();
    let exp_bits = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    if exp_bits == 0 {
        (frac, -1074)
    } else {
        (frac | (1u64 << 52), exp_bits - 1075)
    }
}

/// The exact decimal expansion of a finite non-negative float.
fn exact_digits(f: f64) -> Digits {
    let (mant, exp) = decompose(f);
    if mant == 0 {
        return Digits { d: Vec::new(), dp: 0 };
    }
    let mut big = Big::from_u64(mant);
    let mut shift = 0i32;
    if exp >= 0 {
        let mut e = exp;
        while e > 0 {
            let k = e.min(29);
            big.mul_small(1u64 << k);
            e -= k;
        }
    } else {
        let mut k = -exp;
        shift = k;
        while k > 0 {
            let s = k.min(13);
            big.mul_small(5u64.pow(s as u32));
            k -= s;
        }
    }
    let mut d = big.digits();
    let dp = d.len() as i32 - shift;
    while d.last() == Some(&b'0') {
        d.pop();
    }
    Digits { d, dp }
}

/// The shortest digits that round-trip (what Go's `FormatFloat(f, _, -1, 64)` uses).
fn shortest_digits(f: f64) -> Digits {
    if f == 0.0 {
        return Digits { d: Vec::new(), dp: 0 };
    }
    let s = format!("{f:e}");
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let mut d: Vec<u8> = mant.bytes().filter(|b| b.is_ascii_digit()).collect();
    while d.last() == Some(&b'0') {
        d.pop();
    }
    Digits { d, dp: exp + 1 }
}

impl Digits {
    fn should_round_up(&self, nd: usize) -> bool {
        if self.d[nd] == b'5' && nd + 1 == self.d.len() {
            // Exactly halfway: round to even.
            return nd > 0 && (self.d[nd - 1] - b'0') % 2 == 1;
        }
        self.d[nd] >= b'5'
    }

    /// Go's `decimal.Round`.
    fn round(&mut self, nd: i32) {
        if nd < 0 || nd as usize >= self.d.len() {
            return;
        }
        let nd = nd as usize;
        if self.should_round_up(nd) {
            let mut i = nd;
            while i > 0 && self.d[i - 1] == b'9' {
                i -= 1;
            }
            if i == 0 {
                self.d.clear();
                self.d.push(b'1');
                self.dp += 1;
                return;
            }
            self.d[i - 1] += 1;
            self.d.truncate(i);
        } else {
            self.d.truncate(nd);
            while self.d.last() == Some(&b'0') {
                self.d.pop();
            }
        }
    }
}

fn fmt_e(out: &mut String, d: &Digits, prec: i32, fmt: char) {
    out.push(if d.d.is_empty() { '0' } else { d.d[0] as char });
    if prec > 0 {
        out.push('.');
        let mut i = 1usize;
        let m = d.d.len().min(prec as usize + 1);
        if i < m {
            out.extend(d.d[i..m].iter().map(|&b| b as char));
            i = m;
        }
        while i <= prec as usize {
            out.push('0');
            i += 1;
        }
    }
    out.push(fmt);
    let exp = if d.d.is_empty() { 0 } else { d.dp - 1 };
    push_exponent(out, exp);
}

/// An exponent as strconv writes it after `e` or `p`: a sign and at least two digits.
fn push_exponent(out: &mut String, exp: i32) {
    out.push(if exp < 0 { '-' } else { '+' });
    let exp = exp.unsigned_abs();
    if exp < 10 {
        out.push('0');
    }
    out.push_str(&exp.to_string());
}

fn fmt_f(out: &mut String, d: &Digits, prec: i32) {
    if d.dp > 0 {
        let m = d.d.len().min(d.dp as usize);
        out.extend(d.d[..m].iter().map(|&b| b as char));
        for _ in m..d.dp as usize {
            out.push('0');
        }
    } else {
        out.push('0');
    }
    if prec > 0 {
        out.push('.');
        for i in 1..=prec {
            let j = d.dp + i - 1;
            let ch = if j >= 0 && (j as usize) < d.d.len() {
                d.d[j as usize] as char
            } else {
                '0'
            };
            out.push(ch);
        }
    }
}

fn fmt_x(out: &mut String, f: f64, prec: i32, fmt: char) {
    let bits = f.to_bits();
    let mut exp = ((bits >> 52) & 0x7ff) as i32;
    let mut mant = bits & ((1u64 << 52) - 1);
    if exp == 0 {
        exp += 1;
    } else {
        mant |= 1u64 << 52;
    }
    exp -= 1023;
    if mant == 0 {
        exp = 0;
    }
    mant <<= 60 - 52;
    while mant != 0 && mant & (1u64 << 60) == 0 {
        mant <<= 1;
        exp -= 1;
    }
    if (0..15).contains(&prec) {
        let shift = (prec * 4) as u32;
        let extra = (mant << shift) & ((1u64 << 60) - 1);
        mant >>= 60 - shift;
        if extra | (mant & 1) > 1u64 << 59 {
            mant += 1;
        }
        mant <<= 60 - shift;
        if mant & (1u64 << 61) != 0 {
            mant >>= 1;
            exp += 1;
        }
    }
    let hex: &[u8] = if fmt == 'X' {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    out.push('0');
    out.push(fmt);
    out.push((b'0' + ((mant >> 60) & 1) as u8) as char);
    mant <<= 4;
    if prec < 0 && mant != 0 {
        out.push('.');
        while mant != 0 {
            out.push(hex[((mant >> 60) & 15) as usize] as char);
            mant <<= 4;
        }
    } else if prec > 0 {
        out.push('.');
        for _ in 0..prec {
            out.push(hex[((mant >> 60) & 15) as usize] as char);
            mant <<= 4;
        }
    }
    out.push(if fmt == 'X' { 'P' } else { 'p' });
    push_exponent(out, exp);
}

/// Go's `strconv.FormatFloat(f, fmt, prec, 64)` for fmt in `b e E f g G x X`.
pub(crate) fn format_float(f: f64, fmt: char, prec: i32) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    let mut out = String::new();
    if f.is_sign_negative() {
        out.push('-');
    }
    let a = f.abs();
    match fmt {
        'x' | 'X' => {
            fmt_x(&mut out, a, prec, fmt);
            return out;
        }
        'b' => {
            let (mant, exp) = decompose(a);
            out.push_str(&format!("{mant}p{}{}", if exp >= 0 { "+" } else { "" }, exp));
            return out;
        }
        _ => {}
    }
    let shortest = prec < 0;
    let mut prec = prec;
    let digs = if shortest {
        let d = shortest_digits(a);
        prec = match fmt {
            'e' | 'E' => (d.d.len() as i32 - 1).max(0),
            'f' => (d.d.len() as i32 - d.dp).max(0),
            _ => d.d.len() as i32,
        };
        d
    } else {
        let mut d = exact_digits(a);
        match fmt {
            'e' | 'E' => d.round(prec + 1),
            'f' => d.round(d.dp + prec),
            _ => {
                if prec == 0 {
                    prec = 1;
                }
                d.round(prec)
            }
        }
        d
    };
    match fmt {
        'e' | 'E' => fmt_e(&mut out, &digs, prec, fmt),
        'f' => fmt_f(&mut out, &digs, prec),
        _ => {
            let nd = digs.d.len() as i32;
            let mut eprec = prec;
            if eprec > nd && nd >= digs.dp {
                eprec = nd;
            }
            if shortest {
                eprec = 6;
            }
            let exp = digs.dp - 1;
            if exp < -4 || exp >= eprec {
                if prec > nd {
                    prec = nd;
                }
                let e = if fmt == 'G' { 'E' } else { 'e' };
                fmt_e(&mut out, &digs, prec - 1, e);
            } else {
                if prec > digs.dp {
                    prec = nd;
                }
                fmt_f(&mut out, &digs, (prec - digs.dp).max(0));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_formats() {
        assert_eq!(format_g(0.1), "0.1");
        assert_eq!(format_g(123456.0), "123456");
        assert_eq!(format_g(1e6), "1e+06");
        assert_eq!(format_g(1e21), "1e+21");
        assert_eq!(format_g(1e-4), "0.0001");
        assert_eq!(format_g(1.5e-7), "1.5e-07");
        assert_eq!(format_g(5e-324), "5e-324");
        assert_eq!(format_g(-0.0), "-0");
        assert_eq!(format_g(f64::NAN), "NaN");
        assert_eq!(format_g(f64::INFINITY), "+Inf");
        assert_eq!(format_g(f64::NEG_INFINITY), "-Inf");

        assert_eq!(format_f(1e21), "1000000000000000000000");
        assert_eq!(format_f(1.5e-7), "0.00000015");
        assert_eq!(format_f(-0.0), "-0");
        assert_eq!(format_f(9007199254740993.0), "9007199254740992");

        assert_eq!(format_e_upper(1.0), "1E+00");
        assert_eq!(format_e_upper(2.5e-1), "2.5E-01");
        assert_eq!(format_e_upper(1e100), "1E+100");
        assert_eq!(format_e_upper(-0.0), "-0E+00");
        assert_eq!(format_e_upper(f64::NEG_INFINITY), "-Inf");
    }

    #[test]
    fn format_f_fast_path_is_strconv() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut inputs = vec![
            0.0,
            -0.0,
            5e-324,
            f64::MAX,
            f64::MIN_POSITIVE,
            1e21,
            1e-7,
            0.1,
            f64::NAN,
        ];
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            inputs.push(f64::from_bits(x));
        }
        for f in inputs {
            assert_eq!(format_f(f), format_float(f, 'f', -1), "{f:e}");
        }
    }

    #[test]
    fn fixed_precision_rounds_exactly() {
        // 2.675 is 2.67499999999999982236431605997495353221893310546875.
        assert_eq!(format_float(2.675, 'f', 2), "2.67");
        // Exactly halfway: to even.
        assert_eq!(format_float(0.125, 'f', 2), "0.12");
        assert_eq!(format_float(0.375, 'f', 2), "0.38");
        assert_eq!(format_float(12345.678, 'g', 4), "1.235e+04");
        assert_eq!(format_float(99.5, 'g', 2), "1e+02");
        assert_eq!(format_float(1234.5678, 'e', 3), "1.235e+03");
        assert_eq!(format_float(0.000012345, 'G', 3), "1.23E-05");
        assert_eq!(format_float(1.0, 'x', -1), "0x1p+00");
        assert_eq!(format_float(1.0, 'b', -1), "4503599627370496p-52");
        assert_eq!(format_float(-1.5, 'f', 0), "-2");
    }

    #[test]
    fn quoting() {
        assert_eq!(quote("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
        assert_eq!(quote("héllo"), "\"héllo\"");
        assert_eq!(quote("\x01\x7f\u{85}"), r#""\x01\x7f\u0085""#);
        assert_eq!(
            quote("\u{a0}\u{200b}\u{e000}\u{f0000}"),
            r#""\u00a0\u200b\ue000\U000f0000""#
        );
        assert_eq!(quote_to_ascii("héllo☺"), r#""h\u00e9llo\u263a""#);
        assert_eq!(quote_rune('\''), r"'\''");
        assert_eq!(quote_rune('"'), "'\"'");
        assert_eq!(quote_rune_to_ascii('☺'), r"'\u263a'");
        assert!(is_print('é') && !is_print('\u{ad}') && !is_print('\u{a0}'));
        assert!(can_backquote("a\tb") && !can_backquote("a`b") && !can_backquote("a\nb"));
    }

    #[test]
    fn quoting_variants_differ_only_in_what_prints() {
        let s = "a\n\u{200b}\u{a0}\u{e000}\u{600}\u{85}";
        assert_eq!(quote(s), r#""a\n\u200b\u00a0\ue000\u0600\u0085""#);
        assert_eq!(
            quote_common_invisibles(s),
            "\"a\\n\\u200b\\u00a0\u{e000}\u{600}\\u0085\""
        );
        assert_eq!(quote_controls_only(s), "\"a\\n\u{200b}\u{a0}\u{e000}\u{600}\\u0085\"");
    }
}
