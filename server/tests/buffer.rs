//! Disk buffers under faults, with real processes on loopback: the gateway (`penstock run`),
//! a grpc-go OTLP receiver as the backend (`otap-interop serve-otlp`, the pdata services the
//! Collector's OTLP receiver serves), and senders that count what was acknowledged. Every
//! test compares the records the receiver got with those acknowledged to the senders:
//! duplicates are allowed (and counted), losses are not.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use penstock_engine::datagen::DataGen;
use prost::Message;

use common::go::interop_binary;
use common::otlp_go::{OtlpReceiver, series};
use common::{Gateway, block_on, export_otlp, temp_dir, unused_port};

/// Log records per request.
const RECORDS: usize = 50;

/// A request of `RECORDS` logs whose bodies say who sent them: `s{sender}-{request}-{i}`.
fn request(data: &mut DataGen, sender: usize, number: u64) -> ExportLogsServiceRequest {
    let mut request = data.logs(RECORDS);
    let records = request
        .resource_logs
        .iter_mut()
        .flat_map(|r| &mut r.scope_logs)
        .flat_map(|s| &mut s.log_records);
    for (i, record) in records.enumerate() {
        record.body = Some(AnyValue {
            value: Some(any_value::Value::StringValue(format!(
                "s{sender}-{number}-{i}"
            ))),
        });
    }
    request
}

/// The bodies of a logs request, in order.
fn bodies(request: &ExportLogsServiceRequest) -> Vec<String> {
    let records = request
        .resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .flat_map(|s| &s.log_records);
    records
        .filter_map(|r| match r.body.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.clone()),
            _ => None,
        })
        .collect()
}

/// Senders exporting requests one after the other (each waits for its answer), counting
/// what was acknowledged and how the rest was refused.
struct Load {
    acked: Arc<Mutex<Vec<String>>>,
    refusals: Arc<Mutex<Vec<tonic::Code>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    /// `senders` senders to `url`, each pausing `pace` between requests (a steady offered
    /// load, not a wait for anything).
    fn start(url: &str, senders: usize, pace: Duration) -> Load {
        let acked = Arc::new(Mutex::new(Vec::new()));
        let refusals = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..senders)
            .map(|sender| {
                let (url, acked, refusals, stop) = (
                    url.to_string(),
                    Arc::clone(&acked),
                    Arc::clone(&refusals),
                    Arc::clone(&stop),
                );
                std::thread::spawn(move || {
                    let mut data = DataGen::new(100 + sender as u64);
                    let mut number = 0;
                    while !stop.load(SeqCst) {
                        let request = request(&mut data, sender, number);
                        let lines = bodies(&request);
                        number += 1;
                        match block_on(export_otlp(&url, request)) {
                            Ok(_) => acked.lock().unwrap().extend(lines),
                            Err(status) => refusals.lock().unwrap().push(status.code()),
                        }
                        std::thread::sleep(pace);
                    }
                })
            })
            .collect();
        Load {
            acked,
            refusals,
            stop,
            threads,
        }
    }

    fn acked_requests(&self) -> usize {
        self.acked.lock().unwrap().len() / RECORDS
    }

    /// Waits until `more` requests more than now were acknowledged.
    fn wait_for_acks(&self, more: usize) {
        let want = self.acked_requests() + more;
        wait("acknowledgements", Duration::from_secs(120), || {
            self.acked_requests() >= want
        });
    }

    /// Stops the senders: what they acknowledged, and the codes of the refusals.
    fn stop(self) -> (Vec<String>, Vec<tonic::Code>) {
        self.stop.store(true, SeqCst);
        for thread in self.threads {
            thread.join().unwrap();
        }
        let acked = self.acked.lock().unwrap().clone();
        let refusals = self.refusals.lock().unwrap().clone();
        (acked, refusals)
    }
}

/// Waits (polling every 20 ms) until `condition` holds, for at most `limit`.
fn wait(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the backend received, in arrival order, gathered from receivers one after the
/// other.
#[derive(Default)]
struct Arrivals {
    bodies: Vec<String>,
}

impl Arrivals {
    /// Adds frames of logs requests.
    fn add(&mut self, frames: Vec<(u8, Vec<u8>)>) {
        for (tag, otlp) in frames {
            assert_eq!(tag, 0, "only logs are sent");
            let request = ExportLogsServiceRequest::decode(otlp.as_slice()).unwrap();
            self.bodies.extend(bodies(&request));
        }
    }

    /// Reads what `receiver` accepted until every one of `acked` arrived (or `limit`).
    fn until_all(&mut self, receiver: &OtlpReceiver, acked: &[String], limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut seen: std::collections::HashSet<String> = self.bodies.iter().cloned().collect();
        let mut missing = acked.iter().filter(|a| !seen.contains(*a)).count();
        while missing > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok((tag, otlp)) = receiver.frames().recv_timeout(left) else {
                panic!(
                    "{missing} of {} acknowledged records never arrived",
                    acked.len()
                );
            };
            assert_eq!(tag, 0, "only logs are sent");
            let request = ExportLogsServiceRequest::decode(otlp.as_slice()).unwrap();
            for body in bodies(&request) {
                seen.insert(body.clone());
                self.bodies.push(body);
            }
            missing = acked.iter().filter(|a| !seen.contains(*a)).count();
        }
    }

    /// Records that arrived more than once.
    fn duplicates(&self) -> usize {
        let unique: std::collections::HashSet<&String> = self.bodies.iter().collect();
        self.bodies.len() - unique.len()
    }

    /// Asserts each sender's requests first arrived in the order they were sent (the records
    /// of one request are regrouped by resource, as OTLP groups them).
    fn assert_in_order(&self) {
        let mut last: HashMap<&str, u64> = HashMap::new();
        let mut seen = std::collections::HashSet::new();
        for body in &self.bodies {
            if !seen.insert(body) {
                continue;
            }
            let mut parts = body.split('-');
            let sender = parts.next().unwrap();
            let request: u64 = parts.next().unwrap().parse().unwrap();
            if let Some(previous) = last.get(sender) {
                assert!(
                    *previous <= request,
                    "{body} arrived after records of request {previous} of {sender}"
                );
            }
            last.insert(sender, request);
        }
    }
}

/// A gateway from a GRPC source on `listen` to an OTLP sink at `backend` with a disk buffer
/// in `buffer` (and `options` after it); admin endpoint on.
fn gateway(dir: &Path, listen: &str, backend: &str, buffer: &Path, options: &str) -> Gateway {
    Gateway::start_with(
        dir,
        "buffered",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '{listen}');
             CREATE SINK out TO OTLP WITH (endpoint = 'http://{backend}', timeout = '2s',
               retries = 1, buffer = 'disk', buffer_path = '{}'{options});
             CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO out SELECT * FROM logs; END;",
            buffer.display()
        ),
        &["--admin-listen", "127.0.0.1:0"],
    )
}

fn buffer_metric(gateway: &Gateway, name: &str) -> f64 {
    series(
        &gateway.metrics_text(),
        &format!("penstock_buffer_{name}{{sink=\"out\"}}"),
    )
    .unwrap_or_else(|| panic!("no metric penstock_buffer_{name}"))
}

/// How long the backend stays down in the outage test (30 s unless
/// `PENSTOCK_OUTAGE_SECONDS` says otherwise).
fn outage() -> Duration {
    let seconds = std::env::var("PENSTOCK_OUTAGE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    Duration::from_secs(seconds)
}

fn report(what: &str, acked: &[String], arrivals: &Arrivals, refusals: &[tonic::Code]) {
    println!(
        "{what}: sent and acknowledged {} records ({} requests), delivered {} ({} unique, {} \
         duplicated), refused {} requests",
        acked.len(),
        acked.len() / RECORDS,
        arrivals.bodies.len(),
        arrivals.bodies.len() - arrivals.duplicates(),
        arrivals.duplicates(),
        refusals.len()
    );
}

#[test]
fn a_backend_down_for_a_while_refuses_no_sender_and_gets_everything_after_in_order() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("buffer-outage");
    let backend = format!("127.0.0.1:{}", unused_port());
    let gateway = gateway(&dir, "127.0.0.1:0", &backend, &dir.join("buffer"), "");
    let load = Load::start(&gateway.url(), 3, Duration::from_millis(20));
    load.wait_for_acks(10);
    let down = outage();
    wait("the outage", down + Duration::from_secs(60), || {
        buffer_metric(&gateway, "oldest_age_seconds") >= down.as_secs_f64()
    });
    assert!(buffer_metric(&gateway, "batches") > 0.0);
    let receiver = OtlpReceiver::start(&binary, "serve-otlp", &["-listen", &backend]);
    load.wait_for_acks(10);
    let (acked, refusals) = load.stop();
    assert!(refusals.is_empty(), "senders were refused: {refusals:?}");
    let mut arrivals = Arrivals::default();
    arrivals.until_all(&receiver, &acked, Duration::from_secs(120));
    arrivals.assert_in_order();
    report("backend down", &acked, &arrivals, &refusals);
    gateway.wait_until("the buffer to empty", |g| {
        buffer_metric(g, "batches") == 0.0 && buffer_metric(g, "oldest_age_seconds") == 0.0
    });
    assert_eq!(buffer_metric(&gateway, "dropped_batches_total"), 0.0);
    assert_eq!(buffer_metric(&gateway, "corrupt_total"), 0.0);
}

#[test]
fn a_gateway_killed_under_load_delivers_every_acknowledged_record_after_restart() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("buffer-kill");
    let buffer = dir.join("buffer");
    let backend = format!("127.0.0.1:{}", unused_port());
    let listen = format!("127.0.0.1:{}", unused_port());
    let receiver = OtlpReceiver::start(&binary, "serve-otlp", &["-listen", &backend]);
    let first = gateway(&dir, &listen, &backend, &buffer, "");
    let load = Load::start(&first.url(), 3, Duration::from_millis(5));
    load.wait_for_acks(20);
    let mut arrivals = Arrivals::default();
    // The backend goes down: what is acknowledged now exists only in the buffer.
    arrivals.add(receiver.kill());
    load.wait_for_acks(20);
    assert!(buffer_metric(&first, "batches") > 0.0);
    drop(first); // kill -9
    let receiver = OtlpReceiver::start(&binary, "serve-otlp", &["-listen", &backend]);
    let second = gateway(&dir, &listen, &backend, &buffer, "");
    load.wait_for_acks(20);
    let (acked, refusals) = load.stop();
    arrivals.until_all(&receiver, &acked, Duration::from_secs(120));
    report("kill -9", &acked, &arrivals, &refusals);
    assert!(buffer_metric(&second, "replayed_batches_total") > 0.0);
    // Refusals come only from the gateway not being there: connections refused
    // (Unavailable) or cut by the kill (Unknown: no status came back).
    let codes: Vec<_> = refusals
        .iter()
        .filter(|c| !matches!(c, tonic::Code::Unavailable | tonic::Code::Unknown))
        .collect();
    assert!(codes.is_empty(), "refused with a status: {codes:?}");
}

/// The last segment file of a buffer.
fn last_segment(buffer: &Path) -> PathBuf {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(buffer)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    segments.sort();
    segments.pop().unwrap()
}

#[test]
fn a_corrupt_buffer_tail_is_cut_off_reported_and_the_rest_replayed() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("buffer-corrupt");
    let buffer = dir.join("buffer");
    let backend = format!("127.0.0.1:{}", unused_port());
    let first = gateway(&dir, "127.0.0.1:0", &backend, &buffer, "");
    let url = first.url();
    let mut data = DataGen::new(5);
    let mut acked = Vec::new();
    for number in 0..10 {
        let request = request(&mut data, 0, number);
        acked.push(bodies(&request));
        block_on(export_otlp(&url, request)).unwrap();
    }
    drop(first); // kill -9, the backend never seen
    let segment = last_segment(&buffer);
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes.len() - 10;
    bytes[at] ^= 0x5a;
    std::fs::write(&segment, bytes).unwrap();

    let receiver = OtlpReceiver::start(&binary, "serve-otlp", &["-listen", &backend]);
    let second = gateway(&dir, "127.0.0.1:0", &backend, &buffer, "");
    let reported = second
        .startup
        .iter()
        .any(|l| l.contains("cut off, not replayed"));
    let intact: Vec<String> = acked[..9].concat();
    let mut arrivals = Arrivals::default();
    arrivals.until_all(&receiver, &intact, Duration::from_secs(60));
    second.wait_until("the replay", |g| buffer_metric(g, "batches") == 0.0);
    assert_eq!(buffer_metric(&second, "corrupt_total"), 1.0);
    assert_eq!(buffer_metric(&second, "replayed_batches_total"), 9.0);
    let damaged: BTreeMap<&String, ()> = acked[9].iter().map(|b| (b, ())).collect();
    assert!(
        arrivals.bodies.iter().all(|b| !damaged.contains_key(b)),
        "the damaged batch was replayed"
    );
    assert!(
        reported
            || second
                .wait_for_line("cut off, not replayed")
                .contains("checksum"),
        "the cut is reported"
    );
}

/// Posts a logs request to an OTLP/HTTP source; returns the response's status line.
fn post_logs(addr: &str, request: &ExportLogsServiceRequest) -> String {
    use std::io::{Read, Write};
    let body = request.encode_to_vec();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST /v1/logs HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/x-protobuf\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&body).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.lines().next().unwrap_or_default().to_string()
}

#[test]
fn a_full_buffer_refuses_with_resource_exhausted_and_loses_nothing_acknowledged() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let dir = temp_dir("buffer-full");
    let backend = format!("127.0.0.1:{}", unused_port());
    let gateway = Gateway::start_with(
        &dir,
        "full",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SOURCE web FROM HTTP WITH (listen = '127.0.0.1:0');
             CREATE SINK out TO OTLP WITH (endpoint = 'http://{backend}', buffer = 'disk',
               buffer_path = '{}', buffer_max_bytes = '1MiB', when_full = 'refuse');
             CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO out SELECT * FROM logs; END;
             CREATE PIPELINE q FROM web AS BEGIN INSERT INTO out SELECT * FROM logs; END;",
            dir.join("buffer").display()
        ),
        &["--admin-listen", "127.0.0.1:0"],
    );
    let load = Load::start(
        &format!("http://{}", gateway.addr_of("edge")),
        2,
        Duration::ZERO,
    );
    wait("a refusal", Duration::from_secs(120), || {
        !load.refusals.lock().unwrap().is_empty()
    });
    assert!(buffer_metric(&gateway, "refused_batches_total") > 0.0);
    assert!(buffer_metric(&gateway, "bytes") <= (1 << 20) as f64);
    // Over OTLP/HTTP, the same refusal is a 429 (a large request, so it cannot fit).
    let large = request(&mut DataGen::new(9), 9, 0);
    let mut larger = large.clone();
    for _ in 0..40 {
        larger.resource_logs.extend(large.resource_logs.clone());
    }
    let status = post_logs(gateway.addr_of("web"), &larger);
    assert!(
        status.contains(" 429 "),
        "the HTTP source answered {status}"
    );
    let receiver = OtlpReceiver::start(&binary, "serve-otlp", &["-listen", &backend]);
    let (acked, refusals) = load.stop();
    let others: Vec<_> = refusals
        .iter()
        .filter(|c| **c != tonic::Code::ResourceExhausted)
        .collect();
    assert!(others.is_empty(), "refused with other codes: {others:?}");
    let mut arrivals = Arrivals::default();
    arrivals.until_all(&receiver, &acked, Duration::from_secs(120));
    report("buffer full", &acked, &arrivals, &refusals);
}
