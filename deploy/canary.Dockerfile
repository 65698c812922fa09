# The KV canary sidecar that `kvstack export --format compose|helm` runs beside the engine
# (`kvstack canary --url ENGINE ...`). Built from kvstack's wheel, with dist/ as the build context
# (so that the context holds the wheel alone), tagged as the export names it (kvstack:VERSION):
#
#   rm -rf dist && python -m pip wheel --no-deps -w dist .
#   docker build -f deploy/canary.Dockerfile -t kvstack:0.1.0 dist
#
# It runs as uid 10001, the user the Helm manifest's securityContext names.
FROM python:3.12-slim

COPY kvstack-*.whl /tmp/
RUN pip install --no-cache-dir /tmp/kvstack-*.whl \
    && rm -f /tmp/kvstack-*.whl \
    && useradd --create-home --uid 10001 --user-group kvstack

USER 10001:10001
ENV PYTHONUNBUFFERED=1
ENTRYPOINT ["kvstack"]
CMD ["canary", "--help"]
