"""Alerts: apprise receivers told of preemptions, recoveries, stalls, capacity and jobs
([alerts]).

``rules`` says which journaled events are alerts, what identifies each (one per incident)
and the text sent; ``notify.Alerter`` sends them through apprise from its own tasks, fed from
the bus, never on the recovery's path."""
