"""Links: which URLs a page leads to, and which of them the job may queue (DESIGN §7).

``charset`` finds a page's encoding, ``links`` reads its links, ``scope`` decides which are the
job's, ``admission`` skips the ones this worker already settled, and ``sitemaps`` reads a
sitemap document's entries. Pure functions of a page and the job: no network, no Redis.
"""

__all__: list[str] = []
