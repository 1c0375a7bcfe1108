"""Fingerprints are the same in every process, on every Python and in any dict order.

Each interpreter (CPython 3.11, 3.12 and 3.13, found as tests/support/toolchain.py finds
them) runs kiln.catalog.fingerprint in a child process of its own, with its own hash seed,
over the same revisions rebuilt with every dict's keys in a shuffled order, and prints the
fingerprints; all must agree with this process's. So must the fingerprint served for a tool
with packages (fingerprint.served_tool), over the digest of what its bundle resolved to, made
there from the same lock listed in a shuffled order (kiln.bundles.resolved).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import packaging
import pytest
import rfc8785

from kiln.bundles.resolved import described
from kiln.catalog import fingerprint
from kiln.catalog.model import Revision, Tool
from support import toolchain

FUNCTIONS = Path(__file__).resolve().parents[3] / "functions"
PYTHONS = ("3.11", "3.12", "3.13")

# Rebuilds each revision with shuffled dicts (seeded by argv[1]) and prints its fingerprint.
DRIVER = """
import json, random, sys
from kiln.catalog import fingerprint
from kiln.catalog.model import Revision

shuffle = random.Random(int(sys.argv[1]))

def turned(value):
    if isinstance(value, dict):
        keys = list(value)
        shuffle.shuffle(keys)
        return {k: turned(value[k]) for k in keys}
    if isinstance(value, list):
        return [turned(v) for v in value]
    return value

from kiln.bundles.resolved import described
from kiln.catalog.model import Tool

revisions, lock = json.load(sys.stdin)
lock = [turned(package) for package in lock]
shuffle.shuffle(lock)  # installers list a lock in their own order
digest = described("python", lock)["resolved_sha256"]
out, served = [], []
for name, data in revisions:
    data = turned(data)
    for key in ("requirements", "secrets", "tags", "calls"):
        data[key] = tuple(data[key])
    revision = Revision(**data)
    out.append(fingerprint.of(name, revision))
    tool = Tool("t", name, True, revision, "", "", packages={data["bundle_id"]: digest})
    served.append(fingerprint.served_tool(tool))
print(json.dumps({"python": sys.version.split()[0], "fingerprints": out, "served": served}))
"""
# What a build of add_vat's requirements installed (names as installers spell them).
LOCK = [
    {"name": "Humanize", "version": "4.9.0", "sha256": "1" * 64},
    {"name": "httpx", "version": "0.27.2", "sha256": "2" * 64},
    {"name": "Kiln_Fixture.Tiny", "version": "1.0", "sha256": "3" * 64},
    {"name": "anyio", "version": "4.6.0"},
]

REVISIONS = [
    (
        "add_vat",
        Revision(
            tool_id="t1",
            number=1,
            description='Add UK VAT to a net amount: £, €, 日本語, emoji 🧾, \u2028 and "quotes"',
            language="python",
            code_key="code/x.py",
            code_sha256="a" * 64,
            requirements=("humanize==4.9.0", "httpx>=0.27"),
            input_schema={
                "type": "object",
                "properties": {
                    "net": {"type": "number", "minimum": 0, "maximum": 1e21, "multipleOf": 0.01},
                    "rate": {"type": "number", "default": 0.2, "examples": [1e-7, -0.0, 5e-324]},
                    "big": {"type": "integer", "maximum": 2**60, "minimum": -(2**53) + 1},
                    "z": {"enum": ["b", "a", "ä", "A", "\U0001f600", "\ufb33"]},
                },
                "required": ["net"],
                "additionalProperties": False,
            },
            output_schema={"type": "object", "properties": {"gross": {"type": "number"}}},
            title="Add VAT",
            annotations={"readOnlyHint": True, "openWorldHint": False, "idempotentHint": True},
            timeout_seconds=12.5,
            bundle_id="b" * 32,
            created_at="2026-12-04T10:00:00.000Z",
            files={"data/rates.json": "c" * 64, "README.md": "d" * 64, "é.txt": "e" * 64},
            secrets=("TOKEN",),
            task="optional",
            calls=("fx_rate",),
        ),
    ),
    (
        "bare",
        Revision(
            tool_id="t2",
            number=7,
            description="d",
            language="node",
            code_key="code/y.js",
            code_sha256="f" * 64,
            requirements=(),
            input_schema={"type": "object", "properties": {}, "additionalProperties": False},
            output_schema=None,
            title=None,
            annotations=None,
            timeout_seconds=30.0,
            bundle_id=None,
            created_at="2026-12-04T10:00:00.000Z",
        ),
    ),
]


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rfc8785 and packaging alone, for interpreters that have no Kiln venv (pure Python)."""
    lib = tmp_path_factory.mktemp("lib")
    shutil.copytree(Path(rfc8785.__file__).parent, lib / "rfc8785")
    shutil.copytree(Path(packaging.__file__).parent, lib / "packaging")
    return lib


def _fingerprints_under(python: str, library: Path, seed: int) -> dict[str, object]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": f"{FUNCTIONS}{os.pathsep}{library}",
        "PYTHONHASHSEED": str(seed),
        "PYTHONNOUSERSITE": "1",
    }
    payload = json.dumps([[(name, asdict(rev)) for name, rev in REVISIONS], LOCK])
    done = subprocess.run(
        [python, "-s", "-c", DRIVER, str(seed)],
        input=payload,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{python} failed (exit {done.returncode}):\n{done.stderr}"
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("version", PYTHONS)
def test_each_python_gives_the_same_fingerprints_in_any_dict_order(
    version: str, library: Path
) -> None:
    python = toolchain.python(version)
    assert python is not None, toolchain.NO_PYTHON_313.replace("3.13", version).replace(
        "313", version.replace(".", "")
    )
    here = [fingerprint.of(name, rev) for name, rev in REVISIONS]
    digest = described("python", LOCK)["resolved_sha256"]
    served = [
        fingerprint.served_tool(
            Tool("t", name, True, rev, "", "", packages={rev.bundle_id: digest})
        )
        for name, rev in REVISIONS
    ]
    assert served[0] == fingerprint.of("add_vat", REVISIONS[0][1], digest) != here[0]
    assert served[1] == here[1]  # no packages: the same fingerprint
    for seed in (1, 2, 3):
        there = _fingerprints_under(python, library, seed)
        assert str(there["python"]).startswith(version + "."), there
        assert there["fingerprints"] == here, (
            f"CPython {there['python']} (dict order seed {seed}) disagrees with "
            f"{sys.version.split()[0]} in this process"
        )
        assert there["served"] == served, (
            f"CPython {there['python']} (seed {seed}) serves other fingerprints over what the "
            "bundle resolved to than this process"
        )
