"""How every `kiln` command finds its server and key (kiln.cli.locate), from settings and files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kiln.cli.locate import ServerNotFoundError, find_server
from kiln.local.state import forget_server, record_server
from kiln.settings import LocalSettings


def local(tmp_path: Path, **env: str) -> LocalSettings:
    return LocalSettings.from_env({"HOME": str(tmp_path / "home"), **env})


def test_the_state_directory_is_per_user_unless_told_otherwise(tmp_path: Path) -> None:
    assert local(tmp_path).state_dir == tmp_path / "home" / ".local" / "state" / "kiln"
    assert local(tmp_path, XDG_STATE_HOME="/x").state_dir == Path("/x/kiln")
    chosen = local(tmp_path, XDG_STATE_HOME="/x", KILN_STATE_DIR="/y").with_state_dir("/z")
    assert (chosen.state_dir, chosen.state_dir_source) == (Path("/z"), "--state-dir")


def test_a_running_kiln_dev_is_found_with_its_local_key(tmp_path: Path) -> None:
    settings = local(tmp_path)
    record_server(settings.state_dir, "http://127.0.0.1:8123")
    (settings.state_dir / "author_key").write_text("kiln_author_local\n")
    target = find_server(settings, url=None, key=None)
    assert (target.url, target.key) == ("http://127.0.0.1:8123", "kiln_author_local")
    assert target.key_source == f"the local author key from {settings.state_dir}/author_key"
    assert (settings.state_dir / "server.json").stat().st_mode & 0o077 == 0
    forget_server(settings.state_dir)
    with pytest.raises(ServerNotFoundError, match=r"looked for .*/server\.json"):
        find_server(settings, url=None, key=None)


def test_the_local_key_is_never_sent_to_another_url(tmp_path: Path) -> None:
    settings = local(tmp_path)
    record_server(settings.state_dir, "http://127.0.0.1:8123")
    (settings.state_dir / "author_key").write_text("kiln_author_local\n")
    elsewhere = find_server(settings, url="https://kiln.example.com", key=None)
    assert elsewhere.key is None
    assert elsewhere.key_source == "no key: pass --key KEY or set KILN_AUTHOR_KEY"
    same = find_server(settings, url="http://localhost:8123/", key=None)
    assert same.key == "kiln_author_local"


def test_a_record_left_by_a_killed_kiln_dev_is_ignored(tmp_path: Path) -> None:
    settings = local(tmp_path)
    settings.state_dir.mkdir(parents=True)
    gone = 2**22 + 12345  # above the default pid_max: no such process
    record = {"url": "http://127.0.0.1:8123", "pid": gone}
    (settings.state_dir / "server.json").write_text(json.dumps(record))
    with pytest.raises(ServerNotFoundError):
        find_server(settings, url=None, key=None)
