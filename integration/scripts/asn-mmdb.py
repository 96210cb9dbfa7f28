#!/usr/bin/env python3
"""Writes a MaxMind-format ASN database (the GeoLite2-ASN layout Envoy's geoip filter reads:
autonomous_system_number as uint32, autonomous_system_organization) for the browser-signal
tests, with mmdb-writer (PyPI, installed into .venv/ by scripts/setup.sh).

    asn-mmdb.py OUT.mmdb CIDR=ASN:ORG [CIDR=ASN:ORG ...]

IPv4 networks go into the IPv6 tree at ::/96, where MaxMind's readers look IPv4 up.
"""
import sys

from mmdb_writer import MMDBWriter, MmdbU32
from netaddr import IPSet


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    writer = MMDBWriter(ip_version=6, database_type="GeoLite2-ASN", ipv4_compatible=True)
    for spec in argv[2:]:
        cidr, _, rest = spec.partition("=")
        asn, _, org = rest.partition(":")
        writer.insert_network(
            IPSet([cidr]),
            {"autonomous_system_number": MmdbU32(int(asn)), "autonomous_system_organization": org},
        )
    writer.to_db_file(argv[1])


if __name__ == "__main__":
    main(sys.argv)
