//! `--base GIT_REF`: which lines changed since a ref, so that only findings on changed rules are
//! reported (every file is still loaded: cross-file checks see the whole tree).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Changed line ranges per file (absolute, canonical paths). A file mapped to `None` is new
/// (untracked or added): every line counts as changed.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    pub files: HashMap<PathBuf, Option<Vec<(usize, usize)>>>,
}

fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Parses `git diff -U0` hunk headers into the new file's changed line ranges.
pub(crate) fn parse_hunks(diff: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for l in diff.lines() {
        let Some(rest) = l.strip_prefix("@@ ") else { continue };
        let Some(plus) = rest.split_whitespace().find(|p| p.starts_with('+')) else {
            continue;
        };
        let plus = &plus[1..];
        let (start, count) = match plus.split_once(',') {
            Some((s, c)) => (s.parse::<usize>().unwrap_or(0), c.parse::<usize>().unwrap_or(1)),
            None => (plus.parse::<usize>().unwrap_or(0), 1),
        };
        if count == 0 {
            // A deletion after line `start`: the rule around it changed.
            out.push((start.max(1), start.max(1) + 1));
        } else {
            out.push((start, start + count - 1));
        }
    }
    out
}

/// What changed between `base` and the working tree of the repository containing `dir`.
pub(crate) fn changes_since(dir: &Path, base: &str) -> Result<Changes, String> {
    let top = PathBuf::from(git(dir, &["rev-parse", "--show-toplevel"])?.trim());
    git(
        &top,
        &["rev-parse", "--verify", "--quiet", &format!("{base}^{{commit}}")],
    )
    .map_err(|_| format!("unknown git ref {base:?}"))?;
    let mut ch = Changes::default();
    let names = git(&top, &["diff", "--name-only", base, "--"])?;
    for n in names.lines().filter(|l| !l.is_empty()) {
        let p = top.join(n);
        let diff = git(&top, &["diff", "-U0", base, "--", n])?;
        let key = p.canonicalize().unwrap_or(p);
        if diff.contains("\nnew file mode") || diff.starts_with("new file mode") {
            ch.files.insert(key, None);
        } else {
            ch.files.insert(key, Some(parse_hunks(&diff)));
        }
    }
    for n in git(&top, &["ls-files", "--others", "--exclude-standard"])?.lines() {
        if !n.is_empty() {
            let p = top.join(n);
            ch.files.insert(p.canonicalize().unwrap_or(p), None);
        }
    }
    Ok(ch)
}

impl Changes {
    /// Whether a finding about `file`, lines `span`, is on changed lines.
    pub(crate) fn touches(&self, file: &str, span: (usize, usize)) -> bool {
        let p = Path::new(file);
        let key = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        match self.files.get(&key) {
            None => false,
            Some(None) => true,
            Some(Some(ranges)) => ranges.iter().any(|&(a, b)| a <= span.1 && span.0 <= b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hunks() {
        let d = "diff --git a/x b/x\n@@ -3 +3,2 @@ foo\n-a\n+b\n+c\n@@ -10,2 +11,0 @@\n@@ -20 +20 @@\n";
        assert_eq!(parse_hunks(d), vec![(3, 4), (11, 12), (20, 20)]);
    }
}
