"""The Jepsen-style suite (issue 17 part 5): a history of client operations (``history``), a pure checker of
docs/protocol.md I1-I5 and S1 over it (``checker``), writers (``workers``, ``writer_process``), one run of a
seeded fault schedule (``runner``) and its figures (``figures``). docs/jepsen.md describes them.
"""
