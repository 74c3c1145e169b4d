//! Atomic file writes: the contents go to a hidden temporary file in the target's directory,
//! which is renamed over the target only when complete, so a reader (or a crash) never sees a
//! half-written file and an existing file is never lost.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tempfile::{NamedTempFile, TempDir};

/// Temporary files and folders that exist right now, so that a signal handler can remove
/// them before the process exits ([`remove_live_temporaries`]).
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn register(path: &Path) {
    if let Ok(mut live) = LIVE.lock() {
        live.push(path.to_owned());
    }
}

fn unregister(path: &Path) {
    if let Ok(mut live) = LIVE.lock() {
        live.retain(|p| p != path);
    }
}

/// Removes every temporary file and folder ropelab is writing right now. Call it from a
/// SIGINT / SIGTERM handler just before exiting: an interrupted run leaves nothing behind
/// (the targets themselves are untouched, as always).
pub fn remove_live_temporaries() {
    let live = match LIVE.lock() {
        Ok(mut live) => std::mem::take(&mut *live),
        Err(_) => return,
    };
    for path in live {
        if path.is_dir() {
            let _ = std::fs::remove_dir_all(&path);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// A file being written under a temporary name; [`AtomicFile::commit`] renames it into place.
/// Dropped without a commit, the temporary file is removed and the target left untouched.
#[derive(Debug)]
pub struct AtomicFile {
    tmp: Option<BufWriter<NamedTempFile>>,
    tmp_path: PathBuf,
    path: PathBuf,
}

impl AtomicFile {
    /// Starts writing `path`, creating its directory if missing.
    pub fn create(path: &Path) -> io::Result<Self> {
        // A named pipe, socket or device at the target would be replaced by a regular file
        // (the rename removes it): it is not a file this writes.
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            let kind = meta.file_type();
            if !kind.is_file() && !kind.is_dir() && !kind.is_symlink() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} is a named pipe, socket or device, not a file: write elsewhere (or \
                         to standard output, `-`, where the command has it)",
                        path.display()
                    ),
                ));
            }
        }
        // A directory is no file to write (the rename would fail with "Not a directory" or
        // "Is a directory", naming neither; eighth pass, a116).
        if path.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} is a directory: name a file to write", path.display()),
            ));
        }
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::create_dir_all(dir)?;
        remove_orphans(dir);
        let prefix = own_prefix();
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix);
        with_mode(&mut builder, 0o666);
        let tmp = builder.tempfile_in(dir)?;
        let tmp_path = tmp.path().to_owned();
        register(&tmp_path);
        Ok(Self {
            tmp: Some(BufWriter::new(tmp)),
            tmp_path,
            path: path.to_owned(),
        })
    }

    /// The target path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The flushed temporary file and the target. The file stays registered (this value's drop
    /// no longer owns it): the caller unregisters it once it is renamed.
    fn into_temp(mut self) -> io::Result<(NamedTempFile, PathBuf)> {
        self.tmp_path = PathBuf::new();
        let writer = self
            .tmp
            .take()
            .ok_or_else(|| io::Error::other("already committed"))?;
        let tmp = writer.into_inner().map_err(|e| e.into_error())?;
        Ok((tmp, std::mem::take(&mut self.path)))
    }

    /// Flushes, syncs and renames the file into place.
    pub fn commit(self) -> io::Result<()> {
        let (tmp, path) = self.into_temp()?;
        let tmp_path = tmp.path().to_owned();
        let result = tmp
            .as_file()
            .sync_all()
            .and_then(|_| tmp.persist(&path).map(|_| ()).map_err(|e| e.error));
        unregister(&tmp_path);
        result
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        // The temporary file itself is removed by `NamedTempFile`'s own drop.
        unregister(&self.tmp_path);
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.tmp.as_mut() {
            Some(w) => w.write(buf),
            None => Err(io::Error::other("already committed")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.tmp.as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

/// Writes `path` atomically through a writer that needs a file path (e.g. a safetensors
/// saver): `write` receives the temporary file's path; on success it is renamed to `path`.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&Path) -> io::Result<()>,
) -> io::Result<()> {
    let (tmp, _) = AtomicFile::create(path)?.into_temp()?;
    let tmp_path = tmp.path().to_owned();
    // The umask's mode, which the temporary file was created with: a writer that replaces the
    // file at `tmp_path` with one of its own (safetensors renames a private 0600 temporary file
    // over it) would otherwise leave its mode on the target.
    let permissions = tmp.as_file().metadata()?.permissions();
    let result = write(&tmp_path)
        .and_then(|_| std::fs::set_permissions(&tmp_path, permissions))
        .and_then(|_| tmp.persist(path).map(|_| ()).map_err(|e| e.error));
    unregister(&tmp_path);
    result
}

/// A folder built under a temporary name and renamed into place whole (e.g. a checkpoint):
/// removed if dropped unfinished, and by [`remove_live_temporaries`] on a signal.
#[derive(Debug)]
pub struct StagingDir {
    dir: Option<TempDir>,
    path: PathBuf,
}

impl StagingDir {
    /// The folder being built.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the folder to `target` (which must not exist).
    pub fn persist(mut self, target: &Path) -> io::Result<()> {
        let dir = self
            .dir
            .take()
            .ok_or_else(|| io::Error::other("already persisted"))?;
        let kept = dir.keep();
        let result = std::fs::rename(&kept, target);
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&kept);
        }
        unregister(&self.path);
        result
    }
}

impl Drop for StagingDir {
    fn drop(&mut self) {
        unregister(&self.path);
    }
}

/// A temporary directory in `dir` that becomes a permanent one when renamed into place (e.g. a
/// checkpoint built whole): created with 0777 less the user's umask, like any directory the
/// user makes, not the 0700 of a private temporary directory.
pub fn staging_dir_in(dir: &Path, prefix: &str) -> io::Result<StagingDir> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix);
    with_mode(&mut builder, 0o777);
    let tmp = builder.tempdir_in(dir)?;
    let path = tmp.path().to_owned();
    register(&path);
    Ok(StagingDir {
        dir: Some(tmp),
        path,
    })
}

/// The name prefix of this process's temporary files: `.ropelab-HOST-PID-` on Unix (the host
/// and process that write it, so that a later writer can tell a killed writer's file from a
/// live one's, [`remove_orphans`]), `.ropelab-` elsewhere. Every temporary name starts with
/// `.ropelab-`, which the directory lock's cleanup looks for.
fn own_prefix() -> String {
    #[cfg(unix)]
    {
        format!(".ropelab-{}-{}-", host(), std::process::id())
    }
    #[cfg(not(unix))]
    {
        ".ropelab-".to_owned()
    }
}

/// This machine's host name with `-` and anything but letters, digits and `.` replaced
/// (a file-name part that parses back unambiguously).
#[cfg(unix)]
fn host() -> String {
    let uname = rustix::system::uname();
    let name: String = uname
        .nodename()
        .to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        "host".to_owned()
    } else {
        name
    }
}

/// Removes the temporary files in `dir` that a ropelab process of this host left when it was
/// killed (`kill -9`, where no signal handler runs): `.ropelab-HOST-PID-*` files whose process
/// no longer exists. A file of a live process, of another host (a shared file system) or
/// without the host and pid in its name is left alone. Best effort, like
/// [`crate::lock::remove_stale_temporaries`], which the directory lock's holder runs.
pub fn remove_orphans(dir: &Path) {
    #[cfg(unix)]
    {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let ours = format!(".ropelab-{}-", host());
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let Some(rest) = name.strip_prefix(&ours) else {
                continue;
            };
            let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
                continue;
            };
            if entry.file_type().map(|t| t.is_file()).unwrap_or(false) && !alive(pid) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    #[cfg(not(unix))]
    let _ = dir;
}

/// Whether process `pid` exists on this host (signal 0: no signal is sent).
#[cfg(unix)]
fn alive(pid: i32) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return true; // not a process id: leave the file alone
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e != rustix::io::Errno::SRCH,
    }
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

    /// A named pipe at the target is refused, not replaced by a regular file (sixth pass,
    /// S11); skipped, saying so, where `mkfifo` is missing.
    #[cfg(unix)]
    /// A temporary file of a killed process (issue 55: a `kill -9`ed `report` left its
    /// `.ropelab-*` file) is removed by the next write into its directory; one of a live
    /// process, or of another host, stays.
    #[cfg(unix)]
    #[test]
    fn a_killed_writers_temporary_file_is_removed_by_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let orphan = dir
            .path()
            .join(format!(".ropelab-{}-{dead}-abc123", host()));
        let live = dir
            .path()
            .join(format!(".ropelab-{}-{}-def456", host(), std::process::id()));
        let other = dir.path().join(format!(".ropelab-elsewhere-{dead}-ghi789"));
        for f in [&orphan, &live, &other] {
            std::fs::write(f, b"half").unwrap();
        }
        write_atomic(&dir.path().join("report.html"), b"<html>").unwrap();
        assert!(!orphan.exists(), "the killed writer's file is gone");
        assert!(
            live.exists() && other.exists(),
            "a live or foreign file stays"
        );
        assert!(
            own_prefix().starts_with(".ropelab-"),
            "the lock's cleanup still sees it"
        );
    }

    #[test]
    fn a_directory_is_no_file_to_write() {
        let dir = tempfile::tempdir().unwrap();
        let err = write_atomic(dir.path(), b"x").unwrap_err().to_string();
        assert!(err.contains("is a directory: name a file"), "{err}");
    }

    #[test]
    fn a_named_pipe_is_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let pipe = dir.path().join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&pipe).status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("skipped: mkfifo is not available here");
            return;
        }
        let err = write_atomic(&pipe, b"x").unwrap_err().to_string();
        assert!(err.contains("is a named pipe, socket or device"), "{err}");
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(
            &fs::symlink_metadata(&pipe).unwrap().file_type()
        ));
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary is left"
        );
    }

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

    /// A writer that renames a private (0600) file of its own over the temporary path, as the
    /// safetensors saver does, still leaves a file with the umask's mode.
    #[cfg(unix)]
    #[test]
    fn a_writer_that_replaces_the_temporary_file_keeps_the_umask_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        fs::write(&plain, b"x").unwrap();
        let ours = dir.path().join("weights");
        write_atomic_with(&ours, |tmp| {
            let private = tempfile::NamedTempFile::new_in(tmp.parent().unwrap())?;
            fs::write(private.path(), b"tensors")?;
            private.persist(tmp).map(|_| ()).map_err(|e| e.error)
        })
        .unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(fs::read(&ours).unwrap(), b"tensors");
        assert_eq!(mode(&ours), mode(&plain));
    }

    #[test]
    fn missing_directories_are_created_and_a_file_in_the_way_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        write_atomic(&dir.path().join("a/b/x"), b"x").unwrap();
        assert_eq!(fs::read(dir.path().join("a/b/x")).unwrap(), b"x");
        assert!(write_atomic(&dir.path().join("a/b/x/y"), b"y").is_err());
    }
}
