"""Asking a job's trainers for a checkpoint now, over the SSH connections the console holds.

The engine's side is ``engine.notice.CheckpointAsk`` (``engine.contract``): a trainer of a
job the console submitted registers in its host's ask directory as ``<pid>.ask`` (job id,
run name, start time) and answers ``ASK_SIGNAL`` with a checkpoint at the step it reached,
then ``<pid>.done`` (``step uri seconds``), and trains on. On every host, one shell script
(``ASK_SCRIPT``) signals the registered trainers of the job, those whose start time still
matches their pid's (a reused pid is never signalled: a process without the handler would
die of it), and waits for each answer up to the deadline, printing one line per trainer:

    DONE <pid> <run> <step> <uri> <seconds>
    LATE <pid> <run>            still training, no answer by the deadline
    GONE <pid> <run>            ended before it answered
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from console.services.model import ActionResult, HostResult
from engine.contract import ASK_DIR_ENV, ASK_SIGNAL

ALL = "all"
# $1: the job id ("*": every job), $2: the seconds to wait for the answers.
ASK_SCRIPT = r"""want=$1; limit=$2
d="${@ASK_DIR_ENV@:-$HOME/.cache/phantom/ask}"
alive() {  # running, not a zombie waiting for its parent
  s=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1); [ -n "$s" ] && [ "$s" != Z ]
}
[ -d "$d" ] || exit 0
for f in "$d"/*.done; do  # answers nobody waits for any more
  [ -e "$f" ] && [ ! -e "${f%.done}.ask" ] && rm -f "$f"
done
asked=""
for f in "$d"/*.ask; do
  [ -e "$f" ] || continue
  pid=$(basename "$f" .ask)
  { read -r job; read -r run; read -r started; } < "$f" || continue
  now=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f20)
  if [ -z "$now" ] || [ "$now" != "$started" ]; then rm -f "$f"; continue; fi
  [ "$want" = "*" ] || [ "$job" = "$want" ] || continue
  rm -f "$d/$pid.done"
  kill -@ASK_SIGNAL@ "$pid" 2>/dev/null && asked="$asked $pid:$run"
done
end=$(( $(date +%s) + limit ))
for one in $asked; do
  pid=${one%%:*}; run=${one#*:}
  while [ ! -s "$d/$pid.done" ] && alive "$pid" && [ "$(date +%s)" -lt "$end" ]; do
    sleep 0.2
  done
  if [ -s "$d/$pid.done" ]; then
    echo "DONE $pid $run $(cat "$d/$pid.done")"; rm -f "$d/$pid.done"
  elif alive "$pid"; then echo "LATE $pid $run"
  else echo "GONE $pid $run"; fi
done
""".replace("@ASK_DIR_ENV@", ASK_DIR_ENV).replace(
    "@ASK_SIGNAL@", ASK_SIGNAL.name.removeprefix("SIG")
)


def ask_command(job: str, timeout_s: float) -> str:
    """The shell command asking ``job``'s trainers on one host (``all``: every job's)."""
    want = "*" if job == ALL else job
    return f"sh -c {shlex.quote(ASK_SCRIPT)} ask {shlex.quote(want)} {int(max(1, timeout_s))}"


@dataclass
class Answers:
    """What the hosts said: each trainer's checkpoint, and the ones that did not answer."""

    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    late: list[dict[str, str]] = field(default_factory=list)
    gone: list[dict[str, str]] = field(default_factory=list)

    def read(self, host: str, stdout: str) -> HostResult:
        mine = 0
        for line in stdout.splitlines():
            words = line.split()
            if len(words) == 6 and words[0] == "DONE":
                _, pid, run, step, uri, seconds = words
                self.checkpoints.append(
                    {"host": host, "pid": int(pid), "run": run, "step": int(step), "uri": uri,
                     "seconds": float(seconds)}
                )  # fmt: skip
                mine += 1
            elif len(words) == 3 and words[0] in ("LATE", "GONE"):
                entry = {"host": host, "pid": words[1], "run": words[2]}
                (self.late if words[0] == "LATE" else self.gone).append(entry)
        missing = [e for e in (*self.late, *self.gone) if e["host"] == host]
        error = ", ".join(f"{e['run']} (pid {e['pid']}) did not answer" for e in missing)
        return HostResult(
            host=host, ok=not missing, stdout_tail=f"{mine} checkpoint(s)", error=error
        )


def asked_result(job: str, per_host: Mapping[str, HostResult], elapsed_s: float) -> ActionResult:
    """One result for the ask on every host (``per_host``: the SSH results)."""
    answers = Answers()
    results: dict[str, HostResult] = {}
    unreachable: list[str] = []
    for host, res in per_host.items():
        if not res.ok:
            results[host] = res
            unreachable.append(host)
            continue
        results[host] = answers.read(host, res.stdout_tail)
    which = "every job" if job == ALL else f"job {job}"
    done = answers.checkpoints
    if not done and not answers.late and not answers.gone:
        message = (
            f"no running trainer of {which} takes an ask (a job phantom submitted, its "
            "trainers running engine.train)"
        )
        ok = False
    else:
        steps = ", ".join(f"{c['run']}@{c['step']}" for c in done)
        message = f"{len(done)} trainer(s) of {which} checkpointed and train on" + (
            f": {steps}" if steps else ""
        )
        missing = len(answers.late) + len(answers.gone)
        if missing:
            message += f"; {missing} did not answer"
        ok = not missing
    if unreachable:
        message += f"; not asked on {', '.join(unreachable)} (unreachable)"
        ok = False
    return ActionResult(
        action="checkpoint",
        ok=ok,
        elapsed_s=elapsed_s,
        per_host=results,
        message=message,
        data={"job": job, "checkpoints": done, "late": answers.late, "gone": answers.gone},
    )
