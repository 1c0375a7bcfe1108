"""The settings that contain tool runs: uid range, disk quota, sweeping shared /tmp."""

from __future__ import annotations

import pytest

from kiln.process import run_tcp_ports, runner_settings
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


def test_run_tcp_ports_take_ports_and_ranges_or_all_or_auto() -> None:
    parsed = Settings.from_env({"KILN_RUN_TCP_PORTS": "443, 80,8000-8002"}).run_tcp_ports
    assert parsed == (80, 443, 8000, 8001, 8002)
    assert Settings.from_env({"KILN_RUN_TCP_PORTS": "ALL"}).run_tcp_ports == "all"
    assert Settings.from_env({}).run_tcp_ports == "auto"


@pytest.mark.parametrize("value", ["http", "0", "80-70", "65536", "1-2-3", ","])
def test_bad_run_tcp_ports_name_the_variable_and_the_form(value: str) -> None:
    with pytest.raises(SettingsError, match=r"^KILN_RUN_TCP_PORTS: must be all, auto, or TCP"):
        Settings.from_env({"KILN_RUN_TCP_PORTS": value})


def test_runs_may_reach_every_port_but_a_local_emulators() -> None:
    local = Settings.from_env({"AWS_ENDPOINT_URL": "http://127.0.0.1:45678"})
    ports = run_tcp_ports(local)
    assert ports is not None
    assert {443, 5432} <= set(ports)
    assert 45678 not in ports
    assert run_tcp_ports(Settings.from_env({})) is None  # AWS itself: any port
    remote = {"AWS_ENDPOINT_URL": "https://dynamodb.example.com", "KILN_RUN_TCP_PORTS": "auto"}
    assert run_tcp_ports(Settings.from_env(remote)) is None
    everything = {"AWS_ENDPOINT_URL": "http://localhost:8001", "KILN_RUN_TCP_PORTS": "all"}
    assert run_tcp_ports(Settings.from_env(everything)) is None
    chosen = {"AWS_ENDPOINT_URL": "http://localhost:8001", "KILN_RUN_TCP_PORTS": "443,8000-8002"}
    assert run_tcp_ports(Settings.from_env(chosen)) == (443, 8000, 8002)


def test_kiln_run_standby_reaches_the_runner_and_zero_turns_standbys_off() -> None:
    assert runner_settings(Settings.from_env({})).standby_runs == 4
    assert runner_settings(Settings.from_env({"KILN_RUN_STANDBY": "2"})).standby_runs == 2
    assert runner_settings(Settings.from_env({"KILN_RUN_STANDBY": "0"})).standby_runs == 0
