//! `penstock run --memory-limit`: request bytes in flight over every source stay within the
//! budget's share of the limit, and requests past it are refused (or held) with the codes
//! senders retry on; refused senders are asked to wait longer while the refusals go on.

#![allow(clippy::unwrap_used)]

mod common;

use common::go::interop_binary;
use common::otlp_go::series;
use common::{Gateway, block_on, export_otlp, temp_dir};
use penstock_engine::datagen::DataGen;

#[test]
fn requests_past_the_memory_budget_are_refused_with_resource_exhausted() {
    let dir = temp_dir("memory-limit");
    // A backend that never answers (connections wait in its backlog): nothing is
    // acknowledged, so admitted bytes pile up until the budget is spent.
    let backend = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", backend.local_addr().unwrap());
    let gateway = Gateway::start_with(
        &dir,
        "limited",
        &format!(
            "CREATE SOURCE a FROM GRPC WITH (listen = '127.0.0.1:0', admission = 'refuse');
             CREATE SOURCE b FROM GRPC WITH (listen = '127.0.0.1:0', admission = 'refuse');
             CREATE SINK out TO OTLP WITH (endpoint = '{}', timeout = '90s');
             CREATE PIPELINE p FROM a AS BEGIN INSERT INTO out SELECT * FROM logs; END;
             CREATE PIPELINE q FROM b AS BEGIN INSERT INTO out SELECT * FROM logs; END;",
            url
        ),
        &["--memory-limit", "256MiB", "--admin-listen", "127.0.0.1:0"],
    );
    let share = (256u64 << 20) as f64 * 0.6;
    let limit = series(&gateway.metrics_text(), "penstock_memory_limit_bytes").unwrap();
    assert_eq!(limit, (256u64 << 20) as f64);
    // Requests of about 10 MB each, to both sources at once, each left waiting for its
    // answer: the requests a worker may receive at once (8) hold more than the budget.
    let refused = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    for source in ["a", "b"] {
        let url = format!("http://{}", gateway.addr_of(source));
        let refused = std::sync::Arc::clone(&refused);
        // Detached: the calls the gateway admitted end only when it is killed.
        std::thread::spawn(move || {
            let mut data = DataGen::new(3);
            let calls: Vec<_> = (0..12).map(|_| data.logs(30_000)).collect();
            block_on(async {
                let calls = calls.into_iter().map(|request| {
                    let (url, refused) = (&url, &refused);
                    async move {
                        if let Err(status) = export_otlp(url, request).await {
                            refused.lock().unwrap().push(status.code());
                        }
                    }
                });
                futures::future::join_all(calls).await;
            });
        });
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while refused.lock().unwrap().len() < 10 {
        assert!(std::time::Instant::now() < deadline, "too few refusals");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let codes = refused.lock().unwrap().clone();
    let text = gateway.metrics_text();
    let admitted = series(&text, "penstock_memory_admitted_bytes").unwrap();
    let refusals = series(&text, "penstock_memory_refusals_total").unwrap();
    assert!(
        admitted <= share,
        "{admitted} bytes admitted, the share is {share}"
    );
    assert!(refusals > 0.0, "the budget refused nothing");
    assert!(!codes.is_empty());
    assert!(
        codes.iter().all(|c| *c == tonic::Code::ResourceExhausted),
        "refused with {codes:?}"
    );
    drop((gateway, backend));
}

/// One answer the grpc-go client got: when (ms since its first call), its code, and the wait
/// its RetryInfo asked for (-1 without one).
struct Answer {
    ms: u64,
    code: String,
    retry_ms: i64,
}

impl Answer {
    fn from_line(line: &str) -> Answer {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        Answer {
            ms: v["ms"].as_u64().unwrap(),
            code: v["code"].as_str().unwrap().to_string(),
            retry_ms: v["retry_ms"].as_i64().unwrap(),
        }
    }
}

/// Scenario: a source with room for a few requests in flight and `admission = 'refuse'`, in
/// front of a backend that never answers; a grpc-go OTLP client (the pdata client, gzip) keeps
/// sending 500-log requests from eight loops without waiting: the first requests admitted
/// hold the room (their calls hang), and every later one is refused.
/// Guarantees: every refusal is RESOURCE_EXHAUSTED with a `google.rpc.RetryInfo` the client
/// reads; the first asks for 100 ms, and each second of refusals doubles the wait (100, 200,
/// 400 ms, in that order; the 5 s cap is checked by the unit tests of `pushback`).
#[test]
fn the_wait_asked_of_refused_senders_doubles_while_refusals_go_on() {
    let Some(go) = interop_binary() else {
        return;
    };
    let dir = temp_dir("retry-wait");
    let backend = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gateway = Gateway::start_with(
        &dir,
        "pushback",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0', admission = 'refuse',
               max_in_flight_bytes = 200000);
             CREATE SINK out TO OTLP WITH (endpoint = 'http://{}', timeout = '90s');
             CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO out SELECT * FROM logs; END;",
            backend.local_addr().unwrap()
        ),
        &["--workers", "1"],
    );
    let output = std::process::Command::new(go)
        .args(["export-otlp", "-addr", gateway.addr_of("edge")])
        .args(["-senders", "8", "-records", "500", "-call-timeout", "90s"])
        .args(["-until-retry", "400ms", "-deadline", "60s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let answers: Vec<Answer> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(Answer::from_line)
        .collect();
    let refusals: Vec<&Answer> = answers
        .iter()
        // The calls admitted hang until the client stops (the backend never answers).
        .filter(|a| a.code != "OK" && a.code != "Canceled")
        .collect();
    assert!(
        refusals
            .iter()
            .all(|a| a.code == "ResourceExhausted" && a.retry_ms > 0),
        "every refusal is RESOURCE_EXHAUSTED with a RetryInfo"
    );
    let mut waits: Vec<i64> = Vec::new();
    for a in &refusals {
        if !waits.contains(&a.retry_ms) {
            waits.push(a.retry_ms);
        }
    }
    assert_eq!(
        waits,
        [100, 200, 400],
        "the waits asked for, in the order they first came"
    );
    let first_doubled = refusals.iter().find(|a| a.retry_ms == 200).unwrap().ms;
    assert!(
        first_doubled >= 1000,
        "the wait doubled after {first_doubled} ms, before a whole second of refusals"
    );
    drop((gateway, backend));
}
