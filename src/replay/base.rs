//! `--compare BASE`: the base version of the whole policy (rules, SLOs, routes, owners), from
//! a git ref of the repository or from another checkout of it.
//!
//! A ref is materialised with `git archive REF | tar -x` into a temporary directory (removed
//! when the [`Base`] is dropped). The base configuration is the head's watchfire.yaml at the
//! same path relative to the repository root (the git top level of the configuration's
//! directory; else the current directory when the configuration is under it; else the
//! configuration's directory). A BASE directory without that file but with rule files is a
//! directory of rule files only, as `--compare RULES_DIR` always was: its rules, the head's
//! routes and owners.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::config::{has_rule_files, FileConfig};
use super::Setup;

/// The base version, loaded.
#[derive(Debug)]
pub struct Base {
    /// BASE as given.
    pub name: String,
    pub setup: Setup,
    /// The root the base's rule files are under (a checkout, or the materialised ref).
    pub root: PathBuf,
    /// The head's root (its repository's top level).
    pub head_root: PathBuf,
    /// BASE is a directory of rule files only: with the head's routes and owners.
    pub rules_only: bool,
    /// Where a ref was materialised, removed on drop.
    _tmp: Option<TempDir>,
}

/// Loads the base version named by `spec` (a directory, else a git ref) of the policy `head`
/// was loaded from.
pub fn load(spec: &str, head: &FileConfig) -> Result<Base, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
    let abs = |p: &Path| canonical(&cwd.join(p));
    let config = head.path.as_deref().map(abs);
    let head_dir = config
        .as_deref()
        .and_then(Path::parent)
        .map_or_else(|| abs(Path::new(".")), Path::to_path_buf);
    let git_root = git_toplevel(&head_dir);
    let head_root = match &git_root {
        Some(r) => r.clone(),
        None if head_dir.starts_with(abs(Path::new("."))) => abs(Path::new(".")),
        None => head_dir.clone(),
    };
    // The head's configuration file (or, without one, its directory) relative to the root.
    let rel = match &config {
        Some(c) => c.strip_prefix(&head_root).unwrap_or(c).to_path_buf(),
        None => abs(Path::new("."))
            .strip_prefix(&head_root)
            .map(Path::to_path_buf)
            .unwrap_or_default(),
    };

    let dir = Path::new(spec);
    let (root, tmp) = if dir.is_dir() {
        (abs(dir), None)
    } else {
        let Some(repo) = &git_root else {
            return Err(format!(
                "--compare {spec}: no such directory, and {} is not in a git repository (a git ref needs one)",
                head_dir.display()
            ));
        };
        let tmp = materialise(spec, repo)?;
        (canonical(&tmp.0), Some(tmp))
    };
    let shown = |s: String| {
        // Files of a materialised ref read as `REF:path`, like `git show REF:path`.
        match &tmp {
            Some(t) => s.replace(&format!("{}/", canonical(&t.0).display()), &format!("{spec}:")),
            None => s,
        }
    };

    let base_cfg = match &config {
        Some(_) => {
            let path = root.join(&rel);
            path.is_file().then(|| FileConfig::load(&path).map_err(shown))
        }
        None => {
            let d = root.join(&rel);
            let file = d.join("deploy/watchfire.yaml");
            if file.is_file() {
                Some(FileConfig::load(&file).map_err(shown))
            } else if d.join("deploy/routes.yaml").is_file() {
                Some(Ok(FileConfig::repository_defaults(&d)))
            } else {
                None
            }
        }
    };
    let (setup, rules_only) = match base_cfg {
        Some(cfg) => (cfg?.build(None), false),
        None if tmp.is_none() && has_rule_files(&root) => (head.build(Some(&root)), true),
        None => {
            let wanted = match &config {
                Some(_) => rel.display().to_string(),
                None => rel.join("deploy/routes.yaml").display().to_string(),
            };
            return Err(match tmp {
                Some(_) => format!("--compare {spec}: the commit has no {wanted}"),
                None => format!(
                    "--compare {spec}: no {} (the configuration's path relative to {}), and no rule files",
                    root.join(&wanted).display(),
                    head_root.display()
                ),
            });
        }
    };
    let setup = setup.map_err(|errs| shown(format!("--compare {spec}:\n{}", errs.join("\n"))))?;
    Ok(Base {
        name: spec.to_string(),
        setup,
        root,
        head_root,
        rules_only,
        _tmp: tmp,
    })
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The top level of the git work tree holding `dir`, if any (and git runs).
fn git_toplevel(dir: &Path) -> Option<PathBuf> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "--show-toplevel"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let top = String::from_utf8(out.stdout).ok()?;
    Some(canonical(Path::new(top.trim_end_matches(['\n', '\r']))))
}

/// The tree of `spec` in the repository at `repo`, extracted into a new temporary directory.
fn materialise(spec: &str, repo: &Path) -> Result<TempDir, String> {
    let fail = |what: String| format!("--compare {spec}: {what}");
    // Anything starting with `-` would be read as an option by git.
    if spec.is_empty() || spec.starts_with('-') {
        return Err(fail("not a directory or a git ref".into()));
    }
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", "--verify", "--quiet", &format!("{spec}^{{commit}}")])
        .output()
        .map_err(|e| fail(format!("running git: {e}")))?;
    if !out.status.success() {
        return Err(fail(format!(
            "no such directory, and not a commit of the git repository at {} (fetch it first, e.g. `git fetch origin main`)",
            repo.display()
        )));
    }
    let sha = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let tmp = TempDir::new().map_err(|e| fail(format!("temporary directory: {e}")))?;
    let mut archive = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["archive", "--format=tar", &sha])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(format!("running git archive: {e}")))?;
    let Some(tar_in) = archive.stdout.take() else {
        return Err(fail("git archive: no output".into()));
    };
    let tar = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(&tmp.0)
        .stdin(Stdio::from(tar_in))
        .stderr(Stdio::piped())
        .output();
    let archived = archive
        .wait_with_output()
        .map_err(|e| fail(format!("git archive: {e}")))?;
    if !archived.status.success() {
        return Err(fail(format!(
            "git archive {sha}: {}",
            String::from_utf8_lossy(&archived.stderr).trim()
        )));
    }
    let tar = tar.map_err(|e| fail(format!("running tar: {e}")))?;
    if !tar.status.success() {
        return Err(fail(format!("tar -x: {}", String::from_utf8_lossy(&tar.stderr).trim())));
    }
    Ok(tmp)
}

/// A directory removed with everything in it when dropped.
#[derive(Debug)]
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<TempDir> {
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut last = None;
        for i in 0..16u32 {
            let p = base.join(format!("watchfire-compare-{}-{nanos}-{i}", std::process::id()));
            match std::fs::create_dir(&p) {
                Ok(()) => return Ok(TempDir(p)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no name left")))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
