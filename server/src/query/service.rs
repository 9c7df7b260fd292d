//! The Flight SQL service: statement queries over the `live` and `recent` tables.
//!
//! `GetFlightInfo` with a `CommandStatementQuery` checks and plans the query and answers with
//! its schema and one endpoint whose ticket holds the query; `DoGet` with that ticket runs it
//! and streams the rows. A live query reads what arrives from then on for its time (the
//! `x-penstock-for` call header, default [`QueryOptions::default_for`], at most
//! [`QueryOptions::max_for`]) or until its `LIMIT` is met.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::server::FlightSqlService;
use arrow_flight::sql::{CommandStatementQuery, ProstMessageExt, SqlInfo, TicketStatementQuery};
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use futures::{Stream, StreamExt, TryStreamExt};
use penstock_dialect::query::{CheckedQuery, Relation, check_query};
use penstock_pipeline::query::{QueryInput, QueryLimits, execute_query};
use prost::Message;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::{Request, Response, Status};

use super::QueryOptions;
use super::taps::Taps;

/// The call header that sets how long a live query reads (e.g. `30s`).
pub const FOR_HEADER: &str = "x-penstock-for";

/// The query service of one gateway.
pub struct QueryService {
    pub(crate) taps: Arc<Taps>,
    pub(crate) options: QueryOptions,
    /// Source and sink names a query may read.
    pub(crate) streams: Vec<String>,
    /// One permit per running query.
    pub(crate) running: Arc<Semaphore>,
}

type RowData = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send>>;

/// A query that failed while it ran.
fn aborted(e: impl std::fmt::Display) -> FlightError {
    FlightError::Tonic(Box::new(Status::aborted(e.to_string())))
}

/// A query error as the client sees it: bad queries are invalid arguments.
fn invalid(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(e.to_string())
}

impl QueryService {
    /// Checks `sql` and that the stream it names exists.
    fn check(&self, sql: &str) -> Result<CheckedQuery, Status> {
        let query = check_query(sql).map_err(invalid)?;
        let stream = match &query.relation {
            Relation::Live { stream } | Relation::Recent { stream } => stream,
        };
        if let Some(name) = stream
            && !self.streams.iter().any(|s| s == name)
        {
            return Err(invalid(format!(
                "no source or sink named '{name}'; there are: {}",
                self.streams.join(", ")
            )));
        }
        Ok(query)
    }

    /// How long a live query of this call reads.
    fn duration<T>(&self, request: &Request<T>) -> Result<Duration, Status> {
        let Some(value) = request.metadata().get(FOR_HEADER) else {
            return Ok(self.options.default_for);
        };
        let text = value
            .to_str()
            .map_err(|_| invalid(format!("{FOR_HEADER} is not text")))?;
        let wanted = penstock_dialect::options::parse_duration(text).ok_or_else(|| {
            invalid(format!(
                "{FOR_HEADER}: '{text}' is not a duration such as 10s or 2m"
            ))
        })?;
        Ok(wanted.min(self.options.max_for))
    }

    /// A place for one more query, or RESOURCE_EXHAUSTED.
    fn admit(&self) -> Result<OwnedSemaphorePermit, Status> {
        Arc::clone(&self.running).try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "{} queries are running, the most this gateway runs at once; try again when one ends",
                self.options.max_queries
            ))
        })
    }

    /// Runs `query` for `duration` (live) and streams its rows as Flight data.
    async fn run(&self, query: CheckedQuery, duration: Duration) -> Result<RowData, Status> {
        let permit = self.admit()?;
        let limits = QueryLimits {
            memory_bytes: self.options.memory_bytes,
        };
        let signal = penstock_pipeline::signal_of(query.table);
        let (input, live) = match &query.relation {
            Relation::Recent { stream } => (
                QueryInput::Batches(self.taps.recent(stream.as_deref())),
                None,
            ),
            Relation::Live { stream } => {
                let (subscription, receiver) = self.taps.subscribe(signal, stream.clone());
                (QueryInput::Live(receiver), Some(subscription))
            }
        };
        let (schema, rows) = execute_query(&query, input, limits)
            .await
            .map_err(invalid)?;
        if let Some(subscription) = &live {
            // The query's time: then its feed ends and it finishes (aggregates are final).
            let taps = Arc::clone(&self.taps);
            let id = subscription.id();
            tokio::spawn(async move {
                tokio::time::sleep(duration).await;
                taps.unsubscribe(id);
            });
        }
        // A query that has not finished a while after its time ends with an error.
        let limit = duration + self.options.max_for;
        let deadline = tokio::time::Instant::now() + limit;
        let rows =
            futures::stream::unfold((rows, Some(permit)), move |(mut rows, permit)| async move {
                // The permit is held as long as the query runs.
                permit.as_ref()?;
                match tokio::time::timeout_at(deadline, rows.next()).await {
                    Ok(Some(Ok(batch))) => Some((Ok(batch), (rows, permit))),
                    Ok(Some(Err(e))) => Some((Err(aborted(e)), (rows, None))),
                    Ok(None) => None,
                    Err(_) => Some((
                        Err(aborted(format!(
                            "the query ran past its time limit of {} s",
                            limit.as_secs()
                        ))),
                        (rows, None),
                    )),
                }
            });
        let data = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(rows)
            .map_err(Status::from);
        Ok(Box::pin(data))
    }
}

#[tonic::async_trait]
impl FlightSqlService for QueryService {
    type FlightService = QueryService;

    async fn get_flight_info_statement(
        &self,
        command: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let query = self.check(&command.query)?;
        // Planned over no rows: the schema, without reading anything.
        let (schema, _) = execute_query(
            &query,
            QueryInput::Batches(Vec::new()),
            QueryLimits::default(),
        )
        .await
        .map_err(invalid)?;
        let ticket = TicketStatementQuery {
            statement_handle: command.query.into_bytes().into(),
        };
        let endpoint = FlightEndpoint::new().with_ticket(Ticket {
            ticket: ticket.as_any().encode_to_vec().into(),
        });
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(e.to_string()))?
            .with_descriptor(request.into_inner())
            .with_endpoint(endpoint)
            .with_ordered(true);
        Ok(Response::new(info))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let sql = std::str::from_utf8(&ticket.statement_handle)
            .map_err(|_| invalid("the ticket does not hold a query"))?;
        let query = self.check(sql)?;
        let duration = self.duration(&request)?;
        Ok(Response::new(self.run(query, duration).await?))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
