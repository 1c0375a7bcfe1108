"""The studio edits and keeps exactly the manifest fields the server's save rules take: its
list (web/src/lib/manifest.ts) is read here and compared with `kiln.catalog.model.Draft` and
with the save rules' own list (`kiln.catalog.rules.CANONICAL_FIELDS`), so a field added on any
side fails until the others have it; the same for the values of `task` the Settings tab offers
(`TASK_MODES`) and the ones a save takes (`kiln.catalog.model.TaskMode`). (The studio's own
Vitest test checks that the draft a save sends holds exactly that list.)"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

from kiln.catalog.model import Draft, TaskMode
from kiln.catalog.rules import CANONICAL_FIELDS

MANIFEST_TS = (
    Path(__file__).resolve().parents[3]
    / "functions" / "kiln" / "studio" / "web" / "src" / "lib" / "manifest.ts"
)  # fmt: skip


def studio_list(name: str, item: str) -> list[str]:
    text = MANIFEST_TS.read_text(encoding="utf-8")
    found = re.search(rf"{name} = \[(.*?)\n\] as const", text, re.S)
    assert found, f"{MANIFEST_TS}: no `export const {name} = [...] as const`"
    return re.findall(item, found.group(1))


def studio_fields() -> list[str]:
    return studio_list("MANIFEST_FIELDS", r'"([a-z_]+)"')


def test_the_settings_tab_offers_every_task_mode_a_save_takes() -> None:
    # Each entry is `[value, "label"]`; the value is null (no task) or a quoted mode.
    offered = studio_list("TASK_MODES", r'(?m)^\s*\[(null|"[a-z_]+"),')
    modes = [None if value == "null" else value.strip('"') for value in offered]
    assert len(modes) == len(set(modes)), f"a mode is listed twice in {MANIFEST_TS}: {modes}"
    server = [None, *typing.get_args(TaskMode)]
    assert sorted(modes, key=str) == sorted(server, key=str), (
        f"only the save rules take {[m for m in server if m not in modes]}: the Settings tab "
        f"shows a tool saved with it as a blank choice; "
        f"only the studio offers {[m for m in modes if m not in server]}"
    )


def test_the_studio_and_the_server_agree_on_the_manifest_fields() -> None:
    server = [field.name for field in dataclasses.fields(Draft)]
    studio = studio_fields()
    assert len(studio) == len(set(studio)), f"a field is listed twice in {MANIFEST_TS}: {studio}"
    assert sorted(studio) == sorted(server), (
        f"only the server has {sorted(set(server) - set(studio))}; "
        f"only the studio has {sorted(set(studio) - set(server))}"
    )


def test_the_save_rules_list_the_same_fields_as_the_draft_and_the_studio() -> None:
    server = sorted(field.name for field in dataclasses.fields(Draft))
    assert len(CANONICAL_FIELDS) == len(set(CANONICAL_FIELDS)), CANONICAL_FIELDS
    assert sorted(CANONICAL_FIELDS) == server, (
        f"only Draft has {sorted(set(server) - set(CANONICAL_FIELDS))}; "
        f"only CANONICAL_FIELDS has {sorted(set(CANONICAL_FIELDS) - set(server))}"
    )
    assert sorted(CANONICAL_FIELDS) == sorted(studio_fields())
