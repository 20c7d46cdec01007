"""Harvest: what a page yields besides its links: its content and its items.

``harvest`` makes them for a batch of pages in a thread, under a time bound per page;
``extract`` runs the job's declarative rules (``spec.extract``); ``parsers`` runs a user's parser
(``spec.parser``) in a process beside the worker. Stands on ``links`` (a page's text, its
charset).
"""

__all__: list[str] = []
