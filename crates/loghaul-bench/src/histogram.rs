//! A fixed-size log-linear latency histogram (HDR-style, 32 sub-buckets per power of two: about 3%
//! relative error), so recording is an index computation and an increment, with no allocation.

/// Sub-buckets per power of two, as a bit count.
const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
/// Enough buckets for any u64.
const BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) * SUB as usize;

/// Counts of values (microseconds, for the meter) in log-linear buckets.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            total: 0,
            max: 0,
        }
    }
}

fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let p = 63 - v.leading_zeros(); // p >= SUB_BITS
    let shift = p - SUB_BITS;
    let sub = (v >> shift) & (SUB - 1);
    ((p - SUB_BITS + 1) as u64 * SUB + sub) as usize
}

/// The upper bound of bucket `i` (the value reported for a percentile: never optimistic).
fn upper(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let p = i / SUB + u64::from(SUB_BITS) - 1;
    let sub = i % SUB;
    let shift = p - u64::from(SUB_BITS);
    ((SUB + sub + 1) << shift).saturating_sub(1)
}

impl Histogram {
    /// Records `n` values equal to `v`.
    #[inline]
    pub fn record_n(&mut self, v: u64, n: u64) {
        self.counts[index(v)] += n;
        self.total += n;
        self.max = self.max.max(v);
    }

    /// Number of recorded values.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The value at quantile `q` (0..=1), or `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(upper(i).min(self.max));
            }
        }
        Some(self.max)
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn index_and_upper_agree() {
        for v in [
            0u64,
            1,
            31,
            32,
            33,
            63,
            64,
            100,
            1000,
            123_456,
            u64::MAX / 3,
        ] {
            let i = index(v);
            assert!(upper(i) >= v, "v={v} i={i} upper={}", upper(i));
            if i > 0 {
                assert!(upper(i - 1) < v, "v={v}");
            }
        }
    }

    #[test]
    fn quantiles_within_three_percent() {
        let mut h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record_n(v, 1);
        }
        let p50 = h.quantile(0.5).unwrap() as f64;
        let p99 = h.quantile(0.99).unwrap() as f64;
        assert!((p50 - 5000.0).abs() / 5000.0 < 0.035, "{p50}");
        assert!((p99 - 9900.0).abs() / 9900.0 < 0.035, "{p99}");
        assert_eq!(h.quantile(1.0), Some(10_000));
    }
}
