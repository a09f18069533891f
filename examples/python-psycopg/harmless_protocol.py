"""The child side of harmless's exec protocol, version 1 (docs/protocol.md).

harmless starts an implementation as a child process and sends it one JSON
request per line on stdin; the child answers each with one JSON line on
stdout, in any order. This module is that loop, written once so that an
implementation only supplies a handler:

- ``hello`` is answered here, from the handler's ``declarations``;
- ``setup``, ``deliver``, ``purge`` and (when the handler has it) ``drain``
  run on a thread pool of ``max_in_flight`` threads, so one process handles
  that many requests at once, as it declared;
- ``shutdown`` closes the handler and exits with status 0, and so does the
  end of stdin.

A handler method returns the ``result`` object, or raises ``ProtocolError``
to answer an error of a given class. Any other exception is a bug or an
unexpected failure: it is logged and answered as ``transient``, so one bad
request never kills the process.

stdout carries protocol messages only; logs go to stderr, which harmless
quotes in its failure messages. Standard library only.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Mapping, NoReturn, Protocol, TypeVar

PROTOCOL_VERSION = 1

# Error classes (docs/protocol.md, "Error classes").
TRANSIENT = "transient"
INVALID_INPUT = "invalid_input"
UNSUPPORTED = "unsupported"

# Where Debian installs python3-* packages such as python3-psycopg2.
SYSTEM_PYTHON = "/usr/bin/python3"

log = logging.getLogger("harmless")

Params = Mapping[str, Any]
Result = dict[str, Any]
T = TypeVar("T")


class ProtocolError(Exception):
    """An error answer: the request failed with ``error_class``."""

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message


@dataclass(frozen=True)
class Declarations:
    """What the child declares in its answer to ``hello``."""

    name: str
    version: str
    conflict_policy: str  # "reject" or "" (none)
    redelivery_window_s: int  # 0 declares no window
    accepts_clock: bool
    max_in_flight: int  # requests handled at once by one process, 1 to 1024
    external_effects: str = ""  # "outbox", "destination-idempotency" or "" (none)
    # The longest, in seconds, the relay takes to send after a commit and
    # between two tries of a failed send; 0 declares none (docs/protocol.md).
    max_send_delay_s: float = 0


class Handler(Protocol):
    """An implementation: the methods the loop dispatches requests to."""

    declarations: Declarations

    def setup(self, params: Params) -> Result: ...

    def deliver(self, params: Params) -> Result: ...

    def purge(self, params: Params) -> Result: ...

    # Optional: def drain(self, params: Params) -> Result, answered once every
    # external effect committed before it has reached the destination. A
    # handler without it answers drain "unsupported".

    def close(self) -> None:
        """Close every connection; called at shutdown and at the end of stdin."""


def reexec_with_system_python(module: str, apt_package: str) -> NoReturn:
    """Restart the script under the system Python when ``module`` is missing.

    Debian's ``python3-*`` packages install for /usr/bin/python3 only, while
    ``python3`` on PATH may be another interpreter (pyenv, a virtualenv).
    Call this from the ``except ImportError`` of the import; nothing has been
    read from stdin yet, so the new process takes over the conversation.
    """
    here = os.path.realpath(sys.executable)
    if here != os.path.realpath(SYSTEM_PYTHON) and os.access(SYSTEM_PYTHON, os.X_OK):
        print(f"harmless: {module} is not importable by {sys.executable}; re-executing with {SYSTEM_PYTHON}",
              file=sys.stderr, flush=True)
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)
    print(f"harmless: {module} is missing: apt-get install {apt_package}", file=sys.stderr, flush=True)
    sys.exit(3)


# --- Decoding params --------------------------------------------------------
#
# A param the child cannot decode is answered invalid_input: the same request
# would fail the same way again, so it must not be retried.


def field(params: Params, name: str, kind: type[T]) -> T:
    """The required param ``name``, which must be a JSON value of ``kind``."""
    value = params.get(name)
    # bool is a subclass of int in Python, but true is not a JSON number.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ProtocolError(INVALID_INPUT, f"param {name!r} must be a {kind.__name__}, got {value!r:.80}")
    return value


def decode_base64(value: object, what: str) -> bytes:
    """Decode standard base64 (RFC 4648, with padding) into the bytes it carries."""
    if not isinstance(value, str):
        raise ProtocolError(INVALID_INPUT, f"{what} must be a base64 string, got {value!r:.80}")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError as err:
        raise ProtocolError(INVALID_INPUT, f"{what} is not standard base64: {err}") from None


def bytes_field(params: Params, name: str) -> bytes:
    """The required base64 param ``name``, decoded."""
    return decode_base64(params.get(name), f"param {name!r}")


# RFC 3339 in UTC as Go writes it: 0 to 9 fractional digits, "Z" or an offset.
_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)", re.ASCII)


def time_field(params: Params, name: str) -> datetime:
    """The required RFC 3339 time param ``name``, in microseconds.

    harmless sends whole microseconds, the precision of Python's datetime and
    of PostgreSQL's timestamptz. Should a sender write more digits, they are
    truncated (never rounded), which keeps order: equal times stay equal, so
    a marker claimed at a purge's cutoff survives it.
    """
    text = field(params, name, str)
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ProtocolError(INVALID_INPUT, f"param {name!r} is not an RFC 3339 time: {text!r:.80}")
    seconds, fraction, offset = match.groups()
    micros = (fraction or "").ljust(6, "0")[:6]
    # "+00:00" rather than "Z": fromisoformat accepts "Z" only from 3.11.
    return datetime.fromisoformat(f"{seconds}.{micros}{'+00:00' if offset == 'Z' else offset}")


# --- The loop ---------------------------------------------------------------


class _Server:
    """Reads requests, dispatches them, writes answers."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._methods: dict[str, Callable[[Params], Result]] = {
            "setup": handler.setup,
            "deliver": handler.deliver,
            "purge": handler.purge,
        }
        if hasattr(handler, "drain"):
            self._methods["drain"] = handler.drain
        self._pool = ThreadPoolExecutor(max_workers=handler.declarations.max_in_flight,
                                        thread_name_prefix="request")
        self._out = sys.stdout.buffer
        self._lock = threading.Lock()  # guards stdout and _in_flight
        self._in_flight = 0

    def run(self) -> NoReturn:
        for line in sys.stdin.buffer:
            request = self._parse(line)
            if request is None:
                continue
            rid, method, params = request
            if method == "hello":
                self._answer(rid, self._call(rid, method, lambda: self._hello(params)))
            elif method == "shutdown":
                self._shutdown(rid)
            else:
                with self._lock:
                    self._in_flight += 1
                self._pool.submit(self._serve, rid, method, params)
        log.info("stdin closed; finishing %d requests in flight", self._in_flight)
        self._pool.shutdown(wait=True)
        self._handler.close()
        self._exit()

    def _parse(self, line: bytes) -> tuple[int, str, Params] | None:
        """The request's id, method and params, or None when it has no usable id.

        A malformed request with a readable id is answered invalid_input
        here; one without is only logged, as there is nothing to answer.
        """
        try:
            request = json.loads(line)
        except ValueError as err:
            log.error("ignoring a line that is not JSON (%s): %.200r", err, line)
            return None
        rid = request.get("id") if isinstance(request, dict) else None
        if not isinstance(rid, int) or isinstance(rid, bool) or not 0 < rid < 2**53:
            log.error("ignoring a request without a positive integer id: %.200r", line)
            return None
        method, params = request.get("method"), request.get("params", {})
        if not isinstance(method, str) or not isinstance(params, dict):
            log.error("request %d: method must be a string and params an object: %.200r", rid, line)
            self._answer(rid, _error(INVALID_INPUT, "method must be a string and params an object"))
            return None
        return rid, method, params

    def _hello(self, params: Params) -> Result:
        offered = params.get("protocols")
        if not isinstance(offered, list) or PROTOCOL_VERSION not in offered:
            raise ProtocolError(UNSUPPORTED, f"harmless offers protocols {offered!r}; this child speaks {PROTOCOL_VERSION}")
        d = self._handler.declarations
        declares = {
            "conflict_policy": d.conflict_policy,
            "redelivery_window_s": d.redelivery_window_s,
            "accepts_clock": d.accepts_clock,
        }
        if d.external_effects:
            declares["external_effects"] = d.external_effects
        if d.max_send_delay_s:
            declares["max_send_delay_s"] = d.max_send_delay_s
        return {
            "protocol": PROTOCOL_VERSION,
            "implementation": {"name": d.name, "version": d.version},
            "declares": declares,
            "max_in_flight": d.max_in_flight,
        }

    def _serve(self, rid: int, method: str, params: Params) -> None:
        """Run one request on a pool thread and answer it."""
        try:
            handle = self._methods.get(method)
            if handle is None:
                answer = _error(UNSUPPORTED, f"unknown method {method!r}")
            else:
                answer = self._call(rid, method, lambda: handle(params))
            self._answer(rid, answer)
        finally:
            with self._lock:
                self._in_flight -= 1

    @staticmethod
    def _call(rid: int, method: str, handle: Callable[[], Result]) -> dict[str, Any]:
        """The answer's body: the result, or the error handle raised."""
        try:
            return {"result": handle()}
        except ProtocolError as err:
            log.warning("request %d (%s): %s: %s", rid, method, err.error_class, err.message)
            return _error(err.error_class, err.message)
        except Exception as err:  # a bug must cost one request, not the process
            log.exception("request %d (%s) failed unexpectedly", rid, method)
            return _error(TRANSIENT, f"{type(err).__name__}: {err}")

    def _shutdown(self, rid: int) -> NoReturn:
        with self._lock:
            in_flight = self._in_flight
        if in_flight == 0:
            self._handler.close()
        else:
            # Those requests are past their deadline (harmless sends shutdown
            # only when it expects no more answers). Closing their
            # connections would wait for them; exiting drops the connections
            # instead, and the server rolls their transactions back.
            log.info("shutdown with %d requests in flight; exiting without waiting for them", in_flight)
        self._answer(rid, {"result": {}})
        self._exit()

    def _answer(self, rid: int, body: dict[str, Any]) -> None:
        line = json.dumps({"id": rid, **body}, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            try:
                self._out.write(line)
                self._out.flush()
            except OSError as err:  # harmless has gone; stdin's end will follow
                log.error("cannot answer request %d: %s", rid, err)

    @staticmethod
    def _exit() -> NoReturn:
        # os._exit, not sys.exit: the interpreter would join the pool's
        # threads first, and a request stuck in the database would hold the
        # exit up. Every answer is flushed already.
        logging.shutdown()
        os._exit(0)


def _error(error_class: str, message: str) -> dict[str, Any]:
    return {"error": {"class": error_class, "message": message}}


def serve(handler: Handler) -> NoReturn:
    """Speak the protocol on stdin and stdout until shutdown or end of input."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format=f"%(asctime)s {handler.declarations.name}[%(process)d] %(levelname)s %(message)s")
    _Server(handler).run()
