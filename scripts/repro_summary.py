#!/usr/bin/env python3
"""repro_summary.py RUN "SEEDS" [FAMS] - the markdown tables of docs/REPRODUCTION.md from the folder
that scripts/reproduce.sh fills: accuracy of (a), (b), (c) as mean +- std over the seeds, turns
per --max-steps, the GRPO curves and tool mix per step, and a case study."""
import json
import os
import statistics
import sys

R, SEEDS = sys.argv[1], sys.argv[2].split()
FAMS = (sys.argv[3] if len(sys.argv) > 3 else "world-lookup,world-multihop").split(",")


def summary(name):
    p = os.path.join(R, "eval", name, "summary.json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        s = json.load(f)
    out = {b["bench"]: b for b in s["benches"]}
    out["all"] = s["total"]
    return out


def results(name):
    p = os.path.join(R, "eval", name, "results.jsonl")
    rows = {}
    if os.path.exists(p):
        for line in open(p):
            r = json.loads(line)
            rows[(r["bench"], r["index"])] = r
    return rows


def ms(xs):
    if not xs:
        return "-"
    if len(xs) == 1:
        return "%.1f" % xs[0]
    return "%.1f ± %.1f" % (statistics.mean(xs), statistics.pstdev(xs))


def arm(names):
    got = [s for s in (summary(n) for n in names) if s]
    cells = []
    for fam in FAMS + ["all"]:
        cells.append(ms([s[fam]["accuracy"] for s in got if fam in s]))
    return cells, len(got)


for title, sfx in (("the planner sampled as the flow samples it", ""),
                   ("the planner greedy, as `run` without --url has it", "-greedy")):
    print("## Accuracy on the test split, %s (%%, mean ± population std over seeds)\n" % title)
    print("| Planner | runs | " + " | ".join(FAMS) + " | all |")
    print("|---|---:|" + "---:|" * (len(FAMS) + 1))
    for label, names in [
        ("(a) SFT on clean traces, frozen", ["a"]),
        ("(b) (a) + Flow-GRPO", ["b" + s for s in SEEDS]),
        ("(c) (a) + offline SFT on noisy traces", ["c" + s for s in SEEDS]),
    ]:
        cells, n = arm([nm + sfx for nm in names])
        print("| %s | %d | %s |" % (label, n, " | ".join(cells)))
    print()

first = SEEDS[0]


def by_max_steps(title, key, fmt):
    print(title)
    print("| Planner | family | 3 | 5 | 7 | 10 |")
    print("|---|---|---:|---:|---:|---:|")
    for label, stem in [("(a)", "a"), ("(b) seed " + first, "b" + first)]:
        for fam in FAMS:
            cells = []
            for m in (3, 5, 7, 10):
                s = summary(stem if m == 10 else "%s-steps%d" % (stem, m))
                cells.append(fmt % s[fam][key] if s and fam in s else "-")
            print("| %s | %s | %s |" % (label, fam, " | ".join(cells)))


by_max_steps("\n## Average turns by --max-steps (test split)\n", "avg_steps", "%.2f")
by_max_steps("\n## Accuracy (%) by --max-steps (test split)\n", "accuracy", "%.1f")

print("\n## Tool calls per test question\n")
print("| Planner | Wikipedia_RAG_Search | Python_Code_Generator | Generalist | none |")
print("|---|---:|---:|---:|---:|")
for label, names in [("(a)", ["a"]), ("(b)", ["b" + s for s in SEEDS]),
                     ("(c)", ["c" + s for s in SEEDS])]:
    counts, runs = {}, 0
    for n in names:
        for r in results(n).values():
            runs += 1
            tools = r.get("tools") or []
            if not tools:
                counts["none"] = counts.get("none", 0) + 1
            for t in tools:
                counts[t] = counts.get(t, 0) + 1
    if runs:
        print("| %s | %.2f | %.2f | %.2f | %.2f |" % (
            label, counts.get("Wikipedia_RAG_Search_Tool", 0) / runs,
            counts.get("Python_Code_Generator_Tool", 0) / runs,
            counts.get("Generalist_Solution_Generator_Tool", 0) / runs,
            counts.get("none", 0) / runs))

print("\n## Flow-GRPO steps (mean over seeds)\n")
print("| step | reward | val acc. | degenerate groups | planner turns per solve | tokens per turn "
      "| tool errors | search share | Python share | generalist share |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
steps = {}
for s in SEEDS:
    p = os.path.join(R, "grpo-" + s, "metrics.jsonl")
    if not os.path.exists(p):
        continue
    for line in open(p):
        m = json.loads(line)
        if "step" in m and "reward_mean" in m:
            steps.setdefault(m["step"], []).append(m)
        elif "step" in m and "val_accuracy" in m:
            steps.setdefault(m["step"], []).append({"val_accuracy": m["val_accuracy"]})


def mean_of(ms_, key):
    xs = [m[key] for m in ms_ if key in m]
    return "%.3f" % statistics.mean(xs) if xs else "-"


for st in sorted(steps):
    rows = steps[st]
    share = {}
    for m in rows:
        tu = m.get("tool_use")
        if tu:
            tot = sum(tu.values()) or 1
            for k, v in tu.items():
                share.setdefault(k, []).append(v / tot)
    sh = lambda k: "%.2f" % statistics.mean(share[k]) if k in share else "0"
    print("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        st, mean_of(rows, "reward_mean"), mean_of(rows, "val_accuracy"),
        mean_of(rows, "degenerate_frac"), mean_of(rows, "turns_mean"),
        mean_of(rows, "tokens_per_turn"), mean_of(rows, "tool_error_rate"),
        sh("Wikipedia_RAG_Search_Tool"), sh("Python_Code_Generator_Tool"),
        sh("Generalist_Solution_Generator_Tool")))


def steps_of(name, key):
    p = os.path.join(R, "eval", name, "traces", "%s-%d-0.jsonl" % key)
    out, answer = [], None
    if not os.path.exists(p):
        return out, answer
    for line in open(p):
        r = json.loads(line)
        if r.get("type") == "final":
            answer = r.get("answer")
            for m in r.get("memory", []):
                res = json.dumps(m.get("result"))
                out.append("%d. %s: %s\n   command: %s\n   result: %s" % (
                    m.get("step", 0), m.get("tool"), m.get("sub_goal"), m.get("command"),
                    res[:300] + ("..." if len(res) > 300 else "")))
    return out, answer


print("\n## Case study: one test question before and after Flow-GRPO (seed %s)\n" % first)
ra, rb = results("a"), results("b" + first)
pick = None
for want in ((False, True), (True, False)):
    for k in sorted(ra):
        if k in rb and ra[k]["correct"]["rule"] == want[0] and rb[k]["correct"]["rule"] == want[1]:
            pick = k
            break
    if pick:
        break
if not pick:
    print("No test question is answered differently by (a) and (b).")
else:
    q = ra[pick]
    gold = q["gold"] if isinstance(q["gold"], list) else [q["gold"]]
    print("%s #%d: %s (gold: %s)\n" % (pick[0], pick[1], q["query"], ", ".join(map(str, gold))))
    for label, name in (("(a) before", "a"), ("(b) after", "b" + first)):
        st, ans = steps_of(name, pick)
        ok = (ra if name == "a" else rb)[pick]["correct"]["rule"]
        print("**%s**: answered %r (%s)\n" % (label, ans, "right" if ok else "wrong"))
        print("```\n" + ("\n".join(st) if st else "(no tool steps)") + "\n```\n")
