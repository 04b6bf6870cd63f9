"""Stragglers: a lost job's trainers still alive on a surviving host after ``ray stop -f``.

Why
    ``ray stop -f`` kills Ray's own processes (the raylet, ``ray::`` workers), not their
    children. The engine runs each trainer in a process and session of its own
    (``engine.trialproc``) so that it survives the raylet long enough to write its notice
    checkpoint: after the orphans' ``ray stop`` it lives on, writing a checkpoint and W&B
    rows into the same run the resubmitted job resumes. A recovery that resubmits while it
    lives has two writers on one run: the straggler's late checkpoint can land after the
    new trainer resumed from the one before (``latest`` then names the straggler's).

What
    On every host it force-stopped, the ``orphans`` step then ends the host's stragglers
    and confirms it: every trainer registered in the host's ask directory (the engine's
    contract, ``engine.contract``: ``<pid>.ask`` with the job id, the run name and the
    process's start time) that is still that process gets SIGTERM (its notice checkpoint,
    then exit 75), up to ``limit`` seconds to go, then SIGKILL by pid; its registration is
    removed once it is gone. One line per straggler:

        EXITED <pid> <run>     went after SIGTERM (its checkpoint written)
        KILLED <pid> <run>     still there at the deadline: SIGKILL, and gone
        ALIVE <pid> <run>      still there after SIGKILL (the step fails on that host)

A pid whose start time no longer matches its registration is another process: never
signalled, its stale registration removed.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from enum import StrEnum

from console.services.model import HostResult
from engine.contract import ASK_DIR_ENV


class Went(StrEnum):
    """How a straggler ended: the script's words (its own vocabulary, not a host state)."""

    EXITED = "EXITED"
    KILLED = "KILLED"
    ALIVE = "ALIVE"


# $1: seconds a straggler gets between SIGTERM and SIGKILL.
STRAGGLER_SCRIPT = r"""limit=$1
d="${@ASK_DIR_ENV@:-$HOME/.cache/phantom/ask}"
[ -d "$d" ] || exit 0
still() {  # $1 is still the process registered with start time $2, and not a zombie
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$(echo "$st" | cut -c1)" != Z ] && [ "$(echo "$st" | cut -d' ' -f20)" = "$2" ]
}
left=""
for f in "$d"/*.ask; do
  [ -e "$f" ] || continue
  pid=$(basename "$f" .ask)
  { read -r job; read -r run; read -r started; } < "$f" || continue
  if ! still "$pid" "$started"; then rm -f "$f" "$d/$pid.done"; continue; fi
  kill -TERM "$pid" 2>/dev/null
  left="$left $pid:$started:$run"
done
end=$(( $(date +%s) + limit ))
for one in $left; do
  pid=${one%%:*}; rest=${one#*:}; started=${rest%%:*}; run=${rest#*:}
  while still "$pid" "$started" && [ "$(date +%s)" -lt "$end" ]; do sleep 0.1; done
  if ! still "$pid" "$started"; then
    echo "EXITED $pid $run"; rm -f "$d/$pid.ask" "$d/$pid.done"; continue
  fi
  kill -KILL "$pid" 2>/dev/null
  n=0
  while still "$pid" "$started" && [ $n -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
  if still "$pid" "$started"; then echo "ALIVE $pid $run"
  else echo "KILLED $pid $run"; rm -f "$d/$pid.ask" "$d/$pid.done"; fi
done
""".replace("@ASK_DIR_ENV@", ASK_DIR_ENV)


def stragglers_command(limit_s: float) -> str:
    """The shell command ending one host's stragglers (``limit_s``: their SIGTERM grace)."""
    return f"sh -c {shlex.quote(STRAGGLER_SCRIPT)} stragglers {int(max(1, limit_s))}"


def read_stragglers(host: str, res: HostResult) -> HostResult:
    """One host's result: ok when every straggler is gone (or there was none)."""
    if not res.ok:
        return res
    went: dict[str, list[str]] = {w: [] for w in Went}
    for line in res.stdout_tail.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] in went:
            went[words[0]].append(f"{words[2]} (pid {words[1]})")
    if not any(went.values()):
        return HostResult(host=host, ok=True, stdout_tail="no straggler\n")
    parts = []
    exited, killed, alive = went[Went.EXITED], went[Went.KILLED], went[Went.ALIVE]
    if exited:
        parts.append(f"{len(exited)} straggler(s) exited after SIGTERM")
    if killed:
        parts.append(f"{len(killed)} killed by pid: {', '.join(killed)}")
    return HostResult(
        host=host,
        ok=not alive,
        stdout_tail="; ".join(parts) + "\n" if parts else "",
        error=f"still alive after SIGKILL: {', '.join(alive)}" if alive else "",
    )


def merge_stopped(
    stopped: Mapping[str, HostResult], swept: Mapping[str, HostResult]
) -> dict[str, HostResult]:
    """``ray stop``'s result per host, with what the straggler sweep found after it."""
    out = dict(stopped)
    for host, res in swept.items():
        before = out.get(host)
        if before is None:
            out[host] = res
            continue
        out[host] = HostResult(
            host=host,
            ok=before.ok and res.ok,
            exit_status=before.exit_status,
            elapsed_s=before.elapsed_s + res.elapsed_s,
            stdout_tail=before.stdout_tail + res.stdout_tail,
            stderr_tail=before.stderr_tail,
            error=res.error or before.error,
        )
    return out
