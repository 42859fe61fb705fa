//! Temporary directories removed on drop.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh directory under the system temp dir, removed with everything in
/// it on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `toolmesh-<label>-<pid>-<n>-<nanos>`.
    pub fn new(label: &str) -> std::io::Result<TempDir> {
        TempDir::new_in(&std::env::temp_dir(), label)
    }

    /// Creates `toolmesh-<label>-<pid>-<n>-<nanos>` under `base` (for
    /// example `/dev/shm` for data that is written often and thrown away).
    pub fn new_in(base: &Path, label: &str) -> std::io::Result<TempDir> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = base.join(format!(
            "toolmesh-{label}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir(path))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside it.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temp dir disappears with its guard, and two are never the same.
    #[test]
    fn temp_dir_is_removed() {
        let dir = TempDir::new("unit").unwrap();
        let other = TempDir::new("unit").unwrap();
        assert_ne!(dir.path(), other.path());
        let path = dir.path().to_owned();
        std::fs::write(dir.join("f"), b"x").unwrap();
        drop(dir);
        assert!(!path.exists());
    }
}
