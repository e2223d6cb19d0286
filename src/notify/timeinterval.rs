//! Time intervals (`time_intervals`, `mute_time_intervals`) as Alertmanager 0.25's
//! `timeinterval` package reads and evaluates them: times (start inclusive, end exclusive),
//! weekdays, days of month (negative from the month's end), months, years, and a location.

use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Timelike, Utc};

use crate::gofmt::quote_common_invisibles as go_quote;
use crate::yaml::v2::{DResult, Decoder, Fail, Node};

/// A `[start, end)` range of minutes of the day.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeRange {
    pub start_minute: u32,
    pub end_minute: u32,
}

/// An inclusive range of weekdays (0 = Sunday), days of month, months or years.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InclusiveRange {
    pub begin: i64,
    pub end: i64,
}

/// Where an interval's clock reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    Utc,
    Local,
    Tz(chrono_tz::Tz),
}

impl Location {
    /// Go's `time.LoadLocation`.
    pub fn load(name: &str) -> Result<Location, String> {
        match name {
            "" | "UTC" => Ok(Location::Utc),
            "Local" => Ok(Location::Local),
            other => other
                .parse::<chrono_tz::Tz>()
                .map(Location::Tz)
                .map_err(|_| format!("unknown time zone {other}")),
        }
    }
}

/// The wall-clock fields an interval looks at.
#[derive(Clone, Copy, Debug)]
struct Civil {
    minute_of_day: u32,
    day: u32,
    month: u32,
    weekday: u32, // 0 = Sunday
    year: i32,
    days_in_month: u32,
}

fn civil<Tz: TimeZone>(t: DateTime<Tz>) -> Civil {
    let year = t.year();
    let month = t.month();
    let first = NaiveDate::from_ymd_opt(year, month, 1);
    let next = if month == 12 {
        NaiveDate::from_ymd_opt(year + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(year, month + 1, 1)
    };
    let days_in_month = match (first, next) {
        (Some(a), Some(b)) => (b - a).num_days() as u32,
        _ => 31,
    };
    Civil {
        minute_of_day: t.hour() * 60 + t.minute(),
        day: t.day(),
        month,
        weekday: t.weekday().num_days_from_sunday(),
        year,
        days_in_month,
    }
}

/// One `time_intervals` entry: every field present must contain the instant (an absent field
/// is "any"; a present but empty list contains nothing, as in Alertmanager).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimeInterval {
    pub times: Option<Vec<TimeRange>>,
    pub weekdays: Option<Vec<InclusiveRange>>,
    pub days_of_month: Option<Vec<InclusiveRange>>,
    pub months: Option<Vec<InclusiveRange>>,
    pub years: Option<Vec<InclusiveRange>>,
    pub location: Option<Location>,
}

impl TimeInterval {
    /// `ContainsTime`.
    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        let c = match &self.location {
            None | Some(Location::Utc) => civil(t),
            Some(Location::Local) => civil(t.with_timezone(&chrono::Local)),
            Some(Location::Tz(tz)) => civil(t.with_timezone(tz)),
        };
        if let Some(times) = &self.times {
            let m = c.minute_of_day;
            if !times.iter().any(|r| m >= r.start_minute && m < r.end_minute) {
                return false;
            }
        }
        if let Some(doms) = &self.days_of_month {
            let dim = c.days_in_month as i64;
            let mut inside = false;
            for r in doms {
                let begin = if r.begin < 0 { dim + r.begin + 1 } else { r.begin };
                let end = if r.end < 0 { dim + r.end + 1 } else { r.end };
                if begin > dim {
                    continue;
                }
                let begin = begin.clamp(-dim, dim);
                let end = end.clamp(-dim, dim);
                let day = c.day as i64;
                if day >= begin && day <= end {
                    inside = true;
                    break;
                }
            }
            if !inside {
                return false;
            }
        }
        let within = |ranges: &Option<Vec<InclusiveRange>>, v: i64| match ranges {
            None => true,
            Some(rs) => rs.iter().any(|r| v >= r.begin && v <= r.end),
        };
        within(&self.months, c.month as i64)
            && within(&self.weekdays, c.weekday as i64)
            && within(&self.years, c.year as i64)
    }
}

/// A named interval list (`time_intervals:` / `mute_time_intervals:` entries).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedTimeInterval {
    pub name: String,
    pub time_intervals: Vec<TimeInterval>,
    pub pos: crate::yaml::v2::Pos,
}

impl NamedTimeInterval {
    /// Whether any of the intervals contains `t`.
    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        self.time_intervals.iter().any(|ti| ti.contains(t))
    }
}

const WEEKDAYS: [&str; 7] = [
    "sunday",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
];
const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

#[derive(Clone, Copy)]
enum RangeKind {
    Weekday,
    DayOfMonth,
    Month,
    Year,
}

fn go_atoi(s: &str) -> Result<i64, String> {
    let valid = {
        let body = s.strip_prefix(['+', '-']).unwrap_or(s);
        !body.is_empty() && body.bytes().all(|b| b.is_ascii_digit())
    };
    if !valid {
        return Err(format!("strconv.Atoi: parsing {}: invalid syntax", go_quote(s)));
    }
    s.parse::<i64>()
        .map_err(|_| format!("strconv.Atoi: parsing {}: value out of range", go_quote(s)))
}

fn member(kind: RangeKind, s: &str) -> Result<i64, String> {
    match kind {
        RangeKind::Weekday => WEEKDAYS
            .iter()
            .position(|d| *d == s)
            .map(|i| i as i64)
            .ok_or_else(|| format!("{s} is not a valid weekday")),
        RangeKind::Month => match MONTHS.iter().position(|m| *m == s) {
            Some(i) => Ok(i as i64 + 1),
            None => go_atoi(s).map_err(|_| format!("{s} is not a valid month")),
        },
        RangeKind::DayOfMonth | RangeKind::Year => go_atoi(s),
    }
}

fn range_from_string(kind: RangeKind, input: &str) -> Result<InclusiveRange, String> {
    let s = input.to_lowercase();
    if s.contains(':') {
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() != 2 {
            return Err(format!("couldn't parse range {s}, invalid format"));
        }
        let begin = member(kind, parts[0])?;
        let end = member(kind, parts[1])?;
        return Ok(InclusiveRange { begin, end });
    }
    let v = member(kind, &s)?;
    Ok(InclusiveRange { begin: v, end: v })
}

fn validate_range(kind: RangeKind, s: &str, r: InclusiveRange) -> Result<(), String> {
    match kind {
        RangeKind::Weekday => {
            if r.begin > r.end {
                return Err("start day cannot be before end day".into());
            }
            if !(0..=6).contains(&r.begin) || !(0..=6).contains(&r.end) {
                return Err(format!("{s} is not a valid day of the week: out of range"));
            }
        }
        RangeKind::DayOfMonth => {
            for v in [r.begin, r.end] {
                if v == 0 || !(-31..=31).contains(&v) {
                    return Err(format!("{v} is not a valid day of the month: out of range"));
                }
            }
            if r.begin < 0 && r.end > 0 {
                return Err("end day must be negative if start day is negative".into());
            }
            let cb = if r.begin < 0 { 28 + r.begin } else { r.begin };
            let ce = if r.end < 0 { 28 + r.end } else { r.end };
            if cb > ce {
                return Err(format!("end day {} is always before start day {}", r.end, r.begin));
            }
        }
        RangeKind::Month => {
            if r.begin > r.end {
                let name = |v: i64| {
                    if (1..=12).contains(&v) {
                        MONTHS[(v - 1) as usize].to_string()
                    } else {
                        String::new()
                    }
                };
                return Err(format!(
                    "end month {} is before start month {}",
                    name(r.end),
                    name(r.begin)
                ));
            }
        }
        RangeKind::Year => {
            if r.begin > r.end {
                return Err(format!("end year {} is before start year {}", r.end, r.begin));
            }
        }
    }
    Ok(())
}

fn decode_ranges(d: &mut Decoder, node: &Node, kind: RangeKind, into: &str) -> DResult<Option<Vec<InclusiveRange>>> {
    if node.is_null() {
        return Ok(None);
    }
    let items = d.seq(node, into);
    let mut out = Vec::new();
    for item in items {
        if item.is_null() {
            out.push(InclusiveRange { begin: 0, end: 0 });
            continue;
        }
        let Some(s) = d.custom_string(item) else { continue };
        let r = range_from_string(kind, &s).map_err(|e| Fail::new(item.pos(), e))?;
        validate_range(kind, &s, r).map_err(|e| Fail::new(item.pos(), e))?;
        out.push(r);
    }
    Ok(Some(out))
}

fn parse_clock(s: &str) -> Result<u32, String> {
    let b = s.as_bytes();
    let valid = s == "24:00"
        || (b.len() == 5
            && b[2] == b':'
            && ((b[0] == b'0' || b[0] == b'1') && b[1].is_ascii_digit()
                || b[0] == b'2' && (b'0'..=b'3').contains(&b[1]))
            && (b'0'..=b'5').contains(&b[3])
            && b[4].is_ascii_digit());
    if !valid {
        return Err(format!("couldn't parse timestamp {s}, invalid format"));
    }
    let h: u32 = s[..2].parse().map_err(|_| format!("invalid timestamp format: {s}"))?;
    let m: u32 = s[3..].parse().map_err(|_| format!("invalid timestamp format: {s}"))?;
    Ok(h * 60 + m)
}

fn decode_time_range(d: &mut Decoder, node: &Node) -> DResult<Option<TimeRange>> {
    if node.is_null() {
        return Ok(Some(TimeRange {
            start_minute: 0,
            end_minute: 0,
        }));
    }
    let mark = d.mark();
    let (mut start, mut end) = (String::new(), String::new());
    d.fields(
        node,
        "timeinterval.yamlTimeRange",
        &["start_time", "end_time"],
        &mut |d, k, _, v| {
            let s = d.string(v, "string");
            if k == "start_time" {
                start = s;
            } else {
                end = s;
            }
            Ok(())
        },
    )?;
    if d.failed_since(mark) {
        return Ok(None);
    }
    let pos = node.pos();
    if start.is_empty() || end.is_empty() {
        return Err(Fail::new(pos, "both start and end times must be provided"));
    }
    let s = parse_clock(&start).map_err(|e| Fail::new(pos, e))?;
    let e = parse_clock(&end).map_err(|e| Fail::new(pos, e))?;
    if s >= e {
        return Err(Fail::new(pos, "start time cannot be equal or greater than end time"));
    }
    Ok(Some(TimeRange {
        start_minute: s,
        end_minute: e,
    }))
}

/// Decodes one `time_intervals` entry (`timeinterval.TimeInterval`).
pub(crate) fn decode_time_interval(d: &mut Decoder, node: &Node) -> DResult<TimeInterval> {
    let mut ti = TimeInterval::default();
    d.fields(
        node,
        "timeinterval.TimeInterval",
        &["times", "weekdays", "days_of_month", "months", "years", "location"],
        &mut |d, k, _, v| {
            match k {
                "times" => {
                    if v.is_null() {
                        ti.times = None;
                    } else {
                        let mut out = Vec::new();
                        for item in d.seq(v, "[]timeinterval.TimeRange") {
                            if let Some(r) = decode_time_range(d, item)? {
                                out.push(r);
                            }
                        }
                        ti.times = Some(out);
                    }
                }
                "weekdays" => ti.weekdays = decode_ranges(d, v, RangeKind::Weekday, "[]timeinterval.WeekdayRange")?,
                "days_of_month" => {
                    ti.days_of_month = decode_ranges(d, v, RangeKind::DayOfMonth, "[]timeinterval.DayOfMonthRange")?
                }
                "months" => ti.months = decode_ranges(d, v, RangeKind::Month, "[]timeinterval.MonthRange")?,
                "years" => ti.years = decode_ranges(d, v, RangeKind::Year, "[]timeinterval.YearRange")?,
                "location" => {
                    if let Some(s) = d.custom_string(v) {
                        ti.location = Some(Location::load(&s).map_err(|e| Fail::new(v.pos(), e))?);
                    }
                }
                _ => {}
            }
            Ok(())
        },
    )?;
    Ok(ti)
}

/// Decodes a named interval (`config.TimeInterval` / `config.MuteTimeInterval`).
pub(crate) fn decode_named(d: &mut Decoder, node: &Node, mute: bool) -> DResult<Option<NamedTimeInterval>> {
    if node.is_null() {
        return Ok(None);
    }
    let mark = d.mark();
    let mut name = String::new();
    let mut intervals = Vec::new();
    d.fields(node, "config.plain", &["name", "time_intervals"], &mut |d, k, _, v| {
        match k {
            "name" => name = d.string(v, "string"),
            _ => {
                intervals.clear();
                for item in d.seq(v, "[]timeinterval.TimeInterval") {
                    intervals.push(decode_time_interval(d, item)?);
                }
            }
        }
        Ok(())
    })?;
    if d.failed_since(mark) {
        return Ok(None);
    }
    if name.is_empty() {
        let what = if mute { "mute time interval" } else { "time interval" };
        return Err(Fail::new(node.pos(), format!("missing name in {what}")));
    }
    Ok(Some(NamedTimeInterval {
        name,
        time_intervals: intervals,
        pos: node.pos(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::v2::parse;

    fn ti(yaml: &str) -> Result<TimeInterval, String> {
        let n = parse(yaml).unwrap().unwrap();
        let mut d = Decoder::new();
        let r = decode_time_interval(&mut d, &n).map_err(|f| f.message)?;
        if let Some(i) = d.issues.first() {
            return Err(i.message.clone());
        }
        Ok(r)
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn parses_and_validates_like_alertmanager() {
        // From timeinterval_test.go's yamlUnmarshalTestCases (v0.25.0).
        assert!(ti("weekdays: ['monday:friday', 'saturday']").is_ok());
        assert!(ti("times:\n- start_time: '09:00'\n  end_time: '17:00'").is_ok());
        assert_eq!(
            ti("weekdays: ['friday:monday']").unwrap_err(),
            "start day cannot be before end day"
        );
        assert_eq!(
            ti("weekdays: ['blurgsday:flurgsday']").unwrap_err(),
            "blurgsday is not a valid weekday"
        );
        assert_eq!(
            ti("days_of_month: ['-5:5']").unwrap_err(),
            "end day must be negative if start day is negative"
        );
        assert_eq!(
            ti("days_of_month: ['10:5']").unwrap_err(),
            "end day 5 is always before start day 10"
        );
        assert_eq!(
            ti("days_of_month: ['0']").unwrap_err(),
            "0 is not a valid day of the month: out of range"
        );
        assert_eq!(
            ti("days_of_month: ['32']").unwrap_err(),
            "32 is not a valid day of the month: out of range"
        );
        assert_eq!(
            ti("months: ['december:january']").unwrap_err(),
            "end month january is before start month december"
        );
        assert_eq!(ti("months: ['foo']").unwrap_err(), "foo is not a valid month");
        assert_eq!(
            ti("years: ['2022:2020']").unwrap_err(),
            "end year 2020 is before start year 2022"
        );
        assert_eq!(
            ti("times:\n- start_time: '18:00'\n  end_time: '09:00'").unwrap_err(),
            "start time cannot be equal or greater than end time"
        );
        assert_eq!(
            ti("times:\n- start_time: '25:00'\n  end_time: '26:00'").unwrap_err(),
            "couldn't parse timestamp 25:00, invalid format"
        );
        assert_eq!(
            ti("times:\n- start_time: '10:00'").unwrap_err(),
            "both start and end times must be provided"
        );
        assert_eq!(
            ti("location: 'Nowhere/Nothing'").unwrap_err(),
            "unknown time zone Nowhere/Nothing"
        );
        assert_eq!(
            ti("foo: bar").unwrap_err(),
            "field foo not found in type timeinterval.TimeInterval"
        );
    }

    #[test]
    fn contains_follows_alertmanager() {
        let business = ti("weekdays: ['monday:friday']\ntimes:\n- start_time: '09:00'\n  end_time: '17:00'").unwrap();
        assert!(business.contains(at("2021-04-12T10:00:00Z"))); // Monday
        assert!(!business.contains(at("2021-04-12T17:00:00Z"))); // end exclusive
        assert!(business.contains(at("2021-04-12T09:00:00Z"))); // start inclusive
        assert!(!business.contains(at("2021-04-11T10:00:00Z"))); // Sunday
        let last_days = ti("days_of_month: ['-3:-1']").unwrap();
        assert!(last_days.contains(at("2021-02-26T00:00:00Z")));
        assert!(!last_days.contains(at("2021-02-25T00:00:00Z")));
        assert!(last_days.contains(at("2021-01-31T00:00:00Z")));
        let sydney = ti("times:\n- start_time: '09:00'\n  end_time: '10:00'\nlocation: Australia/Sydney").unwrap();
        // 09:30 in Sydney (AEST, UTC+10) on 2021-06-01 is 23:30 UTC the day before.
        assert!(sydney.contains(at("2021-05-31T23:30:00Z")));
        assert!(!sydney.contains(at("2021-06-01T09:30:00Z")));
        let months = ti("months: ['may:august']\nyears: ['2020:2022']").unwrap();
        assert!(months.contains(at("2021-06-01T00:00:00Z")));
        assert!(!months.contains(at("2023-06-01T00:00:00Z")));
        assert!(!months.contains(at("2021-09-01T00:00:00Z")));
        let empty_times = ti("times: []").unwrap();
        assert!(!empty_times.contains(at("2021-06-01T00:00:00Z")));
    }
}
