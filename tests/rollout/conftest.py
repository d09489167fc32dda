"""Fixtures shared by the rollout tests."""

from __future__ import annotations

import pytest
from vllm_server_fake import FakeVLLMServer


@pytest.fixture
def server():
    """``start(reply, **kwargs)`` -> a :class:`FakeVLLMServer`; every server started is closed after the test."""
    servers = []

    def start(reply, **kwargs):
        servers.append(FakeVLLMServer(reply, **kwargs))
        return servers[-1]

    yield start
    for s in servers:
        s.close()
