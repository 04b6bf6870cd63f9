"""Where cadence comes from: W&B's own offline run files, and the W&B public API.

Sources are blocking (file reads, HTTP); ``CadenceTracker.poll`` runs them, and the services
call it through ``apoll`` from the event loop.

* ``OfflineRunSource``: the offline run files, read incrementally (``wandb_files``); its
  ``split`` gives one ``OfflineRunFile`` per run, for a one-shot read (``snapshot``).
* ``OnlineRunSource``: the W&B public API (``wandb.Api().runs`` + ``run.history``); wandb is
  imported lazily, in the polling thread.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from console.secrets import Scrubber
from console.services.cadence.wandb_files import (
    DEFAULT_FLUSH_INTERVAL_S,
    HistoryPoint,
    OfflineRun,
    WandbFileError,
    record_types,
    run_files,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunObservation:
    """What a source saw of one run in one poll.

    ``points`` are rows new since the source's previous poll, or, with ``replace``, the
    source's whole current window (the online API returns a window each time). ``stride`` is
    how many logged rows each point stands for (sampled online history), ``lag_s`` how late
    rows become visible through this source.
    """

    run_id: str
    name: str
    source: str
    state: str = "running"
    points: tuple[HistoryPoint, ...] = ()
    replace: bool = False
    stride: float = 1.0
    lag_s: float = 0.0


class CadenceSource(Protocol):
    kind: str  # "offline" or "online"

    def poll(self) -> list[RunObservation]:
        """Every run the source currently knows (blocking; runs in a worker thread)."""
        ...


@runtime_checkable
class SplitSource(Protocol):
    """A source that can be read as independent parts (one per run), each with its own
    ``kind`` and ``poll`` and, when known before reading, the ``run_id`` it covers."""

    def split(self) -> Sequence[CadenceSource]: ...


class CadenceSourceError(Exception):
    """A source cannot be read (names the source and the fix)."""


class OfflineRunSource:
    """Offline run files under a WANDB_DIR (``config.wandb.dir``), read incrementally.

    Only the newest ``max_runs`` files are followed. ``flush_interval_s`` is the writers'
    ``x_transaction_log_flush_interval`` (15 s unless the engine lowers it).
    """

    kind = "offline"

    def __init__(
        self,
        wandb_dir: str | os.PathLike[str],
        *,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        max_runs: int = 50,
    ) -> None:
        self.wandb_dir = Path(wandb_dir).expanduser()
        self.flush_interval_s = flush_interval_s
        self.max_runs = max_runs
        self._runs: dict[Path, OfflineRun] = {}

    def prepare(self) -> None:
        """Load the record decoder (an import of wandb), so that a one-shot read's deadline
        measures the files, not our own start-up."""
        record_types()

    def files(self) -> list[Path]:
        """The run files followed, oldest first."""
        return run_files(self.wandb_dir)[-self.max_runs :]

    def split(self) -> list[OfflineRunFile]:
        """One source per run file, for a one-shot read that gives each file its own
        deadline: a file that hangs (a stuck mount, a FIFO) then holds up only its run."""
        return [OfflineRunFile(path, lag_s=self.flush_interval_s) for path in self.files()]

    def poll(self) -> list[RunObservation]:
        files = self.files()
        live = set(files)
        for gone in set(self._runs) - live:
            del self._runs[gone]
        out = []
        for path in files:
            run = self._runs.get(path)
            if run is None:
                run = self._runs[path] = OfflineRun(path)
            try:
                out.append(_observe(run, self.kind, self.flush_interval_s))
            except WandbFileError as exc:
                log.warning("cadence: %s", exc)
            except OSError as exc:
                log.warning("cadence: cannot read %s: %s", path, exc)
        return out


class OfflineRunFile:
    """One offline run file as a source of its own; unlike ``OfflineRunSource`` it raises
    what stops it reading (``WandbFileError``, ``OSError``), so a one-shot read can say why
    the run has no current numbers. ``run_id`` is known before the file is read."""

    kind = OfflineRunSource.kind

    def __init__(self, path: Path, *, lag_s: float = DEFAULT_FLUSH_INTERVAL_S) -> None:
        self.path = path
        self.lag_s = lag_s
        self._run = OfflineRun(path)
        self.run_id = self._run.run_id

    def poll(self) -> list[RunObservation]:
        return [_observe(self._run, self.kind, self.lag_s)]


def _observe(run: OfflineRun, kind: str, lag_s: float) -> RunObservation:
    points = run.poll()
    return RunObservation(
        run_id=run.run_id,
        name=run.name or run.run_id,
        source=kind,
        state=run.state,
        points=tuple(points),
        lag_s=lag_s,
    )


class OnlineRunSource:
    """Runs of one W&B project through the public API (``wandb.Api``), newest first.

    Per poll: ``api.runs(path, order="-created_at")`` (the API caches runs, so it is flushed
    first) and, for each running run (and once more when a run stops), ``run.history(keys=
    ["_timestamp"], samples=N, pandas=False)``: the server's sampled history of ``_step`` and
    ``_timestamp``. When a run has more rows than ``samples`` the sampled points are further
    apart; ``stride`` (rows per point, from ``historyLineCount``) rescales the intervals.
    ``base_url`` (or ``WANDB_BASE_URL``) points it at another server, e.g. a local one in tests.
    """

    kind = "online"

    def __init__(
        self,
        project: str,
        entity: str = "",
        *,
        base_url: str | None = None,
        api_key_env: str = "WANDB_API_KEY",
        max_runs: int = 20,
        samples: int = 500,
        lag_s: float = DEFAULT_FLUSH_INTERVAL_S,
        timeout_s: int = 20,
        environ: Mapping[str, str] | None = None,
        api_factory: Callable[[], Any] | None = None,
    ) -> None:
        if not project:
            raise CadenceSourceError("online cadence: wandb.project is empty; set it in [wandb]")
        self.project = project
        self.entity = entity
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.max_runs = max_runs
        self.samples = samples
        self.lag_s = lag_s
        self.timeout_s = timeout_s
        self._environ = environ
        self._api_factory = api_factory
        self._api: Any = None
        self._was_running: set[str] = set()

    @property
    def path(self) -> str:
        return f"{self.entity}/{self.project}" if self.entity else self.project

    def prepare(self) -> None:
        """Load the W&B public API (an import of wandb, ~3 s on a busy machine), so that a
        one-shot read's deadline measures the server, not our own start-up."""
        if self._api_factory is None:
            import wandb.apis.public  # noqa: F401

    def _make_api(self) -> Any:
        if self._api_factory is not None:
            return self._api_factory()
        environ = os.environ if self._environ is None else self._environ
        key = environ.get(self.api_key_env, "")
        if not key:
            raise CadenceSourceError(
                f"online cadence: ${self.api_key_env} is not set (wandb.api_key_env); export "
                'your W&B API key or use wandb.mode = "offline"'
            )
        base_url = self.base_url or environ.get("WANDB_BASE_URL") or None
        import wandb  # lazy: heavy, and only the online path needs it

        overrides = {"base_url": base_url} if base_url else None
        try:
            return wandb.Api(overrides=overrides, api_key=key, timeout=self.timeout_s)
        except Exception as exc:
            where = base_url or "the W&B server"
            raise CadenceSourceError(
                f"online cadence: cannot log in to {where}: {Scrubber(environ={'key': key}).text(str(exc))}"
            ) from None

    def poll(self) -> list[RunObservation]:
        if self._api is None:
            self._api = self._make_api()
        api = self._api
        try:
            api.flush()
            runs = list(
                itertools.islice(
                    api.runs(self.path, order="-created_at", per_page=self.max_runs),
                    self.max_runs,
                )
            )
        except Exception as exc:
            self._api = None  # re-login next time (server back, key rotated)
            why = self._scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
            raise CadenceSourceError(
                f"online cadence: listing runs of {self.path!r} failed: {why}"
            ) from None
        out = []
        for run in runs:
            run_id = str(run.id)
            state = str(getattr(run, "state", "") or "")
            name = str(getattr(run, "name", "") or run_id)
            fetch = state == "running" or run_id in self._was_running
            if state == "running":
                self._was_running.add(run_id)
            else:
                self._was_running.discard(run_id)
            if not fetch:
                out.append(RunObservation(run_id=run_id, name=name, source=self.kind, state=state))
                continue
            try:
                rows = run.history(keys=["_timestamp"], samples=self.samples, pandas=False)
            except Exception as exc:
                log.warning("cadence: history of %s/%s failed: %s", self.path, run_id, exc)
                out.append(RunObservation(run_id=run_id, name=name, source=self.kind, state=state))
                continue
            points = _rows_to_points(rows)
            line_count = _attr(run, "historyLineCount")
            stride = 1.0
            if isinstance(line_count, int) and len(points) > 1 and line_count > len(points):
                stride = (line_count - 1) / (len(points) - 1)
            out.append(
                RunObservation(
                    run_id=run_id,
                    name=name,
                    source=self.kind,
                    state=state,
                    points=tuple(points),
                    replace=True,
                    stride=stride,
                    lag_s=self.lag_s,
                )
            )
        return out

    def _scrub(self, text: str) -> str:
        environ = os.environ if self._environ is None else self._environ
        return Scrubber(names=[self.api_key_env], environ=environ).text(text)


def _attr(run: Any, key: str) -> Any:
    attrs = getattr(run, "_attrs", None)
    return attrs.get(key) if isinstance(attrs, Mapping) else None


def _rows_to_points(rows: Any) -> list[HistoryPoint]:
    points = []
    for row in rows or ():
        if not isinstance(row, Mapping):
            continue
        step, ts = row.get("_step"), row.get("_timestamp")
        if isinstance(step, int | float) and isinstance(ts, int | float) and math.isfinite(ts):
            points.append(HistoryPoint(step=int(step), timestamp=float(ts)))
    points.sort(key=lambda p: (p.step, p.timestamp))
    return points
