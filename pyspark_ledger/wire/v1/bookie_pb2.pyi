from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATUS_UNSPECIFIED: _ClassVar[Status]
    OK: _ClassVar[Status]
    NO_SUCH_LEDGER: _ClassVar[Status]
    NO_SUCH_ENTRY: _ClassVar[Status]
    FENCED: _ClassVar[Status]
    UNAUTHORIZED: _ClassVar[Status]
    READ_ONLY: _ClassVar[Status]
    TOO_MANY_REQUESTS: _ClassVar[Status]
    BAD_REQUEST: _ClassVar[Status]
    IO_ERROR: _ClassVar[Status]
STATUS_UNSPECIFIED: Status
OK: Status
NO_SUCH_LEDGER: Status
NO_SUCH_ENTRY: Status
FENCED: Status
UNAUTHORIZED: Status
READ_ONLY: Status
TOO_MANY_REQUESTS: Status
BAD_REQUEST: Status
IO_ERROR: Status

class AddRequest(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "master_key", "body", "recovery")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    master_key: bytes
    body: bytes
    recovery: bool
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., master_key: _Optional[bytes] = ..., body: _Optional[bytes] = ..., recovery: _Optional[bool] = ...) -> None: ...

class AddBatch(_message.Message):
    __slots__ = ("adds",)
    ADDS_FIELD_NUMBER: _ClassVar[int]
    adds: _containers.RepeatedCompositeFieldContainer[AddRequest]
    def __init__(self, adds: _Optional[_Iterable[_Union[AddRequest, _Mapping]]] = ...) -> None: ...

class AddResult(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "status", "message")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    status: Status
    message: str
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., status: _Optional[_Union[Status, str]] = ..., message: _Optional[str] = ...) -> None: ...

class AckRun(_message.Message):
    __slots__ = ("ledger_id", "first_entry_id", "last_entry_id")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    first_entry_id: int
    last_entry_id: int
    def __init__(self, ledger_id: _Optional[int] = ..., first_entry_id: _Optional[int] = ..., last_entry_id: _Optional[int] = ...) -> None: ...

class AddResultBatch(_message.Message):
    __slots__ = ("results", "acked")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AddResult]
    acked: _containers.RepeatedCompositeFieldContainer[AckRun]
    def __init__(self, results: _Optional[_Iterable[_Union[AddResult, _Mapping]]] = ..., acked: _Optional[_Iterable[_Union[AckRun, _Mapping]]] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("ledger_id", "first_entry_id", "last_entry_id", "fence", "recovery", "master_key", "max_bytes", "entry_step")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    ENTRY_STEP_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    first_entry_id: int
    last_entry_id: int
    fence: bool
    recovery: bool
    master_key: bytes
    max_bytes: int
    entry_step: int
    def __init__(self, ledger_id: _Optional[int] = ..., first_entry_id: _Optional[int] = ..., last_entry_id: _Optional[int] = ..., fence: _Optional[bool] = ..., recovery: _Optional[bool] = ..., master_key: _Optional[bytes] = ..., max_bytes: _Optional[int] = ..., entry_step: _Optional[int] = ...) -> None: ...

class Entry(_message.Message):
    __slots__ = ("entry_id", "body")
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    entry_id: int
    body: bytes
    def __init__(self, entry_id: _Optional[int] = ..., body: _Optional[bytes] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("status", "message", "entries", "last_add_confirmed", "last_entry_id", "fenced")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LAST_ADD_CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    status: Status
    message: str
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    last_add_confirmed: int
    last_entry_id: int
    fenced: bool
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., message: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., last_add_confirmed: _Optional[int] = ..., last_entry_id: _Optional[int] = ..., fenced: _Optional[bool] = ...) -> None: ...

class ReadLacRequest(_message.Message):
    __slots__ = ("ledger_id", "has_previous", "previous_lac", "timeout_ms", "master_key")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    HAS_PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_LAC_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    has_previous: bool
    previous_lac: int
    timeout_ms: int
    master_key: bytes
    def __init__(self, ledger_id: _Optional[int] = ..., has_previous: _Optional[bool] = ..., previous_lac: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., master_key: _Optional[bytes] = ...) -> None: ...

class ReadLacResponse(_message.Message):
    __slots__ = ("status", "message", "last_add_confirmed", "last_entry_id", "fenced")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAST_ADD_CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    status: Status
    message: str
    last_add_confirmed: int
    last_entry_id: int
    fenced: bool
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., message: _Optional[str] = ..., last_add_confirmed: _Optional[int] = ..., last_entry_id: _Optional[int] = ..., fenced: _Optional[bool] = ...) -> None: ...

class WriteLacRequest(_message.Message):
    __slots__ = ("ledger_id", "master_key", "last_add_confirmed")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    LAST_ADD_CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    master_key: bytes
    last_add_confirmed: int
    def __init__(self, ledger_id: _Optional[int] = ..., master_key: _Optional[bytes] = ..., last_add_confirmed: _Optional[int] = ...) -> None: ...

class WriteLacResponse(_message.Message):
    __slots__ = ("status", "message", "last_add_confirmed", "fenced")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAST_ADD_CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    status: Status
    message: str
    last_add_confirmed: int
    fenced: bool
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., message: _Optional[str] = ..., last_add_confirmed: _Optional[int] = ..., fenced: _Optional[bool] = ...) -> None: ...

class BookieInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BookieInfoResponse(_message.Message):
    __slots__ = ("status", "bookie_id", "free_bytes", "total_bytes", "read_only", "version", "max_entry_bytes")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRY_BYTES_FIELD_NUMBER: _ClassVar[int]
    status: Status
    bookie_id: str
    free_bytes: int
    total_bytes: int
    read_only: bool
    version: str
    max_entry_bytes: int
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., bookie_id: _Optional[str] = ..., free_bytes: _Optional[int] = ..., total_bytes: _Optional[int] = ..., read_only: _Optional[bool] = ..., version: _Optional[str] = ..., max_entry_bytes: _Optional[int] = ...) -> None: ...
