"""The script contract end to end: stdin in, the contract text out, for Python and Node."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

from kiln.runner import InvalidArgumentsError, contract_text
from support.runner import Harness
from support.runner import harness_fixture as harness_fixture


def test_seed_exit_7_example_gives_the_exact_text(harness: Harness) -> None:
    code = "import sys\nprint('failure details', file=sys.stderr)\nsys.exit(7)\n"
    assert harness.text(code) == "(no output)\n[stderr] failure details\n[exit 7]"
    harness.assert_clean()


def test_seed_exit_7_example_in_node_gives_the_same_text(harness: Harness) -> None:
    code = "console.error('failure details');\nprocess.exit(7);\n"
    assert harness.text(code, language="node") == "(no output)\n[stderr] failure details\n[exit 7]"
    harness.assert_clean()


def test_exit_124_is_an_exit_code_not_a_timeout(harness: Harness) -> None:
    result = harness.run("import sys\nsys.exit(124)\n")
    assert not result.timed_out
    assert result.exit_code == 124
    assert contract_text(result) == "(no output)\n[exit 124]"
    harness.assert_clean()


def test_arguments_arrive_as_one_json_object_and_stdin_closes(harness: Harness) -> None:
    code = "import json, sys\nraw = sys.stdin.read()\nprint(json.dumps({'raw': raw}))\n"
    result = harness.run(code, arguments={"net": 99.99, "name": "Zoë"})
    assert contract_text(result) == '{"raw": "{\\"net\\": 99.99, \\"name\\": \\"Zo\\\\u00eb\\"}"}'
    harness.assert_clean()


def test_node_reads_arguments_from_stdin_with_require(harness: Harness) -> None:
    code = (
        "const fs = require('node:fs');\n"
        "const args = JSON.parse(fs.readFileSync(0, 'utf8'));\n"
        "console.log(JSON.stringify({ message: `Hello ${args.name || 'world'}` }));\n"
    )
    assert (
        harness.text(code, language="node", arguments={"name": "Ada"}) == '{"message":"Hello Ada"}'
    )
    harness.assert_clean()


def test_script_that_never_reads_large_arguments_still_finishes(harness: Harness) -> None:
    result = harness.run("print('ignored stdin')", arguments={"blob": "x" * 1_000_000})
    assert contract_text(result) == "ignored stdin"
    harness.assert_clean()


def test_arguments_larger_than_a_pipe_are_fed_as_the_script_reads(harness: Harness) -> None:
    code = "import json, sys\nprint(len(json.load(sys.stdin)['blob']))\n"
    assert harness.text(code, arguments={"blob": "x" * 3_000_000}) == "3000000"
    node = (
        "const fs = require('node:fs');\nconsole.log(JSON.parse(fs.readFileSync(0)).blob.length);\n"
    )
    assert harness.text(node, language="node", arguments={"blob": "y" * 3_000_000}) == "3000000"
    harness.assert_clean()


def test_non_json_arguments_are_refused_naming_the_field(harness: Harness) -> None:
    message = (
        r"^arguments.points\[1\] is NaN or Infinity, which strict JSON cannot carry: "
        r"a script receives its arguments as JSON$"
    )
    with pytest.raises(InvalidArgumentsError, match=message):
        harness.run("print(1)", arguments={"points": [1.0, math.inf]})
    with pytest.raises(InvalidArgumentsError, match=r"^the arguments are not JSON \(Object of"):
        harness.run("print(1)", arguments={"when": object()})
    harness.assert_clean()


def test_python_syntax_error_is_reported_without_runner_frames(harness: Harness) -> None:
    result = harness.run("def broken(:\n    pass\n")
    text = contract_text(result)
    assert result.exit_code == 1
    assert text.startswith("(no output)\n[stderr]   File ")
    assert 'main.py", line 1' in text
    assert "SyntaxError: invalid syntax" in text
    assert "supervisor" not in text
    assert text.endswith("[exit 1]")
    harness.assert_clean()


def test_python_exception_traceback_shows_only_the_script(harness: Harness) -> None:
    result = harness.run("def f():\n    raise ValueError('bad input')\nf()\n")
    assert result.stderr.startswith("Traceback (most recent call last):\n  File ")
    assert "supervisor" not in result.stderr
    assert result.stderr.rstrip().endswith("ValueError: bad input")
    harness.assert_clean()


def test_python_script_runs_as_main_with_its_own_argv_and_exit_hooks(harness: Harness) -> None:
    code = (
        "import atexit, os, sys\n"
        "atexit.register(lambda: print('bye'))\n"
        "print(__name__, os.path.basename(sys.argv[0]), os.path.basename(__file__))\n"
    )
    assert harness.text(code) == "__main__ main.py main.py\nbye"
    harness.assert_clean()


def test_python_output_is_unbuffered_so_interleaving_is_kept(harness: Harness) -> None:
    code = "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(2)\n"
    assert harness.text(code) == "out\n[stderr] err\n[exit 2]"
    harness.assert_clean()


def test_node_syntax_error_is_reported(harness: Harness) -> None:
    result = harness.run("const x = ;\n", language="node")
    assert result.exit_code == 1
    assert "SyntaxError: Unexpected token ';'" in result.stderr
    assert "[hint]" not in result.stderr
    harness.assert_clean()


def test_node_es_module_syntax_gets_a_clear_hint(harness: Harness) -> None:
    code = "import fs from 'node:fs';\nconsole.log(fs.readFileSync(0, 'utf8'));\n"
    result = harness.run(code, language="node")
    text = contract_text(result)
    assert "Cannot use import statement outside a module" in text
    assert text.endswith(
        "\n[hint] Kiln runs Node tools as CommonJS: use require(), not import\n[exit 1]"
    )
    harness.assert_clean()


def test_requiring_an_es_module_only_package_gets_its_own_hint(
    harness: Harness, tmp_path: Path
) -> None:
    package = tmp_path / "bundle" / "node_modules" / "esm-only"
    package.mkdir(parents=True)
    (package / "package.json").write_text(
        '{"name": "esm-only", "type": "module", "main": "index.js"}'
    )
    # Top-level await: no Node version can require() this one.
    (package / "index.js").write_text("await Promise.resolve();\nexport default 42;\n")
    result = harness.run(
        "const x = require('esm-only');\nconsole.log(x);\n",
        language="node",
        bundle_path=tmp_path / "bundle",
    )
    assert "ERR_REQUIRE_ESM" in result.stderr or "ERR_REQUIRE_ASYNC_MODULE" in result.stderr
    assert result.stderr.endswith(
        "[hint] Kiln runs Node tools as CommonJS and this package is an ES module only: "
        "pin a version that supports require(), or load it with await import() inside an "
        "async function\n"
    )
    harness.assert_clean()


def test_each_run_logs_one_structured_line(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kiln.runner")
    harness.run("import sys\nprint('hi')\nsys.exit(3)\n", label="shouty@r2")
    records = [r for r in caplog.records if r.name == "kiln.runner"]
    assert len(records) == 1
    record = records[0]
    assert record.tool == "shouty@r2"  # type: ignore[attr-defined]
    assert record.exit_code == 3  # type: ignore[attr-defined]
    assert record.timed_out is False  # type: ignore[attr-defined]
    assert record.stdout_bytes == 3  # type: ignore[attr-defined]
    assert record.stderr_bytes == 0  # type: ignore[attr-defined]
    assert record.truncated is False  # type: ignore[attr-defined]
    assert record.duration_s > 0  # type: ignore[attr-defined]
    harness.assert_clean()


def test_python_exit_waits_for_threads_runs_atexit_and_flushes_open_files(
    harness: Harness,
) -> None:
    code = (
        "import os, threading, time\n"
        "log = open(os.path.join(os.environ['SHARED_DIR'], 'log.txt'), 'w')\n"
        "log.write('never closed')\n"
        "def late():\n    time.sleep(0.2)\n    print('thread done')\n"
        "threading.Thread(target=late).start()\n"
        "print('main done')\n"
    )
    assert harness.text(code) == "main done\nthread done"
    assert (harness.shared / "log.txt").read_text() == "never closed"
    harness.assert_clean()


def test_sys_exit_with_a_message_prints_it_and_exits_1(harness: Harness) -> None:
    assert harness.text("import sys\nsys.exit('bad config')") == (
        "(no output)\n[stderr] bad config\n[exit 1]"
    )
    harness.assert_clean()
