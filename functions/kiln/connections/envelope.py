"""Envelope encryption for the vault: AES-256-GCM under a fresh data key per record, the data
key wrapped by a key-encryption key that never leaves its keeper.

Two keepers: `KmsKeys` (AWS KMS `GenerateDataKey` / `Decrypt`, the KMS key in `template.yaml`)
and `FileKeys` (a 32-byte key file beside `kiln dev`'s local state, mode 0600, made on first
use). Both bind a record to its context (the caller identity and the provider) as the GCM
associated data and, with KMS, as the encryption context too: a record copied under another
identity does not open (`SealError`), so a token planted there is never used.
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_kms import KMSClient

NONCE_BYTES = 12


class SealError(Exception):
    """A record that does not open under its context (tampered, moved, or another key)."""


class KeyKeeper(Protocol):
    def new_data_key(self, context: Mapping[str, str]) -> tuple[bytes, bytes]:
        """A fresh 32-byte data key and the same key wrapped."""
        ...

    def unwrap(self, wrapped: bytes, context: Mapping[str, str]) -> bytes: ...


def _aead() -> tuple[Any, type[Exception]]:
    """AESGCM and its InvalidTag, imported on first use (the public function's cold start
    reads no vault)."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM, InvalidTag


def _aad(context: Mapping[str, str]) -> bytes:
    return "\n".join(f"{k}={context[k]}" for k in sorted(context)).encode()


def seal(keeper: KeyKeeper, plaintext: bytes, context: Mapping[str, str]) -> dict[str, str]:
    """The ciphertext record (base64 strings) of `plaintext`, bound to `context`."""
    aesgcm, _ = _aead()
    key, wrapped = keeper.new_data_key(context)
    nonce = os.urandom(NONCE_BYTES)
    sealed = aesgcm(key).encrypt(nonce, plaintext, _aad(context))
    b64 = base64.b64encode
    return {"key": b64(wrapped).decode(), "nonce": b64(nonce).decode(), "ct": b64(sealed).decode()}


def open_sealed(keeper: KeyKeeper, record: Mapping[str, Any], context: Mapping[str, str]) -> bytes:
    aesgcm, invalid_tag = _aead()
    try:
        wrapped = base64.b64decode(record["key"])
        nonce = base64.b64decode(record["nonce"])
        sealed = base64.b64decode(record["ct"])
        key = keeper.unwrap(wrapped, context)
        return bytes(aesgcm(key).decrypt(nonce, sealed, _aad(context)))
    except (KeyError, TypeError, ValueError, invalid_tag, SealError) as error:
        raise SealError("the record does not open under its identity and provider") from error


class FileKeys:
    """A key-encryption key in a file (kiln dev): data keys are wrapped with AES-GCM under it."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._kek: bytes | None = None

    def _key(self) -> bytes:
        with self._lock:
            if self._kek is None:
                self._kek = _read_or_make(self._path)
            return self._kek

    def new_data_key(self, context: Mapping[str, str]) -> tuple[bytes, bytes]:
        aesgcm, _ = _aead()
        key = os.urandom(32)
        nonce = os.urandom(NONCE_BYTES)
        return key, nonce + aesgcm(self._key()).encrypt(nonce, key, _aad(context))

    def unwrap(self, wrapped: bytes, context: Mapping[str, str]) -> bytes:
        aesgcm, invalid_tag = _aead()
        try:
            nonce, sealed = wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:]
            return bytes(aesgcm(self._key()).decrypt(nonce, sealed, _aad(context)))
        except invalid_tag as error:
            raise SealError("the data key does not unwrap") from error


def _read_or_make(path: Path) -> bytes:
    try:
        found = path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = os.urandom(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first: use theirs
            return _read_or_make(path)
        with os.fdopen(fd, "wb") as out:
            out.write(key)
        return key
    if len(found) != 32:
        raise SealError(f"the vault key file {path} is not 32 bytes")
    return found


class KmsKeys:
    """Data keys from AWS KMS, under one key (`KILN_VAULT_KMS_KEY`), with the record's context
    as the KMS encryption context (logged by CloudTrail, checked on Decrypt)."""

    def __init__(self, kms: KMSClient, key_id: str) -> None:
        self._kms = kms
        self._key_id = key_id

    def new_data_key(self, context: Mapping[str, str]) -> tuple[bytes, bytes]:
        made = self._kms.generate_data_key(
            KeyId=self._key_id, KeySpec="AES_256", EncryptionContext=dict(context)
        )
        return made["Plaintext"], made["CiphertextBlob"]

    def unwrap(self, wrapped: bytes, context: Mapping[str, str]) -> bytes:
        try:
            opened = self._kms.decrypt(
                CiphertextBlob=wrapped, KeyId=self._key_id, EncryptionContext=dict(context)
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "InvalidCiphertextException":
                raise SealError("KMS refused the data key (another context)") from error
            raise
        return bytes(opened["Plaintext"])
