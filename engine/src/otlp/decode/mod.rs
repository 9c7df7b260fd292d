//! OTLP protobuf bytes → [`OtapBatch`], straight into Arrow builders.
//!
//! The request is walked once with a zero-copy protobuf reader; every field goes directly into
//! the builder of its column. Resources and scopes are deduplicated by their encoded bytes.
//! A request with more root records than a batch can hold (ids are 16-bit) is split into
//! several batches.

mod append;
mod columns;
mod envelope;
mod logs;
mod metrics;
mod root;
mod traces;
mod validity;
mod values;

use crate::batch::OtapBatch;
use crate::error::Result;
use crate::schema::Signal;
use crate::wire::{Reader, WireType};
use envelope::{Context, Embedded, Envelope};
use root::RootBuilder;

/// Most root rows (log records, spans or metrics) in one batch: ids are `UInt16`.
pub const MAX_ROOT_ROWS: usize = 65_535;

/// Decodes an `ExportLogsServiceRequest` into one batch per [`MAX_ROOT_ROWS`] log records
/// (none for a request without records).
pub fn decode_logs(bytes: &[u8]) -> Result<Vec<OtapBatch>> {
    walk(bytes, logs::LogsBuilder::default(), MAX_ROOT_ROWS)
}

/// Decodes an `ExportTraceServiceRequest`.
pub fn decode_traces(bytes: &[u8]) -> Result<Vec<OtapBatch>> {
    walk(bytes, traces::SpansBuilder::default(), MAX_ROOT_ROWS)
}

/// Decodes an `ExportMetricsServiceRequest`.
pub fn decode_metrics(bytes: &[u8]) -> Result<Vec<OtapBatch>> {
    walk(bytes, metrics::MetricsBuilder::default(), MAX_ROOT_ROWS)
}

/// Decodes OTLP protobuf bytes of `signal` (an `Export*ServiceRequest`) into batches.
pub fn decode(signal: Signal, bytes: &[u8]) -> Result<Vec<OtapBatch>> {
    match signal {
        Signal::Logs => decode_logs(bytes),
        Signal::Traces => decode_traces(bytes),
        Signal::Metrics => decode_metrics(bytes),
    }
}

/// Finds the embedded message of field 1 (the first, if repeated) and the string of field 3
/// (the last): the layout shared by `Resource*` and `Scope*` messages.
fn scan_header<'a>(mut r: Reader<'a>) -> Result<(Embedded<'a>, &'a str)> {
    let mut message = None;
    let mut schema_url = "";
    while let Some((field, wire)) = r.field()? {
        match field {
            1 => {
                let m = Embedded::of(&r.message_field(wire)?);
                message.get_or_insert(m);
            }
            3 => schema_url = r.string_field(wire)?,
            _ => r.skip(wire)?,
        }
    }
    Ok((message.unwrap_or_default(), schema_url))
}

/// Where decoded records go: the envelope and builder of the batch being built, and the
/// batches finished so far.
struct Batching<'e, 'a, B> {
    envelope: &'e mut Envelope<'a>,
    builder: &'e mut B,
    out: &'e mut Vec<OtapBatch>,
    max_rows: usize,
}

impl<'a, B: RootBuilder> Batching<'_, 'a, B> {
    /// Whether the batch is full; if so, `before_flush` runs, then the batch is finished.
    fn flush_if_full(
        &mut self,
        before_flush: impl FnOnce(&mut Envelope<'a>) -> Result<()>,
    ) -> Result<bool> {
        if self.envelope.rows() < self.max_rows {
            return Ok(false);
        }
        before_flush(self.envelope)?;
        self.out.push(self.builder.finish(self.envelope.finish()?)?);
        Ok(true)
    }

    fn append(
        &mut self,
        resource: &mut Context<'a>,
        scope: &mut Context<'a>,
        record: Reader<'_>,
    ) -> Result<()> {
        let row = self.envelope.push_row(resource, scope)?;
        self.builder.append(row, record)
    }
}

/// The last schema URL (field 3) among the remaining fields of a `Scope*` message.
fn last_schema_url<'a>(mut rest: Reader<'a>) -> Result<&'a str> {
    let mut url = "";
    while let Some((field, wire)) = rest.field()? {
        match field {
            3 => url = rest.string_field(wire)?,
            _ => rest.skip(wire)?,
        }
    }
    Ok(url)
}

/// Decodes a `Scope*` message that starts with its scope, in one pass: its schema URL, which
/// encoders write after the records, is set on the scope's rows when it arrives (or looked up
/// in the rest of the message when the batch fills up first).
fn scope_in_one_pass<'a, B: RootBuilder>(
    scope_msg: Reader<'a>,
    resource: &mut Context<'a>,
    batch: &mut Batching<'_, 'a, B>,
) -> Result<()> {
    let mut s = scope_msg;
    let mut scope: Option<Context<'a>> = None;
    let mut first_row = batch.envelope.rows();
    let mut url_known = false;
    while let Some((field, wire)) = s.field()? {
        match field {
            1 if scope.is_none() => {
                scope = Some(Context::new(Embedded::of(&s.message_field(wire)?), ""))
            }
            2 => {
                let record = s.message_field(wire)?;
                let Some(ctx) = scope.as_mut() else {
                    return s.err("scope missing");
                };
                let flushed = batch.flush_if_full(|envelope| {
                    if !url_known {
                        let url = last_schema_url(s)?;
                        envelope.patch_schema_url(first_row, url);
                        ctx.set_schema_url(url);
                        url_known = true;
                    }
                    Ok(())
                })?;
                if flushed {
                    first_row = 0;
                }
                batch.append(resource, ctx, record)?;
            }
            3 => {
                let url = s.string_field(wire)?;
                batch.envelope.patch_schema_url(first_row, url);
                if let Some(ctx) = scope.as_mut() {
                    ctx.set_schema_url(url);
                }
                url_known = true;
            }
            _ => s.skip(wire)?,
        }
    }
    Ok(())
}

/// Decodes a `Scope*` message in any field order: its scope and schema URL first, then its
/// records.
fn scope_in_two_passes<'a, B: RootBuilder>(
    scope_msg: Reader<'a>,
    resource: &mut Context<'a>,
    batch: &mut Batching<'_, 'a, B>,
) -> Result<()> {
    let (scope, schema_url) = scan_header(scope_msg)?;
    let mut scope = Context::new(scope, schema_url);
    let mut s = scope_msg;
    while let Some((field, wire)) = s.field()? {
        if field != 2 {
            s.skip(wire)?;
            continue;
        }
        let record = s.message_field(wire)?;
        batch.flush_if_full(|_| Ok(()))?;
        batch.append(resource, &mut scope, record)?;
    }
    Ok(())
}

/// How many root records (field 2 of field 2 of field 1) the request holds, as far as it
/// can be walked: a sizing hint, errors are left to the decoding pass.
fn count_records(bytes: &[u8]) -> usize {
    /// Calls `f` with each field `number` of `r` that is an embedded message.
    fn each(mut r: Reader<'_>, number: u32, mut f: impl FnMut(Reader<'_>)) {
        while let Ok(Some((field, wire))) = r.field() {
            if field == number && wire == WireType::Len {
                match r.message() {
                    Ok(m) => f(m),
                    Err(_) => return,
                }
            } else if r.skip(wire).is_err() {
                return;
            }
        }
    }
    let mut records = 0;
    each(Reader::new(bytes), 1, |resource| {
        each(resource, 2, |scope| each(scope, 2, |_| records += 1))
    });
    records
}

thread_local! {
    /// Per signal, the request bytes per root record of the last request this thread decoded
    /// (0: none yet): the next request's record count is estimated from it rather than counted.
    static RECORD_SIZES: std::cell::Cell<[usize; 3]> = const { std::cell::Cell::new([0; 3]) };
}

/// The number of root records to reserve room for in a request of `bytes` bytes.
fn expected_records<B: RootBuilder>(bytes: &[u8]) -> usize {
    match RECORD_SIZES.get()[B::SIGNAL] {
        0 => count_records(bytes),
        // A little over the estimate: buffers regrow when it falls short.
        size => bytes.len() / size + bytes.len() / size / 16 + 16,
    }
}

/// Remembers the bytes per record of a decoded request.
fn remember_record_size<B: RootBuilder>(bytes: usize, records: usize) {
    if let Some(size) = bytes.checked_div(records) {
        let mut sizes = RECORD_SIZES.get();
        sizes[B::SIGNAL] = size.max(1);
        RECORD_SIZES.set(sizes);
    }
}

fn walk<B: RootBuilder>(bytes: &[u8], mut builder: B, max_rows: usize) -> Result<Vec<OtapBatch>> {
    let records = expected_records::<B>(bytes).min(max_rows);
    let mut envelope = Envelope::with_capacity(records);
    builder.reserve(records, bytes.len());
    let mut out = Vec::new();
    let mut request = Reader::new(bytes);
    while let Some((field, wire)) = request.field()? {
        if field != 1 {
            request.skip(wire)?;
            continue;
        }
        let resource_msg = request.message_field(wire)?;
        let (resource, schema_url) =
            scan_header(Reader::nested(resource_msg.rest(), resource_msg.offset()))?;
        let mut resource = Context::new(resource, schema_url);
        let mut r = resource_msg;
        while let Some((field, wire)) = r.field()? {
            if field != 2 {
                r.skip(wire)?;
                continue;
            }
            let scope_msg = r.message_field(wire)?;
            let mut batch = Batching {
                envelope: &mut envelope,
                builder: &mut builder,
                out: &mut out,
                max_rows,
            };
            if matches!(scope_msg.clone().field()?, Some((1, WireType::Len))) {
                scope_in_one_pass(scope_msg, &mut resource, &mut batch)?;
            } else {
                scope_in_two_passes(scope_msg, &mut resource, &mut batch)?;
            }
        }
    }
    if envelope.rows() > 0 {
        out.push(builder.finish(envelope.finish()?)?);
    }
    let decoded: usize = out
        .iter()
        .map(|b| b.root().map_or(0, arrow::array::RecordBatch::num_rows))
        .sum();
    remember_record_size::<B>(bytes.len(), decoded);
    Ok(out)
}
