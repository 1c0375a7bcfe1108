"""The local emulator (kiln.local.emulator) as its own process: signatures, journal, tokens."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from conftest import AwsStack
from kiln.aws.clients import AwsClients, ensure_resources, make_clients
from kiln.local.dev import import_mirror
from kiln.local.emulator import Endpoint, run_emulator
from kiln.local.emulator.journal import Record, read_records

TABLE = BUCKET = "kiln-emulator-test"
KEY = {"pk": {"S": "counter"}, "sk": {"S": "one"}}


def clients_for(endpoint: Endpoint, secret: str | None = None) -> AwsClients:
    keys = (endpoint.credentials.access_key_id, secret or endpoint.credentials.secret_access_key)
    return make_clients(endpoint_url=endpoint.url, region=endpoint.region, credentials=keys)


@contextmanager
def emulator(state: Path, **options: Any) -> Iterator[AwsClients]:
    with run_emulator(state, **options) as endpoint:
        clients = clients_for(endpoint)
        ensure_resources(clients, table=TABLE, bucket=BUCKET)
        yield clients


def add_one(token: str | None = None, *, by: str = "1") -> dict[str, Any]:
    update = {
        "TableName": TABLE,
        "Key": KEY,
        "UpdateExpression": "ADD n :by",
        "ExpressionAttributeValues": {":by": {"N": by}},
    }
    request: dict[str, Any] = {"TransactItems": [{"Update": update}]}
    if token:
        request["ClientRequestToken"] = token
    return request


def counter(clients: AwsClients) -> int:
    item = clients.dynamodb.get_item(TableName=TABLE, Key=KEY, ConsistentRead=True).get("Item")
    return int(item["n"]["N"]) if item else 0


def test_unsigned_and_wrongly_signed_requests_are_refused_with_403(tmp_path: Path) -> None:
    with run_emulator(tmp_path) as endpoint:
        unsigned = httpx.post(
            endpoint.url,
            headers={"X-Amz-Target": "DynamoDB_20120810.ListTables"},
            content=b"{}",
        )
        assert unsigned.status_code == 403
        assert "not signed" in unsigned.json()["message"]
        assert httpx.get(endpoint.url + "/moto-api/").status_code == 403
        wrong = clients_for(endpoint, secret="not-the-key")
        for call in (wrong.dynamodb.list_tables, wrong.s3.list_buckets):
            with pytest.raises(ClientError) as refused:
                call()
            assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        assert clients_for(endpoint).dynamodb.list_tables()["TableNames"] == []


def test_a_request_signed_for_a_service_kiln_does_not_store_is_refused_unjournaled(
    tmp_path: Path,
) -> None:
    with emulator(tmp_path) as clients:
        journal = (tmp_path / "journal").stat().st_size
        sqs = clients.session.client("sqs", endpoint_url=clients.dynamodb.meta.endpoint_url)
        with pytest.raises(ClientError) as refused:
            sqs.create_queue(QueueName="not-kiln-s")
        error = refused.value.response["Error"]
        assert (error["Code"], refused.value.response["ResponseMetadata"]["HTTPStatusCode"]) == (
            "UnknownService",
            400,
        ), error
        assert "serves dynamodb, s3, ssm, not 'sqs'" in error["Message"]
        assert (tmp_path / "journal").stat().st_size == journal  # nothing to replay at start
        assert counter(clients) == 0  # and the emulator goes on


def test_reads_go_on_while_the_first_ssm_request_loads_its_backend(tmp_path: Path) -> None:
    """moto loads a service's backend on its first request; SSM's pulls in moto.ec2 and
    takes seconds. It used to do so under the lock every request takes, so the studio's
    first look at a tool's secrets stalled every catalog read (motofix.load_backend)."""
    with emulator(tmp_path) as clients:
        ssm = clients.session.client("ssm", endpoint_url=clients.dynamodb.meta.endpoint_url)
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


def test_acknowledged_writes_survive_a_sigkill_of_the_emulator(tmp_path: Path) -> None:
    with emulator(tmp_path) as clients:
        for _ in range(5):
            clients.dynamodb.transact_write_items(**add_one())
        clients.s3.put_object(Bucket=BUCKET, Key="code/a b.py", Body=b"print(1)\n")
        pid = json.loads((tmp_path / "endpoint.json").read_text())["pid"]
        os.kill(pid, signal.SIGKILL)
    with emulator(tmp_path) as clients:
        assert counter(clients) == 5
        body = clients.s3.get_object(Bucket=BUCKET, Key="code/a b.py")["Body"].read()
        assert body == b"print(1)\n"


def test_a_repeated_token_returns_the_first_success_without_applying_again(
    tmp_path: Path,
) -> None:
    with emulator(tmp_path) as clients:
        clients.dynamodb.transact_write_items(**add_one("token-1"))
        clients.dynamodb.transact_write_items(**add_one("token-1"))
        assert counter(clients) == 1
        with pytest.raises(ClientError) as mismatch:
            clients.dynamodb.transact_write_items(**add_one("token-1", by="5"))
        assert mismatch.value.response["Error"]["Code"] == "IdempotentParameterMismatchException"
        clients.dynamodb.transact_write_items(**add_one("token-2"))
        assert counter(clients) == 2
    with emulator(tmp_path) as clients:  # remembered across a restart too
        clients.dynamodb.transact_write_items(**add_one("token-2"))
        assert counter(clients) == 2


def journal_once(state: Path, ready: Callable[[list[Record]], bool]) -> list[Record]:
    """The journal's records once `ready` holds for them (compactions run in the background,
    and a child's replay can take a minute on a machine loaded by the rest of the suite)."""
    deadline = time.monotonic() + 150
    while not ready(records := read_records(state / "journal")[0]):
        assert time.monotonic() < deadline, f"the journal never got there: {len(records)} records"
        time.sleep(0.05)
    return records


def requests_in(records: list[Record]) -> list[Record]:
    return [record for record in records if record.kind == "request"]


def compacted(records: list[Record]) -> bool:
    """Whether the journal starts with a dump (items written back in batches, which no test
    write is) and holds fewer requests than were made."""
    targets = [r.meta["environ"].get("HTTP_X_AMZ_TARGET", "") for r in requests_in(records)]
    return any(t.endswith(".BatchWriteItem") for t in targets) and len(targets) < SETUP + 131


def test_a_token_is_remembered_across_a_compaction_and_a_restart(tmp_path: Path) -> None:
    with emulator(tmp_path, compact_after=5) as clients:
        clients.dynamodb.transact_write_items(**add_one("kept-token"))
        for _ in range(6):  # the journal is rewritten as the state, tokens included
            clients.dynamodb.transact_write_items(**add_one())
        journal_once(
            tmp_path, lambda records: "kept-token" in [r.meta.get("token") for r in records]
        )
    with emulator(tmp_path) as clients:
        clients.dynamodb.transact_write_items(**add_one("kept-token"))
        assert counter(clients) == 7
        with pytest.raises(ClientError) as mismatch:
            clients.dynamodb.transact_write_items(**add_one("kept-token", by="5"))
        assert mismatch.value.response["Error"]["Code"] == "IdempotentParameterMismatchException"


def test_a_cancelled_transaction_leaves_every_item_as_it_was(tmp_path: Path) -> None:
    with emulator(tmp_path) as clients:
        clients.dynamodb.transact_write_items(**add_one())
        fresh = {"pk": {"S": "new"}, "sk": {"S": "item"}}
        cancelled = {
            "TransactItems": [
                {"Update": add_one()["TransactItems"][0]["Update"]},
                {"Put": {"TableName": TABLE, "Item": fresh}},
                {
                    "ConditionCheck": {
                        "TableName": TABLE,
                        "Key": {"pk": {"S": "missing"}, "sk": {"S": "x"}},
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ]
        }
        with pytest.raises(ClientError) as refused:
            clients.dynamodb.transact_write_items(**cancelled)
        assert refused.value.response["Error"]["Code"] == "TransactionCanceledException"
        assert counter(clients) == 1
        assert "Item" not in clients.dynamodb.get_item(TableName=TABLE, Key=fresh)
    with emulator(tmp_path) as clients:  # and replaying the journal agrees
        assert counter(clients) == 1
        assert "Item" not in clients.dynamodb.get_item(TableName=TABLE, Key=fresh)


def test_a_journal_torn_by_a_crash_mid_append_loses_only_the_torn_record(
    tmp_path: Path,
) -> None:
    with emulator(tmp_path) as clients:
        for _ in range(3):
            clients.dynamodb.transact_write_items(**add_one())
    with (tmp_path / "journal").open("ab") as journal:
        journal.write(b"\x00\x00\x10\x00\x12\x34partial")  # a frame cut short
    with emulator(tmp_path) as clients:
        assert counter(clients) == 3
        clients.dynamodb.transact_write_items(**add_one())
    with emulator(tmp_path) as clients:
        assert counter(clients) == 4


def test_the_journal_is_compacted_and_the_state_kept(tmp_path: Path) -> None:
    with emulator(tmp_path, compact_after=40) as clients:
        clients.s3.put_object(Bucket=BUCKET, Key="kept.txt", Body=b"kept", ContentType="text/plain")
        for _ in range(100):
            clients.dynamodb.transact_write_items(**add_one())
        for i in range(30):
            clients.dynamodb.put_item(
                TableName=TABLE, Item={"pk": {"S": "row"}, "sk": {"S": str(i)}}
            )
        # 134 writes went in; a compaction leaves the state (a table and its items in
        # batches, a bucket, an object) and the writes since. How many came after the last
        # one depends on how fast they went in: its threshold counts the kept tokens too.
        records = journal_once(tmp_path, compacted)
    transactions = [
        record
        for record in requests_in(records)
        if record.meta["environ"].get("HTTP_X_AMZ_TARGET", "").endswith(".TransactWriteItems")
    ]
    tokens = [record for record in records if record.kind == "token"]
    assert len(tokens) + len(transactions) == 100  # each one's token, kept for 10 minutes
    with emulator(tmp_path) as clients:
        assert counter(clients) == 100
        rows = clients.dynamodb.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": "row"}},
        )
        assert rows["Count"] == 30
        got = clients.s3.get_object(Bucket=BUCKET, Key="kept.txt")
        assert got["Body"].read() == b"kept"
        assert got["ContentType"] == "text/plain"


def test_an_existing_state_directory_is_made_private_at_start(tmp_path: Path) -> None:
    state = tmp_path / "aws"
    (state / "old").mkdir(parents=True)
    (state / "old" / "notes").write_text("x")
    os.chmod(state, 0o755)  # noqa: S103 -- an open tree left by an older Kiln
    os.chmod(state / "old", 0o777)  # noqa: S103
    os.chmod(state / "old" / "notes", 0o644)
    with emulator(state):
        modes = {
            path.relative_to(state).as_posix(): oct(path.stat().st_mode & 0o777)
            for path in [state, *state.rglob("*")]
        }
    assert modes.pop(".") == "0o700"
    assert modes.pop("old") == "0o700"
    assert set(modes.values()) == {"0o600"}, modes


def test_the_emulator_exits_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\n"
            "from kiln.local.emulator import run_emulator\n"
            "with run_emulator(Path(sys.argv[1])):\n    print('up', flush=True); time.sleep(600)\n",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
    )
    assert parent.stdout is not None
    assert parent.stdout.readline() == b"up\n"
    pid = json.loads((tmp_path / "endpoint.json").read_text())["pid"]
    parent.kill()
    parent.wait()
    parent.stdout.close()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and b"Z" not in _state(pid):
        assert time.monotonic() < deadline, "the emulator outlived kiln dev"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    return _state(pid) not in (b"Z", b" Z ")


def _state(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().split(b")")[-1][:3]
    except FileNotFoundError:
        return b"Z"


def test_state_an_older_kiln_dev_mirrored_to_files_is_imported_once(
    aws: AwsStack, tmp_path: Path
) -> None:
    item = {"pk": {"S": "TOOLS"}, "sk": {"S": "abc"}, "name": {"S": "old"}}
    (tmp_path / "s3").mkdir()
    (tmp_path / "dynamodb.json").write_text(json.dumps([item]))
    (tmp_path / "s3" / "f1").write_bytes(b"print('old')\n")
    (tmp_path / "s3" / "index.json").write_text(json.dumps({"code/old.py": "f1"}))

    assert import_mirror(aws.clients, aws.table, aws.bucket, tmp_path) == 1
    key = {"pk": item["pk"], "sk": item["sk"]}
    assert aws.clients.dynamodb.get_item(TableName=aws.table, Key=key)["Item"] == item
    body = aws.clients.s3.get_object(Bucket=aws.bucket, Key="code/old.py")["Body"].read()
    assert body == b"print('old')\n"
    assert not (tmp_path / "dynamodb.json").exists()
    assert import_mirror(aws.clients, aws.table, aws.bucket, tmp_path) == 0


# In a process of its own (the emulator's changes to moto are process-wide): the emulator's
# app served over HTTP, written to through boto3, and moto's items counted as they live.
COUNT_ITEMS = r"""
import gc, json, sys, threading
from pathlib import Path
from werkzeug.serving import make_server
from moto.dynamodb.models.dynamo_type import Item
from kiln.aws.clients import ensure_resources, make_clients
from kiln.local.emulator import server
state = Path(sys.argv[1])
app = server.build(state, sync=False)
http = make_server("127.0.0.1", 0, app, threaded=True)
threading.Thread(target=http.serve_forever, daemon=True).start()
keys = server.load_credentials(state)
clients = make_clients(endpoint_url=f"http://127.0.0.1:{http.server_port}", region="us-east-1",
                       credentials=(keys.access_key_id, keys.secret_access_key))
ensure_resources(clients, table="kiln-emulator-test", bucket="kiln-emulator-test")
update = {"TableName": "kiln-emulator-test", "Key": {"pk": {"S": "c"}, "sk": {"S": "1"}},
          "UpdateExpression": "ADD n :one", "ExpressionAttributeValues": {":one": {"N": "1"}}}
live = []
for batch in (100, 200):  # counted after 100 writes, and after 300
    for _ in range(batch):
        clients.dynamodb.transact_write_items(TransactItems=[{"Update": update}])
    gc.collect()
    live.append(sum(isinstance(o, Item) for o in gc.get_objects()))
print(json.dumps(live))
"""


def test_moto_items_do_not_pile_up_with_writes(tmp_path: Path) -> None:
    """Every write copies the items it touches; none of the copies may outlive the write."""
    functions = Path(__file__).resolve().parents[3] / "functions"
    done = subprocess.run(
        [sys.executable, "-c", COUNT_ITEMS, str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, "PYTHONPATH": str(functions)},
    )  # fmt: skip
    after_100, after_300 = json.loads(done.stdout)
    assert after_100 == after_300, (after_100, after_300)


SHARED_STRINGS = r"""
import json
from kiln.local.emulator import motofix
from moto.dynamodb.models.dynamo_type import DynamoType, Item
motofix.install()
text = '{"pk": {"S": "LEDGER#2026-11-30"}, "sk": {"S": "%s"}, "tool": {"S": "echo"}}'
items = []
for sk in ("2026-11-30T18:00:00.000Z#a", "2026-11-30T18:00:00.000Z#b"):
    attrs = json.loads(text % sk)  # parsed apart, as two requests are
    items.append(Item(DynamoType(attrs["pk"]), DynamoType(attrs["sk"]), attrs))
first, second = items
print(json.dumps({
    "names": [a is b for a, b in zip(first.attrs, second.attrs)],
    "tool": first.attrs["tool"].value is second.attrs["tool"].value,
    "values": [item.attrs["sk"].value[-1] for item in items],
}))
"""


def test_stored_items_share_their_attribute_names_and_short_values(tmp_path: Path) -> None:
    """Every call-ledger entry repeats the same names and tool: one copy serves them all."""
    functions = Path(__file__).resolve().parents[3] / "functions"
    done = subprocess.run(
        [sys.executable, "-c", SHARED_STRINGS],
        capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, "PYTHONPATH": str(functions)},
    )  # fmt: skip
    shared = json.loads(done.stdout)
    assert shared == {"names": [True, True, True], "tool": True, "values": ["a", "b"]}


def compactors_of(state: Path) -> list[int]:
    """The live compaction children working on `state`'s journal (by their command line)."""
    journal = str(state / "journal").encode()
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            b"kiln.local.emulator.compactor" in argv
            and journal in argv
            and _state(int(proc.name)) != b"Z"
        ):
            found.append(int(proc.name))
    return found


# What a fresh stack journals before a test writes: CreateTable, CreateBucket, the new
# table's two listing-directory marks (kiln.aws.directory.mark_new_table) and its ledger
# shards' mark (kiln.aws.clients.LEDGER_SHARDS_SINCE_START).
SETUP = 5


def hold_a_compaction(clients: AwsClients, state: Path) -> tuple[int, int]:
    """Write until a compaction starts, and stop its child (SIGSTOP): from then on, until
    the test lets it go, a compaction is in progress. The writes made, and the child."""
    made, deadline = 0, time.monotonic() + 60
    while time.monotonic() < deadline:
        clients.dynamodb.transact_write_items(**add_one())
        made += 1
        for child in compactors_of(state):
            os.kill(child, signal.SIGSTOP)
            while _alive(child) and _state(child) != b" T ":  # stopped, or done already
                assert time.monotonic() < deadline, "SIGSTOP did not stop the compactor"
                time.sleep(0.01)
            if _alive(child):
                return made, child
    raise AssertionError(f"no compaction started in {made} writes")


def test_writes_are_acknowledged_while_a_compaction_is_in_progress_and_it_keeps_them(
    tmp_path: Path,
) -> None:
    with emulator(tmp_path, compact_after=20) as clients:
        made, child = hold_a_compaction(clients, tmp_path)
        try:
            for _ in range(30):  # each acknowledged with the compaction still running
                clients.dynamodb.transact_write_items(**add_one())
            assert counter(clients) == made + 30
            assert compactors_of(tmp_path) == [child]  # held, and no second one started
            # nothing adopted yet: the journal is every write (and the setup's)
            assert len(requests_in(read_records(tmp_path / "journal")[0])) == made + 30 + SETUP
        finally:
            os.kill(child, signal.SIGCONT)
        journal_once(tmp_path, lambda records: len(requests_in(records)) < made + 30 + SETUP)
        assert counter(clients) == made + 30
    with emulator(tmp_path) as clients:
        assert counter(clients) == made + 30


def test_a_sigkill_of_the_emulator_during_a_compaction_loses_no_write(tmp_path: Path) -> None:
    with emulator(tmp_path, compact_after=20) as clients:
        made, child = hold_a_compaction(clients, tmp_path)
        for _ in range(5):
            clients.dynamodb.transact_write_items(**add_one())
        os.kill(json.loads((tmp_path / "endpoint.json").read_text())["pid"], signal.SIGKILL)
        os.kill(child, signal.SIGCONT)
        deadline = time.monotonic() + 30
        while compactors_of(tmp_path):  # it follows its emulator, and adopts nothing
            assert time.monotonic() < deadline, "the compactor outlived its emulator"
            time.sleep(0.05)
    assert len(requests_in(read_records(tmp_path / "journal")[0])) == made + 5 + SETUP
    with emulator(tmp_path) as clients:
        assert counter(clients) == made + 5
    assert not list(tmp_path.glob("journal.compacting-*"))


def test_a_compactor_killed_midway_loses_nothing_and_a_later_compaction_succeeds(
    tmp_path: Path,
) -> None:
    with emulator(tmp_path, compact_after=20) as clients:
        made, child = hold_a_compaction(clients, tmp_path)
        os.kill(child, signal.SIGKILL)
        for _ in range(25):  # past the threshold again: another compaction starts
            clients.dynamodb.transact_write_items(**add_one())
        journal_once(tmp_path, lambda records: len(requests_in(records)) < made + 25)
        assert counter(clients) == made + 25
    with emulator(tmp_path) as clients:
        assert counter(clients) == made + 25
    assert not list(tmp_path.glob("journal.compacting-*"))


def test_a_query_returns_its_partition_in_key_order_and_pages_among_many_others(
    tmp_path: Path,
) -> None:
    """The emulator reads one partition for a Query (moto read and sorted the whole table):
    the answers stay DynamoDB's -- key order both ways, Limit, ExclusiveStartKey, filters."""
    with emulator(tmp_path) as clients:
        db = clients.dynamodb
        for n in range(30):  # other partitions, before and after the one queried
            for pk in ("A", "LEDGER#x", "TOOLS#", "Z"):
                db.put_item(TableName=TABLE, Item={"pk": {"S": pk}, "sk": {"S": f"{n:03}"}})
        for n in (5, 1, 4, 2, 3):
            item = {"pk": {"S": "TOOLS"}, "sk": {"S": f"t{n}"}, "n": {"N": str(n)}}
            db.put_item(TableName=TABLE, Item=item)

        def query(pk: str = "TOOLS", **extra: Any) -> dict[str, Any]:
            return db.query(
                TableName=TABLE,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": pk}, **extra.pop("values", {})},
                **extra,
            )

        def keys(answer: dict[str, Any]) -> list[str]:
            return [item["sk"]["S"] for item in answer["Items"]]

        assert keys(query()) == ["t1", "t2", "t3", "t4", "t5"]
        assert keys(query(ScanIndexForward=False)) == ["t5", "t4", "t3", "t2", "t1"]
        first = query(Limit=2)
        assert keys(first) == ["t1", "t2"]
        rest = query(ExclusiveStartKey=first["LastEvaluatedKey"])
        assert keys(rest) == ["t3", "t4", "t5"]
        odd = query(FilterExpression="n IN (:one, :three)",
                    values={":one": {"N": "1"}, ":three": {"N": "3"}})  # fmt: skip
        assert keys(odd) == ["t1", "t3"]
        assert query("nobody")["Items"] == []


def test_a_multipart_upload_is_stored_and_survives_a_restart(tmp_path: Path) -> None:
    """Bundles over 8 MB go up in parts (boto3's upload_file); the completed object is kept."""
    data = os.urandom(9 * 1024 * 1024)
    source = tmp_path / "big.zip"
    source.write_bytes(data)
    with emulator(tmp_path / "state") as clients:
        clients.s3.upload_file(str(source), BUCKET, "bundles/big.zip")
        stored = clients.s3.get_object(Bucket=BUCKET, Key="bundles/big.zip")["Body"].read()
        assert stored == data
    with emulator(tmp_path / "state") as clients:
        again = clients.s3.get_object(Bucket=BUCKET, Key="bundles/big.zip")["Body"].read()
        assert again == data
