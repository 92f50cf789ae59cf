"""Faults for the Jepsen-style suite (issue 17 part 4): a fault-injecting TCP proxy, hosts, fault actions and
seeded schedules.

The API speaks of *hosts*: a host has a name, the address others reach it at, and the processes that run
on it (pids). ``hosts.py`` has the local implementation (every host on 127.0.0.1, each server behind a
``proxy.FaultProxy``, since this machine has neither netem nor iptables); a network-namespace cluster
plugs in by giving hosts whose ``network`` cuts and slows traffic its own way. ``actions.py`` applies and
heals one fault on hosts; ``schedule.py`` draws a timed list of fault steps from a seed. docs/jepsen.md
describes them.
"""
