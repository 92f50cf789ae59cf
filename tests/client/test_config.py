"""ClientConfig: documented defaults, and a clear error for every bad value."""
from __future__ import annotations

import dataclasses

import pytest

from pyspark_ledger import ClientConfig, LedgerClient
from pyspark_ledger.errors import InvalidArgumentError, InvalidConfigurationError


def test_defaults_are_valid_and_frozen():
    config = ClientConfig()
    assert config.add_timeout_s > 0 and config.max_inflight_adds > 0 and config.speculative_read_delay_s > 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.add_timeout_s = 1.0
    assert dataclasses.replace(config, speculative_read_delay_s=None).speculative_read_delay_s is None


@pytest.mark.parametrize("field, value, message", [
    ("add_timeout_s", 0, "add_timeout_s must be a number of seconds > 0"),
    ("read_timeout_s", "5", "read_timeout_s"),
    ("speculative_read_delay_s", -1.0, "or None to turn speculative reads off"),
    ("max_inflight_adds", 0, "max_inflight_adds must be a positive integer"),
    ("read_batch_entries", 2.5, "read_batch_entries"),
    ("max_entry_bytes", 64, "at least 128"),
    ("placement", object(), "placement must implement choose_ensemble"),
    ("placement_seed", "seven", "placement_seed"),
    ("recovery_read_window", 0, "recovery_read_window must be an integer from 1 to 8192"),
    ("recovery_read_window", 8193, "from 1 to 8192"),
    ("recovery_read_window", 4.0, "recovery_read_window"),
])
def test_bad_values_are_named(field, value, message):
    with pytest.raises(InvalidConfigurationError, match=message) as raised:
        ClientConfig(**{field: value})
    assert isinstance(raised.value, ValueError)


def test_client_refuses_what_is_not_a_uri_or_config(tmp_path):
    with pytest.raises(InvalidConfigurationError, match="sqlite:///"):
        LedgerClient(42)
    with pytest.raises(InvalidArgumentError, match="ClientConfig"):  # a wrong argument, not a bad setting
        LedgerClient(f"sqlite:///{tmp_path}/m.db", config={"add_timeout_s": 1})
