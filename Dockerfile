# kopf-scheduler image: `podman build -t kopf-scheduler:0.1.0 .` (or `docker build`).
# Two stages: wheels are built with the toolchain, the runtime image carries only the venv.
# BASE: any image with Python >= 3.11 as `python3` (with venv/ensurepip). The default is the
# official image; `scripts/image` builds the same from Debian's packages with mmdebstrap where no
# image registry is reachable, and passes it as `--build-arg BASE=...`.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY pyproject.toml README.md ./
# The product only: .dockerignore keeps operator/kopf_scheduler_workbench out of the context, and
# pyproject.toml packages kopf_scheduler alone (the workbench works from a git checkout only).
COPY operator ./operator
# The optional build secret `pip-ca` is a CA bundle for pip, for networks whose TLS is intercepted
# (`--secret id=pip-ca,src=/etc/ssl/certs/ca-certificates.crt`); it is not kept in the image.
RUN --mount=type=secret,id=pip-ca \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi; pip install .
# Never used at run time: pip and setuptools, and the kubernetes package's asyncio client (68 MB; we
# use only its config loaders, and nothing imports kubernetes.aio). The image test runs the result.
RUN pip uninstall --quiet --yes pip setuptools \
    && rm -rf /opt/venv/lib/python3*/site-packages/kubernetes/aio
# Byte-compiled at build, never at a start: pip compiles what it installs, and the runtime image writes
# no .pyc (PYTHONDONTWRITEBYTECODE, read-only root), so a module without one would be compiled again
# at every start. Said once more for the product itself, which the image test runs.
RUN python3 -m compileall -q /opt/venv/lib/python3*/site-packages/kopf_scheduler

FROM ${BASE}
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
COPY --from=build /opt/venv /opt/venv
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["kopf-scheduler"]
CMD ["run", "--peering", "kopf-scheduler"]
