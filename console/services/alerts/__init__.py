"""Alerts: webhooks told of preemptions, recoveries, stalls, capacity and jobs ([alerts]).

``rules`` says which journaled events are alerts and what is sent; ``sender.Alerter`` sends
them from its own tasks, fed from the bus, never on the recovery's path."""
