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
    journal = home / "state" / "phantom" / "journal.sqlite"
    if case.name != "init over the journal":
        assert not journal.exists(), "something was run"
    else:
        assert journal.read_bytes().startswith(b"SQLite format 3"), "the journal was overwritten"
