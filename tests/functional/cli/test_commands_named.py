"""Every `kiln` command that `kiln --help` or a README names is one the parser has.

`kiln --help` once listed `bundles list` where the command is `ls` (and `keys list`,
`secrets list, remove` for `ls`, `rm`); a README can drift the same way.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from kiln.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[3]
SKIPPED = {".venv", "node_modules", ".git", ".pytest_cache"}
# `kiln CMD [SUB]` inside a code span or a fenced block (not `kiln.cli`, not a path).
# A name after "# " is a comment or a log line quoted in a block (a build log's "# kiln bundle ID").
NAMED = re.compile(r"(?<![\w/.-])(?<!# )kiln ([a-z][\w-]*)(?: ([a-z][\w-]*))?")
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.DOTALL)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's subcommands by name (aliases included), or {} for a leaf command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def canonical(parser: argparse.ArgumentParser) -> list[str]:
    """Subcommand names without their aliases, in the order help shows them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return [choice.dest for choice in action._choices_actions]
    return []


def help_lines() -> dict[str, str]:
    """`kiln --help` as a user sees it (one line a command: a wide terminal): command -> help."""
    env = {**os.environ, "COLUMNS": "1000"}
    done = subprocess.run(
        [sys.executable, "-m", "kiln.cli", "--help"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = re.findall(r"^    ([a-z][\w-]*)\s{2,}(.+)$", done.stdout, re.MULTILINE)
    assert found, done.stdout
    return dict(found)


def test_every_subcommand_kiln_help_lists_exists_and_every_one_is_listed() -> None:
    top = subcommands(build_parser())
    lines = help_lines()
    assert set(lines) == set(top), lines
    for command, text in lines.items():
        names = canonical(top[command])
        if not names:
            continue
        listed = [word.strip() for word in text.rsplit(": ", 1)[-1].split(",")]
        assert sorted(listed) == sorted(names), (
            f"`kiln --help` says {command!r} has {', '.join(listed)}; "
            f"its subcommands are {', '.join(names)}"
        )


def markdown_files() -> list[Path]:
    return [
        path
        for path in ROOT.rglob("*.md")
        if not SKIPPED.intersection(path.relative_to(ROOT).parts)
    ]


def test_every_kiln_command_a_readme_names_exists() -> None:
    top = subcommands(build_parser())
    wrong: list[str] = []
    seen = 0
    for path in markdown_files():
        text = path.read_text("utf-8")
        for code in CODE.findall(text):
            for command, sub in NAMED.findall(code):
                seen += 1
                where = f"{path.relative_to(ROOT)}: `kiln {command} {sub}`".rstrip()
                if command not in top:
                    wrong.append(f"{where}: no command {command!r}")
                    continue
                subs = subcommands(top[command])
                if subs and sub and sub not in subs:
                    wrong.append(f"{where}: `kiln {command}` has {', '.join(sorted(subs))}")
    assert seen > 20, f"only {seen} commands found in the READMEs: is the pattern right?"
    assert not wrong, "\n".join(wrong)


def test_dev_and_stdio_take_the_local_catalog_options_alike_each_saying_what_it_does() -> None:
    top = subcommands(build_parser())
    local = ("--tools", "--no-examples", "--state-dir", "--aws")

    def options(command: str) -> dict[str, str | None]:
        found = {o: a.help for a in top[command]._actions for o in a.option_strings}
        return {option: found.get(option, "(missing)") for option in local}

    dev, stdio = options("dev"), options("stdio")
    assert dev == stdio, f"kiln dev says {dev}, kiln stdio says {stdio}"
    assert all(dev.values()), f"an option of kiln dev and stdio says nothing in --help: {dev}"
