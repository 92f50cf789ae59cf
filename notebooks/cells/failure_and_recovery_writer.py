"""Cells of ``03_failure_and_recovery.ipynb``, second part (after ``failure_and_recovery.py``): a dead writer's
ledger recovered, what recovery found, fencing of a writer that was only slow, clean up.

Built by ``notebooks/build_notebooks.py``; edit here, then rebuild.
"""

CELLS = [
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
