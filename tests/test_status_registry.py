"""The status registry: every bookie status, on the wire or not, raises one exception class, said once."""
from __future__ import annotations

import ast
import pathlib

import grpc
import pytest

import pyspark_ledger
from pyspark_ledger import errors
from pyspark_ledger.client.rpc_errors import translate_rpc_error
from pyspark_ledger.errors import (STATUS_ERRORS, BookieError, BookieUnavailableError, InternalError,
                                   InvalidArgumentError, LedgerFencedError, ReadOnlyBookieError, TooManyRequestsError,
                                   UnauthorizedError, error_for_status)
from pyspark_ledger.protocol.add_answers import AddAction, action_for_status
from pyspark_ledger.status import BookieStatus, as_status
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

PACKAGE = pathlib.Path(pyspark_ledger.__file__).parent
SOURCES = sorted(PACKAGE.rglob("*.py")) + sorted((PACKAGE.parent / "bookie_server").rglob("*.py"))


def registry_keys() -> list[str]:
    """The member names written as keys of the STATUS_ERRORS literal, in order, repeats included."""
    tree = ast.parse(pathlib.Path(errors.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "STATUS_ERRORS":
            return [key.attr for key in node.value.keys]
    raise AssertionError("no STATUS_ERRORS literal in errors.py")


def test_the_enum_holds_every_wire_status_with_its_number():
    wire = dict(pb.Status.items())
    assert {s.name: s.value for s in BookieStatus if s.on_wire} == wire
    assert all(s.value < 0 for s in BookieStatus if s.name not in wire)


@pytest.mark.parametrize("name, number", pb.Status.items())
def test_every_wire_status_has_exactly_one_registry_entry(name, number):
    assert registry_keys().count(name) == 1
    assert as_status(number) is BookieStatus[name]


def test_every_transport_condition_has_exactly_one_registry_entry():
    keys = registry_keys()
    assert sorted(keys) == sorted(s.name for s in BookieStatus)
    assert set(STATUS_ERRORS) == set(BookieStatus)


def test_unknown_wire_numbers_read_as_unspecified_and_never_as_a_transport_condition():
    assert as_status(99) is BookieStatus.STATUS_UNSPECIFIED
    assert as_status(-1) is BookieStatus.STATUS_UNSPECIFIED


@pytest.mark.parametrize("status", [s for s in BookieStatus if s is not BookieStatus.OK], ids=lambda s: s.name)
def test_each_status_raises_its_registered_class(status):
    entry = STATUS_ERRORS[status]
    error = error_for_status(status, "what happened", bookie_id="b1")
    assert type(error) is entry.error and str(error) == "what happened"
    if isinstance(error, BookieError):
        assert (error.status, error.bookie_id, error.retriable) == (status, "b1", entry.retriable)


def test_the_chosen_classes_and_retries():
    expected = {"FENCED": (LedgerFencedError, False), "UNAUTHORIZED": (UnauthorizedError, False),
                "TOO_MANY_REQUESTS": (TooManyRequestsError, True), "READ_ONLY": (ReadOnlyBookieError, True),
                "IO_ERROR": (BookieError, True), "BAD_REQUEST": (BookieError, False),
                "UNAVAILABLE": (BookieUnavailableError, True), "TIMEOUT": (BookieUnavailableError, True),
                "CLOSED": (BookieUnavailableError, False)}
    for name, (error, retriable) in expected.items():
        assert (STATUS_ERRORS[BookieStatus[name]].error, STATUS_ERRORS[BookieStatus[name]].retriable) == \
            (error, retriable), name


def test_ok_is_no_error():
    assert STATUS_ERRORS[BookieStatus.OK].error is None
    with pytest.raises(InternalError):
        error_for_status(BookieStatus.OK, "fine")


def test_the_writers_decisions_agree_with_the_registry():
    """A status the writer re-sends is retriable; one that stops the writer is not."""
    for status in BookieStatus:
        action = action_for_status(status.name)
        if action is AddAction.RETRY:
            assert STATUS_ERRORS[status].retriable, status.name
        if action in (AddAction.FENCED, AddAction.UNAUTHORIZED):
            assert not STATUS_ERRORS[status].retriable, status.name


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "details"


@pytest.mark.parametrize("code, status", [(grpc.StatusCode.UNAVAILABLE, BookieStatus.UNAVAILABLE),
                                          (grpc.StatusCode.DEADLINE_EXCEEDED, BookieStatus.TIMEOUT),
                                          (grpc.StatusCode.CANCELLED, BookieStatus.CANCELLED),
                                          (grpc.StatusCode.RESOURCE_EXHAUSTED, BookieStatus.RPC_FAILED),
                                          (grpc.StatusCode.INTERNAL, BookieStatus.RPC_FAILED)])
def test_grpc_failures_go_through_the_registry(code, status):
    error = translate_rpc_error(FakeRpcError(code), "b1", "read of ledger 4")
    assert (type(error), error.status, error.bookie_id) == (STATUS_ERRORS[status].error, status, "b1")
    assert str(error).startswith("read of ledger 4 on bookie b1 failed: ")
    if status is BookieStatus.RPC_FAILED:
        assert code.name in str(error)


def bookie_error_calls():
    """(where, class name, status name) of each call ``SomeError(..., status=BookieStatus.NAME)`` in the source."""
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            for keyword in node.keywords:
                value = keyword.value
                if keyword.arg == "status" and isinstance(value, ast.Attribute) \
                        and getattr(value.value, "id", "") == "BookieStatus":
                    yield f"{path.name}:{node.lineno}", node.func.id, value.attr


def test_errors_built_by_hand_carry_a_status_of_their_own_class():
    calls = list(bookie_error_calls())
    assert len(calls) >= 15
    for where, name, status in calls:
        assert STATUS_ERRORS[BookieStatus[status]].error is getattr(errors, name), (where, name, status)


def test_no_status_is_given_as_a_string():
    given = [f"{path.name}:{node.lineno}" for path in SOURCES for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.keyword) and node.arg == "status" and isinstance(node.value, ast.Constant)
             and isinstance(node.value.value, str)]
    assert given == [], f"status given as a string (use a BookieStatus member) at {given}"


def test_a_string_status_is_refused_naming_the_member():
    with pytest.raises(InvalidArgumentError, match=r"BookieStatus\.TIMEOUT.*not the string 'TIMEOUT'"):
        BookieUnavailableError("slow", status="TIMEOUT")
    assert BookieUnavailableError("slow", status=BookieStatus.TIMEOUT).status is BookieStatus.TIMEOUT
