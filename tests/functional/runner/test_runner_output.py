"""Output is read as it comes and capped; files and memory are limited."""

from __future__ import annotations

from pathlib import Path

from kiln.runner import RunLimits, contract_text
from support.runner import Harness
from support.runner import harness_fixture as harness_fixture

GIB = 1024 * 1024 * 1024
MIB = 1024 * 1024


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_a_gigabyte_of_stdout_is_capped_and_server_memory_stays_flat(harness: Harness) -> None:
    harness.run("print('warm up')")  # imports and first-run allocations happen before measuring
    before = rss_bytes()
    code = (
        "import sys\nchunk = b'x' * (1024 * 1024)\n"
        "for _ in range(1024):\n    sys.stdout.buffer.write(chunk)\n"
    )
    result = harness.run(code, timeout_s=60)
    grown = rss_bytes() - before
    assert result.exit_code == 0
    assert result.stdout_bytes == GIB
    assert result.stdout_truncated
    assert len(result.stdout) == MIB
    assert contract_text(result) == "x" * MIB + f"\n[stdout truncated: {MIB} of {GIB} bytes shown]"
    assert grown < 8 * MIB, f"server RSS grew by {grown / MIB:.1f} MiB"
    harness.assert_clean()


def test_stderr_is_capped_at_its_own_limit(harness: Harness) -> None:
    code = "import sys\nsys.stderr.write('e' * 100000)\nsys.exit(3)\n"
    result = harness.run(code)
    assert result.stderr_truncated
    assert result.stderr_bytes == 100000
    assert contract_text(result) == (
        "(no output)\n[stderr] "
        + "e" * 65536
        + "\n[stderr truncated: 65536 of 100000 bytes shown]\n[exit 3]"
    )
    harness.assert_clean()


def test_a_tool_may_tighten_the_output_cap_but_not_loosen_it(harness: Harness) -> None:
    code = "print('abcdefghij' * 10)"
    tight = harness.run(code, limits=RunLimits(stdout_cap_bytes=10))
    assert contract_text(tight) == "abcdefghij\n[stdout truncated: 10 of 101 bytes shown]"
    small = harness.with_settings(stdout_cap_bytes=20)
    loose = small.run(code, limits=RunLimits(stdout_cap_bytes=10 * MIB))
    assert loose.stdout == "abcdefghij" * 2
    harness.assert_clean()


def test_cap_inside_a_multibyte_character_drops_the_broken_tail(harness: Harness) -> None:
    result = harness.run("print('é' * 10)", limits=RunLimits(stdout_cap_bytes=5))
    assert result.stdout == "éé"  # 4 bytes; the fifth was half of the third "é"
    harness.assert_clean()


def test_invalid_utf8_output_is_replaced_not_fatal(harness: Harness) -> None:
    result = harness.run("import sys\nsys.stdout.buffer.write(b'ok \\xff\\xfe end')")
    assert result.stdout == "ok \ufffd\ufffd end"
    harness.assert_clean()


def test_python_script_writing_a_huge_file_is_stopped_at_the_file_size_limit(
    harness: Harness,
) -> None:
    code = (
        "import os\nchunk = b'0' * (1024 * 1024)\n"
        "with open('big.bin', 'wb', buffering=0) as f:\n"
        "    try:\n"
        "        for _ in range(1024):\n            f.write(chunk)\n"
        "    finally:\n        print(os.path.getsize('big.bin'))\n"
    )
    result = harness.run(code)
    assert result.exit_code == 1
    assert result.stdout.strip() == str(64 * MIB)
    assert "OSError: [Errno 27] File too large" in result.stderr
    harness.assert_clean()


def test_process_killed_by_sigxfsz_is_reported_as_that_signal(harness: Harness) -> None:
    code = (
        "import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_DFL)\n"
        "with open('big.bin', 'wb') as f:\n    f.write(b'0' * (2 * 1024 * 1024))\n"
    )
    result = harness.run(code, limits=RunLimits(file_size_bytes=MIB))
    assert result.exit_code == -25
    assert contract_text(result) == (
        "(no output)\n[killed by signal SIGXFSZ: file size limit exceeded]"
    )
    harness.assert_clean()


def test_node_writing_a_huge_file_is_stopped(harness: Harness) -> None:
    code = (
        "const fs = require('node:fs');\n"
        "fs.writeFileSync('big.bin', Buffer.alloc(8 * 1024 * 1024));\n"
        "console.log('wrote it');\n"
    )
    result = harness.run(code, language="node", limits=RunLimits(file_size_bytes=MIB))
    assert result.exit_code == 1
    assert "Error: EFBIG: file too large" in result.stderr
    assert "wrote it" not in result.stdout
    harness.assert_clean()


def test_allocating_past_the_memory_limit_fails_inside_the_tool(harness: Harness) -> None:
    code = "block = bytearray(512 * 1024 * 1024)\nprint('allocated')\n"
    result = harness.run(code, limits=RunLimits(memory_bytes=256 * MIB))
    assert result.exit_code == 1
    assert "MemoryError" in result.stderr
    harness.assert_clean()


def test_node_starts_under_the_default_memory_limit(harness: Harness) -> None:
    result = harness.run("console.log(Buffer.alloc(64 * 1024 * 1024).length)", language="node")
    assert contract_text(result) == str(64 * MIB)
    harness.assert_clean()


def test_opening_more_files_than_allowed_fails_inside_the_tool(harness: Harness) -> None:
    code = "files = [open('f%d' % i, 'w') for i in range(100)]\n"
    result = harness.run(code, limits=RunLimits(open_files=32))
    assert result.exit_code == 1
    assert "Too many open files" in result.stderr
    harness.assert_clean()


def test_core_dumps_are_disabled(harness: Harness) -> None:
    result = harness.run("import resource\nprint(resource.getrlimit(resource.RLIMIT_CORE))")
    assert result.stdout.strip() == "(0, 0)"
    harness.assert_clean()
