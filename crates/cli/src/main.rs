//! `ropelab`: the command line of the lab. Each subcommand lives in `commands/` and only parses
//! arguments and calls the library crates.

mod commands;
mod output;

use std::process::ExitCode;

use clap::{error::ErrorKind, Parser};

use commands::Command;

/// ropelab: a lab for the mechanistic study of attention in rotary-position transformers.
///
/// Generate the positional (number) and symbolic (letter) multi-hop tasks, and run the study
/// end to end with `ropelab reproduce`.
#[derive(Debug, Parser)]
#[command(name = "ropelab", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Clap's multi-line error as one line: the message and its details, without the usage block.
fn one_line(err: &clap::Error) -> String {
    err.render()
        .to_string()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// glibc hands large freed buffers straight back to the kernel, so every training step
/// page-faults and zeroes them again (about 20% of CPU time: docs/model.md, "Speed"). Keep
/// buffers up to 32 MiB (glibc's maximum mmap threshold) on the heap and do not trim it.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called once before any threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

fn main() -> ExitCode {
    tune_allocator();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err)
            if matches!(
                err.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            eprintln!("{}", one_line(&err));
            return ExitCode::from(2);
        }
    };
    match cli.command.run() {
        Ok(()) => ExitCode::SUCCESS,
        // A closed stdout (`ropelab gen ... --out - | head`) is not a failure.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
