# syntax=docker/dockerfile:1
# gpu-rightsizer: one image for the operator (`gpu-rightsizer run`), the NVML agent
# (`gpu-rightsizer agent`) and the one-shot report (`gpu-rightsizer analyze`).
#
#   docker build -t gpu-rightsizer:0.1.0 .
#
# The builder stage turns the project and its dependencies into wheels; the runtime stage installs only
# those wheels (no compilers, no build tools, no test dependencies) into a virtualenv owned by root and
# runs as the unprivileged user 65532, which the Helm chart also sets. The base image is pinned to an
# exact Python patch release and Debian suite so that rebuilds are reproducible.

FROM python:3.11.14-slim-bookworm AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ ./operator/
# One wheel for the project plus one per runtime dependency (never the [test] extras).
RUN python -m pip wheel --wheel-dir /wheels .


FROM python:3.11.14-slim-bookworm AS runtime

LABEL org.opencontainers.image.title="gpu-rightsizer" \
      org.opencontainers.image.description="Diagnoses why GPU workloads waste their GPUs and right-sizes them" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/gpu-rightsizer/gpu-rightsizer"

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2 \
    PATH=/opt/gpu-rightsizer/bin:$PATH

RUN groupadd --system --gid 65532 nonroot \
 && useradd --system --uid 65532 --gid 65532 --home-dir /home/nonroot --create-home \
      --shell /usr/sbin/nologin nonroot

# Install from the builder's wheels only (--no-index: nothing is fetched at this stage), then drop pip
# and setuptools from the runtime virtualenv: nothing installs packages at run time.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m venv /opt/gpu-rightsizer \
 && /opt/gpu-rightsizer/bin/pip install --no-index --find-links=/wheels gpu-rightsizer \
 && /opt/gpu-rightsizer/bin/pip uninstall --yes pip setuptools \
 && gpu-rightsizer --help >/dev/null

WORKDIR /home/nonroot
# liveness (operator), metrics (operator), metrics (agent)
EXPOSE 8080 9090 9400
USER 65532:65532

ENTRYPOINT ["gpu-rightsizer"]
CMD ["--help"]
