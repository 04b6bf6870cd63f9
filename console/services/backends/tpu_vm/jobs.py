"""Ray jobs through the dashboard's Jobs API, as the seed does with ``ray job ...`` by hand.

``JobService`` wraps Ray's ``JobSubmissionClient``. The client is synchronous (``requests``)
except ``tail_job_logs`` (aiohttp websocket), so every other call runs in a thread
(``asyncio.to_thread``) and never blocks the event loop. The client is created lazily, and
dropped whenever the dashboard is unreachable, so the next call reconnects: after the tunnel
is re-opened (``set_address`` if it moved to another local port) things just work again.

Job ids are Ray *submission* ids (what ``ray job status <id>`` takes); driver-only jobs (a
script calling ``ray.init`` directly) have none and are not listed.

Every submission records, in Ray's job metadata, the phantom spec that produced it
(``phantom.spec``: the ``SubmitSpec`` with secrets still as ``$NAME`` references), its mode and
sweep id, so a job lost with a preempted head can be resubmitted as it was
(``spec_from_metadata``). Secret values resolved into the runtime env are never put in errors.

Ray is imported lazily (inside functions): the TUI starts without importing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from console.secrets import Scrubber
from console.services.errors import BackendError, UnknownJob
from console.services.jobs.env import masked_env
from console.services.jobs.spec import SubmitSpec, new_job_id, spec_metadata
from console.services.model import (
    ACTIVE_JOBS,
    JobInfo,
    JobStatus,
    LogLine,
    LogStreamClosed,
)
from engine.contract import EX_PREEMPTED, JOB_ID_ENV

log = logging.getLogger(__name__)

T = TypeVar("T")
# A log stream that ends while its job runs is followed again at once when it brought lines,
# else after a pause doubling up to the last (a dashboard that is down answers nothing).
REFOLLOW_FIRST_S = 0.5
REFOLLOW_MAX_S = 10.0
# A job that checkpointed on a preemption notice exits EX_PREEMPTED (the engine's contract);
# Ray reports it as FAILED with this line.
_EXIT_CODE = re.compile(r"^Job entrypoint command failed with exit code (\d+)\b")


class JobError(BackendError):
    """A jobs operation failed; the message names what and how to fix it."""

    def __init__(self, message: str, *, address: str = "", job_id: str = "") -> None:
        super().__init__(message)
        self.address = address
        self.job_id = job_id


class UnknownJobError(JobError, UnknownJob):
    """No job with that id on this cluster."""


class DashboardUnreachableError(JobError):
    """The Ray dashboard (through the tunnel) did not answer."""


class SubmitError(JobError):
    """Ray refused the submission (bad runtime env, duplicate submission id...)."""


# -- the service ---------------------------------------------------------------------------------------
class JobService:
    """Submit, list, inspect, stop and follow Ray jobs at ``address`` (the dashboard URL).

    ``timeout_s`` bounds each HTTP request (connect/read) and each call as a whole, so a
    tunnel that accepts connections but never answers cannot hang the console.
    """

    def __init__(
        self,
        address: str,
        *,
        clock: Callable[[], float] = time.time,
        timeout_s: float = 30.0,
        submit_timeout_s: float = 600.0,
    ) -> None:
        self._address = _normalize(address)
        self._clock = clock
        self.timeout_s = timeout_s
        self.submit_timeout_s = submit_timeout_s
        self._client: Any = None
        self._client_lock = threading.Lock()

    # address / client ------------------------------------------------------------------------
    @property
    def address(self) -> str:
        return self._address

    def set_address(self, address: str) -> None:
        """Point at another dashboard URL (the tunnel moved); reconnects on the next call."""
        address = _normalize(address)
        if address != self._address:
            self._address = address
            self._client = None

    def reset(self) -> None:
        """Forget the client (e.g. the head was replaced); the next call reconnects."""
        self._client = None

    def _unreachable(self, exc: BaseException | str) -> DashboardUnreachableError:
        self._client = None
        reason = exc if isinstance(exc, str) else _reason(exc)
        return DashboardUnreachableError(
            f"Ray dashboard at {self._address} is unreachable ({reason}); is the cluster up? "
            "re-open the tunnel to the head (the `tunnel` action) and retry",
            address=self._address,
        )

    def _make_client(self) -> Any:
        from ray.job_submission import JobSubmissionClient

        timeout = self.timeout_s

        class _Client(JobSubmissionClient):  # type: ignore[misc]
            # Ray's client sends every request through _do_request with no timeout.
            def _do_request(self, method: str, endpoint: str, **kwargs: Any) -> Any:
                kwargs.setdefault("timeout", timeout)
                return super()._do_request(method, endpoint, **kwargs)

        try:
            return _Client(self._address)
        except Exception as exc:
            if _is_connection_error(exc):
                raise self._unreachable(exc) from None
            raise JobError(
                f"cannot use the Ray Jobs API at {self._address}: {_reason(exc)}",
                address=self._address,
            ) from None

    def _client_sync(self) -> Any:
        with self._client_lock:
            client = self._client
            if client is None:
                client = self._client = self._make_client()
            return client

    async def _run(
        self, fn: Callable[[Any], T], job_id: str = "", timeout: float | None = None
    ) -> T:
        """``fn(client)`` in a thread, with Ray's errors turned into JobErrors."""

        def call() -> T:
            client = self._client_sync()
            try:
                return fn(client)
            except Exception as exc:
                raise self._map_error(exc, job_id) from None

        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that arrives as
        # the call completes, and the poller that was told to stop polls on for ever.
        try:
            async with asyncio.timeout(timeout or self.timeout_s * 2):
                return await asyncio.to_thread(call)
        except TimeoutError:
            raise self._unreachable(f"no answer in {timeout or self.timeout_s * 2:.0f}s") from None

    def _map_error(self, exc: BaseException, job_id: str) -> JobError:
        if isinstance(exc, JobError):
            return exc
        if _is_connection_error(exc):
            return self._unreachable(exc)
        text = str(exc)
        if job_id and ("status code 404" in text or "does not exist" in text):
            return self.unknown_job(job_id)
        return JobError(f"Ray Jobs API at {self._address}: {_reason(exc)}", address=self._address)

    def unknown_job(self, job_id: str) -> UnknownJobError:
        return UnknownJobError(
            f"no job {job_id!r} on {self._address}; `phantom status` lists them (the Jobs screen too: key 2)",
            address=self._address,
            job_id=job_id,
        )

    # operations ----------------------------------------------------------------------------------
    async def submit(
        self,
        spec: SubmitSpec,
        *,
        working_dir: str | os.PathLike[str],
        environ: Mapping[str, str] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> JobInfo:
        """Validate and submit ``spec`` with ``working_dir`` uploaded as the job's code.

        Raises ``SpecError`` (from ``spec.checked()``) naming each bad field before anything
        is sent; ``SubmitError`` when Ray refuses; ``DashboardUnreachableError``.
        """
        spec = spec.checked()
        wd = os.fspath(working_dir)
        if "://" not in wd:
            local = await asyncio.to_thread(_local_dir, wd)
            if local is None:
                raise SubmitError(
                    f"working_dir {wd!r} is not a directory; run from your project or pass "
                    "the directory holding engine/",
                    address=self._address,
                )
            wd = local
        environ = os.environ if environ is None else environ
        runtime_env = spec.resolved_runtime_env(environ)
        runtime_env["working_dir"] = wd
        now = self._clock()
        submission_id = spec.submission_id or new_job_id(spec.mode, now)
        # every process of the job knows it (its trainers register under it to be asked
        # for a checkpoint: engine.contract)
        runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), JOB_ID_ENV: submission_id}
        meta = spec_metadata(spec, submitted_at=now)
        meta.update(metadata or {})
        entrypoint = spec.entrypoint()
        resources = spec.entrypoint_resources() or None
        hide = Scrubber(environ=runtime_env.get("env_vars") or {})

        def do(client: Any) -> str:
            try:
                return str(
                    client.submit_job(
                        entrypoint=entrypoint,
                        submission_id=submission_id,
                        runtime_env=runtime_env,
                        metadata=meta,
                        entrypoint_resources=resources,
                    )
                )
            except Exception as exc:
                if _is_connection_error(exc):
                    raise
                raise SubmitError(
                    f"Ray refused job {submission_id!r}: {hide.text(_reason(exc))}",
                    address=self._address,
                    job_id=submission_id,
                ) from None

        job_id = await self._run(do, timeout=self.submit_timeout_s)
        try:
            return await self.status(job_id)
        except UnknownJobError:  # not visible yet: report what we sent
            return JobInfo(
                job_id=job_id, status=JobStatus.PENDING, entrypoint=entrypoint, metadata=meta
            )

    async def list(self) -> list[JobInfo]:
        """Every submitted job the cluster knows, oldest first."""
        details = await self._run(lambda c: c.list_jobs())
        jobs = [_to_info(d) for d in details if getattr(d, "submission_id", None)]
        jobs.sort(key=lambda j: (j.start_time or 0.0, j.job_id))
        return jobs

    async def status(self, job_id: str) -> JobInfo:
        _check_id(job_id)
        return _to_info(await self._run(lambda c: c.get_job_info(job_id), job_id))

    async def stop(self, job_id: str) -> bool:
        """Ask Ray to stop the job; True if it was running. Unknown id -> UnknownJobError."""
        _check_id(job_id)
        return bool(await self._run(lambda c: c.stop_job(job_id), job_id))

    async def logs(self, job_id: str) -> str:
        """Everything the job has printed so far."""
        _check_id(job_id)
        return str(await self._run(lambda c: c.get_job_logs(job_id), job_id))

    async def wait_for(
        self,
        job_id: str,
        statuses: Iterable[str],
        *,
        timeout_s: float,
        poll_s: float = 0.5,
    ) -> JobInfo:
        """Poll until the job is in one of ``statuses``; JobError naming both on timeout."""
        wanted = set(statuses)
        deadline = time.monotonic() + timeout_s
        info = await self.status(job_id)
        while info.status not in wanted:
            if time.monotonic() >= deadline:
                raise JobError(
                    f"job {job_id!r} is {info.status} after {timeout_s:.0f}s, expected "
                    f"{' or '.join(sorted(wanted))}",
                    address=self._address,
                    job_id=job_id,
                )
            await asyncio.sleep(poll_s)
            info = await self.status(job_id)
        return info

    async def follow(self, job_id: str) -> AsyncIterator[LogLine | LogStreamClosed]:
        """Stream the job's output line by line, then one ``LogStreamClosed``.

        Ray's log stream (``ray job logs -f``, the SDK's ``tail_job_logs``) can end while the
        job still runs, and says nothing when it does: a proxy or NAT that times out the
        long-lived connection, a dropped forward, the dashboard restarting. A stream that
        ends while the job is PENDING or RUNNING is opened again and taken up where it left
        off: each one starts at the log's beginning, so the characters already taken are
        skipped (no line twice, none lost), backing off while a new stream brings nothing.
        Once the job has ended, what its log holds beyond them is read once more (a stream
        cut just before the end loses nothing) and the closing item carries the status;
        UNKNOWN when the dashboard cannot be asked (``early``: the caller may follow
        again), ``refollows`` how often the stream was taken up again. An unknown id raises
        ``UnknownJobError`` before anything is yielded.
        """
        await self.status(job_id)  # unknown id / unreachable: raise before streaming
        taken = 0  # characters of the log already yielded or pending
        pending = ""
        refollows = 0
        backoff = REFOLLOW_FIRST_S
        while True:
            client = await asyncio.to_thread(self._client_sync)
            skip, fresh = taken, False
            try:
                async with contextlib.aclosing(client.tail_job_logs(job_id)) as chunks:
                    async for chunk in chunks:
                        if skip:  # what an earlier stream gave already
                            cut = min(skip, len(chunk))
                            chunk, skip = chunk[cut:], skip - cut
                            if not chunk:
                                continue
                        taken += len(chunk)
                        fresh = True
                        pending += chunk
                        *lines, pending = pending.split("\n")
                        for line in lines:
                            yield LogLine(job_id=job_id, text=line.rstrip("\r"), at=self._clock())
            except Exception as exc:  # the websocket dropped; the status check below tells
                log.info("log stream of %s ended: %s", job_id, _reason(exc))
                if _is_connection_error(exc):
                    self._client = None
            try:
                status = (await self.status(job_id)).status
            except UnknownJobError:
                status = JobStatus.LOST
            except JobError:
                status = JobStatus.UNKNOWN
            if status not in ACTIVE_JOBS:
                break
            refollows += 1
            log.info("log stream of %s ended while it is %s: following again", job_id, status)
            if fresh:
                backoff = REFOLLOW_FIRST_S
            else:  # a stream that ends at once, again and again: do not spin
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, REFOLLOW_MAX_S)
        if status not in (JobStatus.LOST, JobStatus.UNKNOWN):
            with contextlib.suppress(JobError):
                rest = (await self.logs(job_id))[taken:]
                pending += rest
                *lines, pending = pending.split("\n")
                for line in lines:
                    yield LogLine(job_id=job_id, text=line.rstrip("\r"), at=self._clock())
        if pending:
            yield LogLine(job_id=job_id, text=pending.rstrip("\r"), at=self._clock())
        yield LogStreamClosed(
            job_id=job_id, job_status=status, at=self._clock(), refollows=refollows
        )


def _local_dir(path: str) -> str | None:
    """``path`` resolved, if it is a local directory (file system calls: run in a thread)."""
    p = Path(path).expanduser()
    return str(p.resolve()) if p.is_dir() else None


def _check_id(job_id: str) -> None:
    if not job_id or not re.match(r"^[A-Za-z0-9_.:-]+$", job_id):
        raise UnknownJobError(
            f"job id {job_id!r} is not valid (letters, digits, '_', '-', '.', ':'); "
            "`phantom status` lists them (the Jobs screen too: key 2)",
            job_id=job_id,
        )


def _normalize(address: str) -> str:
    address = address.strip().rstrip("/")
    if not address:
        raise ValueError("Ray dashboard address is empty; e.g. http://127.0.0.1:8265")
    if "://" not in address:
        address = "http://" + address
    return address


def _ms(value: Any) -> float | None:
    return None if value is None else float(value) / 1000.0


def job_status_of(status: str, message: str) -> JobStatus:
    """Ray's status, except a FAILED entrypoint that exited ``EX_PREEMPTED``: PREEMPTED.
    A status this console does not know (a newer Ray's) is UNKNOWN."""
    found = _EXIT_CODE.match(message) if status == JobStatus.FAILED else None
    if found and int(found.group(1)) == EX_PREEMPTED:
        return JobStatus.PREEMPTED
    return JobStatus.of(status)


def _to_info(details: Any) -> JobInfo:
    status = getattr(details, "status", "")
    message = str(details.message or "")
    return JobInfo(
        job_id=str(details.submission_id or details.job_id or ""),
        status=job_status_of(str(getattr(status, "value", status)), message),
        entrypoint=str(details.entrypoint or ""),
        start_time=_ms(details.start_time),
        end_time=_ms(details.end_time),
        message=message,
        metadata={str(k): str(v) for k, v in (details.metadata or {}).items()},
        env=masked_env(getattr(details, "runtime_env", None)),
    )


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    try:
        import requests

        if isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
            return True
    except ImportError:  # pragma: no cover - ray[default] depends on requests
        pass
    try:
        import aiohttp

        if isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ServerTimeoutError):
            return True
    except ImportError:  # pragma: no cover
        pass
    return False


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    text = re.sub(r"\s+", " ", text)
    return text if len(text) <= 400 else text[:400] + "..."
