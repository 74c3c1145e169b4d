//! Up-front resource estimates. A command works out from its arguments what it will need
//! (peak memory, bytes written) before it allocates or writes anything, and is refused with
//! one line naming the estimate, its largest part and what this machine has available, instead
//! of allocating until the machine dies or filling the disk. `--force` skips the check.
//!
//! Estimates are sums of saturating products ([`bytes`]), so absurd arguments (a length of
//! 10^10, squared) give a huge estimate, never an overflow.

use std::fmt;
use std::path::{Path, PathBuf};

/// `factors` multiplied in 64 bits, saturating at `u64::MAX` (an estimate never wraps).
pub fn bytes(factors: &[usize]) -> u64 {
    factors
        .iter()
        .fold(1u64, |acc, &f| acc.saturating_mul(f as u64))
}

/// One part of an estimate: its size and what it is for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    bytes: u64,
    what: String,
}

/// The arithmetic rate a time estimate assumes, FLOP/s: above what ropelab reaches on 2 cores
/// (about 75 GFLOP/s in the fused kernel and the prefill), so an estimate is a lower bound of
/// the real time.
pub const ASSUMED_FLOPS: f64 = 2e11;

/// Estimated times above this (10 minutes) are said before the work starts
/// ([`Need::long_note`]).
pub const NOTE_SECONDS: f64 = 600.0;

/// The longest a command may be estimated to run before it is refused (`--force` runs it):
/// 24 hours at [`ASSUMED_FLOPS`].
pub const TIME_LIMIT_SECONDS: f64 = 24.0 * 3600.0;

/// What a command needs: peak memory, bytes written to disk and arithmetic (for a time
/// estimate), each a sum of named parts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Need {
    memory: Vec<Part>,
    disk: Vec<Part>,
    disk_at: Option<PathBuf>,
    compute: Vec<Part>,
}

impl Need {
    /// Nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `bytes` of memory for `what` ("the attention pattern of one 100017-token sequence").
    pub fn memory(mut self, bytes: u64, what: impl Into<String>) -> Self {
        self.memory.push(Part {
            bytes,
            what: what.into(),
        });
        self
    }

    /// Adds `bytes` written under `at` for `what`.
    pub fn disk(mut self, at: &Path, bytes: u64, what: impl Into<String>) -> Self {
        self.disk_at.get_or_insert_with(|| at.to_owned());
        self.disk.push(Part {
            bytes,
            what: what.into(),
        });
        self
    }

    /// Adds `flops` floating-point operations for `what` ("the forward passes of 10^12
    /// sequences"): the time estimate is their sum at [`ASSUMED_FLOPS`].
    pub fn compute(mut self, flops: u64, what: impl Into<String>) -> Self {
        self.compute.push(Part {
            bytes: flops,
            what: what.into(),
        });
        self
    }

    /// This need followed by `next` (one stage after the other): the memory of the larger of
    /// the two (they do not hold it at once), the disk and the arithmetic of both.
    pub fn then(mut self, next: Need) -> Need {
        if next.memory_bytes() > self.memory_bytes() {
            self.memory = next.memory;
        }
        if self.disk_at.is_none() {
            self.disk_at = next.disk_at;
        }
        self.disk.extend(next.disk);
        self.compute.extend(next.compute);
        self
    }

    /// A note for a command whose estimated time exceeds [`NOTE_SECONDS`] but is allowed (at
    /// most [`TIME_LIMIT_SECONDS`]): how long it will take at least, and its largest part, so
    /// a long run is never started without a word.
    pub fn long_note(&self, command: &str) -> Option<String> {
        let seconds = self.seconds();
        (seconds > NOTE_SECONDS && seconds <= TIME_LIMIT_SECONDS).then(|| {
            format!(
                "note: {command} will take at least {} on {:.0} GFLOP/s ({})",
                duration(seconds),
                ASSUMED_FLOPS / 1e9,
                largest_flops(&self.compute)
            )
        })
    }

    /// The estimated time, seconds (a lower bound: see [`ASSUMED_FLOPS`]).
    pub fn seconds(&self) -> f64 {
        total(&self.compute) as f64 / ASSUMED_FLOPS
    }

    /// Total memory, bytes.
    pub fn memory_bytes(&self) -> u64 {
        total(&self.memory)
    }

    /// Total disk, bytes.
    pub fn disk_bytes(&self) -> u64 {
        total(&self.disk)
    }

    /// Checks the estimate against this machine ([`Available::of_machine`]); `force` skips it
    /// but for memory the process cannot have at all ([`most_memory`]: the machine's memory and
    /// swap, or its address-space limit), which no `--force` makes: refused rather than aborted
    /// by a failed allocation.
    pub fn check(&self, command: &str, force: bool) -> Result<(), ResourceError> {
        // Past all the process could have, no --force helps: said so at once (sixteenth pass,
        // B20), forced or not.
        if let Some(have) = most_memory() {
            if self.memory_bytes() > have {
                return Err(ResourceError {
                    command: command.to_owned(),
                    kind: Kind::Beyond,
                    need: self.memory_bytes(),
                    largest: largest(&self.memory),
                    available: have,
                    at: None,
                });
            }
        }
        if force {
            return Ok(());
        }
        self.check_against(command, &Available::of_machine(self.disk_at.as_deref()))
    }

    /// Checks the estimate against `available`: refused when the memory or the disk it needs
    /// exceeds what is available (an unknown amount is not checked).
    pub fn check_against(&self, command: &str, available: &Available) -> Result<(), ResourceError> {
        let refuse = |kind: Kind, parts: &[Part], have: u64| ResourceError {
            command: command.to_owned(),
            kind,
            need: total(parts),
            largest: largest(parts),
            available: have,
            at: self.disk_at.clone(),
        };
        if let Some(have) = available.memory {
            if self.memory_bytes() > have {
                return Err(refuse(Kind::Memory, &self.memory, have));
            }
        }
        if let Some(have) = available.disk {
            if self.disk_bytes() > have {
                return Err(refuse(Kind::Disk, &self.disk, have));
            }
        }
        if self.seconds() > TIME_LIMIT_SECONDS {
            return Err(ResourceError {
                command: command.to_owned(),
                kind: Kind::Time,
                need: total(&self.compute),
                largest: largest_flops(&self.compute),
                available: 0,
                at: None,
            });
        }
        Ok(())
    }
}

fn total(parts: &[Part]) -> u64 {
    parts
        .iter()
        .fold(0u64, |acc, p| acc.saturating_add(p.bytes))
}

fn largest_flops(parts: &[Part]) -> String {
    parts
        .iter()
        .max_by_key(|p| p.bytes)
        .map(|p| {
            // A count past u64 is held at its largest value: said as a floor.
            let more = if p.bytes == u64::MAX {
                "more than "
            } else {
                ""
            };
            format!("{more}{:.1e} FLOP for {}", p.bytes as f64, p.what)
        })
        .unwrap_or_default()
}

fn largest(parts: &[Part]) -> String {
    parts
        .iter()
        .max_by_key(|p| p.bytes)
        .map(|p| format!("{} for {}", Size(p.bytes), p.what))
        .unwrap_or_default()
}

/// What this machine has free.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Available {
    /// Memory available to a new process, bytes (`None`: unknown, not checked).
    pub memory: Option<u64>,
    /// Free disk space where the output goes, bytes (`None`: unknown, not checked).
    pub disk: Option<u64>,
}

impl Available {
    /// Linux's `MemAvailable` and the free space of the file system holding `disk_at` (its
    /// nearest existing ancestor, as the output folder may not exist yet).
    pub fn of_machine(disk_at: Option<&Path>) -> Self {
        Self {
            memory: available_memory(),
            disk: disk_at.and_then(available_disk),
        }
    }
}

/// Memory this process may still take: Linux's `/proc/meminfo` `MemAvailable`, or less where
/// the process's address space is limited (`ulimit -v`: the limit less what it has mapped
/// already), so a command under such a limit is refused up front, not aborted by a failed
/// allocation (seventh pass, R7); `None` where neither can be read.
pub fn available_memory() -> Option<u64> {
    let machine = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib.saturating_mul(1024))
        });
    match (machine, address_space_left()) {
        (Some(m), Some(a)) => Some(m.min(a)),
        (m, a) => m.or(a),
    }
}

/// The most memory this process could ever take: Linux's `MemTotal` plus `SwapTotal`, or less
/// under an address-space limit; `None` where neither can be read.
pub fn most_memory() -> Option<u64> {
    let machine = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let kib = |key: &str| -> Option<u64> {
                let line = info.lines().find(|l| l.starts_with(key))?;
                line.split_whitespace().nth(1)?.parse().ok()
            };
            Some(kib("MemTotal:")?.saturating_add(kib("SwapTotal:").unwrap_or(0)) * 1024)
        });
    match (machine, address_space_left()) {
        (Some(m), Some(a)) => Some(m.min(a)),
        (m, a) => m.or(a),
    }
}

/// The address space this process may still map under its soft limit (`/proc/self/limits`
/// "Max address space" less `/proc/self/status` `VmSize`); `None` when unlimited or unknown.
fn address_space_left() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max address space"))?;
    let soft: u64 = line
        .trim_start_matches("Max address space")
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let mapped_kib: u64 = status
        .lines()
        .find(|l| l.starts_with("VmSize:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(soft.saturating_sub(mapped_kib.saturating_mul(1024)))
}

/// Free space, for an unprivileged user, of the file system holding `path` or its nearest
/// existing ancestor (`None` where it cannot be read).
pub fn available_disk(path: &Path) -> Option<u64> {
    let absolute = std::path::absolute(path).ok()?;
    let existing = absolute.ancestors().find(|p| p.exists())?;
    free_space(existing)
}

#[cfg(unix)]
fn free_space(path: &Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(path).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

#[cfg(not(unix))]
fn free_space(_path: &Path) -> Option<u64> {
    None
}

/// Which resource an estimate exceeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Peak memory.
    Memory,
    /// Disk space.
    Disk,
    /// Running time (arithmetic at [`ASSUMED_FLOPS`] against [`TIME_LIMIT_SECONDS`]).
    Time,
    /// Memory past all the process could ever have (checked under `--force` too).
    Beyond,
}

/// A command refused up front: it would need more memory or disk than is available.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct ResourceError {
    /// The command, as the user would name it (`eval --extra 100000`).
    pub command: String,
    /// Memory or disk.
    pub kind: Kind,
    /// The estimate, bytes.
    pub need: u64,
    /// Its largest part, described.
    pub largest: String,
    /// What is available, bytes.
    pub available: u64,
    /// Where the output goes (disk).
    pub at: Option<PathBuf>,
}

impl ResourceError {
    fn message(&self) -> String {
        if self.kind == Kind::Time {
            return format!(
                "{} would take at least {} of computing ({}, at an assumed {:.0} GFLOP/s), \
                 beyond the {} hours one command may be estimated to run; make it smaller, or \
                 pass --force to run it anyway",
                self.command,
                duration(self.need as f64 / ASSUMED_FLOPS),
                self.largest,
                ASSUMED_FLOPS / 1e9,
                TIME_LIMIT_SECONDS / 3600.0
            );
        }
        if self.kind == Kind::Beyond {
            return format!(
                "{} would need about {} of memory ({}), more than this process can have at all \
                 ({}: the machine's memory and swap, or its address-space limit); --force \
                 cannot make it fit: make it smaller",
                self.command,
                Size(self.need),
                self.largest,
                Size(self.available),
            );
        }
        let (what, have) = match (self.kind, &self.at) {
            (Kind::Memory, _) => ("of memory", "available".to_owned()),
            (Kind::Disk, Some(at)) => ("of disk", format!("free at {}", at.display())),
            (Kind::Disk, None) => ("of disk", "free".to_owned()),
            (Kind::Time | Kind::Beyond, _) => ("of time", String::new()),
        };
        format!(
            "{} would need about {} {what} ({}), but {} is {have}; \
             make it smaller, or pass --force to try anyway",
            self.command,
            Size(self.need),
            self.largest,
            Size(self.available),
        )
    }
}

/// Seconds for people: `40 s`, `3.2 hours`, `12.5 days`, `2.9 years`, `3.1e6 years`.
fn duration(seconds: f64) -> String {
    if seconds < 3600.0 {
        format!("{seconds:.0} s")
    } else if seconds < 2.0 * 86_400.0 {
        format!("{:.1} hours", seconds / 3600.0)
    } else if seconds < 2.0 * 365.0 * 86_400.0 {
        format!("{:.1} days", seconds / 86_400.0)
    } else if seconds < 1000.0 * 365.0 * 86_400.0 {
        format!("{:.1} years", seconds / (365.0 * 86_400.0))
    } else {
        format!("{:.1e} years", seconds / (365.0 * 86_400.0))
    }
}

/// A byte count for people: `80.0 GB`, `512.0 MB`, `3.1 kB`, `12 B` (decimal units).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, f64); 6] = [
            ("EB", 1e18),
            ("PB", 1e15),
            ("TB", 1e12),
            ("GB", 1e9),
            ("MB", 1e6),
            ("kB", 1e3),
        ];
        // A count that saturated is no size anyone can have: said as such, not as the
        // 18.4 EB it stopped at (twenty-fourth pass, U3).
        if self.0 == u64::MAX {
            return write!(f, "more than 18 EB (beyond what can be counted)");
        }
        let b = self.0 as f64;
        match UNITS.iter().find(|(_, scale)| b >= *scale) {
            Some((unit, scale)) => write!(f, "{:.1} {unit}", b / scale),
            None => write!(f, "{} B", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_in_sequence_hold_the_larger_memory_and_add_the_rest() {
        let at = Path::new("out");
        let a = Need::new().memory(10, "a").disk(at, 5, "a").compute(7, "a");
        let b = Need::new()
            .memory(30, "b")
            .memory(2, "b2")
            .disk(at, 1, "b")
            .compute(3, "b");
        let both = a.clone().then(b.clone());
        assert_eq!(both.memory_bytes(), 32);
        assert_eq!(both.disk_bytes(), 6);
        assert_eq!(both.seconds(), 10.0 / ASSUMED_FLOPS);
        assert_eq!(b.then(a).memory_bytes(), 32);
    }

    #[test]
    fn durations_read_as_people_count_them() {
        let year = 365.0 * 86_400.0;
        assert_eq!(duration(40.0), "40 s");
        assert_eq!(duration(3.0 * 3600.0), "3.0 hours");
        assert_eq!(duration(12.5 * 86_400.0), "12.5 days");
        // Years in plain digits up to a thousand (eleventh pass: "2.9e0 years").
        assert_eq!(duration(2.9 * year), "2.9 years");
        assert_eq!(duration(3.1e6 * year), "3.1e6 years");
    }

    #[test]
    fn a_saturated_count_is_said_as_a_floor() {
        let need = Need::new().compute(u64::MAX, "steps");
        assert_eq!(
            largest_flops(&need.compute),
            "more than 1.8e19 FLOP for steps"
        );
        let need = Need::new().compute(2_000, "steps");
        assert_eq!(largest_flops(&need.compute), "2.0e3 FLOP for steps");
    }

    #[test]
    fn products_saturate_instead_of_wrapping() {
        assert_eq!(bytes(&[4, 3, 2]), 24);
        assert_eq!(bytes(&[]), 1);
        let length = 10_000_000_000usize;
        assert_eq!(bytes(&[4, 8, length, length]), u64::MAX);
        let need = Need::new().memory(u64::MAX, "a").memory(5, "b");
        assert_eq!(need.memory_bytes(), u64::MAX);
    }

    #[test]
    fn sizes_print_in_decimal_units() {
        assert_eq!(Size(12).to_string(), "12 B");
        assert_eq!(Size(3_100).to_string(), "3.1 kB");
        assert_eq!(Size(80_027_202_312).to_string(), "80.0 GB");
        assert_eq!(
            Size(u64::MAX).to_string(),
            "more than 18 EB (beyond what can be counted)"
        );
        assert_eq!(Size(u64::MAX - 1).to_string(), "18.4 EB");
    }

    #[test]
    fn an_estimate_over_the_machine_is_refused_naming_both_numbers() {
        let need = Need::new()
            .memory(80_000_000_000, "one forward pass over 100017 tokens")
            .memory(1_000_000, "the model");
        let machine = Available {
            memory: Some(23_000_000_000),
            disk: Some(1 << 40),
        };
        let err = need
            .check_against("eval --extra 100000", &machine)
            .unwrap_err();
        assert_eq!(err.kind, Kind::Memory);
        let line = err.to_string();
        assert!(line.starts_with("eval --extra 100000 would need about 80.0 GB of memory"));
        assert!(line.contains("80.0 GB for one forward pass over 100017 tokens"));
        assert!(line.contains("23.0 GB is available"));
        assert!(line.contains("--force"));
        assert!(!line.contains('\n'));

        // Within the machine, or unknown, passes.
        let small = Need::new().memory(1 << 20, "x");
        assert!(small.check_against("c", &machine).is_ok());
        assert!(need.check_against("c", &Available::default()).is_ok());
        // Forced, only memory past all the process could have is refused.
        assert!(small.check("c", true).is_ok());
        let beyond = Need::new().memory(u64::MAX / 2, "x");
        let err = beyond.check("c", true).unwrap_err();
        assert_eq!(err.kind, Kind::Beyond);
        assert!(err.to_string().contains("--force cannot make it fit"));
    }

    #[test]
    fn disk_estimates_name_the_folder() {
        let need = Need::new().disk(
            Path::new("out/data.jsonl"),
            450_000_000_000,
            "10^10 samples",
        );
        let machine = Available {
            memory: Some(1 << 40),
            disk: Some(60_000_000_000),
        };
        let err = need.check_against("gen", &machine).unwrap_err();
        assert_eq!(err.kind, Kind::Disk);
        assert!(err.to_string().contains("450.0 GB of disk"));
        assert!(err
            .to_string()
            .contains("60.0 GB is free at out/data.jsonl"));
    }

    #[test]
    fn this_machine_reports_memory_and_disk() {
        // Linux CI machines have /proc/meminfo and a file system under the working directory.
        if cfg!(target_os = "linux") {
            assert!(available_memory().is_some_and(|m| m > 0));
            let free = available_disk(Path::new("no/such/folder/yet/file.txt"));
            assert!(free.is_some_and(|d| d > 0));
        }
    }
}
