//! `lookup(table, key, column [, key_column])`: the value of `column` in the row of lookup
//! table `table` whose `key_column` (the table's key by default) reads as `key`; NULL when no
//! row does. Planned once per expression (the table and columns are literals, the result has
//! the column's type), run as one hash probe per key (per distinct key of a dictionary) and one
//! `take` per batch.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue, exec_datafusion_err, plan_datafusion_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility, scalar_doc_sections,
};

use super::lookups::Lookups;
use super::table::{KeyIndex, LoadedTable};

/// The function over the tables of one program.
#[derive(Debug)]
pub(crate) struct Lookup {
    lookups: Arc<Lookups>,
    signature: Signature,
    documentation: Documentation,
}

impl PartialEq for Lookup {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.lookups, &other.lookups)
    }
}

impl Eq for Lookup {}

impl std::hash::Hash for Lookup {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.lookups).hash(state);
    }
}

impl Lookup {
    /// The function over `lookups`, ready to register.
    pub(crate) fn udf(lookups: Arc<Lookups>) -> ScalarUDF {
        ScalarUDF::new_from_impl(Lookup {
            lookups,
            signature: Signature::variadic_any(Volatility::Immutable),
            documentation: Documentation::builder(
                scalar_doc_sections::DOC_SECTION_OTHER,
                "The value of `column` in the row of lookup table `table` (`CREATE TABLE table \
                 FROM FILE`) whose `key_column` (the table's `key` option, else its first column) \
                 reads as `key`; NULL when no row does or `key` is NULL. Keys compare as text. \
                 The value has the column's type. `UPDATE ... FROM table t WHERE e = t.k` reads \
                 `t.c` as `lookup('table', e, 'c', 'k')`.",
                "lookup(table, key, column[, key_column])",
            )
            .with_argument("table", "the lookup table's name, a 'string' literal")
            .with_argument("key", "the value looked up")
            .with_argument("column", "the column read, a 'string' literal")
            .with_argument(
                "key_column",
                "the column looked in, a 'string' literal (default: the table's key)",
            )
            .build(),
        })
    }

    /// The table, the column read, and the index of the column looked in, that literal
    /// arguments name.
    fn resolve<'a>(
        &'a self,
        literals: &[Option<&ScalarValue>],
    ) -> Result<(&'a Arc<LoadedTable>, usize, Arc<KeyIndex>)> {
        if !(3..=4).contains(&literals.len()) {
            return plan_err!("lookup takes (table, key, column[, key_column])");
        }
        let text = |i: usize, what: &str| -> Result<String> {
            literals
                .get(i)
                .copied()
                .flatten()
                .and_then(|v| v.try_as_str().flatten())
                .map(str::to_string)
                .ok_or_else(|| plan_datafusion_err!("lookup: {what} is a 'string' literal"))
        };
        let name = text(0, "the table")?;
        let table = self.lookups.get(&name).ok_or_else(|| {
            plan_datafusion_err!("unknown lookup table '{name}' (CREATE TABLE {name} FROM FILE)")
        })?;
        let column = table
            .column(&text(2, "the column")?)
            .map_err(|e| plan_datafusion_err!("{e}"))?;
        let key = match literals.len() {
            4 => table
                .column(&text(3, "the key column")?)
                .map_err(|e| plan_datafusion_err!("{e}"))?,
            _ => table
                .column(&table.key_column())
                .map_err(|e| plan_datafusion_err!("{e}"))?,
        };
        // The index is made (and a key column that repeats refused) when planning.
        let index = table.index(key).map_err(|e| plan_datafusion_err!("{e}"))?;
        Ok((table, column, index))
    }
}

impl ScalarUDFImpl for Lookup {
    fn name(&self) -> &str {
        penstock_dialect::LOOKUP
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        plan_err!("lookup's type is that of the column it reads")
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let (table, column, _) = self.resolve(args.scalar_arguments)?;
        let field = table.batch().schema().field(column).clone();
        Ok(Arc::new(Field::new(
            field.name(),
            field.data_type().clone(),
            true,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let literals: Vec<Option<ScalarValue>> = args
            .args
            .iter()
            .map(|a| match a {
                ColumnarValue::Scalar(s) => Some(s.clone()),
                ColumnarValue::Array(_) => None,
            })
            .collect();
        let refs: Vec<Option<&ScalarValue>> = literals.iter().map(Option::as_ref).collect();
        let (table, column, index) = self.resolve(&refs)?;
        let scalar = matches!(args.args[1], ColumnarValue::Scalar(_));
        let keys = args.args[1].to_array(if scalar { 1 } else { args.number_rows })?;
        let rows = index
            .probe(&keys)
            .map_err(|e| exec_datafusion_err!("{e}"))?;
        let values = table
            .take(column, &rows)
            .map_err(|e| exec_datafusion_err!("{e}"))?;
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&values, 0)?)
        } else {
            ColumnarValue::Array(values)
        })
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&self.documentation)
    }
}
