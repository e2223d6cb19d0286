//! The parts of Go's `time` package templates can reach: `Time.Format` with Go reference layouts,
//! `Time.String`, the calendar accessors and `Duration.String`. Times are always UTC, as
//! Prometheus' `toTime` and `humanizeTimestamp` produce.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GoTime {
    /// Seconds since the Unix epoch.
    pub secs: i64,
    /// Nanoseconds within the second, 0..1e9.
    pub nanos: u32,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

pub(crate) fn month_name(m: i64) -> String {
    if (1..=12).contains(&m) {
        MONTHS[(m - 1) as usize].to_string()
    } else {
        format!("%!Month({m})")
    }
}

pub(crate) fn weekday_name(d: i64) -> String {
    if (0..=6).contains(&d) {
        DAYS[d as usize].to_string()
    } else {
        format!("%!Weekday({d})")
    }
}

/// Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

/// Broken-down UTC time.
pub(crate) struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub nanos: u32,
    /// 1-based day of the year.
    pub yday: u32,
    /// 0 = Sunday.
    pub wday: u32,
}

impl GoTime {
    /// Builds a time from Unix milliseconds (as Prometheus' `model.Time` does).
    pub(crate) fn from_unix_ms(ms: i64) -> GoTime {
        GoTime {
            secs: ms.div_euclid(1000),
            nanos: (ms.rem_euclid(1000) * 1_000_000) as u32,
        }
    }

    pub(crate) fn civil(&self) -> Civil {
        let days = self.secs.div_euclid(86_400);
        let sod = self.secs.rem_euclid(86_400) as u32;
        let (year, month, day) = civil_from_days(days);
        const CUM: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
        let mut yday = CUM[(month - 1) as usize] + day;
        if month > 2 && is_leap(year) {
            yday += 1;
        }
        Civil {
            year,
            month,
            day,
            hour: sod / 3600,
            minute: sod / 60 % 60,
            second: sod % 60,
            nanos: self.nanos,
            yday,
            wday: (days + 4).rem_euclid(7) as u32,
        }
    }

    pub(crate) fn unix_nano(&self) -> i64 {
        self.secs.wrapping_mul(1_000_000_000).wrapping_add(self.nanos as i64)
    }

    /// Go's `Time.String()` for a UTC time without a monotonic reading.
    pub(crate) fn string(&self) -> String {
        self.format("2006-01-02 15:04:05.999999999 -0700 MST")
    }

    /// Go's `Time.Format` with a reference layout.
    pub(crate) fn format(&self, layout: &str) -> String {
        let c = self.civil();
        let mut out = String::new();
        let mut rest = layout;
        while !rest.is_empty() {
            let (prefix, std, suffix) = next_std_chunk(rest);
            out.push_str(prefix);
            let Some(std) = std else { break };
            format_std(&mut out, std, &c);
            rest = suffix;
        }
        out
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Std {
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekDay,
    WeekDay,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    PM,
    Pm,
    TZ,
    Iso8601TZ,
    Iso8601SecondsTZ,
    Iso8601ShortTZ,
    Iso8601ColonTZ,
    Iso8601ColonSecondsTZ,
    NumTZ,
    NumSecondsTz,
    NumShortTZ,
    NumColonTZ,
    NumColonSecondsTZ,
    /// Fractional seconds: (digits, trim trailing zeros, separator).
    Frac(usize, bool, char),
}

fn starts_with_lower(s: &str) -> bool {
    s.as_bytes().first().is_some_and(|c| c.is_ascii_lowercase())
}

/// Go's `nextStdChunk`: (prefix, std, suffix).
fn next_std_chunk(layout: &str) -> (&str, Option<Std>, &str) {
    let b = layout.as_bytes();
    let n = b.len();
    let at = |i: usize, s: &str| layout.get(i..).is_some_and(|r| r.starts_with(s));
    for i in 0..n {
        let found: Option<(Std, usize)> = match b[i] {
            b'J' if at(i, "Jan") => {
                if at(i, "January") {
                    Some((Std::LongMonth, 7))
                } else if !starts_with_lower(&layout[i + 3..]) {
                    Some((Std::Month, 3))
                } else {
                    None
                }
            }
            b'M' if at(i, "Mon") => {
                if at(i, "Monday") {
                    Some((Std::LongWeekDay, 6))
                } else if !starts_with_lower(&layout[i + 3..]) {
                    Some((Std::WeekDay, 3))
                } else {
                    None
                }
            }
            b'M' if at(i, "MST") => Some((Std::TZ, 3)),
            b'0' if i + 1 < n && (b'1'..=b'6').contains(&b[i + 1]) => {
                let std = [
                    Std::ZeroMonth,
                    Std::ZeroDay,
                    Std::ZeroHour12,
                    Std::ZeroMinute,
                    Std::ZeroSecond,
                    Std::Year,
                ][(b[i + 1] - b'1') as usize];
                Some((std, 2))
            }
            b'0' if at(i, "002") => Some((Std::ZeroYearDay, 3)),
            b'1' => {
                if i + 1 < n && b[i + 1] == b'5' {
                    Some((Std::Hour, 2))
                } else {
                    Some((Std::NumMonth, 1))
                }
            }
            b'2' => {
                if at(i, "2006") {
                    Some((Std::LongYear, 4))
                } else {
                    Some((Std::Day, 1))
                }
            }
            b'_' if i + 1 < n && b[i + 1] == b'2' => {
                if at(i + 1, "2006") {
                    return (&layout[..i + 1], Some(Std::LongYear), &layout[i + 5..]);
                }
                Some((Std::UnderDay, 2))
            }
            b'_' if at(i, "__2") => Some((Std::UnderYearDay, 3)),
            b'3' => Some((Std::Hour12, 1)),
            b'4' => Some((Std::Minute, 1)),
            b'5' => Some((Std::Second, 1)),
            b'P' if i + 1 < n && b[i + 1] == b'M' => Some((Std::PM, 2)),
            b'p' if i + 1 < n && b[i + 1] == b'm' => Some((Std::Pm, 2)),
            b'-' => {
                if at(i, "-070000") {
                    Some((Std::NumSecondsTz, 7))
                } else if at(i, "-07:00:00") {
                    Some((Std::NumColonSecondsTZ, 9))
                } else if at(i, "-0700") {
                    Some((Std::NumTZ, 5))
                } else if at(i, "-07:00") {
                    Some((Std::NumColonTZ, 6))
                } else if at(i, "-07") {
                    Some((Std::NumShortTZ, 3))
                } else {
                    None
                }
            }
            b'Z' => {
                if at(i, "Z070000") {
                    Some((Std::Iso8601SecondsTZ, 7))
                } else if at(i, "Z07:00:00") {
                    Some((Std::Iso8601ColonSecondsTZ, 9))
                } else if at(i, "Z0700") {
                    Some((Std::Iso8601TZ, 5))
                } else if at(i, "Z07:00") {
                    Some((Std::Iso8601ColonTZ, 6))
                } else if at(i, "Z07") {
                    Some((Std::Iso8601ShortTZ, 3))
                } else {
                    None
                }
            }
            c @ (b'.' | b',') if i + 1 < n && (b[i + 1] == b'0' || b[i + 1] == b'9') => {
                let ch = b[i + 1];
                let mut j = i + 1;
                while j < n && b[j] == ch {
                    j += 1;
                }
                if !(j < n && b[j].is_ascii_digit()) {
                    let std = Std::Frac(j - (i + 1), ch == b'9', c as char);
                    return (&layout[..i], Some(std), &layout[j..]);
                }
                None
            }
            _ => None,
        };
        if let Some((std, len)) = found {
            return (&layout[..i], Some(std), &layout[i + len..]);
        }
    }
    (layout, None, "")
}

fn push_int(out: &mut String, v: i64, width: usize) {
    if v < 0 {
        out.push('-');
    }
    let s = v.unsigned_abs().to_string();
    for _ in s.len()..width {
        out.push('0');
    }
    out.push_str(&s);
}

fn format_std(out: &mut String, std: Std, c: &Civil) {
    match std {
        Std::Year => push_int(out, c.year.rem_euclid(100), 2),
        Std::LongYear => push_int(out, c.year, 4),
        Std::Month => out.push_str(&MONTHS[(c.month - 1) as usize][..3]),
        Std::LongMonth => out.push_str(MONTHS[(c.month - 1) as usize]),
        Std::NumMonth => push_int(out, c.month as i64, 0),
        Std::ZeroMonth => push_int(out, c.month as i64, 2),
        Std::WeekDay => out.push_str(&DAYS[c.wday as usize][..3]),
        Std::LongWeekDay => out.push_str(DAYS[c.wday as usize]),
        Std::Day => push_int(out, c.day as i64, 0),
        Std::UnderDay => {
            if c.day < 10 {
                out.push(' ');
            }
            push_int(out, c.day as i64, 0)
        }
        Std::ZeroDay => push_int(out, c.day as i64, 2),
        Std::UnderYearDay => {
            if c.yday < 100 {
                out.push(' ');
                if c.yday < 10 {
                    out.push(' ');
                }
            }
            push_int(out, c.yday as i64, 0)
        }
        Std::ZeroYearDay => push_int(out, c.yday as i64, 3),
        Std::Hour => push_int(out, c.hour as i64, 2),
        Std::Hour12 | Std::ZeroHour12 => {
            let mut hr = c.hour % 12;
            if hr == 0 {
                hr = 12;
            }
            push_int(out, hr as i64, if std == Std::Hour12 { 0 } else { 2 })
        }
        Std::Minute => push_int(out, c.minute as i64, 0),
        Std::ZeroMinute => push_int(out, c.minute as i64, 2),
        Std::Second => push_int(out, c.second as i64, 0),
        Std::ZeroSecond => push_int(out, c.second as i64, 2),
        Std::PM => out.push_str(if c.hour >= 12 { "PM" } else { "AM" }),
        Std::Pm => out.push_str(if c.hour >= 12 { "pm" } else { "am" }),
        Std::TZ => out.push_str("UTC"),
        Std::Iso8601TZ
        | Std::Iso8601SecondsTZ
        | Std::Iso8601ShortTZ
        | Std::Iso8601ColonTZ
        | Std::Iso8601ColonSecondsTZ => out.push('Z'),
        Std::NumTZ => out.push_str("+0000"),
        Std::NumSecondsTz => out.push_str("+000000"),
        Std::NumShortTZ => out.push_str("+00"),
        Std::NumColonTZ => out.push_str("+00:00"),
        Std::NumColonSecondsTZ => out.push_str("+00:00:00"),
        Std::Frac(digits, trim, sep) => {
            let s = format!("{:09}", c.nanos);
            let mut frac = &s[..digits.min(9)];
            if trim {
                frac = frac.trim_end_matches('0');
                if frac.is_empty() {
                    return;
                }
            }
            out.push(sep);
            out.push_str(frac);
        }
    }
}

/// Go's `time.Duration.String()`.
pub(crate) fn duration_string(d: i64) -> String {
    let neg = d < 0;
    let mut u = d.unsigned_abs();
    let mut buf: Vec<u8> = Vec::new(); // built in reverse
    fn frac(buf: &mut Vec<u8>, mut v: u64, prec: usize) -> u64 {
        let mut print = false;
        for _ in 0..prec {
            let digit = v % 10;
            print = print || digit != 0;
            if print {
                buf.push(b'0' + digit as u8);
            }
            v /= 10;
        }
        if print {
            buf.push(b'.');
        }
        v
    }
    fn int(buf: &mut Vec<u8>, mut v: u64) {
        if v == 0 {
            buf.push(b'0');
        }
        while v > 0 {
            buf.push(b'0' + (v % 10) as u8);
            v /= 10;
        }
    }
    if u < 1_000_000_000 {
        if u == 0 {
            return "0s".into();
        }
        let prec;
        buf.push(b's');
        if u < 1_000 {
            prec = 0;
            buf.push(b'n');
        } else if u < 1_000_000 {
            prec = 3;
            // "µ" (U+00B5) reversed byte order.
            buf.push(0xB5);
            buf.push(0xC2);
        } else {
            prec = 6;
            buf.push(b'm');
        }
        u = frac(&mut buf, u, prec);
        int(&mut buf, u);
    } else {
        buf.push(b's');
        u = frac(&mut buf, u, 9);
        int(&mut buf, u % 60);
        u /= 60;
        if u > 0 {
            buf.push(b'm');
            int(&mut buf, u % 60);
            u /= 60;
            if u > 0 {
                buf.push(b'h');
                int(&mut buf, u);
            }
        }
    }
    if neg {
        buf.push(b'-');
    }
    buf.reverse();
    String::from_utf8(buf).unwrap_or_default()
}
