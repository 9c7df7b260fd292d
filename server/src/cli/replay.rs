//! `penstock replay FILE.sql --input DATA.jsonl [--out DIR]`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use penstock_dialect::ast::{SinkKind, SourceKind};
use penstock_engine::OtapBatch;
use penstock_engine::otlp::json;
use penstock_pipeline::Windows;

use crate::gateway::program::{load, resolve_path};
use crate::gateway::sinks::console;

/// Where a sink's output goes during a replay.
enum Output {
    File {
        path: PathBuf,
        writer: BufWriter<File>,
    },
    Console {
        limit: usize,
    },
    Discard,
}

struct SinkOutput {
    output: Output,
    batches: u64,
    records: u64,
}

impl SinkOutput {
    fn write(&mut self, name: &str, batch: &OtapBatch) -> anyhow::Result<()> {
        self.batches += 1;
        self.records += batch.num_items() as u64;
        match &mut self.output {
            Output::File { writer, path } => {
                writeln!(writer, "{}", json::to_line(batch)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            Output::Console { limit } => {
                let text =
                    console::render(name, batch, *limit).with_context(|| format!("sink {name}"))?;
                print!("{text}");
            }
            Output::Discard => {}
        }
        Ok(())
    }
}

/// Sends the derived metrics of closed aggregation windows to their sinks.
fn write_windows(
    sinks: &mut BTreeMap<String, SinkOutput>,
    windows: Vec<Windows>,
) -> anyhow::Result<()> {
    for w in windows {
        let sink = w.sink().to_string();
        let Some(batch) = w.into_batch().context("aggregating")? else {
            continue;
        };
        let target = sinks
            .get_mut(&sink)
            .context("aggregated to an unknown sink")?;
        target.write(&sink, &batch)?;
    }
    Ok(())
}

fn create(path: &Path) -> anyhow::Result<Output> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    Ok(Output::File {
        path: path.to_path_buf(),
        writer: BufWriter::new(file),
    })
}

/// Replays the pipelines of `file` over `input` (or each FILE source's path).
pub fn run(file: &Path, input: Option<&Path>, out: Option<&Path>) -> anyhow::Result<()> {
    let (program, mut pipelines) = load(&[file.to_path_buf()])?;
    let mut sinks: BTreeMap<String, SinkOutput> = BTreeMap::new();
    for sink in &program.sinks {
        let output = match (out, sink.kind) {
            (Some(dir), _) => create(&dir.join(format!("{}.jsonl", sink.name)))?,
            (None, SinkKind::File) => create(&resolve_path(
                file,
                sink.options.str("path").unwrap_or_default(),
            ))?,
            (None, SinkKind::Console) => Output::Console {
                limit: sink.options.count("limit").unwrap_or(10) as usize,
            },
            (None, _) => Output::Discard,
        };
        sinks.insert(
            sink.name.clone(),
            SinkOutput {
                output,
                batches: 0,
                records: 0,
            },
        );
    }
    let mut read: BTreeMap<String, u64> = BTreeMap::new();
    for pipeline in &mut pipelines {
        let source = program
            .source(pipeline.source())
            .context("pipeline source vanished")?;
        if source.kind != SourceKind::File {
            println!(
                "pipeline {}: source {} is {}, not replayed (replay reads FILE sources)",
                pipeline.name(),
                source.name,
                source.kind.keyword()
            );
            continue;
        }
        let path = match input {
            Some(p) => p.to_path_buf(),
            None => resolve_path(file, source.options.str("path").unwrap_or_default()),
        };
        let batches =
            json::read_file(&path).with_context(|| format!("reading {}", path.display()))?;
        for batch in batches {
            *read.entry(pipeline.name().to_string()).or_default() += batch.num_items() as u64;
            let output = pipeline
                .run(batch)
                .with_context(|| format!("pipeline {}", pipeline.name()))?;
            for (sink, batch) in output.routed {
                let target = sinks.get_mut(&sink).context("routed to an unknown sink")?;
                target.write(&sink, &batch)?;
            }
            write_windows(&mut sinks, output.closed)?;
        }
        // The input ended: every aggregation window is complete.
        write_windows(&mut sinks, pipeline.finish())?;
    }
    for (name, sink) in &mut sinks {
        if let Output::File { writer, path } = &mut sink.output {
            writer
                .flush()
                .with_context(|| format!("writing {}", path.display()))?;
            println!(
                "sink {name}: {} records in {} batches -> {}",
                sink.records,
                sink.batches,
                path.display()
            );
        } else {
            println!(
                "sink {name}: {} records in {} batches",
                sink.records, sink.batches
            );
        }
    }
    for pipeline in &pipelines {
        println!(
            "pipeline {}: {} records read, {} routed nowhere (dropped)",
            pipeline.name(),
            read.get(pipeline.name()).copied().unwrap_or(0),
            pipeline.unrouted_rows()
        );
        for (step, stats) in pipeline.stats() {
            println!(
                "  line {:>3}  {:<9} {:<7} in {:>7}  out {:>7}  dropped {:>7}  {}",
                step.origin.location.line,
                step.kind.name(),
                step.table.name(),
                stats.rows_in,
                stats.rows_out,
                stats.rows_dropped,
                first_line(&step.sql)
            );
        }
    }
    Ok(())
}

fn first_line(sql: &str) -> String {
    const MAX: usize = 90;
    let line = sql.lines().next().unwrap_or("");
    if line.chars().count() > MAX {
        format!("{}...", line.chars().take(MAX).collect::<String>())
    } else {
        line.to_string()
    }
}
