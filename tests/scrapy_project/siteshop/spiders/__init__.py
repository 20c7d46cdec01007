"""The test project's spiders: ``shop`` (chained callbacks, meta) and ``graph`` (CrawlSpider)."""
