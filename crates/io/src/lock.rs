//! One writer per directory: an exclusive OS file lock on `DIR/.ropelab.lock`, held for the
//! life of a [`DirLock`]. The operating system releases it when the process exits or dies, so a
//! lock left by a killed process never blocks the next run; the file holds the holder's pid so
//! that a refused process can name it.

use std::fmt;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

/// Name of the lock file inside a locked directory.
pub const LOCK_FILE: &str = ".ropelab.lock";

/// Why a directory could not be locked.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds the lock.
    Busy {
        /// The directory.
        dir: PathBuf,
        /// The holder's pid, when it could be read.
        pid: Option<u32>,
    },
    /// The lock file could not be created or locked.
    Io {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::Busy { dir, pid: Some(pid) } => write!(
                f,
                "{} is in use by another ropelab process (pid {pid}); wait for it or choose another directory",
                dir.display()
            ),
            LockError::Busy { dir, pid: None } => write!(
                f,
                "{} is in use by another ropelab process; wait for it or choose another directory",
                dir.display()
            ),
            LockError::Io { dir, source } => {
                write!(f, "{}: cannot take the directory lock: {source}", dir.display())
            }
        }
    }
}

impl std::error::Error for LockError {}

/// An exclusive lock on a directory (see the module documentation); released on drop.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    dir: PathBuf,
}

impl DirLock {
    /// Locks `dir` (created if missing) or fails at once, naming the holder. Once locked, the
    /// temporary files a killed writer left in it are removed (see
    /// [`remove_stale_temporaries`]).
    pub fn acquire(dir: &Path) -> Result<Self, LockError> {
        let io_err = |source| LockError::Io {
            dir: dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io_err)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE))
            .map_err(io_err)?;
        match file.try_lock() {
            Ok(()) => {
                file.set_len(0).map_err(io_err)?;
                file.rewind().map_err(io_err)?;
                writeln!(file, "{}", std::process::id()).map_err(io_err)?;
                remove_stale_temporaries(dir);
                Ok(Self {
                    _file: file,
                    dir: dir.to_owned(),
                })
            }
            Err(TryLockError::WouldBlock) => {
                // The holder writes its pid just after locking: give it a moment to appear.
                let mut pid = None;
                for _ in 0..50 {
                    let mut text = String::new();
                    pid = file
                        .rewind()
                        .and_then(|_| file.read_to_string(&mut text))
                        .ok()
                        .and_then(|_| text.trim().parse().ok());
                    if pid.is_some() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(4));
                }
                Err(LockError::Busy {
                    dir: dir.to_owned(),
                    pid,
                })
            }
            Err(TryLockError::Error(e)) => Err(io_err(e)),
        }
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Removes the `.ropelab-*` temporary files (what [`crate::AtomicFile`] writes before its
/// rename) that a killed writer left in `dir` and the directories below it, skipping every
/// directory with a lock of its own (its holder cleans it) and symbolic links. Called by the
/// holder of `dir`'s lock, which is its only writer: nothing it removes is being written.
/// Best effort: a file that cannot be removed stays, and is never read.
pub fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            if !path.join(LOCK_FILE).exists() {
                remove_stale_temporaries(&path);
            }
        } else if kind.is_file() && entry.file_name().to_string_lossy().starts_with(".ropelab-") {
            let _ = std::fs::remove_file(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_until_the_first_drops() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        let first = DirLock::acquire(&dir).unwrap();
        let err = DirLock::acquire(&dir).unwrap_err();
        let me = std::process::id();
        assert!(
            matches!(err, LockError::Busy { pid: Some(p), .. } if p == me),
            "{err}"
        );
        assert!(err.to_string().contains(&format!("pid {me}")), "{err}");
        drop(first);
        let again = DirLock::acquire(&dir).unwrap();
        assert_eq!(again.dir(), dir.as_path());
    }

    /// A killed writer's temporary files go when the directory is next locked, below it too,
    /// except inside a directory with its own lock; other files stay.
    #[test]
    fn a_killed_writers_temporaries_go_when_the_directory_is_locked() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("study");
        let run = dir.join("seed-0/number");
        std::fs::create_dir_all(dir.join("theory")).unwrap();
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(run.join(LOCK_FILE), b"").unwrap();
        for f in [
            ".ropelab-a1",
            "theory/.ropelab-b2",
            "seed-0/number/.ropelab-c3",
            "kept.json",
        ] {
            std::fs::write(dir.join(f), b"half").unwrap();
        }
        let _lock = DirLock::acquire(&dir).unwrap();
        assert!(!dir.join(".ropelab-a1").exists());
        assert!(!dir.join("theory/.ropelab-b2").exists());
        assert!(
            run.join(".ropelab-c3").exists(),
            "another lock's directory was cleaned"
        );
        assert!(dir.join("kept.json").exists() && dir.join(LOCK_FILE).exists());
    }

    #[test]
    fn a_stale_lock_file_does_not_block() {
        let tmp = tempfile::tempdir().unwrap();
        // A lock file left behind by a dead process (no OS lock held on it).
        std::fs::write(tmp.path().join(LOCK_FILE), "999999\n").unwrap();
        assert!(DirLock::acquire(tmp.path()).is_ok());
    }
}
