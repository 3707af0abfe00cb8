#!/usr/bin/env bash
# Installs what test/python needs to drive Airlock through E2B's real Python
# SDKs, without a Python package index and without touching the system's
# Python packages (idempotent; cached):
#   - the SDKs, `e2b` and `e2b_code_interpreter`, unpacked from the archives in
#     ../shared/vendor/python (its README says where they come from);
#   - their pure-Python dependencies (and pytest, pytest-asyncio) as Debian
#     packages of the unstable suite, at the versions the SDK pins, fetched with
#     `apt-get download` through a private apt configuration (its own
#     sources.list, state and cache dirs) and unpacked with `dpkg-deb -x`;
#   - python3-protobuf from the machine's own suite (compiled for its Python),
#     installed with apt-get like the other test packages.
# Everything lands in $AIRLOCK_PYTHON_CACHE (default /var/cache/airlock/python)/
# <key>/, where <key> hashes this script and the archives; the last line printed
# is the PYTHONPATH to use, with Debian's /usr/bin/python3 (not a python3 that PATH may
# find first, such as a pyenv shim). `dockerfile-parse` is in no Debian suite: the SDK
# imports it only to parse Dockerfiles on the client side, so a stub module
# that refuses to parse stands in for it (test/python never parses one).
# First run: about a minute (apt downloads); afterwards instant.
#
# Knobs: AIRLOCK_PYTHON_VENDOR (default ../shared/vendor/python from the repo
# root), AIRLOCK_PYTHON_CACHE, AIRLOCK_PYTHON_MIRROR (default
# http://deb.debian.org/debian).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENDOR=${AIRLOCK_PYTHON_VENDOR:-$(cd .. && pwd)/shared/vendor/python}
CACHE=${AIRLOCK_PYTHON_CACHE:-/var/cache/airlock/python}
MIRROR=${AIRLOCK_PYTHON_MIRROR:-http://deb.debian.org/debian}
SDK_ARCHIVE=$VENDOR/e2b-python-sdk-2.34.0.tar.gz
CI_ARCHIVE=$VENDOR/e2b-code-interpreter-python-2.9.0.tar.gz

# From unstable: the SDK's dependencies at the versions its pyproject.toml asks
# for (httpx ≥ 0.27, httpcore ≥ 1.0.5, wcmatch ≥ 10.1, rich ≥ 14, attrs ≥ 23.2,
# packaging ≥ 24.1), what they import, and the test runner.
UNSTABLE_PKGS=(
	python3-httpx python3-httpcore python3-h11 python3-anyio python3-sniffio python3-idna python3-certifi
	python3-h2 python3-hpack python3-hyperframe
	python3-wcmatch python3-bracex
	python3-rich python3-markdown-it python3-mdurl python3-pygments
	python3-attr python3-packaging python3-typing-extensions python3-dateutil python3-six
	python3-pytest python3-pluggy python3-iniconfig python3-pytest-asyncio
)

for f in "$SDK_ARCHIVE" "$CI_ARCHIVE"; do
	[ -f "$f" ] || { echo "python-deps: $f missing (set AIRLOCK_PYTHON_VENDOR)" >&2; exit 1; }
done

key=$({ cat "${BASH_SOURCE[0]}"; sha256sum "$SDK_ARCHIVE" "$CI_ARCHIVE" | cut -d' ' -f1; } | sha256sum | cut -c1-16)
DEST=$CACHE/$key
if [ -f "$DEST/.done" ]; then
	echo "$DEST/site"
	exit 0
fi
# One installer at a time (two suites on one host share the cache).
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -f "$DEST/.done" ]; then
	echo "$DEST/site"
	exit 0
fi
# Trees of other versions of this script, unused for a day.
find "$CACHE" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -mtime +0 -exec rm -rf {} + 2>/dev/null || true

# python3 and protobuf from the machine's own suite.
missing=()
for p in python3 python3-protobuf; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
	DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

rm -rf "$DEST.tmp"
mkdir -p "$DEST.tmp"/{apt/state/lists/partial,apt/cache/archives/partial,debs,root,site}
APT=$DEST.tmp/apt
echo "deb $MIRROR unstable main" >"$APT/sources.list"
apt_opts=(
	-o "Dir::Etc::SourceList=$APT/sources.list"
	-o "Dir::Etc::SourceParts=/nonexistent"
	-o "Dir::State=$APT/state"
	-o "Dir::State::status=/dev/null"
	-o "Dir::Cache=$APT/cache"
	-o "APT::Architecture=amd64"
	-o "Debug::NoLocking=1"
	-o "APT::Sandbox::User=root"
)
echo "python-deps: fetching ${#UNSTABLE_PKGS[@]} packages from Debian unstable into $DEST" >&2
apt-get "${apt_opts[@]}" -q update >&2
(cd "$DEST.tmp/debs" && apt-get "${apt_opts[@]}" -q download "${UNSTABLE_PKGS[@]}" >&2)
for deb in "$DEST.tmp"/debs/*.deb; do
	dpkg-deb -x "$deb" "$DEST.tmp/root"
done
# Debian's pure-Python packages live in /usr/lib/python3/dist-packages.
cp -a "$DEST.tmp"/root/usr/lib/python3/dist-packages/. "$DEST.tmp/site/"

# The SDKs, unmodified.
tar -xzf "$SDK_ARCHIVE" -C "$DEST.tmp/root"
tar -xzf "$CI_ARCHIVE" -C "$DEST.tmp/root"
cp -a "$DEST.tmp"/root/packages/python-sdk/e2b "$DEST.tmp"/root/packages/python-sdk/e2b_connect "$DEST.tmp/site/"
cp -a "$DEST.tmp"/root/python/e2b_code_interpreter "$DEST.tmp/site/"

# Installed-distribution metadata: the SDK reads its own version with
# importlib.metadata ("e2b"), which needs a dist-info directory.
for dist in e2b:2.34.0 e2b_code_interpreter:2.9.0; do
	mkdir -p "$DEST.tmp/site/${dist%%:*}-${dist#*:}.dist-info"
	printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' "${dist%%:*}" "${dist#*:}" >"$DEST.tmp/site/${dist%%:*}-${dist#*:}.dist-info/METADATA"
done

# dockerfile-parse stand-in (see the header).
mkdir -p "$DEST.tmp/site/dockerfile_parse"
cat >"$DEST.tmp/site/dockerfile_parse/__init__.py" <<'EOF'
"""Stand-in for dockerfile-parse (in no Debian suite), written by Airlock's
scripts/python-deps.sh: the E2B SDK imports it only to parse Dockerfiles on the
client side, which Airlock's Python tests never do."""


class DockerfileParser:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("dockerfile-parse is not installed (Airlock test stand-in)")
EOF

# Only the unpacked tree is kept (no apt lists, no .debs).
rm -rf "$DEST"
mkdir -p "$DEST"
mv "$DEST.tmp/site" "$DEST/site"
(cd "$DEST.tmp/debs" && ls) >"$DEST/packages.txt"
rm -rf "$DEST.tmp"
# Check it imports.
PYTHONPATH=$DEST/site /usr/bin/python3 -c 'import e2b, e2b_code_interpreter, pytest, pytest_asyncio, httpx; print("python-deps: e2b", e2b.__name__, "httpx", httpx.__version__, "pytest", pytest.__version__)' >&2
touch "$DEST/.done"
echo "$DEST/site"
