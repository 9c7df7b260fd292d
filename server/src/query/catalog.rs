//! What the query service tells clients that browse it (ADBC's `get_objects`, DBeaver,
//! Grafana): catalogs `live` and `recent`, in each a schema per source and sink plus `all`
//! (every source), in each the tables `logs`, `spans` and `metrics`; catalog `system` with the
//! gateway's own tables in its schema `all`; and the server's `SqlInfo`.

use std::sync::OnceLock;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::error::FlightError;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetTableTypes, CommandGetTables, SqlInfo,
};
use penstock_dialect::model::Table;
use penstock_dialect::query::ALL_SOURCES;
use penstock_pipeline::query::table_schema;

/// The catalogs of telemetry: where rows come from.
pub const CATALOGS: [&str; 2] = ["live", "recent"];

/// The catalog of the gateway's own tables.
pub const SYSTEM_CATALOG: &str = "system";

/// The type of every telemetry table.
pub const TABLE_TYPE: &str = "TABLE";

/// The type of the gateway's own tables.
pub const SYSTEM_TABLE_TYPE: &str = "SYSTEM TABLE";

/// The schemas of each catalog: `all`, then every source and sink.
fn schemas(streams: &[String]) -> Vec<String> {
    std::iter::once(ALL_SOURCES.to_string())
        .chain(streams.iter().cloned())
        .collect()
}

/// `GetCatalogs`.
pub fn catalogs(query: CommandGetCatalogs) -> Result<RecordBatch, FlightError> {
    let mut builder = query.into_builder();
    for catalog in CATALOGS {
        builder.append(catalog);
    }
    builder.append(SYSTEM_CATALOG);
    builder.build()
}

/// `GetDbSchemas` (the builder applies the client's catalog and pattern filters).
pub fn db_schemas(
    query: CommandGetDbSchemas,
    streams: &[String],
) -> Result<RecordBatch, FlightError> {
    let mut builder = query.into_builder();
    for catalog in CATALOGS {
        for schema in schemas(streams) {
            builder.append(catalog, &schema);
        }
    }
    builder.append(SYSTEM_CATALOG, ALL_SOURCES);
    builder.build()
}

/// `GetTables`, with each table's columns when asked: telemetry tables per stream, then
/// `system` (each with its columns as `system`'s tables have them now).
pub fn tables(
    query: CommandGetTables,
    streams: &[String],
    system: &[(&str, SchemaRef)],
) -> Result<RecordBatch, FlightError> {
    let mut builder = query.into_builder();
    for catalog in CATALOGS {
        for schema in schemas(streams) {
            for table in Table::ALL {
                builder.append(
                    catalog,
                    &schema,
                    table.name(),
                    TABLE_TYPE,
                    &table_schema(table),
                )?;
            }
        }
    }
    for (name, schema) in system {
        builder.append(SYSTEM_CATALOG, ALL_SOURCES, name, SYSTEM_TABLE_TYPE, schema)?;
    }
    builder.build()
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
        builder.build().ok()
    })
    .as_ref()
}
