//! Which data each source of a replayed file reads: `--input DATA.jsonl` for the file's one
//! source, `--input SOURCE=DATA.jsonl` (repeatable) per source, and otherwise a FILE source's
//! own `path`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use penstock_dialect::Program;
use penstock_dialect::ast::SourceKind;

use crate::gateway::base::program::resolve_path;

/// The data files each source reads during a replay, by source name. Sources that read
/// nothing are absent.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Inputs {
    by_source: BTreeMap<String, Vec<PathBuf>>,
}

fn is_name(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Inputs {
    /// Assigns `--input` arguments (`DATA.jsonl` or `SOURCE=DATA.jsonl`) to the sources of
    /// `program` (loaded from `file`): an unnamed input goes to the one source the file's
    /// pipelines read; a source without input reads its own `path` if it is a FILE source.
    pub fn assign(program: &Program, file: &Path, given: &[String]) -> anyhow::Result<Self> {
        let used: Vec<&str> = {
            let mut used: Vec<&str> = program
                .pipelines
                .iter()
                .map(|p| p.source.as_str())
                .collect();
            used.sort_unstable();
            used.dedup();
            used
        };
        let names = || {
            program
                .sources
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut inputs = Inputs::default();
        for arg in given {
            let (source, path) = match arg.split_once('=') {
                Some((name, path)) if is_name(name) => {
                    if program.source(name).is_none() {
                        bail!(
                            "--input {arg}: no source named '{name}'; the sources are {}",
                            names()
                        );
                    }
                    (name.to_string(), path)
                }
                _ => match used.as_slice() {
                    [one] => (one.to_string(), arg.as_str()),
                    [] => bail!(
                        "--input {arg}: no pipeline of {} reads a source",
                        file.display()
                    ),
                    _ => bail!(
                        "--input {arg}: the pipelines read sources {}; say which with --input SOURCE={arg}",
                        used.join(", ")
                    ),
                },
            };
            inputs
                .by_source
                .entry(source)
                .or_default()
                .push(PathBuf::from(path));
        }
        for source in &program.sources {
            if source.kind == SourceKind::File && !inputs.by_source.contains_key(&source.name) {
                let path = resolve_path(file, source.options.str("path").unwrap_or_default());
                inputs.by_source.insert(source.name.clone(), vec![path]);
            }
        }
        Ok(inputs)
    }

    /// The files `source` reads, if any.
    pub fn of(&self, source: &str) -> Option<&[PathBuf]> {
        self.by_source.get(source).map(Vec::as_slice)
    }

    /// Reads the batches of `source`'s files, in order.
    pub fn read(&self, source: &str) -> anyhow::Result<Vec<penstock_engine::OtapBatch>> {
        let mut batches = Vec::new();
        for path in self.of(source).unwrap_or_default() {
            batches.extend(
                penstock_engine::otlp::json::read_file(path)
                    .with_context(|| format!("reading {}", path.display()))?,
            );
        }
        Ok(batches)
    }
}
