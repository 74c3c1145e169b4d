//! A Slurm job array for a sweep: one array task per shard, each running
//! `ropelab sweep SPEC --out DIR --shard $SLURM_ARRAY_TASK_ID/N`. Finished jobs are skipped and
//! interrupted ones resume, so failed or pre-empted tasks are re-run by submitting again.

use std::path::Path;

/// How the array is submitted.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmOptions {
    /// Array tasks (shards); at most the number of jobs.
    pub shards: usize,
    /// Array tasks running at once (`--array=0-(N-1)%T`), if limited.
    pub throttle: Option<usize>,
    /// Partition.
    pub partition: Option<String>,
    /// Time limit per array task (Slurm syntax, e.g. `01:00:00`).
    pub time: Option<String>,
    /// CPUs per array task.
    pub cpus_per_task: usize,
    /// GPUs per array task.
    pub gpus: Option<usize>,
}

/// Checks a Slurm time limit (`--time`): `MINUTES`, `MINUTES:SECONDS`, `HOURS:MINUTES:SECONDS`,
/// `DAYS-HOURS`, `DAYS-HOURS:MINUTES`, `DAYS-HOURS:MINUTES:SECONDS`, or `UNLIMITED`/`INFINITE`
/// (sbatch's own forms), so the script's `#SBATCH --time` line is one sbatch accepts.
pub fn parse_time(s: &str) -> Result<String, String> {
    let bad = || {
        format!(
            "{s:?} is not a Slurm time limit (MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or \
             D-HH:MM:SS)"
        )
    };
    if ["unlimited", "infinite"].contains(&s.to_ascii_lowercase().as_str()) {
        return Ok(s.to_owned());
    }
    let number = |t: &str| !t.is_empty() && t.len() <= 9 && t.bytes().all(|b| b.is_ascii_digit());
    let (days, rest) = match s.split_once('-') {
        Some((d, rest)) => (Some(d), rest),
        None => (None, s),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let fine = days.is_none_or(number)
        && parts.iter().all(|p| number(p))
        && (1..=3).contains(&parts.len());
    if !fine {
        return Err(bad());
    }
    // Minutes and seconds below 60, and hours below 24 after a day count: sbatch would
    // silently carry 01:61:00 into 02:01:00, which is not what was typed.
    let value = |p: &str| p.parse::<u64>().unwrap_or(u64::MAX);
    let carried =
        parts.iter().skip(1).any(|p| value(p) >= 60) || (days.is_some() && value(parts[0]) >= 24);
    if carried {
        return Err(format!(
            "{s:?}: minutes and seconds must be below 60 and hours below 24 after a day count \
             (write 2-01:00:00, not 1-25:00:00)"
        ));
    }
    Ok(s.to_owned())
}

/// Checks a Slurm partition (`--partition`): one name, or several separated by commas, of
/// letters, digits, `_`, `-` and `.`.
pub fn parse_partition(s: &str) -> Result<String, String> {
    let name = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    };
    if s.split(',').all(name) {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?} is not a Slurm partition name (letters, digits, _, - and ., comma-separated)"
        ))
    }
}

/// Quotes `s` for a POSIX shell.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The `sbatch` script of a sweep named `name` whose spec is `spec`, writing into `out`,
/// calling the `ropelab` binary at `exe`.
pub fn script(name: &str, exe: &Path, spec: &Path, out: &Path, o: &SlurmOptions) -> String {
    let command = [
        exe.display().to_string(),
        "sweep".into(),
        spec.display().to_string(),
        "--out".into(),
        out.display().to_string(),
    ];
    array_script(name, &command, out, o)
}

/// The `sbatch` script of a job array named `name`: array task i runs `command` (the binary
/// and its arguments, each quoted) followed by `--shard i/N`, its log in `out/slurm/`. Every
/// experiment whose command takes `--shard` runs on Slurm through it.
pub fn array_script(name: &str, command: &[String], out: &Path, o: &SlurmOptions) -> String {
    let mut s = String::from("#!/bin/bash\n");
    s += &format!(
        "#SBATCH --job-name={}\n",
        name.replace(char::is_whitespace, "-")
    );
    let throttle = o.throttle.map(|t| format!("%{t}")).unwrap_or_default();
    s += &format!("#SBATCH --array=0-{}{throttle}\n", o.shards.max(1) - 1);
    s += &format!("#SBATCH --cpus-per-task={}\n", o.cpus_per_task.max(1));
    if let Some(p) = &o.partition {
        s += &format!("#SBATCH --partition={p}\n");
    }
    if let Some(t) = &o.time {
        s += &format!("#SBATCH --time={t}\n");
    }
    if let Some(g) = o.gpus {
        s += &format!("#SBATCH --gpus={g}\n");
    }
    let logs = out.join("slurm");
    s += &format!("#SBATCH --output={}/%A_%a.out\n", logs.display());
    s += "set -euo pipefail\n";
    s += &format!(
        "export RAYON_NUM_THREADS=\"${{SLURM_CPUS_PER_TASK:-{}}}\"\n",
        o.cpus_per_task.max(1)
    );
    let quoted: Vec<String> = command.iter().map(|a| quote(a)).collect();
    s += &format!(
        "exec {} --shard \"$SLURM_ARRAY_TASK_ID/{}\"\n",
        quoted.join(" "),
        o.shards.max(1)
    );
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn time_limits_and_partitions_in_sbatch_syntax_only() {
        for t in [
            "30",
            "30:00",
            "01:00:00",
            "2-0",
            "2-12:00",
            "1-00:00:00",
            "48:00:00",
            "90",
            "UNLIMITED",
        ] {
            assert_eq!(super::parse_time(t).as_deref(), Ok(t), "{t}");
        }
        for t in [
            "",
            "1h",
            "01:00:00:00",
            "1-",
            "-1",
            "a:b",
            "01:00\n#SBATCH --x",
            "1 -2",
            "01:61:00",
            "00:00:60",
            "10:75",
            "1-24",
            "1-25:00:00",
        ] {
            assert!(super::parse_time(t).is_err(), "{t:?} accepted");
        }
        for p in ["debug", "gpu,cpu", "a100_80g.x-1"] {
            assert_eq!(super::parse_partition(p).as_deref(), Ok(p), "{p}");
        }
        for p in ["", "a b", "a,", "x\n#SBATCH --mem=1", "a;b"] {
            assert!(super::parse_partition(p).is_err(), "{p:?} accepted");
        }
    }

    use super::*;

    #[test]
    fn the_script_runs_one_shard_per_array_task() {
        let o = SlurmOptions {
            shards: 4,
            throttle: Some(2),
            partition: Some("debug".into()),
            time: Some("00:10:00".into()),
            cpus_per_task: 2,
            gpus: None,
        };
        let s = script(
            "my sweep",
            Path::new("/opt/ropelab"),
            Path::new("sweep's.toml"),
            Path::new("out"),
            &o,
        );
        assert!(s.contains("#SBATCH --array=0-3%2\n"), "{s}");
        assert!(s.contains("#SBATCH --job-name=my-sweep\n"));
        assert!(s.contains("#SBATCH --partition=debug\n#SBATCH --time=00:10:00\n"));
        assert!(s.contains("--shard \"$SLURM_ARRAY_TASK_ID/4\""));
        assert!(s.contains(r"'sweep'\''s.toml'"), "{s}");
        assert!(!s.contains("--gpus"));
    }
}
