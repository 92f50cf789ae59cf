"""The ``ledger`` command."""
