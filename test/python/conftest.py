"""Fixtures for driving Airlock through E2B's real Python SDKs.

The daemon is the one scripts/test.sh started: E2B_API_URL, E2B_SANDBOX_URL
and E2B_API_KEY name it (the SDKs read them). Every sandbox a test creates is
killed at its end.
"""

import os

import httpx
import pytest

import e2b
import e2b_code_interpreter


def pytest_configure(config):
    missing = [k for k in ("E2B_API_URL", "E2B_API_KEY") if not os.environ.get(k)]
    if missing:
        raise pytest.UsageError(f"{', '.join(missing)} not set: run through scripts/test.sh (stage python)")


@pytest.fixture
def api():
    """An httpx client on the daemon's API with the API key."""
    with httpx.Client(base_url=os.environ["E2B_API_URL"], headers={"X-API-Key": os.environ["E2B_API_KEY"]}, timeout=60) as c:
        yield c


@pytest.fixture
def sandbox():
    sbx = e2b.Sandbox.create(timeout=600)
    try:
        yield sbx
    finally:
        sbx.kill()


@pytest.fixture
def interpreter():
    sbx = e2b_code_interpreter.Sandbox.create(timeout=600)
    try:
        yield sbx
    finally:
        sbx.kill()


@pytest.fixture
async def async_sandbox():
    sbx = await e2b.AsyncSandbox.create(timeout=600)
    try:
        yield sbx
    finally:
        await sbx.kill()


def sandbox_get(sbx, port, path="/", headers=None, timeout=30):
    """GET a port of a sandbox through the daemon's proxy (header routing)."""
    url = os.environ.get("E2B_SANDBOX_URL") or os.environ["E2B_API_URL"]
    h = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": str(port)}
    h.update(headers or {})
    return httpx.get(url.rstrip("/") + path, headers=h, timeout=timeout)
