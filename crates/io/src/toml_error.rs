//! TOML errors on one line with their place: `line L, column C: [section] key: message`.

/// Where `err` happened in `text` and what it is, on one line (no source snippet): the line and
/// column, the section and key of that line when it is a `key = value` line, and the message.
pub fn describe(text: &str, err: &toml::de::Error) -> String {
    let message = err.message().trim_end_matches('\n').replace('\n', " ");
    let Some(span) = err.span() else {
        return message;
    };
    let start = span.start.min(text.len());
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
