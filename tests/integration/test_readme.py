"""The README's quick start and cluster example, run as written: the command blocks are read
from README.md itself (each follows an ``<!-- name -->`` comment), so the two cannot drift.

A copy of the repository's files goes to a fresh directory, the ``quickstart: install``
block creates its venv and ``pip install .`` there (PyPI, the pip cache helps); then, in
private network, mount and PID namespaces (so the README's fixed ports 9092-9094 and 2181
and its ``/tmp`` directories clash with nothing, and everything started dies with the
namespace), the ``quickstart: server`` command runs until the ``quickstart: try`` block has
produced and consumed a record, is stopped with Ctrl-C (SIGINT) as the README says, and the
``cluster: start`` and ``cluster: stop`` blocks run. ``sudo apt-get`` lines are the
machine's prerequisites (``tests/setup.sh`` installs them) and are left out. Needs root (for
the namespaces), ``unshare``, ``ip``, Java and Debian's ZooKeeper.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.integration.cluster import ZOOKEEPER_JAR
from tests.integration.harness import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

BLOCK_RE = re.compile(r"<!-- ([\w: ]+) -->\n```sh\n(.*?)```", re.DOTALL)


def readme_blocks() -> dict[str, str]:
    text = (REPO_ROOT / "README.md").read_text()
    return {name.strip(): body for name, body in BLOCK_RE.findall(text)}


def runnable(block: str) -> str:
    return "".join(line + "\n" for line in block.splitlines()
                   if not line.startswith("sudo apt-get"))


def test_readme_names_its_blocks():
    blocks = readme_blocks()
    for name in ("quickstart: install", "quickstart: server", "quickstart: try",
                 "cluster: install", "cluster: start", "cluster: stop", "spark: install",
                 "spark: local", "tests: quick", "tests: full"):
        assert name in blocks, name
    assert blocks["quickstart: server"].strip() == "josef server config/server.properties"
    for name, body in blocks.items():  # copy-pasteable: no alternatives, no placeholders
        assert not re.search(r" \| --|\[--", body), (name, body)


def _copy_repo(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True)
    if files.returncode == 0:
        for name in files.stdout.decode().split("\0"):
            src = REPO_ROOT / name
            if name and src.is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / name)
    else:
        shutil.copytree(REPO_ROOT, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", ".venv", "__pycache__", "build", "*.egg-info", "logs"))


def _requirements() -> str | None:
    if os.geteuid() != 0:
        return "needs root for private network/mount/PID namespaces"
    for tool in ("unshare", "ip", "java"):
        if shutil.which(tool) is None:
            return f"{tool} is missing"
    if not ZOOKEEPER_JAR.exists():
        return f"{ZOOKEEPER_JAR} is missing"
    return None


def test_quick_start_and_cluster_example_as_written():
    why = _requirements()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    blocks = readme_blocks()
    work = Path(tempfile.mkdtemp(prefix="josef-readme-", dir="/var/tmp"))  # outside /tmp
    try:
        src = work / "josef"
        src.mkdir()
        _copy_repo(src)
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VIRTUAL_ENV", "LOG_DIR")}
        install = subprocess.run(["bash", "-euc", runnable(blocks["quickstart: install"])],
                                 cwd=src, env=env, capture_output=True, text=True,
                                 timeout=600)
        assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
        assert (src / ".venv" / "bin" / "josef").exists()
        script = src / "readme-steps.sh"
        script.write_text(f"""set -eu
mount -t tmpfs tmpfs /tmp
ip link set lo up
cd {src}
. .venv/bin/activate
echo "== quick start: the server, in the background (the README runs it in a terminal)"
{runnable(blocks["quickstart: server"]).strip()} > server.out 2>&1 &
server=$!
for i in $(seq 200); do
  python3 -c 'import socket; socket.create_connection(("127.0.0.1", 9092), 1)' 2>/dev/null && break
  sleep 0.1
done
echo "== quick start: try it"
{runnable(blocks["quickstart: try"])}
echo "== Ctrl-C"
kill -INT $server
wait $server && echo "server exit code 0"
echo "== cluster: start"
{runnable(blocks["cluster: start"])}
echo "== cluster: stop"
{runnable(blocks["cluster: stop"])}
for b in 1 2 3; do
  while kill -0 "$(cat logs/b$b.pid 2>/dev/null)" 2>/dev/null; do sleep 0.2; done
done
echo "== done"
""")
        run = subprocess.run(["unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc",
                              "bash", str(script)], cwd=src, env=env, capture_output=True,
                             text=True, timeout=300)
        out = run.stdout + run.stderr
        server_log = (src / "server.out").read_text() if (src / "server.out").exists() else ""
        assert run.returncode == 0, out[-4000:] + server_log[-2000:]
        assert re.search(r"== quick start: try it\n(.*\n)*hello\n", run.stdout), out[-3000:]
        assert "Processed a total of 1 messages" in out
        assert "server exit code 0" in run.stdout, server_log[-2000:]
        for b in (1, 2, 3):
            assert re.search(rf"josef: broker {b} started in the background \(pid \d+\), "
                             rf"accepting connections on PLAINTEXT://127\.0\.0\.1:909{b + 1}",
                             run.stdout), out[-3000:]
        assert re.search(r"Topic: demo\s.*PartitionCount: 6\s.*ReplicationFactor: 3",
                         run.stdout), out[-3000:]
        assert run.stdout.rstrip().endswith("== done")
    finally:
        shutil.rmtree(work, ignore_errors=True)
