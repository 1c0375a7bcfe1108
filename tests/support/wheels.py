"""A local wheel folder for builds without PyPI: tiny pure-Python wheels of one name, at any
version, that uv and pip find there (`UV_FIND_LINKS`, `PIP_FIND_LINKS`, no index), so a range
can be made to resolve to another version between two builds."""

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

NAME = "kiln-fixture-tiny"


def tiny_wheel(folder: Path, version: str) -> str:
    """A pure-Python wheel of NAME at `version`; its sha256."""
    dist = f"kiln_fixture_tiny-{version}.dist-info"
    files = {
        "kiln_fixture_tiny.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: kiln-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        sha = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={sha.decode()},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    path = folder / f"kiln_fixture_tiny-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), text)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wheel_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A wheel folder under `tmp_path` that builds in this process use instead of an index."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    monkeypatch.setenv("UV_NO_INDEX", "1")
    monkeypatch.setenv("UV_FIND_LINKS", str(folder))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return folder
