"""A small shop on host 0 of the test site: a listing and product pages with known fields.

Extraction tests and benchmarks crawl ``/shop/`` (the listing, one ``<li class="product">`` per
product) and the product pages it links, ``/shop/product/<id>.html``, and compare what rules
extract with :data:`PRODUCTS`. Names hold non-ASCII text and markup inside, prices sit in text
with a currency sign around them (a job for a field's ``re``), tags are a list (``all``), and
each page has a script and a style whose text must never show in ``content: text``. Nothing
else on the site links here, so the pages a normal crawl must fetch do not change.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Final

__all__ = [
    "LISTING_PATH",
    "PRODUCTS",
    "Product",
    "product_path",
    "render_listing",
    "render_product",
]

LISTING_PATH: Final = "/shop/"


@dataclass(frozen=True, slots=True)
class Product:
    id: int
    name: str
    price: str
    sku: str
    tags: tuple[str, ...]

    @property
    def path(self) -> str:
        return product_path(self.id)


PRODUCTS: Final = (
    Product(1, "Teapot «Haiku»", "24.90", "TP-001", ("kitchen", "tea")),
    Product(2, "Crème brûlée torch", "39.00", "CB-002", ("kitchen",)),
    Product(3, "Fountain pen Nº 5", "120.50", "FP-005", ("office", "gifts", "writing")),
    Product(4, "Ceramic mug (large)", "12.00", "CM-004", ()),
    Product(5, "Kyoto green tea 抹茶", "8.75", "GT-005", ("tea",)),
)

_SCRIPT: Final = '<script>var tracking = "never visible";</script>'
_STYLE: Final = "<style>.price { color: red } /* never visible */</style>"


def product_path(product_id: int) -> str:
    return f"/shop/product/{product_id}.html"


def render_product(product: Product) -> bytes:
    """A product page: name in ``h1.name`` (with inline markup), price in ``span.price``, SKU
    in ``span.sku``, tags as ``ul.tags li``, a canonical ``<link>``."""
    name = html.escape(product.name)
    first, _, rest = name.partition(" ")
    tags = "".join(f"<li>{html.escape(tag)}</li>" for tag in product.tags)
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        f"<title>{name} | Test shop</title>{_STYLE}"
        f'<link rel="canonical" href="{product.path}"></head><body>\n'
        f'<div class="product" data-sku="{product.sku}">\n'
        f'<h1 class="name"><em>{first}</em> {rest}</h1>\n'
        f'<p>Price: <span class="price">€{product.price}</span></p>\n'
        f'<p><span class="sku">SKU: {product.sku}</span></p>\n'
        f'<ul class="tags">{tags}</ul>\n'
        f"</div>{_SCRIPT}\n"
        f'<a href="{LISTING_PATH}">All products</a>\n'
        "</body></html>\n"
    ).encode()


def render_listing() -> bytes:
    """The listing: one ``li.product`` per product with its name, price and link."""
    entries = "".join(
        f'<li class="product"><a href="{product.path}">{html.escape(product.name)}</a>'
        f' <span class="price">€{product.price}</span></li>\n'
        for product in PRODUCTS
    )
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>Test shop</title>'
        f'{_STYLE}</head><body>\n<h1>All products</h1>\n<ul class="products">\n{entries}</ul>\n'
        f"{_SCRIPT}</body></html>\n"
    ).encode()
