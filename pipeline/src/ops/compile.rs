//! Compiling a checked step into the operator of its statement form.

use penstock_dialect::options::Options;
use penstock_dialect::{Step, StepKind};

use super::aggregate::AggregateOp;
use super::condition::compile_filter;
use super::delete::DeleteOp;
use super::drop::DropOp;
use super::operator::Operator;
use super::rename::RenameOp;
use super::route::RouteOp;
use super::update::UpdateOp;
use crate::error::Result;
use crate::limits::op::LimitOp;
use crate::limits::series::SeriesLimitOp;
use crate::reaggregate::op::{ReaggregateOp, ThenMerge};
use crate::sample::decisions::Decisions;
use crate::sample::op::SampleOp;
use crate::session::LazySession;

/// Compiles `step` (number `index`) of pipeline `pipeline` (with `options`) into its
/// operator; a statement with a trace decision registers in `decisions`.
pub(crate) fn compile_step(
    session: &LazySession,
    (step, index): (&Step, usize),
    pipeline: &str,
    options: &Options,
    decisions: &mut Decisions,
) -> Result<Box<dyn Operator>> {
    Ok(match &step.kind {
        StepKind::Rename { scope, renames } => Box::new(RenameOp::new(*scope, renames)),
        StepKind::Drop { scope, keys } => Box::new(DropOp::new(*scope, keys)),
        StepKind::Update {
            assignments,
            filter,
        } => {
            let update = UpdateOp::compile(session, step, assignments, filter)?;
            if step.merges_series() {
                // The series the update makes collide are merged, never sent side by side.
                Box::new(ThenMerge::new(
                    Box::new(update),
                    ReaggregateOp::keeping_all(options),
                ))
            } else {
                Box::new(update)
            }
        }
        StepKind::Delete { filter } => Box::new(DeleteOp {
            filter: compile_filter(session, step, filter)?,
        }),
        StepKind::Route {
            sink,
            filter,
            projection,
        } => Box::new(RouteOp {
            sink: sink.clone(),
            filter: compile_filter(session, step, filter)?,
            projection: projection.clone(),
        }),
        StepKind::Sample { .. } => Box::new(SampleOp::new(decisions.register(
            session,
            (step, index),
            options,
        )?)),
        StepKind::Aggregate { .. } => Box::new(AggregateOp::compile(session, step, pipeline)?),
        StepKind::Reaggregate { .. } => Box::new(ReaggregateOp::compile(session, step, options)?),
        StepKind::LimitRate { .. } => Box::new(LimitOp::compile(session, (step, index), pipeline)?),
        StepKind::LimitSeries { .. } => Box::new(SeriesLimitOp::compile(
            session,
            (step, index),
            pipeline,
            options,
        )?),
    })
}
