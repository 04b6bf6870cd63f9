"""The facade's parts, built here and handed over: the one place the services are composed.

``compose`` makes the bus and the sink the journal writes through, the backend (with the sink
it reports to), an emulator's chaos, the job outcomes, the submitter with its checkpoint
advice, the retry budget, the job watcher, the cadence tracker, the observer, the watchdog
(whose plan resubmits through the budget and the submitter), the sharing between front ends
and the consumers fed from the bus; ``Facade`` receives them (``facade.Parts``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from console.services.api import ServiceSettings
from console.services.backends.base import Backend, Chaos
from console.services.cadence.tracker import CadenceTracker
from console.services.facade import BusConsumer, Facade, Observer, Parts
from console.services.jobs.budget import RetryBudget
from console.services.jobs.registry import Advise, JobRegistry, Submitter
from console.services.jobs.watcher import JobWatcher
from console.services.model.bus import UpdateBus
from console.services.record.journal import Journal
from console.services.record.lease import PodLeases
from console.services.record.outcomes import JobOutcomes
from console.services.record.sharing import Sharing
from console.services.record.sink import EventSink
from console.services.recovery.watchdog import Watchdog

MakeBackend = Callable[[EventSink], Backend]
MakeConsumer = Callable[[EventSink], BusConsumer]


def compose(
    settings: ServiceSettings,
    *,
    make_backend: MakeBackend,
    journal: Journal,
    registry: JobRegistry,
    leases: PodLeases,
    chaos: Callable[[Backend], Chaos] | None = None,
    consumers: Sequence[MakeConsumer] = (),
    advise: Callable[[Backend], Advise] | None = None,
    clock: Callable[[], float] = time.time,
) -> Facade:
    """The services over ``make_backend``'s backend, every part made here."""
    rec = settings.recovery
    bus = UpdateBus()
    sink = EventSink(journal, bus.publish, clock=clock)
    backend = make_backend(sink)
    outcomes = JobOutcomes(journal, clock=clock)
    submitter = Submitter(
        backend,
        registry,
        sink,
        bus.publish,
        clock=clock,
        poll_budget_s=settings.polling.budget_s,
        advise=advise(backend) if advise is not None else None,
    )
    retry_budget = RetryBudget(registry, outcomes, sink, rec.max_error_retries, clock=clock)
    observer = Observer(backend, registry)
    watchdog = Watchdog(
        backend.recovery_plan(outcomes.skipping_ended(retry_budget.guard(submitter.resubmit))),
        observe=observer.observe,
        sink=sink,
        publish=bus.publish,
        auto=rec.auto,
        poll_interval_s=settings.polling.interval_s,
        step_retries=rec.step_retries,
        ready_timeout_s=rec.ready_timeout_s,
        emit_stall_events=False,
        backoff_s=settings.polling.retry_s,
        clock=clock,
        action_lease=leases.actions,
    )
    parts = Parts(
        bus=bus,
        sink=sink,
        journal=journal,
        backend=backend,
        chaos=chaos(backend) if chaos is not None else None,
        registry=registry,
        leases=leases,
        outcomes=outcomes,
        submitter=submitter,
        retry_budget=retry_budget,
        job_watcher=JobWatcher(backend.list_jobs),
        cadence_tracker=CadenceTracker(
            backend.cadence_sources(),
            rec.stall_factor,
            clock=clock,
            source_deadline_s=rec.cadence_deadline_s,
        ),
        observer=observer,
        watchdog=watchdog,
        sharing=Sharing(journal, leases, watchdog, bus.publish, sink.own),
        consumers=[make(sink) for make in consumers],
    )
    return Facade(settings, parts, clock=clock)
