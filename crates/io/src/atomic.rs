//! Atomic file writes: the contents go to a hidden temporary file in the target's directory,
//! which is renamed over the target only when complete, so a reader (or a crash) never sees a
//! half-written file and an existing file is never lost.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use tempfile::NamedTempFile;

/// A file being written under a temporary name; [`AtomicFile::commit`] renames it into place.
/// Dropped without a commit, the temporary file is removed and the target left untouched.
#[derive(Debug)]
pub struct AtomicFile {
    tmp: BufWriter<NamedTempFile>,
    path: PathBuf,
}

impl AtomicFile {
    /// Starts writing `path`, creating its directory if missing.
    pub fn create(path: &Path) -> io::Result<Self> {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::create_dir_all(dir)?;
        let mut builder = tempfile::Builder::new();
        builder.prefix(".ropelab-");
        with_mode(&mut builder, 0o666);
        let tmp = builder.tempfile_in(dir)?;
        Ok(Self {
            tmp: BufWriter::new(tmp),
            path: path.to_owned(),
        })
    }

    /// The target path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes, syncs and renames the file into place.
    pub fn commit(self) -> io::Result<()> {
        let tmp = self.tmp.into_inner().map_err(|e| e.into_error())?;
        tmp.as_file().sync_all()?;
        tmp.persist(&self.path).map_err(|e| e.error)?;
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tmp.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tmp.flush()
    }
}

/// Writes `path` atomically through a writer that needs a file path (e.g. a safetensors
/// saver): `write` receives the temporary file's path; on success it is renamed to `path`.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&Path) -> io::Result<()>,
) -> io::Result<()> {
    let file = AtomicFile::create(path)?;
    let tmp = file.tmp.into_inner().map_err(|e| e.into_error())?;
    write(tmp.path())?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// A temporary directory in `dir` that becomes a permanent one when renamed into place (e.g. a
/// checkpoint built whole): created with 0777 less the user's umask, like any directory the
/// user makes, not the 0700 of a private temporary directory.
pub fn staging_dir_in(dir: &Path, prefix: &str) -> io::Result<tempfile::TempDir> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix);
    with_mode(&mut builder, 0o777);
    builder.tempdir_in(dir)
}

/// Sets the mode a temporary file or directory is created with (the kernel applies the umask).
fn with_mode(builder: &mut tempfile::Builder, mode: u32) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(mode));
    }
    #[cfg(not(unix))]
    let _ = (builder, mode);
}

/// Writes `contents` to `path` atomically.
pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut file = AtomicFile::create(path)?;
    file.write_all(contents)?;
    file.commit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_committed_file_replaces_the_target_and_an_abandoned_one_leaves_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.txt");
        write_atomic(&path, b"first").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"first");
        let mut f = AtomicFile::create(&path).unwrap();
        f.write_all(b"second, never committed").unwrap();
        drop(f);
        assert_eq!(fs::read(&path).unwrap(), b"first");
        write_atomic(&path, b"third").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"third");
        // No temporary file is left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// Files get the umask's permissions, like any file the user creates (not 0600).
    #[cfg(unix)]
    #[test]
    fn files_are_created_with_the_users_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        fs::write(&plain, b"x").unwrap();
        let ours = dir.path().join("ours");
        write_atomic(&ours, b"x").unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&ours), mode(&plain));
        assert_ne!(mode(&ours), 0o600, "a private temporary file's mode leaked");
    }

    #[test]
    fn missing_directories_are_created_and_a_file_in_the_way_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        write_atomic(&dir.path().join("a/b/x"), b"x").unwrap();
        assert_eq!(fs::read(dir.path().join("a/b/x")).unwrap(), b"x");
        assert!(write_atomic(&dir.path().join("a/b/x/y"), b"y").is_err());
    }
}
