"""Write the documentation generated from the code, or check that the committed copy is current.

    .venv/bin/python scripts/docs.py write    # make docs
    .venv/bin/python scripts/docs.py check    # make lint, tests/test_docs.py

- ``docs/reference/script.md``: the script language, as ``phantom --script-help`` prints it
  (``console.script.language.usage_text``: the action table's own words).
- ``docs/reference/config.md``: every setting with its default and its doc, as ``phantom
  init`` writes the example config (``console.config.example``: the settings' attribute
  docstrings).
- ``docs/assets/console-overview.svg``: the overview screen at 80×24, as its snapshot test
  renders it (README's and the docs' picture of the console).

Nothing here is written by hand, so neither page can drift from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests/screens/__snapshots__/test_snapshots/test_overview[80x24].svg"
FIX = "run `make docs` and commit the result"

SCRIPT_PAGE = """# Script language

`phantom --script FILE` (or `-` for stdin) runs console actions without a screen: one JSON
line per step and event on stdout, progress on stderr, and an exit code a cron job or CI can
branch on. `examples/first_look.phantom` and `examples/preemption_drill.phantom` are two
scripts to start from. The same actions are the console's keys and palette and the MCP tools.

This page is `phantom --script-help`, generated from the commands (`make docs`).

```text
{usage}
```

## Clusters of a fleet

On a config with `[[clusters]]` entries ([a fleet](../fleet.md)) each line acts on one
cluster: the one the last `use NAME` line chose, or the one its own `--cluster NAME` names
(for that line only). `phantom --cluster NAME --script FILE` chooses the cluster of the lines
before the first `use`. A `[cluster]` config (a fleet of one) needs neither: its one cluster is
the default, and its lines run as they always did. On a fleet of several a line that touches a
cluster with none chosen is refused, but `ledger` then reads the whole fleet: each cluster's
ledger and their total, as `phantom report` prints it (its `clusters` and `total`);
`sleep` and the directives touch none. Each cluster keeps
its own `last` (the job of the latest submit on it), its services (built at its first line) and
its cleanup (`finally`'s `pod down` takes down only a pod this script started on that cluster).
Step and event lines name their `"cluster"`.

```text
use pod-a
status
preempt 1 --cluster pod-b       # pod-b, this line only
use pod-b
wait-event preempted --timeout 60
```

As with every other mistake, the whole script is checked first: a `use` or `--cluster` naming
a cluster the config does not have, or a line with none chosen, exits 2 naming the line, the
name, the clusters there are and the closest of them, and nothing is run:

```console
$ phantom --config fleet.toml --script s.phantom
s.phantom:1: status acts on one cluster and none is chosen: fleet.toml has 2 clusters (pod-a, pod-b); put `use NAME` before this line, or give the line --cluster NAME
s.phantom:2: use 'pod-c': no such cluster in fleet.toml; did you mean 'pod-b'? (its clusters: pod-a, pod-b)
phantom: 2 problem(s) in s.phantom; nothing was run (`phantom --script-help` prints the language reference)
```
"""

CONFIG_PAGE = """# Configuration

One TOML file: `~/.config/phantom/config.toml` (`$XDG_CONFIG_HOME/phantom/config.toml`), or
the one `--config PATH` names. Every key is optional; with no file at all phantom drives the
built-in local pod emulator. A bad key or value is refused (exit 2) with the key and the fix
named, before anything starts. Secrets are never written here: a setting names the
environment variable that holds one (`$WANDB_API_KEY`, `${{PHANTOM_SLACK_TOKENS}}`).

Below is every setting with its default and what it does: the file `phantom init` writes,
generated from the settings' own docs (`make docs`).

```toml
{example}
```
"""


def generated() -> dict[Path, bytes]:
    from console.config.example import example_config
    from console.script.language import usage_text

    return {
        ROOT / "docs/reference/script.md": SCRIPT_PAGE.format(usage=usage_text().rstrip()).encode(),
        ROOT / "docs/reference/config.md": CONFIG_PAGE.format(
            example=example_config().rstrip()
        ).encode(),
        ROOT / "docs/assets/console-overview.svg": SNAPSHOT.read_bytes(),
    }


def main(argv: list[str]) -> int:
    if argv not in (["write"], ["check"]):
        print("usage: python scripts/docs.py write|check", file=sys.stderr)
        return 2
    stale = []
    for path, content in generated().items():
        if argv == ["write"]:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        elif not path.exists() or path.read_bytes() != content:
            stale.append(path.relative_to(ROOT))
    for path in stale:
        print(f"docs: {path} is not what the code generates: {FIX}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
