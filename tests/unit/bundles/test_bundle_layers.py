"""Package folders made from one install: which files go to which package's folder.

The installer is a stand-in that lays out a `--target` folder as uv does (each package's
files plus a dist-info whose RECORD names them); everything after it is Kiln's own code.
"""

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from kiln.bundles.contents import write_zip
from kiln.bundles.layers import FILES, LayerError, build_layers

Package = dict[str, str]  # path inside the install -> contents


def _lock(*names: str) -> list[dict[str, Any]]:
    return [
        {"name": name, "version": "1.0", "sha256": hashlib.sha256(name.encode()).hexdigest()}
        for name in names
    ]


def _installer(packages: dict[str, Package], strays: Package | None = None) -> Any:
    """An install of `packages` (name -> files), plus `strays` no RECORD names."""

    def install(lock: list[dict[str, Any]], site: Path) -> None:
        for entry in lock:
            name = entry["name"]
            files = dict(packages[name])
            record = f"{name}-1.0.dist-info/RECORD"
            files[f"{name}-1.0.dist-info/METADATA"] = f"Name: {name}\n"
            listed = [*files, record]
            files[record] = "".join(f"{path},,\n" for path in listed)
            for path, text in files.items():
                (site / path).parent.mkdir(parents=True, exist_ok=True)
                (site / path).write_text(text)
        for path, text in (strays or {}).items():
            (site / path).parent.mkdir(parents=True, exist_ok=True)
            (site / path).write_text(text)

    return install


def _files(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()}


def _compiled(folders: Iterable[Path]) -> None:
    for folder in folders:  # no bytecode in these tests; the folders are still made
        assert folder.is_dir(), folder


def test_each_package_folder_holds_exactly_its_own_files_even_in_a_shared_namespace(
    tmp_path: Path,
) -> None:
    packages = {
        "alpha": {"alpha/__init__.py": "A = 1\n", "alpha/data/deep/x.json": "{}\n",
                  "alpha_extra.py": "E = 1\n"},
        "ns-one": {"ns/one/__init__.py": "ONE = 1\n"},
        "ns-two": {"ns/two/__init__.py": "TWO = 2\n", "ns/two/data.txt": "2\n"},
    }  # fmt: skip
    lock = _lock("alpha", "ns-one", "ns-two")
    layers = build_layers(
        lock, root=tmp_path / "packages", flavour="test", install=_installer(packages),
        compile_dirs=_compiled, write_zip=write_zip,
    )  # fmt: skip
    for name, folder in zip(("alpha", "ns-one", "ns-two"), layers.folders, strict=True):
        record = f"{name}-1.0.dist-info/"
        wanted = {*packages[name], record + "METADATA", record + "RECORD"}
        assert _files(folder / FILES) == wanted, (name, sorted(_files(folder / FILES)))
        for path in (folder / FILES).rglob("*"):
            if path.is_file():
                assert not os.stat(path).st_mode & 0o222, f"{path} is writable"


def test_a_file_no_record_names_inside_a_package_folder_stops_the_package_folders(
    tmp_path: Path,
) -> None:
    packages = {"alpha": {"alpha/__init__.py": "A = 1\n"}}
    with pytest.raises(LayerError, match="files of no package"):
        build_layers(
            _lock("alpha"), root=tmp_path / "packages", flavour="test",
            install=_installer(packages, strays={"alpha/stray.py": "S = 1\n"}),
            compile_dirs=_compiled, write_zip=write_zip,
        )  # fmt: skip
    assert not (tmp_path / "packages" / "alpha").exists()


def test_a_link_inside_a_package_folder_is_never_moved_into_it(tmp_path: Path) -> None:
    packages = {"alpha": {"alpha/__init__.py": "A = 1\n"}}
    outside = tmp_path / "outside.txt"
    outside.write_text("not the package's\n")
    install = _installer(packages)

    def with_link(lock: list[dict[str, Any]], site: Path) -> None:
        install(lock, site)
        (site / "alpha" / "linked.txt").symlink_to(outside)

    with pytest.raises(LayerError, match="files of no package"):
        build_layers(
            _lock("alpha"), root=tmp_path / "packages", flavour="test", install=with_link,
            compile_dirs=_compiled, write_zip=write_zip,
        )  # fmt: skip


def test_a_package_folder_that_is_a_link_is_never_moved_as_a_whole(tmp_path: Path) -> None:
    packages = {"alpha": {"alpha/__init__.py": "A = 1\n"}}
    elsewhere = tmp_path / "elsewhere"
    install = _installer(packages)

    def with_linked_folder(lock: list[dict[str, Any]], site: Path) -> None:
        install(lock, site)
        (site / "alpha").rename(elsewhere)
        (site / "alpha").symlink_to(elsewhere, target_is_directory=True)

    layers = build_layers(
        _lock("alpha"), root=tmp_path / "packages", flavour="test", install=with_linked_folder,
        compile_dirs=_compiled, write_zip=write_zip,
    )  # fmt: skip
    files = layers.folders[0] / FILES
    assert not (files / "alpha").is_symlink(), "the link itself was moved into the package"
    assert (files / "alpha" / "__init__.py").read_text() == "A = 1\n"
