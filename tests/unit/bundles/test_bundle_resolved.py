"""What a bundle resolved to (kiln.bundles.resolved): one line per package, one digest."""

from kiln.bundles.resolved import digest, entries

LOCK = [
    {"name": "Six", "version": "1.17.0", "sha256": "a" * 64, "url": "https://x/six.whl"},
    {"name": "humanize", "version": "4.9.0", "sha256": "b" * 64, "url": "https://x/h.whl"},
]


def test_the_lines_are_sorted_normalised_pins_with_their_wheel_hash() -> None:
    assert entries("python", LOCK) == (
        f"humanize==4.9.0 --hash=sha256:{'b' * 64}",
        f"six==1.17.0 --hash=sha256:{'a' * 64}",
    )
    assert entries("python", list(reversed(LOCK))) == entries("python", LOCK)
    assert entries("python", [{"name": "Zope_Interface", "version": "7"}]) == ("zope-interface==7",)


def test_node_packages_keep_their_name_and_integrity() -> None:
    lock = [{"name": "@scope/Left_Pad", "version": "1.3.0", "integrity": "sha512-xyz"}]
    assert entries("node", lock) == ("@scope/Left_Pad==1.3.0 --hash=sha512-xyz",)


def test_the_digest_changes_with_a_version_or_a_wheel_and_nothing_else() -> None:
    base = digest(entries("python", LOCK))
    assert base.startswith("sha256:")
    assert len(base) == 71
    assert digest(entries("python", [dict(p) for p in reversed(LOCK)])) == base
    newer = [{**LOCK[0], "version": "1.17.1"}, LOCK[1]]
    other_wheel = [{**LOCK[0], "sha256": "c" * 64}, LOCK[1]]
    assert (
        len({base, digest(entries("python", newer)), digest(entries("python", other_wheel))}) == 3
    )
    # the url a wheel was fetched from is not what runs
    assert digest(entries("python", [{**LOCK[0], "url": "file:///m/six.whl"}, LOCK[1]])) == base
