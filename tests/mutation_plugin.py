"""pytest plugin loaded only by mutmut (``pytest_add_cli_args`` in pyproject's
``[tool.mutmut]``), never by the normal suite.

mutmut forks each mutant's worker from a process that has already run the tests once, so
whatever that run cached is inherited, built by the unmutated code. The config converter
(``config.converter.converter``) is such a cache: without this plugin a mutant in its
construction is never executed and survives whatever the tests assert. Clearing the cache
before every test makes each test that loads a config build the converter itself, with the
mutant in it (about 10 ms a test).
"""

from __future__ import annotations

import pytest

from nri_resmgr.config.converter import converter


@pytest.fixture(autouse=True)
def _fresh_config_converter() -> None:
    converter.cache_clear()
