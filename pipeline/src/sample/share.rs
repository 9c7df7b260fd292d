//! `sample(trace_id, share)`: whether a trace falls in a share of all traces, the same on every
//! gateway and every worker.
//!
//! It follows OpenTelemetry's consistent probability sampling: the last 7 bytes of a W3C trace
//! id are random (56 bits, big-endian), and a trace is kept when they are at least the
//! threshold `(1 - share) × 2^56`. A gateway keeping 5% and another keeping 10% agree: every
//! trace the first keeps, the second keeps too.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, BooleanBuilder};
use arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility, scalar_doc_sections,
};

/// 2^56: one more than the largest value of a trace id's random bits.
const RANDOM_SPAN: f64 = (1u64 << 56) as f64;

/// The threshold the random bits of a trace id must reach to fall in `share` (0 to 1).
pub(crate) fn threshold(share: f64) -> u64 {
    let share = share.clamp(0.0, 1.0);
    ((1.0 - share) * RANDOM_SPAN).round() as u64
}

/// The 56 random bits of a trace id (its last 7 bytes, big-endian); None for an id shorter
/// than 7 bytes.
pub(crate) fn random_bits(trace_id: &[u8]) -> Option<u64> {
    let tail = trace_id.get(trace_id.len().checked_sub(7)?..)?;
    Some(tail.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
}

/// The function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct Share {
    signature: Signature,
    documentation: Documentation,
}

impl Share {
    /// The function, ready to register.
    pub(crate) fn udf() -> ScalarUDF {
        let ids = [
            DataType::Binary,
            DataType::LargeBinary,
            DataType::BinaryView,
            DataType::FixedSizeBinary(16),
        ];
        let signatures = ids
            .into_iter()
            .map(|id| TypeSignature::Exact(vec![id, DataType::Float64]))
            .collect();
        ScalarUDF::new_from_impl(Share {
            signature: Signature::one_of(signatures, Volatility::Immutable),
            documentation: Documentation::builder(
                scalar_doc_sections::DOC_SECTION_OTHER,
                "Whether a trace falls in a share (0 to 1) of all traces, the same on every \
                 gateway: OpenTelemetry's consistent probability sampling, which keeps a trace \
                 when the 56 random bits of its id (its last 7 bytes) are at least \
                 (1 - share) × 2^56. NULL for a NULL id; false for an id shorter than 7 bytes.",
                "sample(trace_id, share)",
            )
            .with_argument("trace_id", "the trace id (16 bytes)")
            .with_argument("share", "the share kept, a constant from 0 to 1")
            .build(),
        })
    }
}

impl ScalarUDFImpl for Share {
    fn name(&self) -> &str {
        "sample"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [ids, share] = args.args.as_slice() else {
            return exec_err!("sample takes a trace id and a share");
        };
        let share = match share {
            ColumnarValue::Scalar(ScalarValue::Float64(Some(s))) if (0.0..=1.0).contains(s) => *s,
            ColumnarValue::Scalar(ScalarValue::Float64(Some(s))) => {
                return plan_err!("sample: the share is from 0 to 1, not {s}");
            }
            _ => return plan_err!("sample: the share is a constant number from 0 to 1"),
        };
        let threshold = threshold(share);
        let keep = |id: Option<&[u8]>| id.map(|id| random_bits(id).is_some_and(|r| r >= threshold));
        match ids {
            ColumnarValue::Scalar(s) => {
                let array = s.to_array_of_size(1)?;
                let kept = keep_all(&array, &keep)?;
                Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                    &kept, 0,
                )?))
            }
            ColumnarValue::Array(array) => Ok(ColumnarValue::Array(keep_all(array, &keep)?)),
        }
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&self.documentation)
    }
}

/// `keep` of every id of `ids`.
fn keep_all(ids: &ArrayRef, keep: &dyn Fn(Option<&[u8]>) -> Option<bool>) -> Result<ArrayRef> {
    let mut out = BooleanBuilder::with_capacity(ids.len());
    match ids.data_type() {
        DataType::FixedSizeBinary(_) => {
            let ids = ids.as_fixed_size_binary();
            (0..ids.len())
                .for_each(|i| out.append_option(keep(ids.is_valid(i).then(|| ids.value(i)))));
        }
        DataType::Binary => ids
            .as_binary::<i32>()
            .iter()
            .for_each(|id| out.append_option(keep(id))),
        DataType::LargeBinary => ids
            .as_binary::<i64>()
            .iter()
            .for_each(|id| out.append_option(keep(id))),
        DataType::BinaryView => ids
            .as_binary_view()
            .iter()
            .for_each(|id| out.append_option(keep(id))),
        other => return exec_err!("sample: a trace id is bytes, not {other}"),
    }
    let kept: BooleanArray = out.finish();
    Ok(Arc::new(kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_splits_the_random_bits() {
        assert_eq!(threshold(1.0), 0);
        assert_eq!(threshold(0.0), 1 << 56);
        assert_eq!(threshold(0.25), 3 << 54);
        let id = |tail: u64| {
            let mut id = [0xAAu8; 16];
            id[9..].copy_from_slice(&tail.to_be_bytes()[1..]);
            id
        };
        assert_eq!(random_bits(&id(0x00FF_FFFF_FFFF_FFFF)), Some((1 << 56) - 1));
        assert_eq!(random_bits(&id(3 << 54)), Some(3 << 54));
        assert_eq!(random_bits(&[1, 2, 3]), None);
        // 25% keeps the top quarter of the values, the lowest of it included.
        assert!(random_bits(&id(3 << 54)).unwrap() >= threshold(0.25));
        assert!(random_bits(&id((3 << 54) - 1)).unwrap() < threshold(0.25));
    }

    #[test]
    fn a_smaller_share_keeps_a_subset_of_a_larger_one() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut kept = [0usize; 2];
        for _ in 0..10_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let r = state >> 8;
            let five = r >= threshold(0.05);
            let ten = r >= threshold(0.10);
            assert!(!five || ten, "kept at 5% and not at 10%");
            kept[0] += five as usize;
            kept[1] += ten as usize;
        }
        assert!((350..650).contains(&kept[0]), "{kept:?}");
        assert!((800..1200).contains(&kept[1]), "{kept:?}");
    }
}
