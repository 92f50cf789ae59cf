"""Cells of ``03_failure_and_recovery.ipynb``, first part: a bookie killed mid-write, the ledger's fragments,
a bookie gone for good and its copies re-replicated. The notebook goes on with the cells of
``failure_and_recovery_writer.py`` (a dead writer's ledger recovered, fencing).

Built by ``notebooks/build_notebooks.py``; edit here, then rebuild.
"""

CELLS = [
("markdown", """
# Failure and recovery

This notebook breaks things on purpose and watches the log store repair them. Everything here is real:
the storage servers are separate processes, and "kill" means `kill -9`.

A few words first:

* A **ledger** is an append-only sequence of **entries** (byte strings) numbered 0, 1, 2, … It has exactly
  one writer. Once it is **closed** it never changes again.
* **Bookies** are the storage servers. Every entry is stored on several of them.
* The **metadata store** (here an SQLite file; ZooKeeper on a real cluster) remembers, for every ledger, which
  bookies hold which entries, and whether the ledger is open or closed. Clients change it only with
  compare-and-swap, so they never overwrite each other's view.
* All the replication logic — which bookies get what, what to do when one fails — runs in the **client**,
  the library your application imports. Bookies just store what they are told.

We start a sandbox: the metadata store and four bookies on this machine.
"""),
("code", """
import subprocess
import sys

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from pyspark_ledger import LedgerClient
from pyspark_ledger.client import BookieClient
from pyspark_ledger.entry import master_key
from pyspark_ledger.errors import LedgerFencedError
from pyspark_ledger.sandbox import Sandbox

sb = Sandbox(bookies=4).start()
client = LedgerClient(sb.metadata_uri)
PASSWORD = b"secret"

# short names for the bookies, whose real ids are host:port
name = {bookie_id: f"bookie {i}" for i, bookie_id in enumerate(sb.bookie_ids)}
pd.DataFrame({"bookie": list(name.values()), "id (host:port)": list(name)})
"""),
("markdown", """
## Ensembles and quorums

When a ledger is created, the client picks an **ensemble**: `ensemble_size` (E) bookies that will store it.
Each entry goes to `write_quorum` (Qw) of them, and the writer calls the entry *confirmed* once
`ack_quorum` (Qa) of those have stored it durably (on disk, fsync'd).

With E > Qw the entries are *striped*: entry *e* goes to the Qw ensemble members starting at position
*e* mod E, so the load spreads over the whole ensemble. Below: E = 3, Qw = 2, Qa = 2 on four bookies,
which leaves one bookie spare.
"""),
("code", """
writer = client.create_ledger(ensemble_size=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
ledger_id = writer.ledger_id
ensemble = writer.metadata.current_fragment.bookies
print(f"ledger {ledger_id}: ensemble = {[name[b] for b in ensemble]}")


def write_set(md, entry_id):
    \"\"\"The bookies that store entry_id: Qw consecutive members of its ensemble, starting at entry_id mod E.\"\"\"
    members = md.ensemble_for(entry_id)
    return [members[(entry_id + i) % md.ensemble_size] for i in range(md.write_quorum)]


pd.DataFrame({"entry": e, "stored on": ", ".join(name[b] for b in write_set(writer.metadata, e))}
             for e in range(6))
"""),
("markdown", """
## Kill a bookie while writing

We queue 1,200 entries without waiting for each one (`append_async` returns a future), and halfway
through we `kill -9` one bookie of the ensemble. Entries sent to it get no answer. The writer then:

1. picks a replacement bookie that is not in the ensemble,
2. stores a new **fragment** in the metadata: "from entry *n* on, the ensemble is …", where *n* is the first
   entry not yet confirmed,
3. re-sends the unconfirmed entries to the new ensemble.

The application only sees a short pause: every future still resolves, in order.
"""),
("code", """
victim_id = ensemble[1]
victim = sb.bookie_ids.index(victim_id)

futures = []
for i in range(1200):
    futures.append(writer.append_async(f"event {i}".encode()))
    if i == 400:                    # entries up to 400 are queued, many still in flight
        futures[200].result()       # wait until entry 200 is confirmed ...
        sb.kill_bookie(victim)      # ... then kill -9 a bookie of the ensemble
        print(f"killed {name[victim_id]} after queueing entry {i}")

confirmed = [future.result() for future in futures]
assert confirmed == list(range(1200))
writer.close()
print(f"all {len(confirmed)} entries confirmed, in order; ledger closed")
"""),
("markdown", """
The ledger's metadata now has two fragments. Closing the ledger recorded its last entry and its length
(in bytes), so every reader agrees on where it ends.
"""),
("code", """
def fragments_table(md):
    \"\"\"One row per fragment: the entries it covers and its ensemble.\"\"\"
    ends = [f.first_entry_id - 1 for f in md.fragments[1:]] + [md.last_entry_id if md.is_closed else "(open)"]
    return pd.DataFrame({"first entry": first, "last entry": end, "ensemble": ", ".join(name[b] for b in bookies)}
                        for (first, bookies), end in zip(md.fragments, ends))


md = client.ledger_metadata(ledger_id)
print(f"state={md.state}  last entry={md.last_entry_id}  length={md.length} bytes  "
      f"E={md.ensemble_size} Qw={md.write_quorum} Qa={md.ack_quorum}")
fragments_table(md)
"""),
("markdown", """
### The ledger as a picture

Top: which bookies hold which range of entries, one colour per fragment (each fragment has its own
ensemble of E bookies). Bottom: a close-up around the ensemble change, one square per copy of an entry:
each column has Qw = 2 squares, striped over the E = 3 bookies of its fragment, and the replacement
bookie takes over the killed one's share. The legends say what each colour means.
"""),
("code", """
boundary = md.fragments[1].first_entry_id
rows = {bookie_id: row for row, bookie_id in enumerate(sb.bookie_ids)}
colors = plt.cm.tab10.colors
ends = [f.first_entry_id for f in md.fragments[1:]] + [md.last_entry_id + 1]
labels = [name[b] + (" (killed)" if b == victim_id else "") for b in sb.bookie_ids]
replacement_id = next(b for b in md.fragments[1].bookies if b not in md.fragments[0].bookies)


def fragment_meaning(k):
    if k == 0:
        return "the ensemble chosen at creation"
    return f"after the ensemble change: {name[replacement_id]} replaces {name[victim_id]}"


fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), height_ratios=[1, 1.3])
fig.suptitle(f"ledger {ledger_id}:  E = {md.ensemble_size} bookies per ensemble,  Qw = {md.write_quorum} copies "
             f"of each entry,  Qa = {md.ack_quorum} copies on disk before an entry is confirmed", fontsize="medium")

for k, ((first, bookies), end) in enumerate(zip(md.fragments, ends)):
    top.barh([rows[b] for b in bookies], end - first, left=first, height=0.6, color=colors[k],
             label=f"fragment {k}, entries {first}..{end - 1}:\\n{fragment_meaning(k)}")
top.set(yticks=range(len(labels)), yticklabels=labels, xlabel="entry id",
        title=f"fragments: which bookies hold which entries (E = {md.ensemble_size} bookies each)")
top.invert_yaxis()
top.legend(title="colour = fragment", loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")

shown = range(boundary - 6, boundary + 6)
for column, entry_id in enumerate(shown):
    k = sum(f.first_entry_id <= entry_id for f in md.fragments) - 1
    for bookie_id in write_set(md, entry_id):
        bottom.add_patch(plt.Rectangle((column + 0.05, rows[bookie_id] - 0.45), 0.9, 0.9, color=colors[k]))
bottom.axvline(boundary - shown.start, color="red", linestyle="--")
bottom.set(xlim=(0, len(shown)), ylim=(len(labels) - 0.5, -0.5), yticks=range(len(labels)), yticklabels=labels,
           xticks=[c + 0.5 for c in range(len(shown))], xticklabels=list(shown), xlabel="entry id",
           title=f"close-up: each column is one entry, its Qw = {md.write_quorum} squares its copies")
bottom.legend(handles=[Patch(color=colors[k], label=f"a copy of an entry of fragment {k}")
                       for k in range(len(md.fragments))]
              + [Line2D([], [], color="red", linestyle="--", label=f"ensemble change at entry {boundary}"),
                 Patch(color="white", label=f"(confirmed once Qa = {md.ack_quorum} of\\nits copies are on disk)")],
              title="colour = fragment", loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
for axes in (top, bottom):
    axes.get_yticklabels()[victim].set_color("red")
fig.tight_layout()
plt.show()
"""),
("markdown", """
## Read it back

A brand-new client knows nothing but the metadata store. It reads every entry back while the killed
bookie is still down: each entry has another copy, and the reader moves on to it.
"""),
("code", """
other = LedgerClient(sb.metadata_uri)
reader = other.open_ledger(ledger_id, password=PASSWORD)
data = [entry.data for entry in reader.read()]
assert data == [f"event {i}".encode() for i in range(1200)]
print(f"read {len(data)} entries with {name[victim_id]} down: first {data[0]!r}, last {data[-1]!r}")
"""),
("markdown", """
The killed bookie restarts with the same id and its data (everything it acknowledged was on disk).
Fragment 0 still names it, so it serves reads again; new ledgers may use it too.
"""),
("code", """
sb.start_bookie(victim)
print("registered bookies:", [name[b] for b in client.bookies()])
"""),
("markdown", """
## When a bookie is gone for good

The writer replaced the killed bookie only for the entries that came *after* the kill. Fragment 0 still
names its original ensemble, and that was fine because the killed bookie came back with its data. If its
disk had died instead, every entry of fragment 0 it held would be left with one copy (Qw = 2) until
something copies it again: one more failure and it is gone.

That something is **re-replication**. For every *sealed* fragment (every one but the last of a ledger still
being written) that names a lost bookie, it copies each entry the lost bookie held from a surviving replica
— checking the entry's digest, so a damaged copy is never spread — to a bookie outside that fragment's
ensemble, waits until all copies are acknowledged, and only then swaps the new bookie into the fragment with
one compare-and-set of the metadata. From a shell: `ledger ledgers underreplicated` lists the ledgers
that need it, `ledger ledgers rereplicate --all --password …` does it.

Let's say the disk of a bookie that is in both fragments just died.
"""),
("code", """
md = client.ledger_metadata(ledger_id)
lost_id = next(b for b in md.fragments[0].bookies if b in md.fragments[1].bookies)
sb.kill_bookie(sb.bookie_ids.index(lost_id))
before = md
print(f"{name[lost_id]} is gone; before re-replication:")
fragments_table(before)
"""),
("code", """
report = client.rereplicate(ledger_id, password=PASSWORD, lost_bookies=[lost_id])
for move in report.replaced:
    print(f"entries {move['first_entry_id']}..{move['last_entry_id']}: {name[move['lost']]} -> "
          f"{name[move['replacement']]}, {move['entries']} entries copied")
md = client.ledger_metadata(ledger_id)
assert all(lost_id not in f.bookies for f in md.fragments)
data = [entry.data for entry in other.open_ledger(ledger_id, password=PASSWORD).read()]
assert data == [f"event {i}".encode() for i in range(1200)]
fragments_table(md)
"""),
("markdown", """
### Where the lost bookie's copies went

Each square below is one (bookie, fragment) pair, with the number of that fragment's entries the bookie
stores. Before: the lost bookie's share of each fragment is gone, so those entries have a single copy
left. After: re-replication has copied exactly that share, entry by entry, to one bookie outside the
fragment's ensemble, and every other copy stayed where it was.
"""),
("code", """
def fragment_range(md, k):
    \"\"\"First and last entry of fragment k.\"\"\"
    last = md.fragments[k + 1].first_entry_id - 1 if k + 1 < len(md.fragments) else md.last_entry_id
    return md.fragments[k].first_entry_id, last


def copies(md, bookie_id, k):
    \"\"\"How many entries of fragment k have a copy on bookie_id.\"\"\"
    first, last = fragment_range(md, k)
    return sum(bookie_id in write_set(md, e) for e in range(first, last + 1))


received = {(move["replacement"], move["first_entry_id"]): move["entries"] for move in report.replaced}
KEPT, LOST, COPIED, EMPTY = "tab:blue", "tab:red", "tab:green", "whitesmoke"
fig, panels = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
for panel, state, title in ((panels[0], before, f"before: {name[lost_id]}'s disk is gone"),
                            (panels[1], md, "after re-replication")):
    for k, fragment in enumerate(state.fragments):
        for bookie_id in sb.bookie_ids:
            n = copies(state, bookie_id, k)
            if state is before and bookie_id == lost_id:
                color, text = LOST, f"{n} lost"
            elif state is md and (bookie_id, fragment.first_entry_id) in received:
                assert n == received[bookie_id, fragment.first_entry_id]
                color, text = COPIED, f"{n} copied here"
            else:
                color, text = (KEPT, str(n)) if n else (EMPTY, "-")
            panel.add_patch(plt.Rectangle((k + 0.04, rows[bookie_id] - 0.46), 0.92, 0.92, color=color))
            panel.text(k + 0.5, rows[bookie_id], text, ha="center", va="center",
                       color="grey" if color == EMPTY else "white", fontweight="bold")
    panel.set(xlim=(0, len(state.fragments)), ylim=(len(rows) - 0.5, -0.5), title=title,
              xticks=[k + 0.5 for k in range(len(state.fragments))],
              xticklabels=["fragment {}\\nentries {}..{}".format(k, *fragment_range(state, k))
                           for k in range(len(state.fragments))])
    panel.tick_params(length=0)
panels[0].set(yticks=range(len(rows)), yticklabels=[name[b] + (" (lost)" if b == lost_id else "") for b in rows])
fig.legend(handles=[Patch(color=KEPT, label="copies that stayed where they were"),
                    Patch(color=LOST, label="copies lost with the bookie's disk"),
                    Patch(color=COPIED, label="copies re-replication made on this bookie"),
                    Patch(color=EMPTY, label="not in the fragment's ensemble")],
           loc="lower center", ncol=2, fontsize="small", frameon=False)
fig.suptitle(f"ledger {ledger_id}: entries of each fragment stored per bookie "
             f"(Qw = {md.write_quorum} copies of every entry)", fontsize="medium")
fig.tight_layout(rect=(0, 0.14, 1, 1))
plt.show()
"""),
("markdown", """
No fragment names the lost bookie any more, and every entry has Qw copies again. (A real operator would now
replace the machine; here we restart the bookie so the rest of the notebook has four. Its old copies are
no longer named by the metadata, so nobody reads them, and its garbage collector deletes them once the
ledger has named other bookies for `--gc-overreplicated-wait`, a day by default. Had the *writer* been dead
too, its ledger would still be open and its last fragment left to a writer that never comes: `ledger
autorecovery` recovers such a ledger after `--open-ledger-grace` seconds, then repairs it.)
"""),
("code", """
sb.start_bookie(sb.bookie_ids.index(lost_id))
print("registered bookies:", [name[b] for b in client.bookies()])
"""),
]
