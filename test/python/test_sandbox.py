"""The Python user's everyday path: metadata lookup and Sandbox.connect to
reuse a session's sandbox, commands with env vars, the sync and async clients."""

import uuid

import e2b
from e2b import SandboxQuery


def test_metadata_lookup_and_connect():
    session = uuid.uuid4().hex
    sbx = e2b.Sandbox.create(timeout=600, metadata={"session": session, "user": "py"})
    try:
        sbx.files.write("/home/user/state.txt", "kept")
        found = []
        pages = e2b.Sandbox.list(query=SandboxQuery(metadata={"session": session}))
        while pages.has_next:
            found += pages.next_items()
        assert [s.sandbox_id for s in found] == [sbx.sandbox_id]
        assert found[0].metadata == {"session": session, "user": "py"}
        again = e2b.Sandbox.connect(found[0].sandbox_id)
        assert again.files.read("/home/user/state.txt") == "kept"
        assert again.get_info().metadata["session"] == session
    finally:
        sbx.kill()


def test_commands_with_env_vars():
    sbx = e2b.Sandbox.create(timeout=600, envs={"SANDBOX_WIDE": "from-create"})
    try:
        r = sbx.commands.run('echo "$SANDBOX_WIDE $PER_RUN"', envs={"PER_RUN": "from-run"})
        assert r.exit_code == 0
        assert r.stdout.strip() == "from-create from-run"
        try:
            sbx.commands.run("echo err >&2; exit 3")
            raise AssertionError("a failing command must raise")
        except e2b.CommandExitException as e:
            assert e.exit_code == 3 and e.stderr.strip() == "err"
    finally:
        sbx.kill()


async def test_async_client(async_sandbox):
    r = await async_sandbox.commands.run("echo $A", envs={"A": "async"})
    assert r.stdout.strip() == "async"
    await async_sandbox.files.write("/tmp/a.txt", "async file")
    assert await async_sandbox.files.read("/tmp/a.txt") == "async file"
    assert (await async_sandbox.files.read("/proc/version")).startswith("Linux version")
    assert await async_sandbox.is_running()
    info = await e2b.AsyncSandbox.get_info(async_sandbox.sandbox_id)
    assert info.sandbox_id == async_sandbox.sandbox_id
