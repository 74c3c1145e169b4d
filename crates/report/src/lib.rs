//! # ropelab-report
//!
//! Figures and one self-contained HTML report of a run or study directory: every figure is
//! drawn by ropelab itself ([`chart`], with plotters and a bundled font) from the parsed rows
//! of the directory's files ([`figures`]: one function per figure), the attention viewer
//! ([`viewer`]) shows one test input's attention, and the page inlines every SVG, style and
//! script ([`html`]), so it opens anywhere, offline; [`languages`] draws the formal-language
//! experiment; [`types`] draws head types as grids. [`compose`] decides what a
//! directory's files allow.

pub mod bias;
pub mod canonical;
pub mod chart;
pub mod compose;
pub mod figures;
pub mod heads;
pub mod heatmap;
pub mod html;
pub mod languages;
pub mod offset;
pub mod pretrained;
pub mod sweep;
pub mod types;
pub mod viewer;

use std::path::{Path, PathBuf};

pub use compose::{plot, report, PlotKind};

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// An input file is malformed (named in the message).
    #[error("{0}")]
    Input(String),
}

impl ReportError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            source,
        }
    }

    pub(crate) fn from_display(e: impl std::fmt::Display) -> Self {
        Self::Input(e.to_string())
    }
}

/// Result of report functions.
pub type Result<T> = std::result::Result<T, ReportError>;
