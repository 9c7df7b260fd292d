//! The generator's state: its PRNG, its clock and the per-service resource and scope
//! definitions that every request draws from.

use super::common::{self, Profile};
use super::rng::Rng;

/// Timestamp (ns since the Unix epoch, June 2025) at which every generator's clock
/// starts.
pub const BASE_TIME_NS: u64 = 1_750_000_000_000_000_000;

/// Seeded generator of OTLP export requests.
///
/// Holds its PRNG state, a monotonically advancing clock and the per-service resource
/// and scope definitions (so resources repeat byte-for-byte across requests).
#[derive(Debug, Clone)]
pub struct DataGen {
    pub(super) rng: Rng,
    pub(super) now_ns: u64,
    pub(super) profiles: Vec<Profile>,
}

impl DataGen {
    /// Creates a generator; the same `seed` always yields the same data.
    pub fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let profiles = common::build_profiles(&mut rng);
        Self {
            rng,
            now_ns: BASE_TIME_NS,
            profiles,
        }
    }

    /// Advances the clock by a random step in `min_ns..=max_ns` and returns the new time.
    pub(super) fn tick(&mut self, min_ns: u64, max_ns: u64) -> u64 {
        self.now_ns += self.rng.range(min_ns, max_ns);
        self.now_ns
    }
}
