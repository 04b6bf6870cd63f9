"""Pure parts of the emulator's new pieces: address plan, zone flags, stockout schedule,
chaos events, metadata rendering, ssh-keys metadata. No daemon, no network."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys

import asyncssh
import pytest

from emulators.tpu_pod.chaos import chaos_events, chaos_schedule, check_fault
from emulators.tpu_pod.layout import MAX_HOSTS, MAX_SLOTS, host_ip, resolve_host_ref
from emulators.tpu_pod.metadata import _render
from emulators.tpu_pod.nodes import parse_ssh_keys
from emulators.tpu_pod.zones import (
    Capacity,
    Window,
    parse_capacity,
    parse_stockout,
    parse_zones,
    seeded_windows,
    stockout_message,
)

ZONES = ("local-a", "local-b", "local-c")


def test_address_plan_keeps_zone_a_and_never_collides() -> None:
    assert [host_ip(i) for i in range(4)] == [f"127.0.0.{10 + i}" for i in range(4)]
    assert host_ip(199) == "127.0.0.209" and host_ip(200) == "127.0.1.10"
    assert host_ip(0, zone=1) == "127.1.0.10" and host_ip(0, external=True) == "127.100.0.10"
    assert host_ip(255, zone=2, external=True) == "127.102.1.65"
    assert host_ip(0, slot=1) == "127.0.6.10"
    every = [
        host_ip(i, zone=z, slot=s, external=e)
        for i in range(MAX_HOSTS)
        for z in range(3)
        for s in (0, MAX_SLOTS - 1)
        for e in (False, True)
    ]
    assert len(set(every)) == len(every)
    for ip in every:
        octets = [int(o) for o in ip.split(".")]
        assert octets[0] == 127 and all(0 <= o <= 255 for o in octets) and octets[3] >= 10
    ips = [(host_ip(i, zone=1), host_ip(i, zone=1, external=True)) for i in range(4)]
    assert resolve_host_ref("127.101.0.12", "phantom-pod", 4, ips) == 2


def test_zone_flags_parse_or_name_the_fix() -> None:
    assert parse_zones("local-a, local-b") == ("local-a", "local-b")
    assert parse_capacity(["2"], ZONES) == dict.fromkeys(ZONES, 2)
    assert parse_capacity(["local-b:0,local-c:3"], ZONES) == {
        "local-a": 1, "local-b": 0, "local-c": 3,
    }  # fmt: skip
    assert parse_stockout("local-a:0-180", ZONES) == ("local-a", Window(0.0, 180.0))
    assert parse_stockout("local-c:60-", ZONES) == ("local-c", Window(60.0, math.inf))
    for bad, message in (
        (lambda: parse_zones(""), "at least one zone"),
        (lambda: parse_zones("a,a"), "names a zone twice"),
        (lambda: parse_capacity(["local-d:1"], ZONES), "unknown zone 'local-d'"),
        (lambda: parse_capacity(["-1"], ZONES), "must be 0.."),
        (lambda: parse_stockout("local-a:5", ZONES), "use ZONE:START-END"),
        (lambda: parse_stockout("local-a:x-5", ZONES), "use ZONE:START-END"),
    ):
        with pytest.raises(ValueError, match=message):
            bad()


def test_capacity_counts_windows_and_slices() -> None:
    cap = Capacity(ZONES, {"local-a": 2}, {"local-b": [Window(0, 60)], "local-c": [Window(100)]})
    assert cap.free("local-a", 1) == 1 and cap.free("local-a", 2) == 0
    assert cap.in_stockout("local-b", 30) and not cap.in_stockout("local-b", 60)
    assert not cap.in_stockout("local-c", 99) and cap.in_stockout("local-c", 1e9)
    cap.set("local-a", stockout_s=0)
    assert cap.free("local-a", 0) == 0
    cap.set("local-a", clear=True, capacity=3)
    assert cap.free("local-a", 0) == 3
    status = {z["name"]: z for z in cap.status({"local-a": 1})}
    assert status["local-a"]["used"] == 1 and status["local-b"]["stockout"]


def test_seeded_stockouts_depend_on_the_seed_only() -> None:
    first = seeded_windows(5, ZONES, 60.0, horizon=3600)
    assert first == seeded_windows(5, ZONES, 60.0, horizon=3600)
    assert first != seeded_windows(6, ZONES, 60.0, horizon=3600)
    for windows in first.values():
        assert windows and all(30 <= w.end - w.start <= 90 for w in windows)
        assert all(a.end < b.start for a, b in itertools.pairwise(windows))


def test_stockout_message_is_the_cloud_tpu_wording() -> None:
    text = stockout_message("local-b")
    assert text.startswith(
        'There is no more capacity in the zone "local-b"; you can try in another zone where '
        "Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x"
    )
    assert text.endswith("]") and len(text.rsplit("0x", 1)[1]) == 17


def test_chaos_events_without_faults_replay_the_old_schedule() -> None:
    old = list(itertools.islice(chaos_schedule(7, 2.0, 4), 40))
    new = list(itertools.islice(chaos_events(7, 2.0, 4), 40))
    assert [(d, t) for d, _, t, _ in new] == old and {a for _, a, _, _ in new} == {"preempt"}
    mixed = list(itertools.islice(chaos_events(7, 2.0, 4, ("hang", "slow-api")), 200))
    assert mixed == list(itertools.islice(chaos_events(7, 2.0, 4, ("hang", "slow-api")), 200))
    assert {a for _, a, _, _ in mixed} == {"preempt", "hang", "slow-api"}
    assert [(d, t) for d, _, t, _ in mixed] == list(
        itertools.islice(chaos_schedule(7, 2.0, 4), 200)
    )
    with pytest.raises(ValueError, match="unknown fault 'melt'"):
        check_fault("melt", None, None)


def test_metadata_paths_lists_and_recursive_json() -> None:
    tree = {
        "instance": {
            "preempted": "FALSE",
            "network-interfaces": {"0": {"ip": "127.0.0.10"}},
            "attributes": {"ssh-keys": "a:b", "agent-worker-number": "0"},
        }
    }
    assert _render(tree, "instance/preempted", False) == ("FALSE", "application/text")
    assert _render(tree, "instance/", False) == (
        "preempted\nnetwork-interfaces/\nattributes/\n",
        "application/text",
    )
    body, ctype = _render(tree, "instance", True)  # type: ignore[misc]
    assert ctype == "application/json"
    assert json.loads(body)["networkInterfaces"]["0"]["ip"] == "127.0.0.10"
    assert "agent-worker-number" in json.loads(body)["attributes"]  # user keys stay as they are
    assert _render(tree, "instance/nope", False) is None


def test_ssh_keys_metadata_is_parsed_as_gce_does() -> None:
    key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    parsed = parse_ssh_keys(f"alice:{key} alice@laptop\n\nnot a key line\nbob:garbage\n")
    assert list(parsed) == ["alice"] and len(parsed["alice"]) == 1


def test_the_client_and_cli_stay_stdlib_only() -> None:
    """The console imports the client on its first frame: no grpc, asyncssh or aiohttp."""
    code = (
        "import sys, emulators.tpu_pod.client, emulators.tpu_pod.cli\n"
        "heavy = {'grpc', 'asyncssh', 'aiohttp', 'google', 'proto'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
