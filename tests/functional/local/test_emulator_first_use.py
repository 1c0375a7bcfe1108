"""A service's first request to the emulator does not hold up the others.

moto loads a service's backend on that service's first request. SSM's pulls in moto.ec2 and
takes seconds. It used to do that under the lock every request takes, so the studio's first
look at a tool's secrets stalled every catalog read behind it (kiln.local.emulator.motofix.
load_backend)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from kiln.aws.clients import ensure_resources, make_clients
from kiln.local.emulator import run_emulator

TABLE = BUCKET = "kiln-first-use"


def test_reads_go_on_while_the_first_ssm_request_loads_its_backend(tmp_path: Path) -> None:
    with run_emulator(tmp_path / "aws") as endpoint:
        keys = (endpoint.credentials.access_key_id, endpoint.credentials.secret_access_key)
        clients = make_clients(endpoint_url=endpoint.url, region=endpoint.region, credentials=keys)
        ensure_resources(clients, table=TABLE, bucket=BUCKET)
        ssm = clients.session.client("ssm", endpoint_url=endpoint.url)
        clients.dynamodb.describe_table(TableName=TABLE)  # every client made, every model read
        first: list[float] = []

        def first_ssm_request() -> None:
            started = time.perf_counter()
            ssm.get_parameters_by_path(Path="/kiln/some-tool")
            first.append(time.perf_counter() - started)

        loading = threading.Thread(target=first_ssm_request)
        loading.start()
        meanwhile = 0  # reads through moto's own web app (not the item fast path)
        while loading.is_alive():
            clients.dynamodb.describe_table(TableName=TABLE)
            if loading.is_alive():
                meanwhile += 1
        loading.join()
        assert first, "the first SSM request failed (its error is printed above)"
        # Loading took seconds; each read takes milliseconds. Before, none got through.
        assert meanwhile >= 3, (
            f"only {meanwhile} reads were answered during the first SSM request "
            f"({first[0]:.2f} s): they waited for its backend to load"
        )
