"""The composition root: the one place that decides what the console runs against.

``make_services(config)`` builds the services both front ends drive: the backend for
``cluster.provider`` (the local pod emulator, a real TPU VM pod on GCP, or GKE: a real
cluster from a kubeconfig or the local GKE emulator), the journal, the job registry and, on
an emulator only, chaos (preempt / recreate a host, preempt a slice). Apart from
``console.wiring`` (the emulator adapter) and the tests, nothing else imports the emulator.

Importing this module is cheap; what a command needs (grpc, asyncssh, Ray's job client) is
imported by the function that builds it, so ``phantom --script-help`` or the first frame of
the TUI never wait for it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from console.config import Config, ConfigError, cluster_state_dir
from console.config.listen import Listen
from console.wiring import settings as slices

if TYPE_CHECKING:
    from console.services.api import ConsoleServices, ServiceSettings, UnbuiltServices
    from console.services.backends.base import Backend, Chaos
    from console.services.backends.tpu_vm.capacity import CapacityHooks
    from console.services.backends.tpu_vm.parts import PodAccess
    from console.services.capabilities import Capability
    from console.services.exporter.server import Exporter, ReadRows
    from console.services.facade import BusConsumer, Facade
    from console.services.jobs.registry import Advise
    from console.services.pending import PendingServices
    from console.services.record.journal import Journal
    from console.services.record.lease import FileLease
    from console.services.record.sink import EventSink
    from console.wiring.compose import MakeConsumer
    from console.wiring.control import LocalPodControl
    from console.wiring.gke import LocalGkeControl

    # The TPU VM backend's access, made with the journal, the sink and the clock its gcp
    # provider reports to as it gets the slice back.
    MakeAccess = Callable[[Journal, EventSink, Callable[[], float]], PodAccess]

REPO_ROOT = Path(__file__).resolve().parents[2]
ServicesFactory = Callable[[Config], "ConsoleServices"]


def make_services(
    config: Config,
    *,
    clock: Callable[[], float] = time.time,
    state_dir: str | os.PathLike[str] | None = None,
    journal_path: str | os.PathLike[str] | None = None,
    autostart_pod: bool = True,
    working_dir: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
    pod_until_ready: bool = True,
    metrics: Listen | None = None,
) -> Facade:
    """The real services for ``config``.

    local: the emulator for ``cluster.run_dir`` (started with ``cluster.hosts`` hosts on
    free ports when none runs and ``autostart_pod``; ``progress`` hears how that goes, and
    ``pod_until_ready=False`` returns while its hosts are still coming up); ``metrics``: also
    serve the Prometheus series there while the services run (any front end). gcp: Google's
    TPU API (``cluster.api_endpoint`` to override), ``ssh.user``/``ssh.key`` or ``$USER``
    and ``~/.ssh/google_compute_engine``. gke: ``gke.kubeconfig``, or the GKE emulator for
    ``gke.run_dir`` (started when none runs and ``autostart_pod``). Raises ValueError naming
    the setting to fix.
    """
    from console.secrets import Scrubber
    from console.services.backends.tpu_vm.backend import TpuVmBackend
    from console.services.jobs.registry import JobRegistry
    from console.services.record.journal import Journal
    from console.services.record.lease import PodLeases
    from console.wiring.compose import compose

    sdir = Path(state_dir) if state_dir is not None else cluster_state_dir(config)
    try:
        sdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            str(sdir),
            [
                f"the state dir cannot be created ({exc.strerror or exc}); set XDG_STATE_HOME "
                "to a writable directory"
            ],
        ) from None
    # Every service's slice of the config, built once here (``console.wiring.settings``).
    settings = slices.service_settings(config)
    backend: Callable[[EventSink], Backend]
    storage = ""  # the pod's checkpoint storage, for the notices' verifier and the advice
    if config.is_gke:
        backend, chaos = _gke_backend(config, settings, autostart_pod, clock, environ)
    else:
        make_access, storage, chaos = _pod_access(
            config, sdir, autostart_pod, progress, pod_until_ready
        )
        wd = working_dir if working_dir is not None else REPO_ROOT
        pod_settings = slices.tpu_vm_settings(config, settings.polling)

        def backend(sink: EventSink) -> Backend:
            return TpuVmBackend(
                pod_settings,
                make_access(journal, sink, clock),
                sink=sink,
                state_dir=sdir,
                working_dir=wd,
                clock=clock,
                environ=environ,
            )

    journal = Journal(
        journal_path if journal_path is not None else sdir / "journal.sqlite",
        # An apprise URL's secret part (its ${NAME}s): masked wherever it would appear.
        scrubber=Scrubber(
            [config.wandb.api_key_env, config.gke.hf_token_env, *config.alerts.secret_envs]
        ),
        clock=clock,
        cluster=config.name,  # every row names its cluster
    )
    try:
        facade = compose(
            settings,
            make_backend=backend,
            journal=journal,
            registry=JobRegistry(journal, legacy_json=sdir / "jobs.json"),
            leases=PodLeases(sdir, _pod_key(config)),
            chaos=chaos,
            consumers=[
                *_alerts(config, clock),
                *_notices(config, storage, journal, clock),
                *_metrics(settings, metrics, journal),
            ],
            advise=None if config.is_gke else _advise_jobs(config, storage, journal, clock),
            clock=clock,
        )
        return facade
    except BaseException:
        journal.close()
        raise


def _alerts(config: Config, clock: Callable[[], float]) -> list[MakeConsumer]:
    """[alerts]' apprise receivers, fed from the facade's bus: every front end sends the
    same alerts."""
    if not config.alerts.notify:
        return []
    from console.config.alerts import notify_urls
    from console.services.alerts.notify import Alerter

    urls = notify_urls(config.alerts)

    def alerter(sink: EventSink) -> Alerter:
        # A fleet's cluster by its name; a [cluster] config's by its node, as always.
        source = config.name if config.state_dir else config.cluster.node_name
        return Alerter(config.alerts, urls, sink, source=source, clock=clock)

    return [alerter]


def _metrics(
    settings: ServiceSettings, listen: Listen | None, journal: Journal
) -> list[MakeConsumer]:
    """The Prometheus exporter, fed from the facade's bus like the alerts (the TUI's
    ``--metrics``; `phantom watch` binds its own before it builds the services)."""
    if listen is None:
        return []
    from console.services.exporter.server import exporter_for
    from console.services.record.journal import AsyncJournal

    reads = AsyncJournal(journal)
    s = settings

    def exporter(sink: EventSink) -> BusConsumer:
        return exporter_for(s.cluster, s.polling, s.ledger, listen, lambda n: reads.query(limit=n))

    return [exporter]


def metrics_exporter(config: Config, listen: Listen, rows: ReadRows) -> Exporter:
    """The Prometheus exporter for ``config``'s cluster, made before its services exist:
    `phantom watch` binds it first (a port in use stops there) and its ledger reads the
    journal (``rows``) once they do."""
    from console.services.exporter.server import exporter_for

    s = slices.service_settings(config)
    return exporter_for(s.cluster, s.polling, s.ledger, listen, rows)


def _notices(
    config: Config, storage: str, journal: Journal, clock: Callable[[], float]
) -> list[MakeConsumer]:
    """Every preemption notice matched to its checkpoint in the pod's storage (a TPU VM pod:
    GKE's workloads checkpoint on their own terms, and have no storage here)."""
    if not storage:
        return []
    from console.services.ledger.notices import NoticeVerifier

    def verifier(sink: EventSink) -> NoticeVerifier:
        return NoticeVerifier(
            journal, sink, storage, grace_s=config.recovery.notice_grace_s, clock=clock
        )

    return [verifier]


def _advise_jobs(
    config: Config,
    storage: str,
    journal: Journal,
    clock: Callable[[], float],
) -> Callable[[Backend], Advise]:
    """Each job submitted (resubmissions too) gets the checkpoint advice of the moment in its
    environment, for ``--checkpoint-every auto``: built with the backend whose logs it reads."""
    from console.services.ledger.live import LiveAdvisor, newest_job_logs

    def make(backend: Backend) -> Advise:
        advisor = LiveAdvisor(
            journal,
            storage,
            hosts=config.cluster.hosts,
            job_logs=lambda: newest_job_logs(backend.list_jobs, backend.job_logs),
            clock=clock,
        )
        return advisor.advised

    return make


def _capacity_hooks(
    config: Config, journal: Journal, sink: EventSink, clock: Callable[[], float]
) -> CapacityHooks:
    """Getting the slice back is journaled and shown on the recovery step; failover =
    "risk-aware" ranks the zones by the journal's preemption rates and journals the order it
    chose with its reason."""
    from console.services.backends.tpu_vm.backend import capacity_news
    from console.services.backends.tpu_vm.capacity import CapacityHooks
    from console.services.ledger.rates import (
        ZoneRate,
        journal_rates,
        order_event,
        rates_by_zone,
    )

    def risk(zones: tuple[str, ...], hosts: int) -> dict[str, ZoneRate]:
        rates = journal_rates(
            journal,
            now=clock(),
            hosts=max(1, hosts or config.cluster.hosts),
            default_zone=config.cluster.zone,
            accelerator=config.cluster.accelerator_type,
            zones=zones,
        )
        return rates_by_zone(rates)

    return CapacityHooks(
        on_attempt=capacity_news(sink, clock),
        on_order=lambda order: sink.emit_soon(order_event(order, clock())),
        risk=risk,
    )


def watcher_lease(config: Config, state_dir: str | os.PathLike[str] | None = None) -> FileLease:
    """One `phantom watch` per pod: a claim beside the pod's ``watch`` and ``actions`` leases
    (a TUI or a script on the same pod does not take it; a second watcher is refused)."""
    from console.services.record.lease import FileLease, PodLeases

    sdir = Path(state_dir) if state_dir is not None else cluster_state_dir(config)
    path = PodLeases(sdir, _pod_key(config)).watch.path.with_suffix(".watcher")
    return FileLease(path, "watcher")


def _pod_key(config: Config) -> str:
    """What identifies one pod: the front ends that share it share its leases."""
    cl = config.cluster
    if config.is_gke:
        g = config.gke
        where = g.kubeconfig or f"emulator:{Path(g.run_dir).expanduser() if g.run_dir else ''}"
        return "|".join((cl.provider, where, g.context, g.namespace))
    where = str(Path(cl.run_dir).expanduser()) if cl.run_dir else ""
    return "|".join((cl.provider, cl.project, cl.zone, cl.node_name, where))


def _pod_access(
    config: Config,
    state_dir: Path,
    autostart: bool,
    progress: Callable[[str], None] | None = None,
    until_ready: bool = True,
) -> tuple[MakeAccess, str, Callable[[Backend], Chaos] | None]:
    """How to reach the pod, and its checkpoint storage. The emulator's access is made at once
    (its pod must run first); the gcp one when the backend is built, with the journal and the
    sink its provider reports to."""
    from console.services.backends.tpu_vm.backend import TpuVmBackend
    from console.services.backends.tpu_vm.identity import ssh_identity
    from console.services.backends.tpu_vm.parts import PodAccess
    from console.services.backends.tpu_vm.tpu import gcp_provider
    from console.services.record.place import PlaceRecord, pod_key

    if config.is_local:
        from console.wiring.pod import EmulatedTpuProvider, EmulatorChaos, ensure_pod, pod_access

        pod = ensure_pod(config, autostart, progress=progress, until_ready=until_ready)
        access = pod_access(config, pod, state_dir)
        provider = access.provider
        assert isinstance(provider, EmulatedTpuProvider)

        def chaos(backend: Backend) -> Chaos:
            assert isinstance(backend, TpuVmBackend)
            return EmulatorChaos(backend, provider)

        return lambda *_: access, access.storage_uri, chaos
    user, key = ssh_identity(config.ssh)
    cl = config.cluster

    def gcp_access(journal: Journal, sink: EventSink, clock: Callable[[], float]) -> PodAccess:
        provider = gcp_provider(
            cl,
            config.ssh,
            config.capacity,
            poll_interval_s=config.recovery.poll_interval_s,
            hooks=_capacity_hooks(config, journal, sink, clock),
            # the provider finds its node by the journal's place record (a failover moves it)
            place=PlaceRecord(journal, pod_key(cl.provider, cl.project, cl.node_name)),
        )
        return PodAccess(
            provider=provider,
            ssh_user=user,
            ssh_key=key,
            storage_uri=config.storage,
            wandb_dir=config.wandb.dir,
        )

    return gcp_access, config.storage, None


def _gke_backend(
    config: Config,
    settings: ServiceSettings,
    autostart: bool,
    clock: Callable[[], float],
    environ: Mapping[str, str] | None,
) -> tuple[Callable[[EventSink], Backend], Callable[[Backend], Chaos] | None]:
    from console.services.backends.gke.access import GkeAccess
    from console.services.backends.gke.backend import GkeBackend
    from console.services.backends.gke.manifests import ClusterRef

    g = config.gke
    chaos: Callable[[Backend], Chaos] | None = None
    signal_container = None
    if not g.kubeconfig:
        from console.wiring.gke import GkeChaos, container_signaller, ensure_gke, gke_access

        access = gke_access(config, ensure_gke(config, autostart))
        signal_container = container_signaller(config)

        def emulator_chaos(backend: Backend) -> Chaos:
            return GkeChaos(config)

        chaos = emulator_chaos
    else:
        access = GkeAccess(
            kubeconfig=str(Path(g.kubeconfig).expanduser()),
            ref=ClusterRef(g.project, g.location, g.cluster, g.namespace),
            context=g.context,
            accelerator=f"{g.tpu_type} x{g.slices}",
            metrics_lag_s=g.metrics_lag_s,
            capacity_wait_s=g.pending_quota_s,
            poll_budget_s=settings.polling.budget_s,
        )
    gke_settings = slices.gke_settings(config, settings.polling)

    def backend(sink: EventSink) -> Backend:
        return GkeBackend(
            gke_settings,
            access,
            sink=sink,
            clock=clock,
            environ=environ,
            signal_container=signal_container,
        )

    return backend, chaos


def deferred_services(config: Config, metrics: Listen | None = None) -> PendingServices:
    """The TUI's services: built behind the first frame, which never waits for the cluster.

    On the emulator a fresh machine starts its pod here, and the console shows its hosts
    come up (CREATING -> READY) instead of a blank terminal until they are READY."""
    from console.services.pending import PendingServices

    def build(progress: Callable[[str], None]) -> ConsoleServices:
        return make_services(config, progress=progress, pod_until_ready=False, metrics=metrics)

    what = "starting the console's services"
    if config.is_local:
        what = f"connecting to the local pod emulator ({config.cluster.hosts} hosts)"
    elif config.is_gke:
        what = "connecting to the GKE cluster" + (
            ""
            if config.gke.kubeconfig
            else f" (the local GKE emulator, {config.gke.slices} slices)"
        )
    return PendingServices(
        slices.service_settings(config), build, what=what, capabilities=capabilities_for(config)
    )


def capabilities_for(config: Config) -> frozenset[Capability]:
    """What the cluster ``config`` drives can do, without building it: the declaration of
    the backend ``make_services`` picks, plus the emulator's verbs where it picks one (the
    same as the built services' ``capabilities``; the script parser and the first frame
    read it)."""
    if config.is_gke:
        from console.services.backends import gke as backend
    else:
        from console.services.backends import tpu_vm as backend  # type: ignore[no-redef]
    return backend.CAPABILITIES | (backend.EMULATED if config.is_emulated else frozenset())


def services_factory() -> ServicesFactory:
    """The real services for a status query or a script, never starting a pod: a command
    that does not say `pod up` must not leave an emulator running behind the user's back."""

    def factory(config: Config) -> ConsoleServices:
        return make_services(config, autostart_pod=False)

    return factory


def unbuilt_services(config: Config, factory: ServicesFactory | None = None) -> UnbuiltServices:
    """The services a script is handed, built at its first step that needs the cluster (by
    ``factory``, or ``services_factory``'s, which never starts a pod); what the script checks
    before that (the settings, the capabilities, what the config drives) comes with them."""
    from console.services.api import UnbuiltServices
    from console.wiring.where import cluster_in_use

    def build() -> ConsoleServices:
        return (factory or services_factory())(config)

    return UnbuiltServices(
        settings=slices.service_settings(config),
        capabilities=capabilities_for(config),
        drives=lambda: (
            f"cluster {slices.cluster_identity(config).name!r} of {config.source} is "
            f"{cluster_in_use(config)}"
        ),
        build=build,
    )


def pod_control(config: Config) -> LocalPodControl:
    """A script's `pod up` / `pod down` (the emulator's own client)."""
    from console.wiring.control import LocalPodControl

    return LocalPodControl(config)


def gke_control(config: Config) -> LocalGkeControl:
    """A script's `gke up` / `gke down` (the GKE emulator's own client)."""
    from console.wiring.gke import LocalGkeControl

    return LocalGkeControl(config)


def storage_probe(config: Config) -> Callable[[str], bool | None]:
    """Whether a checkpoint URI exists, as a script checks it before anything runs: True or
    False where this machine can tell at once (file://; gs:// on the GKE emulator, whose
    buckets are directories), None where only the services can (gs:// on GKE)."""
    bucket: Path | None = None
    if config.is_gke and not config.gke.kubeconfig:
        from console.wiring.gke import emulator_bucket

        bucket = emulator_bucket(config)

    def probe(uri: str) -> bool | None:
        from console.services.backends.gke.storage import local_path

        path = local_path(uri, bucket)
        return None if path is None else path.exists()

    return probe


def emulator_cli(which: str, argv: list[str]) -> int:
    """`phantom pod ...` / `phantom gke ...` / `phantom wandb ...`: each emulator's own CLI."""
    if which == "wandb":
        from emulators.wandb.cli import wandb_main

        return wandb_main(argv)
    if which == "gke":
        from emulators.gke.cli import gke_main

        return gke_main(argv)
    from emulators.tpu_pod.cli import pod_main

    return pod_main(argv)


def emulator_cli_args(which: str, argv: list[str], config: Config) -> list[str]:
    """`phantom --cluster NAME pod|gke VERB ...`: ``argv`` with that cluster's emulator
    flags put first after the verb (its run dir; for ``up`` its size and place), so a flag
    the user gives still wins. ConfigError (exit 2) when the cluster is not that emulator's."""
    from console.config.fleet import ClusterChoiceError
    from console.wiring.control import run_dir_of
    from console.wiring.gke import gke_run_dir
    from console.wiring.pod import pod_placement

    wanted = config.is_local if which == "pod" else (config.is_gke and config.is_emulated)
    if not wanted:
        what = f"a {config.cluster.provider!r} cluster"
        if config.is_gke and config.gke.kubeconfig:
            what += " with a kubeconfig (a real one)"
        needs = 'provider = "local"' if which == "pod" else 'provider = "gke", no kubeconfig'
        raise ClusterChoiceError(
            config.source,
            [
                f"--cluster {config.name!r} is {what}; `phantom {which}` drives the emulator "
                f"of a cluster with {needs}: name one of those"
            ],
        )
    if not argv or argv[0].startswith("-"):
        return argv  # --help, or no verb: the emulator's parser says what it needs
    verb, rest = argv[0], argv[1:]
    if which == "pod":
        ours = ["--run-dir", str(run_dir_of(config))]
        if verb == "up":
            ours += [
                "--hosts",
                str(config.cluster.hosts),
                "--accelerator-type",
                config.cluster.accelerator_type,
            ]
            zone, zones = pod_placement(config)
            ours += ["--zone", zone, "--node-name", config.cluster.node_name]
            ours += ["--zones", ",".join(zones)] if zones else []
    else:
        ours = ["--run-dir", str(gke_run_dir(config))]
        if verb == "up":
            ours += ["--slices", str(config.gke.slices), "--tpu-type", config.gke.tpu_type]
    return [verb, *ours, *rest]  # every verb of both emulators takes --run-dir
