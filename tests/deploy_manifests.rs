//! The Kubernetes manifests in deploy/ validate against the Kubernetes OpenAPI schemas
//! (`kubernetes-validate`, from PyPI, carries them offline). CRDs without a core schema
//! (the Prometheus Operator's PodMonitor) and non-resource files are left out by name.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const KUBERNETES_VERSION: &str = "1.31.0";

fn validator() -> Option<PathBuf> {
    let out = Command::new("kubernetes-validate").arg("--version").output().ok()?;
    out.status.success().then(|| PathBuf::from("kubernetes-validate"))
}

fn manifests() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let mut out = Vec::new();
    for dir in ["kubernetes", "node-probe"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let is_yaml = name.ends_with(".yaml") || name.ends_with(".yml");
            // Not Kubernetes resources, or a CRD the core schemas do not describe.
            let skip = matches!(name, "kustomization.yaml" | "scrape-config.yaml" | "podmonitor.yaml");
            if is_yaml && !skip {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn validate(bin: &Path, files: &[PathBuf]) -> (bool, String) {
    let out = Command::new(bin)
        .arg("--strict")
        .arg("-k")
        .arg(KUBERNETES_VERSION)
        .args(files)
        .output()
        .expect("run kubernetes-validate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && !text.contains("ERROR"), text)
}

#[test]
fn deploy_manifests_match_the_kubernetes_schemas() {
    let Some(bin) = common::require(validator(), "kubernetes-validate", "pip install kubernetes-validate") else {
        return;
    };
    let files = manifests();
    assert!(files.len() >= 8, "expected the deploy/ manifests, found {files:?}");
    let (ok, text) = validate(&bin, &files);
    assert!(ok, "manifests do not validate:\n{text}");
    for kind in [
        "statefulset/watchfire",
        "daemonset/node-probe",
        "poddisruptionbudget/watchfire",
        "networkpolicy/watchfire",
    ] {
        assert!(
            text.contains(&format!("passed for resource {kind}")),
            "{kind} was not validated:\n{text}"
        );
    }
}

#[test]
fn the_validator_rejects_a_broken_manifest() {
    let Some(bin) = common::require(validator(), "kubernetes-validate", "pip install kubernetes-validate") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\nspec:\n  replicas: two\n  selector: {matchLabels: {a: b}}\n  serviceName: x\n  template:\n    metadata: {labels: {a: b}}\n    spec: {containers: [{name: c, image: i, bogus: 1}]}\n",
    )
    .expect("write");
    let (ok, text) = validate(&bin, &[bad]);
    assert!(!ok, "a broken manifest passed:\n{text}");
}
