"""The embedded metadata store survives SIGKILL in the middle of a batch of writes: a child
process commits multis of many znodes in a loop and is killed with SIGKILL at a random
moment (several times, resuming each time); every reopen sees whole batches only, in order,
with the zxid of the last one."""

import asyncio
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from controller.metadata_store import EmbeddedMetadataStore

pytestmark = pytest.mark.timeout(120)

BATCH = 1500  # znodes per multi: big enough that a kill often lands inside a commit

WRITER = textwrap.dedent(f"""
    import asyncio, sys
    from controller.metadata_store import Create, EmbeddedMetadataStore, SetData

    async def main(directory):
        store = EmbeddedMetadataStore(directory)
        await store.open()
        n = len(store.get_children("/batches")) if store.exists("/batches") else 0
        if n == 0:
            await store.create("/batches", b"0")
        while True:
            ops = [Create(f"/batches/b{{n:06d}}", b"%d" % n)]
            ops += [Create(f"/batches/b{{n:06d}}/z{{i:05d}}", b"x" * 40) for i in range({BATCH})]
            ops.append(SetData("/batches", b"%d" % (n + 1)))
            await store.multi(ops)
            n += 1
            print(n, flush=True)

    asyncio.run(main(sys.argv[1]))
""")


def check(directory: str) -> int:
    """Whole batches only: every batch has all its znodes, the counter names how many."""
    async def inspect() -> int:
        store = EmbeddedMetadataStore(directory)
        await store.open()
        try:
            if store.exists("/batches") is None:
                return 0
            batches = store.get_children("/batches")
            count = int(store.get_data("/batches"))
            assert batches == [f"b{n:06d}" for n in range(count)], (count, batches[-3:])
            for name in batches:
                assert len(store.get_children(f"/batches/{name}")) == BATCH, name
            return count
        finally:
            await store.close()
    return asyncio.run(inspect())


def test_sigkill_mid_batch_leaves_whole_batches(tmp_path):
    directory = str(tmp_path / "store")
    rng = random.Random(22)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), *sys.path]))
    committed = 0
    for _round in range(4):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, directory],
                                stdout=subprocess.PIPE, env=env, text=True)
        try:
            seen = int(proc.stdout.readline() or 0)  # at least one commit this round
            assert seen > committed
            time.sleep(rng.uniform(0.05, 0.6))
        finally:
            proc.send_signal(signal.SIGKILL)
            out, _ = proc.communicate(timeout=30)
        last = int(out.split()[-1]) if out.split() else seen
        count = check(directory)
        # everything acknowledged is there; at most the batch in flight may be too
        assert last <= count <= last + 1, (last, count)
        committed = count
    assert committed >= 4
