//! Which model an output came from: every `ropelab pretrained` table records it in a `model`
//! column, so that outputs of two models copied into one directory are not read as one
//! model's (the report refuses to draw them together).

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::{PretrainedError, Result};

/// Hex digits of the SHA-256 kept in an identity (64 bits: two different models share them
/// with odds of about 1 in 2^64).
pub const DIGITS: usize = 16;

/// The identity of the model at `path` (a GGUF file or a Hugging Face directory), or of
/// SmolLM2-135M without a path (fetched into the cache first if needed):
/// `NAME sha256:PREFIX`, where NAME is the file or directory name and PREFIX the first
/// [`DIGITS`] hex digits of the SHA-256 of the bytes the model is read from: a GGUF file's
/// own SHA-256 (what `sha256sum` prints); for a directory, of `config.json`,
/// `generation_config.json`, `tokenizer.json`, `tokenizer_config.json`,
/// `special_tokens_map.json`, `added_tokens.json`, the safetensors index and every
/// `*.safetensors` file, each preceded by its name and length, in name order: two
/// directories with the same name but other weights get other identities. Every byte is
/// read once more.
pub fn model_identity(path: Option<&Path>) -> Result<String> {
    let fetched;
    let (path, name) = match path {
        Some(p) => (
            p,
            p.file_name()
                .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into()),
        ),
        None => {
            // Named as the file it is read from, as the same file given by --model is, so
            // both give one identity (twenty-fourth pass, B-U3).
            fetched = crate::fetch::ensure_model()?;
            let name = fetched.file_name().map_or_else(
                || "SmolLM2-135M".into(),
                |n| n.to_string_lossy().into_owned(),
            );
            (fetched.as_path(), name)
        }
    };
    let mut hasher = Sha256::new();
    if path.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|e| PretrainedError::io(path, e))?;
        let mut files: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                let n = p.file_name().map(|n| n.to_string_lossy().into_owned());
                let n = n.as_deref().unwrap_or("");
                p.is_file()
                    && (n == "config.json"
                        || n == "tokenizer.json"
                        || n == "tokenizer_config.json"
                        || n == "special_tokens_map.json"
                        || n == "added_tokens.json"
                        || n == "generation_config.json"
                        || n.ends_with(".safetensors")
                        || n.ends_with(".safetensors.index.json"))
            })
            .collect();
        files.sort();
        for file in files {
            let n = file.file_name().map(|n| n.to_string_lossy().into_owned());
            hasher.update(n.unwrap_or_default().as_bytes());
            hash_file(&mut hasher, &file, true)?;
        }
    } else {
        // A file's identity is the SHA-256 of its bytes alone, as `sha256sum` prints it
        // (twenty-fourth pass, B-S7).
        hash_file(&mut hasher, path, false)?;
    }
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(format!(
        "{} sha256:{}",
        name.replace(',', "_"),
        &hex[..DIGITS]
    ))
}

/// Feeds `path`'s bytes to `hasher` (after its length, with `with_len`), 1 MiB at a time.
fn hash_file(hasher: &mut Sha256, path: &Path, with_len: bool) -> Result<()> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(|e| PretrainedError::io(path, e))?;
    let len = file
        .metadata()
        .map_err(|e| PretrainedError::io(path, e))?
        .len();
    if with_len {
        hasher.update(len.to_le_bytes());
    }
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| PretrainedError::io(path, e))?;
        if n == 0 {
            return Ok(());
        }
        hasher.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_names_the_file_and_changes_with_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("m.gguf");
        std::fs::write(&a, b"one model").unwrap();
        let first = model_identity(Some(&a)).unwrap();
        assert!(first.starts_with("m.gguf sha256:"), "{first}");
        assert_eq!(first.len(), "m.gguf sha256:".len() + DIGITS);
        assert_eq!(first, model_identity(Some(&a)).unwrap(), "deterministic");
        // The digits are the file's own SHA-256, as sha256sum prints it (SHA-256 of
        // "one model", computed independently).
        assert!(first.ends_with("sha256:e7940ca0c091e09b"), "{first}");
        std::fs::write(&a, b"another model").unwrap();
        assert_ne!(first, model_identity(Some(&a)).unwrap());
    }

    #[test]
    fn a_directory_identity_covers_its_weights_not_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join("model");
        std::fs::create_dir(&m).unwrap();
        std::fs::write(m.join("config.json"), b"{}").unwrap();
        std::fs::write(m.join("model.safetensors"), b"weights").unwrap();
        let first = model_identity(Some(&m)).unwrap();
        std::fs::write(m.join("README.md"), b"notes").unwrap();
        assert_eq!(
            first,
            model_identity(Some(&m)).unwrap(),
            "a README is not the model"
        );
        std::fs::write(m.join("model.safetensors"), b"weightz").unwrap();
        assert_ne!(first, model_identity(Some(&m)).unwrap());
    }
}
