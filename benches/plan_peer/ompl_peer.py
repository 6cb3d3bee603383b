#!/usr/bin/env python3
"""OMPL peer of `pointact bench plan`: RRTConnect through OMPL's Python bindings.

    python3 ompl_peer.py PROBLEMS.json OUT.json [--time-limit S] [--simplify] [--seed N]

Every problem of PROBLEMS.json (format: model.py and the bench's docs) is solved in a fresh
SimpleSetup: a real vector space with the joint bounds, RRTConnect at OMPL's default range
(or the file's "range", top level or per problem), and model.py's checker as the state validity
callback. The motion check step is the file's "resolution" in radians of joint-space (Euclidean)
distance: OMPL takes it as a fraction of the space's maximum extent, so the fraction set is
resolution / getMaximumExtent().

Timing: solve_ms is time.perf_counter around SimpleSetup.solve only (setup is done before, so the
first sample is not charged with building the planner); simplify_ms around simplifySolution
(OMPL's simplifyMax, no time limit) when --simplify is given, else null. valid_checks counts
callback calls inside those two timed calls, valid_checks_solve those inside solve alone.

Output (OUT.json):
    {"peer": "ompl X.Y.Z RRTConnect (Python bindings)", "cpu": "<model name>",
     "time_limit_s": S, "simplify": bool, "resolution": r, "seed": N or null,
     "results": [{"name", "solved", "exact", "status", "solve_ms", "simplify_ms", "path_length",
                  "states", "valid_checks", "valid_checks_solve", "range", "path_valid", "path"}]}
solved is OMPL's verdict (an exact or an approximate solution); exact says whether the path
reaches the goal state. path_length is the sum of Euclidean joint-space distances between
consecutive states of the returned path (after simplification with --simplify); path is that
path's states. path_valid re-checks every state and every edge at the resolution with the same
model, outside the timing and the counts. A problem whose start or goal is invalid is not given to
OMPL: solved false, with "reason" naming the first contact.

Exit codes: 0 (whatever was solved), 2 bad arguments or problem file, 3 ompl not importable.
"""

import argparse
import importlib.metadata
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from model import make_checker  # noqa: E402

try:
    from ompl import base as ob
    from ompl import geometric as og
    from ompl import util as ou
except ImportError as e:  # keep the message short and actionable
    print(f"ompl_peer: cannot import ompl ({e}); run benches/plan_peer/setup.sh", file=sys.stderr)
    sys.exit(3)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def path_states(path, dof):
    return [[path.getState(i)[j] for j in range(dof)] for i in range(path.getStateCount())]


def path_length(states):
    return sum(math.dist(a, b) for a, b in zip(states, states[1:]))


def path_is_valid(check, states, resolution):
    """Every state and every edge, sampled at most `resolution` apart (endpoints included)."""
    for a, b in zip(states, states[1:]):
        n = max(1, math.ceil(math.dist(a, b) / resolution))
        for i in range(n + 1):
            t = i / n
            if not check([x + (y - x) * t for x, y in zip(a, b)]):
                return False
    return all(check(s) for s in states)


def solve_one(problem, robot, check, resolution, time_limit, simplify, default_range):
    dof = len(robot["joints"])
    result = {"name": problem.get("name", ""), "solved": False, "exact": False, "status": None,
              "solve_ms": None, "simplify_ms": None, "path_length": None, "states": 0,
              "valid_checks": 0, "valid_checks_solve": 0, "range": None, "path_valid": None, "path": None}
    start, goal = [float(x) for x in problem["start"]], [float(x) for x in problem["goal"]]
    for label, q in (("start", start), ("goal", goal)):
        if len(q) != dof:
            raise ValueError(f"{result['name']}: {label} has {len(q)} values, the robot {dof} joints")
        hit = check.first_contact(q)
        if hit is not None:
            result["reason"] = f"{label} invalid: {hit[0]} {hit[1]} vs {hit[2]}"
            return result

    space = ob.RealVectorStateSpace(dof)
    bounds = ob.RealVectorBounds(dof)
    for i, j in enumerate(robot["joints"]):
        bounds.setLow(i, float(j["lower"]))
        bounds.setHigh(i, float(j["upper"]))
    space.setBounds(bounds)

    ss = og.SimpleSetup(space)
    calls = [0]

    def is_valid(state):
        calls[0] += 1
        return check([state[i] for i in range(dof)])

    ss.setStateValidityChecker(is_valid)
    si = ss.getSpaceInformation()
    si.setStateValidityCheckingResolution(resolution / space.getMaximumExtent())

    s, g = space.allocState(), space.allocState()
    for i in range(dof):
        s[i], g[i] = start[i], goal[i]
    ss.setStartAndGoalStates(s, g)

    planner = og.RRTConnect(si)
    rng = problem.get("range", default_range)
    if rng is not None:
        planner.setRange(float(rng))
    ss.setPlanner(planner)
    ss.setup()  # outside the timing; RRTConnect picks its default range here
    result["range"] = planner.getRange()

    calls[0] = 0
    t0 = time.perf_counter()
    status = ss.solve(time_limit)
    result["solve_ms"] = (time.perf_counter() - t0) * 1e3
    result["valid_checks_solve"] = calls[0]
    result["status"] = status.asString()
    result["solved"] = bool(ss.haveSolutionPath())
    result["exact"] = bool(ss.haveExactSolutionPath())
    if result["solved"] and simplify:
        t0 = time.perf_counter()
        ss.simplifySolution()
        result["simplify_ms"] = (time.perf_counter() - t0) * 1e3
    result["valid_checks"] = calls[0]
    if result["solved"]:
        states = path_states(ss.getSolutionPath(), dof)
        result["states"] = len(states)
        result["path_length"] = path_length(states)
        result["path"] = states
        result["path_valid"] = path_is_valid(check, states, resolution)
    return result


def summary_line(r):
    verdict = "exact" if r["exact"] else "approximate" if r["solved"] else "unsolved"
    parts = [f"{r['name']}: {verdict}"]
    if "reason" in r:
        parts.append(f"({r['reason']})")
    if r["solve_ms"] is not None:
        parts.append(f"solve {r['solve_ms']:.1f} ms")
    if r["simplify_ms"] is not None:
        parts.append(f"simplify {r['simplify_ms']:.1f} ms")
    if r["path_length"] is not None:
        parts.append(f"length {r['path_length']:.3f} rad, {r['states']} states")
    parts.append(f"{r['valid_checks']} checks")
    if r["path_valid"] is False:
        parts.append("PATH INVALID")
    return " ".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problems", help="problem file (JSON)")
    ap.add_argument("out", help="results file to write (JSON)")
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds per solve (default 10)")
    ap.add_argument("--simplify", action="store_true", help="simplify each solution (timed apart)")
    ap.add_argument("--seed", type=int, default=None, help="OMPL's RNG seed (default: OMPL's own)")
    ap.add_argument("--verbose", action="store_true", help="OMPL's informational log on stderr")
    args = ap.parse_args(argv)

    try:
        with open(args.problems) as f:
            data = json.load(f)
        robot, resolution = data["robot"], float(data["resolution"])
        base_dir = os.path.dirname(os.path.abspath(args.problems))
        checkers = [make_checker(robot, scene, base_dir) for scene in data["scenes"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"ompl_peer: bad problem file {args.problems}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if not resolution > 0:
        print("ompl_peer: resolution must be > 0", file=sys.stderr)
        return 2

    ou.setLogLevel(ou.LOG_INFO if args.verbose else ou.LOG_WARN)
    if args.seed is not None:
        ou.RNG.setSeed(args.seed)  # must precede the first sampler OMPL creates

    version = importlib.metadata.version("ompl")
    out = {"peer": f"ompl {version} RRTConnect (Python bindings)", "cpu": cpu_model(),
           "time_limit_s": args.time_limit, "simplify": args.simplify, "resolution": resolution,
           "seed": args.seed, "results": []}
    for problem in data["problems"]:
        try:
            check = checkers[int(problem["scene"])]
            r = solve_one(problem, robot, check, resolution, args.time_limit, args.simplify, data.get("range"))
        except (ValueError, KeyError, IndexError, TypeError) as e:
            print(f"ompl_peer: bad problem {problem.get('name', '?')}: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
        out["results"].append(r)
        print(summary_line(r), file=sys.stderr)

    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # nanobind reports OMPL objects still alive at interpreter teardown as "leaks" (OMPL's own
    # back-references keep them there); that report is noise for a finished run, so skip the
    # teardown once everything is written.
    os._exit(code)
