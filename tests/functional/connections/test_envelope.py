"""The vault's envelope: AES-GCM under a per-record data key, wrapped by KMS (moto's KMS over
HTTP) or by the key file `kiln dev` keeps beside its state."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from kiln.connections.envelope import FileKeys, KmsKeys, SealError, open_sealed, seal
from support.aws import plain_moto

ALICE = {"kiln:identity": "key:alice", "kiln:provider": "github"}
BOB = {"kiln:identity": "key:bob", "kiln:provider": "github"}


@pytest.fixture(scope="module")
def kms() -> Iterator[Any]:
    # Kiln's emulator serves only what kiln dev stores (DynamoDB, S3, SSM); KMS is AWS's alone.
    with plain_moto() as endpoint:
        yield boto3.session.Session(
            region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
        ).client("kms", endpoint_url=endpoint)


def keepers(kms: Any, folder: Path) -> list[Any]:
    key = kms.create_key(Description="kiln vault")["KeyMetadata"]["KeyId"]
    return [KmsKeys(kms, key), FileKeys(folder / "vault.key")]


def test_a_record_opens_only_under_its_own_context_and_holds_no_plaintext(
    kms: Any, tmp_path: Path
) -> None:
    for keeper in keepers(kms, tmp_path):
        record = seal(keeper, b"gho_the-token-itself", ALICE)
        assert b"gho_the-token-itself" not in repr(record).encode()
        assert open_sealed(keeper, record, ALICE) == b"gho_the-token-itself"
        with pytest.raises(SealError):
            open_sealed(keeper, record, BOB)
        assert seal(keeper, b"gho_the-token-itself", ALICE)["key"] != record["key"]  # per record
        tampered = {
            **record,
            "ct": record["ct"][:-4] + ("AAAA" if record["ct"][-4:] != "AAAA" else "BBBB"),
        }
        with pytest.raises(SealError):
            open_sealed(keeper, tampered, ALICE)


def test_the_key_file_is_made_once_private_and_a_new_one_opens_nothing(tmp_path: Path) -> None:
    record = seal(FileKeys(tmp_path / "state" / "vault.key"), b"secret-token", ALICE)
    mode = stat.S_IMODE(os.stat(tmp_path / "state" / "vault.key").st_mode)
    assert mode == 0o600, oct(mode)
    assert open_sealed(FileKeys(tmp_path / "state" / "vault.key"), record, ALICE) == b"secret-token"
    with pytest.raises(SealError):
        open_sealed(FileKeys(tmp_path / "other.key"), record, ALICE)
    (tmp_path / "short.key").write_bytes(b"x" * 5)
    with pytest.raises(SealError, match="not 32 bytes"):
        seal(FileKeys(tmp_path / "short.key"), b"secret-token", ALICE)
