"""Development sessions: tests, lint, typecheck, proto, bench and the real-peer builds.

Each helper session that builds a Go peer (NRI harness, kube-apiserver, helm) caches its
binaries outside the repository, under $NRI_RESMGR_CACHE (default ~/.cache/nri-resmgr).
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True

ROOT = Path(__file__).parent
CACHE = Path(os.environ.get("NRI_RESMGR_CACHE", Path.home() / ".cache" / "nri-resmgr"))
PYTHON = "3.11"


def install_project(session: nox.Session, *extras: str) -> None:
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", spec)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Unit and integration tests (integration tests build their Go peers first), and the
    docs site's strict build (tests/docs)."""
    install_project(session, "test", "plot", "docs")
    env = {"NRI_RESMGR_CACHE": str(CACHE)}
    session.run("pytest", *session.posargs, env=env)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    install_project(session, "lint")
    session.run("ruff", "check", "nri_resmgr", "tests", "tools", "noxfile.py")
    session.run("ruff", "format", "--check", "nri_resmgr", "tests", "tools", "noxfile.py")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    install_project(session, "lint", "test", "plot")
    session.run("mypy", "nri_resmgr", "tools/crdschema.py", "tools/docref.py")


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Regenerate the docs' references from the code (tools/docref.py) and build the site
    strictly into site/ (the tests session checks both; this writes them)."""
    install_project(session, "docs")
    session.run("python", "-m", "tools.docref", "--write")
    session.run("mkdocs", "build", "--strict", env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session(python=PYTHON)
def proto(session: nox.Session) -> None:
    """Regenerate nri_resmgr/_gen from proto/ (betterproto, pinned compiler)."""
    install_project(session, "proto")
    session.run("python", "tools/genproto.py")


@nox.session(python=PYTHON)
def apiserver(session: nox.Session) -> None:
    """Build kube-apiserver + etcd (cached), then run the Kubernetes client tests against them."""
    install_project(session, "test")
    env = {"NRI_RESMGR_CACHE": str(CACHE)}
    session.run("python", "-m", "tests.kube.gobuild", env=env)
    session.run("pytest", "tests/kube", *session.posargs, env=env)


KUBE_VERSION_TESTS = (
    "tests/dra/test_grouped_scheduler.py",
    "tests/dra/test_prioritized_scheduler.py",
    "tests/dra/test_balloons_scheduler.py",
    "tests/dra/test_chain.py",
    "tests/dra/test_chain_scheduler.py",
    "tests/dra/test_kubelet_real.py",
    "tests/dra/test_claims_apiserver.py",
    "tests/dra/test_publisher_apiserver.py",
    "tests/runtime/test_dra_metadata.py",
)
"""The tests parametrized over Kubernetes versions (``tests/kube/versions.py``): the default
suite runs them at v1.35.4 and v1.37.2, ``nox -s scheduler`` at one version between."""


@nox.session(python=PYTHON)
def scheduler(session: nox.Session) -> None:
    """The version-matrix tests (``KUBE_VERSION_TESTS``: kube-apiserver, kube-scheduler and
    kubelet's DRA code, all of one version) at Kubernetes 1.36: builds kube-apiserver,
    kube-scheduler and the kubelet DRA peer v1.36.3, the newest 1.36 patch (cached), and runs
    them there. ``nox -s scheduler -- v1.37.2`` picks another version the suite knows; more
    arguments go to pytest."""
    install_project(session, "test")
    version, *pytest_args = session.posargs or ["v1.36.3"]
    env = {"NRI_RESMGR_CACHE": str(CACHE), "NRI_RESMGR_KUBE_VERSION": version}
    session.run("python", "-m", "tests.kube.gobuild", version, env=env)
    session.run("python", "-m", "tests.dra.schedulerbuild", version, env=env)
    session.run("python", "-m", "tests.dra.kubeletbuild", version, env=env)
    session.run("pytest", "-v", "-s", *KUBE_VERSION_TESTS, *pytest_args, env=env)


@nox.session(python=PYTHON)
def conformance(session: nox.Session) -> None:
    """Build the Go NRI harnesses (v0.12, v0.6; cached), then run our plugin against them."""
    install_project(session, "test")
    env = {"NRI_RESMGR_CACHE": str(CACHE)}
    session.run("python", "-m", "tests.conformance.build", env=env)
    session.run("pytest", "tests/conformance", *session.posargs, env=env)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks; prints a table and writes bench-results/*.json."""
    install_project(session, "test", "bench")
    session.run(
        "python", "-m", "tests.bench", *session.posargs, env={"NRI_RESMGR_CACHE": str(CACHE)}
    )


@nox.session(python=PYTHON)
def fuzz(session: nox.Session) -> None:
    """1,000,000 fuzzed inputs through the NRI receive path (atheris); inputs/s, peak RSS."""
    install_project(session, "test")
    session.install("atheris==2.3.0")
    session.run("python", "-m", "tests.reliability.fuzz", "--runs", "1000000", *session.posargs)


@nox.session(python=PYTHON)
def soak(session: nox.Session) -> None:
    """100,000 container create/remove cycles through the simulator; RSS before/after."""
    install_project(session, "test")
    session.run("python", "-m", "tests.reliability.soak", "--cycles", "100000", *session.posargs)


@nox.session(python=PYTHON)
def helm(session: nox.Session) -> None:
    """Helm charts: check generated files, build helm (cached), lint and render all charts."""
    install_project(session, "test")
    env = {"NRI_RESMGR_CACHE": str(CACHE)}
    session.run("python", "-m", "tools.gencrd", "--check")
    session.run("python", "-m", "tests.helm.helmbuild", env=env)
    session.run("pytest", "tests/helm", *session.posargs, env=env)


@nox.session(python=PYTHON)
def fleet(session: nox.Session) -> None:
    """N agents against one real kube-apiserver + etcd (cached builds), N = 50, 200, 500,
    1,000: start-up, 10 minutes steady, a config change, an API server restart. Prints the
    per-node request counts and any broken budget (exit 1), writes fleet-results/*.json
    (docs/fleet.md). posargs go to ``python -m tests.fleet``, e.g. ``-- --agents 50 200``.
    Not in .ci/run, which runs the 50-agent smoke (tests/fleet/test_fleet_smoke.py)."""
    install_project(session, "test")
    env = {"NRI_RESMGR_CACHE": str(CACHE)}
    session.run("python", "-m", "tests.kube.gobuild", env=env)
    session.run("python", "-m", "tests.helm.helmbuild", env=env)
    session.run("python", "-m", "tests.fleet", *session.posargs, env=env)


@nox.session(python=PYTHON)
def lock(session: nox.Session) -> None:
    """Regenerate the image's hashed lock files (requirements/*.lock) with uv."""
    session.install("uv>=0.9,<1")
    common = ["--generate-hashes", "--python-version", PYTHON, "--custom-compile-command",
              "nox -s lock", "--quiet"]  # fmt: skip
    session.run(
        "uv", "pip", "compile", "pyproject.toml", *common, "-o", "requirements/runtime.lock"
    )
    session.run(
        "uv", "pip", "compile", "requirements/build.in", *common, "-o", "requirements/build.lock"
    )


@nox.session(python=PYTHON)
def runtime(session: nox.Session) -> None:
    """Build containerd + crictl (cached) and the image, then the real-runtime tests."""
    install_project(session, "test")
    env = {"NRI_RESMGR_CACHE": str(CACHE)}
    session.run("python", "-m", "tests.runtime.build", env=env)
    session.run("pytest", "tests/runtime", *session.posargs, env=env)


@nox.session(python=PYTHON)
def node(session: nox.Session) -> None:
    """The real node, all of it: every scenario in the qemu guests (tests/node), where
    `tests` runs only the core set. Builds the guest image, containerd 2.4 and upstream's
    plugin first (cached). NRI_RESMGR_NODE_RECORD=<file> records what the kernel showed."""
    install_project(session, "test")
    env = {"NRI_RESMGR_CACHE": str(CACHE), "NRI_RESMGR_NODE_ALL": "1"}
    session.run("python", "-m", "tests.node.build", env=env)
    session.run("pytest", "tests/node", "-v", *session.posargs, env=env)


@nox.session(python=PYTHON)
def gopeers(session: nox.Session) -> None:
    """Every Go peer and contender built from an empty cache, as on a fresh machine (slow:
    each downloads and compiles its whole module graph; not part of .ci/run)."""
    install_project(session, "test")
    env = {"NRI_RESMGR_GO_COLD": "1"}
    session.run("pytest", "tests/gopeers", "-v", "-s", *session.posargs, env=env)


@nox.session(python=PYTHON)
def mutation(session: nox.Session) -> None:
    """Mutation testing (mutmut 3) of the core modules listed in pyproject's [tool.mutmut];
    prints the kill rate per module. Slow: not part of .ci/run. posargs select mutants by
    name glob, e.g. ``nox -s mutation -- 'nri_resmgr.nri.mux.*'``; MUTATION_TESTS narrows
    the tests run against each mutant."""
    install_project(session, "test")
    session.install("mutmut==3.8.1")
    # MUTATION_TESTS="tests/config ..." runs only those tests against each mutant, in a copy
    # (tools/mutation_narrow.py): a survivor otherwise runs every test reaching its function.
    where, narrow = ROOT, os.environ.get("MUTATION_TESTS", "").split()
    if narrow:
        where = ROOT / ".nox" / "mutation-narrow"
        session.run("python", "tools/mutation_narrow.py", str(where), *narrow)
    with session.chdir(where):
        session.run("nice", "-n", "10", "mutmut", "run", "--max-children", "2",
                    *session.posargs, external=True)  # fmt: skip
        session.run("python", str(ROOT / "tools" / "mutation_report.py"), "--survivors")


@nox.session(python=PYTHON)
def statemachine(session: nox.Session) -> None:
    """The placement state machine with a larger budget than the default suite's."""
    install_project(session, "test")
    env = {
        "NRI_RESMGR_STATEMACHINE_EXAMPLES": os.environ.get(
            "NRI_RESMGR_STATEMACHINE_EXAMPLES", "500"
        ),
        "NRI_RESMGR_STATEMACHINE_STEPS": os.environ.get("NRI_RESMGR_STATEMACHINE_STEPS", "50"),
    }
    session.run(
        "pytest",
        "tests/policies/test_state_machine.py",
        "--hypothesis-show-statistics",
        *session.posargs,
        env=env,
    )
