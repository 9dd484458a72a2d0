# The nri-resmgr node agent image, as the Helm charts in helm/ run it:
#   python -m nri_resmgr --policy <policy> --host-root /host ...
#
#   docker build -t nri-resmgr:0.1.0 .
#
# One image serves all three policies; the chart chooses one with --policy.

# Build stage: generate the gRPC/ttrpc code from proto/ (nri_resmgr/_gen is not committed
# by hand) and build a wheel, so the runtime image carries no compiler or build tools.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY nri_resmgr ./nri_resmgr
COPY proto ./proto
COPY tools/genproto.py ./tools/genproto.py
RUN python -m pip install --no-cache-dir '.[proto]' \
 && python tools/genproto.py \
 && python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# Root, as nri-plugins' image: the NRI socket and the kubelet plugin directories are
# root-owned on the host. The chart drops every capability and forbids privilege escalation.
USER root
ENV PYTHONUNBUFFERED=1
ENTRYPOINT ["python", "-m", "nri_resmgr"]
