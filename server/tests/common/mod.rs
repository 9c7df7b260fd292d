//! Helpers shared by the gateway's end-to-end tests.

#![allow(dead_code, clippy::unwrap_used)] // Each test file uses its own subset.

pub mod backend;
pub mod flight;
pub mod go;
pub mod kafka;
pub mod otap_stream;
pub mod otlp_go;
pub mod raw_codec;
pub mod telemetrygen;
pub mod traces;

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use penstock_engine::otap::{EncodeOptions, OtapEncoder};
use penstock_engine::proto::{BatchArrowRecords, BatchStatus};
use penstock_engine::{equiv, otlp};
use prost::Message;
use tonic::codegen::http::uri::PathAndQuery;

/// A running `penstock run`, killed when dropped.
pub struct Gateway {
    pub child: Child,
    /// The admin endpoint's address, when started with `--admin-listen`.
    pub admin: Option<String>,
    /// The first listening source's address.
    pub addr: String,
    /// Every listening source's name and address.
    pub listening: Vec<(String, String)>,
    /// The lines of its output read while waiting for the addresses.
    pub startup: Vec<String>,
    pub stdout: std::sync::mpsc::Receiver<String>,
    /// A scratch directory removed after the gateway stops (see [`Gateway::keeping`]).
    scratch: Option<TestDir>,
}

/// The message of a log line: the line itself in the text format (time, level and target
/// come first, fields after), `fields.message` in the JSON format.
pub fn log_message(line: &str) -> String {
    if line.starts_with('{') {
        let event: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        if let Some(message) = event["fields"]["message"].as_str() {
            return message.to_string();
        }
    }
    line.to_string()
}

/// The source name and address of a log line that says "source NAME: WHAT on ADDR".
pub fn listening_on(line: &str) -> Option<(String, String)> {
    let message = log_message(line);
    let rest = &message[message.find("source ")? + "source ".len()..];
    let (name, what) = rest.split_once(": ")?;
    let (_, after) = what.split_once(" on ")?;
    let addr = after.split_whitespace().next()?;
    (!name.contains(' ')).then(|| (name.to_string(), addr.to_string()))
}

impl Gateway {
    /// Starts a gateway on `sql` (written to `dir/name.sql`) and waits until each of its
    /// GRPC and HTTP sources listens.
    pub fn start(dir: &Path, name: &str, sql: &str) -> Gateway {
        Gateway::start_with(dir, name, sql, &[])
    }

    /// As [`Gateway::start`], with more `run` arguments (they replace the default
    /// `--workers 2` when they give `--workers`); with `--admin-listen`, also waits for the
    /// admin endpoint.
    pub fn start_with(dir: &Path, name: &str, sql: &str, args: &[&str]) -> Gateway {
        let file = dir.join(format!("{name}.sql"));
        std::fs::write(&file, sql).unwrap();
        let workers: &[&str] = if args.contains(&"--workers") {
            &[]
        } else {
            &["--workers", "2"]
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_penstock"))
            .arg("run")
            .args(workers)
            .args(args)
            .arg(&file)
            // The default filter (info): the addresses are reported whatever the caller's
            // RUST_LOG says.
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let (tx, stdout) = std::sync::mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let listeners = sql.matches("FROM GRPC").count() + sql.matches("FROM HTTP").count();
        let mut listening = Vec::new();
        let mut startup = Vec::new();
        while listening.len() < listeners {
            let line = stdout
                .recv_timeout(Duration::from_secs(60))
                .expect("the gateway reports its addresses");
            // "source NAME: WHAT on ADDR", anywhere in the line.
            if let Some(source) = listening_on(&line) {
                listening.push(source);
            }
            startup.push(line);
        }
        let mut gateway = Gateway {
            child,
            admin: None,
            addr: listening
                .first()
                .map(|(_, a)| a.clone())
                .unwrap_or_default(),
            listening,
            startup,
            stdout,
            scratch: None,
        };
        if args.contains(&"--admin-listen") {
            let line = loop {
                let line = gateway
                    .stdout
                    .recv_timeout(Duration::from_secs(60))
                    .expect("the gateway reports its admin endpoint");
                gateway.startup.push(line.clone());
                if line.contains("admin: http://") {
                    break line;
                }
            };
            // "admin: http://ADDR/metrics", anywhere in the line.
            let message = log_message(&line);
            let url = message.split("http://").nth(1).unwrap();
            let addr = url.split_whitespace().next().unwrap();
            gateway.admin = Some(addr.trim_end_matches("/metrics").to_string());
        }
        gateway
    }

    /// The admin endpoint's `/metrics` text.
    pub fn metrics_text(&self) -> String {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(self.admin.as_deref().unwrap()).unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    }

    /// The value of an unlabelled metric on the admin endpoint.
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.metrics_text();
        let prefix = format!("{name} ");
        let line = text.lines().find(|l| l.starts_with(&prefix));
        let line = line.unwrap_or_else(|| panic!("no metric {name}"));
        line[prefix.len()..].trim().parse().unwrap()
    }

    /// Waits until `condition` holds for the gateway's metrics (checked every 20 ms, for at
    /// most 30 s).
    pub fn wait_until(&self, what: &str, condition: impl Fn(&Gateway) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !condition(self) {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for a line of its output containing `text` and returns it (lines before it are
    /// consumed).
    pub fn wait_for_line(&self, text: &str) -> String {
        loop {
            let line = self
                .stdout
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("the gateway did not print '{text}'"));
            if line.contains(text) {
                return line;
            }
        }
    }

    /// Waits for a line of the end-of-run summary that starts with `prefix` and returns it
    /// (lines before it, log events among them, are consumed).
    pub fn wait_for_summary(&self, prefix: &str) -> String {
        loop {
            let line = self
                .stdout
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("the gateway did not print '{prefix}...'"));
            if line.starts_with(prefix) {
                return line;
            }
        }
    }

    /// Sends SIGHUP (reload the files).
    pub fn hang_up(&self) {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-HUP", &pid]).status().unwrap();
    }

    /// The address of source `name`.
    pub fn addr_of(&self, name: &str) -> &str {
        let found = self.listening.iter().find(|(n, _)| n == name);
        &found
            .unwrap_or_else(|| panic!("no listening source {name}"))
            .1
    }

    /// The gateway, owning `dir` (removed once the gateway has stopped): for helpers that
    /// make a directory and return the gateway using it.
    pub fn keeping(mut self, dir: TestDir) -> Gateway {
        self.scratch = Some(dir);
        self
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Waits for the exit (after signals sent by the test); returns whether it exited
    /// successfully and what it printed.
    pub fn terminate_wait(mut self) -> (bool, Vec<String>) {
        let status = self.child.wait().unwrap();
        (status.success(), self.rest_of_output())
    }

    /// Every line still to come from the exited gateway: read until its standard output
    /// closes, so that lines written just before the exit are not left in the pipe.
    fn rest_of_output(&self) -> Vec<String> {
        let mut lines = Vec::new();
        while let Ok(line) = self.stdout.recv_timeout(Duration::from_secs(60)) {
            lines.push(line);
        }
        lines
    }

    /// Sends SIGTERM and waits for the exit; returns whether it exited successfully and what
    /// it printed.
    pub fn terminate(mut self) -> (bool, Vec<String>) {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let status = self.child.wait().unwrap();
        (status.success(), self.rest_of_output())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on (bound, then let go).
pub fn unused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A scratch directory of one test, removed with everything in it when dropped (declare it
/// before the gateway that writes into it, so that the gateway stops first).
pub struct TestDir(PathBuf);

impl std::ops::Deref for TestDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh, empty scratch directory named after `name` and this test process.
pub fn temp_dir(name: &str) -> TestDir {
    let dir = std::env::temp_dir().join(format!("penstock-gw-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    TestDir(dir)
}

/// Two pipelines from source `edge`, sending the records below severity 13 and the others
/// to `sink`: one batch in becomes two deliveries to the sink, queued together.
pub fn halves_to(sink: &str) -> String {
    format!(
        "CREATE PIPELINE low FROM edge AS BEGIN
           INSERT INTO {sink} SELECT * FROM logs WHERE severity_number < 13;
         END;
         CREATE PIPELINE high FROM edge AS BEGIN
           INSERT INTO {sink} SELECT * FROM logs WHERE severity_number >= 13;
         END;"
    )
}

/// The front pipeline of the tests, as SQL: renames `exception.type`, drops records below
/// severity 9.
pub const RENAME_AND_FILTER: &str = "
  ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
  DELETE FROM logs WHERE severity_number < 9;";

/// What the front pipeline must make of `request`, computed on the OTLP objects.
pub fn expected(request: &ExportLogsServiceRequest) -> Vec<String> {
    let mut request = request.clone();
    for rl in &mut request.resource_logs {
        for sl in &mut rl.scope_logs {
            sl.log_records.retain(|r| r.severity_number >= 9);
            for r in &mut sl.log_records {
                for kv in &mut r.attributes {
                    if kv.key == "exception.type" {
                        kv.key = "error.type".into();
                    }
                }
                // A record that had both keys keeps only the renamed value.
                let renamed = r.attributes.iter().any(|kv| kv.key == "error.type");
                if renamed {
                    let mut seen = false;
                    r.attributes.retain(|kv| {
                        if kv.key != "error.type" {
                            return true;
                        }
                        let keep = !seen;
                        seen = true;
                        keep
                    });
                }
            }
        }
    }
    equiv::logs(&request)
}

/// Runs `future` on a fresh runtime; dropping it closes the client's connections (a client
/// left idle would make the gateway wait for it on shutdown).
pub fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// A connected, ready gRPC client for `url`.
pub async fn connect(
    url: &str,
) -> Result<tonic::client::Grpc<tonic::transport::Channel>, tonic::Status> {
    let unavailable = |e: &dyn std::fmt::Display| tonic::Status::unavailable(e.to_string());
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .map_err(|e| unavailable(&e))?
        .connect()
        .await
        .map_err(|e| unavailable(&e))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| unavailable(&e))?;
    Ok(grpc)
}

/// One OTLP logs Export, compressed with `compression`.
pub async fn send_logs(
    url: &str,
    request: ExportLogsServiceRequest,
    compression: tonic::codec::CompressionEncoding,
) -> Result<ExportLogsServiceResponse, tonic::Status> {
    let mut grpc = connect(url).await?.send_compressed(compression);
    let codec =
        tonic_prost::ProstCodec::<ExportLogsServiceRequest, ExportLogsServiceResponse>::default();
    let path =
        PathAndQuery::from_static("/opentelemetry.proto.collector.logs.v1.LogsService/Export");
    grpc.unary(tonic::Request::new(request), path, codec)
        .await
        .map(tonic::Response::into_inner)
}

pub async fn export_otlp(
    url: &str,
    request: ExportLogsServiceRequest,
) -> Result<ExportLogsServiceResponse, tonic::Status> {
    send_logs(url, request, tonic::codec::CompressionEncoding::Zstd).await
}

/// Sends `requests` on one OTAP logs stream, half-closes it, and returns every status.
pub async fn export_otap(url: &str, requests: &[ExportLogsServiceRequest]) -> Vec<BatchStatus> {
    let mut encoder =
        OtapEncoder::new(penstock_engine::Signal::Logs, EncodeOptions::default()).unwrap();
    let mut messages = Vec::new();
    for r in requests {
        for batch in otlp::decode::decode_logs(&r.encode_to_vec()).unwrap() {
            messages.push(encoder.encode(&batch).unwrap());
        }
    }
    otap_statuses(url, messages).await
}

/// Sends `messages` on one OTAP logs stream, half-closes it, and returns the statuses until
/// the stream ends.
pub async fn otap_statuses(url: &str, messages: Vec<BatchArrowRecords>) -> Vec<BatchStatus> {
    let mut grpc = connect(url).await.unwrap();
    let codec = tonic_prost::ProstCodec::<BatchArrowRecords, BatchStatus>::default();
    let path = PathAndQuery::from_static(
        "/opentelemetry.proto.experimental.arrow.v1.ArrowLogsService/ArrowLogs",
    );
    let response = grpc
        .streaming(
            tonic::Request::new(tokio_stream::iter(messages)),
            path,
            codec,
        )
        .await
        .unwrap();
    let mut statuses = response.into_inner();
    let mut out = Vec::new();
    while let Ok(Some(s)) = statuses.message().await {
        out.push(s);
    }
    out
}

/// A gateway writing everything it receives to `dir/received.jsonl`, with extra source options.
pub fn recorder(dir: &Path, source_options: &str) -> Gateway {
    recorder_with(dir, source_options, &[])
}

/// [`recorder`] with more `run` arguments (see [`Gateway::start_with`]).
pub fn recorder_with(dir: &Path, source_options: &str, args: &[&str]) -> Gateway {
    Gateway::start_with(
        dir,
        "recorder",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0'{source_options});
             CREATE SINK received TO FILE WITH (path = '{}');
             CREATE PIPELINE keep FROM edge AS BEGIN INSERT INTO received SELECT * FROM logs; END;",
            dir.join("received.jsonl").display()
        ),
        args,
    )
}

pub async fn export_otlp_fallible(
    url: &str,
    request: ExportLogsServiceRequest,
) -> Result<(), String> {
    export_otlp(url, request)
        .await
        .map(|_| ())
        .map_err(|s| s.to_string())
}

/// The log records in `dir/received.jsonl` (a FILE sink's output), sorted.
pub fn received(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("received.jsonl")).unwrap_or_default();
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let (_, bytes) = otlp::json::line_to_protobuf(line, i + 1).unwrap();
        lines.extend(equiv::logs(
            &ExportLogsServiceRequest::decode(bytes.as_slice()).unwrap(),
        ));
    }
    lines.sort();
    lines
}

/// Asserts `got` holds exactly the records of `want` (equivalence lines, in any order),
/// showing the first difference.
pub fn assert_same_records(mut want: Vec<String>, mut got: Vec<String>) {
    want.sort();
    got.sort();
    if let Some(diff) = equiv::first_difference(&want, &got) {
        panic!("{diff}");
    }
    assert_eq!(want.len(), got.len());
}

/// Runs `server/tests/python/<script>` with `python` and `args`; its stdout, once it exited
/// successfully (panics with its output otherwise).
pub fn run_python_script(python: &str, script: &str, args: &[&str]) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let output = Command::new(python).arg(&path).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{script}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A Python (`PENSTOCK_PYTHON`, else `python3`) that can run `imports` (a Python statement),
/// or None with the reason printed: it lacks `what`, or there is no Python.
pub fn python_with(imports: &str, what: &str) -> Option<String> {
    let python = std::env::var("PENSTOCK_PYTHON").unwrap_or_else(|_| "python3".into());
    match Command::new(&python).args(["-c", imports]).output() {
        Ok(out) if out.status.success() => Some(python),
        Ok(_) => {
            println!("skipped: {python} lacks {what}");
            None
        }
        Err(e) => {
            println!("skipped: no Python ({python}: {e})");
            None
        }
    }
}
