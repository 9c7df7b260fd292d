//! `penstock check [--explain] FILE...`.

use std::path::PathBuf;

/// Checks `files`; prints a summary, or each pipeline's plan with `explain`.
pub fn run(files: &[PathBuf], explain: bool) -> anyhow::Result<()> {
    let (program, pipelines) = crate::gateway::program::load(files)?;
    if explain {
        for pipeline in &pipelines {
            print!("{}", pipeline.explain());
        }
    }
    println!(
        "ok: {} source(s), {} sink(s), {} pipeline(s) with {} statement(s)",
        program.sources.len(),
        program.sinks.len(),
        program.pipelines.len(),
        program
            .pipelines
            .iter()
            .map(|p| p.steps.len())
            .sum::<usize>()
    );
    Ok(())
}
