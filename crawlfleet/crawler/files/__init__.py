"""Files: the worker's file downloads (``spec.files``, DESIGN §11).

A URL that a ``files`` rule names is not read as a page: its body streams into a durable,
resumable *part* in the destination, is verified, and is finished into its content address
``files/sha256/<ab>/<sha256>`` (identical bytes stored once). One idea per module:

``rules``
    which URLs are files, by which rule (pure: a URL, the element that linked it, a content
    type in; a rule or None out).
``sniff``
    what a body's first bytes say it is, against what the response declared (pure).
``resume``
    the ``Range``/``If-Range`` a part's state asks for, and whether an answer appends to the
    part, replaces it, or restarts it (pure).
``parts``
    the part of one download: a fsynced ``.part`` file with a JSON sidecar in a folder
    destination, durable chunk by chunk, finished into its content address.
``bucket_parts``
    the same on an S3 destination: a multipart upload whose parts are durable as they go.
``download``
    one file's bytes from a response into its part: the bandwidth throttle, the request and the
    result of one download (the fetcher streams; ``fetching`` keeps the guard and retries).

Built on ``fetching`` (a file is fetched as a page is, through the same guard and redirects)
and on ``output`` (a part lives in the destination's store); the worker's ``files`` module
decides per lease and settles the file.
"""

__all__: list[str] = []
