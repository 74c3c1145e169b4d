//! SHA-256 checksums of files and the manifest that seals a folder: every file's checksum,
//! written last, so that a damaged or edited file is reported as such when it is read.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::Path;

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

    /// Checks `files` of `dir` against its manifest: `Ok(None)` when they match (or the folder
    /// predates manifests and has none), `Ok(Some(reason))` naming the first file that does not.
    pub fn verify(dir: &Path, files: &[&str]) -> io::Result<Option<String>> {
        let path = dir.join(MANIFEST);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
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

    #[test]
    fn a_folder_without_a_manifest_is_not_checked() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Manifest::verify(dir.path(), &["x"]).unwrap(), None);
    }
}
