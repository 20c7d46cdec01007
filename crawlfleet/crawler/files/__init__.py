"""Files (DESIGN §11): the worker's file downloads, streamed, resumed, verified, stored once.

``download`` streams one file into its ``parts`` part (a local ``.part`` or an S3 multipart
upload), resuming with ``resume``'s ranges and checking it with ``sniff``'s magic bytes; a part
finished becomes its content address ``files/sha256/<ab>/<sha256>``. ``rules`` says which URLs
are files. This room stands on ``fetching`` (a file is fetched with a page's guard, redirects
and retries) and on the output stores; the worker stands on it.
"""

__all__: list[str] = []
