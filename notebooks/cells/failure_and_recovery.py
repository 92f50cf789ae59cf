"""Cells of ``03_failure_and_recovery.ipynb``: a bookie killed mid-write, a dead writer's ledger recovered, fencing.

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

from pyspark_ledger import LedgerClient
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

Top: which bookies hold which range of entries, one colour per fragment. Bottom: a close-up around the
ensemble change, one square per (bookie, entry) that stores a copy — the striping of Qw = 2 copies over
E = 3 bookies, and the replacement bookie taking over the killed one's share.
"""),
("code", """
boundary = md.fragments[1].first_entry_id
rows = {bookie_id: row for row, bookie_id in enumerate(sb.bookie_ids)}
colors = plt.cm.tab10.colors
ends = [f.first_entry_id for f in md.fragments[1:]] + [md.last_entry_id + 1]
labels = [name[b] + (" (killed)" if b == victim_id else "") for b in sb.bookie_ids]
fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5.5), height_ratios=[1, 1.3])

for k, ((first, bookies), end) in enumerate(zip(md.fragments, ends)):
    top.barh([rows[b] for b in bookies], end - first, left=first, height=0.6, color=colors[k],
             label=f"fragment {k}: entries {first}..{end - 1}")
top.set(yticks=range(len(labels)), yticklabels=labels, xlabel="entry id", title=f"ledger {ledger_id}: fragments")
top.invert_yaxis()
top.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")

shown = range(boundary - 6, boundary + 6)
for column, entry_id in enumerate(shown):
    k = sum(f.first_entry_id <= entry_id for f in md.fragments) - 1
    for bookie_id in write_set(md, entry_id):
        bottom.add_patch(plt.Rectangle((column + 0.05, rows[bookie_id] - 0.45), 0.9, 0.9, color=colors[k]))
bottom.axvline(boundary - shown.start, color="red", linestyle="--", label="ensemble change")
bottom.set(xlim=(0, len(shown)), ylim=(len(labels) - 0.5, -0.5), yticks=range(len(labels)), yticklabels=labels,
           xticks=[c + 0.5 for c in range(len(shown))], xticklabels=list(shown), xlabel="entry id",
           title="who stores each entry (close-up)")
bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
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
print(f"{name[lost_id]} is gone; before re-replication:")
fragments_table(md)
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
("markdown", """
## When the writer dies

A bookie failure is the writer's problem, and the writer fixes it. But what if the **writer** dies? Its
ledger stays *open*: the metadata does not say where it ends, and some entries may have reached only some
bookies. Every bookie does remember the **last add confirmed (LAC)** it has heard of: each entry the
writer sends carries the id of the highest entry confirmed so far.

Let's run a writer in a separate Python process, let it append as fast as it can, and `kill -9` it.
It prints the id of each entry it sees confirmed.
"""),
("code", """
WRITER = '''
import sys
from pyspark_ledger import LedgerClient

writer = LedgerClient(sys.argv[1]).create_ledger(ensemble_size=3, write_quorum=3, ack_quorum=2,
                                                 password=b"secret")
print("ledger", writer.ledger_id, flush=True)

def report(done):
    if done.exception() is None:
        print("confirmed", done.result(), flush=True)

entry = 0
while True:
    writer.append_async(f"reading {entry}".encode()).add_done_callback(report)
    entry += 1
'''

child = subprocess.Popen([sys.executable, "-c", WRITER, sb.metadata_uri], stdout=subprocess.PIPE, text=True)
dead_ledger = int(child.stdout.readline().split()[1])
for line in child.stdout:
    last_seen = int(line.split()[1])
    if last_seen >= 300:
        break
child.kill()            # SIGKILL: no close(), no goodbye
child.wait()
child.stdout.close()
print(f"writer of ledger {dead_ledger} killed (exit status {child.returncode}) "
      f"after we saw entries 0..{last_seen} confirmed")
"""),
("code", """
md = client.ledger_metadata(dead_ledger)
print(f"state={md.state}  last entry={md.last_entry_id}")
fragments_table(md)
"""),
("markdown", """
## Recovery

Opening the ledger with `recovery=True` makes this client finish the dead writer's job:

1. **Fence**: it tells the ensemble's bookies that the ledger is fenced. A fenced bookie refuses any
   further add to it. Once enough bookies are fenced that no ack quorum can form without one of them, the
   old writer cannot get another entry confirmed — even if it was not really dead.
2. **Read forward**: starting after the highest LAC the bookies report, it reads entry after entry
   until one cannot be found on enough bookies.
3. **Write back** every entry it found to its full write quorum, so each is as safe as a confirmed one.
4. **Close**: write "closed, last entry = …" into the metadata with a compare-and-swap, so if several
   clients recover at once they all agree.

Every entry the writer saw confirmed is kept. The recovered end can be later than what we saw: the
writer kept going while we stopped reading its output, and any entry that reached bookies may be kept.
"""),
("code", """
reader = client.open_ledger(dead_ledger, password=PASSWORD, recovery=True)
md = client.ledger_metadata(dead_ledger)
data = [entry.data for entry in reader.read()]
assert md.state == "CLOSED" and md.last_entry_id >= last_seen
assert data == [f"reading {i}".encode() for i in range(md.last_entry_id + 1)]
print(f"state={md.state}  last entry={md.last_entry_id} (we saw {last_seen} confirmed)  "
      f"{len(data)} entries readable, last {data[-1]!r}")
"""),
("markdown", """
## Fencing: the writer that was only slow

"Dead" is a guess. A writer that paused (a long garbage collection, a network partition) looks dead to
everyone else, and then wakes up. Fencing is what makes the guess safe: after recovery, the old writer's
adds are refused, so nothing can be confirmed past the end that recovery agreed on.

This time the writer lives in this notebook and stays alive. First it writes 100 entries.
"""),
("code", """
slow_writer = client.create_ledger(ensemble_size=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
for i in range(100):
    slow_writer.append(f"order {i}".encode())
print(f"ledger {slow_writer.ledger_id}: the writer has confirmed entries 0..{slow_writer.last_add_confirmed}")
"""),
("markdown", """
A reader may follow an open ledger *without* recovery (`recovery=False`): it fences nothing and disturbs
nobody. It reads up to the LAC the bookies know. The writer sends its LAC along with every entry — so
bookies learn that entry *n* is confirmed when entry *n* + 1 arrives — and, when it goes quiet, on its own
a moment later. `wait_for_entry(n)` waits (a long poll) until entry *n* is readable.
"""),
("code", """
tail = other.open_ledger(slow_writer.ledger_id, password=PASSWORD, recovery=False)
slow_writer.append(b"order 100")
slow_writer.append(b"order 101")
assert tail.wait_for_entry(100)
print("the tailing reader sees the new entries:", [entry.data for entry in tail.read(98, 100)])
"""),
("markdown", """
Now another application decides the writer is dead and recovers the ledger, while the writer is in fact
still there.
"""),
("code", """
recovered = other.open_ledger(slow_writer.ledger_id, password=PASSWORD, recovery=True)
print(f"recovered: state={recovered.metadata.state}  last entry={recovered.metadata.last_entry_id}")

try:
    slow_writer.append(b"order 102")
except LedgerFencedError as exc:
    print(f"the old writer is refused: {type(exc).__name__}: {exc}")
else:
    raise AssertionError("the fenced writer was able to append")
"""),
("markdown", """
The refused add may or may not have reached a bookie before the fence, so the writer cannot know if it is
in the ledger — and it is not: the ledger was closed before it. Every entry the writer had confirmed is
in the closed ledger, which is exactly the guarantee: **a confirmed entry is never lost, and nothing is
confirmed beyond the end that recovery closed the ledger at.**
"""),
("code", """
closed = client.ledger_metadata(slow_writer.ledger_id)
kept = [entry.data for entry in client.open_ledger(slow_writer.ledger_id, password=PASSWORD).read()]
assert closed.last_entry_id == 101 and kept == [f"order {i}".encode() for i in range(102)]
print(f"state={closed.state}  last entry={closed.last_entry_id}  entries kept: {len(kept)}")
"""),
("markdown", """
## Clean up

Stop the clients, then the sandbox: every bookie process, and its temporary data directory.
"""),
("code", """
other.close()
client.close()
sb.stop()
print(sb)
"""),
]
