//! A tiny deterministic PRNG (SplitMix64) so generated data is reproducible from a seed
//! without pulling in `rand`.
//!
//! SplitMix64 is not cryptographic; it is fast, has a full 2^64 period and good enough
//! statistical quality for synthetic telemetry.

/// Deterministic pseudo-random number generator (SplitMix64).
#[derive(Debug, Clone)]
pub(crate) struct Rng {
    state: u64,
}

impl Rng {
    /// Creates a generator from `seed`. Equal seeds give equal sequences.
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// Next 64 uniformly distributed bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform integer in `0..n`; returns 0 when `n == 0`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform `usize` in `0..n`; returns 0 when `n == 0`.
    pub(crate) fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// Uniform integer in the inclusive range `lo..=hi` (returns `lo` if `hi < lo`).
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.below(hi - lo + 1)
    }

    /// Uniform `usize` in the inclusive range `lo..=hi`.
    pub(crate) fn range_usize(&mut self, lo: usize, hi: usize) -> usize {
        self.range(lo as u64, hi as u64) as usize
    }

    /// Uniform `f64` in `[0, 1)`.
    pub(crate) fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform `f64` in `[lo, hi)`.
    pub(crate) fn f64_range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.f64()
    }

    /// Log-uniform `f64` in `[lo, hi)` (both must be positive): many small values, a
    /// long tail of large ones, like latencies.
    pub(crate) fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + (hi.ln() - lo.ln()) * self.f64()).exp()
    }

    /// `true` with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }

    /// A uniformly chosen element of a non-empty slice.
    ///
    /// Only used with the crate's static, non-empty vocabulary tables; an empty slice
    /// would be a programming error and panics on the index.
    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }

    /// Index chosen with probability proportional to `weights[i]` (0 if all are zero).
    pub(crate) fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let mut r = self.below(total);
        for (i, &w) in weights.iter().enumerate() {
            if r < u64::from(w) {
                return i;
            }
            r -= u64::from(w);
        }
        0
    }

    /// `N` random bytes, never all zero (all-zero trace/span ids are invalid in OTLP).
    pub(crate) fn id<const N: usize>(&mut self) -> Vec<u8> {
        let mut out = Vec::with_capacity(N);
        while out.len() < N {
            let word = self.next_u64().to_le_bytes();
            let take = (N - out.len()).min(8);
            out.extend_from_slice(&word[..take]);
        }
        if out.iter().all(|&b| b == 0) {
            out[0] = 1;
        }
        out
    }

    /// Lowercase alphanumeric string of `len` characters (pod hashes, request ids).
    pub(crate) fn alnum(&mut self, len: usize) -> String {
        const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        (0..len).map(|_| char::from(*self.pick(CHARS))).collect()
    }

    /// Lowercase hex string of `len` characters.
    pub(crate) fn hex(&mut self, len: usize) -> String {
        const CHARS: &[u8] = b"0123456789abcdef";
        (0..len).map(|_| char::from(*self.pick(CHARS))).collect()
    }

    /// Shuffles `items` in place (Fisher-Yates).
    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.index(i + 1);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn reproducible_and_in_range() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let v = a.range(3, 9);
            assert!((3..=9).contains(&v));
            let f = a.f64();
            assert!((0.0..1.0).contains(&f));
            b.range(3, 9);
            b.f64();
        }
        assert_eq!(a.weighted(&[0, 5, 0]), 1);
        assert_eq!(a.id::<16>().len(), 16);
    }
}
