//! Secret files (bearer tokens, web identity tokens, receiver keys): read whole, but never more
//! than a secret can be, so that a wrong path (`/dev/zero`, a log file) is an error at once
//! instead of a hang or a process that grows until it is killed.

use std::io::Read;

/// The largest secret file read: far above any token or key (a Kubernetes projected token is
/// about 1 KiB), far below what would hurt.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// Reads a secret file as text, refusing one larger than [`MAX_SECRET_FILE_BYTES`].
pub fn read_secret_file(path: impl AsRef<std::path::Path>) -> std::io::Result<String> {
    let f = std::fs::File::open(path)?;
    let mut text = String::new();
    f.take(MAX_SECRET_FILE_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {} KiB, not a secret file", MAX_SECRET_FILE_BYTES / 1024),
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endless_and_large_files_are_refused() {
        let e = read_secret_file("/dev/zero").unwrap_err();
        assert!(e.to_string().contains("not a secret file"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, "abc\n").unwrap();
        assert_eq!(read_secret_file(&p).unwrap(), "abc\n");
        std::fs::write(&p, vec![b'a'; MAX_SECRET_FILE_BYTES as usize]).unwrap();
        assert!(read_secret_file(&p).is_ok());
        std::fs::write(&p, vec![b'a'; MAX_SECRET_FILE_BYTES as usize + 1]).unwrap();
        assert!(read_secret_file(&p).is_err());
    }
}
