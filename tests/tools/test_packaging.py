"""The wheel installs under magpie_tts only: never bare `engine`/`daemon` in site-packages."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest

from ..harness import REPO

pytestmark = pytest.mark.slow  # builds a wheel


def test_wheel_layout(tmp_path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            str(REPO),
            "-w",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("magpie_tts-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"magpie_tts"}
    # Every source package is in the wheel (pyproject lists them one by one).
    packages = [
        p.parent
        for top in ("engine", "daemon", "tools")
        for p in REPO.glob(f"{top}/**/__init__.py")
    ]
    assert len(packages) >= 3
    for package in packages:
        assert f"magpie_tts/{package.relative_to(REPO).as_posix()}/__init__.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert (
        "magpie-tts = magpie_tts.tools.cli:main"
        in zipfile.ZipFile(wheel).read(entry_points).decode()
    )
