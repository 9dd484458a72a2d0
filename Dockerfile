# The nri-resmgr node agent image, as the Helm charts in helm/ run it:
#   python -m nri_resmgr --policy <policy> --host-root /host ...
#
#   docker build -t nri-resmgr:0.1.0 .
#   docker build --build-arg BASE_IMAGE=<name>@sha256:<digest> -t nri-resmgr:0.1.0 .
#
# One image serves all three policies; the chart chooses one with --policy.
#
# Supply chain: the base image is pinned by digest (override BASE_IMAGE with another digest,
# e.g. a locally made Debian bookworm image with python3 and python3-venv, as
# tests/runtime/test_image.py does); every Python package comes from a lock file with hashes
# (requirements/*.lock, `nox -s lock`), installed with --require-hashes; the final image has
# no pip, setuptools or wheel.
ARG BASE_IMAGE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91

# Build stage: a wheel of the project (nri_resmgr/_gen is committed, `nox -s proto` keeps it
# in step with proto/), built with the locked setuptools and no build isolation, so no
# unpinned build dependency is fetched.
FROM ${BASE_IMAGE} AS build
WORKDIR /src
COPY requirements/build.lock ./requirements/build.lock
RUN python3 -m venv /build \
 && /build/bin/pip install --no-cache-dir --require-hashes -r requirements/build.lock
COPY pyproject.toml README.md ./
COPY nri_resmgr ./nri_resmgr
RUN /build/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels .

FROM ${BASE_IMAGE}
COPY requirements/runtime.lock /tmp/runtime.lock
COPY --from=build /wheels /tmp/wheels
# One layer: the venv, the locked dependencies, the project, then pip itself goes (from the
# venv and, on bases that ship one, from the system interpreter).
RUN python3 -m venv /opt/nri-resmgr \
 && /opt/nri-resmgr/bin/pip install --no-cache-dir --no-deps --require-hashes -r /tmp/runtime.lock \
 && /opt/nri-resmgr/bin/pip install --no-cache-dir --no-deps /tmp/wheels/*.whl \
 && /opt/nri-resmgr/bin/pip uninstall --yes pip setuptools \
 && if python3 -m pip --version >/dev/null 2>&1; then python3 -m pip uninstall --yes pip setuptools wheel; fi \
 && rm -rf /tmp/runtime.lock /tmp/wheels /root/.cache
# Root, as nri-plugins' image: the NRI socket and the kubelet plugin directories are
# root-owned on the host. The chart drops every capability and forbids privilege escalation.
USER root
ENV PATH=/opt/nri-resmgr/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
ENTRYPOINT ["python", "-m", "nri_resmgr"]
