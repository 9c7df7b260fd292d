//! The `penstock` binary: `check --explain` plans (insta snapshot), errors with file:line:col,
//! and the golden replay in `examples/pipelines/golden/`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn penstock(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_penstock"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("runs penstock");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn check_explains_the_example_pipelines() {
    let (ok, stdout, stderr) =
        penstock(&["check", "--explain", "examples/pipelines/normalize.sql"]);
    assert!(ok, "{stderr}");
    insta::assert_snapshot!(stdout);
}

#[test]
fn check_fails_with_the_location_of_the_error() {
    let dir = std::env::temp_dir().join(format!("penstock-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("bad.sql");
    std::fs::write(
        &file,
        "CREATE SOURCE s FROM FILE WITH (path = 'x');\nCREATE PIPELINE p FROM s AS BEGIN\n  DELETE FROM logs WHERE lower(severity) = 'x';\nEND;\n",
    )
    .expect("write");
    let (ok, _, stderr) = penstock(&["check", file.to_str().expect("utf-8 path")]);
    assert!(!ok, "a bad file must fail");
    assert!(
        stderr.contains("bad.sql:3:32: unknown column 'severity' in logs"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn replay_writes_the_golden_output() {
    let golden = root().join("examples/pipelines/golden");
    let out = std::env::temp_dir().join(format!("penstock-golden-{}", std::process::id()));
    let (ok, stdout, stderr) = penstock(&[
        "replay",
        "examples/pipelines/golden/pipeline.sql",
        "--out",
        out.to_str().expect("utf-8 path"),
    ]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("pipeline golden: 7 records read"),
        "{stdout}"
    );
    for sink in ["errors", "routine", "per_service"] {
        let got = std::fs::read_to_string(out.join(format!("{sink}.jsonl"))).expect("sink output");
        let expected_path = golden.join("expected").join(format!("{sink}.jsonl"));
        if std::env::var_os("PENSTOCK_UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(expected_path.parent().expect("dir")).expect("dir");
            std::fs::write(&expected_path, &got).expect("write golden");
        }
        let expected = std::fs::read_to_string(&expected_path).expect("golden file");
        assert_eq!(
            got,
            expected,
            "{sink}: replay output differs from {}",
            expected_path.display()
        );
    }
    std::fs::remove_dir_all(&out).ok();
}
