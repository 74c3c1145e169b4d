//! Output files that appear whole or not at all: written to a temporary file in the target's
//! directory and renamed into place on success; `-` means standard output.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};
use ropelab_io::AtomicFile;

/// A buffered output: standard output, or a temporary file renamed to its path by `commit`.
pub enum Output {
    /// Standard output.
    Stdout(BufWriter<io::Stdout>),
    /// A temporary file and the path it becomes, with the first bytes written (up to
    /// [`HEAD_BYTES`]), whose shape is checked against the file it replaces at commit when
    /// they were not known at creation (a stream), and the directories made for it (removed
    /// again, when still empty, if the file is never committed).
    File(AtomicFile, Option<Vec<u8>>, MadeDirs),
}

/// Directories created for an output, deepest first; dropped before they are kept (the output
/// refused or failed), those still empty are removed, so a refusal leaves nothing behind.
pub struct MadeDirs {
    dirs: Vec<std::path::PathBuf>,
    keep: bool,
}

impl MadeDirs {
    /// The missing directories above `dir` (itself included), deepest first; components
    /// `.` and `..` are never listed (removing one would reach a directory that existed).
    fn missing(dir: &Path) -> Self {
        let dirs = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .filter(|d| {
                d.file_name().is_some()
                    && !matches!(
                        d.components().next_back(),
                        Some(std::path::Component::CurDir | std::path::Component::ParentDir)
                    )
            })
            .map(Path::to_path_buf)
            .collect();
        Self { dirs, keep: false }
    }
}

impl Drop for MadeDirs {
    fn drop(&mut self) {
        if !self.keep {
            for d in &self.dirs {
                // Only an empty directory goes: anything written there since is kept.
                let _ = fs::remove_dir(d);
            }
        }
    }
}

/// The bytes of a streamed output kept for the shape check at commit.
const HEAD_BYTES: usize = 1 << 20;

impl Output {
    /// Opens `path` for writing (`-` is standard output); creates missing parent directories.
    /// A file that a measured run's ledger lists (a study's or sweep job's own, whatever
    /// `--run` names) is refused ([`ropelab_io::refuse_listed`]).
    pub fn create(path: &Path) -> Result<Self> {
        Self::create_checked(path, None)
    }

    fn create_checked(path: &Path, contents: Option<&[u8]>) -> Result<Self> {
        if path.as_os_str() == "-" {
            return Ok(Output::Stdout(BufWriter::new(io::stdout())));
        }
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if path.is_dir() {
            anyhow::bail!("cannot write {}: it is a directory", path.display());
        }
        ropelab_io::refuse_listed(path, contents)?;
        let made = MadeDirs::missing(dir);
        fs::create_dir_all(dir).with_context(|| {
            format!(
                "cannot write {}: cannot create its directory",
                path.display()
            )
        })?;
        let file =
            AtomicFile::create(path).with_context(|| format!("cannot write {}", path.display()))?;
        let head = contents.is_none().then(Vec::new);
        Ok(Output::File(file, head, made))
    }

    /// Flushes and moves the file into place (standard output is only flushed).
    pub fn commit(self) -> Result<()> {
        match self {
            Output::Stdout(mut w) => Ok(w.flush()?),
            Output::File(file, head, mut made) => {
                let path = file.path().to_owned();
                // A stream's first bytes are checked now against the file they would replace
                // (another command's table, another kind of file); the temporary file goes,
                // then the directories made for it.
                if let Some(head) = head {
                    if let Err(e) = ropelab_io::refuse_other_shape(&path, &head) {
                        drop(file);
                        return Err(e.into());
                    }
                }
                // Resolved before the rename, while every directory of the path exists.
                let target = ropelab_io::resolved(&path).ok();
                file.commit()
                    .with_context(|| format!("cannot write {}", path.display()))?;
                // Directories made only to be passed through (`new/../file`) go; those
                // holding the file stay.
                made.dirs.retain(|d| {
                    let holds = match (&target, ropelab_io::resolved(d)) {
                        (Some(t), Ok(d)) => t.starts_with(d),
                        _ => true,
                    };
                    holds || fs::remove_dir(d).is_err()
                });
                made.keep = true;
                Ok(())
            }
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Output::Stdout(w) => w.write(buf),
            Output::File(w, head, _) => {
                let n = w.write(buf)?;
                if let Some(head) = head {
                    let room = HEAD_BYTES.saturating_sub(head.len());
                    head.extend_from_slice(&buf[..n.min(room)]);
                }
                Ok(n)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Output::Stdout(w) => w.flush(),
            Output::File(w, _, _) => w.flush(),
        }
    }
}

/// Writes `contents` to `path` atomically.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    let mut out = Output::create_checked(path, Some(contents))?;
    out.write_all(contents)
        .with_context(|| format!("cannot write {}", path.display()))?;
    out.commit()
}

/// Writes `rows` as CSV to `path` with [`write_atomic`] (a file a measured run's ledger lists
/// is refused unless these are its very bytes).
pub fn write_csv<T: serde::Serialize>(path: &Path, rows: &[T]) -> Result<()> {
    write_atomic(path, ropelab_io::to_csv(rows)?.as_bytes())
}

/// The process's peak resident memory so far in MiB (Linux `VmHWM`; `None` elsewhere).
pub fn peak_rss_mib() -> Option<f64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Parses a memory budget in MiB (at least 1) into bytes.
pub fn parse_memory_mib(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(m) if (1..=1 << 20).contains(&m) => Ok(m << 20),
        _ => Err(format!(
            "{s:?} is not a memory budget: give whole MiB between 1 and 1048576"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Directories made for an output stay only when they hold the file: a committed file
    /// keeps its own, one reached through `new/../` leaves no `new/`, and one never committed
    /// leaves none (issue 55, fourth pass).
    #[test]
    fn directories_made_for_an_output_stay_only_when_they_hold_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mut out = Output::create(&d.join("a/b/c.txt")).unwrap();
        out.write_all(b"x\n").unwrap();
        out.commit().unwrap();
        assert_eq!(fs::read(d.join("a/b/c.txt")).unwrap(), b"x\n");
        let mut out = Output::create(&d.join("new/deeper/../../t.txt")).unwrap();
        out.write_all(b"y\n").unwrap();
        out.commit().unwrap();
        assert_eq!(fs::read(d.join("t.txt")).unwrap(), b"y\n");
        assert!(!d.join("new").exists());
        let mut out = Output::create(&d.join("never/u.txt")).unwrap();
        out.write_all(b"z\n").unwrap();
        drop(out);
        assert!(!d.join("never").exists());
        // A directory something else was written into meanwhile is kept.
        let out = Output::create(&d.join("shared/v.txt")).unwrap();
        fs::write(d.join("shared/other.txt"), b"kept").unwrap();
        drop(out);
        assert_eq!(fs::read(d.join("shared/other.txt")).unwrap(), b"kept");
    }
}
