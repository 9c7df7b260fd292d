//! A real Apache Kafka broker for the tests (`tests/kafka/broker.sh`: KRaft, one node, from
//! Maven Central's jars) and the Go program that writes and reads messages as the
//! OpenTelemetry Collector's kafka exporter and receiver do (`tests/kafka-go`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::unused_port;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn runs(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One broker at a time in a test process (each is a JVM of a few hundred MB).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A running broker, stopped when dropped.
pub struct Broker {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Its directory (data and log).
    pub dir: PathBuf,
    kafka_go: PathBuf,
    _turn: MutexGuard<'static, ()>,
}

impl Broker {
    /// Fetches the broker's jars (once; cached), starts a broker in `dir` and waits until it
    /// accepts connections; `None`, with the reason printed, where Java, Maven or Go is
    /// missing.
    pub fn start(dir: &Path) -> Option<Broker> {
        Broker::start_with(dir, "")
    }

    /// As [`Broker::start`], with more broker `properties` (lines of `server.properties`,
    /// which win over the defaults).
    pub fn start_with(dir: &Path, properties: &str) -> Option<Broker> {
        for (tool, arg) in [("java", "-version"), ("mvn", "-v"), ("go", "version")] {
            if !runs(tool, arg) {
                println!(
                    "skipped: {tool} is not installed (the Kafka tests need Java, Maven and Go)"
                );
                return None;
            }
        }
        let kafka_go = kafka_go();
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let script = repo().join("tests/kafka/broker.sh");
        let fetched = Command::new(&script).arg("fetch").status().unwrap();
        assert!(fetched.success(), "tests/kafka/broker.sh fetch failed");
        let port = unused_port();
        let log = std::fs::File::create(dir.join("broker.log")).unwrap();
        let child = Command::new(&script)
            .arg("start")
            .arg(dir.join("broker"))
            .arg(port.to_string())
            .env("PENSTOCK_KAFKA_PROPERTIES", properties)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut broker = Broker {
            child,
            addr: format!("127.0.0.1:{port}"),
            dir: dir.to_path_buf(),
            kafka_go,
            _turn: turn,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while std::net::TcpStream::connect(&broker.addr).is_err() {
            if let Ok(Some(status)) = broker.child.try_wait() {
                let log = std::fs::read_to_string(dir.join("broker.log")).unwrap_or_default();
                panic!("the broker exited ({status}):\n{log}");
            }
            assert!(Instant::now() < deadline, "the broker did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(broker)
    }

    /// Creates `topic` with `partitions` partitions.
    pub fn topic(&self, topic: &str, partitions: u32) {
        let status = Command::new(&self.kafka_go)
            .args(["topic", "-brokers", &self.addr, "-topic", topic])
            .args(["-partitions", &partitions.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "creating topic {topic}");
    }

    /// Writes each of `requests` (Export*ServiceRequest protobuf) as one message, as the
    /// Collector's kafka exporter does with its defaults (no compression), and waits for the
    /// broker's acknowledgements.
    pub fn produce(&self, topic: &str, signal: &str, encoding: &str, requests: &[Vec<u8>]) {
        self.produce_compressed(topic, signal, encoding, "none", requests);
    }

    /// [`Broker::produce`] with the producer's `compression` (gzip, snappy, lz4, zstd).
    pub fn produce_compressed(
        &self,
        topic: &str,
        signal: &str,
        encoding: &str,
        compression: &str,
        requests: &[Vec<u8>],
    ) {
        let mut child = Command::new(&self.kafka_go)
            .args(["produce", "-brokers", &self.addr, "-topic", topic])
            .args(["-signal", signal, "-encoding", encoding])
            .args(["-compression", compression])
            .stdin(Stdio::piped())
            // One line per message written; the acknowledgement is the exit status.
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        for request in requests {
            stdin
                .write_all(&(request.len() as u32).to_le_bytes())
                .unwrap();
            stdin.write_all(request).unwrap();
        }
        drop(stdin);
        assert!(child.wait().unwrap().success(), "kafka-go produce");
    }

    /// Reads messages of `topic` (as group `group`, from the start) until they hold `items`
    /// records; returns each message's value (decoded from `encoding` into OTLP protobuf, or
    /// as it is with `raw`) and its partition and key.
    pub fn consume(
        &self,
        topic: &str,
        signal: &str,
        encoding: &str,
        items: usize,
    ) -> Vec<Consumed> {
        let output = Command::new(&self.kafka_go)
            .args(["consume", "-brokers", &self.addr, "-topic", topic])
            .args(["-group", &format!("test-{topic}"), "-signal", signal])
            .args(["-encoding", encoding, "-items", &items.to_string(), "-v"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "kafka-go consume: {stderr}");
        let frames = frames(&output.stdout);
        let lines: Vec<serde_json::Value> = stderr
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        assert_eq!(frames.len(), lines.len(), "a line per message");
        frames
            .into_iter()
            .zip(lines)
            .map(|(value, line)| Consumed {
                value,
                partition: line["partition"].as_i64().unwrap() as i32,
                key: line["key"].as_str().map(str::to_string),
            })
            .collect()
    }

    /// `count` generated requests of `signal` with `items` records each, as the Go pdata
    /// generator makes them.
    pub fn generate(&self, signal: &str, count: usize, items: usize, seed: u64) -> Vec<Vec<u8>> {
        let output = Command::new(&self.kafka_go)
            .args(["gen", "-signal", signal, "-count", &count.to_string()])
            .args(["-items", &items.to_string(), "-seed", &seed.to_string()])
            .output()
            .unwrap();
        assert!(output.status.success(), "kafka-go gen");
        frames(&output.stdout)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A message read back.
#[derive(Debug)]
pub struct Consumed {
    /// Its value.
    pub value: Vec<u8>,
    /// Its partition.
    pub partition: i32,
    /// Its key, when it has one.
    pub key: Option<String>,
}

/// Length-prefixed frames (4-byte little-endian length).
fn frames(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let mut len = [0u8; 4];
        (&bytes[..4]).read_exact(&mut len).unwrap();
        let len = u32::from_le_bytes(len) as usize;
        out.push(bytes[4..4 + len].to_vec());
        bytes = &bytes[4 + len..];
    }
    out
}

/// Builds `tests/kafka-go` once per test process.
fn kafka_go() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = repo().join("tests/kafka-go");
            let status = Command::new("go")
                .args(["build", "-o", "bin/kafka-go", "."])
                .current_dir(&dir)
                .status()
                .unwrap();
            assert!(status.success(), "go build of tests/kafka-go failed");
            dir.join("bin/kafka-go")
        })
        .clone()
}
