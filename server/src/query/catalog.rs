//! What the query service tells clients that browse it (ADBC's `get_objects`, DBeaver,
//! Grafana): catalogs `live` and `recent`, in each a schema per source and sink plus `all`
//! (every source), in each the tables `logs`, `spans` and `metrics`; catalog `system` with the
//! gateway's own tables in its schema `all`; and the server's `SqlInfo`. A principal is shown
//! what its scope reads: `system` only the catalog `system`, `sinks` no source and no `all`.

use std::sync::OnceLock;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow_flight::error::FlightError;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetTableTypes, CommandGetTables, SqlInfo,
};
use penstock_dialect::model::Table;
use penstock_dialect::query::ALL_SOURCES;
use penstock_pipeline::query::table_schema;

use super::access::Scope;

/// The catalogs of telemetry: where rows come from.
pub const CATALOGS: [&str; 2] = ["live", "recent"];

/// The catalog of the gateway's own tables.
pub const SYSTEM_CATALOG: &str = "system";

/// The catalog of the lookup tables (`CREATE TABLE name FROM FILE`), in its schema `all`.
pub const LOOKUP_CATALOG: &str = "lookup";

/// A lookup table as the catalog lists it: its name and columns.
pub type LookupEntry = (String, SchemaRef);

/// The type of every telemetry table.
pub const TABLE_TYPE: &str = "TABLE";

/// Another name of [`TABLE_TYPE`] that clients may ask for.
pub const BASE_TABLE_TYPE: &str = "BASE TABLE";

/// The type of the gateway's own tables.
pub const SYSTEM_TABLE_TYPE: &str = "SYSTEM TABLE";

/// The schemas of each telemetry catalog a principal of `scope` sees: `all` (for scope
/// `all`), then the sources and sinks it may read (`streams`).
fn schemas(scope: Scope, streams: &[String]) -> Vec<String> {
    let every_source = (scope == Scope::All).then(|| ALL_SOURCES.to_string());
    every_source
        .into_iter()
        .chain(streams.iter().cloned())
        .collect()
}

/// The telemetry catalogs a principal of `scope` sees.
fn telemetry_catalogs(scope: Scope) -> &'static [&'static str] {
    match scope {
        Scope::System => &[],
        Scope::Sinks | Scope::All => &CATALOGS,
    }
}

/// `GetCatalogs`: with `lookup` when the principal reads lookup tables (`lookups`).
pub fn catalogs(
    query: CommandGetCatalogs,
    scope: Scope,
    lookups: &[LookupEntry],
) -> Result<RecordBatch, FlightError> {
    let mut builder = query.into_builder();
    for catalog in telemetry_catalogs(scope) {
        builder.append(*catalog);
    }
    if !lookups.is_empty() {
        builder.append(LOOKUP_CATALOG);
    }
    builder.append(SYSTEM_CATALOG);
    builder.build()
}

/// `GetDbSchemas` (the builder applies the client's catalog and pattern filters), as a
/// principal of `scope` that reads `streams` sees them.
pub fn db_schemas(
    query: CommandGetDbSchemas,
    scope: Scope,
    streams: &[String],
    lookups: &[LookupEntry],
) -> Result<RecordBatch, FlightError> {
    let mut builder = query.into_builder();
    for catalog in telemetry_catalogs(scope) {
        for schema in schemas(scope, streams) {
            builder.append(catalog, &schema);
        }
    }
    if !lookups.is_empty() {
        builder.append(LOOKUP_CATALOG, ALL_SOURCES);
    }
    builder.append(SYSTEM_CATALOG, ALL_SOURCES);
    builder.build()
}

/// `GetTables`, with each table's columns when asked: telemetry tables per stream, then
/// `system` (each with its columns as `system`'s tables have them now), as a principal of
/// `scope` that reads `streams` sees them.
pub fn tables(
    query: CommandGetTables,
    scope: Scope,
    streams: &[String],
    (system, lookups): (&[(&str, SchemaRef)], &[LookupEntry]),
) -> Result<RecordBatch, FlightError> {
    let table_type = telemetry_table_type(&query.table_types);
    let mut builder = query.into_builder();
    for catalog in telemetry_catalogs(scope) {
        for schema in schemas(scope, streams) {
            for table in Table::ALL {
                builder.append(
                    catalog,
                    &schema,
                    table.name(),
                    table_type,
                    &table_schema(table),
                )?;
            }
        }
    }
    for (name, schema) in lookups {
        builder.append(LOOKUP_CATALOG, ALL_SOURCES, name, table_type, schema)?;
    }
    for (name, schema) in system {
        builder.append(SYSTEM_CATALOG, ALL_SOURCES, name, SYSTEM_TABLE_TYPE, schema)?;
    }
    builder.build()
}

/// The type telemetry tables are listed with for a client that asks for `types`: `TABLE`, or
/// `BASE TABLE` (the SQL standard's name, which some clients, Grafana's among them, ask for)
/// when only that is asked.
fn telemetry_table_type(types: &[String]) -> &'static str {
    let asks = |name: &str| types.iter().any(|t| t.eq_ignore_ascii_case(name));
    if asks(BASE_TABLE_TYPE) && !asks(TABLE_TYPE) {
        BASE_TABLE_TYPE
    } else {
        TABLE_TYPE
    }
}

/// `GetTableTypes`.
pub fn table_types(query: CommandGetTableTypes) -> Result<RecordBatch, FlightError> {
    let mut builder = query.into_builder();
    builder.append(TABLE_TYPE);
    builder.append(SYSTEM_TABLE_TYPE);
    builder.build()
}

/// What `GetSqlInfo` answers (None if it could not be built).
pub fn sql_info() -> Option<&'static SqlInfoData> {
    static INFO: OnceLock<Option<SqlInfoData>> = OnceLock::new();
    INFO.get_or_init(|| {
        let mut builder = SqlInfoDataBuilder::new();
        builder.append(SqlInfo::FlightSqlServerName, "Penstock");
        builder.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
        builder.append(SqlInfo::FlightSqlServerArrowVersion, "59");
        builder.append(SqlInfo::FlightSqlServerReadOnly, true);
        builder.append(SqlInfo::FlightSqlServerSql, true);
        builder.append(SqlInfo::FlightSqlServerSubstrait, false);
        builder.append(SqlInfo::FlightSqlServerTransaction, 0i32);
        builder.append(SqlInfo::FlightSqlServerCancel, false);
        builder.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
        append_sql_capabilities(&mut builder);
        builder.build().ok()
    })
    .as_ref()
}

/// What the SQL of a query may use, as JDBC's `DatabaseMetaData` and ODBC's `SQLGetInfo` ask
/// (tools such as DBeaver read them when they connect): one read-only `SELECT` over one table,
/// no transactions, no keys, identifiers folded to lower case unless quoted.
fn append_sql_capabilities(builder: &mut SqlInfoDataBuilder) {
    const LOWER_CASE: i32 = 3;
    const CASE_SENSITIVE: i32 = 0;
    const NULLS_SORTED_HIGH: i32 = 0;
    const FORWARD_ONLY: i32 = 1 << 1;
    const GROUP_BY_UNRELATED: i32 = 1 << 1;
    for (info, supported) in [
        (SqlInfo::SqlDdlCatalog, false),
        (SqlInfo::SqlDdlSchema, false),
        (SqlInfo::SqlDdlTable, false),
        (SqlInfo::SqlAllTablesAreSelectable, true),
        (SqlInfo::SqlSupportsColumnAliasing, true),
        (SqlInfo::SqlNullPlusNullIsNull, true),
        (SqlInfo::SqlSupportsTableCorrelationNames, false),
        (SqlInfo::SqlSupportsDifferentTableCorrelationNames, false),
        (SqlInfo::SqlSupportsExpressionsInOrderBy, true),
        (SqlInfo::SqlSupportsOrderByUnrelated, true),
        (SqlInfo::SqlSupportsLikeEscapeClause, true),
        (SqlInfo::SqlSupportsNonNullableColumns, true),
        (SqlInfo::SqlSupportsIntegrityEnhancementFacility, false),
        (SqlInfo::SqlCatalogAtStart, true),
        (SqlInfo::SqlSelectForUpdateSupported, false),
        (SqlInfo::SqlStoredProceduresSupported, false),
        (SqlInfo::SqlCorrelatedSubqueriesSupported, false),
        (SqlInfo::SqlMaxRowSizeIncludesBlobs, false),
        (SqlInfo::SqlTransactionsSupported, false),
        (SqlInfo::SqlDataDefinitionCausesTransactionCommit, false),
        (SqlInfo::SqlDataDefinitionsInTransactionsIgnored, false),
        (SqlInfo::SqlBatchUpdatesSupported, false),
        (SqlInfo::SqlSavepointsSupported, false),
        (SqlInfo::SqlNamedParametersSupported, false),
        (SqlInfo::SqlLocatorsUpdateCopy, false),
        (SqlInfo::SqlStoredFunctionsUsingCallSyntaxSupported, false),
    ] {
        builder.append(info, supported);
    }
    for (info, value) in [
        (SqlInfo::SqlIdentifierCase, LOWER_CASE),
        (SqlInfo::SqlQuotedIdentifierCase, CASE_SENSITIVE),
        (SqlInfo::SqlNullOrdering, NULLS_SORTED_HIGH),
        (SqlInfo::SqlSupportedGroupBy, GROUP_BY_UNRELATED),
        (SqlInfo::SqlSupportedGrammar, 0),
        (SqlInfo::SqlOuterJoinsSupportLevel, 0),
        (SqlInfo::SqlSchemasSupportedActions, 0),
        (SqlInfo::SqlCatalogsSupportedActions, 0),
        (SqlInfo::SqlSupportedPositionedCommands, 0),
        (SqlInfo::SqlSupportedSubqueries, 0),
        (SqlInfo::SqlSupportedUnions, 0),
        (SqlInfo::SqlSupportedTransactionsIsolationLevels, 0),
        (SqlInfo::SqlSupportedResultSetTypes, FORWARD_ONLY),
    ] {
        builder.append(info, value);
    }
    // Lengths and counts: 0 is "no limit" (one table per query is the exception).
    for info in [
        SqlInfo::SqlMaxBinaryLiteralLength,
        SqlInfo::SqlMaxCharLiteralLength,
        SqlInfo::SqlMaxColumnNameLength,
        SqlInfo::SqlMaxColumnsInGroupBy,
        SqlInfo::SqlMaxColumnsInIndex,
        SqlInfo::SqlMaxColumnsInOrderBy,
        SqlInfo::SqlMaxColumnsInSelect,
        SqlInfo::SqlMaxColumnsInTable,
        SqlInfo::SqlMaxConnections,
        SqlInfo::SqlMaxCursorNameLength,
        SqlInfo::SqlMaxIndexLength,
        SqlInfo::SqlDbSchemaNameLength,
        SqlInfo::SqlMaxProcedureNameLength,
        SqlInfo::SqlMaxCatalogNameLength,
        SqlInfo::SqlMaxRowSize,
        SqlInfo::SqlMaxStatementLength,
        SqlInfo::SqlMaxStatements,
        SqlInfo::SqlMaxTableNameLength,
        SqlInfo::SqlMaxUsernameLength,
    ] {
        builder.append(info, 0i64);
    }
    builder.append(SqlInfo::SqlMaxTablesInSelect, 1i64);
    builder.append(SqlInfo::SqlDefaultTransactionIsolation, 0i64);
    for (info, term) in [
        (SqlInfo::SqlSchemaTerm, "schema"),
        (SqlInfo::SqlProcedureTerm, "procedure"),
        (SqlInfo::SqlCatalogTerm, "catalog"),
        (SqlInfo::SqlSearchStringEscape, "\\"),
        (SqlInfo::SqlExtraNameCharacters, ""),
    ] {
        builder.append(info, term);
    }
}

/// The columns of a `GetPrimaryKeys` answer.
pub fn primary_keys_schema() -> Schema {
    let text = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
    Schema::new(vec![
        text("catalog_name", true),
        text("db_schema_name", true),
        text("table_name", false),
        text("column_name", false),
        text("key_name", true),
        Field::new("key_sequence", DataType::Int32, false),
    ])
}

/// The columns of a `GetImportedKeys`, `GetExportedKeys` or `GetCrossReference` answer.
pub fn foreign_keys_schema() -> Schema {
    let text = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
    Schema::new(vec![
        text("pk_catalog_name", true),
        text("pk_db_schema_name", true),
        text("pk_table_name", false),
        text("pk_column_name", false),
        text("fk_catalog_name", true),
        text("fk_db_schema_name", true),
        text("fk_table_name", false),
        text("fk_column_name", false),
        Field::new("key_sequence", DataType::Int32, false),
        text("fk_key_name", true),
        text("pk_key_name", true),
        Field::new("update_rule", DataType::UInt8, false),
        Field::new("delete_rule", DataType::UInt8, false),
    ])
}

/// No rows of `schema`: the tables have no keys.
pub fn no_keys(schema: Schema) -> Result<RecordBatch, FlightError> {
    Ok(RecordBatch::new_empty(std::sync::Arc::new(schema)))
}
