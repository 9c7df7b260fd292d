//! `docs/functions.md` is what the function registry of the pipeline session gives:
//! `PENSTOCK_BLESS=1 cargo test -p penstock-pipeline --test reference` rewrites it.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use penstock_pipeline::reference::{FunctionKind, functions, markdown};

/// The reference, relative to this crate.
const DOC: &str = "../docs/functions.md";

#[test]
fn docs_functions_md_is_generated_from_the_registry() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(DOC);
    let expected = markdown(&functions());
    if std::env::var_os("PENSTOCK_BLESS").is_some() {
        std::fs::write(&path, &expected).unwrap();
        return;
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    if actual != expected {
        let line = actual
            .lines()
            .zip(expected.lines())
            .position(|(a, e)| a != e)
            .map_or_else(
                || actual.lines().count().min(expected.lines().count()) + 1,
                |i| i + 1,
            );
        panic!(
            "docs/functions.md differs from the function registry (first at line {line}); \
             regenerate it with\n\n    PENSTOCK_BLESS=1 cargo test -p penstock-pipeline --test reference\n"
        );
    }
}

#[test]
fn the_reference_lists_the_functions_pipelines_use() {
    let all = functions();
    let find = |name: &str| all.iter().find(|f| f.name == name);
    for name in [
        "regexp_replace",
        "lower",
        "date_bin",
        "sha256",
        "coalesce",
        "now",
    ] {
        let f = find(name).unwrap_or_else(|| panic!("{name} is not in the reference"));
        assert_eq!(f.kind, FunctionKind::Scalar);
    }
    let regexp = find("regexp_replace").unwrap();
    assert_eq!(regexp.group, "Regular Expression Functions");
    assert!(
        regexp
            .syntax
            .as_deref()
            .unwrap()
            .starts_with("regexp_replace(")
    );
    let avg = find("avg").unwrap();
    assert_eq!(avg.kind, FunctionKind::Aggregate);
    assert_eq!(avg.aliases, ["mean"]);
    let aggregates = all.iter().filter(|f| f.kind == FunctionKind::Aggregate);
    assert_eq!(aggregates.count(), 5);
    let mut names: Vec<(&str, FunctionKind)> =
        all.iter().map(|f| (f.name.as_str(), f.kind)).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), all.len(), "a function is listed twice");
}
