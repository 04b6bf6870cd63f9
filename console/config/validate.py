"""Validation at the door: one validator per type of input, for every entry point.

A type of value (a directory to create, a finite number in a range, a member of a known set,
a TPU accelerator type, an environment variable's name, a YAML document, a file to write) is
checked here once, and the CLI flags, config keys, script lines and spec files that carry it
call the same function, so a new flag of a known type cannot skip its check. Each validator
raises ``Invalid`` with a sentence that names the field (``label``) and the fix, and never
echoes a value that looks like a secret (``shown``).

The emulators stand alone (they import nothing of the console): their command lines have the
same door in ``emulators/kit/validate.py``.
"""

from __future__ import annotations

import contextlib
import difflib
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from console.config.names import ENV_NAME_RE


class Invalid(ValueError):
    """A value refused at the door; the message names the field and the fix."""


# -- showing a value ---------------------------------------------------------------------------

# A token-shaped value: 16+ characters of letters, digits, '_' or '-' with both letters and
# digits (a W&B key is 40 hex digits, an HF token hf_ + 34), or anything secrets.py masks.
_TOKEN = re.compile(r"^[A-Za-z0-9_\-.+/=]{16,}$")


def looks_secret(value: str) -> bool:
    """Whether ``value`` may be a key or token (so a message must not repeat it)."""
    text = value.strip()
    if not _TOKEN.match(text):
        return False
    return any(c.isdigit() for c in text) and any(c.isalpha() for c in text)


def shown(value: object, limit: int = 80) -> str:
    """``value`` as a message may quote it: ``repr``, cut to ``limit`` characters, or a
    placeholder when it looks like a secret."""
    text = str(value)
    if looks_secret(text):
        return "the value given (not shown: it looks like a key or token)"
    if len(text) > limit:
        return repr(text[:limit]) + f"... ({len(text):,} characters)"
    return repr(value)


# -- numbers, sets, names ----------------------------------------------------------------------


def finite_number(
    label: str,
    value: object,
    *,
    lo: float | None = None,
    hi: float | None = None,
    above: float | None = None,
    integer: bool = False,
) -> float:
    """A finite number (nan and inf refused) with ``lo <= value <= hi`` and ``value >
    above``; text is parsed. Returns it as a float (an int when ``integer``)."""
    kind = "a whole number" if integer else "a number"
    if isinstance(value, bool):
        raise Invalid(f"{label} = {shown(value)}: must be {kind}")
    try:
        number = float(value.strip() if isinstance(value, str) else value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise Invalid(f"{label} {shown(value)}: must be {kind}{_range(lo, hi, above)}") from None
    if not math.isfinite(number):
        raise Invalid(f"{label} {shown(value)}: must be a finite number{_range(lo, hi, above)}")
    if integer and number != int(number):
        raise Invalid(f"{label} {shown(value)}: must be a whole number{_range(lo, hi, above)}")
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        raise Invalid(f"{label} {shown(value)}: must be{_range(lo, hi, above)}")
    if above is not None and not number > above:
        raise Invalid(f"{label} {shown(value)}: must be{_range(lo, hi, above)}")
    return int(number) if integer else number


def _range(lo: float | None, hi: float | None, above: float | None) -> str:
    if above is not None:
        return f" greater than {above:g}" + (f" and at most {hi:g}" if hi is not None else "")
    if lo is not None and hi is not None:
        return f" between {lo:g} and {hi:g}"
    if lo is not None:
        return f" {lo:g} or more"
    if hi is not None:
        return f" at most {hi:g}"
    return ""


def choice(label: str, value: str, choices: Iterable[str], *, what: str = "") -> str:
    """``value`` if it is one of ``choices``; else name them (and the nearest one)."""
    known = [str(c) for c in choices]
    if value in known:
        return value
    close = difflib.get_close_matches(value, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    noun = f"not a known {what}" if what else "not one of the allowed values"
    raise Invalid(f"{label} {shown(value)}: {noun}; use one of {', '.join(known)}{hint}")


def env_var_name(label: str, value: str) -> str:
    """The NAME of an environment variable (``WANDB_API_KEY``), never a secret itself."""
    if is_env_var_name(value):
        return value
    raise Invalid(
        f"{label}: the value given is not the name of an environment variable (not shown: "
        "a value written here is often the secret itself); give the variable's NAME "
        "(letters, digits and '_', e.g. WANDB_API_KEY), never the key itself"
    )


def is_env_var_name(value: object) -> bool:
    """``value`` names an environment variable and does not look like a key or token: the
    one test of every config key that holds a secret's variable name (a message may quote
    such a value; any other is never repeated: it may be the secret)."""
    return isinstance(value, str) and bool(ENV_NAME_RE.match(value)) and not looks_secret(value)


# -- TPU accelerator types ---------------------------------------------------------------------

# The Cloud TPU docs' "TPU types and topologies": each generation's sizes (the number in the
# type: TensorCores for v2-v5p, chips for v5litepod/v5e and v6e).
TPU_SIZES: dict[str, tuple[int, ...]] = {
    "v2": (8, 32, 128, 256, 512),
    "v3": (8, 32, 64, 128, 256, 512, 1024, 2048),
    "v4": (8, 16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 4096),
    "v5p": (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288),
    "v5litepod": (1, 4, 8, 16, 32, 64, 128, 256),
    "v6e": (1, 4, 8, 16, 32, 64, 128, 256),
}
_TPU_TYPE = re.compile(r"^([a-z0-9]+)-(\d+)$")


def known_accelerator_types() -> list[str]:
    return [f"{gen}-{n}" for gen, sizes in TPU_SIZES.items() for n in sizes]


def accelerator_type(label: str, value: str, table: Iterable[str] | None = None) -> str:
    """A TPU type from the known table (``table``: a narrower one, e.g. what GKE offers)."""
    known = list(table) if table is not None else known_accelerator_types()
    if value in known:
        return value
    m = _TPU_TYPE.match(value)
    examples = ", ".join(
        t for t in ("v4-8", "v4-32", "v5p-64", "v5litepod-16", "v6e-8") if t in known
    )
    if m and m.group(1) in TPU_SIZES and table is None:
        sizes = ", ".join(str(n) for n in TPU_SIZES[m.group(1)])
        raise Invalid(f"{label} {shown(value)}: {m.group(1)} comes in sizes {sizes}")
    close = difflib.get_close_matches(value, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    listed = examples or ", ".join(known[:8])
    raise Invalid(f"{label} {shown(value)}: not a known TPU type; use e.g. {listed}{hint}")


# -- paths -------------------------------------------------------------------------------------


def directory(label: str, value: str | os.PathLike[str]) -> Path:
    """A directory that exists or can be created: not a file, not under a file, not under a
    directory this user cannot write."""
    path = Path(value).expanduser()
    if path.exists():
        if not path.is_dir():
            raise Invalid(f"{label} {str(path)!r}: is a file, not a directory; give a directory")
        return path
    parent = _not_under_a_file(label, path)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise Invalid(
            f"{label} {str(path)!r}: cannot be created ({str(parent)!r} is not writable); "
            "give a directory you can write"
        )
    return path


def _not_under_a_file(label: str, path: Path) -> Path:
    """The nearest existing ancestor of ``path``; ``Invalid`` when it is not a directory
    (``run/x`` where ``run`` is a file can never be created)."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise Invalid(
            f"{label} {str(path)!r}: cannot be created under {str(parent)!r}, which is a file; "
            "give a path under a directory"
        )
    return parent


# -- YAML --------------------------------------------------------------------------------------

MAX_SPEC_BYTES = 256 * 1024


def safe_yaml(text: str, label: str, *, max_bytes: int = MAX_SPEC_BYTES) -> Any:
    """One YAML document of plain data: at most ``max_bytes``, anchors and aliases refused
    (a few hundred bytes of nested aliases expand to gigabytes: the "billion laughs")."""
    import yaml

    size = len(text.encode("utf-8", "replace"))
    if size > max_bytes:
        raise Invalid(f"{label}: {size:,} bytes; a spec is at most {max_bytes:,}")
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            anchor = getattr(event, "anchor", None)
            if isinstance(event, yaml.AliasEvent) or anchor is not None:
                mark = event.start_mark
                raise Invalid(
                    f"{label}: YAML anchors and aliases (&{anchor or ''} / *{anchor or ''}) are "
                    f"not accepted (line {mark.line + 1}); write the values out"
                )
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise Invalid(f"{label}: not valid YAML ({problem[:200]})") from None


def read_text_file(label: str, path: Path, *, max_bytes: int = MAX_SPEC_BYTES) -> str:
    """A small text file's content, or ``Invalid`` naming the file (missing, a directory,
    binary, too big)."""
    try:
        if path.is_dir():
            raise Invalid(f"{label} {str(path)!r}: is a directory; give a file")
        size = path.stat().st_size
        if size > max_bytes:
            raise Invalid(f"{label} {str(path)!r}: {size:,} bytes; at most {max_bytes:,}")
        data = path.read_bytes()
    except OSError as exc:
        raise Invalid(f"{label}: cannot read {str(path)!r} ({exc.strerror or exc})") from None
    if b"\x00" in data:
        raise Invalid(f"{label} {str(path)!r}: is not text (binary content)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid(f"{label} {str(path)!r}: is not text (binary content)") from None


# -- files to write ----------------------------------------------------------------------------


def resolved(path: str | os.PathLike[str]) -> Path:
    """The absolute path with ``~`` expanded and symlinks followed (also for a file that
    does not exist yet: its existing parent is resolved)."""
    return Path(path).expanduser().resolve(strict=False)


def check_output(
    label: str,
    target: str | os.PathLike[str],
    *,
    keep: Iterable[tuple[str, str | os.PathLike[str]]],
    may_replace: Callable[[Path], bool],
    replaced_what: str,
) -> Path:
    """Where a command may write: never over (or into) what the console keeps (``keep``:
    (what it is, path) for the journal, the run dirs, the config...), and over an existing
    file only if ``may_replace`` says it is one of this command's own outputs. Returns the
    resolved path; raises ``Invalid``."""
    path = resolved(target)
    for what, kept in keep:
        if not str(kept):
            continue
        held = resolved(kept)
        if path == held or held in path.parents:
            where = "is" if path == held else "is inside"
            raise Invalid(
                f"{label} {str(target)!r}: {where} the {what} ({held}); writing there would "
                "destroy it. Give another path"
            )
    if path.is_dir():
        raise Invalid(f"{label} {str(target)!r}: is a directory; give the path of a file")
    if path.exists() and not may_replace(path):
        raise Invalid(
            f"{label} {str(target)!r}: exists and is not {replaced_what}; it is left as it "
            "is. Give a new path, or move that file away first"
        )
    _not_under_a_file(label, path)
    return path


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it over ``path``: a
    reader never sees half a file, and a failed write leaves the old one whole."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def head(path: Path, size: int = 4096) -> str:
    """The first ``size`` bytes of a file as text ("" if unreadable or binary)."""
    try:
        with open(path, "rb") as f:
            data = f.read(size)
    except OSError:
        return ""
    if b"\x00" in data:
        return ""
    return data.decode("utf-8", "replace")


def kept_paths(
    config: Any, journal: str | os.PathLike[str] | None = None
) -> list[tuple[str, Path]]:
    """What the console keeps and no command may write over: the journal (and SQLite's
    sidecar files), the emulators' run dirs, the config file, known_hosts and the SSH key,
    the W&B run files and file:// checkpoint storage."""
    from console.config import default_state_dir

    state = default_state_dir()
    journals = [Path(journal)] if journal else []
    journals.append(state / "journal.sqlite")
    if getattr(config, "state_dir", ""):  # a fleet's cluster: its own journal and known_hosts
        state = Path(config.state_dir).expanduser()
        journals.append(state / "journal.sqlite")
    out: list[tuple[str, Path]] = []
    for j in journals:
        out += [("journal", j), ("journal", Path(f"{j}-wal")), ("journal", Path(f"{j}-shm"))]
    out += [
        ("pod emulator's run dir", Path(config.cluster.run_dir or state / "pod")),
        ("GKE emulator's run dir", Path(config.gke.run_dir or state / "gke")),
        ("W&B emulator's run dir", state / "wandb"),
        ("SSH known_hosts", Path(config.ssh.known_hosts or state / "known_hosts")),
    ]
    if config.ssh.key:
        out.append(("SSH key", Path(config.ssh.key)))
    if config.wandb.dir:
        out.append(("W&B run files (wandb.dir)", Path(config.wandb.dir)))
    if config.gke.kubeconfig:
        out.append(("kubeconfig", Path(config.gke.kubeconfig)))
    storage = str(config.storage or "")
    if storage.startswith("file://"):
        out.append(("checkpoint storage", Path(storage.removeprefix("file://"))))
    source = str(getattr(config, "source", ""))
    if source and not source.startswith("<"):
        out.append(("config file", Path(source)))
    return [(what, p.expanduser()) for what, p in out]


def is_config(path: Path) -> bool:
    """Whether ``path`` holds a TOML file (a config ``phantom init --force`` may replace)."""
    import tomllib

    try:
        data = path.read_bytes()
        if len(data) > 1 << 20:
            return False
        tomllib.loads(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return True
