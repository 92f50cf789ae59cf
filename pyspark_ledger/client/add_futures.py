"""The future of one add, made for less CPU: a plain ``concurrent.futures.Future`` built without its
``Condition``'s eight attribute stores.

A writer hands out one future per entry, and ``Future()`` spent most of its time in
``threading.Condition()``, a Python-level constructor (about a fifth of the caller's CPU per 1 KiB
add: docs/measurements.md, "Client CPU per entry, issue 16"). ``new_future()`` returns an ordinary
``Future`` (same class, same methods, usable with ``concurrent.futures.wait`` and
``asyncio.wrap_future``) whose condition is a ``_LeanCondition``: a re-entrant lock that is its own
condition variable (``threading.Condition``'s ``wait`` and ``notify`` over an ``RLock`` subclass), so the
``with future._condition`` of ``add_done_callback``, ``exception`` and ``result`` costs the lock's C-level
enter and exit only (docs/measurements.md, "Futures and pending adds, session 14"). If this Python's
``Future`` keeps other attributes than the ones filled in
here (checked once, at import), ``new_future`` is simply ``Future``.

``complete(future, value)`` and ``fail(future, error)`` finish a future as ``set_result`` and
``set_exception`` do -- waiters of ``concurrent.futures.wait`` told, threads in ``result()`` woken,
done-callbacks run -- but, for a lean future, under its lock directly and without notifying a
condition nobody waits on (``set_result``'s ``with`` and ``notify_all`` are five Python-level calls,
about half of its cost). A future that is no longer pending (its caller cancelled it) is left as it
is. For any other future they are ``set_result`` / ``set_exception``. ``complete_all(pairs)`` is
``complete(future, value)`` for each pair in one loop (a writer's batch of confirmations), the done-callbacks
run inline as ``Future._invoke_callbacks`` runs them (an ``Exception`` logged, anything else raised): two
Python calls less per future (docs/measurements.md, "Completions in one loop and leaner add encoding, session
15").
"""
from __future__ import annotations

import _thread
import threading
from collections import deque
from concurrent.futures import Future
from concurrent.futures import _base
from typing import Iterator

__all__ = ["complete", "complete_all", "fail", "new_future"]


class _LeanCondition(_thread.RLock):
    """A re-entrant lock that is also its own condition variable: what ``threading.Condition(threading.RLock())``
    offers a ``Future``, in one object. ``with future._condition`` (``add_done_callback``, ``exception``,
    ``result``, ``concurrent.futures.wait``) enters the lock's C-level ``__enter__`` directly, where a
    ``Condition`` runs a Python-level ``__enter__`` and ``__exit__`` around it. ``wait``, ``notify`` and
    ``notify_all`` are ``threading.Condition``'s own, which reach the lock only through ``_is_owned``,
    ``_release_save`` and ``_acquire_restore`` (an RLock's) and the queue of waiting threads. That queue is
    made by the first ``wait`` (most futures of a writer are never waited on: one container less per entry in
    flight for the garbage collector to count and traverse); until then ``_waiters`` is the class's empty
    tuple, which ``notify`` and ``notify_all`` read as no waiter."""

    _waiters = ()

    def wait(self, timeout=None) -> bool:
        if type(self._waiters) is tuple and self._is_owned():  # under the lock, as every use of the queue
            self._waiters = deque()
        return threading.Condition.wait(self, timeout)

    notify = threading.Condition.notify
    notify_all = threading.Condition.notify_all


_FIELDS = {"_condition", "_state", "_result", "_exception", "_waiters", "_done_callbacks"}
_PENDING = getattr(_base, "PENDING", None)
_RUNNING = getattr(_base, "RUNNING", None)
_FINISHED = getattr(_base, "FINISHED", None)
_make = Future.__new__


def _lean_future() -> Future:
    future = _make(Future)
    future._condition = _LeanCondition()
    future._state = _PENDING
    future._result = None
    future._exception = None
    future._waiters = []
    future._done_callbacks = []
    return future


def _matches_this_python() -> bool:
    """``Future.__init__`` fills exactly the fields ``_lean_future`` does, and ``Condition``'s wait and notify
    work on a ``_LeanCondition`` (they reach the lock only through what an RLock offers)."""
    plain = Future()
    if not (set(vars(plain)) == _FIELDS and plain._state == _PENDING and _PENDING is not None):
        return False
    condition = _LeanCondition()
    try:
        with condition:
            condition.notify_all()
            timed_out = not condition.wait(0)
            return timed_out and condition._is_owned() and not condition._waiters
    except (AttributeError, TypeError, RuntimeError):
        return False


def _fail_lean(future: Future, error: BaseException) -> None:
    condition = future._condition
    if type(condition) is not _LeanCondition:
        return _set(future, future.set_exception, error)
    with condition:
        state = future._state
        if state is not _PENDING and state is not _RUNNING:
            return None
        future._exception = error
        future._state = _FINISHED
        for waiter in future._waiters:
            waiter.add_exception(future)
        if condition._waiters:
            condition.notify_all()
    if future._done_callbacks:
        future._invoke_callbacks()
    return None


def _complete_all_lean(pairs: Iterator[tuple[Future, object]]) -> None:
    """Each ``(future, value)`` of ``pairs`` completed, in order, as the module docstring says. If a done-callback
    raises other than an ``Exception`` it propagates, with ``pairs`` consumed up to and including that future (the
    rest of its callbacks not run, as ``Future._invoke_callbacks`` leaves them): the caller keeps the rest."""
    lean, pending, running, finished, log_error = _LeanCondition, _PENDING, _RUNNING, _FINISHED, _base.LOGGER.exception
    for future, value in pairs:
        condition = future._condition
        if type(condition) is not lean:
            _set(future, future.set_result, value)
            continue
        with condition:
            state = future._state
            if state is not pending and state is not running:
                continue  # cancelled by its caller: it stays so
            future._result = value
            future._state = finished
            for waiter in future._waiters:
                waiter.add_result(future)
            if condition._waiters:
                condition.notify_all()
        for callback in future._done_callbacks:
            try:
                callback(future)
            except Exception:  # noqa: BLE001 - as Future._invoke_callbacks: logged, the next callback runs
                log_error("exception calling callback for %r", future)


def _complete_all_plain(pairs: Iterator[tuple[Future, object]]) -> None:
    for future, value in pairs:
        _set(future, future.set_result, value)


def _set(future: Future, setter, value) -> None:
    """``setter(value)`` unless the future is already done (cancelled by its caller)."""
    try:
        setter(value)
    except _base.InvalidStateError:
        if not future.done():
            raise


def _fail_plain(future: Future, error: BaseException) -> None:
    _set(future, future.set_exception, error)


_LEAN = _matches_this_python() and _RUNNING is not None and _FINISHED is not None
new_future = _lean_future if _LEAN else Future
complete_all = _complete_all_lean if _LEAN else _complete_all_plain
fail = _fail_lean if _LEAN else _fail_plain


def complete(future: Future, value: object) -> None:
    """One future completed with ``value`` (``complete_all`` of one pair)."""
    complete_all(((future, value),))
