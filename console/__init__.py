"""The Josef web console: ``josef console --bootstrap-server B --listen HOST:PORT``.

A separate process (aiohttp) that talks to any Kafka-compatible cluster through the project's
protocol client (:mod:`client`), showing brokers and the controller, topics (partitions,
leaders, ISR, offsets, sizes, configs; create/delete with ``--allow-writes``), a message
browser, consumer groups with members, assignments and lag, and live charts. Assets ship in
``console/static`` (no CDN). See :mod:`console.app` (application, routes) and
:mod:`console.rendering` (what the pages share).
"""
