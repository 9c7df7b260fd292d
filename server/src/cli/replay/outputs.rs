//! Where each sink's output goes during a replay: FILE sinks to their `path`, CONSOLE sinks to
//! standard output, every sink to `--out DIR/SINK.jsonl` when given; and, for golden tests,
//! every sink's records kept as OTLP JSON lines.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use penstock_dialect::Program;
use penstock_dialect::ast::SinkKind;
use penstock_engine::OtapBatch;
use penstock_engine::otlp::json;
use penstock_pipeline::Windows;

use crate::gateway::base::program::resolve_path;
use crate::gateway::sinks::console;

/// Where one sink's output is written.
enum Target {
    File {
        path: PathBuf,
        writer: BufWriter<File>,
    },
    Console(console::Sampler),
    /// A network sink without `--out`: counted, not written.
    Nowhere,
}

/// One sink's output and counts.
struct SinkOutput {
    target: Target,
    kind: SinkKind,
    batches: u64,
    records: u64,
    /// Its records as OTLP JSON lines, when they are kept.
    lines: Option<Vec<String>>,
}

/// The outputs of every sink of a replayed program.
pub struct Outputs {
    sinks: BTreeMap<String, SinkOutput>,
}

fn create(path: &Path) -> anyhow::Result<Target> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    Ok(Target::File {
        path: path.to_path_buf(),
        writer: BufWriter::new(file),
    })
}

impl Outputs {
    /// The outputs of `program`'s sinks (loaded from `file`): to `out/SINK.jsonl` when `out`
    /// is given; records kept in memory when `keep` (then, without `out`, nothing is written
    /// or printed: a golden test compares them instead).
    pub fn open(
        program: &Program,
        file: &Path,
        out: Option<&Path>,
        keep: bool,
    ) -> anyhow::Result<Self> {
        let mut sinks = BTreeMap::new();
        for sink in &program.sinks {
            let target = match (out, sink.kind) {
                (Some(dir), _) => create(&dir.join(format!("{}.jsonl", sink.name)))?,
                // Kept for comparison: nothing is written but to `out`.
                (None, _) if keep => Target::Nowhere,
                (None, SinkKind::File) => create(&resolve_path(
                    file,
                    sink.options.str("path").unwrap_or_default(),
                ))?,
                (None, SinkKind::Console) => Target::Console(console::Sampler::new(
                    &sink.name,
                    sink.options.count("limit").unwrap_or(10) as usize,
                )),
                (None, _) => Target::Nowhere,
            };
            let output = SinkOutput {
                target,
                kind: sink.kind,
                batches: 0,
                records: 0,
                lines: keep.then(Vec::new),
            };
            sinks.insert(sink.name.clone(), output);
        }
        Ok(Outputs { sinks })
    }

    /// Writes `batch` to sink `name`.
    pub fn write(&mut self, name: &str, batch: &OtapBatch) -> anyhow::Result<()> {
        let sink = self
            .sinks
            .get_mut(name)
            .with_context(|| format!("output to an unknown sink '{name}'"))?;
        sink.batches += 1;
        sink.records += batch.num_items() as u64;
        let needs_line = matches!(sink.target, Target::File { .. }) || sink.lines.is_some();
        let line = if needs_line {
            Some(json::to_line(batch).with_context(|| format!("sink {name}"))?)
        } else {
            None
        };
        match &mut sink.target {
            Target::File { writer, path } => {
                writeln!(writer, "{}", line.as_deref().unwrap_or_default())
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            Target::Console(sampler) => {
                let text = sampler
                    .show(batch, std::time::Instant::now())
                    .with_context(|| format!("sink {name}"))?;
                print!("{text}");
            }
            Target::Nowhere => {}
        }
        if let (Some(lines), Some(line)) = (&mut sink.lines, line) {
            lines.push(line);
        }
        Ok(())
    }

    /// Sends the derived metrics of closed aggregation windows to their sinks.
    pub fn write_windows(&mut self, windows: Vec<Windows>) -> anyhow::Result<()> {
        for w in windows {
            let sink = w.sink().to_string();
            if let Some(batch) = w.into_batch().context("aggregating")? {
                self.write(&sink, &batch)?;
            }
        }
        Ok(())
    }

    /// Flushes the files and prints a line per sink (unless `quiet`).
    pub fn finish(&mut self, quiet: bool) -> anyhow::Result<()> {
        for (name, sink) in &mut self.sinks {
            let counts = format!(
                "sink {name}: {} records in {} batches",
                sink.records, sink.batches
            );
            match &mut sink.target {
                Target::File { writer, path } => {
                    writer
                        .flush()
                        .with_context(|| format!("writing {}", path.display()))?;
                    if !quiet {
                        println!("{counts} -> {}", path.display());
                    }
                }
                _ if quiet => {}
                Target::Console(sampler) => {
                    print!("{}", sampler.finish());
                    println!("{counts}");
                }
                Target::Nowhere if sink.lines.is_none() && sink.kind != SinkKind::Console => {
                    println!(
                        "{counts} (a {} sink: not written; --out DIR writes it to DIR/{name}.jsonl)",
                        sink.kind.keyword()
                    );
                }
                _ => println!("{counts}"),
            }
        }
        Ok(())
    }

    /// Each sink's records as OTLP JSON lines (kept when opened with `keep`).
    pub fn lines(&self) -> BTreeMap<&str, &[String]> {
        self.sinks
            .iter()
            .map(|(name, s)| (name.as_str(), s.lines.as_deref().unwrap_or_default()))
            .collect()
    }
}
