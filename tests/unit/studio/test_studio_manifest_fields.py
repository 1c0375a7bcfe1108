"""The studio edits and keeps exactly the manifest fields the server's save rules take: its
list (web/src/lib/manifest.ts) is read here and compared with `kiln.catalog.model.Draft`, so a
field added on either side fails until the other has it. (The studio's own Vitest test checks
that the draft a save sends holds exactly that list.)"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from kiln.catalog.model import Draft

MANIFEST_TS = (
    Path(__file__).resolve().parents[3]
    / "functions" / "kiln" / "studio" / "web" / "src" / "lib" / "manifest.ts"
)  # fmt: skip


def studio_fields() -> list[str]:
    text = MANIFEST_TS.read_text(encoding="utf-8")
    found = re.search(r"MANIFEST_FIELDS = \[(.*?)\] as const", text, re.S)
    assert found, f"{MANIFEST_TS}: no `export const MANIFEST_FIELDS = [...] as const`"
    return re.findall(r'"([a-z_]+)"', found.group(1))


def test_the_studio_and_the_server_agree_on_the_manifest_fields() -> None:
    server = [field.name for field in dataclasses.fields(Draft)]
    studio = studio_fields()
    assert len(studio) == len(set(studio)), f"a field is listed twice in {MANIFEST_TS}: {studio}"
    assert sorted(studio) == sorted(server), (
        f"only the server has {sorted(set(server) - set(studio))}; "
        f"only the studio has {sorted(set(studio) - set(server))}"
    )
