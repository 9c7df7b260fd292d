//! A JSON value (what `json_get` and `->` give: a union of JSON types) written to an attribute
//! keeps its type: the rows holding integers are written as int attributes, floats as double,
//! booleans as bool, strings as string, arrays and objects as their JSON text, and a JSON null
//! (or NULL) removes the attribute, as writing NULL does.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int8Array};
use arrow::compute::kernels::boolean::and;
use arrow::compute::kernels::cmp::eq;
use arrow::datatypes::DataType;
use datafusion_functions_json::JSON_UNION_DATA_TYPE;

use crate::error::{PipelineError, Result};

/// The writes that set the rows `mask` selects to `values`, each of values of one type:
/// `(mask, values)` itself unless `values` are JSON values; for JSON values, one write per
/// JSON type among the selected rows, selecting the rows of that type, with the union's
/// member of that type as values (arrays and objects are their JSON text).
pub(crate) fn typed_parts(
    mask: &BooleanArray,
    values: &ArrayRef,
) -> Result<Vec<(BooleanArray, ArrayRef)>> {
    let (fields, union) = match (values.data_type(), values.as_union_opt()) {
        (DataType::Union(fields, _), Some(union))
            if values.data_type() == &*JSON_UNION_DATA_TYPE =>
        {
            (fields, union)
        }
        _ => return Ok(vec![(mask.clone(), Arc::clone(values))]),
    };
    let type_ids = Int8Array::new(union.type_ids().clone(), None);
    let arrow = |e| PipelineError::arrow("splitting JSON values by type", e);
    let mut parts = Vec::new();
    for (type_id, _) in fields.iter() {
        let of_type = eq(&type_ids, &Int8Array::new_scalar(type_id)).map_err(arrow)?;
        let selected = and(mask, &of_type).map_err(arrow)?;
        if selected.true_count() > 0 {
            parts.push((selected, Arc::clone(union.child(type_id))));
        }
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    use arrow::array::{RecordBatch, StringArray};
    use arrow::datatypes::{Field, Schema};
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    /// `json_get(json, key)` over `rows`, planned and evaluated as pipelines do.
    fn json_get(rows: &[Option<&str>], key: &str) -> ArrayRef {
        let schema = Arc::new(Schema::new(vec![Field::new("j", DataType::Utf8, true)]));
        let expr = Parser::new(&GenericDialect {})
            .try_with_sql(&format!("json_get(j, '{key}')"))
            .and_then(|mut p| p.parse_expr())
            .unwrap();
        let state = crate::session::session();
        let (physical, data_type) = match crate::expr::plan(&state, &expr, &schema) {
            Ok(planned) => planned,
            Err(failure) => panic!("{}", failure.message),
        };
        assert_eq!(data_type, *JSON_UNION_DATA_TYPE);
        let json: ArrayRef = Arc::new(StringArray::from(rows.to_vec()));
        let batch = RecordBatch::try_new(schema, vec![json]).unwrap();
        physical
            .evaluate(&batch)
            .and_then(|v| v.into_array(rows.len()))
            .unwrap()
    }

    /// Scenario: JSON values of every type, some rows not selected.
    /// Guarantees: one write per type present among the selected rows, each selecting only
    /// rows of its type, with values of that type.
    #[test]
    fn json_values_are_written_by_type() {
        let values = json_get(
            &[
                Some(r#"{"v": 1}"#),
                Some(r#"{"v": "a"}"#),
                Some(r#"{"v": 1.5}"#),
                Some(r#"{"v": true}"#),
                Some(r#"{"v": [1]}"#),
                Some(r#"{"v": null}"#),
                Some("not json"),
                Some(r#"{"v": 2}"#),
            ],
            "v",
        );
        let mask = BooleanArray::from(vec![true, true, true, true, true, true, true, false]);
        let parts = typed_parts(&mask, &values).unwrap();
        let described: Vec<(Vec<usize>, DataType)> = parts
            .iter()
            .map(|(mask, values)| {
                let rows = (0..mask.len()).filter(|i| mask.value(*i)).collect();
                (rows, values.data_type().clone())
            })
            .collect();
        assert_eq!(
            described,
            [
                (vec![5, 6], DataType::Null),
                (vec![3], DataType::Boolean),
                (vec![0], DataType::Int64),
                (vec![2], DataType::Float64),
                (vec![1], DataType::Utf8),
                (vec![4], DataType::Utf8),
            ]
        );
        assert_eq!(
            parts[2]
                .1
                .as_primitive::<arrow::datatypes::Int64Type>()
                .value(0),
            1
        );
        assert_eq!(parts[5].1.as_string::<i32>().value(4), "[1]");
    }

    /// Scenario: values that are not JSON values.
    /// Guarantees: one write, as given.
    #[test]
    fn other_values_are_written_as_they_are() {
        let values: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![1, 2]));
        let mask = BooleanArray::from(vec![true, false]);
        let parts = typed_parts(&mask, &values).unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].0, mask);
    }
}
