"""``SpaceReport``: what a bookie publishes about its disk space, and when, against a real SQLite store.

The measure is given (figures chosen by the test) so that the rule is seen
exactly: the first registration carries the space; a round updates the
registration only when a figure moved by 1 MiB or more; a measure that fails
publishes nothing and the next good one is published.
"""
from __future__ import annotations

from bookie_server.space_report import MIN_CHANGE_BYTES, SpaceReport
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.metadata.bookie_space import Space, read_space

GIB = 1024**3


class Figures:
    """A measure returning what the test set last (or raising the OSError it set)."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.error: OSError | None = None

    def __call__(self) -> dict[str, Space]:
        if self.error is not None:
            raise self.error
        return {"journal": Space(self.free, 10 * GIB), "ledgers": Space(2 * GIB, 20 * GIB)}


def test_the_registration_carries_the_space_and_follows_moves_of_a_mib_or_more(tmp_path):
    with open_metadata_store(f"sqlite:///{tmp_path}/metadata.db", create=True) as store:
        figures = Figures(free=5 * GIB)
        report = SpaceReport(figures, interval_s=3600)  # rounds run by hand below

        def published():
            return read_space(store.bookies()["b1"].info)

        registration = store.register_bookie("b1", report.info({"port": 3181}))
        report.start(registration)
        try:
            assert store.bookies()["b1"].info["port"] == 3181
            assert published() == {"journal": Space(5 * GIB, 10 * GIB), "ledgers": Space(2 * GIB, 20 * GIB)}

            figures.free -= MIN_CHANGE_BYTES - 1
            report.refresh()
            assert published()["journal"].free_bytes == 5 * GIB, "a move under 1 MiB was written"
            figures.free -= 1  # now 1 MiB below what was published
            report.refresh()
            assert published()["journal"].free_bytes == 5 * GIB - MIN_CHANGE_BYTES

            figures.error = OSError(5, "Input/output error")
            report.refresh()  # logged; nothing published, nothing raised
            assert published()["journal"].free_bytes == 5 * GIB - MIN_CHANGE_BYTES
            figures.error, figures.free = None, GIB
            report.refresh()
            assert published()["journal"] == Space(GIB, 10 * GIB)
            assert store.bookies()["b1"].info["port"] == 3181, "the rest of the info was kept"
        finally:
            report.stop()
            registration.close()
