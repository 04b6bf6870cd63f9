"""The preemption ledger: what spot capacity costs a run, derived from the journal and the
engine's own lines, and what to change. Its parts live here (``advice``: the checkpoint
interval); each is pure, fed by rows and lines its caller reads."""
