"""The Prometheus exporter: the console's state as series a monitoring stack scrapes.

``series.WatchSeries`` is fed from the services' bus (the same snapshots, jobs, cadence and
journal rows every front end shows; no I/O on that path) and renders the series at scrape
time; ``server.MetricsServer`` answers ``/metrics`` and ``/healthz`` on the services' own
event loop, so a loop that hangs answers neither. ``phantom watch --metrics`` starts both;
any front end may (they are a bus consumer like the alerts). No Textual here.
"""
