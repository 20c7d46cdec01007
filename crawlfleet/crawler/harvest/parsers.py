"""User parsers (``spec.parser: "package.module:function"``), run in a process beside the worker.

User code is untrusted in the ways that matter to a crawl: it can raise, loop, hold the CPU for
seconds, or return what is no item. So the worker never calls it itself. A :class:`ParserHost`
spawns one child process that imports the function once and answers one page at a time over a
pipe; the harvest thread (``crawler/harvest/harvest.py``) waits on that pipe with the job's
``parserTimeoutSeconds``, which costs the worker's event loop nothing (the wait releases the
GIL), so heartbeats and lease extensions go on however long the parser takes.

* an exception, or a result that is no iterable of items (``dict`` of JSON values) and links
  (``str``): that page's ``parser_error``, with the reason;
* past the timeout: the child is killed and a new one started for the next page; the page is a
  ``parser_error`` ("did not return within ...");
* a child that dies (a crash in a C extension, ``os._exit``): the same, and a new child.

A function that cannot be imported stops the worker at start with one sentence
(:class:`~crawlfleet.errors.ConfigError`): no page could be parsed. The child is started with
``spawn`` (a clean interpreter, not a fork of a process with threads) and is a daemon; if the
worker is killed, the pipe's end closes and the child exits.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Final

from crawlfleet.errors import ConfigError

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

__all__ = ["ParseRequest", "ParseResult", "ParserHost", "load_parser"]

#: How long a child may take to import the parser and say it is ready.
_START_TIMEOUT_SECONDS: Final = 60.0
#: Most items plus links one page may give: a generator that never ends is junk, not a page.
_MAX_RESULTS: Final = 100_000


@dataclass(frozen=True, slots=True)
class ParseRequest:
    """What the child needs to build a :class:`~crawlfleet.parsing.Page`."""

    url: str
    status: int
    headers: Mapping[str, str]
    text: str
    depth: int


@dataclass(frozen=True, slots=True)
class ParseResult:
    """The parser's items and links for one page, or why there are none (``error``)."""

    items: tuple[dict[str, Any], ...] = ()
    links: tuple[str, ...] = ()
    error: str | None = None


def load_parser(reference: str) -> Callable[[Any], object]:
    """The function ``reference`` ("package.module:function") names; ConfigError if none."""
    module_name, _, name = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # whatever the module raises while it is imported
        raise ConfigError(
            f"spec.parser: cannot import {module_name}: {type(error).__name__}: {error}"
        ) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ConfigError(f"spec.parser: {module_name} has no function {name}")
    return function  # type: ignore[no-any-return]


class ParserHost:
    """One child process running the job's parser; :meth:`parse` is blocking (a thread's)."""

    def __init__(self, reference: str, timeout_seconds: float) -> None:
        self.reference = reference
        self.timeout_seconds = timeout_seconds
        self._context = multiprocessing.get_context("spawn")
        self._process: BaseProcess | None = None
        self._connection: Connection | None = None
        self._lock = threading.Lock()  # one page at a time on the pipe

    def start(self) -> None:
        """Start the child and wait until it has imported the parser (ConfigError if not)."""
        parent, child = self._context.Pipe()
        process = self._context.Process(
            target=_serve, args=(self.reference, child), name="crawlfleet-parser", daemon=True
        )
        process.start()
        child.close()
        self._process, self._connection = process, parent
        if not parent.poll(_START_TIMEOUT_SECONDS):
            self.close()
            raise ConfigError(
                f"spec.parser: {self.reference} did not load within {_START_TIMEOUT_SECONDS:.0f} s"
            )
        try:
            answer = parent.recv()
        except EOFError:
            answer = f"the parser process exited with code {process.exitcode}"
        if answer is not None:
            self.close()
            raise ConfigError(str(answer))

    def parse(self, request: ParseRequest) -> ParseResult:
        """The parser's answer for one page; never raises for what the parser does."""
        with self._lock:
            if self._connection is None or self._process is None or not self._process.is_alive():
                self.close()
                self.start()
            connection = self._connection
            assert connection is not None
            try:
                connection.send(request)
                if not connection.poll(self.timeout_seconds):
                    self.close()  # the next page gets a new child
                    return ParseResult(
                        error=f"{self.reference} did not return within {self.timeout_seconds:g} s"
                    )
                answer: ParseResult = connection.recv()
            except (EOFError, OSError):
                code = self._process.exitcode if self._process is not None else None
                self.close()
                return ParseResult(error=f"the parser process died (exit code {code})")
            return answer

    def close(self) -> None:
        """Stop the child (killed: it may be in a loop that never ends). Idempotent."""
        process, connection = self._process, self._connection
        self._process = self._connection = None
        if connection is not None:
            connection.close()
        if process is not None and process.is_alive():
            process.kill()
        if process is not None:
            process.join(5)


def _serve(reference: str, connection: Connection) -> None:
    """The child: load the parser, say so (None, or the refusal), then answer pages until
    the worker closes its end of the pipe."""
    try:
        function = load_parser(reference)
    except ConfigError as error:
        connection.send(str(error))
        return
    from parsel import Selector

    from crawlfleet.parsing import Page

    connection.send(None)
    while True:
        try:
            request: ParseRequest = connection.recv()
        except (EOFError, OSError):
            return  # the worker is gone
        page = Page(
            url=request.url,
            status=request.status,
            headers=dict(request.headers),
            text=request.text,
            selector=Selector(text=request.text),
            depth=request.depth,
        )
        try:
            result = _collect(function(page))
        except BaseException as error:  # the user's code: SystemExit and all, that page only
            result = ParseResult(error=f"{type(error).__name__}: {error}"[:1000])
        connection.send(result)


def _collect(returned: object) -> ParseResult:
    """Items and links from what the parser returned, or the reason it is junk."""
    if returned is None:
        return ParseResult()
    if isinstance(returned, dict | str | bytes) or not hasattr(returned, "__iter__"):
        return ParseResult(
            error=f"returned {type(returned).__name__}: a parser returns or yields items"
            " (dicts) and links (strs)"
        )
    items: list[dict[str, Any]] = []
    links: list[str] = []
    for count, value in enumerate(returned):
        if count >= _MAX_RESULTS:
            return ParseResult(error=f"gave more than {_MAX_RESULTS} items and links")
        if isinstance(value, str):
            links.append(value)
        elif isinstance(value, dict) and all(isinstance(key, str) for key in value):
            try:
                json.dumps(value)
            except (TypeError, ValueError) as error:
                return ParseResult(error=f"gave an item JSON cannot hold: {error}")
            items.append(value)
        else:
            return ParseResult(
                error=f"gave {type(value).__name__}: items are dicts with str keys, links strs"
            )
    return ParseResult(tuple(items), tuple(links))
