"""The Scrapy project a job names: its settings, the spec's over them, the runtime's over both.

Found as ``scrapy crawl`` finds it (``scrapy.utils.project.get_project_settings``: the
``SCRAPY_SETTINGS_MODULE`` variable, else the ``scrapy.cfg`` of the working directory or a
parent), unless ``crawler.scrapy.settingsModule`` names the module. Everything a bad start
could be is found here, before Redis is touched, and said in one sentence (a
:class:`~crawlfleet.errors.ConfigError`, exit 2): Scrapy missing, a project that does not
import, a spider name it lacks (the ones it has are listed), and settings that would take the
frontier out of the loop (a ``SCHEDULER`` or ``DUPEFILTER_CLASS`` of the project's own, such as
scrapy-redis' left in settings.py: requests would be popped without a lease, or taken for seen
before they are queued), and a download handler for http(s) that would connect past the
address guard (``DOWNLOAD_HANDLERS``, the spider's ``custom_settings`` included: only Twisted's
HTTP/1.1 and HTTP/2 handlers resolve names through the reactor, whose resolver is the guard's;
an httpx, aiohttp or browser handler would resolve again by itself, and DNS rebinding would get
through). Proxies from the environment are ignored (``HTTPPROXY_ENABLED``), as crawlfleet's own
worker ignores them: a proxy resolves the name itself. Precedence: the project's settings,
then ``crawler.scrapy.settings`` (priority ``cmdline``, as ``scrapy crawl -s``), then the
runtime's (priority ``cmdline``, written last, so nothing overrides them).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from crawlfleet.errors import ConfigError

if TYPE_CHECKING:
    from scrapy.settings import Settings
    from scrapy.spiders import Spider

    from crawlfleet.crawljob import CrawlJobSpec, ScrapySpec

__all__ = ["GUARDED_DOWNLOAD_HANDLERS", "RUNTIME_SETTINGS", "load_project", "require_scrapy"]

_WHERE: Final = "spec.crawler.scrapy"
_SCHEDULER: Final = "crawlfleet.scrapy.scheduler.FrontierScheduler"
_DUPEFILTER: Final = "crawlfleet.scrapy.scheduler.InertDupeFilter"
#: Just spider-side of HttpErrorMiddleware (50): it sees a filtered response's HttpError
#: before that middleware swallows it, and every output after Scrapy's own filters (offsite,
#: depth, URL length, all spider-side of it).
SPIDER_MIDDLEWARE_ORDER: Final = 51
#: The downloader middleware nearest the engine: it sees what the retries gave up on.
DOWNLOADER_MIDDLEWARE_ORDER: Final = 1

#: What the runtime sets over the project and the spec (see the module docstring).
RUNTIME_SETTINGS: Final[Mapping[str, object]] = {
    "SCHEDULER": _SCHEDULER,
    "DUPEFILTER_CLASS": _DUPEFILTER,
    "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
    # The frontier decides when the crawl ends: Scrapy's own stop conditions would close a
    # process while its leases wait (closespider counts are per process, not per job).
    "CLOSESPIDER_ITEMCOUNT": 0,
    "CLOSESPIDER_PAGECOUNT": 0,
    "CLOSESPIDER_TIMEOUT": 0,
    # Per-process consoles (a telnet one, and 2.19's code-executing HTTP one, which writes a
    # job file under the home directory): a worker is one of many, replaced at will, often on
    # a read-only root filesystem; the fleet is steered through the frontier.
    "TELNETCONSOLE_ENABLED": False,
    "REMOTE_CONTROL_ENABLED": False,
    # robots.obey is the job's, applied before every download by the lease middleware as
    # crawlfleet's own worker applies it (RFC 9309 deferrals, one fetch per origin for the
    # fleet): Scrapy's RobotsTxtMiddleware would be a second robots.txt client, per process,
    # allowing everything while a robots.txt answers 5xx.
    "ROBOTSTXT_OBEY": False,
    # A proxy resolves the names it is asked for itself, past the address guard.
    "HTTPPROXY_ENABLED": False,
}
#: The http(s) download handlers that connect through the reactor's name resolution (the
#: guard's, ``resolver.py``), and their subclasses; any other is refused.
GUARDED_DOWNLOAD_HANDLERS: Final = frozenset(
    {
        "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler",
        "scrapy.core.downloader.handlers.http2.H2DownloadHandler",
    }
)
# Scrapy's defaults for the two settings the runtime owns: a project that left them alone.
_DEFAULTS: Final = {
    "SCHEDULER": "scrapy.core.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy.dupefilters.RFPDupeFilter",
}


def require_scrapy() -> None:
    """ConfigError unless Scrapy can be imported (the optional extra)."""
    if importlib.util.find_spec("scrapy") is None:
        raise ConfigError(f"{_WHERE}: Scrapy is not installed (pip install 'crawlfleet[scrapy]')")


def load_project(spec: CrawlJobSpec) -> tuple[Settings, type[Spider]]:
    """The settings to crawl with and the spider class, or a ConfigError in one sentence."""
    scrapy_spec = spec.scrapy
    if scrapy_spec is None:
        raise ConfigError(f"{_WHERE}: the job does not ask for Scrapy")
    require_scrapy()
    from scrapy.spiderloader import get_spider_loader
    from scrapy.utils.project import get_project_settings

    if scrapy_spec.settings_module is not None:
        os.environ["SCRAPY_SETTINGS_MODULE"] = scrapy_spec.settings_module
    try:
        settings = get_project_settings()
        # The spider loader imports every module of SPIDER_MODULES: a project's import
        # errors surface here, once, instead of as a traceback from inside the crawl.
        loader = get_spider_loader(settings)
        names = sorted(loader.list())
    except Exception as exc:  # a user's module: any exception is the project not importing
        where = scrapy_spec.settings_module or os.environ.get("SCRAPY_SETTINGS_MODULE")
        found = f"settings module {where}" if where else "no scrapy.cfg or SCRAPY_SETTINGS_MODULE"
        raise ConfigError(
            f"{_WHERE}: the Scrapy project does not import ({found}): {type(exc).__name__}: {exc}"
        ) from exc
    if scrapy_spec.spider not in names:
        have = ", ".join(names) if names else "none (check SPIDER_MODULES and scrapy.cfg)"
        raise ConfigError(
            f"{_WHERE}.spider: the project has no spider {scrapy_spec.spider!r}; its spiders:"
            f" {have}"
        )
    _refuse_conflicts(settings)
    settings.setdict(_spec_settings(scrapy_spec, spec), priority="cmdline")
    spider = loader.load(scrapy_spec.spider)
    # As the crawler will see them: the spider's custom_settings too (priority "spider").
    with_spider = settings.copy()
    spider.update_settings(with_spider)
    _refuse_unguarded_handlers(with_spider)
    settings.setdict(dict(RUNTIME_SETTINGS), priority="cmdline")
    _install_components(settings)
    return settings, spider


def _refuse_conflicts(settings: Settings) -> None:
    for name, default in _DEFAULTS.items():
        value = settings.get(name)
        path = value if isinstance(value, str) else _object_path(value)
        if path not in (default, RUNTIME_SETTINGS[name]):
            raise ConfigError(
                f"{_WHERE}: the project's settings set {name} = {path}; crawlfleet's runtime"
                f" replaces it with its frontier {name.lower().replace('_class', '')} (leased,"
                " deduplicated through the job's Bloom filter, acked once the items are"
                f" durable): remove {name} from the project's settings (docs/scrapy.md maps"
                " scrapy-redis' settings)"
            )


def _refuse_unguarded_handlers(settings: Settings) -> None:
    """ConfigError when http or https is downloaded by a handler that resolves names itself."""
    from scrapy.utils.misc import load_object

    handlers = settings.getwithbase("DOWNLOAD_HANDLERS")
    for scheme in ("http", "https"):
        value = handlers.get(scheme)
        if value is None:  # switched off: nothing is downloaded for it
            continue
        try:
            handler = load_object(value) if isinstance(value, str) else value
        except Exception as exc:  # a user's module: any exception is it not importing
            raise ConfigError(
                f"{_WHERE}: DOWNLOAD_HANDLERS[{scheme!r}] = {value!r} does not import:"
                f" {type(exc).__name__}: {exc}"
            ) from exc
        lineage = {_object_path(cls) for cls in getattr(handler, "__mro__", ())}
        if lineage.isdisjoint(GUARDED_DOWNLOAD_HANDLERS):
            raise ConfigError(
                f"{_WHERE}: DOWNLOAD_HANDLERS[{scheme!r}] = {_object_path(handler)} would"
                " connect without the address guard (it resolves host names itself, so a page"
                " could reach internal addresses by DNS rebinding); crawlfleet downloads http"
                " and https with Scrapy's Twisted handlers (HTTP11DownloadHandler,"
                " H2DownloadHandler or a subclass): remove the setting"
            )


def _object_path(value: object) -> str:
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


def _spec_settings(scrapy_spec: ScrapySpec, spec: CrawlJobSpec) -> dict[str, Any]:
    """The spec's settings, with what the CrawlJob itself says where Scrapy has a setting
    for it (``userAgent`` when the job set one, ``fetch``'s total timeout and body cap): a
    spec setting wins. (``robots.obey`` is applied by the runtime, not by a setting.)

    DOWNLOAD_TIMEOUT matters beyond one request: the frontier counts a dead process's lease
    on its host's slot until the lease's fetch deadline (the claim plus the total timeout),
    so a download must not outlive it."""
    derived: dict[str, Any] = {
        "DOWNLOAD_TIMEOUT": spec.fetch.total_timeout_seconds,
        "DOWNLOAD_MAXSIZE": spec.fetch.max_decompressed_bytes,
    }
    if "user_agent" in spec.model_fields_set:
        derived["USER_AGENT"] = spec.user_agent
    return {**derived, **scrapy_spec.settings}


def _install_components(settings: Settings) -> None:
    """The runtime's middlewares and extension, beside the project's own."""
    spider_mws = settings.getdict("SPIDER_MIDDLEWARES")
    spider_mws["crawlfleet.scrapy.middlewares.LeaseSpiderMiddleware"] = SPIDER_MIDDLEWARE_ORDER
    settings.set("SPIDER_MIDDLEWARES", spider_mws, priority="cmdline")
    downloader_mws = settings.getdict("DOWNLOADER_MIDDLEWARES")
    downloader_mws["crawlfleet.scrapy.middlewares.LeaseDownloaderMiddleware"] = (
        DOWNLOADER_MIDDLEWARE_ORDER
    )
    settings.set("DOWNLOADER_MIDDLEWARES", downloader_mws, priority="cmdline")
