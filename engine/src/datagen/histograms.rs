//! Internally consistent distribution points: explicit-bucket histograms, exponential
//! histograms and summaries (`count` equals the bucket total, `min <= sum/count <= max`).

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;
use opentelemetry_proto::tonic::metrics::v1::summary_data_point::ValueAtQuantile;
use opentelemetry_proto::tonic::metrics::v1::{
    Exemplar, ExponentialHistogramDataPoint, HistogramDataPoint, SummaryDataPoint,
};

use super::catalog::Def;
use super::common::{round, sig};
use super::rng::Rng;

/// Default OTel SDK bucket bounds for second-based durations.
const BOUNDS_S: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// Default OTel SDK bucket bounds for millisecond-based durations.
const BOUNDS_MS: &[f64] = &[
    0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0, 7500.0,
    10000.0,
];

/// Bell-shaped counts over `len` buckets centred near `center`, totalling about
/// `total` (at least 1).
fn bell(rng: &mut Rng, len: usize, center: f64, total: u64) -> Vec<u64> {
    let width = rng.f64_range(0.8, 2.5);
    let weights: Vec<f64> = (0..len)
        .map(|i| {
            let d = (i as f64 - center) / width;
            (-0.5 * d * d).exp() * rng.f64_range(0.7, 1.3)
        })
        .collect();
    let wsum: f64 = weights.iter().sum::<f64>().max(f64::MIN_POSITIVE);
    let mut counts: Vec<u64> = weights
        .iter()
        .map(|w| (w / wsum * total as f64).floor() as u64)
        .collect();
    if counts.iter().all(|&c| c == 0) {
        let c = (center.round().max(0.0) as usize).min(len.saturating_sub(1));
        if let Some(slot) = counts.get_mut(c) {
            *slot = 1;
        }
    }
    counts
}

/// Sum, min and max consistent with `ranges` of `(low, high, count)`.
///
/// Every observation is placed at its bucket's midpoint for the sum; min/max lie inside
/// the outermost non-empty buckets, on the outer side of their midpoints.
fn stats(rng: &mut Rng, ranges: &[(f64, f64, u64)]) -> (f64, f64, f64) {
    let used = ranges.iter().filter(|r| r.2 > 0);
    let sum = used
        .clone()
        .map(|&(lo, hi, c)| (lo + hi) / 2.0 * c as f64)
        .sum();
    let lo = used.clone().map(|r| r.0).fold(f64::INFINITY, f64::min);
    let lo_hi = used
        .clone()
        .filter(|r| r.0 == lo)
        .map(|r| r.1)
        .fold(f64::INFINITY, f64::min);
    let hi = used.clone().map(|r| r.1).fold(f64::NEG_INFINITY, f64::max);
    let hi_lo = used
        .filter(|r| r.1 == hi)
        .map(|r| r.0)
        .fold(f64::NEG_INFINITY, f64::max);
    let min = lo + (lo_hi - lo) / 2.0 * rng.f64_range(0.0, 0.9);
    let max = hi - (hi - hi_lo) / 2.0 * rng.f64_range(0.0, 0.9);
    (sum, sig(min), sig(max))
}

/// An explicit-bucket histogram point using the SDK default bounds for `def.unit`.
pub(crate) fn explicit(
    rng: &mut Rng,
    def: &Def,
    attributes: Vec<KeyValue>,
    (start_time_unix_nano, time_unix_nano): (u64, u64),
    flags: u32,
    exemplars: Vec<Exemplar>,
) -> HistogramDataPoint {
    let bounds = if def.unit == "ms" {
        BOUNDS_MS
    } else {
        BOUNDS_S
    };
    let typical = def.typical * rng.f64_range(0.5, 2.0);
    let center = bounds
        .iter()
        .position(|&b| b >= typical)
        .unwrap_or(bounds.len()) as f64;
    let total = rng.log_uniform(1.0, 5000.0) as u64;
    let bucket_counts = bell(rng, bounds.len() + 1, center, total);
    let ranges: Vec<(f64, f64, u64)> = bucket_counts
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let lo = if i == 0 { 0.0 } else { bounds[i - 1] };
            let hi = bounds.get(i).copied().unwrap_or(lo * 2.0);
            (lo, hi, c)
        })
        .collect();
    let (sum, min, max) = stats(rng, &ranges);
    let with_min_max = rng.chance(0.9);
    HistogramDataPoint {
        attributes,
        start_time_unix_nano,
        time_unix_nano,
        count: bucket_counts.iter().sum(),
        sum: rng.chance(0.95).then_some(round(sum, 6)),
        bucket_counts,
        explicit_bounds: bounds.to_vec(),
        exemplars,
        flags,
        min: with_min_max.then_some(min),
        max: with_min_max.then_some(max),
    }
}

/// Bell-shaped exponential buckets around `|typical|` at `scale`.
fn exp_buckets(rng: &mut Rng, scale: i32, typical: f64) -> (Buckets, Vec<(f64, f64, u64)>) {
    let per_octave = 2f64.powi(scale);
    let index = (typical.log2() * per_octave).ceil() as i32 - 1;
    let len = rng.range_usize(4, 24);
    let offset = index - (len / 2) as i32;
    let total = rng.log_uniform(1.0, 5000.0) as u64;
    let bucket_counts = bell(rng, len, (len / 2) as f64, total);
    let ranges = bucket_counts
        .iter()
        .enumerate()
        .map(|(k, &c)| {
            let i = f64::from(offset) + k as f64;
            ((i / per_octave).exp2(), ((i + 1.0) / per_octave).exp2(), c)
        })
        .collect();
    (
        Buckets {
            offset,
            bucket_counts,
        },
        ranges,
    )
}

/// An exponential histogram point; negative buckets are used when `def.typical < 0`.
pub(crate) fn exponential(
    rng: &mut Rng,
    def: &Def,
    attributes: Vec<KeyValue>,
    (start_time_unix_nano, time_unix_nano): (u64, u64),
    flags: u32,
    exemplars: Vec<Exemplar>,
) -> ExponentialHistogramDataPoint {
    let scale = if rng.chance(0.1) {
        -1
    } else {
        rng.range(0, 6) as i32
    };
    let typical = def.typical.abs() * rng.f64_range(0.5, 2.0);
    let (positive, mut ranges) = exp_buckets(rng, scale, typical);
    let negative = if def.typical < 0.0 {
        let (neg, neg_ranges) = exp_buckets(rng, scale, typical);
        ranges.extend(neg_ranges.into_iter().map(|(lo, hi, c)| (-hi, -lo, c)));
        Some(neg)
    } else if rng.chance(0.5) {
        Some(Buckets::default())
    } else {
        None
    };
    let zero_count = if rng.chance(0.3) { rng.range(1, 20) } else { 0 };
    ranges.push((0.0, 0.0, zero_count));
    let (sum, min, max) = stats(rng, &ranges);
    let count = ranges.iter().map(|r| r.2).sum();
    ExponentialHistogramDataPoint {
        attributes,
        start_time_unix_nano,
        time_unix_nano,
        count,
        sum: Some(round(sum, 6)),
        scale,
        zero_count,
        positive: Some(positive),
        negative,
        flags,
        exemplars,
        min: Some(min),
        max: Some(max),
        zero_threshold: if zero_count > 0 && rng.chance(0.5) {
            1e-9
        } else {
            0.0
        },
    }
}

/// A summary point with the 0.5 / 0.9 / 0.99 quantiles.
pub(crate) fn summary(
    rng: &mut Rng,
    def: &Def,
    attributes: Vec<KeyValue>,
    (start_time_unix_nano, time_unix_nano): (u64, u64),
    flags: u32,
) -> SummaryDataPoint {
    let p50 = def.typical * rng.f64_range(0.5, 1.5);
    let p90 = p50 * rng.f64_range(1.5, 3.0);
    let p99 = p90 * rng.f64_range(1.5, 4.0);
    let count = rng.log_uniform(1.0, 100_000.0) as u64;
    let quantile_values = [(0.5, p50), (0.9, p90), (0.99, p99)]
        .into_iter()
        .map(|(quantile, value)| ValueAtQuantile {
            quantile,
            value: round(value, 6),
        })
        .collect();
    SummaryDataPoint {
        attributes,
        start_time_unix_nano,
        time_unix_nano,
        count,
        sum: round(count as f64 * p50 * rng.f64_range(1.0, 1.4), 6),
        quantile_values,
        flags,
    }
}
