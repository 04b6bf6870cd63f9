"""The preemption ledger: what spot capacity costs a run, derived from the journal and the
engine's own lines, and what to change. Its parts live here (``advice``: the checkpoint
interval; ``rates``: preemptions per VM-hour per zone with their intervals, and the zone
order of risk-aware failover); each is pure, fed by rows and lines its caller reads. Two
services run on them: ``notices`` (every preemption notice matched to its checkpoint) and
``live`` (the advice computed when a job is submitted, passed in its environment)."""
