//! The conformance corpora's fetch (`scripts/fetch-conformance`, run by `scripts/test` where
//! `../shared/conformance` is missing), proven without a network: a local git repository stands
//! for an upstream one through `WATCHFIRE_CONFORMANCE_MIRROR`. The pinned commit is what is read
//! (not the branch's newest), every file is checked against its sha256, a second run fetches
//! nothing, and what cannot be fetched or differs is named. The repository's own manifest is
//! checked against the files it keeps and, where the shared corpora are, against each of their files.

mod common;

use std::path::Path;
use std::process::Command;

use sha2::{Digest, Sha256};

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `scripts/fetch-conformance` with `manifest`, into `dest`, git cache `cache`, mirrors `mirror`:
/// (exit code, stderr).
fn fetch(manifest: &Path, dest: &Path, cache: &Path, mirror: &Path) -> (i32, String) {
    let out = Command::new(repo_root().join("scripts/fetch-conformance"))
        .arg("--manifest")
        .arg(manifest)
        .arg("--dest")
        .arg(dest)
        .arg("--cache")
        .arg(cache)
        .env("WATCHFIRE_CONFORMANCE_MIRROR", mirror)
        .output()
        .expect("run scripts/fetch-conformance");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn rev_parse(dir: &Path) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["rev-parse", "HEAD"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn corpora_are_fetched_at_the_pinned_commit_and_verified() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // The "upstream": two commits; the manifest pins the first.
    let upstream = t.join("mirror/github.com/example/corpus");
    std::fs::create_dir_all(upstream.join("testdata")).unwrap();
    common::git(&upstream, &["init", "-q", "-b", "main"]);
    let a_pinned = b"load 1m\n  x 1 2 3\n";
    std::fs::write(upstream.join("testdata/a.test"), a_pinned).unwrap();
    std::fs::write(upstream.join("testdata/b.yml"), b"route: {receiver: r}\n").unwrap();
    std::fs::write(upstream.join("big.bin"), vec![7u8; 1 << 16]).unwrap();
    common::git(&upstream, &["add", "-A"]);
    common::git(&upstream, &["commit", "-q", "-m", "pinned"]);
    let pinned = rev_parse(&upstream);
    std::fs::write(upstream.join("testdata/a.test"), b"changed later\n").unwrap();
    common::git(&upstream, &["commit", "-q", "-am", "later"]);

    // A file kept in this repository, as the manifest's `-` rows name them.
    let local = "tests/conformance/local/README.md";
    let local_bytes = std::fs::read(repo_root().join(local)).unwrap();
    let url = "https://github.com/example/corpus";
    let manifest = t.join("manifest.tsv");
    let rows = [
        format!(
            "{url}\t{pinned}\ttestdata/a.test\tpromqltest/a.test\t{}",
            sha256(a_pinned)
        ),
        format!(
            "{url}\t{pinned}\ttestdata/b.yml\talertmanager/b.yml\t{}",
            sha256(b"route: {receiver: r}\n")
        ),
        format!("-\t-\t{local}\tREADME.md\t{}", sha256(&local_bytes)),
    ];
    std::fs::write(&manifest, format!("# comment\n{}\n", rows.join("\n"))).unwrap();

    let (dest, cache, mirror) = (t.join("corpora"), t.join("cache"), t.join("mirror"));
    let (code, err) = fetch(&manifest, &dest, &cache, &mirror);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read(dest.join("promqltest/a.test")).unwrap(),
        a_pinned,
        "the pinned commit's file"
    );
    assert_eq!(
        std::fs::read(dest.join("alertmanager/b.yml")).unwrap(),
        b"route: {receiver: r}\n"
    );
    assert_eq!(std::fs::read(dest.join("README.md")).unwrap(), local_bytes);
    assert!(err.contains("3 files"), "{err}");
    // Only what the manifest names: the upstream's other files are not in the corpora.
    assert!(!dest.join("big.bin").exists());

    // A second run finds everything in place and fetches nothing, even with the mirror gone.
    let (code, err) = fetch(&manifest, &dest, &cache, &t.join("nowhere"));
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("fetching"), "{err}");

    // A file that differs from its checksum, and a repository that cannot be fetched, are
    // named, and the run fails.
    std::fs::write(dest.join("promqltest/a.test"), b"edited\n").unwrap();
    let bad = t.join("bad.tsv");
    std::fs::write(
        &bad,
        format!(
            "{}\n{url}\t{pinned}\ttestdata/b.yml\tother/b.yml\t{}\nhttps://github.com/example/absent\t{pinned}\tx\tabsent/x\t{}\n",
            rows[0],
            "0".repeat(64),
            "0".repeat(64)
        ),
    )
    .unwrap();
    let (code, err) = fetch(&bad, &dest, &cache, &mirror);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("other/b.yml: sha256") && err.contains("could not fetch https://github.com/example/absent"),
        "{err}"
    );
    // The edited file was fetched again and is right; the one that differs was not written.
    assert_eq!(std::fs::read(dest.join("promqltest/a.test")).unwrap(), a_pinned);
    assert!(!dest.join("other/b.yml").exists());
}

/// Every `-` row names a file of this repository with its checksum; where the shared corpora
/// are, each of their files is in the manifest with the same checksum (and nothing more).
#[test]
fn the_manifest_describes_the_corpora() {
    let text = std::fs::read_to_string(repo_root().join("tests/conformance/manifest.tsv")).unwrap();
    let mut rows = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 5, "{line}");
        assert!(
            (f[0] == "-" && f[1] == "-")
                || (f[0].starts_with("https://") && f[1].len() == 40 && f[1].chars().all(|c| c.is_ascii_hexdigit())),
            "{line}"
        );
        if f[0] == "-" {
            let bytes = std::fs::read(repo_root().join(f[2])).unwrap_or_else(|e| panic!("{}: {e}", f[2]));
            assert_eq!(sha256(&bytes), f[4], "{}", f[2]);
        }
        assert!(
            rows.insert(f[3].to_string(), f[4].to_string()).is_none(),
            "{} twice",
            f[3]
        );
    }
    assert!(rows.len() > 700, "{}", rows.len());
    let shared = repo_root().join("../shared/conformance");
    if !shared.is_dir() {
        return;
    }
    let mut found = std::collections::BTreeMap::new();
    let mut stack = vec![shared.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(&shared).unwrap().to_string_lossy().into_owned();
                found.insert(rel, sha256(&std::fs::read(&p).unwrap()));
            }
        }
    }
    assert_eq!(found, rows, "the manifest and ../shared/conformance differ");
}
