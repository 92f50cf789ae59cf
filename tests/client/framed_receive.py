"""For tests of the framed add stream: whether code runs inside ``FramedCall._received``, the protocol handing over
the bytes it received (an answer taken there woke no task of its own)."""
from __future__ import annotations

import sys

from pyspark_ledger.client import framed_call


def in_framed_receive() -> bool:
    """Whether the calling code runs inside ``FramedCall._received``."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code is not framed_call.FramedCall._received.__code__:
        frame = frame.f_back
    return frame is not None
