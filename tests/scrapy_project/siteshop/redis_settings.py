"""The project as a scrapy-redis user left it: its scheduler and dupefilter still set."""

from siteshop.settings import *  # noqa: F403

SCHEDULER = "scrapy_redis.scheduler.Scheduler"
DUPEFILTER_CLASS = "scrapy_redis.dupefilter.RFPDupeFilter"
