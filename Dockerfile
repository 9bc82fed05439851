# kopf-scheduler image: `docker build -t kopf-scheduler:0.1.0 .`
# Two stages: wheels are built with the toolchain, the runtime image carries only the venv.
FROM python:3.11-slim AS build
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip install .

FROM python:3.11-slim
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
COPY --from=build /opt/venv /opt/venv
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["kopf-scheduler"]
CMD ["run", "--peering", "kopf-scheduler"]
