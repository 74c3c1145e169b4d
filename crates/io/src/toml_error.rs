//! TOML errors on one line with their place: `line L, column C: [section] key: message`.

/// Where `err` happened in `text` and what it is, on one line (no source snippet): the line and
/// column, the section and key of that line when it is a `key = value` line, and the message.
pub fn describe(text: &str, err: &toml::de::Error) -> String {
    let message = shortened(&err.message().trim_end_matches('\n').replace('\n', " "));
    let Some(span) = err.span() else {
        return message;
    };
    let mut start = span.start.min(text.len());
    // A tagged table's error names its key ([`tagged`]) but is placed at the table's header:
    // place it at the key's line instead (nineteenth pass, U2).
    if let Some(key) = message
        .strip_prefix("key `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(key, _)| key)
    {
        if let Some(at) = key_line(text, start, key) {
            start = at;
        }
    }
    let message = message
        .strip_prefix("key `")
        .and_then(|rest| rest.split_once("`: "))
        .map_or(message.clone(), |(_, m)| m.to_owned());
    let before = &text[..start];
    let line_no = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = text[line_start..start].chars().count() + 1;
    let line = text[line_start..].lines().next().unwrap_or_default();
    // The section the place lies in: its own line when that is a header (a table missing a
    // field is placed at it), else the nearest header above.
    let header = |l: &str| l.starts_with('[') && l.ends_with(']');
    let section = Some(line.trim())
        .filter(|l| header(l))
        .or_else(|| before.lines().rev().map(str::trim).find(|l| header(l)));
    let key = line
        .split_once('=')
        .map(|(k, _)| k.trim())
        .filter(|k| !k.is_empty() && !k.starts_with('['));
    let place = match (section, key) {
        (Some(s), Some(k)) => format!("{s} {k}: "),
        (None, Some(k)) => format!("{k}: "),
        (Some(s), None) => format!("{s}: "),
        (None, None) => String::new(),
    };
    format!("line {line_no}, column {column}: {place}{message}")
}

/// `message` with its middle cut when it is long (a 20,000-character string value echoed
/// whole would fill the terminal; nineteenth pass, U4).
fn shortened(message: &str) -> String {
    const KEEP: usize = 100;
    let chars: Vec<char> = message.chars().collect();
    if chars.len() <= 3 * KEEP {
        return message.to_owned();
    }
    let head: String = chars[..KEEP].iter().collect();
    let tail: String = chars[chars.len() - KEEP..].iter().collect();
    format!(
        "{head}... ({} characters cut) ...{tail}",
        chars.len() - 2 * KEEP
    )
}

/// The byte offset of the line `key = ...` in the table whose header starts at `header` in
/// `text` (before the next header), if there is one.
fn key_line(text: &str, header: usize, key: &str) -> Option<usize> {
    let mut offset = header + text[header..].find('\n')? + 1;
    for line in text[offset..].split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            return None;
        }
        if trimmed
            .split_once('=')
            .is_some_and(|(k, _)| k.trim().trim_matches('"') == key)
        {
            return Some(offset + (line.len() - trimmed.len()));
        }
        offset += line.len();
    }
    None
}

/// Deserializes `T`, an internally tagged enum (`kind = "..."` and the variant's keys), through
/// a TOML table so that its errors name their key: serde buffers a tagged enum's fields and
/// loses the key of a value of the wrong type or range, so the key at fault is found by taking
/// each one out in turn (the one whose absence turns the error into "missing field" or into
/// none). The error reads ``key `K`: message``, which [`describe`] places at the key's line.
pub fn tagged<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error;
    let table = <toml::Table as serde::Deserialize>::deserialize(d)?;
    tagged_table(&table).map_err(D::Error::custom)
}

/// [`tagged`] of each table of a list (`[[model.layer_positions]]`); an error names the entry.
pub fn tagged_list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error;
    let tables = <Vec<toml::Table> as serde::Deserialize>::deserialize(d)?;
    tables
        .iter()
        .enumerate()
        .map(|(i, t)| {
            tagged_table(t).map_err(|e| D::Error::custom(format!("entry {}: {e}", i + 1)))
        })
        .collect()
}

fn tagged_table<T: serde::de::DeserializeOwned>(table: &toml::Table) -> Result<T, String> {
    let err = match T::deserialize(table.clone()) {
        Ok(value) => return Ok(value),
        Err(err) => err.message().trim_end().to_owned(),
    };
    if !(err.starts_with("invalid value") || err.starts_with("invalid type")) {
        return Err(err);
    }
    let culprit = table.keys().filter(|k| *k != "kind").find(|key| {
        let mut rest = table.clone();
        rest.remove(*key);
        match T::deserialize(rest) {
            Ok(_) => true,
            Err(e) => e.message().contains(&format!("missing field `{key}`")),
        }
    });
    Err(match culprit {
        Some(key) => format!("key `{key}`: {err}"),
        None => err,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Model {
        n_layers: usize,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Config {
        name: String,
        model: Model,
    }

    #[test]
    fn a_missing_field_names_its_table() {
        let text = "name = \"x\"\n\n[model]\nwidth = 3\n";
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Wide {
            width: usize,
            n_layers: usize,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Outer {
            name: String,
            model: Wide,
        }
        let err = toml::from_str::<Outer>(text).unwrap_err();
        let line = describe(text, &err);
        assert!(
            line.contains("[model]") && line.contains("missing field `n_layers`"),
            "{line}"
        );
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
    #[allow(dead_code)]
    enum Encoding {
        Rope { base: f64, rotary_dim: usize },
        None,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct WithEncoding {
        name: String,
        #[serde(deserialize_with = "tagged")]
        position: Encoding,
    }

    /// A bad value inside a tagged table is placed at its key's line and names the key, not
    /// the table's header alone (nineteenth pass, U2); a long value is cut (U4).
    #[test]
    fn a_tagged_tables_error_names_its_key_and_line() {
        let text = "name = \"x\"\n\n[position]\nkind = \"rope\"\nbase = 1.0\n\nrotary_dim = -1\n";
        let err = toml::from_str::<WithEncoding>(text).unwrap_err();
        let line = describe(text, &err);
        assert!(
            line.starts_with("line 7, column 1: [position] rotary_dim: invalid value"),
            "{line}"
        );
        let ok = text.replace("-1", "4");
        let parsed = toml::from_str::<WithEncoding>(&ok).unwrap();
        assert!(matches!(
            parsed.position,
            Encoding::Rope { rotary_dim: 4, .. }
        ));
        let unknown = ok.replace("base = 1.0", "base = 1.0\nfoo = 2");
        let line = describe(
            &unknown,
            &toml::from_str::<WithEncoding>(&unknown).unwrap_err(),
        );
        assert!(line.contains("unknown field `foo`"), "{line}");
        let long = text.replace("-1", &format!("\"{}\"", "x".repeat(20_000)));
        let line = describe(&long, &toml::from_str::<WithEncoding>(&long).unwrap_err());
        assert!(
            line.len() < 400 && line.contains("rotary_dim") && line.contains("characters cut"),
            "{line}"
        );
    }

    #[test]
    fn errors_name_the_line_the_section_and_the_key() {
        let text = "name = \"x\"\n\n[model]\nn_layers = \"two\"\n";
        let err = toml::from_str::<Config>(text).unwrap_err();
        let line = describe(text, &err);
        assert!(
            line.starts_with("line 4, column 12: [model] n_layers: invalid type"),
            "{line}"
        );
        assert!(!line.contains('\n'), "{line}");
        let text = "name = \n";
        let err = toml::from_str::<Config>(text).unwrap_err();
        assert!(
            describe(text, &err).starts_with("line 1,"),
            "{}",
            describe(text, &err)
        );
    }
}
