"""Shared fixtures: the `ropelab` binary (built by `cargo build --release`, or $ROPELAB_BIN)
and one small finished study made with it."""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures" / "rope_models"


@pytest.fixture(scope="session")
def ropelab_bin():
    path = Path(os.environ.get("ROPELAB_BIN", REPO / "target" / "release" / "ropelab"))
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: run `cargo build --release` first")
    return path


@pytest.fixture(scope="session")
def run_ropelab(ropelab_bin):
    def run(*args):
        out = subprocess.run([str(ropelab_bin), *map(str, args)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout

    return run


@pytest.fixture(scope="session")
def study(tmp_path_factory, run_ropelab):
    """A finished small study (tests/small_study.toml): seed 3, number and letter models."""
    out = tmp_path_factory.mktemp("study") / "small"
    run_ropelab("reproduce", "--config", Path(__file__).parent / "small_study.toml", "--out", out)
    return out
