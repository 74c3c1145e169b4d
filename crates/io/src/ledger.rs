//! The ledger of a measured run (`RUN/measured.json`): every file a study or sweep job wrote
//! into a run directory when it measured the run (its test evaluation, swap scores, length
//! test, attention file), each with the key of the settings that made it and its SHA-256. A
//! job reuses a file, and a study's verdicts read it, only when the ledger vouches for it: a
//! file that another command replaced, or that was measured with other settings, is refused in
//! one line, never read silently; and the commands that write into a run directory refuse to
//! overwrite a file the ledger lists.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{sha256_file, write_atomic};

/// The ledger's file name inside a run directory.
pub const LEDGER: &str = "measured.json";

/// One measured file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The settings that made it (a short text: what was measured, and with what).
    pub key: String,
    /// Its SHA-256; None while it is being written (a job killed then measures it again).
    pub sha256: Option<String>,
}

/// A run directory's measured files, by path relative to the run directory (`/`-separated).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Relative path -> entry.
    pub files: BTreeMap<String, Entry>,
}

/// The settings a reader of a measured file expects it was made with ([`Ledger::vouch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect<'a> {
    /// Whatever made it (an integrity scan that checks only the checksum).
    Any,
    /// Exactly this key.
    Key(&'a str),
    /// A key that starts with this (settings known in part, e.g. the checkpoint step).
    Prefix(&'a str),
}

impl Expect<'_> {
    /// Whether `key` is one this reader accepts.
    pub fn allows(&self, key: &str) -> bool {
        match self {
            Expect::Any => true,
            Expect::Key(k) => key == *k,
            Expect::Prefix(p) => key.starts_with(p),
        }
    }
}

impl std::fmt::Display for Expect<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expect::Any => f.write_str("any key"),
            Expect::Key(k) => write!(f, "{k:?}"),
            Expect::Prefix(p) => write!(f, "a key starting {p:?}"),
        }
    }
}

/// Whether a file may be reused under a key (see [`Ledger::check`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// The file does not exist.
    Absent,
    /// The ledger vouches for it: made under this key, unchanged since.
    Own,
    /// Its writing under this key began and never finished (measure it again).
    Pending,
    /// It exists but the ledger does not vouch for it under this key: why, in words.
    Foreign(String),
}

fn ledger_path(dir: &Path) -> PathBuf {
    dir.join(LEDGER)
}

fn invalid(path: &Path, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {what}", path.display()),
    )
}

impl Ledger {
    /// The ledger of `dir` (None when it has none).
    pub fn load(dir: &Path) -> io::Result<Option<Self>> {
        let path = ledger_path(dir);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| invalid(&path, format!("not a ledger of measured files: {e}"))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn save(&self, dir: &Path) -> io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(io::Error::other)?;
        write_atomic(&ledger_path(dir), text.as_bytes())
    }

    /// Records that `file` (relative to `dir`) is about to be written under `key`: from now
    /// on it is this ledger's, and a kill before [`Ledger::finish`] leaves it pending.
    pub fn begin(dir: &Path, file: &str, key: &str) -> io::Result<()> {
        let mut ledger = Self::load(dir)?.unwrap_or_default();
        ledger.files.insert(
            file.to_owned(),
            Entry {
                key: key.to_owned(),
                sha256: None,
            },
        );
        ledger.save(dir)
    }

    /// Records the checksum of `file` as written now under `key`.
    pub fn finish(dir: &Path, file: &str, key: &str) -> io::Result<()> {
        let sha = sha256_file(&dir.join(file))?;
        let mut ledger = Self::load(dir)?.unwrap_or_default();
        ledger.files.insert(
            file.to_owned(),
            Entry {
                key: key.to_owned(),
                sha256: Some(sha),
            },
        );
        ledger.save(dir)
    }

    /// The standing of `file` (relative to `dir`) under `key`; a refusal shows both keys
    /// through [`readable_key`].
    pub fn check(dir: &Path, file: &str, key: &str) -> io::Result<Standing> {
        let path = dir.join(file);
        if !path.exists() {
            return Ok(Standing::Absent);
        }
        let ledger = Self::load(dir)?;
        let Some(entry) = ledger.as_ref().and_then(|l| l.files.get(file)) else {
            return Ok(Standing::Foreign(format!(
                "{} was not written by the measurement of this run ({} does not list it: \
                 another command, or a ropelab from before {LEDGER}, wrote it)",
                path.display(),
                LEDGER
            )));
        };
        if entry.key != key {
            return Ok(Standing::Foreign(format!(
                "{} was measured with other settings (\"{}\" in {LEDGER}, \"{}\" asked now)",
                path.display(),
                readable_key(&entry.key),
                readable_key(key)
            )));
        }
        let Some(want) = &entry.sha256 else {
            return Ok(Standing::Pending);
        };
        if &sha256_file(&path)? != want {
            return Ok(Standing::Foreign(format!(
                "{} was replaced after it was measured (its SHA-256 differs from {LEDGER})",
                path.display()
            )));
        }
        Ok(Standing::Own)
    }

    /// Checks that `file` is vouched for under the settings the reader expects: Ok(true) when
    /// it is, Ok(false) when the ledger does not list it, an error naming the file when it is
    /// pending, was replaced, or was measured with other settings than `expect` allows.
    pub fn vouch(&self, dir: &Path, file: &str, expect: Expect) -> io::Result<bool> {
        let Some(entry) = self.files.get(file) else {
            return Ok(false);
        };
        let path = dir.join(file);
        if !expect.allows(&entry.key) {
            return Err(invalid(
                &path,
                format!(
                    "measured with other settings ({:?} in {LEDGER}, {} expected by the reader); \
                     move it away and rerun to measure it again",
                    entry.key, expect
                ),
            ));
        }
        let Some(want) = &entry.sha256 else {
            return Err(invalid(
                &path,
                "its measurement never finished (rerun the command that measured it)",
            ));
        };
        let got = sha256_file(&path).map_err(|e| invalid(&path, e))?;
        if &got != want {
            // A training log is written by training, which a rerun does not repeat: only a
            // new run makes it again.
            let advice = if file.ends_with("metrics.jsonl") {
                "a training log is not measured again: remove the run's directory (a study's \
                 or sweep's job folder) and rerun to train it again"
            } else if file == "config.toml" {
                "it is no longer the config the study ran: restore it (a study of another \
                 config is reproduced into a new --out)"
            } else {
                "move it away and rerun to measure it again"
            };
            return Err(invalid(
                &path,
                format!(
                    "replaced after it was measured (its SHA-256 differs from {LEDGER}); {advice}"
                ),
            ));
        }
        Ok(true)
    }

    /// The listed files (relative paths) whose names start with `prefix`.
    pub fn listed(&self, prefix: &str) -> Vec<&str> {
        self.files
            .keys()
            .filter(|f| f.starts_with(prefix))
            .map(String::as_str)
            .collect()
    }
}

/// Refuses to write `target` when it is a file that the ledger of run directory `run` lists
/// (a study's or sweep job's measurement, which its verdicts read), or that the ledger of any
/// directory above it lists (another run's or study's file, named through `--out`), unless the
/// bytes about to be written (`contents`, when known) are the very bytes it recorded.
pub fn refuse_owned(run: &Path, target: &Path, contents: Option<&[u8]>) -> io::Result<()> {
    // A file in another run's directory is that run's measurement, even of the same shape,
    // and even before it exists (`score --run A --out B/scores.jsonl` would give B's report
    // and ablation A's scores; sixth pass, A1).
    if let (Ok(t), Ok(r)) = (resolved(target), resolved(run)) {
        let is_run = |d: &Path| d.join("config.toml").is_file() && d.join("checkpoints").is_dir();
        if let Some(owner) = t.ancestors().skip(1).find(|d| is_run(d)) {
            if owner != r && !r.starts_with(owner) {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} is a file of the run in {}, not of {}: write elsewhere",
                        target.display(),
                        owner.display(),
                        run.display()
                    ),
                ));
            }
        }
    }
    refuse_in(run, target, contents)?;
    refuse_listed(target, contents)
}

/// Refuses to replace `target` with `contents` when it is an existing file of a ropelab
/// directory of another shape (see [`refuse_listed`]): the check a streamed output makes once
/// its first bytes are known.
pub fn refuse_other_shape(target: &Path, contents: &[u8]) -> io::Result<()> {
    let Ok(absolute) = resolved(target) else {
        return Ok(());
    };
    match another_table(&absolute, Some(contents)) {
        Some(what) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} is {what}, another kind of file than this command wrote (not kept): write \
                 elsewhere",
                target.display()
            ),
        )),
        None => Ok(()),
    }
}

/// `path` as the file system will reach it: absolute, each existing prefix canonicalized
/// (symbolic links followed), and `..` leaving the component before it, as creating the missing
/// directories would. A check on this path cannot be bypassed by `RUN/new/../metrics.jsonl`.
pub fn resolved(path: &Path) -> io::Result<std::path::PathBuf> {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for c in std::path::absolute(path)?.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => {
                out.push(name);
                // An existing prefix is followed as the file system follows it (links).
                if out.symlink_metadata().is_ok() {
                    out = out.canonicalize().unwrap_or(out);
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    Ok(out)
}

/// Refuses to write `target` when the ledger of a directory above it lists it (see
/// [`refuse_owned`]); every command that writes a file the user names calls it.
pub fn refuse_listed(target: &Path, contents: Option<&[u8]>) -> io::Result<()> {
    let Ok(absolute) = resolved(target) else {
        return Ok(());
    };
    if let Some(what) = bookkeeping(&absolute) {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            if what.starts_with("a file in the model directory")
                || what.starts_with("a file the model loader reads")
            {
                format!("{} is {what}: write elsewhere", target.display())
            } else {
                format!(
                    "{} is {what}, which ropelab keeps itself: write elsewhere",
                    target.display()
                )
            },
        ));
    }
    if let Some(what) = another_table(&absolute, contents) {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} is {what}, another kind of file than the one being written: write elsewhere",
                target.display()
            ),
        ));
    }
    for dir in absolute.ancestors().skip(1) {
        if ledger_path(dir).is_file() {
            refuse_in(dir, &absolute, contents)?;
        }
    }
    Ok(())
}

/// A [`shape`] reduced to its kind: a CSV header to its first two columns, JSON keys to
/// `json`, text whose first line holds commas to a table's first two columns.
fn coarse(shape: &str) -> String {
    let table = |header: &str| {
        let mut fields = header.split(',');
        format!(
            "table {},{}",
            fields.next().unwrap_or(""),
            fields.next().unwrap_or("")
        )
    };
    if shape.starts_with('[') || shape.starts_with("json ") {
        "json".to_owned()
    } else if let Some(text) = shape.strip_prefix("text ") {
        if text.contains(',') {
            table(text)
        } else {
            shape.to_owned()
        }
    } else if shape.contains(',') {
        table(shape)
    } else {
        shape.to_owned()
    }
}

/// The shape of a file's text, by its name's extension: a CSV file's header line, a JSON
/// Lines file's sorted keys of its first line, a JSON file's sorted top-level keys, and for
/// any other file its extension when the text is not JSON, CSV-like or markup of another kind
/// (`None`: text that is not of the kind its name says, such as a CSV table in a `.json` file).
fn shape(name: &str, text: &[u8]) -> Option<String> {
    let first = text.split(|&b| b == b'\n').next()?;
    let first = std::str::from_utf8(first).ok()?.trim_end_matches('\r');
    // An object's sorted keys; an array's first element's, bracketed; another value's type.
    fn keys(v: serde_json::Value) -> Option<String> {
        Some(match v {
            serde_json::Value::Object(o) => {
                let mut keys: Vec<String> = o.keys().cloned().collect();
                keys.sort();
                format!("{keys:?}")
            }
            serde_json::Value::Array(mut a) if !a.is_empty() => {
                format!("[{}]", keys(a.swap_remove(0))?)
            }
            serde_json::Value::Array(_) => "[]".to_owned(),
            other => format!("{:?}", std::mem::discriminant(&other)),
        })
    }
    let extension = name.rsplit_once('.').map_or("", |(_, e)| e);
    match extension {
        "csv" => (!first.trim_start().starts_with(['{', '[', '<'])).then(|| first.to_owned()),
        "jsonl" => keys(serde_json::from_str(first).ok()?),
        "json" => keys(serde_json::from_slice(text).ok()?),
        // A page and a figure are both markup: told apart by how they begin (an SVG figure
        // written under a report's name is no page; seventh pass, L13).
        "html" | "svg" => {
            let end = (0..=text.len().min(512))
                .rev()
                .find(|&i| std::str::from_utf8(&text[..i]).is_ok())?;
            let start = std::str::from_utf8(&text[..end]).ok()?.trim_start();
            let start = start.to_ascii_lowercase();
            let page = start.starts_with("<!doctype html") || start.starts_with("<html");
            let figure = start.starts_with("<svg") || start.starts_with("<?xml");
            let fits = if extension == "html" { page } else { figure };
            fits.then(|| extension.to_owned())
        }
        // Any other name (a user's notes.txt, say) is told by what it holds: a page, a figure,
        // JSON of its keys, or text of its first line; a file of another kind under it is
        // not replaced (tenth pass, LO1, LO2).
        _ => {
            let start = first.trim_start().to_ascii_lowercase();
            Some(
                if start.starts_with("<!doctype html") || start.starts_with("<html") {
                    "page".to_owned()
                } else if start.starts_with("<svg") || start.starts_with("<?xml") {
                    "figure".to_owned()
                } else if let Ok(v) = serde_json::from_str(first) {
                    format!("json {}", keys(v)?)
                } else {
                    format!("text {first}")
                },
            )
        }
    }
}

/// The ropelab directory (a run, a study, a sweep, an experiment) that the file `path` would
/// lie in, if any: the nearest directory above it holding a run config, a plan, a ledger, a job
/// record or a study's claims, as the file system reaches it (links followed).
pub fn owning_dir(path: &Path) -> io::Result<Option<std::path::PathBuf>> {
    let absolute = resolved(path)?;
    Ok(ropelab_dir(&absolute).map(Path::to_owned))
}

/// The ropelab directory `path` (absolute) lies in, if any: the nearest directory above it that
/// holds a run config, a plan, a ledger, a job record or a study's claims.
fn ropelab_dir(path: &Path) -> Option<&Path> {
    path.ancestors().skip(1).find(|d| {
        [
            "config.toml",
            "plan.json",
            LEDGER,
            "job.json",
            "claims.json",
        ]
        .iter()
        .any(|f| d.join(f).is_file())
    })
}

/// When `path` (absolute) is an existing file (inside a ropelab directory or not) and
/// `contents` (when known) is not of the same shape (another command's output, or another
/// kind of file), or a new file in a ropelab directory whose contents are not what its name
/// says: what it is. A command rewriting its own file of the same shape is let through; a
/// TOML file is never replaced.
/// Whether `dir` is a Hugging Face model directory: a `config.json` beside safetensors weights.
fn is_model_dir(dir: &Path) -> bool {
    dir.join("config.json").is_file()
        && std::fs::read_dir(dir).is_ok_and(|mut entries| {
            entries
                .any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".safetensors")))
        })
}

fn another_table(path: &Path, contents: Option<&[u8]>) -> Option<String> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    let dir = ropelab_dir(path);
    if !path.exists() {
        let dir = dir?;
        // A new file in a ropelab directory is what its name says: CSV rows are no
        // `scores.jsonl`, whatever the command (fifth pass).
        let extension = name.rsplit_once('.').map_or("", |(_, e)| e);
        let contents = contents?;
        return (matches!(extension, "csv" | "jsonl" | "json" | "html" | "svg")
            && !contents.is_empty()
            && shape(&name, contents).is_none())
        .then(|| format!("a .{extension} name in {}", dir.display()));
    }
    if !path.is_file() {
        return None;
    }
    // Outside a ropelab directory too (a folder of `ropelab pretrained` output has no marker
    // file), an existing file of another shape is another command's output, or the user's:
    // a page over a table, a table over a page or over another table (tenth pass, L1-L3).
    let what = match dir {
        Some(dir) => format!("the {name} of {}", dir.display()),
        None => "an existing file".to_owned(),
    };
    if name.ends_with(".toml") {
        return Some(what);
    }
    let contents = contents?;
    // A JSON file is read whole (they are small); any other only to its first line.
    let old = if name.ends_with(".json") {
        let meta = std::fs::metadata(path).ok()?;
        if meta.len() > 64 << 20 {
            return Some(what);
        }
        std::fs::read(path).ok()?
    } else {
        let mut first = Vec::new();
        use std::io::BufRead;
        let file = std::fs::File::open(path).ok()?;
        std::io::BufReader::new(file)
            .read_until(b'\n', &mut first)
            .ok()?;
        first
    };
    // Outside a ropelab directory the kind alone is compared (a table's first two columns,
    // JSON, a page, a figure, text): one command's table with other columns (another
    // --extras, say) may replace its own earlier output there.
    let kind = |text: &[u8]| {
        let s = shape(&name, text)?;
        Some(if dir.is_some() { s } else { coarse(&s) })
    };
    match (kind(&old), kind(contents)) {
        (Some(a), Some(b)) if a == b => None,
        // An existing file that is not what its name says is not ropelab's: let it go.
        (None, _) => None,
        _ => Some(what),
    }
}

/// Whether the file at `path` is model weights whatever its name: a GGUF file (its magic), or
/// a safetensors file (an 8-byte little-endian header length inside the file, then `{`).
fn holds_weights(path: &Path) -> bool {
    use std::io::Read;
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    let mut head = Vec::with_capacity(9);
    let Ok(_) = std::fs::File::open(path).and_then(|f| f.take(9).read_to_end(&mut head)) else {
        return false;
    };
    if head.starts_with(b"GGUF") {
        return true;
    }
    head.len() == 9 && head[8] == b'{' && {
        let header = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        header >= 2 && header <= meta.len() - 8
    }
}

/// The files ropelab keeps for a run or an experiment whether or not a ledger lists them,
/// when `path` (absolute) is one that exists: the bookkeeping files of any directory (a
/// ledger, a checkpoint manifest, a sweep's plan, a job's parameters and result), and a run
/// directory's config, training log and checkpoints. What it is, in words.
fn bookkeeping(path: &Path) -> Option<String> {
    let is_run = |d: &Path| d.join("config.toml").is_file() && d.join("checkpoints").is_dir();
    // A run's checkpoints, and a checkpoint's folder, hold what its manifest seals and what
    // training writes: no new file of another command goes among them either.
    if let Some(a) = path.ancestors().skip(1).find(|a| {
        a.file_name().is_some_and(|n| n == "checkpoints") && a.parent().is_some_and(is_run)
    }) {
        return Some(format!("a file of the checkpoints in {}", a.display()));
    }
    let parent = path.parent()?;
    if parent.join("ropelab.json").is_file() || parent.join(crate::checksum::MANIFEST).is_file() {
        return Some(format!("a file of the checkpoint in {}", parent.display()));
    }
    // ropelab's bookkeeping, whether or not it is there now (a lock comes and goes with its
    // holder: a file written in its place would stand in for the next one; seventh pass, L14).
    let name = path.file_name()?.to_string_lossy().into_owned();
    let named = match name.as_str() {
        LEDGER => Some("a ledger of measured files"),
        crate::lock::LOCK_FILE => Some("a directory's lock"),
        crate::checksum::MANIFEST => Some("a checkpoint's manifest"),
        _ => None,
    };
    if let Some(what) = named {
        return Some(what.to_owned());
    }
    // A name the model loader reads, new or not, in a model directory: written there, it
    // would change the model (eighteenth pass, S1).
    let read_with_model = matches!(
        name.as_str(),
        "config.json"
            | "tokenizer.json"
            | "tokenizer_config.json"
            | "generation_config.json"
            | "special_tokens_map.json"
            | "model.safetensors.index.json"
    ) || name.ends_with(".safetensors")
        || name.ends_with(".gguf");
    if read_with_model && is_model_dir(parent) {
        return Some(format!(
            "a file the model loader reads in the model directory {} (written there, it would \
             change the model)",
            parent.display()
        ));
    }
    if !path.exists() {
        return None;
    }
    let named = match name.as_str() {
        "plan.json" => Some("a sweep's plan"),
        "job.json" | "result.json" => Some("a sweep job's record"),
        _ => None,
    };
    if let Some(what) = named {
        return Some(what.to_owned());
    }
    // A model's own files: no command writes weights, and a model directory's config and
    // tokenizer are read with them.
    if name.ends_with(".gguf") || name.ends_with(".safetensors") || holds_weights(path) {
        return Some("a model's weights".to_owned());
    }
    // Every file of a model directory (its config, tokenizer, shard index, generation
    // settings) is read with the weights: none is replaced.
    if is_model_dir(parent) {
        return Some(format!(
            "a file in the model directory {} (ropelab replaces nothing there, as what lies \
             there is read with the model)",
            parent.display()
        ));
    }
    // A study's saved datasets (`seed-S/data/`), which its runs are evaluated on.
    let seed = parent.parent();
    if parent.file_name().is_some_and(|n| n == "data")
        && seed.is_some_and(|s| {
            s.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("seed-"))
        })
        && seed
            .and_then(Path::parent)
            .is_some_and(|st| st.join("config.toml").is_file())
    {
        return Some(format!("a dataset of the study in {}", parent.display()));
    }
    if is_run(parent) && matches!(name.as_str(), "config.toml" | "metrics.jsonl") {
        return Some(format!("the {name} of the run in {}", parent.display()));
    }
    None
}

fn refuse_in(run: &Path, target: &Path, contents: Option<&[u8]>) -> io::Result<()> {
    let Some(ledger) = Ledger::load(run)? else {
        return Ok(());
    };
    let relative = match target.strip_prefix(run) {
        Ok(r) => r.to_owned(),
        Err(_) => match (resolved(target), resolved(run)) {
            (Ok(t), Ok(r)) => match t.strip_prefix(&r) {
                Ok(rel) => rel.to_owned(),
                Err(_) => return Ok(()),
            },
            _ => return Ok(()),
        },
    };
    let name = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/");
    let Some(entry) = ledger.files.get(&name) else {
        return Ok(());
    };
    // A pending entry is a measurement being written (the command that began it writes it now,
    // or a killed one left it): no reader trusts it, so it is not protected.
    let Some(want) = &entry.sha256 else {
        return Ok(());
    };
    if let Some(bytes) = contents {
        if &crate::sha256_hex(bytes) == want {
            return Ok(());
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{} is a result of {} ({} lists it; its results are read from it): write \
             elsewhere (--out FILE where the command has it), or work on a copy of the run or \
             directory without its {LEDGER}",
            target.display(),
            run.display(),
            run.join(LEDGER).display()
        ),
    ))
}

/// A settings key as a message shows it: the keys keep Rust's `Some(8)` and `None` (changing
/// them would make every recorded file stale), which a reader sees as `8` and `default`
/// (nineteenth pass, U1).
pub fn readable_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut rest = key;
    // Closing parentheses still owed to a `Some(` removed; one flag per open parenthesis.
    let mut opened: Vec<bool> = Vec::new();
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("Some(") {
            opened.push(true);
            rest = after;
        } else if rest.starts_with("None")
            && !out.ends_with(|c: char| c.is_alphanumeric())
            && !rest[4..].starts_with(|c: char| c.is_alphanumeric())
        {
            out.push_str("default");
            rest = &rest[4..];
        } else {
            match c {
                '(' => opened.push(false),
                ')' if opened.pop() == Some(true) => {
                    rest = &rest[1..];
                    continue;
                }
                _ => {}
            }
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// Keys are shown without Rust's option spelling (nineteenth pass, U1).
    #[test]
    fn keys_read_as_settings() {
        assert_eq!(
            readable_key("length test: extras [0, 20], samples Some(8), step None"),
            "length test: extras [0, 20], samples 8, step default"
        );
        assert_eq!(
            readable_key("query Some(Answer), blocks Some((0, 2)), planes 4 (None)"),
            "query Answer, blocks (0, 2), planes 4 (default)"
        );
        assert_eq!(readable_key("NoneSuch Some(x"), "NoneSuch x");
    }

    use super::*;

    #[test]
    fn a_file_is_own_only_under_its_key_and_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(Ledger::check(d, "a.csv", "k").unwrap(), Standing::Absent);
        std::fs::write(d.join("a.csv"), b"1,2\n").unwrap();
        assert!(matches!(
            Ledger::check(d, "a.csv", "k").unwrap(),
            Standing::Foreign(_)
        ));
        Ledger::begin(d, "a.csv", "k").unwrap();
        assert_eq!(Ledger::check(d, "a.csv", "k").unwrap(), Standing::Pending);
        Ledger::finish(d, "a.csv", "k").unwrap();
        assert_eq!(Ledger::check(d, "a.csv", "k").unwrap(), Standing::Own);
        let ledger = Ledger::load(d).unwrap().unwrap();
        assert!(ledger.vouch(d, "a.csv", Expect::Any).unwrap());
        assert!(ledger.vouch(d, "a.csv", Expect::Key("k")).unwrap());
        assert!(ledger.vouch(d, "a.csv", Expect::Prefix("")).unwrap());
        assert!(!ledger.vouch(d, "b.csv", Expect::Key("k")).unwrap());
        // A reader expecting other settings refuses it by name.
        let err = ledger
            .vouch(d, "a.csv", Expect::Key("other"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("a.csv") && err.contains("other settings"),
            "{err}"
        );
        assert!(ledger.vouch(d, "a.csv", Expect::Prefix("kk")).is_err());
        match Ledger::check(d, "a.csv", "other").unwrap() {
            Standing::Foreign(why) => assert!(why.contains("other settings"), "{why}"),
            s => panic!("{s:?}"),
        }
        std::fs::write(d.join("a.csv"), b"1,3\n").unwrap();
        match Ledger::check(d, "a.csv", "k").unwrap() {
            Standing::Foreign(why) => assert!(why.contains("replaced"), "{why}"),
            s => panic!("{s:?}"),
        }
        assert!(ledger.vouch(d, "a.csv", Expect::Any).is_err());
    }

    /// A changed training log is not "measured again" by a rerun: the advice says to train
    /// it again (fifth-pass recheck: the old advice looped).
    #[test]
    fn a_changed_training_log_advises_a_new_run() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for f in ["metrics.jsonl", "scores.jsonl"] {
            std::fs::write(d.join(f), b"{}\n").unwrap();
            Ledger::finish(d, f, "k").unwrap();
            std::fs::write(d.join(f), b"{\"x\":1}\n").unwrap();
        }
        let ledger = Ledger::load(d).unwrap().unwrap();
        let log = ledger.vouch(d, "metrics.jsonl", Expect::Any).unwrap_err();
        assert!(
            log.to_string().contains("remove the run's directory"),
            "{log}"
        );
        let scores = ledger.vouch(d, "scores.jsonl", Expect::Any).unwrap_err();
        assert!(
            scores.to_string().contains("move it away and rerun"),
            "{scores}"
        );
    }

    /// A new file in a ropelab directory is what its name says (CSV rows are no
    /// `scores.jsonl`), and a directory's lock is never replaced (fifth pass).
    #[test]
    fn a_new_file_in_a_run_is_what_its_name_says_and_its_lock_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir_all(run.join("checkpoints")).unwrap();
        std::fs::write(run.join("config.toml"), b"x").unwrap();
        let scores = run.join("scores.jsonl");
        let err = refuse_listed(&scores, Some(b"extra,length\n0,17\n")).unwrap_err();
        assert!(err.to_string().contains("a .jsonl name in"), "{err}");
        assert!(refuse_other_shape(&scores, b"extra,length\n").is_err());
        assert!(refuse_listed(&scores, Some(b"{\"step\":0}\n")).is_ok());
        assert!(refuse_listed(&run.join("t.csv"), Some(b"{\"a\":1}\n")).is_err());
        assert!(refuse_listed(&run.join("t.csv"), Some(b"a,b\n")).is_ok());
        assert!(refuse_listed(&run.join("empty.jsonl"), Some(b"")).is_ok());
        assert!(refuse_listed(&run.join("notes.txt"), Some(b"anything")).is_ok());
        // Outside a ropelab directory a name binds nothing.
        assert!(refuse_listed(&dir.path().join("s.jsonl"), Some(b"a,b\n")).is_ok());
        std::fs::write(run.join(crate::lock::LOCK_FILE), b"123\n").unwrap();
        let err = refuse_listed(&run.join(crate::lock::LOCK_FILE), None).unwrap_err();
        assert!(err.to_string().contains("lock"), "{err}");
        // A lock that is not there now is refused too: its holder comes back (seventh pass).
        std::fs::remove_file(run.join(crate::lock::LOCK_FILE)).unwrap();
        let err = refuse_listed(&run.join(crate::lock::LOCK_FILE), None).unwrap_err();
        assert!(err.to_string().contains("a directory's lock"), "{err}");
    }

    /// Every existing file of a model directory is refused (a shard index too), and weights
    /// are known by their bytes whatever their name (fifth pass: both were overwritten).
    #[test]
    fn a_models_files_are_refused_whatever_their_names() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model");
        std::fs::create_dir_all(&model).unwrap();
        let mut st = 2u64.to_le_bytes().to_vec();
        st.extend_from_slice(b"{}");
        std::fs::write(model.join("model-00001-of-00002.safetensors"), &st).unwrap();
        std::fs::write(model.join("config.json"), b"{}").unwrap();
        for f in ["model.safetensors.index.json", "generation_config.json"] {
            std::fs::write(model.join(f), b"{}").unwrap();
            let err = refuse_listed(&model.join(f), None).unwrap_err();
            assert!(err.to_string().contains("in the model directory"), "{err}");
        }
        // A name the loader reads is refused before it exists too (eighteenth pass, S1).
        for f in ["tokenizer_config.json", "model-00002-of-00002.safetensors"] {
            let err = refuse_listed(&model.join(f), None).unwrap_err();
            assert!(err.to_string().contains("the model loader reads"), "{err}");
        }
        assert!(refuse_listed(&model.join("notes.csv"), None).is_ok());
        assert!(refuse_listed(&model.join("new.csv"), None).is_ok());
        let plain = dir.path().join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        for (name, bytes) in [("m.bin", b"GGUF\x03\0\0\0".to_vec()), ("w.bin", st.clone())] {
            std::fs::write(plain.join(name), &bytes).unwrap();
            let err = refuse_listed(&plain.join(name), None).unwrap_err();
            assert!(
                err.to_string().contains("a model's weights"),
                "{name}: {err}"
            );
        }
        // A table or a short file is not weights.
        std::fs::write(plain.join("t.csv"), b"a,b\n1,2\n").unwrap();
        std::fs::write(plain.join("s.bin"), b"GG").unwrap();
        assert!(refuse_listed(&plain.join("t.csv"), None).is_ok());
        assert!(refuse_listed(&plain.join("s.bin"), None).is_ok());
        // Weights without a config.json do not make their folder a model's: a table written
        // there before is rewritten (sixth pass, U2).
        std::fs::write(plain.join("outside.safetensors"), &st).unwrap();
        assert!(refuse_listed(&plain.join("t.csv"), None).is_ok());
    }

    /// No new file of another command goes into a run's checkpoints or a checkpoint's folder
    /// (sixth pass, S12: only existing files were refused).
    #[test]
    fn nothing_new_goes_into_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let step = run.join("checkpoints").join("step-000003");
        std::fs::create_dir_all(&step).unwrap();
        std::fs::write(run.join("config.toml"), b"").unwrap();
        for target in [
            step.join("new.csv"),
            run.join("checkpoints").join("step-000009"),
        ] {
            let err = refuse_listed(&target, None).unwrap_err().to_string();
            assert!(err.contains("a file of the checkpoints in"), "{err}");
        }
        let loose = dir.path().join("export");
        std::fs::create_dir_all(&loose).unwrap();
        std::fs::write(loose.join("ropelab.json"), b"{}").unwrap();
        let err = refuse_listed(&loose.join("heads.jsonl"), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("a file of the checkpoint in"), "{err}");
        assert!(refuse_listed(&run.join("scores.csv"), None).is_ok());
    }

    #[test]
    fn a_file_listed_by_a_ledger_above_it_is_refused_whatever_run_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let study = dir.path().join("study");
        let model = study.join("seed-3").join("number");
        std::fs::create_dir_all(&model).unwrap();
        std::fs::write(model.join("scores.jsonl"), b"{}\n").unwrap();
        Ledger::finish(&model, "scores.jsonl", "k").unwrap();
        // A study-level ledger listing a file two levels down.
        std::fs::write(study.join("claims.json"), b"[]").unwrap();
        Ledger::finish(&study, "claims.json", "c").unwrap();
        let other = dir.path().join("other-run");
        std::fs::create_dir_all(&other).unwrap();
        let target = model.join("scores.jsonl");
        let err = refuse_owned(&other, &target, Some(b"x")).unwrap_err();
        assert!(err.to_string().contains("scores.jsonl"), "{err}");
        assert!(refuse_listed(&target, None).is_err());
        assert!(refuse_listed(&study.join("claims.json"), None).is_err());
        // The very bytes it recorded, or a file no ledger lists, may be written.
        assert!(refuse_listed(&target, Some(b"{}\n")).is_ok());
        assert!(refuse_listed(&model.join("mine.jsonl"), None).is_ok());
        assert!(refuse_listed(&other.join("scores.jsonl"), None).is_ok());
        // Bookkeeping files are refused whether or not a ledger lists them.
        assert!(refuse_listed(&model.join(LEDGER), None).is_err());
        std::fs::create_dir_all(other.join("checkpoints/step-000010")).unwrap();
        std::fs::write(other.join("config.toml"), b"x").unwrap();
        std::fs::write(other.join("metrics.jsonl"), b"{}").unwrap();
        std::fs::write(
            other.join("checkpoints/step-000010/model.safetensors"),
            b"w",
        )
        .unwrap();
        for f in [
            "config.toml",
            "metrics.jsonl",
            "checkpoints/step-000010/model.safetensors",
        ] {
            let err = refuse_listed(&other.join(f), None).unwrap_err().to_string();
            assert!(err.contains("keeps itself"), "{f}: {err}");
        }
        // A file of the same name elsewhere may be written; a new one among the checkpoints
        // may not (sixth pass, S12).
        assert!(refuse_listed(&dir.path().join("config.toml"), None).is_ok());
        assert!(refuse_listed(&other.join("checkpoints/step-000010/new.csv"), None).is_err());
        assert!(refuse_listed(&dir.path().join("plan.json"), None).is_ok());
        // A run's table is rewritten only by a table of its own shape.
        std::fs::write(other.join("scores.jsonl"), b"{\"step\":1,\"s\":0.5}\n").unwrap();
        std::fs::write(other.join("lengthgen.csv"), b"extra,accuracy\n0,1\n").unwrap();
        let own = b"{\"s\":0.7,\"step\":2}\n".as_slice();
        assert!(refuse_listed(&other.join("scores.jsonl"), Some(own)).is_ok());
        assert!(
            refuse_listed(&other.join("lengthgen.csv"), Some(b"extra,accuracy\n5,0\n")).is_ok()
        );
        for (f, bytes) in [
            ("scores.jsonl", b"extra,accuracy\n".as_slice()),
            ("scores.jsonl", b"<html>".as_slice()),
            ("lengthgen.csv", b"layer,mass\n1,2\n".as_slice()),
        ] {
            let err = refuse_listed(&other.join(f), Some(bytes))
                .unwrap_err()
                .to_string();
            assert!(err.contains("another kind of file"), "{f}: {err}");
        }
        assert!(refuse_listed(&other.join("lengthgen.csv"), None).is_ok());
    }

    #[test]
    fn a_listed_file_is_refused_to_other_writers_unless_the_bytes_are_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("eval")).unwrap();
        std::fs::write(d.join("eval/x.json"), b"{}").unwrap();
        // No ledger: anything may be written.
        refuse_owned(d, &d.join("eval/x.json"), None).unwrap();
        Ledger::finish(d, "eval/x.json", "test").unwrap();
        let err = refuse_owned(d, &d.join("eval/x.json"), None).unwrap_err();
        assert!(err.to_string().contains("--out"), "{err}");
        assert!(refuse_owned(d, &d.join("eval/x.json"), Some(b"{ }")).is_err());
        refuse_owned(d, &d.join("eval/x.json"), Some(b"{}")).unwrap();
        refuse_owned(d, &d.join("eval/y.json"), None).unwrap();
    }
}
