"""The runner function: one tool's run per invocation, in an environment of that tenant only.

`kiln.lambda_handlers.runner` hands every invocation to `RunnerFunction.handle`. A run
payload (`kiln.runner.remote.encode`) is run by the same `kiln.runner.Runner` that `kiln dev`
uses in-process, and its answer carries what the run said (progress, logs) with its result;
then, whatever the run did to its supervisor, every process of the
environment but the runtime (this process, its ancestors, the runner's helper, what ran
before the first run) is killed and the files the run left in the shared temporary
directories are removed, so the next invocation finds nothing of it (`kiln.runner.sweep`).
The bundle cache is the one place in `/tmp` kept across runs: anything in it this process did
not make goes after each run, and a bundle a run changed (a `chmod` and a write, a file
planted in it) is found by its seal and made again from its zip before the next run uses it
(`kiln.bundles.seal`).
No standby waits between invocations. Should anything of a run still live after the sweep
(counted again once it has killed), the environment ends itself: this answer is posted to the
Runtime API, then the runtime exits, and Lambda serves the next invocation from a fresh
environment; a process that survived never meets a later invocation here (`_end_environment`).

An environment serves one tenant: the first run pins it, and a payload for another tenant,
or one whose tenant is not the environment's (`context.tenant_id`), is refused. A doctor
payload (`{"kiln_doctor": 1}`) answers `kiln.runner.doctor.probe()` from inside the function;
a save's warm-up (`{"kiln_warm": 1, "tenant", "bundle"}`) pins the tenant, has the helper wait
and fetches the bundle, and runs nothing (`warm`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from kiln.bundles.errors import BundleError, BundleFetchError
from kiln.runner import Runner, RunnerSettings, RunResult, contain, doctor, sweep
from kiln.runner.processes import read_stat
from kiln.runner.remote import PayloadError, decode, result_json, talk_json
from kiln.runner.talk import Said

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from kiln.bundles.cache import BundleCache
    from kiln.bundles.store import BundleRecord

log = logging.getLogger("kiln.serving.runner_function")
SUPERVISOR_EXIT_S = 0.1


class _PayloadRecords:
    """A bundle store that knows only the records the payloads brought (no table access).

    Its S3 client is made by the first bundle fetched: a tool without a bundle never needs
    botocore, ~60 ms of a new tenant's first call when imported at init
    (bench/runner/new_tenant.py)."""

    def __init__(self, s3: Callable[[], S3Client] | None, bucket: str) -> None:
        self._make_s3, self.bucket = s3, bucket
        self._s3: S3Client | None = None
        self.records: dict[str, BundleRecord] = {}

    @property
    def s3(self) -> S3Client:
        if self._s3 is None:
            if self._make_s3 is None:
                raise BundleFetchError("this runner has no S3 client to fetch bundles with")
            self._s3 = self._make_s3()
        return self._s3

    def get(self, bundle_id: str) -> BundleRecord | None:
        return self.records.get(bundle_id)

    def add(self, record: Mapping[str, Any]) -> str:
        from kiln.bundles.store import BundleRecord

        data = dict(record)
        data["requirements"] = tuple(data.get("requirements") or ())
        known = BundleRecord(**data)
        self.records[known.id] = known
        return known.id


class RunnerFunction:
    def __init__(
        self,
        settings: RunnerSettings,
        s3: Callable[[], S3Client] | None,  # makes the S3 client, on the first bundle fetched
        bucket: str,
        *,
        runtime_api: str | None = None,
        sweep_patience_s: float = sweep.PATIENCE_S,
    ) -> None:
        self.runtime_api = runtime_api  # host:port of Lambda's Runtime API (None: not in Lambda)
        self.sweep_patience_s = sweep_patience_s
        temp = Path(tempfile.gettempdir())
        self.bundle_root = temp / "kiln-bundles"
        self.settings = dataclasses.replace(
            settings,
            standby_runs=0,  # nothing of a run waits across invocations
            dedicated=True,  # one run at a time, in an environment of its own: one fork a run
            sweep_shared_temp=True,
            # Its bundle cache only: a place it keeps but does not use (the default
            # `kiln-bundles-<uid>`, `kiln-build-home-<uid>`) would keep what a run plants.
            own_temp_paths=(self.bundle_root,),
        )
        self.runner = Runner(self.settings)
        self.records = _PayloadRecords(s3, bucket)
        self._bundles: BundleCache | None = None  # made by the first bundle (`bundles`)
        self.tenant: str | None = None
        self.keep: list[str] = []  # the bundle cache, once made: until then a run's litter
        self.baseline = contain.snapshot()  # the runtime's own entries, kept
        self.companions = sweep.census()  # processes there before any run (extensions), kept
        # The helper's interpreter starts while the runtime finishes its init and asks for the
        # first invocation, which then finds it ready (a new tenant's first call: ~30 ms of it).
        # Started after the census: it is the runner's, kept by each sweep as the helper.
        failed = self.runner.start_helper()
        if failed:  # the first run tries again, and says why it cannot
            log.warning("the runner's helper did not start at init", extra={"error": failed})
        self._loop = asyncio.new_event_loop()

    @property
    def bundles(self) -> BundleCache:
        """The bundle cache, made by the first bundle: a tool without one never imports its
        modules (~8 ms of a new tenant's first call: bench/runner/new_tenant.py). Until then
        its folder is kept by no sweep: whatever a run made there goes with the run."""
        if self._bundles is None:
            from kiln.bundles.cache import BundleCache

            cache = BundleCache(self.records, root=self.bundle_root)  # type: ignore[arg-type]
            self._bundles, self.keep = cache, [str(self.bundle_root)]
        return self._bundles

    def close(self) -> None:
        """Let go of the runner's helper and the event loop (the runtime never does: tests)."""
        self.runner.close()
        self._loop.close()

    def handle(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        if event.get("kiln_doctor"):
            return {"doctor": doctor.probe()}
        if event.get("kiln_warm"):
            return self.warm(event, context)
        try:
            request, bundle = decode(event)
        except PayloadError as error:
            return {"error": str(error)}
        tenant = str(event.get("tenant") or "")
        refused = self._refuse(tenant, getattr(context, "tenant_id", None))
        if refused:
            log.warning("run refused", extra={"tenant": tenant, "reason": refused})
            return {"error": refused}
        left = _time_left(context)
        if left is not None:
            sent = request.time_left_s
            request = dataclasses.replace(
                request, time_left_s=left if sent is None else min(sent, left)
            )
        said: list[Said] = []  # its progress and log lines go back with the result
        request = dataclasses.replace(request, heard=said.append)
        try:
            result = self._run(request, bundle)
        finally:
            swept = self.sweep()
        talk, left_out = talk_json(said)
        answer: dict[str, Any] = {"result": result_json(result), "talk": talk, "swept": swept}
        if left_out:
            answer["left_out"] = left_out
        if swept["alive"] and self.runtime_api is not None:
            _end_environment(answer, self.runtime_api, context)
        return answer

    def warm(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        """A save's warm-up (`kiln.runner.remote.RemoteRunner.warm`): nothing runs. The
        environment is pinned to its tenant as a run would pin it, its helper waits, and the
        bundle the payload names is fetched and unpacked into the cache the runs use."""
        tenant = str(event.get("tenant") or "")
        refused = self._refuse(tenant, getattr(context, "tenant_id", None))
        if refused:
            log.warning("warm-up refused", extra={"tenant": tenant, "reason": refused})
            return {"error": refused}
        failed = self.runner.start_helper()
        if failed:
            return {"warm": False, "error": failed}
        bundle = event.get("bundle")
        if isinstance(bundle, Mapping):
            try:
                with self.bundles.use(self.records.add(bundle), bundle.get("resolved_sha256")):
                    pass
            except (BundleError, TypeError, ValueError) as error:
                return {"warm": False, "error": f"its packages could not be used here: {error}"}
        return {"warm": True}

    def _refuse(self, tenant: str, context_tenant: str | None) -> str | None:
        if not tenant:
            return "a run payload names no tenant"
        if context_tenant is not None and context_tenant != tenant:
            return "the payload's tenant is not this environment's"
        if self.tenant is None:
            self.tenant = tenant
        elif self.tenant != tenant:
            return "this environment serves another tenant"
        return None

    def _run(self, request: Any, bundle: Mapping[str, Any] | None) -> RunResult:
        if bundle is None:
            return self._loop.run_until_complete(self.runner.run(request))
        try:
            bundle_id = self.records.add(bundle)
            # the build the payload's record names (a rebuild may resolve to other versions)
            with self.bundles.use(bundle_id, bundle.get("resolved_sha256")) as path:
                request = dataclasses.replace(request, bundle_path=path)
                return self._loop.run_until_complete(self.runner.run(request))
        except (BundleError, TypeError, ValueError) as error:
            return RunResult(
                stdout="",
                stderr="",
                exit_code=None,
                timed_out=False,
                applied_timeout_s=request.timeout_s,
                duration_s=0.0,
                started=False,
                runner_error=f"its packages could not be used here: {error}",
            )

    def sweep(self) -> dict[str, int]:
        """Kill everything but the runtime; remove what runs left in the shared directories."""
        helper = self.runner.helper_pid
        keep = [helper] if helper is not None else []
        if not self.runner.direct:  # a direct run has no supervisor: its end is the helper's
            _let_supervisors_exit(helper, self.companions)
        killed, alive = sweep.kill_all_but(keep, self.companions, self.sweep_patience_s)
        removed = contain.remove(sweep.litter(self.baseline, self.keep))
        # What a run changed in a bundle is found by its seal at the next use; what it put
        # beside the bundles goes now.
        removed += self._bundles.remove_strangers() if self._bundles is not None else 0
        if killed or alive or removed:
            log.warning(
                "a run left processes or files behind",
                extra={"killed": killed, "alive": alive, "removed": removed},
            )
        return {"killed": killed, "alive": alive, "removed": removed, "pid": os.getpid()}


def _let_supervisors_exit(helper: int | None, companions: Any) -> None:
    """A run's supervisor closes its status pipe (for the runner, the run's end) just before
    it exits: give it that moment (SUPERVISOR_EXIT_S at most; the helper reaps it) instead of
    killing it and reporting it as left behind on every run. Whatever remains is swept."""
    if helper is None:
        return
    give_up = time.monotonic() + SUPERVISOR_EXIT_S
    while time.monotonic() < give_up:
        parents = (read_stat(str(pid)) for pid in sweep.candidates([helper], companions))
        if not any(stat is not None and stat[0] == helper for stat in parents):
            return
        time.sleep(0.002)


def _end_environment(answer: Mapping[str, Any], runtime_api: str, context: Any) -> NoReturn:
    """Something of a run outlived the sweep: answer this invocation, then end the runtime.

    The answer is posted to the Runtime API here (the runtime client would post it only after
    this returns, and then ask for the next invocation); the process then exits at once,
    without asking, and Lambda serves the next invocation from a fresh environment (the exit
    tears this one down, survivors included). The only moment a survivor could ask for work
    in the runtime's place is between the post and the exit.
    """
    request_id = getattr(context, "aws_request_id", "")
    log.error(
        "a run's processes outlived the sweep: this environment ends after its answer",
        extra={"alive": answer["swept"]["alive"], "request_id": request_id},
    )
    import urllib.request  # here only: ~20 ms of a new tenant's init otherwise

    url = f"http://{runtime_api}/2018-06-01/runtime/invocation/{request_id}/response"
    posted = urllib.request.Request(url, data=json.dumps(answer).encode(), method="POST")
    try:
        with urllib.request.urlopen(posted, timeout=10):  # noqa: S310 - Lambda's own loopback API
            pass
    except OSError as error:  # unanswered: Lambda reports the exit as this invocation's error
        log.error("the answer could not be posted", extra={"error": str(error)})
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(1)


def _time_left(context: Any) -> float | None:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return None if remaining is None else remaining() / 1000
