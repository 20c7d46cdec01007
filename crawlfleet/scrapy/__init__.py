"""crawlfleet.scrapy: a Scrapy project's spiders on the crawlfleet fleet (``crawlfleet[scrapy]``).

How to use it: install the project and ``crawlfleet[scrapy]`` (Scrapy 2.14 or later) in one
environment (locally, or an image built FROM the crawlfleet worker image that pip-installs
the project and sets its working directory to the folder of ``scrapy.cfg``, or sets
``settingsModule``), and name a spider in the CrawlJob::

    spec:
      crawler:
        scrapy:
          spider: books                  # a spider of the project (scrapy list)
          settingsModule: shop.settings  # optional: else SCRAPY_SETTINGS_MODULE / scrapy.cfg
          settings: {DOWNLOAD_TIMEOUT: 20}
          args: {category: fiction}      # scrapy crawl -a category=fiction
      seeds: [https://shop.example/]     # optional: requests to the spider's default callback

``crawlfleet run job.yaml`` and the operator then run ``crawlfleet worker`` processes as for
any job; each one sees ``crawler.scrapy`` and runs the spider (``process.py``) instead of
crawlfleet's own crawler, with the same argv, worker id, heartbeats, exit codes and steering
(scale from backlog, replace dead, requeue leases). The steering does not seed a Scrapy job
(``FleetPolicy.workers_seed``): its processes do, from ``spec.seeds`` and the spider's
``start()``, and mark it seeded once those are queued. The project keeps its spiders,
callbacks, items, item pipelines and middlewares.

Settings, lowest to highest: the project's settings.py; what the CrawlJob says where Scrapy
has a setting for it (``DOWNLOAD_TIMEOUT`` from ``fetch.totalTimeoutSeconds``,
``DOWNLOAD_MAXSIZE`` from ``fetch.maxDecompressedBytes``, ``USER_AGENT`` from ``userAgent`` when
set); ``crawler.scrapy.settings``; then the runtime's (:data:`RUNTIME_SETTINGS`: the scheduler
and dupefilter, the asyncio reactor, Scrapy's CLOSESPIDER_* limits off since the frontier
decides when a job ends, the telnet and remote consoles off, and ``ROBOTSTXT_OBEY`` off: the
job's ``robots`` section is applied before every download as crawlfleet's own worker applies
it) and its two middlewares (``project.py``).

From scrapy-redis (the migration docs/scrapy.md shows): ``SCHEDULER`` and
``DUPEFILTER_CLASS`` are removed from settings.py (left in, they are refused at start with
this fix in the sentence); ``SCHEDULER_PERSIST`` has no counterpart, the frontier always
persists until the job is deleted; ``SCHEDULER_QUEUE_CLASS`` and ``SCHEDULER_IDLE_BEFORE_CLOSE``
neither: per-host queues and the frontier's completion replace them; ``REDIS_URL`` is the
job's ``spec.redis``; a ``RedisSpider``'s ``redis_key`` list is replaced by ``spec.seeds`` and
``crawlfleet enqueue`` (URLs queued there are GET requests to the spider's default callback);
what scrapy-redis' priority queue orders across the whole crawl is ordered here within each
claimed batch (``runtime.py`` says what holds).

How the layers compose, engine outwards:

* ``project.py`` loads the project as ``scrapy crawl`` does, refuses what conflicts (a
  scheduler of its own, an http(s) download handler that would resolve names past the
  guard), and lays the settings as above;
* ``scheduler.py``: Scrapy's scheduler contract over the frontier, and an inert dupefilter
  (dedup is the frontier's Bloom filter, atomic with queueing);
* ``middlewares.py``: a spider middleware and a downloader middleware that report each
  lease's response, outputs, items and failures;
* ``runtime.py``: the leases of one process, claim to ack, and why no path acks early (its
  docstring: the two retry layers, politeness, priority, scope, completion, SIGTERM);
* ``resolver.py``: the reactor's name resolution, answered by the address guard, so a
  connection goes only to the addresses the guard approved before the download;
* ``payload.py``: a Scrapy request as a frontier task (the mark in its parent).

Output: each response gets a page record in ``pages/`` and its items a line each in
``items/`` of the job's destination (crawlfleet's formats, ``crawler/worker/sinks.py``; an item's
``source`` is the spider's name, its ``fields`` the item as JSON), durable before the lease is
acked; ``format: warc`` archives the responses too. A Scrapy FEEDS setting still works as in
Scrapy, per process, outside that guarantee.
"""

from crawlfleet.scrapy.project import RUNTIME_SETTINGS, load_project, require_scrapy

__all__ = ["RUNTIME_SETTINGS", "load_project", "require_scrapy"]
