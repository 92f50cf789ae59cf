"""``bench/fsync_trace.py`` cuts a slow fdatasync of a kernel trace into its device and scheduling parts."""
from __future__ import annotations

from bench.fsync_trace import split

TRACE = """\
  python 7/8 10.000000: ext4:ext4_sync_file_enter: dev 254,0 ino 5 parent 4 datasync 1
  python 7/8 10.001000: block:block_rq_issue: 254,0 WS 8192 () 1000 + 16 0x2,0,4 [python]
  python 9/9 10.002000: block:block_rq_complete: 254,0 WS () 1000 + 16 0x2,0,4 [0]
  python 7/8 10.002500: block:block_rq_issue: 254,0 WSM 4096 () 2000 + 8 0x2,0,4 [python]
  python 9/9 10.003000: block:block_rq_complete: 254,0 WSM () 2000 + 8 0x2,0,4 [0]
  kworker/1:0H-kb 24/24 10.010000: block:block_rq_issue: 254,0 FF 0 () 0 + 0 0x0,0,0 [kworker/1:0H]
  python 9/9 10.011000: block:block_rq_complete: 254,0 FF () 18446744073709551615 + 0 0x0,0,0 [0]
  python 7/8 10.013000: ext4:ext4_sync_file_exit: dev 254,0 ino 5 ret 0
  python 7/8 10.020000: ext4:ext4_sync_file_enter: dev 254,0 ino 5 parent 4 datasync 1
  python 7/8 10.020500: ext4:ext4_sync_file_exit: dev 254,0 ino 5 ret 0
  python 99/99 10.030000: ext4:ext4_sync_file_enter: dev 254,0 ino 6 parent 4 datasync 1
  python 99/99 10.090000: ext4:ext4_sync_file_exit: dev 254,0 ino 6 ret 0
"""


def test_a_slow_fdatasync_is_cut_into_device_and_waiting_parts():
    result = split(TRACE.splitlines(), {7}, 0.005)
    assert result["fdatasyncs"] == 2 and result["slower_than_5_ms"] == 1  # pid 99 is not asked for
    parts = result["mean_ms_per_slow_one"]
    assert parts["CPU and queueing before the data write"] == 1.0
    assert parts["data write on the device"] == 1.0
    assert parts["inode write on the device"] == 0.5
    assert parts["wait until the cache flush is dispatched"] == 7.0
    assert parts["cache flush on the device"] == 1.0
    assert parts["after the flush (thread woken and run)"] == 2.0
    assert round(sum(parts.values()), 3) == 13.0
