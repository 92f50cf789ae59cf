"""Which stream reader class the running Spark can drive (``DefaultSource.streamReader``).

Spark 4.2+ asks Python stream readers for ``latestOffset(start, limit)``
(admission control, Trigger.AvailableNow): it gets
``stream_admission.AdmissionControlledStreamReader``. Older Sparks get
``stream_reader.LedgerStreamReader``, which reads every confirmed entry at each
micro-batch, unless a per-trigger limit is asked for, which they cannot
honour: the option is refused on the driver, naming Spark 4.2.

Its own module, above the readers it chooses from: ``compat`` (the feature
checks) sits below the readers, which use it through ``schema``.
"""
from __future__ import annotations

from typing import Any

from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.spark import compat

STREAMING_LIMIT_OPTIONS = ("maxEntriesPerTrigger", "maxBytesPerTrigger")


def stream_reader_class(options: Any) -> type:
    """The stream reader class this Spark can drive with these ``ReadOptions`` (see the module docstring)."""
    if compat.has_admission_control():
        from pyspark_ledger.spark.stream_admission import AdmissionControlledStreamReader  # needs Spark 4.2+

        return AdmissionControlledStreamReader
    limits = [name for name, value in zip(STREAMING_LIMIT_OPTIONS,
                                          (options.max_entries_per_trigger, options.max_bytes_per_trigger))
              if value is not None]
    if limits:
        raise InvalidConfigurationError(
            f"option {' and '.join(limits)} needs Spark {compat.ADMISSION_CONTROL_SINCE} or later (admission "
            f"control of Python stream readers); this is Spark {compat.spark_version()}, where each micro-batch "
            f"reads every confirmed entry: remove {' and '.join(limits)}, or upgrade Spark")
    from pyspark_ledger.spark.stream_reader import LedgerStreamReader

    return LedgerStreamReader
