"""kazoo's threading handler, selecting with poll(2) instead of a new epoll per call.

kazoo's connection thread calls its handler's ``select`` once per turn of its loop and
before every socket read and write: a few times per ZooKeeper request or response.
``SequentialThreadingHandler.select`` builds a ``selectors.DefaultSelector`` for every
call; on Linux that is an epoll instance, one ``epoll_create1`` and one ``close`` each
time, about 29 us a call here. The same kazoo function (``selector_select``) given a
``PollSelector`` instead takes about 9 us and opens no descriptor; poll(2), unlike
select(2), has no FD_SETSIZE limit, so a broker with 16,000 open log files is fine.
In a controller failover of 100,000 partitions, creating and closing selectors was a
quarter of the connection thread's samples (py-spy), time it held the GIL the event
loop was waiting for.
"""

from __future__ import annotations

import selectors
import types

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import selector_select

_POLL = types.SimpleNamespace(DefaultSelector=selectors.PollSelector,
                              EVENT_READ=selectors.EVENT_READ,
                              EVENT_WRITE=selectors.EVENT_WRITE)


class PollThreadingHandler(SequentialThreadingHandler):
    """``SequentialThreadingHandler`` whose ``select(rlist, wlist, xlist, timeout=None)``
    (seconds) uses poll(2); same results and errors as kazoo's."""

    name = "poll_threading_handler"

    def select(self, *args, **kwargs):
        return selector_select(*args, selectors_module=_POLL, **kwargs)
