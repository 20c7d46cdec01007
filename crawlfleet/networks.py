"""Addresses that the crawler's guard and the operator's worker egress policy both name.

The guard (``crawler/fetching/safety.py``) refuses them in the worker's process, after DNS and on
every redirect; the egress NetworkPolicy (``operator/children.py``) refuses them again in the
network, for the day the process is wrong. One list, so the two never disagree.

It imports nothing of crawlfleet's, so every layer can use it.
"""

from __future__ import annotations

import ipaddress
from typing import Final

__all__ = ["METADATA_ADDRESSES", "PRIVATE_NETWORKS", "IPAddress"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Cloud instance-metadata endpoints: AWS/GCP/Azure/OpenStack, AWS IPv6, Alibaba, Oracle, and
#: Azure's WireServer (168.63.129.16, a public address every Azure VM reaches: it serves the
#: VM agent's configuration and certificates, so "allow private networks" must not open it).
METADATA_ADDRESSES: Final[frozenset[IPAddress]] = frozenset(
    {
        ipaddress.IPv4Address("169.254.169.254"),
        ipaddress.IPv4Address("169.254.170.2"),  # AWS ECS task metadata
        ipaddress.IPv4Address("168.63.129.16"),  # Azure WireServer (and its DNS, health probes)
        ipaddress.IPv6Address("fd00:ec2::254"),
        ipaddress.IPv4Address("100.100.100.200"),
        ipaddress.IPv4Address("192.0.0.192"),
    }
)

#: Where a cluster's pods, Services and nodes usually live, and what else is not the public
#: internet to a crawl: private, shared (carrier NAT) and link-local ranges.
PRIVATE_NETWORKS: Final = (
    "10.0.0.0/8",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "fc00::/7",
    "fe80::/10",
)
