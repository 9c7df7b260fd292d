//! `now()` (and `current_timestamp`) in pipelines: the time each batch is processed. A query
//! fixes `now()` once when it is planned; a pipeline is planned once and runs for as long as
//! the gateway does, so its `now()` is read again on every evaluation.

use std::time::SystemTime;

use arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility, scalar_doc_sections,
};

/// `now()`: the current time, UTC, in nanoseconds.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct BatchClock {
    signature: Signature,
    aliases: Vec<String>,
    documentation: Documentation,
}

impl BatchClock {
    /// The function, ready to register.
    pub(crate) fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(BatchClock {
            signature: Signature::nullary(Volatility::Volatile),
            aliases: vec!["current_timestamp".to_string()],
            documentation: Documentation::builder(
                scalar_doc_sections::DOC_SECTION_DATETIME,
                "Returns the current time (UTC, nanoseconds) when each batch is processed: \
                 a pipeline reads it again for every batch, not once when it is planned.",
                "now()",
            )
            .build(),
        })
    }
}

impl ScalarUDFImpl for BatchClock {
    fn name(&self) -> &str {
        "now"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Timestamp(
            TimeUnit::Nanosecond,
            Some("UTC".into()),
        ))
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        Ok(ColumnarValue::Scalar(ScalarValue::TimestampNanosecond(
            Some(nanos),
            Some("UTC".into()),
        )))
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&self.documentation)
    }
}
