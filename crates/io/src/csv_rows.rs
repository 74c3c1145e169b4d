//! CSV through the `csv` crate: rows are serde structs (one field per column, the header from
//! the field names), written whole and atomically, read back with errors that name the file
//! and the line.

use std::fmt;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::atomic::write_atomic;

/// A CSV that cannot be written or read: the file (or origin) and what is wrong.
#[derive(Debug)]
pub struct CsvError {
    /// The file (or a description of the source).
    pub origin: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for CsvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.origin, self.message)
    }
}

impl std::error::Error for CsvError {}

fn error(origin: &str, e: impl fmt::Display) -> CsvError {
    CsvError {
        origin: origin.to_owned(),
        message: e.to_string(),
    }
}

/// The CSV text of `rows`: a header line from the field names, then one line per row. No rows
/// give an empty text (serde knows the field names only from a value).
pub fn to_csv<T: Serialize>(rows: &[T]) -> Result<String, CsvError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in rows {
        w.serialize(r).map_err(|e| error("CSV rows", e))?;
    }
    let bytes = w.into_inner().map_err(|e| error("CSV rows", e))?;
    String::from_utf8(bytes).map_err(|e| error("CSV rows", e))
}

/// The CSV text of `rows` measured on checkpoint `step` of the run whose identity is `run`,
/// those two as the last columns (`step`, `run`) of every row: a run's table copied into
/// another run, or read after a later checkpoint, is told by them.
pub fn to_csv_stamped<T: Serialize>(
    rows: &[T],
    step: usize,
    run: &str,
) -> Result<String, CsvError> {
    let text = to_csv(rows)?;
    if text.is_empty() {
        return Ok(text);
    }
    let origin = "CSV rows";
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header = reader.headers().map_err(|e| error(origin, e))?.clone();
    header.push_field("step");
    header.push_field("run");
    w.write_record(&header).map_err(|e| error(origin, e))?;
    let step = step.to_string();
    for record in reader.records() {
        let mut record = record.map_err(|e| error(origin, e))?;
        record.push_field(&step);
        record.push_field(run);
        w.write_record(&record).map_err(|e| error(origin, e))?;
    }
    let bytes = w.into_inner().map_err(|e| error(origin, e))?;
    String::from_utf8(bytes).map_err(|e| error(origin, e))
}

/// The checkpoint and run one row of a table written by [`to_csv_stamped`] names (empty in
/// tables written before rows named them).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct Stamp {
    /// The checkpoint step measured (None when the table has no `step` column).
    #[serde(default)]
    pub step: Option<usize>,
    /// The run's identity (empty when the table has no `run` column).
    #[serde(default)]
    pub run: String,
}

/// Reads the rows of the CSV file `path` (the error names the file).
pub fn read_csv_file<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>, CsvError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| error(&origin, e))?;
    read_csv(&text, &origin)
}

/// Writes `rows` as CSV to `path`, atomically.
pub fn write_csv<T: Serialize>(path: &Path, rows: &[T]) -> Result<(), CsvError> {
    let origin = path.display().to_string();
    let text = to_csv(rows).map_err(|e| error(&origin, e.message))?;
    write_atomic(path, text.as_bytes()).map_err(|e| error(&origin, e))
}

/// Parses CSV `text` (with a header naming the row type's fields) into rows; `origin` (e.g.
/// the file) and the line of the first bad record are named in errors.
pub fn read_csv<T: DeserializeOwned>(text: &str, origin: &str) -> Result<Vec<T>, CsvError> {
    let mut r = csv::Reader::from_reader(text.as_bytes());
    r.deserialize()
        .map(|row| {
            row.map_err(|e| {
                let line = e
                    .position()
                    .map_or(String::new(), |p| format!("line {}: ", p.line()));
                error(origin, format!("{line}{e}"))
            })
        })
        .collect()
}

/// The CSV text of a table whose columns are only known at run time (e.g. one column per
/// head): a header and rows of cells, quoted where needed.
pub fn records_to_csv(header: &[String], rows: &[Vec<String>]) -> Result<String, CsvError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(header).map_err(|e| error("CSV rows", e))?;
    for r in rows {
        w.write_record(r).map_err(|e| error("CSV rows", e))?;
    }
    let bytes = w.into_inner().map_err(|e| error("CSV rows", e))?;
    String::from_utf8(bytes).map_err(|e| error("CSV rows", e))
}

/// The header and the rows of cells of CSV `text` (every row as long as the header); errors
/// name `origin` and the line.
pub fn csv_records(text: &str, origin: &str) -> Result<(Vec<String>, Vec<Vec<String>>), CsvError> {
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let header = r
        .headers()
        .map_err(|e| error(origin, format!("line 1: {e}")))?
        .iter()
        .map(str::to_owned)
        .collect();
    let mut rows = vec![];
    for record in r.records() {
        let record = record.map_err(|e| {
            let line = e
                .position()
                .map_or(String::new(), |p| format!("line {}: ", p.line()));
            error(origin, format!("{line}{e}"))
        })?;
        rows.push(record.iter().map(str::to_owned).collect());
    }
    Ok((header, rows))
}

/// Serializes an f64 as Rust's `{:e}` (shortest round-trip digits, scientific), for columns
/// that span many decades. Use with `#[serde(serialize_with = "ropelab_io::csv_rows::sci")]`.
pub fn sci<S: serde::Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{x:e}"))
}

/// Serializes a float as Rust's `{}` (shortest round-trip digits, never an exponent), the
/// format ropelab's CSVs have always used. Use with
/// `#[serde(serialize_with = "ropelab_io::csv_rows::display")]`.
pub fn display<T: fmt::Display, S: serde::Serializer>(x: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(x)
}

/// Serialises an optional value with its `Display` form, and `None` as an empty cell.
pub fn display_opt<T: fmt::Display, S: serde::Serializer>(
    x: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match x {
        Some(x) => s.collect_str(x),
        None => s.serialize_str(""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Row {
        n: usize,
        name: String,
        #[serde(serialize_with = "sci")]
        x: f64,
        missing: Option<usize>,
    }

    #[test]
    fn rows_round_trip_with_a_header() {
        let rows = vec![
            Row {
                n: 1,
                name: "a,b".into(),
                x: 0.00125,
                missing: None,
            },
            Row {
                n: 2,
                name: "c".into(),
                x: 3.0,
                missing: Some(4),
            },
        ];
        let text = to_csv(&rows).unwrap();
        assert_eq!(text, "n,name,x,missing\n1,\"a,b\",1.25e-3,\n2,c,3e0,4\n");
        assert_eq!(read_csv::<Row>(&text, "t.csv").unwrap(), rows);
    }

    #[test]
    fn a_bad_record_names_the_origin_and_line() {
        let err = read_csv::<Row>("n,name,x,missing\n1,a,0.5,\nx,b,1,\n", "t.csv").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("t.csv: line 3"), "{msg}");
    }

    #[test]
    fn stamped_rows_name_their_step_and_run_and_read_back_as_before() {
        #[derive(Serialize, serde::Deserialize, Debug, PartialEq)]
        struct R {
            a: usize,
            b: String,
        }
        let rows = vec![
            R {
                a: 1,
                b: "x,y".into(),
            },
            R {
                a: 2,
                b: "z".into(),
            },
        ];
        let text = to_csv_stamped(&rows, 40, "sha256:ab").unwrap();
        assert_eq!(
            text,
            "a,b,step,run\n1,\"x,y\",40,sha256:ab\n2,z,40,sha256:ab\n"
        );
        assert_eq!(read_csv::<R>(&text, "t").unwrap(), rows);
        let stamps = read_csv::<Stamp>(&text, "t").unwrap();
        assert_eq!(
            stamps[1],
            Stamp {
                step: Some(40),
                run: "sha256:ab".into()
            }
        );
        let old = read_csv::<Stamp>(&to_csv(&rows).unwrap(), "t").unwrap();
        assert_eq!(old[0], Stamp::default());
        assert_eq!(to_csv_stamped::<R>(&[], 1, "r").unwrap(), "");
    }

    #[test]
    fn write_csv_writes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        let rows = vec![Row {
            n: 7,
            name: "z".into(),
            x: 1e10,
            missing: None,
        }];
        write_csv(&path, &rows).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "n,name,x,missing\n7,z,1e10,\n"
        );
    }
}
