"""Bad input, as users type it: every case exits non-zero (2 for usage), names the field or
the path and the fix, shows no traceback, answers at once and starts nothing.

Each case is a real `phantom` process with its own empty XDG dirs, so "starts nothing" is
checked where the product would have started it: no emulator run dir, no journal.
(The engine's flags and submit_ray_job.sh have their own corpus in tests/engine/.)
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.script.test_e2e import phantom_argv
from tests.support import REPO

Setup = Callable[[Path], list[str]]


@dataclass(frozen=True)
class Case:
    name: str
    setup: Setup  # makes the files it needs in tmp_path, returns phantom's argv
    code: int
    says: tuple[str, ...]  # what the message must name
    stdin: str = ""
    env: dict[str, str] = field(default_factory=dict)
    hidden: str = ""  # a secret in the input that the output must not repeat


def cfg(text: str) -> Setup:
    def make(tmp: Path) -> list[str]:
        (tmp / "c.toml").write_text(text)
        return ["--config", str(tmp / "c.toml"), "status"]

    return make


def script(text: str, *extra: str) -> Setup:
    def make(tmp: Path) -> list[str]:
        (tmp / "s.phantom").write_text(text)
        return ["--script", str(tmp / "s.phantom"), *extra]

    return make


def binary(name: str, flag: str) -> Setup:
    def make(tmp: Path) -> list[str]:
        (tmp / name).write_bytes(bytes(range(256)) * 4)
        return [flag, str(tmp / name)] + (["status"] if flag == "--config" else [])

    return make


def huge(name: str, flag: str) -> Setup:
    def make(tmp: Path) -> list[str]:
        (tmp / name).write_text("# x\n" * 600_000)
        return [flag, str(tmp / name)] + (["status"] if flag == "--config" else [])

    return make


def argv(*args: str) -> Setup:
    return lambda tmp: [a.replace("{tmp}", str(tmp)) for a in args]


def under_file(*args: str) -> Setup:
    """``{file}`` is a regular file (so ``{file}/x`` can never be a directory)."""

    def make(tmp: Path) -> list[str]:
        (tmp / "a-file").write_text("a regular file\n")
        return [a.replace("{file}", str(tmp / "a-file")) for a in args]

    return make


def gke_script(text: str, files: dict[str, bytes]) -> Setup:
    """A script for provider gke (the emulator), with the spec files it names."""

    def make(tmp: Path) -> list[str]:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        (tmp / "c.toml").write_text('[cluster]\nprovider = "gke"\n')
        (tmp / "s.phantom").write_text(text)
        return ["--config", str(tmp / "c.toml"), "--script", str(tmp / "s.phantom")]

    return make


FLEET_TOML = '[[clusters]]\nname = "pod-a"\n[[clusters]]\nname = "pod-b"\n'


def fleet_script(text: str, *extra: str) -> Setup:
    """A script run on a fleet of two local pods (pod-a, pod-b)."""

    def make(tmp: Path) -> list[str]:
        (tmp / "c.toml").write_text(FLEET_TOML)
        (tmp / "s.phantom").write_text(text)
        return [*extra, "--config", str(tmp / "c.toml"), "--script", str(tmp / "s.phantom")]

    return make


def journal_then(*args: str) -> Setup:
    """A journal in the test's state dir, then ``args`` (``{journal}`` is its path)."""

    def make(tmp: Path) -> list[str]:
        state = tmp / "home" / "state" / "phantom"
        state.mkdir(parents=True)
        (state / "journal.sqlite").write_bytes(b"SQLite format 3\x00" + bytes(4080))
        return [a.replace("{journal}", str(state / "journal.sqlite")) for a in args]

    return make


# Nine levels of nine aliases: a few hundred bytes that expand to 9**9 strings.
ALIAS_BOMB = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(
        f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]\n"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    )
).encode()
HEX_KEY = "0123456789abcdef0123456789abcdef01234567"  # a W&B key's shape
SLACK_SECRET = "Xq7pLm2Rt9Vw4Zk8Nb3Hc6Jd"  # a Slack webhook's token part
SLACK_HOOK = f"https://hooks.slack.com/services/T0A1B2C3D/B4E5F6G7H/{SLACK_SECRET}"
HF_TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"


CASES = [
    Case("config is a directory", argv("--config", "{tmp}", "status"), 2, ("is a directory",)),
    Case("config missing", argv("--config", "{tmp}/nope.toml", "status"), 2, ("not found",)),
    Case("config binary", binary("c.toml", "--config"), 2, ("not text",)),
    Case("config huge", huge("c.toml", "--config"), 2, ("bytes",)),
    Case("config not TOML", cfg("[cluster\nhosts = 4\n"), 2, ("not valid TOML",)),
    Case("config unknown key", cfg("[cluster]\nnodes = 4\n"), 2, ("cluster.nodes", "allowed")),
    Case("config wrong type", cfg('[cluster]\nhosts = "four"\n'), 2, ("cluster.hosts", "integer")),
    Case("config bad provider", cfg('[cluster]\nprovider = "aws"\n'), 2, ("cluster.provider",)),
    Case(
        "config inline secret",
        cfg('[runtime_env]\nenv_vars = { WANDB_API_KEY = "k3y-in-the-file-0123456789" }\n'),
        2,
        ("runtime_env.env_vars.WANDB_API_KEY", "$WANDB_API_KEY"),
    ),
    Case("config runtime env not JSON", cfg('runtime_env = "{oops"\n'), 2, ("runtime_env",)),
    Case("config key as value", cfg('[wandb]\napi_key_env = "abc-123"\n'), 2, ("api_key_env",)),
    Case("script is a directory", argv("--script", "{tmp}"), 2, ("is a directory",)),
    Case("script missing", argv("--script", "{tmp}/none.phantom"), 2, ("cannot read script",)),
    Case("script binary", binary("s.phantom", "--script"), 2, ("not text",)),
    Case("script huge", huge("s.phantom", "--script"), 2, ("bytes",)),
    Case("script megabyte line", script("sleep " + "1" * 1_000_000 + "\n"), 2, ("characters",)),
    Case("script unknown action", script("ray-upp\n"), 2, ("unknown action", "ray-up")),
    Case("script bad host", script("bootstrap w9\n"), 2, ("unknown host 'w9'",)),
    Case(
        "script runtime env not JSON",
        script("submit single --runtime-env '{\"pip\": [}'\n"),
        2,
        ("--runtime-env", "not valid JSON"),
    ),
    Case(
        "script runtime env is a directory",
        script("submit single --runtime-env /\n"),
        2,
        ("--runtime-env", "readable file"),
    ),
    Case(
        "script runtime env inline secret",
        script('submit single --runtime-env \'{"env_vars": {"HF_TOKEN": "hf_abc"}}\'\n'),
        2,
        ("HF_TOKEN", "$HF_TOKEN"),
    ),
    Case("script bad timeout", script("wait-job last RUNNING --timeout soon\n"), 2, ("duration",)),
    Case("script from stdin", argv("--script", "-"), 2, ("<stdin>:1",), stdin="nope\n"),
    Case("unknown flag", argv("--bogus"), 2, ("unrecognized arguments: --bogus",)),
    Case("script with a command", argv("--script", "-", "status"), 2, ("cannot be combined",)),
    Case("pod up with 0 hosts", argv("pod", "up", "--hosts", "0"), 2, ("--hosts",)),
    Case("init into a directory", argv("init", "{tmp}"), 2, ("is a directory",)),
    Case("init unwritable", argv("init", "/proc/nope/c.toml"), 1, ("cannot write",)),
    # -- issue 45: every key that holds a secret's variable name refuses a secret unechoed ----
    Case(
        "api_key_env holds a key",
        cfg(f'[wandb]\napi_key_env = "{HEX_KEY}"\n'),
        2,
        ("wandb.api_key_env", "NAME"),
        hidden=HEX_KEY,
    ),
    Case(
        "api_key_env holds a URL",
        cfg(f'[wandb]\napi_key_env = "{SLACK_HOOK}"\n'),
        2,
        ("wandb.api_key_env", "NAME"),
        hidden=SLACK_SECRET,
    ),
    Case(
        "hf_token_env holds a token",
        cfg(f'[gke]\nhf_token_env = "{HF_TOKEN}"\n'),
        2,
        ("gke.hf_token_env", "NAME"),
        hidden=HF_TOKEN,
    ),
    Case(
        "old webhook url_env holds the URL",
        cfg(f'[[alerts.webhooks]]\nname = "ops"\nurl_env = "{SLACK_HOOK}"\n'),
        2,
        ("alerts.webhooks[0].url_env", 'url = "${PHANTOM_ALERT_URL}"'),
        hidden=SLACK_SECRET,
    ),
    Case(
        "old webhook url_env names its variable",
        cfg('[[alerts.webhooks]]\nname = "ops"\nurl_env = "OPS_HOOK_URL"\n'),
        2,
        ("url_env", 'url = "${OPS_HOOK_URL}"'),
    ),
    Case(
        "notify url with a secret in ${}",
        cfg(f'[[alerts.notify]]\nname = "ops"\nurl = "${{{SLACK_HOOK}}}"\n'),
        2,
        ("alerts.notify[0] (ops).url", "${NAME}"),
        hidden=SLACK_SECRET,
    ),
    Case(
        "runtime env var holds a key",
        cfg(f'[runtime_env]\nenv_vars = {{ WANDB_API_KEY = "{HEX_KEY}" }}\n'),
        2,
        ("runtime_env.env_vars.WANDB_API_KEY", "$WANDB_API_KEY"),
        hidden=HEX_KEY,
    ),
    # -- issue 36: each defect the field found, refused at the door ---------------------------
    Case(
        "gke run dir under a file",
        under_file("gke", "up", "--run-dir", "{file}/x"),
        2,
        ("--run-dir", "is a file"),
    ),
    Case(
        "wandb run dir under a file",
        under_file("wandb", "up", "--run-dir", "{file}/x"),
        2,
        ("--run-dir", "is a file"),
    ),
    Case(
        "pod run dir under a file",
        under_file("pod", "up", "--run-dir", "{file}/x"),
        2,
        ("--run-dir", "is a file"),
    ),
    Case(
        "gke shutdown grace nan",
        argv("gke", "up", "--shutdown-grace", "nan"),
        2,
        ("--shutdown-grace", "finite"),
    ),
    Case("gke up timeout 0", argv("gke", "up", "--timeout", "0"), 2, ("--timeout",)),
    Case(
        "gke up cluster name",
        argv("gke", "up", "--cluster", "Research_V4"),
        2,
        ("--cluster", "not a GKE cluster name"),
    ),
    Case("gke up tpu type", argv("gke", "up", "--tpu-type", "v9z-8"), 2, ("--tpu-type", "v9z-8")),
    Case(
        "gke up too many tpu nodes",
        argv("gke", "up", "--slices", "16", "--tpu-type", "v5p-512"),
        2,
        ("--slices", "--tpu-type", "at most 128"),
    ),
    Case("wandb up timeout 0", argv("wandb", "up", "--timeout", "0"), 2, ("--timeout",)),
    Case(
        "pod unknown accelerator",
        argv("pod", "up", "--accelerator-type", "v9z-8"),
        2,
        ("--accelerator-type", "v9z-8"),
    ),
    Case(
        "wandb api key as its variable",
        argv("wandb", "up", "--api-key-env", HEX_KEY),
        2,
        ("--api-key-env", "NAME"),
        hidden=HEX_KEY,
    ),
    Case("gke help names phantom", argv("gke", "--help"), 0, ("usage: phantom gke",)),
    Case("wandb help names phantom", argv("wandb", "--help"), 0, ("usage: phantom wandb",)),
    Case("config unknown tpu type", cfg('[gke]\ntpu_type = "v9z-8"\n'), 2, ("gke.tpu_type",)),
    Case(
        "config unknown accelerator",
        cfg('[cluster]\naccelerator_type = "v4-33"\n'),
        2,
        ("cluster.accelerator_type", "sizes"),
    ),
    Case(
        "config key as its variable",
        cfg(f'[wandb]\napi_key_env = "{HEX_KEY}"\n'),
        2,
        ("wandb.api_key_env",),
        hidden=HEX_KEY,
    ),
    Case(
        "config nan seconds",
        cfg("[recovery]\npoll_interval_s = nan\n"),
        2,
        ("recovery.poll_interval_s", "finite"),
    ),
    Case(
        "config run dir under a file",
        cfg('[cluster]\nrun_dir = "/etc/hostname/pod"\n'),
        2,
        ("cluster.run_dir", "is a file"),
    ),
    Case(
        "script unknown event kind",
        script("wait-event preemted\n"),
        2,
        ("preemted", "did you mean preempted"),
    ),
    Case(
        "script train args auto5",
        script("submit single --train-args '--checkpoint-every auto5'\n"),
        2,
        ("--train-args", "--checkpoint-every", "auto5"),
    ),
    Case(
        "script train args n-envs",
        script("submit single --train-args '--n-envs 0'\n"),
        2,
        ("--train-args", "--n-envs"),
    ),
    Case(
        "script train args steps",
        script("submit single --train-args '--total-timesteps -5'\n"),
        2,
        ("--train-args", "--total-timesteps"),
    ),
    Case(
        "script train args algo",
        script("submit distributed --train-args '--algo sac'\n"),
        2,
        ("--train-args", "--algo"),
    ),
    Case(
        "script spec alias bomb",
        gke_script("workload create w1 --spec bomb.yaml\n", {"bomb.yaml": ALIAS_BOMB}),
        2,
        ("bomb.yaml", "aliases"),
    ),
    Case(
        "script spec binary",
        gke_script("workload create w1 --spec bin.yaml\n", {"bin.yaml": bytes(range(256))}),
        2,
        ("bin.yaml", "binary"),
    ),
    Case("init over the journal", journal_then("init", "--force", "{journal}"), 2, ("journal",)),
    Case(
        "init over a file that is not a config",
        under_file("init", "--force", "{file}"),
        2,
        ("not a phantom config",),
    ),
    Case(
        "fleet duplicate name",
        cfg('[[clusters]]\nname = "pod-a"\n[[clusters]]\nname = "pod-a"\n'),
        2,
        ("clusters[1] 'pod-a'", "already used by clusters[0]"),
    ),
    Case(
        "fleet unsafe name",
        cfg('[[clusters]]\nname = "Pod A"\n'),
        2,
        ("clusters[0] 'Pod A'", "safe identifier", "lower-case"),
    ),
    Case("fleet nameless entry", cfg("[[clusters]]\n"), 2, ("clusters[0]", "no name")),
    Case(
        "fleet two clusters on one run dir",
        cfg(
            '[[clusters]]\nname = "a"\n[clusters.cluster]\nrun_dir = "/tmp/x"\n'
            '[[clusters]]\nname = "b"\n[clusters.cluster]\nrun_dir = "/tmp/x"\n'
        ),
        2,
        ("clusters[1] 'b'", "run dir", "clusters[0] 'a'"),
    ),
    Case(
        "fleet of several without --cluster",  # status and watch take them all; trust one
        lambda tmp: [
            *cfg('[[clusters]]\nname = "pod-a"\n[[clusters]]\nname = "pod-b"\n')(tmp)[:2],
            "trust",
            "w1",
        ],
        2,
        ("2 clusters (pod-a, pod-b)", "--cluster NAME"),
    ),
    Case(
        "fleet duplicate name at status",
        cfg('[[clusters]]\nname = "pod-a"\n[[clusters]]\nname = "pod-a"\n'),
        2,
        ("clusters[1] 'pod-a'", "already used by clusters[0]"),
    ),
    Case(
        "fleet duplicate name at watch",
        lambda tmp: [
            *cfg('[[clusters]]\nname = "pod-a"\n[[clusters]]\nname = "pod-a"\n')(tmp)[:2],
            "watch",
        ],
        2,
        ("clusters[1] 'pod-a'", "already used by clusters[0]"),
    ),
    Case(
        "fleet unknown --cluster at watch",
        lambda tmp: [
            "--cluster",
            "pod-c",
            *cfg('[[clusters]]\nname = "pod-a"\n')(tmp)[:2],
            "watch",
        ],
        2,
        ("--cluster 'pod-c'", "no such cluster", "pod-a"),
    ),
    Case(
        "fleet unknown --cluster",
        lambda tmp: ["--cluster", "pod-c", *cfg('[[clusters]]\nname = "pod-a"\n')(tmp)],
        2,
        ("--cluster 'pod-c'", "no such cluster", "pod-a"),
    ),
    Case(
        "fleet unknown --cluster to serve",
        lambda tmp: [
            "--cluster",
            "pod-c",
            *cfg('[[clusters]]\nname = "pod-a"\n')(tmp)[:2],
            "serve",
        ],
        2,
        ("--cluster 'pod-c'", "no such cluster", "pod-a"),
    ),
    Case(
        "fleet --cluster of the wrong emulator",
        lambda tmp: [
            "--cluster",
            "grpo",
            *cfg('[[clusters]]\nname = "grpo"\n[clusters.cluster]\nprovider = "gke"\n')(tmp)[:2],
            "pod",
            "up",
        ],
        2,
        ("--cluster 'grpo'", "`phantom pod`", 'provider = "local"'),
    ),
    Case(
        "fleet script use of a cluster not there",
        fleet_script("status --cluster pod-a\nuse pod-c\nray-up\n"),
        2,
        ("s.phantom:2", "use 'pod-c'", "no such cluster", "did you mean", "pod-a, pod-b"),
    ),
    Case(
        "fleet script unknown --cluster on a line",
        fleet_script("use pod-a\nray-up --cluster pod-bb\n"),
        2,
        ("s.phantom:2", "--cluster 'pod-bb'", "did you mean 'pod-b'?", "pod-a, pod-b"),
    ),
    Case(
        "fleet script with no cluster chosen",
        fleet_script("status\n"),
        2,
        ("s.phantom:1", "none is chosen", "2 clusters (pod-a, pod-b)", "use NAME"),
    ),
    Case(
        "fleet script --cluster not there",
        fleet_script("status\n", "--cluster", "pod-c"),
        2,
        ("--cluster 'pod-c'", "no such cluster", "pod-a, pod-b"),
    ),
    Case(
        "state dir unwritable",
        argv("status"),
        2,
        ("state dir", "XDG_STATE_HOME"),
        env={"XDG_STATE_HOME": "/proc/nope"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_named_refused_and_starts_nothing(case: Case, tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "PHANTOM_NO_CONFIG_DISCOVERY": "1",
        "WANDB_API_KEY": "phantom-bad-input-test-key-0123456789",
        **case.env,
    }
    proc = subprocess.run(
        phantom_argv(*case.setup(tmp_path)),
        cwd=REPO,
        env=env,
        input=case.stdin,
        capture_output=True,
        text=True,
        timeout=60,  # a hang guard; rejecting takes about the interpreter's start-up
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == case.code, said[-2000:]
    assert "Traceback" not in said
    for fragment in case.says:
        assert fragment in said, said[-2000:]
    assert env["WANDB_API_KEY"] not in said
    if case.hidden:
        assert case.hidden not in said, "a secret was echoed"
    assert len(said) < 20_000, f"{len(said):,} characters of error"  # the alias bomb's 39 MB
    for emulator in ("pod", "gke", "wandb"):
        assert not (home / "state" / "phantom" / emulator).exists(), f"{emulator} was started"
    assert not (home / "state" / "phantom" / "fleet").exists(), "a fleet's emulator was started"
    journal = home / "state" / "phantom" / "journal.sqlite"
    if case.name != "init over the journal":
        assert not journal.exists(), "something was run"
    else:
        assert journal.read_bytes().startswith(b"SQLite format 3"), "the journal was overwritten"


# -- a daemon that did not come up is stopped ----------------------------------------------------


def _processes_naming(text: str) -> list[str]:
    """Command lines of the processes whose arguments contain ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(text.encode() in a for a in argv[1:]) and b"/proc" not in argv[0]:
            found.append(b" ".join(argv).decode(errors="replace"))
    return found


@pytest.mark.parametrize("emulator", ["wandb", "gke"])
def test_an_emulator_that_times_out_leaves_nothing_running(emulator: str, tmp_path: Path) -> None:
    """`up --timeout` shorter than the start: it reports the failure (exit 1) and stops the
    daemon it spawned; before, the daemon went on running with nobody to stop it."""
    run_dir = tmp_path / emulator
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    proc = subprocess.run(
        phantom_argv(emulator, "up", "--timeout", "0.001", "--run-dir", str(run_dir)),
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    try:
        assert proc.returncode == 1, proc.stderr
        assert "did not answer" in proc.stderr and "Traceback" not in proc.stderr
        assert _processes_naming(str(run_dir)) == []
    finally:
        subprocess.run(phantom_argv(emulator, "down", "--run-dir", str(run_dir)), env=env,
                       capture_output=True, timeout=120)  # fmt: skip


# -- generated from the parsers: every flag, key and script argument of a checked class -----------
#
# The walks below read the argparse parsers of every phantom subcommand, the config schema and
# the script language's table, so a new option of a known class (number, enum, path) gets its
# cases the day it lands: numbers nan / negative / huge, enums an unknown value, paths a file
# where a directory goes (and under one), a directory where a file goes, a missing file and a
# binary one. Each must exit 2 naming the flag, without a traceback, starting nothing. These run
# in-process through the same entry points (``console.cli.main``, ``parse_config``,
# ``parse_script``): a refusal happens before anything is started, so a process per case would
# only add interpreter start-ups.

import argparse  # noqa: E402
import contextlib  # noqa: E402
import shlex  # noqa: E402
from collections.abc import Iterator  # noqa: E402

from console.cli import build_parser as phantom_parser  # noqa: E402
from console.cli import main as phantom_main  # noqa: E402
from emulators.gke.cli import build_parser as gke_parser  # noqa: E402
from emulators.kit import cli as kit_cli  # noqa: E402
from emulators.kit import validate as kit_validate  # noqa: E402
from emulators.tpu_pod.cli import build_parser as pod_parser  # noqa: E402
from emulators.wandb.cli import build_parser as wandb_parser  # noqa: E402

# Numbers that may be negative or unbounded (a seed is any integer).
SIGNED = {"chaos_seed", "stockout_seed"}
# Flags that take a file or directory, by kind (a new path flag must be placed here).
PATH_FLAGS = {
    "run_dir": "dir_out",
    "ssh_key": "file_in",
    "journal": "file_in",
    "runs": "dir_in",
    "logs": "path_in",  # a log file or a directory of them
    "output": "file_out",
}
# Free text, checked where it is used (names, addresses, dates): acknowledged here so a new
# untyped flag is a decision, not an accident.
FREE_TEXT = {"ssh_user", "project", "zone", "node_name", "capacity", "quota", "stockout",
             "container", "since",
             # the front ends of issue 37 (watch, serve, mcp) check these in their own code
             "metrics", "bind", "token_env", "allow", "http"}  # fmt: skip


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _valid_positionals(sub: argparse.ArgumentParser) -> list[str]:
    out = []
    for action in sub._actions:
        if action.option_strings or action.nargs == argparse.REMAINDER:
            continue
        if isinstance(action, argparse._SubParsersAction):
            continue
        out.append(str(next(iter(action.choices))) if action.choices else "0")
    return out


def _flags() -> Iterator[tuple[list[str], argparse.Action]]:
    """(argv up to the flag, the flag) for every optional of every phantom subcommand."""
    roots = [
        ([], phantom_parser()),
        (["pod"], pod_parser()),
        (["gke"], gke_parser()),
        (["wandb"], wandb_parser()),
    ]
    for prefix, parser in roots:
        for name, sub in _subcommands(parser):
            if name in ("pod", "gke", "wandb") and not prefix:
                continue  # their own parsers, walked above
            head = [*prefix, name, *(["--format", "md"] if name == "report" else [])]
            for action in sub._actions:
                if action.option_strings and action.nargs != 0 and action.dest != "format":
                    yield [*head, *_valid_positionals(sub)], action


def _number_kind(action: argparse.Action) -> str:
    """ "int", "float" or "" (not a number), by what the flag's own type makes of "1"."""
    if not callable(action.type):
        return ""
    with contextlib.suppress(Exception):
        value = action.type("1")
        if isinstance(value, bool):
            return ""
        if isinstance(value, int):
            return "int"
        if isinstance(value, float):
            return "float"
    return ""


def _flag_cases() -> Iterator[tuple[str, list[str], str]]:
    """(id, argv, the flag the message must name)."""
    for head, action in _flags():
        flag = action.option_strings[-1]
        where = " ".join([*head[:2], flag])
        bad: list[str] = []
        number = _number_kind(action)
        if action.choices is not None:
            bad = ["zz-unknown"]
        elif action.dest in PATH_FLAGS:
            bad = {
                "dir_out": ["{file}", "{file}/x"],
                "dir_in": ["{file}", "{missing}"],
                "path_in": ["{missing}"],
                "file_in": ["{dir}", "{missing}", "{binary}"],
                "file_out": ["{dir}", "{file}/x"],
            }[PATH_FLAGS[action.dest]]
        elif number:
            bad = ["nan", "inf"] + ([] if action.dest in SIGNED else ["-1", "9" * 15])
        elif callable(action.type) and action.type not in (str, Path):
            bad = ["!!bad!!"]  # a value type of its own (zones, kinds, names): garbage
        elif action.dest not in FREE_TEXT:
            UNTYPED.append(where)
        for value in bad:
            yield f"{where} {value[:12]}", [*head, flag, value], flag


UNTYPED: list[str] = []


def _enum_positional_cases() -> Iterator[tuple[str, list[str], str]]:
    """Every positional with a set of values (a fault kind, a subcommand) given another."""
    for prefix, parser in (([], pod_parser()), ([], gke_parser()), ([], wandb_parser())):
        for name, sub in _subcommands(parser):
            values = _valid_positionals(sub)
            positionals = [
                a for a in sub._actions if not a.option_strings and a.nargs != argparse.REMAINDER
            ]
            for i, action in enumerate(positionals):
                if action.choices:
                    bad = [*values[:i], "zz-unknown", *values[i + 1 :]]
                    named = action.metavar or action.dest
                    yield (
                        f"{parser.prog} {name} {named} zz",
                        [parser.prog.split()[-1], *prefix, name, *bad],
                        str(named),
                    )
        yield f"{parser.prog} zz", [parser.prog.split()[-1], "zz-unknown"], "invalid choice"


FLAG_CASES = list(_flag_cases()) + list(_enum_positional_cases())


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("PHANTOM_NO_CONFIG_DISCOVERY", "1")
    (tmp_path / "a-file").write_text("a regular file\n")
    (tmp_path / "binary").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "a-dir").mkdir()
    return {
        "{file}": str(tmp_path / "a-file"),
        "{missing}": str(tmp_path / "missing"),
        "{binary}": str(tmp_path / "binary"),
        "{dir}": str(tmp_path / "a-dir"),
    }


def _fill(args: list[str], files: dict[str, str]) -> list[str]:
    out = []
    for a in args:
        for key, path in files.items():
            a = a.replace(key, path)
        out.append(a)
    return out


def _refusal(argv: list[str]) -> int:
    """The exit code of ``phantom ARGV`` when it refuses ARGV; 0 where it would go on. Never
    starts anything: an emulator's command line and phantom's own are parsed by the entry
    points' parsers (``kit.parse`` turns usage errors into 2, as ``pod_main`` does), and only
    ``report`` (which reads a journal, nothing more) runs whole."""
    root, rest = argv[0], argv[1:]
    emulators = {"pod": pod_parser, "gke": gke_parser, "wandb": wandb_parser}
    if root in emulators:
        parsed = kit_cli.parse(emulators[root](), rest)
        return parsed if isinstance(parsed, int) else 0
    try:
        if root == "report":
            return phantom_main(argv)
        phantom_parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@pytest.mark.parametrize(
    ("argv", "flag"), [c[1:] for c in FLAG_CASES], ids=[c[0] for c in FLAG_CASES]
)
def test_every_flag_refuses_its_class_of_bad_value(
    argv: list[str], flag: str, home: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = _refusal(_fill(argv, home))
    said = capsys.readouterr()
    assert code == 2, f"exit {code}: {said.out[-500:]}{said.err[-1500:]}"
    assert flag in said.err, said.err[-1500:]
    assert "Traceback" not in said.err


def test_the_flag_walk_covers_every_class() -> None:
    """The walk found flags of each class in each front end (a broken walk finds none), and
    every flag is of a class it checks or acknowledged as free text."""
    assert UNTYPED == [], "new untyped flags: give each a type (or list it in FREE_TEXT)"
    heads = {c[1][0] for c in FLAG_CASES}
    assert {"pod", "gke", "wandb", "status", "report"} <= heads
    assert any("--run-dir" in c[1] for c in FLAG_CASES)
    assert any("zz-unknown" in c[1] for c in FLAG_CASES)  # enums
    assert any("nan" in c[1] for c in FLAG_CASES)  # numbers
    assert any("{binary}" in c[1] for c in FLAG_CASES)  # files
    assert len(FLAG_CASES) > 150, len(FLAG_CASES)
    assert kit_validate.run_dir in {a.type for _, a in _flags()}


# -- the config schema, key by key ---------------------------------------------------------------

from dataclasses import fields as config_fields  # noqa: E402
from typing import Any, get_args, get_type_hints  # noqa: E402

from console.config import _SECTIONS, ConfigError, parse_config  # noqa: E402

# Numbers where a negative value means something (none today): a new one is a decision.
CONFIG_SIGNED: set[str] = set()
# String keys whose value is a directory (checked by the same door as --run-dir).
CONFIG_DIRS = {"cluster.run_dir", "gke.run_dir", "wandb.dir"}


def _config_cases() -> Iterator[tuple[str, dict[str, Any]]]:
    for section, cls in _SECTIONS.items():
        hints = get_type_hints(cls)
        for f in config_fields(cls):
            key, default = f"{section}.{f.name}", getattr(cls(), f.name)
            bad: list[Any] = []
            if isinstance(default, bool):
                bad = ["yes"]
            elif isinstance(default, int | float):
                bad = ["many", float("nan"), float("inf")]
                bad += [] if key in CONFIG_SIGNED else [-1]
            elif get_args(hints[f.name]):  # a Literal: its values
                bad = ["zz-unknown"]
            elif key in CONFIG_DIRS:
                bad = ["/etc/hostname/x"]
            for value in bad:
                yield f"{key}={value}", {section: {f.name: value}}


CONFIG_CASES = list(_config_cases())


@pytest.mark.parametrize("data", [c[1] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES])
def test_every_config_key_refuses_its_class_of_bad_value(data: dict[str, Any]) -> None:
    ((section, table),) = data.items()
    ((name, _),) = table.items()
    with pytest.raises(ConfigError) as refused:
        parse_config(data)
    assert f"{section}.{name}" in refused.value.render()


# -- the script language, verb by verb ----------------------------------------------------------

from console.config import Config  # noqa: E402
from console.script.language import ACTIONS  # noqa: E402
from console.script.parse import ScriptError, parse_script  # noqa: E402
from console.wiring import unbuilt_services  # noqa: E402

# What a valid value of each argument kind looks like, and bad ones of its class.
_VALID = {"int": "1", "seconds": "1", "onoff": "on", "host": "0", "host_or_all": "all",
          "job": "last", "kind": "preempted", "name": "w1", "env": "A=b", "str": "x",
          "runtime_env": "{}", "path": "{spec}"}  # fmt: skip


def _bad_values(arg: Any) -> list[str]:
    kind = arg.kind
    if kind == "int":
        return (
            ["nan", "1.5"]
            + (["-1"] if arg.min is not None else [])
            + ([str(int(arg.max) + 1)] if arg.max is not None else [])
        )
    return {
        "seconds": ["nan", "inf", "-1", "soon"],
        "choice": ["zz-unknown"],
        "onoff": ["maybe"],
        "host": ["w99"],
        "host_or_all": ["w99"],
        "kind": ["preemted"],
        "name": ["Bad_Name"],
        "env": ["1BAD=x"],
        "path": ["{dir}", "{missing}", "{binary}"],
        "runtime_env": ["{dir}", "{binary}"],
        "cluster": ["pod-zz"],  # not in the config
    }.get(kind, [])


def _line(verb: str, args: Any, target: Any, value: str) -> str:
    words = [verb]
    for a in args.positionals:
        if a is target:
            words.append(value)
        elif a.required:
            words.append(a.choices[0] if a.kind == "choice" else _VALID.get(a.kind, "x"))
    if target.is_flag:
        words += [target.name, value]
    return " ".join(shlex.quote(w) if not w.startswith("{") else w for w in words)


def _script_cases() -> Iterator[tuple[str, str, str]]:
    for verb, adef in ACTIONS.items():
        for arg in (*adef.positionals, *adef.flags):
            for value in _bad_values(arg):
                yield f"{verb} {arg.name} {value[:10]}", verb, _line(verb, adef, arg, value)


SCRIPT_CASES = list(_script_cases())


@pytest.mark.parametrize(
    ("verb", "line"), [c[1:] for c in SCRIPT_CASES], ids=[c[0] for c in SCRIPT_CASES]
)
def test_every_script_argument_refuses_its_class_of_bad_value(
    verb: str, line: str, home: dict[str, str], tmp_path: Path
) -> None:
    """Each line is refused by the whole-script check (before anything runs) with its line
    number and the verb, under the provider the verb is for."""
    spec = tmp_path / "spec.json"
    spec.write_text("{}")
    files = {**home, "{spec}": str(spec)}
    text = "submit single\nworkload create w0\n" if "last" in line else ""
    for provider in ("local", "gke"):
        config = parse_config({"cluster": {"provider": provider}})
        try:
            parse_script(text + _fill([line], files)[0] + "\n", unbuilt_services(config), name="s")
        except ScriptError as exc:
            issues = [i for i in exc.issues if i.line == text.count("\n") + 1]
            if issues and not any("provider" in i.message for i in issues):
                assert verb.split()[0] in issues[0].message or ":" in issues[0].message
                return
    pytest.fail(f"{line!r} was accepted (or only refused for its provider)")


def test_the_script_walk_covers_the_language() -> None:
    verbs = {c[1] for c in SCRIPT_CASES}
    assert {"wait-event", "submit", "wait-job", "workload create"} <= verbs
    assert Config().cluster.provider == "local"
