//! `penstock top`: a full-screen view of a running gateway, refreshed every second from its
//! `system.*` tables: records per second through each source and sink, rows in, out and
//! dropped per pipeline statement, failures, queue depths, and the queries running.

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::UInt64Type;

use super::query::{Access, connect, fetch, table};

/// How often the screen is redrawn.
const REFRESH: Duration = Duration::from_secs(1);

/// Shows the gateway whose query service is at `endpoint` until Ctrl-C.
pub fn run(endpoint: &str, access: &Access) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut client = connect(endpoint, access).await?;
        let mut previous: HashMap<String, (u64, Instant)> = HashMap::new();
        loop {
            let screen = draw(&mut client, &mut previous, endpoint).await?;
            let mut out = std::io::stdout().lock();
            write!(out, "\x1b[2J\x1b[H{screen}")?;
            out.flush()?;
            tokio::select! {
                _ = tokio::time::sleep(REFRESH) => {}
                _ = tokio::signal::ctrl_c() => return Ok(()),
            }
        }
    })
}

/// One screen: the flows with their rates, the statements, the queries.
async fn draw(
    client: &mut arrow_flight::sql::client::FlightSqlServiceClient<tonic::transport::Channel>,
    previous: &mut HashMap<String, (u64, Instant)>,
    endpoint: &str,
) -> anyhow::Result<String> {
    let mut out = format!("penstock top: {endpoint} (Ctrl-C quits)\n\n");
    let gateway = fetch(
        client,
        "SELECT queued_batches, in_flight_bytes, receiving_requests, connections, otap_streams \
         FROM system.gateway",
    )
    .await?;
    out.push_str(&table(&gateway)?);
    out.push('\n');
    for kind in ["sources", "sinks"] {
        let failed = if kind == "sources" {
            "refused"
        } else {
            "failed"
        };
        let batches = fetch(
            client,
            &format!("SELECT name, records, batches, {failed} FROM system.{kind} ORDER BY name"),
        )
        .await?;
        let with_rates = rates(&batches, kind, previous)?;
        out.push_str(&table(&with_rates)?);
        out.push('\n');
    }
    let statements = fetch(
        client,
        "SELECT pipeline, statement, label, rows_in, rows_out, rows_dropped, failed_batches \
         FROM system.statements ORDER BY pipeline, statement",
    )
    .await?;
    out.push_str(&table(&statements)?);
    out.push('\n');
    let queries = fetch(
        client,
        "SELECT id, principal, seconds, batches_offered, batches_skipped, sql FROM system.queries \
         WHERE sql NOT LIKE '%system.%' ORDER BY id",
    )
    .await?;
    out.push_str(&table(&queries)?);
    Ok(out)
}

/// `batches` (name, records, ...) with a `records_per_s` column after `records`, from the
/// change since the last screen.
fn rates(
    batches: &[RecordBatch],
    kind: &str,
    previous: &mut HashMap<String, (u64, Instant)>,
) -> anyhow::Result<Vec<RecordBatch>> {
    let now = Instant::now();
    let mut out = Vec::new();
    for batch in batches {
        let names = batch.column(0).as_string::<i32>();
        let records = batch.column(1).as_primitive::<UInt64Type>();
        let per_second: arrow::array::Float64Array = (0..batch.num_rows())
            .map(|i| {
                let key = format!("{kind}/{}", names.value(i));
                let current = records.value(i);
                let rate = previous.get(&key).map(|(before, at)| {
                    let seconds = now.duration_since(*at).as_secs_f64().max(1e-3);
                    (current.saturating_sub(*before) as f64 / seconds).round()
                });
                previous.insert(key, (current, now));
                rate
            })
            .collect();
        let mut fields: Vec<arrow::datatypes::FieldRef> = batch.schema().fields().to_vec();
        let mut columns = batch.columns().to_vec();
        fields.insert(
            2,
            std::sync::Arc::new(arrow::datatypes::Field::new(
                "records_per_s",
                arrow::datatypes::DataType::Float64,
                true,
            )),
        );
        columns.insert(2, std::sync::Arc::new(per_second));
        out.push(RecordBatch::try_new(
            std::sync::Arc::new(arrow::datatypes::Schema::new(fields)),
            columns,
        )?);
    }
    Ok(out)
}
