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
    /// Run even when the up-front estimate of memory, disk or time exceeds what this machine
    /// has available or the stated limit (every command estimates them from its arguments
    /// before it starts), and load checkpoints that have no manifest (unverified).
    #[arg(long, global = true)]
    force: bool,
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

/// A negative number given to a flag that takes none (a count, a size) reaches clap as an
/// unknown short flag ("unexpected argument '-1' found"): named here as the flag's value
/// instead (twentieth pass, F-U1). `args` is the command line.
fn negative_value(err: &clap::Error, args: &[String]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if err.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(unknown)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    let number = |v: &str| {
        v.strip_prefix('-').is_some_and(|rest| {
            rest.starts_with(|c: char| c.is_ascii_digit() || c == '.')
                || ["inf", "nan"]
                    .iter()
                    .any(|w| rest.to_ascii_lowercase().starts_with(w))
        })
    };
    let at = args
        .iter()
        .position(|a| a.starts_with(unknown.as_str()) && number(a))?;
    let flag = args[..at].last().filter(|f| f.starts_with("--"))?;
    Some(format!(
        "{flag} {}: a negative number is not a value {flag} takes (see --help)",
        args[at]
    ))
}

/// The error chain on one line: some causes (candle's, when RUST_BACKTRACE is set) append a
/// backtrace to their message, which is dropped here; the chain itself is kept.
fn error_line(err: &anyhow::Error) -> String {
    err.chain()
        .map(|cause| {
            cause
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned()
        })
        .filter(|line| !line.is_empty())
        .fold(Vec::<String>::new(), |mut parts, line| {
            // A cause that repeats its context adds nothing ("X: X").
            if !parts.last().is_some_and(|last| last.ends_with(&line)) {
                parts.push(line);
            }
            parts
        })
        .join(": ")
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
    // Ctrl-C / SIGTERM: remove the temporary files being written, then exit as interrupted.
    let _ = ctrlc::set_handler(|| {
        ropelab_io::atomic::remove_live_temporaries();
        std::process::exit(130);
    });
    // A reader that closed standard output (`ropelab train ... | head -1`) ends the command as
    // SIGPIPE would, quietly and with its temporary files removed, not with a panic's
    // backtrace: `println!` panics on a closed pipe.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to std") && message.contains("Broken pipe") {
            ropelab_io::atomic::remove_live_temporaries();
            std::process::exit(141);
        }
        default_hook(info);
    }));
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
            match negative_value(&err, &std::env::args().collect::<Vec<_>>()) {
                Some(line) => eprintln!("error: {line}"),
                None => eprintln!("{}", one_line(&err)),
            }
            return ExitCode::from(2);
        }
    };
    // `--force` also loads checkpoints that have no manifest (written before manifests).
    ropelab_io::allow_unsealed(cli.force);
    match cli.command.run(cli.force) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed stdout (`ropelab gen ... --out - | head`) is not a failure.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", error_line(&err));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    include!("../tests/common/list_flags.rs");

    /// Every flag of every command that takes a list (a value delimiter or repeats) is in
    /// `tests/common/list_flags.rs`, whose test checks that it refuses a value given twice.
    #[test]
    fn every_list_flag_is_tested_for_repeats() {
        use clap::CommandFactory;
        fn walk(cmd: &clap::Command, path: &str, found: &mut Vec<(String, String)>) {
            for arg in cmd.get_arguments() {
                let list = arg.get_value_delimiter().is_some()
                    || matches!(arg.get_action(), clap::ArgAction::Append);
                if let (true, Some(long)) = (list, arg.get_long()) {
                    found.push((path.to_owned(), format!("--{long}")));
                }
            }
            for sub in cmd.get_subcommands() {
                let name = match path {
                    "" => sub.get_name().to_owned(),
                    _ => format!("{path} {}", sub.get_name()),
                };
                walk(sub, &name, found);
            }
        }
        let mut found = vec![];
        walk(&Cli::command(), "", &mut found);
        found.sort();
        let mut listed: Vec<(String, String)> = LIST_FLAGS
            .iter()
            .map(|(c, f, _)| (c.to_string(), f.to_string()))
            .filter(|(c, f)| !PARSED_LISTS.contains(&(c.as_str(), f.as_str())))
            .collect();
        listed.sort();
        assert_eq!(
            found, listed,
            "the command tree's list flags and the tested ones"
        );
    }

    /// A cause whose message carries a backtrace (candle's, under RUST_BACKTRACE) and a cause
    /// that repeats its context both print as one short line.
    #[test]
    fn errors_print_on_one_line_without_backtraces() {
        let inner = anyhow::anyhow!("empty tensor for reduce\n   0: bt\n      at src/error.rs:260");
        let err = inner.context("tokenizer: bad prompt");
        assert_eq!(
            error_line(&err),
            "tokenizer: bad prompt: empty tensor for reduce"
        );
        let io = std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "Not a directory (os error 20)",
        );
        let err = anyhow::Error::new(io).context("Not a directory (os error 20)");
        assert_eq!(error_line(&err), "Not a directory (os error 20)");
    }
}
