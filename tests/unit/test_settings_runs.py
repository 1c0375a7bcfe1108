"""The settings that contain tool runs: uid range, disk quota, sweeping shared /tmp."""

from __future__ import annotations

import pytest

from kiln.settings import Settings, SettingsError


def test_run_uids_are_an_inclusive_range_and_off_turns_them_off() -> None:
    assert Settings.from_env({"KILN_RUN_UIDS": "70000-70099"}).run_uids == (70000, 70100)
    assert Settings.from_env({"KILN_RUN_UIDS": "off"}).run_uids is None
    assert Settings.from_env({}).run_uids == (60000, 61000)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("lots", r"^KILN_RUN_UIDS: must be FIRST-LAST \(such as 60000-60999\) or off$"),
        ("0-100", r"^KILN_RUN_UIDS: must be a range above 0 \(root\)"),
        ("500-400", r"^KILN_RUN_UIDS: must be a range above 0 \(root\)"),
    ],
)
def test_a_bad_run_uid_range_names_the_variable_and_the_form(value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env({"KILN_RUN_UIDS": value})


def test_shared_temp_is_swept_by_default_only_in_lambda() -> None:
    assert Settings.from_env({}).sweep_shared_temp is False
    assert Settings.from_env({"AWS_LAMBDA_FUNCTION_NAME": "kiln-mcp"}).sweep_shared_temp is True
    off = {"AWS_LAMBDA_FUNCTION_NAME": "kiln-mcp", "KILN_SWEEP_SHARED_TEMP": "false"}
    assert Settings.from_env(off).sweep_shared_temp is False


def test_the_disk_quota_is_set_in_mib() -> None:
    assert Settings.from_env({"KILN_RUN_DISK_QUOTA_MB": "512"}).run_disk_quota_mb == 512


def test_runs_sharing_a_uid_are_serialised_unless_turned_off() -> None:
    assert Settings.from_env({}).serialize_shared_uid_runs is True
    off = {"KILN_SERIALIZE_SHARED_UID_RUNS": "false"}
    assert Settings.from_env(off).serialize_shared_uid_runs is False
