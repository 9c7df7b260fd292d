//! `penstock run --memory-limit`: request bytes in flight over every source stay within the
//! budget's share of the limit, and requests past it are refused (or held) with the codes
//! senders retry on.

#![allow(clippy::unwrap_used)]

mod common;

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
