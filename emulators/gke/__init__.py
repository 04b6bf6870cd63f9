"""Emulated GKE cluster (seed 004): a Kubernetes API subset on loopback, real local processes.

``client`` (stdlib only) starts and drives the daemon; ``python -m emulators.gke``
is its CLI. See README.md beside this file.
"""
