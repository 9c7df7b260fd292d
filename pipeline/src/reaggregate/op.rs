//! The operator of a statement that merges metric series.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use penstock_dialect::model::Table;
use penstock_dialect::options::Options;
use penstock_dialect::{Identity, Step};
use penstock_engine::{OtapBatch, Signal, otlp};
use prost::Message;

use super::identity::Kept;
use super::merger::{GaugeMerge, Merger, Settings};
use crate::error::{PipelineError, Result};
use crate::explain::describe_expr;
use crate::expr::CompiledExpr;
use crate::kernels::filter::keep_rows;
use crate::ops::condition::{compile_filter, selected};
use crate::ops::operator::{Emitted, Operator, RunContext};
use crate::output::{Exchanged, MergeStats};
use crate::rows::{Rows, spaces};
use crate::session::LazySession;

/// The interval of merged points without `metric_interval`.
pub const DEFAULT_METRIC_INTERVAL: Duration = Duration::from_secs(10);
/// Series followed at most without `metric_max_series`.
pub const DEFAULT_METRIC_MAX_SERIES: u64 = 100_000;

/// A statement that merges metric series.
pub(crate) struct ReaggregateOp {
    /// The sink (None: the merged points go on to the next statements).
    sink: Option<String>,
    filter: Option<CompiledExpr>,
    identity: Identity,
    merger: Merger,
    /// This worker and the number of workers, when several share the series.
    partition: Option<(usize, usize)>,
}

/// The settings of a merge from the pipeline's `options`.
pub(crate) fn settings(options: &Options) -> Settings {
    let interval = options
        .duration("metric_interval")
        .unwrap_or(DEFAULT_METRIC_INTERVAL);
    Settings {
        interval: u64::try_from(interval.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1),
        gauge: match options.str("metric_gauge") {
            Some("min") => GaugeMerge::Min,
            Some("max") => GaugeMerge::Max,
            Some("avg") => GaugeMerge::Avg,
            Some("sum") => GaugeMerge::Sum,
            _ => GaugeMerge::Last,
        },
        delta: options.str("metric_temporality") == Some("delta"),
        max_series: usize::try_from(
            options
                .count("metric_max_series")
                .unwrap_or(DEFAULT_METRIC_MAX_SERIES),
        )
        .unwrap_or(usize::MAX),
    }
}

impl ReaggregateOp {
    /// The operator of `step` in a pipeline with `options`.
    pub(crate) fn compile(
        session: &LazySession,
        step: &Step,
        options: &Options,
    ) -> Result<ReaggregateOp> {
        let penstock_dialect::StepKind::Reaggregate {
            sink,
            filter,
            identity,
        } = &step.kind
        else {
            return Err(PipelineError::plan(
                &step.origin,
                "not a merge of metric series",
            ));
        };
        Ok(ReaggregateOp {
            sink: sink.clone(),
            filter: compile_filter(session, step, filter)?,
            identity: identity.clone(),
            merger: Merger::new(Kept::new(identity), settings(options)),
            partition: None,
        })
    }

    /// The merge of the points of series past a series limit into one overflow series per
    /// metric (see [`Identity::Overflow`]), whose points go on to the next statements.
    pub(crate) fn overflow(options: &Options) -> ReaggregateOp {
        ReaggregateOp::passing_on(Identity::Overflow, options)
    }

    /// The merge of the series that collide after a statement changed what tells series
    /// apart (every attribute stays), whose points go on to the next statements.
    pub(crate) fn keeping_all(options: &Options) -> ReaggregateOp {
        let identity = Identity::Drop {
            scope: penstock_dialect::model::AttrScope::Record,
            keys: Vec::new(),
        };
        ReaggregateOp::passing_on(identity, options)
    }

    /// A merge keeping `identity` of every point it is given, whose points go on to the next
    /// statements.
    fn passing_on(identity: Identity, options: &Options) -> ReaggregateOp {
        ReaggregateOp {
            sink: None,
            filter: None,
            merger: Merger::new(Kept::new(&identity), settings(options)),
            identity,
            partition: None,
        }
    }

    /// Merges the points of `request`, arrived at `now`; those of series other workers merge
    /// go to `out` (as the statement `step`).
    pub(crate) fn merge_request(
        &mut self,
        request: ExportMetricsServiceRequest,
        now: u64,
        (step, out): (usize, &mut crate::output::RunOutput),
    ) -> Result<()> {
        for (worker, theirs) in self.merger.add(request, now, self.partition) {
            for batch in batches(&theirs)? {
                out.exchanged.push(Exchanged {
                    worker,
                    step,
                    batch,
                });
            }
        }
        Ok(())
    }

    /// The points of `batch` the statement takes, and whether that is all of them.
    fn taken(&self, batch: &OtapBatch, cx: &mut RunContext<'_>) -> Result<(OtapBatch, bool)> {
        let mut copy = batch.clone();
        let mut all = true;
        for space in spaces(batch, cx.table) {
            let rows = Rows::new(batch, space)?;
            let len = rows.len();
            let mask = selected(self.filter.as_ref(), &rows)?;
            drop(rows);
            cx.routing.mark(space, len, &mask);
            all &= mask.true_count() == len;
            copy = keep_rows(&copy, space, &mask)?;
        }
        Ok((copy, all))
    }

    /// Merges `batch`'s points, arrived at `now`; the points of series other workers merge
    /// go to `exchanged` (as the statement `step`).
    fn merge(
        &mut self,
        batch: &OtapBatch,
        now: u64,
        partition: Option<(usize, usize)>,
    ) -> Result<Vec<(usize, OtapBatch)>> {
        let request = request_of(batch)?;
        let mut out = Vec::new();
        for (worker, theirs) in self.merger.add(request, now, partition) {
            for batch in batches(&theirs)? {
                out.push((worker, batch));
            }
        }
        Ok(out)
    }

    /// What it merged.
    pub(crate) fn stats(&self) -> MergeStats {
        self.merger.stats()
    }
}

/// The metrics of `batch` as an OTLP request.
pub(crate) fn request_of(batch: &OtapBatch) -> Result<ExportMetricsServiceRequest> {
    let bytes = otlp::encode::encode(batch)
        .map_err(|e| PipelineError::Execute(format!("reading metrics to merge: {e}")))?;
    ExportMetricsServiceRequest::decode(bytes.as_slice())
        .map_err(|e| PipelineError::Execute(format!("reading metrics to merge: {e}")))
}

/// `request` as batches.
pub(crate) fn batches(request: &ExportMetricsServiceRequest) -> Result<Vec<OtapBatch>> {
    otlp::decode::decode_metrics(&request.encode_to_vec())
        .map_err(|e| PipelineError::Execute(format!("merged metrics: {e}")))
}

impl Operator for ReaggregateOp {
    fn run(&mut self, batch: OtapBatch, cx: &mut RunContext<'_>) -> Result<OtapBatch> {
        cx.routing.any = true;
        let (taken, all) = self.taken(&batch, cx)?;
        for (worker, theirs) in self.merge(&taken, cx.now, self.partition)? {
            cx.out.exchanged.push(Exchanged {
                worker,
                step: cx.step,
                batch: theirs,
            });
        }
        match (&self.sink, all) {
            // Every point is taken: the next statements see the merged points later.
            (None, true) => Ok(OtapBatch::new(Signal::Metrics)),
            _ => Ok(batch),
        }
    }

    fn take_exchanged(&mut self, batch: OtapBatch, now: u64) -> Result<()> {
        self.merge(&batch, now, None).map(|_| ())
    }

    fn due(&mut self, now: u64, finish: bool) -> Result<Vec<Emitted>> {
        let mut out = Vec::new();
        for request in self.merger.take_closed(now, finish) {
            for batch in batches(&request)? {
                out.push(Emitted {
                    sink: self.sink.clone(),
                    batch,
                });
            }
        }
        Ok(out)
    }

    fn merge_stats(&self) -> Option<MergeStats> {
        Some(self.stats())
    }

    fn partition(
        &mut self,
        _decisions: &mut crate::sample::decisions::Decisions,
        worker: usize,
        workers: usize,
    ) {
        self.partition = (workers > 1).then_some((worker, workers));
    }

    fn explain(&self, table: Table, line: &mut dyn FnMut(String)) {
        if let Some(f) = &self.filter {
            line(describe_expr(table, "where", f));
        }
        let identity = match &self.identity {
            Identity::Keep {
                resource,
                scope,
                point,
                scope_name,
                scope_version,
            } => {
                let mut kept: Vec<String> = vec!["name".to_string()];
                if *scope_name {
                    kept.push("scope.name".to_string());
                }
                if *scope_version {
                    kept.push("scope.version".to_string());
                }
                kept.extend(
                    resource
                        .iter()
                        .map(|k| format!("resource.attributes['{k}']")),
                );
                kept.extend(scope.iter().map(|k| format!("scope.attributes['{k}']")));
                kept.extend(point.iter().map(|k| format!("attributes['{k}']")));
                format!("keep only {} in each series' identity", kept.join(", "))
            }
            Identity::Overflow => {
                "replace each series' data point attributes by otel.metric.overflow = true"
                    .to_string()
            }
            Identity::Drop { keys, .. } if keys.is_empty() => {
                "keep every attribute in each series' identity".to_string()
            }
            Identity::Drop { scope, keys } => {
                let keys: Vec<String> = keys.iter().map(|k| format!("'{k}'")).collect();
                format!(
                    "drop {} {} from each series' identity",
                    scope.map_name(),
                    keys.join(", ")
                )
            }
        };
        line(identity);
        let settings = self.merger.settings();
        line(format!(
            "merge the series that collide, one point per {} s interval: sums and histograms added (cumulative ones by their growth{}), gauges by {:?}; follow at most {} series",
            settings.interval as f64 / 1e9,
            if settings.delta {
                ", sent as deltas"
            } else {
                ""
            },
            settings.gauge,
            settings.max_series
        ));
        line(match &self.sink {
            Some(sink) => format!("send the merged points to sink {sink}"),
            None => "the next statements see the merged points".to_string(),
        });
    }
}

/// A statement whose output may hold series that collide (an `UPDATE` of what tells metric
/// series apart), then the merge of every series it writes: the next statements see the merged
/// points when their interval ends.
pub(crate) struct ThenMerge {
    first: Box<dyn Operator>,
    merge: ReaggregateOp,
}

impl ThenMerge {
    pub(crate) fn new(first: Box<dyn Operator>, merge: ReaggregateOp) -> ThenMerge {
        ThenMerge { first, merge }
    }
}

impl Operator for ThenMerge {
    fn run(&mut self, batch: OtapBatch, cx: &mut RunContext<'_>) -> Result<OtapBatch> {
        // Its rows out are the merged points, counted when they are sent.
        let rows_out = cx.stats.rows_out;
        let batch = self.first.run(batch, cx)?;
        cx.stats.rows_out = rows_out;
        self.merge.run(batch, cx)
    }

    fn take_exchanged(&mut self, batch: OtapBatch, now: u64) -> Result<()> {
        self.merge.take_exchanged(batch, now)
    }

    fn due(&mut self, now: u64, finish: bool) -> Result<Vec<Emitted>> {
        self.merge.due(now, finish)
    }

    fn merge_stats(&self) -> Option<MergeStats> {
        self.merge.merge_stats()
    }

    fn partition(
        &mut self,
        decisions: &mut crate::sample::decisions::Decisions,
        worker: usize,
        workers: usize,
    ) {
        self.merge.partition(decisions, worker, workers);
    }

    fn explain(&self, table: Table, line: &mut dyn FnMut(String)) {
        self.first.explain(table, line);
        line("then merge the series it makes collide:".to_string());
        self.merge.explain(table, line);
    }
}
