//! Alerts as Alertmanager holds them (`types.Alert`): labels, annotations, activity range,
//! fingerprint, merge rules, and the alert store (`provider/mem`) that merges re-sent alerts.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Datelike, Timelike, Utc};

use crate::labels::Labels;

use crate::alert::FNV_PRIME;
pub(crate) use crate::alert::{alert_order, fingerprint_of, labelset_string, Alert, Fingerprint};

use crate::duration::Duration;

/// Go's `time.Time` JSON form (RFC 3339 with trimmed nanoseconds); `None` is the zero time.
pub(crate) fn go_time_json(t: Option<DateTime<Utc>>) -> String {
    let Some(t) = t else {
        return "0001-01-01T00:00:00Z".into();
    };
    let mut s = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    let nanos = t.nanosecond() % 1_000_000_000;
    if nanos != 0 {
        let frac = format!("{nanos:09}");
        s.push('.');
        s.push_str(frac.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// An alert as POSTed to `/api/v2/alerts`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PostableAlert {
    pub labels: Vec<(String, String)>,
    pub annotations: Vec<(String, String)>,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub generator_url: String,
}

impl PostableAlert {
    /// What Alertmanager's API stores for it at `now` (api/v2 `postAlertsHandler`): missing
    /// `startsAt` is now (or `endsAt` if only that is given), missing `endsAt` is
    /// `now + resolve_timeout` and marks the alert as timing out; empty label values dropped.
    pub fn into_alert(self, now: DateTime<Utc>, resolve_timeout: Duration) -> Result<Alert, String> {
        ReceivedAlert {
            labels: Labels::from_pairs(self.labels.iter().map(|(n, v)| (n.as_str(), v.as_str()))),
            annotations: self.annotations.into_iter().filter(|(_, v)| !v.is_empty()).collect(),
            starts_at: self.starts_at,
            ends_at: self.ends_at,
            generator_url: self.generator_url,
        }
        .into_alert(now, resolve_timeout)
    }
}

/// An alert decoded from a `POST /api/v2/alerts` body by [`decode_postable_alerts`]: a
/// [`PostableAlert`] whose labels are already a label set (empty values dropped) and whose
/// annotations are already filtered, so ingest copies no string twice.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ReceivedAlert {
    pub labels: Labels,
    pub annotations: BTreeMap<String, String>,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub generator_url: String,
}

impl ReceivedAlert {
    /// As [`PostableAlert::into_alert`]: Alertmanager's defaults and validation.
    pub(crate) fn into_alert(self, now: DateTime<Utc>, resolve_timeout: Duration) -> Result<Alert, String> {
        let starts_at = match (self.starts_at, self.ends_at) {
            (Some(s), _) => s,
            (None, Some(e)) if e < now => e,
            _ => now,
        };
        let (ends_at, timeout) = match self.ends_at {
            Some(e) => (e, false),
            None => (now + resolve_timeout.as_chrono(), true),
        };
        if self.labels.is_empty() {
            return Err("at least one label pair required".into());
        }
        if ends_at < starts_at {
            return Err("start time must be before end time".into());
        }
        for l in self.labels.iter() {
            if !crate::labels::is_valid_label_name(&l.name) {
                return Err(format!(
                    "invalid name {}",
                    crate::gofmt::quote_common_invisibles(&l.name)
                ));
            }
        }
        Ok(Alert {
            labels: self.labels,
            annotations: self.annotations,
            starts_at,
            ends_at: Some(ends_at),
            generator_url: self.generator_url,
            updated_at: now,
            timeout,
        })
    }
}

/// What the ingest path turns into a stored alert: either form of a received alert.
pub trait IntoAlert {
    fn into_alert(self, now: DateTime<Utc>, resolve_timeout: Duration) -> Result<Alert, String>;
}

impl IntoAlert for PostableAlert {
    fn into_alert(self, now: DateTime<Utc>, resolve_timeout: Duration) -> Result<Alert, String> {
        PostableAlert::into_alert(self, now, resolve_timeout)
    }
}

impl IntoAlert for ReceivedAlert {
    fn into_alert(self, now: DateTime<Utc>, resolve_timeout: Duration) -> Result<Alert, String> {
        ReceivedAlert::into_alert(self, now, resolve_timeout)
    }
}

pub(crate) use decode::decode_postable_alerts;

/// What `POST /api/v2/alerts` does with a body before queueing it: decoded, then each alert
/// given Alertmanager's defaults and validated at `now`; the error is the 400 answer's message.
pub fn decode_ingest_body(body: &[u8], now: DateTime<Utc>, resolve_timeout: Duration) -> Result<Vec<Alert>, String> {
    decode_postable_alerts(body)?
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            p.into_alert(now, resolve_timeout)
                .map_err(|e| format!("alert {i}: {e}"))
        })
        .collect()
}

/// `POST /api/v2/alerts` bodies decoded straight into [`ReceivedAlert`]s (no `serde_json::Value`
/// in between: that was about half of the ingest CPU), with the checks the Value-based parser
/// made: labels and annotations objects of strings (or null), `startsAt`/`endsAt` RFC 3339 (or
/// null, "", Go's zero time), `generatorURL` a string (anything else reads as ""), unknown
/// fields ignored, duplicate keys: the last wins.
mod decode {
    use std::borrow::Cow;
    use std::cell::{Cell, RefCell};
    use std::collections::{BTreeMap, HashSet};
    use std::fmt;
    use std::sync::Arc;

    use chrono::{DateTime, Utc};
    use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

    use serde::de::Deserialize as _;

    use super::ReceivedAlert;
    use crate::labels::{Label, Labels};

    /// Decodes a request body; the error is the message for a 400 answer.
    pub(crate) fn decode_postable_alerts(body: &[u8]) -> Result<Vec<ReceivedAlert>, String> {
        let index = Cell::new(None);
        // UTF-8 checked once for the whole body, so the parser need not check every string.
        let text = std::str::from_utf8(body).map_err(|e| {
            let at = e.valid_up_to();
            let line_start = body[..at].iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
            let line = body[..at].iter().filter(|b| **b == b'\n').count() + 1;
            format!(
                "body is not JSON: invalid UTF-8 at line {line} column {}",
                at - line_start + 1
            )
        })?;
        let mut de = serde_json::Deserializer::from_str(text);
        let res = Batch {
            index: &index,
            body_len: body.len(),
        }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
        res.map_err(|e| match (e.classify(), index.get()) {
            (serde_json::error::Category::Data, Some(i)) => format!("alert {i}: {e}"),
            (serde_json::error::Category::Data, None) => "body must be a JSON array of alerts".to_string(),
            _ => format!("body is not JSON: {e}"),
        })
    }

    /// How many distinct label names a thread keeps shared; past that the cache starts over
    /// (a sender with unbounded label names must not grow it without end).
    const NAME_CACHE_MAX: usize = 4096;

    thread_local! {
        /// Label names seen on this thread: the same few names come with every alert, and
        /// sharing one `Arc<str>` per name saves an allocation per label.
        static NAMES: RefCell<HashSet<Arc<str>, rustc_hash::FxBuildHasher>> = RefCell::new(HashSet::default());
    }

    /// The shared name; `last` is the name at the same position in the previous alert's labels,
    /// which senders usually write in the same order, so most names are found by one compare.
    fn label_name(n: &str, last: Option<&Arc<str>>) -> Arc<str> {
        if let Some(l) = last.filter(|l| &***l == n) {
            return Arc::clone(l);
        }
        NAMES.with(|c| {
            let mut c = c.borrow_mut();
            if let Some(a) = c.get(n) {
                return Arc::clone(a);
            }
            if c.len() >= NAME_CACHE_MAX {
                c.clear();
            }
            let a: Arc<str> = Arc::from(n);
            c.insert(Arc::clone(&a));
            a
        })
    }

    /// A string, borrowed from the body where it has no escapes.
    struct Str<'de>(Cow<'de, str>);

    impl<'de> de::Deserialize<'de> for Str<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Str<'de>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a string")
                }
                fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Str<'de>, E> {
                    Ok(Str(Cow::Borrowed(s)))
                }
                fn visit_str<E: de::Error>(self, s: &str) -> Result<Str<'de>, E> {
                    Ok(Str(Cow::Owned(s.to_string())))
                }
                fn visit_string<E: de::Error>(self, s: String) -> Result<Str<'de>, E> {
                    Ok(Str(Cow::Owned(s)))
                }
            }
            d.deserialize_str(V)
        }
    }

    /// Any JSON value, kept only when it is a string (or told apart as null).
    enum Loose<'de> {
        Str(Cow<'de, str>),
        Null,
        Other,
    }

    impl<'de> de::Deserialize<'de> for Loose<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Loose<'de>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("any JSON value")
                }
                fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Loose<'de>, E> {
                    Ok(Loose::Str(Cow::Borrowed(s)))
                }
                fn visit_str<E: de::Error>(self, s: &str) -> Result<Loose<'de>, E> {
                    Ok(Loose::Str(Cow::Owned(s.to_string())))
                }
                fn visit_string<E: de::Error>(self, s: String) -> Result<Loose<'de>, E> {
                    Ok(Loose::Str(Cow::Owned(s)))
                }
                fn visit_unit<E: de::Error>(self) -> Result<Loose<'de>, E> {
                    Ok(Loose::Null)
                }
                fn visit_none<E: de::Error>(self) -> Result<Loose<'de>, E> {
                    Ok(Loose::Null)
                }
                fn visit_bool<E: de::Error>(self, _: bool) -> Result<Loose<'de>, E> {
                    Ok(Loose::Other)
                }
                fn visit_i64<E: de::Error>(self, _: i64) -> Result<Loose<'de>, E> {
                    Ok(Loose::Other)
                }
                fn visit_u64<E: de::Error>(self, _: u64) -> Result<Loose<'de>, E> {
                    Ok(Loose::Other)
                }
                fn visit_f64<E: de::Error>(self, _: f64) -> Result<Loose<'de>, E> {
                    Ok(Loose::Other)
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Loose<'de>, A::Error> {
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(Loose::Other)
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Loose<'de>, A::Error> {
                    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    Ok(Loose::Other)
                }
            }
            d.deserialize_any(V)
        }
    }

    /// The top-level array; `index` says which alert is being read (for error messages).
    struct Batch<'a> {
        index: &'a Cell<Option<usize>>,
        body_len: usize,
    }

    impl<'de> DeserializeSeed<'de> for Batch<'_> {
        type Value = Vec<ReceivedAlert>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Batch<'_> {
        type Value = Vec<ReceivedAlert>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON array of alerts")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            // serde_json gives no length: sized from the body (an alert is rarely under 256
            // bytes), so a batch does not grow its vector step by step.
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(self.body_len / 256).min(8192));
            let names = RefCell::new(Vec::new());
            loop {
                self.index.set(Some(out.len()));
                match seq.next_element_seed(AlertSeed { names: &names })? {
                    Some(a) => out.push(a),
                    None => return Ok(out),
                }
            }
        }
    }

    /// One alert; `names` are the previous alert's label names as they came (see
    /// [`label_name`]).
    struct AlertSeed<'a> {
        names: &'a RefCell<Vec<Arc<str>>>,
    }

    impl<'de> DeserializeSeed<'de> for AlertSeed<'_> {
        type Value = ReceivedAlert;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ReceivedAlert, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for AlertSeed<'_> {
        type Value = ReceivedAlert;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an alert object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ReceivedAlert, A::Error> {
            let mut a = ReceivedAlert::default();
            while let Some(k) = map.next_key::<Str<'de>>()? {
                match &*k.0 {
                    "labels" => a.labels = map.next_value_seed(Pairs::Labels(self.names))?.into_labels(),
                    "annotations" => a.annotations = map.next_value_seed(Pairs::Annotations)?.into_annotations(),
                    "startsAt" => a.starts_at = map.next_value_seed(Time("startsAt"))?,
                    "endsAt" => a.ends_at = map.next_value_seed(Time("endsAt"))?,
                    "generatorURL" => {
                        a.generator_url = match map.next_value::<Loose<'de>>()? {
                            Loose::Str(s) => s.into_owned(),
                            _ => String::new(),
                        }
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(a)
        }
    }

    /// `labels` or `annotations`: an object of strings, or null.
    #[derive(Clone, Copy)]
    enum Pairs<'a> {
        Labels(&'a RefCell<Vec<Arc<str>>>),
        Annotations,
    }

    enum PairsValue {
        Labels(Vec<Label>),
        Annotations(BTreeMap<String, String>),
    }

    impl PairsValue {
        fn into_labels(self) -> Labels {
            let PairsValue::Labels(mut v) = self else {
                return Labels::empty();
            };
            // Sorted by name; of duplicate names the last wins (reversed, then a stable sort
            // puts it first among its equals, where dedup keeps it); empty values mean
            // "absent".
            v.reverse();
            v.sort_by(|a, b| a.name.cmp(&b.name));
            v.dedup_by(|later, first| later.name == first.name);
            v.retain(|l| !l.value.is_empty());
            Labels::from_sorted(v)
        }

        fn into_annotations(self) -> BTreeMap<String, String> {
            match self {
                PairsValue::Annotations(m) => m,
                PairsValue::Labels(_) => BTreeMap::new(),
            }
        }
    }

    impl Pairs<'_> {
        fn what(self) -> &'static str {
            match self {
                Pairs::Labels(_) => "labels",
                Pairs::Annotations => "annotations",
            }
        }

        fn not_object<E: de::Error>(self) -> Result<PairsValue, E> {
            Err(E::custom(format!("{} must be an object", self.what())))
        }

        fn empty(self) -> PairsValue {
            match self {
                // Room for the usual label count: no regrowth per label.
                Pairs::Labels(_) => PairsValue::Labels(Vec::with_capacity(16)),
                Pairs::Annotations => PairsValue::Annotations(BTreeMap::new()),
            }
        }
    }

    impl<'de> DeserializeSeed<'de> for Pairs<'_> {
        type Value = PairsValue;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<PairsValue, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Pairs<'_> {
        type Value = PairsValue;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "{} as an object of strings", self.what())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PairsValue, A::Error> {
            let mut out = self.empty();
            while let Some(n) = map.next_key::<Str<'de>>()? {
                let v = match map.next_value::<Loose<'de>>()? {
                    Loose::Str(v) => v,
                    _ => {
                        return Err(de::Error::custom(format!("{}.{} must be a string", self.what(), n.0)));
                    }
                };
                match (&mut out, self) {
                    (PairsValue::Labels(ls), Pairs::Labels(names)) => {
                        let mut names = names.borrow_mut();
                        let i = ls.len();
                        let name = label_name(&n.0, names.get(i));
                        match names.get_mut(i) {
                            Some(slot) => *slot = Arc::clone(&name),
                            None => names.push(Arc::clone(&name)),
                        }
                        ls.push(Label {
                            name,
                            value: Arc::from(&*v),
                        });
                    }
                    (PairsValue::Labels(_), Pairs::Annotations) => {}
                    (PairsValue::Annotations(m), _) => {
                        if v.is_empty() {
                            m.remove(&*n.0);
                        } else {
                            m.insert(n.0.into_owned(), v.into_owned());
                        }
                    }
                }
            }
            Ok(out)
        }
        fn visit_unit<E: de::Error>(self) -> Result<PairsValue, E> {
            Ok(self.empty())
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<PairsValue, E> {
            self.not_object()
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<PairsValue, E> {
            self.not_object()
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<PairsValue, E> {
            self.not_object()
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<PairsValue, E> {
            self.not_object()
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<PairsValue, E> {
            self.not_object()
        }
        fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<PairsValue, A::Error> {
            self.not_object()
        }
    }

    /// `startsAt` / `endsAt`: RFC 3339; null, "" and Go's zero time mean "not given".
    struct Time(&'static str);

    impl<'de> DeserializeSeed<'de> for Time {
        type Value = Option<DateTime<Utc>>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            match Loose::deserialize(d)? {
                Loose::Null => Ok(None),
                Loose::Str(s) if s.is_empty() || s.starts_with("0001-01-01") => Ok(None),
                Loose::Str(s) => DateTime::parse_from_rfc3339(&s)
                    .map(|t| Some(t.with_timezone(&Utc)))
                    .map_err(|e| de::Error::custom(format!("{}: {e}", self.0))),
                Loose::Other => Err(de::Error::custom(format!("{} must be an RFC 3339 string", self.0))),
            }
        }
    }
}

/// The alert store (`provider/mem`): one alert per fingerprint, re-sent alerts merged when
/// their activity ranges overlap.
#[derive(Clone, Debug, Default)]
pub struct AlertStore {
    /// Shared with the inhibitor and the aggregation groups, which hold the same versions.
    alerts: HashMap<Fingerprint, Arc<Alert>, FingerprintHash>,
}

/// Fingerprints are already hashes (FNV-1a): the store's map uses them as they are, mixed
/// once, instead of running SipHash over them under the notifier's lock.
#[derive(Clone, Copy, Debug, Default)]
pub struct FingerprintHash;

impl std::hash::BuildHasher for FingerprintHash {
    type Hasher = FingerprintHasher;
    fn build_hasher(&self) -> FingerprintHasher {
        FingerprintHasher(0)
    }
}

/// See [`FingerprintHash`]; other keys than a `u64` still hash (FNV-1a over the bytes).
#[derive(Clone, Copy, Debug, Default)]
pub struct FingerprintHasher(u64);

impl std::hash::Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        // A multiplicative mix, so the low bits hashbrown uses vary with every input bit.
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(32)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(FNV_PRIME);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 ^= v;
    }
}

impl AlertStore {
    pub fn new() -> Self {
        AlertStore::default()
    }

    /// Stores an alert and returns the stored (possibly merged) version.
    pub fn put(&mut self, alert: Alert) -> Arc<Alert> {
        self.put_shared(alert).1
    }

    /// [`AlertStore::put`], also returning the fingerprint.
    pub fn put_shared(&mut self, alert: Alert) -> (Fingerprint, Arc<Alert>) {
        let fp = alert.fingerprint();
        (fp, self.put_with_fingerprint(fp, alert))
    }

    /// [`AlertStore::put`] of an alert whose fingerprint is `fp`.
    pub fn put_with_fingerprint(&mut self, fp: Fingerprint, mut alert: Alert) -> Arc<Alert> {
        if let Some(old) = self.alerts.get(&fp) {
            let overlaps = |t: DateTime<Utc>| t > old.starts_at && old.ends_at.is_some_and(|e| t < e);
            if alert.ends_at.is_some_and(overlaps) || overlaps(alert.starts_at) {
                alert = old.merge(&alert);
            }
        }
        let alert = Arc::new(alert);
        self.alerts.insert(fp, Arc::clone(&alert));
        alert
    }

    /// Stores `alert` as it is (no merge with the stored version); returns it shared.
    pub fn replace(&mut self, fp: Fingerprint, alert: Alert) -> Arc<Alert> {
        let alert = Arc::new(alert);
        self.alerts.insert(fp, Arc::clone(&alert));
        alert
    }

    /// The stored alert itself, for tests that follow who holds it.
    #[cfg(test)]
    pub(crate) fn get_shared(&self, fp: Fingerprint) -> Option<Arc<Alert>> {
        self.alerts.get(&fp).cloned()
    }

    pub fn get(&self, fp: Fingerprint) -> Option<&Alert> {
        self.alerts.get(&fp).map(|a| &**a)
    }

    /// All alerts, in fingerprint order.
    pub fn list(&self) -> Vec<&Alert> {
        self.list_where(|_| true)
    }

    /// The alerts `keep` keeps, in fingerprint order: sorted by the map's keys, their
    /// fingerprints (hashing every alert's labels at each comparison took a second over 20,000
    /// alerts in the unoptimised build).
    pub fn list_where(&self, keep: impl Fn(&Alert) -> bool) -> Vec<&Alert> {
        let mut v: Vec<(Fingerprint, &Alert)> = self
            .alerts
            .iter()
            .filter(|(_, a)| keep(a))
            .map(|(fp, a)| (*fp, &**a))
            .collect();
        v.sort_unstable_by_key(|(fp, _)| *fp);
        v.into_iter().map(|(_, a)| a).collect()
    }

    /// Drops alerts resolved at `now` (Alertmanager's periodic GC); returns how many.
    pub fn gc(&mut self, now: DateTime<Utc>) -> usize {
        let before = self.alerts.len();
        self.alerts.retain(|_, a| !a.resolved_at(now));
        if self.alerts.len() < before / 2 {
            // A map that held a burst keeps its table: give most of it back.
            self.alerts.shrink_to_fit();
        }
        before - self.alerts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn fingerprint_matches_prometheus_model() {
        // model.LabelSet{"foo": "bar"}.Fingerprint() == 0x0e5b4da2b0b24f8b? Checked against
        // the FNV-1a definition: empty set is the offset basis.
        assert_eq!(crate::alert::fingerprint(&Labels::empty()).0, crate::alert::FNV_OFFSET);
        let a = crate::alert::fingerprint(&Labels::from_pairs([("a", "1"), ("b", "2")]));
        let b = crate::alert::fingerprint(&Labels::from_pairs([("b", "2"), ("a", "1")]));
        assert_eq!(a, b);
        assert_eq!(a.to_string().len(), 16);
    }

    #[test]
    fn labelset_string_sorts_like_go() {
        let ls = Labels::from_pairs([("alertname", "X"), ("a1", "q\""), ("a", "1")]);
        assert_eq!(labelset_string(&ls), r#"{a1="q\"", a="1", alertname="X"}"#);
        assert_eq!(labelset_string(&Labels::empty()), "{}");
    }

    #[test]
    fn go_time_json_trims() {
        assert_eq!(go_time_json(None), "0001-01-01T00:00:00Z");
        assert_eq!(
            go_time_json(Some(t("2024-06-01T10:00:00.500Z"))),
            "2024-06-01T10:00:00.5Z"
        );
        assert_eq!(go_time_json(Some(t("2024-06-01T10:00:00Z"))), "2024-06-01T10:00:00Z");
    }

    #[test]
    fn api_defaults_and_merge() {
        let now = t("2024-06-01T10:00:00Z");
        let p = PostableAlert {
            labels: vec![("alertname".into(), "X".into()), ("empty".into(), String::new())],
            ..Default::default()
        };
        let a = p.clone().into_alert(now, Duration::from_secs(300)).unwrap();
        assert_eq!(a.starts_at, now);
        assert_eq!(a.ends_at, Some(t("2024-06-01T10:05:00Z")));
        assert!(a.timeout);
        assert_eq!(a.labels.len(), 1);

        let mut store = AlertStore::new();
        store.put(a.clone());
        // Re-sent a minute later: the earlier start is kept, the new timeout end applies.
        let later = t("2024-06-01T10:01:00Z");
        let b = p.clone().into_alert(later, Duration::from_secs(300)).unwrap();
        let m = store.put(b);
        assert_eq!(m.starts_at, now);
        assert_eq!(m.ends_at, Some(t("2024-06-01T10:06:00Z")));
        // Resolved explicitly.
        let r = PostableAlert {
            ends_at: Some(t("2024-06-01T10:02:00Z")),
            ..p
        }
        .into_alert(t("2024-06-01T10:02:00Z"), Duration::from_secs(300))
        .unwrap();
        let m = store.put(r);
        assert!(m.resolved_at(t("2024-06-01T10:02:00Z")));
        assert_eq!(m.starts_at, now);
    }

    #[test]
    fn decode_matches_the_value_based_reading() {
        let body = br#"[{"labels": {"b": "2", "a": "1", "empty": "", "a": "3"},
            "annotations": {"summary": "s", "none": "", "x": "y", "x": ""},
            "startsAt": "2024-06-01T10:00:00.5+02:00", "endsAt": null,
            "generatorURL": "http://g/\u00e9", "status": {"state": "x"}},
            {"labels": {"alertname": "Y"}, "annotations": null, "startsAt": "",
             "endsAt": "0001-01-01T00:00:00Z", "generatorURL": 7}]"#;
        let v = decode_postable_alerts(body).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].labels, Labels::from_pairs([("a", "3"), ("b", "2")]));
        assert_eq!(
            v[0].annotations,
            BTreeMap::from([("summary".to_string(), "s".to_string())])
        );
        assert_eq!(v[0].starts_at, Some(t("2024-06-01T08:00:00.5Z")));
        assert_eq!(v[0].ends_at, None);
        assert_eq!(v[0].generator_url, "http://g/\u{e9}");
        assert_eq!(v[1].labels, Labels::from_pairs([("alertname", "Y")]));
        assert!(v[1].annotations.is_empty());
        assert_eq!((v[1].starts_at, v[1].ends_at), (None, None));
        assert_eq!(v[1].generator_url, "");
        // The same defaults and checks as a PostableAlert.
        let now = t("2024-06-01T10:00:00Z");
        let a = v[1].clone().into_alert(now, Duration::from_secs(300)).unwrap();
        assert!(a.timeout && a.starts_at == now);
        assert_eq!(decode_postable_alerts(b"[]").unwrap(), Vec::new());
        assert_eq!(decode_postable_alerts(b" [ ] ").unwrap(), Vec::new());
    }

    #[test]
    fn decode_errors_name_the_alert() {
        let err = |b: &str| decode_postable_alerts(b.as_bytes()).unwrap_err();
        assert!(err("[").starts_with("body is not JSON: "), "{}", err("["));
        assert!(err("[] x").starts_with("body is not JSON: "));
        assert_eq!(
            decode_postable_alerts(b"[{\"labels\":\n {\"a\": \"\xff\"}}]").unwrap_err(),
            "body is not JSON: invalid UTF-8 at line 2 column 9"
        );
        assert_eq!(err(r#"{"labels": {}}"#), "body must be a JSON array of alerts");
        assert_eq!(err(r#""x""#), "body must be a JSON array of alerts");
        let e = err(r#"[{"labels": {"a": "1"}}, {"labels": {"a": 1}}]"#);
        assert!(e.starts_with("alert 1: labels.a must be a string"), "{e}");
        let e = err(r#"[{"labels": ["a"]}]"#);
        assert!(e.starts_with("alert 0: labels must be an object"), "{e}");
        let e = err(r#"[{"annotations": {"s": true}}]"#);
        assert!(e.starts_with("alert 0: annotations.s must be a string"), "{e}");
        let e = err(r#"[{"labels": {"a": "1"}, "startsAt": "yesterday"}]"#);
        assert!(e.starts_with("alert 0: startsAt: "), "{e}");
        let e = err(r#"[{"labels": {"a": "1"}}, {"labels": {"a": "1"}, "endsAt": 5}]"#);
        assert!(e.starts_with("alert 1: endsAt must be an RFC 3339 string"), "{e}");
        let e = err(r#"[{"labels": {"a": "1"}}, 3]"#);
        assert!(e.starts_with("alert 1: "), "{e}");
        // Checked when ingested, as before: missing labels, invalid names, end before start.
        let now = t("2024-06-01T10:00:00Z");
        let ingest = |b: &str| {
            decode_postable_alerts(b.as_bytes())
                .unwrap()
                .remove(0)
                .into_alert(now, Duration::from_secs(300))
        };
        assert_eq!(
            ingest(r#"[{"labels": {"a": ""}}]"#).unwrap_err(),
            "at least one label pair required"
        );
        assert_eq!(
            ingest(r#"[{"labels": {"a-b": "1"}}]"#).unwrap_err(),
            r#"invalid name "a-b""#
        );
        assert_eq!(
            ingest(r#"[{"labels": {"a": "1"}, "startsAt": "2024-06-01T10:00:00Z", "endsAt": "2024-06-01T09:00:00Z"}]"#)
                .unwrap_err(),
            "start time must be before end time"
        );
    }

    #[test]
    fn shared_store_versions() {
        let now = t("2024-06-01T10:00:00Z");
        let mut store = AlertStore::new();
        let p = PostableAlert {
            labels: vec![("alertname".into(), "X".into())],
            ..Default::default()
        };
        let (fp, a) = store.put_shared(p.clone().into_alert(now, Duration::from_secs(300)).unwrap());
        assert_eq!(fp, a.fingerprint());
        assert_eq!(store.get(fp), Some(&*a));
        assert_eq!(fingerprint_of(a.labels.iter()), fp);
    }

    #[test]
    fn alert_order_prefers_job_then_instance() {
        let mk = |pairs: &[(&str, &str)]| Alert {
            labels: Labels::from_pairs(pairs.iter().copied()),
            annotations: BTreeMap::new(),
            starts_at: t("2024-01-01T00:00:00Z"),
            ends_at: None,
            generator_url: String::new(),
            updated_at: t("2024-01-01T00:00:00Z"),
            timeout: false,
        };
        let mut v = [
            mk(&[("a", "2")]),
            mk(&[("job", "b")]),
            mk(&[("job", "a")]),
            mk(&[("a", "1")]),
        ];
        v.sort_by(alert_order);
        let names: Vec<String> = v.iter().map(|a| labelset_string(&a.labels)).collect();
        assert_eq!(names, vec![r#"{job="a"}"#, r#"{job="b"}"#, r#"{a="1"}"#, r#"{a="2"}"#]);
    }
}
