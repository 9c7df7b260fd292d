//! Held spans survive `kill -9` with `hold = 'disk'`: spans acknowledged to the pdata gRPC
//! traces client (`otap-interop export-traces`, gzip, over two connections) and held by a
//! gateway with two workers are decided after a restart with three, each trace when it
//! would have been, and delivered whole, once, to a grpc-go OTLP receiver
//! (`otap-interop serve-otlp`).

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::mpsc::TryRecvError;

use common::go::interop_binary;
use common::otlp_go::{OtlpReceiver, TRACES, series};
use common::traces::{self, has_error, in_share, records_of, roots_and_children};
use common::{Gateway, temp_dir};

/// Traces sent.
const TRACES_SENT: usize = 60;
/// The share `sample(trace_id, ...)` keeps.
const SHARE: f64 = 0.25;

/// The tail-sampling pipeline with a journal in `held/`, deciding `wait` after a trace's
/// first span, sending to the receiver at `receiver`.
fn sampling(receiver: &str, wait: &str) -> String {
    format!(
        "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
         CREATE SINK backend TO OTLP WITH (endpoint = 'http://{receiver}');
         CREATE PIPELINE sample FROM edge
           WITH (decision_wait = '{wait}', hold = 'disk', hold_path = 'held') AS BEGIN
           INSERT INTO backend SELECT * FROM spans
             WHERE trace_id IN (SELECT trace_id FROM spans GROUP BY trace_id
                                HAVING bool_or(status.code = 2) OR sample(trace_id, {SHARE}));
         END;"
    )
}

/// A sampler counter of the pipeline.
fn sampler(gateway: &Gateway, name: &str) -> f64 {
    series(
        &gateway.metrics_text(),
        &format!("penstock_sampler_{name}{{pipeline=\"sample\"}}"),
    )
    .unwrap_or(-1.0)
}

#[test]
fn spans_held_when_the_gateway_is_killed_are_decided_after_a_restart() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("sampling-crash");
    let receiver = OtlpReceiver::start(&binary, "serve-otlp", &[]);
    let admin = ["--admin-listen", "127.0.0.1:0"];

    // First run: a wait no test reaches, so every span is held when the gateway dies.
    let first = Gateway::start_with(
        &dir,
        "first",
        &sampling(&receiver.addr, "10m"),
        &[&admin[..], &["--workers", "2"]].concat(),
    );
    let requests = roots_and_children(TRACES_SENT);
    // Every request answered OK: every span acknowledged.
    traces::send(&binary, &first.addr, 2, &requests);
    assert_eq!(
        sampler(&first, "spans_held"),
        (2 * TRACES_SENT) as f64,
        "acknowledged once held"
    );
    drop(first); // kill -9
    assert!(matches!(
        receiver.frames().try_recv(),
        Err(TryRecvError::Empty)
    ));

    // Second run, with three workers: the traces are held again and decided at once (their
    // wait passed), none early.
    let second = Gateway::start_with(
        &dir,
        "second",
        &sampling(&receiver.addr, "1s"),
        &[&admin[..], &["--workers", "3"]].concat(),
    );
    let restored = format!("holding again {} records", 2 * TRACES_SENT);
    assert!(
        second.startup.iter().any(|l| l.contains(&restored)),
        "{:?}",
        second.startup
    );
    let kept: BTreeSet<usize> = (0..TRACES_SENT)
        .filter(|i| has_error(*i) || in_share(&traces::trace_id(*i as u64), SHARE))
        .collect();
    assert!(kept.len() > TRACES_SENT / 3 && kept.len() < TRACES_SENT);
    let mut got = receiver.wait_for([0, kept.len() * 2, 0]);
    second.wait_until("every trace decided", |g| {
        sampler(g, "traces_kept_total") + sampler(g, "traces_dropped_total") == TRACES_SENT as f64
    });
    assert_eq!(sampler(&second, "traces_kept_total"), kept.len() as f64);
    assert_eq!(sampler(&second, "traces_decided_early_total"), 0.0);
    assert_eq!(sampler(&second, "traces_held"), 0.0);
    let (ok, output) = second.terminate();
    assert!(ok, "the second run did not exit cleanly: {output:?}");

    // A third run holds nothing again: what the second decided was released.
    let third = Gateway::start_with(&dir, "third", &sampling(&receiver.addr, "1s"), &admin);
    assert!(
        !third.startup.iter().any(|l| l.contains("holding again")),
        "{:?}",
        third.startup
    );
    assert_eq!(sampler(&third, "spans_held"), 0.0);
    let (ok, output) = third.terminate();
    assert!(ok, "the third run did not exit cleanly: {output:?}");

    let (rest, _) = receiver.finish();
    got.extend(rest);
    // Each kept trace whole, once, as sent; nothing of the others.
    let want = records_of(&requests, &kept);
    let mut got = got.lines[TRACES].clone();
    got.sort();
    assert_eq!(got, want);
}
