//! SHA-256 checksums of files and the manifest that seals a folder: every file's checksum,
//! written last, so that a damaged or edited file is reported as such when it is read.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The hex SHA-256 of a file's bytes, read in 1 MiB chunks.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether a folder without a manifest is accepted unverified (see [`allow_unsealed`]).
static ALLOW_UNSEALED: AtomicBool = AtomicBool::new(false);

/// Accepts (`true`) or refuses (`false`, the default) folders without a manifest in
/// [`Manifest::verify`] from now on, process-wide: `--force` accepts checkpoints written before
/// manifests existed.
pub fn allow_unsealed(allow: bool) {
    ALLOW_UNSEALED.store(allow, Ordering::SeqCst);
}

/// Name of the manifest file inside a sealed folder.
pub const MANIFEST: &str = "manifest.json";

/// Checksums of a folder's files, by file name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// File name -> hex SHA-256.
    pub sha256: BTreeMap<String, String>,
}

impl Manifest {
    /// The checksums of `files` in `dir`.
    pub fn of(dir: &Path, files: &[&str]) -> io::Result<Self> {
        let mut sha256 = BTreeMap::new();
        for f in files {
            sha256.insert((*f).to_owned(), sha256_file(&dir.join(f))?);
        }
        Ok(Self { sha256 })
    }

    /// Writes the manifest of `files` into `dir` (atomically; call it after the files).
    pub fn seal(dir: &Path, files: &[&str]) -> io::Result<()> {
        let m = Self::of(dir, files)?;
        let text = serde_json::to_string_pretty(&m).map_err(io::Error::other)?;
        crate::write_atomic(&dir.join(MANIFEST), text.as_bytes())
    }

    /// Checks `files` of `dir` against its manifest: `Ok(None)` when they match,
    /// `Ok(Some(reason))` naming the first file that does not, or saying that the folder has
    /// no manifest (unless [`allow_unsealed`] accepted such folders).
    pub fn verify(dir: &Path, files: &[&str]) -> io::Result<Option<String>> {
        let path = dir.join(MANIFEST);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if ALLOW_UNSEALED.load(Ordering::SeqCst) {
                    return Ok(None);
                }
                return Ok(Some(format!(
                    "it has no {MANIFEST}, so its files cannot be checked (written before \
                     manifests, or the manifest was removed); pass --force to load it unverified"
                )));
            }
            Err(e) => return Err(e),
        };
        let m: Self = match serde_json::from_str(&text) {
            Ok(m) => m,
            Err(e) => return Ok(Some(format!("{MANIFEST} is unreadable ({e})"))),
        };
        for f in files {
            let Some(want) = m.sha256.get(*f) else {
                return Ok(Some(format!("{MANIFEST} has no checksum for {f}")));
            };
            let got = match sha256_file(&dir.join(f)) {
                Ok(h) => h,
                Err(e) => return Ok(Some(format!("{f} cannot be read ({e})"))),
            };
            if &got != want {
                return Ok(Some(format!(
                    "{f} does not match its checksum (damaged or edited)"
                )));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_folder_verifies_until_a_byte_changes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.bin"), b"hello").unwrap();
        std::fs::write(dir.path().join("b.json"), b"{}").unwrap();
        // sha256("hello"), from any other implementation (e.g. `sha256sum`).
        assert_eq!(
            sha256_file(&dir.path().join("a.bin")).unwrap(),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        Manifest::seal(dir.path(), &["a.bin", "b.json"]).unwrap();
        assert_eq!(
            Manifest::verify(dir.path(), &["a.bin", "b.json"]).unwrap(),
            None
        );
        std::fs::write(dir.path().join("a.bin"), b"hellp").unwrap();
        let why = Manifest::verify(dir.path(), &["a.bin"]).unwrap().unwrap();
        assert!(why.contains("a.bin does not match"), "{why}");
        assert!(Manifest::verify(dir.path(), &["c"])
            .unwrap()
            .unwrap()
            .contains("no checksum"));
    }

    /// A folder without a manifest is refused (its files cannot be checked) unless unsealed
    /// folders were allowed (`--force`).
    #[test]
    fn a_folder_without_a_manifest_is_refused_unless_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let why = Manifest::verify(dir.path(), &["x"]).unwrap().unwrap();
        assert!(
            why.contains("has no manifest.json") && why.contains("--force"),
            "{why}"
        );
        allow_unsealed(true);
        let allowed = Manifest::verify(dir.path(), &["x"]).unwrap();
        allow_unsealed(false);
        assert_eq!(allowed, None);
    }

    #[test]
    fn the_sha256_of_bytes_is_the_standard_one() {
        assert_eq!(
            sha256_hex(b"hello"),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
    }
}
