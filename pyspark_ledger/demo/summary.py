"""``DemoSummary``: everything ``ledger demo`` found, for the summary table, the JSON and the exit status."""
from __future__ import annotations

from dataclasses import dataclass, field

from pyspark_ledger.demo.bookie_killer import Kill
from pyspark_ledger.demo.stream_layout import StreamLayout
from pyspark_ledger.demo.verify import Verdict

MB = 1_000_000


@dataclass(frozen=True)
class DemoSummary:
    """The outcome of one demo run. ``passed`` (the data check) alone decides the exit status."""

    verdict: Verdict
    layout: StreamLayout
    micro_batches: int
    write_s: float
    read_s: float
    elapsed_s: float
    kill: Kill | None
    kill_note: str
    bookies: int
    bookies_alive: int
    bookie_names: dict[str, str] = field(default_factory=dict)
    metadata_uri: str = ""
    data_dir: str | None = None  # kept for inspection, or None (temporary, removed)
    spark_log: str | None = None  # set only when the log is still there after exit
    repair_key_file: str | None = None  # the kept cluster's repair key (None when the cluster was removed)
    pids: dict = field(default_factory=dict)  # {"bookies": [...], "spark_jvm": pid}
    warmup_s: float = 0.0  # from the write query's start to its first ledger
    steady_rows: int = 0  # rows of the micro-batches after the first, which pays for Spark's warm-up
    steady_s: float = 0.0  # and the seconds those micro-batches took
    cluster_file: str | None = None  # run against this cluster (``--cluster``): no sandbox was made or removed
    min_ack_quorum_zones: int = 1  # the write's minAckQuorumZones

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    @property
    def ensemble_changed(self) -> bool:
        return bool(self.layout.changes)

    @property
    def rows_per_s(self) -> float:
        return self.verdict.expected_rows / self.write_s if self.write_s > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.layout.bytes / MB / self.write_s if self.write_s > 0 else 0.0

    @property
    def steady_mb_per_s(self) -> float:
        """MB/s of the micro-batches after the first (bytes apportioned by rows); 0 if there were none."""
        if self.steady_s <= 0 or not self.verdict.expected_rows:
            return 0.0
        return self.layout.bytes * self.steady_rows / self.verdict.expected_rows / MB / self.steady_s

    @property
    def steady_rows_per_s(self) -> float:
        return self.steady_rows / self.steady_s if self.steady_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "passed": self.passed,
            "verdict": self.verdict.to_dict(),
            "problems": self.verdict.problems(),
            "stream": self.layout.to_dict(),
            "micro_batches": self.micro_batches,
            "rows_written": self.verdict.expected_rows,
            "rows_read": self.verdict.rows_read,
            "bytes_written": self.layout.bytes,
            "warmup_seconds": round(self.warmup_s, 3),
            "write_seconds": round(self.write_s, 3),
            "read_seconds": round(self.read_s, 3),
            "elapsed_seconds": round(self.elapsed_s, 3),
            "rows_per_second": round(self.rows_per_s, 1),
            "mb_per_second": round(self.mb_per_s, 3),
            "after_first_batch": {"rows": self.steady_rows, "seconds": round(self.steady_s, 3),
                                  "rows_per_second": round(self.steady_rows_per_s, 1),
                                  "mb_per_second": round(self.steady_mb_per_s, 3)},
            "kill": None if self.kill is None else self.kill.to_dict(),
            "kill_note": self.kill_note,
            "ensemble_changed": self.ensemble_changed,
            "bookies": self.bookies,
            "bookies_alive_at_end": self.bookies_alive,
            "bookie_names": self.bookie_names,
            "metadata_uri": self.metadata_uri,
            "data_dir": self.data_dir,
            "spark_log": self.spark_log,
            "repair_key_file": self.repair_key_file,
            "pids": self.pids,
            "cluster_file": self.cluster_file,
            "min_ack_quorum_zones": self.min_ack_quorum_zones,
        }
