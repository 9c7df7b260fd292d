//! The deployment files in `deploy/` (Kubernetes manifests, Envoy and NGINX configurations,
//! the Dockerfile) are checked by `deploy/validate.py`: the manifests against the Kubernetes
//! OpenAPI schemas (`kubernetes-validate` from PyPI, strict), the Envoy configuration as an
//! Envoy v3 bootstrap (`envoy-data-plane`), the NGINX configuration with `nginx -t` when
//! nginx is installed, and the pipeline and flags the Deployment gives `penstock run` with
//! this build's binary.

#![allow(clippy::unwrap_used)]

use std::process::Command;

#[test]
fn the_deployment_files_validate() {
    let Ok(python) = std::env::var("PENSTOCK_PYTHON") else {
        println!("skipped: PENSTOCK_PYTHON is not set (.ci/run installs the validators)");
        return;
    };
    let has_validator = Command::new(&python)
        .args(["-c", "import kubernetes_validate, yaml"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_validator {
        println!("skipped: {python} lacks kubernetes-validate (pip install kubernetes-validate)");
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new(&python)
        .arg(root.join("deploy/validate.py"))
        .env("PENSTOCK_BIN", env!("CARGO_BIN_EXE_penstock"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    println!("{text}");
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("passed"), "{text}");
}
