# The evaluator's image (`watchfire run`, `serve`, `test`, `rulecheck`, ...), what
# deploy/kubernetes/statefulset.yaml runs. Build from the repository root:
#   docker build -t ghcr.io/example/watchfire:0.1.0 .
#   scripts/image build                      # the same with Debian's buildah or podman
#
# Multi-stage: a release build on rust:1-bookworm, then bookworm-slim with the CA certificates
# (HTTPS to AMP, SNS, CloudWatch, PagerDuty, Slack, Opsgenie, SMTP over TLS) and nothing else but
# /bin/sh, which the StatefulSet needs to compute the shard from the pod's name. Runs as the
# non-root user 65532 the StatefulSet's securityContext names; state goes to /var/lib/watchfire.
ARG RUST_IMAGE=docker.io/library/rust:1-bookworm
ARG RUNTIME_IMAGE=docker.io/library/debian:bookworm-slim
# `build` compiles here; `prebuilt` takes a binary built elsewhere from the `prebuilt` build
# context (scripts/image --prebuilt FILE): it must be a glibc binary for Debian 12 or older.
ARG BINARY_STAGE=build

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# No debug info, symbols stripped.
ENV CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols
RUN cargo build --release --locked --bin watchfire \
 && install -D -m 0755 target/release/watchfire /out/usr/local/bin/watchfire

FROM scratch AS prebuilt
COPY --from=prebuilt-binary watchfire /out/usr/local/bin/watchfire

FROM ${BINARY_STAGE} AS binary

FROM ${RUNTIME_IMAGE} AS runtime
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* \
 && groupadd --system --gid 65532 watchfire \
 && useradd --system --uid 65532 --gid 65532 --home-dir /var/lib/watchfire --shell /usr/sbin/nologin watchfire \
 && install -d -o 65532 -g 65532 /var/lib/watchfire
# The shipped policy and example configuration, for `watchfire init`-less trials and the smoke run
# (the StatefulSet mounts its own over /etc/watchfire).
COPY rules /usr/share/watchfire/rules
COPY slos /usr/share/watchfire/slos
COPY causes /usr/share/watchfire/causes
COPY deploy/watchfire.yaml deploy/routes.yaml deploy/owners.yaml deploy/cloudwatch-mapping.yaml /usr/share/watchfire/deploy/
COPY --from=binary /out/usr/local/bin/watchfire /usr/local/bin/watchfire
USER 65532:65532
WORKDIR /var/lib/watchfire
EXPOSE 9099
ENTRYPOINT ["/usr/local/bin/watchfire"]
CMD ["--help"]
