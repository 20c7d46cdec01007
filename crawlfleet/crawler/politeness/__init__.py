"""Politeness: how hard a site may be asked (DESIGN §4, §6).

``robots`` reads each origin's robots.txt once for the fleet and answers per URL;
``concurrency`` halves the worker's concurrency when sites struggle and creeps it back up. Built
on ``fetching`` (a robots.txt is fetched like a page); the worker's gate asks it per lease.
"""

__all__: list[str] = []
