"""Generated wire protocol modules (committed; see tools/generate_proto.py)."""
