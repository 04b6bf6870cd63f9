"""Exit codes of every engine command (``engine.train``, ``engine.sweep``, the distributed
launcher, ``benchmarks.engine_suite``): one home, so launchers and the console read them the same way.

==== =========================== ==========================================================
code name                        meaning
==== =========================== ==========================================================
0    ``EX_OK``                   finished
1    ``EX_FAILURE``              a runtime failure (a trainer crashed, a trial errored)
2    ``EX_USAGE``                bad flags, environment or storage; nothing was started
75   ``EX_PREEMPTED``            preempted, resumable: a preemption notice (SIGTERM) was
                                 honoured and a complete checkpoint at the step reached is in
                                 storage; run the same command again to continue from it
130  ``EX_INTERRUPTED``          interrupted from the keyboard (SIGINT)
==== =========================== ==========================================================

75 is ``EX_TEMPFAIL`` from ``sysexits.h`` ("a temporary failure ... the user is invited to
retry the operation later"), which is exactly what a preempted run is. It is distinct from
1 and 2, from 130, and from the 128+N codes a shell reports for a process killed by signal N
(143 for SIGTERM, 137 for SIGKILL), so a launcher can tell "stopped cleanly at a checkpoint"
from "killed". Ray job submission reports it as a FAILED job whose message carries
``exit code 75``; Kubernetes as a container ``exitCode: 75``.
"""

from __future__ import annotations

EX_OK = 0
EX_FAILURE = 1
EX_USAGE = 2
EX_PREEMPTED = 75
EX_INTERRUPTED = 130

MEANING = {
    EX_OK: "ok",
    EX_FAILURE: "failed",
    EX_USAGE: "usage error (nothing started)",
    EX_PREEMPTED: "preempted, resumable",
    EX_INTERRUPTED: "interrupted",
}
