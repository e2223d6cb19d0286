//! Decoding of Prometheus remote-write 1.0 request bodies: what a Prometheus server or agent
//! `remote_write` POSTs (`Content-Encoding: snappy`, `Content-Type: application/x-protobuf`).
//!
//! The body is the snappy *block* format (not the framed one) of a protobuf `prometheus.WriteRequest`
//! (prometheus/prompb/remote.proto and types.proto). Only the parts we use are decoded, by hand, so
//! that no protobuf code generator is needed:
//!
//! ```text
//! WriteRequest { repeated TimeSeries timeseries = 1; reserved 2; repeated MetricMetadata metadata = 3; }
//! TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2;
//!                repeated Exemplar exemplars = 3; repeated Histogram histograms = 4; }
//! Label        { string name = 1; string value = 2; }
//! Sample       { double value = 1; int64 timestamp = 2; }
//! ```
//!
//! Exemplars, metadata and unknown fields are skipped; native histograms are only counted.
//! The input is untrusted: every length is checked, nothing here can panic.

use std::sync::Arc;

use crate::labels::{Label, Labels};

/// One series of a write request, decoded whole (the tests' form): its labels (sorted, empty values dropped), its float samples in
/// the order they came, and how many native histograms it carried (not decoded).
#[cfg(test)]
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WriteSeries {
    pub(crate) labels: Labels,
    /// `(timestamp in ms, value)`; values are bit-exact, so the staleness NaN survives.
    pub(crate) samples: Vec<(i64, f64)>,
    pub(crate) histograms: usize,
}

/// Why a remote-write body was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RemoteWriteError {
    #[error("snappy: {0}")]
    Snappy(#[from] snap::Error),
    #[error("decoded body would be {declared} bytes, over the limit of {limit} bytes")]
    DecodedTooLarge { declared: usize, limit: usize },
    #[error("truncated protobuf {message}")]
    Truncated { message: &'static str },
    #[error("malformed varint in protobuf {message} (longer than 10 bytes or over 64 bits)")]
    BadVarint { message: &'static str },
    #[error("invalid field number {field} in protobuf {message}")]
    BadFieldNumber { message: &'static str, field: u64 },
    #[error("bad wire type {wire_type} for field {field} in protobuf {message}")]
    BadWireType {
        message: &'static str,
        field: u64,
        wire_type: u8,
    },
    #[error("invalid UTF-8 in a label {part}")]
    InvalidUtf8 { part: &'static str },
    #[error("empty label name")]
    EmptyLabelName,
    #[error("duplicate label name {name:?} in one series")]
    DuplicateLabel { name: String },
}

type Result<T> = std::result::Result<T, RemoteWriteError>;

/// One series of a write request as it lies in the decoded buffer: its labels sorted and
/// checked, still borrowed (empty values included), so that a receiver that keeps few of the
/// series builds label sets only for those.
pub(crate) struct SeriesRef<'a> {
    pairs: Vec<(&'a str, &'a str)>,
    pub(crate) samples: Vec<(i64, f64)>,
    pub(crate) histograms: usize,
}

impl<'a> SeriesRef<'a> {
    /// A label's value; an absent label reads as "", as in PromQL.
    pub(crate) fn get(&self, name: &str) -> &'a str {
        self.pairs
            .binary_search_by(|(n, _)| (*n).cmp(name))
            .map(|i| self.pairs[i].1)
            .unwrap_or("")
    }

    /// The labels with a value (`Labels` reads an empty value as an absent label).
    fn present(&self) -> impl Iterator<Item = &(&'a str, &'a str)> + '_ {
        self.pairs.iter().filter(|(_, value)| !value.is_empty())
    }

    /// [`Labels::hash64`] of [`SeriesRef::labels`], without building them.
    pub(crate) fn hash64(&self) -> u64 {
        if self.pairs.iter().all(|(_, v)| !v.is_empty()) {
            crate::labels::hash64_of_pairs(&self.pairs)
        } else {
            crate::labels::hash64_of_pairs(&self.present().copied().collect::<Vec<_>>())
        }
    }

    /// Whether `labels` is this series' label set.
    pub(crate) fn is(&self, labels: &Labels) -> bool {
        let have = labels.as_slice();
        let mut n = 0;
        for (name, value) in self.present() {
            match have.get(n) {
                Some(l) if &*l.name == *name && &*l.value == *value => n += 1,
                _ => return false,
            }
        }
        n == have.len()
    }

    /// The label set, empty values dropped (`Labels` reads an empty value as an absent label).
    pub(crate) fn labels(&self) -> Labels {
        let labels = self
            .pairs
            .iter()
            .filter(|(_, value)| !value.is_empty())
            .map(|(name, value)| Label {
                name: Arc::from(*name),
                value: Arc::from(*value),
            })
            .collect();
        Labels::from_sorted(labels)
    }
}

/// Decodes a remote-write body: snappy block format around a protobuf `WriteRequest`.
///
/// `max_decoded` bounds the decompressed size; it is checked against the size the snappy header
/// declares before anything is allocated, since a small hostile body can declare gigabytes.
#[cfg(test)]
pub(crate) fn decode(body: &[u8], max_decoded: usize) -> Result<Vec<WriteSeries>> {
    let mut out = Vec::new();
    decode_each(body, max_decoded, &mut Vec::new(), |s| out.push(s.into()))?;
    Ok(out)
}

/// The request body a sender would POST for `series` (snappy around the protobuf).
#[cfg(test)]
pub(crate) fn encode(series: &[WriteSeries]) -> Vec<u8> {
    let encoded: Vec<Vec<u8>> = series
        .iter()
        .map(|s| {
            let pairs: Vec<(&str, &str)> = s.labels.iter().map(|l| (&*l.name, &*l.value)).collect();
            let bits: Vec<(i64, u64)> = s.samples.iter().map(|&(t, v)| (t, v.to_bits())).collect();
            let mut out = tests::series(&pairs, &bits);
            for _ in 0..s.histograms {
                tests::bytes_field(&mut out, 4, &[]);
            }
            out
        })
        .collect();
    tests::compress(&tests::request(&encoded))
}

#[cfg(test)]
impl From<SeriesRef<'_>> for WriteSeries {
    fn from(s: SeriesRef<'_>) -> Self {
        WriteSeries {
            labels: s.labels(),
            samples: s.samples,
            histograms: s.histograms,
        }
    }
}

/// [`decode`], handing each series to `each` as it is parsed, decompressed into `buf` (a
/// receiver reuses one: a fresh buffer a request costs its zeroing and, freed, the allocator's
/// consolidation). The series borrow `buf`. The whole body is checked: a malformed series fails
/// the request, even after earlier series were handed over, so a caller that stores as it goes
/// must treat an error as a partial write.
pub(crate) fn decode_each<'a>(
    body: &[u8],
    max_decoded: usize,
    buf: &'a mut Vec<u8>,
    each: impl FnMut(SeriesRef<'a>),
) -> Result<()> {
    let declared = snap::raw::decompress_len(body)?;
    if declared > max_decoded {
        return Err(RemoteWriteError::DecodedTooLarge {
            declared,
            limit: max_decoded,
        });
    }
    if buf.len() < declared {
        buf.resize(declared, 0);
    }
    let n = snap::raw::Decoder::new().decompress(body, &mut buf[..declared])?;
    let raw: &'a [u8] = buf;
    parse(&raw[..n], each)
}

// Protobuf wire types (https://protobuf.dev/programming-guides/encoding/).
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// The largest field number protobuf allows (2^29 - 1).
const MAX_FIELD: u64 = (1 << 29) - 1;

/// Parses an uncompressed `WriteRequest`, handing each series to `each`.
fn parse<'a>(mut buf: &'a [u8], mut each: impl FnMut(SeriesRef<'a>)) -> Result<()> {
    const MSG: &str = "WriteRequest";
    while !buf.is_empty() {
        let (field, wire_type) = read_key(&mut buf, MSG)?;
        match field {
            1 => {
                expect_wire_type(MSG, field, wire_type, LEN)?;
                each(parse_series(read_len(&mut buf, MSG)?)?);
            }
            // Metadata (field 3) is of no use to us; the reserved field 2 and anything newer is
            // skipped like any unknown field.
            _ => skip(&mut buf, MSG, field, wire_type)?,
        }
    }
    Ok(())
}

/// Parses one `TimeSeries`.
fn parse_series(mut buf: &[u8]) -> Result<SeriesRef<'_>> {
    const MSG: &str = "TimeSeries";
    // Labels stay borrowed from the buffer until the set is known to be valid.
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    let mut samples = Vec::new();
    let mut histograms = 0usize;
    while !buf.is_empty() {
        let (field, wire_type) = read_key(&mut buf, MSG)?;
        match field {
            1 => {
                expect_wire_type(MSG, field, wire_type, LEN)?;
                pairs.push(parse_label(read_len(&mut buf, MSG)?)?);
            }
            2 => {
                expect_wire_type(MSG, field, wire_type, LEN)?;
                samples.push(parse_sample(read_len(&mut buf, MSG)?)?);
            }
            // Exemplars (3) are dropped; histograms (4) are counted so that the caller can tell
            // a native-histogram series from an empty one, but not decoded.
            3 | 4 => {
                expect_wire_type(MSG, field, wire_type, LEN)?;
                read_len(&mut buf, MSG)?;
                if field == 4 {
                    histograms = histograms.saturating_add(1);
                }
            }
            _ => skip(&mut buf, MSG, field, wire_type)?,
        }
    }
    Ok(SeriesRef {
        pairs: check_labels(pairs)?,
        samples,
        histograms,
    })
}

/// Sorts a series' labels and refuses a name given twice.
fn check_labels<'a>(mut pairs: Vec<(&'a str, &'a str)>) -> Result<Vec<(&'a str, &'a str)>> {
    // Senders should sort labels but are not required to.
    pairs.sort_unstable_by(|a, b| a.0.cmp(b.0));
    if let Some(w) = pairs.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(RemoteWriteError::DuplicateLabel {
            name: w[0].0.to_owned(),
        });
    }
    Ok(pairs)
}

/// Parses one `Label` into borrowed name and value; proto3 defaults both to "".
fn parse_label(mut buf: &[u8]) -> Result<(&str, &str)> {
    const MSG: &str = "Label";
    let mut name: &[u8] = b"";
    let mut value: &[u8] = b"";
    while !buf.is_empty() {
        let (field, wire_type) = read_key(&mut buf, MSG)?;
        match field {
            // A repeated scalar field: the last one wins, as in protobuf.
            1 => {
                expect_wire_type(MSG, field, wire_type, LEN)?;
                name = read_len(&mut buf, MSG)?;
            }
            2 => {
                expect_wire_type(MSG, field, wire_type, LEN)?;
                value = read_len(&mut buf, MSG)?;
            }
            _ => skip(&mut buf, MSG, field, wire_type)?,
        }
    }
    let name = std::str::from_utf8(name).map_err(|_| RemoteWriteError::InvalidUtf8 { part: "name" })?;
    let value = std::str::from_utf8(value).map_err(|_| RemoteWriteError::InvalidUtf8 { part: "value" })?;
    if name.is_empty() {
        return Err(RemoteWriteError::EmptyLabelName);
    }
    Ok((name, value))
}

/// Parses one `Sample` into `(timestamp, value)`; proto3 defaults both to 0.
fn parse_sample(mut buf: &[u8]) -> Result<(i64, f64)> {
    const MSG: &str = "Sample";
    let mut value = 0f64;
    let mut timestamp = 0i64;
    while !buf.is_empty() {
        let (field, wire_type) = read_key(&mut buf, MSG)?;
        match field {
            1 => {
                expect_wire_type(MSG, field, wire_type, FIXED64)?;
                // From the bits, never through arithmetic: the staleness marker is one exact NaN.
                value = f64::from_bits(read_fixed64(&mut buf, MSG)?);
            }
            2 => {
                expect_wire_type(MSG, field, wire_type, VARINT)?;
                // int64 is two's complement on the wire (not zigzag): the cast is the decoding.
                timestamp = read_varint(&mut buf, MSG)? as i64;
            }
            _ => skip(&mut buf, MSG, field, wire_type)?,
        }
    }
    Ok((timestamp, value))
}

fn expect_wire_type(message: &'static str, field: u64, wire_type: u8, want: u8) -> Result<()> {
    if wire_type == want {
        Ok(())
    } else {
        Err(RemoteWriteError::BadWireType {
            message,
            field,
            wire_type,
        })
    }
}

/// Reads a field key: its field number and wire type.
fn read_key(buf: &mut &[u8], message: &'static str) -> Result<(u64, u8)> {
    let key = read_varint(buf, message)?;
    let field = key >> 3;
    // The mask keeps the value under 8, so the cast loses nothing.
    let wire_type = (key & 7) as u8;
    if field == 0 || field > MAX_FIELD {
        return Err(RemoteWriteError::BadFieldNumber { message, field });
    }
    Ok((field, wire_type))
}

/// Skips the value of a field we do not decode. Groups (wire types 3 and 4) are deprecated and
/// appear nowhere in remote write, so they, and the undefined types 6 and 7, are errors.
fn skip(buf: &mut &[u8], message: &'static str, field: u64, wire_type: u8) -> Result<()> {
    match wire_type {
        VARINT => read_varint(buf, message).map(drop),
        FIXED64 => take(buf, 8, message).map(drop),
        LEN => read_len(buf, message).map(drop),
        FIXED32 => take(buf, 4, message).map(drop),
        _ => Err(RemoteWriteError::BadWireType {
            message,
            field,
            wire_type,
        }),
    }
}

/// Reads a base-128 varint of at most 10 bytes whose value fits in 64 bits.
fn read_varint(buf: &mut &[u8], message: &'static str) -> Result<u64> {
    let mut value = 0u64;
    for (i, &byte) in buf.iter().enumerate() {
        // Ten 7-bit groups cover 64 bits; the tenth may only hold the top bit.
        if i == 9 && byte > 1 {
            return Err(RemoteWriteError::BadVarint { message });
        }
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *buf = buf.get(i + 1..).unwrap_or_default();
            return Ok(value);
        }
    }
    Err(RemoteWriteError::Truncated { message })
}

fn read_fixed64(buf: &mut &[u8], message: &'static str) -> Result<u64> {
    let bytes = take(buf, 8, message)?;
    let bytes: [u8; 8] = bytes.try_into().map_err(|_| RemoteWriteError::Truncated { message })?;
    Ok(u64::from_le_bytes(bytes))
}

/// Reads a length-delimited value (length varint, then that many bytes).
fn read_len<'a>(buf: &mut &'a [u8], message: &'static str) -> Result<&'a [u8]> {
    let len = read_varint(buf, message)?;
    // A length that does not even fit in usize certainly runs past the buffer.
    let len = usize::try_from(len).map_err(|_| RemoteWriteError::Truncated { message })?;
    take(buf, len, message)
}

/// Splits off the next `n` bytes, or fails if fewer are left.
fn take<'a>(buf: &mut &'a [u8], n: usize, message: &'static str) -> Result<&'a [u8]> {
    let (head, rest) = buf.split_at_checked(n).ok_or(RemoteWriteError::Truncated { message })?;
    *buf = rest;
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole request, series by series (the visitor's answers collected).
    fn parse(raw: &[u8]) -> Result<Vec<WriteSeries>> {
        let mut out = Vec::new();
        super::parse(raw, |s| out.push(s.into()))?;
        Ok(out)
    }

    /// Prometheus' staleness marker: a NaN that must survive bit for bit.
    const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

    // A tiny protobuf encoder, just enough to build requests by hand.

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn key(out: &mut Vec<u8>, field: u64, wire_type: u8) {
        varint(out, field << 3 | u64::from(wire_type));
    }

    fn varint_field(out: &mut Vec<u8>, field: u64, v: u64) {
        key(out, field, VARINT);
        varint(out, v);
    }

    fn fixed64_field(out: &mut Vec<u8>, field: u64, v: u64) {
        key(out, field, FIXED64);
        out.extend_from_slice(&v.to_le_bytes());
    }

    fn fixed32_field(out: &mut Vec<u8>, field: u64, v: u32) {
        key(out, field, FIXED32);
        out.extend_from_slice(&v.to_le_bytes());
    }

    pub(super) fn bytes_field(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
        key(out, field, LEN);
        varint(out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    }

    /// One unknown field of each skippable wire type.
    fn unknown_fields(out: &mut Vec<u8>) {
        varint_field(out, 100, u64::MAX);
        fixed64_field(out, 101, 7);
        bytes_field(out, 102, b"ignored");
        fixed32_field(out, 103, 9);
    }

    fn label(name: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        bytes_field(&mut out, 1, name);
        bytes_field(&mut out, 2, value);
        out
    }

    fn sample(ts: i64, value_bits: u64) -> Vec<u8> {
        let mut out = Vec::new();
        fixed64_field(&mut out, 1, value_bits);
        varint_field(&mut out, 2, ts as u64);
        out
    }

    pub(super) fn series(labels: &[(&str, &str)], samples: &[(i64, u64)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (n, v) in labels {
            bytes_field(&mut out, 1, &label(n.as_bytes(), v.as_bytes()));
        }
        for &(ts, bits) in samples {
            bytes_field(&mut out, 2, &sample(ts, bits));
        }
        out
    }

    pub(super) fn request(series: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for s in series {
            bytes_field(&mut out, 1, s);
        }
        out
    }

    pub(super) fn compress(raw: &[u8]) -> Vec<u8> {
        snap::raw::Encoder::new().compress_vec(raw).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(pairs.iter().copied())
    }

    fn bits(samples: &[(i64, f64)]) -> Vec<(i64, u64)> {
        samples.iter().map(|&(t, v)| (t, v.to_bits())).collect()
    }

    /// Two series in one request, with the labels of the first out of order.
    fn two_series() -> Vec<u8> {
        request(&[
            series(
                &[("job", "node"), ("__name__", "up"), ("instance", "a:9100")],
                &[(1_000, 1f64.to_bits()), (-5, 0.5f64.to_bits()), (3_000, STALE_NAN)],
            ),
            series(
                &[("__name__", "temp"), ("zone", "b")],
                &[(i64::MIN, (-2.5f64).to_bits())],
            ),
        ])
    }

    #[test]
    fn decodes_two_series() {
        let got = decode(&compress(&two_series()), 1 << 20).unwrap();
        assert_eq!(got.len(), 2);

        assert_eq!(
            got[0].labels,
            labels(&[("__name__", "up"), ("instance", "a:9100"), ("job", "node")])
        );
        let names: Vec<&str> = got[0].labels.iter().map(|l| &*l.name).collect();
        assert_eq!(names, ["__name__", "instance", "job"], "labels end up sorted");
        assert_eq!(
            bits(&got[0].samples),
            [(1_000, 1f64.to_bits()), (-5, 0.5f64.to_bits()), (3_000, STALE_NAN)],
            "order kept, negative timestamp and staleness NaN exact"
        );
        assert_eq!(got[0].histograms, 0);

        assert_eq!(got[1].labels, labels(&[("__name__", "temp"), ("zone", "b")]));
        assert_eq!(bits(&got[1].samples), [(i64::MIN, (-2.5f64).to_bits())]);
    }

    #[test]
    fn empty_label_values_are_dropped() {
        let raw = request(&[series(&[("__name__", "up"), ("gone", "")], &[(1, 1f64.to_bits())])]);
        let got = parse(&raw).unwrap();
        assert_eq!(got[0].labels, labels(&[("__name__", "up")]));
    }

    #[test]
    fn a_series_is_known_by_its_labels_without_building_them() {
        let raw = request(&[
            series(
                &[("job", "node"), ("__name__", "up"), ("gone", "")],
                &[(1, 1f64.to_bits())],
            ),
            series(
                &[("__name__", "up"), ("job", "node"), ("zone", "b")],
                &[(1, 1f64.to_bits())],
            ),
        ]);
        let mut seen = Vec::new();
        super::parse(&raw, |s| {
            seen.push((
                s.hash64(),
                s.labels(),
                s.is(&labels(&[("__name__", "up"), ("job", "node")])),
            ))
        })
        .unwrap();
        // The first (its empty value dropped) is `up{job="node"}`; the second has one label more.
        assert_eq!(seen[0].0, seen[0].1.hash64());
        assert!(seen[0].2);
        assert_eq!(seen[1].0, seen[1].1.hash64());
        assert!(!seen[1].2);
        assert_ne!(seen[0].0, seen[1].0);
    }

    #[test]
    fn a_reused_buffer_decodes_a_smaller_body_after_a_larger_one() {
        let mut buf = Vec::new();
        let mut names = Vec::new();
        decode_each(&compress(&two_series()), 1 << 20, &mut buf, |s| {
            names.push(s.get("__name__").to_string())
        })
        .unwrap();
        let small = request(&[series(&[("__name__", "x")], &[(1, 1f64.to_bits())])]);
        decode_each(&compress(&small), 1 << 20, &mut buf, |s| {
            names.push(s.get("__name__").to_string())
        })
        .unwrap();
        assert_eq!(
            names,
            ["up", "temp", "x"],
            "nothing of the larger body read after the smaller one"
        );
    }

    #[test]
    fn skips_unknown_fields_of_every_wire_type() {
        let mut s = Vec::new();
        unknown_fields(&mut s);
        bytes_field(&mut s, 1, &label(b"__name__", b"up"));
        unknown_fields(&mut s);
        let mut smp = Vec::new();
        unknown_fields(&mut smp);
        smp.extend(sample(42, 2f64.to_bits()));
        unknown_fields(&mut smp);
        bytes_field(&mut s, 2, &smp);
        let mut lbl = label(b"job", b"x");
        unknown_fields(&mut lbl);
        bytes_field(&mut s, 1, &lbl);

        let mut raw = Vec::new();
        unknown_fields(&mut raw);
        bytes_field(&mut raw, 2, b"reserved field");
        bytes_field(&mut raw, 1, &s);
        unknown_fields(&mut raw);

        let got = decode(&compress(&raw), 1 << 20).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].labels, labels(&[("__name__", "up"), ("job", "x")]));
        assert_eq!(bits(&got[0].samples), [(42, 2f64.to_bits())]);
    }

    #[test]
    fn skips_exemplars_and_metadata() {
        let mut exemplar = Vec::new();
        bytes_field(&mut exemplar, 1, &label(b"trace_id", b"abc"));
        fixed64_field(&mut exemplar, 2, 1f64.to_bits());
        varint_field(&mut exemplar, 3, 5);
        let mut s = series(&[("__name__", "up")], &[(7, 3f64.to_bits())]);
        bytes_field(&mut s, 3, &exemplar);

        let mut metadata = Vec::new();
        varint_field(&mut metadata, 1, 1);
        bytes_field(&mut metadata, 2, b"up");
        bytes_field(&mut metadata, 4, b"help text");
        bytes_field(&mut metadata, 5, b"");

        let mut raw = Vec::new();
        bytes_field(&mut raw, 3, &metadata);
        bytes_field(&mut raw, 1, &s);
        bytes_field(&mut raw, 3, &metadata);

        let got = parse(&raw).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].labels, labels(&[("__name__", "up")]));
        assert_eq!(bits(&got[0].samples), [(7, 3f64.to_bits())]);
        assert_eq!(got[0].histograms, 0);
    }

    #[test]
    fn counts_histograms_and_keeps_samples() {
        let mut histogram = Vec::new();
        varint_field(&mut histogram, 1, 10); // count_int
        fixed64_field(&mut histogram, 3, 4.5f64.to_bits()); // sum
        let mut s = series(&[("__name__", "latency")], &[(1, 1f64.to_bits())]);
        bytes_field(&mut s, 4, &histogram);
        bytes_field(&mut s, 4, &histogram);
        s.extend(series(&[], &[(2, 2f64.to_bits())]));
        bytes_field(&mut s, 4, &[]);

        let got = parse(&request(&[s])).unwrap();
        assert_eq!(got[0].histograms, 3);
        assert_eq!(bits(&got[0].samples), [(1, 1f64.to_bits()), (2, 2f64.to_bits())]);
    }

    #[test]
    fn truncated_input_is_an_error_at_every_length() {
        // A message with every kind of field, so that each reader meets a cut.
        let mut s = series(
            &[("__name__", "up"), ("job", "node")],
            &[(-1_000, STALE_NAN), (i64::MAX, 0)],
        );
        bytes_field(&mut s, 3, b"exemplar");
        bytes_field(&mut s, 4, b"histogram");
        unknown_fields(&mut s);
        let mut raw = Vec::new();
        // Where each top-level field ends: a protobuf message may stop at any field boundary, so
        // a prefix that ends exactly there is a shorter valid request, not a truncated one.
        let mut boundaries = vec![0];
        for field in [s.clone(), series(&[("__name__", "b")], &[(5, 5)])] {
            bytes_field(&mut raw, 1, &field);
            boundaries.push(raw.len());
        }
        varint_field(&mut raw, 100, u64::MAX);
        boundaries.push(raw.len());
        fixed64_field(&mut raw, 101, 7);
        boundaries.push(raw.len());
        fixed32_field(&mut raw, 103, 9);
        assert_eq!(parse(&raw).unwrap().len(), 2);

        for len in 0..raw.len() {
            let got = parse(&raw[..len]);
            if boundaries.contains(&len) {
                assert!(got.is_ok(), "prefix of {len} bytes ends on a field boundary: {got:?}");
            } else {
                assert!(
                    matches!(got, Err(RemoteWriteError::Truncated { .. })),
                    "prefix of {len} bytes: {got:?}"
                );
            }
        }
    }

    #[test]
    fn every_cut_inside_a_series_is_truncated() {
        // One series as the whole request: each cut of it lands inside the series' length.
        let raw = request(&[series(&[("__name__", "up")], &[(-7, STALE_NAN)])]);
        for len in 1..raw.len() {
            let got = parse(&raw[..len]);
            assert!(
                matches!(got, Err(RemoteWriteError::Truncated { .. })),
                "prefix of {len} bytes: {got:?}"
            );
        }
    }

    #[test]
    fn refuses_decoded_size_over_the_limit() {
        let raw = two_series();
        let body = compress(&raw);
        assert!(decode(&body, raw.len()).is_ok());
        let err = decode(&body, raw.len() - 1).unwrap_err();
        assert!(matches!(err, RemoteWriteError::DecodedTooLarge { declared, limit }
            if declared == raw.len() && limit == raw.len() - 1));

        // A header alone that declares 4 GiB is refused from the header, before any allocation.
        let mut header = Vec::new();
        varint(&mut header, u64::from(u32::MAX));
        let err = decode(&header, 1 << 20).unwrap_err();
        assert!(matches!(err, RemoteWriteError::DecodedTooLarge { declared, .. } if declared == u32::MAX as usize));
        assert!(err.to_string().contains(&u32::MAX.to_string()), "{err}");
    }

    #[test]
    fn refuses_bad_snappy() {
        // Declares 10 bytes, then a copy from before the start of the output.
        let err = decode(&[10, 0b0000_0001, 0xff], 1 << 20).unwrap_err();
        assert!(matches!(err, RemoteWriteError::Snappy(_)), "{err:?}");
        // The framed format is not what remote write sends.
        let mut framed = snap::write::FrameEncoder::new(Vec::new());
        std::io::Write::write_all(&mut framed, &two_series()).unwrap();
        let framed = framed.into_inner().unwrap();
        assert!(decode(&framed, 1 << 20).is_err());
        // No bytes at all is not a snappy block either.
        assert!(matches!(decode(&[], 1 << 20), Err(RemoteWriteError::Snappy(_))));
    }

    #[test]
    fn refuses_group_wire_types() {
        for wire_type in [3, 4] {
            let mut raw = Vec::new();
            key(&mut raw, 9, wire_type);
            let err = parse(&raw).unwrap_err();
            assert!(matches!(err, RemoteWriteError::BadWireType { field: 9, wire_type: w, .. } if w == wire_type));
            assert_eq!(
                err.to_string(),
                format!("bad wire type {wire_type} for field 9 in protobuf WriteRequest")
            );

            // And inside a series.
            let mut s = series(&[("__name__", "up")], &[]);
            key(&mut s, 5, wire_type);
            let err = parse(&request(&[s])).unwrap_err();
            assert!(matches!(
                err,
                RemoteWriteError::BadWireType {
                    message: "TimeSeries",
                    field: 5,
                    ..
                }
            ));
        }
    }

    #[test]
    fn refuses_known_field_with_wrong_wire_type() {
        let mut smp = Vec::new();
        fixed32_field(&mut smp, 1, 0); // value must be a fixed64
        let mut s = series(&[("__name__", "up")], &[]);
        bytes_field(&mut s, 2, &smp);
        let err = parse(&request(&[s])).unwrap_err();
        assert!(matches!(
            err,
            RemoteWriteError::BadWireType {
                message: "Sample",
                field: 1,
                wire_type: FIXED32
            }
        ));
    }

    #[test]
    fn refuses_field_number_zero_and_overlong_varints() {
        assert!(matches!(
            parse(&[0x00]),
            Err(RemoteWriteError::BadFieldNumber { field: 0, .. })
        ));
        let overlong = [0xff; 11];
        assert!(matches!(parse(&overlong), Err(RemoteWriteError::BadVarint { .. })));
        // A length too large for the buffer (even for usize on 32 bits) is a truncation.
        let mut raw = Vec::new();
        key(&mut raw, 1, LEN);
        varint(&mut raw, u64::MAX);
        assert!(matches!(parse(&raw), Err(RemoteWriteError::Truncated { .. })));
    }

    #[test]
    fn refuses_duplicate_label_names() {
        let raw = request(&[series(&[("job", "a"), ("__name__", "up"), ("job", "b")], &[])]);
        let err = parse(&raw).unwrap_err();
        assert!(matches!(&err, RemoteWriteError::DuplicateLabel { name } if name == "job"));
        // Even when one of the two is empty (and so would be dropped).
        let raw = request(&[series(&[("job", "a"), ("job", "")], &[])]);
        assert!(matches!(parse(&raw), Err(RemoteWriteError::DuplicateLabel { .. })));
    }

    #[test]
    fn refuses_empty_label_name() {
        let raw = request(&[series(&[("", "x")], &[])]);
        assert!(matches!(parse(&raw), Err(RemoteWriteError::EmptyLabelName)));
    }

    #[test]
    fn refuses_invalid_utf8() {
        for (name, value, part) in [(&b"\xffname"[..], &b"v"[..], "name"), (b"name", b"v\xc3", "value")] {
            let mut s = Vec::new();
            bytes_field(&mut s, 1, &label(name, value));
            let err = parse(&request(&[s])).unwrap_err();
            assert!(
                matches!(err, RemoteWriteError::InvalidUtf8 { part: p } if p == part),
                "{err:?}"
            );
        }
    }

    #[test]
    fn empty_request_has_no_series() {
        let body = compress(&[]);
        assert_eq!(body, [0], "snappy of nothing is one zero length byte");
        assert!(decode(&body, 0).unwrap().is_empty());
    }

    #[test]
    fn series_without_labels_or_samples_decodes() {
        // An empty TimeSeries is valid protobuf; refusing empty label sets is the caller's call.
        let got = parse(&request(&[Vec::new()])).unwrap();
        assert_eq!(
            got,
            [WriteSeries {
                labels: Labels::empty(),
                samples: Vec::new(),
                histograms: 0
            }]
        );
    }
}
