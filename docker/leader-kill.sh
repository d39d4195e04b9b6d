#!/bin/sh
# The leader-kill scenario of tests/runtime/test_cluster.py, on docker/compose.yaml:
# start the cluster and the system, run episodes from the host, SIGKILL the node that
# leads the journal stream mid-run, then check that every episode completed, and that
# the journal verifies and replays identically.
#
#   sh docker/leader-kill.sh [TASKS]      (needs docker compose, and faultline on the host)
set -eu
cd "$(dirname "$0")"
tasks="${1:-40}"
compose="docker compose -f compose.yaml"

faultline credentials --config faultline.toml --dir secrets
$compose up --build --detach --wait

faultline run --nats nats://127.0.0.1:4222 --creds secrets/operator.json --tasks "$tasks" --json > run.json &
run=$!

# The stream's leader, from the monitoring endpoint of any node.
leader=$($compose exec -T nats-1 wget -qO- "http://127.0.0.1:8222/jsz?accounts=true&streams=true" | python3 -c '
import json, sys
details = json.load(sys.stdin)["account_details"]
print(next(s["cluster"]["leader"] for a in details for s in a.get("stream_detail", []) if s["name"] == "FL_JOURNAL"))
')
echo "killing the stream leader $leader"
$compose kill -s SIGKILL "$leader"

wait "$run"
python3 - run.json "$tasks" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
assert summary["episodes"] == int(sys.argv[2]), summary
assert summary["outcomes"] == {"success": summary["episodes"]}, summary
print(f"all {summary['episodes']} episodes completed: {summary['outcomes']}")
PY
$compose start "$leader"
$compose exec -T system faultline journal verify /app/runs/journal.sqlite
$compose exec -T system faultline replay /app/runs/journal.sqlite
