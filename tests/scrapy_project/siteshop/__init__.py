"""A Scrapy project crawling crawlfleet's test site, for the tests of crawlfleet.scrapy (#16)."""
