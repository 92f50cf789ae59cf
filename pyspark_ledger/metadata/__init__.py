"""Metadata stores (ZooKeeper, SQLite) behind one interface; see ``store.py``."""
