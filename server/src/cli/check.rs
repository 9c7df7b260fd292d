//! `penstock check [--explain] FILE...`.

use std::path::PathBuf;

use penstock_dialect::DialectError;

/// Checks `files` together; prints a summary, or each pipeline's plan with `explain`. When
/// they do not check, every error is printed (in the order of the files, then by position)
/// with the line it is on and a caret under its column, and the error returned counts them.
pub fn run(files: &[PathBuf], explain: bool) -> anyhow::Result<()> {
    let texts = crate::gateway::base::program::read(files)?;
    let named: Vec<(&str, &str)> = texts
        .iter()
        .map(|(file, text)| (file.as_str(), text.as_str()))
        .collect();
    let (program, pipelines) = match penstock_pipeline::compile_sources(&named) {
        Ok(compiled) => compiled,
        Err(errors) => {
            let reports: Vec<String> = errors.errors().iter().map(|e| report(e, &named)).collect();
            eprintln!("{}", reports.join("\n"));
            let count = errors.errors().len();
            let names: Vec<&str> = named.iter().map(|(file, _)| *file).collect();
            anyhow::bail!(
                "{count} error{} in {}",
                if count == 1 { "" } else { "s" },
                names.join(", ")
            );
        }
    };
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

/// An error as `error: FILE:LINE:COLUMN: message`, then the line of the file it is on and a
/// caret under its column (when the file has that line).
fn report(e: &DialectError, texts: &[(&str, &str)]) -> String {
    let mut out = format!("error: {e}\n");
    let text = texts
        .iter()
        .find(|(file, _)| *file == e.file)
        .map(|(_, t)| *t);
    let number = e.location.line;
    let line = text.and_then(|t| t.lines().nth(usize::try_from(number).ok()?.checked_sub(1)?));
    if let Some(line) = line {
        let gutter = " ".repeat(number.to_string().len());
        // Tabs stay tabs, so the caret lines up however they are shown.
        let pad: String = line
            .chars()
            .take(usize::try_from(e.location.column.saturating_sub(1)).unwrap_or(0))
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        out.push_str(&format!(" {number} | {line}\n {gutter} | {pad}^\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(line: u64, column: u64) -> DialectError {
        DialectError {
            file: "p.sql".into(),
            location: penstock_dialect::Location { line, column },
            message: "what is wrong".into(),
        }
    }

    #[test]
    fn a_report_shows_the_line_and_a_caret_under_the_column() {
        let texts = [(
            "p.sql",
            "CREATE SINK out TO CONSOLE;\n\tDELETE FROM logz;\n",
        )];
        assert_eq!(
            report(&error(2, 14), &texts),
            "error: p.sql:2:14: what is wrong\n 2 | \tDELETE FROM logz;\n   | \t            ^\n"
        );
        // A position past the text (end of file) has no line to show.
        assert_eq!(
            report(&error(9, 1), &texts),
            "error: p.sql:9:1: what is wrong\n"
        );
    }
}
