# The test upstream (`crawlguard-test-upstream`, integration/src/bin/test-upstream/main.rs),
# built from source. Build context: the repository root (see ../../.dockerignore):
#   docker build -f integration/compose/upstream.Dockerfile -t crawlguard-test-upstream .
# Offline (binary built on the host): integration/compose/prebuilt.Dockerfile.
ARG RUST_IMAGE=docker.io/library/rust:1-bookworm
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p crawlguard-integration --bin crawlguard-test-upstream \
 && cp target/release/crawlguard-test-upstream /usr/local/bin/

FROM ${BASE_IMAGE}
COPY --from=build /usr/local/bin/crawlguard-test-upstream /usr/local/bin/crawlguard-test-upstream
USER 65534:65534
ENTRYPOINT ["crawlguard-test-upstream"]
CMD ["--listen", "127.0.0.1:10001"]
