#!/bin/bash
# populace estimate, then the full run, back to back (docs/benchmarks.md, issue 28):
#   populace serve-llm --port 8731 --policy scripted --model scripted --latency 0.1 --batch-latency 5 &
#   benchmarks/estimate/measure.sh benchmarks/estimate/edu.yaml 2000 edu-2k
P=${POPULACE:-populace}
cfg=$1; n=$2; tag=$3
while [ "$(cut -d' ' -f1 /proc/loadavg | awk '{print ($1>1.0)}')" = 1 ]; do echo "load $(cut -d' ' -f1 /proc/loadavg), waiting"; sleep 30; done
uptime
$P estimate $cfg --agents $n --json > est-$tag.json || exit 1
rm -rf runs/$tag .populace-cache
# --yes: the run measured is the run alone (populace run would pilot it again and ask)
# the run's process time (user, system) and wall, start-up included: its client's CPU
/usr/bin/time -o time-$tag.txt -f "%U %S %e" \
  $P run $cfg --agents $n --out runs/$tag --yes > run-$tag.log 2>&1 || { tail run-$tag.log; exit 1; }
uptime
python3 - $tag <<'PY'
import json, sys
tag = sys.argv[1]
e = json.load(open(f"est-{tag}.json")); s = json.load(open(f"runs/{tag}/summary.json"))
calls = sum(v["requests"] for x in s["steps"] for v in x.get("llm", {}).values())
ptok = sum(v["prompt_tokens"] for x in s["steps"] for v in x.get("llm", {}).values())
ctok = sum(v["completion_tokens"] for x in s["steps"] for v in x.get("llm", {}).values())
b = s.get("backgrounds") or {}
steps = sum(x["wall_s"] for x in s["steps"])
print(f"{tag}: predicted wall {e['wall_s']} {e.get('wall_range')} actual {s['wall_s']} (bg {b.get('wall_s')}, steps {steps:.2f}) err {100*(e['wall_s']/s['wall_s']-1):+.1f}%")
if e.get("backgrounds"): print("  bg pred", e["backgrounds"]["wall_s"], "calls", e["backgrounds"]["calls"], b.get("sent"), "ptok", e["backgrounds"]["prompt_tokens"], b.get("prompt_tokens"), "ctok", e["backgrounds"]["completion_tokens"], b.get("completion_tokens"))
m = e["models"]
print("  steps pred", [x["wall_s"] for x in m], "calls", sum(x["calls"] for x in m), calls, "ptok", sum(x["prompt_tokens"] for x in m), ptok, "ctok", sum(x["completion_tokens"] for x in m), ctok, "pilot", e["pilot_wall_s"])
print("  limits", [x.get("limits") for x in s["steps"]][:3], "step walls", [x["wall_s"] for x in s["steps"]])
c = e.get("cpu") or {}
user, system, wall = (float(x) for x in open(f"time-{tag}.txt").read().split()[-3:])
print(f"  client CPU per call: estimate {1000 * c.get('per_call_s', 0):.3f} ms (waves {c.get('waves')} of {c.get('wave_agents')}, "
      f"{c.get('measured_s')} s over {c.get('calls')} calls, rse {c.get('rse')}, waited {1000 * c.get('waited_per_call_s', 0):.3f} ms, {c.get('wall_s')} s); "
      f"the run's process {user + system:.1f} s / {calls + (b.get('sent') or 0)} calls = {1000 * (user + system) / max(1, calls + (b.get('sent') or 0)):.3f} ms (wall {wall} s)")
PY
