"""A scripted client of a bookie's framed port (docs/protocol.md W11, W12): raw frames in, frames out."""
from __future__ import annotations

import socket

from pyspark_ledger.wire import frames
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb


class Framed:
    """One connection to the framed port on 127.0.0.1:``port``; ``hello`` asks for an add stream (answers as runs)
    by default, or a read connection with ``frames.READS``."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.reader = frames.FrameReader(64 << 20)
        self.received: list = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def next_frame(self) -> tuple[Kind, bytes]:
        while not self.received:
            data = self.sock.recv(1 << 20)
            if not data:
                raise EOFError("the bookie closed the connection")
            self.received += self.reader.feed(data)
        return self.received.pop(0)

    def hello(self, flags: int = frames.ANSWER_RUNS) -> tuple[int, int, str]:
        self.send(frames.hello(frames.VERSION, flags))
        kind, payload = self.next_frame()
        assert kind is Kind.WELCOME, (kind, payload)
        return frames.parse_welcome(payload, flags)

    def end_frame(self) -> tuple[int, str]:
        """Skips answers up to the END; its (status, message)."""
        while True:
            kind, payload = self.next_frame()
            if kind is Kind.END:
                return frames.parse_end(payload)

    def answered(self, count: int) -> dict[int, int]:
        """entry id -> status of the next ``count`` add answers."""
        statuses: dict[int, int] = {}
        while len(statuses) < count:
            kind, payload = self.next_frame()
            assert kind is Kind.ANSWERS, (kind, payload)
            message = pb.AddResultBatch.FromString(payload)
            for run in message.acked:
                for entry_id in range(run.first_entry_id, run.last_entry_id + 1):
                    statuses[entry_id] = pb.OK
            for result in message.results:
                statuses[result.entry_id] = result.status
        return statuses

    def answer(self) -> tuple[int, bytes]:
        """(request id, ReadResponse bytes) of the next frame, which must be a READ_ANSWER."""
        kind, payload = self.next_frame()
        assert kind is Kind.READ_ANSWER, (kind, payload)
        request_id, message = frames.split_request_id(payload)
        return request_id, bytes(message)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Framed":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
