//! `penstock query`: runs one SQL query on a gateway's query service (Arrow Flight SQL) and
//! prints the rows as a table, JSON lines or CSV.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Context;
use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use arrow_flight::decode::DecodedPayload;
use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::StreamExt;

use crate::query::service::{FOR_HEADER, SKIPPED_METADATA};

/// How rows are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// An aligned table with the row count and elapsed time.
    Table,
    /// One JSON object per row.
    Json,
    /// Comma-separated values with a header line.
    Csv,
}

/// How to reach a query service that asks for a token or serves TLS.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Its token.
    pub token: Option<String>,
    /// A CA certificate (PEM) to trust for an https:// endpoint.
    pub ca: Option<std::path::PathBuf>,
}

/// What to run and where.
#[derive(Debug, Clone)]
pub struct QueryArgs {
    /// The query service, http://host:port.
    pub endpoint: String,
    /// How long a live query reads.
    pub duration: Option<Duration>,
    /// How to print the rows.
    pub format: Format,
    /// Keep the query running, printing rows as they arrive, until Ctrl-C.
    pub follow: bool,
    /// The token and trusted CA.
    pub access: Access,
    /// The query.
    pub sql: String,
}

/// Runs the query and prints its rows on standard output.
pub fn run(args: QueryArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a runtime")?;
    runtime.block_on(query(args))
}

/// The longest a followed query asks to read at once (the gateway caps it); it is asked again
/// when the gateway ends it.
const FOLLOW_FOR: &str = "24h";

async fn query(args: QueryArgs) -> anyhow::Result<()> {
    let mut client = connect(&args.endpoint, &args.access).await?;
    if args.follow {
        client.set_header(FOR_HEADER, FOLLOW_FOR);
        let mut header = true;
        loop {
            tokio::select! {
                done = follow_once(&mut client, &args, &mut header) => done?,
                _ = tokio::signal::ctrl_c() => return Ok(()),
            }
        }
    }
    if let Some(duration) = args.duration {
        client.set_header(FOR_HEADER, format!("{}ms", duration.as_millis()));
    }
    let started = Instant::now();
    let mut batches = Vec::new();
    let skipped = each_batch(&mut client, &args.sql, |batch| {
        // The first (empty) batch gives the columns, for a header even without rows.
        if batch.num_rows() == 0 && !batches.is_empty() {
            return Ok(());
        }
        if args.format != Format::Table {
            print_batch(&batch, args.format, batches.is_empty())?;
        }
        batches.push(batch);
        Ok(())
    })
    .await?;
    if args.format == Format::Table {
        let mut out = std::io::stdout().lock();
        write!(out, "{}", table(&batches)?)?;
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        writeln!(
            out,
            "({rows} row{}, {:.2} s{})",
            if rows == 1 { "" } else { "s" },
            started.elapsed().as_secs_f64(),
            match skipped {
                0 => String::new(),
                n => format!(", {n} batches skipped: the query fell behind"),
            }
        )?;
    } else if skipped > 0 {
        eprintln!("{skipped} batches skipped: the query fell behind");
    }
    Ok(())
}

/// Connects to the query service at `endpoint` (https://: over TLS).
pub async fn connect(
    endpoint: &str,
    access: &Access,
) -> anyhow::Result<FlightSqlServiceClient<tonic::transport::Channel>> {
    let mut target = tonic::transport::Endpoint::from_shared(endpoint.to_string())
        .with_context(|| format!("endpoint '{endpoint}'"))?;
    if endpoint.starts_with("https://") {
        let tls = match &access.ca {
            Some(path) => {
                let pem =
                    std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
                tonic::transport::ClientTlsConfig::new()
                    .ca_certificate(tonic::transport::Certificate::from_pem(pem))
            }
            None => tonic::transport::ClientTlsConfig::new().with_native_roots(),
        };
        target = target.tls_config(tls).context("TLS")?;
    }
    let channel = target
        .connect()
        .await
        .with_context(|| format!("connecting to {endpoint}"))?;
    let mut client = FlightSqlServiceClient::new(channel);
    if let Some(token) = &access.token {
        client.set_token(token.clone());
    }
    Ok(client)
}

/// Runs `sql` and returns all its rows.
pub async fn fetch(
    client: &mut FlightSqlServiceClient<tonic::transport::Channel>,
    sql: &str,
) -> anyhow::Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    each_batch(client, sql, |batch| {
        batches.push(batch);
        Ok(())
    })
    .await?;
    Ok(batches)
}

/// Runs `sql`, hands each batch to `on_batch` as it arrives (first an empty one with the
/// result's columns), and returns how many batches the query skipped (see
/// [`SKIPPED_METADATA`]).
async fn each_batch(
    client: &mut FlightSqlServiceClient<tonic::transport::Channel>,
    sql: &str,
    mut on_batch: impl FnMut(RecordBatch) -> anyhow::Result<()>,
) -> anyhow::Result<u64> {
    let failed = |e| anyhow::anyhow!("{}", flight_message(e));
    let info = client
        .execute(sql.to_string(), None)
        .await
        .map_err(failed)?;
    let mut skipped = 0;
    for endpoint in info.endpoint {
        let Some(ticket) = endpoint.ticket else {
            continue;
        };
        let mut messages = client.do_get(ticket).await.map_err(failed)?.into_inner();
        while let Some(message) = messages.next().await {
            let message = message.map_err(failed)?;
            skipped += skipped_of(&message.inner.app_metadata);
            match message.payload {
                // The columns, even of a result without rows.
                DecodedPayload::Schema(schema) => on_batch(RecordBatch::new_empty(schema))?,
                DecodedPayload::RecordBatch(batch) => on_batch(batch)?,
                DecodedPayload::None => {}
            }
        }
    }
    Ok(skipped)
}

/// Runs the query once, printing each batch as it arrives (`header`: whether the column names
/// are still to be printed).
async fn follow_once(
    client: &mut FlightSqlServiceClient<tonic::transport::Channel>,
    args: &QueryArgs,
    header: &mut bool,
) -> anyhow::Result<()> {
    each_batch(client, &args.sql, |batch| {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        match args.format {
            Format::Table => {
                let text = table(std::slice::from_ref(&batch))?;
                let skip = if *header { 0 } else { 2 };
                for line in text.lines().skip(skip) {
                    writeln!(std::io::stdout().lock(), "{line}")?;
                }
            }
            format => print_batch(&batch, format, *header)?,
        }
        *header = false;
        Ok(())
    })
    .await?;
    Ok(())
}

/// The batches a query skipped, from the metadata of its last message (0 elsewhere).
fn skipped_of(metadata: &[u8]) -> u64 {
    std::str::from_utf8(metadata)
        .ok()
        .and_then(|m| m.strip_prefix(SKIPPED_METADATA))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The message of a Flight error: the server's status message when there is one.
fn flight_message(e: arrow_flight::error::FlightError) -> String {
    match e {
        arrow_flight::error::FlightError::Tonic(status) => status.message().to_string(),
        other => other.to_string(),
    }
}

/// Every cell of `batch` as text, column by column.
fn cells(batch: &RecordBatch) -> anyhow::Result<Vec<Vec<String>>> {
    let options = FormatOptions::default().with_null("NULL");
    batch
        .columns()
        .iter()
        .map(|column| {
            let formatter = ArrayFormatter::try_new(column.as_ref(), &options)?;
            Ok((0..column.len())
                .map(|i| formatter.value(i).to_string())
                .collect())
        })
        .collect()
}

/// The rows of `batches` as an aligned table.
pub fn table(batches: &[RecordBatch]) -> anyhow::Result<String> {
    let Some(first) = batches.first() else {
        return Ok(String::new());
    };
    let names: Vec<String> = first
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let mut columns: Vec<Vec<String>> = names.iter().map(|n| vec![n.clone()]).collect();
    for batch in batches {
        for (column, values) in columns.iter_mut().zip(cells(batch)?) {
            column.extend(values);
        }
    }
    let widths: Vec<usize> = columns
        .iter()
        .map(|c| c.iter().map(|v| v.chars().count()).max().unwrap_or(0))
        .collect();
    let rows = columns.first().map_or(0, Vec::len);
    let mut out = String::new();
    for row in 0..rows {
        let line: Vec<String> = columns
            .iter()
            .zip(&widths)
            .map(|(column, width)| format!("{:width$}", column[row], width = *width))
            .collect();
        out.push_str(line.join(" | ").trim_end());
        out.push('\n');
        if row == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            out.push_str(&rule.join("-+-"));
            out.push('\n');
        }
    }
    Ok(out)
}

/// Prints `batch` as JSON lines or CSV (`header`: the first batch, which gets the CSV header).
fn print_batch(batch: &RecordBatch, format: Format, header: bool) -> anyhow::Result<()> {
    let schema = batch.schema();
    let columns = cells(batch)?;
    let mut out = std::io::stdout().lock();
    if format == Format::Csv && header {
        let names: Vec<String> = schema.fields().iter().map(|f| csv(f.name())).collect();
        writeln!(out, "{}", names.join(","))?;
    }
    for row in 0..batch.num_rows() {
        match format {
            Format::Csv => {
                let values: Vec<String> = columns.iter().map(|c| csv(&c[row])).collect();
                writeln!(out, "{}", values.join(","))?;
            }
            _ => {
                let mut object = serde_json::Map::new();
                for ((field, column), array) in
                    schema.fields().iter().zip(&columns).zip(batch.columns())
                {
                    object.insert(
                        field.name().clone(),
                        json(array.as_ref(), row, &column[row]),
                    );
                }
                writeln!(out, "{}", serde_json::Value::Object(object))?;
            }
        }
    }
    Ok(())
}

/// A cell as JSON: numbers and booleans as themselves, NULL as null, the rest as text.
fn json(array: &dyn Array, row: usize, text: &str) -> serde_json::Value {
    if array.is_null(row) {
        return serde_json::Value::Null;
    }
    let numeric = array.data_type().is_numeric() || array.data_type() == &DataType::Boolean;
    match numeric.then(|| serde_json::from_str(text).ok()).flatten() {
        Some(value) => value,
        None => serde_json::Value::String(text.to_string()),
    }
}

/// A CSV field, quoted when it must be.
fn csv(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}
