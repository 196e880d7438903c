#!/usr/bin/env python3
"""spechop_ref: a Python asyncio reference harness for continuous SpecHop.

It runs the continuous schedule of the SpecHop paper (Algorithm 1: up to k
live threads; verify when the head's target result returns; commit and
extend, or roll back and cancel everything downstream) over a trivial chain
agent with zero-latency calls, so the figure it measures is pure scheduling
overhead: what a straightforward asyncio harness pays per committed hop.
specula's benchmark runs the identical agent in Lua on the C engine.

Standard library only (Python 3.11).

    python3 bench/ref/spechop_ref.py --queries 100 --hops 100 --k 4 [--p 1] [--seed 1] [--json]
        [--concurrency C] [--sequential] [--out FILE]

--concurrency bounds the queries in flight (default: all at once), as
`specula run --concurrency` does; --sequential runs each query without
speculation (`--mode sequential`); --out writes one JSON record per query
(id, answer, hops, wall_ms) as it finishes, as `specula run --out` does
(bench/userpath.lua times the whole process of both).
"""

import argparse
import asyncio
import hashlib
import json
import math
import platform
import resource
import sys
import time


# ---------------------------------------------------------------------------
# The agent. Every call goes through the event loop once, like a real call
# that happens to return at once.

class ChainAgent:
    """init/step/update/tool/speculate/verify/policy of a chain of N hops."""

    def __init__(self, hops, p, seed):
        self.hops = hops
        self.p = p
        self.seed = seed

    async def init(self, query):
        await asyncio.sleep(0)
        return {"query": query, "hop": 0}

    async def step(self, state):
        await asyncio.sleep(0)
        hop = state["hop"]
        if hop >= self.hops:
            return {"final": f"done {hop}"}
        return {"segment": f"s{hop}", "action": {"tool": "t", "args": {"i": hop}}}

    async def update(self, state, step, obs):
        await asyncio.sleep(0)
        # A new state: states are shared between threads, never mutated.
        return {"query": state["query"], "hop": state["hop"] + 1, "last": obs}

    async def tool(self, args):
        await asyncio.sleep(0)
        return f"o{args['i']}"

    async def speculate(self, qid, args):
        await asyncio.sleep(0)
        # Keyed by (seed, query, hop), never by call order, so any schedule
        # sees the same guesses.
        key = f"{self.seed}|{qid}|{args['i']}".encode()
        u = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2.0**64
        return f"o{args['i']}" if u < self.p else "wrong"

    async def verify(self, predicted, actual):
        await asyncio.sleep(0)
        return predicted == actual

    def policy(self, tool, args):
        """Eligibility of a speculative target launch."""
        return "full"


# ---------------------------------------------------------------------------
# The window.

STEP, UPDATE, TARGET, SPEC, VERIFY = range(5)


class Thread:
    """One thread of the window: a state and the work started from it."""

    __slots__ = ("hop", "state", "step", "obs", "target_started", "target_done", "guess", "spec_task",
                 "child", "alive", "speculative", "tasks")

    def __init__(self, hop, speculative):
        self.hop = hop                  # hop index of its state
        self.state = None               # its state, once the update has run
        self.step = None                # the model step from that state
        self.obs = None                 # the target result of its action
        self.target_started = False     # its target call was launched
        self.target_done = False        # obs is known
        self.guess = None               # the speculator's guess for its action
        self.spec_task = None           # the speculator call in flight
        self.child = None               # the thread built on the guess
        self.alive = True               # still in the window
        self.speculative = speculative  # built on an unverified guess
        self.tasks = set()              # tasks to cancel if it is discarded


class Window:
    """Continuous SpecHop for one query with at most k live threads."""

    def __init__(self, agent, qid, query, k):
        self.agent = agent
        self.qid = qid
        self.query = query
        self.k = k
        self.answer = None              # future of the final answer
        self.head = None                # the verified thread
        self.tip = None                 # the deepest live thread
        self.live = 0                   # threads plus speculator reservations
        self.digest = 0                 # running hash of the committed (segment, observation)s

    def launch(self, coro, th, kind):
        # The window reacts in the task's done callback: no extra coroutine
        # wake-up per event, the cheapest way asyncio offers.
        task = asyncio.create_task(coro)
        th.tasks.add(task)
        task.add_done_callback(lambda t, th=th, kind=kind: self.on_done(th, kind, t))
        return task

    def discard(self, th):
        th.alive = False
        for t in th.tasks:
            if not t.done():
                t.cancel()
        th.tasks.clear()

    def launch_target(self, th):
        action = th.step["action"]
        if th.speculative and self.agent.policy(action["tool"], action["args"]) != "full":
            return  # deferred until the thread is verified
        th.target_started = True
        self.launch(self.agent.tool(action["args"]), th, TARGET)

    def try_extend(self):
        # Only the tip can be a frontier thread: every other live thread
        # already has a child.
        th = self.tip
        if (self.live >= self.k or th.step is None or "final" in th.step
                or th.child is not None or th.spec_task is not None or th.guess is not None):
            return
        th.spec_task = self.launch(self.agent.speculate(self.qid, th.step["action"]["args"]), th, SPEC)
        self.live += 1  # reserve the child's slot now

    def begin_verify(self, head):
        if head.spec_task is not None and not head.spec_task.done():
            head.spec_task.cancel()  # late: the guess can no longer help
            head.spec_task = None
            self.live -= 1
        if head.child is None:
            self.rollback(head)  # nothing to compare: continue from the real observation
        else:
            self.launch(self.agent.verify(head.guess, head.obs), head, VERIFY)

    def rollback(self, head):
        self.digest = hash((self.digest, head.step["segment"], head.obs))
        th = head.child
        while th is not None:
            self.discard(th)
            th = th.child
        self.discard(head)
        new = Thread(head.hop + 1, speculative=False)
        self.launch(self.agent.update(head.state, head.step, head.obs), new, UPDATE)
        self.head = self.tip = new
        self.live = 1

    def commit(self, head):
        """Returns the final answer if the new head has one."""
        # The observation the committed successor was built on: the guess.
        self.digest = hash((self.digest, head.step["segment"], head.guess))
        new = head.child
        head.child = None  # let the committed prefix go
        self.discard(head)
        self.live -= 1
        new.speculative = False
        self.head = new
        if new.step is not None:
            if "final" in new.step:
                return new.step["final"]
            if new.target_done:
                self.begin_verify(new)
            elif not new.target_started:
                self.launch_target(new)  # the policy had deferred it
        return None

    def on_done(self, th, kind, task):
        if not th.alive or task.cancelled() or self.answer.done():
            return
        th.tasks.discard(task)
        try:
            answer = self.handle(th, kind, task.result())
        except BaseException as e:  # surface agent errors through run()
            self.answer.set_exception(e)
            return
        if answer is not None:
            self.answer.set_result(answer)
        else:
            self.try_extend()

    def handle(self, th, kind, result):
        """Advances the window on one finished call; returns the final answer, if released."""
        if kind == STEP:
            th.step = result
            if "final" in result:
                if th is self.head:
                    return result["final"]
            else:
                # Speculator first: with zero latency the launch order decides
                # the race, and a guess that arrives with the target result
                # must count as in time (as in `specula replay`), or nothing
                # would ever be committed.
                self.try_extend()
                self.launch_target(th)
        elif kind == UPDATE:
            th.state = result
            self.launch(self.agent.step(result), th, STEP)
        elif kind == TARGET:
            th.obs = result
            th.target_done = True
            if th is self.head:
                self.begin_verify(th)
        elif kind == SPEC:
            th.spec_task = None
            th.guess = result
            child = Thread(th.hop + 1, speculative=True)
            th.child = child
            self.tip = child
            self.launch(self.agent.update(th.state, th.step, result), child, UPDATE)
        elif kind == VERIFY:
            if result:
                return self.commit(th)
            self.rollback(th)
        return None

    async def run(self):
        self.answer = asyncio.get_running_loop().create_future()
        self.head = self.tip = Thread(0, speculative=False)
        self.head.state = await asyncio.create_task(self.agent.init(self.query))
        self.live = 1
        self.launch(self.agent.step(self.head.state), self.head, STEP)
        try:
            return await self.answer
        finally:
            th = self.head
            while th is not None:  # nothing may outlive the query
                self.discard(th)
                th = th.child


async def run_sequential(agent, query):
    """The reference: no speculation at all."""
    state = await agent.init(query)
    digest = 0
    while True:
        step = await agent.step(state)
        if "final" in step:
            return step["final"], digest
        obs = await agent.tool(step["action"]["args"])
        digest = hash((digest, step["segment"], obs))
        state = await agent.update(state, step, obs)


async def run_all(agent, queries, k, concurrency=None, sequential=False, out=None):
    """Every query, at most `concurrency` in flight; a record per query to `out`."""
    n = len(queries)
    answers, digests = [None] * n, [0] * n
    limit = asyncio.Semaphore(concurrency or n)

    async def one(i, q):
        async with limit:
            t = time.perf_counter()
            if sequential:
                answers[i], digests[i] = await run_sequential(agent, q)
            else:
                w = Window(agent, f"q{i}", q, k)
                answers[i] = await w.run()
                digests[i] = w.digest
            if out is not None:
                out.write(json.dumps({"id": f"q{i}", "answer": answers[i], "hops": agent.hops,
                                      "wall_ms": (time.perf_counter() - t) * 1e3}) + "\n")

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i, q) for i, q in enumerate(queries)))
    wall = time.perf_counter() - t0
    return answers, digests, wall


def parse_k(text):
    if text in ("inf", "infinity"):
        return math.inf
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"k must be an integer >= 1 or inf, got {text!r}")
    if k < 1:
        raise argparse.ArgumentTypeError(f"k must be an integer >= 1 or inf, got {text!r}")
    return k


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, required=True, help="concurrent queries")
    ap.add_argument("--hops", type=int, required=True, help="hops per query (N)")
    ap.add_argument("--k", type=parse_k, required=True, help="active threads, integer >= 1 or inf")
    ap.add_argument("--p", type=float, default=1.0, help="speculation success probability (default 1)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--concurrency", type=int, default=None, help="queries in flight (default: all)")
    ap.add_argument("--sequential", action="store_true", help="no speculation (specula's --mode sequential)")
    ap.add_argument("--out", default=None, help="write one JSON record per query to this file")
    args = ap.parse_args(argv)
    if args.queries < 1 or args.hops < 0 or not 0 <= args.p <= 1:
        ap.error("need --queries >= 1, --hops >= 0 and 0 <= --p <= 1")
    if args.concurrency is not None and args.concurrency < 1:
        ap.error("need --concurrency >= 1")

    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    agent = ChainAgent(args.hops, args.p, args.seed)
    queries = [f"query {i}" for i in range(args.queries)]
    out = open(args.out, "w") if args.out else None
    answers, digests, wall = asyncio.run(run_all(agent, queries, args.k, args.concurrency, args.sequential, out))
    if out is not None:
        out.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    # Lossless check, after the measurement so it does not move the peak.
    async def check():
        bad = 0
        for q, ans, digest in zip(queries, answers, digests):
            want_ans, want_digest = await run_sequential(agent, q)
            bad += ans != want_ans or digest != want_digest
        return bad
    bad = asyncio.run(check())

    total_hops = args.queries * args.hops
    threads = args.queries * min(args.k, args.hops + 1)
    k_out = "inf" if math.isinf(args.k) else args.k
    res = {
        "impl": "python-asyncio",
        "queries": args.queries,
        "hops": args.hops,
        "k": k_out,
        "p": args.p,
        "us_per_hop": wall / total_hops * 1e6 if total_hops else 0.0,
        "hops_per_s": total_hops / wall if wall > 0 else 0.0,
        "wall_s": wall,
        "peak_rss_bytes": peak,
        "bytes_per_thread": (peak - baseline) / threads,
    }
    if args.json:
        print(json.dumps(res))
    else:
        print(f"spechop_ref (Python {platform.python_version()} asyncio): {args.queries} queries "
              f"x {args.hops} hops, k = {k_out}, p = {args.p:g}")
        print(f"  answers           {args.queries - bad}/{args.queries} equal to the sequential run")
        print(f"  us per hop        {res['us_per_hop']:.2f}")
        print(f"  hops per second   {res['hops_per_s']:.0f}")
        print(f"  wall time         {wall:.3f} s")
        print(f"  peak RSS          {peak / 1e6:.1f} MB ({peak} bytes)")
        print(f"  bytes per thread  {res['bytes_per_thread']:.0f}")
    if bad:
        print(f"spechop_ref: {bad} queries differ from the sequential run", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
