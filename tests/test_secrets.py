"""The one scrubber: secret values anywhere in text, key=value secrets, secret-named keys."""

from __future__ import annotations

from console.secrets import MASK, Scrubber, is_secret_name, mask_env


def test_secret_keys() -> None:
    for name in (
        "WANDB_API_KEY",
        "api_key",
        "apiKey",
        "token",
        "GH_TOKEN",
        "password",
        "dbPassword",
        "private_key",
        "key",
        "client_secret",
        "credentials",
    ):
        assert is_secret_name(name), name
    for name in (
        "host_key",
        "hostKey",
        "public_key",
        "host_key_fingerprint",
        "keys",
        "monkey",
        "hosts",
        "kind",
        "sort_key_name",
    ):
        assert not is_secret_name(name), name


def test_scrubber_masks_secret_values_and_keys_but_not_references() -> None:
    env = {"WANDB_API_KEY": "k" * 40, "GH_TOKEN": "ghp_abcdef123", "SHORT_KEY": "ab", "HOME": "/x"}
    scrub = Scrubber(environ=env)
    assert scrub("login " + "k" * 40) == f"login {MASK}"
    assert scrub({"nested": ["ghp_abcdef123 here"]}) == {"nested": [f"{MASK} here"]}
    assert scrub({"api_token": "zzz", "WANDB_API_KEY": "$WANDB_API_KEY", "n": 3}) == {
        "api_token": MASK,
        "WANDB_API_KEY": "$WANDB_API_KEY",
        "n": 3,
    }
    assert scrub("ab is not masked (too short to be a key)") == (
        "ab is not masked (too short to be a key)"
    )


def test_inline_and_bearer_and_hf_tokens_are_masked_whatever_their_value() -> None:
    scrub = Scrubber(environ={})
    token = "hf_" + "a1B2c3D4e5" * 4
    text = scrub.text(
        f"HF_TOKEN={token} then Authorization: Bearer eyJhbGciOiJIUzI1NiJ9 and {token}"
    )
    assert token not in text and "eyJhbGciOiJIUzI1NiJ9" not in text
    assert text.count(MASK) == 3


def test_a_key_exported_after_the_scrubber_was_made_is_still_masked() -> None:
    env: dict[str, str] = {}
    scrub = Scrubber(environ=env)
    assert scrub.text("x" * 12) == "x" * 12
    env["HF_TOKEN"] = "x" * 12
    scrub._read_at = float("-inf")  # the once-a-second refresh, without waiting a second
    assert scrub.text("x" * 12) == MASK


def test_named_variables_are_secret_whatever_they_are_called() -> None:
    scrub = Scrubber(["MY_WANDB"], environ={"MY_WANDB": "plainvalue123"})
    assert scrub.text("key plainvalue123") == f"key {MASK}"


def test_mask_env_keeps_references_and_plain_values() -> None:
    env = {"WANDB_API_KEY": "$WANDB_API_KEY", "HF_TOKEN": "hf_x", "WANDB_PROJECT": "p"}
    assert mask_env(env) == {
        "WANDB_API_KEY": "$WANDB_API_KEY",
        "HF_TOKEN": MASK,
        "WANDB_PROJECT": "p",
    }
