"""Issue 26 item 5: a kill answers 204 (the SDK returns True), never a 500,
also when many sandboxes are killed at once (the network namespace used to be
busy: "remove /var/run/netns/…: device or resource busy"). Helper branch
`kill` fixes it; this loop is its Python-side check."""

from concurrent.futures import ThreadPoolExecutor

import e2b


def test_kill_loop():
    for _ in range(3):
        sbxs = [e2b.Sandbox.create(timeout=300) for _ in range(3)]
        for s in sbxs:
            s.commands.run("sleep 30", background=True)
        with ThreadPoolExecutor(len(sbxs)) as ex:
            results = list(ex.map(lambda s: s.kill(), sbxs))
        assert results == [True] * len(sbxs)
        # A second kill: the sandbox is gone (404 → False), not an error.
        assert e2b.Sandbox.kill(sbxs[0].sandbox_id) is False
