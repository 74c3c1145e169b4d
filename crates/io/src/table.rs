//! The terminal table printer: a header and rows of cells, each column padded to its widest
//! cell and aligned left or right, separated by two spaces.

use std::fmt;

/// How a column's cells are aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text columns.
    Left,
    /// Numbers.
    Right,
}

/// A table for the terminal: build it with [`Table::new`] and [`Table::row`], print it with
/// `{}`.
#[derive(Debug, Clone)]
pub struct Table {
    titles: Vec<String>,
    aligns: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles and alignments.
    pub fn new(columns: &[(&str, Align)]) -> Self {
        Self {
            titles: columns.iter().map(|(t, _)| (*t).to_owned()).collect(),
            aligns: columns.iter().map(|(_, a)| *a).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (missing cells are blank, extra cells are dropped).
    pub fn row<I, S>(&mut self, cells: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut row: Vec<String> = cells.into_iter().map(Into::into).collect();
        row.resize(self.titles.len(), String::new());
        self.rows.push(row);
        self
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let widths: Vec<usize> = (0..self.titles.len())
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r[c].chars().count())
                    .chain([self.titles[c].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |f: &mut fmt::Formatter<'_>, cells: &[String]| -> fmt::Result {
            let mut out = String::new();
            for (c, cell) in cells.iter().enumerate() {
                if c > 0 {
                    out.push_str("  ");
                }
                let pad = widths[c] - cell.chars().count();
                match self.aligns[c] {
                    Align::Left => {
                        out.push_str(cell);
                        out.extend(std::iter::repeat_n(' ', pad));
                    }
                    Align::Right => {
                        out.extend(std::iter::repeat_n(' ', pad));
                        out.push_str(cell);
                    }
                }
            }
            writeln!(f, "{}", out.trim_end())
        };
        line(f, &self.titles)?;
        for r in &self.rows {
            line(f, r)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_padded_to_their_widest_cell() {
        let mut t = Table::new(&[("task", Align::Left), ("accuracy", Align::Right)]);
        t.row(["number", "0.5"]).row(["letter", "1.0000"]);
        assert_eq!(
            t.to_string(),
            "task    accuracy\nnumber       0.5\nletter    1.0000\n"
        );
        assert_eq!(t.len(), 2);
    }
}
