//! Attributes made out of text and merged into an attribute map:
//! `UPDATE logs SET attributes = attributes || parse_json(body)`.
//!
//! Each function reads its text column once per batch, row by row, straight into attribute
//! rows (parent, key, typed value): no per-row map or JSON tree is built. The rows made are
//! then merged into the attribute table in one pass: a key of a later operand replaces the same
//! key of an earlier one, and without the map's own attributes among the operands the map is
//! replaced whole.

mod captures;
mod json;
mod logfmt;
mod made;
mod merge;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use datafusion::logical_expr::DocSection;
use penstock_dialect::model::AttrScope;
use penstock_dialect::{AttrMerge, Location, MakerKind, MapOperand, Origin};
use penstock_engine::OtapBatch;
use penstock_engine::schema::PayloadType;

use crate::error::{PipelineError, Result};
use crate::expr::{CompiledExpr, compile};
use crate::session::LazySession;

use made::MadeAttrs;

/// The group the functions that make attributes are listed in, and what holds for all of them.
pub(crate) const SECTION: DocSection = DocSection {
    include: true,
    label: "Attribute Map Functions",
    description: Some(
        "Attributes made out of text, merged into an attribute map with `||`: \
`UPDATE logs SET attributes = attributes || parse_json(body)`. A key of a later operand replaces \
the same key of an earlier one, so `attributes || parse_json(body)` overwrites the attributes \
the record has and `parse_json(body) || attributes` keeps them; without the map itself \
(`SET attributes = parse_json(body)`) the record's attributes are replaced by what the functions \
make of its text (a record whose text none of them could read keeps its own). `resource.attributes` and `scope.attributes` are merged into the same way (never replaced: \
records share them). **Bad input makes nothing, never an error:** a NULL text, text that does \
not parse and a text the expression does not match add no attribute, so no record fails its \
batch. These functions are only called in such a merge (elsewhere `check` refuses them). The \
text is read once per row, straight into attribute rows: no map or JSON tree is built per \
record.",
    ),
};

/// The functions that make attributes: name, syntax and description.
pub(crate) fn documentation() -> [(&'static str, &'static str, &'static str); 3] {
    [
        (
            "parse_json",
            "parse_json(text[, separator])",
            "The members of the JSON object `text` as attributes, typed: a string is a string, \
an integer an int (beyond 64 bits a double), a fraction or exponent a double, `true`/`false` a \
bool; a nested object is a map attribute, or with a `separator` its members are attributes \
whose keys are joined by it (`parse_json(body, '.')` makes `http.method` of \
`{\"http\": {\"method\": \"GET\"}}`); an array is an array attribute; a `null` member makes \
none; a key twice keeps the last. Text that is not one JSON object, or nests more than 20 \
levels inside it (deeper than OTLP receivers decode), makes nothing.",
        ),
        (
            "parse_logfmt",
            "parse_logfmt(text)",
            "The `key=value` pairs of `text`, separated by whitespace, as string attributes: a \
value is bare (up to the next whitespace) or double-quoted with backslash escapes \
(`msg=\"disk full\"`); `key=` is an empty string and a key alone is `true`. Text with an \
unterminated quote makes nothing.",
        ),
        (
            "regexp_captures",
            "regexp_captures(text, pattern)",
            "The named groups of the first match of the regular expression `pattern` (a \
literal; Rust regex syntax) in `text` as string attributes, each named as its group: \
`(?P<http.request.method>\\w+)` (names may hold `.`, `[` and `]`). A group that took no part in \
the match makes none; text it does not match makes nothing. Cast a value afterwards for another \
type: `SET attributes['code'] = CAST(attributes['code'] AS BIGINT)`.",
        ),
    ]
}

/// `origin` moved to `location` in its file.
fn at(origin: &Origin, location: Location) -> Origin {
    Origin {
        file: origin.file.clone(),
        location,
    }
}

/// How a function reads its text.
enum Reader {
    Json { separator: Option<String> },
    Logfmt,
    Captures(captures::Captures),
}

/// One function of a merge, compiled.
struct Maker {
    reader: Reader,
    input: CompiledExpr,
    /// Whether it comes before the map's own attributes (which then win over it).
    yields: bool,
    sql: String,
}

/// A merge into an attribute map, compiled.
pub(crate) struct CompiledMerge {
    makers: Vec<Maker>,
    keeps_existing: bool,
}

impl CompiledMerge {
    /// Plans the text of each function and compiles its reader.
    pub(crate) fn compile(
        session: &LazySession,
        merge: &AttrMerge,
        origin: &Origin,
    ) -> Result<CompiledMerge> {
        let mut makers = Vec::new();
        let mut yields = true;
        for operand in &merge.operands {
            let maker = match operand {
                MapOperand::Existing => {
                    yields = false;
                    continue;
                }
                MapOperand::Made(maker) => maker,
            };
            let input = session.plan(&maker.input.expr, |state| {
                compile(state, &maker.input, origin)
            })?;
            let text = matches!(
                input.data_type,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
            ) || matches!(&input.data_type, DataType::Dictionary(_, v) if v.as_ref() == &DataType::Utf8);
            if !text {
                return Err(PipelineError::plan(
                    &at(origin, maker.location),
                    format!(
                        "in `{}`: {} reads text, not {}",
                        maker.sql, input.sql, input.data_type
                    ),
                ));
            }
            let reader = match &maker.kind {
                MakerKind::Json { separator } => Reader::Json {
                    separator: separator.clone(),
                },
                MakerKind::Logfmt => Reader::Logfmt,
                MakerKind::Captures { pattern } => {
                    Reader::Captures(captures::Captures::new(pattern).map_err(|why| {
                        PipelineError::plan(
                            &at(origin, maker.location),
                            format!("in `{}`: {why}", maker.sql),
                        )
                    })?)
                }
            };
            makers.push(Maker {
                reader,
                input,
                yields,
                sql: maker.sql.clone(),
            });
        }
        Ok(CompiledMerge {
            makers,
            keeps_existing: merge.keeps_existing(),
        })
    }

    /// The expressions whose values [`CompiledMerge::write`] takes, in order.
    pub(crate) fn inputs(&self) -> impl Iterator<Item = &CompiledExpr> {
        self.makers.iter().map(|m| &m.input)
    }

    /// Merges what the functions make of `texts` (one array per function, as
    /// [`CompiledMerge::inputs`]) into the map of `scope` of the rows of `space` that `mask`
    /// selects.
    pub(crate) fn write(
        &mut self,
        batch: OtapBatch,
        space: PayloadType,
        scope: AttrScope,
        mask: &BooleanArray,
        texts: &[ArrayRef],
    ) -> Result<OtapBatch> {
        let mut made = MadeAttrs::default();
        let mut scratch = json::Scratch::default();
        // The rows whose text some function read (an object, pairs, a match).
        let mut read = vec![false; mask.len()];
        for (maker, texts) in self.makers.iter_mut().zip(texts) {
            made.set_yielding(maker.yields);
            let texts = match texts.data_type() {
                DataType::Utf8 => std::sync::Arc::clone(texts),
                _ => cast(texts, &DataType::Utf8)
                    .map_err(|e| PipelineError::arrow("reading text to parse", e))?,
            };
            let texts = texts.as_string::<i32>();
            for row in mask.values().set_indices() {
                if texts.is_null(row) {
                    continue;
                }
                let text = texts.value(row);
                let index = row as u32;
                read[row] |= match &mut maker.reader {
                    Reader::Json { separator } => json::object_into(
                        text,
                        separator.as_deref(),
                        index,
                        &mut made,
                        &mut scratch,
                    ),
                    Reader::Logfmt => logfmt::pairs_into(text, index, &mut made),
                    Reader::Captures(captures) => captures.into(text, index, &mut made),
                };
            }
        }
        let several = self.makers.len() > 1;
        match scope {
            AttrScope::Record => {
                merge::into_records(batch, space, made, several, self.keeps_existing, &read)
            }
            _ => merge::into_envelopes(batch, space, scope, made, several),
        }
    }

    /// What it does, for `--explain`.
    pub(crate) fn describe(&self) -> Vec<String> {
        self.makers
            .iter()
            .map(|m| {
                let how = match m.reader {
                    Reader::Json { .. } => "JSON object scan",
                    Reader::Logfmt => "key=value scan",
                    Reader::Captures(_) => "regular expression, named groups",
                };
                let wins = match (self.keeps_existing, m.yields) {
                    (false, _) => "replaces the map",
                    (true, true) => "existing keys kept",
                    (true, false) => "existing keys overwritten",
                };
                format!("  {} [{how} into attribute rows; {wins}]", m.sql)
            })
            .collect()
    }
}
