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
    assert not (home / "state" / "phantom" / "pod").exists(), "a pod emulator was started"
    assert not (home / "state" / "phantom" / "journal.sqlite").exists(), "something was run"
