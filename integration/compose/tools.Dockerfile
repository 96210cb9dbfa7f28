# Image of the compose suite's `dns` (dnsmasq), `redis` (Debian's redis-server) and `tester`
# (bash + curl, redis-cli) services. Packages come from the Debian mirror configured in the
# base image (deb.debian.org), the same place `debootstrap` and the host's apt-get use; the
# layer is cached after the first build. Records (dnsmasq.conf) and the test script are
# mounted at run time, not copied, so editing them needs no rebuild.
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        dnsmasq-base curl ca-certificates redis-server \
 && rm -rf /var/lib/apt/lists/*
