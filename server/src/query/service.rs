//! The Flight SQL service: statement queries over the `live` and `recent` tables.
//!
//! `GetFlightInfo` with a `CommandStatementQuery` checks and plans the query and answers with
//! its schema and one endpoint whose ticket holds the query; `DoGet` with that ticket runs it
//! and streams the rows. A live query reads what arrives from then on for its time (the
//! `x-penstock-for` call header, default [`QueryOptions::default_for`], at most
//! [`QueryOptions::max_for`]) or until its `LIMIT` is met.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetExportedKeys, CommandGetImportedKeys, CommandGetPrimaryKeys, CommandGetSqlInfo,
    CommandGetTableTypes, CommandGetTables, CommandPreparedStatementQuery, CommandStatementQuery,
    DoPutPreparedStatementResult, ProstMessageExt, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    Action, FlightDescriptor, FlightEndpoint, FlightInfo, IpcMessage, SchemaAsIpc, Ticket,
};
use futures::{Stream, StreamExt, TryStreamExt};
use penstock_dialect::query::{CheckedQuery, Relation, check_query_with};
use penstock_pipeline::lookup::Lookups;
use penstock_pipeline::query::{QueryInput, QueryLimits, describe_query, execute_with};
use prost::Message;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::{Request, Response, Status};

use super::access::{Principal, Scope, table_name};
use super::audit::{Audited, Outcome, RunningQuery};
use super::catalog;
use super::options::QueryOptions;
use super::prepared::Prepared;
use super::system::{self, System, Viewer};
use super::taps::Taps;

/// The call header that sets how long a live query reads (e.g. `30s`).
pub const FOR_HEADER: &str = "x-penstock-for";

/// The query service of one gateway.
pub struct QueryService {
    pub(crate) taps: Arc<Taps>,
    pub(crate) options: QueryOptions,
    /// Source and sink names a query may read.
    pub(crate) streams: Vec<String>,
    /// The sink names among them.
    pub(crate) sinks: Vec<String>,
    /// One permit per running query.
    pub(crate) running: Arc<Semaphore>,
    /// Prepared statements.
    pub(crate) prepared: Prepared,
    /// The gateway's own tables, and the queries running.
    pub(crate) system: System,
}

type RowData = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send>>;

/// The answer to a `GetFlightInfo`: `schema`, and one endpoint whose ticket is `command`.
fn info(
    command: impl ProstMessageExt,
    schema: &arrow::datatypes::Schema,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let endpoint = FlightEndpoint::new().with_ticket(Ticket {
        ticket: command.as_any().encode_to_vec().into(),
    });
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(e.to_string()))?
        .with_descriptor(descriptor)
        .with_endpoint(endpoint)
        .with_ordered(true);
    Ok(Response::new(info))
}

/// `batch` as the stream of a `DoGet`.
fn one_batch(batch: Result<RecordBatch, FlightError>) -> Result<Response<RowData>, Status> {
    let batch = batch.map_err(|e| Status::internal(e.to_string()))?;
    let data = FlightDataEncoderBuilder::new()
        .build(futures::stream::iter([Ok(batch)]))
        .map_err(Status::from);
    Ok(Response::new(Box::pin(data)))
}

/// A schema as Flight SQL carries it (IPC-encoded).
fn ipc_schema(schema: &arrow::datatypes::Schema) -> Result<bytes::Bytes, Status> {
    let message: Result<IpcMessage, _> =
        SchemaAsIpc::new(schema, &arrow::ipc::writer::IpcWriteOptions::default()).try_into();
    message
        .map(|IpcMessage(bytes)| bytes)
        .map_err(|e| Status::internal(e.to_string()))
}

fn unknown_statement() -> Status {
    Status::not_found("no such prepared statement (it was closed, or too many were open)")
}

/// A query that failed while it ran.
fn aborted(e: impl std::fmt::Display) -> FlightError {
    FlightError::Tonic(Box::new(Status::aborted(e.to_string())))
}

/// A query error as the client sees it: bad queries are invalid arguments.
fn invalid(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(e.to_string())
}

/// Who makes the call: the principal its credential named (see [`super::access`]).
fn principal<T>(request: &Request<T>) -> Result<Principal, Status> {
    request
        .extensions()
        .get::<Principal>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("the call names no principal"))
}

impl QueryService {
    /// Checks `sql`, that the stream it names exists and that `principal` may read it; a
    /// query refused is recorded in the audit trail.
    fn check(&self, sql: &str, principal: &Principal) -> Result<CheckedQuery, Status> {
        let lookups = self.lookups(principal.scope);
        let names: Vec<&str> = lookups.tables().map(|t| t.name()).collect();
        let query = check_query_with(sql, system::names(), &names)
            .map_err(|e| self.not_run(principal, sql, None, invalid(e)))?;
        let stream = match &query.relation {
            Relation::Live { stream } | Relation::Recent { stream } => stream,
            Relation::System { .. } | Relation::Lookup { .. } | Relation::Values => &None,
        };
        if let Some(name) = stream
            && !self.streams.iter().any(|s| s == name)
        {
            let visible = self.visible_streams(principal.scope);
            let error = format!(
                "no source or sink named '{name}'; there are: {}",
                visible.join(", ")
            );
            return Err(self.not_run(principal, sql, Some(&query), invalid(error)));
        }
        if let Err(table) = principal.may_read(&query, &self.sinks) {
            let error = format!(
                "principal '{}' (scope {}) may not read {table}",
                principal.name, principal.scope
            );
            let status = Status::permission_denied(error);
            return Err(self.not_run(principal, sql, Some(&query), status));
        }
        Ok(query)
    }

    /// Records `sql` of `principal` as not run for `status` (invalid, or refused when the
    /// status says so) and gives the status back.
    fn not_run(
        &self,
        principal: &Principal,
        sql: &str,
        query: Option<&CheckedQuery>,
        status: Status,
    ) -> Status {
        let table = query.map(table_name).unwrap_or_default();
        let outcome = match status.code() {
            tonic::Code::PermissionDenied | tonic::Code::ResourceExhausted => {
                Outcome::Refused(status.message().to_string())
            }
            _ => Outcome::Invalid(status.message().to_string()),
        };
        let listed = RunningQuery::new(&principal.name, sql, table);
        self.system.queries.not_run(listed, outcome);
        status
    }

    /// The lookup tables of the running program a principal of `scope` may read: none for
    /// scope `system` (not even their names, nor through `lookup`).
    fn lookups(&self, scope: Scope) -> Arc<Lookups> {
        match scope {
            Scope::System => Arc::default(),
            Scope::Sinks | Scope::All => Arc::clone(&self.system.running.borrow().lookups),
        }
    }

    /// The lookup tables a principal of `scope` reads, as the catalog lists them.
    fn lookup_entries(&self, scope: Scope) -> Vec<catalog::LookupEntry> {
        self.lookups(scope)
            .tables()
            .map(|t| (t.name().to_string(), t.batch().schema()))
            .collect()
    }

    /// What one query of a principal of `scope` may use: its memory, and the lookup tables it
    /// may read.
    fn limits(&self, scope: Scope) -> QueryLimits {
        QueryLimits {
            memory_bytes: self.options.memory_bytes,
            lookups: self.lookups(scope),
        }
    }

    /// The source and sink names a principal of `scope` may read (their schemas in the
    /// catalog).
    fn visible_streams(&self, scope: Scope) -> Vec<String> {
        self.streams
            .iter()
            .filter(|s| scope.reads_stream(Some(s), &self.sinks))
            .cloned()
            .collect()
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

    /// What `query` is planned over to learn its schema: no rows, or its system table as
    /// `principal` sees it.
    fn shape_input(
        &self,
        query: &CheckedQuery,
        principal: &Principal,
    ) -> Result<QueryInput, Status> {
        let viewer = match principal.scope {
            Scope::All => Viewer::Everyone,
            Scope::Sinks | Scope::System => Viewer::Only(&principal.name),
        };
        Ok(match &query.relation {
            Relation::System { table } => QueryInput::Rows(
                self.system
                    .table(table, &viewer)
                    .map_err(|e| Status::internal(e.to_string()))?,
            ),
            Relation::Lookup { table } => QueryInput::Rows(
                self.lookups(principal.scope)
                    .get(table)
                    .map(|t| t.batch().clone())
                    .ok_or_else(|| Status::not_found(format!("no lookup table '{table}'")))?,
            ),
            Relation::Values => QueryInput::Rows(RecordBatch::new_empty(Arc::new(
                arrow::datatypes::Schema::empty(),
            ))),
            _ => QueryInput::Batches(Vec::new()),
        })
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

    /// Runs `query` of `principal` for `duration` (live) and streams its rows as Flight
    /// data; its end is recorded in the audit trail.
    async fn run(
        &self,
        text: &str,
        query: CheckedQuery,
        principal: &Principal,
        duration: Duration,
        parameters: Option<&RecordBatch>,
    ) -> Result<RowData, Status> {
        let table = table_name(&query);
        let permit = self
            .admit()
            .map_err(|status| self.not_run(principal, text, Some(&query), status))?;
        let limits = self.limits(principal.scope);
        let (input, live) = match (&query.relation, query.table) {
            (Relation::Recent { stream }, _) => (
                QueryInput::Batches(self.taps.recent(stream.as_deref())),
                None,
            ),
            (Relation::Live { stream }, Some(table)) => {
                let signal = penstock_pipeline::signal_of(table);
                let (subscription, receiver) = self.taps.subscribe(signal, stream.clone());
                (QueryInput::Live(receiver), Some(subscription))
            }
            _ => (self.shape_input(&query, principal)?, None),
        };
        let mut listed = RunningQuery::new(&principal.name, text, table);
        listed.feed = live.clone();
        let (schema, rows) = match execute_with(&query, input, limits, parameters).await {
            Ok(planned) => planned,
            Err(e) => {
                if let Some(subscription) = &live {
                    self.taps.unsubscribe(subscription.id());
                }
                let outcome = Outcome::Invalid(e.to_string());
                self.system.queries.not_run(listed, outcome);
                return Err(invalid(e));
            }
        };
        let sent = Arc::clone(&listed.rows);
        let id = self.system.queries.start(listed);
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
        let rows = futures::stream::unfold((rows, Some(permit)), move |(mut rows, permit)| {
            let sent = Arc::clone(&sent);
            async move {
                // The permit is held as long as the query runs.
                permit.as_ref()?;
                match tokio::time::timeout_at(deadline, rows.next()).await {
                    Ok(Some(Ok(batch))) => {
                        sent.fetch_add(batch.num_rows() as u64, Relaxed);
                        Some((Ok(batch), (rows, permit)))
                    }
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
            }
        });
        let data = FlightDataEncoderBuilder::new()
            .with_schema(Arc::clone(&schema))
            .build(rows)
            .map_err(Status::from);
        // Last, an empty batch whose metadata says how many batches the query skipped.
        let summary = futures::stream::once(async move {
            let skipped = live.as_ref().map_or(0, |s| s.skipped.load(Relaxed));
            summary_message(&schema, skipped)
        });
        let queries = Arc::clone(&self.system.queries);
        let data: RowData = Box::pin(data.chain(summary));
        Ok(Box::pin(Audited::new(data, queries, id)))
    }
}

/// The metadata of a query's last message: `penstock-skipped=N`, the batches a live query
/// skipped because it fell behind.
pub const SKIPPED_METADATA: &str = "penstock-skipped=";

/// An empty batch of `schema` carrying [`SKIPPED_METADATA`].
fn summary_message(
    schema: &arrow::datatypes::Schema,
    skipped: u64,
) -> Result<arrow_flight::FlightData, Status> {
    let empty = RecordBatch::new_empty(Arc::new(schema.clone()));
    let mut messages = arrow_flight::utils::batches_to_flight_data(schema, vec![empty])
        .map_err(|e| Status::internal(e.to_string()))?;
    let mut last = messages
        .pop()
        .ok_or_else(|| Status::internal("no message for an empty batch"))?;
    last.app_metadata = format!("{SKIPPED_METADATA}{skipped}").into();
    Ok(last)
}

#[tonic::async_trait]
impl FlightSqlService for QueryService {
    type FlightService = QueryService;

    async fn get_flight_info_statement(
        &self,
        command: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let principal = principal(&request)?;
        let query = self.check(&command.query, &principal)?;
        // Planned over no rows: the schema, without reading anything.
        let input = self.shape_input(&query, &principal)?;
        let (schema, _) = describe_query(&query, input, self.limits(principal.scope))
            .await
            .map_err(|e| self.not_run(&principal, &command.query, Some(&query), invalid(e)))?;
        let ticket = TicketStatementQuery {
            statement_handle: command.query.into_bytes().into(),
        };
        info(ticket, &schema, request.into_inner())
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let principal = principal(&request)?;
        let sql = std::str::from_utf8(&ticket.statement_handle).map_err(|_| {
            let status = invalid("the ticket does not hold a query");
            self.not_run(&principal, "(a ticket that is not text)", None, status)
        })?;
        let query = self.check(sql, &principal)?;
        let duration = self
            .duration(&request)
            .map_err(|status| self.not_run(&principal, sql, Some(&query), status))?;
        let rows = self.run(sql, query, &principal, duration, None).await?;
        Ok(Response::new(rows))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let principal = principal(&request)?;
        let checked = self.check(&query.query, &principal)?;
        let input = self.shape_input(&checked, &principal)?;
        let (schema, parameters) = describe_query(&checked, input, self.limits(principal.scope))
            .await
            .map_err(|e| self.not_run(&principal, &query.query, Some(&checked), invalid(e)))?;
        let handle = self.prepared.add(query.query, &principal.name);
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle,
            dataset_schema: ipc_schema(&schema)?,
            parameter_schema: ipc_schema(&parameters)?,
        })
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let who = principal(&request)?.name;
        let data = request.into_inner().map_err(FlightError::from);
        let batches: Vec<RecordBatch> = FlightRecordBatchStream::new_from_flight_data(data)
            .try_collect()
            .await
            .map_err(|e| invalid(format!("reading the parameters: {e}")))?;
        let Some(parameters) = batches.into_iter().find(|b| b.num_rows() > 0) else {
            return Err(invalid("the parameters hold no row of values"));
        };
        if !self
            .prepared
            .bind(&query.prepared_statement_handle, &who, parameters)
        {
            return Err(unknown_statement());
        }
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(query.prepared_statement_handle),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        command: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let principal = principal(&request)?;
        let statement = self
            .prepared
            .get(&command.prepared_statement_handle, &principal.name)
            .ok_or_else(unknown_statement)?;
        let query = self.check(&statement.sql, &principal)?;
        let input = self.shape_input(&query, &principal)?;
        let (schema, _) = describe_query(&query, input, self.limits(principal.scope))
            .await
            .map_err(invalid)?;
        info(command, &schema, request.into_inner())
    }

    async fn do_get_prepared_statement(
        &self,
        command: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let principal = principal(&request)?;
        let statement = self
            .prepared
            .get(&command.prepared_statement_handle, &principal.name)
            .ok_or_else(unknown_statement)?;
        let query = self.check(&statement.sql, &principal)?;
        let duration = self
            .duration(&request)
            .map_err(|status| self.not_run(&principal, &statement.sql, Some(&query), status))?;
        let rows = self
            .run(
                &statement.sql,
                query,
                &principal,
                duration,
                statement.parameters.as_ref(),
            )
            .await?;
        Ok(Response::new(rows))
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        let who = principal(&request)?.name;
        self.prepared.close(&query.prepared_statement_handle, &who);
        Ok(())
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        info(query, &schema, request.into_inner())
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let scope = principal(&request)?.scope;
        one_batch(catalog::catalogs(query, scope, &self.lookup_entries(scope)))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        info(query, &schema, request.into_inner())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let scope = principal(&request)?.scope;
        let streams = self.visible_streams(scope);
        let lookups = self.lookup_entries(scope);
        one_batch(catalog::db_schemas(query, scope, &streams, &lookups))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        info(query, &schema, request.into_inner())
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let scope = principal(&request)?.scope;
        let streams = self.visible_streams(scope);
        let lookups = self.lookup_entries(scope);
        one_batch(catalog::tables(
            query,
            scope,
            &streams,
            (&system::schemas(), &lookups),
        ))
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        info(query, &catalog::primary_keys_schema(), request.into_inner())
    }

    async fn do_get_primary_keys(
        &self,
        _query: CommandGetPrimaryKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        one_batch(catalog::no_keys(catalog::primary_keys_schema()))
    }

    async fn get_flight_info_imported_keys(
        &self,
        query: CommandGetImportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        info(query, &catalog::foreign_keys_schema(), request.into_inner())
    }

    async fn do_get_imported_keys(
        &self,
        _query: CommandGetImportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        one_batch(catalog::no_keys(catalog::foreign_keys_schema()))
    }

    async fn get_flight_info_exported_keys(
        &self,
        query: CommandGetExportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        info(query, &catalog::foreign_keys_schema(), request.into_inner())
    }

    async fn do_get_exported_keys(
        &self,
        _query: CommandGetExportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        one_batch(catalog::no_keys(catalog::foreign_keys_schema()))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        info(query, &schema, request.into_inner())
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        one_batch(catalog::table_types(query))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let infos = catalog::sql_info().ok_or_else(|| Status::internal("no SqlInfo"))?;
        let schema = query.clone().into_builder(infos).schema();
        info(query, &schema, request.into_inner())
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let infos = catalog::sql_info().ok_or_else(|| Status::internal("no SqlInfo"))?;
        one_batch(query.into_builder(infos).build())
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
