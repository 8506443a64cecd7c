#!/usr/bin/env bash
# Install everything the test suite needs on a (possibly fresh) Debian machine, then return.
# Idempotent and quick when everything is already there. Run from anywhere; as root, or with
# sudo available for the apt step. The README's test command is:
#   bash tests/setup.sh && python3 -m pytest -q
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python3}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# --- Debian packages: kcat (librdkafka CLI), ZooKeeper (cluster tests), a JDK (javac) ---------
apt_pkgs=()
command -v kcat >/dev/null 2>&1 || apt_pkgs+=(kcat)
dpkg -s zookeeper >/dev/null 2>&1 || apt_pkgs+=(zookeeper)
command -v javac >/dev/null 2>&1 || apt_pkgs+=(openjdk-17-jdk-headless)
# fault harness (tests/faults): network namespaces, veth pairs, bridges and link cuts
command -v ip >/dev/null 2>&1 || apt_pkgs+=(iproute2)
command -v nft >/dev/null 2>&1 || apt_pkgs+=(nftables)
# the web console tests drive Debian's headless Chromium through its WebDriver
command -v chromium >/dev/null 2>&1 || apt_pkgs+=(chromium)
command -v chromedriver >/dev/null 2>&1 || apt_pkgs+=(chromium-driver)
"$PYTHON" -m pip --version >/dev/null 2>&1 || apt_pkgs+=(python3-pip)
if [ "${#apt_pkgs[@]}" -gt 0 ]; then
    echo "setup: apt-get install ${apt_pkgs[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        "${apt_pkgs[@]}" >/dev/null
fi

# --- Python packages: the project (editable) with its test extra, and the Java client jars -----
pip_flags=(-q --disable-pip-version-check --root-user-action=ignore)
if "$PYTHON" -c 'import os, sys, sysconfig; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
    pip_flags+=(--break-system-packages)  # Debian's system Python (PEP 668)
fi
echo "setup: pip install -e .[test]"
"$PYTHON" -m pip install "${pip_flags[@]}" -e '.[test]'
# The genuine Apache kafka-clients 3.9.1 jar (+ lz4/snappy/zstd/slf4j jars) under pyflink/lib/.
if ! "$PYTHON" -m pip show -q shigawire-apache-flink-libraries >/dev/null 2>&1; then
    echo "setup: pip install shigawire-apache-flink-libraries (about 92 MB)"
    "$PYTHON" -m pip install "${pip_flags[@]}" shigawire-apache-flink-libraries
fi

# --- Sanity: every tool the integration tests drive is present --------------------------------
for tool in kcat javac java chromium chromedriver; do
    command -v "$tool" >/dev/null 2>&1 || { echo "setup: $tool is still missing" >&2; exit 1; }
done
"$PYTHON" - <<'PY'
from importlib.metadata import distribution
lib = distribution("shigawire-apache-flink-libraries").locate_file("pyflink/lib")
jar = lib / "kafka-clients.jar"
assert jar.exists(), f"missing {jar}"
import kafka, confluent_kafka, aiokafka  # noqa: F401  the stock Python clients
print(f"setup: ok (kafka-clients jar: {jar})")
PY
