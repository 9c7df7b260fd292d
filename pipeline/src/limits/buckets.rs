//! The token buckets of rate limits: one per statement and key, filled at the statement's
//! rate up to one second's worth, shared by every worker's copy of the pipeline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use ahash::RandomState;

/// Keys a statement keeps a bucket (or a set of series) for at most; past it, the rows of
/// new keys share one (labelled [`OTHER_KEYS`]).
pub const MAX_KEYS: usize = 10_000;
/// The label of the bucket keys past [`MAX_KEYS`] share.
const OTHER_KEYS: &str = "(other keys)";
const NANOS: f64 = 1e9;

/// One key's bucket.
struct Bucket {
    /// The key as text.
    label: String,
    tokens: f64,
    /// When it was last filled (ns since the epoch).
    filled: u64,
    passed: u64,
    dropped: u64,
    /// The second (since the epoch) counted now, and rows seen in it.
    second: (u64, u64),
    /// Rows seen in the second before.
    last_second: u64,
}

impl Bucket {
    /// Rows of the key in the whole second before `second` (since the epoch).
    fn in_last_second(&self, second: u64) -> u64 {
        let (counted, rows) = self.second;
        match second.checked_sub(counted) {
            Some(0) => self.last_second,
            Some(1) => rows,
            _ => 0,
        }
    }
}

/// The buckets of one statement.
pub(crate) struct KeyBuckets {
    rate: u64,
    keys: HashMap<Vec<u8>, Bucket, RandomState>,
}

impl KeyBuckets {
    fn new(rate: u64) -> KeyBuckets {
        KeyBuckets {
            rate,
            keys: HashMap::default(),
        }
    }

    /// Takes up to `wanted` rows' worth of tokens from the bucket of `key` (text `label`) at
    /// `now`: how many rows may go on.
    pub(crate) fn take(
        &mut self,
        key: &[u8],
        label: impl FnOnce() -> String,
        wanted: u64,
        now: u64,
    ) -> u64 {
        let rate = self.rate as f64;
        let known = self.keys.contains_key(key);
        let key: &[u8] = match known || self.keys.len() < MAX_KEYS {
            true => key,
            false => OTHER_KEYS.as_bytes(),
        };
        if !self.keys.contains_key(key) {
            let label = match known || key != OTHER_KEYS.as_bytes() {
                true => label(),
                false => OTHER_KEYS.to_string(),
            };
            let bucket = Bucket {
                label,
                tokens: rate,
                filled: now,
                passed: 0,
                dropped: 0,
                second: (now / 1_000_000_000, 0),
                last_second: 0,
            };
            self.keys.insert(key.to_vec(), bucket);
        }
        let Some(bucket) = self.keys.get_mut(key) else {
            return 0;
        };
        let elapsed = now.saturating_sub(bucket.filled) as f64 / NANOS;
        bucket.tokens = (bucket.tokens + elapsed * rate).min(rate);
        bucket.filled = bucket.filled.max(now);
        let granted = (bucket.tokens.floor() as u64).min(wanted);
        bucket.tokens -= granted as f64;
        bucket.passed += granted;
        bucket.dropped += wanted - granted;
        let second = now / 1_000_000_000;
        if second != bucket.second.0 {
            bucket.last_second = if second == bucket.second.0 + 1 {
                bucket.second.1
            } else {
                0
            };
            bucket.second = (second, 0);
        }
        bucket.second.1 += wanted;
        granted
    }
}

/// What a limit let through and dropped for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRow {
    /// The pipeline.
    pub pipeline: String,
    /// The statement (its index in the pipeline).
    pub step: usize,
    /// `rate` or `series`.
    pub kind: &'static str,
    /// The key's value as text.
    pub key: String,
    /// Rows a second (a rate limit) or series (a series limit) per key.
    pub bound: u64,
    /// Rows of the key in the last whole second (a rate limit), or its series let in now (a
    /// series limit).
    pub current: u64,
    /// Rows (data points) let through.
    pub passed: u64,
    /// Rows past the bound (dropped, sent to the statement's sink, or folded into an
    /// overflow series).
    pub dropped: u64,
}

/// The state of every limit of a program, by pipeline and statement: one set shared by all
/// workers (each worker's copy of a statement takes from the same buckets and series).
#[derive(Clone, Default)]
pub struct SharedLimits {
    rates: Arc<Mutex<ByStatement<KeyBuckets>>>,
    series: Arc<Mutex<ByStatement<SeriesSets>>>,
}

/// A statement: its pipeline and its index there.
type Statement = (String, usize);

/// The state of each statement.
type ByStatement<T> = HashMap<Statement, Arc<Mutex<T>>>;

impl std::fmt::Debug for SharedLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rates = self.rates.lock().map_or(0, |all| all.len());
        let series = self.series.lock().map_or(0, |all| all.len());
        f.debug_struct("SharedLimits")
            .field("rate_limits", &rates)
            .field("series_limits", &series)
            .finish()
    }
}

/// The state of statement `key`, made by `make` the first time.
fn of_statement<T>(
    all: &Mutex<ByStatement<T>>,
    key: (String, usize),
    make: impl FnOnce() -> T,
) -> Arc<Mutex<T>> {
    let mut all = all.lock().unwrap_or_else(PoisonError::into_inner);
    Arc::clone(
        all.entry(key)
            .or_insert_with(|| Arc::new(Mutex::new(make()))),
    )
}

/// Every statement's state, by pipeline and statement.
fn statements<T>(all: &Mutex<ByStatement<T>>) -> Vec<(Statement, Arc<Mutex<T>>)> {
    let all = all.lock().unwrap_or_else(PoisonError::into_inner);
    all.iter()
        .map(|(k, v)| (k.clone(), Arc::clone(v)))
        .collect()
}

impl SharedLimits {
    /// The buckets of statement `step` of `pipeline`, letting `rate` rows a second through.
    pub(crate) fn buckets(&self, pipeline: &str, step: usize, rate: u64) -> Arc<Mutex<KeyBuckets>> {
        of_statement(&self.rates, (pipeline.to_string(), step), || {
            KeyBuckets::new(rate)
        })
    }

    /// The series let in by statement `step` of `pipeline`, at most `max` per key.
    pub(crate) fn series(&self, pipeline: &str, step: usize, max: usize) -> Arc<Mutex<SeriesSets>> {
        of_statement(&self.series, (pipeline.to_string(), step), || {
            SeriesSets::new(max)
        })
    }

    /// Every key of every limit, by pipeline, statement and key.
    pub fn rows(&self) -> Vec<LimitRow> {
        let mut rows = Vec::new();
        let second = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        for ((pipeline, step), buckets) in statements(&self.rates) {
            let buckets = buckets.lock().unwrap_or_else(PoisonError::into_inner);
            for bucket in buckets.keys.values() {
                rows.push(LimitRow {
                    pipeline: pipeline.clone(),
                    step,
                    kind: "rate",
                    key: bucket.label.clone(),
                    bound: buckets.rate,
                    current: bucket.in_last_second(second),
                    passed: bucket.passed,
                    dropped: bucket.dropped,
                });
            }
        }
        for ((pipeline, step), sets) in statements(&self.series) {
            let sets = sets.lock().unwrap_or_else(PoisonError::into_inner);
            for set in sets.keys.values() {
                rows.push(LimitRow {
                    pipeline: pipeline.clone(),
                    step,
                    kind: "series",
                    key: set.label.clone(),
                    bound: sets.max as u64,
                    current: set.admitted.len() as u64,
                    passed: set.passed,
                    dropped: set.dropped,
                });
            }
        }
        rows.sort_by(|a, b| (&a.pipeline, a.step, &a.key).cmp(&(&b.pipeline, b.step, &b.key)));
        rows
    }
}

/// The series one key let in.
struct KeySeries {
    label: String,
    /// Each series' hash, and the interval it was last seen in.
    admitted: HashMap<u64, u64, RandomState>,
    /// The interval silent series were last looked for in.
    swept: u64,
    passed: u64,
    dropped: u64,
}

/// The series a series limit let in, per key.
pub(crate) struct SeriesSets {
    max: usize,
    keys: HashMap<Vec<u8>, KeySeries, RandomState>,
}

/// A point asking to be let in: its key (and the key as text), its series.
pub(crate) struct Asking<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) label: &'a dyn Fn() -> String,
    pub(crate) series: u64,
}

impl SeriesSets {
    fn new(max: usize) -> SeriesSets {
        SeriesSets {
            max,
            keys: HashMap::default(),
        }
    }

    /// Whether the point `asking` goes on in `interval`: its series is in already, or there is
    /// room for it. Series not seen for `forget_after` intervals make room first.
    pub(crate) fn admit(&mut self, asking: &Asking<'_>, interval: u64, forget_after: u64) -> bool {
        let max = self.max;
        let known = self.keys.contains_key(asking.key);
        // Past MAX_KEYS keys, the points of new keys share one set.
        let key: &[u8] = match known || self.keys.len() < MAX_KEYS {
            true => asking.key,
            false => OTHER_KEYS.as_bytes(),
        };
        if !self.keys.contains_key(key) {
            let set = KeySeries {
                label: match key == OTHER_KEYS.as_bytes() && !known {
                    true => OTHER_KEYS.to_string(),
                    false => (asking.label)(),
                },
                admitted: HashMap::default(),
                swept: interval,
                passed: 0,
                dropped: 0,
            };
            self.keys.insert(key.to_vec(), set);
        }
        let Some(set) = self.keys.get_mut(key) else {
            return false;
        };
        let admitted = match set.admitted.get_mut(&asking.series) {
            Some(seen) => {
                *seen = interval;
                true
            }
            None => {
                // Silent series make room, looked for once an interval (not once a point).
                if set.admitted.len() >= max && set.swept != interval {
                    set.swept = interval;
                    set.admitted
                        .retain(|_, seen| interval.saturating_sub(*seen) < forget_after);
                }
                let room = set.admitted.len() < max;
                if room {
                    set.admitted.insert(asking.series, interval);
                }
                room
            }
        };
        if admitted {
            set.passed += 1;
        } else {
            set.dropped += 1;
        }
        admitted
    }
}

#[cfg(test)]
mod tests {
    use super::{Asking, KeyBuckets, MAX_KEYS, OTHER_KEYS, SeriesSets};

    #[test]
    fn past_the_most_keys_new_keys_share_one_bucket() {
        let mut b = KeyBuckets::new(1);
        for k in 0..MAX_KEYS {
            let key = k.to_le_bytes();
            assert_eq!(b.take(&key, || k.to_string(), 1, 0), 1);
        }
        // Two new keys: one bucket between them, one row a second.
        let (x, y) = ((MAX_KEYS + 1).to_le_bytes(), (MAX_KEYS + 2).to_le_bytes());
        assert_eq!(b.take(&x, || "x".into(), 1, 0), 1);
        assert_eq!(b.take(&y, || "y".into(), 1, 0), 0);
        assert_eq!(b.keys.len(), MAX_KEYS + 1);
        assert_eq!(b.keys[OTHER_KEYS.as_bytes()].label, OTHER_KEYS);
        // A key followed already keeps its own.
        assert_eq!(
            b.take(&0usize.to_le_bytes(), || "0".into(), 1, 2_000_000_000),
            1
        );
    }

    #[test]
    fn a_series_limit_keeps_its_bound_and_frees_room_from_silent_series() {
        let mut sets = SeriesSets::new(2);
        let label = || "cpu".to_string();
        let ask = |series| Asking {
            key: b"cpu",
            label: &label,
            series,
        };
        assert!(sets.admit(&ask(1), 0, 10));
        assert!(sets.admit(&ask(2), 0, 10));
        assert!(!sets.admit(&ask(3), 0, 10), "past the bound");
        assert!(sets.admit(&ask(1), 5, 10), "a series in stays in");
        // Series 2 has been silent for 10 intervals: 3 takes its place.
        assert!(sets.admit(&ask(3), 10, 10));
        assert!(!sets.admit(&ask(2), 10, 10));
        let set = &sets.keys[b"cpu".as_slice()];
        assert_eq!((set.passed, set.dropped, set.admitted.len()), (4, 2, 2));
        // Past MAX_KEYS keys, new keys share one set, bounded the same way.
        let mut sets = SeriesSets::new(1);
        for k in 0..MAX_KEYS {
            let key = k.to_le_bytes();
            let asking = Asking {
                key: &key,
                label: &label,
                series: 1,
            };
            assert!(sets.admit(&asking, 0, 10));
        }
        for (k, admitted) in [(MAX_KEYS + 1, true), (MAX_KEYS + 2, false)] {
            let key = k.to_le_bytes();
            let asking = Asking {
                key: &key,
                label: &label,
                series: k as u64,
            };
            assert_eq!(sets.admit(&asking, 0, 10), admitted);
        }
        assert_eq!(sets.keys.len(), MAX_KEYS + 1);
    }

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn a_bucket_holds_a_second_and_fills_at_the_rate() {
        let mut b = KeyBuckets::new(100);
        let label = || "t1".to_string();
        assert_eq!(b.take(b"t1", label, 150, 10 * SECOND), 100);
        assert_eq!(b.take(b"t1", label, 10, 10 * SECOND), 0);
        // A quarter second later: 25 more.
        assert_eq!(b.take(b"t1", label, 40, 10 * SECOND + SECOND / 4), 25);
        // Another key has its own bucket.
        assert_eq!(b.take(b"t2", || "t2".to_string(), 40, 10 * SECOND), 40);
        // Long after, a full second's worth, not more.
        assert_eq!(b.take(b"t1", label, 500, 20 * SECOND), 100);
        let t1 = &b.keys[b"t1".as_slice()];
        assert_eq!((t1.passed, t1.dropped), (225, 475));
        // Rows seen in the second before: 500 in second 20, none in 21.
        assert_eq!(t1.in_last_second(21), 500);
        assert_eq!(t1.in_last_second(22), 0);
        let t2 = &b.keys[b"t2".as_slice()];
        assert_eq!(t2.in_last_second(11), 40);
    }
}
