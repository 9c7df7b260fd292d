//! `penstock replay FILE.sql [--input [SOURCE=]DATA.jsonl ...] [--out DIR] [--expect DIR
//! [--bless]]`: runs the pipelines of the file a gateway would run over OTLP JSON data, writes
//! what each sink would be sent, and compares it with expected outputs (golden tests).

mod inputs;
mod outputs;

use std::path::PathBuf;

use anyhow::{Context, bail};
use penstock_pipeline::Pipeline;

use crate::cli::golden;
pub use inputs::Inputs;
pub(crate) use outputs::Outputs;

/// What to replay and what to do with the output.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    /// The pipeline file.
    pub file: PathBuf,
    /// `--input` arguments: `DATA.jsonl` or `SOURCE=DATA.jsonl`.
    pub inputs: Vec<String>,
    /// Write every sink's output to `DIR/SINK.jsonl`.
    pub out: Option<PathBuf>,
    /// Compare every sink's output with `DIR/SINK.jsonl`.
    pub expect: Option<PathBuf>,
    /// With `expect`: write the outputs there instead of comparing.
    pub bless: bool,
    /// Print nothing but errors.
    pub quiet: bool,
}

/// Runs `replay`, printing the outputs' counts and, with `--expect`, the differences; fails
/// when an output differs from what is expected.
pub fn run(replay: &Replay) -> anyhow::Result<()> {
    if replay.bless && replay.expect.is_none() {
        bail!("--bless writes the outputs of --expect DIR: give --expect DIR");
    }
    let outputs = replay_outputs(replay)?;
    let Some(dir) = &replay.expect else {
        return Ok(());
    };
    if replay.bless {
        let written = golden::bless(dir, &outputs.lines())?;
        println!("blessed: {written} files in {}", dir.display());
        return Ok(());
    }
    let report = golden::compare_dir(dir, &outputs.lines())?;
    print!("{}", report.render());
    if report.passed() {
        println!("expected output: every sink matches {}", dir.display());
        Ok(())
    } else {
        bail!(
            "{} of {} sinks differ from {}",
            report.failures(),
            report.sinks(),
            dir.display()
        )
    }
}

/// Runs the pipelines of `replay.file` over their inputs and returns what each sink got.
pub(crate) fn replay_outputs(replay: &Replay) -> anyhow::Result<Outputs> {
    let file = replay.file.as_path();
    let compiled = crate::gateway::base::program::load(&[file.to_path_buf()], None)?;
    let (program, mut pipelines) = (compiled.program, compiled.pipelines);
    let inputs = Inputs::assign(&program, file, &replay.inputs)?;
    let mut outputs = Outputs::open(
        &program,
        file,
        replay.out.as_deref(),
        replay.expect.is_some(),
    )?;
    let mut replayed = 0;
    let mut read = Vec::new();
    for pipeline in &mut pipelines {
        let source = program
            .source(pipeline.source())
            .context("pipeline source vanished")?;
        if inputs.of(&source.name).is_none() {
            if replay.quiet {
                read.push(0);
                continue;
            }
            println!(
                "pipeline {}: source {} ({}) has no input, not replayed; give --input {}=DATA.jsonl",
                pipeline.name(),
                source.name,
                source.kind.keyword(),
                source.name
            );
            read.push(0);
            continue;
        }
        replayed += 1;
        read.push(feed(pipeline, inputs.read(&source.name)?, &mut outputs)?);
    }
    if replayed == 0 {
        bail!(
            "no pipeline of {} was replayed: give its data with --input DATA.jsonl",
            file.display()
        );
    }
    outputs.finish(replay.quiet)?;
    if !replay.quiet {
        for (pipeline, read) in pipelines.iter().zip(read) {
            print_stats(pipeline, read);
        }
    }
    Ok(outputs)
}

/// Runs `batches` through `pipeline` to `outputs`, then closes its windows (the input
/// ended). Returns the records read.
fn feed(
    pipeline: &mut Pipeline,
    batches: Vec<penstock_engine::OtapBatch>,
    outputs: &mut Outputs,
) -> anyhow::Result<u64> {
    let mut read = 0;
    for batch in batches {
        read += batch.num_items() as u64;
        let output = pipeline
            .run(batch)
            .with_context(|| format!("pipeline {}", pipeline.name()))?;
        for (sink, batch) in output.routed {
            outputs.write(&sink, &batch)?;
        }
        outputs.write_windows(output.closed)?;
    }
    // The input ended: every aggregation window is complete, every trace held is decided.
    outputs.write_windows(pipeline.finish())?;
    let decided = pipeline
        .decide(std::time::SystemTime::now(), true)
        .with_context(|| format!("pipeline {}", pipeline.name()))?;
    for (sink, batch) in decided {
        outputs.write(&sink, &batch)?;
    }
    Ok(read)
}

fn print_stats(pipeline: &Pipeline, read: u64) {
    println!(
        "pipeline {}: {} records read, {} routed nowhere (dropped), {} only aggregated",
        pipeline.name(),
        read,
        pipeline.unrouted_rows(),
        pipeline.aggregated_rows()
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
    if pipeline.merges() {
        let m = pipeline.merge_stats();
        println!(
            "  merged series: {} points in, {} merged points out; {} series followed, {} merged; {} restarts, {} points refused",
            m.points_in, m.points_out, m.series_in, m.series_out, m.resets, m.refused
        );
    }
    if pipeline.samples() {
        let s = pipeline.sampler_stats();
        println!(
            "  traces: {} kept, {} dropped ({} decided early: the input ended, or a bound was reached); spans: {} kept, {} dropped, {} late",
            s.traces_kept,
            s.traces_dropped,
            s.decided_early,
            s.spans_kept,
            s.spans_dropped,
            s.late_spans
        );
    }
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
