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
("markdown", """
## When the writer dies

A bookie failure is the writer's problem, and the writer fixes it. But what if the **writer** dies? Its
ledger stays *open*: the metadata does not say where it ends, and some entries may have reached only some
bookies. Every bookie does remember the **last add confirmed (LAC)** it has heard of: each entry the
writer sends carries the id of the highest entry confirmed so far.

Let's run a writer in a separate Python process, let it append as fast as it can with up to 50 entries in
flight (as a busy application would), and `kill -9` it. It prints the id of each entry it sees confirmed.
"""),
("code", """
WRITER = '''
import sys
from collections import deque
from pyspark_ledger import LedgerClient

writer = LedgerClient(sys.argv[1]).create_ledger(ensemble_size=3, write_quorum=3, ack_quorum=2,
                                                 password=b"secret")
print("ledger", writer.ledger_id, flush=True)

def report(done):
    if done.exception() is None:
        print("confirmed", done.result(), flush=True)

entry, in_flight = 0, deque()
while True:
    in_flight.append(writer.append_async(f"reading {entry}".encode()))
    in_flight[-1].add_done_callback(report)
    if len(in_flight) > 50:
        in_flight.popleft().result()
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
The metadata knows nothing about the end. The bookies know more: asked directly (a `BookieClient` talks to
one bookie; reading a ledger's LAC needs its key), each says the highest LAC it has heard of and the last
entry it holds. Entries past the LAC were on their way when the writer died: each may have reached all,
some or none of the bookies, and the bookies may disagree about where the ledger ends.
"""),
("code", """
key = master_key(PASSWORD)
dead_ensemble = md.current_fragment.bookies


def bookie_view(ledger):
    \"\"\"bookie id -> (the LAC it has heard of, the last entry it holds) for the ledger's ensemble.\"\"\"
    view = {}
    for bookie_id in dead_ensemble:
        with BookieClient(bookie_id) as bookie:
            answer = bookie.read_lac(ledger, master_key=key)
        view[bookie_id] = (answer.last_add_confirmed, answer.last_entry_id)
    return view


found = bookie_view(dead_ledger)
pd.DataFrame({"bookie": name[b], "LAC it has heard of": lac, "last entry it holds": last}
             for b, (lac, last) in found.items())
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
### What recovery found and closed

One row per bookie of the ensemble, around the end of the ledger (every bookie held all the entries
further left). Recovery started reading after the highest LAC any bookie reported, found each next entry
on at least one bookie, wrote it back to all Qw = 3 of them, and stopped at the first entry that enough
bookies said they did not have; the ledger is closed at the entry before.
"""),
("code", """
from itertools import groupby

max_lac = max(lac for lac, _ in found.values())
end = md.last_entry_id
written_back = range(max_lac + 1, end + 1)
after = bookie_view(dead_ledger)
assert all(last >= end for _, last in after.values())  # every bookie now holds every entry up to the end

STATUS = {  # what one (bookie, entry) was, and its colour
    "held": ("held before the crash, at or below the LAC: left alone", "tab:blue"),
    "rewritten": ("held, past the LAC: found by recovery and written again", "tab:cyan"),
    "filled": ("missing here: written back by recovery", "tab:green"),
    "gap": ("missing here, at or below the LAC: confirmed elsewhere", "tab:orange"),
    "beyond": ("held, past the recovered end: on too few bookies to have been confirmed; never read", "tab:red"),
}


def status(entry_id, last_held):
    \"\"\"A bookie receives a ledger's entries in order, so it held 0..last_held.\"\"\"
    held = entry_id <= last_held
    if entry_id <= max_lac:
        return "held" if held else "gap"
    if entry_id <= end:
        return "rewritten" if held else "filled"
    return "beyond" if held else None


lo = max(0, min(max_lac, *(last for _, last in found.values())) - 20)
hi = max(end, *(last for _, last in found.values())) + 6
fig, ax = plt.subplots(figsize=(10, 4))
for row, bookie_id in enumerate(dead_ensemble):
    last_held = found[bookie_id][1]
    for kind, run in groupby(range(lo, hi), key=lambda e: status(e, last_held)):
        run = list(run)
        if kind is not None:
            ax.barh(row, len(run), left=run[0], height=0.6, color=STATUS[kind][1])
    ax.text(hi + 1, row, f"LAC {found[bookie_id][0]}\\nholds ..{last_held}", va="center", fontsize="small")
ax.axvline(max_lac + 1, color="black", linestyle=":")
ax.axvline(last_seen + 1, color="purple", linestyle="--")
ax.axvline(end + 1, color="black", linewidth=2.5)
shown = {kind for b in dead_ensemble for e in range(lo, hi) if (kind := status(e, found[b][1]))}
fig.legend(handles=[Patch(color=color, label=label) for kind, (label, color) in STATUS.items() if kind in shown]
           + [Line2D([], [], color="black", linestyle=":", label=f"highest LAC reported ({max_lac}): reading starts after it"),
              Line2D([], [], color="purple", linestyle="--", label=f"last entry we saw confirmed ({last_seen})"),
              Line2D([], [], color="black", linewidth=2.5, label=f"recovered end ({end}): the ledger is closed here")],
           loc="lower center", ncol=2, fontsize="small", frameon=False)
ax.set(xlim=(lo, hi), yticks=range(len(dead_ensemble)), yticklabels=[name[b] for b in dead_ensemble],
       xlabel="entry id", title=f"ledger {dead_ledger}: what recovery found and closed "
                                f"(E = {md.ensemble_size}, Qw = {md.write_quorum}, Qa = {md.ack_quorum})")
ax.invert_yaxis()
fig.tight_layout(rect=(0, 0.2, 1, 1))
plt.show()
wrote = (f"wrote back entries {written_back.start}..{written_back.stop - 1} ({len(written_back)} entries, "
         f"each to all {md.write_quorum} bookies)") if written_back else "found nothing past the LAC"
print(f"recovery read from entry {max_lac + 1}, {wrote}, and closed the ledger at entry {end}")
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
