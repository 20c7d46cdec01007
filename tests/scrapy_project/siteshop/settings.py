"""The test project's settings: what a small real project sets."""

BOT_NAME = "siteshop"
SPIDER_MODULES = ["siteshop.spiders"]
NEWSPIDER_MODULE = "siteshop.spiders"
ROBOTSTXT_OBEY = False
ITEM_PIPELINES = {"siteshop.pipelines.PricePipeline": 300, "siteshop.pipelines.SlowPipeline": 400}
CONCURRENT_REQUESTS = 16
RETRY_TIMES = 1
LOG_LEVEL = "INFO"
