//! The audit trail of the query service: every query, allowed or not, is an event
//! (`penstock::audit`: principal, SQL, table, rows, bytes, duration, outcome) and a row of
//! `system.query_log` (the last [`LOG_ENTRIES`]); queries running are listed in
//! `system.queries`.

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use futures::Stream;

use super::taps::Subscription;

/// How many ended queries `system.query_log` keeps.
pub const LOG_ENTRIES: usize = 1000;

/// The most bytes of a query's text listed and logged (a longer text ends with `…`).
pub const SQL_BYTES: usize = 4096;

/// `sql`, cut at [`SQL_BYTES`] on a character boundary.
fn shortened(sql: &str) -> String {
    if sql.len() <= SQL_BYTES {
        return sql.to_string();
    }
    let mut end = SQL_BYTES;
    while !sql.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &sql[..end])
}

/// How a query ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It ran to its end.
    Ok,
    /// Its principal may not read what it reads.
    Refused(String),
    /// It is not a query the service runs.
    Invalid(String),
    /// It failed while it ran.
    Failed(String),
    /// The client went away before its end.
    Cancelled,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Ok => f.write_str("ok"),
            Outcome::Refused(why) => write!(f, "refused: {why}"),
            Outcome::Invalid(why) => write!(f, "invalid: {why}"),
            Outcome::Failed(why) => write!(f, "failed: {why}"),
            Outcome::Cancelled => f.write_str("cancelled"),
        }
    }
}

/// A query running on the service.
pub struct RunningQuery {
    /// Who runs it.
    pub principal: Arc<str>,
    /// Its text.
    pub sql: String,
    /// The table it reads (empty for values only).
    pub table: String,
    /// When it started.
    pub started: Instant,
    /// The same, on the clock.
    pub started_at: SystemTime,
    /// Its feed, for a live query.
    pub feed: Option<Arc<Subscription>>,
    /// The rows it has sent so far.
    pub rows: Arc<AtomicU64>,
}

impl RunningQuery {
    /// A query of `principal` starting now (its text kept up to [`SQL_BYTES`]).
    pub fn new(principal: &Arc<str>, sql: &str, table: String) -> RunningQuery {
        RunningQuery {
            principal: Arc::clone(principal),
            sql: shortened(sql),
            table,
            started: Instant::now(),
            started_at: SystemTime::now(),
            feed: None,
            rows: Arc::default(),
        }
    }
}

/// A query that ended, as `system.query_log` shows it.
#[derive(Debug, Clone)]
pub struct LoggedQuery {
    /// Its id (the one `system.queries` showed while it ran).
    pub id: u64,
    /// Who ran it.
    pub principal: Arc<str>,
    /// Its text.
    pub sql: String,
    /// The table it read (empty for values only or when it could not be told).
    pub table: String,
    /// When it started.
    pub started_at: SystemTime,
    /// How long it ran.
    pub seconds: f64,
    /// The rows it sent.
    pub rows: u64,
    /// The bytes of Flight data it sent.
    pub bytes: u64,
    /// How it ended.
    pub outcome: Outcome,
}

impl LoggedQuery {
    /// Query `id` as it ended: `bytes` of Flight data sent.
    fn ended(id: u64, query: RunningQuery, outcome: Outcome, bytes: u64) -> LoggedQuery {
        LoggedQuery {
            id,
            principal: query.principal,
            sql: query.sql,
            table: query.table,
            started_at: query.started_at,
            seconds: query.started.elapsed().as_secs_f64(),
            rows: query.rows.load(Relaxed),
            bytes,
            outcome,
        }
    }
}

#[derive(Default)]
struct State {
    next_id: u64,
    running: BTreeMap<u64, RunningQuery>,
    log: VecDeque<LoggedQuery>,
}

/// The queries running and the last that ended.
#[derive(Default)]
pub struct Queries {
    state: Mutex<State>,
}

impl Queries {
    /// Registers a query; it is listed until [`Queries::end`].
    pub fn start(&self, query: RunningQuery) -> u64 {
        let Ok(mut state) = self.state.lock() else {
            return 0;
        };
        state.next_id += 1;
        let id = state.next_id;
        state.running.insert(id, query);
        id
    }

    /// Unlists query `id` and records how it ended.
    pub fn end(&self, id: u64, outcome: Outcome, bytes: u64) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let Some(query) = state.running.remove(&id) else {
            return;
        };
        record(&mut state, LoggedQuery::ended(id, query, outcome, bytes));
    }

    /// Records a query that did not run (refused or invalid).
    pub fn not_run(&self, query: RunningQuery, outcome: Outcome) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        state.next_id += 1;
        let id = state.next_id;
        record(&mut state, LoggedQuery::ended(id, query, outcome, 0));
    }

    /// Reads the queries running, by id (nothing when the lock is poisoned).
    pub fn with_running<R>(&self, read: impl FnOnce(&BTreeMap<u64, RunningQuery>) -> R) -> R {
        match self.state.lock() {
            Ok(state) => read(&state.running),
            Err(_) => read(&BTreeMap::new()),
        }
    }

    /// The queries that ended, oldest first.
    pub fn log(&self) -> Vec<LoggedQuery> {
        self.state
            .lock()
            .map(|state| state.log.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Writes the audit event of `query` and keeps it in the log.
fn record(state: &mut State, query: LoggedQuery) {
    tracing::info!(
        target: "penstock::audit",
        id = query.id,
        principal = %query.principal,
        sql = %query.sql,
        table = %query.table,
        rows = query.rows,
        bytes = query.bytes,
        seconds = query.seconds,
        outcome = %query.outcome,
        "query {} by {}: {}",
        query.id,
        query.principal,
        query.outcome
    );
    if state.log.len() == LOG_ENTRIES {
        state.log.pop_front();
    }
    state.log.push_back(query);
}

/// The Flight data of a running query, which records the query's end when it is dropped:
/// ended (ok), failed (its error) or dropped before its end (cancelled).
pub struct Audited<S> {
    rows: S,
    queries: Arc<Queries>,
    id: u64,
    bytes: u64,
    failure: Option<String>,
    ended: bool,
}

impl<S> Audited<S> {
    /// Audits `rows`, the data of query `id` of `queries`.
    pub fn new(rows: S, queries: Arc<Queries>, id: u64) -> Audited<S> {
        Audited {
            rows,
            queries,
            id,
            bytes: 0,
            failure: None,
            ended: false,
        }
    }
}

impl<S> Stream for Audited<S>
where
    S: Stream<Item = Result<arrow_flight::FlightData, tonic::Status>> + Unpin,
{
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = Pin::new(&mut self.rows).poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(data))) => {
                self.bytes += (data.data_header.len() + data.data_body.len()) as u64;
            }
            Poll::Ready(Some(Err(status))) => {
                if self.failure.is_none() {
                    self.failure = Some(status.message().to_string());
                }
            }
            Poll::Ready(None) => self.ended = true,
            Poll::Pending => {}
        }
        polled
    }
}

impl<S> Drop for Audited<S> {
    fn drop(&mut self) {
        let outcome = match (self.failure.take(), self.ended) {
            (Some(why), _) => Outcome::Failed(why),
            (None, true) => Outcome::Ok,
            (None, false) => Outcome::Cancelled,
        };
        self.queries.end(self.id, outcome, self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn data(body: &[u8]) -> Result<arrow_flight::FlightData, tonic::Status> {
        Ok(arrow_flight::FlightData {
            data_body: body.to_vec().into(),
            ..Default::default()
        })
    }

    #[tokio::test]
    async fn a_query_is_logged_once_with_how_it_ended() {
        let queries = Arc::new(Queries::default());
        let who: Arc<str> = "sre".into();
        let start = |sql: &str| queries.start(RunningQuery::new(&who, sql, "live.out.logs".into()));

        let id = start("SELECT 1");
        let rows = futures::stream::iter([data(b"abc"), data(b"de")]);
        let sent: Vec<_> = Audited::new(rows, Arc::clone(&queries), id).collect().await;
        assert_eq!(sent.len(), 2);

        let id = start("SELECT 2");
        let rows = futures::stream::iter([data(b"abc"), Err(tonic::Status::aborted("boom"))]);
        let _: Vec<_> = Audited::new(rows, Arc::clone(&queries), id).collect().await;

        let id = start("SELECT 3");
        let mut rows = Audited::new(
            futures::stream::iter([data(b"a"), data(b"b")]),
            Arc::clone(&queries),
            id,
        );
        rows.next().await;
        drop(rows);

        queries.not_run(
            RunningQuery::new(&who, "SELECT 4", "live.in.logs".into()),
            Outcome::Refused("no".into()),
        );
        let log = queries.log();
        let ended: Vec<_> = log
            .iter()
            .map(|q| (q.sql.as_str(), q.bytes, q.outcome.to_string()))
            .collect();
        assert_eq!(
            ended,
            [
                ("SELECT 1", 5, "ok".to_string()),
                ("SELECT 2", 3, "failed: boom".to_string()),
                ("SELECT 3", 1, "cancelled".to_string()),
                ("SELECT 4", 0, "refused: no".to_string()),
            ]
        );
        assert!(queries.with_running(BTreeMap::is_empty));
        assert_eq!(log.iter().map(|q| q.id).collect::<Vec<_>>(), [1, 2, 3, 4]);
    }

    #[test]
    fn long_texts_are_kept_shortened() {
        let who: Arc<str> = "a".into();
        let long = "é".repeat(SQL_BYTES);
        let kept = RunningQuery::new(&who, &long, String::new()).sql;
        assert!(kept.len() <= SQL_BYTES + '…'.len_utf8() && kept.ends_with('…'));
    }

    #[test]
    fn the_log_keeps_the_last_entries() {
        let queries = Queries::default();
        let who: Arc<str> = "a".into();
        for i in 0..LOG_ENTRIES + 5 {
            queries.not_run(
                RunningQuery::new(&who, &i.to_string(), String::new()),
                Outcome::Invalid("x".into()),
            );
        }
        let log = queries.log();
        assert_eq!(log.len(), LOG_ENTRIES);
        assert_eq!(log[0].sql, "5");
    }
}
