"""What a config drives, in the words a refusal ends with: the provider and, on GKE, the
kubeconfig the console would actually load (the local emulator's, in its run dir, when
``gke.kubeconfig`` is empty; the configured one otherwise). ``KUBECONFIG`` is never read:
``gke.kubeconfig`` is the one place a real cluster is named."""

from __future__ import annotations

from pathlib import Path

from console.config import Config


def kubeconfig_in_use(config: Config) -> Path:
    """The kubeconfig a GKE config's services load: ``gke.kubeconfig``, or the one the
    local GKE emulator writes into its run dir (``gke.run_dir`` or its default)."""
    if config.gke.kubeconfig:
        return Path(config.gke.kubeconfig).expanduser()
    from console.wiring.gke import gke_run_dir
    from emulators.gke.layout import RunLayout

    return RunLayout(gke_run_dir(config)).kubeconfig


def cluster_in_use(config: Config) -> str:
    """E.g. "provider 'gke' on the local GKE emulator, kubeconfig ~/.local/state/phantom/gke/
    kubeconfig" or "provider 'gke' with kubeconfig /k (context c)"; "provider 'local'"."""
    words = f"provider {config.cluster.provider!r}"
    if not config.is_gke:
        return words
    kubeconfig = kubeconfig_in_use(config)
    if not config.gke.kubeconfig:
        return f"{words} on the local GKE emulator, kubeconfig {kubeconfig}"
    context = f" (context {config.gke.context})" if config.gke.context else ""
    return f"{words} with kubeconfig {kubeconfig}{context}"
