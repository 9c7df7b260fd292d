//! Narrowing: a forwarded OTAP batch whose pipelines may remove rows runs through them
//! decoded as far as they read it, and each copy routed to a sink goes on as received with
//! only the rows left (see [`penstock_engine::otap::raw::RawBatch::narrowed`]), or encoded
//! again when it cannot.

use std::sync::atomic::Ordering::Relaxed;

use penstock_engine::OtapBatch;
use penstock_engine::otap::raw::DecodedAsSent;

use super::current::{Current, Routed};
use super::handoff::{Handed, Sinks};
use crate::gateway::base::delivery::{AsReceived, DeliveryError, ForwardedOtap, Payload};
use crate::gateway::base::job::DecodedBeside;
use crate::gateway::base::report;
use crate::gateway::base::telemetry::Telemetry;
use crate::gateway::worker::windows::ClosedSender;

/// A forwarded batch decoded beside, for pipelines that remove rows.
pub(super) struct Narrowed {
    /// The batch decoded as far as the pipelines read it.
    pub beside: DecodedBeside,
    /// Each sink it goes to, with its copy as received.
    pub outputs: Vec<(String, AsReceived)>,
}

/// Runs the pipelines on a forwarded batch's decoded copy (decoded as far as they read it);
/// what each routes to a sink goes as the forwarded batch with the rows left (see
/// [`penstock_engine::otap::raw::RawBatch::narrowed`]), or encoded again when it cannot: the
/// pipelines were reloaded since the batch was read, several routes reach the sink, or a
/// table's layout does not take the rows left. The rest of the batch is decoded only when
/// rows were removed, or to encode it again.
pub(super) async fn narrow(
    current: &mut Current,
    source: usize,
    narrowed: Narrowed,
    sinks: &Sinks,
    closed: &ClosedSender,
    telemetry: &Telemetry,
) -> Handed {
    let same_program = current.counters.generation == narrowed.beside.generation;
    let mut raws = narrowed.outputs;
    let repeated = (0..raws.len()).any(|i| raws[..i].iter().any(|(s, _)| *s == raws[i].0));
    let mut decoded = narrowed.beside.decoded;
    let rows_read = decoded.batch.root().map_or(0, |r| r.num_rows());
    let mut rows_removed = false;
    // A batch that cannot go narrowed anyway is decoded whole first: the pipelines then run
    // on all of it once.
    if (!same_program || repeated) && !decoded.is_whole() {
        match decoded.whole() {
            Ok(whole) => *decoded = whole,
            Err(e) => return Handed::failed(malformed(&e)),
        }
    }
    let (routed, failure) = current.run_through(source, &decoded.batch, closed).await;
    let mut handed = Handed::with(failure);
    let mut rest = Rest::default();
    for (sink, batch) in routed {
        rows_removed |= batch.root().map_or(0, |r| r.num_rows()) < rows_read;
        let Some(queue) = sinks.get(&sink) else {
            continue;
        };
        let one_route = raws.iter().filter(|(s, _)| *s == sink).count() == 1;
        let raw = raws
            .iter()
            .position(|(s, _)| *s == sink)
            .filter(|_| same_program && one_route)
            .map(|at| raws.swap_remove(at).1);
        let narrowed_raw = narrowed_copy(raw, &decoded, &mut rest, &batch, &sink);
        let outcome = usize::from(narrowed_raw.is_none());
        telemetry.otap_narrowed[outcome].fetch_add(1, Relaxed);
        let payload = match narrowed_raw {
            Some(raw) => Payload::Forwarded(raw),
            None if decoded.is_whole() => Payload::Decoded(batch),
            None => match rest.routed(current, source, &decoded, &sink) {
                Ok(batch) => Payload::Decoded(batch),
                Err(e) => {
                    handed.fail(e);
                    continue;
                }
            },
        };
        handed.hand_off(queue, payload).await;
    }
    narrowed.beside.rows_removed.store(rows_removed, Relaxed);
    handed
}

/// The failure of a batch whose undecoded part is not valid.
fn malformed(error: &penstock_engine::Error) -> DeliveryError {
    DeliveryError::Malformed {
        message: error.to_string(),
    }
}

/// What a narrowed batch needs beyond the part its pipelines read, made once per batch when
/// first needed: the batch decoded whole, and what the pipelines route of it.
#[derive(Default)]
struct Rest {
    whole: Option<Result<DecodedAsSent, DeliveryError>>,
    routed: Option<Result<Routed, DeliveryError>>,
}

impl Rest {
    /// The batch decoded whole.
    fn whole(&mut self, decoded: &DecodedAsSent) -> Result<&DecodedAsSent, DeliveryError> {
        self.whole
            .get_or_insert_with(|| decoded.whole().map_err(|e| malformed(&e)))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// What the pipelines route to `sink` of the batch decoded whole (one route reaches
    /// it: several make the batch decoded whole before the pipelines run): they run on it
    /// again, uncounted. Their conditions call no function whose value changes from call to
    /// call (see [`penstock_pipeline::narrowing_reads`]), so they keep the rows they kept.
    fn routed(
        &mut self,
        current: &mut Current,
        source: usize,
        decoded: &DecodedAsSent,
        sink: &str,
    ) -> Result<OtapBatch, DeliveryError> {
        if self.routed.is_none() {
            let routed = match self.whole(decoded) {
                Ok(whole) => Ok(current.rerun(source, &whole.batch)),
                Err(e) => Err(e),
            };
            self.routed = Some(routed);
        }
        let routed = self.routed.as_ref().expect("set above").as_ref();
        let (routed, failure) = routed.map_err(Clone::clone)?;
        match routed.iter().find(|(to, _)| to == sink) {
            Some((_, batch)) => Ok(batch.clone()),
            None => Err(failure.clone().unwrap_or_else(|| DeliveryError::Pipeline {
                pipeline: String::new(),
                message: format!("the batch decoded whole was not routed to sink {sink}"),
            })),
        }
    }
}

/// The forwarded copy `raw` with only the rows its pipelines' output `batch` kept, or None
/// when it cannot go so. `rest` decodes the rest of `decoded` when rows were removed.
fn narrowed_copy(
    raw: Option<AsReceived>,
    decoded: &DecodedAsSent,
    rest: &mut Rest,
    batch: &OtapBatch,
    sink: &str,
) -> Option<ForwardedOtap> {
    let (Some(AsReceived::Otap(mut forwarded)), Some(root)) = (raw, batch.root()) else {
        return None;
    };
    let rows_read = decoded.batch.root().map(|r| r.num_rows());
    let rows_left = if decoded.is_whole() || rows_read == Some(root.num_rows()) {
        forwarded.batch.narrowed(decoded, root)
    } else {
        let whole = rest.whole(decoded).ok()?;
        match decoded.root_rows_kept(whole, root) {
            Ok(Some(rows)) => forwarded.batch.narrowed(whole, &rows),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        }
    };
    match rows_left {
        Ok(rows_left) => {
            forwarded.batch = rows_left?;
            Some(forwarded)
        }
        Err(e) => {
            let subject = format!("sink {sink}");
            report::throttled(tracing::Level::WARN, &subject, "forwarding", &e);
            None
        }
    }
}
