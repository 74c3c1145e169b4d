//! # ropelab-io
//!
//! The one home of how ropelab writes files and tables: every file is written to a temporary
//! name beside its target and renamed into place ([`atomic`]), every CSV goes through the `csv`
//! crate with serde rows ([`csv_rows`]), every terminal table through one printer ([`table`]),
//! a directory has one writer at a time ([`lock`]), long work reports progress through one trait
//! ([`progress`]), and a command's memory and disk are
//! estimated before it starts ([`resources`]), and what a study or sweep job measured into a
//! run directory is vouched for by its ledger ([`ledger`]).

pub mod atomic;
pub mod checksum;
pub mod csv_rows;
pub mod ledger;
pub mod lock;
pub mod progress;
pub mod resources;
pub mod table;
pub mod toml_error;

pub use atomic::{staging_dir_in, write_atomic, write_atomic_with, AtomicFile};
pub use checksum::{allow_unsealed, sha256_file, sha256_hex, Manifest};
pub use csv_rows::{
    csv_records, read_csv, read_csv_file, records_to_csv, to_csv, to_csv_stamped, write_csv,
    CsvError, Stamp,
};
pub use ledger::{
    owning_dir, refuse_listed, refuse_other_shape, refuse_owned, resolved, Expect, Ledger,
    Standing, LEDGER,
};
pub use lock::{DirLock, LockError};
pub use progress::{Progress, Quiet, Stage};
pub use resources::{Available, Need, ResourceError, Size};
pub use table::{Align, Table};
