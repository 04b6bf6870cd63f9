"""What an argument's value must be, checked before anything runs.

Binding (``bind``) checks each argument by its kind and calls these for the kinds whose
domain lives elsewhere: an event kind is one of the model's ``EventKind`` words, and
``--train-args`` are what ``engine.train``'s own argument parser accepts (imported from the
engine: it needs neither torch nor SB3, so checking costs a tenth of a second). Each
function raises ``Invalid`` naming the flag and the fix; values are shown through
``validate.shown`` (never a secret).
"""

from __future__ import annotations

import shlex
from typing import Any

from console.config.validate import Invalid, choice, shown
from console.services.model import EventKind

EVENT_KINDS = tuple(str(k) for k in EventKind)


def event_kind(label: str, value: str) -> str:
    """One of the journal's event kinds (``wait-event preemted`` would wait out its whole
    timeout for a kind that never comes)."""
    return choice(label, value, EVENT_KINDS, what="event kind")


def train_args(label: str, text: str) -> list[str]:
    """``--train-args`` as ``engine.train`` will parse them on the cluster: every flag, its
    type and range, and the cross-flag rule the engine checks first (total steps a multiple
    of the vectorised envs). Returns the words."""
    try:  # the job's entrypoint is a shell line: a '#' word starts a comment there too
        words = shlex.split(text, comments=True)
    except ValueError as exc:
        raise Invalid(f"{label}: bad quoting ({exc})") from None
    if any(w in ("-h", "--help") for w in words):
        raise Invalid(f"{label}: --help prints the engine's flags; it trains nothing")
    from engine.trainconfig import UsageError, build_parser

    parser = build_parser(raise_errors=True)
    try:
        args = parser.parse_args(words)
    except UsageError as exc:
        raise Invalid(f"{label}: engine.train would refuse them: {_sentence(str(exc))}") from None
    except SystemExit:  # argparse exits on what raise_errors does not cover
        raise Invalid(f"{label}: engine.train would refuse {shown(text)}") from None
    _cross_check(label, args)
    return words


def _cross_check(label: str, args: Any) -> None:
    steps, envs = args.total_timesteps, args.n_envs
    if steps % envs:
        raise Invalid(
            f"{label}: --total-timesteps {steps} is not a multiple of --n-envs {envs} (each "
            "vectorised step counts every env); engine.train would refuse it"
        )


def _sentence(message: str) -> str:
    """argparse's "argument --x: problem" as "--x: problem"."""
    return message.removeprefix("argument ")
