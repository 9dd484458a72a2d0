"""A CR nested deeper than Python's json can decode, through the agent, on a real apiserver.

The API server accepts it (its limit is 10,000 levels; the CRD cannot bound a free-form
field's depth), so every node selecting the CR receives it: each must reject it with a
Failure in its status, keep the configuration in force and keep following the CR.
"""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from nri_resmgr.kube import KubeClient
from tests.agent.test_agent_integration import Cluster, _is, cpu, eventually, start
from tests.agent.test_agent_integration import cluster as cluster  # the fixture
from tests.kube.apiserver import ADMIN_TOKEN, ApiServer

pytestmark = pytest.mark.integration

DEPTH = 1300  # about 2.6 KB, as in the review; Python's json gives up near 1,000


def deep_spec_patch(cpu_value: str) -> bytes:
    """A JSON patch replacing the spec, written by hand: json.dumps cannot nest this deep."""
    deep = '{"a": ' * DEPTH + "1" + "}" * DEPTH
    spec = json.dumps({"reservedResources": {"cpu": cpu_value},
                       "control": {"rdt": {"options": "DEEP"}}})  # fmt: skip
    return f'[{{"op": "replace", "path": "/spec", "value": {spec}}}]'.replace(
        '"DEEP"', deep
    ).encode()


async def test_a_too_deep_cr_is_rejected_and_the_daemon_keeps_serving(
    template_crd: ApiServer, cluster: Cluster, nursery: trio.Nursery
) -> None:
    c = cluster
    await c.put("default", "1")
    async with KubeClient(template_crd.config()) as agent_client:
        agent = c.agent(agent_client)
        manager = await start(nursery, agent, c)
        await eventually(lambda: _is(c.entry_status("default"), ("Success", 1)))

        path = f"/apis/config.nri/v1alpha1/namespaces/{c.ns}/templatepolicies/default"
        async with httpx.AsyncClient(
            base_url=template_crd.url,
            verify=template_crd.config().ssl_context(),
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        ) as raw:
            patch_type = {"Content-Type": "application/json-patch+json"}
            reply = await raw.patch(path, content=deep_spec_patch("2"), headers=patch_type)
        assert reply.status_code == 200, reply.text[:300]  # the API server takes it

        await eventually(lambda: _is(c.entry_status("default"), ("Failure", 2)))
        entry = await c.entry("default")
        assert entry is not None
        assert "spec.control.rdt.options.a.a" in entry["errors"]
        assert "nested deeper than" in entry["errors"]
        assert cpu(manager) == "1"

        await c.put("default", "2")  # the next good config is applied: still following
        await eventually(lambda: cpu(manager) == "2")
        await eventually(lambda: _is(c.entry_status("default"), ("Success", 3)))
        assert (agent.applied, agent.rejected) == (2, 1)
