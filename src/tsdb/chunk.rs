//! Gorilla-style sample compression, bit-compatible in spirit with Prometheus' XOR chunk.
//!
//! Timestamps are delta-of-delta encoded (regular scrapes cost one bit per sample) and values
//! are XOR encoded against the previous value (an unchanged value costs one bit, a small change
//! a dozen or so). Values round-trip bit-exactly, so NaN payloads such as Prometheus' staleness
//! marker survive.
//!
//! Stream layout, per sample `i`:
//! - `i == 0`: timestamp as zig-zag varint, value as 64 raw bits;
//! - `i == 1`: timestamp delta as varint, value XOR-encoded;
//! - `i >= 2`: delta-of-delta in one of five buckets (`0`, `10`+14 bits, `110`+17 bits,
//!   `1110`+20 bits, `1111`+64 bits), value XOR-encoded.
//!
//! Timestamp arithmetic wraps, so any sequence of `i64` round-trips, even a non-monotonic one;
//! the store only ever appends increasing timestamps.

/// Prometheus closes a chunk at 120 samples: small enough that a query decodes little it does not
/// need, large enough that per-chunk overhead stays small.
pub(crate) const MAX_SAMPLES_PER_CHUNK: usize = 120;

/// Appends bits most-significant first into a byte vector.
#[derive(Clone, Debug, Default)]
struct BitWriter {
    data: Vec<u8>,
    /// Unused low bits in the last byte of `data` (0 when full or empty).
    free: u32,
}

impl BitWriter {
    #[inline]
    fn write_bit(&mut self, bit: bool) {
        if self.free == 0 {
            self.data.push(0);
            self.free = 8;
        }
        self.free -= 1;
        if bit {
            if let Some(last) = self.data.last_mut() {
                *last |= 1 << self.free;
            }
        }
    }

    /// Writes the low `n` bits of `value` (n <= 64).
    #[inline]
    fn write_bits(&mut self, value: u64, mut n: u32) {
        while n > 0 {
            if self.free == 0 {
                self.data.push(0);
                self.free = 8;
            }
            let take = n.min(self.free);
            let bits = ((value >> (n - take)) & ((1u64 << take) - 1)) as u8;
            self.free -= take;
            n -= take;
            if let Some(last) = self.data.last_mut() {
                *last |= bits << self.free;
            }
        }
    }

    fn write_uvarint(&mut self, mut x: u64) {
        while x >= 0x80 {
            self.write_bits((x as u8 | 0x80) as u64, 8);
            x >>= 7;
        }
        self.write_bits(x, 8);
    }
}

/// Reads bits most-significant first from a 64-bit buffer refilled a word at a time; reads
/// past the end yield zeros (callers know the sample count, so a well-formed stream is never
/// over-read).
#[derive(Clone, Debug)]
struct BitReader<'a> {
    data: &'a [u8],
    /// Next byte of `data` to load into `buf`.
    next: usize,
    /// Unread bits, left-aligned; bits below `avail` are zero or copies of the following bytes.
    buf: u64,
    avail: u32,
}

impl<'a> BitReader<'a> {
    fn new(data: &'a [u8]) -> Self {
        BitReader {
            data,
            next: 0,
            buf: 0,
            avail: 0,
        }
    }

    /// Tops `buf` up to at least 57 valid bits while data remains.
    #[inline(always)]
    fn refill(&mut self) {
        if let Some(bytes) = self.data.get(self.next..self.next + 8) {
            let mut a = [0u8; 8];
            a.copy_from_slice(bytes);
            // Bits beyond the whole bytes counted here are the next bytes' own bits, so loading
            // them again on the following refill ORs identical values.
            self.buf |= u64::from_be_bytes(a) >> self.avail;
            let whole = (64 - self.avail) >> 3;
            self.next += whole as usize;
            self.avail += whole * 8;
        } else {
            while self.avail <= 56 {
                let Some(&b) = self.data.get(self.next) else {
                    return;
                };
                self.buf |= (b as u64) << (56 - self.avail);
                self.next += 1;
                self.avail += 8;
            }
        }
    }

    /// The next bits without consuming them; at least `n <= 56` of them are valid.
    #[inline(always)]
    fn peek(&mut self, n: u32) -> u64 {
        if self.avail < n {
            self.refill();
        }
        self.buf
    }

    #[inline(always)]
    fn skip(&mut self, n: u32) {
        // Callers only skip what they peeked, so `n <= avail`, except at the stream's end.
        let n = n.min(self.avail);
        self.buf = if n >= 64 { 0 } else { self.buf << n };
        self.avail -= n;
    }

    /// Reads `n` bits (1 <= n <= 56) as an unsigned integer.
    #[inline(always)]
    fn read_small(&mut self, n: u32) -> u64 {
        let v = self.peek(n) >> (64 - n);
        self.skip(n);
        v
    }

    /// Reads `n` bits (n <= 64) as an unsigned integer.
    #[inline(always)]
    fn read_bits(&mut self, n: u32) -> u64 {
        match n {
            0 => 0,
            1..=56 => self.read_small(n),
            _ => {
                let hi = self.read_small(n - 32);
                (hi << 32) | self.read_small(32)
            }
        }
    }

    fn read_uvarint(&mut self) -> u64 {
        if self.avail == 0 {
            // Nothing buffered, so the stream is byte-aligned here (a chunk's first timestamp):
            // the bytes are read directly instead of eight bits at a time through the buffer.
            let mut x = 0u64;
            let mut shift = 0u32;
            while let Some(&b) = self.data.get(self.next) {
                self.next += 1;
                if shift < 64 {
                    x |= u64::from(b & 0x7f) << shift;
                }
                if b < 0x80 || shift >= 63 {
                    return x;
                }
                shift += 7;
            }
            return x;
        }
        let mut x = 0u64;
        let mut shift = 0u32;
        loop {
            let b = self.read_bits(8);
            if shift < 64 {
                x |= (b & 0x7f) << shift;
            }
            if b < 0x80 || shift >= 63 {
                return x;
            }
            shift += 7;
        }
    }
}

fn zigzag(x: i64) -> u64 {
    ((x << 1) ^ (x >> 63)) as u64
}

fn unzigzag(x: u64) -> i64 {
    ((x >> 1) as i64) ^ -((x & 1) as i64)
}

/// Whether `dod` fits the bucket of `nbits` signed bits, with Prometheus' asymmetric range.
#[inline]
fn bit_range(dod: i64, nbits: u32) -> bool {
    let half = 1i64 << (nbits - 1);
    -(half - 1) <= dod && dod <= half
}

/// Encoder state carried between appends.
#[derive(Clone, Debug)]
struct EncState {
    t: i64,
    delta: u64,
    v: u64,
    /// Leading zeros of the current XOR window; `0xff` when there is none yet.
    leading: u8,
    trailing: u8,
}

/// An appendable compressed chunk of `(timestamp ms, value)` samples.
#[derive(Clone, Debug)]
pub(crate) struct XorChunk {
    w: BitWriter,
    len: u32,
    min_t: i64,
    max_t: i64,
    st: EncState,
}

impl Default for XorChunk {
    fn default() -> Self {
        Self::new()
    }
}

impl XorChunk {
    pub(crate) fn new() -> Self {
        XorChunk {
            w: BitWriter::default(),
            len: 0,
            min_t: i64::MAX,
            max_t: i64::MIN,
            st: EncState {
                t: 0,
                delta: 0,
                v: 0,
                leading: 0xff,
                trailing: 0,
            },
        }
    }

    /// Appends one sample; the caller guarantees `t` is greater than every earlier timestamp
    /// (other sequences still round-trip, but `min_time`/`max_time` then bound rather than order).
    pub(crate) fn append(&mut self, t: i64, v: f64) {
        let vb = v.to_bits();
        match self.len {
            0 => {
                if self.w.data.capacity() == 0 {
                    // A full chunk of regular data takes ~150-250 bytes: avoid regrowing.
                    self.w.data.reserve(160);
                }
                self.w.write_uvarint(zigzag(t));
                self.w.write_bits(vb, 64);
            }
            1 => {
                let delta = t.wrapping_sub(self.st.t) as u64;
                self.w.write_uvarint(delta);
                self.write_value(vb);
                self.st.delta = delta;
            }
            _ => {
                let delta = t.wrapping_sub(self.st.t) as u64;
                let dod = delta.wrapping_sub(self.st.delta) as i64;
                let w = &mut self.w;
                if dod == 0 {
                    w.write_bit(false);
                } else if bit_range(dod, 14) {
                    w.write_bits(0b10, 2);
                    w.write_bits(dod as u64, 14);
                } else if bit_range(dod, 17) {
                    w.write_bits(0b110, 3);
                    w.write_bits(dod as u64, 17);
                } else if bit_range(dod, 20) {
                    w.write_bits(0b1110, 4);
                    w.write_bits(dod as u64, 20);
                } else {
                    w.write_bits(0b1111, 4);
                    w.write_bits(dod as u64, 64);
                }
                self.write_value(vb);
                self.st.delta = delta;
            }
        }
        self.st.t = t;
        self.st.v = vb;
        self.len += 1;
        self.min_t = self.min_t.min(t);
        self.max_t = self.max_t.max(t);
    }

    fn write_value(&mut self, vb: u64) {
        let xor = vb ^ self.st.v;
        let w = &mut self.w;
        if xor == 0 {
            w.write_bit(false);
            return;
        }
        w.write_bit(true);
        // The leading count is stored in 5 bits, so clamp it.
        let leading = (xor.leading_zeros() as u8).min(31);
        let trailing = xor.trailing_zeros() as u8;
        let st = &mut self.st;
        if st.leading != 0xff && leading >= st.leading && trailing >= st.trailing {
            // Reuse the previous window: no need to spend 11 bits describing it again.
            w.write_bit(false);
            let sig = 64 - st.leading as u32 - st.trailing as u32;
            w.write_bits(xor >> st.trailing, sig);
            return;
        }
        st.leading = leading;
        st.trailing = trailing;
        w.write_bit(true);
        w.write_bits(leading as u64, 5);
        let sig = 64 - leading as u32 - trailing as u32;
        // 64 significant bits are written as 0: a window of 0 bits never occurs.
        w.write_bits((sig & 63) as u64, 6);
        w.write_bits(xor >> trailing, sig);
    }

    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the chunk reached the size at which the store closes it.
    pub(crate) fn is_full(&self) -> bool {
        self.len as usize >= MAX_SAMPLES_PER_CHUNK
    }

    /// Smallest timestamp, or `i64::MAX` for an empty chunk.
    pub(crate) fn min_time(&self) -> i64 {
        self.min_t
    }

    /// Largest timestamp, or `i64::MIN` for an empty chunk.
    pub(crate) fn max_time(&self) -> i64 {
        self.max_t
    }

    /// The timestamp of the last appended sample, if any.
    pub(crate) fn last_time(&self) -> Option<i64> {
        (self.len > 0).then_some(self.st.t)
    }

    /// Bytes of compressed data.
    pub(crate) fn byte_size(&self) -> usize {
        self.w.data.len()
    }

    pub(crate) fn iter(&self) -> ChunkIter<'_> {
        ChunkIter::new(&self.w.data, self.len)
    }

    /// Freezes the chunk into its compact, read-only form.
    pub(crate) fn close(self) -> ClosedChunk {
        ClosedChunk {
            data: self.w.data.into_boxed_slice(),
            len: self.len,
            min_t: self.min_t,
            max_t: self.max_t,
        }
    }
}

/// A read-only chunk: only the compressed bytes and the time bounds (40 bytes of overhead).
#[derive(Clone, Debug)]
pub(crate) struct ClosedChunk {
    data: Box<[u8]>,
    len: u32,
    min_t: i64,
    max_t: i64,
}

impl ClosedChunk {
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    pub(crate) fn min_time(&self) -> i64 {
        self.min_t
    }

    pub(crate) fn max_time(&self) -> i64 {
        self.max_t
    }

    pub(crate) fn byte_size(&self) -> usize {
        self.data.len()
    }

    pub(crate) fn iter(&self) -> ChunkIter<'_> {
        ChunkIter::new(&self.data, self.len)
    }
}

/// Decodes a chunk's samples in append order.
#[derive(Clone, Debug)]
pub(crate) struct ChunkIter<'a> {
    r: BitReader<'a>,
    remaining: u32,
    read: u32,
    t: i64,
    delta: u64,
    v: u64,
    leading: u32,
    trailing: u32,
}

impl<'a> ChunkIter<'a> {
    fn new(data: &'a [u8], len: u32) -> Self {
        ChunkIter {
            r: BitReader::new(data),
            remaining: len,
            read: 0,
            t: 0,
            delta: 0,
            v: 0,
            leading: 0,
            trailing: 0,
        }
    }

    #[inline(always)]
    fn read_value(&mut self) {
        let r = &mut self.r;
        let ctl = r.peek(2) >> 62;
        if ctl < 2 {
            r.skip(1);
            return; // `0`: unchanged
        }
        r.skip(2);
        if ctl == 3 {
            // `11`: a new window follows.
            let hdr = r.read_bits(11);
            self.leading = (hdr >> 6) as u32;
            let mut sig = (hdr & 63) as u32;
            if sig == 0 {
                sig = 64;
            }
            self.trailing = 64u32.saturating_sub(self.leading + sig);
        }
        let sig = 64u32.saturating_sub(self.leading + self.trailing);
        let bits = r.read_bits(sig);
        self.v ^= bits << (self.trailing & 63);
    }
}

impl Iterator for ChunkIter<'_> {
    type Item = (i64, f64);

    #[inline]
    fn next(&mut self) -> Option<(i64, f64)> {
        if self.remaining == 0 {
            return None;
        }
        if self.read >= 2 {
            let w = self.r.peek(24);
            if w >> 63 == 0 {
                // `0`: same interval as before (the regular-scrape case).
                self.r.skip(1);
            } else {
                let ones = w.leading_ones().min(4);
                let dod: i64 = if ones == 4 {
                    self.r.skip(4);
                    self.r.read_bits(64) as i64
                } else {
                    let nbits = [0, 14, 17, 20][ones as usize];
                    // The prefix is `ones` one-bits and a terminating zero.
                    let prefix = ones + 1;
                    let raw = ((w << prefix) >> (64 - nbits)) as i64;
                    self.r.skip(prefix + nbits);
                    if raw > 1i64 << (nbits - 1) {
                        raw - (1i64 << nbits)
                    } else {
                        raw
                    }
                };
                self.delta = self.delta.wrapping_add(dod as u64);
            }
            self.t = self.t.wrapping_add(self.delta as i64);
            self.read_value();
        } else if self.read == 1 {
            self.delta = self.r.read_uvarint();
            self.t = self.t.wrapping_add(self.delta as i64);
            self.read_value();
        } else {
            self.t = unzigzag(self.r.read_uvarint());
            self.v = self.r.read_bits(64);
        }
        self.read += 1;
        self.remaining -= 1;
        Some((self.t, f64::from_bits(self.v)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining as usize, Some(self.remaining as usize))
    }
}

impl ExactSizeIterator for ChunkIter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    const STALE: u64 = 0x7ff0_0000_0000_0002;

    fn round_trip(samples: &[(i64, f64)]) -> XorChunk {
        let mut c = XorChunk::new();
        for &(t, v) in samples {
            c.append(t, v);
        }
        let got: Vec<(i64, u64)> = c.iter().map(|(t, v)| (t, v.to_bits())).collect();
        let want: Vec<(i64, u64)> = samples.iter().map(|&(t, v)| (t, v.to_bits())).collect();
        assert_eq!(got, want);
        let closed = c.clone().close();
        let got2: Vec<(i64, u64)> = closed.iter().map(|(t, v)| (t, v.to_bits())).collect();
        assert_eq!(got2, want);
        assert_eq!(closed.len(), samples.len());
        c
    }

    /// A tiny deterministic generator so tests need no crate.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 11
        }
        fn unit(&mut self) -> f64 {
            self.next() as f64 / (1u64 << 53) as f64
        }
    }

    #[test]
    fn empty_and_single() {
        let c = XorChunk::new();
        assert_eq!(c.iter().count(), 0);
        assert!(c.is_empty());
        round_trip(&[(42, 1.5)]);
        round_trip(&[(-5, -0.0)]);
    }

    #[test]
    fn special_values_round_trip_bit_exactly() {
        let samples = vec![
            (0, 1.0),
            (15_000, f64::from_bits(STALE)),
            (30_000, f64::NAN),
            (45_000, f64::INFINITY),
            (60_000, f64::NEG_INFINITY),
            (75_000, f64::from_bits(STALE)),
            (90_000, -0.0),
            (105_000, 0.0),
            (120_000, f64::MIN_POSITIVE),
            (135_000, f64::MAX),
            (150_000, f64::from_bits(1)),
            (165_000, f64::from_bits(u64::MAX)),
            (180_000, f64::from_bits(0x8000_0000_0000_0001)),
        ];
        let c = round_trip(&samples);
        let stale: Vec<bool> = c.iter().map(|(_, v)| v.to_bits() == STALE).collect();
        assert_eq!(stale.iter().filter(|s| **s).count(), 2);
    }

    #[test]
    fn irregular_and_extreme_timestamps() {
        // Every delta-of-delta bucket, both signs, and bucket edges.
        let mut ts = vec![0i64, 1000];
        let mut delta = 1000i64;
        for dod in [
            0,
            1,
            -1,
            8192,
            -8191,
            8193,
            -8192,
            65536,
            -65535,
            65537,
            524288,
            -524287,
            524289,
            -524288,
            1 << 40,
            -(1 << 39),
            0,
            0,
            7,
        ] {
            delta += dod;
            let last = *ts.last().unwrap_or(&0);
            ts.push(last + delta);
        }
        let samples: Vec<(i64, f64)> = ts.iter().enumerate().map(|(i, &t)| (t, i as f64)).collect();
        round_trip(&samples);

        // Huge jumps that overflow i64 deltas still round-trip (wrapping arithmetic).
        round_trip(&[
            (i64::MIN, 1.0),
            (i64::MAX, 2.0),
            (0, 3.0),
            (i64::MIN + 1, 4.0),
            (-1, 5.0),
        ]);
        // Non-monotonic (negative deltas) also decode exactly.
        round_trip(&[(100, 1.0), (50, 2.0), (75, 3.0), (-1_000_000_000_000, 4.0), (3, 5.0)]);
    }

    #[test]
    fn random_values_and_times_round_trip() {
        let mut rng = Lcg(7);
        for _ in 0..50 {
            let mut t = (rng.next() as i64) >> 20;
            let mut samples = Vec::new();
            for _ in 0..MAX_SAMPLES_PER_CHUNK {
                t += (rng.next() % 100_000) as i64;
                let v = match rng.next() % 5 {
                    0 => f64::from_bits(rng.next() << 11 | rng.next()),
                    1 => (rng.next() % 1000) as f64,
                    2 => rng.unit() * 1e6,
                    3 => samples.last().map_or(0.0, |s: &(i64, f64)| s.1),
                    _ => -rng.unit(),
                };
                samples.push((t, v));
            }
            let c = round_trip(&samples);
            assert_eq!(c.min_time(), samples[0].0);
            assert_eq!(c.max_time(), samples[samples.len() - 1].0);
        }
    }

    /// Builds one regular 15 s counter chunk and returns its bytes per sample.
    fn counter_bytes_per_sample(rng: &mut Lcg, rate: f64) -> (usize, usize) {
        let mut c = XorChunk::new();
        let mut v = (rng.unit() * rate * 86_400.0).floor();
        let mut t = 1_735_689_600_000i64;
        for _ in 0..MAX_SAMPLES_PER_CHUNK {
            c.append(t, v);
            t += 15_000;
            v += (rate * 15.0 * (0.85 + 0.3 * rng.unit())).floor();
        }
        (c.byte_size(), c.len())
    }

    #[test]
    fn regular_counters_compress_below_two_bytes_per_sample() {
        let mut rng = Lcg(42);
        let (mut bytes, mut n) = (0, 0);
        for i in 0..2000 {
            // Rates from 0.01/s to ~100/s, log-spread like real request counters.
            let rate = 10f64.powf(-2.0 + 4.0 * (i as f64 / 2000.0));
            let (b, s) = counter_bytes_per_sample(&mut rng, rate);
            bytes += b;
            n += s;
        }
        let bps = bytes as f64 / n as f64;
        eprintln!("regular counters: {bps:.3} bytes/sample");
        assert!(bps < 2.0, "{bps} bytes/sample");

        // Constant gauges and idle counters cost ~2 bits per sample.
        let mut c = XorChunk::new();
        for i in 0..MAX_SAMPLES_PER_CHUNK as i64 {
            c.append(i * 15_000, 700.0);
        }
        let bps = c.byte_size() as f64 / c.len() as f64;
        assert!(bps < 0.4, "{bps}");
    }

    #[test]
    fn gauges_with_three_decimals_stay_small() {
        let mut rng = Lcg(3);
        let (mut bytes, mut n) = (0, 0);
        for _ in 0..500 {
            let mut c = XorChunk::new();
            let level = 300.0 + 300.0 * rng.unit();
            for i in 0..MAX_SAMPLES_PER_CHUNK as i64 {
                let x = ((level + 20.0 * (rng.unit() - 0.5)) * 1000.0).round() / 1000.0;
                c.append(i * 15_000, x);
            }
            bytes += c.byte_size();
            n += c.len();
        }
        let bps = bytes as f64 / n as f64;
        eprintln!("noisy gauges: {bps:.3} bytes/sample");
        assert!(bps < 8.5, "{bps}");
    }
}
