"""A node as GetNode shows it: the endpoints built once per node are still each read's own."""

from __future__ import annotations

from emulators.tpu_pod.hosts import READY
from emulators.tpu_pod.nodes import Node
from emulators.tpu_pod.zones import Zone


def test_getnode_endpoints_are_the_hosts_and_each_read_its_own_copy() -> None:
    node = Node.build("pod", "proj", Zone("local-a", 0), 0, 8, True, accelerator_type="v5p-16")
    node.exists = True
    for host in node.hosts:
        host.state = READY
    first = node.to_pb(2222)
    assert [
        (e.ip_address, e.port, e.access_config.external_ip) for e in first.network_endpoints
    ] == [(h.ip, 2222, h.external_ip) for h in node.hosts]
    first.network_endpoints[0].ip_address = "10.9.9.9"  # a caller's copy, not the node's
    assert node.to_pb(2222).network_endpoints[0].ip_address == node.hosts[0].ip
    assert {e.port for e in node.to_pb(2200).network_endpoints} == {2200}
