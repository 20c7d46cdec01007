"""crawlfleet.scrapy: a Scrapy project's spiders on the crawlfleet fleet (``crawlfleet[scrapy]``).

How to use it: install the project and ``crawlfleet[scrapy]`` in one environment (locally, or an
image built FROM the crawlfleet worker image), and name a spider in the CrawlJob::

    spec:
      crawler:
        scrapy:
          spider: books                  # a spider of the project (scrapy list)
          settingsModule: shop.settings  # optional: else SCRAPY_SETTINGS_MODULE / scrapy.cfg
          settings: {DOWNLOAD_TIMEOUT: 20}
          args: {category: fiction}      # scrapy crawl -a category=fiction

``crawlfleet run job.yaml`` and the operator then run ``crawlfleet worker`` processes as for
any job; each one sees ``crawler.scrapy`` and runs the spider (``process.py``) instead of
crawlfleet's own crawler, with the same argv, worker id, heartbeats, exit codes and steering
(scale from backlog, replace dead, requeue leases). The project keeps its spiders, callbacks,
items, pipelines and middlewares; settings.py must not set SCHEDULER or DUPEFILTER_CLASS
(scrapy-redis' ones are refused at start with the fix), and needs none of scrapy-redis'
(REDIS_URL is the job's ``redis``; start URLs are ``spec.seeds``, the spider's ``start()``, or
``crawlfleet enqueue``).

How the layers compose, engine outwards:

* ``project.py`` loads the project as ``scrapy crawl`` does, refuses what conflicts, and lays
  the spec's settings and the runtime's over it;
* ``scheduler.py``: Scrapy's scheduler contract over the frontier, and an inert dupefilter
  (dedup is the frontier's Bloom filter, atomic with queueing);
* ``middlewares.py``: a spider middleware and a downloader middleware that report each
  lease's response, outputs, items and failures;
* ``runtime.py``: the leases of one process, claim to ack, and why no path acks early (its
  docstring: the retry layers, politeness, priority, scope, completion, SIGTERM);
* ``payload.py``: a Scrapy request as a frontier task (the mark in its parent).

Items go to ``items/`` of the job's destination beside a page record per response in
``pages/``, in crawlfleet's formats (``crawler/sinks.py``), ``source`` being the spider's name.
"""

from crawlfleet.scrapy.project import RUNTIME_SETTINGS, load_project, require_scrapy

__all__ = ["RUNTIME_SETTINGS", "load_project", "require_scrapy"]
