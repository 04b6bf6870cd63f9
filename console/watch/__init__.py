"""`phantom watch`: the console without a screen, left running (a container, systemd).

The same services, watchdog and journal as the TUI and ``--script`` (built by the wiring,
``make_services``), so it makes the same decisions; it adds what an unattended process needs:
one line per journal row on stdout, ``/metrics`` and ``/healthz`` for a monitoring stack,
a clean stop on SIGTERM, and one watcher per cluster.
"""
