"""The [gke] section's checks: each bad value is named with its fix, through parse_config."""

from __future__ import annotations

import re

import pytest

from console.config import ConfigError, parse_config


@pytest.mark.parametrize(
    ("gke", "message"),
    [
        ({"slices": 65}, r"gke\.slices = 65: at most 64 slices"),
        ({"slices": 0}, r"gke\.slices = 0: must be greater than 0"),
        ({"max_restarts": -1}, r"gke\.max_restarts = -1: must be 0 or more"),
        ({"namespace": "Prod_1"}, r"gke\.namespace = 'Prod_1': a namespace name"),
        ({"base_output_directory": "s3://b/x"}, r"use gs://bucket/path or file:///abs/path"),
        ({"kubeconfig": "/nonexistent/kubeconfig"}, r"no such file .*get-credentials"),
        ({"hf_token_env": "hf_" + "a1" * 16}, r"gke\.hf_token_env: the NAME .*never the token"),
        ({"hf_token_env": "MY-TOKEN"}, r"gke\.hf_token_env: the NAME"),
    ],
)
def test_bad_gke_values_are_named(gke: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"cluster": {"provider": "gke"}, "gke": gke})
    assert any(re.search(message, p) for p in err.value.problems), err.value.problems


def test_good_gke_values_pass() -> None:
    cfg = parse_config(
        {
            "cluster": {"provider": "gke"},
            "gke": {
                "namespace": "team-a",
                "slices": 2,
                "hf_token_env": "",
                "base_output_directory": "file:///tmp/runs",
                "maxtext_ckpt_path": "gs://bucket/ckpt/0/items",
            },
        }
    )
    assert cfg.is_gke and cfg.is_emulated and cfg.gke.slices == 2
