"""The pure protocol core of the replication client: events in, decisions out.

No gRPC, no kazoo, no files, threads or clocks; randomness only through an
injected ``random.Random``. The I/O layer (``pyspark_ledger.client``) executes
the decisions and feeds the answers back.

* ``schedule``     -- round-robin write sets (which bookies store an entry)
* ``answers``      -- positive / negative / unknown bookie answers
* ``coverage``     -- quorum coverage and the per-entry present/absent/unknown rule
* ``add_tracker``  -- the writer's pending adds, in-order confirmation, ensemble changes
* ``placement``    -- choosing and repairing ensembles
* ``zone_spread``  -- how an ensemble's write quorums spread over zones and racks (docs/protocol.md P1, P2)
* ``zone_placement`` -- zone- and rack-aware ensembles and replacements (P1-P4)
* ``ledger_rules`` -- metadata transitions and CAS-conflict resolutions
* ``reads``        -- reading one entry from its replicas; the LAC read
* ``stripes``      -- striped ledgers (E > Qw): a batch read as one strided read per write set
* ``recovery``     -- the recovery state machine (fence, read forward, write back, close)
* ``recovery_actions`` -- the actions recovery returns to its caller
"""
