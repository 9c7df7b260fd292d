//! Tail sampling over time: when traces are decided, what late spans do, and what the bounds
//! decide early.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, SystemTime};

use common::decode_line;
use penstock_dialect::Program;
use penstock_engine::OtapBatch;
use penstock_engine::otlp::json;
use penstock_pipeline::{Pipeline, SamplerStats, check_source};
use serde_json::{Value, json};

/// A span of trace `trace` (a small number) named `name`; `error` sets status code 2.
fn span(trace: u8, name: &str, error: bool) -> Value {
    let mut span = json!({
        // The last byte spreads the traces over two workers: 1 and 5 on one, 3 and 7 on the
        // other.
        "traceId": format!("{trace:02x}{}{:02x}", "0".repeat(28), trace / 2),
        "spanId": "0102030405060708",
        "name": name,
        "kind": 2,
        "startTimeUnixNano": "1750000000000000000",
        "endTimeUnixNano": "1750000000001000000",
    });
    if error {
        span["status"] = json!({"code": 2});
    }
    span
}

fn spans(spans: Vec<Value>) -> OtapBatch {
    decode_line(json!({"resourceSpans": [{
        "resource": {"attributes": []},
        "scopeSpans": [{"scope": {"name": "app"}, "spans": spans}]
    }]}))
}

/// A pipeline keeping traces with an error span, with `options` (a WITH list, or empty).
fn sampler(options: &str) -> Pipeline {
    let sql = format!(
        "CREATE SOURCE src FROM FILE WITH (path = 'x');
         CREATE SINK out TO CONSOLE;
         CREATE PIPELINE p FROM src {options} AS BEGIN
           INSERT INTO out SELECT * FROM spans WHERE trace_id IN (
             SELECT trace_id FROM spans GROUP BY trace_id HAVING bool_or(status.code = 2));
         END;"
    );
    let program = check_source("test.sql", &sql).unwrap_or_else(|e| panic!("{e}"));
    Pipeline::compile(&program, "p").unwrap_or_else(|e| panic!("{e}"))
}

/// The names of the spans in `routed`, sorted.
fn names(routed: &[(String, OtapBatch)]) -> Vec<String> {
    let mut names = Vec::new();
    for (sink, batch) in routed {
        assert_eq!(sink, "out");
        let line: Value = serde_json::from_str(&json::to_line(batch).unwrap()).unwrap();
        for rs in line["resourceSpans"].as_array().into_iter().flatten() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for s in ss["spans"].as_array().unwrap() {
                    names.push(s["name"].as_str().unwrap().to_string());
                }
            }
        }
    }
    names.sort();
    names
}

fn at(seconds: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000 + seconds)
}

#[test]
fn a_trace_is_decided_its_wait_after_its_first_span_and_late_spans_follow() {
    let mut p = sampler("WITH (decision_wait = '10s')");
    let out = p
        .run_at(
            spans(vec![span(1, "a1", false), span(2, "b1", false)]),
            at(0),
        )
        .unwrap();
    assert!(out.routed.is_empty(), "held, not sent");
    let out = p
        .run_at(spans(vec![span(1, "a2", true), span(3, "c1", true)]), at(5))
        .unwrap();
    assert!(out.routed.is_empty());
    assert_eq!(
        p.sampler_stats(),
        SamplerStats {
            traces_held: 3,
            spans_held: 4,
            bytes_held: p.sampler_stats().bytes_held,
            ..SamplerStats::default()
        }
    );
    assert!(p.decide(at(9), false).unwrap().is_empty(), "not yet");
    // At 10 s, traces 1 and 2 (first seen at 0) are decided: 1 had an error, in the second
    // batch. The first batch leaves: its span of trace 1 is sent, its span of trace 2 not.
    let decided = p.decide(at(10), false).unwrap();
    assert_eq!(names(&decided), ["a1"]);
    let stats = p.sampler_stats();
    assert_eq!((stats.traces_kept, stats.traces_dropped), (1, 1));
    assert_eq!(stats.traces_held, 1);
    // A late span of the kept trace goes through at once; one of the dropped trace does not.
    let out = p
        .run_at(
            spans(vec![span(1, "a3", false), span(2, "b2", true)]),
            at(12),
        )
        .unwrap();
    assert_eq!(names(&out.routed), ["a3"]);
    assert_eq!(p.sampler_stats().late_spans, 2);
    // The second batch leaves once it has waited: trace 3 is decided, and trace 1's span in
    // it follows the decision taken at 10 s.
    let decided = p.decide(at(15), false).unwrap();
    assert_eq!(names(&decided), ["a2", "c1"]);
    let stats = p.sampler_stats();
    assert_eq!(
        (stats.traces_kept, stats.traces_dropped, stats.decided_early),
        (2, 1, 0)
    );
    assert_eq!((stats.traces_held, stats.spans_held), (0, 0));
}

/// Scenario: one batch whose spans interleave two traces (1, 2, 1, 2, 1), then one mixing a
/// late span of a decided trace with a new trace and a repeat of it after another.
/// Guarantees: each trace is held once (its spans counted toward one decision), whatever the
/// order of its rows; a kept trace leaves whole.
#[test]
fn spans_of_interleaved_traces_in_one_batch_count_toward_one_decision_each() {
    let mut p = sampler("WITH (decision_wait = '2s')");
    let batch = spans(vec![
        span(1, "a1", false),
        span(2, "b1", false),
        span(1, "a2", false),
        span(2, "b2", false),
        span(1, "a3", true),
    ]);
    p.run_at(batch, at(0)).unwrap();
    let stats = p.sampler_stats();
    assert_eq!((stats.traces_held, stats.spans_held), (2, 5));
    assert_eq!(names(&p.decide(at(2), false).unwrap()), ["a1", "a2", "a3"]);
    let batch = spans(vec![
        span(3, "c1", false),
        span(1, "a4", false),
        span(3, "c2", true),
        span(2, "b3", true),
        span(3, "c3", false),
    ]);
    let out = p.run_at(batch, at(3)).unwrap();
    assert_eq!(
        names(&out.routed),
        ["a4"],
        "late spans follow their decision"
    );
    let stats = p.sampler_stats();
    assert_eq!(
        (stats.traces_held, stats.spans_held, stats.late_spans),
        (1, 3, 2)
    );
    assert_eq!(names(&p.decide(at(5), false).unwrap()), ["c1", "c2", "c3"]);
    let stats = p.sampler_stats();
    assert_eq!((stats.traces_kept, stats.traces_dropped), (2, 1));
}

#[test]
fn spans_of_one_trace_in_several_batches_leave_together_with_their_decision() {
    let mut p = sampler("WITH (decision_wait = '2s')");
    p.run_at(spans(vec![span(1, "a1", false)]), at(0)).unwrap();
    p.run_at(spans(vec![span(1, "a2", true)]), at(1)).unwrap();
    let first = p.decide(at(2), false).unwrap();
    let second = p.decide(at(3), false).unwrap();
    assert_eq!(names(&first), ["a1"]);
    assert_eq!(names(&second), ["a2"]);
    assert_eq!(p.sampler_stats().spans_kept, 2);
}

#[test]
fn past_max_traces_the_oldest_are_decided_early() {
    let mut p = sampler("WITH (decision_wait = '1h', max_traces = 2)");
    let mut sent = Vec::new();
    for trace in 1..=5u8 {
        let out = p
            .run_at(
                spans(vec![span(trace, &format!("t{trace}"), trace % 2 == 1)]),
                at(0),
            )
            .unwrap();
        sent.extend(out.routed);
    }
    // Five traces, at most two held: the first three were decided early.
    assert_eq!(names(&sent), ["t1", "t3"]);
    let stats = p.sampler_stats();
    assert_eq!(stats.decided_early, 3);
    assert_eq!(stats.traces_held, 2);
    let rest = p.decide(at(1), true).unwrap();
    assert_eq!(names(&rest), ["t5"]);
    assert_eq!(p.sampler_stats().decided_early, 5);
}

#[test]
fn past_max_held_bytes_the_oldest_batches_leave_early() {
    let mut p = sampler("WITH (decision_wait = '1h', max_held_bytes = 1)");
    let out = p
        .run_at(
            spans(vec![span(1, "a1", true), span(2, "b1", false)]),
            at(0),
        )
        .unwrap();
    assert_eq!(names(&out.routed), ["a1"]);
    assert_eq!(p.sampler_stats().spans_held, 0);
    assert_eq!(p.sampler_stats().decided_early, 2);
}

#[test]
fn the_decision_cache_is_bounded() {
    let mut p = sampler("WITH (decision_wait = '1s', decision_cache = 1)");
    p.run_at(spans(vec![span(1, "a1", true)]), at(0)).unwrap();
    p.run_at(spans(vec![span(2, "b1", true)]), at(0)).unwrap();
    assert_eq!(names(&p.decide(at(1), false).unwrap()), ["a1", "b1"]);
    // Trace 2's decision is remembered, trace 1's was forgotten: its late span starts a new
    // trace, held and decided on its own (no error: dropped).
    let out = p
        .run_at(
            spans(vec![span(1, "a2", false), span(2, "b2", false)]),
            at(2),
        )
        .unwrap();
    assert_eq!(names(&out.routed), ["b2"]);
    assert!(p.decide(at(3), false).unwrap().is_empty());
    let stats = p.sampler_stats();
    assert_eq!((stats.traces_kept, stats.traces_dropped), (2, 1));
}

#[test]
fn options_without_a_decision_are_refused() {
    let sql = "CREATE SOURCE src FROM FILE WITH (path = 'x');
CREATE SINK out TO CONSOLE;
CREATE PIPELINE p FROM src WITH (decision_wait = '5s') AS BEGIN
  INSERT INTO out SELECT * FROM spans;
END;";
    let error = check_source("test.sql", sql).unwrap_err().to_string();
    assert!(
        error.starts_with(
            "test.sql:3:34: pipeline 'p': option 'decision_wait' applies to a trace decision"
        ),
        "{error}"
    );
    let sql = sql.replace("decision_wait = '5s'", "decision_wait = 5");
    let error = check_source("test.sql", &sql).unwrap_err().to_string();
    assert!(error.contains("decision_wait"), "{error}");
}

#[test]
fn a_journal_of_held_spans_needs_its_directory_and_one_pipeline_per_directory() {
    let program = |options: &str, second: &str| {
        format!(
            "CREATE SOURCE src FROM FILE WITH (path = 'x');
CREATE SINK out TO CONSOLE;
CREATE PIPELINE p FROM src WITH ({options}) AS BEGIN
  INSERT INTO out SELECT * FROM spans WHERE trace_id IN (
    SELECT trace_id FROM spans GROUP BY trace_id HAVING count(*) > 1);
END;
{second}"
        )
    };
    let error = |sql: String| check_source("test.sql", &sql).unwrap_err().to_string();
    assert!(
        error(program("hold = 'disk'", "")).starts_with(
            "test.sql:3:1: a journal of held spans needs a directory: WITH (hold = 'disk', hold_path = 'var/NAME')"
        ),
        "{}",
        error(program("hold = 'disk'", ""))
    );
    let e = error(program("hold_path = 'held'", ""));
    assert!(
        e.starts_with("test.sql:3:34: option 'hold_path' applies to a journal of held spans: add hold = 'disk'"),
        "{e}"
    );
    let e = error(program("hold = 'tape'", ""));
    assert!(e.starts_with("test.sql:3:41:"), "{e}");
    let disk = "hold = 'disk', hold_path = 'held'";
    let second = "CREATE PIPELINE q FROM src WITH (hold = 'disk', hold_path = 'held') AS BEGIN
  INSERT INTO out SELECT * FROM spans WHERE trace_id IN (
    SELECT trace_id FROM spans GROUP BY trace_id HAVING count(*) > 2);
END;";
    let e = error(program(disk, second));
    assert!(
        e.starts_with("test.sql:7:61: pipeline 'p' holds its spans in 'held' already (at test.sql:3:1): one pipeline per directory"),
        "{e}"
    );
    check_source(
        "test.sql",
        &program(disk, &second.replace("'held'", "'held-q'")),
    )
    .unwrap();
}

#[test]
fn two_workers_decide_each_trace_once_whichever_worker_its_spans_reached() {
    let mut workers = [sampler(""), sampler("")];
    for (i, w) in workers.iter_mut().enumerate() {
        w.partition_traces(i, 2);
    }
    // Each worker receives one span of every trace; traces 1 to 8, odd ones with an error on
    // worker 0's side only.
    let mut exchanged = Vec::new();
    for (i, w) in workers.iter_mut().enumerate() {
        let batch = spans(
            (1..=8u8)
                .map(|t| span(t, &format!("t{t}-w{i}"), i == 0 && t % 2 == 1))
                .collect(),
        );
        let out = w.run_at(batch, at(0)).unwrap();
        assert!(out.routed.is_empty());
        exchanged.extend(out.exchanged);
    }
    assert!(
        !exchanged.is_empty(),
        "some traces belong to the other worker"
    );
    for e in exchanged {
        let taken = workers[e.worker]
            .take_exchanged(e.step, e.batch, at(0))
            .unwrap();
        assert!(taken.is_empty());
    }
    let mut sent = Vec::new();
    for w in &mut workers {
        sent.extend(w.decide(at(10), false).unwrap());
    }
    let expected: Vec<String> = [1, 3, 5, 7]
        .iter()
        .flat_map(|t| [format!("t{t}-w0"), format!("t{t}-w1")])
        .collect();
    let mut expected = expected;
    expected.sort();
    assert_eq!(names(&sent), expected);
    let kept: u64 = workers.iter().map(|w| w.sampler_stats().traces_kept).sum();
    let dropped: u64 = workers
        .iter()
        .map(|w| w.sampler_stats().traces_dropped)
        .sum();
    assert_eq!((kept, dropped), (4, 4), "each trace decided once");
    assert!(workers.iter().all(|w| w.sampler_stats().traces_kept > 0));
}

/// A log record of trace `trace` (None: no trace id) with body `body`.
fn log(trace: Option<u8>, body: &str) -> Value {
    let mut record = json!({"severityNumber": 9, "body": {"stringValue": body}});
    if let Some(t) = trace {
        record["traceId"] = json!(format!("{t:02x}{}{:02x}", "0".repeat(28), t / 2));
    }
    record
}

fn logs(records: Vec<Value>) -> OtapBatch {
    decode_line(json!({"resourceLogs": [{
        "resource": {"attributes": []},
        "scopeLogs": [{"scope": {"name": "app"}, "logRecords": records}]
    }]}))
}

/// The bodies of the log records in `routed`, sorted.
fn bodies(routed: &[(String, OtapBatch)]) -> Vec<String> {
    let mut bodies = Vec::new();
    for (_, batch) in routed {
        let line: Value = serde_json::from_str(&json::to_line(batch).unwrap()).unwrap();
        for rl in line["resourceLogs"].as_array().into_iter().flatten() {
            for sl in rl["scopeLogs"].as_array().unwrap() {
                for r in sl["logRecords"].as_array().unwrap() {
                    bodies.push(r["body"]["stringValue"].as_str().unwrap().to_string());
                }
            }
        }
    }
    bodies.sort();
    bodies
}

/// A program whose pipeline `p` sends spans and log records of the traces with an error span,
/// one decision for both, 10 s after a trace's first span.
fn spans_and_logs_of_failed_traces() -> Program {
    let decision = "trace_id IN (SELECT trace_id FROM spans GROUP BY trace_id
                    HAVING bool_or(status.code = 2))";
    let sql = format!(
        "CREATE SOURCE src FROM FILE WITH (path = 'x');
         CREATE SINK out TO CONSOLE;
         CREATE PIPELINE p FROM src WITH (decision_wait = '10s') AS BEGIN
           INSERT INTO out SELECT * FROM spans WHERE {decision};
           INSERT INTO out SELECT * FROM logs WHERE {decision};
         END;"
    );
    check_source("test.sql", &sql).unwrap_or_else(|e| panic!("{e}"))
}

/// Scenario: log records of one pending trace on both sides of a record of no trace, and of a
/// second trace after it, in one batch.
/// Guarantees: the record of no trace goes at once; the others wait for their trace and follow
/// its decision.
#[test]
fn logs_of_a_trace_around_a_record_of_no_trace_follow_their_trace() {
    let program = spans_and_logs_of_failed_traces();
    let mut p = Pipeline::compile(&program, "p").unwrap();
    p.run_at(
        spans(vec![span(1, "s1", true), span(2, "s2", false)]),
        at(0),
    )
    .unwrap();
    let batch = logs(vec![
        log(Some(1), "l1a"),
        log(None, "free"),
        log(Some(1), "l1b"),
        log(Some(2), "l2"),
    ]);
    let out = p.run_at(batch, at(1)).unwrap();
    assert_eq!(bodies(&out.routed), ["free"]);
    let stats = p.sampler_stats();
    assert_eq!((stats.traces_held, stats.logs_held), (2, 3));
    let decided = p.decide(at(11), false).unwrap();
    assert_eq!(bodies(&decided), ["l1a", "l1b"]);
    assert_eq!(names(&decided), ["s1"]);
}

#[test]
fn logs_follow_the_decision_of_their_trace_across_workers() {
    let program = spans_and_logs_of_failed_traces();
    let mut workers = [
        Pipeline::compile(&program, "p").unwrap(),
        Pipeline::compile(&program, "p").unwrap(),
    ];
    for (i, w) in workers.iter_mut().enumerate() {
        w.partition_traces(i, 2);
    }
    // Worker 0 gets the spans, worker 1 the logs (and a record of no trace, sent at once).
    let mut sent = Vec::new();
    let mut exchanged = Vec::new();
    let spans_batch = spans(
        (1..=4u8)
            .map(|t| span(t, &format!("s{t}"), t <= 2))
            .collect(),
    );
    let out = workers[0].run_at(spans_batch, at(0)).unwrap();
    exchanged.extend(out.exchanged);
    sent.extend(out.routed);
    let logs_batch = logs(vec![
        log(Some(1), "l1"),
        log(Some(3), "l3"),
        log(None, "free"),
    ]);
    let out = workers[1].run_at(logs_batch, at(1)).unwrap();
    exchanged.extend(out.exchanged);
    sent.extend(out.routed);
    assert_eq!(bodies(&sent), ["free"]);
    for e in exchanged {
        sent.extend(
            workers[e.worker]
                .take_exchanged(e.step, e.batch, at(1))
                .unwrap(),
        );
    }
    for w in &mut workers {
        sent.extend(w.decide(at(11), false).unwrap());
    }
    assert_eq!(names(&sent), ["s1", "s2"]);
    assert_eq!(bodies(&sent), ["free", "l1"]);
    // A late record of kept trace 2 goes at once, on whichever worker owns the trace.
    let late = logs(vec![log(Some(2), "l2-late"), log(Some(4), "l4-late")]);
    let out = workers[0].run_at(late, at(20)).unwrap();
    let mut late_sent = out.routed;
    for e in out.exchanged {
        late_sent.extend(
            workers[e.worker]
                .take_exchanged(e.step, e.batch, at(20))
                .unwrap(),
        );
    }
    assert_eq!(bodies(&late_sent), ["l2-late"]);
    let stats = workers.iter().fold(SamplerStats::default(), |mut a, w| {
        a += w.sampler_stats();
        a
    });
    assert_eq!((stats.traces_kept, stats.traces_dropped), (2, 2));
    assert_eq!((stats.logs_kept, stats.logs_dropped), (2, 2));
}

#[test]
fn the_rate_limit_keeps_traces_in_decision_order_within_each_second() {
    let mut p = sampler("WITH (decision_wait = '1s', max_spans_per_second = 3)");
    // Three kept traces of two spans each, decided in one second: the first fits (2 spans),
    // the second would make 4 and is dropped, so is the third.
    let batch = spans(
        (1..=3u8)
            .flat_map(|t| {
                [
                    span(t, &format!("t{t}a"), true),
                    span(t, &format!("t{t}b"), false),
                ]
            })
            .collect(),
    );
    p.run_at(batch, at(0)).unwrap();
    assert_eq!(names(&p.decide(at(1), false).unwrap()), ["t1a", "t1b"]);
    let stats = p.sampler_stats();
    assert_eq!((stats.traces_kept, stats.traces_rate_limited), (1, 2));
    // The next second has room again.
    p.run_at(spans(vec![span(4, "t4", true)]), at(1)).unwrap();
    assert_eq!(names(&p.decide(at(2), false).unwrap()), ["t4"]);
}

#[test]
fn a_cap_on_held_bytes_lowers_the_pipeline_s_own_bound() {
    // The pipeline allows 256 MiB; the gateway's memory limit allows 1 byte.
    let mut p = sampler("WITH (decision_wait = '1h')");
    p.cap_held_bytes(1);
    let out = p
        .run_at(
            spans(vec![span(1, "a1", true), span(2, "b1", false)]),
            at(0),
        )
        .unwrap();
    assert_eq!(names(&out.routed), ["a1"]);
    assert_eq!(p.sampler_stats().decided_early, 2);
}

#[test]
fn held_rows_given_back_after_a_restart_are_decided_as_they_would_have_been() {
    // Before the restart: one worker holds three traces; trace 2's error comes in the
    // second batch.
    let mut before = sampler("WITH (decision_wait = '10s')");
    before.keep_held_journal();
    let first = spans(vec![span(1, "a1", false), span(2, "b1", false)]);
    let second = spans(vec![span(2, "b2", true), span(3, "c1", false)]);
    assert!(before.run_at(first, at(0)).unwrap().routed.is_empty());
    assert!(before.run_at(second, at(4)).unwrap().routed.is_empty());
    let journal = before.take_held_rows();
    assert_eq!(journal.len(), 2);
    assert!(before.take_held_rows().is_empty(), "taken once");
    let arrivals: Vec<u64> = journal.iter().map(|h| h.arrival).collect();
    assert_eq!(
        arrivals,
        [at(0), at(4)].map(penstock_pipeline::nanos_since_epoch)
    );
    assert_eq!(before.decision_wait(), Duration::from_secs(10));

    // After: two workers, each given every row, each keeps its own traces' rows; their
    // journals again have the rows they took.
    let mut workers: Vec<Pipeline> = (0..2)
        .map(|w| {
            let mut p = sampler("WITH (decision_wait = '10s')");
            p.partition_traces(w, 2);
            p.keep_held_journal();
            p
        })
        .collect();
    let mut rejournaled = 0;
    for p in &mut workers {
        for held in &journal {
            let out = p
                .restore_held(held.step, held.batch.clone(), held.arrival)
                .unwrap();
            assert!(out.is_empty(), "nothing leaves before its time");
        }
        rejournaled += p
            .take_held_rows()
            .iter()
            .map(|h| h.batch.num_items())
            .sum::<usize>();
    }
    assert_eq!(rejournaled, 4, "every row taken by exactly one worker");
    let held: u64 = workers.iter().map(|p| p.sampler_stats().traces_held).sum();
    assert_eq!(held, 3);
    // Decided when they would have been: traces 1 and 2 at 10 s, trace 3 at 14 s.
    let mut kept = Vec::new();
    for p in &mut workers {
        kept.extend(p.decide(at(9), false).unwrap());
    }
    assert!(kept.is_empty());
    for p in &mut workers {
        kept.extend(p.decide(at(14), false).unwrap());
    }
    assert_eq!(names(&kept), ["b1", "b2"]);
    let stats: Vec<SamplerStats> = workers.iter().map(Pipeline::sampler_stats).collect();
    let decided: u64 = stats.iter().map(|s| s.traces_kept + s.traces_dropped).sum();
    assert_eq!(decided, 3);
    assert_eq!(stats.iter().map(|s| s.decided_early).sum::<u64>(), 0);
}
