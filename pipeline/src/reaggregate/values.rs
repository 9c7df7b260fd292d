//! The values of data points as they merge: numbers add (ints stay ints), histograms add
//! bucket by bucket (same bounds only), exponential histograms add at the coarser scale of the
//! two, summaries add their count and sum (quantiles do not merge). A cumulative point's
//! increase since the point before it is their difference, unless it went down (a reset).

/// A number: an int while every part of it was one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    Int(i64),
    Double(f64),
}

impl Num {
    pub(crate) fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Double(d) => d,
        }
    }

    fn plus(self, other: Num) -> Num {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Num::Int(a.wrapping_add(b)),
            (a, b) => Num::Double(a.as_f64() + b.as_f64()),
        }
    }

    fn minus(self, other: Num) -> Num {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Num::Int(a.wrapping_sub(b)),
            (a, b) => Num::Double(a.as_f64() - b.as_f64()),
        }
    }
}

/// Exponential histogram buckets: the count of bucket `offset + i` at index `i`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Buckets {
    pub(crate) offset: i32,
    pub(crate) counts: Vec<u64>,
}

impl Buckets {
    /// The buckets at a scale `by` steps coarser: bucket `i` goes to `i >> by`.
    fn downscaled(&self, by: u32) -> Buckets {
        if by == 0 || self.counts.is_empty() {
            return self.clone();
        }
        let by = by.min(31);
        let first = self.offset >> by;
        let last = (self.offset + self.counts.len() as i32 - 1) >> by;
        let mut counts = vec![0u64; (last - first + 1) as usize];
        for (i, c) in self.counts.iter().enumerate() {
            let index = ((self.offset + i as i32) >> by) - first;
            counts[index as usize] += c;
        }
        Buckets {
            offset: first,
            counts,
        }
    }

    /// Adds `other` (at the same scale), bucket by bucket.
    fn add(&mut self, other: &Buckets) {
        if other.counts.is_empty() {
            return;
        }
        if self.counts.is_empty() {
            *self = other.clone();
            return;
        }
        let first = self.offset.min(other.offset);
        let end =
            (self.offset + self.counts.len() as i32).max(other.offset + other.counts.len() as i32);
        let mut counts = vec![0u64; (end - first) as usize];
        for b in [&*self, other] {
            for (i, c) in b.counts.iter().enumerate() {
                counts[(b.offset - first) as usize + i] += c;
            }
        }
        *self = Buckets {
            offset: first,
            counts,
        };
    }

    /// `self` less `earlier` (at the same scale), bucket by bucket; None when a bucket went
    /// down.
    fn minus(&self, earlier: &Buckets) -> Option<Buckets> {
        let mut out = self.clone();
        for (i, c) in earlier.counts.iter().enumerate() {
            if *c == 0 {
                continue;
            }
            let index = earlier.offset + i as i32 - self.offset;
            let slot = usize::try_from(index)
                .ok()
                .and_then(|i| out.counts.get_mut(i))?;
            *slot = slot.checked_sub(*c)?;
        }
        Some(out)
    }
}

/// An explicit-bucket histogram.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Hist {
    pub(crate) bounds: Vec<f64>,
    pub(crate) counts: Vec<u64>,
    pub(crate) count: u64,
    pub(crate) sum: Option<f64>,
    pub(crate) min: Option<f64>,
    pub(crate) max: Option<f64>,
}

/// An exponential histogram.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Exp {
    pub(crate) scale: i32,
    pub(crate) zero_count: u64,
    pub(crate) zero_threshold: f64,
    pub(crate) positive: Buckets,
    pub(crate) negative: Buckets,
    pub(crate) count: u64,
    pub(crate) sum: Option<f64>,
    pub(crate) min: Option<f64>,
    pub(crate) max: Option<f64>,
}

/// What a data point holds, as it merges.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Number(Num),
    Histogram(Hist),
    Exponential(Exp),
    Summary { count: u64, sum: f64 },
}

/// Why a point does not merge into a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mismatch {
    /// Histograms with different bucket bounds.
    Bounds,
    /// Values of different kinds (a series changed type).
    Kind,
}

fn both(a: Option<f64>, b: Option<f64>, f: fn(f64, f64) -> f64) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(f(a, b)),
        (a, b) => a.or(b),
    }
}

/// The sum of `now` less the one of `then`, when both are known (else `now`'s).
fn sum_less(now: Option<f64>, then: Option<f64>) -> Option<f64> {
    now.zip(then).map(|(a, b)| a - b).or(now)
}

impl Hist {
    fn add(&mut self, other: &Hist) -> Result<(), Mismatch> {
        if self.bounds != other.bounds || self.counts.len() != other.counts.len() {
            return Err(Mismatch::Bounds);
        }
        for (c, o) in self.counts.iter_mut().zip(&other.counts) {
            *c += o;
        }
        self.count += other.count;
        self.sum = both(self.sum, other.sum, |a, b| a + b);
        self.min = both(self.min, other.min, f64::min);
        self.max = both(self.max, other.max, f64::max);
        Ok(())
    }

    fn increase(&self, then: &Hist) -> Option<Hist> {
        if self.bounds != then.bounds || self.counts.len() != then.counts.len() {
            return None;
        }
        let counts = self
            .counts
            .iter()
            .zip(&then.counts)
            .map(|(c, e)| c.checked_sub(*e))
            .collect::<Option<Vec<u64>>>()?;
        Some(Hist {
            bounds: self.bounds.clone(),
            counts,
            count: self.count.checked_sub(then.count)?,
            sum: sum_less(self.sum, then.sum),
            ..self.clone()
        })
    }
}

impl Exp {
    /// At `scale`, no finer than its own.
    fn at_scale(&self, scale: i32) -> Exp {
        let by = self.scale.saturating_sub(scale).max(0) as u32;
        Exp {
            scale: self.scale.min(scale),
            positive: self.positive.downscaled(by),
            negative: self.negative.downscaled(by),
            ..self.clone()
        }
    }

    fn add(&mut self, other: &Exp) {
        let scale = self.scale.min(other.scale);
        let mut this = self.at_scale(scale);
        let other = other.at_scale(scale);
        this.zero_count += other.zero_count;
        this.zero_threshold = this.zero_threshold.max(other.zero_threshold);
        this.positive.add(&other.positive);
        this.negative.add(&other.negative);
        this.count += other.count;
        this.sum = both(this.sum, other.sum, |a, b| a + b);
        this.min = both(this.min, other.min, f64::min);
        this.max = both(this.max, other.max, f64::max);
        *self = this;
    }

    fn increase(&self, then: &Exp) -> Option<Exp> {
        let scale = self.scale.min(then.scale);
        let (now, then) = (self.at_scale(scale), then.at_scale(scale));
        Some(Exp {
            zero_count: now.zero_count.checked_sub(then.zero_count)?,
            positive: now.positive.minus(&then.positive)?,
            negative: now.negative.minus(&then.negative)?,
            count: now.count.checked_sub(then.count)?,
            sum: sum_less(now.sum, then.sum),
            ..now.clone()
        })
    }
}

impl Value {
    /// Adds `other` into `self`.
    pub(crate) fn add(&mut self, other: &Value) -> Result<(), Mismatch> {
        match (self, other) {
            (Value::Number(a), Value::Number(b)) => *a = a.plus(*b),
            (Value::Histogram(a), Value::Histogram(b)) => a.add(b)?,
            (Value::Exponential(a), Value::Exponential(b)) => a.add(b),
            (
                Value::Summary { count, sum },
                Value::Summary {
                    count: b_count,
                    sum: b_sum,
                },
            ) => {
                *count += b_count;
                *sum += b_sum;
            }
            _ => return Err(Mismatch::Kind),
        }
        Ok(())
    }

    /// How much `self`, a cumulative point, grew since `earlier`, the series' point before
    /// it: None when it went down (the series restarted), or the two do not compare.
    /// `monotonic` numbers that go down restarted; others may go down.
    pub(crate) fn increase(&self, earlier: &Value, monotonic: bool) -> Option<Value> {
        match (self, earlier) {
            (Value::Number(now), Value::Number(then)) => {
                if monotonic && now.as_f64() < then.as_f64() {
                    return None;
                }
                Some(Value::Number(now.minus(*then)))
            }
            (Value::Histogram(now), Value::Histogram(then)) => {
                now.increase(then).map(Value::Histogram)
            }
            (Value::Exponential(now), Value::Exponential(then)) => {
                now.increase(then).map(Value::Exponential)
            }
            (
                Value::Summary { count, sum },
                Value::Summary {
                    count: e_count,
                    sum: e_sum,
                },
            ) => Some(Value::Summary {
                count: count.checked_sub(*e_count)?,
                sum: sum - e_sum,
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Buckets, Exp, Hist, Mismatch, Num, Value};

    fn histogram(bounds: &[f64], counts: &[u64]) -> Value {
        Value::Histogram(Hist {
            bounds: bounds.to_vec(),
            counts: counts.to_vec(),
            count: counts.iter().sum(),
            sum: Some(counts.iter().sum::<u64>() as f64),
            min: Some(1.0),
            max: Some(9.0),
        })
    }

    fn exponential(scale: i32, offset: i32, counts: &[u64]) -> Value {
        Value::Exponential(Exp {
            scale,
            zero_count: 1,
            zero_threshold: 0.0,
            positive: Buckets {
                offset,
                counts: counts.to_vec(),
            },
            negative: Buckets::default(),
            count: counts.iter().sum::<u64>() + 1,
            sum: Some(10.0),
            min: None,
            max: None,
        })
    }

    #[test]
    fn numbers_add_as_ints_until_a_double_joins() {
        let mut v = Value::Number(Num::Int(3));
        v.add(&Value::Number(Num::Int(4))).unwrap();
        assert_eq!(v, Value::Number(Num::Int(7)));
        v.add(&Value::Number(Num::Double(0.5))).unwrap();
        assert_eq!(v, Value::Number(Num::Double(7.5)));
    }

    #[test]
    fn a_cumulative_number_that_goes_down_restarted_when_monotonic() {
        let now = Value::Number(Num::Int(5));
        let then = Value::Number(Num::Int(10));
        assert_eq!(now.increase(&then, true), None);
        assert_eq!(
            now.increase(&then, false),
            Some(Value::Number(Num::Int(-5)))
        );
        assert_eq!(then.increase(&now, true), Some(Value::Number(Num::Int(5))));
    }

    #[test]
    fn histograms_add_by_bucket_with_the_same_bounds_only() {
        let mut a = histogram(&[1.0, 5.0], &[1, 2, 3]);
        a.add(&histogram(&[1.0, 5.0], &[1, 1, 1])).unwrap();
        assert_eq!(
            a,
            Value::Histogram(Hist {
                bounds: vec![1.0, 5.0],
                counts: vec![2, 3, 4],
                count: 9,
                sum: Some(9.0),
                min: Some(1.0),
                max: Some(9.0),
            })
        );
        assert_eq!(
            a.add(&histogram(&[2.0, 5.0], &[1, 1, 1])),
            Err(Mismatch::Bounds)
        );
        let grown = histogram(&[1.0, 5.0], &[3, 3, 4]);
        let Some(Value::Histogram(grew)) = grown.increase(&a, true) else {
            panic!("an increase");
        };
        assert_eq!((grew.counts, grew.count), (vec![1, 0, 0], 1));
        assert_eq!(histogram(&[1.0, 5.0], &[0, 0, 1]).increase(&a, true), None);
    }

    #[test]
    fn exponential_histograms_add_at_the_coarser_scale() {
        // Scale 1: buckets 2, 3 (counts 1, 2). Scale 0: bucket 1 (count 4). At scale 0, 2 and
        // 3 are both bucket 1.
        let mut a = exponential(1, 2, &[1, 2]);
        a.add(&exponential(0, 1, &[4])).unwrap();
        let Value::Exponential(merged) = &a else {
            panic!("exponential");
        };
        assert_eq!((merged.scale, merged.count, merged.zero_count), (0, 9, 2));
        assert_eq!(
            merged.positive,
            Buckets {
                offset: 1,
                counts: vec![7]
            }
        );
        // Negative indexes shift down too: -3 and -4 at scale 1 are -2 at scale 0.
        let buckets = Buckets {
            offset: -4,
            counts: vec![1, 1, 1],
        }
        .downscaled(1);
        assert_eq!(
            buckets,
            Buckets {
                offset: -2,
                counts: vec![2, 1]
            }
        );
        let mut later = a.clone();
        later.add(&exponential(0, 1, &[3])).unwrap();
        let Some(Value::Exponential(grew)) = later.increase(&a, true) else {
            panic!("an increase");
        };
        assert_eq!(grew.positive.counts, vec![3]);
    }
}
