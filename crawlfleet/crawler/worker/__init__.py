"""The worker: the loop that ties the other rooms together, and the leases it holds.

``worker`` claims, fetches, classifies and flushes; ``process`` builds one worker process's
parts; ``leases`` owns every lease from claim to settlement; ``gate`` is what a lease passes
before its request (the address guard, robots.txt); ``flow`` is the heartbeat, the periodic
tasks and the wake-ups; ``sinks`` writes the output, durable before a lease is acked;
``metrics`` is every Prometheus metric a worker exports. The Scrapy runtime
(``crawlfleet.scrapy``) shares ``leases``, ``gate``, ``flow``, ``sinks`` and ``metrics``.
"""

__all__: list[str] = []
