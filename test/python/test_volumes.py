"""Issue 27: E2B volumes through the vendored Python SDK (e2b 2.34.0 has
`Volume` and `Sandbox.create(volume_mounts=...)`): create a volume, write
through the content API, mount it in a sandbox and read it there, write in
the sandbox and read it back through the SDK, then destroy it."""

import os
import uuid

import pytest

import e2b
from e2b import Volume

# The SDK sends content requests to E2B_VOLUME_API_URL, else to
# https://api.<E2B_DOMAIN>; the daemon serves both APIs on one address.
os.environ.setdefault("E2B_VOLUME_API_URL", os.environ["E2B_API_URL"])


@pytest.fixture
def volume():
    vol = Volume.create(f"py-vol-{uuid.uuid4().hex[:10]}")
    try:
        yield vol
    finally:
        Volume.destroy(vol.volume_id)


def test_volume_roundtrip(volume):
    assert volume.token
    info = Volume.get_info(volume.volume_id)
    assert info.name == volume.name
    assert any(v.volume_id == volume.volume_id and v.name == volume.name for v in Volume.list())

    volume.write_file("/in/hello.txt", "from python", force=True)
    assert volume.read_file("/in/hello.txt") == "from python"
    assert volume.read_file("/in/hello.txt", format="bytes") == b"from python"
    assert volume.exists("/in/hello.txt")
    assert not volume.exists("/nope")
    assert [e.name for e in volume.list("/in")] == ["hello.txt"]
    volume.make_dir("/made")
    assert volume.get_info("/made").type.value == "directory"

    connected = Volume.connect(volume.volume_id)
    assert connected.read_file("/in/hello.txt") == "from python"

    sbx = e2b.Sandbox.create(timeout=300, volume_mounts={"/mnt/data": volume, "/mnt/byname": volume.name})
    try:
        assert sbx.commands.run("cat /mnt/data/in/hello.txt").stdout == "from python"
        sbx.commands.run("echo -n from the sandbox > /mnt/byname/out.txt")
        assert volume.read_file("/out.txt") == "from the sandbox"
        mounts = sorted((m["name"], m["path"]) for m in sbx.get_info().volume_mounts)
        assert mounts == [(volume.name, "/mnt/byname"), (volume.name, "/mnt/data")]
    finally:
        sbx.kill()

    volume.remove("/in")
    assert not volume.exists("/in/hello.txt")


def test_volume_errors(volume):
    with pytest.raises(e2b.VolumeException):
        Volume.create(volume.name)  # the name is taken: 400
    with pytest.raises(e2b.NotFoundException):
        volume.read_file("/missing.txt")
    with pytest.raises(e2b.SandboxException) as err:
        e2b.Sandbox.create(timeout=60, volume_mounts={"relative": volume})
    assert "path must be absolute" in str(err.value)
    assert Volume.destroy(volume.volume_id) is True
    assert Volume.destroy(volume.volume_id) is False
