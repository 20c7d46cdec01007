"""Fetching: one URL to one bounded response, safely (DESIGN §4's request layer, §6).

``fetch`` follows redirects and retries; ``transport`` is the pooled client that connects only
where ``safety``'s address guard allows; ``bodies`` streams and caps a body, charged to
``memory``'s byte budget; ``failures`` names every way a fetch ends badly and what each means for
the URL; ``streaming`` is the seam through which a caller reads a body itself (a file download).
Every other room of the crawler stands on this one; it imports none of them.
"""

__all__: list[str] = []
