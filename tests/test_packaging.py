"""What differs between a checkout and an installed wheel, checked from the checkout: the version the command
reports, and where `capture` writes. tests/test_wheel.py runs the installed wheel itself."""

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from a2a_bridge.capture import recorder

ROOT = Path(__file__).resolve().parents[1]


def test_version_is_the_installed_distributions() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "a2a_bridge", "--version"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"a2a-bridge {importlib.metadata.version('a2a-bridge')}"


def test_capture_rerecords_capture_out_in_a_checkout() -> None:
    assert recorder.in_checkout()
    assert recorder.default_out() == ROOT / "capture" / "out" == recorder.OUT


def test_capture_writes_into_the_current_folder_when_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(recorder, "OUT", tmp_path / "site-packages" / "a2a_bridge" / "capture" / "out")
    assert not recorder.in_checkout()
    assert recorder.default_out() == Path("capture-out")
    assert not recorder.default_out().is_absolute()
