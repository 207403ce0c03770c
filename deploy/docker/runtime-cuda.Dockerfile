# The runtime image for NVIDIA GPU nodes: `vllm-srun` with torch's CUDA build. The CUDA
# libraries come inside torch's wheels; the node brings the driver (docs/deploy/gpu.md).
# Build from the repository root:
#
#   docker build -f deploy/docker/runtime-cuda.Dockerfile -t vllm-sr/runtime:0.1.0-cuda .
#
# torch is installed at constraints.txt's version (2.13.0, there with the +cpu build tag) as
# the CUDA build TORCH_CUDA names; every other package at its version in constraints.txt.
# The `cuda` extra adds flash-linear-attention 0.5.2 (seed 001's reference pins it; fla-core and
# einops pinned in constraints.txt): the Gated DeltaNet layers' chunked Triton kernels on CUDA;
# without it they run transformers' torch path (docs/deploy/gpu.md). The CPU image leaves it
# out: its kernels are Triton kernels for GPUs. The base image at an exact tag and digest
# (docs/deploy/images.md).

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
ARG TORCH_CUDA=cu128
COPY constraints.txt constraints-nodeps.txt /opt/vllm-sr/
COPY --from=wheel /wheels /wheels
# xds-protos ships an older copy of opentelemetry/proto: opentelemetry-proto is installed again
# after it, so the OTLP exporter (tracing) finds its own files.
RUN grep -v '^torch==' /opt/vllm-sr/constraints.txt > /opt/vllm-sr/constraints-cuda.txt \
    && pip install --no-cache-dir --index-url "https://download.pytorch.org/whl/${TORCH_CUDA}" "torch==${TORCH_VERSION}+${TORCH_CUDA}" \
    && WHEEL=$(ls /wheels/*.whl) \
    && pip install --no-cache-dir -c /opt/vllm-sr/constraints-cuda.txt "${WHEEL}[runtime,cuda]" \
    && pip install --no-cache-dir --no-deps -r /opt/vllm-sr/constraints-nodeps.txt \
    && pip install --no-cache-dir --no-deps --force-reinstall -c /opt/vllm-sr/constraints-cuda.txt "opentelemetry-proto==1.45.2" \
    && rm -rf /wheels \
    && useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin vllm-sr
USER 10001:10001
# No NVIDIA_VISIBLE_DEVICES: the device plugin sets it to the GPUs a pod was given; baked in as
# `all`, a pod that asked for none would see every GPU of its node.
ENV HF_HUB_OFFLINE=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
# Where the image was built from: docker build --build-arg VCS_URL=... --build-arg VCS_REF=$(git rev-parse HEAD)
ARG VCS_URL=unknown
ARG VCS_REF=unknown
LABEL org.opencontainers.image.source="${VCS_URL}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.title="vllm-sr/runtime" \
      org.opencontainers.image.version="0.1.0-cuda" \
      org.opencontainers.image.description="vllm-srun on NVIDIA GPUs"
EXPOSE 8100
CMD ["vllm-srun", "serve", "default", "--device", "cuda", "--host", "0.0.0.0", "--port", "8100"]
