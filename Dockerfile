# syntax=docker/dockerfile:1
# The driver's image: the single-file agent and controller on a small Debian base.
#
#   make image        # = docker build --build-arg VERSION=<version> -t <repository>:v<version> .
#
# `make -s print-image` names the reference it tags: the Helm chart's default image
# (image.repository, and image.tag empty = v<appVersion>). VERSION defaults to api/version.py's
# (tests/packaging/test_image.py holds them equal).
#
# The same image serves the kubelet-plugin DaemonSet (`compute-domain-agent plugin`), the
# per-ComputeDomain IMEX daemon pods (`compute-domain-agent daemon run|check`) and the
# controller Deployment (`compute-domain-controller`). No NVIDIA library is inside: the agent
# loads libnvidia-ml.so.1 and runs nvidia-imex from the host's driver root at run time.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${PYTHON_IMAGE} AS builder
# binutils: PyInstaller strips the bundled shared objects.
RUN apt-get update \
    && apt-get install -y --no-install-recommends binutils=2.40-2 \
    && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY api ./api
COPY cdi ./cdi
COPY runtime ./runtime
COPY agent ./agent
COPY controller ./controller
COPY packaging/pyinstaller ./packaging/pyinstaller
RUN pip install . "pyinstaller>=6.10,<7" \
    && python packaging/pyinstaller/build.py --dist /out --work /tmp/pyi --target all \
    && /out/compute-domain-agent version \
    && /out/compute-domain-controller version

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="compute-domain-driver" \
      org.opencontainers.image.description="NVIDIA ComputeDomain DRA driver (compute-domain.nvidia.com): node agent and controller" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="compute-domain-driver"
# chroot (coreutils) runs nvidia-imex-ctl inside the host driver root in hostManaged mode;
# debian:bookworm-slim already has it, and nothing else is installed.
COPY --from=builder /out/compute-domain-agent /out/compute-domain-controller /usr/bin/
# The controller runs as this user. The kubelet plugin and the IMEX daemon pods override it
# with runAsUser: 0 (see packaging/deploy): they write under /var/lib/kubelet/plugins, /var/run/cdi
# and /dev, and chroot into the driver root, which needs root.
RUN useradd --system --uid 65532 --no-create-home --shell /usr/sbin/nologin cdriver \
    && chroot --version >/dev/null
USER 65532:65532
# The onefile programs unpack themselves (about 45 MiB) under $TMPDIR at each start and remove
# that copy when they exit: with readOnlyRootFilesystem, mount an emptyDir at /tmp.
ENV TMPDIR=/tmp
ENTRYPOINT ["/usr/bin/compute-domain-agent"]
CMD ["version"]
