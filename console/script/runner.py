"""Runs a parsed script against the services: one step per line, results as JSON lines.

stdout carries one JSON object per line (``step``, ``event``, ``summary``), flushed per line
and scrubbed of secrets; stderr carries diagnostics. Exit codes (``console.exit_codes``): 0
all steps ok, 1 a step failed, 2 a config problem found only when the services were built
or bad input only the cluster could judge (a workload spec refused: ``SpecError``, nothing
created), 130 interrupted (SIGINT/SIGTERM), after stopping the jobs this run submitted and
bringing down a pod (or GKE emulator) this run brought up (or tearing down Ray it started
on someone else's pod).

The services are built lazily, at the first step that needs the cluster: ``pod up`` must
run before they can exist on a fresh machine, and a script of ``sleep`` lines pays nothing.

Over a fleet each line runs in the ``ClusterSession`` of the cluster it acts on: its own
services, ``last``, events and cleanup (an interrupt undoes, cluster by cluster, what the
script did there). A ``[[clusters]]`` entry's step and event lines name their ``"cluster"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from console import exit_codes
from console.commands import (
    CommandFailed,
    GkeControl,
    PodControl,
    Started,
    execute,
    execute_fleet,
)
from console.commands.kit.feed import EventFeed
from console.commands.kit.told import error_sentence, failure_sentence
from console.config import Config
from console.script.language import ACTOR
from console.script.parse import Script, ScriptLine
from console.secrets import Scrubber
from console.services.api import UnbuiltServices
from console.services.model import TERMINAL_JOBS, ActionResult, JobInfo, Reason, to_jsonable

if TYPE_CHECKING:
    from console.services.api import ConsoleServices, ServiceSettings

ServicesFactory = Callable[[Config], "ConsoleServices"]


class JsonLines:
    """Thread-safe writer: one scrubbed JSON object per line, flushed per line."""

    def __init__(self, out: TextIO, scrub: Scrubber) -> None:
        self._out = out
        self._scrub = scrub
        self._lock = threading.Lock()

    def emit(self, obj: Mapping[str, Any]) -> None:
        line = json.dumps(self._scrub.data(to_jsonable(obj)), ensure_ascii=False, default=str)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


@dataclass(frozen=True)
class Target:
    """One cluster a script may act on: its config, its services (not built yet), and its
    emulators' clients (``pod up``/``gke up``; None where the cluster has none)."""

    config: Config
    services: UnbuiltServices
    pod: PodControl | None = None
    gke: GkeControl | None = None


class ClusterSession:
    """The ``Session`` a script's commands run in on one cluster: its services (built at the
    first step that needs them), the jobs the script made there (``last``), what it heard
    from them and what it started there. A fleet's script has one per cluster it touches."""

    def __init__(self, runner: ScriptRunner, name: str, target: Target) -> None:
        self._runner = runner
        self.name = name
        self.actor = ACTOR
        self.pod: PodControl | None = target.pod
        self.gke: GkeControl | None = target.gke
        self.settings: ServiceSettings = target.services.settings
        self._unbuilt = target.services
        self.poll_s = runner.poll_interval_s or self.settings.polling.client_s
        self.named = bool(target.config.state_dir)  # a [[clusters]] entry: lines name it
        self.feed = EventFeed(self._emit, runner.clock)
        self.feed.bind(asyncio.get_running_loop())
        self._services: ConsoleServices | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.submitted: list[str] = []
        self.last_job: str | None = None
        self.started: set[Started] = set()

    def _emit(self, obj: Mapping[str, Any]) -> None:
        self._runner.emit(self.stamp(obj))

    def stamp(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """``obj`` naming this cluster (after its type) when the config is a fleet's."""
        if not self.named:
            return obj
        return {"type": obj.get("type"), "cluster": self.name, **obj}

    def diag(self, message: str) -> None:
        self._runner.diag(message)

    async def wait(self, timeout: float) -> None:
        """Until the feed hears something new, or ``timeout``; interruptible."""
        self._runner.check_interrupt()
        await self.feed.wait(timeout)
        self._runner.check_interrupt()

    def made(self, info: JobInfo) -> None:
        self.last_job = info.job_id
        self.submitted.append(info.job_id)
        self.feed.observe_job(info)

    def tell(self, text: str) -> None:
        return None  # a script's steps say what they did in their result

    def job_ref(self, ref: str | None) -> str:
        ref = ref or "last"
        if ref == "last":
            if self.last_job is None:
                raise CommandFailed(
                    "`last`: no job was submitted (the submit step failed or was skipped)"
                )
            ref = self.last_job
        job_id = self.feed.follow(ref)
        return self._services.successor(job_id) if self._services is not None else job_id

    async def services(self) -> ConsoleServices:
        if self._services is None:
            services = self._unbuilt.build()
            self._unsubscribe = services.subscribe(self.feed)
            try:
                await services.start()
            except BaseException:
                self._unsubscribe()
                self._unsubscribe = None
                with contextlib.suppress(Exception):
                    await services.stop()
                raise
            self._services = services
        return self._services

    async def drop_services(self) -> None:
        services, self._services = self._services, None
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if services is not None:
            try:
                await services.stop()
            except Exception as exc:
                self.diag(f"phantom: stopping services: {exc}")

    async def cleanup(self) -> dict[str, Any]:
        """After an interrupt: stop the jobs the script submitted here, then undo its
        `pod up` (or, on a pod it did not start, its `ray-up`) and its `gke up`."""
        done: dict[str, Any] = {"stopped_jobs": [], "pod_down": False}
        services = self._services
        if services is not None:
            for job_id in dict.fromkeys(self.feed.follow(j) for j in self.submitted):
                try:
                    async with asyncio.timeout(30):
                        info = await services.job_status(job_id)
                    if info.status in TERMINAL_JOBS:
                        continue
                    async with asyncio.timeout(60):
                        res = await services.stop_job(job_id, ACTOR)
                    if res.ok:
                        done["stopped_jobs"].append(job_id)
                    else:
                        self.diag(f"phantom: could not stop job {job_id}: {res.message}")
                except Exception as exc:
                    self.diag(f"phantom: could not stop job {job_id}: {exc}")
        if Started.RAY in self.started and Started.POD not in self.started and services:
            try:  # Ray this run started on a pod it did not: stop it, leave the pod
                async with asyncio.timeout(300):
                    res = await services.teardown(ACTOR)
                done["teardown"] = res.ok
            except Exception as exc:
                self.diag(f"phantom: teardown failed: {exc}")
        if Started.POD in self.started and self.pod is not None:
            await self.drop_services()
            try:
                done["pod_down"] = await self.pod.down()
                self.started.discard(Started.POD)
            except Exception as exc:
                self.diag(f"phantom: pod down failed: {exc}")
        if Started.GKE in self.started and self.gke is not None:
            await self.drop_services()
            try:
                done["gke_down"] = await self.gke.down()
                self.started.discard(Started.GKE)
            except Exception as exc:
                self.diag(f"phantom: gke down failed: {exc}")
        return done


class ScriptRunner:
    """Runs a script's lines, each in the session of the cluster it acts on."""

    def __init__(
        self,
        script: Script,
        targets: Mapping[str, Target],
        *,
        stdout: TextIO,
        stderr: TextIO,
        clock: Callable[[], float] = time.time,
        poll_interval_s: float | None = None,
    ) -> None:
        self.script = script
        self.targets = dict(targets)
        first = next(iter(self.targets.values())).config
        self._scrub = Scrubber([first.wandb.api_key_env])  # [wandb] is the fleet's, shared
        self._out = JsonLines(stdout, self._scrub)
        self._err = stderr
        self.clock = clock
        self.poll_interval_s = poll_interval_s
        self.sessions: dict[str, ClusterSession] = {}
        self._interrupted: str | None = None
        self._config_error = False
        self._cleaning_up = False

    def emit(self, obj: Mapping[str, Any]) -> None:
        self._out.emit(obj)

    def diag(self, message: str) -> None:
        self._err.write(self._scrub.text(message) + "\n")
        self._err.flush()

    def check_interrupt(self) -> None:
        # Belt and braces: on 3.11 a cancel can be swallowed by a wait_for deep inside a
        # library when its inner future completes in the same loop turn.
        if self._interrupted is not None and not self._cleaning_up:
            raise asyncio.CancelledError()

    def session(self, cluster: str) -> ClusterSession:
        """The session of ``cluster`` (a line that touches none: the first cluster's, as
        its words bind there), made at its first line."""
        name = cluster or next(iter(self.targets))
        if name not in self.sessions:
            self.sessions[name] = ClusterSession(self, name, self.targets[name])
        return self.sessions[name]

    async def drop_services(self) -> None:
        for session in self.sessions.values():
            await session.drop_services()

    # -- run --------------------------------------------------------------------------------
    async def run(self) -> int:
        task = asyncio.current_task()
        assert task is not None
        restore = self._install_signals(task)
        started = time.monotonic()
        results: list[dict[str, Any]] = []
        cleanup: dict[str, Any] = {}
        try:
            try:
                await self._run_steps(results)
            except asyncio.CancelledError:
                if self._interrupted is None:
                    raise
                while task.uncancel():
                    pass
                self._cleaning_up = True
                self.diag(f"phantom: {self._interrupted}: stopping what this script started")
                try:
                    cleanup = await self._cleanup()
                except asyncio.CancelledError:
                    while task.uncancel():
                        pass
                    cleanup = {"skipped": "interrupted again"}
                    self.diag("phantom: interrupted again: cleanup skipped")
        finally:
            restore()
            with contextlib.suppress(asyncio.CancelledError):
                await self.drop_services()
        failed = [r for r in results if not r["ok"]]
        if self._interrupted is not None:
            code = exit_codes.INTERRUPTED
        elif self._config_error:
            code = exit_codes.USAGE
        else:
            code = exit_codes.FAILED if failed else exit_codes.OK
        summary: dict[str, Any] = {
            "type": "summary",
            "ok": code == exit_codes.OK,
            "exit_code": code,
            "steps_total": len(self.script.lines),
            "steps_run": len(results),
            "steps_ok": len(results) - len(failed),
            "steps_failed": len(failed),
            "failed": [
                {
                    "n": r["n"],
                    "line": r["line"],
                    "action": r["action"],
                    "error": r["result"].get("error", ""),
                }
                for r in failed
            ],
            "elapsed_s": round(time.monotonic() - started, 3),
            "interrupted": self._interrupted,
            "events": sum(len(s.feed.events) for s in self.sessions.values()),
        }
        if cleanup:
            summary["cleanup"] = cleanup
        self._out.emit(summary)
        return code

    def _install_signals(self, task: asyncio.Task[Any]) -> Callable[[], None]:
        loop = asyncio.get_running_loop()
        installed: list[tuple[signal.Signals, Any]] = []

        def on_signal(sig: signal.Signals) -> None:
            first = self._interrupted is None
            if first:
                self._interrupted = sig.name
            task.cancel()
            if not first:
                self.diag(f"phantom: {sig.name} again: abandoning cleanup")

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                previous = signal.getsignal(sig)
                loop.add_signal_handler(sig, on_signal, sig)
                installed.append((sig, previous))
            except (ValueError, RuntimeError, NotImplementedError):
                pass  # not the main thread (embedded use): the caller handles signals

        def restore() -> None:
            # remove_signal_handler resets to the default; put back whoever was there before.
            for sig, previous in installed:
                loop.remove_signal_handler(sig)
                if previous is not None:
                    signal.signal(sig, previous)

        return restore

    async def _run_steps(self, results: list[dict[str, Any]]) -> None:
        total = len(self.script.lines)
        stop_after_failure = False
        for n, step in enumerate(self.script.lines, start=1):
            self.check_interrupt()
            if stop_after_failure and not step.always:
                continue
            self.diag(f"phantom: [{n}/{total}] line {step.line}: {step.text}")
            t0 = time.monotonic()
            try:
                outcome = await self._dispatch(step)
            except asyncio.CancelledError:
                elapsed = time.monotonic() - t0
                self._emit_step(results, n, step, False, elapsed, {"error": "interrupted"})
                raise
            except Exception as exc:  # a bug of the runner's own: this step fails, not the run
                outcome = ActionResult.failed(step.action, Reason.ERROR, error_sentence(exc))
            ok = outcome.ok
            result: dict[str, Any] = dict(outcome.data)
            if not ok:
                result["error"] = failure_sentence(outcome)
            # a config found wrong when the services were built, or input only the cluster
            # could judge (a workload spec refused: nothing made): exit 2, as a bad script
            if outcome.reason in (Reason.BAD_CONFIG, Reason.BAD_INPUT):
                self._config_error = True
            self._emit_step(results, n, step, ok, time.monotonic() - t0, result)
            if not ok:
                self.diag(
                    f"{self.script.name}:{step.line}: {step.action} failed: {result['error']}"
                )
                if not step.continue_on_error or self._config_error:
                    stop_after_failure = True
                    skipped = sum(1 for s in self.script.lines[n:] if not s.always)
                    if skipped:
                        self.diag(
                            f"phantom: skipping the {skipped} remaining step(s) before `finally` "
                            "(`set continue-on-error on` or --continue goes on after a failure)"
                        )

    def _emit_step(
        self,
        results: list[dict[str, Any]],
        n: int,
        step: ScriptLine,
        ok: bool,
        elapsed: float,
        result: Mapping[str, Any],
    ) -> None:
        obj: dict[str, Any] = {"type": "step", "n": n, "line": step.line}
        if step.cluster and self.session(step.cluster).named:
            obj["cluster"] = step.cluster
        obj |= {
            "action": step.action,
            "ok": ok,
            "elapsed_s": round(elapsed, 3),
            "result": to_jsonable(result),
        }
        results.append(obj)
        self._out.emit(obj)

    async def _cleanup(self) -> dict[str, Any]:
        """After an interrupt: each cluster's session undoes what the script did there (a
        fleet's cleanup: by cluster)."""
        done = {name: await session.cleanup() for name, session in self.sessions.items()}
        if len(self.targets) == 1:
            return next(iter(done.values()), {"stopped_jobs": [], "pod_down": False})
        return {"clusters": done}

    async def _dispatch(self, line: ScriptLine) -> ActionResult:
        # Cleanup after `finally` only undoes what this run did: a `pod up` that failed
        # because someone else's pod is running must not lead to taking theirs down.
        skipped = {
            "pod down": (Started.POD, "this script did not bring a pod up"),
            "gke down": (Started.GKE, "this script did not bring the GKE emulator up"),
            "teardown": (Started.RAY, "this script did not start Ray"),
        }.get(line.action)
        session = self.session(line.cluster)
        if line.always and skipped is not None and skipped[0] not in session.started:
            return ActionResult.done(line.action, "skipped", {"skipped": skipped[1]})
        command = line.command
        assert command is not None  # a directive makes no line
        if line.fleet:  # every cluster's session, built where the read needs it
            sessions = {name: self.session(name) for name in self.targets}
            return await execute_fleet(command, sessions, command.make(line.args))
        return await execute(command, session, command.make(line.args))
