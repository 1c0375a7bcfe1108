"""The Lambda package and the deps layer ship bytecode made by the target interpreter.

Lambda cannot write .pyc files into /var/task or /opt, so code shipped without them is
compiled again on every cold start. `sam build` runs functions/Makefile and
layers/deps/Makefile (BuildMethod: makefile), which compile with python3.13 in unchecked-hash
mode (a zip does not keep the sources' mtimes exactly, so timestamp-checked .pyc would be
ignored as stale). With KILN_E2E_BUILD pointing at a `sam build` output, the last test checks
that output itself.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cfnlint.decode import decode

from support import toolchain

ROOT = Path(__file__).resolve().parents[3]
# Found without HOME, and never pyenv's shim (it fails where 3.13 is not the selected version).
PYTHON_313 = toolchain.python("3.13")
HASH_BASED = 0b01  # PEP 552 flags: a hash-based .pyc ...
CHECK_SOURCE = 0b10  # ... whose source is checked on import (unchecked: not)


def template() -> dict[str, Any]:
    data, problems = decode(str(ROOT / "template.yaml"))
    assert not problems, problems
    return dict(data["Resources"])


# Every function of the template (a hand-kept list here missed RunnerFunction, and so did the
# Makefile's: `sam build` stopped at "No rule to make target 'build-RunnerFunction'").
FUNCTIONS = tuple(
    name for name, res in template().items() if res["Type"] == "AWS::Serverless::Function"
)


def make_targets(makefile: Path) -> set[str]:
    text = makefile.read_text()
    names = set(re.findall(r"^(build-[A-Za-z]+):", text, re.M))
    if "$(addprefix build-,$(FUNCTIONS))" in text:
        listed = re.search(r"^FUNCTIONS = (.+)$", text, re.M)
        assert listed is not None
        names |= {f"build-{name}" for name in listed.group(1).split()}
    return names


def missing_bytecode(tree: Path) -> list[str]:
    """Sources under `tree` without an unchecked-hash cpython-313 .pyc beside them."""
    missing = []
    for source in tree.rglob("*.py"):
        pyc = source.parent / "__pycache__" / f"{source.stem}.cpython-313.pyc"
        if not pyc.is_file():
            missing.append(f"{source}: no {pyc.name}")
            continue
        flags = int.from_bytes(pyc.read_bytes()[4:8], "little")
        if flags & HASH_BASED == 0 or flags & CHECK_SOURCE:
            missing.append(f"{source}: {pyc.name} is not unchecked-hash (flags {flags:#b})")
    return missing


def test_every_function_and_the_deps_layer_build_through_a_makefile_target() -> None:
    resources = template()
    for name in FUNCTIONS:
        assert resources[name]["Metadata"]["BuildMethod"] == "makefile", name
        assert resources[name]["Properties"].get("CodeUri", "functions/") == "functions/"
    assert resources["DepsLayer"]["Metadata"]["BuildMethod"] == "makefile"
    assert make_targets(ROOT / "functions" / "Makefile") >= {f"build-{n}" for n in FUNCTIONS}
    assert make_targets(ROOT / "layers" / "deps" / "Makefile") == {"build-DepsLayer"}


@pytest.mark.skipif(PYTHON_313 is None, reason=toolchain.NO_PYTHON_313)
def test_the_function_build_ships_unchecked_cpython_313_bytecode_for_every_module(
    tmp_path: Path,
) -> None:
    out = tmp_path / "McpFunction"
    subprocess.run(
        ["make", "-s", "build-McpFunction", f"ARTIFACTS_DIR={out}", f"PYTHON={PYTHON_313}"],
        cwd=ROOT / "functions",
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert (out / "kiln" / "lambda_handlers.py").is_file()
    assert not (out / "kiln" / "studio" / "web").exists()  # TypeScript sources stay out
    assert not (out / "kiln" / "cli").exists()  # the `kiln` command and kiln dev stay out
    assert not (out / "kiln" / "local").exists()
    assert missing_bytecode(out / "kiln") == []


def test_the_function_build_refuses_an_interpreter_other_than_3_13(tmp_path: Path) -> None:
    other = shutil.which("python3.11") or shutil.which("python3.12")
    if other is None:
        pytest.skip("needs a Python other than 3.13")
    done = subprocess.run(
        ["make", "-s", "build-WorkerFunction", f"ARTIFACTS_DIR={tmp_path}", f"PYTHON={other}"],
        cwd=ROOT / "functions",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "is not Python 3.13" in done.stderr
    assert not (tmp_path / "kiln").exists()


@pytest.mark.skipif(not os.environ.get("KILN_E2E_BUILD"), reason="set KILN_E2E_BUILD")
def test_the_sam_build_output_holds_cpython_313_bytecode_for_code_and_deps_layer() -> None:
    build = (ROOT / os.environ["KILN_E2E_BUILD"]).resolve()
    for name in FUNCTIONS:
        assert missing_bytecode(build / name / "kiln") == [], name
        assert not (build / name / "kiln" / "cli").exists(), name
        assert not (build / name / "kiln" / "local").exists(), name
    assert missing_bytecode(build / "DepsLayer" / "python") == []


def test_the_python_313_lookup_finds_the_same_interpreter_whatever_home_is(
    tmp_path: Path,
) -> None:
    """With another HOME the lookup fell back to pyenv's shim: the build test failed, and a
    skip said there was no 3.13 on a machine that has one."""
    code = "from support import toolchain; print(toolchain.python('3.13'))"
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT / "tests")}
    elsewhere = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True, check=False, timeout=120)  # fmt: skip
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert elsewhere.stdout.strip() == str(PYTHON_313)
    if PYTHON_313 is not None:
        assert "/shims/" not in PYTHON_313
