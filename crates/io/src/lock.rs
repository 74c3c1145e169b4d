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
    /// Locks `dir` (created if missing) or fails at once, naming the holder.
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

    #[test]
    fn a_stale_lock_file_does_not_block() {
        let tmp = tempfile::tempdir().unwrap();
        // A lock file left behind by a dead process (no OS lock held on it).
        std::fs::write(tmp.path().join(LOCK_FILE), "999999\n").unwrap();
        assert!(DirLock::acquire(tmp.path()).is_ok());
    }
}
